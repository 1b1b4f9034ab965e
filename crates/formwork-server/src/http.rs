//! The HTTP layer: routes, authentication, body limits and the request lifecycle.
//!
//! Owns the axum [`Router`]: `POST /v1/chat/completions`, `POST /v1/messages` and
//! `POST /v1/messages/count_tokens` (Anthropic's, read and written by
//! [`anthropic`]), `POST /v1/responses` (OpenAI's
//! Responses, by [`responses`]), `GET /v1/models`, `GET /health`, and the
//! playground's `GET /` and `POST /v1/formwork/extract` (planned and judged by
//! [`playground`]);
//! the key check (401 without it, when a key is set: `Authorization: Bearer <key>` or
//! Anthropic's `x-api-key: <key>`); the body limit (413); turning a checked request, from
//! either endpoint, into a job (grammar from the cache, prompt from the chat template) and the
//! job's events into a JSON response or Server-Sent Events (one driver, a `Wire` format
//! per API); errors in the endpoint's [`Dialect`]; and one [`RequestLog`] per request, handed
//! to the caller's hook (the library prints nothing).
//!
//! May use: `error`, `request`, `cache`, `assemble`, `worker`, `anthropic`, `responses`,
//! `playground`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use formwork_core::generate::{GenerateConfig, ThinkConfig};
use formwork_core::sampler::Sampling;
use formwork_core::chat::{Role, Turn};
use serde_json::{json, Value};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

use crate::anthropic;
use crate::assemble::{message, Deltas, Reading};
use crate::cache::{Dropped, GrammarCache};
use crate::error::{ApiError, Dialect};
use crate::playground::{self, ExtractRequest, Figures, Refused};
use crate::request::{ChatRequest, Output};
use crate::responses;
use crate::worker::{Event, Finish, Finished, Job, Queue, SubmitError};

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
    /// The model name clients must ask for (`/v1/models` lists it).
    pub model_name: String,
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
    /// Called once per request when it ends.
    pub log: Arc<dyn Fn(&RequestLog) + Send + Sync>,
}

impl std::fmt::Debug for HttpConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpConfig")
            .field("model_name", &self.model_name)
            .field("api_key", &self.api_key.as_ref().map(|_| "<set>"))
            .field("max_tokens_cap", &self.max_tokens_cap)
            .field("context_len", &self.context_len)
            .field("refusals", &self.refusals)
            .field("body_limit", &self.body_limit)
            .field("think", &self.think)
            .field("think_trigger", &self.think_trigger)
            .finish()
    }
}

struct AppState {
    config: HttpConfig,
    cache: GrammarCache,
    queue: Queue,
    encode: Encoder,
    next_id: AtomicU64,
    started: u64,
}

/// The generation budget of a request with a `prompt_len`-token prompt: the requested
/// `max_tokens` (default: the cap), checked against the context window when it is known.
fn token_budget(
    prompt_len: usize,
    requested: Option<usize>,
    config: &HttpConfig,
) -> Result<usize, ApiError> {
    let Some(context) = config.context_len else {
        return Ok(requested.unwrap_or(config.max_tokens_cap));
    };
    let exceeded = |param: &str, message: String| {
        Err(ApiError::invalid(param, message).code("context_length_exceeded"))
    };
    if prompt_len >= context {
        return exceeded(
            "messages",
            format!(
                "the conversation is {prompt_len} tokens, and this model's context is \
                 {context} tokens: nothing is left to generate"
            ),
        );
    }
    let room = context - prompt_len;
    match requested {
        Some(m) if m > room => exceeded(
            "max_tokens",
            format!(
                "the conversation is {prompt_len} tokens and max_tokens is {m}: together more \
                 than this model's context of {context} tokens (at most {room} fit)"
            ),
        ),
        Some(m) => Ok(m),
        None => Ok(config.max_tokens_cap.min(room)),
    }
}

/// The router over a running worker's queue.
pub fn router(config: HttpConfig, cache: GrammarCache, queue: Queue, encode: Encoder) -> Router {
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

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

async fn auth(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
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

async fn not_found(req: Request) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        format!("no endpoint {} {}", req.method(), req.uri().path()),
    )
    .code("unknown_url")
}

/// `GET /health`: up, and how busy (`running`: requests decoding, `queued`: waiting).
async fn health(State(state): State<Arc<AppState>>) -> Json<Value> {
    let load = state.queue.load();
    Json(json!({"status": "ok", "running": load.running, "queued": load.waiting}))
}

async fn models(State(state): State<Arc<AppState>>) -> Json<Value> {
    Json(
        json!({"object": "list", "data": [{"id": state.config.model_name, "object": "model",
        "created": state.started, "owned_by": "formwork"}]}),
    )
}

fn log_error(state: &AppState, id: String, endpoint: String, e: &ApiError, start: Instant) {
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

const CHAT: &str = "POST /v1/chat/completions";
const MESSAGES: &str = "POST /v1/messages";
const RESPONSES: &str = "POST /v1/responses";
const COUNT_TOKENS: &str = "POST /v1/messages/count_tokens";

/// A checked request, turned into a queued job.
struct Started {
    id: String,
    endpoint: &'static str,
    req: ChatRequest,
    rx: UnboundedReceiver<Event>,
    cache_hit: Option<bool>,
    /// Prompt tokens (known before the first generated one).
    prompt_tokens: usize,
    /// What a lenient server did not enforce.
    dropped: Vec<Dropped>,
    /// Whether the job reasons before its answer.
    thinks: bool,
}

impl Started {
    /// `f` with this request's dropped constraints, for the extension field.
    fn finished(&self, mut f: Finished) -> Finished {
        f.dropped_constraints = self.dropped.iter().map(Dropped::to_json).collect();
        f
    }
}

/// The header listing what a lenient server did not enforce (absent when nothing was
/// dropped): `param:keyword@pointer` items, comma-separated ([`Dropped::header_item`]).
pub const DROPPED_HEADER: &str = "formwork-dropped-constraints";

/// `response` with the [`DROPPED_HEADER`] when something was dropped.
fn mark_dropped(mut response: Response, dropped: &[Dropped]) -> Response {
    if dropped.is_empty() {
        return response;
    }
    let items: Vec<String> = dropped.iter().map(Dropped::header_item).collect();
    if let Ok(value) = header::HeaderValue::from_str(&items.join(", ")) {
        response.headers_mut().insert(DROPPED_HEADER, value);
    }
    response
}

/// The request body as JSON: a body over the limit is a 413, malformed JSON a 400.
fn read_json(state: &AppState, body: Result<Bytes, BytesRejection>) -> Result<Value, ApiError> {
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

/// Queues a checked request, whichever endpoint it came from: the model check, the grammar
/// (from the cache), the prompt (the chat template), the budget, the job.
async fn start_job(
    state: &Arc<AppState>,
    id: &str,
    endpoint: &'static str,
    req: ChatRequest,
) -> Result<Started, ApiError> {
    check_model(state, &req)?;
    // Reasoning before a constrained answer, on Chat Completions (the only API here whose
    // reply has a field for it). Asked for elsewhere, it is an error, not silently dropped.
    let think = match (&req.output, endpoint) {
        (Output::Text, _) => 0,
        (_, CHAT) => req.think.unwrap_or(state.config.think),
        _ if req.think.is_some_and(|n| n > 0) => {
            return Err(ApiError::invalid(
                "formwork.think",
                format!(
                    "`formwork.think` is only supported on {CHAT}, whose reply carries the \
                     reasoning (`message.reasoning_content`); not on {endpoint}"
                ),
            ))
        }
        _ => 0,
    };
    let trigger = state.config.think_trigger.clone();
    // Compiling and tokenizing are CPU work: off the async threads.
    let (grammar, prompt) = {
        let state = state.clone();
        let output = req.output.clone();
        let mut turns = req.turns.clone();
        if think > 0 {
            crate::request::instruct_thinking(&mut turns, &trigger);
        }
        tokio::task::spawn_blocking(move || {
            let grammar = state.cache.get(&output)?;
            let prompt = (state.encode)(&turns).map_err(|e| {
                ApiError::invalid("messages", format!("cannot encode the conversation: {e}"))
            })?;
            Ok::<_, ApiError>((grammar, prompt))
        })
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))??
    };
    let cache_hit = grammar
        .as_ref()
        .map(|c| c.lookup == crate::cache::Lookup::Hit);
    let dropped = grammar
        .as_ref()
        .map(|c| c.dropped.clone())
        .unwrap_or_default();
    // The reasoning takes context before the answer.
    let thinking = (think > 0).then(|| ThinkConfig::new(think, trigger));
    let reasoning = thinking.as_ref().map_or(0, ThinkConfig::max_positions);
    let max_tokens = token_budget(prompt.len() + reasoning, req.max_tokens, &state.config)?;
    let temperature = req.temperature.filter(|&t| t > 0.0);
    let config = GenerateConfig {
        max_tokens,
        sampling: Sampling::from_params(
            temperature,
            req.top_k.filter(|_| temperature.is_some()),
            req.top_p.filter(|_| temperature.is_some()),
        ),
        seed: req.seed.unwrap_or(0),
        ..GenerateConfig::default()
    };
    let (tx, rx) = unbounded_channel();
    let stop = if req.output == Output::Text {
        req.stop.clone()
    } else {
        Vec::new()
    };
    let prompt_tokens = prompt.len();
    let job = Job {
        prompt,
        grammar: grammar.map(|c| c.grammar),
        config,
        stop,
        parallel_calls: matches!(req.output, Output::Tools { parallel: true, .. }),
        tokens: false,
        think: thinking,
        events: tx,
    };
    state.queue.submit(job).map_err(ApiError::from)?;
    Ok(Started {
        id: id.to_string(),
        endpoint,
        req,
        rx,
        cache_hit,
        prompt_tokens,
        dropped,
        thinks: think > 0,
    })
}

