//! What every endpoint shares: the HTTP layer's options ([`HttpConfig`]), the conversation
//! encoder ([`Encoder`]), the per-request log record ([`RequestLog`]), the router's state,
//! and the small steps of every request (a fresh id, the body as JSON, an engine or queue
//! error as an [`ApiError`], the log line of a failed request).

use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::http::StatusCode;
use formwork_core::chat::Turn;
use formwork_core::generate::Speculation;
use serde_json::Value;

use crate::cache::ConstraintCache;
use crate::error::ApiError;
use crate::worker::{Queue, SubmitError};

/// Encodes a conversation into prompt token ids (the model's chat template).
pub type Encoder = Arc<dyn Fn(&[Turn]) -> Result<Vec<u32>, String> + Send + Sync>;

/// What one request did, for the log line.
#[derive(Clone, Debug, PartialEq)]
pub struct RequestLog {
    /// The request id (`chatcmpl-…`, or `req-…` for other endpoints).
    pub id: String,
    /// Method and path.
    pub endpoint: String,
    /// The HTTP status.
    pub status: u16,
    /// Prompt tokens (0 when the request failed before decoding).
    pub prompt_tokens: usize,
    /// Generated tokens.
    pub completion_tokens: usize,
    /// Time to the first generated text, if any.
    pub ttft: Option<Duration>,
    /// Time to the last byte of the response.
    pub total: Duration,
    /// Whether the grammar came from the cache (`None`: free text or failed early).
    pub cache_hit: Option<bool>,
}

/// Options of the HTTP layer. Plain data.
#[derive(Clone)]
pub struct HttpConfig {
    /// The served model's name: what responses' `model` says and `/v1/models` lists first.
    pub model_name: String,
    /// The longest a request may wait in the queue before decoding starts, as estimated when
    /// it arrives (`--queue-timeout`): a longer wait is a 503 with `Retry-After` at once,
    /// not a client timing out after holding a place. `None`: wait as long as it takes.
    pub queue_timeout: Option<std::time::Duration>,
    /// More names `/v1/models` lists for the same model (`--served-model-name`).
    pub served_names: Vec<String>,
    /// Whether a request must name one of the served names (404 otherwise). Off by default:
    /// client code written for OpenAI or Anthropic names their models (`gpt-4o-mini`, a Claude
    /// model, a placeholder), and the one model here answers whatever it is asked for.
    pub strict_model_name: bool,
    /// When set, every request needs `Authorization: Bearer <key>`.
    pub api_key: Option<String>,
    /// Largest `max_tokens` a request may ask for; also the default budget.
    pub max_tokens_cap: usize,
    /// The model's context window in tokens, when known: a prompt that does not fit, or a
    /// prompt plus an explicit `max_tokens` that does not, is a 400 `context_length_exceeded`
    /// (never a failure mid-generation); without `max_tokens` the budget is what fits.
    pub context_len: Option<usize>,
    /// Whether `json_schema` requests may refuse by default (`formwork serve --allow-refusal`);
    /// a request's `"formwork": {"allow_refusal": bool}` overrides it. A refusal is answered
    /// as `content: null`, `refusal: "<reason>"`.
    pub refusals: bool,
    /// Largest request body, in bytes.
    pub body_limit: usize,
    /// Tokens of reasoning before a constrained Chat Completions answer by default
    /// (`formwork serve --think N`; a request's `"formwork": {"think": N}` overrides it). 0
    /// (default): none. The reasoning is returned in `message.reasoning_content` (streamed:
    /// `delta.reasoning_content`), never in the content.
    pub think: usize,
    /// The text that ends the reasoning (`--think-trigger`): the model is told to write it
    /// before its answer, and it is appended when the budget or the end of its turn comes
    /// first. Default `Answer:`; `</think>` for a chat template that opens a `<think>` block.
    pub think_trigger: String,
    /// Speculative decoding of every request (default on; `formwork serve --no-speculate`
    /// turns it off to compare). The output is the same either way; streaming sends the
    /// tokens a pass accepted as soon as it ends.
    pub speculation: Speculation,
    /// Called once per request when it ends.
    pub log: Arc<dyn Fn(&RequestLog) + Send + Sync>,
}

