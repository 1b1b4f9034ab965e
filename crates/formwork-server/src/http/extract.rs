//! The playground's endpoints: `GET /`, the page, and `POST /v1/formwork/extract`,
//! `formwork extract` over HTTP (planned and judged by the crate's `playground`), streamed
//! token by token with forced tokens marked.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use formwork_core::chat::{Role, Turn};
use formwork_core::generate::GenerateConfig;
use formwork_core::sampler::Sampling;
use serde_json::{json, Value};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

use crate::error::ApiError;
use crate::playground::{self, ExtractRequest, Figures, Refused};
use crate::worker::{Event, Job};

use super::job::token_budget;
use super::state::{engine_error, log_error, next_id, read_json, AppState, RequestLog, EXTRACT};
use super::wire::SseBody;

/// `GET /`: the playground page. Its Content-Security-Policy allows nothing from another
/// origin (no CDN: everything is in the page).
pub(super) async fn playground_page() -> Response {
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

/// `POST /v1/formwork/extract`: `formwork extract` over HTTP, streamed (see [`playground`](crate::playground)).
pub(super) async fn extract(
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
pub(super) struct ExtractJob {
    pub(super) plan: playground::Plan,
    pub(super) document: String,
    pub(super) rx: UnboundedReceiver<Event>,
    pub(super) prompt_tokens: usize,
    pub(super) cache_hit: bool,
}

/// Checks, plans and queues an extract request.
pub(super) async fn start_extract(
    state: &Arc<AppState>,
    body: Result<Bytes, BytesRejection>,
) -> Result<ExtractJob, Refused> {
    let value = read_json(state, body)?;
    let req = ExtractRequest::parse(&value)?;
    if let Some(m) = req.model.as_deref() {
        state.config.check_model(m)?;
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
        speculation: state.config.speculation,
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
        .submit_within(
            Job {
                prompt,
                grammar: Some(grammar),
                config,
                stop: Vec::new(),
                parallel_calls: false,
                tokens: true,
                think: None,
                events: tx,
            },
            state.config.queue_timeout,
        )
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
pub(super) fn extract_stream(
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
