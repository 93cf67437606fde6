//! `[server]`, resolved: the timeouts and caps that keep slow, idle and
//! piled-up connections from starving the listeners, and what the proxy
//! waits for its upstream.

use std::time::Duration;

use ipnet::IpNet;
use toml::Spanned;

use crate::ConfigError;
use crate::config::{ServerConfig, Source};

/// The timeouts and caps of one listener's connections.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionSettings {
    /// The longest a request's head may take to arrive: from its first byte,
    /// or from the connection's start for the first request.
    pub header_read_timeout: Duration,
    /// How long a connection may sit idle between requests.
    pub idle_timeout: Duration,
    /// The longest a response frame may wait on the client to be taken (a
    /// reader that does not read): then the connection is closed.
    pub send_timeout: Duration,
    /// How often HTTP/2 connections are pinged; `None`: never.
    pub http2_keepalive_interval: Option<Duration>,
    /// How long a ping's answer may take.
    pub http2_keepalive_timeout: Duration,
    /// The most open connections.
    pub max_connections: usize,
    /// The most open connections from one client address.
    pub max_connections_per_ip: usize,
    /// The longest a request's body may take to arrive, from the end of
    /// its head.
    pub body_timeout: Duration,
    /// The peers (layer-4 load balancers) whose connections start with a
    /// PROXY protocol header; empty: none.
    pub proxy_protocol: Vec<IpNet>,
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
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerSettings {
    /// The data plane (`listen`).
    pub data: ConnectionSettings,
    /// The control API (`control_listen`).
    pub control: ConnectionSettings,
    /// The upstream, in proxy mode.
    pub upstream: UpstreamSettings,
    /// How long a stop signal lets requests in flight finish before the
    /// connections still open are closed and the process exits.
    pub shutdown_timeout: Duration,
    /// How long a reservation of `POST /v1/check` waits to be settled.
    pub reservation_ttl: Duration,
    /// The most reservations of `POST /v1/check` open at once.
    pub max_reservations: usize,
}

impl Default for ServerSettings {
    fn default() -> Self {
        let data = ConnectionSettings {
            header_read_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            send_timeout: Duration::from_secs(60),
            http2_keepalive_interval: Some(Duration::from_secs(20)),
            http2_keepalive_timeout: Duration::from_secs(20),
            max_connections: 10_000,
            max_connections_per_ip: 256,
            body_timeout: Duration::from_secs(60),
            proxy_protocol: Vec::new(),
        };
        Self {
            control: ConnectionSettings {
                max_connections: 1_024,
                max_connections_per_ip: 256,
                body_timeout: Duration::from_secs(30),
                ..data.clone()
            },
            data,
            upstream: UpstreamSettings {
                connect_timeout: Duration::from_secs(5),
                response_timeout: Duration::from_secs(60),
                max_in_flight: 1_024,
            },
            shutdown_timeout: Duration::from_secs(10),
            reservation_ttl: Duration::from_secs(600),
            max_reservations: 100_000,
        }
    }
}

impl ServerSettings {
    /// Resolves `[server]`, pointing errors at the offending field.
    ///
    /// Fields are checked in a fixed order (the listeners' timeouts, the
    /// data plane's own fields, the control API's, then the upstream's), so
    /// that a file with several mistakes always reports the same one first.
    pub fn from_config(source: &Source, server: &ServerConfig) -> Result<Self, ConfigError> {
        let defaults = Self::default();
        let timeouts = connection_timeouts(source, server, &defaults.data)?;
        Ok(Self {
            data: with_listener_fields(
                source,
                &timeouts,
                ListenerFields {
                    max: &server.max_connections,
                    per_ip: &server.max_connections_per_ip,
                    body_timeout: &server.body_timeout,
                    proxy_protocol: &server.proxy_protocol,
                    prefix: "",
                },
                &defaults.data,
            )?,
            control: with_listener_fields(
                source,
                &timeouts,
                ListenerFields {
                    max: &server.control_max_connections,
                    per_ip: &server.control_max_connections_per_ip,
                    body_timeout: &server.control_body_timeout,
                    proxy_protocol: &server.control_proxy_protocol,
                    prefix: "control_",
                },
                &defaults.control,
            )?,
            upstream: upstream_settings(source, server, &defaults.upstream)?,
            shutdown_timeout: duration(
                source,
                &server.shutdown_timeout,
                "shutdown_timeout",
                defaults.shutdown_timeout,
                Zero::Refused,
            )?,
            reservation_ttl: duration(
                source,
                &server.reservation_ttl,
                "reservation_ttl",
                defaults.reservation_ttl,
                Zero::Refused,
            )?,
            max_reservations: count(
                source,
                &server.max_reservations,
                "max_reservations",
                defaults.max_reservations,
            )?,
        })
    }
}

