//! Key identities: a keyed hash of the client key.
//!
//! Stores never hold a raw client key (an API key is a secret). They hold a
//! 128-bit keyed hash of the key under secret seeds. The same client has
//! the same id under every limit, so a store can place all of one client's
//! state together (one shard, one Redis hash slot); the limits keep their
//! state apart themselves.
//!
//! Two hashers, for two lifetimes of an id:
//!
//! - **A hasher keyed by a shared secret** ([`KeyHasher::from_secret`]):
//!   its ids leave the process (Redis key names, runtime plans and credits
//!   stored by id), so they are SipHash-1-3's with a 128-bit output, a
//!   keyed pseudo-random function, and stay the same across versions and
//!   between instances.
//! - **A random hasher** ([`KeyHasher::random`]: the in-memory store's)
//!   names keys that never leave this process. Its id is two 64-bit
//!   foldhash hashes of the key under seeds drawn from the
//!   operating system's randomness when the hasher is made: a few
//!   nanoseconds, where SipHash's rounds cost tens. foldhash is not a
//!   cryptographic function; its authors design it to resist collision
//!   flooding by anyone who does not know its seeds, which never leave
//!   the process (ids are shown only to operators, in logs and the status
//!   page). `docs/security.md` states the collision bound.
//!
//! An IPv4 address's text in its one canonical form (`192.0.2.1`: four
//! decimal octets, no leading zeros) names the same client as the address
//! itself: a random hasher hashes the address's four bytes under seeds of
//! their own (so that no key's bytes share its id), and a client's peer
//! address is named without writing its text ([`KeyHasher::key_id_v4`]);
//! its text, given as a key, is read back to the address first.

use std::hash::Hasher;
use std::net::Ipv4Addr;

use foldhash::SharedSeed;
use foldhash::fast::FoldHasher;
use siphasher::sip128::{Hasher128, SipHasher13};
use smallvec::SmallVec;

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
pub struct KeyHasher(Keys);

/// A hasher's secret: SipHash's two keys for a hasher keyed by a shared
/// secret, or a random hasher's foldhash seeds (see the module docs).
#[derive(Clone)]
enum Keys {
    Secret(u64, u64),
    Random(Local),
}

/// The seeds of a random hasher: one per half of an id, for keys and for
/// IPv4 addresses, and the shared seed all use.
#[derive(Clone)]
struct Local {
    keys: [u64; 2],
    v4: [u64; 2],
    shared: SharedSeed,
}

impl std::fmt::Debug for KeyHasher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KeyHasher(..)")
    }
}

impl KeyHasher {
    /// A hasher with seeds from the operating system's randomness (through
    /// std's hash seeds), for ids that never leave this process. Instances
    /// that share a store need [`KeyHasher::from_secret`] with the same
    /// secret.
    pub fn random() -> Self {
        use std::hash::{BuildHasher, RandomState};
        let s = RandomState::new();
        Self(Keys::Random(Local {
            keys: [s.hash_one(0xa_u64), s.hash_one(0xb_u64)],
            v4: [s.hash_one(0x4a_u64), s.hash_one(0x4b_u64)],
            shared: SharedSeed::from_u64(s.hash_one(0x5eed_u64)),
        }))
    }

    /// A hasher keyed by `secret` (any length; it is itself hashed down).
    pub fn from_secret(secret: &[u8]) -> Self {
        let mut h = SipHasher13::new_with_keys(0x736c_7569_6365_2d6b, 0x6579_2d68_6173_6865);
        h.write(secret);
        let k = h.finish128();
        Self(Keys::Secret(k.h1, k.h2))
    }

    /// The identity of a client key.
    #[inline]
    pub fn key_id(&self, key: &str) -> KeyId {
        self.key_id_bytes(key.as_bytes())
    }

