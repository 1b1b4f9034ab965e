//! `formwork serve`: an OpenAI- and Anthropic-compatible local HTTP server over the constrained
//! decoder, so the official SDKs, unchanged but for `base_url`, get schema-valid output from a
//! local model.
//!
//! # Key types
//! - [`ServerConfig`]: address, API key, queue and budget limits, the log hook.
//! - [`Backend`]: the model as the engine sees it (any [`BatchLogitsSource`], its vocabulary,
//!   its stop tokens) plus an [`Encoder`] from a conversation to prompt ids.
//! - [`ApiError`]: every failure as an HTTP status and an error body in the endpoint's
//!   dialect (OpenAI's or Anthropic's).
//!
//! # Pipeline (one request)
//! ```text
//! body ─► request::ChatRequest (checked; 4xx naming the field; anthropic::parse builds the
//!         same request from a Messages body, responses::parse from a Responses body)
//!      ─► cache::ConstraintCache (schema / tools → Arc<CompiledGrammar>, LRU; 400 if unenforceable)
//!      ─► Encoder (chat template, special tokens as ids)
//!      ─► worker::Queue (bounded; 503 when full) ─► one decode thread owning the model,
//!         decoding up to `parallel` jobs together (BatchGenerator)
//!      ─► assemble (answer / streamed pieces) ─► the endpoint's wire format, one RequestLog
//! ```
//! Each module may use only the modules before it (checked by the root package's `layering`
//! test):
//!
//! Layers: `error` → `request` → `cache` → `assemble` → `worker` → `anthropic` → `responses`
//! → `playground` → `http`.
//!
//! Up to [`ServerConfig::parallel`] requests decode together, one batched forward pass per
//! token for all of them (continuous batching: a request joins at the next step with room and
//! leaves as soon as it ends); more wait in the bounded queue. Each request's output is the
//! one it would get alone (the batched logits equal the single-sequence ones). A client that
//! disconnects has its generation cancelled, and its KV cache freed, before the next pass.
//!
//! # Endpoints
//! `POST /v1/chat/completions` (messages, `response_format` text / json_object /
//! json_schema, function `tools` + `tool_choice` (`none`, `auto`, `required`, a function,
//! `allowed_tools`), `parallel_tool_calls` (default `true`: one or more calls, one per line
//! under the grammar, each valid under its tool's schema; `false`: exactly one), `stream`),
//! `POST /v1/messages` (Anthropic
//! Messages: `system`, content blocks with `tool_use` / `tool_result`, `tools` with
//! `input_schema`, `tool_choice` auto / any / tool / none (parallel calls unless
//! `disable_parallel_tool_use`), `output_config.format`,
//! `stop_sequences`, `stream`; errors in Anthropic's shape), `POST /v1/messages/count_tokens`,
//! `POST /v1/responses` (OpenAI
//! Responses: `input` string or items with `function_call` / `function_call_output`,
//! `instructions`, `text.format`, function `tools`, `tool_choice`, `max_output_tokens`,
//! `stream`), `GET /v1/models`, `GET /health`.
//!
//! The playground: `GET /` is one self-contained page (HTML, CSS and script embedded in the
//! binary, nothing fetched from elsewhere) that runs `POST /v1/formwork/extract`, which is
//! `formwork extract` over HTTP (schema with grounded fields, JSON, regex, GBNF or tools, and
//! a document), streamed token by token with forced tokens marked apart from sampled ones,
//! ending with the validator's verdict and the grounded quotes ([`playground`]). The page is
//! served without a key; the endpoint needs one like the others.
//! Responses (and the last event of a stream: the final chunk, `message_delta`,
//! `response.completed`) carry an extension object `formwork: {"closed_early": bool,
//! "duplicate_call_dropped": bool, "dropped_constraints": [...]}`. `closed_early` is `true` when a valid output was closed
//! early to fit the token budget (its `finish_reason` is `stop`).
//!
//! Repeated tool calls: with parallel calls allowed, a call identical to an earlier call of
//! the same message (same name, same arguments, written the same way: the grammar writes
//! compact JSON) ends the list. Generation stops there, the repeat is dropped (a stream never
//! sends any of it), the answer is the calls before it (`finish_reason: tool_calls`) and
//! `duplicate_call_dropped` is `true`. Small models otherwise repeat one call until the budget
//! runs out, and a client that runs every call would run it again for nothing.
//!
//! Lenient mode: a schema or tool set with a keyword the engine cannot enforce is a 400 naming
//! the keyword and its JSON pointer, unless the operator started the server with `--lenient`
//! ([`ServerConfig::lenient`]). Then the keyword is dropped (everything else still enforced)
//! and every response lists what was dropped: `formwork.dropped_constraints` (`[{"param":
//! "response_format" | "tools.<name>", "keyword", "pointer"}]`, empty when nothing was) and,
//! when something was, the header `formwork-dropped-constraints:
//! param:keyword@pointer, …` (non-ASCII percent-encoded).
//!
//! `GET /health` answers `{"status": "ok", "running": n, "queued": m}`: requests decoding and
//! waiting. Requests may
//! carry `formwork: {"allow_refusal": true}` (the SDKs' `extra_body`): a `json_schema` answer
//! may then be a refusal, returned as `content: null` and `refusal: "<reason>"` (the server
//! flag `--allow-refusal` makes that the default).
//!
//! # Usage
//! A request as the server sees it, without a socket: the body parsed and checked, then its
//! schema compiled through the grammar cache (a hit the second time); an unenforceable schema
//! is a 400 naming the keyword and its JSON pointer.
//! ```
//! use std::sync::Arc;
//! use formwork_core::toktrie::{SyntheticVocab, TokEnv};
//! use formwork_server::cache::{ConstraintCache, Lookup};
//! use formwork_server::request::ChatRequest;
//! use serde_json::json;
//!
//! let body = |schema| json!({
//!     "model": "fake",
//!     "messages": [{"role": "user", "content": "I finished 5 of 12 lessons."}],
//!     "response_format": {"type": "json_schema", "json_schema": {"name": "p", "schema": schema}}
//! });
//! let cache = ConstraintCache::new(TokEnv::new(Arc::new(SyntheticVocab::byte_level())), 64);
//! let request = ChatRequest::parse(&body(json!({"type": "integer"})), 2048)?;
//! assert_eq!(cache.get(&request.output)?.unwrap().lookup, Lookup::Compiled);
//! assert_eq!(cache.get(&request.output)?.unwrap().lookup, Lookup::Hit);
//! let refused = json!({"type": "object", "unevaluatedProperties": false});
//! let err = cache.get(&ChatRequest::parse(&body(refused), 2048)?.output).unwrap_err();
//! assert_eq!(err.status.as_u16(), 400);
//! assert!(err.message.contains("unevaluatedProperties"), "{}", err.message);
//! # Ok::<(), formwork_server::ApiError>(())
//! ```
//! Serving (blocks until Ctrl-C, so not run here):
//! ```no_run
//! use std::sync::Arc;
//! use formwork_core::generate::testing::FixedLogits;
//! use formwork_core::toktrie::{SyntheticVocab, TokenId};
//! use formwork_server::{Backend, ServerConfig};
//!
//! let vocab = Arc::new(SyntheticVocab::byte_level());
//! let backend = Backend {
//!     source: FixedLogits::preferring(257, [u32::from(b'{'), u32::from(b'}')]),
//!     vocab,
//!     stop: vec![TokenId(256)],
//! };
//! let encode = Arc::new(|turns: &[formwork_core::chat::Turn]| {
//!     Ok(turns.iter().flat_map(|t| t.content.bytes().map(u32::from)).collect())
//! });
//! formwork_server::run(backend, encode, ServerConfig::new("fake"))?;
//! # Ok::<(), formwork_server::ServerError>(())
//! ```

