//! Account-manager events: when a key is limited more than N times within a
//! window (N and the window set per plan with `[plans.<name>] alert`),
//! Sluice emits one structured event for that key and window, and can POST
//! it to a webhook (`[events] webhook`). These are the paying clients who
//! keep hitting their ceiling: candidates for a bigger plan.
//!
//! - One event per key, plan and window, never one per request. Windows are
//!   aligned to the wall clock (an hourly window runs from :00 to :00).
//! - The log line is at `warn` under the target `sluice::events`.
//! - The webhook gets `POST` with a JSON body, retried with backoff up to
//!   `attempts` times. Events wait in a bounded queue; when it is full, new
//!   events are dropped and counted rather than piling up.
//! - Keys appear as keyed-hash prefixes, as in the metrics.
//! - Memory is bounded: at most [`MAX_TRACKED`] keys are tracked; past that,
//!   trackers of finished windows are dropped first, and new keys are not
//!   tracked until there is room.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use parking_lot::Mutex;
use serde::Serialize;
use sluice_policy::{Engine, Verdict};
use tokio::sync::mpsc;

/// The most keys tracked at once.
pub const MAX_TRACKED: usize = 100_000;

/// One event.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct AccountEvent {
    /// Always `plan_ceiling`.
    pub event: &'static str,
    /// The key's plan.
    pub plan: String,
    /// The plan limit that refused it.
    pub limit: String,
    /// The key's keyed-hash prefix.
    pub key: String,
    /// Refusals so far in this window (the threshold plus one when sent).
    pub limited: u64,
    /// The window's length in seconds.
    pub window_seconds: u64,
    /// The window's start, in seconds since the Unix epoch.
    pub window_start: u64,
}

#[derive(Debug, Clone, Copy)]
struct Tracker {
    window: u64,
    count: u64,
    emitted: bool,
}

/// Counts of what happened to events, for metrics.
#[derive(Debug, Default)]
pub struct EventCounters {
    /// Events emitted (logged).
    pub emitted: AtomicU64,
    /// Events the webhook accepted.
    pub delivered: AtomicU64,
    /// Events the webhook refused on every attempt.
    pub failed: AtomicU64,
    /// Events dropped because the queue was full.
    pub dropped: AtomicU64,
}

/// Tracks refusals per key and emits events. See the module docs.
#[derive(Debug)]
pub struct AccountEvents {
    engine: Arc<Engine>,
    trackers: Mutex<HashMap<(Arc<str>, u128), Tracker>>,
    queue: Option<mpsc::Sender<AccountEvent>>,
    counters: Arc<EventCounters>,
}

impl AccountEvents {
    /// Events for `engine`'s plans; with a webhook in its config, a task
    /// posts them (so this must run inside a tokio runtime then).
    pub fn new(engine: Arc<Engine>) -> Self {
        let counters = Arc::new(EventCounters::default());
        let settings = engine.policy().events.clone();
        let queue = settings.webhook.map(|uri| {
            let (tx, rx) = mpsc::channel(settings.queue);
            tokio::spawn(post_events(uri, settings.attempts, rx, counters.clone()));
            tx
        });
        Self {
            engine,
            trackers: Mutex::new(HashMap::new()),
            queue,
            counters,
        }
    }

    /// What happened to events so far.
    pub fn counters(&self) -> &EventCounters {
        &self.counters
    }

    /// Counts a refused request against its plan's alert rule, and emits
    /// the event when the key crosses the threshold in this window.
    pub fn refused(&self, verdict: &Verdict) {
        let Some(r) = verdict.violated().find(|r| !r.labels.plan.is_empty()) else {
            return;
        };
        let policy = self.engine.policy();
        let Some(rule) = policy.events.rules.get(&*r.labels.plan) else {
            return;
        };
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        let window = now / rule.window.max(1);
        let count = {
            let mut trackers = self.trackers.lock();
            let id = (r.labels.plan.clone(), r.key.0);
            if trackers.len() >= MAX_TRACKED && !trackers.contains_key(&id) {
                trackers.retain(|_, t| t.window == window);
                if trackers.len() >= MAX_TRACKED {
                    return;
                }
            }
            let t = trackers.entry(id).or_insert(Tracker {
                window,
                count: 0,
                emitted: false,
            });
            if t.window != window {
                *t = Tracker {
                    window,
                    count: 0,
                    emitted: false,
                };
            }
            t.count += 1;
            if t.emitted || t.count <= rule.limited {
                return;
            }
            t.emitted = true;
            t.count
        };
        let hex = r.key.to_hex();
        let event = AccountEvent {
            event: "plan_ceiling",
            plan: r.labels.plan.to_string(),
            limit: r.labels.limit.to_string(),
            key: hex[..16].to_owned(),
            limited: count,
            window_seconds: rule.window / 1_000_000_000,
            window_start: window * rule.window / 1_000_000_000,
        };
        self.counters.emitted.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(
            target: "sluice::events",
            event = event.event,
            plan = %event.plan,
            limit = %event.limit,
            key = %event.key,
            limited = event.limited,
            window_seconds = event.window_seconds,
            "a key keeps hitting its plan's ceiling"
        );
        if let Some(queue) = &self.queue
            && queue.try_send(event).is_err()
        {
            self.counters.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

async fn post_events(
    uri: http::Uri,
    attempts: u32,
    mut rx: mpsc::Receiver<AccountEvent>,
    counters: Arc<EventCounters>,
) {
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    while let Some(event) = rx.recv().await {
        let body = match serde_json::to_vec(&event) {
            Ok(b) => Bytes::from(b),
            Err(_) => continue,
        };
        let mut delivered = false;
        for attempt in 0..attempts {
            if attempt > 0 {
                tokio::time::sleep(Duration::from_millis(200) * 2u32.pow(attempt - 1)).await;
            }
            let Ok(request) = http::Request::post(uri.clone())
                .header(http::header::CONTENT_TYPE, "application/json")
                .body(Full::new(body.clone()))
            else {
                break;
            };
            match tokio::time::timeout(Duration::from_secs(5), client.request(request)).await {
                Ok(Ok(r)) if r.status().is_success() => {
                    delivered = true;
                    break;
                }
                Ok(Ok(r)) => {
                    tracing::debug!(status = %r.status(), attempt, "the events webhook refused an event");
                }
                Ok(Err(e)) => tracing::debug!(error = %e, attempt, "the events webhook failed"),
                Err(_) => tracing::debug!(attempt, "the events webhook timed out"),
            }
        }
        if delivered {
            counters.delivered.fetch_add(1, Ordering::Relaxed);
        } else {
            counters.failed.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(
                target: "sluice::events",
                plan = %event.plan,
                key = %event.key,
                attempts,
                "an event could not be delivered to the webhook; dropped"
            );
        }
    }
}
