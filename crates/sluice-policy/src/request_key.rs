//! The key a limit's source gives a request: its client network, the
//! value of a key header, or the one global key; and when the request
//! gives it ambiguously.

use http::{HeaderMap, HeaderName};

use crate::client_ip::TrustedProxies;
use crate::key_source::KeySource;
use crate::key_text::KeyText;
use crate::policy::{AmbiguousKey, RequestInfo};

/// The key a source gives a request: `None` when it lacks one, an error
/// when the request names its client ambiguously.
pub(crate) fn key_of<'a>(
    source: &KeySource,
    req: &RequestInfo<'a>,
    trusted: &TrustedProxies,
) -> Result<Option<KeyText<'a>>, AmbiguousKey> {
    let ambiguous = || AmbiguousKey {
        from: source.clone(),
    };
    Ok(match source {
        KeySource::Global => Some(KeyText::Borrowed("")),
        KeySource::Ip => match req.peer {
            None => None,
            // The usual client: an IPv4 peer, no proxy trusted. Its network
            // is its address (the rule `Policy::key_id_for` takes a short
            // cut by).
            Some(peer @ std::net::IpAddr::V4(_)) if trusted.is_empty() => Some(KeyText::ip(peer)),
            Some(peer) => Some(KeyText::net(
                trusted
                    .client_net(peer, req.headers)
                    .map_err(|_| ambiguous())?,
            )),
        },
        KeySource::Header(name) => header_key(name, req.headers)
            .map_err(|()| ambiguous())?
            .map(KeyText::Borrowed),
    })
}

/// The key a header gives: its value, trimmed; `None` when it is absent,
/// empty or not visible ASCII. The field's lines are one comma-separated
/// list (RFC 9110 §5.3), so `K, r1` on one line is two values, as on two
/// lines: values that differ are ambiguous (an upstream reading another
/// than the first would see another identity than the limit counted), and
/// equal repeats are one key.
fn header_key<'a>(name: &HeaderName, headers: &'a HeaderMap) -> Result<Option<&'a str>, ()> {
    let mut lines = headers.get_all(name).iter();
    let Some(first) = lines.next() else {
        return Ok(None);
    };
    let first = first.to_str().ok();
    let alone = lines.next().is_none();
    // The usual case: one line, one value.
    if alone {
        match first {
            None => return Ok(None),
            Some(text) if !text.contains(',') => {
                let text = text.trim();
                return Ok((!text.is_empty()).then_some(text));
            }
            Some(_) => {}
        }
    }
    let mut key: Option<&'a str> = None;
    for line in headers.get_all(name) {
        let text = line.to_str().map_err(|_| ())?;
        for value in text.split(',').map(str::trim).filter(|v| !v.is_empty()) {
            match key {
                Some(k) if k != value => return Err(()),
                _ => key = Some(value),
            }
        }
    }
    Ok(key)
}
