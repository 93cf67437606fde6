//! Request conditions of a limit: method, path (prefix or glob), host, a
//! header's presence or value, and a boolean field of the JSON body.

use http::{HeaderMap, HeaderName, HeaderValue, Method};

use crate::config::MatchConfig;
use crate::request_body::{BodyFields, MAX_NAME};

/// Request conditions of a limit; every condition given must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Matcher {
    methods: Vec<Method>,
    path_prefix: Option<String>,
    path: Option<PathGlob>,
    host: Option<HostPattern>,
    header: Option<HeaderCondition>,
    json: Option<JsonCondition>,
}

/// Header fields by which a client asks a framework to treat a request as
/// another method.
const METHOD_OVERRIDES: [&str; 3] = [
    "x-http-method-override",
    "x-http-method",
    "x-method-override",
];

/// A path glob: `*` is one whole segment (or, inside a segment, any run of
/// characters but `/`), `**` any number of segments, zero included.
#[derive(Debug, Clone, PartialEq, Eq)]
struct PathGlob {
    text: String,
    segments: Vec<String>,
}

/// A host: exact, or `*.example.com` (any subdomain of `example.com`, not
/// `example.com` itself). Lowercase, without a port.
#[derive(Debug, Clone, PartialEq, Eq)]
enum HostPattern {
    Exact(String),
    Suffix(String),
}

/// A boolean field the JSON body must have, with this value.
#[derive(Debug, Clone, PartialEq, Eq)]
struct JsonCondition {
    name: String,
    value: bool,
}

/// A header that must be present, or present with a value.
#[derive(Debug, Clone, PartialEq, Eq)]
struct HeaderCondition {
    name: HeaderName,
    value: Option<String>,
}

impl Matcher {
    /// Compiles a `match` table. The error says which field is wrong and
    /// what was expected (without the file position: the caller adds it).
    pub fn compile(m: &MatchConfig) -> Result<Self, String> {
        let mut methods = Vec::new();
        for text in &m.methods {
            let method = Method::from_bytes(text.to_ascii_uppercase().as_bytes())
                .map_err(|_| format!("match.methods: `{text}` is not an HTTP method"))?;
            methods.push(method);
        }
        if let Some(p) = m.path_prefix.as_ref().filter(|p| !p.starts_with('/')) {
            return Err(format!("match.path_prefix `{p}` must start with `/`"));
        }
        // Requests match on their canonical path, so rules are put in that
        // form too (`/a b` is `/a%20b`).
        let path_prefix = match &m.path_prefix {
            None => None,
            Some(p) => Some(canonical_rule(p, "match.path_prefix")?),
        };
        let path = match &m.path {
            None => None,
            Some(p) => Some(PathGlob::compile(p)?),
        };
        if path.is_some() && m.path_prefix.is_some() {
            return Err(
                "match: give `path_prefix` or `path` (a glob), not both; `/x/**` is a prefix"
                    .to_owned(),
            );
        }
        let host = match &m.host {
            None => None,
            Some(h) => Some(HostPattern::compile(h)?),
        };
        let header = match &m.header {
            None => None,
            Some(h) => {
                let name = HeaderName::from_bytes(h.name.trim().as_bytes())
                    .map_err(|_| format!("match.header: `{}` is not a header name", h.name))?;
                if let Some(v) = &h.value
                    && HeaderValue::from_str(v).is_err()
                {
                    return Err(format!("match.header: `{v}` is not a valid header value"));
                }
                Some(HeaderCondition {
                    name,
                    value: h.value.clone(),
                })
            }
        };
        let json = match &m.json {
            None => None,
            Some(j) if j.name.is_empty() || j.name.len() > MAX_NAME => {
                return Err(format!(
                    "match.json.name: `{}` must be 1 to {MAX_NAME} bytes (the longest field name read)",
                    j.name
                ));
            }
            Some(j) => Some(JsonCondition {
                name: j.name.clone(),
                value: j.value,
            }),
        };
        Ok(Self {
            methods,
            path_prefix,
            path,
            host,
            header,
            json,
        })
    }

