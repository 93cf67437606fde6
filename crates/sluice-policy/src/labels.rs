//! How a limit is named in metrics, logs and header fields
//! ([`LimitLabels`]), and the handle to them that a limit and each of its
//! decisions carry ([`Labels`]).
//!
//! Every decision's result holds its limit's labels, so that an adapter
//! can name the limit after the engine answered. Making and dropping that
//! handle is on every request: a counted reference (`Arc`) would add two
//! atomic read-modify-writes to each decision, on a reference count that
//! every thread deciding under the limit shares (its cache line then
//! travels between cores).
//!
//! So the labels of limits the operator defines (the config's, the Envoy
//! rules') are **kept**: made once for the life of the process, interned
//! by their content and the limit's spec, and a handle to them is a plain
//! reference that costs nothing to copy or drop. A reload that keeps a
//! limit finds its labels kept already, so reloads do not add to them. At
//! most [`MOST_KEPT`] are kept, and never removed; past that, and for limits a client brings
//! about (an Envoy per-request override, whose values the client picks),
//! the handle is a counted reference, as before: the memory kept stays
//! bounded whatever the config's history or the clients send.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use sluice_core::LimitSpec;

/// How metrics and logs name a limit. Every value comes from the config,
/// but for Envoy per-request overrides, whose names carry the values a
/// client gave (at most `MAX_OVERRIDES` of them in use at once), so label
/// cardinality is bounded.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LimitLabels {
    /// The limit's name.
    pub limit: Arc<str>,
    /// Its plan, or `""`.
    pub plan: Arc<str>,
    /// The requests it applies to: `*`, or methods and a path prefix such as
    /// `POST /export*`.
    pub endpoint: Arc<str>,
    /// The draft's quota unit of its cost, where it is not requests:
    /// `content-bytes` for a limit settled at the bytes sent. Sent as
    /// `RateLimit-Policy`'s `qu`. Tokens have no unit in the draft, so a
    /// token limit has none here either.
    pub unit: Option<&'static str>,
    /// Its items in response header fields, made once and kept with it.
    pub header_items: HeaderItems,
}

impl LimitLabels {
    /// Labels of a limit outside any plan, applying to `endpoint`, behind a
    /// counted handle (see [`kept`](Self::kept) for a limit the operator
    /// defines).
    pub fn named(limit: Arc<str>, endpoint: &str) -> Labels {
        Labels::counted(Self::plain(limit, endpoint))
    }

    /// The labels of a limit outside any plan, applying to `endpoint`.
    pub fn plain(limit: Arc<str>, endpoint: &str) -> Self {
        Self {
            limit,
            plan: "".into(),
            endpoint: endpoint.into(),
            unit: None,
            header_items: HeaderItems::default(),
        }
    }

    /// These labels, kept for the life of the process (see the module
    /// docs), for a limit of `spec`: the labels kept already for the same
    /// content and spec, if any. A counted handle once [`MOST_KEPT`] are
    /// kept.
    ///
    /// ```
    /// use sluice_core::{AlgorithmKind, LimitSpec, Rate};
    /// use sluice_policy::LimitLabels;
    /// let spec = LimitSpec {
    ///     algorithm: AlgorithmKind::Gcra,
    ///     rate: Rate::per_second(10),
    ///     burst: 10,
    ///     nodelay: false,
    /// };
    /// let a = LimitLabels::plain("api".into(), "*").kept(Some(&spec));
    /// let b = LimitLabels::plain("api".into(), "*").kept(Some(&spec));
    /// assert_eq!(a.limit.as_ref(), "api");
    /// // The same labels: kept once.
    /// assert_eq!(a.addr(), b.addr());
    /// ```
    pub fn kept(self, spec: Option<&LimitSpec>) -> Labels {
        keep(&mut all_kept(), (self, spec.copied()), MOST_KEPT)
    }
}

/// The labels kept in this process, locked.
fn all_kept() -> std::sync::MutexGuard<'static, Kept> {
    static KEPT: OnceLock<Mutex<Kept>> = OnceLock::new();
    KEPT.get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
}