/// A 404 unless the request names the served model.
fn check_model(state: &AppState, req: &ChatRequest) -> Result<(), ApiError> {
    if req.model == state.config.model_name {
        return Ok(());
    }
    Err(ApiError::new(
        StatusCode::NOT_FOUND,
        format!(
            "the model `{}` does not exist here: this server serves `{}`",
            req.model, state.config.model_name
        ),
    )
    .param("model")
    .code("model_not_found"))
}

/// A fresh request id: `prefix`, the server's start time and a counter (unique per server).
fn next_id(state: &AppState, prefix: &str) -> String {
    let n = state.next_id.fetch_add(1, Ordering::Relaxed);
    format!("{prefix}{:x}-{n}", state.started)
}

async fn chat_completions(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let start = Instant::now();
    let id = next_id(&state, "chatcmpl-");
    let started = async {
        let value = read_json(&state, body)?;
        let req =
            ChatRequest::parse_with(&value, state.config.max_tokens_cap, state.config.refusals)?;
        start_job(&state, &id, CHAT, req).await
    };
    match started.await {
        Err(e) => {
            log_error(&state, id, CHAT.into(), &e, start);
            e.into_response()
        }
        Ok(s) if s.req.stream => {
            let wire = ChatWire {
                id: s.id.clone(),
                created: unix_now(),
                model: state.config.model_name.clone(),
                deltas: Deltas::new(reading(&s.req.output), call_id(&s.id)),
                include_usage: s.req.include_usage,
            };
            {
                let dropped = s.dropped.clone();
                mark_dropped(
                    stream_response(state, s, start, wire).into_response(),
                    &dropped,
                )
            }
        }
        Ok(s) => complete_response(state, s, start).await,
    }
}

/// `POST /v1/messages`: the Anthropic Messages API, translated onto the same pipeline; its
/// errors in Anthropic's shape.
async fn messages(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let start = Instant::now();
    let id = next_id(&state, "msg_");
    let started = async {
        let value = read_json(&state, body)?;
        let req = anthropic::parse(&value, state.config.max_tokens_cap, state.config.refusals)?;
        start_job(&state, &id, MESSAGES, req).await
    };
    match started.await {
        Err(e) => {
            let e = e.rename_param("response_format", "output_config.format");
            log_error(&state, id, MESSAGES.into(), &e, start);
            e.into_response_for(Dialect::Anthropic)
        }
        Ok(s) if s.req.stream => {
            let wire = MessagesWire {
                start: Some(anthropic::Events::start(
                    &s.id,
                    &state.config.model_name,
                    s.prompt_tokens,
                )),
                events: anthropic::Events::new(reading(&s.req.output), tool_id(&s.id)),
            };
            {
                let dropped = s.dropped.clone();
                mark_dropped(
                    stream_response(state, s, start, wire).into_response(),
                    &dropped,
                )
            }
        }
        Ok(mut s) => {
            let Collected {
                text,
                ttft,
                finished,
                ..
            } = collect(&mut s.rx, start).await;
            match finished {
                Err(m) => {
                    let e = engine_error(m);
                    log_error(&state, s.id, MESSAGES.into(), &e, start);
                    e.into_response_for(Dialect::Anthropic)
                }
                Ok(f) => {
                    let f = s.finished(f);
                    let body = anthropic::message(
                        &s.id,
                        &state.config.model_name,
                        reading(&s.req.output),
                        &text,
                        &f,
                        &tool_id(&s.id),
                    );
                    log_done(&state, &s, &f, ttft, start);
                    mark_dropped(Json(body).into_response(), &s.dropped)
                }
            }
        }
    }
}

/// `POST /v1/messages/count_tokens`: the prompt tokens a Messages request would send the
/// model (its conversation through the chat template, with the tool or format instructions).
async fn count_tokens(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let start = Instant::now();
    let id = next_id(&state, "count_");
    let counted = async {
        let value = read_json(&state, body)?;
        let req = anthropic::parse_count(&value, state.config.max_tokens_cap)?;
        check_model(&state, &req)?;
        let encode = state.encode.clone();
        tokio::task::spawn_blocking(move || {
            encode(&req.turns).map_err(|e| {
                ApiError::invalid("messages", format!("cannot encode the conversation: {e}"))
            })
        })
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
    };
    match counted.await {
        Ok(prompt) => {
            (state.config.log)(&RequestLog {
                id,
                endpoint: COUNT_TOKENS.into(),
                status: 200,
                prompt_tokens: prompt.len(),
                completion_tokens: 0,
                ttft: None,
                total: start.elapsed(),
                cache_hit: None,
            });
            Json(json!({"input_tokens": prompt.len()})).into_response()
        }
        Err(e) => {
            log_error(&state, id, COUNT_TOKENS.into(), &e, start);
            e.into_response_for(Dialect::Anthropic)
        }
    }
}

/// `POST /v1/responses`: the OpenAI Responses API, translated onto the same pipeline.
async fn responses_create(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let start = Instant::now();
    let id = next_id(&state, "resp_");
    let started = async {
        let value = read_json(&state, body)?;
        let req = responses::parse(&value, state.config.max_tokens_cap, state.config.refusals)?;
        Ok::<_, ApiError>((
            start_job(&state, &id, RESPONSES, req).await?,
            responses::echo(&value),
        ))
    };
    let (mut s, echo) = match started.await {
        Ok((s, echo)) if s.req.stream => {
            let events = responses::Events::new(
                &s.id,
                &state.config.model_name,
                unix_now(),
                reading(&s.req.output),
                echo,
            );
            let dropped = s.dropped.clone();
            let response = stream_response(state, s, start, ResponsesWire(events));
            return mark_dropped(response.into_response(), &dropped);
        }
        Ok(started) => started,
        Err(e) => {
            let e = e.rename_param("response_format", "text.format");
            log_error(&state, id, RESPONSES.into(), &e, start);
            return e.into_response();
        }
    };
    let Collected {
        text,
        ttft,
        finished,
        ..
    } = collect(&mut s.rx, start).await;
    match finished {
        Err(m) => {
            let e = engine_error(m);
            log_error(&state, s.id, RESPONSES.into(), &e, start);
            e.into_response()
        }
        Ok(f) => {
            let f = s.finished(f);
            let body = responses::response(
                &s.id,
                &state.config.model_name,
                unix_now(),
                reading(&s.req.output),
                &text,
                &f,
                &echo,
            );
            log_done(&state, &s, &f, ttft, start);
            mark_dropped(Json(body).into_response(), &s.dropped)
        }
    }
}

fn reading(output: &Output) -> Reading {
    match output {
        Output::Tools { .. } => Reading::Tools,
        Output::Schema {
            allow_refusal: true,
            ..
        } => Reading::Refusable,
        _ => Reading::Content,
    }
}

/// The tool call id of a Chat Completions response.
fn call_id(id: &str) -> String {
    format!("call_{}", id.trim_start_matches("chatcmpl-"))
}

/// The `tool_use` block id of a Messages response.
fn tool_id(id: &str) -> String {
    format!("toolu_{}", id.trim_start_matches("msg_"))
}

fn usage(f: &Finished) -> Value {
    json!({"prompt_tokens": f.prompt_tokens, "completion_tokens": f.completion_tokens,
        "total_tokens": f.prompt_tokens + f.completion_tokens,
        "completion_tokens_details": {"reasoning_tokens": f.reasoning_tokens}})
}

fn engine_error(message: String) -> ApiError {
    ApiError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        format!("generation failed: {message}"),
    )
}

/// The whole output of a job.
struct Collected {
    text: String,
    /// The reasoning before the answer (empty when the job did not reason).
    reasoning: String,
    /// The time to the first piece (reasoning or text).
    ttft: Option<Duration>,
    finished: Result<Finished, String>,
}

/// Waits for the whole output of a job.
async fn collect(rx: &mut UnboundedReceiver<Event>, start: Instant) -> Collected {
    let (mut text, mut reasoning) = (String::new(), String::new());
    let mut ttft = None;
    let finished = loop {
        match rx.recv().await {
            Some(Event::Text(t)) => {
                ttft.get_or_insert_with(|| start.elapsed());
                text.push_str(&t);
            }
            Some(Event::Reasoning(t)) => {
                ttft.get_or_insert_with(|| start.elapsed());
                reasoning.push_str(&t);
            }
            // Only a job that asked reports its tokens; these endpoints do not ask.
            Some(Event::Tokens(_)) => {}
            Some(Event::Done(d)) => break d,
            None => break Err("the decode worker stopped".into()),
        }
    };
    Collected {
        text,
        reasoning,
        ttft,
        finished,
    }
}

/// Logs a request that answered 200.
fn log_done(state: &AppState, s: &Started, f: &Finished, ttft: Option<Duration>, start: Instant) {
    (state.config.log)(&RequestLog {
        id: s.id.clone(),
        endpoint: s.endpoint.into(),
        status: 200,
        prompt_tokens: f.prompt_tokens,
        completion_tokens: f.completion_tokens,
        ttft,
        total: start.elapsed(),
        cache_hit: s.cache_hit,
    });
}

