//! # sluice-usage
//!
//! The cost a response reports about itself: the `usage` of an
//! OpenAI-style JSON body or event stream, found by reading a bounded part
//! of the body as it streams past.
//!
//! A [`UsageScan`] is fed the body's chunks as they go to the client and
//! never holds the body: it tokenizes the JSON as it passes (nesting depth
//! as a counter, strings and their escapes as a few flags) and keeps only
//! the bytes of the top-level object's `"usage"` member, up to
//! [`Limits::max_usage_bytes`]. An event stream (`text/event-stream`) is
//! split into events as it passes, and each event's `data` goes through
//! the same JSON scan; the last event that carries a usage wins. Memory is
//! bounded by [`Limits`], whatever the body's size or nesting.
//!
//! The scan is pure and synchronous: no I/O, no clock, and nothing in the
//! body can make it panic.

mod json;
mod request;
mod sse;
#[cfg(test)]
mod tests;

pub use request::{Scalar, top_level_scalars};

use serde_json::{Map, Value};

/// The largest token count taken as real: 2^53, the largest integer a
/// JSON number is exact at in most implementations. A count above it is
/// rejected, and so is the usage that holds it.
pub const MAX_TOKENS: u64 = 1 << 53;

/// The token counts a response reports: OpenAI's `usage` of a chat
/// completion or completion (`prompt_tokens`, `completion_tokens`,
/// `total_tokens`), or the Responses API's and Anthropic's
/// (`input_tokens`, `output_tokens`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Usage {
    /// Tokens of the request: `prompt_tokens` or `input_tokens`; 0 when
    /// the usage names neither.
    pub prompt_tokens: u64,
    /// Tokens of the answer: `completion_tokens` or `output_tokens`; 0
    /// when the usage names neither.
    pub completion_tokens: u64,
    /// `total_tokens` as reported, or the sum of the other two when the
    /// usage has no total.
    pub total_tokens: u64,
}

impl Usage {
    /// The usage a JSON object's bytes describe, or `None` when they are
    /// not an object, name none of the counts, or hold a count that is not
    /// a non-negative integer of at most [`MAX_TOKENS`] (a negative,
    /// fractional, non-numeric or absurd count rejects the whole usage).
    /// `null` is not a usage.
    pub fn from_json(bytes: &[u8]) -> Option<Self> {
        let map: Map<String, Value> = serde_json::from_slice(bytes).ok()?;
        let prompt = first_count(&map, "prompt_tokens", "input_tokens").ok()?;
        let completion = first_count(&map, "completion_tokens", "output_tokens").ok()?;
        let total = count(&map, "total_tokens").ok()?;
        if prompt.is_none() && completion.is_none() && total.is_none() {
            return None;
        }
        let prompt_tokens = prompt.unwrap_or(0);
        let completion_tokens = completion.unwrap_or(0);
        Some(Self {
            prompt_tokens,
            completion_tokens,
            // At most 2^54: no overflow.
            total_tokens: total.unwrap_or(prompt_tokens + completion_tokens),
        })
    }
}

/// A count that is present but not acceptable.
struct Invalid;

/// The count named `name`: absent, or valid, or [`Invalid`].
fn count(map: &Map<String, Value>, name: &str) -> Result<Option<u64>, Invalid> {
    match map.get(name) {
        None => Ok(None),
        Some(value) => value
            .as_u64()
            .filter(|&n| n <= MAX_TOKENS)
            .map(Some)
            .ok_or(Invalid),
    }
}

/// The count named `first`, or else `second`; either, when present, must
/// be valid.
fn first_count(
    map: &Map<String, Value>,
    first: &str,
    second: &str,
) -> Result<Option<u64>, Invalid> {
    let a = count(map, first)?;
    let b = count(map, second)?;
    Ok(a.or(b))
}

/// What a body is, from its `Content-Type`: the scan differs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BodyKind {
    /// One JSON document: `application/json` or any `+json` type.
    Json,
    /// Server-sent events: `text/event-stream`, each event's data a JSON
    /// document (or `[DONE]`).
    EventStream,
}

impl BodyKind {
    /// The kind of a body whose `Content-Type` field value is `value`
    /// (compared without regard to case, parameters such as `charset`
    /// ignored), or `None` for a type that carries no usage. Takes bytes,
    /// as a header value is not always text.
    ///
    /// ```
    /// use sluice_usage::BodyKind;
    /// assert_eq!(BodyKind::from_content_type(b"application/json; charset=utf-8"), Some(BodyKind::Json));
    /// assert_eq!(BodyKind::from_content_type(b"application/vnd.api+JSON"), Some(BodyKind::Json));
    /// assert_eq!(BodyKind::from_content_type(b"Text/Event-Stream"), Some(BodyKind::EventStream));
    /// assert_eq!(BodyKind::from_content_type(b"text/plain"), None);
    /// ```
    pub fn from_content_type(value: &[u8]) -> Option<Self> {
        let essence = value.split(|&b| b == b';').next().unwrap_or(value);
        let essence = essence.trim_ascii();
        let (kind, subtype) = {
            let slash = essence.iter().position(|&b| b == b'/')?;
            (&essence[..slash], &essence[slash + 1..])
        };
        if kind.eq_ignore_ascii_case(b"text") && subtype.eq_ignore_ascii_case(b"event-stream") {
            return Some(Self::EventStream);
        }
        let json = subtype.eq_ignore_ascii_case(b"json")
            || (subtype.len() > 5 && subtype[subtype.len() - 5..].eq_ignore_ascii_case(b"+json"));
        (json && kind.eq_ignore_ascii_case(b"application")).then_some(Self::Json)
    }
}

