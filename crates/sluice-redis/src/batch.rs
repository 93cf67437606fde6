//! Batching: concurrent decisions headed to one Redis node share one script
//! call.
//!
//! Each node gets a dispatcher task. A request hands its group to it and
//! waits. The dispatcher sends at once whatever is queued (up to
//! [`BatchConfig::max_groups`] groups) as soon as fewer than
//! [`BatchConfig::max_in_flight`] calls are in flight; while the calls are
//! in flight, new groups queue up and leave together with the next call. So
//! an idle store adds no latency, and a busy one does many decisions per
//! script call (and per round trip) instead of one. Calls go over the
//! node's multiplexed connection, so those in flight are pipelined.
//!
//! Groups in one call are independent: each is decided all-or-nothing on
//! its own, in queue order, inside one atomic script run.

use std::sync::Arc;

use redis::aio::ConnectionLike;
use tokio::sync::{Semaphore, mpsc, oneshot};

use crate::RedisStoreError;
use crate::script::{DecisionScript, GroupReply, Mode, ScriptCheck};

/// How concurrent decisions are coalesced into script calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchConfig {
    /// The most groups (requests) one script call decides.
    pub max_groups: usize,
    /// The most script calls in flight per node; more groups wait and are
    /// sent together.
    pub max_in_flight: usize,
}

impl Default for BatchConfig {
    fn default() -> Self {
        Self {
            max_groups: 128,
            max_in_flight: 2,
        }
    }
}

struct Job {
    group: Vec<ScriptCheck>,
    reply: oneshot::Sender<Result<GroupReply, RedisStoreError>>,
}

/// The handle on one node's dispatcher. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Batcher {
    tx: mpsc::UnboundedSender<Job>,
}

/// A copy of an error for each waiting request of a failed call.
fn copy_error(e: &RedisStoreError) -> RedisStoreError {
    match e {
        RedisStoreError::Redis(r) => RedisStoreError::Redis(r.clone()),
        RedisStoreError::Timeout(d) => RedisStoreError::Timeout(*d),
        RedisStoreError::BadReply(s) => RedisStoreError::BadReply(s.clone()),
        RedisStoreError::Check(c) => RedisStoreError::Check(*c),
        other => RedisStoreError::BadReply(other.to_string()),
    }
}

impl Batcher {
    /// Starts a dispatcher for the node behind `conn` on the current tokio
    /// runtime; `None` outside one. It stops when every handle is dropped.
    pub(crate) fn start<C>(conn: C, script: DecisionScript, config: BatchConfig) -> Option<Self>
    where
        C: ConnectionLike + Clone + Send + 'static,
    {
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        let (tx, rx) = mpsc::unbounded_channel();
        runtime.spawn(dispatch(rx, conn, script, config));
        Some(Self { tx })
    }

    /// Decides one group in the next call to the node.
    pub(crate) async fn submit(
        &self,
        group: Vec<ScriptCheck>,
    ) -> Result<GroupReply, RedisStoreError> {
        let (reply, answer) = oneshot::channel();
        let stopped = || RedisStoreError::BadReply("the batch dispatcher has stopped".into());
        self.tx.send(Job { group, reply }).map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
    }
}

async fn dispatch<C>(
    mut rx: mpsc::UnboundedReceiver<Job>,
    conn: C,
    script: DecisionScript,
    config: BatchConfig,
) where
    C: ConnectionLike + Clone + Send + 'static,
{
    let permits = Arc::new(Semaphore::new(config.max_in_flight.max(1)));
    let max_groups = config.max_groups.max(1);
    loop {
        let Ok(permit) = permits.clone().acquire_owned().await else {
            return;
        };
        let Some(first) = rx.recv().await else {
            return;
        };
        let mut jobs = Vec::with_capacity(max_groups.min(64));
        jobs.push(first);
        while jobs.len() < max_groups {
            match rx.try_recv() {
                Ok(job) => jobs.push(job),
                Err(_) => break,
            }
        }
        let mut conn = conn.clone();
        let script = script.clone();
        tokio::spawn(async move {
            let result = {
                let groups: Vec<&[ScriptCheck]> = jobs.iter().map(|j| j.group.as_slice()).collect();
                script.run(&mut conn, Mode::Check, &groups, None).await
            };
            drop(permit);
            match result {
                Ok(replies) => {
                    for (job, reply) in jobs.into_iter().zip(replies) {
                        let _ = job.reply.send(Ok(reply));
                    }
                }
                Err(e) => {
                    for job in jobs {
                        let _ = job.reply.send(Err(copy_error(&e)));
                    }
                }
            }
        });
    }
}