async fn complete_response(state: Arc<AppState>, mut s: Started, start: Instant) -> Response {
    let Collected {
        text,
        reasoning,
        ttft,
        finished,
    } = collect(&mut s.rx, start).await;
    let f = match finished {
        Ok(f) => s.finished(f),
        Err(m) => {
            let e = engine_error(m);
            log_error(&state, s.id, CHAT.into(), &e, start);
            return e.into_response();
        }
    };
    let (mut msg, finish_reason) = message(
        reading(&s.req.output),
        &text,
        f.finish == Finish::Length,
        &call_id(&s.id),
    );
    // As llama.cpp's server (`--reasoning-format deepseek`) and vLLM's return it: beside the
    // content, never in it, so `parse()` reads the answer alone.
    if s.thinks {
        msg["reasoning_content"] = json!(reasoning);
    }
    let body = json!({
        "id": s.id, "object": "chat.completion", "created": unix_now(),
        "model": state.config.model_name,
        "choices": [{"index": 0, "message": msg, "finish_reason": finish_reason, "logprobs": null}],
        "usage": usage(&f),
        "formwork": f.extension(),
    });
    log_done(&state, &s, &f, ttft, start);
    mark_dropped(Json(body).into_response(), &s.dropped)
}

/// A streaming wire format: the SSE events of a job's start, its text and its end.
trait Wire: Send + 'static {
    /// The events sent before any text.
    fn begin(&mut self) -> Vec<SseEvent>;
    /// The events for the next piece of text.
    fn text(&mut self, text: &str) -> Vec<SseEvent>;
    /// The events for the next piece of reasoning (before any text; only a job that
    /// reasons sends it, and only Chat Completions jobs reason).
    fn reasoning(&mut self, _text: &str) -> Vec<SseEvent> {
        Vec::new()
    }
    /// The last events: of the finished output, or of the engine's error (the headers are
    /// sent, so an error travels as an event, as the APIs' own streams send it).
    fn end(&mut self, result: Result<&Finished, &ApiError>) -> Vec<SseEvent>;
}

/// Chat Completions chunks.
struct ChatWire {
    id: String,
    created: u64,
    model: String,
    deltas: Deltas,
    include_usage: bool,
}

impl ChatWire {
    fn chunk(&self, delta: Value, finish: Value) -> Value {
        json!({"id": self.id, "object": "chat.completion.chunk", "created": self.created,
            "model": self.model, "choices": [{"index": 0, "delta": delta,
            "finish_reason": finish, "logprobs": null}]})
    }

    fn data(v: Value) -> SseEvent {
        SseEvent::default().data(v.to_string())
    }
}

impl Wire for ChatWire {
    fn begin(&mut self) -> Vec<SseEvent> {
        vec![Self::data(self.chunk(
            json!({"role": "assistant", "content": ""}),
            Value::Null,
        ))]
    }

    fn text(&mut self, text: &str) -> Vec<SseEvent> {
        let deltas = self.deltas.push(text);
        deltas
            .into_iter()
            .map(|d| Self::data(self.chunk(d, Value::Null)))
            .collect()
    }

    /// A chunk whose delta is `reasoning_content` alone, as llama.cpp's and vLLM's servers
    /// stream reasoning (the SDK's accumulator leaves unknown delta fields to the caller).
    fn reasoning(&mut self, text: &str) -> Vec<SseEvent> {
        vec![Self::data(
            self.chunk(json!({"reasoning_content": text}), Value::Null),
        )]
    }

    fn end(&mut self, result: Result<&Finished, &ApiError>) -> Vec<SseEvent> {
        let f = match result {
            Ok(f) => f,
            Err(e) => return vec![Self::data(e.body())],
        };
        let deltas = self.deltas.finish();
        let mut out: Vec<SseEvent> = deltas
            .into_iter()
            .map(|d| Self::data(self.chunk(d, Value::Null)))
            .collect();
        let reason = match (f.finish, self.deltas.called) {
            (Finish::Length, _) => "length",
            (Finish::Stop, true) => "tool_calls",
            (Finish::Stop, false) => "stop",
        };
        let mut last = self.chunk(json!({}), json!(reason));
        last["formwork"] = f.extension();
        out.push(Self::data(last));
        if self.include_usage {
            out.push(Self::data(
                json!({"id": self.id, "object": "chat.completion.chunk",
                "created": self.created, "model": self.model, "choices": [],
                "usage": usage(f)}),
            ));
        }
        out.push(SseEvent::default().data("[DONE]"));
        out
    }
}

/// Anthropic Messages events (named: the SDK skips events without a name).
struct MessagesWire {
    start: Option<anthropic::SseEvent>,
    events: anthropic::Events,
}

/// A named SSE event (the Anthropic and Responses SDKs read the name).
fn named<N: AsRef<str>>((name, data): (N, Value)) -> SseEvent {
    SseEvent::default()
        .event(name.as_ref())
        .data(data.to_string())
}

impl Wire for MessagesWire {
    fn begin(&mut self) -> Vec<SseEvent> {
        self.start.take().into_iter().map(named).collect()
    }

    fn text(&mut self, text: &str) -> Vec<SseEvent> {
        self.events.push(text).into_iter().map(named).collect()
    }

    fn end(&mut self, result: Result<&Finished, &ApiError>) -> Vec<SseEvent> {
        match result {
            Ok(f) => self.events.finish(f).into_iter().map(named).collect(),
            Err(e) => vec![named(("error", e.anthropic_body()))],
        }
    }
}

/// OpenAI Responses events.
struct ResponsesWire(responses::Events);

impl Wire for ResponsesWire {
    fn begin(&mut self) -> Vec<SseEvent> {
        self.0.start().into_iter().map(named).collect()
    }

    fn text(&mut self, text: &str) -> Vec<SseEvent> {
        self.0.push(text).into_iter().map(named).collect()
    }

    fn end(&mut self, result: Result<&Finished, &ApiError>) -> Vec<SseEvent> {
        match result {
            Ok(f) => self.0.finish(f).into_iter().map(named).collect(),
            Err(e) => self.0.error(e).into_iter().map(named).collect(),
        }
    }
}

type SseBody =
    Sse<tokio_stream::wrappers::ReceiverStream<Result<SseEvent, std::convert::Infallible>>>;

/// Streams a job's events through `wire`; a client that leaves cancels the generation.
fn stream_response(
    state: Arc<AppState>,
    mut s: Started,
    start: Instant,
    mut wire: impl Wire,
) -> SseBody {
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    tokio::spawn(async move {
        let send_all = |events: Vec<SseEvent>| {
            let tx = tx.clone();
            async move {
                for e in events {
                    if tx.send(Ok(e)).await.is_err() {
                        return false;
                    }
                }
                true
            }
        };
        let mut ttft = None;
        let mut alive = send_all(wire.begin()).await;
        let finished = loop {
            if !alive {
                // The client is gone: dropping the job's receiver cancels the generation.
                break None;
            }
            match s.rx.recv().await {
                Some(Event::Text(t)) => {
                    ttft.get_or_insert_with(|| start.elapsed());
                    alive = send_all(wire.text(&t)).await;
                }
                Some(Event::Reasoning(t)) => {
                    ttft.get_or_insert_with(|| start.elapsed());
                    alive = send_all(wire.reasoning(&t)).await;
                }
                Some(Event::Tokens(_)) => {}
                Some(Event::Done(d)) => break Some(d),
                None => break Some(Err("the decode worker stopped".into())),
            }
        };
        // Closing the job's channel cancels a generation still running (the client left).
        s.rx.close();
        let mut log = RequestLog {
            id: s.id.clone(),
            endpoint: s.endpoint.into(),
            status: 200,
            prompt_tokens: 0,
            completion_tokens: 0,
            ttft,
            total: start.elapsed(),
            cache_hit: s.cache_hit,
        };
        match finished {
            None => log.status = 499,
            Some(Err(m)) => {
                let e = engine_error(m);
                log.status = e.status.as_u16();
                send_all(wire.end(Err(&e))).await;
            }
            Some(Ok(f)) => {
                let f = s.finished(f);
                send_all(wire.end(Ok(&f))).await;
                log.prompt_tokens = f.prompt_tokens;
                log.completion_tokens = f.completion_tokens;
            }
        }
        log.total = start.elapsed();
        (state.config.log)(&log);
    });
    Sse::new(tokio_stream::wrappers::ReceiverStream::new(rx))
}

/// `GET /`: the playground page. Its Content-Security-Policy allows nothing from another
/// origin (no CDN: everything is in the page).
async fn playground_page() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; \
                 img-src 'self' data:",
            ),
        ],
        playground::page(),
    )
        .into_response()
}

const EXTRACT: &str = "POST /v1/formwork/extract";

/// `POST /v1/formwork/extract`: `formwork extract` over HTTP, streamed (see [`playground`]).
async fn extract(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let start = Instant::now();
    let id = next_id(&state, "extract-");
    match start_extract(&state, body).await {
        Err(r) => {
            log_error(&state, id, EXTRACT.into(), &r.error, start);
            (r.error.status, Json(r.body())).into_response()
        }
        Ok(job) => extract_stream(state, id, job, start).into_response(),
    }
}

