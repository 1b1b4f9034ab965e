//! The routes and the key check: [`router`] over a running worker's queue, the `auth`
//! middleware (401 without the key, when one is set: `Authorization: Bearer <key>` or
//! Anthropic's `x-api-key: <key>`; the playground page is served without it), the body
//! limit (413) and the 404 of an unknown path.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Instant;

use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::{get, post};
use axum::Router;

use crate::cache::ConstraintCache;
use crate::error::{ApiError, Dialect};
use crate::worker::Queue;

use super::endpoints::{
    chat_completions, count_tokens, health, messages, models, responses_create,
};
use super::extract::{extract, playground_page};
use super::state::{log_error, unix_now, AppState, Encoder, HttpConfig};

/// The router over a running worker's queue.
pub fn router(config: HttpConfig, cache: ConstraintCache, queue: Queue, encode: Encoder) -> Router {
    let body_limit = config.body_limit;
    let state = Arc::new(AppState {
        config,
        cache,
        queue,
        encode,
        next_id: AtomicU64::new(1),
        started: unix_now(),
    });
    Router::new()
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/messages", post(messages))
        .route("/v1/messages/count_tokens", post(count_tokens))
        .route("/v1/responses", post(responses_create))
        .route("/v1/models", get(models))
        .route("/health", get(health))
        .route("/", get(playground_page))
        .route("/v1/formwork/extract", post(extract))
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(state.clone(), auth))
        .layer(DefaultBodyLimit::max(body_limit))
        .with_state(state)
}

pub(super) async fn auth(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let Some(key) = &state.config.api_key else {
        return next.run(req).await;
    };
    // The playground page holds no data; the requests it makes carry the key.
    if req.method() == axum::http::Method::GET && req.uri().path() == "/" {
        return next.run(req).await;
    }
    let authorized = {
        let header_value = |name| req.headers().get(name).and_then(|v| v.to_str().ok());
        let bearer = header_value(header::AUTHORIZATION).and_then(|v| v.strip_prefix("Bearer "));
        // Anthropic's SDK sends the key as `x-api-key`.
        let x_api_key = header_value(header::HeaderName::from_static("x-api-key"));
        bearer == Some(key.as_str()) || x_api_key == Some(key.as_str())
    };
    if authorized {
        return next.run(req).await;
    }
    let start = Instant::now();
    let endpoint = format!("{} {}", req.method(), req.uri().path());
    let e = ApiError::new(
        StatusCode::UNAUTHORIZED,
        "missing or wrong API key: send `Authorization: Bearer <key>` or `x-api-key: <key>`",
    )
    .code("invalid_api_key");
    log_error(&state, "req-auth".into(), endpoint, &e, start);
    e.into_response_for(Dialect::of_path(req.uri().path()))
}

pub(super) async fn not_found(req: Request) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        format!("no endpoint {} {}", req.method(), req.uri().path()),
    )
    .code("unknown_url")
}
