//! The HTTP layer: routes, authentication, body limits and the request lifecycle.
//!
//! Owns the axum [`Router`](axum::Router): `POST /v1/chat/completions`, `POST /v1/messages` and
//! `POST /v1/messages/count_tokens` (Anthropic's, read and written by
//! [`anthropic`](crate::anthropic)), `POST /v1/responses` (OpenAI's
//! Responses, by [`responses`](crate::responses)), `GET /v1/models`, `GET /health`, and the
//! playground's `GET /` and `POST /v1/formwork/extract` (planned and judged by
//! [`playground`](crate::playground));
//! the key check (401 without it, when a key is set: `Authorization: Bearer <key>` or
//! Anthropic's `x-api-key: <key>`); the body limit (413); turning a checked request, from
//! either endpoint, into a job (grammar from the cache, prompt from the chat template) and the
//! job's events into a JSON response or Server-Sent Events (one driver, a `Wire` format
//! per API); errors in the endpoint's [`Dialect`](crate::error::Dialect); and one [`RequestLog`] per request, handed
//! to the caller's hook (the library prints nothing).
//!
//! # Files
//! `state` (the layer's options, shared state and the helpers every endpoint uses: ids,
//! body, errors, the log), `job` (the job lifecycle: a checked request queued as a job,
//! its events collected, the figures of its response), `wire` (the Server-Sent Events
//! wires, one per API, and the stream driver), `endpoints` (the API endpoints),
//! `extract` (the playground's page and `POST /v1/formwork/extract`), `router` (the
//! routes and the key check). Each may use only the files before it.
//!
//! Files: `state` → `job` → `wire` → `endpoints` → `extract` → `router`.
//!
//! May use: `error`, `request`, `cache`, `assemble`, `worker`, `anthropic`, `responses`,
//! `playground`.

mod endpoints;
mod extract;
mod job;
mod router;
mod state;
mod wire;

pub use job::DROPPED_HEADER;
pub use router::router;
pub use state::{Encoder, HttpConfig, RequestLog};

#[cfg(test)]
mod tests;
