//! What a request's JSON body asks for: its whole-number and boolean
//! fields at the top level (an LLM call's `max_tokens` and `stream`), read
//! without holding the document.

use serde::de::{Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// A top-level field's value, where it is one a policy reads: a whole
/// number that fits a `u64`, or a boolean.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scalar {
    /// A whole number, `0..=u64::MAX`.
    Whole(u64),
    /// `true` or `false`.
    Bool(bool),
}

/// Calls `each(name, value)` for every whole-number (one that fits a
/// `u64`) or boolean field at the top level of the JSON object `json`, in
/// order; other values are skipped unread, nested ones never seen. `false`
/// when `json` is not one whole JSON object (a field may have been
/// reported before the fault was found). Nothing is kept but the field
/// being read.
///
/// ```
/// use sluice_usage::Scalar;
///
/// let mut seen = Vec::new();
/// let ok = sluice_usage::top_level_scalars(
///     br#"{"model":"m","max_tokens":512,"messages":[{"max_tokens":9}],"n":-1,"stream":true}"#,
///     |name, v| seen.push((name.to_owned(), v)),
/// );
/// assert!(ok);
/// assert_eq!(
///     seen,
///     [
///         ("max_tokens".to_owned(), Scalar::Whole(512)),
///         ("stream".to_owned(), Scalar::Bool(true)),
///     ]
/// );
/// ```
pub fn top_level_scalars(json: &[u8], mut each: impl FnMut(&str, Scalar)) -> bool {
    let mut de = serde_json::Deserializer::from_slice(json);
    de.deserialize_map(TopLevel(&mut each)).is_ok() && de.end().is_ok()
}

/// The top-level object's scalars, every other value skipped.
struct TopLevel<'f, F>(&'f mut F);

impl<'de, F: FnMut(&str, Scalar)> Visitor<'de> for TopLevel<'_, F> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(name) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            if let Some(n) = map.next_value::<Kept>()?.0 {
                (self.0)(&name, n);
            }
        }
        Ok(())
    }
}

/// A value, kept when it is a [`Scalar`].
struct Kept(Option<Scalar>);

impl<'de> serde::Deserialize<'de> for Kept {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(KeptVisitor)
    }
}

struct KeptVisitor;

impl<'de> Visitor<'de> for KeptVisitor {
    type Value = Kept;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_u64<E>(self, n: u64) -> Result<Kept, E> {
        Ok(Kept(Some(Scalar::Whole(n))))
    }

    fn visit_i64<E>(self, n: i64) -> Result<Kept, E> {
        Ok(Kept(u64::try_from(n).ok().map(Scalar::Whole)))
    }

    fn visit_f64<E>(self, _: f64) -> Result<Kept, E> {
        Ok(Kept(None))
    }

    fn visit_bool<E>(self, b: bool) -> Result<Kept, E> {
        Ok(Kept(Some(Scalar::Bool(b))))
    }

    fn visit_str<E>(self, _: &str) -> Result<Kept, E> {
        Ok(Kept(None))
    }

    fn visit_unit<E>(self) -> Result<Kept, E> {
        Ok(Kept(None))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Kept, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Kept(None))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Kept, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Kept(None))
    }
}