/// Whether labels of this content and spec are kept (for tests: it keeps
/// nothing).
#[cfg(test)]
#[allow(clippy::mutable_key_type)]
pub(crate) fn is_kept(labels: &LimitLabels, spec: Option<&LimitSpec>) -> bool {
    all_kept().contains_key(&(labels.clone(), spec.copied()))
}

/// The labels kept for `key` in `kept`, kept now if they were not and
/// fewer than `most` are; else a counted handle.
// The key's one mutable part, its header items' cache, takes no part in
// its hash or equality.
#[allow(clippy::mutable_key_type)]
fn keep(kept: &mut Kept, key: (LimitLabels, Option<LimitSpec>), most: usize) -> Labels {
    if let Some(labels) = kept.get(&key) {
        return labels.clone();
    }
    if kept.len() >= most {
        static WARNED: std::sync::Once = std::sync::Once::new();
        WARNED.call_once(|| {
            tracing::warn!(
                "{most} limits' labels kept: the labels of further limits are counted references, each decision under them a little slower"
            );
        });
        return Labels::counted(key.0);
    }
    // Kept for the life of the process, at most `most` of them: a handle to
    // them is then a plain reference.
    let labels = Labels(Handle::Kept(Box::leak(Box::new(key.0.clone()))));
    kept.insert(key, labels.clone());
    labels
}

/// The labels kept, by content and spec.
type Kept = HashMap<(LimitLabels, Option<LimitSpec>), Labels>;

/// The most labels kept for the life of the process (see the module docs).
/// Kept labels are never removed: those of limits a reload dropped and of
/// every rate or name a limit has had stay kept. A TOML config is kept
/// only once it has compiled whole, so one refused keeps nothing; an Envoy
/// rule set refused keeps the labels of the rules compiled before the
/// error. Past the bound (a warning is logged once), labels are
/// counted references: decisions stay correct, a little slower. One set of
/// labels takes about 200 bytes, so the bound holds a few MB.
pub const MOST_KEPT: usize = 16_384;

/// A handle to a limit's labels: a plain reference to labels kept for the
/// life of the process, or a counted one (see the module docs). It reads as
/// the labels; two handles compare and hash as the labels they name.
#[derive(Clone)]
pub struct Labels(Handle);

#[derive(Clone)]
enum Handle {
    Kept(&'static LimitLabels),
    Counted(Arc<LimitLabels>),
}

impl Labels {
    /// A counted handle to `labels`.
    pub fn counted(labels: LimitLabels) -> Self {
        Self(Handle::Counted(Arc::new(labels)))
    }

    /// These labels, kept for the life of the process as
    /// [`LimitLabels::kept`] keeps them: for labels made before the config
    /// that holds them was known to be good. Kept labels stay as they are.
    pub(crate) fn into_kept(self, spec: Option<&LimitSpec>) -> Self {
        match self.0 {
            Handle::Kept(_) => self,
            Handle::Counted(labels) => Arc::unwrap_or_clone(labels).kept(spec),
        }
    }

    /// Whether these are kept labels: a handle that owns nothing, to
    /// labels that live as long as the process (so that their
    /// [`addr`](Self::addr) names them for as long).
    #[inline]
    pub fn is_kept(&self) -> bool {
        matches!(self.0, Handle::Kept(_))
    }

    /// The labels' address: the same for every handle to the same labels.
    /// Not unique per limit: kept labels of equal content and spec are one
    /// (two Envoy descriptors of one name and rate), and a counted handle's
    /// address may be reused once every handle to it is dropped. An
    /// identity for the limits of one policy whose names are unique (the
    /// TOML config's, as the simulator uses it).
    pub fn addr(&self) -> usize {
        std::ptr::from_ref::<LimitLabels>(self).addr()
    }
}

impl std::ops::Deref for Labels {
    type Target = LimitLabels;

    #[inline]
    fn deref(&self) -> &LimitLabels {
        match &self.0 {
            Handle::Kept(labels) => labels,
            Handle::Counted(labels) => labels,
        }
    }
}

impl From<Arc<LimitLabels>> for Labels {
    fn from(labels: Arc<LimitLabels>) -> Self {
        Self(Handle::Counted(labels))
    }
}

impl std::fmt::Debug for Labels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        LimitLabels::fmt(self, f)
    }
}

