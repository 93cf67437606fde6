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
        KeySource::Bearer => bearer_key(req.headers)
            .map_err(|()| ambiguous())?
            .map(KeyText::Borrowed),
        KeySource::AnyOf(all) => {
            let mut key: Option<&'a str> = None;
            for one in all.iter() {
                let found = match one {
                    KeySource::Bearer => bearer_key(req.headers),
                    KeySource::Header(name) => header_key(name, req.headers),
                    _ => Ok(None),
                }
                .map_err(|()| ambiguous())?;
                match (key, found) {
                    (Some(k), Some(f)) if k != f => return Err(ambiguous()),
                    (None, found) => key = found,
                    _ => {}
                }
            }
            key.map(KeyText::Borrowed)
        }
    })
}

/// The token of `Authorization: Bearer <token>` (the scheme in any case,
/// RFC 9110 §11.1): `None` when there is no such field, another scheme,
/// or an empty token; an error for two fields, which are ambiguous.
fn bearer_key(headers: &HeaderMap) -> Result<Option<&str>, ()> {
    let mut lines = headers.get_all(http::header::AUTHORIZATION).iter();
    let Some(line) = lines.next() else {
        return Ok(None);
    };
    if lines.next().is_some() {
        return Err(());
    }
    let Ok(text) = line.to_str() else {
        return Ok(None);
    };
    let text = text.trim();
    let Some((scheme, token)) = text.split_once(' ') else {
        return Ok(None);
    };
    let token = token.trim();
    Ok(
        (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty() && !token.contains(' '))
            .then_some(token),
    )
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

#[cfg(test)]
mod tests {
    use super::*;

    fn key(source: &str, fields: &[(&'static str, &str)]) -> Result<Option<String>, AmbiguousKey> {
        let mut headers = HeaderMap::new();
        for (name, value) in fields {
            headers.append(*name, value.parse().unwrap());
        }
        let req = RequestInfo {
            method: &http::Method::POST,
            path: "/",
            headers: &headers,
            peer: None,
            cost: None,
            body: None,
        };
        let source: KeySource = source.parse().unwrap();
        key_of(&source, &req, &TrustedProxies::new(Vec::new())).map(|k| k.map(|k| (*k).to_owned()))
    }

    #[test]
    fn a_bearer_token_is_the_key_of_its_authorization_field() {
        let bearer = |v: &str| key("bearer", &[("authorization", v)]);
        assert_eq!(bearer("Bearer sk-abc").unwrap().as_deref(), Some("sk-abc"));
        assert_eq!(
            bearer("bearer   sk-abc ").unwrap().as_deref(),
            Some("sk-abc")
        );
        assert_eq!(bearer("Basic dXNlcjpwYXNz").unwrap(), None);
        assert_eq!(bearer("Bearer ").unwrap(), None);
        assert_eq!(bearer("Bearer a b").unwrap(), None);
        assert_eq!(key("bearer", &[]).unwrap(), None);
        let twice = [("authorization", "Bearer a"), ("authorization", "Bearer b")];
        assert!(key("bearer", &twice).is_err());
    }

    #[test]
    fn several_sources_must_agree() {
        let either = "bearer|header:X-Api-Key";
        let k = |f: &[(&'static str, &str)]| key(either, f);
        assert_eq!(
            k(&[("authorization", "Bearer a")]).unwrap().as_deref(),
            Some("a")
        );
        assert_eq!(k(&[("x-api-key", "a")]).unwrap().as_deref(), Some("a"));
        assert_eq!(
            k(&[("authorization", "Bearer a"), ("x-api-key", "a")])
                .unwrap()
                .as_deref(),
            Some("a")
        );
        assert!(k(&[("authorization", "Bearer a"), ("x-api-key", "b")]).is_err());
        assert_eq!(k(&[]).unwrap(), None);
    }
}