#![deny(missing_docs)]
#![warn(missing_debug_implementations)]

pub mod anthropic;
pub mod assemble;
pub mod cache;
pub mod error;
pub mod http;
pub mod playground;
pub mod request;
pub mod responses;
pub mod worker;

use std::net::SocketAddr;
use std::sync::Arc;

use formwork_core::generate::batch::BatchLogitsSource;
use formwork_core::toktrie::TokEnv;

pub use error::ApiError;
pub use http::{Encoder, HttpConfig, RequestLog};
pub use worker::Backend;

/// Options of [`run`]. Plain data with by-value setters; defaults in [`ServerConfig::new`].
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// Address to bind. Default `127.0.0.1` (loopback only: exposing a model is the operator's
    /// explicit choice).
    pub host: String,
    /// Port. Default 8080; 0 picks a free one (printed through `on_listen`).
    pub port: u16,
    /// Jobs decoded together (continuous batching: a job joins the batch at the next step
    /// with room and leaves when it ends); that many KV caches are alive at once. Default 4;
    /// `formwork serve` chooses it from the model and the cores (`--parallel`). A model that
    /// cannot batch needs 1 ([`worker::OneAtATime`]).
    pub parallel: usize,
    /// Jobs that may wait behind the ones decoding. Default 8.
    pub queue: usize,
    /// Chunked prefill: while requests decode, a forward pass feeds at most this many tokens
    /// of new prompts beside their steps, so a long prompt does not freeze running streams
    /// (`None`: prompts whole). Default [`DEFAULT_PREFILL_CHUNK`].
    pub prefill_chunk: Option<usize>,
    /// Compiled grammars kept. Default 64.
    pub cache_size: usize,
    /// Drop the schema keywords the engine cannot enforce instead of refusing the request
    /// (`formwork serve --lenient`). Default `false`: fail closed. Every response then lists
    /// what it did not enforce.
    pub lenient: bool,
    /// HTTP options (model name, key, budget cap, body limit, log hook).
    pub http: HttpConfig,
}

