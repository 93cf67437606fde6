//! The Redis store: all-or-nothing decisions over several limits in one
//! atomic Lua step on Redis's own clock.
//!
//! # Keys
//!
//! A check's state lives at `sluice:{<key id>}:<limit tag>`: the client's
//! [`KeyId`] in hex (a keyed hash; the raw key never reaches Redis) as the
//! hash tag, so all of one client's limits share one Cluster slot, and a
//! short, stable, non-secret hash of [`RedisCheck::limit_id`]
//! ([`limit_tag`](sluice_store::limit_tag), in hex). Every key
//! outlives its state's `idle_at` (sluice-core: when the limit is full
//! again, and the key can be forgotten) and expires within twice the time
//! to get there: a write keeps the key's TTL when it still covers the new
//! `idle_at` and otherwise sets twice what is needed, so a busy key rarely
//! pays for a TTL update and an idle client costs nothing for long.
//!
//! State values are packed little-endian doubles (see `lua/decide.lua`),
//! the sliding log a list of them, at most `burst` entries.
//!
//! # Batching
//!
//! With batching on ([`RedisStore::new`], [`BatchConfig`]), concurrent
//! requests headed to one node share a script call: see the `batch`
//! module. Each request stays its own all-or-nothing group. In Redis
//! Cluster, requests are not batched across slots; concurrent calls are
//! pipelined on the cluster connection instead.
//!
//! # One request, several limits
//!
//! Checks naming the same (limit, key) are merged first, their costs summed,
//! as the memory store does. When every hash tag of a request lives on one
//! node, the whole request is one group of one script call: atomic. When
//! they do not (Redis Cluster, where each slot is decided alone, or shards
//! on different nodes), the request is decided one hash tag after another;
//! if a later tag refuses, the earlier ones, already committed, are refunded
//! by the script's refund mode. In that small window (one round trip) the
//! earlier limits look charged to other requests, which may therefore be
//! refused a little early; nothing is ever admitted beyond a limit. A
//! refund cannot always restore the exact prior state (a bucket that drained
//! to empty meanwhile stays empty; a sliding log gives the cost back from
//! its newest entries), and always errs on the strict side.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use redis::aio::{ConnectionLike, MultiplexedConnection};
use sluice_core::{CheckError, Decision, Limiter};
use sluice_store::{Checked, KeyId};

use crate::RedisStoreError;
use crate::batch::{BatchConfig, Batcher};
use crate::script::{DecisionScript, GroupReply, LimitParams, Mode, ScriptCheck};
use crate::topology::{Route, Topology};

/// One limit to check for one client key.
#[derive(Debug, Clone, Copy)]
pub struct RedisCheck<'a> {
    /// A stable identity of the limit's definition (its name, algorithm,
    /// rate and burst): a changed definition gets fresh counters.
    pub limit_id: &'a str,
    /// The limit's algorithm and parameters.
    pub limiter: &'a Limiter,
    /// The client key's keyed hash; the raw key never reaches Redis.
    pub key: KeyId,
    /// The request's cost.
    pub cost: u64,
    /// The cost that must still be left in the limit after the charge: the
    /// check is admitted only if `cost + reserve` fits, and its `remaining`
    /// and `retry_after` are counted above the reserve. 0 for a plain check.
    /// Checked atomically with the charge (see [`RedisStore::check`]).
    pub reserve: u64,
}

/// The Redis key holding the state of `limit_id` for `key`:
/// `sluice:{<key id hex>}:<limit tag>`, the limit tag being
/// [`limit_tag`](sluice_store::limit_tag) in 16 hex digits.
pub fn key_name(limit_id: &str, key: KeyId) -> String {
    use std::fmt::Write;
    let mut name = String::with_capacity(KEY_NAME_LEN);
    // Writing to a String cannot fail.
    let _ = write!(
        name,
        "sluice:{{{:032x}}}:{:016x}",
        key.0,
        sluice_store::limit_tag(limit_id)
    );
    name
}

/// The length of every key name.
const KEY_NAME_LEN: usize = 7 + 34 + 1 + 16;

/// The hash tag (the key id in hex) of a name made by [`key_name`].
fn hash_tag(name: &str) -> &str {
    name.get(8..40).unwrap_or(name)
}

