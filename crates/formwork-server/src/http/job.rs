//! The job lifecycle shared by the chat endpoints: a checked request, from any API, queued
//! as a job (`start_job`: the model check, the grammar from the cache, the prompt from the
//! chat template, the budget), its events collected into a whole output (`collect`), and
//! the pieces of its response every API writes (ids, usage, the dropped-constraints header,
//! the log line).

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::{header, StatusCode};
use axum::response::Response;
use formwork_core::generate::{GenerateConfig, ThinkConfig};
use formwork_core::sampler::Sampling;
use serde_json::{json, Value};
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

use crate::assemble::Reading;
use crate::cache::Dropped;
use crate::error::ApiError;
use crate::request::{ChatRequest, Output};
use crate::worker::{Event, Job, JobEnd};

use super::state::{AppState, HttpConfig, RequestLog, CHAT};

/// The generation budget of a request with a `prompt_len`-token prompt: the requested
/// `max_tokens` (default: the cap), checked against the context window when it is known.
pub(super) fn token_budget(
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

/// A checked request, turned into a queued job.
pub(super) struct Started {
    pub(super) id: String,
    pub(super) endpoint: &'static str,
    pub(super) req: ChatRequest,
    pub(super) rx: UnboundedReceiver<Event>,
    pub(super) cache_hit: Option<bool>,
    /// Prompt tokens (known before the first generated one).
    pub(super) prompt_tokens: usize,
    /// What a lenient server did not enforce.
    pub(super) dropped: Vec<Dropped>,
    /// Whether the job reasons before its answer.
    pub(super) thinks: bool,
}

impl Started {
    /// `f` with this request's dropped constraints, for the extension field.
    pub(super) fn finished(&self, mut f: JobEnd) -> JobEnd {
        f.dropped_constraints = self.dropped.iter().map(Dropped::to_json).collect();
        f
    }
}

/// The header listing what a lenient server did not enforce (absent when nothing was
/// dropped): `param:keyword@pointer` items, comma-separated ([`Dropped::header_item`]).
pub const DROPPED_HEADER: &str = "formwork-dropped-constraints";

/// `response` with the [`DROPPED_HEADER`] when something was dropped.
pub(super) fn mark_dropped(mut response: Response, dropped: &[Dropped]) -> Response {
    if dropped.is_empty() {
        return response;
    }
    let items: Vec<String> = dropped.iter().map(Dropped::header_item).collect();
    if let Ok(value) = header::HeaderValue::from_str(&items.join(", ")) {
        response.headers_mut().insert(DROPPED_HEADER, value);
    }
    response
}

/// Queues a checked request, whichever endpoint it came from: the model check, the grammar
/// (from the cache), the prompt (the chat template), the budget, the job.
pub(super) async fn start_job(
    state: &Arc<AppState>,
    id: &str,
    endpoint: &'static str,
    req: ChatRequest,
) -> Result<Started, ApiError> {
    state.config.check_model(&req.model)?;
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
        speculation: state.config.speculation,
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
    state
        .queue
        .submit_within(job, state.config.queue_timeout)
        .map_err(ApiError::from)?;
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

pub(super) fn reading(output: &Output) -> Reading {
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
pub(super) fn call_id(id: &str) -> String {
    format!("call_{}", id.trim_start_matches("chatcmpl-"))
}

/// The `tool_use` block id of a Messages response.
pub(super) fn tool_id(id: &str) -> String {
    format!("toolu_{}", id.trim_start_matches("msg_"))
}

pub(super) fn usage(f: &JobEnd) -> Value {
    json!({"prompt_tokens": f.prompt_tokens, "completion_tokens": f.completion_tokens,
        "total_tokens": f.prompt_tokens + f.completion_tokens,
        "completion_tokens_details": {"reasoning_tokens": f.reasoning_tokens}})
}

/// The whole output of a job.
pub(super) struct Collected {
    pub(super) text: String,
    /// The reasoning before the answer (empty when the job did not reason).
    pub(super) reasoning: String,
    /// The time to the first piece (reasoning or text).
    pub(super) ttft: Option<Duration>,
    pub(super) finished: Result<JobEnd, String>,
}

/// Waits for the whole output of a job.
pub(super) async fn collect(rx: &mut UnboundedReceiver<Event>, start: Instant) -> Collected {
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
pub(super) fn log_done(
    state: &AppState,
    s: &Started,
    f: &JobEnd,
    ttft: Option<Duration>,
    start: Instant,
) {
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