    /// Whether every request matches (no condition).
    pub fn is_any(&self) -> bool {
        *self == Self::default()
    }

    /// Whether the matcher reads the request's JSON body (`match.json`).
    pub fn reads_body(&self) -> bool {
        self.json.is_some()
    }

    /// Whether the matcher reads the request's host (`match.host`).
    pub fn reads_host(&self) -> bool {
        self.host.is_some()
    }

    /// Whether a request is one of the methods: by its own method, or by a
    /// method-override field (`X-HTTP-Method-Override` and its kin, which
    /// many frameworks obey), so that `POST` with `X-HTTP-Method-Override:
    /// DELETE` meets a limit on `DELETE`. A limit on `GET` is a limit on
    /// `HEAD` too: a server answers `HEAD` with its `GET` handler.
    fn meets_method(&self, method: &Method, headers: &HeaderMap) -> bool {
        // One rule for the method and for what an override names, compared
        // as text: a client's override value is never parsed or copied.
        let listed = |m: &[u8]| {
            let is = |want: &Method| m.eq_ignore_ascii_case(want.as_str().as_bytes());
            self.methods.iter().any(is)
                || (is(&Method::HEAD) && self.methods.contains(&Method::GET))
        };
        listed(method.as_str().as_bytes())
            || METHOD_OVERRIDES.iter().any(|name| {
                headers.get_all(*name).iter().any(|v| {
                    v.as_bytes()
                        .split(|&b| b == b',')
                        .any(|m| listed(m.trim_ascii()))
                })
            })
    }

    /// Whether a request with this method and path matches, ignoring host,
    /// header and body conditions (which then do not hold: a matcher with
    /// one never matches here).
    pub fn matches(&self, method: &Method, path: &str) -> bool {
        self.matches_request(method, path, &HeaderMap::new(), None)
    }

    /// Whether a request matches every condition; `body` is what the
    /// adapter read of its JSON body, if it read it.
    pub fn matches_request(
        &self,
        method: &Method,
        path: &str,
        headers: &HeaderMap,
        body: Option<&BodyFields>,
    ) -> bool {
        if !self.methods.is_empty() && !self.meets_method(method, headers) {
            return false;
        }
        if let Some(prefix) = &self.path_prefix {
            let p = prefix.trim_end_matches('/');
            let ok = path
                .strip_prefix(p)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('/') || p.is_empty());
            if !ok {
                return false;
            }
        }
        if let Some(glob) = &self.path
            && !glob.matches(path)
        {
            return false;
        }
        if let Some(host) = &self.host {
            let given = headers
                .get(http::header::HOST)
                .and_then(|v| v.to_str().ok())
                .map(strip_port);
            if !given.is_some_and(|h| host.matches(h)) {
                return false;
            }
        }
        if let Some(h) = &self.header {
            let mut values = headers.get_all(&h.name).iter();
            let ok = match &h.value {
                None => values.next().is_some(),
                Some(want) => values.any(|v| v.to_str().is_ok_and(|v| v.trim() == want)),
            };
            if !ok {
                return false;
            }
        }
        if let Some(j) = &self.json {
            // A body that could not be read holds: a client cannot step
            // around the limit by sending one too long or too slow.
            let ok = body.is_some_and(|b| b.unread() || b.bool(&j.name) == Some(j.value));
            if !ok {
                return false;
            }
        }
        true
    }

    /// The endpoint label: `*`, or the conditions, e.g. `POST /export*`,
    /// `GET /v1/*/export`, `/x* host=api.example.com header=x-tier:batch`,
    /// `POST /v1/* json=stream:true`.
    /// Every part comes from the config, so its cardinality is bounded.
    pub fn describe(&self) -> String {
        let mut parts: Vec<String> = Vec::new();
        if !self.methods.is_empty() {
            let methods: Vec<&str> = self.methods.iter().map(Method::as_str).collect();
            parts.push(methods.join(","));
        }
        if let Some(p) = &self.path_prefix {
            parts.push(format!("{p}*"));
        }
        if let Some(g) = &self.path {
            parts.push(g.text.clone());
        }
        if let Some(h) = &self.host {
            parts.push(format!("host={}", h.text()));
        }
        if let Some(h) = &self.header {
            match &h.value {
                None => parts.push(format!("header={}", h.name)),
                Some(v) => parts.push(format!("header={}:{v}", h.name)),
            }
        }
        if let Some(j) = &self.json {
            parts.push(format!("json={}:{}", j.name, j.value));
        }
        if parts.is_empty() {
            "*".to_owned()
        } else {
            parts.join(" ")
        }
    }
}

