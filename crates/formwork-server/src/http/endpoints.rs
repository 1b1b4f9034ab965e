//! The API endpoints: `POST /v1/chat/completions`, `POST /v1/messages` and
//! `POST /v1/messages/count_tokens` (Anthropic's), `POST /v1/responses` (OpenAI's
//! Responses), `GET /v1/models` and `GET /health`. Each reads its API's body, queues the job
//! (`job`) and answers in its API's shape, whole or streamed (`wire`).

use std::sync::Arc;
use std::time::Instant;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use crate::anthropic;
use crate::assemble::{message, Deltas};
use crate::error::{ApiError, Dialect};
use crate::request::ChatRequest;
use crate::responses;
use crate::worker::Finish;

use super::job::{
    call_id, collect, log_done, mark_dropped, reading, start_job, tool_id, usage, Collected,
    Started,
};
use super::state::{
    engine_error, log_error, next_id, read_json, unix_now, AppState, RequestLog, CHAT,
    COUNT_TOKENS, MESSAGES, RESPONSES,
};
use super::wire::{stream_response, ChatWire, MessagesWire, ResponsesWire};

/// `GET /health`: up, and how busy (`running`: requests decoding, `queued`: waiting).
pub(super) async fn health(State(state): State<Arc<AppState>>) -> Json<Value> {
    let load = state.queue.load();
    Json(json!({"status": "ok", "running": load.running, "queued": load.waiting}))
}

pub(super) async fn models(State(state): State<Arc<AppState>>) -> Json<Value> {
    let data: Vec<Value> = state
        .config
        .names()
        .map(|id| json!({"id": id, "object": "model", "created": state.started, "owned_by": "formwork"}))
        .collect();
    Json(json!({"object": "list", "data": data}))
}

pub(super) async fn chat_completions(
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
pub(super) async fn messages(
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
pub(super) async fn count_tokens(
    State(state): State<Arc<AppState>>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let start = Instant::now();
    let id = next_id(&state, "count_");
    let counted = async {
        let value = read_json(&state, body)?;
        let req = anthropic::parse_count(&value, state.config.max_tokens_cap)?;
        state.config.check_model(&req.model)?;
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
pub(super) async fn responses_create(
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

pub(super) async fn complete_response(
    state: Arc<AppState>,
    mut s: Started,
    start: Instant,
) -> Response {
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