/// A connection to one node: a topology route, or a plain connection.
#[derive(Clone)]
pub(crate) enum Conn {
    Route(Route),
    Direct(MultiplexedConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(
        &'a mut self,
        cmd: &'a redis::Cmd,
    ) -> redis::RedisFuture<'a, redis::Value> {
        match self {
            Self::Route(c) => c.req_packed_command(cmd),
            Self::Direct(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        match self {
            Self::Route(c) => c.req_packed_commands(cmd, offset, count),
            Self::Direct(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Route(c) => c.get_db(),
            Self::Direct(c) => c.get_db(),
        }
    }
}

enum Backend {
    Topology(Topology),
    Direct(MultiplexedConnection),
    /// One connection, but every hash tag treated as its own Cluster slot
    /// (tests of the commit-in-turn path).
    PerTag(MultiplexedConnection),
}

impl Backend {
    fn node_of(&self, tag: &str) -> Option<usize> {
        match self {
            Self::Topology(t) => t.node_of(tag),
            Self::Direct(_) => Some(0),
            Self::PerTag(_) => None,
        }
    }

    fn conn(&self, tag: &str) -> Conn {
        match self {
            Self::Topology(t) => Conn::Route(t.route(tag)),
            Self::Direct(c) | Self::PerTag(c) => Conn::Direct(c.clone()),
        }
    }
}

struct Inner {
    backend: Backend,
    script: DecisionScript,
    batching: Option<BatchConfig>,
    batchers: Mutex<HashMap<usize, Batcher>>,
}

/// Limiter state in Redis. Cheap to clone; clones share connections and
/// batches.
#[derive(Clone)]
pub struct RedisStore {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("batching", &self.inner.batching)
            .finish_non_exhaustive()
    }
}

/// One unique (limit, key) of a request.
struct Item<'a> {
    limit_id: &'a str,
    key: KeyId,
    check: ScriptCheck,
}

impl RedisStore {
    /// A store over connected nodes, batching concurrent decisions with the
    /// default [`BatchConfig`].
    pub fn new(topology: Topology) -> Self {
        Self::with_batching(topology, Some(BatchConfig::default()))
    }

    /// A store over connected nodes; `None` sends one script call per
    /// request (no batching).
    pub fn with_batching(topology: Topology, batching: Option<BatchConfig>) -> Self {
        Self::build(Backend::Topology(topology), batching)
    }

    /// A store over one plain multiplexed connection to a single node (tests
    /// and benchmarks).
    #[doc(hidden)]
    pub fn from_connection(conn: MultiplexedConnection, batching: Option<BatchConfig>) -> Self {
        Self::build(Backend::Direct(conn), batching)
    }

    /// A store over one connection that decides each hash tag on its own,
    /// as in Redis Cluster: requests over several client keys commit in
    /// turn and refund on refusal. For tests.
    #[doc(hidden)]
    pub fn from_connection_per_tag(conn: MultiplexedConnection) -> Self {
        Self::build(Backend::PerTag(conn), None)
    }