/// A rule's path in the canonical form requests are matched in.
fn canonical_rule(text: &str, field: &str) -> Result<String, String> {
    crate::path::canonical(text)
        .map(std::borrow::Cow::into_owned)
        .map_err(|e| format!("{field} `{text}`: {e}"))
}

/// `host:port` → `host` (and `[v6]:port` → `[v6]`), lowercased by callers.
fn strip_port(host: &str) -> &str {
    let host = host.trim();
    if host.starts_with('[') {
        return host.find(']').map_or(host, |i| &host[..=i]);
    }
    match host.rsplit_once(':') {
        Some((h, port)) if port.bytes().all(|b| b.is_ascii_digit()) => h,
        _ => host,
    }
}

impl HostPattern {
    fn compile(text: &str) -> Result<Self, String> {
        let t = text.trim().to_ascii_lowercase();
        let valid = |s: &str| {
            !s.is_empty()
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'))
        };
        if let Some(rest) = t.strip_prefix("*.") {
            if valid(rest) {
                return Ok(Self::Suffix(rest.to_owned()));
            }
        } else if valid(&t) {
            return Ok(Self::Exact(t));
        }
        Err(format!(
            "match.host: `{text}` must be a host name such as \"api.example.com\" or \"*.example.com\" (no port)"
        ))
    }

    fn matches(&self, host: &str) -> bool {
        let host = host.trim_end_matches('.');
        match self {
            Self::Exact(h) => host.eq_ignore_ascii_case(h),
            Self::Suffix(s) => {
                host.len() > s.len() + 1
                    && host[host.len() - s.len()..].eq_ignore_ascii_case(s)
                    && host.as_bytes()[host.len() - s.len() - 1] == b'.'
            }
        }
    }

    fn text(&self) -> String {
        match self {
            Self::Exact(h) => h.clone(),
            Self::Suffix(s) => format!("*.{s}"),
        }
    }
}

impl PathGlob {
    fn compile(text: &str) -> Result<Self, String> {
        if !text.starts_with('/') {
            return Err(format!("match.path `{text}` must start with `/`"));
        }
        let text = &canonical_rule(text, "match.path")?;
        let segments: Vec<String> = text[1..].split('/').map(str::to_owned).collect();
        for s in &segments {
            if s.contains("**") && s != "**" {
                return Err(format!(
                    "match.path `{text}`: `**` must be a whole segment, as in `/v1/**/export`"
                ));
            }
        }
        Ok(Self {
            text: text.to_owned(),
            segments,
        })
    }

    fn matches(&self, path: &str) -> bool {
        let Some(rest) = path.strip_prefix('/') else {
            return false;
        };
        let parts: Vec<&str> = rest.split('/').collect();
        let pattern: Vec<&str> = self.segments.iter().map(String::as_str).collect();
        match_segments(&pattern, &parts)
    }
}

/// Matches path segments against pattern segments; `**` takes any number
/// of segments. Iterative with one backtrack point per `**` (linear for
/// the usual one `**`; bounded by pattern × path otherwise).
fn match_segments(pattern: &[&str], path: &[&str]) -> bool {
    let (mut p, mut s) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while s < path.len() {
        if p < pattern.len() && pattern[p] == "**" {
            star = Some((p, s));
            p += 1;
        } else if p < pattern.len() && segment_matches(pattern[p], path[s]) {
            p += 1;
            s += 1;
        } else if let Some((sp, ss)) = star {
            p = sp + 1;
            s = ss + 1;
            star = Some((sp, ss + 1));
        } else {
            return false;
        }
    }
    pattern[p..].iter().all(|x| *x == "**")
}

