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
//! the sliding log a list of them, at most `burst` entries, after its debt
//! (one double) while it has some. A key in debt ([`RedisStore::debit`])
//! outlives its `idle_at` too, which counts the debt.
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

mod backend;
mod debit;
mod dispatch;
mod give_back;
mod in_turn;
mod key;
mod reply;
mod request;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use redis::aio::MultiplexedConnection;
use sluice_core::{Decision, Limiter};
use sluice_store::{Checked, KeyId};
use smallvec::SmallVec;

use crate::RedisStoreError;
use crate::batch::{BatchConfig, Batcher};
use crate::script::{DecisionScript, LimitParams, ScriptCheck};
use crate::topology::Topology;

use backend::Backend;
pub(crate) use backend::Conn;
pub use key::key_name;
use key::{hash_tag, tagged_key_name};
use reply::in_request_order;
pub(crate) use request::Prepared;
use request::{check_cost, group_by_tag, merge, params_of};

/// Checks with their limits' parameters, inline for the usual few.
type PreparedChecks<'a> = SmallVec<[Prepared<'a>; 4]>;

/// `checks` with their limits' parameters computed from their limiters.
fn prepare<'a>(checks: &[RedisCheck<'a>]) -> PreparedChecks<'a> {
    checks.iter().map(Prepared::from).collect()
}

/// One limit to check for one client key.
///
/// It names its limit by a [`Limiter`], so the store computes the script's
/// parameters of the limit on each call (a few integer divisions). The
/// shared store the engine uses ([`RedisRemote`](crate::RedisRemote))
/// computes them once instead, when a limit's counter is registered, and
/// reads them back per request.
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

    /// The id under which this store holds concurrency slots in Redis
    /// (random, below 2^52, one per store and its clones): each instance's
    /// slots are leased apart, so that those of an instance that dies come
    /// back one lease later (see docs/redis.md).
    pub fn instance_id(&self) -> u64 {
        self.inner.script.instance()
    }

    /// The nodes it decides on, unless it runs over one plain connection
    /// (tests and benchmarks).
    pub fn topology(&self) -> Option<&Topology> {
        self.inner.backend.topology()
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
        self.decide(&prepare(checks), None).await
    }

    /// [`check`](Self::check) of checks whose parameters are already
    /// computed (a registered counter's).
    pub(crate) async fn check_prepared(
        &self,
        checks: &[Prepared<'_>],
    ) -> Result<Checked, RedisStoreError> {
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
        self.decide(&prepare(checks), Some(now_us)).await
    }

    /// Whether the script decides `limiter` exactly as sluice-core does, or
    /// within the tolerance documented on the script (very long windows).
    #[doc(hidden)]
    pub fn is_exact(limiter: &Limiter) -> bool {
        LimitParams::compute(limiter).is_some_and(|p| p.is_exact())
    }

    async fn decide(
        &self,
        checks: &[Prepared<'_>],
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
        let (tags, members) = group_by_tag(&items);
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
        let decisions = in_request_order(&unique, &index)?;
        Ok(Checked { allowed, decisions })
    }

    /// The common case: one limit, one key, one hash tag.
    async fn decide_one(
        &self,
        c: &Prepared<'_>,
        now_us: Option<u64>,
    ) -> Result<Checked, RedisStoreError> {
        let params = params_of(c)?;
        check_cost(c.cost, &params)?;
        let key = tagged_key_name(c.tag, c.key);
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
}
