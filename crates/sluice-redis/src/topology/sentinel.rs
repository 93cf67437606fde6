//! A master found through Redis Sentinel, followed across failovers.
//!
//! At start, the Sentinels are asked in turn
//! (`SENTINEL get-master-addr-by-name <name>`) and the first answer whose
//! node confirms `ROLE` = master wins. Requests then go to that master over
//! an auto-reconnecting connection.
//!
//! A failover shows up in one of two ways, and both make us ask the
//! Sentinels again:
//! - connection errors or timeouts (the master died): the request fails,
//!   and the Sentinels are asked in the background;
//! - a `READONLY` reply (the old master came back, or was demoted, as a
//!   replica): nothing was written, so the request is retried once on the
//!   new master as soon as the Sentinels name one.
//!
//! Re-resolution is single-flight and paced: at most one query round per
//! [`RESOLVE_INTERVAL`], however many requests fail at once.

use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use redis::aio::ConnectionManager;
use redis::{Cmd, RedisError, RedisResult, Value};

use super::TopologyOptions;
use super::single::{connect_node, lazy_node};
use crate::RedisStoreError;
use crate::url::{Connect as _, MasterAuth, NodeAddr};

/// The shortest time between two rounds of questions to the Sentinels.
pub const RESOLVE_INTERVAL: Duration = Duration::from_millis(200);

/// A Sentinel-managed master. Cheap to clone.
#[derive(Clone)]
pub(crate) struct SentinelMaster {
    shared: Arc<Shared>,
}

struct Shared {
    sentinels: Vec<NodeAddr>,
    name: String,
    auth: MasterAuth,
    options: TopologyOptions,
    current: RwLock<Arc<Master>>,
    /// When the Sentinels were last asked; held while asking (single flight).
    last_resolve: tokio::sync::Mutex<Option<Instant>>,
}

/// The master in use.
struct Master {
    host: String,
    port: u16,
    conn: ConnectionManager,
    /// Bumped at each switch, so that a request that failed on an old
    /// master does not trigger a second switch.
    generation: u64,
}

impl std::fmt::Debug for SentinelMaster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let current = self.current();
        f.debug_struct("SentinelMaster")
            .field("name", &self.shared.name)
            .field("sentinels", &self.shared.sentinels)
            .field("master", &format_args!("{}:{}", current.host, current.port))
            .field("generation", &current.generation)
            .finish()
    }
}

impl SentinelMaster {
    /// Finds the master `name` through `sentinels` and connects to it.
    pub(crate) async fn connect(
        sentinels: &[NodeAddr],
        name: &str,
        auth: &MasterAuth,
        options: &TopologyOptions,
    ) -> Result<Self, RedisStoreError> {
        let (host, port) = ask_sentinels(sentinels, name, auth, options).await?;
        let conn = connect_node(&auth.node(host.clone(), port), options).await?;
        let master = Master {
            host,
            port,
            conn,
            generation: 0,
        };
        Ok(Self {
            shared: Arc::new(Shared {
                sentinels: sentinels.to_vec(),
                name: name.to_owned(),
                auth: auth.clone(),
                options: options.clone(),
                current: RwLock::new(Arc::new(master)),
                last_resolve: tokio::sync::Mutex::new(Some(Instant::now())),
            }),
        })
    }

    /// The address of the master in use.
    pub(crate) fn master_addr(&self) -> (String, u16) {
        let m = self.current();
        (m.host.clone(), m.port)
    }

    /// The database in use on the master.
    pub(crate) fn db(&self) -> i64 {
        self.shared.auth.db
    }

    fn current(&self) -> Arc<Master> {
        let guard = self
            .shared
            .current
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        Arc::clone(&guard)
    }

    /// Sends one command to the master, following a failover.
    pub(crate) async fn send(&self, cmd: &Cmd) -> RedisResult<Value> {
        let master = self.current();
        let mut conn = master.conn.clone();
        let result = conn.send_packed_command(cmd).await;
        match &result {
            Err(e) if is_readonly(e) => {}
            Ok(Value::ServerError(e)) if e.code() == "READONLY" => {}
            Err(e) if is_connection_trouble(e) => {
                self.refresh_in_background(master.generation);
                return result;
            }
            _ => return result,
        }
        // READONLY: nothing was written; retry once on the new master.
        self.refresh(master.generation).await;
        let now = self.current();
        if now.generation == master.generation {
            return result;
        }
        let mut conn = now.conn.clone();
        conn.send_packed_command(cmd).await
    }

    /// Sends a pipeline to the master. A failover triggers re-resolution
    /// but no retry: some commands of the pipeline may have run.
    pub(crate) async fn send_pipeline(
        &self,
        pipeline: &redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        let master = self.current();
        let mut conn = master.conn.clone();
        let result = conn.send_packed_commands(pipeline, offset, count).await;
        let trouble = match &result {
            Err(e) => is_readonly(e) || is_connection_trouble(e),
            Ok(values) => values
                .iter()
                .any(|v| matches!(v, Value::ServerError(e) if e.code() == "READONLY")),
        };
        if trouble {
            self.refresh_in_background(master.generation);
        }
        result
    }

