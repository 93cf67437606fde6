//! # sluice-policy
//!
//! The policy engine: the TOML config ([`config`]), compiled into a
//! [`Policy`] that turns a request into the limits that apply to it, and the
//! [`Engine`] that decides all of them together on a store.

pub mod client_ip;
mod compile;
mod compile_keys;
mod compile_limit;
mod compile_settle;
mod compile_slots;
pub mod config;
mod delay_queue;
pub mod deployment;
pub mod engine;
pub mod envoy_settings;
pub mod events;
pub mod file_read;
pub mod forwarded;
pub mod host;
pub mod key_source;
pub mod key_text;
pub mod keys_file;
pub mod labels;
pub mod limit;
pub mod log_budget;
pub mod matcher;
pub mod overload_settings;
pub mod path;
pub mod policy;
pub mod reload_counts;
pub mod request_body;
mod request_key;
mod runtime;
pub mod server_settings;
pub mod settle;
pub mod settlement;
pub mod slot_wait;
pub mod store_settings;

pub use compile_slots::DEFAULT_LEASE;
pub use config::{Config, ConfigError, HeadersConfig, Source};
pub use deployment::Deployment;
pub use engine::{
    Charge, Counting, Debt, DecideError, Engine, LimitResult, Outcome, PlanSource, Reservation,
    Reserved, Results, RuntimeError, SaveError, SettledLimit, Shadow, UnknownPlan, Verdict,
};
pub use envoy_settings::{EnvoySettings, EnvoyTls, EnvoyXds};
pub use key_source::KeySource;
pub use key_text::KeyText;
pub use labels::{HeaderItems, Labels, LimitLabels};
pub use limit::{DelayDef, Limit};
pub use overload_settings::OverloadSettings;
pub use policy::{
    Access, AmbiguousKey, Applied, AppliedLimits, CostRule, KeyError, LimitDef, Matcher,
    MissingKey, Policy, RequestInfo, RuntimeKeysFile,
};
