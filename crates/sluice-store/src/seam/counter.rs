//! A limit as a store counts it: its definition, compiled once, and the
//! store's handle on its state.

use std::any::Any;
use std::sync::Arc;

use sluice_core::{LimitError, LimitSpec, Limiter};

use super::StoreError;
use crate::tag::limit_tag;

/// What a store counts for one limit: its identity, its bucket and the tag
/// its state is named by. Built once, when a config is compiled; nothing in
/// it is worked out again per request.
///
/// ```
/// use sluice_core::{AlgorithmKind, LimitSpec, Rate};
/// use sluice_store::seam::CounterDef;
/// let spec = LimitSpec {
///     algorithm: AlgorithmKind::Gcra,
///     rate: Rate::per_second(10),
///     burst: 20,
///     nodelay: false,
/// };
/// let def = CounterDef::new("api/per-key", spec).unwrap();
/// assert_eq!(def.limiter().capacity(), 20);
/// assert_eq!(def.tag(), sluice_store::limit_tag("api/per-key"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CounterDef {
    id: Arc<str>,
    tag: u64,
    spec: LimitSpec,
    limiter: Limiter,
}

impl CounterDef {
    /// The counter of limit `id` (its scope, name and definition: a limit
    /// whose definition changes must get another id) with bucket `spec`.
    pub fn new(id: &str, spec: LimitSpec) -> Result<Self, LimitError> {
        Ok(Self {
            id: id.into(),
            tag: limit_tag(id),
            limiter: spec.build()?,
            spec,
        })
    }

    /// This counter, with debt ([`Store::debit`](super::Store::debit))
    /// forgiven at the window reset (`true`) or carried on (`false`, the
    /// default): its limiter is built so (see
    /// [`Limiter::with_debt_forgiven`]; nothing changes for the bucket
    /// algorithms and GCRA). Two definitions that differ in it are not
    /// equal, so a store gives each its own state.
    ///
    /// ```
    /// # use sluice_core::{AlgorithmKind, LimitSpec, Rate};
    /// # use sluice_store::seam::CounterDef;
    /// # let spec = LimitSpec {
    /// #     algorithm: AlgorithmKind::FixedWindow,
    /// #     rate: Rate::per_second(10),
    /// #     burst: 20,
    /// #     nodelay: false,
    /// # };
    /// let plain = CounterDef::new("api/tokens", spec).unwrap();
    /// let forgiven = plain.clone().with_debt_forgiven(true);
    /// assert!(forgiven.debt_forgiven() && forgiven.limiter().debt_forgiven());
    /// assert_ne!(plain, forgiven);
    /// ```
    pub fn with_debt_forgiven(self, forgiven: bool) -> Self {
        Self {
            limiter: self.limiter.with_debt_forgiven(forgiven),
            ..self
        }
    }

    /// Whether debt is forgiven at the window reset
    /// ([`with_debt_forgiven`](Self::with_debt_forgiven)); always `false`
    /// for the bucket algorithms and GCRA.
    pub fn debt_forgiven(&self) -> bool {
        self.limiter.debt_forgiven()
    }

    /// The limit's identity.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// A stable, non-secret 64-bit tag of the identity (in Redis key names).
    pub fn tag(&self) -> u64 {
        self.tag
    }

    /// The bucket: algorithm, rate and burst.
    pub fn spec(&self) -> &LimitSpec {
        &self.spec
    }

    /// The bucket's algorithm, built.
    pub fn limiter(&self) -> &Limiter {
        &self.limiter
    }

    /// This counter for one of `instances` instances that share it: rate
    /// and burst divided (see [`LimitSpec::share`]), same identity and
    /// the same [forgiveness of debt](Self::with_debt_forgiven).
    pub fn share(&self, instances: u32) -> Self {
        let spec = self.spec.share(instances);
        Self {
            limiter: spec
                .build()
                .map_or(self.limiter, |l| l.with_debt_forgiven(self.debt_forgiven())),
            spec,
            ..self.clone()
        }
    }
}

/// A store's state of one counter, opaque to everyone but that store: the
/// memory store's table of keys, the Redis store's script arguments, a
/// wrapper's handles on the stores it wraps.
#[derive(Clone)]
pub struct Slot(Arc<dyn Any + Send + Sync>);

impl Slot {
    /// Wraps a store's state.
    pub fn new<T: Any + Send + Sync>(state: Arc<T>) -> Self {
        Self(state)
    }

    /// No state: for stores that keep nothing per counter in process.
    pub fn empty() -> Self {
        Self(Arc::new(()))
    }

    /// The state, if it is a `T` (a store reads back only its own slots).
    #[inline]
    pub fn get<T: Any + Send + Sync>(&self) -> Option<&T> {
        self.0.downcast_ref()
    }
}

impl std::fmt::Debug for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Slot(..)")
    }
}

/// A counter registered with a store ([`Store::counter`](super::Store::counter)):
/// its definition and the store's state of it. The state lives as long as
/// any clone of the counter, so a reload that keeps a limit's definition
/// keeps its counts.
#[derive(Debug, Clone)]
pub struct Counter {
    def: CounterDef,
    slot: Slot,
}

impl Counter {
    /// A counter of `def` whose state in its store is `slot`.
    pub fn new(def: CounterDef, slot: Slot) -> Self {
        Self { def, slot }
    }

    /// The definition.
    pub fn def(&self) -> &CounterDef {
        &self.def
    }

    /// The store's state.
    pub fn slot(&self) -> &Slot {
        &self.slot
    }

    /// The store's state as the `T` a store keeps, or
    /// [`StoreError::ForeignCounter`] for a counter that another store made.
    #[inline(always)]
    pub fn state<T: Any + Send + Sync>(&self) -> Result<&T, StoreError> {
        self.slot
            .get()
            .ok_or_else(|| StoreError::ForeignCounter(self.def.id().to_owned()))
    }
}