    /// Asks the Sentinels again without making the caller wait.
    fn refresh_in_background(&self, failed_generation: u64) {
        let this = self.clone();
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                handle.spawn(async move { this.refresh(failed_generation).await });
            }
            Err(_) => tracing::warn!("no Tokio runtime: cannot re-resolve the Redis master"),
        }
    }

    /// Asks the Sentinels for the master and switches to it if it moved.
    /// Does nothing if another request already switched away from
    /// `failed_generation`, or if the Sentinels were asked very recently.
    async fn refresh(&self, failed_generation: u64) {
        let mut last = self.shared.last_resolve.lock().await;
        let current = self.current();
        if current.generation != failed_generation {
            return;
        }
        if last.is_some_and(|t| t.elapsed() < RESOLVE_INTERVAL) {
            return;
        }
        *last = Some(Instant::now());
        let shared = &self.shared;
        let found = ask_sentinels(
            &shared.sentinels,
            &shared.name,
            &shared.auth,
            &shared.options,
        )
        .await;
        let (host, port) = match found {
            Ok(addr) => addr,
            Err(e) => {
                tracing::warn!(master = %shared.name, error = %e, "cannot re-resolve the Redis master");
                return;
            }
        };
        if host == current.host && port == current.port {
            return;
        }
        let node = shared.auth.node(host.clone(), port);
        let conn = match node
            .client()
            .map_err(RedisStoreError::from)
            .and_then(|client| lazy_node(client, &shared.options))
        {
            Ok(conn) => conn,
            Err(e) => {
                tracing::warn!(master = %shared.name, error = %e, "cannot connect to the new Redis master");
                return;
            }
        };
        tracing::info!(
            master = %shared.name,
            from = %format_args!("{}:{}", current.host, current.port),
            to = %format_args!("{host}:{port}"),
            "Redis master changed"
        );
        let next = Arc::new(Master {
            host,
            port,
            conn,
            generation: current.generation.wrapping_add(1),
        });
        let mut slot = shared
            .current
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *slot = next;
    }
}

/// Whether `e` is Redis refusing a write on a replica.
fn is_readonly(e: &RedisError) -> bool {
    e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::ReadOnly)
        || e.code() == Some("READONLY")
}

/// Whether `e` suggests the master is gone (rather than a bad command).
fn is_connection_trouble(e: &RedisError) -> bool {
    e.is_io_error()
        || e.is_connection_refusal()
        || e.is_connection_dropped()
        || e.is_timeout()
        || e.is_unrecoverable_error()
        || e.code() == Some("MASTERDOWN")
}

/// Asks each Sentinel in turn for the master's address, and returns the
/// first one that confirms it is a master.
async fn ask_sentinels(
    sentinels: &[NodeAddr],
    name: &str,
    auth: &MasterAuth,
    options: &TopologyOptions,
) -> Result<(String, u16), RedisStoreError> {
    let mut last_error = None;
    for sentinel in sentinels {
        match ask_one(sentinel, name, auth, options).await {
            Ok(Some(addr)) => return Ok(addr),
            Ok(None) => {}
            Err(e) => last_error = Some(e),
        }
    }
    Err(last_error.unwrap_or_else(|| {
        RedisStoreError::Redis(RedisError::from((
            redis::ErrorKind::MasterNameNotFoundBySentinel,
            "no Sentinel names a master that confirms its role",
            name.to_owned(),
        )))
    }))
}

/// One Sentinel's answer, checked against the node itself: `Ok(None)` when
/// this Sentinel does not know the master or names a node that is not (or
/// no longer) a master.
async fn ask_one(
    sentinel: &NodeAddr,
    name: &str,
    auth: &MasterAuth,
    options: &TopologyOptions,
) -> Result<Option<(String, u16)>, RedisStoreError> {
    let deadline = options.request_deadline();
    let client = redis::Client::open(sentinel.connection_info()?)?;
    let mut conn = within(
        deadline,
        Box::pin(client.get_multiplexed_async_connection_with_config(&options.connection_config())),
    )
    .await?;
    let answer: Option<(String, u16)> = within(
        deadline,
        Box::pin(
            redis::cmd("SENTINEL")
                .arg("get-master-addr-by-name")
                .arg(name)
                .query_async(&mut conn),
        ),
    )
    .await?;
    let Some((host, port)) = answer else {
        return Ok(None);
    };
    let node = auth.node(host.clone(), port);
    let client = node.client()?;
    let Ok(mut conn) = within(
        deadline,
        Box::pin(client.get_multiplexed_async_connection_with_config(&options.connection_config())),
    )
    .await
    else {
        return Ok(None);
    };
    let role: Value = within(
        deadline,
        Box::pin(redis::cmd("ROLE").query_async(&mut conn)),
    )
    .await?;
    let is_master = match &role {
        Value::Array(items) => match items.first() {
            Some(Value::BulkString(b)) => b == b"master",
            Some(Value::SimpleString(s)) => s == "master",
            _ => false,
        },
        _ => false,
    };
    Ok(is_master.then_some((host, port)))
}

/// `f`, failing with [`RedisStoreError::Timeout`] after `deadline`.
async fn within<T>(
    deadline: Duration,
    f: impl Future<Output = RedisResult<T>>,
) -> Result<T, RedisStoreError> {
    tokio::time::timeout(deadline, f)
        .await
        .map_err(|_| RedisStoreError::Timeout(deadline))?
        .map_err(RedisStoreError::from)
}
