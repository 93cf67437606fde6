//! The replay: each log line's request, decided by the policy's engine on a
//! virtual clock set to the line's time, exactly as `sluice serve` decides
//! it (method, path without the query, headers, socket peer; the client IP
//! and keys then come from the policy's own rules). An admitted request
//! under limits that settle after the response is settled when it ends
//! (see [`Simulator::finish`] and [`MAX_IN_FLIGHT`]).

mod settling;

use std::io::BufRead;
use std::path::Path;
use std::sync::Arc;

use http::{HeaderMap, HeaderName, HeaderValue, Method};
use sluice_core::{ManualClock, Nanos};
use sluice_policy::{
    Config, ConfigError, DecideError, Engine, KeySource, KeyText, Policy, RequestInfo, Reservation,
    Source, Verdict,
};
use sluice_store::{KeyHasher, MemoryStore, MemoryStoreConfig};

use crate::log::{CostField, Entry, Format, HeaderKey, JsonlParser, LineError, NginxParser};
use crate::report::{Aggregator, Client, Report};

pub use settling::MAX_IN_FLIGHT;

/// How to replay.
#[derive(Debug, Clone)]
pub struct Options {
    /// The log's format.
    pub format: Format,
    /// The headers held by the extra quoted fields of nginx lines, in order.
    /// `None` takes them from the config: every `header:<Name>` key source
    /// (the `[client]` key first, then the limits' keys in config order),
    /// then `X-Forwarded-For` when the config trusts proxies.
    pub nginx_fields: Option<Vec<String>>,
    /// The secret of the keyed hash that names keys (and splits keys for
    /// `enforce_percent`), as `SLUICE_KEY_SECRET` does for Redis.
    pub key_secret: Vec<u8>,
    /// Show client keys and IPs in the report instead of their hashes.
    pub show_keys: bool,
    /// Where each line's actual cost is read, as
    /// [`CostField::parse`] takes it: `body_bytes_sent` for nginx, a field
    /// or dotted path (`usage.total_tokens`) for JSON lines. `None`: no
    /// cost is read, and limits that settle keep their estimates.
    pub cost_field: Option<String>,
}

impl Options {
    /// Options for a format, with the defaults.
    pub fn new(format: Format) -> Self {
        Self {
            format,
            nginx_fields: None,
            key_secret: b"sluice-simulate".to_vec(),
            show_keys: false,
            cost_field: None,
        }
    }
}

/// Why a replay could not run (bad lines are not errors: they are counted).
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// The config does not load.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A header name given for the nginx fields is not a header name.
    #[error("`{0}` is not a header name")]
    HeaderName(String),
    /// The cost field cannot be read from logs of the format.
    #[error("--cost-field {0}")]
    CostField(String),
    /// The log cannot be read.
    #[error("cannot read the log: {0}")]
    Io(#[from] std::io::Error),
}

/// What the server would have done with a request: the engine's
/// [`Outcome`](sluice_policy::Outcome).
pub use sluice_policy::Outcome as Status;

/// The parser of the chosen format.
#[derive(Debug)]
enum Parser {
    Nginx(NginxParser),
    Jsonl(JsonlParser),
}

impl Parser {
    fn parse<'a>(&mut self, line: &'a str) -> Result<Entry<'a>, LineError> {
        match self {
            Self::Nginx(p) => p.parse(line),
            Self::Jsonl(p) => p.parse(line),
        }
    }
}

/// Replays access logs through a policy.
#[derive(Debug)]
pub struct Simulator {
    engine: Engine<ManualClock>,
    clock: ManualClock,
    policy: Arc<Policy>,
    client_key: Option<KeySource>,
    parser: Parser,
    fields: Vec<HeaderName>,
    /// Header names seen in JSON lines, to build each once.
    names: Vec<(Box<str>, HeaderName)>,
    /// Reused for every line.
    headers: HeaderMap,
    latest: Nanos,
    lines: u64,
    agg: Aggregator,
    hasher: KeyHasher,
    show_keys: bool,
    /// The cost field, as given.
    cost_field: Option<String>,
    /// Admitted requests that settle when they end.
    flights: settling::Flights,
}

impl Simulator {
    /// A simulator for the config file at `path`.
    pub fn load(path: &Path, options: Options) -> Result<Self, SimError> {
        let source = Source::read(path)?;
        Self::from_source(&source, options)
    }

    /// A simulator for a config given as TOML text; `name` stands for the
    /// file in error messages.
    pub fn from_toml(name: &str, text: &str, options: Options) -> Result<Self, SimError> {
        let source = Source {
            file: name.into(),
            text: text.to_owned(),
        };
        Self::from_source(&source, options)
    }

    fn from_source(source: &Source, options: Options) -> Result<Self, SimError> {
        let config = source.parse()?;
        let policy = Policy::compile(source, &config)?;
        let fields = match &options.nginx_fields {
            Some(names) => names
                .iter()
                .map(|n| {
                    HeaderName::from_bytes(n.trim().as_bytes())
                        .map_err(|_| SimError::HeaderName(n.clone()))
                })
                .collect::<Result<_, _>>()?,
            None => default_fields(&config),
        };
        Self::build(
            policy,
            config.store.max_keys,
            config.client.key.clone(),
            fields,
            options,
        )
    }

