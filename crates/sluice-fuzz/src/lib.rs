//! # sluice-fuzz
//!
//! Sluice's fuzz targets, one plain function per target: each takes any
//! bytes, feeds them to the real parser or decision code, and asserts the
//! properties that code promises. None of them may panic on any input:
//! that is the first property under test.
//!
//! The cargo-fuzz targets in `fuzz/fuzz_targets/` only call these
//! functions, so they build on nightly with the fuzzer's instrumentation,
//! while `tests/corpora.rs` replays every committed corpus file through the
//! same functions on stable, in an ordinary `cargo test`.
//!
//! | target | feeds |
//! | --- | --- |
//! | [`config_toml`] | a TOML config to [`Policy::from_toml`] |
//! | [`envoy_yaml`] | an envoyproxy/ratelimit YAML config to [`Rules::from_yaml`] |
//! | [`rate`] | a rate (`10/s`) and a duration (`10ms`) to their parsers |
//! | [`forwarded`] | `X-Forwarded-For` and `Forwarded` fields to [`TrustedProxies`] |
//! | [`check_json`] | a `POST /v1/check` body, decided on the quick-start config |
//! | [`path`] | a request path to [`canonical`] |
//! | [`access_log`] | access-log lines to the nginx and JSON-lines parsers |
//! | [`rls_request`] | a protobuf `RateLimitRequest`, decided by [`EnvoyRls`] |

use std::borrow::Cow;
use std::collections::HashSet;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, OnceLock};

use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use http::{HeaderMap, HeaderName, HeaderValue};
use prost::Message;
use sluice_core::{AlgorithmKind, Rate, parse_duration};
use sluice_envoy::yaml_config::{YamlConfig, YamlDescriptor};
use sluice_envoy::{EnvoyRls, Rules, validate};
use sluice_http::control::{CheckRequest, MAX_CHECK_HEADERS};
use sluice_policy::client_ip::TrustedProxies;
use sluice_policy::path::canonical;
use sluice_policy::{Config, Engine, Policy, RequestInfo, Source};
use sluice_sim::{JsonlParser, NginxParser};
use sluice_store::{MemoryStore, MemoryStoreConfig};

/// The folder of the files a fuzzed config may name (`keys.csv`,
/// `keys.toml`): [`config_toml`] compiles every config as if it were a file
/// in this folder.
pub const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures");

/// The examples folder, whose configs the decision targets decide on.
const EXAMPLES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples");

/// The quick-start config, which [`check_json`] decides on.
const QUICKSTART: &str = include_str!("../../../examples/quickstart.toml");

/// Whether every keys file `config` names is a relative path that stays in
/// the folder it is resolved against: no root, no `..` (a `.` is harmless).
/// Only those configs
/// are compiled, so a fuzzed config never reads a file outside
/// [`FIXTURES`] (such as `/dev/zero`, which would never end, or a FIFO,
/// which would block).
fn keys_files_stay_inside(config: &Config) -> bool {
    [&config.client.keys_file, &config.client.runtime_keys_file]
        .into_iter()
        .flatten()
        .all(|f| {
            let p = Path::new(f.get_ref());
            p.components().next().is_some()
                && p.components()
                    .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
        })
}

/// Compiles the bytes as a TOML config with [`Policy::from_toml`], named
/// as a file in [`FIXTURES`] so that a relative `keys_file` or
/// `runtime_keys_file` is read from there. Bytes that are not UTF-8 are
/// skipped, and so are configs whose keys files would be read from outside
/// [`FIXTURES`] (absolute, or climbing with `..`).
///
/// Properties: no panic; an error that points into the config points at
/// one of its lines.
pub fn config_toml(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let name = PathBuf::from(FIXTURES).join("fuzz.toml");
    let source = Source {
        file: name.clone(),
        text: text.to_owned(),
    };
    // `from_toml` parses the same text the same way: a config that does
    // not parse here fails there before any file is read.
    if let Ok(config) = source.parse()
        && !keys_files_stay_inside(&config)
    {
        return;
    }
    let Some(name_str) = name.to_str() else {
        return;
    };
    if let Err(e) = Policy::from_toml(name_str, text)
        && e.file == name
    {
        let lines = text.matches('\n').count() + 1;
        assert!(
            e.line <= lines,
            "error at line {} of a {lines}-line config: {e}",
            e.line
        );
    }
}

