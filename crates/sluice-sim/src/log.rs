//! Access-log parsers: nginx's `combined` format (with optional extra quoted
//! header fields) and JSON lines. Both borrow from the line: a line costs no
//! allocation unless a JSON string holds escapes.

use std::borrow::Cow;
use std::net::IpAddr;

use serde::Deserialize;
use sluice_core::Nanos;
use smallvec::SmallVec;

use crate::time::{NginxTime, from_epoch_f64, from_epoch_u64, parse_rfc3339};

/// The format of an access log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// nginx's `combined` format, optionally followed by quoted header
    /// fields (see `docs/simulate.md`).
    Nginx,
    /// One JSON object per line: `time`, `method`, `path`, `ip`, and
    /// optionally `headers` and `cost`.
    Jsonl,
}

/// Which header a value in a log line is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderKey<'a> {
    /// The n-th extra quoted field of an nginx line (from 0), whose header
    /// name the replayer knows.
    Field(usize),
    /// A header named in the line (JSON lines).
    Name(Cow<'a, str>),
}

/// One request read from a log line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry<'a> {
    /// When the request was made, in Unix nanoseconds.
    pub time: Nanos,
    /// The method, as written.
    pub method: Cow<'a, str>,
    /// The path, without the query.
    pub path: Cow<'a, str>,
    /// The socket peer.
    pub peer: IpAddr,
    /// The request headers the log recorded.
    pub headers: SmallVec<[(HeaderKey<'a>, Cow<'a, str>); 4]>,
    /// A cost that overrides the limits' configured costs.
    pub cost: Option<u64>,
}

/// Why a line is not a request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LineError {
    /// The line is not UTF-8.
    #[error("not UTF-8")]
    NotUtf8,
    /// The address is not an IP address.
    #[error("`{0}` is not an IP address")]
    BadIp(String),
    /// The time cannot be read.
    #[error("bad time `{0}`")]
    BadTime(String),
    /// The line does not have the format's shape.
    #[error("{0}")]
    Malformed(&'static str),
    /// The request line is not `METHOD TARGET [PROTOCOL]`.
    #[error("bad request line `{0}`")]
    BadRequest(String),
    /// The JSON does not parse, or lacks a field.
    #[error("bad JSON: {0}")]
    Json(String),
}

/// Cuts a long text for an error message.
fn excerpt(s: &str) -> String {
    match s.char_indices().nth(60) {
        None => s.to_owned(),
        Some((i, _)) => format!("{}…", &s[..i]),
    }
}

/// The path of a request target: the origin form without its query, or the
/// path of an absolute form, as the server's `uri().path()` gives it.
fn target_path(target: &str) -> Option<&str> {
    let path = if target.starts_with('/') {
        target
    } else if let Some(rest) = target
        .strip_prefix("http://")
        .or_else(|| target.strip_prefix("https://"))
    {
        match rest.find(['/', '?']) {
            Some(i) if rest.as_bytes()[i] == b'/' => &rest[i..],
            _ => "/",
        }
    } else if target == "*" {
        return Some("*");
    } else {
        return None;
    };
    let end = memchr::memchr2(b'?', b'#', path.as_bytes()).unwrap_or(path.len());
    Some(&path[..end])
}

/// Whether `s` is an HTTP method token.
fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes().all(|b| {
            b.is_ascii_uppercase()
                || b.is_ascii_alphanumeric()
                || matches!(
                    b,
                    b'!' | b'#'
                        | b'$'
                        | b'%'
                        | b'&'
                        | b'\''
                        | b'*'
                        | b'+'
                        | b'-'
                        | b'.'
                        | b'^'
                        | b'_'
                        | b'`'
                        | b'|'
                        | b'~'
                )
        })
}

/// Parses nginx `combined` lines:
///
/// ```text
/// $remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent "$http_referer" "$http_user_agent"
/// ```
///
/// followed by up to `extra_fields` quoted fields (header values; `"-"` is
/// an absent header). Missing extra fields are absent headers.
#[derive(Debug, Clone)]
pub struct NginxParser {
    extra_fields: usize,
    time: NginxTime,
}

