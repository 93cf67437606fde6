//! A request whose hash tags live on different nodes (or Cluster slots):
//! its groups committed one after another, the committed ones refunded
//! when a later one refuses.

use sluice_core::Decision;

use crate::RedisStoreError;
use crate::script::{GroupReply, Mode, ScriptCheck};

use super::RedisStore;
use super::reply::fill;
use super::request::Item;

impl RedisStore {
    /// Commits the groups one after another; on a refusal, refunds those
    /// already committed and peeks the rest.
    pub(super) async fn decide_in_turn(
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
            let reply = self.refund_group(&hex[t], group_of(t), now_us).await?;
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

    /// Refunds the committed `groups`, stopping at the first failure.
    async fn refund_all(
        &self,
        groups: &[usize],
        group_of: &impl Fn(usize) -> Vec<ScriptCheck>,
        hex: &[String],
        now_us: Option<u64>,
    ) -> Result<(), RedisStoreError> {
        for t in groups {
            self.refund_group(&hex[*t], group_of(*t), now_us).await?;
        }
        Ok(())
    }

    /// Gives a committed group's cost back (the script's refund mode);
    /// a failure is logged and returned.
    pub(super) async fn refund_group(
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
}
