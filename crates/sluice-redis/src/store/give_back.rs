//! Refunds: costs given back to their limits (the script's refund mode),
//! in one script call when every key is on one node (else one call per hash
//! tag, concurrently), each limit then peeked.

use sluice_store::{Checked, KeyId};

use super::reply::{fill, in_request_order};
use super::request::{Prepared, group_by_tag, merge_costs};
use super::{RedisCheck, RedisStore, prepare};
use crate::RedisStoreError;
use crate::script::ScriptCheck;

impl RedisStore {
    /// Gives back each check's cost, as charged earlier, and answers each
    /// limit's state afterwards (admitted, as a peek sees it). Checks of
    /// one (limit, key) are merged. A key in debt gets its debt back first;
    /// a refund never takes a limit past full. Reserves are
    /// ignored. On one node the request is refunded in one atomic step; across
    /// nodes each hash tag is, concurrently (a refund cannot be refused, so
    /// nothing needs undoing).
    pub async fn refund(&self, checks: &[RedisCheck<'_>]) -> Result<Checked, RedisStoreError> {
        self.give_back(&prepare(checks), None).await
    }

    /// [`refund`](Self::refund) of checks whose parameters are already
    /// computed (a registered counter's).
    pub(crate) async fn refund_prepared(
        &self,
        checks: &[Prepared<'_>],
    ) -> Result<Checked, RedisStoreError> {
        self.give_back(checks, None).await
    }

    /// [`refund`](Self::refund) at a given time, in microseconds, instead
    /// of Redis's clock. For conformance tests only.
    #[doc(hidden)]
    pub async fn refund_at(
        &self,
        checks: &[RedisCheck<'_>],
        now_us: u64,
    ) -> Result<Checked, RedisStoreError> {
        self.give_back(&prepare(checks), Some(now_us)).await
    }

    async fn give_back(
        &self,
        checks: &[Prepared<'_>],
        now_us: Option<u64>,
    ) -> Result<Checked, RedisStoreError> {
        let plain: Vec<Prepared<'_>> = checks
            .iter()
            .map(|c| Prepared { reserve: 0, ..*c })
            .collect();
        if checks.is_empty() {
            return Ok(Checked {
                allowed: true,
                decisions: Default::default(),
            });
        }
        // Costs above the burst are sent too: a key in debt gets its debt
        // back first (the script never takes a limit past full).
        let (items, index) = merge_costs(&plain)?;
        let (tags, members) = group_by_tag(&items);
        let hex: Vec<String> = tags.iter().map(KeyId::to_hex).collect();
        let nodes: Vec<Option<usize>> = hex.iter().map(|t| self.inner.backend.node_of(t)).collect();
        let mut unique = vec![None; items.len()];
        if nodes[0].is_some() && nodes.iter().all(|n| *n == nodes[0]) {
            // Every key on one node: one call, as a check would make.
            let group: Vec<ScriptCheck> = items.iter().map(|i| i.check.clone()).collect();
            let reply = self.refund_group(&hex[0], group, now_us).await?;
            let all: Vec<usize> = (0..items.len()).collect();
            fill(&mut unique, &all, reply);
        } else {
            // One call per hash tag, all at once: a refund is never refused,
            // so none waits on another.
            let calls = members.iter().zip(&hex).map(|(members, tag)| {
                let group = members.iter().map(|i| items[*i].check.clone()).collect();
                self.refund_group(tag, group, now_us)
            });
            let replies = futures_util::future::join_all(calls).await;
            for (members, reply) in members.iter().zip(replies) {
                fill(&mut unique, members, reply?);
            }
        }
        let decisions = in_request_order(&unique, &index)?;
        Ok(Checked {
            allowed: true,
            decisions,
        })
    }
}