/// The algorithm [`envoy_yaml`] compiles an input's limits with: picked by
/// the input's length, so that the corpus covers each of them.
fn algorithm_for(data: &[u8]) -> AlgorithmKind {
    AlgorithmKind::ALL[data.len() % AlgorithmKind::ALL.len()]
}

/// Every `(key, value)` chain from the top of `descriptors` down, with a
/// wildcard or missing value written as some value it would match.
fn chains<'a>(
    descriptors: &'a [YamlDescriptor],
    prefix: &mut Vec<(&'a str, &'a str)>,
    out: &mut Vec<Vec<(&'a str, &'a str)>>,
) {
    for d in descriptors {
        if out.len() >= 256 {
            return;
        }
        let value = d.value.as_deref().map_or("x", |v| v.trim_end_matches('*'));
        prefix.push((d.key.as_str(), value));
        out.push(prefix.clone());
        chains(&d.descriptors, prefix, out);
        prefix.pop();
    }
}

/// Compiles the bytes as an envoyproxy/ratelimit YAML config with
/// [`Rules::from_yaml`] on a small memory store, then looks up each
/// descriptor chain the config itself names (read again with the loader's
/// own YAML types). Bytes that are not UTF-8 are
/// skipped.
///
/// Property: no panic.
pub fn envoy_yaml(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let store = MemoryStore::new(MemoryStoreConfig {
        max_keys: 64,
        shards: 1,
    });
    let Ok(rules) = Rules::from_yaml("fuzz.yaml", text, &store, &algorithm_for(data).into()) else {
        return;
    };
    // The text compiled, so it reads again as the loader's YAML types.
    let Ok(config) = serde_yaml_ng::from_str::<YamlConfig>(text) else {
        return;
    };
    let mut out = Vec::new();
    chains(&config.descriptors, &mut Vec::new(), &mut out);
    for chain in &out {
        let _ = rules.find(&config.domain, chain.iter().copied());
    }
}

/// Parses the bytes as a rate (`10/s`, `50 per 10s`) and as a duration
/// (`10ms`). Bytes that are not UTF-8 are skipped.
///
/// Properties: no panic; a parsed rate has an amount and a period of at
/// least 1, equals [`Rate::new`] of them, and its `Display` parses back to
/// an equal rate (the round trip the code documents); a parsed duration is
/// at least 1 ns, and is the period of `1 per <duration>`.
pub fn rate(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(rate) = text.parse::<Rate>() {
        assert!(rate.amount() >= 1 && rate.period() >= 1, "{rate:?}");
        assert_eq!(Rate::new(rate.amount(), rate.period()), Some(rate));
        let shown = rate.to_string();
        match shown.parse::<Rate>() {
            Ok(back) => assert_eq!(back, rate, "{text:?} shows as {shown:?}"),
            Err(e) => panic!("{text:?} shows as {shown:?}, which does not parse: {e}"),
        }
        for cost in [0, 1, rate.amount(), u64::MAX] {
            let _ = rate.refill_time(cost);
        }
    }
    if let Ok(ns) = parse_duration(text) {
        assert!(ns >= 1, "{text:?} is {ns} ns");
        if !text.contains('/') {
            let one: Rate = match format!("1 per {text}").parse() {
                Ok(r) => r,
                Err(e) => panic!("{text:?} is a duration but not a period: {e}"),
            };
            assert_eq!(one.period(), ns, "{text:?}");
        }
    }
}

/// The most header fields [`forwarded`] builds: far more than a request
/// carries, far fewer than `HeaderMap` allows.
const MAX_FUZZ_HEADERS: usize = 1000;

