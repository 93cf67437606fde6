//! A minimal blocking RESP2 client for test set-up: one command, one
//! complete reply (unlike `RedisServer::command`, long and nested replies
//! are read whole).

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// One RESP2 reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// `+OK`.
    Simple(String),
    /// `-ERR …`.
    Error(String),
    /// `:42`.
    Int(i64),
    /// `$…`; `None` for a nil bulk string.
    Bulk(Option<String>),
    /// `*…`; `None` for a nil array.
    Array(Option<Vec<Reply>>),
}

impl Reply {
    /// The text of a simple or bulk string reply.
    pub fn text(&self) -> Option<&str> {
        match self {
            Reply::Simple(s) | Reply::Bulk(Some(s)) => Some(s),
            _ => None,
        }
    }

    /// Whether this is `+OK`.
    pub fn is_ok(&self) -> bool {
        matches!(self, Reply::Simple(s) if s == "OK")
    }
}

/// Sends `args` to the server at `addr` over a fresh connection and reads
/// one complete reply.
pub fn command(addr: SocketAddr, args: &[&str]) -> std::io::Result<Reply> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_millis(500))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut req = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        req.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        req.extend_from_slice(a.as_bytes());
        req.extend_from_slice(b"\r\n");
    }
    stream.write_all(&req)?;
    read_reply(&mut BufReader::new(stream))
}

fn bad(what: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_owned())
}

fn read_reply(r: &mut impl BufRead) -> std::io::Result<Reply> {
    let mut line = String::new();
    if r.read_line(&mut line)? == 0 {
        return Err(bad("connection closed"));
    }
    let line = line.trim_end_matches(['\r', '\n']);
    let (kind, rest) = line.split_at_checked(1).ok_or_else(|| bad("empty line"))?;
    let number = || rest.parse::<i64>().map_err(|_| bad("bad length"));
    Ok(match kind {
        "+" => Reply::Simple(rest.to_owned()),
        "-" => Reply::Error(rest.to_owned()),
        ":" => Reply::Int(number()?),
        "$" => {
            let len = number()?;
            if len < 0 {
                Reply::Bulk(None)
            } else {
                let mut buf = vec![0; len as usize + 2];
                r.read_exact(&mut buf)?;
                buf.truncate(len as usize);
                Reply::Bulk(Some(String::from_utf8_lossy(&buf).into_owned()))
            }
        }
        "*" => {
            let len = number()?;
            if len < 0 {
                Reply::Array(None)
            } else {
                let mut items = Vec::with_capacity(len as usize);
                for _ in 0..len {
                    items.push(read_reply(r)?);
                }
                Reply::Array(Some(items))
            }
        }
        _ => return Err(bad("unknown reply type")),
    })
}