/// What the zero duration (`"0s"`, `"0"` or `"off"`) means for a field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Zero {
    /// "Never": the field is switched off.
    MeansNever,
    /// Nothing sensible: refused.
    Refused,
}

/// `server.<name>`, a duration such as `"10s"`; `default` when absent.
fn duration(
    source: &Source,
    field: &Option<Spanned<String>>,
    name: &str,
    default: Duration,
    zero: Zero,
) -> Result<Duration, ConfigError> {
    let Some(text) = field else {
        return Ok(default);
    };
    let at = |m: String| source.error_at(Some(text.span()), format!("server.{name}: {m}"));
    if zero == Zero::MeansNever && matches!(text.get_ref().trim(), "0" | "0s" | "off") {
        return Ok(Duration::ZERO);
    }
    let value = sluice_core::parse_duration(text.get_ref())
        .map(Duration::from_nanos)
        .map_err(|e| at(format!("`{}`: {e}", text.get_ref())))?;
    if value.is_zero() && zero == Zero::Refused {
        return Err(at("must be longer than 0".to_owned()));
    }
    Ok(value)
}

/// `server.<name>`, a count of at least 1; `default` when absent.
fn count(
    source: &Source,
    field: &Option<Spanned<usize>>,
    name: &str,
    default: usize,
) -> Result<usize, ConfigError> {
    match field {
        Some(n) if *n.get_ref() == 0 => {
            Err(source.error_at(Some(n.span()), format!("server.{name} must be at least 1")))
        }
        Some(n) => Ok(*n.get_ref()),
        None => Ok(default),
    }
}

/// The timeouts both listeners share, over `defaults` (whose own fields are
/// kept).
fn connection_timeouts(
    source: &Source,
    server: &ServerConfig,
    defaults: &ConnectionSettings,
) -> Result<ConnectionSettings, ConfigError> {
    let interval = duration(
        source,
        &server.http2_keepalive_interval,
        "http2_keepalive_interval",
        defaults.http2_keepalive_interval.unwrap_or_default(),
        Zero::MeansNever,
    )?;
    Ok(ConnectionSettings {
        header_read_timeout: duration(
            source,
            &server.header_read_timeout,
            "header_read_timeout",
            defaults.header_read_timeout,
            Zero::Refused,
        )?,
        idle_timeout: duration(
            source,
            &server.idle_timeout,
            "idle_timeout",
            defaults.idle_timeout,
            Zero::Refused,
        )?,
        send_timeout: duration(
            source,
            &server.send_timeout,
            "send_timeout",
            defaults.send_timeout,
            Zero::Refused,
        )?,
        http2_keepalive_interval: (!interval.is_zero()).then_some(interval),
        http2_keepalive_timeout: duration(
            source,
            &server.http2_keepalive_timeout,
            "http2_keepalive_timeout",
            defaults.http2_keepalive_timeout,
            Zero::Refused,
        )?,
        ..defaults.clone()
    })
}

