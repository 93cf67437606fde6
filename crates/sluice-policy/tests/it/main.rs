//! One test binary for this crate's integration tests: each module was
//! once a file of its own, and one binary links once instead of many times.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod access;
mod at_once;
mod config_errors;
mod paths;
mod plan_features;
mod quickstart_policy;
mod reload;
mod rollout;
mod settlement;
mod slot_waits;

/// An engine call on the memory store, which answers at once.
pub fn now<F: std::future::Future>(f: F) -> F::Output {
    sluice_store::seam::now_or_never(f).expect("the memory store answers at once")
}

/// [`Engine::decide_now`] on the memory store, which always decides now.
pub trait DecideHere {
    /// Decides a request now.
    fn decide_here(
        &self,
        req: &sluice_policy::RequestInfo<'_>,
    ) -> Result<sluice_policy::Verdict, sluice_policy::DecideError>;
}

impl<C: sluice_core::Clock> DecideHere for sluice_policy::Engine<C> {
    fn decide_here(
        &self,
        req: &sluice_policy::RequestInfo<'_>,
    ) -> Result<sluice_policy::Verdict, sluice_policy::DecideError> {
        self.decide_now(req)
            .expect("the memory store answers at once")
    }
}
