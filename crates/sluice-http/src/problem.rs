//! `application/problem+json` bodies (RFC 9457).

use std::borrow::Cow;

use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode, header};
use serde::Serialize;

/// The problem type of a refusal for quota, from the RateLimit draft.
pub const QUOTA_EXCEEDED: &str = "https://iana.org/assignments/http-problem-types#quota-exceeded";
/// The problem type of a refusal by the `deny` fallback while the shared
/// store is down (503).
pub const STORE_UNAVAILABLE: &str = "about:blank";

/// The problem type of a request shed by adaptive overload protection
/// (503): the upstream is saturated and the request's priority class is
/// shed for now.
pub const OVERLOADED: &str = "urn:sluice:problem:overloaded";

/// A problem detail.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct Problem {
    /// A URI naming the problem type (one of a few constants: borrowed,
    /// not copied, for each refusal).
    #[serde(rename = "type")]
    pub kind: Cow<'static, str>,
    /// A short summary.
    pub title: Cow<'static, str>,
    /// The HTTP status.
    pub status: u16,
    /// What happened, for a person.
    pub detail: String,
    /// For quota refusals: the limits that refused.
    #[serde(rename = "violated-policies", skip_serializing_if = "Vec::is_empty")]
    pub violated_policies: Vec<String>,
    /// For quota refusals: seconds until the request could pass.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retry_after: Option<u64>,
}

impl Problem {
    /// A problem of type `about:blank` with the status's reason as title.
    pub fn new(status: StatusCode, detail: impl Into<String>) -> Self {
        Self {
            kind: "about:blank".into(),
            title: status.canonical_reason().unwrap_or("Error").into(),
            status: status.as_u16(),
            detail: detail.into(),
            violated_policies: Vec::new(),
            retry_after: None,
        }
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        // Room for a refusal's body at once, which an empty `Vec` reached
        // in several steps.
        let mut body = Vec::with_capacity(512);
        if serde_json::to_writer(&mut body, &self).is_err() {
            body.clear();
        }
        problem_response(status, body)
    }
}

/// The response of a problem's JSON `body`, with `status`.
pub(crate) fn problem_response(status: StatusCode, body: Vec<u8>) -> Response {
    let mut response = (status, body).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/problem+json"),
    );
    response
}
