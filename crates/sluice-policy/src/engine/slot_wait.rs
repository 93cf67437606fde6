//! A request refused only by concurrency limits that wait
//! (`on_limit = "delay"`): decided again as their slots come back, until
//! it is admitted or its wait is over (see [`slot_wait`](crate::slot_wait)).

use std::sync::Arc;
use std::time::Duration;

use sluice_core::Clock;

use super::Engine;
use super::plan::Plan;
use super::verdict::{DecideError, Verdict};
use crate::slot_wait::{POLL, SlotWait};

/// The waiting room of a refused request: that of the shortest wait among
/// its refusing limits, when each of them is a concurrency limit that
/// waits; `None` when any other limit refused it (waiting cannot help).
pub(super) fn room<'p>(plan: &'p Plan<'_>, verdict: &Verdict) -> Option<&'p Arc<SlotWait>> {
    if verdict.allowed || verdict.results.len() != plan.enforced.len() {
        return None;
    }
    let mut room: Option<&Arc<SlotWait>> = None;
    for (p, r) in plan.enforced.iter().zip(verdict.results.iter()) {
        if r.decision.allowed {
            continue;
        }
        let wait = p.limit.settle.as_ref()?.wait.as_ref()?;
        if room.is_none_or(|w| wait.max_wait < w.max_wait) {
            room = Some(wait);
        }
    }
    room
}

impl<C: Clock> Engine<C> {
    /// Decides `plan` again whenever a slot comes back, until it is
    /// admitted, the room's wait is over, or another limit refuses it.
    /// `refused` is the first decision's verdict, answered as it stands
    /// when the room is full.
    pub(super) async fn wait_for_slot(
        &self,
        plan: &Plan<'_>,
        room: &SlotWait,
        refused: Verdict,
    ) -> Result<Verdict, DecideError> {
        let Some(place) = room.enter() else {
            return Ok(refused);
        };
        let deadline = tokio::time::Instant::now() + Duration::from_nanos(room.max_wait);
        loop {
            // Registered before deciding: a slot given back meanwhile wakes
            // this request rather than passing it by. (The first round
            // decides again too: a slot may have come back since.)
            let released = place.next_release();
            let verdict = self.decide_plan(plan).await?;
            if verdict.allowed || self::room(plan, &verdict).is_none() {
                return Ok(verdict);
            }
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                return Ok(verdict);
            }
            let _ = tokio::time::timeout(left.min(POLL), released).await;
        }
    }
}
