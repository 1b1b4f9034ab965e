//! The Server-Sent Events wires: one [`Wire`] per API (Chat Completions chunks, Anthropic
//! Messages events, OpenAI Responses events) and the driver that streams a job's events
//! through one (`stream_response`; a client that leaves cancels the generation).

use std::sync::Arc;
use std::time::Instant;

use axum::response::sse::{Event as SseEvent, Sse};
use serde_json::{json, Value};

use crate::anthropic;
use crate::assemble::Deltas;
use crate::error::ApiError;
use crate::responses;
use crate::worker::{Event, Finish, JobEnd};

use super::job::{usage, Started};
use super::state::{engine_error, AppState, RequestLog};

/// A streaming wire format: the SSE events of a job's start, its text and its end.
pub(super) trait Wire: Send + 'static {
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
    fn end(&mut self, result: Result<&JobEnd, &ApiError>) -> Vec<SseEvent>;
}

/// Chat Completions chunks.
pub(super) struct ChatWire {
    pub(super) id: String,
    pub(super) created: u64,
    pub(super) model: String,
    pub(super) deltas: Deltas,
    pub(super) include_usage: bool,
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

    fn end(&mut self, result: Result<&JobEnd, &ApiError>) -> Vec<SseEvent> {
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
pub(super) struct MessagesWire {
    pub(super) start: Option<anthropic::SseEvent>,
    pub(super) events: anthropic::Events,
}

/// A named SSE event (the Anthropic and Responses SDKs read the name).
pub(super) fn named<N: AsRef<str>>((name, data): (N, Value)) -> SseEvent {
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

    fn end(&mut self, result: Result<&JobEnd, &ApiError>) -> Vec<SseEvent> {
        match result {
            Ok(f) => self.events.finish(f).into_iter().map(named).collect(),
            Err(e) => vec![named(("error", e.anthropic_body()))],
        }
    }
}

/// OpenAI Responses events.
pub(super) struct ResponsesWire(pub(super) responses::Events);

impl Wire for ResponsesWire {
    fn begin(&mut self) -> Vec<SseEvent> {
        self.0.start().into_iter().map(named).collect()
    }

    fn text(&mut self, text: &str) -> Vec<SseEvent> {
        self.0.push(text).into_iter().map(named).collect()
    }

    fn end(&mut self, result: Result<&JobEnd, &ApiError>) -> Vec<SseEvent> {
        match result {
            Ok(f) => self.0.finish(f).into_iter().map(named).collect(),
            Err(e) => self.0.error(e).into_iter().map(named).collect(),
        }
    }
}

pub(super) type SseBody =
    Sse<tokio_stream::wrappers::ReceiverStream<Result<SseEvent, std::convert::Infallible>>>;

/// Streams a job's events through `wire`; a client that leaves cancels the generation.
pub(super) fn stream_response(
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