    fn build(backend: Backend, batching: Option<BatchConfig>) -> Self {
        Self {
            inner: Arc::new(Inner {
                backend,
                script: DecisionScript::default(),
                batching,
                batchers: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// A connection to the node that holds keys tagged `tag`.
    pub(crate) fn conn(&self, tag: &str) -> Conn {
        self.inner.backend.conn(tag)
    }

    /// Decides every check together: all are charged, or none.
    ///
    /// Decisions come back in the order of `checks`. A cost above a limit's
    /// capacity is an error ([`RedisStoreError::Check`]) and changes nothing.
    ///
    /// A check with a [`reserve`](RedisCheck::reserve) is admitted only if
    /// the limit keeps at least that much after its charge; that is decided
    /// in the same atomic script step as the charge, so concurrent requests
    /// from any number of instances never take a limit below a reserve. For
    /// the token bucket and GCRA the state does not depend on the burst,
    /// only on the rate, so the same key may be decided with a larger burst
    /// and a reserve (a delay limit's extended bucket, which only those two
    /// algorithms allow).
    pub async fn check(&self, checks: &[RedisCheck<'_>]) -> Result<Checked, RedisStoreError> {
        self.decide(checks, None).await
    }

    /// [`check`](Self::check) at a given time, in microseconds, instead of
    /// Redis's clock. For conformance tests only: never mix it with real
    /// time on the same keys. Not batched.
    #[doc(hidden)]
    pub async fn check_at(
        &self,
        checks: &[RedisCheck<'_>],
        now_us: u64,
    ) -> Result<Checked, RedisStoreError> {
        self.decide(checks, Some(now_us)).await
    }

    /// Whether the script decides `limiter` exactly as sluice-core does, or
    /// within the tolerance documented on the script (very long windows).
    #[doc(hidden)]
    pub fn is_exact(limiter: &Limiter) -> bool {
        LimitParams::of(limiter).is_some_and(|p| p.is_exact())
    }

    async fn decide(
        &self,
        checks: &[RedisCheck<'_>],
        now_us: Option<u64>,
    ) -> Result<Checked, RedisStoreError> {
        if checks.is_empty() {
            return Ok(Checked {
                allowed: true,
                decisions: Default::default(),
            });
        }
        if let [one] = checks {
            return self.decide_one(one, now_us).await;
        }
        let (items, index) = merge(checks)?;

        // Group by hash tag (the key id), in order of first appearance.
        let mut tags: Vec<KeyId> = Vec::new();
        let mut members: Vec<Vec<usize>> = Vec::new();
        for (i, item) in items.iter().enumerate() {
            match tags.iter().position(|k| *k == item.key) {
                Some(t) => members[t].push(i),
                None => {
                    tags.push(item.key);
                    members.push(vec![i]);
                }
            }
        }
        let hex: Vec<String> = tags.iter().map(KeyId::to_hex).collect();
        let nodes: Vec<Option<usize>> = hex.iter().map(|t| self.inner.backend.node_of(t)).collect();
        let one_node = nodes[0].is_some() && nodes.iter().all(|n| *n == nodes[0]);

        let mut unique: Vec<Option<Decision>> = vec![None; items.len()];
        let allowed = if one_node {
            let group: Vec<ScriptCheck> = items.into_iter().map(|i| i.check).collect();
            let reply = self.run_group(nodes[0], &hex[0], group, now_us).await?;
            for (slot, d) in unique.iter_mut().zip(reply.decisions) {
                *slot = Some(d);
            }
            reply.allowed
        } else {
            self.decide_in_turn(&items, &members, &hex, &nodes, now_us, &mut unique)
                .await?
        };
        let decisions = index
            .iter()
            .map(|i| unique[*i].ok_or_else(|| RedisStoreError::BadReply("missing decision".into())))
            .collect::<Result<_, _>>()?;
        Ok(Checked { allowed, decisions })
    }

    /// The common case: one limit, one key, one hash tag.
    async fn decide_one(
        &self,
        c: &RedisCheck<'_>,
        now_us: Option<u64>,
    ) -> Result<Checked, RedisStoreError> {
        let params = params_of(c)?;
        check_cost(c.cost, &params)?;
        let key = key_name(c.limit_id, c.key);
        let tag = hash_tag(&key).to_owned();
        let node = self.inner.backend.node_of(&tag);
        let group = vec![ScriptCheck {
            key,
            params,
            cost: c.cost,
        }];
        let reply = self.run_group(node, &tag, group, now_us).await?;
        Ok(Checked {
            allowed: reply.allowed,
            decisions: reply.decisions.into_iter().collect(),
        })
    }

    /// Commits the groups one after another; on a refusal, refunds those
    /// already committed and peeks the rest.
    async fn decide_in_turn(
        &self,
        items: &[Item<'_>],
        members: &[Vec<usize>],
        hex: &[String],
        nodes: &[Option<usize>],
        now_us: Option<u64>,
        unique: &mut [Option<Decision>],
    ) -> Result<bool, RedisStoreError> {
        let group_of = |t: usize| -> Vec<ScriptCheck> {
            members[t].iter().map(|i| items[*i].check.clone()).collect()
        };
        let mut refused = None;
        for t in 0..members.len() {
            let reply = match self.run_group(nodes[t], &hex[t], group_of(t), now_us).await {
                Ok(r) => r,
                Err(e) => {
                    self.refund_all(&(0..t).collect::<Vec<_>>(), &group_of, hex, now_us)
                        .await
                        .ok();
                    return Err(e);
                }
            };
            let ok = reply.allowed;
            fill(unique, &members[t], reply);
            if !ok {
                refused = Some(t);
                break;
            }
        }
        let Some(r) = refused else {
            return Ok(true);
        };
        for t in 0..r {
            let reply = self.refund(&hex[t], group_of(t), now_us).await?;
            fill(unique, &members[t], reply);
        }
        for t in r + 1..members.len() {
            let reply = self
                .run_direct(&hex[t], Mode::DryRun, group_of(t), now_us)
                .await?;
            fill(unique, &members[t], reply);
        }
        Ok(false)
    }

    async fn refund_all(
        &self,
        groups: &[usize],
        group_of: &impl Fn(usize) -> Vec<ScriptCheck>,
        hex: &[String],
        now_us: Option<u64>,
    ) -> Result<(), RedisStoreError> {
        for t in groups {
            self.refund(&hex[*t], group_of(*t), now_us).await?;
        }
        Ok(())
    }

    async fn refund(
        &self,
        tag: &str,
        group: Vec<ScriptCheck>,
        now_us: Option<u64>,
    ) -> Result<GroupReply, RedisStoreError> {
        let result = self.run_direct(tag, Mode::Refund, group, now_us).await;
        if let Err(e) = &result {
            tracing::warn!(error = %e, "refunding a partly committed request failed");
        }
        result
    }

    /// One group in a call of its own (not batched).
    async fn run_direct(
        &self,
        tag: &str,
        mode: Mode,
        group: Vec<ScriptCheck>,
        now_us: Option<u64>,
    ) -> Result<GroupReply, RedisStoreError> {
        let mut conn = self.inner.backend.conn(tag);
        let replies = self
            .inner
            .script
            .run(&mut conn, mode, &[&group], now_us)
            .await?;
        first(replies)
    }

    async fn run_group(
        &self,
        node: Option<usize>,
        tag: &str,
        group: Vec<ScriptCheck>,
        now_us: Option<u64>,
    ) -> Result<GroupReply, RedisStoreError> {
        if let (Some(node), Some(config), None) = (node, self.inner.batching, now_us) {
            let batcher = {
                let mut map = self
                    .inner
                    .batchers
                    .lock()
                    .unwrap_or_else(|e| e.into_inner());
                match map.get(&node) {
                    Some(b) => Some(b.clone()),
                    None => {
                        let started = Batcher::start(
                            self.inner.backend.conn(tag),
                            self.inner.script.clone(),
                            config,
                        );
                        if let Some(b) = &started {
                            map.insert(node, b.clone());
                        }
                        started
                    }
                }
            };
            // Outside a tokio runtime there is no dispatcher: call directly.
            if let Some(batcher) = batcher {
                return batcher.submit(group).await;
            }
        }
        self.run_direct(tag, Mode::Check, group, now_us).await
    }
}

fn first(replies: Vec<GroupReply>) -> Result<GroupReply, RedisStoreError> {
    replies
        .into_iter()
        .next()
        .ok_or_else(|| RedisStoreError::BadReply("no group in the reply".into()))
}

fn fill(unique: &mut [Option<Decision>], members: &[usize], reply: GroupReply) {
    for (i, d) in members.iter().zip(reply.decisions) {
        unique[*i] = Some(d);
    }
}

/// The unique (limit, key) checks with their summed costs, and for each
/// input check the index of its unique check. Fails on an impossible cost.
fn merge<'a>(checks: &[RedisCheck<'a>]) -> Result<(Vec<Item<'a>>, Vec<usize>), RedisStoreError> {
    let mut items: Vec<Item<'a>> = Vec::with_capacity(checks.len());
    let mut index = Vec::with_capacity(checks.len());
    for c in checks {
        match items
            .iter()
            .position(|u| u.key == c.key && u.limit_id == c.limit_id)
        {
            Some(i) => {
                let check = &mut items[i].check;
                check.cost = check.cost.saturating_add(c.cost);
                // The strictest reserve of the merged checks.
                if c.reserve > check.params.reserve() {
                    check.params = check.params.with_reserve(c.reserve);
                }
                index.push(i);
            }
            None => {
                let params = params_of(c)?;
                index.push(items.len());
                items.push(Item {
                    limit_id: c.limit_id,
                    key: c.key,
                    check: ScriptCheck {
                        key: key_name(c.limit_id, c.key),
                        params,
                        cost: c.cost,
                    },
                });
            }
        }
    }
    for item in &items {
        check_cost(item.check.cost, &item.check.params)?;
    }
    Ok((items, index))
}

fn params_of(c: &RedisCheck<'_>) -> Result<LimitParams, RedisStoreError> {
    LimitParams::of(c.limiter)
        .map(|p| p.with_reserve(c.reserve))
        .ok_or_else(|| {
            RedisStoreError::BadReply(format!(
                "cannot read the parameters of limit `{}`",
                c.limit_id
            ))
        })
}

/// A cost the limit can never admit is an error, before anything is sent.
fn check_cost(cost: u64, params: &LimitParams) -> Result<(), RedisStoreError> {
    let capacity = params.burst();
    if cost > capacity {
        return Err(CheckError::CostExceedsCapacity { cost, capacity }.into());
    }
    Ok(())
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