impl PartialEq for Labels {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl Eq for Labels {}

impl Hash for Labels {
    fn hash<H: Hasher>(&self, state: &mut H) {
        LimitLabels::hash(self, state);
    }
}

/// A limit's items in responses that depend only on its definition (its
/// `RateLimit-Policy` item: name, quota, window; its refusal's body, but
/// for the retry time): made the first time a response needs them, by the
/// adapters, and kept with the limit for every response after, instead of
/// being written per response. Labels compare and hash alike whatever this
/// holds.
#[derive(Debug, Default)]
pub struct HeaderItems {
    policy: OnceLock<(LimitSpec, http::HeaderValue)>,
    refusal: OnceLock<(LimitSpec, Option<[Box<str>; 3]>)>,
}

impl HeaderItems {
    /// The limit's `RateLimit-Policy` item under `spec`: the one kept, when
    /// it was made for `spec` (always, but for a limit answered under
    /// another spec, such as a per-request override), else `make`'s, kept
    /// if none was.
    ///
    /// ```
    /// use sluice_core::{AlgorithmKind, LimitSpec, Rate};
    /// let items = sluice_policy::HeaderItems::default();
    /// let spec = LimitSpec {
    ///     algorithm: AlgorithmKind::Gcra,
    ///     rate: Rate::per_second(10),
    ///     burst: 10,
    ///     nodelay: false,
    /// };
    /// let made = || Some(http::HeaderValue::from_static("\"api\";q=10;w=1"));
    /// assert_eq!(items.policy(&spec, made).unwrap(), "\"api\";q=10;w=1");
    /// // Kept: not made again.
    /// assert_eq!(items.policy(&spec, || None).unwrap(), "\"api\";q=10;w=1");
    /// ```
    pub fn policy(
        &self,
        spec: &LimitSpec,
        make: impl FnOnce() -> Option<http::HeaderValue>,
    ) -> Option<http::HeaderValue> {
        if let Some((kept, value)) = self.policy.get() {
            return if kept == spec {
                Some(value.clone())
            } else {
                make()
            };
        }
        let value = make()?;
        // Two first responses at once: the first kept wins; both are right.
        let _ = self.policy.set((*spec, value.clone()));
        Some(value)
    }

    /// The pieces of the limit's refusal body that go around its retry
    /// time, under `spec`: `make`'s, made once and kept (`None` kept too,
    /// for a limit whose body cannot be cut); `None` as well under another
    /// spec than the one they were made for (a per-request override).
    ///
    /// ```
    /// use sluice_core::{AlgorithmKind, LimitSpec, Rate};
    /// let items = sluice_policy::HeaderItems::default();
    /// let spec = LimitSpec {
    ///     algorithm: AlgorithmKind::Gcra,
    ///     rate: Rate::per_second(10),
    ///     burst: 10,
    ///     nodelay: false,
    /// };
    /// let made = || Some(["a".into(), "b".into(), "c".into()]);
    /// assert_eq!(items.refusal(&spec, made).unwrap()[1].as_ref(), "b");
    /// // Kept: not made again.
    /// assert!(items.refusal(&spec, || None).is_some());
    /// let other = LimitSpec { burst: 20, ..spec };
    /// assert!(items.refusal(&other, made).is_none());
    /// ```
    pub fn refusal(
        &self,
        spec: &LimitSpec,
        make: impl FnOnce() -> Option<[Box<str>; 3]>,
    ) -> Option<&[Box<str>; 3]> {
        let (kept, pieces) = self.refusal.get_or_init(|| (*spec, make()));
        if kept != spec {
            return None;
        }
        pieces.as_ref()
    }
}

/// A copy starts with nothing kept (it is made again on first use).
impl Clone for HeaderItems {
    fn clone(&self) -> Self {
        Self::default()
    }
}

/// What is kept is derived from the labels: it never tells two apart.
impl PartialEq for HeaderItems {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for HeaderItems {}

impl std::hash::Hash for HeaderItems {
    fn hash<H: std::hash::Hasher>(&self, _: &mut H) {}
}

#[cfg(test)]
mod tests {
    use sluice_core::{AlgorithmKind, LimitSpec, Rate};