/// A queued extract job and what its stream needs.
struct ExtractJob {
    plan: playground::Plan,
    document: String,
    rx: UnboundedReceiver<Event>,
    prompt_tokens: usize,
    cache_hit: bool,
}

/// Checks, plans and queues an extract request.
async fn start_extract(
    state: &Arc<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<ExtractJob, Refused> {
    let value = read_json(state, body)?;
    let req = ExtractRequest::parse(&value)?;
    if let Some(m) = req
        .model
        .as_deref()
        .filter(|&m| m != state.config.model_name)
    {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!(
                "the model `{m}` does not exist here: this server serves `{}`",
                state.config.model_name
            ),
        )
        .param("model")
        .code("model_not_found")
        .into());
    }
    if let Some(m) = req.max_tokens.filter(|&m| m > state.config.max_tokens_cap) {
        return Err(ApiError::invalid(
            "max_tokens",
            format!(
                "max_tokens is {m}, over this server's cap of {}",
                state.config.max_tokens_cap
            ),
        )
        .into());
    }
    // Planning, compiling and tokenizing are CPU work: off the async threads.
    let (req, plan, grammar, lookup, prompt) = {
        let state = state.clone();
        tokio::task::spawn_blocking(move || {
            let plan = playground::plan(&req)?;
            let (grammar, lookup) = state
                .cache
                .compiled(&plan.key, "constraint", || plan.grammar.clone())?;
            let prompt =
                (state.encode)(&[Turn::new(Role::User, plan.user.clone())]).map_err(|e| {
                    ApiError::invalid("document", format!("cannot encode the prompt: {e}"))
                })?;
            Ok::<_, Refused>((req, plan, grammar, lookup, prompt))
        })
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))??
    };
    let max_tokens = token_budget(prompt.len(), req.max_tokens, &state.config)
        .map_err(|e| e.rename_param("messages", "document"))?;
    let temperature = req.temperature.filter(|&t| t > 0.0);
    let mut config = GenerateConfig {
        max_tokens,
        sampling: Sampling::from_params(temperature, None, None),
        seed: req.seed,
        ..GenerateConfig::default()
    };
    // As `formwork extract` closes a text output: by any shortest completion, not JSON's.
    if plan.text_output {
        config.closing = formwork_core::generate::Closing::Generic;
    }
    let (tx, rx) = unbounded_channel();
    let prompt_tokens = prompt.len();
    state
        .queue
        .submit(Job {
            prompt,
            grammar: Some(grammar),
            config,
            stop: Vec::new(),
            parallel_calls: false,
            tokens: true,
            think: None,
            events: tx,
        })
        .map_err(ApiError::from)?;
    Ok(ExtractJob {
        plan,
        document: req.document,
        rx,
        prompt_tokens,
        cache_hit: lookup == crate::cache::Lookup::Hit,
    })
}

/// Streams an extract job: `start`, a `tokens` event per step, then `end` (or `error`). A
/// client that leaves cancels the generation.
fn extract_stream(
    state: Arc<AppState>,
    id: String,
    mut job: ExtractJob,
    start: Instant,
) -> SseBody {
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    tokio::spawn(async move {
        let send = |name: &'static str, data: Value| {
            let tx = tx.clone();
            async move {
                tx.send(Ok(SseEvent::default().event(name).data(data.to_string())))
                    .await
                    .is_ok()
            }
        };
        let mut log = RequestLog {
            id: id.clone(),
            endpoint: EXTRACT.into(),
            status: 200,
            prompt_tokens: job.prompt_tokens,
            completion_tokens: 0,
            ttft: None,
            total: Duration::ZERO,
            cache_hit: Some(job.cache_hit),
        };
        let mut alive = send(
            "start",
            json!({"id": id, "prompt_tokens": job.prompt_tokens,
                "cache": if job.cache_hit { "hit" } else { "compiled" }}),
        )
        .await;
        let (mut text, mut forced) = (String::new(), 0);
        let finished = loop {
            if !alive {
                break None;
            }
            match job.rx.recv().await {
                Some(Event::Tokens(pieces)) => {
                    log.ttft.get_or_insert_with(|| start.elapsed());
                    forced += pieces.iter().filter(|p| p.forced).count();
                    let tokens: Vec<Value> = pieces
                        .iter()
                        .map(|p| json!({"text": p.text, "forced": p.forced}))
                        .collect();
                    alive = send("tokens", json!({ "tokens": tokens })).await;
                }
                Some(Event::Text(t)) => text.push_str(&t),
                // The playground's jobs do not reason.
                Some(Event::Reasoning(_)) => {}
                Some(Event::Done(d)) => break Some(d),
                None => break Some(Err("the decode worker stopped".into())),
            }
        };
        job.rx.close();
        match finished {
            None => log.status = 499,
            Some(Err(m)) => {
                let e = engine_error(m);
                log.status = e.status.as_u16();
                send("error", e.body()).await;
            }
            Some(Ok(f)) => {
                log.completion_tokens = f.completion_tokens;
                let figures = Figures {
                    tokens: f.completion_tokens,
                    forced_tokens: forced,
                    ttft_ms: log.ttft.map(|d| d.as_secs_f64() * 1e3),
                    total_ms: start.elapsed().as_secs_f64() * 1e3,
                };
                let end = playground::judge(
                    &job.plan,
                    &job.document,
                    &text,
                    f.finish,
                    f.closed_early,
                    figures,
                );
                send("end", end).await;
            }
        }
        log.total = start.elapsed();
        (state.config.log)(&log);
    });
    Sse::new(tokio_stream::wrappers::ReceiverStream::new(rx))
}

/// A job the queue would not take: 503 either way (busy, or the worker has stopped).
impl From<SubmitError> for ApiError {
    fn from(e: SubmitError) -> Self {
        match e {
            SubmitError::Full => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "the server is busy: its request queue is full, retry later",
            )
            .code("queue_full"),
            SubmitError::Stopped => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "the decode worker has stopped",
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use formwork_core::generate::batch::BatchLogitsSource;
    use formwork_core::generate::testing::FixedLogits;
    use formwork_core::toktrie::{SyntheticVocab, TokEnv, TokenId};
    use http_body_util::BodyExt;
    use tower::ServiceExt;

    use crate::worker::{spawn, Backend};

    /// A fake model that takes `delay` per (batched) forward pass, like a real one.
    struct Slow(FixedLogits, Duration);

    impl BatchLogitsSource for Slow {
        type Sequence = usize;

        fn new_sequence(&mut self) -> usize {
            0
        }

        fn forward_batch(
            &mut self,
            batch: &mut [(&mut usize, &[u32])],
        ) -> Result<Vec<Vec<f32>>, formwork_core::generate::SourceError> {
            std::thread::sleep(self.1);
            self.0.forward_batch(batch)
        }

        fn fork(&mut self, seq: &usize, len: usize) -> usize {
            len.min(*seq)
        }
    }

    /// A fake model whose favourite digit depends on the position (`(pos + 1) % 10` after
    /// feeding up to `pos`), over the preferences of a [`FixedLogits`]: its tool calls
    /// differ from each other.
    struct Cycling(FixedLogits);

    impl BatchLogitsSource for Cycling {
        type Sequence = usize;

        fn new_sequence(&mut self) -> usize {
            0
        }

        fn forward_batch(
            &mut self,
            batch: &mut [(&mut usize, &[u32])],
        ) -> Result<Vec<Vec<f32>>, formwork_core::generate::SourceError> {
            let mut all = self.0.forward_batch(batch)?;
            for ((len, _), logits) in batch.iter().zip(&mut all) {
                logits[usize::from(b'0') + **len % 10] = 11.0;
            }
            Ok(all)
        }

        fn fork(&mut self, seq: &usize, len: usize) -> usize {
            len.min(*seq)
        }
    }

    /// A server over a fake model that prefers the bytes of `prefer`, in order.
    fn app(prefer: &[u8], key: Option<&str>) -> Router {
        slow_app(prefer, key, Duration::ZERO)
    }

    fn slow_app(prefer: &[u8], key: Option<&str>, delay: Duration) -> Router {
        app_with(prefer, key, delay, |_| {})
    }

    fn app_with(
        prefer: &[u8],
        key: Option<&str>,
        delay: Duration,
        adjust: impl FnOnce(&mut HttpConfig),
    ) -> Router {
        let fixed = FixedLogits::preferring(257, prefer.iter().map(|&b| u32::from(b)));
        app_over(Slow(fixed, delay), key, false, adjust)
    }

    /// A server over the fake model `source` (byte-level vocabulary, 256 its stop token),
    /// `lenient` as `formwork serve --lenient` makes it.
    fn app_over(
        source: impl BatchLogitsSource + Send + 'static,
        key: Option<&str>,
        lenient: bool,
        adjust: impl FnOnce(&mut HttpConfig),
    ) -> Router {
        let vocab = Arc::new(SyntheticVocab::byte_level());
        let backend = Backend {
            source,
            vocab: vocab.clone(),
            stop: vec![TokenId(256)],
        };
        let (queue, _worker) = spawn(backend, 2, 4).unwrap();
        let mut config = crate::ServerConfig::new("fake").http;
        config.api_key = key.map(str::to_string);
        config.max_tokens_cap = 64;
        config.body_limit = 4096;
        adjust(&mut config);
        let encode: Encoder = Arc::new(|turns: &[Turn]| {
            Ok(turns
                .iter()
                .flat_map(|t| t.content.bytes().map(u32::from))
                .collect())
        });
        router(
            config,
            GrammarCache::new(TokEnv::new(vocab), 8).lenient(lenient),
            queue,
            encode,
        )
    }

    fn post(body: impl Into<Body>) -> Request {
        Request::post("/v1/chat/completions")
            .header(header::CONTENT_TYPE, "application/json")
            .body(body.into())
            .unwrap()
    }

    async fn call(app: &Router, req: Request) -> (StatusCode, String) {
        let r = app.clone().oneshot(req).await.unwrap();
        let status = r.status();
        let bytes = r.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8(bytes.to_vec()).unwrap())
    }