/// A cursor over a line.
struct Cursor<'a> {
    s: &'a str,
    i: usize,
}

impl<'a> Cursor<'a> {
    fn bytes(&self) -> &'a [u8] {
        self.s.as_bytes()
    }

    fn skip_spaces(&mut self) {
        while self.bytes().get(self.i) == Some(&b' ') {
            self.i += 1;
        }
    }

    fn at_end(&self) -> bool {
        self.i >= self.s.len()
    }

    /// The text up to the next space (or the end).
    fn word(&mut self) -> &'a str {
        let start = self.i;
        let end = memchr::memchr(b' ', &self.bytes()[start..]).map_or(self.s.len(), |n| start + n);
        self.i = end;
        &self.s[start..end]
    }

    /// A `"…"` field (a backslash escapes the next byte); the text between
    /// the quotes, as written.
    fn quoted(&mut self) -> Option<&'a str> {
        let b = self.bytes();
        if b.get(self.i) != Some(&b'"') {
            return None;
        }
        let start = self.i + 1;
        let mut j = start;
        loop {
            let n = memchr::memchr2(b'"', b'\\', &b[j..])?;
            j += n;
            if b[j] == b'\\' {
                j += 2;
                if j > b.len() {
                    return None;
                }
            } else {
                self.i = j + 1;
                return Some(&self.s[start..j]);
            }
        }
    }
}

impl NginxParser {
    /// A parser for lines with up to `extra_fields` quoted header fields
    /// after the user agent.
    pub fn new(extra_fields: usize) -> Self {
        Self {
            extra_fields,
            time: NginxTime::new(),
        }
    }

    /// Parses one line (without its line break).
    pub fn parse<'a>(&mut self, line: &'a str) -> Result<Entry<'a>, LineError> {
        let mut c = Cursor { s: line, i: 0 };
        let addr = c.word();
        let peer: IpAddr = addr.parse().map_err(|_| LineError::BadIp(excerpt(addr)))?;
        // ` - $remote_user [`: the user may be anything but `[`.
        let open =
            memchr::memchr(b'[', &c.bytes()[c.i..]).ok_or(LineError::Malformed("no `[time]`"))?;
        c.i += open + 1;
        let time = c
            .bytes()
            .get(c.i..c.i + 26)
            .ok_or(LineError::Malformed("no `[time]`"))?;
        let time = self.time.parse(time).ok_or_else(|| {
            LineError::BadTime(excerpt(line.get(c.i..c.i + 26).unwrap_or_default()))
        })?;
        c.i += 26;
        if c.bytes().get(c.i) != Some(&b']') {
            return Err(LineError::Malformed("no `]` after the time"));
        }
        c.i += 1;
        c.skip_spaces();
        let request = c
            .quoted()
            .ok_or(LineError::Malformed("no quoted request line"))?;
        let (method, path) = parse_request(request)?;
        // $status $body_bytes_sent
        for what in ["no status", "no body size"] {
            c.skip_spaces();
            if c.word().is_empty() {
                return Err(LineError::Malformed(what));
            }
        }
        // The referer and user agent are required by `combined`.
        for what in ["no quoted referer", "no quoted user agent"] {
            c.skip_spaces();
            c.quoted().ok_or(LineError::Malformed(what))?;
        }
        let mut headers = SmallVec::new();
        for n in 0..self.extra_fields {
            c.skip_spaces();
            if c.at_end() {
                break;
            }
            let v = c
                .quoted()
                .ok_or(LineError::Malformed("an extra field is not quoted"))?;
            if v != "-" && !v.is_empty() {
                headers.push((HeaderKey::Field(n), Cow::Borrowed(v)));
            }
        }
        Ok(Entry {
            time,
            method: Cow::Borrowed(method),
            path: Cow::Borrowed(path),
            peer,
            headers,
            cost: None,
        })
    }
}

