//! `[server]`, resolved: the timeouts and caps that keep slow, idle and
//! piled-up connections from starving the listeners, and what the proxy
//! waits for its upstream.

use std::time::Duration;

use crate::ConfigError;
use crate::config::{ServerConfig, Source};

/// The timeouts and caps of one listener's connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionSettings {
    /// The longest a request's head may take to arrive: from its first byte,
    /// or from the connection's start for the first request.
    pub header_read_timeout: Duration,
    /// How long a connection may sit idle between requests.
    pub idle_timeout: Duration,
    /// How often HTTP/2 connections are pinged; `None`: never.
    pub http2_keepalive_interval: Option<Duration>,
    /// How long a ping's answer may take.
    pub http2_keepalive_timeout: Duration,
    /// The most open connections.
    pub max_connections: usize,
    /// The most open connections from one client address.
    pub max_connections_per_ip: usize,
}

/// What the reverse proxy waits for, and how much it asks of, its upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UpstreamSettings {
    /// The longest a connection to the upstream may take.
    pub connect_timeout: Duration,
    /// The longest from sending a request (body included) to the upstream's
    /// response head.
    pub response_timeout: Duration,
    /// The most requests in flight to the upstream.
    pub max_in_flight: usize,
}

/// `[server]`, resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerSettings {
    /// The data plane (`listen`).
    pub data: ConnectionSettings,
    /// The control API (`control_listen`).
    pub control: ConnectionSettings,
    /// The upstream, in proxy mode.
    pub upstream: UpstreamSettings,
}

impl Default for ServerSettings {
    fn default() -> Self {
        let data = ConnectionSettings {
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            http2_keepalive_interval: Some(Duration::from_secs(20)),
            http2_keepalive_timeout: Duration::from_secs(20),
            max_connections: 10_000,
            max_connections_per_ip: 256,
        };
        Self {
            data,
            control: ConnectionSettings {
                max_connections: 1_024,
                max_connections_per_ip: 256,
                ..data
            },
            upstream: UpstreamSettings {
                connect_timeout: Duration::from_secs(5),
                response_timeout: Duration::from_secs(60),
                max_in_flight: 1_024,
            },
        }
    }
}

impl ServerSettings {
    /// Resolves `[server]`, pointing errors at the offending field.
    pub fn from_config(source: &Source, server: &ServerConfig) -> Result<Self, ConfigError> {
        let d = Self::default();
        // A duration field; `"0s"` only where `zero` says it means "never".
        let duration =
            |field: &Option<toml::Spanned<String>>, name: &str, default: Duration, zero: bool| {
                let Some(text) = field else {
                    return Ok(default);
                };
                let at =
                    |m: String| source.error_at(Some(text.span()), format!("server.{name}: {m}"));
                if zero && matches!(text.get_ref().trim(), "0" | "0s" | "off") {
                    return Ok(Duration::ZERO);
                }
                let value = sluice_core::parse_duration(text.get_ref())
                    .map(Duration::from_nanos)
                    .map_err(|e| at(format!("`{}`: {e}", text.get_ref())))?;
                if value.is_zero() && !zero {
                    return Err(at("must be longer than 0".to_owned()));
                }
                Ok(value)
            };
        let count = |n: &Option<toml::Spanned<usize>>, name: &str, default: usize| match n {
            Some(n) if *n.get_ref() == 0 => {
                Err(source.error_at(Some(n.span()), format!("server.{name} must be at least 1")))
            }
            Some(n) => Ok(*n.get_ref()),
            None => Ok(default),
        };
        let interval = duration(
            &server.http2_keepalive_interval,
            "http2_keepalive_interval",
            Duration::from_secs(20),
            true,
        )?;
        let common = ConnectionSettings {
            header_read_timeout: duration(
                &server.header_read_timeout,
                "header_read_timeout",
                d.data.header_read_timeout,
                false,
            )?,
            idle_timeout: duration(
                &server.idle_timeout,
                "idle_timeout",
                d.data.idle_timeout,
                false,
            )?,
            http2_keepalive_interval: (!interval.is_zero()).then_some(interval),
            http2_keepalive_timeout: duration(
                &server.http2_keepalive_timeout,
                "http2_keepalive_timeout",
                d.data.http2_keepalive_timeout,
                false,
            )?,
            ..d.data
        };
        let caps = |max: &Option<toml::Spanned<usize>>,
                    per_ip: &Option<toml::Spanned<usize>>,
                    prefix: &str,
                    dflt: &ConnectionSettings| {
            Ok::<_, ConfigError>(ConnectionSettings {
                max_connections: count(
                    max,
                    &format!("{prefix}max_connections"),
                    dflt.max_connections,
                )?,
                max_connections_per_ip: count(
                    per_ip,
                    &format!("{prefix}max_connections_per_ip"),
                    dflt.max_connections_per_ip,
                )?,
                ..common
            })
        };
        Ok(Self {
            data: caps(
                &server.max_connections,
                &server.max_connections_per_ip,
                "",
                &d.data,
            )?,
            control: caps(
                &server.control_max_connections,
                &server.control_max_connections_per_ip,
                "control_",
                &d.control,
            )?,
            upstream: UpstreamSettings {
                connect_timeout: duration(
                    &server.upstream_connect_timeout,
                    "upstream_connect_timeout",
                    d.upstream.connect_timeout,
                    false,
                )?,
                response_timeout: duration(
                    &server.upstream_response_timeout,
                    "upstream_response_timeout",
                    d.upstream.response_timeout,
                    false,
                )?,
                max_in_flight: count(
                    &server.upstream_max_in_flight,
                    "upstream_max_in_flight",
                    d.upstream.max_in_flight,
                )?,
            },
        })
    }
}
