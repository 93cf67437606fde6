//! The TOML config file: what it may say, and errors that point into it.
//!
//! Unknown fields are errors. Every error names the file, line and column,
//! and says what was expected, e.g.
//! `sluice.toml:12:8: invalid rate: unknown time unit `fortnight``.
//!
//! One file per part of the config:
//!
//! - `source`: the file's text ([`Source`]) and errors located in it
//!   ([`ConfigError`]);
//! - `file`: the whole file ([`Config`]), its top-level keys and tables;
//! - `server`, `store`, `client`, `access`, `headers`, `envoy`, `events`,
//!   `overload`: the tables of the same names;
//! - `plan`: `[plans.<name>]`; `limit`: one limit; `matches`: a limit's
//!   `match`;
//! - `schema`: the JSON Schema of the file ([`json_schema`]), for editors.

mod access;
mod client;
mod envoy;
mod events;
mod file;
mod headers;
mod limit;
mod matches;
mod overload;
mod plan;
mod schema;
mod server;
mod settle;
mod source;
mod store;

pub use access::AccessConfig;
pub use client::{CarryOver, ClientConfig};
pub use envoy::{ConfigPaths, EnvoyConfig, EnvoyTlsConfig, EnvoyXdsConfig};
pub use events::EventsConfig;
pub use file::Config;
pub use headers::HeadersConfig;
pub use limit::{BucketConfig, LimitConfig, OnLimitConfig};
pub use matches::{HeaderMatchConfig, JsonMatchConfig, MatchConfig};
pub use overload::{OnOverloadConfig, OverloadConfig, OverloadPlanConfig};
pub use plan::{AlertConfig, PlanConfig};
pub use schema::{SCHEMA_ID, SCHEMA_TITLE, json_schema};
pub use server::ServerConfig;
pub use settle::{DebtConfig, SettleConfig, StatusItem};
pub use source::{ConfigError, Source};
pub use store::{FallbackConfig, StoreConfig};
/// The span wrapper of config fields that errors point at, re-exported so
/// that a config built in code (for [`Policy::from_config`]) needs no
/// `toml` dependency of its own; such a config's spans are `0..0`.
///
/// [`Policy::from_config`]: crate::Policy::from_config
pub use toml::Spanned;