/// The default prefill chunk, in tokens: on a 2-core CPU a pass of this many prompt tokens
/// beside the running streams' steps takes a few decode steps' time, so a stream's longest gap
/// stays a small multiple of its usual one while a long prompt is prefilled.
pub const DEFAULT_PREFILL_CHUNK: usize = 8;

impl ServerConfig {
    /// Defaults, serving the model named `model_name`: loopback:8080, no key, 4 in parallel,
    /// queue 256 (each waiting request holds its body, at most `body_limit`), a 300 s queue
    /// timeout, cache
    /// 64, `max_tokens` cap 2048, 1 MiB bodies, no logging.
    pub fn new(model_name: impl Into<String>) -> Self {
        ServerConfig {
            host: "127.0.0.1".into(),
            port: 8080,
            parallel: 4,
            queue: 256,
            prefill_chunk: Some(DEFAULT_PREFILL_CHUNK),
            cache_size: 64,
            lenient: false,
            http: HttpConfig {
                model_name: model_name.into(),
                served_names: Vec::new(),
                queue_timeout: Some(std::time::Duration::from_secs(300)),
                strict_model_name: false,
                api_key: None,
                max_tokens_cap: 2048,
                context_len: None,
                refusals: false,
                body_limit: 1 << 20,
                think: 0,
                think_trigger: formwork_extract::prompt::DEFAULT_THINK_TRIGGER.into(),
                speculation: formwork_core::generate::Speculation::default(),
                log: Arc::new(|_| {}),
            },
        }
    }
}

/// Why the server could not run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    /// Binding the address or serving failed.
    #[error("cannot serve on {addr}")]
    Io {
        /// The address.
        addr: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
}

/// Serves `backend` until Ctrl-C. Blocks; starts its own tokio runtime and the decode thread.
/// `on_listen` is not needed to learn the address when the port is fixed; with port 0 use
/// [`run_with`].
///
/// # Errors
/// [`ServerError::Io`] when the address cannot be bound.
pub fn run<S: BatchLogitsSource + Send + 'static>(
    backend: Backend<S>,
    encode: Encoder,
    config: ServerConfig,
) -> Result<(), ServerError> {
    run_with(backend, encode, config, |_| {})
}

/// [`run`], calling `on_listen` with the bound address once the server accepts connections.
///
/// # Errors
/// [`ServerError::Io`] when the address cannot be bound.
pub fn run_with<S: BatchLogitsSource + Send + 'static>(
    backend: Backend<S>,
    encode: Encoder,
    config: ServerConfig,
    on_listen: impl FnOnce(SocketAddr),
) -> Result<(), ServerError> {
    let addr = format!("{}:{}", config.host, config.port);
    let io = |source| ServerError::Io {
        addr: addr.clone(),
        source,
    };
    let cache = cache::ConstraintCache::new(TokEnv::new(backend.vocab.clone()), config.cache_size)
        .lenient(config.lenient);
    let (queue, _worker) =
        worker::spawn_with(backend, config.queue, config.parallel, config.prefill_chunk)
            .map_err(io)?;
    let app = http::router(config.http, cache, queue, encode);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(io)?;
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(&addr).await.map_err(io)?;
        on_listen(listener.local_addr().map_err(io)?);
        axum::serve(listener, app)
            .with_graceful_shutdown(async {
                let _ = tokio::signal::ctrl_c().await;
            })
            .await
            .map_err(io)
    })
}