    use super::{Handle, LimitLabels};

    fn spec(rate: u64) -> LimitSpec {
        LimitSpec {
            algorithm: AlgorithmKind::Gcra,
            rate: Rate::per_second(rate),
            burst: rate,
            nodelay: false,
        }
    }

    #[test]
    fn labels_are_kept_once_per_content_and_spec() {
        let plain = || LimitLabels::plain("kept-once".into(), "GET /a*");
        let a = plain().kept(Some(&spec(10)));
        let b = plain().kept(Some(&spec(10)));
        assert!(matches!(a.0, Handle::Kept(_)), "a plain reference");
        assert_eq!(a.addr(), b.addr(), "kept once, found again");
        // Another spec has its own (its header items differ).
        let c = plain().kept(Some(&spec(20)));
        assert_ne!(a.addr(), c.addr());
        // They name the limit alike, and compare as the labels do.
        assert_eq!(a, c);
        assert_eq!(a, LimitLabels::named("kept-once".into(), "GET /a*"));
        let mut elsewhere = plain();
        elsewhere.endpoint = "POST /b*".into();
        assert_ne!(a, elsewhere.kept(None));
    }

    /// At most so many labels are kept, whatever is asked: past the bound
    /// new ones are counted, and those kept before are still found.
    #[test]
    #[allow(clippy::mutable_key_type)] // as for `keep`
    fn kept_labels_are_bounded() {
        let mut kept = super::Kept::default();
        let key = |name: &str| (LimitLabels::plain(name.into(), "*"), Some(spec(1)));
        let a = super::keep(&mut kept, key("a"), 2);
        let b = super::keep(&mut kept, key("b"), 2);
        assert!(a.is_kept() && b.is_kept());
        for name in ["c", "d", "e"] {
            let past = super::keep(&mut kept, key(name), 2);
            assert!(!past.is_kept(), "{name}: counted past the bound");
            assert_eq!(past.limit.as_ref(), name);
        }
        assert_eq!(kept.len(), 2, "the map stays at its bound");
        assert_eq!(super::keep(&mut kept, key("a"), 2).addr(), a.addr());
    }

    #[test]
    fn named_labels_are_counted() {
        let a = LimitLabels::named("counted".into(), "envoy");
        assert!(matches!(a.0, Handle::Counted(_)));
        assert_eq!(a.clone().addr(), a.addr(), "a clone names the same labels");
        assert_ne!(
            a.addr(),
            LimitLabels::named("counted".into(), "envoy").addr(),
            "each its own"
        );
    }

    /// A config refused keeps no labels, whatever refused it; a good one
    /// keeps its limits' labels.
    #[test]
    fn a_config_refused_keeps_no_labels() {
        let limit = |name: &str| {
            format!("[[limits]]\nname = \"{name}\"\nkey = \"ip\"\nrate = \"7/s\"\nburst = 3\n")
        };
        let good = crate::Policy::from_toml("good.toml", &limit("kept-when-good")).unwrap();
        let def = &good.limits()[0];
        assert!(
            def.limit.labels.is_kept(),
            "a good config's labels are kept"
        );
        let spec = Some(&def.limit.spec);
        assert!(super::is_kept(&def.limit.labels, spec));
        // The same limit under other names, in configs refused after it
        // compiled: by a later limit of the same name, and by a setting
        // checked after the limits.
        let refused = [
            (
                "refused-by-a-twin",
                limit("refused-by-a-twin"),
                "duplicate limit name",
            ),
            (
                "refused-by-its-prefix",
                "[client]\nipv6_prefix = 200\n".to_owned(),
                "ipv6_prefix",
            ),
        ];
        for (name, rest, why) in refused {
            let toml = format!("{}{rest}", limit(name));
            let e = crate::Policy::from_toml("bad.toml", &toml).unwrap_err();
            assert!(e.to_string().contains(why), "{name}: {e}");
            let labels = LimitLabels {
                limit: name.into(),
                ..LimitLabels::clone(&def.limit.labels)
            };
            assert!(!super::is_kept(&labels, spec), "{name}: kept");
        }
    }
}
