//! Sending one group to its node: through the node's batcher when batching
//! is on and the call runs on Redis's clock, in a script call of its own
//! otherwise.

use crate::RedisStoreError;
use crate::batch::Batcher;
use crate::script::{GroupReply, Mode, ScriptCheck};

use super::RedisStore;
use super::reply::first;

impl RedisStore {
    /// Decides one group (charging it if admitted) on the node holding
    /// keys tagged `tag`: batched with other requests to `node` when the
    /// store batches, `node` is known and `now_us` is `None`.
    pub(super) async fn run_group(
        &self,
        node: Option<usize>,
        tag: &str,
        group: Vec<ScriptCheck>,
        now_us: Option<u64>,
    ) -> Result<GroupReply, RedisStoreError> {
        if let (Some(node), None) = (node, now_us) {
            // Outside a tokio runtime there is no dispatcher: call directly.
            if let Some(batcher) = self.batcher(node, tag) {
                return batcher.submit(group).await;
            }
        }
        self.run_direct(tag, Mode::Check, group, now_us).await
    }

    /// The batcher of `node` (whose keys include those tagged `tag`),
    /// started on first use; `None` when batching is off or no batcher can
    /// start (outside a tokio runtime).
    fn batcher(&self, node: usize, tag: &str) -> Option<Batcher> {
        let config = self.inner.batching?;
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
    }

    /// One group in a call of its own (not batched).
    pub(super) async fn run_direct(
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
}
