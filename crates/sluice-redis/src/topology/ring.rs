//! A consistent-hash ring: which shard serves a hash tag.
//!
//! Every node owns [`VNODES`] points on a 64-bit circle, at the hashes of
//! `"<host>:<port>#<i>"`. A tag belongs to the node owning the first point
//! at or after the tag's hash (wrapping around). Adding a node only adds
//! points, so the only tags that move are those whose next point is now
//! one of the new node's: about 1/N of them, and all to the new node.
//! Removing a node moves only that node's tags.
//!
//! Why a ring with virtual nodes (rather than jump or rendezvous hashing):
//! it is keyed by node *names*, so the order of hosts in the URL does not
//! matter and any node can be added or removed, and a lookup is one hash
//! plus a binary search over `N × VNODES` points (no per-node work).
//!
//! The hash is FNV-1a (64 bit) followed by the MurmurHash3 64-bit
//! finalizer, written out here so that it never changes with a Rust or
//! crate upgrade: every Sluice instance, whatever its version, must send a
//! tag to the same node.

/// Points per node. 512 keeps every node's share within a few percent of
/// 1/N for small N (measured in `tests/it/topology_ring.rs`).
pub const VNODES: u32 = 512;

/// A consistent-hash ring over named nodes.
#[derive(Clone)]
pub struct Ring {
    /// Point hashes, ascending.
    points: Vec<u64>,
    /// `owners[i]` is the index (in the order given to [`Ring::new`]) of
    /// the node owning `points[i]`.
    owners: Vec<u32>,
    nodes: usize,
}

impl std::fmt::Debug for Ring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ring")
            .field("nodes", &self.nodes)
            .field("points", &self.points.len())
            .finish()
    }
}

impl Ring {
    /// A ring over nodes named `names` (e.g. `"10.0.0.1:6379"`). A node's
    /// index is its position in `names`; its points depend only on its name.
    pub fn new<S: AsRef<str>>(names: &[S]) -> Self {
        let mut points: Vec<(u64, &str, u32)> = Vec::with_capacity(names.len() * VNODES as usize);
        let mut label = String::new();
        for (index, name) in names.iter().enumerate() {
            let name = name.as_ref();
            for v in 0..VNODES {
                label.clear();
                label.push_str(name);
                label.push('#');
                label.push_str(&v.to_string());
                let owner = u32::try_from(index).unwrap_or(u32::MAX);
                points.push((stable_hash(label.as_bytes()), name, owner));
            }
        }
        // Ties (vanishingly rare) are broken by name, so that the ring does
        // not depend on the order of the names.
        points.sort_unstable_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.cmp(b.1)));
        Self {
            owners: points.iter().map(|p| p.2).collect(),
            points: points.into_iter().map(|p| p.0).collect(),
            nodes: names.len(),
        }
    }

    /// The number of nodes.
    pub fn len(&self) -> usize {
        self.nodes
    }

    /// Whether the ring has no nodes.
    pub fn is_empty(&self) -> bool {
        self.nodes == 0
    }

    /// The index of the node serving `tag` (0 on an empty ring).
    pub fn node(&self, tag: &str) -> usize {
        if self.points.is_empty() {
            return 0;
        }
        let h = stable_hash(tag.as_bytes());
        let i = self.points.partition_point(|&p| p < h);
        let i = if i == self.points.len() { 0 } else { i };
        self.owners[i] as usize
    }
}

/// A hash that never changes: FNV-1a 64 then the Murmur3 finalizer (FNV
/// alone mixes the last bytes poorly; the finalizer spreads every input bit
/// over the whole word).
pub fn stable_hash(bytes: &[u8]) -> u64 {
    let mut h = sluice_store::fnv1a(bytes);
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^= h >> 33;
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_is_pinned() {
        // Changing these values reshuffles every deployment's keys.
        assert_eq!(stable_hash(b""), 0xefd0_1f60_ba99_2926);
        assert_eq!(
            stable_hash(b"0123456789abcdef0123456789abcdef"),
            0x26d5_2149_8b20_56f3
        );
    }

    #[test]
    fn one_node_takes_everything() {
        let ring = Ring::new(&["a:1"]);
        assert_eq!(ring.node("x"), 0);
        assert_eq!(ring.node("y"), 0);
    }

    #[test]
    fn empty_ring_answers_zero() {
        let ring = Ring::new::<&str>(&[]);
        assert!(ring.is_empty());
        assert_eq!(ring.node("x"), 0);
    }
}