    /// The identity of a client key given in pieces: the same as of the
    /// pieces joined.
    #[inline]
    pub fn key_id_pieces<'a>(&self, pieces: impl IntoIterator<Item = &'a [u8]>) -> KeyId {
        match &self.0 {
            Keys::Random(_) => {
                // foldhash reads a key whole: the pieces are joined, on the
                // stack while they fit.
                let mut joined: SmallVec<[u8; 64]> = SmallVec::new();
                for p in pieces {
                    joined.extend_from_slice(p);
                }
                self.key_id_bytes(&joined)
            }
            Keys::Secret(k0, k1) => {
                let mut h = SipHasher13::new_with_keys(*k0, *k1);
                for p in pieces {
                    h.write(p);
                }
                KeyId(h.finish128().as_u128())
            }
        }
    }

    /// The identity of an IPv4 address's text (`a.b.c.d`), which `text`
    /// gives: a random hasher names the address by its bytes and never
    /// calls it; a hasher keyed by a secret hashes the text.
    ///
    /// ```
    /// use std::net::Ipv4Addr;
    /// let h = sluice_store::KeyHasher::from_secret(b"s3cret");
    /// let ip = Ipv4Addr::new(192, 0, 2, 1);
    /// assert_eq!(h.key_id_v4(ip, || ip.to_string()), h.key_id("192.0.2.1"));
    /// ```
    #[inline]
    pub fn key_id_v4<T: AsRef<[u8]>>(&self, ip: Ipv4Addr, text: impl FnOnce() -> T) -> KeyId {
        match &self.0 {
            Keys::Random(local) => local.v4(ip),
            Keys::Secret(..) => self.key_id_bytes(text().as_ref()),
        }
    }

    /// The identity of a client key given as bytes.
    #[inline]
    pub fn key_id_bytes(&self, key: &[u8]) -> KeyId {
        match &self.0 {
            Keys::Random(local) => match canonical_v4(key) {
                Some(ip) => local.v4(ip),
                None => local.id(local.keys, |h| h.write(key)),
            },
            Keys::Secret(k0, k1) => {
                let mut h = SipHasher13::new_with_keys(*k0, *k1);
                h.write(key);
                KeyId(h.finish128().as_u128())
            }
        }
    }
}

