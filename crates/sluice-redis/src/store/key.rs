//! Redis key names: `sluice:{<key id hex>}:<limit tag>`, and the hash tag
//! inside one.

use sluice_store::KeyId;

/// The Redis key holding the state of `limit_id` for `key`:
/// `sluice:{<key id hex>}:<limit tag>`, the limit tag being
/// [`limit_tag`](sluice_store::limit_tag) in 16 hex digits.
pub fn key_name(limit_id: &str, key: KeyId) -> String {
    tagged_key_name(sluice_store::limit_tag(limit_id), key)
}

/// [`key_name`] of the limit whose tag is `tag` (a counter's
/// [`tag`](sluice_store::seam::CounterDef::tag), made once).
pub(crate) fn tagged_key_name(tag: u64, key: KeyId) -> String {
    // Made in place (one of these per check sent to Redis): the formatting
    // machinery took several times as long for the two hex numbers.
    let mut name: [u8; KEY_NAME_LEN] =
        *b"sluice:{________________________________}:________________";
    // Each slice is exactly twice as long as the bytes it receives, so
    // neither call can fail.
    let _ = hex::encode_to_slice(key.0.to_be_bytes(), &mut name[8..40]);
    let _ = hex::encode_to_slice(tag.to_be_bytes(), &mut name[42..]);
    // All ASCII: the checked conversion takes its fast path (the lossy one
    // walked the name character by character, 3 % of redis_load's client).
    String::from_utf8(name.to_vec())
        .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// The length of every key name.
const KEY_NAME_LEN: usize = 7 + 34 + 1 + 16;

/// The hash tag (the key id in hex) of a name made by [`key_name`].
pub(super) fn hash_tag(name: &str) -> &str {
    name.get(8..40).unwrap_or(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_names_are_tagged_by_the_key_id() {
        let key = KeyId(0x0123_4567_89ab_cdef_0011_2233_4455_6677);
        let name = key_name("api/per-key", key);
        assert_eq!(name.len(), KEY_NAME_LEN);
        assert_eq!(
            name,
            format!(
                "sluice:{{{}}}:{:016x}",
                key.to_hex(),
                sluice_store::limit_tag("api/per-key")
            )
        );
        assert_eq!(hash_tag(&name), key.to_hex());
    }
}
