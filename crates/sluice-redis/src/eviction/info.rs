//! Reading the two fields Sluice needs from `INFO`'s text:
//! `maxmemory_policy` (section `memory`) and `evicted_keys` (section
//! `stats`), and what a policy means for Sluice's keys.
//!
//! `INFO` is lines of `field:value` under `# Section` headers, ended by
//! CRLF. Anything else (blank lines, unknown fields, a value that does not
//! parse, bytes that are not UTF-8, a field given twice) is skipped or
//! read as absent: what Redis answers never panics Sluice.

/// The longest policy name kept; a longer value is not a policy.
const MAX_POLICY_LEN: usize = 40;

/// What one node's `INFO` says about eviction. A field is `None` when the
/// text lacks it or it does not parse.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InfoFields {
    /// `maxmemory_policy`, e.g. `noeviction` or `allkeys-lru`: lowercase
    /// letters, digits, `-` and `_` only (it becomes a metric label).
    pub policy: Option<String>,
    /// `evicted_keys`: keys evicted since the node started.
    pub evicted_keys: Option<u64>,
}

impl InfoFields {
    /// The fields found in `text` (one or several sections of `INFO`).
    /// The last well-formed occurrence of a field wins.
    pub fn parse(text: &str) -> Self {
        let mut fields = Self::default();
        for line in text.lines() {
            let Some((name, value)) = line.trim().split_once(':') else {
                continue;
            };
            match name {
                "maxmemory_policy" => {
                    if let Some(policy) = policy_name(value) {
                        fields.policy = Some(policy);
                    }
                }
                "evicted_keys" => {
                    if let Ok(n) = value.trim().parse::<u64>() {
                        fields.evicted_keys = Some(n);
                    }
                }
                _ => {}
            }
        }
        fields
    }
}

/// `value` as a policy name, or `None` when it is not one: empty, too
/// long, or with characters no policy has.
fn policy_name(value: &str) -> Option<String> {
    let value = value.trim().to_ascii_lowercase();
    let plausible = !value.is_empty()
        && value.len() <= MAX_POLICY_LEN
        && value
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
    plausible.then_some(value)
}

/// What an eviction policy means for Sluice's keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyRisk {
    /// `noeviction`: Redis refuses writes when full; it never drops a key.
    Keeps,
    /// `allkeys-*` may evict any key; `volatile-*` any key with a TTL,
    /// which every Sluice key has.
    Evicts,
    /// A policy this version does not know.
    Unknown,
}

impl PolicyRisk {
    /// The risk of `policy` (a name as [`InfoFields::parse`] keeps it).
    pub fn of(policy: &str) -> Self {
        if policy == "noeviction" {
            Self::Keeps
        } else if policy.starts_with("allkeys-") || policy.starts_with("volatile-") {
            Self::Evicts
        } else {
            Self::Unknown
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_both_fields_from_real_sections() {
        let text = "# Memory\r\nused_memory:1032\r\nmaxmemory:2097152\r\n\
                    maxmemory_human:2.00M\r\nmaxmemory_policy:allkeys-lru\r\n\r\n\
                    # Stats\r\ntotal_connections_received:3\r\nevicted_keys:417\r\n\
                    evicted_clients:0\r\n";
        let f = InfoFields::parse(text);
        assert_eq!(f.policy.as_deref(), Some("allkeys-lru"));
        assert_eq!(f.evicted_keys, Some(417));
    }

    #[test]
    fn odd_or_missing_fields_are_absent() {
        assert_eq!(InfoFields::parse(""), InfoFields::default());
        assert_eq!(InfoFields::parse("garbage\n:\n::\n"), InfoFields::default());
        let f = InfoFields::parse("maxmemory_policy:\r\nevicted_keys:-3\r\n");
        assert_eq!(f, InfoFields::default());
        let f = InfoFields::parse("maxmemory_policy:all keys; DROP\nevicted_keys:1e9\n");
        assert_eq!(f, InfoFields::default());
        let long = format!("maxmemory_policy:{}\n", "a".repeat(200));
        assert_eq!(InfoFields::parse(&long).policy, None);
        let f = InfoFields::parse("evicted_keys:99999999999999999999999\n");
        assert_eq!(f.evicted_keys, None);
        // Surrounding spaces and case are forgiven.
        let f = InfoFields::parse("  maxmemory_policy: NoEviction \n");
        assert_eq!(f.policy.as_deref(), Some("noeviction"));
    }

    #[test]
    fn policies_are_judged_by_their_family() {
        assert_eq!(PolicyRisk::of("noeviction"), PolicyRisk::Keeps);
        for p in [
            "allkeys-lru",
            "allkeys-lfu",
            "allkeys-random",
            "volatile-lru",
            "volatile-lfu",
            "volatile-random",
            "volatile-ttl",
        ] {
            assert_eq!(PolicyRisk::of(p), PolicyRisk::Evicts, "{p}");
        }
        assert_eq!(PolicyRisk::of("something-new"), PolicyRisk::Unknown);
    }
}