/// `GET /path?q HTTP/1.1` to the method and the path.
fn parse_request(request: &str) -> Result<(&str, &str), LineError> {
    let bad = || LineError::BadRequest(excerpt(request));
    let b = request.as_bytes();
    let sp = memchr::memchr(b' ', b).ok_or_else(bad)?;
    let method = &request[..sp];
    if !is_token(method) {
        return Err(bad());
    }
    let rest = &request[sp + 1..];
    // The target, then at most a protocol without spaces.
    let (target, protocol) = match memchr::memchr(b' ', rest.as_bytes()) {
        Some(i) => (&rest[..i], Some(&rest[i + 1..])),
        None => (rest, None),
    };
    if protocol.is_some_and(|p| p.contains(' ')) {
        return Err(bad());
    }
    let path = target_path(target).ok_or_else(bad)?;
    Ok((method, path))
}

/// Parses JSON lines:
///
/// ```json
/// {"time": "2026-11-30T03:11:35.25Z", "method": "GET", "path": "/export?x=1",
///  "ip": "192.0.2.7", "headers": {"X-Api-Key": "alice"}, "cost": 2}
/// ```
///
/// `time` is RFC 3339, or a number of seconds (with a fraction) or
/// milliseconds since the epoch. Other fields are ignored.
#[derive(Debug, Clone, Default)]
pub struct JsonlParser;

#[derive(Deserialize)]
struct Text<'a>(#[serde(borrow)] Cow<'a, str>);

#[derive(Deserialize)]
struct JsonLine<'a> {
    time: JsonTime,
    #[serde(borrow)]
    method: Text<'a>,
    #[serde(borrow)]
    path: Text<'a>,
    #[serde(borrow)]
    ip: Text<'a>,
    #[serde(borrow, default)]
    headers: JsonHeaders<'a>,
    #[serde(default)]
    cost: Option<u64>,
}

/// A time as the line wrote it, already converted.
struct JsonTime(Result<Nanos, String>);

impl<'de> Deserialize<'de> for JsonTime {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = JsonTime;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an RFC 3339 string or an epoch number")
            }
            fn visit_u64<E>(self, v: u64) -> Result<JsonTime, E> {
                Ok(JsonTime(from_epoch_u64(v).ok_or_else(|| v.to_string())))
            }
            fn visit_i64<E>(self, v: i64) -> Result<JsonTime, E> {
                Ok(JsonTime(
                    u64::try_from(v)
                        .ok()
                        .and_then(from_epoch_u64)
                        .ok_or_else(|| v.to_string()),
                ))
            }
            fn visit_f64<E>(self, v: f64) -> Result<JsonTime, E> {
                Ok(JsonTime(from_epoch_f64(v).ok_or_else(|| v.to_string())))
            }
            fn visit_str<E>(self, v: &str) -> Result<JsonTime, E> {
                Ok(JsonTime(parse_rfc3339(v).ok_or_else(|| excerpt(v))))
            }
        }
        d.deserialize_any(V)
    }
}

#[derive(Default)]
struct JsonHeaders<'a>(SmallVec<[(HeaderKey<'a>, Cow<'a, str>); 4]>);

impl<'de: 'a, 'a> Deserialize<'de> for JsonHeaders<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for V<'a> {
            type Value = JsonHeaders<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object of header names to string values")
            }
            fn visit_unit<E>(self) -> Result<Self::Value, E> {
                Ok(JsonHeaders::default())
            }
            fn visit_map<M: serde::de::MapAccess<'de>>(
                self,
                mut map: M,
            ) -> Result<Self::Value, M::Error> {
                let mut out = SmallVec::new();
                while let Some((Text(k), Text(v))) = map.next_entry::<Text<'a>, Text<'a>>()? {
                    out.push((HeaderKey::Name(k), v));
                }
                Ok(JsonHeaders(out))
            }
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

impl JsonlParser {
    /// A parser.
    pub fn new() -> Self {
        Self
    }

