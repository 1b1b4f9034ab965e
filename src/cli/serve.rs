//! `formwork serve`: the OpenAI- and Anthropic-compatible local server (see the
//! `formwork-server` crate).
//!
//! Glue only: loads `--model` ([`Loaded::load`]), wraps its chat template as the server's
//! conversation encoder, and prints one line per request on stderr.

use std::process::ExitCode;
use std::sync::Arc;

use super::fetch_config;
use crate::model::runtime::init_threads;
use crate::model::{Loaded, ModelConfig};

/// Arguments of `formwork serve`.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// A registry model name (fetched on first use) or a path to a .gguf file. Default: the
    /// registry's default model. Clients name it in `model`; `GET /v1/models` lists it.
    #[arg(long, short = 'm')]
    pub model: Option<String>,

    /// Address to bind. The default is loopback only.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,

    /// Port to listen on (0: a free one, printed on stderr).
    #[arg(long, default_value_t = 8080)]
    pub port: u16,

    /// Require `Authorization: Bearer KEY` on every request. Default: `$FORMWORK_API_KEY`,
    /// if set and not empty.
    #[arg(long, value_name = "KEY")]
    pub api_key: Option<String>,

    /// Requests that may wait behind the one decoding; more get HTTP 503.
    #[arg(long, default_value_t = 8)]
    pub queue: usize,

    /// Largest `max_tokens` a request may ask for (also the default budget).
    #[arg(long, default_value_t = 2048)]
    pub max_tokens_cap: usize,

    /// Let `json_schema` requests refuse by default: the model may answer
    /// `{"refusal": "<reason>"}`, returned as `content: null` and `refusal`. A request's
    /// `"formwork": {"allow_refusal": bool}` overrides this either way.
    #[arg(long)]
    pub allow_refusal: bool,

    /// Drop the schema keywords the engine cannot enforce instead of refusing the request
    /// (HTTP 400, the default). Every response then lists what it did not enforce: the
    /// `formwork.dropped_constraints` field and the `formwork-dropped-constraints` header.
    #[arg(long)]
    pub lenient: bool,

    /// Compute threads. Default: the number of physical cores.
    #[arg(long)]
    pub threads: Option<usize>,
}

/// The name clients use for the model: the registry name, or a file's stem.
fn served_name(arg: Option<&str>) -> anyhow::Result<String> {
    let registry = crate::model::registry::Registry::builtin()?;
    Ok(match arg {
        None => registry.default_model()?.name.clone(),
        Some(a) => std::path::Path::new(a)
            .file_stem()
            .filter(|_| a.ends_with(".gguf"))
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| a.to_string()),
    })
}

/// Runs `formwork serve` until Ctrl-C.
pub fn run(args: ServeArgs) -> anyhow::Result<ExitCode> {
    let name = served_name(args.model.as_deref())?;
    let threads = init_threads(args.threads);
    let loaded = Loaded::load(args.model.as_deref(), &fetch_config(), &ModelConfig::new())?;
    eprintln!(
        "formwork: loaded {} in {:.2}s, {threads} threads",
        loaded.path.display(),
        loaded.load_time.as_secs_f64()
    );
    let Loaded {
        model,
        tokenizer,
        template,
        stop,
        ..
    } = loaded;
    let context_len = model.context_len();
    let encode_tok = tokenizer.clone();
    let encode: formwork_server::Encoder = Arc::new(move |turns| {
        template
            .encode_turns(&encode_tok, turns)
            .map(|ids| ids.into_iter().map(|t| t.0).collect())
            .map_err(|e| e.to_string())
    });
    let backend = formwork_server::Backend {
        source: model,
        vocab: tokenizer,
        stop,
    };
    let mut config = formwork_server::ServerConfig::new(name.clone());
    config.host = args.host;
    config.port = args.port;
    config.queue = args.queue;
    config.lenient = args.lenient;
    config.http.context_len = Some(context_len);
    config.http.api_key = args
        .api_key
        .or_else(|| std::env::var("FORMWORK_API_KEY").ok())
        .filter(|k| !k.is_empty());
    config.http.max_tokens_cap = args.max_tokens_cap;
    config.http.refusals = args.allow_refusal;
    config.http.log = Arc::new(|r| {
        let ms = |d: std::time::Duration| format!("{:.1}", d.as_secs_f64() * 1e3);
        eprintln!(
            "{} {} {} prompt={} completion={} ttft_ms={} total_ms={} cache={}",
            r.id,
            r.endpoint,
            r.status,
            r.prompt_tokens,
            r.completion_tokens,
            r.ttft.map(ms).unwrap_or_else(|| "-".into()),
            ms(r.total),
            match r.cache_hit {
                Some(true) => "hit",
                Some(false) => "miss",
                None => "-",
            }
        );
    });
    formwork_server::run_with(backend, encode, config, |addr| {
        eprintln!("formwork: serving {name} on http://{addr}/v1");
    })?;
    Ok(ExitCode::SUCCESS)
}
