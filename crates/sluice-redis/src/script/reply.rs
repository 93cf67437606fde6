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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use sluice_core::{AlgorithmKind, LimitSpec, Rate};

    use super::*;
    use crate::script::LimitParams;

    fn check(key: &str) -> ScriptCheck {
        let limiter = LimitSpec {
            algorithm: AlgorithmKind::Gcra,
            rate: Rate::per_second(10),
            burst: 10,
            nodelay: true,
        }
        .build()
        .unwrap();
        ScriptCheck {
            key: key.into(),
            params: LimitParams::compute(&limiter).unwrap(),
            cost: 1,
        }
    }

    #[test]
    fn a_group_of_one_has_no_flag_and_a_group_of_several_has_one() {
        let (a, b, c, d) = (check("a"), check("b"), check("c"), check("d"));
        let groups: [&[ScriptCheck]; 3] = [&[a], &[b, c], std::slice::from_ref(&d)];
        let reply = [
            // a: admitted, 7 left, reset in 300 ns.
            7 * 2 + 1,
            300,
            // b and c: the group's flag (refused), then b admitted (b's
            // decision stands as it was), c refused with retry in 50 ns.
            0,
            4 * 2 + 1,
            100,
            0,
            200,
            50,
            // d: refused, a duration in two parts (2 us + 5 ns), retry 9 ns.
            0,
            -3,
            5,
            9,
        ];
        let groups = parse_reply(&reply, &groups).unwrap();
        assert_eq!(groups.len(), 3);
        assert!(groups[0].allowed);
        assert_eq!(groups[0].decisions[0].remaining, 7);
        assert_eq!(groups[0].decisions[0].reset_after, 300);
        assert!(!groups[1].allowed);
        assert!(groups[1].decisions[0].allowed);
        assert_eq!(groups[1].decisions[0].remaining, 4);
        assert!(!groups[1].decisions[1].allowed);
        assert_eq!(groups[1].decisions[1].retry_after, Some(50));
        assert!(!groups[2].allowed);
        assert_eq!(groups[2].decisions[0].reset_after, 2005);
        assert_eq!(groups[2].decisions[0].retry_after, Some(9));
        // One integer short or long is an error, not a misread.
        let x = [check("x")];
        assert!(parse_reply(&[0, 100], &[&x]).is_err());
        assert!(parse_reply(&[15, 300, 0], &[&x]).is_err());
        assert!(parse_reply(&[15, 300], &[&x]).is_ok());
    }
}
