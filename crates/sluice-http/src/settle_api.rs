//! `POST /v1/settle`: settles a reservation that `POST /v1/check` handed
//! out for limits whose cost is known only after the request (see
//! [`settlement`](sluice_policy::settlement)).
//!
//! ```json
//! {"reservation": "5f0c…(32 hex digits)", "cost": 1234, "status": 200}
//! ```
//!
//! `cost` is the actual cost (a rule reading `"reported"`); `status`, the
//! request's status, for rules with `charge_status` or `refund_status`.
//! Both are optional: without them the estimate stands. The answer is 200
//! with each limit's settlement; 404 for an id never issued or expired
//! (it stood at its estimate), 409 for one settled already, 400 for a body
//! that is not one of these.
//!
//! `POST /v1/release` is the same call, by the name a concurrency limit's
//! caller expects, and `POST /v1/renew` (`{"reservation": id}`) keeps a
//! reservation and its slots' leases for another lease.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use http::StatusCode;
use serde::{Deserialize, Serialize};
use sluice_policy::settlement::Observed;
use sluice_policy::{Engine, SettledLimit};

use crate::extract::Body;
use crate::metrics::{Metrics, ReservationEvent};
use crate::problem::Problem;
use crate::reservations::{ReservationId, Reservations, Untaken};

/// The body of `POST /v1/settle`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SettleRequest {
    /// The reservation's id, as `/v1/check` gave it.
    pub reservation: String,
    /// The actual cost.
    #[serde(default, deserialize_with = "crate::whole_number::optional")]
    pub cost: Option<u64>,
    /// The request's HTTP status.
    #[serde(default, deserialize_with = "crate::whole_number::optional")]
    pub status: Option<u16>,
}

/// One limit's settlement, as JSON.
#[derive(Debug, Serialize)]
pub struct SettledJson<'a> {
    /// The limit's name.
    pub name: &'a str,
    /// The estimate charged at admission.
    pub charged: u64,
    /// The actual cost.
    pub actual: u64,
    /// Given back.
    pub refunded: u64,
    /// Charged afterwards, debt included.
    pub debited: u64,
    /// Of `debited`, what went beyond what the key had left: its debt.
    pub into_debt: u64,
    /// Beyond the limit's `max_debt`: not charged.
    pub excess: u64,
}

impl<'a> From<&'a SettledLimit> for SettledJson<'a> {
    fn from(s: &'a SettledLimit) -> Self {
        Self {
            name: &s.labels.limit,
            charged: s.charged,
            actual: s.actual,
            refunded: s.refunded,
            debited: s.debited,
            into_debt: s.into_debt,
            excess: s.excess,
        }
    }
}

/// The `reservation` member of a `/v1/check` answer.
#[derive(Debug, Serialize)]
pub struct ReservationJson {
    /// The id to settle it by.
    pub id: String,
    /// Milliseconds until it expires and stands at its estimate.
    pub expires_in_ms: u64,
}

impl ReservationJson {
    /// The member for reservation `id`, which lives `ttl`.
    pub fn new(id: ReservationId, ttl: std::time::Duration) -> Self {
        Self {
            id: id.to_hex(),
            expires_in_ms: u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX),
        }
    }
}

/// The body of `POST /v1/renew`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RenewRequest {
    /// The reservation's id, as `/v1/check` gave it.
    pub reservation: String,
}

/// `POST /v1/renew`: keeps a reservation (and its concurrency slots'
/// leases) for another lease from now. 200 with the new `expires_in_ms`;
/// 404 and 409 as for a settlement.
pub async fn renew(
    State(engine): State<Arc<Engine>>,
    State(reservations): State<Arc<Reservations>>,
    Body(body): Body,
) -> Response {
    let req: RenewRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => {
            return Problem::new(
                StatusCode::BAD_REQUEST,
                format!("invalid renew request: {e}"),
            )
            .into_response();
        }
    };
    let renewed = ReservationId::parse(&req.reservation)
        .ok_or(Untaken::Unknown)
        .and_then(|id| reservations.renew(id).map(|r| (id, r)));
    match renewed {
        Ok((id, (reservation, ttl))) => {
            engine.renew(&reservation).await;
            Json(serde_json::json!({ "reservation": ReservationJson::new(id, ttl) }))
                .into_response()
        }
        Err(why) => {
            let status = match why {
                Untaken::Unknown => StatusCode::NOT_FOUND,
                Untaken::Settled | Untaken::Expired => StatusCode::CONFLICT,
            };
            Problem::new(status, format!("{why}.")).into_response()
        }
    }
}

/// `POST /v1/settle`.
pub async fn settle(
    State(engine): State<Arc<Engine>>,
    State(metrics): State<Arc<Metrics>>,
    State(reservations): State<Arc<Reservations>>,
    Body(body): Body,
) -> Response {
    let req: SettleRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => {
            return Problem::new(
                StatusCode::BAD_REQUEST,
                format!("invalid settle request: {e}"),
            )
            .into_response();
        }
    };
    if req.status.is_some_and(|s| !(100..=599).contains(&s)) {
        return Problem::new(
            StatusCode::BAD_REQUEST,
            "`status` must be an HTTP status, from 100 to 599".to_owned(),
        )
        .into_response();
    }
    let taken = ReservationId::parse(&req.reservation)
        .ok_or(Untaken::Unknown)
        .and_then(|id| reservations.take(id));
    let reservation = match taken {
        Ok(r) => r,
        Err(why) => {
            let (status, event) = match why {
                Untaken::Unknown => (StatusCode::NOT_FOUND, ReservationEvent::unknown),
                Untaken::Settled => (StatusCode::CONFLICT, ReservationEvent::duplicate),
                Untaken::Expired => (StatusCode::CONFLICT, ReservationEvent::late),
            };
            metrics.record_reservation(event);
            return Problem::new(status, format!("{why}.")).into_response();
        }
    };
    metrics.record_reservation(ReservationEvent::settled);
    let seen = Observed {
        status: req.status,
        reported: req.cost,
        ..Observed::default()
    };
    let settled = engine.settle(&reservation, &seen).await;
    metrics.record_settled(&settled);
    let limits: Vec<SettledJson<'_>> = settled.iter().map(SettledJson::from).collect();
    Json(serde_json::json!({ "settled": limits })).into_response()
}
