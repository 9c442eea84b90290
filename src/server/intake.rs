//! Push deliveries on the listener (`--events webhook`): the HTTP side. Parsing, routing to
//! every pair and storing belong to the event layer ([`crate::events::push::Hub`]); here a
//! request becomes a delivery and a [`Delivery`] becomes an answer.
//!
//! - `POST /events/eventgrid`: Azure Event Grid webhook deliveries, Event Grid schema (an array
//!   of events, or the `SubscriptionValidationEvent` handshake, answered with
//!   `{"validationResponse": code}`) or CloudEvents 1.0 (one event, or a batch).
//!   `OPTIONS /events/eventgrid`: CloudEvents' abuse-protection handshake, answered with
//!   `WebHook-Allowed-Origin`.
//! - `POST /events/pubsub`: Pub/Sub push subscriptions (`{"message": {…}, "subscription": …}`)
//!   carrying GCS notifications.
//!
//! A delivery is answered 200 only after its events are in the inbox (ack after commit); if
//! they cannot be stored the answer is 503 and the sender retries. Malformed deliveries and
//! events of no pair become dead letters and are answered 200 (a retry would not make them
//! parse).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;

use super::{json, Server};
use crate::events::push::Delivery;

pub(crate) fn routes() -> Router<Arc<Server>> {
    Router::new()
        .route(
            "/events/eventgrid",
            post(eventgrid_post).options(eventgrid_options),
        )
        .route("/events/pubsub", post(pubsub_post))
}

/// CloudEvents 1.0 webhook validation (HTTP OPTIONS): allow the asking origin.
async fn eventgrid_options(headers: HeaderMap) -> Response {
    let origin = headers
        .get("webhook-request-origin")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("*")
        .to_string();
    (
        StatusCode::OK,
        [
            ("webhook-allowed-origin", origin),
            ("webhook-allowed-rate", "*".to_string()),
        ],
    )
        .into_response()
}

fn answer(d: Delivery) -> Response {
    match d {
        Delivery::Stored => json(StatusCode::OK, serde_json::json!({"stored": true})),
        Delivery::Handshake(code) => json(
            StatusCode::OK,
            serde_json::json!({ "validationResponse": code }),
        ),
        Delivery::Retry => json(
            StatusCode::SERVICE_UNAVAILABLE,
            serde_json::json!({"error": "could not store the delivery; retry"}),
        ),
    }
}

/// The sender's signed token, when the route requires one: None to go on, or the answer.
async fn proven(
    required: &Option<(super::jwt::JwtPolicy, super::jwt::Keys)>,
    headers: &HeaderMap,
) -> Option<Response> {
    let (policy, keys) = required.as_ref()?;
    match super::jwt::verify(super::jwt::bearer(headers), policy, keys).await {
        Ok(()) => None,
        Err(super::jwt::Refusal::Bad(why)) => {
            tracing::warn!(reason = %why, "a push delivery with a bad token refused");
            Some(json(
                StatusCode::UNAUTHORIZED,
                serde_json::json!({ "error": why }),
            ))
        }
        Err(super::jwt::Refusal::Unavailable(why)) => {
            tracing::warn!(reason = %why, "a push delivery's token cannot be checked now; the sender retries");
            Some(json(
                StatusCode::SERVICE_UNAVAILABLE,
                serde_json::json!({ "error": "the signing keys cannot be fetched now; retry" }),
            ))
        }
    }
}

async fn eventgrid_post(State(s): State<Arc<Server>>, headers: HeaderMap, body: Bytes) -> Response {
    if let Some(refused) = proven(&s.eventgrid_jwt, &headers).await {
        return refused;
    }
    answer(s.hub.eventgrid(&body).await)
}

async fn pubsub_post(State(s): State<Arc<Server>>, headers: HeaderMap, body: Bytes) -> Response {
    if let Some(refused) = proven(&s.pubsub_jwt, &headers).await {
        return refused;
    }
    answer(s.hub.pubsub(&body).await)
}
