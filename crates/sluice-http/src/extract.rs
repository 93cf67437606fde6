//! Extractors for the control API whose refusals are problem+json, like
//! every other error it answers: axum's own answer `text/plain`.
//!
//! - [`Body`]: the whole request body, at most axum's default of 2 MiB; a
//!   larger one is `413`, one that breaks off `400` (and one that does not
//!   arrive in time `408`, answered by the listener: see
//!   [`body_deadline`](crate::body_deadline)).
//! - [`Key`]: the `{key}` segment of an admin route, percent-decoded; one
//!   that is not UTF-8 then is `400`.

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Path, Request};
use http::request::Parts;

use crate::problem::Problem;

/// The whole request body.
#[derive(Debug, Clone)]
pub struct Body(pub Bytes);

impl<S: Send + Sync> FromRequest<S> for Body {
    type Rejection = Problem;

    async fn from_request(req: Request, state: &S) -> Result<Self, Problem> {
        Bytes::from_request(req, state)
            .await
            .map(Self)
            .map_err(|e| Problem::new(e.status(), e.body_text()))
    }
}

/// The one path parameter of a route (`{key}`), percent-decoded.
#[derive(Debug, Clone)]
pub struct Key(pub String);

impl<S: Send + Sync> FromRequestParts<S> for Key {
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Problem> {
        Path::<String>::from_request_parts(parts, state)
            .await
            .map(|Path(key)| Self(key))
            .map_err(|e| Problem::new(e.status(), e.body_text()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::response::IntoResponse;
    use axum::routing::{get, post};
    use tower_service::Service;

    async fn answer(
        router: &mut axum::Router,
        req: http::Request<axum::body::Body>,
    ) -> (u16, String, String) {
        let response = router.call(req).await.unwrap();
        let status = response.status().as_u16();
        let kind = response.headers()[http::header::CONTENT_TYPE]
            .to_str()
            .unwrap()
            .to_owned();
        let body = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        (status, kind, String::from_utf8(body.to_vec()).unwrap())
    }

    #[tokio::test]
    async fn a_body_too_large_is_a_413_problem() {
        let mut router = axum::Router::new().route(
            "/",
            post(|Body(b): Body| async move { b.len().to_string().into_response() }),
        );
        let big = vec![b' '; 2 * 1024 * 1024 + 1];
        let req = http::Request::post("/")
            .body(axum::body::Body::from(big))
            .unwrap();
        let (status, kind, body) = answer(&mut router, req).await;
        assert_eq!(
            (status, kind.as_str()),
            (413, "application/problem+json"),
            "{body}"
        );
        assert!(body.contains("\"status\":413"), "{body}");
        let req = http::Request::post("/")
            .body(axum::body::Body::from("{}"))
            .unwrap();
        assert_eq!(answer(&mut router, req).await.0, 200);
    }

    #[tokio::test]
    async fn a_key_that_is_not_utf8_is_a_400_problem() {
        let mut router = axum::Router::new().route(
            "/keys/{key}",
            get(|Key(k): Key| async move { k.into_response() }),
        );
        let req = http::Request::get("/keys/%FF")
            .body(axum::body::Body::empty())
            .unwrap();
        let (status, kind, body) = answer(&mut router, req).await;
        assert_eq!(
            (status, kind.as_str()),
            (400, "application/problem+json"),
            "{body}"
        );
        assert!(body.contains("\"status\":400"), "{body}");
        let req = http::Request::get("/keys/caf%C3%A9")
            .body(axum::body::Body::empty())
            .unwrap();
        let (status, _, body) = answer(&mut router, req).await;
        assert_eq!((status, body.as_str()), (200, "café"));
    }
}