impl Local {
    /// The id of what `feed` writes: one hash per half, each under its
    /// own seed of `seeds`.
    #[inline(always)]
    fn id(&self, seeds: [u64; 2], feed: impl Fn(&mut FoldHasher<'_>)) -> KeyId {
        let half = |seed: u64| {
            let mut h = FoldHasher::with_seed(seed, &self.shared);
            feed(&mut h);
            h.finish()
        };
        KeyId((u128::from(half(seeds[0])) << 64) | u128::from(half(seeds[1])))
    }

    /// The id of an IPv4 address: its four bytes, under the addresses'
    /// seeds.
    #[inline]
    fn v4(&self, ip: Ipv4Addr) -> KeyId {
        self.id(self.v4, |h| h.write_u32(ip.to_bits()))
    }
}

/// The address whose canonical text `text` is: `None` for any other text,
/// `01.2.3.4` and `1.2.3` included. Most keys that are not addresses stop
/// at the first test.
#[inline]
fn canonical_v4(text: &[u8]) -> Option<Ipv4Addr> {
    if text.len() < 7 || text.len() > 15 || !text[0].is_ascii_digit() {
        return None;
    }
    let mut octets = [0u8; 4];
    let mut parts = text.split(|&b| b == b'.');
    for octet in &mut octets {
        let part = parts.next()?;
        if part.is_empty() || part.len() > 3 || (part.len() > 1 && part[0] == b'0') {
            return None;
        }
        let mut value = 0u16;
        for &d in part {
            if !d.is_ascii_digit() {
                return None;
            }
            value = value * 10 + u16::from(d - b'0');
        }
        *octet = u8::try_from(value).ok()?;
    }
    parts.next().is_none().then_some(Ipv4Addr::from(octets))
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
    fn keys_of_every_length_and_padding_differ() {
        let h = KeyHasher::random();
        // The same bytes but for trailing zeros, every length up to past
        // the pieces' stack buffer: all different ids.
        let keys: Vec<Vec<u8>> = (0..=70)
            .flat_map(|n| [vec![0u8; n], vec![b'a'; n]])
            .collect();
        let ids: std::collections::HashSet<KeyId> =
            keys.iter().map(|k| h.key_id_bytes(k)).collect();
        assert_eq!(ids.len(), keys.len() - 1, "the two empty keys are one key");
    }

    #[test]
    fn pieces_agree_on_both_sides_of_the_boundary() {
        for h in [KeyHasher::random(), KeyHasher::from_secret(b"s3cret")] {
            // Across the 64 bytes joined on the stack, too.
            for n in 0..=100 {
                let key: Vec<u8> = (0..n).map(|i| b'a' + (i % 26) as u8).collect();
                let (a, b) = key.split_at(n / 3);
                assert_eq!(h.key_id_pieces([a, b]), h.key_id_bytes(&key), "length {n}");
            }
        }
    }

    #[test]
    fn a_million_addresses_have_a_million_ids_and_low_halves() {
        // The store keys a shard's map by an id's low half: two clients of
        // one limit would share a state if theirs agreed in a shard.
        let h = KeyHasher::random();
        let lows: std::collections::HashSet<u64> = (0..1u32 << 20)
            .map(|i| h.key_id_v4(Ipv4Addr::from(0x0a00_0000 | i), || "").low())
            .collect();
        assert_eq!(lows.len(), 1 << 20);
    }

    #[test]
    fn random_hashers_name_short_keys_apart() {
        let (a, b) = (KeyHasher::random(), KeyHasher::random());
        assert_ne!(a.key_id("10.0.0.1"), b.key_id("10.0.0.1"));
    }

    #[test]
    fn ids_under_a_secret_stay_what_they_were() {
        // Stored in Redis by earlier versions: the function must not change
        // (SipHash-1-3, 128 bits, whatever the key's length).
        let h = KeyHasher::from_secret(b"s3cret");
        let Keys::Secret(k0, k1) = h.0 else {
            unreachable!("a hasher keyed by a secret")
        };
        let mut sip = SipHasher13::new_with_keys(k0, k1);
        sip.write(b"10.0.0.1");
        assert_eq!(h.key_id("10.0.0.1"), KeyId(sip.finish128().as_u128()));
        // The id this key has had since the first version.
        assert_eq!(
            h.key_id("10.0.0.1").to_hex(),
            "12af740c749c28bb533ff34894aedae0"
        );
    }

    #[test]
    fn an_address_and_its_text_are_one_key() {
        for h in [KeyHasher::random(), KeyHasher::from_secret(b"s3cret")] {
            for ip in ["0.0.0.0", "192.0.2.1", "10.255.0.9", "255.255.255.255"] {
                let addr: Ipv4Addr = ip.parse().unwrap();
                assert_eq!(h.key_id_v4(addr, || ip), h.key_id(ip), "{ip}");
                let (a, b) = ip.split_at(3);
                assert_eq!(h.key_id_pieces([a.as_bytes(), b.as_bytes()]), h.key_id(ip));
            }
        }
    }

    #[test]
    fn only_the_canonical_text_is_an_address() {
        let h = KeyHasher::random();
        let one = h.key_id("1.2.3.4");
        // Spellings that are not the address's one text are other keys.
        for other in [
            "01.2.3.4",
            "1.2.3.04",
            "1.2.3",
            "1.2.3.4.",
            " 1.2.3.4",
            "1.2.3.256",
        ] {
            assert_ne!(h.key_id(other), one, "{other}");
        }
        // The address's block is no padded key's: the bytes 1, 2, 3, 4 as a
        // key of their own, and padded to 15 bytes, are other keys.
        assert_ne!(h.key_id_bytes(&[1, 2, 3, 4]), one);
        let mut padded = [0u8; 15];
        padded[..4].copy_from_slice(&[1, 2, 3, 4]);
        assert_ne!(h.key_id_bytes(&padded), one);
    }

    proptest::proptest! {
        #[test]
        fn an_address_is_read_from_its_text_alone(
            bits: u32,
            text in proptest::collection::vec(
                proptest::sample::select(b"0123456789.a".to_vec()), 0..16),
        ) {
            let ip = Ipv4Addr::from(bits);
            proptest::prop_assert_eq!(canonical_v4(ip.to_string().as_bytes()), Some(ip));
            let read = canonical_v4(&text);
            let exact = std::str::from_utf8(&text)
                .ok()
                .and_then(|t| t.parse::<Ipv4Addr>().ok())
                .filter(|ip| ip.to_string().as_bytes() == text.as_slice());
            proptest::prop_assert_eq!(read, exact);
        }

        #[test]
        fn near_addresses_are_read_only_when_canonical(
            octets in proptest::array::uniform4(0u16..300),
            zeros in proptest::array::uniform4(proptest::bool::weighted(0.2)),
        ) {
            let text: Vec<String> = octets
                .iter()
                .zip(zeros)
                .map(|(o, z)| if z { format!("0{o}") } else { o.to_string() })
                .collect();
            let text = text.join(".");
            let canonical = octets.iter().all(|&o| o < 256) && !zeros.contains(&true);
            let read = canonical_v4(text.as_bytes());
            proptest::prop_assert_eq!(read.is_some(), canonical, "{}", text);
            if let Some(ip) = read {
                proptest::prop_assert_eq!(ip.to_string(), text);
            }
        }
    }

    #[test]
    fn hex_never_contains_the_key() {
        let id = KeyHasher::random().key_id("super-secret-api-key");
        assert_eq!(id.to_hex().len(), 32);
        assert!(!id.to_hex().contains("secret"));
    }
}