/// One segment against a pattern segment where `*` is any run of
/// characters (within the segment).
fn segment_matches(pattern: &str, text: &str) -> bool {
    if !pattern.contains('*') {
        return pattern == text;
    }
    let pieces: Vec<&str> = pattern.split('*').collect();
    let (first, last) = (pieces[0], pieces[pieces.len() - 1]);
    if !text.starts_with(first) || text.len() < first.len() + last.len() || !text.ends_with(last) {
        return false;
    }
    let mut middle = &text[first.len()..text.len() - last.len()];
    for piece in &pieces[1..pieces.len() - 1] {
        match middle.find(piece) {
            Some(i) => middle = &middle[i + piece.len()..],
            None => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::HeaderMatchConfig;

    fn glob(p: &str) -> Matcher {
        Matcher::compile(&MatchConfig {
            path: Some(p.to_owned()),
            ..MatchConfig::default()
        })
        .unwrap()
    }

    #[test]
    fn path_globs() {
        let get = Method::GET;
        let m = glob("/v1/*/export");
        assert!(m.matches(&get, "/v1/users/export"));
        assert!(!m.matches(&get, "/v1/export"));
        assert!(!m.matches(&get, "/v1/a/b/export"));
        assert!(!m.matches(&get, "/v1/users/export/x"));
        let m = glob("/v1/**/export");
        assert!(m.matches(&get, "/v1/export"));
        assert!(m.matches(&get, "/v1/a/b/c/export"));
        assert!(!m.matches(&get, "/v1/a/exports"));
        let m = glob("/files/**");
        assert!(m.matches(&get, "/files"));
        assert!(m.matches(&get, "/files/a/b.txt"));
        assert!(!m.matches(&get, "/filesx"));
        let m = glob("/img/*.png");
        assert!(m.matches(&get, "/img/cat.png"));
        assert!(!m.matches(&get, "/img/cat.jpg"));
        assert!(!m.matches(&get, "/img/a/cat.png"));
        assert!(
            Matcher::compile(&MatchConfig {
                path: Some("v1/*".into()),
                ..MatchConfig::default()
            })
            .is_err()
        );
        assert!(
            Matcher::compile(&MatchConfig {
                path: Some("/v1/a**".into()),
                ..MatchConfig::default()
            })
            .is_err()
        );
    }

    #[test]
    fn a_method_override_field_meets_the_methods() {
        let m = Matcher::compile(&MatchConfig {
            methods: vec!["DELETE".into(), "GET".into()],
            ..Default::default()
        })
        .unwrap();
        let post = Method::POST;
        let mut h = HeaderMap::new();
        assert!(!m.matches_request(&post, "/", &h, None));
        h.insert("x-http-method-override", HeaderValue::from_static("delete"));
        assert!(m.matches_request(&post, "/", &h, None));
        h.insert("x-http-method-override", HeaderValue::from_static("HEAD"));
        assert!(m.matches_request(&post, "/", &h, None), "HEAD meets GET");
        h.insert("x-http-method-override", HeaderValue::from_static("PUT"));
        assert!(!m.matches_request(&post, "/", &h, None));
        assert!(m.matches_request(&Method::HEAD, "/", &HeaderMap::new(), None));
    }

    #[test]
    fn hosts_and_headers() {
        let m = Matcher::compile(&MatchConfig {
            host: Some("*.Example.com".into()),
            header: Some(HeaderMatchConfig {
                name: "X-Tier".into(),
                value: Some("batch".into()),
            }),
            ..MatchConfig::default()
        })
        .unwrap();
        let mut h = HeaderMap::new();
        h.insert("host", HeaderValue::from_static("api.example.com:8443"));
        assert!(!m.matches_request(&Method::GET, "/", &h, None), "no header");
        h.insert("x-tier", HeaderValue::from_static("batch"));
        assert!(m.matches_request(&Method::GET, "/", &h, None));
        h.insert("host", HeaderValue::from_static("example.com"));
        assert!(
            !m.matches_request(&Method::GET, "/", &h, None),
            "not a subdomain"
        );
        h.insert("host", HeaderValue::from_static("evil-example.com"));
        assert!(!m.matches_request(&Method::GET, "/", &h, None));
        h.insert("host", HeaderValue::from_static("a.b.EXAMPLE.com"));
        assert!(m.matches_request(&Method::GET, "/", &h, None));
        h.insert("x-tier", HeaderValue::from_static("interactive"));
        assert!(!m.matches_request(&Method::GET, "/", &h, None));
        assert_eq!(m.describe(), "host=*.example.com header=x-tier:batch");

        let present = Matcher::compile(&MatchConfig {
            header: Some(HeaderMatchConfig {
                name: "X-Debug".into(),
                value: None,
            }),
            ..MatchConfig::default()
        })
        .unwrap();
        assert!(present.matches_request(
            &Method::GET,
            "/",
            &{
                let mut h = HeaderMap::new();
                h.insert("x-debug", HeaderValue::from_static(""));
                h
            },
            None
        ));
        assert!(!present.matches_request(&Method::GET, "/", &HeaderMap::new(), None));
        let exact = Matcher::compile(&MatchConfig {
            host: Some("api.example.com".into()),
            ..MatchConfig::default()
        })
        .unwrap();
        let mut h = HeaderMap::new();
        h.insert("host", HeaderValue::from_static("API.example.com"));
        assert!(exact.matches_request(&Method::GET, "/", &h, None));
        assert!(
            Matcher::compile(&MatchConfig {
                host: Some("api.example.com:80".into()),
                ..MatchConfig::default()
            })
            .is_err()
        );
    }

    #[test]
    fn describe_keeps_the_old_labels() {
        let m = Matcher::compile(&MatchConfig {
            methods: vec!["post".into()],
            path_prefix: Some("/export".into()),
            ..MatchConfig::default()
        })
        .unwrap();
        assert_eq!(m.describe(), "POST /export*");
        assert_eq!(Matcher::default().describe(), "*");
        assert!(Matcher::default().is_any());
        assert_eq!(glob("/v1/*/export").describe(), "/v1/*/export");
    }

    #[test]
    fn a_json_condition_holds_for_its_value_and_for_a_body_not_read() {
        let m = Matcher::compile(&MatchConfig {
            path_prefix: Some("/v1".into()),
            json: Some(crate::config::JsonMatchConfig {
                name: "stream".into(),
                value: true,
            }),
            ..MatchConfig::default()
        })
        .unwrap();
        assert!(m.reads_body() && !Matcher::default().reads_body());
        assert_eq!(m.describe(), "/v1* json=stream:true");
        let post = Method::POST;
        let h = HeaderMap::new();
        let with = |f: fn(&mut BodyFields)| {
            let mut b = BodyFields::new();
            f(&mut b);
            b
        };
        let streams = with(|b| b.push_bool("stream", true));
        let not = with(|b| b.push_bool("stream", false));
        let number = with(|b| b.push_whole("stream", 1));
        assert!(m.matches_request(&post, "/v1/chat", &h, Some(&streams)));
        assert!(!m.matches_request(&post, "/v1/chat", &h, Some(&not)));
        assert!(
            !m.matches_request(&post, "/v1/chat", &h, Some(&number)),
            "1 is not true"
        );
        assert!(!m.matches_request(&post, "/v1/chat", &h, Some(&BodyFields::new())));
        assert!(
            !m.matches_request(&post, "/v1/chat", &h, None),
            "no JSON body"
        );
        let unread = BodyFields::unreadable();
        assert!(m.matches_request(&post, "/v1/chat", &h, Some(&unread)));
        assert!(!m.matches_request(&post, "/v2/chat", &h, Some(&streams)));
        let too_long = MatchConfig {
            json: Some(crate::config::JsonMatchConfig {
                name: "x".repeat(MAX_NAME + 1),
                value: true,
            }),
            ..MatchConfig::default()
        };
        assert!(Matcher::compile(&too_long).is_err());
    }
}
