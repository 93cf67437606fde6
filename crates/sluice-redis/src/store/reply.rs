//! Script replies into a request's decisions: one group's reply out of a
//! call, decisions filled in per unique check, then put back in the order
//! of the request's checks.

use sluice_core::Decision;

use crate::RedisStoreError;
use crate::script::GroupReply;

/// The one group's reply of a call that sent one group.
pub(super) fn first(replies: Vec<GroupReply>) -> Result<GroupReply, RedisStoreError> {
    replies
        .into_iter()
        .next()
        .ok_or_else(|| RedisStoreError::BadReply("no group in the reply".into()))
}

/// Records a group's decisions for its `members` (indices of unique checks).
pub(super) fn fill(unique: &mut [Option<Decision>], members: &[usize], reply: GroupReply) {
    for (i, d) in members.iter().zip(reply.decisions) {
        unique[*i] = Some(d);
    }
}

/// The decisions in the order of the request's checks: for each check, the
/// decision of its unique check (`index`). A missing one is a bad reply.
pub(super) fn in_request_order<C: FromIterator<Decision>>(
    unique: &[Option<Decision>],
    index: &[usize],
) -> Result<C, RedisStoreError> {
    index
        .iter()
        .map(|i| unique[*i].ok_or_else(|| RedisStoreError::BadReply("missing decision".into())))
        .collect()
}
