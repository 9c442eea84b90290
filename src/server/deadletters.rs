//! Dead letters over the API: `GET /deadletters` (newest first; `?pair=ID`, `?pair=none`,
//! `?limit=N`, `?before=ID` to page; the message itself cut to its first 4 KiB),
//! `GET /deadletters/{id}` (whole), `POST /deadletters/retry` (`{"ids": [..]}` or
//! `{"all": true}`) and `POST /deadletters/purge` (`{"older_than": "30d"}` or `{"all": true}`).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::http::Uri;
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;
use serde_json::{json, Value};

use super::{json, Server};
use crate::cli::deadletters::letter_json;
use crate::state::deadletters::{DeadLetters, Filter};

/// The message text a listing shows of each letter (`GET /deadletters/{id}` has it whole).
const LISTED_TEXT: usize = 4096;

pub(crate) fn routes() -> Router<Arc<Server>> {
    Router::new()
        .route("/deadletters", get(list))
        .route("/deadletters/{id}", get(one))
        .route("/deadletters/retry", post(retry))
        .route("/deadletters/purge", post(purge))
}

fn error(status: StatusCode, field: &str, message: String) -> Response {
    json(status, json!({"error": message, "field": field}))
}

fn internal(e: crate::core::error::SlateError) -> Response {
    error(
        StatusCode::INTERNAL_SERVER_ERROR,
        "",
        crate::stores::side::one_line(&e),
    )
}

async fn list(State(s): State<Arc<Server>>, uri: Uri) -> Response {
    let mut q_pair = None;
    let (mut limit, mut before) = (100usize, None);
    for (k, v) in url::form_urlencoded::parse(uri.query().unwrap_or("").as_bytes()) {
        let field = k.as_ref();
        let num = v.parse::<i64>();
        match (field, num) {
            ("pair", _) => q_pair = Some(v.to_string()),
            ("limit", Ok(n)) => limit = n.clamp(1, 1000) as usize,
            ("before", Ok(n)) => before = Some(n),
            ("limit" | "before", Err(_)) => {
                return error(
                    StatusCode::BAD_REQUEST,
                    field,
                    format!("{field}: '{v}' is not a number"),
                )
            }
            _ => {}
        }
    }
    let pair = match q_pair.as_deref() {
        None | Some("") => None,
        Some("none") => Some(None),
        Some(p) => match p.parse::<i64>() {
            Ok(id) => Some(Some(id)),
            Err(_) => {
                return error(
                    StatusCode::BAD_REQUEST,
                    "pair",
                    format!("pair: '{p}' is not a pair id (or 'none')"),
                )
            }
        },
    };
    let f = Filter {
        pair,
        before_id: before,
        limit,
    };
    let db = s.db.clone();
    let got = crate::state::blocking(move || {
        let dl = DeadLetters::new(&db);
        Ok((dl.list(&f)?, dl.count()?, dl.unowned_by_queue()?))
    })
    .await;
    let (letters, total, unowned) = match got {
        Ok(x) => x,
        Err(e) => return internal(e),
    };
    let items: Vec<Value> = letters
        .iter()
        .map(|l| {
            let mut v = letter_json(l, true);
            if let Some(Value::String(text)) = v.get_mut("message") {
                if text.len() > LISTED_TEXT {
                    let mut cut = LISTED_TEXT;
                    while !text.is_char_boundary(cut) {
                        cut -= 1;
                    }
                    text.truncate(cut);
                    text.push('…');
                }
            }
            v
        })
        .collect();
    let by_queue: serde_json::Map<String, Value> =
        unowned.into_iter().map(|(q, n)| (q, json!(n))).collect();
    json(
        StatusCode::OK,
        json!({"dead_letters": items, "total": total, "unowned_by_queue": by_queue}),
    )
}

async fn one(State(s): State<Arc<Server>>, Path(id): Path<i64>) -> Response {
    let db = s.db.clone();
    match crate::state::blocking(move || DeadLetters::new(&db).get(id)).await {
        Ok(Some(l)) => json(StatusCode::OK, letter_json(&l, true)),
        Ok(None) => error(StatusCode::NOT_FOUND, "id", format!("no dead letter {id}")),
        Err(e) => internal(e),
    }
}

#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Which {
    #[serde(default)]
    ids: Vec<i64>,
    #[serde(default)]
    all: bool,
    older_than: Option<String>,
}

fn which(body: &Bytes) -> Result<Which, Box<Response>> {
    serde_json::from_slice(body).map_err(|e| {
        Box::new(error(
            StatusCode::BAD_REQUEST,
            "body",
            format!("body: expected {{\"ids\": [..]}} or {{\"all\": true}} ({e})"),
        ))
    })
}

async fn retry(State(s): State<Arc<Server>>, body: Bytes) -> Response {
    let w = match which(&body) {
        Ok(w) => w,
        Err(r) => return *r,
    };
    if w.all != w.ids.is_empty() {
        return error(
            StatusCode::BAD_REQUEST,
            "ids",
            "name the letters (\"ids\") or ask for \"all\", one of the two".into(),
        );
    }
    let db = s.db.clone();
    let ids = if w.all {
        let got = crate::state::blocking(move || DeadLetters::new(&db).all_ids()).await;
        match got {
            Ok(ids) => ids,
            Err(e) => return internal(e),
        }
    } else {
        w.ids
    };
    match crate::events::retry::retry(s.db.clone(), ids).await {
        Ok(r) => {
            let status = if r.unknown.is_empty() {
                StatusCode::OK
            } else {
                StatusCode::NOT_FOUND
            };
            json(
                status,
                json!({
                    "stored": r.stored,
                    "kept": r.kept.iter().map(|(id, why)| json!({"id": id, "reason": why})).collect::<Vec<_>>(),
                    "unknown": r.unknown,
                }),
            )
        }
        Err(e) => internal(e),
    }
}

async fn purge(State(s): State<Arc<Server>>, body: Bytes) -> Response {
    let w = match which(&body) {
        Ok(w) => w,
        Err(r) => return *r,
    };
    let age = match (&w.older_than, w.all) {
        (None, true) => 0,
        (Some(a), false) => match crate::core::filter::parse_age(a) {
            Ok(d) => d.as_millis() as i64,
            Err(why) => {
                return error(
                    StatusCode::BAD_REQUEST,
                    "older_than",
                    format!("older_than: {why}"),
                )
            }
        },
        _ => {
            return error(
                StatusCode::BAD_REQUEST,
                "older_than",
                "say how old (\"older_than\": \"30d\") or \"all\": true, one of the two".into(),
            )
        }
    };
    let db = s.db.clone();
    match crate::state::blocking(move || DeadLetters::new(&db).purge(age)).await {
        Ok(n) => json(StatusCode::OK, json!({"dropped": n})),
        Err(e) => internal(e),
    }
}
