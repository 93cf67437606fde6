//! A response a future answers without calling anything: a refusal made
//! when the request came.

use axum::body::Body;
use http::{Response, StatusCode};

/// The response kept in `slot`, taken. A future polled again after it
/// completed (its caller's bug) finds the slot empty and answers a bare
/// 500: neither a panic nor a wait that no one would ever wake.
pub(crate) fn take(slot: &mut Option<Response<Body>>) -> Response<Body> {
    slot.take().unwrap_or_else(|| {
        let mut r = Response::new(Body::empty());
        *r.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
        r
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_answer_once_then_a_bare_500() {
        let mut slot = Some(Response::new(Body::from("no")));
        assert_eq!(take(&mut slot).status(), StatusCode::OK);
        assert_eq!(take(&mut slot).status(), StatusCode::INTERNAL_SERVER_ERROR);
    }
}
