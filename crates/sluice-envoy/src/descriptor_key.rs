//! What a descriptor's counter is named by: its entries (and, for a
//! per-request limit, its domain), under the engine's keyed hash.

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;

/// What a descriptor's counter is named by (before the keyed hash): the
/// domain for a per-request limit, and its entries, keys and values, each
/// ended by a separator (U+001C to U+001F) that no entry can forge: those
/// characters, and the escape U+001B, are escaped where an entry holds
/// them (so the usual entries, which hold none, are named as before). An
/// entry matched by a `share_threshold` wildcard counts as the pattern
/// (marked, so that no value can be mistaken for it).
pub(crate) fn descriptor_key(
    domain: &str,
    d: &RateLimitDescriptor,
    shared: &[(usize, &str)],
) -> String {
    let mut key = String::new();
    if !domain.is_empty() {
        push_escaped(&mut key, domain);
        key.push('\u{1c}');
    }
    for (i, e) in d.entries.iter().enumerate() {
        push_escaped(&mut key, &e.key);
        key.push('\u{1f}');
        match shared.iter().find(|(at, _)| *at == i) {
            Some((_, pattern)) => {
                key.push('\u{1d}');
                push_escaped(&mut key, pattern);
            }
            None => push_escaped(&mut key, &e.value),
        }
        key.push('\u{1e}');
    }
    key
}

/// The keyed hash of [`descriptor_key`], computed from its pieces when no
/// entry needs escaping (the usual case): nothing is allocated.
pub(crate) fn descriptor_id(
    hasher: &sluice_store::KeyHasher,
    domain: &str,
    d: &RateLimitDescriptor,
    shared: &[(usize, &str)],
) -> sluice_store::KeyId {
    let plain = |t: &str| !t.bytes().any(|b| (0x1b..=0x1f).contains(&b));
    let all_plain = plain(domain)
        && shared.iter().all(|(_, p)| plain(p))
        && d.entries.iter().all(|e| plain(&e.key) && plain(&e.value));
    if !all_plain {
        return hasher.key_id(&descriptor_key(domain, d, shared));
    }
    // Inline for up to eight entries: the usual descriptor allocates nothing.
    let mut pieces: smallvec::SmallVec<[&[u8]; 40]> = smallvec::SmallVec::new();
    if !domain.is_empty() {
        pieces.extend([domain.as_bytes(), "\u{1c}".as_bytes()]);
    }
    for (i, e) in d.entries.iter().enumerate() {
        pieces.extend([e.key.as_bytes(), "\u{1f}".as_bytes()]);
        match shared.iter().find(|(at, _)| *at == i) {
            Some((_, pattern)) => pieces.extend(["\u{1d}".as_bytes(), pattern.as_bytes()]),
            None => pieces.push(e.value.as_bytes()),
        }
        pieces.push("\u{1e}".as_bytes());
    }
    hasher.key_id_pieces(pieces)
}

/// Appends `text`, with U+001B to U+001F written as U+001B and a printable
/// character: one text is never another's, nor holds a separator.
fn push_escaped(key: &mut String, text: &str) {
    if !text.bytes().any(|b| (0x1b..=0x1f).contains(&b)) {
        key.push_str(text);
        return;
    }
    for c in text.chars() {
        if ('\u{1b}'..='\u{1f}').contains(&c) {
            key.push('\u{1b}');
            key.push(char::from(c as u8 + 0x40));
        } else {
            key.push(c);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;

    fn d(entries: &[(&str, &str)]) -> RateLimitDescriptor {
        RateLimitDescriptor {
            entries: entries
                .iter()
                .map(|(k, v)| Entry {
                    key: (*k).into(),
                    value: (*v).into(),
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn entries_holding_separators_cannot_name_another_descriptor_s_counter() {
        // Both once gave `a\x1fX\x1eb\x1fY\x1eb\x1fZ\x1e`: one client could
        // spend another's counter.
        let one = d(&[("a", "X\u{1e}b\u{1f}Y"), ("b", "Z")]);
        let two = d(&[("a", "X"), ("b", "Y\u{1e}b\u{1f}Z")]);
        assert_ne!(descriptor_key("", &one, &[]), descriptor_key("", &two, &[]));
        let esc = d(&[("a", "\u{1b}^")]);
        let sep = d(&[("a", "\u{1e}")]);
        assert_ne!(descriptor_key("", &esc, &[]), descriptor_key("", &sep, &[]));
        // The usual entries are named as they were.
        let plain = d(&[("remote_address", "10.0.0.1")]);
        assert_eq!(
            descriptor_key("", &plain, &[]),
            "remote_address\u{1f}10.0.0.1\u{1e}"
        );
        // The id from pieces is the id of the key.
        let h = sluice_store::KeyHasher::from_secret(b"t");
        for (domain, desc, shared) in [
            ("", &plain, &[][..]),
            ("edge", &two, &[][..]),
            (
                "",
                &d(&[("files", "files/a"), ("m", "GET")]),
                &[(0, "files/*")][..],
            ),
        ] {
            assert_eq!(
                descriptor_id(&h, domain, desc, shared),
                h.key_id(&descriptor_key(domain, desc, shared))
            );
        }
    }
}