/// The addresses a forwarding hop could name in `values`: each token
/// between the separators the parsers split on (`,` `;` `=` `"` `[` `]`
/// and white space), as an address or as an address and a port, with
/// IPv4-mapped IPv6 addresses as their IPv4 address, and backslashes
/// (quoted-string escapes) dropped. A superset of what the parsers can
/// read, built independently of them.
fn addresses_in<'a>(values: impl IntoIterator<Item = &'a [u8]>) -> HashSet<IpAddr> {
    let mut found = HashSet::new();
    for value in values {
        let text = String::from_utf8_lossy(value).replace('\\', "");
        for token in text.split(|c: char| ",;=\"[]".contains(c) || c.is_whitespace()) {
            let candidates = [
                token.parse::<IpAddr>().ok(),
                token
                    .rsplit_once(':')
                    .and_then(|(addr, _)| addr.parse::<IpAddr>().ok()),
            ];
            for ip in candidates.into_iter().flatten() {
                found.insert(ip);
                if let IpAddr::V6(v6) = ip
                    && let Some(v4) = v6.to_ipv4_mapped()
                {
                    found.insert(IpAddr::V4(v4));
                }
            }
        }
    }
    found
}

/// Reads the bytes as header lines, `name: value` one a line (lines
/// without a `:`, with an invalid name, or with a value that
/// `HeaderValue::from_bytes` refuses are skipped), and asks
/// [`TrustedProxies::client_ip`] and [`TrustedProxies::client_net`] for
/// the client of a request from 127.0.0.1, with 127.0.0.0/8 trusted.
///
/// Properties: no panic; the client is the peer or an address written in
/// one of the fields' values; its network contains it.
pub fn forwarded(data: &[u8]) {
    let mut headers = HeaderMap::new();
    let mut values: Vec<&[u8]> = Vec::new();
    for line in data.split(|&b| b == b'\n').take(MAX_FUZZ_HEADERS) {
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let (name, value) = (&line[..colon], &line[colon + 1..]);
        let value = value.strip_prefix(b" ").unwrap_or(value);
        let value = value.strip_suffix(b"\r").unwrap_or(value);
        let (Ok(name), Ok(header)) = (HeaderName::from_bytes(name), HeaderValue::from_bytes(value))
        else {
            continue;
        };
        headers.append(name, header);
        values.push(value);
    }
    let peer = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let trusted = TrustedProxies::new(vec![ipnet::IpNet::V4(
        ipnet::Ipv4Net::new(Ipv4Addr::new(127, 0, 0, 0), 8).unwrap_or_default(),
    )]);
    let Ok(client) = trusted.client_ip(peer, &headers) else {
        // Headers that name different clients: refused, none chosen.
        return;
    };
    if client != peer {
        assert!(
            addresses_in(values.iter().copied()).contains(&client),
            "client {client} is neither the peer nor written in {headers:?}"
        );
    }
    let net = trusted
        .client_net(peer, &headers)
        .unwrap_or_else(|e| panic!("{e}: client_ip gave {client}"));
    assert!(net.contains(&client), "{net} does not contain {client}");
}

/// The engine [`check_json`] decides on: the quick-start config, built once.
fn check_engine() -> &'static Engine {
    static ENGINE: OnceLock<Engine> = OnceLock::new();
    ENGINE.get_or_init(|| {
        let name = format!("{EXAMPLES}/quickstart.toml");
        match Policy::from_toml(&name, QUICKSTART) {
            Ok(policy) => Engine::new(policy),
            Err(e) => panic!("examples/quickstart.toml does not compile: {e}"),
        }
    })
}

/// Reads the bytes as the JSON body of `POST /v1/check` and takes the
/// handler's steps up to its decision: the method parsed, the header map
/// built (a body whose fields do not convert is skipped, as the handler
/// answers it with 400), the query cut off the path, and the request
/// decided with [`Engine::decide_now`] on an engine built once from
/// `examples/quickstart.toml`: the handler's own steps
/// ([`CheckRequest::parts`]); the verdict is then rendered as the handler
/// renders it (JSON body and header fields).
///
/// Properties: no panic; a body never yields more than
/// [`MAX_CHECK_HEADERS`] header fields.
pub fn check_json(data: &[u8]) {
    let Ok(req) = serde_json::from_slice::<CheckRequest>(data) else {
        return;
    };
    assert!(req.headers.len() <= MAX_CHECK_HEADERS);
    // The handler's own steps; a check they refuse is answered with 400.
    let Ok((method, headers, path)) = req.parts() else {
        return;
    };
    let decided = check_engine().decide_now(&RequestInfo {
        method: &method,
        path,
        headers: &headers,
        peer: req.client_ip,
        cost: req.cost,
        body: None,
    });
    if let Some(Ok(verdict)) = decided {
        let body = serde_json::to_vec(&sluice_http::verdict_json::VerdictJson::new(&verdict));
        assert!(body.is_ok(), "a verdict does not serialize: {body:?}");
        let mut out = HeaderMap::new();
        sluice_http::headers::add_headers(&verdict, &mut out);
    }
}

