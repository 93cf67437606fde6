//! Stable, non-secret hashes: the same in every process and version.

/// FNV-1a, 64 bits: a hash that is the same in every process and version
/// (limit tags in Redis key names, the shard ring, config versions). Not
/// for anything an attacker chooses and a table must survive.
///
/// ```
/// assert_eq!(sluice_store::fnv1a(b""), 0xcbf2_9ce4_8422_2325);
/// ```
pub fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// A stable, non-secret 64-bit tag of a limit's identity.
///
/// ```
/// assert_ne!(sluice_store::limit_tag("a"), sluice_store::limit_tag("b"));
/// ```
pub fn limit_tag(limit_id: &str) -> u64 {
    fnv1a(limit_id.as_bytes())
}