    /// A simulator for a compiled policy. Without the config, the client is
    /// named by its IP address in the report, and nginx lines carry no
    /// header fields unless `options.nginx_fields` names them.
    pub fn new(policy: Policy, options: Options) -> Result<Self, SimError> {
        let fields = options
            .nginx_fields
            .iter()
            .flatten()
            .map(|n| {
                HeaderName::from_bytes(n.trim().as_bytes())
                    .map_err(|_| SimError::HeaderName(n.clone()))
            })
            .collect::<Result<_, _>>()?;
        let max_keys = MemoryStoreConfig::default().max_keys;
        Self::build(policy, max_keys, None, fields, options)
    }

    fn build(
        policy: Policy,
        max_keys: usize,
        client_key: Option<KeySource>,
        fields: Vec<HeaderName>,
        options: Options,
    ) -> Result<Self, SimError> {
        let clock = ManualClock::new(0);
        // The store the server builds for this policy, on the virtual clock.
        let store = MemoryStore::with_clock(
            MemoryStoreConfig {
                max_keys,
                shards: 0,
            },
            clock.clone(),
        );
        let hasher = KeyHasher::from_secret(&options.key_secret);
        let engine = Engine::with_store(policy, Arc::new(store), hasher.clone());
        let cost = options
            .cost_field
            .as_deref()
            .map(|text| CostField::parse(options.format, text))
            .transpose()
            .map_err(SimError::CostField)?;
        let parser = match (options.format, cost) {
            (Format::Nginx, Some(_)) => {
                Parser::Nginx(NginxParser::new(fields.len()).with_body_bytes_cost())
            }
            (Format::Nginx, None) => Parser::Nginx(NginxParser::new(fields.len())),
            (Format::Jsonl, Some(CostField::Json(path))) => {
                Parser::Jsonl(JsonlParser::with_cost_field(path))
            }
            (Format::Jsonl, _) => Parser::Jsonl(JsonlParser::new()),
        };
        Ok(Self {
            policy: engine.policy(),
            engine,
            clock,
            client_key,
            parser,
            fields,
            names: Vec::new(),
            headers: HeaderMap::new(),
            latest: 0,
            lines: 0,
            agg: Aggregator::default(),
            hasher,
            show_keys: options.show_keys,
            cost_field: options.cost_field,
            flights: settling::Flights::default(),
        })
    }

    /// The headers the extra fields of nginx lines hold, in order.
    pub fn nginx_fields(&self) -> &[HeaderName] {
        &self.fields
    }

    /// Replays every line of a log.
    pub fn replay(&mut self, reader: impl BufRead) -> Result<(), SimError> {
        self.replay_with(reader, |_, _| Ok(()))
    }

    /// Replays every line of a log, calling `each(line_number, status)` for
    /// each request decided (line numbers count from 1; bad and blank lines
    /// are skipped). At the end of the log, the requests still in flight
    /// are settled ([`finish`](Self::finish)).
    pub fn replay_with(
        &mut self,
        mut reader: impl BufRead,
        mut each: impl FnMut(u64, Status) -> std::io::Result<()>,
    ) -> Result<(), SimError> {
        let mut buf = Vec::with_capacity(4096);
        loop {
            buf.clear();
            if reader.read_until(b'\n', &mut buf)? == 0 {
                self.finish();
                return Ok(());
            }
            self.lines += 1;
            if let Some(status) = self.line(&buf) {
                each(self.lines, status)?;
            }
        }
    }

