//! Reading the decision script's reply (its format is described in
//! `lua/decide.lua`).

use sluice_core::Decision;

use super::{GroupReply, ScriptCheck, bad};
use crate::RedisStoreError;

/// Reads the script's reply (its format is described in `lua/decide.lua`).
struct Reader<'r> {
    reply: &'r [i64],
    at: usize,
}

impl Reader<'_> {
    fn next(&mut self) -> Result<i64, RedisStoreError> {
        let v = self
            .reply
            .get(self.at)
            .copied()
            .ok_or_else(|| bad("reply too short"))?;
        self.at += 1;
        Ok(v)
    }

    /// A duration: nanoseconds, or -(µs + 1) followed by nanoseconds.
    fn duration(&mut self) -> Result<u64, RedisStoreError> {
        let v = self.next()?;
        if let Ok(ns) = u64::try_from(v) {
            return Ok(ns);
        }
        let us = v.unsigned_abs() - 1;
        let ns = u64::try_from(self.next()?).map_err(|_| bad("negative nanoseconds"))?;
        Ok(us.saturating_mul(1000).saturating_add(ns))
    }
}

pub(super) fn parse_reply(
    reply: &[i64],
    groups: &[&[ScriptCheck]],
) -> Result<Vec<GroupReply>, RedisStoreError> {
    let mut r = Reader { reply, at: 0 };
    let mut out = Vec::with_capacity(groups.len());
    for group in groups {
        // A group of one has no flag: its check's decision is the group's.
        let flag = if group.len() > 1 {
            Some(r.next()? == 1)
        } else {
            None
        };
        let mut decisions = Vec::with_capacity(group.len());
        for check in group.iter() {
            let packed = u64::try_from(r.next()?).map_err(|_| bad("negative remaining"))?;
            let ok = packed & 1 == 1;
            let reset_after = r.duration()?;
            let retry_after = if ok { None } else { Some(r.duration()?) };
            let delay = if check.params.queue { r.duration()? } else { 0 };
            decisions.push(Decision {
                allowed: ok,
                limit: check.params.burst,
                remaining: packed >> 1,
                reset_after,
                retry_after,
                delay,
            });
        }
        let allowed = flag.unwrap_or_else(|| decisions.iter().all(|d| d.allowed));
        out.push(GroupReply { allowed, decisions });
    }
    if r.at != reply.len() {
        return Err(bad("reply too long"));
    }
    Ok(out)
}
