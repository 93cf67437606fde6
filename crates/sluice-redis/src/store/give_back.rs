//! Refunds: costs given back to their limits (the script's refund mode),
//! one script call per hash tag, each limit then peeked.

use sluice_store::{Checked, KeyId};

use super::RedisCheck;
use super::RedisStore;
use super::reply::{fill, in_request_order};
use super::request::{group_by_tag, merge_costs};
use crate::RedisStoreError;
use crate::script::{Mode, ScriptCheck};

impl RedisStore {
    /// Gives back each check's cost, as charged earlier, and answers each
    /// limit's state afterwards (admitted, as a peek sees it). Checks of
    /// one (limit, key) are merged; more than a limit's burst gives back
    /// the burst: a refund never takes a limit past full. Reserves are
    /// ignored. Each hash tag is refunded in one atomic step; the tags of a
    /// request one after another (a refund cannot be refused, so nothing
    /// needs undoing).
    pub async fn refund(&self, checks: &[RedisCheck<'_>]) -> Result<Checked, RedisStoreError> {
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
        self.give_back(checks, Some(now_us)).await
    }

    async fn give_back(
        &self,
        checks: &[RedisCheck<'_>],
        now_us: Option<u64>,
    ) -> Result<Checked, RedisStoreError> {
        let plain: Vec<RedisCheck<'_>> = checks
            .iter()
            .map(|c| RedisCheck { reserve: 0, ..*c })
            .collect();
        let (mut items, index) = merge_costs(&plain)?;
        for item in &mut items {
            item.check.cost = item.check.cost.min(item.check.params.burst());
        }
        let (tags, members) = group_by_tag(&items);
        let mut unique = vec![None; items.len()];
        for (tag, members) in tags.iter().zip(&members) {
            let group: Vec<ScriptCheck> = members.iter().map(|i| items[*i].check.clone()).collect();
            let reply = self
                .run_direct(&KeyId::to_hex(tag), Mode::Refund, group, now_us)
                .await?;
            fill(&mut unique, members, reply);
        }
        let decisions = in_request_order(&unique, &index)?;
        Ok(Checked {
            allowed: true,
            decisions,
        })
    }
}