/// Canonicalizes the bytes as a request path with [`canonical`]. Bytes
/// that are not UTF-8 are skipped.
///
/// Properties: no panic; a canonical path is `*` or starts with `/`, has
/// no `.` or `..` segment and no `//`, and is its own canonical form,
/// borrowed (canonicalizing is idempotent, and a canonical path is
/// recognised without a copy).
pub fn path(data: &[u8]) {
    let Ok(raw) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(out) = canonical(raw) else {
        return;
    };
    let out: &str = &out;
    if out != "*" {
        assert!(out.starts_with('/'), "{raw:?} -> {out:?}");
        assert!(!out.contains("//"), "{raw:?} -> {out:?}");
        assert!(
            out.split('/').all(|s| s != "." && s != ".."),
            "{raw:?} -> {out:?}"
        );
    }
    match canonical(out) {
        Ok(Cow::Borrowed(again)) => assert_eq!(again, out, "{raw:?}"),
        Ok(Cow::Owned(again)) => panic!("{raw:?} -> {out:?} -> {again:?} (copied)"),
        Err(e) => panic!("{raw:?} -> {out:?}, which is refused: {e}"),
    }
}

/// The path of a parsed log line is what a server's `uri().path()` gives:
/// `*`, or a path starting with `/` without its query or fragment.
fn assert_log_path(line: &str, path: &str) {
    assert!(
        path == "*" || (path.starts_with('/') && !path.contains(['?', '#'])),
        "{line:?} has the path {path:?}"
    );
}

/// Splits the bytes into lines and parses each UTF-8 line (without its
/// `\r\n` or `\n`) with both access-log parsers: nginx `combined` with up
/// to 3 extra quoted fields ([`NginxParser`], one parser for all the lines,
/// as its time cache is kept from line to line) and JSON lines
/// ([`JsonlParser`]).
///
/// Properties: no panic; a parsed line's path is `*` or starts with `/`
/// and holds no query or fragment; an nginx line has at most 3 header
/// fields.
pub fn access_log(data: &[u8]) {
    let mut nginx = NginxParser::new(3);
    let mut jsonl = JsonlParser::new();
    for line in data.split(|&b| b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Ok(line) = std::str::from_utf8(line) else {
            continue;
        };
        if let Ok(entry) = nginx.parse(line) {
            assert_log_path(line, &entry.path);
            assert!(entry.headers.len() <= 3, "{line:?}");
        }
        if let Ok(entry) = jsonl.parse(line) {
            assert_log_path(line, &entry.path);
        }
    }
}

/// The Rate Limit Service [`rls_request`] decides with, built as `sluice
/// serve` builds it for `examples/envoy.toml` (its YAML rules, its
/// algorithm, the engine's memory store), with the runtime that drives it.
fn rls() -> &'static (EnvoyRls, tokio::runtime::Runtime) {
    static RLS: OnceLock<(EnvoyRls, tokio::runtime::Runtime)> = OnceLock::new();
    RLS.get_or_init(|| {
        let name = format!("{EXAMPLES}/envoy.toml");
        let text = match std::fs::read_to_string(&name) {
            Ok(t) => t,
            Err(e) => panic!("cannot read {name}: {e}"),
        };
        let policy = match Policy::from_toml(&name, &text) {
            Ok(p) => p,
            Err(e) => panic!("examples/envoy.toml does not compile: {e}"),
        };
        let deployment = match sluice_policy::Deployment::from_toml(&name, &text) {
            Ok(d) => d,
            Err(e) => panic!("examples/envoy.toml does not compile: {e}"),
        };
        let Some(envoy) = deployment.envoy else {
            panic!("examples/envoy.toml has no [envoy] table");
        };
        let engine = Arc::new(Engine::new(policy));
        let rules = match Rules::load_all(
            &envoy.configs,
            engine.store().as_ref(),
            &envoy.algorithm.into(),
        ) {
            Ok(r) => r,
            Err(e) => panic!("examples/envoy/ratelimit.yaml does not load: {e}"),
        };
        let service = EnvoyRls::new(Arc::new(rules), engine.clone());
        let runtime = match tokio::runtime::Builder::new_current_thread().build() {
            Ok(r) => r,
            Err(e) => panic!("no runtime: {e}"),
        };
        (service, runtime)
    })
}

