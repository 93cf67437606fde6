//! Limits an adapter matched itself (the Envoy service, from descriptors),
//! decided on the engine's one path: all or nothing, shadow, impossible
//! costs and the store's fallback exactly as for an HTTP request.

use sluice_core::Clock;
use sluice_store::KeyId;
use sluice_store::seam::Counter;

use super::Engine;
use super::plan::{Plan, Planned};
use super::verdict::{DecideError, Verdict};
use crate::limit::Limit;

/// One limit to decide for a request whose limits an adapter matched: the
/// compiled limit, its counter (registered with the engine's store), the
/// client's key id and the cost.
#[derive(Debug, Clone, Copy)]
pub struct Charge<'a> {
    /// The limit.
    pub limit: &'a Limit,
    /// Its counter in the engine's [store](Engine::store).
    pub counter: &'a Counter,
    /// The keyed hash of what the limit counts by (from
    /// [`Engine::hasher`]).
    pub key: KeyId,
    /// The cost under this limit.
    pub cost: u64,
    /// Counted, never refusing, and never shown to the client.
    pub shadow: bool,
}

impl<C: Clock> Engine<C> {
    /// Decides limits an adapter matched itself, together: the enforced
    /// ones all or nothing (one whose cost exceeds its burst refuses the
    /// request with [`DecideError::Impossible`], charging nothing), the
    /// shadowed ones each on its own once the request is admitted. The
    /// verdict's results are the enforced charges' in order, its shadow
    /// results the shadowed ones'.
    pub async fn decide_charges(&self, charges: &[Charge<'_>]) -> Result<Verdict, DecideError> {
        let style = self.current.load().policy.headers;
        let mut plan = Plan::new(style);
        for c in charges {
            let planned = Planned {
                limit: c.limit,
                counter: c.counter,
                gate: None,
                by_client: false,
                key: c.key,
                cost: c.cost,
            };
            plan.place(planned, !c.shadow)?;
        }
        plan.seal(None)?;
        self.decide_plan(&plan).await
    }
}
