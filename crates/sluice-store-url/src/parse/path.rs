//! What follows the user-info besides the hosts: the path (a database, a
//! master name), and the query and fragment that a store URL may not have.

/// Rejects a query (`?…`) or a fragment (`#…`) in `rest`, the URL after
/// its user-info.
pub(super) fn reject_query_and_fragment(rest: &str) -> Result<(), String> {
    if rest.contains('?') {
        return Err("query parameters are not supported".into());
    }
    if rest.contains('#') {
        return Err("fragments (`#…`) are not supported".into());
    }
    Ok(())
}

/// Splits `rest`, the URL after its user-info, into the host list and the
/// path (after the first `/`; empty without one).
pub(super) fn split_path(rest: &str) -> (&str, &str) {
    match rest.split_once('/') {
        Some((h, p)) => (h, p),
        None => (rest, ""),
    }
}

/// The non-empty `/`-separated segments of `path`.
pub(super) fn path_segments(path: &str) -> Vec<&str> {
    path.split('/').filter(|p| !p.is_empty()).collect()
}

/// An optional `/<db>` path.
pub(super) fn parse_db_path(segments: &[&str]) -> Result<i64, String> {
    match segments {
        [] => Ok(0),
        [db] => parse_db(db),
        _ => Err("too many path segments: expected at most /<db>".into()),
    }
}

/// A database number.
pub(super) fn parse_db(db: &str) -> Result<i64, String> {
    match db.parse::<i64>() {
        Ok(n) if n >= 0 => Ok(n),
        _ => Err(format!("database `{db}` is not a non-negative number")),
    }
}
