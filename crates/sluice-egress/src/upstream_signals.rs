//! What an upstream's answer says about waiting: `429` with `Retry-After`,
//! or a `RateLimit` field (draft-10) with `r=0`.

use std::time::Duration;

use http::{HeaderMap, StatusCode};
use sfv::{BareItem, ListEntry, Parser};

/// How long the upstream asks callers to wait, if it does.
pub fn requested_pause(status: StatusCode, headers: &HeaderMap) -> Option<Duration> {
    let retry_after = headers
        .get(http::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if status == StatusCode::TOO_MANY_REQUESTS {
        // Without a usable Retry-After (e.g. an HTTP-date), wait a second.
        return Some(Duration::from_secs(retry_after.unwrap_or(1)));
    }
    let field = headers.get("ratelimit")?.to_str().ok()?;
    let list = Parser::new(field).parse::<sfv::List>().ok()?;
    list.iter()
        .filter_map(|entry| match entry {
            ListEntry::Item(item) => Some(&item.params),
            ListEntry::InnerList(_) => None,
        })
        .filter(
            |params| matches!(params.get("r"), Some(BareItem::Integer(r)) if i64::from(*r) == 0),
        )
        .filter_map(|params| match params.get("t") {
            Some(BareItem::Integer(t)) => u64::try_from(i64::from(*t)).ok(),
            _ => None,
        })
        .max()
        .map(Duration::from_secs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn a_429_pauses_for_its_retry_after_or_a_second() {
        let p = requested_pause(
            StatusCode::TOO_MANY_REQUESTS,
            &headers(&[("retry-after", "7")]),
        );
        assert_eq!(p, Some(Duration::from_secs(7)));
        let p = requested_pause(
            StatusCode::TOO_MANY_REQUESTS,
            &headers(&[("retry-after", "Wed, 21 Oct 2015 07:28:00 GMT")]),
        );
        assert_eq!(p, Some(Duration::from_secs(1)));
    }

    #[test]
    fn an_exhausted_ratelimit_field_pauses_for_its_t() {
        let h = headers(&[("ratelimit", r#""day";r=0;t=30, "burst";r=5;t=1"#)]);
        assert_eq!(
            requested_pause(StatusCode::OK, &h),
            Some(Duration::from_secs(30))
        );
        let h = headers(&[("ratelimit", r#""burst";r=5;t=1"#)]);
        assert_eq!(requested_pause(StatusCode::OK, &h), None);
        assert_eq!(requested_pause(StatusCode::OK, &HeaderMap::new()), None);
    }
}
