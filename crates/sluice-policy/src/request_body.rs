//! What an adapter read of a request's JSON body before it was decided:
//! its whole-number fields at the top level (an LLM call's `max_tokens`,
//! say), where a settle rule's `estimate = "json:<field>"` finds the
//! request's estimate.
//!
//! The adapter reads the body only when a rule asks (see
//! [`Policy::reads_request_body`](crate::Policy::reads_request_body)),
//! and only as far as its bound; what it could not read, or a field that
//! is not a whole number, leaves the limit's own cost as the estimate.

use smallvec::SmallVec;

/// The most fields kept: a body with more keeps the first ones.
pub const MAX_FIELDS: usize = 32;

/// The longest field name kept, in bytes.
pub const MAX_NAME: usize = 64;

/// The whole-number fields at the top level of a request's JSON body.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BodyNumbers {
    fields: SmallVec<[(Box<str>, u64); 4]>,
}

impl BodyNumbers {
    /// No fields.
    pub fn new() -> Self {
        Self::default()
    }

    /// Keeps `name = value`, unless [`MAX_FIELDS`] are kept already, the
    /// name is longer than [`MAX_NAME`], or the name is kept already (the
    /// first one stands, as a JSON parser that keeps the first would).
    pub fn push(&mut self, name: &str, value: u64) {
        if self.fields.len() < MAX_FIELDS && name.len() <= MAX_NAME && self.get(name).is_none() {
            self.fields.push((name.into(), value));
        }
    }

    /// The value of field `name`, if the body had it as a whole number.
    pub fn get(&self, name: &str) -> Option<u64> {
        self.fields
            .iter()
            .find(|(n, _)| &**n == name)
            .map(|(_, v)| *v)
    }

    /// How many fields are kept.
    pub fn len(&self) -> usize {
        self.fields.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.fields.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_first_of_a_name_and_is_bounded() {
        let mut b = BodyNumbers::new();
        b.push("max_tokens", 100);
        b.push("max_tokens", 5);
        b.push(&"x".repeat(MAX_NAME + 1), 1);
        assert_eq!(b.get("max_tokens"), Some(100));
        assert_eq!(b.len(), 1);
        for i in 0..100 {
            b.push(&format!("f{i}"), i);
        }
        assert_eq!(b.len(), MAX_FIELDS);
        assert_eq!(b.get("missing"), None);
    }
}
