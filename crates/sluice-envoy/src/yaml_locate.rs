//! Where a node of a YAML file is: the line and column of a field, found by
//! its path (`descriptors`, 2, `rate_limit`, `unit`), so that an error found
//! after parsing (a duplicate key, a bad unit) names its place as a parse
//! error does. The file is read again for this only when there is an error.

use saphyr_parser::{Event, Marker, Parser};

/// One step of a path into a YAML document.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step<'a> {
    /// A mapping's field.
    Field(&'a str),
    /// A sequence's item.
    Index(usize),
}

/// A parsed node, with where it starts.
enum Node {
    Scalar(Marker),
    Seq(Marker, Vec<Node>),
    /// Each field: its key's text and place, and its value.
    Map(Marker, Vec<(String, Marker, Node)>),
}

impl Node {
    fn at(&self) -> Marker {
        match self {
            Self::Scalar(m) | Self::Seq(m, _) | Self::Map(m, _) => *m,
        }
    }
}

/// The 1-based line and column of the node at `path` (for a field, of its
/// key), or of the deepest node of the path that exists; `None` when the
/// text is not YAML at all.
pub fn locate(text: &str, path: &[Step<'_>]) -> Option<(usize, usize)> {
    let events: Vec<(Event<'_>, Marker)> = Parser::new_from_str(text)
        .map_while(Result::ok)
        .filter(|(e, _)| !matches!(e, Event::StreamStart | Event::DocumentStart(_)))
        .map(|(e, span)| (e, span.start))
        .collect();
    let mut next = 0;
    let root = node(&events, &mut next, 0)?;
    let mut here = &root;
    let mut at = root.at();
    for step in path {
        let found = match (here, step) {
            (Node::Map(_, fields), Step::Field(name)) => fields
                .iter()
                .find(|(k, _, _)| k == name)
                .map(|(_, key_at, value)| (*key_at, value)),
            (Node::Seq(_, items), Step::Index(i)) => items.get(*i).map(|n| (n.at(), n)),
            _ => None,
        };
        let Some((step_at, found)) = found else { break };
        at = step_at;
        here = found;
    }
    Some((at.line(), at.col() + 1))
}

/// The deepest a document is followed.
const MAX_DEPTH: usize = 128;

/// Reads the node that starts at `events[*next]`, moving `next` past it.
fn node(events: &[(Event<'_>, Marker)], next: &mut usize, depth: usize) -> Option<Node> {
    if depth > MAX_DEPTH {
        return None;
    }
    let (event, at) = events.get(*next)?;
    *next += 1;
    Some(match event {
        Event::SequenceStart(..) => {
            let mut items = Vec::new();
            while !matches!(events.get(*next)?.0, Event::SequenceEnd) {
                items.push(node(events, next, depth + 1)?);
            }
            *next += 1;
            Node::Seq(*at, items)
        }
        Event::MappingStart(..) => {
            let mut fields = Vec::new();
            loop {
                let (key, key_at) = events.get(*next)?;
                let key_text = match key {
                    Event::MappingEnd => break,
                    Event::Scalar(text, ..) => text.to_string(),
                    _ => String::new(),
                };
                // A key that is itself a collection is read and skipped.
                if matches!(key, Event::Scalar(..)) {
                    *next += 1;
                } else {
                    node(events, next, depth + 1)?;
                }
                let value = node(events, next, depth + 1)?;
                fields.push((key_text, *key_at, value));
            }
            *next += 1;
            Node::Map(*at, fields)
        }
        Event::StreamEnd | Event::DocumentEnd => return None,
        _ => Node::Scalar(*at),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: fortnight\n  - key: b\n    descriptors:\n      - key: c\n        value: x\n";

    #[test]
    fn fields_and_items_are_found_by_their_path() {
        use Step::{Field as F, Index as I};
        assert_eq!(locate(TEXT, &[F("domain")]), Some((1, 1)));
        assert_eq!(
            locate(TEXT, &[F("descriptors"), I(0), F("rate_limit"), F("unit")]),
            Some((5, 7))
        );
        assert_eq!(
            locate(
                TEXT,
                &[F("descriptors"), I(1), F("descriptors"), I(0), F("value")]
            ),
            Some((9, 9))
        );
        // A path that goes past what exists stops at the deepest node.
        assert_eq!(
            locate(TEXT, &[F("descriptors"), I(1), F("rate_limit")]),
            Some((6, 5))
        );
    }

    #[test]
    fn what_is_not_yaml_has_no_place() {
        assert_eq!(locate("", &[Step::Field("x")]), None);
        assert_eq!(locate("a: [1, 2", &[Step::Field("a")]), None);
    }
}
