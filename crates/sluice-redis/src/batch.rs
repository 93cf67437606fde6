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
    let max_in_flight = config.max_in_flight.max(1);
    let permits = Arc::new(Semaphore::new(max_in_flight));
    let max_groups = config.max_groups.max(1);
    loop {
        let Ok(permit) = permits.clone().acquire_owned().await else {
            return;
        };
        let Some(first) = rx.recv().await else {
            return;
        };
        // Busy (another call is in flight, so Redis is at work anyway): the
        // tasks that are ready run first and their groups join this call.
        if permits.available_permits() + 1 < max_in_flight {
            tokio::task::yield_now().await;
        }
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::sync::Mutex;

    use redis::{Arg, Cmd, Pipeline, RedisFuture, Value};
    use sluice_core::{AlgorithmKind, LimitSpec, Rate};
    use tokio::sync::Notify;

    use super::*;
    use crate::script::LimitParams;

    /// A node that records how many groups each call carries and holds
    /// every call until the test releases it; it answers "allowed".
    #[derive(Clone)]
    struct HeldNode {
        calls: Arc<Mutex<Vec<usize>>>,
        started: Arc<Notify>,
        release: Arc<Semaphore>,
    }

    impl ConnectionLike for HeldNode {
        fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
            Box::pin(async move {
                let packed = match cmd.args_iter().last() {
                    Some(Arg::Simple(bytes)) => bytes.to_vec(),
                    _ => Vec::new(),
                };
                // One record of 13 bytes per check; the first byte opens a group.
                let mut sizes: Vec<usize> = Vec::new();
                for record in packed.chunks(13) {
                    if record[0] == 1 {
                        sizes.push(0);
                    }
                    if let Some(last) = sizes.last_mut() {
                        *last += 1;
                    }
                }
                self.calls.lock().unwrap().push(sizes.len());
                self.started.notify_one();
                self.release.acquire().await.unwrap().forget();
                let mut reply = Vec::new();
                for n in sizes {
                    if n > 1 {
                        reply.push(Value::Int(1));
                    }
                    for _ in 0..n {
                        reply.push(Value::Int(2 * 7 + 1)); // allowed, 7 remaining
                        reply.push(Value::Int(0)); // reset_after
                    }
                }
                Ok(Value::Array(reply))
            })
        }

        fn req_packed_commands<'a>(
            &'a mut self,
            _: &'a Pipeline,
            _: usize,
            _: usize,
        ) -> RedisFuture<'a, Vec<Value>> {
            Box::pin(async { Ok(Vec::new()) })
        }

        fn get_db(&self) -> i64 {
            0
        }
    }

    fn group() -> Vec<ScriptCheck> {
        let limiter = LimitSpec {
            algorithm: AlgorithmKind::Gcra,
            rate: Rate::per_second(10),
            burst: 8,
            nodelay: false,
        }
        .build()
        .unwrap();
        vec![ScriptCheck {
            key: "sluice:{00}:00".into(),
            params: LimitParams::compute(&limiter).unwrap(),
            cost: 1,
        }]
    }

    /// A batcher of at most 32 groups a call and `max_in_flight` calls, on
    /// a node that holds each call until the test releases it.
    fn held(max_in_flight: usize) -> (HeldNode, Batcher) {
        let node = HeldNode {
            calls: Arc::default(),
            started: Arc::new(Notify::new()),
            release: Arc::new(Semaphore::new(0)),
        };
        let config = BatchConfig {
            max_groups: 32,
            max_in_flight,
        };
        let batcher = Batcher::start(node.clone(), DecisionScript::default(), config).unwrap();
        (node, batcher)
    }

    /// Queues one group of one check; its answer comes on the receiver.
    fn send(batcher: &Batcher) -> oneshot::Receiver<Result<GroupReply, RedisStoreError>> {
        let (reply, answer) = oneshot::channel();
        batcher
            .tx
            .send(Job {
                group: group(),
                reply,
            })
            .ok()
            .unwrap();
        answer
    }

    #[tokio::test]
    async fn requests_queued_behind_a_call_in_flight_leave_together() {
        let (node, batcher) = held(1);
        // The first request leaves at once, alone.
        let mut answers = vec![send(&batcher)];
        node.started.notified().await;
        // 40 more queue up while it is in flight: 32, then 8.
        for _ in 0..40 {
            answers.push(send(&batcher));
        }
        node.release.add_permits(3);
        for answer in answers {
            let reply = answer.await.unwrap().unwrap();
            assert!(reply.allowed);
            assert_eq!(reply.decisions[0].remaining, 7);
        }
        assert_eq!(*node.calls.lock().unwrap(), vec![1, 32, 8]);
    }

    #[tokio::test]
    async fn while_a_call_is_in_flight_the_ready_requests_join_the_next() {
        let (node, batcher) = held(2);
        // The first call leaves at once, alone, and stays in flight.
        let mut answers = vec![send(&batcher)];
        node.started.notified().await;
        // A request wakes the dispatcher; another task, ready behind it,
        // sends one more before the dispatcher drains its queue.
        answers.push(send(&batcher));
        let late = {
            let batcher = batcher.clone();
            tokio::spawn(async move { send(&batcher).await })
        };
        // Enough for any number of calls, so that a wrong split fails the
        // assertion below rather than hanging.
        node.release.add_permits(3);
        for answer in answers {
            assert!(answer.await.unwrap().unwrap().allowed);
        }
        assert!(late.await.unwrap().unwrap().unwrap().allowed);
        assert_eq!(*node.calls.lock().unwrap(), vec![1, 2]);
    }
}