    fn chat(extra: Value) -> String {
        let mut body = json!({"model": "fake", "messages": [{"role": "user", "content": "hi"}]});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        body.to_string()
    }

    #[test]
    fn budgets_fit_the_context_window_or_are_refused() {
        let mut config = crate::ServerConfig::new("fake").http;
        config.max_tokens_cap = 64;
        assert_eq!(
            token_budget(5000, None, &config).unwrap(),
            64,
            "no window known"
        );
        config.context_len = Some(100);
        assert_eq!(token_budget(10, None, &config).unwrap(), 64);
        assert_eq!(
            token_budget(60, None, &config).unwrap(),
            40,
            "default clamped to the room"
        );
        assert_eq!(token_budget(60, Some(40), &config).unwrap(), 40);
        for (prompt, asked, param) in [(60, Some(41), "max_tokens"), (100, None, "messages")] {
            let e = token_budget(prompt, asked, &config).unwrap_err();
            assert_eq!(e.status, StatusCode::BAD_REQUEST);
            let body = e.body();
            assert_eq!(body["error"]["code"], "context_length_exceeded", "{body}");
            assert_eq!(body["error"]["param"], param, "{body}");
        }
    }

    #[tokio::test]
    async fn an_over_long_conversation_is_a_400_before_any_generation() {
        let app = app_with(b"7", None, Duration::ZERO, |c| c.context_len = Some(8));
        let long = json!({"messages": [{"role": "user", "content": "a long question"}]});
        let (status, text) = call(&app, post(chat(long))).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{text}");
        assert!(text.contains("context_length_exceeded"), "{text}");
        let (status, text) = call(&app, post(chat(json!({"max_tokens": 5})))).await;
        assert_eq!(status, StatusCode::OK, "`hi` + 5 fit in 8: {text}");
    }

