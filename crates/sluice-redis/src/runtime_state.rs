//! Runtime state shared by every instance: plans assigned at run time and
//! burst credits, in Redis.
//!
//! # Keys
//!
//! Three keys, all under the hash tag `{runtime}` (one Cluster slot, one
//! shard), so that each script below touches one node atomically:
//!
//! | key | type | holds |
//! |---|---|---|
//! | `sluice:{runtime}:plans` | hash | field: the client's [`KeyId`] in hex; value: the plan |
//! | `sluice:{runtime}:credits` | hash | field: the key id in hex; value: the balance |
//! | `sluice:{runtime}:plans:version`, `…:credits:version` | string | bumped by every write to the hash |
//!
//! A client is named by its keyed hash ([`KeyId::to_hex`]), never by its
//! raw key: like limit state, nothing in Redis reveals an API key.
//!
//! # Reads and writes
//!
//! Every write is a small Lua script that changes the hash and increments
//! its version in one atomic step. Each instance runs [`spawn_watch`]: every
//! interval it reads both versions (one `MGET`) and reloads a hash
//! (`HGETALL`) only when its version moved, handing it to a
//! [`RuntimeSink`]. A change made on one instance is therefore seen by all
//! within one interval plus a round trip.
//!
//! Spending credits ([`RuntimeState::spend_credits`]) checks the balance and
//! debits it in one script, so two instances can never spend the same
//! credit. While Redis is unreachable the watcher keeps the last state it
//! loaded (the sink is not called) and logs the outage once, and its
//! recovery once.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;
use sluice_store::KeyId;

use crate::RedisStoreError;
use crate::remote::RedisRemote;

/// The hash tag of every runtime key.
pub const RUNTIME_TAG: &str = "runtime";
/// The hash of runtime plan assignments.
pub const PLANS_KEY: &str = "sluice:{runtime}:plans";
/// The hash of burst credit balances.
pub const CREDITS_KEY: &str = "sluice:{runtime}:credits";
/// Bumped by every change to [`PLANS_KEY`].
pub const PLANS_VERSION_KEY: &str = "sluice:{runtime}:plans:version";
/// Bumped by every change to [`CREDITS_KEY`].
pub const CREDITS_VERSION_KEY: &str = "sluice:{runtime}:credits:version";

/// The largest balance Redis holds (`HINCRBY` works on signed 64-bit
/// integers); larger grants are capped to it.
pub const MAX_CREDITS: u64 = i64::MAX as u64;

/// The longest an admin write or a watcher read waits for Redis.
const CALL_TIMEOUT: Duration = Duration::from_secs(1);

/// KEYS: hash, version. ARGV: field, value (`""`: remove the field).
/// Returns 1 when the hash changed, else 0; the version moves only then.
const SET_FIELD: &str = r"
local old = redis.call('HGET', KEYS[1], ARGV[1])
if ARGV[2] == '' then
  if not old then return 0 end
  redis.call('HDEL', KEYS[1], ARGV[1])
else
  if old == ARGV[2] then return 0 end
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
end
redis.call('INCR', KEYS[2])
return 1
";

/// KEYS: credits, version. ARGV: field, cost. Debits `cost` if the balance
/// covers it and returns the new balance, else returns -1 and changes
/// nothing.
const SPEND: &str = r"
local need = tonumber(ARGV[2])
local balance = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
if balance == nil or balance < need then return -1 end
local rest = redis.call('HINCRBY', KEYS[1], ARGV[1], '-' .. ARGV[2])
if rest <= 0 then redis.call('HDEL', KEYS[1], ARGV[1]) end
redis.call('INCR', KEYS[2])
return rest
";

/// KEYS: credits, version. ARGV: field, amount. Gives `amount` back.
const REFUND: &str = r"
local rest = redis.call('HINCRBY', KEYS[1], ARGV[1], ARGV[2])
redis.call('INCR', KEYS[2])
return rest
";

/// The versions of the two hashes (0 before their first write).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Versions {
    /// The version of the plans hash.
    pub plans: u64,
    /// The version of the credits hash.
    pub credits: u64,
}

/// Plans and credits in Redis, through a [`RedisRemote`]'s connections,
/// with this instance's copy of the credit balances (kept current by the
/// watcher). Cheap to clone.
#[derive(Debug, Clone)]
pub struct RuntimeState {
    remote: Arc<RedisRemote>,
    set_field: Arc<redis::Script>,
    spend: Arc<redis::Script>,
    refund: Arc<redis::Script>,
    /// The balances as last loaded or changed here: a request spends
    /// credits (a round trip) only for a key this copy says has enough.
    pub(crate) mirror: Arc<Mutex<HashMap<KeyId, u64>>>,
}

