//! The event-stream scan: lines and events as the WHATWG HTML standard's
//! "server-sent events" parses them (lines end with CRLF, LF or CR; a
//! blank line ends an event; `data` lines are joined with LF), with each
//! event's data streamed through a [`JsonScan`] rather than buffered.

use super::json::JsonScan;
use super::{Limits, Usage};

/// The field name that matters.
const DATA: &[u8] = b"data";

/// The UTF-8 byte order mark, ignored at the start of the stream.
const BOM: [u8; 3] = [0xEF, 0xBB, 0xBF];

/// Where the scan is in a line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Line {
    /// Nothing of the line read yet.
    Start,
    /// Reading the field name.
    Name,
    /// Just after `data:`: a single space here is not part of the value.
    ValueStart,
    /// In a `data` field's value.
    Data,
    /// In a comment or a field that does not matter.
    Ignore,
}

/// The scan of an event stream.
#[derive(Debug)]
pub(super) struct EventScan {
    /// The most bytes of one event.
    max_event: usize,
    /// The current event's data, as it passes.
    json: JsonScan,
    line: Line,
    /// The field name so far (only `data` matters, so a few bytes do).
    name: [u8; DATA.len()],
    /// How many bytes `name` holds; `DATA.len() + 1` once it overflowed.
    name_len: usize,
    /// The previous byte was a CR: an LF now is the same line end.
    after_cr: bool,
    /// How many bytes of the BOM matched at the start; `None` once past.
    bom: Option<usize>,
    /// The current event's bytes so far, line ends included.
    event_len: usize,
    /// The current event has a `data` field.
    has_data: bool,
    /// The current event passed the bound and is being skipped.
    skipped: bool,
    /// The last event's usage.
    found: Option<Usage>,
}

impl EventScan {
    /// A scan bounded by `limits`.
    pub(super) fn new(limits: Limits) -> Self {
        Self {
            max_event: limits.max_event_bytes,
            json: JsonScan::new(limits.max_usage_bytes),
            line: Line::Start,
            name: [0; DATA.len()],
            name_len: 0,
            after_cr: false,
            bom: Some(0),
            event_len: 0,
            has_data: false,
            skipped: false,
            found: None,
        }
    }

    /// The usage of the last complete event that had one.
    pub(super) fn usage(&self) -> Option<Usage> {
        self.found
    }

    /// The bytes held for buffering.
    pub(super) fn capacity(&self) -> usize {
        self.json.capacity()
    }

    /// Reads the stream's next chunk.
    pub(super) fn feed(&mut self, chunk: &[u8]) {
        let mut rest = chunk;
        while let Some(matched) = self.bom {
            let Some((&b, tail)) = rest.split_first() else {
                return;
            };
            if BOM.get(matched) == Some(&b) {
                rest = tail;
                self.bom = (matched + 1 < BOM.len()).then_some(matched + 1);
            } else {
                // Not a BOM after all: what matched is part of the stream.
                self.bom = None;
                for &p in &BOM[..matched] {
                    self.byte(p);
                }
            }
        }
        for &b in rest {
            self.byte(b);
        }
    }

    /// One byte of the stream, after any BOM.
    fn byte(&mut self, b: u8) {
        if std::mem::take(&mut self.after_cr) && b == b'\n' {
            return;
        }
        self.event_len = self.event_len.saturating_add(1);
        if self.event_len > self.max_event {
            self.skipped = true;
        }
        if b == b'\r' || b == b'\n' {
            self.after_cr = b == b'\r';
            self.end_line();
            return;
        }
        match self.line {
            Line::Start if b == b':' => self.line = Line::Ignore,
            Line::Start | Line::Name => {
                if b == b':' {
                    self.line = if self.is_data() {
                        self.start_data();
                        Line::ValueStart
                    } else {
                        Line::Ignore
                    };
                } else {
                    self.line = Line::Name;
                    self.push_name(b);
                }
            }
            Line::ValueStart => {
                self.line = Line::Data;
                if b != b' ' {
                    self.data(b);
                }
            }
            Line::Data => self.data(b),
            Line::Ignore => {}
        }
    }

    /// Adds a byte to the field name.
    fn push_name(&mut self, b: u8) {
        match self.name.get_mut(self.name_len) {
            Some(slot) => {
                *slot = b;
                self.name_len += 1;
            }
            None => self.name_len = DATA.len() + 1,
        }
    }

    /// The field name read is `data`.
    fn is_data(&self) -> bool {
        self.name_len == DATA.len() && self.name == DATA
    }

    /// A `data` field starts: the LF that joins it to the previous one.
    fn start_data(&mut self) {
        if self.has_data {
            self.data(b'\n');
        }
        self.has_data = true;
    }

    /// A byte of the event's data.
    fn data(&mut self, b: u8) {
        if !self.skipped {
            self.json.feed(&[b]);
        }
    }

    /// The end of a line: a blank line ends the event.
    fn end_line(&mut self) {
        match self.line {
            Line::Start => self.end_event(),
            // A line with no colon is a field name with an empty value.
            Line::Name if self.is_data() => self.start_data(),
            Line::Name | Line::ValueStart | Line::Data | Line::Ignore => {}
        }
        self.line = Line::Start;
        self.name_len = 0;
    }

    /// The end of an event: its usage, if it had one, is the last so far.
    fn end_event(&mut self) {
        if self.has_data
            && !self.skipped
            && let Some(usage) = self.json.usage()
        {
            self.found = Some(usage);
        }
        self.json.reset();
        self.event_len = 0;
        self.has_data = false;
        self.skipped = false;
    }
}