    #[tokio::test]
    async fn a_request_that_allows_refusal_gets_content_null_and_the_refusal() {
        // The fake model prefers `{`, `"`, then the letters of "refusal" over the schema's key.
        let app = app(b"{\"refusal:", None);
        let schema = json!({"type": "json_schema", "json_schema": {"name": "n", "schema": {
            "type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 9}},
            "required": ["a"], "additionalProperties": false}}});
        let body = chat(json!({"max_tokens": 24, "response_format": schema,
            "formwork": {"allow_refusal": true}}));
        let (status, text) = call(&app, post(body)).await;
        assert_eq!(status, StatusCode::OK, "{text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        let m = &v["choices"][0]["message"];
        assert_eq!(m["content"], Value::Null, "{text}");
        assert!(m["refusal"].as_str().is_some(), "{text}");
        assert_eq!(v["choices"][0]["finish_reason"], "stop");
        // Without the field the same model must answer the schema.
        let body = chat(json!({"max_tokens": 24, "response_format": schema}));
        let (status, text) = call(&app, post(body)).await;
        assert_eq!(status, StatusCode::OK, "{text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        let content = v["choices"][0]["message"]["content"].as_str().unwrap();
        let parsed: Value = serde_json::from_str(content).unwrap_or_else(|e| panic!("{e}: {text}"));
        assert!(parsed["a"].is_number(), "{content}");
        let bad = chat(json!({"response_format": schema, "formwork": {"allow_refusal": 1}}));
        let (status, text) = call(&app, post(bad)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        assert!(text.contains("formwork.allow_refusal"), "{text}");
    }

    #[tokio::test]
    async fn schema_request_gives_a_valid_completion() {
        let app = app(b"7", None);
        let body = chat(
            json!({"max_tokens": 8, "response_format": {"type": "json_schema",
            "json_schema": {"name": "n", "schema": {"type": "integer", "maximum": 999}}}}),
        );
        let (status, text) = call(&app, post(body)).await;
        assert_eq!(status, StatusCode::OK, "{text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["object"], "chat.completion");
        assert_eq!(v["choices"][0]["message"]["content"], "777");
        assert_eq!(v["choices"][0]["finish_reason"], "stop");
        assert_eq!(v["usage"]["completion_tokens"], 3);
    }

    /// Issue 19: reasoning before a constrained answer comes back in
    /// `message.reasoning_content` (streamed: `delta.reasoning_content` chunks, all before the
    /// content), never in the content, which is the schema-valid answer alone; its tokens
    /// count in `completion_tokens` and `completion_tokens_details.reasoning_tokens`. The
    /// request field turns it on or (0) off over the server's default; free text cannot ask.
    #[tokio::test]
    async fn reasoning_comes_back_apart_from_the_constrained_answer() {
        // The fake writes `z` while free (the reasoning), then `7` where the schema wants it.
        let schema = json!({"type": "json_schema", "json_schema": {"name": "n", "schema": {
            "type": "object", "properties": {"n": {"type": "integer", "maximum": 9}},
            "required": ["n"], "additionalProperties": false}}});
        let body = |extra: Value| {
            let mut b = json!({"max_tokens": 16, "response_format": schema});
            b.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            chat(b)
        };
        let off = app(b"z7", None);
        let (status, text) = call(&off, post(body(json!({"formwork": {"think": 6}})))).await;
        assert_eq!(status, StatusCode::OK, "{text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        let msg = &v["choices"][0]["message"];
        assert_eq!(msg["content"], r#"{"n":7}"#, "{v}");
        assert_eq!(msg["reasoning_content"], "zzzzzz", "{v}");
        assert_eq!(
            v["usage"]["completion_tokens_details"]["reasoning_tokens"],
            6
        );
        // `7` and `}`... : the answer's own tokens, plus the reasoning's six.
        let answer = v["usage"]["completion_tokens"].as_u64().unwrap();
        assert!(answer > 6, "{v}");
        // Without the field, this server does not reason: no reasoning field at all.
        let (_, text) = call(&off, post(body(json!({})))).await;
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["choices"][0]["message"]["content"], r#"{"n":7}"#);
        assert!(
            v["choices"][0]["message"]
                .get("reasoning_content")
                .is_none(),
            "{v}"
        );
        assert_eq!(
            v["usage"]["completion_tokens_details"]["reasoning_tokens"],
            0
        );

        // A server that reasons by default (`--think 4`); a request turns it off with 0.
        let on = app_with(b"z7", None, Duration::ZERO, |c| c.think = 4);
        let (_, text) = call(&on, post(body(json!({})))).await;
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            v["choices"][0]["message"]["reasoning_content"], "zzzz",
            "{v}"
        );
        assert_eq!(v["choices"][0]["message"]["content"], r#"{"n":7}"#);
        let (_, text) = call(&on, post(body(json!({"formwork": {"think": 0}})))).await;
        let v: Value = serde_json::from_str(&text).unwrap();
        assert!(
            v["choices"][0]["message"]
                .get("reasoning_content")
                .is_none(),
            "{v}"
        );

        // Streamed: reasoning chunks first, then content chunks; neither holds the other.
        let (status, text) = call(
            &off,
            post(body(json!({"stream": true, "formwork": {"think": 6}}))),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{text}");
        let (mut reasoning, mut content) = (String::new(), String::new());
        for e in events(&text) {
            let Ok(c) = serde_json::from_str::<Value>(&e) else {
                continue;
            };
            let delta = &c["choices"][0]["delta"];
            if let Some(r) = delta["reasoning_content"].as_str() {
                assert!(content.is_empty(), "reasoning after content: {text}");
                assert!(delta.get("content").is_none(), "{e}");
                reasoning.push_str(r);
            }
            if let Some(t) = delta["content"].as_str() {
                content.push_str(t);
            }
        }
        assert_eq!(reasoning, "zzzzzz", "{text}");
        assert_eq!(content, r#"{"n":7}"#, "{text}");

        // Free text has no answer to reason before; a bad value names the field.
        for (extra, what) in [
            (json!({"formwork": {"think": 4}}), "json_schema"),
            (json!({"formwork": {"think": "yes"}}), "token count"),
            (json!({"formwork": {"think": 65}}), "at most 64"),
        ] {
            let free = extra["formwork"]["think"] == 4;
            let b = if free { chat(extra) } else { body(extra) };
            let (status, text) = call(&off, post(b)).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{text}");
            let v: Value = serde_json::from_str(&text).unwrap();
            assert_eq!(v["error"]["param"], "formwork.think", "{v}");
            assert!(
                v["error"]["message"].as_str().unwrap().contains(what),
                "{v}"
            );
        }
    }

    #[tokio::test]
    async fn errors_are_openai_bodies_with_their_status() {
        let app = app(b"a", Some("k"));
        let authed = |body: String| {
            let mut r = post(body);
            r.headers_mut()
                .insert(header::AUTHORIZATION, "Bearer k".parse().unwrap());
            r
        };
        let (status, text) = call(&app, post(chat(json!({})))).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{text}");
        let cases = [
            (
                "{\"model\": ".to_string(),
                StatusCode::BAD_REQUEST,
                "malformed JSON",
            ),
            (
                chat(json!({"model": "gpt-9"})),
                StatusCode::NOT_FOUND,
                "does not exist",
            ),
            (
                chat(json!({"max_tokens": 65})),
                StatusCode::BAD_REQUEST,
                "cap",
            ),
            (
                chat(json!({"messages": [{"role": "user", "content": "x".repeat(5000)}]})),
                StatusCode::PAYLOAD_TOO_LARGE,
                "limit of 4096 bytes",
            ),
            (
                chat(
                    json!({"response_format": {"type": "json_schema", "json_schema": {"name": "x",
                "schema": {"type": "object", "unevaluatedProperties": false}}}}),
                ),
                StatusCode::BAD_REQUEST,
                "`unevaluatedProperties` at /unevaluatedProperties",
            ),
        ];
        for (body, want, says) in cases {
            let (status, text) = call(&app, authed(body)).await;
            assert_eq!(status, want, "{text}");
            let v: Value = serde_json::from_str(&text).unwrap();
            let message = v["error"]["message"].as_str().unwrap();
            assert!(message.contains(says), "{message}");
        }
        // Still serving.
        let (status, _) = call(&app, authed(chat(json!({"max_tokens": 2})))).await;
        assert_eq!(status, StatusCode::OK);
    }

    /// The `data:` payloads of an SSE body.
    fn events(text: &str) -> Vec<String> {
        text.lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .map(str::to_string)
            .collect()
    }

    #[tokio::test]
    async fn a_streamed_tool_call_has_the_sdk_chunk_format() {
        // The fake model prefers digits: the grammar forces the rest of the call.
        let app = app(b"5]", None);
        let tools = json!([{"type": "function", "function": {"name": "sum", "parameters": {
            "type": "object", "properties": {"numbers": {"type": "array", "items": {"type": "integer", "maximum": 9},
            "maxItems": 1}}, "required": ["numbers"]}}}]);
        let body = chat(
            json!({"stream": true, "tools": tools, "tool_choice": "required",
            "max_tokens": 64, "stream_options": {"include_usage": true}}),
        );
        let (status, text) = call(&app, post(body)).await;
        assert_eq!(status, StatusCode::OK);
        let data = events(&text);
        assert_eq!(data.last().map(String::as_str), Some("[DONE]"));
        let chunks: Vec<Value> = data[..data.len() - 1]
            .iter()
            .map(|d| serde_json::from_str(d).unwrap())
            .collect();
        assert!(chunks
            .iter()
            .all(|c| c["object"] == "chat.completion.chunk"));
        assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
        let usage = chunks.last().unwrap();
        assert_eq!(usage["choices"], json!([]));
        assert!(usage["usage"]["completion_tokens"].as_u64().unwrap() > 0);
        let finish = &chunks[chunks.len() - 2]["choices"][0];
        assert_eq!(finish["finish_reason"], "tool_calls");
        let calls: Vec<&Value> = chunks
            .iter()
            .filter_map(|c| c["choices"][0]["delta"]["tool_calls"].get(0))
            .collect();
        assert!(calls[0]["id"].as_str().is_some_and(|s| !s.is_empty()));
        assert_eq!(calls[0]["function"]["name"], "sum");
        assert!(calls[1..].iter().all(|c| c.get("id").is_none()));
        let args: String = calls
            .iter()
            .map(|c| c["function"]["arguments"].as_str().unwrap())
            .collect();
        let args: Value = serde_json::from_str(&args).unwrap();
        assert!(args["numbers"].is_array(), "{args}");
    }

    /// The `sum` tool of the parallel-call tests: one digit in a list (a call is 42 tokens).
    fn digit_tool_body(extra: Value) -> String {
        let tools = json!([{"type": "function", "function": {"name": "sum", "parameters": {
            "type": "object", "properties": {"numbers": {"type": "array",
            "items": {"type": "integer", "minimum": 0, "maximum": 9}, "maxItems": 1}},
            "required": ["numbers"]}}}]);
        let mut b = json!({"tools": tools, "tool_choice": "required", "max_tokens": 150});
        b.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        chat(b)
    }

    /// The calls of a streamed chat completion, folded by index as the SDK does, and the
    /// final chunk.
    fn streamed_calls(text: &str) -> (Vec<String>, Value) {
        let mut args: Vec<String> = Vec::new();
        let mut last = Value::Null;
        for d in events(text).iter().filter(|d| *d != "[DONE]") {
            let c: Value = serde_json::from_str(d).unwrap();
            if let Some(tc) = c["choices"][0]["delta"]["tool_calls"].get(0) {
                let i = tc["index"].as_u64().unwrap() as usize;
                if tc.get("id").is_some() {
                    assert_eq!(i, args.len());
                    args.push(String::new());
                }
                args[i].push_str(tc["function"]["arguments"].as_str().unwrap());
            }
            if !c["choices"][0]["finish_reason"].is_null() {
                last = c;
            }
        }
        (args, last)
    }

    #[tokio::test]
    async fn parallel_tool_calls_make_several_valid_calls_or_at_most_one() {
        // The fake model's favourite digit changes with the position and it prefers a newline
        // after a call: it starts call after call, each with another digit, until the budget
        // has no room for one more (a call is 42 tokens, 150 fit three).
        let app = app_over(
            Cycling(FixedLogits::preferring(257, [u32::from(b'\n')])),
            None,
            false,
            |c| c.max_tokens_cap = 256,
        );
        let (status, text) = call(&app, post(digit_tool_body(json!({})))).await;
        assert_eq!(status, StatusCode::OK, "{text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["choices"][0]["finish_reason"], "tool_calls", "{text}");
        assert_eq!(v["formwork"]["duplicate_call_dropped"], false, "{text}");
        let calls = v["choices"][0]["message"]["tool_calls"].as_array().unwrap();
        assert_eq!(calls.len(), 3, "{text}");
        let mut ids: Vec<&str> = calls.iter().map(|c| c["id"].as_str().unwrap()).collect();
        let mut digits = Vec::new();
        for c in calls {
            let args: Value =
                serde_json::from_str(c["function"]["arguments"].as_str().unwrap()).unwrap();
            let n = args["numbers"][0].as_u64().unwrap();
            assert!(
                n <= 9 && args["numbers"].as_array().unwrap().len() == 1,
                "{text}"
            );
            digits.push(n);
        }
        digits.dedup();
        assert_eq!(digits.len(), 3, "the calls differ: {text}");
        ids.dedup();
        assert_eq!(ids.len(), calls.len(), "ids are unique: {text}");
        // Streamed: the same calls, each with its own index.
        let (_, streamed) = call(&app, post(digit_tool_body(json!({"stream": true})))).await;
        let (args, _) = streamed_calls(&streamed);
        let whole: Vec<&str> = calls
            .iter()
            .map(|c| c["function"]["arguments"].as_str().unwrap())
            .collect();
        assert_eq!(args, whole);
        // `parallel_tool_calls: false`: exactly one call.
        let body = digit_tool_body(json!({"parallel_tool_calls": false}));
        let (status, text) = call(&app, post(body)).await;
        assert_eq!(status, StatusCode::OK, "{text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        let calls = v["choices"][0]["message"]["tool_calls"].as_array().unwrap();
        assert_eq!(calls.len(), 1, "{text}");
    }

    #[tokio::test]
    async fn only_a_lenient_server_drops_constraints_and_every_response_says_which() {
        let format = json!({"type": "json_schema", "json_schema": {"name": "n", "schema": {
            "type": "object", "properties": {"a": {"type": "integer", "maximum": 9}},
            "required": ["a"], "additionalProperties": false,
            "unevaluatedProperties": false}}});
        let body = |stream: bool| {
            chat(json!({"max_tokens": 16, "response_format": format,
            "stream": stream}))
        };
        // Exact (the default): a 400 naming the keyword and pointer.
        let (status, text) = call(&app(b"7", None), post(body(false))).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{text}");
        assert!(
            text.contains("`unevaluatedProperties` at /unevaluatedProperties"),
            "{text}"
        );
        // Lenient: the rest of the schema is enforced, and the response says what was not.
        let fixed = FixedLogits::preferring(257, [u32::from(b'7')]);
        let lenient = app_over(Slow(fixed, Duration::ZERO), None, true, |_| {});
        let want = json!([{"param": "response_format", "keyword": "unevaluatedProperties",
            "pointer": "/unevaluatedProperties"}]);
        let header_value = "response_format:unevaluatedProperties@/unevaluatedProperties";
        for stream in [false, true] {
            let r = lenient.clone().oneshot(post(body(stream))).await.unwrap();
            assert_eq!(r.status(), StatusCode::OK);
            assert_eq!(r.headers()[DROPPED_HEADER], header_value);
            let bytes = r.into_body().collect().await.unwrap().to_bytes();
            let text = String::from_utf8(bytes.to_vec()).unwrap();
            let v: Value = if stream {
                let data = events(&text);
                serde_json::from_str(&data[data.len() - 2]).unwrap()
            } else {
                serde_json::from_str(&text).unwrap()
            };
            assert_eq!(v["formwork"]["dropped_constraints"], want, "{text}");
            if !stream {
                let content = v["choices"][0]["message"]["content"].as_str().unwrap();
                assert_eq!(content, r#"{"a":7}"#, "maximum 9 still holds: {text}");
            }
        }
        // A schema with nothing to drop: an empty list and no header, on every endpoint.
        let fine = json!({"type": "json_schema", "json_schema": {"name": "n",
            "schema": {"type": "integer", "maximum": 9}}});
        let r = lenient
            .clone()
            .oneshot(post(chat(
                json!({"max_tokens": 4, "response_format": fine}),
            )))
            .await
            .unwrap();
        assert!(r.headers().get(DROPPED_HEADER).is_none());
        let bytes = r.into_body().collect().await.unwrap().to_bytes();
        let v: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(v["formwork"]["dropped_constraints"], json!([]));
        // Messages and Responses carry the same report.
        let tools = json!([{"name": "f", "input_schema": {"type": "object",
            "properties": {"a": {"type": "integer", "maximum": 9}}, "required": ["a"],
            "unevaluatedProperties": false}}]);
        let r = lenient
            .clone()
            .oneshot(post_to(
                "/v1/messages",
                messages_body(json!({"tools": tools, "tool_choice": {"type": "any"}})),
            ))
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(
            r.headers()[DROPPED_HEADER],
            "tools.f:unevaluatedProperties@/unevaluatedProperties"
        );
        let bytes = r.into_body().collect().await.unwrap().to_bytes();
        let v: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(v["formwork"]["dropped_constraints"][0]["param"], "tools.f");
        let responses = json!({"model": "fake", "input": "hi", "max_output_tokens": 16,
            "text": {"format": {"type": "json_schema", "name": "n",
                "schema": format["json_schema"]["schema"]}}});
        let r = lenient
            .clone()
            .oneshot(post_to("/v1/responses", responses.to_string()))
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(r.headers()[DROPPED_HEADER], header_value);
        let bytes = r.into_body().collect().await.unwrap().to_bytes();
        let v: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(v["formwork"]["dropped_constraints"], want);
    }

    #[tokio::test]
    async fn a_repeated_call_ends_the_list_and_is_dropped() {
        // Issue 18: SmolLM2 repeated `sum(1, 2)` until max_tokens. This fake model does the
        // same: it prefers `5` and then a newline, so every call is `{"numbers":[5]}`.
        let app = app_with(b"5\n", None, Duration::ZERO, |c| c.max_tokens_cap = 256);
        let (status, text) = call(&app, post(digit_tool_body(json!({})))).await;
        assert_eq!(status, StatusCode::OK, "{text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        let choice = &v["choices"][0];
        assert_eq!(choice["finish_reason"], "tool_calls", "{text}");
        let calls = choice["message"]["tool_calls"].as_array().unwrap();
        assert_eq!(calls.len(), 1, "{text}");
        assert_eq!(calls[0]["function"]["arguments"], r#"{"numbers":[5]}"#);
        assert_eq!(v["formwork"]["duplicate_call_dropped"], true, "{text}");
        // Generation stopped at the repeat (two calls and a newline), not at the budget.
        let used = v["usage"]["completion_tokens"].as_u64().unwrap();
        assert!((84..=90).contains(&used), "{used} tokens: {text}");
        // Streamed: the repeat is never sent, not even its start.
        let (_, streamed) = call(&app, post(digit_tool_body(json!({"stream": true})))).await;
        let (args, last) = streamed_calls(&streamed);
        assert_eq!(args, [r#"{"numbers":[5]}"#], "{streamed}");
        assert_eq!(last["choices"][0]["finish_reason"], "tool_calls");
        assert_eq!(
            last["formwork"]["duplicate_call_dropped"], true,
            "{streamed}"
        );
        assert!(!streamed.contains("\\n"), "no separator sent: {streamed}");
    }

    #[tokio::test]
    async fn a_client_that_leaves_mid_stream_frees_the_worker() {
        // 64 tokens at 10 ms each: a stream left running holds the worker for 640 ms.
        let app = slow_app(b"a", None, Duration::from_millis(10));
        let start = Instant::now();
        for _ in 0..3 {
            // Each stream would run to the cap; reading one chunk and leaving must cancel it,
            // or the queue of two would fill and the last request get a 503.
            let r = app
                .clone()
                .oneshot(post(chat(json!({"stream": true, "max_tokens": 64}))))
                .await
                .unwrap();
            assert_eq!(r.status(), StatusCode::OK);
            let mut body = r.into_body();
            let first = body.frame().await.unwrap().unwrap();
            assert!(first.is_data());
            drop(body);
            // Cancelling takes up to one forward pass: `GET /health` then counts nothing
            // running or queued (the stream, left running, would take 640 ms).
            let mut idle = false;
            for _ in 0..20 {
                tokio::time::sleep(Duration::from_millis(10)).await;
                let get = Request::get("/health").body(Body::empty()).unwrap();
                let (_, text) = call(&app, get).await;
                let v: Value = serde_json::from_str(&text).unwrap();
                if (&v["running"], &v["queued"]) == (&json!(0), &json!(0)) {
                    idle = true;
                    break;
                }
            }
            assert!(idle, "the left stream still holds the worker after 200 ms");
        }
        let (status, text) = call(&app, post(chat(json!({"max_tokens": 3})))).await;
        assert_eq!(status, StatusCode::OK, "{text}");
        assert!(
            start.elapsed() < Duration::from_millis(600),
            "{:?}",
            start.elapsed()
        );
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["choices"][0]["message"]["content"], "aaa");
        assert_eq!(v["choices"][0]["finish_reason"], "length");
    }

    fn post_to(path: &str, body: impl Into<Body>) -> Request {
        Request::post(path)
            .header(header::CONTENT_TYPE, "application/json")
            .body(body.into())
            .unwrap()
    }

    fn messages_body(extra: Value) -> String {
        let mut body = json!({"model": "fake", "max_tokens": 48,
            "messages": [{"role": "user", "content": "hi"}]});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        body.to_string()
    }

    /// The `(event, data)` pairs of an SSE body with named events.
    fn named_events(text: &str) -> Vec<(String, Value)> {
        let mut out = Vec::new();
        let mut name = None;
        for line in text.lines() {
            if let Some(n) = line.strip_prefix("event: ") {
                name = Some(n.to_string());
            } else if let Some(d) = line.strip_prefix("data: ") {
                let name = name.take().expect("every event is named");
                out.push((name, serde_json::from_str(d).unwrap()));
            }
        }
        out
    }

    #[tokio::test]
    async fn messages_tool_use_streamed_and_whole_agree() {
        // The fake model prefers digits: the grammar forces the rest of the call.
        let app = app(b"42", None);
        let tools = json!([{"name": "submit_result", "input_schema": {"type": "object",
            "properties": {"score": {"type": "integer", "maximum": 99}},
            "required": ["score"]}}]);
        let body = |stream: bool| {
            messages_body(json!({"tools": tools, "stream": stream,
                "tool_choice": {"type": "tool", "name": "submit_result"}}))
        };
        let (status, text) = call(&app, post_to("/v1/messages", body(false))).await;
        assert_eq!(status, StatusCode::OK, "{text}");
        let whole: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(whole["type"], "message");
        assert_eq!(whole["role"], "assistant");
        assert_eq!(whole["stop_reason"], "tool_use");
        assert_eq!(whole["stop_sequence"], Value::Null);
        let block = &whole["content"][0];
        assert_eq!(block["type"], "tool_use");
        assert_eq!(block["name"], "submit_result");
        assert!(block["id"].as_str().unwrap().starts_with("toolu_"));
        let score = block["input"]["score"].as_u64();
        assert!(score.is_some_and(|n| n <= 99), "{text}");
        assert_eq!(block["input"].as_object().unwrap().len(), 1, "{text}");
        assert!(whole["usage"]["output_tokens"].as_u64().unwrap() > 0);

        let (status, text) = call(&app, post_to("/v1/messages", body(true))).await;
        assert_eq!(status, StatusCode::OK, "{text}");
        let events = named_events(&text);
        let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names[..2], ["message_start", "content_block_start"]);
        assert_eq!(
            names[names.len() - 3..],
            ["content_block_stop", "message_delta", "message_stop"]
        );
        assert!(names[2..names.len() - 3]
            .iter()
            .all(|n| *n == "content_block_delta"));
        for (name, data) in &events {
            assert_eq!(data["type"], name.as_str());
        }
        let start = &events[1].1["content_block"];
        assert_eq!(
            (&start["type"], &start["name"], &start["input"]),
            (&json!("tool_use"), &json!("submit_result"), &json!({}))
        );
        let args: String = events[2..events.len() - 3]
            .iter()
            .map(|(_, d)| {
                assert_eq!(d["delta"]["type"], "input_json_delta");
                d["delta"]["partial_json"].as_str().unwrap().to_string()
            })
            .collect();
        assert_eq!(
            serde_json::from_str::<Value>(&args).unwrap(),
            block["input"]
        );
        let delta = &events[events.len() - 2].1;
        assert_eq!(delta["delta"]["stop_reason"], "tool_use");
        assert_eq!(delta["usage"], whole["usage"]);
        assert_eq!(
            events[0].1["message"]["usage"]["input_tokens"],
            whole["usage"]["input_tokens"]
        );
    }

    #[tokio::test]
    async fn messages_errors_are_anthropic_bodies() {
        let app = app(b"a", Some("k"));
        let with_key = |header: &str, value: &str, body: String| {
            let mut r = post_to("/v1/messages", body);
            r.headers_mut().insert(
                header::HeaderName::from_bytes(header.as_bytes()).unwrap(),
                value.parse().unwrap(),
            );
            r
        };
        let (status, text) = call(
            &app,
            with_key("x-api-key", "wrong", messages_body(json!({}))),
        )
        .await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            (&v["type"], &v["error"]["type"]),
            (&json!("error"), &json!("authentication_error"))
        );
        let no_budget = json!({"model": "fake", "messages": [{"role": "user", "content": "x"}]});
        let cases = [
            (
                no_budget.to_string(),
                StatusCode::BAD_REQUEST,
                "max_tokens: ",
            ),
            (
                messages_body(json!({"output_config": {"format": {"type": "json_schema",
                    "schema": {"type": "object", "unevaluatedProperties": false}}}})),
                StatusCode::BAD_REQUEST,
                "`unevaluatedProperties` at /unevaluatedProperties",
            ),
            (
                messages_body(
                    json!({"tools": [{"name": "f", "input_schema": {"type": "object",
                    "properties": {"a": {"type": "array", "unevaluatedItems": false}}}}]}),
                ),
                StatusCode::BAD_REQUEST,
                "/properties/a/unevaluatedItems",
            ),
            (
                messages_body(json!({"model": "claude-9"})),
                StatusCode::NOT_FOUND,
                "model: ",
            ),
            ("{".to_string(), StatusCode::BAD_REQUEST, "malformed JSON"),
        ];
        for (body, want, says) in cases {
            let (status, text) = call(&app, with_key("x-api-key", "k", body)).await;
            assert_eq!(status, want, "{text}");
            let v: Value = serde_json::from_str(&text).unwrap();
            assert_eq!(v["type"], "error", "{text}");
            let message = v["error"]["message"].as_str().unwrap();
            assert!(message.contains(says), "{message}");
            assert!(v["error"]["type"].is_string());
        }
        let (status, text) = call(
            &app,
            with_key(
                "authorization",
                "Bearer k",
                messages_body(json!({"max_tokens": 3})),
            ),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["content"], json!([{"type": "text", "text": "aaa"}]));
        assert_eq!(v["stop_reason"], "max_tokens");
    }

    /// Issue 19: only Chat Completions has a field for reasoning; asked for on the Responses
    /// or Messages API it is a 400 naming `formwork.think`, not silently dropped (0, off, is
    /// accepted everywhere).
    #[tokio::test]
    async fn reasoning_elsewhere_than_chat_completions_is_refused() {
        let app = app(b"7", None);
        let responses = |think: u64| {
            json!({"model": "fake", "input": "hi", "max_output_tokens": 8,
                "formwork": {"think": think},
                "text": {"format": {"type": "json_schema", "name": "n", "strict": true,
                    "schema": {"type": "integer", "maximum": 999}}}})
            .to_string()
        };
        let messages = |think: u64| {
            messages_body(json!({"formwork": {"think": think},
                "output_config": {"format": {"type": "json_schema",
                    "schema": {"type": "integer", "maximum": 999}}}}))
        };
        for (path, body) in [
            ("/v1/responses", responses(4)),
            ("/v1/messages", messages(4)),
        ] {
            let (status, text) = call(&app, post_to(path, body)).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{path}: {text}");
            assert!(text.contains("formwork.think"), "{path}: {text}");
            assert!(text.contains("chat/completions"), "{path}: {text}");
        }
        for (path, body) in [
            ("/v1/responses", responses(0)),
            ("/v1/messages", messages(0)),
        ] {
            let (status, text) = call(&app, post_to(path, body)).await;
            assert_eq!(status, StatusCode::OK, "{path}: {text}");
            assert!(!text.contains("reasoning_content"), "{path}: {text}");
        }
    }

    #[tokio::test]
    async fn responses_answer_a_schema_and_fail_closed() {
        let app = app(b"7", None);
        let body = json!({"model": "fake", "input": "hi", "max_output_tokens": 8,
            "text": {"format": {"type": "json_schema", "name": "n", "strict": true,
                "schema": {"type": "integer", "maximum": 999}}}});
        let (status, text) = call(&app, post_to("/v1/responses", body.to_string())).await;
        assert_eq!(status, StatusCode::OK, "{text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            (&v["object"], &v["status"]),
            (&json!("response"), &json!("completed"))
        );
        assert!(v["id"].as_str().unwrap().starts_with("resp_"));
        let item = &v["output"][0];
        assert_eq!(
            (&item["type"], &item["role"]),
            (&json!("message"), &json!("assistant"))
        );
        assert_eq!(item["content"][0]["type"], "output_text");
        assert_eq!(item["content"][0]["text"], "777");
        assert_eq!(v["usage"]["output_tokens"], 3);
        let bad = json!({"model": "fake", "input": "hi", "text": {"format": {
            "type": "json_schema", "name": "n",
            "schema": {"type": "object", "unevaluatedProperties": false}}}});
        let (status, text) = call(&app, post_to("/v1/responses", bad.to_string())).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["error"]["param"], "text.format", "{text}");
        assert!(v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("`unevaluatedProperties` at /unevaluatedProperties"));
    }

    #[tokio::test]
    async fn count_tokens_counts_the_rendered_prompt() {
        let app = app(b"a", None);
        let body = json!({"model": "fake", "messages": [{"role": "user", "content": "hello"}]});
        let (status, text) =
            call(&app, post_to("/v1/messages/count_tokens", body.to_string())).await;
        assert_eq!(status, StatusCode::OK, "{text}");
        // The test encoder is one token per byte of each turn's text.
        assert_eq!(
            serde_json::from_str::<Value>(&text).unwrap(),
            json!({"input_tokens": 5})
        );
        let other = json!({"model": "claude-9", "messages": [{"role": "user", "content": "x"}]});
        let (status, text) = call(
            &app,
            post_to("/v1/messages/count_tokens", other.to_string()),
        )
        .await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        assert_eq!(
            serde_json::from_str::<Value>(&text).unwrap()["type"],
            "error"
        );
    }

    #[tokio::test]
    async fn messages_stop_sequences_cut_the_text() {
        // The fake model writes `a` forever: `aaa` cuts it before anything is said.
        let app = app(b"a", None);
        let body = messages_body(json!({"stop_sequences": ["b", "aaa"], "max_tokens": 10}));
        let (status, text) = call(&app, post_to("/v1/messages", body)).await;
        assert_eq!(status, StatusCode::OK, "{text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["stop_reason"], "stop_sequence", "{text}");
        assert_eq!(v["stop_sequence"], "aaa");
        assert_eq!(v["content"], json!([]));
    }

    #[tokio::test]
    async fn the_playground_page_is_public_and_its_endpoint_streams_tokens_then_the_verdict() {
        let app = app(b"7}", Some("k"));
        let r = app
            .clone()
            .oneshot(Request::get("/").body(Body::empty()).unwrap())
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK, "the page needs no key");
        let csp = r.headers()[header::CONTENT_SECURITY_POLICY]
            .to_str()
            .unwrap();
        assert!(csp.starts_with("default-src 'self'"), "{csp}");
        // The endpoint needs the key like every other.
        let body = json!({"constraint": {"type": "json_schema", "schema": {"type": "object",
            "properties": {"n": {"type": "integer", "maximum": 99}}, "required": ["n"],
            "additionalProperties": false}}, "document": "n is 77", "max_tokens": 16});
        let (status, _) = call(&app, post_to("/v1/formwork/extract", body.to_string())).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
        let keyed = |b: &Value| {
            Request::post("/v1/formwork/extract")
                .header(header::CONTENT_TYPE, "application/json")
                .header(header::AUTHORIZATION, "Bearer k")
                .body(Body::from(b.to_string()))
                .unwrap()
        };
        let (status, text) = call(&app, keyed(&body)).await;
        assert_eq!(status, StatusCode::OK, "{text}");
        let events = named_events(&text);
        let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names.first(), Some(&"start"));
        assert_eq!(names.last(), Some(&"end"));
        let tokens: Vec<(String, bool)> = events
            .iter()
            .filter(|(n, _)| n == "tokens")
            .flat_map(|(_, v)| v["tokens"].as_array().unwrap().clone())
            .map(|t| (t["text"].as_str().unwrap().to_string(), t["forced"] == true))
            .collect();
        let written: String = tokens.iter().map(|(t, _)| t.as_str()).collect();
        assert_eq!(written, r#"{"n":77}"#);
        // The key is forced, the digits sampled, the closing brace forced by `maximum`.
        let forced: String = tokens
            .iter()
            .filter(|t| t.1)
            .map(|t| t.0.as_str())
            .collect();
        assert_eq!(forced, r#"{"n":}"#);
        let end = &events.last().unwrap().1;
        assert_eq!(end["status"], "ok", "{end}");
        assert_eq!(end["output"], json!({"n": 77}));
        assert_eq!(
            (end["tokens"].as_u64(), end["forced_tokens"].as_u64()),
            (Some(8), Some(6))
        );
        // A refused schema: a 400 with keyword and pointer.
        let bad = json!({"constraint": {"type": "json_schema", "schema": {"type": "array",
            "unevaluatedItems": false}}, "document": "d"});
        let (status, text) = call(&app, keyed(&bad)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
        let e: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(e["error"]["keyword"], "unevaluatedItems");
        assert_eq!(e["error"]["pointer"], "/unevaluatedItems");
        assert_eq!(e["error"]["param"], "constraint.schema");
    }
}
