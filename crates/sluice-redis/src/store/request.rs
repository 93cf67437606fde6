//! A request's checks as the script takes them: merged per (limit, key),
//! each with its Redis key, parameters and cost, grouped by hash tag.

use sluice_core::CheckError;
use sluice_store::KeyId;

use super::RedisCheck;
use super::key::tagged_key_name;
use crate::RedisStoreError;
use crate::script::{LimitParams, ScriptCheck};

/// One check as the store decides it: its limit's script parameters
/// already computed (`None` where they cannot be), from the limit's
/// registered state ([`RedisRemote`](crate::RedisRemote)) or, for a
/// [`RedisCheck`], from its limiter.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Prepared<'a> {
    /// The limit's identity (see [`RedisCheck::limit_id`]).
    pub(crate) limit_id: &'a str,
    /// The limit's tag in key names ([`limit_tag`](sluice_store::limit_tag)
    /// of the identity: its counter's, made once).
    pub(crate) tag: u64,
    /// The limit's parameters, without a reserve; `None`: unreadable.
    pub(crate) params: Option<LimitParams>,
    /// The client key's keyed hash.
    pub(crate) key: KeyId,
    /// The request's cost.
    pub(crate) cost: u64,
    /// The cost that must still be left after the charge.
    pub(crate) reserve: u64,
    /// The lease a concurrency limit's slots are held under.
    pub(crate) lease: Option<sluice_store::seam::LeaseId>,
}

impl<'a> From<&RedisCheck<'a>> for Prepared<'a> {
    /// Computes the limiter's parameters: a [`RedisCheck`] carries no
    /// registered state.
    fn from(c: &RedisCheck<'a>) -> Self {
        Self {
            limit_id: c.limit_id,
            tag: sluice_store::limit_tag(c.limit_id),
            params: LimitParams::compute(c.limiter),
            key: c.key,
            cost: c.cost,
            reserve: c.reserve,
            lease: None,
        }
    }
}

/// One unique (limit, key) of a request.
pub(super) struct Item<'a> {
    pub(super) limit_id: &'a str,
    pub(super) key: KeyId,
    pub(super) check: ScriptCheck,
}

/// The unique (limit, key) checks with their summed costs, and for each
/// input check the index of its unique check. Fails on an impossible cost.
pub(super) fn merge<'a>(
    checks: &[Prepared<'a>],
) -> Result<(Vec<Item<'a>>, Vec<usize>), RedisStoreError> {
    let (items, index) = merge_costs(checks)?;
    for item in &items {
        check_cost(item.check.cost, &item.check.params)?;
    }
    Ok((items, index))
}

/// [`merge`], whatever the summed costs.
pub(super) fn merge_costs<'a>(
    checks: &[Prepared<'a>],
) -> Result<(Vec<Item<'a>>, Vec<usize>), RedisStoreError> {
    let mut items: Vec<Item<'a>> = Vec::with_capacity(checks.len());
    let mut index = Vec::with_capacity(checks.len());
    for c in checks {
        match items
            .iter()
            .position(|u| u.key == c.key && u.limit_id == c.limit_id)
        {
            Some(i) => {
                let check = &mut items[i].check;
                check.cost = check.cost.saturating_add(c.cost);
                // The strictest reserve of the merged checks.
                if c.reserve > check.params.reserve() {
                    check.params = check.params.with_reserve(c.reserve);
                }
                index.push(i);
            }
            None => {
                let params = params_of(c)?;
                index.push(items.len());
                items.push(Item {
                    limit_id: c.limit_id,
                    key: c.key,
                    check: ScriptCheck {
                        key: tagged_key_name(c.tag, c.key),
                        params,
                        cost: c.cost,
                    },
                });
            }
        }
    }
    Ok((items, index))
}

/// The items grouped by hash tag (the key id), in order of first
/// appearance: each group's key id, and the indices of its items.
pub(super) fn group_by_tag(items: &[Item<'_>]) -> (Vec<KeyId>, Vec<Vec<usize>>) {
    let mut tags: Vec<KeyId> = Vec::new();
    let mut members: Vec<Vec<usize>> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        match tags.iter().position(|k| *k == item.key) {
            Some(t) => members[t].push(i),
            None => {
                tags.push(item.key);
                members.push(vec![i]);
            }
        }
    }
    (tags, members)
}

/// The script's parameters for a check's limit, with the check's reserve.
pub(super) fn params_of(c: &Prepared<'_>) -> Result<LimitParams, RedisStoreError> {
    c.params
        .map(|p| p.with_reserve(c.reserve).with_lease(c.lease))
        .ok_or_else(|| {
            RedisStoreError::BadReply(format!(
                "cannot read the parameters of limit `{}`",
                c.limit_id
            ))
        })
}

/// A cost the limit can never admit (with the check's reserve kept back)
/// is an error, before anything is sent, as in the memory store.
pub(super) fn check_cost(cost: u64, params: &LimitParams) -> Result<(), RedisStoreError> {
    let capacity = params.burst();
    let asked = cost.saturating_add(params.reserve());
    if asked > capacity {
        return Err(CheckError::CostExceedsCapacity {
            cost: asked,
            capacity,
        }
        .into());
    }
    Ok(())
}
