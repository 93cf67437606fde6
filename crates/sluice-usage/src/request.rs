//! What a request's JSON body asks for: its whole-number fields at the
//! top level (an LLM call's `max_tokens`), read without holding the
//! document.

use serde::de::{Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// Calls `each(name, value)` for every whole-number field (one that fits
/// a `u64`) at the top level of the JSON object `json`, in order; other
/// values are skipped unread, nested ones never seen. `false` when `json`
/// is not one whole JSON object (a field may have been reported before the
/// fault was found). Nothing is kept but the field being read.
///
/// ```
/// let mut seen = Vec::new();
/// let ok = sluice_usage::top_level_whole_numbers(
///     br#"{"model":"m","max_tokens":512,"messages":[{"max_tokens":9}],"n":-1}"#,
///     |name, n| seen.push((name.to_owned(), n)),
/// );
/// assert!(ok);
/// assert_eq!(seen, [("max_tokens".to_owned(), 512)]);
/// ```
pub fn top_level_whole_numbers(json: &[u8], mut each: impl FnMut(&str, u64)) -> bool {
    let mut de = serde_json::Deserializer::from_slice(json);
    de.deserialize_map(TopLevel(&mut each)).is_ok() && de.end().is_ok()
}

/// The top-level object's numbers, every other value skipped.
struct TopLevel<'f, F>(&'f mut F);

impl<'de, F: FnMut(&str, u64)> Visitor<'de> for TopLevel<'_, F> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(name) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            if let Some(n) = map.next_value::<WholeNumber>()?.0 {
                (self.0)(&name, n);
            }
        }
        Ok(())
    }
}

/// A value, kept when it is a whole number that fits a `u64`.
struct WholeNumber(Option<u64>);

impl<'de> serde::Deserialize<'de> for WholeNumber {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(WholeNumberVisitor)
    }
}

struct WholeNumberVisitor;

impl<'de> Visitor<'de> for WholeNumberVisitor {
    type Value = WholeNumber;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_u64<E>(self, n: u64) -> Result<WholeNumber, E> {
        Ok(WholeNumber(Some(n)))
    }

    fn visit_i64<E>(self, n: i64) -> Result<WholeNumber, E> {
        Ok(WholeNumber(u64::try_from(n).ok()))
    }

    fn visit_f64<E>(self, _: f64) -> Result<WholeNumber, E> {
        Ok(WholeNumber(None))
    }

    fn visit_bool<E>(self, _: bool) -> Result<WholeNumber, E> {
        Ok(WholeNumber(None))
    }

    fn visit_str<E>(self, _: &str) -> Result<WholeNumber, E> {
        Ok(WholeNumber(None))
    }

    fn visit_unit<E>(self) -> Result<WholeNumber, E> {
        Ok(WholeNumber(None))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<WholeNumber, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(WholeNumber(None))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<WholeNumber, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(WholeNumber(None))
    }
}