impl std::fmt::Debug for HttpConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpConfig")
            .field("model_name", &self.model_name)
            .field("served_names", &self.served_names)
            .field("strict_model_name", &self.strict_model_name)
            .field("queue_timeout", &self.queue_timeout)
            .field("api_key", &self.api_key.as_ref().map(|_| "<set>"))
            .field("max_tokens_cap", &self.max_tokens_cap)
            .field("context_len", &self.context_len)
            .field("refusals", &self.refusals)
            .field("body_limit", &self.body_limit)
            .field("think", &self.think)
            .field("think_trigger", &self.think_trigger)
            .field("speculation", &self.speculation)
            .finish()
    }
}

pub(super) struct AppState {
    pub(super) config: HttpConfig,
    pub(super) cache: ConstraintCache,
    pub(super) queue: Queue,
    pub(super) encode: Encoder,
    pub(super) next_id: AtomicU64,
    pub(super) started: u64,
}

pub(super) fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

pub(super) fn log_error(
    state: &AppState,
    id: String,
    endpoint: String,
    e: &ApiError,
    start: Instant,
) {
    (state.config.log)(&RequestLog {
        id,
        endpoint,
        status: e.status.as_u16(),
        prompt_tokens: 0,
        completion_tokens: 0,
        ttft: None,
        total: start.elapsed(),
        cache_hit: None,
    });
}

pub(super) const CHAT: &str = "POST /v1/chat/completions";
pub(super) const MESSAGES: &str = "POST /v1/messages";
pub(super) const RESPONSES: &str = "POST /v1/responses";
pub(super) const COUNT_TOKENS: &str = "POST /v1/messages/count_tokens";
pub(super) const EXTRACT: &str = "POST /v1/formwork/extract";

/// The request body as JSON: a body over the limit is a 413, malformed JSON a 400.
pub(super) fn read_json(
    state: &AppState,
    body: Result<Bytes, BytesRejection>,
) -> Result<Value, ApiError> {
    let body = body.map_err(|e| {
        let status = e.status();
        let message = if status == StatusCode::PAYLOAD_TOO_LARGE {
            format!(
                "the request body is over the server's limit of {} bytes",
                state.config.body_limit
            )
        } else {
            e.body_text()
        };
        ApiError::new(status, message)
    })?;
    serde_json::from_slice(&body)
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, format!("malformed JSON body: {e}")))
}

/// A fresh request id: `prefix`, the server's start time and a counter (unique per server).
pub(super) fn next_id(state: &AppState, prefix: &str) -> String {
    let n = state.next_id.fetch_add(1, Ordering::Relaxed);
    format!("{prefix}{:x}-{n}", state.started)
}

pub(super) fn engine_error(message: String) -> ApiError {
    ApiError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        format!("generation failed: {message}"),
    )
}

impl HttpConfig {
    /// Every name this server answers to by name: the model's, then the added ones.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        std::iter::once(self.model_name.as_str())
            .chain(self.served_names.iter().map(String::as_str))
    }

    /// A 404 naming `asked` when the server is strict about names and `asked` is not one of
    /// them; any name otherwise.
    pub(super) fn check_model(&self, asked: &str) -> Result<(), ApiError> {
        if !self.strict_model_name || self.names().any(|n| n == asked) {
            return Ok(());
        }
        let names: Vec<String> = self.names().map(|n| format!("`{n}`")).collect();
        Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!(
                "the model `{asked}` does not exist here: this server serves {}",
                names.join(", ")
            ),
        )
        .param("model")
        .code("model_not_found"))
    }
}

/// A job the queue would not take: 503 either way (busy, or the worker has stopped).
impl From<SubmitError> for ApiError {
    fn from(e: SubmitError) -> Self {
        match e {
            SubmitError::Full => ApiError {
                retry_after: Some(NonZeroU32::MIN),
                ..ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "the server is busy: its request queue is full, retry later",
                )
                .code("queue_full")
            },
            SubmitError::TooLong { estimate } => ApiError {
                retry_after: NonZeroU32::new(
                    estimate.as_secs().clamp(1, u64::from(u32::MAX)) as u32
                ),
                ..ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!(
                        "the server is busy: this request would wait about {} s before it \
                         starts, over the server's queue timeout; retry later",
                        estimate.as_secs()
                    ),
                )
                .code("queue_timeout")
            },
            SubmitError::Stopped => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "the decode worker has stopped",
            ),
        }
    }
}
