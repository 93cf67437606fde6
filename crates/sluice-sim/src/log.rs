//! Access-log parsers: nginx's `combined` format (with optional extra quoted
//! header fields) and JSON lines ([`JsonlParser`]). Both borrow from the line: a
//! line costs no allocation unless a JSON string holds escapes.

mod jsonl;

use std::borrow::Cow;
use std::net::IpAddr;

use sluice_core::Nanos;
use sluice_policy::settlement::MAX_COST;
use smallvec::SmallVec;

use crate::time::NginxTime;

pub use jsonl::{JsonlParser, MAX_DURATION};

/// The format of an access log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// nginx's `combined` format, optionally followed by quoted header
    /// fields (see `docs/simulate.md`).
    Nginx,
    /// One JSON object per line: `time`, `method`, `path`, `ip`, and
    /// optionally `headers`, `cost`, `status` and `duration`.
    Jsonl,
}

/// Where each line's actual cost is read (`--cost-field`): the cost a
/// request turned out to have, which settles its limits after the response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CostField {
    /// nginx: the response size, `$body_bytes_sent` (`-` is 0, as Apache
    /// writes it).
    BodyBytes,
    /// JSON lines: a field, or a dotted path into nested objects
    /// (`usage.total_tokens`), holding a whole number or a string of
    /// digits.
    Json(Vec<Box<str>>),
}

impl CostField {
    /// The cost field named `text` for logs of `format`: for nginx only
    /// `body_bytes_sent` (or `$body_bytes_sent`); for JSON lines a dotted
    /// path of non-empty names that does not start at a field the replay
    /// reads itself (`time`, `path`, ...) other than `cost`.
    pub fn parse(format: Format, text: &str) -> Result<Self, String> {
        let text = text.trim();
        match format {
            Format::Nginx => match text.strip_prefix('$').unwrap_or(text) {
                "body_bytes_sent" => Ok(Self::BodyBytes),
                _ => Err(format!(
                    "`{text}`: the cost of an nginx line can only be its response size, `body_bytes_sent`"
                )),
            },
            Format::Jsonl => {
                let path: Vec<Box<str>> = text.split('.').map(Box::from).collect();
                if path.iter().any(|p| p.is_empty()) {
                    return Err(format!(
                        "`{text}`: name a field, or a dotted path such as `usage.total_tokens`"
                    ));
                }
                let first = &*path[0];
                if jsonl::RESERVED.contains(&first) || (first == "cost" && path.len() > 1) {
                    return Err(format!(
                        "`{text}`: `{first}` is a field the replay reads itself, not a cost"
                    ));
                }
                Ok(Self::Json(path))
            }
        }
    }
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
    /// A cost that overrides the limits' configured costs (the estimate
    /// of a limit that settles).
    pub cost: Option<u64>,
    /// The response status the log recorded, if any.
    pub status: Option<u16>,
    /// How long the request took, if the log says (JSON lines'
    /// `duration`).
    pub duration: Option<Nanos>,
    /// The request's actual cost, read from the cost field: `None` when
    /// the parser reads none; an error when this line's is missing or not
    /// a whole number (at most [`MAX_COST`]).
    pub actual: Option<Result<u64, CostError>>,
}

/// Why a line has no actual cost in its cost field. The line is still a
/// request: it is replayed with no cost observed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CostError {
    /// The line lacks the field (or it is `null`).
    #[error("no cost")]
    Missing,
    /// The field holds something else than a whole number that is not
    /// negative.
    #[error("`{0}` is not a whole number")]
    NotWhole(String),
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
    body_bytes: bool,
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
            body_bytes: false,
        }
    }

    /// The same parser, reading each line's actual cost from its response
    /// size (`$body_bytes_sent`).
    pub fn with_body_bytes_cost(mut self) -> Self {
        self.body_bytes = true;
        self
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
        c.skip_spaces();
        let status = c.word();
        c.skip_spaces();
        let bytes = c.word();
        if status.is_empty() {
            return Err(LineError::Malformed("no status"));
        }
        if bytes.is_empty() {
            return Err(LineError::Malformed("no body size"));
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
            status: status
                .parse::<u16>()
                .ok()
                .filter(|s| (100..=599).contains(s)),
            duration: None,
            actual: self.body_bytes.then(|| body_bytes(bytes)),
        })
    }
}

/// `$body_bytes_sent` as a cost: digits (clamped to [`MAX_COST`]), or `-`
/// for none.
fn body_bytes(word: &str) -> Result<u64, CostError> {
    if word == "-" {
        return Ok(0);
    }
    if !word.bytes().all(|b| b.is_ascii_digit()) {
        return Err(CostError::NotWhole(excerpt(word)));
    }
    // All digits: only too many of them fail to parse.
    Ok(word.parse::<u64>().map_or(MAX_COST, |n| n.min(MAX_COST)))
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
    fn nginx_status_and_body_bytes_as_the_cost() {
        let line = |status: &str, bytes: &str| {
            format!(
                r#"192.0.2.1 - - [10/Oct/2000:13:55:36 -0700] "GET / HTTP/1.1" {status} {bytes} "-" "ua""#
            )
        };
        let mut p = NginxParser::new(0).with_body_bytes_cost();
        let l = line("200", "2326");
        let e = p.parse(&l).unwrap();
        assert_eq!((e.status, e.actual), (Some(200), Some(Ok(2326))));
        assert_eq!(p.parse(&line("204", "-")).unwrap().actual, Some(Ok(0)));
        assert_eq!(
            p.parse(&line("200", "99999999999999999999999"))
                .unwrap()
                .actual,
            Some(Ok(MAX_COST))
        );
        let l = line("abc", "12k");
        let e = p.parse(&l).unwrap();
        assert_eq!(e.status, None, "not a status: ignored");
        assert_eq!(e.actual, Some(Err(CostError::NotWhole("12k".into()))));
        // Without the cost, the size is not read.
        let l = line("503", "12k");
        let e = NginxParser::new(0).parse(&l).unwrap();
        assert_eq!((e.status, e.actual), (Some(503), None));
    }
}