    /// Parses one line (without its line break).
    pub fn parse<'a>(&mut self, line: &'a str) -> Result<Entry<'a>, LineError> {
        let j: JsonLine<'a> =
            serde_json::from_str(line).map_err(|e| LineError::Json(e.to_string()))?;
        let time = j.time.0.map_err(LineError::BadTime)?;
        let method = j.method.0;
        if !is_token(&method) {
            return Err(LineError::BadRequest(excerpt(&method)));
        }
        let path = match j.path.0 {
            Cow::Borrowed(p) => {
                Cow::Borrowed(target_path(p).ok_or_else(|| LineError::BadRequest(excerpt(p)))?)
            }
            Cow::Owned(p) => Cow::Owned(
                target_path(&p)
                    .ok_or_else(|| LineError::BadRequest(excerpt(&p)))?
                    .to_owned(),
            ),
        };
        let ip = j.ip.0;
        let peer: IpAddr = ip.parse().map_err(|_| LineError::BadIp(excerpt(&ip)))?;
        Ok(Entry {
            time,
            method,
            path,
            peer,
            headers: j.headers.0,
            cost: j.cost,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sluice_core::clock::SECOND;

    const T: Nanos = 971_211_336 * SECOND;

    #[test]
    fn nginx_combined_line() {
        let mut p = NginxParser::new(2);
        let line = r#"127.0.0.1 - frank [10/Oct/2000:13:55:36 -0700] "GET /apache_pb.gif?x=1 HTTP/1.0" 200 2326 "http://www.example.com/start.html" "Mozilla/4.08 [en] (Win98; I ;Nav)""#;
        let e = p.parse(line).unwrap();
        assert_eq!(e.time, T);
        assert_eq!(e.method, "GET");
        assert_eq!(e.path, "/apache_pb.gif");
        assert_eq!(e.peer, "127.0.0.1".parse::<IpAddr>().unwrap());
        assert!(e.headers.is_empty());
        assert_eq!(e.cost, None);
    }

    #[test]
    fn nginx_extra_header_fields() {
        let mut p = NginxParser::new(2);
        let line = r#"2001:db8::7 - - [10/Oct/2000:13:55:36 -0700] "POST http://api.example/export/1?y HTTP/1.1" 429 0 "-" "curl/8 \"quoted\"" "alice" "-""#;
        let e = p.parse(line).unwrap();
        assert_eq!(e.path, "/export/1");
        assert_eq!(e.method, "POST");
        assert_eq!(
            e.headers.as_slice(),
            &[(HeaderKey::Field(0), Cow::Borrowed("alice"))]
        );
        // More fields than configured are ignored; fewer are absent headers.
        let mut one = NginxParser::new(1);
        let line3 = format!("{line} \"extra\"");
        assert_eq!(one.parse(&line3).unwrap().headers.len(), 1);
        let mut three = NginxParser::new(3);
        assert_eq!(three.parse(line).unwrap().headers.len(), 1);
    }

    #[test]
    fn nginx_malformed_lines_are_errors() {
        let mut p = NginxParser::new(1);
        let good = r#"192.0.2.1 - - [10/Oct/2000:13:55:36 -0700] "GET / HTTP/1.1" 200 5 "-" "ua""#;
        assert!(p.parse(good).is_ok());
        let cases = [
            ("", "BadIp"),
            ("garbage", "BadIp"),
            (
                r#"192.0.2.1 - - [10/Oct/2000:13:55:36] "GET / HTTP/1.1" 200 5 "-" "ua""#,
                "time",
            ),
            (
                r#"192.0.2.1 - - [10/Oct/2000:13:61:36 -0700] "GET / HTTP/1.1" 200 5 "-" "ua""#,
                "BadTime",
            ),
            (
                r#"192.0.2.1 - - [10/Oct/2000:13:55:36 -0700] "\x16\x03\x01" 400 5 "-" "-""#,
                "BadRequest",
            ),
            (
                r#"192.0.2.1 - - [10/Oct/2000:13:55:36 -0700] "GET / HTTP/1.1" 200 5 "-" "ua"#,
                "user agent",
            ),
            (
                r#"192.0.2.1 - - [10/Oct/2000:13:55:36 -0700] "GET / HTTP/1.1""#,
                "status",
            ),
            (
                r#"192.0.2.1 - - [10/Oct/2000:13:55:36 -0700] "GET / HTTP/1.1" 200 5 "-" "ua" bare"#,
                "extra field",
            ),
            (
                r#"192.0.2.1 - - [10/Oct/2000:13:55:36 -0700] "GET nopath HTTP/1.1" 200 5 "-" "ua""#,
                "BadRequest",
            ),
            (
                "192.0.2.1 - - [10/Oct/2000:13:55:36 -0700] \"GET / \\",
                "request",
            ),
        ];
        for (line, what) in cases {
            let e = p.parse(line).expect_err(line);
            let text = format!("{e:?} {e}");
            assert!(text.contains(what), "{line}: {text}");
        }
    }

    #[test]
    fn jsonl_lines() {
        let mut p = JsonlParser::new();
        let e = p
            .parse(r#"{"time":"2000-10-10T20:55:36Z","method":"GET","path":"/export?x=1","ip":"192.0.2.7","headers":{"X-Api-Key":"alice"},"cost":3,"status":200}"#)
            .unwrap();
        assert_eq!(e.time, T);
        assert_eq!(e.path, "/export");
        assert_eq!(e.cost, Some(3));
        assert_eq!(
            e.headers.as_slice(),
            &[(
                HeaderKey::Name(Cow::Borrowed("X-Api-Key")),
                Cow::Borrowed("alice")
            )]
        );
        assert!(matches!(e.method, Cow::Borrowed(_)));
        // Epoch seconds, milliseconds, escapes, null headers.
        let e = p
            .parse(r#"{"time":971211336,"method":"GET","path":"/","ip":"::1"}"#)
            .unwrap();
        assert_eq!(e.time, T);
        let e = p
            .parse(r#"{"time":971211336250,"method":"GET","path":"/a\u0062","ip":"::1","headers":null}"#)
            .unwrap();
        assert_eq!(e.time, T + SECOND / 4);
        assert_eq!(e.path, "/ab");
        let e = p
            .parse(r#"{"time":971211336.5,"method":"GET","path":"/","ip":"::1"}"#)
            .unwrap();
        assert_eq!(e.time, T + SECOND / 2);
    }

    #[test]
    fn jsonl_malformed_lines_are_errors() {
        let mut p = JsonlParser::new();
        let cases = [
            ("", "JSON"),
            ("{", "JSON"),
            ("[1,2]", "JSON"),
            (r#"{"method":"GET","path":"/","ip":"::1"}"#, "time"),
            (
                r#"{"time":"yesterday","method":"GET","path":"/","ip":"::1"}"#,
                "BadTime",
            ),
            (
                r#"{"time":-5,"method":"GET","path":"/","ip":"::1"}"#,
                "BadTime",
            ),
            (
                r#"{"time":1,"method":"G T","path":"/","ip":"::1"}"#,
                "BadRequest",
            ),
            (
                r#"{"time":1,"method":"GET","path":"x","ip":"::1"}"#,
                "BadRequest",
            ),
            (
                r#"{"time":1,"method":"GET","path":"/","ip":"nope"}"#,
                "BadIp",
            ),
            (
                r#"{"time":1,"method":"GET","path":"/","ip":"::1","headers":{"a":1}}"#,
                "JSON",
            ),
            (
                r#"{"time":1,"method":"GET","path":"/","ip":"::1","cost":-1}"#,
                "JSON",
            ),
        ];
        for (line, what) in cases {
            let e = p.parse(line).expect_err(line);
            let text = format!("{e:?} {e}");
            assert!(text.contains(what), "{line}: {text}");
        }
    }
}
