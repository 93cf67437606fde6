//! Whole numbers in the control API's JSON bodies (`cost`, `status`,
//! `credits`), read as JSON Schema's `integer` is: any number with no
//! fractional part. `100`, `100.0` and `1e2` are all 100 (a client whose
//! JSON library writes every number as a double, say); `1.5`, `-1` and
//! numbers past the field's type are refused.
//!
//! Written with a fraction or an exponent, a number is read as a double
//! first, exactly (serde_json's `float_roundtrip`): a double is whole when
//! it has no fraction, so `4237897259641518.0` is 4237897259641518 and
//! `1125899906842623.5` is refused. Written as an integer, a number is
//! always read exactly.

use serde::Deserialize;
use serde::de::{Deserializer, Error};

/// 2^64: the first double past `u64::MAX`.
const PAST_U64: f64 = 18_446_744_073_709_551_616.0;

/// `f` as a whole number, if it is one and in range (see the module's
/// docs).
fn whole_double(f: f64) -> Option<u64> {
    if !(0.0..PAST_U64).contains(&f) {
        return None;
    }
    // Whole and in range (2^64 itself excluded): exact as an integer.
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    (f == f.trunc()).then_some(f as u64)
}

/// A whole number of type `T`, or why not.
fn whole<T: TryFrom<u64>>(n: &serde_json::Number) -> Result<T, String> {
    let value = match (n.as_u64(), n.as_f64()) {
        (Some(v), _) => Some(v),
        (None, Some(f)) => whole_double(f),
        _ => None,
    };
    value
        .and_then(|v| T::try_from(v).ok())
        .ok_or_else(|| format!("invalid value: {n}, expected a whole number in range"))
}

/// A required whole number (`#[serde(deserialize_with = "…")]`).
pub fn required<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: TryFrom<u64>,
{
    let n = serde_json::Number::deserialize(deserializer)?;
    whole(&n).map_err(D::Error::custom)
}

/// An optional whole number (`null` or absent is `None`); use with
/// `#[serde(default, deserialize_with = "…")]`.
pub fn optional<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: TryFrom<u64>,
{
    match Option::<serde_json::Number>::deserialize(deserializer)? {
        Some(n) => whole(&n).map(Some).map_err(D::Error::custom),
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    #[derive(Debug, Deserialize)]
    struct Body {
        #[serde(deserialize_with = "super::required")]
        n: u64,
        #[serde(default, deserialize_with = "super::optional")]
        s: Option<u16>,
    }

    fn read(json: &str) -> Result<(u64, Option<u16>), String> {
        serde_json::from_str::<Body>(json)
            .map(|b| (b.n, b.s))
            .map_err(|e| e.to_string())
    }

    #[test]
    fn whole_numbers_are_read_however_they_are_written() {
        assert_eq!(read(r#"{"n": 3192}"#), Ok((3192, None)));
        assert_eq!(read(r#"{"n": 3192.0, "s": 200.0}"#), Ok((3192, Some(200))));
        assert_eq!(read(r#"{"n": 1e3, "s": null}"#), Ok((1000, None)));
        assert_eq!(read(r#"{"n": -0.0}"#), Ok((0, None)));
        assert_eq!(read(r#"{"n": 18446744073709551615}"#), Ok((u64::MAX, None)));
        assert_eq!(
            read(r#"{"n": 1e19}"#),
            Ok((10_000_000_000_000_000_000, None))
        );
        // Without `float_roundtrip`, serde_json read this one as
        // 4237897259641518.5 and refused it (schemathesis sent it).
        assert_eq!(
            read(r#"{"n": 4237897259641518.0}"#),
            Ok((4_237_897_259_641_518, None))
        );
    }

    #[test]
    fn other_numbers_are_refused() {
        for json in [
            r#"{"n": 1.5}"#,
            r#"{"n": -1}"#,
            r#"{"n": -1.0}"#,
            r#"{"n": 18446744073709551616}"#,
            r#"{"n": 1.8446744073709552e19}"#,
            r#"{"n": 1e400}"#,
            r#"{"n": "1"}"#,
            r#"{"n": null}"#,
            r#"{"n": 1, "s": 65536}"#,
            r#"{"n": 1, "s": 200.5}"#,
            r#"{"n": 1125899906842623.5}"#,
            r#"{"n": 4503599627370495.5}"#,
        ] {
            assert!(read(json).is_err(), "{json} was read as {:?}", read(json));
        }
    }
}