/// One listener's own fields: `server.<prefix>max_connections`,
/// `<prefix>max_connections_per_ip`, `<prefix>body_timeout` and
/// `<prefix>proxy_protocol`.
struct ListenerFields<'a> {
    /// `<prefix>max_connections`.
    max: &'a Option<Spanned<usize>>,
    /// `<prefix>max_connections_per_ip`.
    per_ip: &'a Option<Spanned<usize>>,
    /// `<prefix>body_timeout`.
    body_timeout: &'a Option<Spanned<String>>,
    /// `<prefix>proxy_protocol`.
    proxy_protocol: &'a [IpNet],
    /// `""` for the data plane, `"control_"` for the control API.
    prefix: &'a str,
}

/// `timeouts` with one listener's own fields, over that listener's
/// `defaults`.
fn with_listener_fields(
    source: &Source,
    timeouts: &ConnectionSettings,
    caps: ListenerFields<'_>,
    defaults: &ConnectionSettings,
) -> Result<ConnectionSettings, ConfigError> {
    let prefix = caps.prefix;
    Ok(ConnectionSettings {
        max_connections: count(
            source,
            caps.max,
            &format!("{prefix}max_connections"),
            defaults.max_connections,
        )?,
        max_connections_per_ip: count(
            source,
            caps.per_ip,
            &format!("{prefix}max_connections_per_ip"),
            defaults.max_connections_per_ip,
        )?,
        body_timeout: duration(
            source,
            caps.body_timeout,
            &format!("{prefix}body_timeout"),
            defaults.body_timeout,
            Zero::Refused,
        )?,
        proxy_protocol: caps.proxy_protocol.to_vec(),
        ..timeouts.clone()
    })
}

/// The proxy's `server.upstream_*` fields, over `defaults`.
fn upstream_settings(
    source: &Source,
    server: &ServerConfig,
    defaults: &UpstreamSettings,
) -> Result<UpstreamSettings, ConfigError> {
    Ok(UpstreamSettings {
        connect_timeout: duration(
            source,
            &server.upstream_connect_timeout,
            "upstream_connect_timeout",
            defaults.connect_timeout,
            Zero::Refused,
        )?,
        response_timeout: duration(
            source,
            &server.upstream_response_timeout,
            "upstream_response_timeout",
            defaults.response_timeout,
            Zero::Refused,
        )?,
        max_in_flight: count(
            source,
            &server.upstream_max_in_flight,
            "upstream_max_in_flight",
            defaults.max_in_flight,
        )?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(text: &str) -> Result<ServerSettings, ConfigError> {
        let text = format!("[server]\n{text}\n[[limits]]\nkey = \"ip\"\nrate = \"1/s\"\n");
        crate::Deployment::from_toml("test.toml", &text).map(|d| d.server)
    }

    #[test]
    fn each_listener_has_its_own_body_timeout() {
        let d = server("").unwrap();
        assert_eq!(d.data.body_timeout, Duration::from_secs(60));
        assert_eq!(d.control.body_timeout, Duration::from_secs(30));
        let s = server("body_timeout = \"5s\"\ncontrol_body_timeout = \"2s\"").unwrap();
        assert_eq!(s.data.body_timeout, Duration::from_secs(5));
        assert_eq!(s.control.body_timeout, Duration::from_secs(2));
        let e = server("control_body_timeout = \"0s\"")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("test.toml:2:24: server.control_body_timeout"),
            "{e}"
        );
    }

    #[test]
    fn each_listener_has_its_own_proxy_protocol_peers() {
        let d = server("").unwrap();
        assert!(d.data.proxy_protocol.is_empty() && d.control.proxy_protocol.is_empty());
        let s = server("proxy_protocol = [\"10.0.0.0/8\", \"2001:db8::/32\"]").unwrap();
        let nets: Vec<String> = s
            .data
            .proxy_protocol
            .iter()
            .map(|n| n.to_string())
            .collect();
        assert_eq!(nets, ["10.0.0.0/8", "2001:db8::/32"]);
        assert!(s.control.proxy_protocol.is_empty());
        let s = server("control_proxy_protocol = [\"192.0.2.0/24\"]").unwrap();
        assert_eq!(s.control.proxy_protocol.len(), 1);
        let e = server("proxy_protocol = [\"10.0.0.300/8\"]")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("test.toml:2:"), "{e}");
    }
}
