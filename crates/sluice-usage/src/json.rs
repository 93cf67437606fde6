//! The JSON scan: a byte-at-a-time tokenizer that knows only what it must
//! to find the top-level object's `"usage"` member: whether it is inside a
//! string (and after a backslash), how deep it is (a counter, so any depth
//! costs the same), and, at depth 1, whether the next string is a key.

use super::Usage;

/// The key sought.
const USAGE: &[u8] = b"usage";

/// The most raw bytes of a top-level key kept to compare with `usage`:
/// enough for `usage` with every letter escaped as `\uXXXX` (30).
const KEY_MAX: usize = 32;

/// Where the scan is in the body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Before the first value: only whitespace so far.
    Before,
    /// Inside the top-level object.
    Object,
    /// After it, or the body is not an object: nothing more to read.
    Done,
}

/// Where the scan is in a member of the top-level object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Member {
    /// Waiting for a key (after `{` or `,`).
    Key,
    /// Inside the key's string.
    KeyString,
    /// After the key, waiting for `:`.
    Colon,
    /// In the value, until the `,` or `}` at depth 1 that ends it.
    Value,
}

/// The scan of one JSON document.
#[derive(Debug)]
pub(super) struct JsonScan {
    /// The most bytes of a `usage` value kept.
    max: usize,
    phase: Phase,
    /// 1 inside the top-level object; more inside its values.
    depth: u64,
    in_string: bool,
    /// The previous byte was a backslash inside a string.
    escape: bool,
    member: Member,
    /// The raw bytes of the current top-level key.
    key: [u8; KEY_MAX],
    /// How many bytes `key` holds; `KEY_MAX + 1` once it overflowed.
    key_len: usize,
    /// The current key is `usage`.
    key_is_usage: bool,
    /// The current value is being kept in `capture`.
    capturing: bool,
    /// The value of the current `usage` member, so far.
    capture: Vec<u8>,
    /// The last valid usage found.
    found: Option<Usage>,
}

impl JsonScan {
    /// A scan that keeps at most `max` bytes of a `usage` value.
    pub(super) fn new(max: usize) -> Self {
        Self {
            max,
            phase: Phase::Before,
            depth: 0,
            in_string: false,
            escape: false,
            member: Member::Key,
            key: [0; KEY_MAX],
            key_len: 0,
            key_is_usage: false,
            capturing: false,
            capture: Vec::new(),
            found: None,
        }
    }

    /// Ready for another document; the capture's memory is kept.
    pub(super) fn reset(&mut self) {
        let mut capture = std::mem::take(&mut self.capture);
        capture.clear();
        *self = Self {
            capture,
            ..Self::new(self.max)
        };
    }

    /// The usage found so far.
    pub(super) fn usage(&self) -> Option<Usage> {
        self.found
    }

    /// The bytes held for the capture.
    pub(super) fn capacity(&self) -> usize {
        self.capture.capacity()
    }

    /// Reads the document's next chunk.
    pub(super) fn feed(&mut self, chunk: &[u8]) {
        for &b in chunk {
            match self.phase {
                Phase::Before => self.before(b),
                Phase::Object => self.object(b),
                Phase::Done => return,
            }
        }
    }

    /// A byte before the top-level value.
    fn before(&mut self, b: u8) {
        match b {
            b' ' | b'\t' | b'\n' | b'\r' => {}
            b'{' => {
                self.phase = Phase::Object;
                self.depth = 1;
                self.member = Member::Key;
            }
            _ => self.phase = Phase::Done,
        }
    }

    /// A byte inside the top-level object.
    fn object(&mut self, b: u8) {
        if self.in_string {
            self.string_byte(b);
            return;
        }
        match b {
            b'"' => {
                self.in_string = true;
                if self.depth == 1 && self.member == Member::Key {
                    self.member = Member::KeyString;
                    self.key_len = 0;
                } else {
                    self.keep(b);
                }
            }
            b'{' | b'[' => {
                self.depth = self.depth.saturating_add(1);
                self.keep(b);
            }
            b'}' | b']' => {
                self.depth = self.depth.saturating_sub(1);
                if self.depth == 0 {
                    self.end_member();
                    self.phase = Phase::Done;
                } else {
                    self.keep(b);
                }
            }
            b':' if self.depth == 1 && self.member == Member::Colon => {
                self.member = Member::Value;
                self.capturing = self.key_is_usage;
                self.capture.clear();
            }
            b',' if self.depth == 1 => {
                self.end_member();
                self.member = Member::Key;
            }
            _ => self.keep(b),
        }
    }

    /// A byte inside a string.
    fn string_byte(&mut self, b: u8) {
        let closes = !self.escape && b == b'"';
        self.escape = !self.escape && b == b'\\';
        if self.member == Member::KeyString {
            if closes {
                self.in_string = false;
                self.member = Member::Colon;
                self.key_is_usage = self.key_matches();
            } else if self.key_len < KEY_MAX {
                self.key[self.key_len] = b;
                self.key_len += 1;
            } else {
                self.key_len = KEY_MAX + 1;
            }
            return;
        }
        if closes {
            self.in_string = false;
        }
        self.keep(b);
    }

    /// Whether the key just read is `usage`, escapes decoded.
    fn key_matches(&self) -> bool {
        let Some(raw) = self.key.get(..self.key_len) else {
            return false;
        };
        if !raw.contains(&b'\\') {
            return raw == USAGE;
        }
        let mut quoted = [b'"'; KEY_MAX + 2];
        quoted[1..=raw.len()].copy_from_slice(raw);
        serde_json::from_slice::<String>(&quoted[..raw.len() + 2])
            .is_ok_and(|key| key.as_bytes() == USAGE)
    }

    /// Keeps a byte of the value being captured; gives the value up when
    /// it would pass the bound.
    fn keep(&mut self, b: u8) {
        if !self.capturing {
            return;
        }
        if self.capture.len() >= self.max {
            self.capturing = false;
            self.capture.clear();
            return;
        }
        if self.capture.len() == self.capture.capacity() {
            // Grow by doubling, but never past the bound.
            let want = (self.capture.capacity() * 2).clamp(64, self.max);
            self.capture.reserve_exact(want - self.capture.len());
        }
        self.capture.push(b);
    }

    /// The end of a top-level member: a captured `usage` is parsed.
    fn end_member(&mut self) {
        if self.capturing {
            self.capturing = false;
            if let Some(usage) = Usage::from_json(&self.capture) {
                self.found = Some(usage);
            }
            self.capture.clear();
        }
        self.key_is_usage = false;
    }
}
