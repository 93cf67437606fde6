//! `GET /openapi.yaml` on `control_listen`: the control API's OpenAPI 3.1
//! document, `crates/sluice-http/openapi.yaml`, compiled into the binary,
//! so that the contract served is the one the binary was built with.

use axum::response::{IntoResponse, Response};
use http::header;

/// The document.
pub const OPENAPI_YAML: &str = include_str!("../openapi.yaml");

/// Its media type (RFC 9512).
pub const CONTENT_TYPE: &str = "application/yaml";

/// `GET /openapi.yaml`.
pub async fn document() -> Response {
    ([(header::CONTENT_TYPE, CONTENT_TYPE)], OPENAPI_YAML).into_response()
}