impl RuntimeState {
    /// The runtime state in the Redis deployment of `remote`.
    pub fn new(remote: Arc<RedisRemote>) -> Self {
        Self {
            remote,
            set_field: Arc::new(redis::Script::new(SET_FIELD)),
            spend: Arc::new(redis::Script::new(SPEND)),
            refund: Arc::new(redis::Script::new(REFUND)),
            mirror: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    /// A key's balance in this instance's copy.
    pub fn mirrored_credits(&self, key: KeyId) -> u64 {
        self.mirror.lock().get(&key).copied().unwrap_or(0)
    }

    pub(crate) fn mirror_credits(&self, key: KeyId, credits: u64) {
        let mut all = self.mirror.lock();
        if credits == 0 {
            all.remove(&key);
        } else {
            all.insert(key, credits);
        }
    }

    async fn call<T>(
        &self,
        timeout: Duration,
        run: impl AsyncFnOnce(&mut crate::store::Conn) -> redis::RedisResult<T>,
    ) -> Result<T, RedisStoreError> {
        let mut conn = self.remote.conn(RUNTIME_TAG)?;
        tokio::time::timeout(timeout, run(&mut conn))
            .await
            .map_err(|_| RedisStoreError::Timeout(timeout))?
            .map_err(RedisStoreError::from)
    }

    async fn set_field(
        &self,
        hash: &str,
        version: &str,
        key: KeyId,
        value: &str,
    ) -> Result<bool, RedisStoreError> {
        let changed: i64 = self
            .call(CALL_TIMEOUT, async |c| {
                self.set_field
                    .key(hash)
                    .key(version)
                    .arg(key.to_hex())
                    .arg(value)
                    .invoke_async(c)
                    .await
            })
            .await?;
        Ok(changed == 1)
    }

    /// Puts a client (by key id) on a plan.
    pub async fn set_plan(&self, key: KeyId, plan: &str) -> Result<(), RedisStoreError> {
        if plan.is_empty() {
            return Err(RedisStoreError::BadReply("an empty plan name".into()));
        }
        self.set_field(PLANS_KEY, PLANS_VERSION_KEY, key, plan)
            .await
            .map(drop)
    }

    /// Removes a client's plan assignment; returns whether it had one.
    pub async fn remove_plan(&self, key: KeyId) -> Result<bool, RedisStoreError> {
        self.set_field(PLANS_KEY, PLANS_VERSION_KEY, key, "").await
    }

    /// Sets a client's credit balance (0 removes it; capped at
    /// [`MAX_CREDITS`]).
    pub async fn set_credits(&self, key: KeyId, credits: u64) -> Result<(), RedisStoreError> {
        let value = match credits.min(MAX_CREDITS) {
            0 => String::new(),
            n => n.to_string(),
        };
        self.set_field(CREDITS_KEY, CREDITS_VERSION_KEY, key, &value)
            .await
            .map(drop)
    }

    /// A client's credit balance now.
    pub async fn credits(&self, key: KeyId) -> Result<u64, RedisStoreError> {
        let value: Option<String> = self
            .call(CALL_TIMEOUT, async |c| {
                redis::cmd("HGET")
                    .arg(CREDITS_KEY)
                    .arg(key.to_hex())
                    .query_async(c)
                    .await
            })
            .await?;
        Ok(value.and_then(|v| v.parse().ok()).unwrap_or(0))
    }

    /// Debits `cost` from a client's credits, atomically across instances,
    /// if the balance covers it: `Some(balance left)`, else `None` (nothing
    /// is debited). Waits at most `timeout` (a decision is waiting).
    pub async fn spend_credits(
        &self,
        key: KeyId,
        cost: u64,
        timeout: Duration,
    ) -> Result<Option<u64>, RedisStoreError> {
        let cost = cost.min(MAX_CREDITS);
        let rest: i64 = self
            .call(timeout, async |c| {
                self.spend
                    .key(CREDITS_KEY)
                    .key(CREDITS_VERSION_KEY)
                    .arg(key.to_hex())
                    .arg(cost)
                    .invoke_async(c)
                    .await
            })
            .await?;
        Ok(u64::try_from(rest).ok())
    }

    /// Gives back credits spent by [`spend_credits`](Self::spend_credits)
    /// for a request that was refused after all. Returns the key's balance
    /// after it.
    pub async fn refund_credits(&self, key: KeyId, amount: u64) -> Result<u64, RedisStoreError> {
        let amount = amount.min(MAX_CREDITS);
        let rest: i64 = self
            .call(CALL_TIMEOUT, async |c| {
                self.refund
                    .key(CREDITS_KEY)
                    .key(CREDITS_VERSION_KEY)
                    .arg(key.to_hex())
                    .arg(amount)
                    .invoke_async(c)
                    .await
            })
            .await?;
        Ok(u64::try_from(rest).unwrap_or(0))
    }

    /// The hashes' versions (one `MGET`).
    pub async fn versions(&self) -> Result<Versions, RedisStoreError> {
        let (plans, credits): (Option<u64>, Option<u64>) = self
            .call(CALL_TIMEOUT, async |c| {
                redis::cmd("MGET")
                    .arg(PLANS_VERSION_KEY)
                    .arg(CREDITS_VERSION_KEY)
                    .query_async(c)
                    .await
            })
            .await?;
        Ok(Versions {
            plans: plans.unwrap_or(0),
            credits: credits.unwrap_or(0),
        })
    }

    async fn load_hash(&self, hash: &str) -> Result<HashMap<KeyId, String>, RedisStoreError> {
        let all: Vec<(String, String)> = self
            .call(CALL_TIMEOUT, async |c| {
                redis::cmd("HGETALL").arg(hash).query_async(c).await
            })
            .await?;
        Ok(all
            .into_iter()
            .filter_map(|(field, value)| Some((parse_key_id(&field)?, value)))
            .collect())
    }

    /// Every runtime plan assignment, by key id. Fields that are not key
    /// ids are skipped.
    pub async fn plans(&self) -> Result<HashMap<KeyId, String>, RedisStoreError> {
        let mut plans = self.load_hash(PLANS_KEY).await?;
        plans.retain(|_, plan| !plan.is_empty());
        Ok(plans)
    }

    /// Every credit balance, by key id. Values that are not whole
    /// numbers are skipped.
    pub async fn all_credits(&self) -> Result<HashMap<KeyId, u64>, RedisStoreError> {
        Ok(self
            .load_hash(CREDITS_KEY)
            .await?
            .into_iter()
            .filter_map(|(k, v)| Some((k, v.parse::<u64>().ok().filter(|n| *n > 0)?)))
            .collect())
    }
}

/// A key id from its [`KeyId::to_hex`] form.
pub fn parse_key_id(hex: &str) -> Option<KeyId> {
    if hex.len() != 32 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u128::from_str_radix(hex, 16).ok().map(KeyId)
}

/// Receives the runtime state [`spawn_watch`] loads.
pub trait RuntimeSink: Send + Sync {
    /// Every plan assignment, replacing the previous set.
    fn plans_loaded(&self, plans: HashMap<KeyId, String>);
    /// Every credit balance, replacing the previous set.
    fn credits_loaded(&self, credits: HashMap<KeyId, u64>);
}

/// Polls the runtime state every `every` and hands each changed hash to
/// `sink` (both at the first successful poll). Ends when the sink is
/// dropped. Must be called within a tokio runtime.
pub fn spawn_watch(
    state: RuntimeState,
    sink: Weak<dyn RuntimeSink>,
    every: Duration,
) -> tokio::task::JoinHandle<()> {
    spawn_watch_with(state, every, move || sink.upgrade())
}

/// [`spawn_watch`] with the sink made anew at each poll by `sink` (the task
/// ends when it gives none).
pub(crate) fn spawn_watch_with(
    state: RuntimeState,
    every: Duration,
    mut sink: impl FnMut() -> Option<Arc<dyn RuntimeSink>> + Send + 'static,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut seen = Seen::default();
        let mut failing = false;
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let Some(sink) = sink() else { return };
            let polled = poll_once(&state, &*sink, &mut seen).await;
            report(&mut failing, polled);
        }
    })
}

