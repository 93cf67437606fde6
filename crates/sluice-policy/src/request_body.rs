//! What an adapter read of a request's JSON body before it was decided:
//! its whole-number and boolean fields at the top level (an LLM call's
//! `max_tokens` and `stream`, say), where a settle rule's
//! `estimate = "json:<field>"` finds the request's estimate and a
//! `match.json` condition its field.
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

/// A kept field's value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Value {
    Whole(u64),
    Bool(bool),
}

/// The whole-number and boolean fields at the top level of a request's
/// JSON body, or the mark of a JSON body that could not be read within
/// the adapter's bounds ([`unread`](Self::unread)).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BodyFields {
    fields: SmallVec<[(Box<str>, Value); 4]>,
    unread: bool,
}

impl BodyFields {
    /// No fields: a body read whole that has none of these.
    pub fn new() -> Self {
        Self::default()
    }

    /// A JSON body (by its `Content-Type`) that could not be read within
    /// the adapter's bounds: too long, too slow, not one object. It has no
    /// fields, and a `match.json` condition holds for it, so that a client
    /// cannot step around a limit by making its body unreadable.
    pub fn unreadable() -> Self {
        Self {
            fields: SmallVec::new(),
            unread: true,
        }
    }

    /// Whether this is the mark of a body that could not be read.
    pub fn unread(&self) -> bool {
        self.unread
    }

    /// Keeps `name = value`, a whole number, unless [`MAX_FIELDS`] are
    /// kept already, the name is longer than [`MAX_NAME`], or the name is
    /// kept already (the first one stands, as a JSON parser that keeps the
    /// first would).
    pub fn push_whole(&mut self, name: &str, value: u64) {
        self.push(name, Value::Whole(value));
    }

    /// Keeps `name = value`, a boolean, under the rules of
    /// [`push_whole`](Self::push_whole).
    pub fn push_bool(&mut self, name: &str, value: bool) {
        self.push(name, Value::Bool(value));
    }

    /// Keeps a field under the rules of [`push_whole`](Self::push_whole).
    fn push(&mut self, name: &str, value: Value) {
        if self.fields.len() < MAX_FIELDS && name.len() <= MAX_NAME && self.value(name).is_none() {
            self.fields.push((name.into(), value));
        }
    }

    fn value(&self, name: &str) -> Option<Value> {
        self.fields
            .iter()
            .find(|(n, _)| &**n == name)
            .map(|(_, v)| *v)
    }

    /// The value of field `name`, if the body had it as a whole number.
    pub fn whole(&self, name: &str) -> Option<u64> {
        match self.value(name)? {
            Value::Whole(n) => Some(n),
            Value::Bool(_) => None,
        }
    }

    /// The value of field `name`, if the body had it as a boolean.
    pub fn bool(&self, name: &str) -> Option<bool> {
        match self.value(name)? {
            Value::Bool(b) => Some(b),
            Value::Whole(_) => None,
        }
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
        let mut b = BodyFields::new();
        b.push_whole("max_tokens", 100);
        b.push_whole("max_tokens", 5);
        b.push_bool("max_tokens", true);
        b.push_whole(&"x".repeat(MAX_NAME + 1), 1);
        b.push_bool("stream", true);
        assert_eq!(b.whole("max_tokens"), Some(100));
        assert_eq!(b.bool("max_tokens"), None, "a number is not a boolean");
        assert_eq!((b.bool("stream"), b.whole("stream")), (Some(true), None));
        assert_eq!(b.len(), 2);
        for i in 0..100 {
            b.push_whole(&format!("f{i}"), i);
        }
        assert_eq!(b.len(), MAX_FIELDS);
        assert_eq!(b.whole("missing"), None);
        assert!(!b.unread() && BodyFields::unreadable().unread());
    }
}
