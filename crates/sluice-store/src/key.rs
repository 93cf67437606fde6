//! Key identities: a keyed hash of the client key.
//!
//! Stores never hold a raw client key (an API key is a secret). They hold a
//! 128-bit SipHash-1-3 of the key under a secret hashing key. The same client
//! has the same id under every limit, so a store can place all of one
//! client's state together (one shard, one Redis hash slot); the limits keep
//! their state apart themselves.

use std::hash::Hasher;

use siphasher::sip128::{Hasher128, SipHasher13};

/// The identity of one client key under one limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KeyId(pub u128);

impl KeyId {
    /// Which of `mask + 1` shards holds this key (from the high bits).
    #[inline]
    pub fn shard(&self, mask: usize) -> usize {
        ((self.0 >> 64) as usize) & mask
    }

    /// The 64 low bits, used as the key within a shard. Two clients of one
    /// limit collide only if these and their shard agree: about n²/2⁶⁵ for n
    /// keys, 3·10⁻⁸ at a million keys.
    #[inline]
    pub fn low(&self) -> u64 {
        self.0 as u64
    }

    /// The identity as 32 lowercase hex digits, for logs and store key names.
    pub fn to_hex(&self) -> String {
        format!("{:032x}", self.0)
    }
}

/// Derives [`KeyId`]s with a secret hashing key.
#[derive(Clone)]
pub struct KeyHasher {
    k0: u64,
    k1: u64,
}

impl std::fmt::Debug for KeyHasher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KeyHasher(..)")
    }
}

impl KeyHasher {
    /// A hasher with a key from the operating system's randomness (through
    /// std's hash seeds). Fine for an in-process store; instances that share a
    /// store need [`KeyHasher::from_secret`] with the same secret.
    pub fn random() -> Self {
        use std::hash::{BuildHasher, RandomState};
        let s = RandomState::new();
        Self {
            k0: s.hash_one(0x5eed_u64),
            k1: s.hash_one(0xc0ffee_u64),
        }
    }

    /// A hasher keyed by `secret` (any length; it is itself hashed down).
    pub fn from_secret(secret: &[u8]) -> Self {
        let mut h = SipHasher13::new_with_keys(0x736c_7569_6365_2d6b, 0x6579_2d68_6173_6865);
        h.write(secret);
        let k = h.finish128();
        Self { k0: k.h1, k1: k.h2 }
    }

    /// The identity of a client key.
    #[inline]
    pub fn key_id(&self, key: &str) -> KeyId {
        self.key_id_bytes(key.as_bytes())
    }

    /// The identity of a client key given in pieces: the same as of the
    /// pieces joined, without joining them.
    #[inline]
    pub fn key_id_pieces<'a>(&self, pieces: impl IntoIterator<Item = &'a [u8]>) -> KeyId {
        let mut h = SipHasher13::new_with_keys(self.k0, self.k1);
        for p in pieces {
            h.write(p);
        }
        KeyId(h.finish128().as_u128())
    }

    /// The identity of a client key given as bytes.
    #[inline]
    pub fn key_id_bytes(&self, key: &[u8]) -> KeyId {
        let mut h = SipHasher13::new_with_keys(self.k0, self.k1);
        h.write(key);
        KeyId(h.finish128().as_u128())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_secret_same_ids() {
        let a = KeyHasher::from_secret(b"s3cret");
        let b = KeyHasher::from_secret(b"s3cret");
        assert_eq!(a.key_id("k"), b.key_id("k"));
        assert_ne!(a.key_id("k"), a.key_id("l"));
        assert_ne!(KeyHasher::from_secret(b"other").key_id("k"), a.key_id("k"));
    }

    #[test]
    fn a_key_in_pieces_is_the_key_joined() {
        let h = KeyHasher::from_secret(b"s3cret");
        let pieces: [&[u8]; 4] = [b"remote_address", b"\x1f", b"10.0.0.1", b"\x1e"];
        assert_eq!(
            h.key_id_pieces(pieces),
            h.key_id("remote_address\x1f10.0.0.1\x1e")
        );
    }

    #[test]
    fn hex_never_contains_the_key() {
        let id = KeyHasher::random().key_id("super-secret-api-key");
        assert_eq!(id.to_hex().len(), 32);
        assert!(!id.to_hex().contains("secret"));
    }
}