    /// Decides one line (with or without its line break); `None` for a bad
    /// or blank line.
    pub fn line(&mut self, bytes: &[u8]) -> Option<Status> {
        let bytes = bytes.strip_suffix(b"\n").unwrap_or(bytes);
        let bytes = bytes.strip_suffix(b"\r").unwrap_or(bytes);
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return None;
        }
        let number = self.lines;
        let Ok(text) = std::str::from_utf8(bytes) else {
            self.agg.bad_line(number, &LineError::NotUtf8);
            return None;
        };
        let entry = match self.parser.parse(text) {
            Ok(e) => e,
            Err(e) => {
                self.agg.bad_line(number, &e);
                return None;
            }
        };
        match self.decide(&entry) {
            Ok(status) => Some(status),
            Err(e) => {
                self.agg.bad_line(number, &e);
                None
            }
        }
    }

    fn decide(&mut self, entry: &Entry<'_>) -> Result<Status, LineError> {
        let method = Method::from_bytes(entry.method.as_bytes())
            .map_err(|_| LineError::BadRequest(entry.method.to_string()))?;
        self.headers.clear();
        for (key, value) in &entry.headers {
            let name = match key {
                HeaderKey::Field(i) => match self.fields.get(*i) {
                    Some(n) => n.clone(),
                    None => continue,
                },
                HeaderKey::Name(n) => header_name(&mut self.names, n)?,
            };
            let value = HeaderValue::from_bytes(value.as_bytes())
                .map_err(|_| LineError::Malformed("a header value has control characters"))?;
            self.headers.append(name, value);
        }
        // Time never goes back: a line earlier than one already replayed is
        // decided at the latest time seen.
        let time = if entry.time < self.latest {
            self.agg.out_of_order += 1;
            self.latest
        } else {
            entry.time
        };
        self.latest = time;
        // Requests that ended by now give back what they did not use first.
        self.settle_until(time);
        self.clock.set(time);
        let req = RequestInfo {
            method: &method,
            path: &entry.path,
            headers: &self.headers,
            peer: Some(entry.peer),
            cost: entry.cost,
            body: None,
        };
        let (decided, reservation) = decide_with(&self.engine, &req);
        let status = Status::of(&decided);
        let client = client_of(self.client_key.as_ref(), &self.policy, &req);
        self.agg.record(time, client, status, decided.as_ref().ok());
        if let Some(reservation) = reservation {
            self.agg.record_cost(self.lines, entry.actual.as_ref());
            let seen = settling::Seen {
                status: entry.status,
                cost: entry.actual.as_ref().and_then(|a| a.as_ref().ok().copied()),
            };
            self.hold(reservation, time, entry.duration, seen);
        }
        Ok(status)
    }

    /// The report so far.
    pub fn report(&self) -> Report {
        let mut report = self.agg.report(self.show_keys, &self.hasher);
        report.lines = self.lines;
        report.costs.field = self.cost_field.clone().unwrap_or_default();
        report
    }
}

/// Decides a request as the server would: at once, and, when a limit of
/// the policy settles after the response, with the reservation to settle.
/// The memory store answers at once; an engine over any other store is a
/// bug of the caller.
fn decide_with(
    engine: &Engine<ManualClock>,
    req: &RequestInfo<'_>,
) -> (Result<Verdict, DecideError>, Option<Reservation>) {
    match sluice_store::seam::now_or_never(engine.decide_reserving(req)) {
        Some(Ok((verdict, reservation))) => (Ok(verdict), reservation),
        Some(Err(e)) => (Err(e), None),
        None => (
            Err(DecideError::Internal(
                "the simulator needs a store in this process".into(),
            )),
            None,
        ),
    }
}

/// Who a request is from, as the server names the client (the policy reads
/// its key): its `[client]` key, or its IP address when the config names
/// clients by IP or not at all.
fn client_of<'h>(source: Option<&KeySource>, policy: &Policy, req: &RequestInfo<'h>) -> Client<'h> {
    match source {
        Some(KeySource::Global) => Client::Global,
        Some(KeySource::Header(_) | KeySource::Bearer | KeySource::AnyOf(_)) => {
            match policy.client_of(req) {
                Some(KeyText::Borrowed(key)) => Client::Key(key),
                _ => Client::None,
            }
        }
        Some(KeySource::Ip) | None => req
            .peer
            .and_then(|peer| policy.client_net(peer, req.headers).ok())
            .map_or(Client::None, |net| Client::Ip(net.addr())),
    }
}

/// A header name from a log line, built once per distinct spelling.
fn header_name(
    names: &mut Vec<(Box<str>, HeaderName)>,
    name: &str,
) -> Result<HeaderName, LineError> {
    if let Some((_, n)) = names.iter().find(|(k, _)| &**k == name) {
        return Ok(n.clone());
    }
    let n = HeaderName::from_bytes(name.as_bytes())
        .map_err(|_| LineError::Malformed("a header name is not a token"))?;
    // Bounded: a log with endless distinct names only loses the cache.
    if names.len() < 64 {
        names.push((name.into(), n.clone()));
    }
    Ok(n)
}

/// The headers of the extra nginx fields that a config reads: its
/// `header:` key sources, then `X-Forwarded-For` when it trusts proxies.
fn default_fields(config: &Config) -> Vec<HeaderName> {
    let mut out: Vec<HeaderName> = Vec::new();
    let sources = config
        .client
        .key
        .iter()
        .chain(
            config
                .limits
                .iter()
                .filter_map(|l| l.get_ref().key.as_ref()),
        )
        .chain(
            config
                .plans
                .values()
                .flat_map(|p| p.limits.iter().filter_map(|l| l.get_ref().key.as_ref())),
        );
    let authorization = HeaderName::from_static("authorization");
    for s in sources {
        let names: Vec<&HeaderName> = match s {
            KeySource::Header(name) => vec![name],
            KeySource::Bearer => vec![&authorization],
            KeySource::AnyOf(all) => all
                .iter()
                .filter_map(|one| match one {
                    KeySource::Header(name) => Some(name),
                    KeySource::Bearer => Some(&authorization),
                    _ => None,
                })
                .collect(),
            KeySource::Ip | KeySource::Global => Vec::new(),
        };
        for name in names {
            if !out.contains(name) {
                out.push(name.clone());
            }
        }
    }
    if !config.client.trusted_proxies.is_empty() {
        let xff = HeaderName::from_static("x-forwarded-for");
        if !out.contains(&xff) {
            out.push(xff);
        }
    }
    out
}