/// Logs a watcher's outage once, and its recovery once.
fn report(failing: &mut bool, polled: Result<(), RedisStoreError>) {
    match polled {
        Ok(()) if *failing => {
            *failing = false;
            tracing::info!("runtime plans and credits are read from Redis again");
        }
        Ok(()) => {}
        Err(e) if !*failing => {
            *failing = true;
            tracing::warn!(
                error = %e,
                "cannot read runtime plans and credits from Redis: keeping the last ones loaded"
            );
        }
        Err(_) => {}
    }
}

/// The versions a watcher has loaded (`None`: not loaded yet).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Seen {
    /// The plans' version last loaded.
    pub plans: Option<u64>,
    /// The credits' version last loaded.
    pub credits: Option<u64>,
}

/// One poll: reads the versions and reloads each hash whose version moved
/// since `seen` (or that was never loaded).
pub async fn poll_once(
    state: &RuntimeState,
    sink: &dyn RuntimeSink,
    seen: &mut Seen,
) -> Result<(), RedisStoreError> {
    let now = state.versions().await?;
    if seen.plans != Some(now.plans) {
        sink.plans_loaded(state.plans().await?);
        seen.plans = Some(now.plans);
    }
    if seen.credits != Some(now.credits) {
        sink.credits_loaded(state.all_credits().await?);
        seen.credits = Some(now.credits);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_ids_round_trip_through_hex() {
        let id = KeyId(0x0123_4567_89ab_cdef_0011_2233_4455_6677);
        assert_eq!(parse_key_id(&id.to_hex()), Some(id));
        assert_eq!(parse_key_id("alice"), None);
        assert_eq!(parse_key_id(&"g".repeat(32)), None);
        assert_eq!(parse_key_id(&format!("+{}", "0".repeat(31))), None);
    }

    #[test]
    fn every_runtime_key_shares_one_hash_tag() {
        for k in [
            PLANS_KEY,
            CREDITS_KEY,
            PLANS_VERSION_KEY,
            CREDITS_VERSION_KEY,
        ] {
            assert!(k.starts_with("sluice:{runtime}:"), "{k}");
        }
    }
}