/// Decodes the bytes as a protobuf `RateLimitRequest` (as the gRPC server
/// does), checks it with [`validate`] and, when it is valid, decides it
/// with [`EnvoyRls::decide`] on the service of `examples/envoy.toml`.
///
/// Properties: no panic; a valid request is decided, with one status per
/// descriptor, and its overall code is `OVER_LIMIT` exactly when one of
/// its descriptors' is.
pub fn rls_request(data: &[u8]) {
    let Ok(req) = RateLimitRequest::decode(data) else {
        return;
    };
    if validate(&req).is_err() {
        return;
    }
    let (service, runtime) = rls();
    let response = match runtime.block_on(service.decide(&req)) {
        Ok(r) => r,
        Err(e) => panic!("a valid request was refused: {e}"),
    };
    assert_eq!(response.statuses.len(), req.descriptors.len());
    let over = response
        .statuses
        .iter()
        .any(|s| s.code == Code::OverLimit as i32);
    assert_eq!(response.overall_code == Code::OverLimit as i32, over);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(text: &str) -> Config {
        let source = Source {
            file: "t.toml".into(),
            text: text.to_owned(),
        };
        match source.parse() {
            Ok(c) => c,
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn keys_files_are_read_only_inside_the_fixtures() {
        for inside in ["keys.csv", "sub/keys.toml", "./keys.csv"] {
            let c = parsed(&format!("[client]\nkeys_file = {inside:?}\n"));
            assert!(keys_files_stay_inside(&c), "{inside}");
        }
        for outside in ["/dev/zero", "../keys.csv", "a/../../b.csv", ""] {
            let c = parsed(&format!("[client]\nruntime_keys_file = {outside:?}\n"));
            assert!(!keys_files_stay_inside(&c), "{outside}");
        }
        assert!(keys_files_stay_inside(&parsed("")));
    }

    #[test]
    fn a_config_naming_dev_zero_is_skipped() {
        // Read, it would never end.
        config_toml(b"[client]\nkey = \"ip\"\nkeys_file = \"/dev/zero\"\n");
    }

    #[test]
    fn the_fixture_keys_files_are_read() {
        let text = "[client]\nkey = \"header:X-Api-Key\"\nkeys_file = \"keys.csv\"\n\
                    [plans.free]\nlimits = [{ rate = \"1/s\", burst = 1 }]\n\
                    [plans.pro]\nlimits = [{ rate = \"2/s\", burst = 2 }]\n";
        let name = format!("{FIXTURES}/fuzz.toml");
        let policy = match Policy::from_toml(&name, text) {
            Ok(p) => p,
            Err(e) => panic!("{e}"),
        };
        assert_eq!(policy.plan_of("fuzz-pro-key"), Some("pro"));
    }

    #[test]
    fn the_forwarding_oracle_finds_each_spelling() {
        let found = addresses_in([&b"for=\"[2001:db8::1]:80\";by=x, 192.0.2.1:99"[..]]);
        for ip in ["2001:db8::1", "192.0.2.1"] {
            assert!(
                found.contains(
                    &ip.parse::<IpAddr>()
                        .unwrap_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED))
                )
            );
        }
        let mapped = addresses_in([&b"::ffff:c000:201"[..]]);
        assert!(mapped.contains(&IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1))));
    }

    #[test]
    fn the_shared_services_build() {
        let _ = check_engine();
        let _ = rls();
    }
}