/// The bounds of a scan's memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The most bytes of a `usage` value kept; a longer one is given up
    /// (as if absent). Default 4 KiB.
    pub max_usage_bytes: usize,
    /// The most bytes of one event of an event stream, line ends included;
    /// a longer event is skipped (never buffered). Default 64 KiB.
    pub max_event_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_usage_bytes: 4 * 1024,
            max_event_bytes: 64 * 1024,
        }
    }
}

/// A bounded, streaming search for a response's usage: feed it the body's
/// chunks in order with [`feed`](Self::feed), then [`finish`](Self::finish).
///
/// It never buffers the body: it holds at most
/// [`Limits::max_usage_bytes`] of it, whatever the body's size, nesting or
/// content, and nothing in the body can make it panic.
///
/// ```
/// use sluice_usage::{BodyKind, Limits, Usage, UsageScan};
///
/// let mut scan = UsageScan::new(BodyKind::Json, Limits::default());
/// // Chunks can split the body anywhere, even inside a key.
/// scan.feed(br#"{"id":"chatcmpl-1","usa"#);
/// scan.feed(br#"ge":{"prompt_tokens":3,"completion_tokens":5,"#);
/// scan.feed(br#""total_tokens":8},"choices":[]}"#);
/// assert_eq!(
///     scan.finish(),
///     Some(Usage { prompt_tokens: 3, completion_tokens: 5, total_tokens: 8 })
/// );
///
/// // An event stream: the last event with a usage wins; `[DONE]` is not JSON.
/// let mut scan = UsageScan::new(BodyKind::EventStream, Limits::default());
/// scan.feed(b"data: {\"choices\":[],\"usage\":null}\n\n");
/// scan.feed(b"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":2,\"completion_tokens\":1,\"total_tokens\":3}}\n\n");
/// scan.feed(b"data: [DONE]\n\n");
/// assert_eq!(scan.finish().map(|u| u.total_tokens), Some(3));
/// ```
#[derive(Debug)]
pub struct UsageScan {
    inner: Inner,
}

#[derive(Debug)]
enum Inner {
    Json(json::JsonScan),
    Events(sse::EventScan),
}

impl UsageScan {
    /// A scan of a body of `kind`, bounded by `limits`.
    pub fn new(kind: BodyKind, limits: Limits) -> Self {
        let inner = match kind {
            BodyKind::Json => Inner::Json(json::JsonScan::new(limits.max_usage_bytes)),
            BodyKind::EventStream => Inner::Events(sse::EventScan::new(limits)),
        };
        Self { inner }
    }

    /// A scan of a body whose `Content-Type` field value is `value`, or
    /// `None` when that type carries no usage (see
    /// [`BodyKind::from_content_type`]).
    pub fn for_content_type(value: &[u8], limits: Limits) -> Option<Self> {
        BodyKind::from_content_type(value).map(|kind| Self::new(kind, limits))
    }

    /// Reads the body's next chunk.
    pub fn feed(&mut self, chunk: &[u8]) {
        match &mut self.inner {
            Inner::Json(scan) => scan.feed(chunk),
            Inner::Events(scan) => scan.feed(chunk),
        }
    }

    /// The usage the body reported, once it has all been fed: the
    /// top-level object's `usage` member for JSON (the last valid one, if
    /// the member is repeated; a member counts once the `,` or `}` after it
    /// has been read, so a body cut off inside it has none), the last
    /// event's usage for an event stream
    /// (an unfinished last event, with no blank line after it, is
    /// discarded, as the event-stream spec says). `None` when there is
    /// none, it is `null`, over the bound, or not a valid usage.
    pub fn finish(self) -> Option<Usage> {
        match self.inner {
            Inner::Json(scan) => scan.usage(),
            Inner::Events(scan) => scan.usage(),
        }
    }

    /// The bytes of memory the scan holds for buffering now: never more
    /// than [`Limits::max_usage_bytes`].
    pub fn buffered_capacity(&self) -> usize {
        match &self.inner {
            Inner::Json(scan) => scan.capacity(),
            Inner::Events(scan) => scan.capacity(),
        }
    }
}
