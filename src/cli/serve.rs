//! `formwork serve`: the OpenAI- and Anthropic-compatible local server (see the
//! `formwork-server` crate).
//!
//! Glue only: loads `--model` ([`Loaded::load`]), wraps its chat template as the server's
//! conversation encoder, chooses how many requests decode together (`parallel_for`), and
//! prints one line per request on stderr.

use std::process::ExitCode;
use std::sync::Arc;

use super::common::{kv_bytes_per_position, mem_available, ModelArg, SpeculateArg, ThreadsArg};
use super::fetch_config;
use crate::model::runtime::init_threads;
use crate::model::{Loaded, ModelConfig};

/// Arguments of `formwork serve`.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// --model (clients name it in `model`; `GET /v1/models` lists it).
    #[command(flatten)]
    pub model: ModelArg,

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

    /// Requests decoded together (continuous batching: one forward pass per token for all of
    /// them; each output is the one it would get alone). Default: 4 per compute thread, at
    /// most 16, and no more than fit in half the available memory with a KV cache of the
    /// model's full context each; 1 for a model whose runtime cannot batch (candle).
    #[arg(long, value_name = "N")]
    pub parallel: Option<usize>,

    /// Another name the model answers to, listed by `GET /v1/models` (repeatable). Without
    /// `--strict-model-name` every name is answered anyway: this is for clients that pick a
    /// model from the list.
    #[arg(long = "served-model-name", value_name = "NAME")]
    pub served_model_names: Vec<String>,

    /// Answer only requests naming the model (its registry name or file stem) or a
    /// `--served-model-name`; others get HTTP 404 `model_not_found`. By default any name is
    /// answered by the one model served, so client code written for OpenAI or Anthropic
    /// (`gpt-4o-mini`, a Claude model) runs unchanged.
    #[arg(long)]
    pub strict_model_name: bool,

    /// Chunked prefill: while requests are decoding, feed at most N tokens of new prompts per
    /// forward pass beside their steps, so that a long prompt does not freeze the running
    /// streams (it is prefilled over several passes instead). 0: feed each prompt whole.
    #[arg(long, value_name = "N", default_value_t = formwork_server::DEFAULT_PREFILL_CHUNK)]
    pub prefill_chunk: usize,

    /// Requests that may wait behind the ones decoding; more get HTTP 503 with `Retry-After`.
    /// The default holds a burst of 64 clients and more on a 2-core machine; each waiting
    /// request holds its body (at most 1 MiB) and its compiled grammar.
    #[arg(long, default_value_t = 256)]
    pub queue: usize,

    /// Seconds a request may wait for a decoding slot, estimated when it arrives from the
    /// requests ahead of it and the recent time per request: a longer wait is answered at once
    /// with HTTP 503 and `Retry-After` instead of holding the client. 0: no limit. The default
    /// is under the OpenAI and Anthropic SDKs' 600 s request timeout.
    #[arg(long, value_name = "SECS", default_value_t = 300)]
    pub queue_timeout: u64,

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

    /// --threads.
    #[command(flatten)]
    pub threads: ThreadsArg,

    /// Think, then answer, by default: a constrained Chat Completions answer is preceded by
    /// up to N tokens of free reasoning, returned in `message.reasoning_content` (streamed:
    /// `delta.reasoning_content`), never in the content. A request's
    /// `"formwork": {"think": N}` overrides it (0: off). At most --max-tokens-cap.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub think: usize,

    /// The text that ends the reasoning: the model is told to write it before its answer,
    /// and it is appended when the budget or the end of its turn comes first (`</think>` for
    /// a chat template that opens a `<think>` block).
    #[arg(long, value_name = "TEXT", default_value = crate::extract::prompt::DEFAULT_THINK_TRIGGER)]
    pub think_trigger: String,
    /// --no-speculate.
    #[command(flatten)]
    pub speculate: SpeculateArg,
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
    // Checked before the model loads: a request asking for more is a 400, so is the default.
    if args.think > args.max_tokens_cap {
        anyhow::bail!(
            "--think {} is over --max-tokens-cap {}: a request could not ask for it either",
            args.think,
            args.max_tokens_cap
        );
    }
    if args.think_trigger.is_empty() {
        anyhow::bail!("--think-trigger is empty: the reasoning would have no end to write");
    }
    let name = served_name(args.model.model.as_deref())?;
    let threads = init_threads(args.threads.threads);
    let loaded = Loaded::load(
        args.model.model.as_deref(),
        &fetch_config(),
        &ModelConfig::new(),
    )?;
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
    let mut model = model;
    let per_position = kv_bytes_per_position(&mut model);
    let parallel = parallel_for(
        args.parallel,
        threads,
        per_position,
        context_len,
        mem_available(),
    );
    eprintln!("formwork: decoding up to {parallel} requests together");
    let encode_tok = tokenizer.clone();
    let encode: formwork_server::Encoder = Arc::new(move |turns| {
        template
            .encode_turns(&encode_tok, turns)
            .map(|ids| ids.into_iter().map(|t| t.0).collect())
            .map_err(|e| e.to_string())
    });
    let mut config = formwork_server::ServerConfig::new(name.clone());
    config.parallel = parallel;
    config.host = args.host;
    config.port = args.port;
    config.queue = args.queue;
    config.prefill_chunk = (args.prefill_chunk > 0).then_some(args.prefill_chunk);
    config.lenient = args.lenient;
    config.http.context_len = Some(context_len);
    config.http.api_key = args
        .api_key
        .or_else(|| std::env::var("FORMWORK_API_KEY").ok())
        .filter(|k| !k.is_empty());
    config.http.served_names = args.served_model_names;
    config.http.strict_model_name = args.strict_model_name;
    config.http.queue_timeout =
        (args.queue_timeout > 0).then(|| std::time::Duration::from_secs(args.queue_timeout));
    config.http.max_tokens_cap = args.max_tokens_cap;
    config.http.refusals = args.allow_refusal;
    config.http.think = args.think;
    config.http.think_trigger = args.think_trigger;
    config.http.speculation = args.speculate.speculation();
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
    let on_listen = |addr| eprintln!("formwork: serving {name} on http://{addr}/v1");
    if per_position.is_some() {
        let backend = formwork_server::Backend {
            source: model,
            vocab: tokenizer,
            stop,
        };
        formwork_server::run_with(backend, encode, config, on_listen)?;
    } else {
        // The runtime cannot batch: one sequence at a time through its single cache.
        let backend = formwork_server::Backend {
            source: formwork_server::worker::OneAtATime(model),
            vocab: tokenizer,
            stop,
        };
        formwork_server::run_with(backend, encode, config, on_listen)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Requests in flight: `--parallel` if given (at least 1); else 1 when the model cannot
/// batch (`per_position` is `None`), otherwise 4 per compute thread, at most 16 (decode on
/// CPU reads the weights once per pass for the whole batch, and the gain flattens past 8 on 2
/// threads: docs/inference.md), lowered so that that many KV caches of the model's whole
/// context (`context_len` positions × `per_position` bytes) fit in half of `available` bytes
/// (the rest is left for everything else), and at least 1.
fn parallel_for(
    flag: Option<usize>,
    threads: usize,
    per_position: Option<usize>,
    context_len: usize,
    available: Option<usize>,
) -> usize {
    if let Some(n) = flag {
        return n.max(1);
    }
    let Some(per_position) = per_position else {
        return 1;
    };
    let by_cores = (4 * threads).clamp(1, 16);
    let per_sequence = per_position.saturating_mul(context_len).max(1);
    let by_memory = available.map_or(usize::MAX, |bytes| bytes / 2 / per_sequence);
    by_cores.min(by_memory).max(1)
}

#[cfg(test)]
mod tests {
    use super::parallel_for;

    #[test]
    fn default_parallel_follows_cores_memory_and_batching() {
        let gib = 1 << 30;
        // 4 per thread, at most 16.
        assert_eq!(parallel_for(None, 1, Some(1024), 2048, Some(64 * gib)), 4);
        assert_eq!(parallel_for(None, 2, Some(1024), 2048, Some(64 * gib)), 8);
        assert_eq!(parallel_for(None, 8, Some(1024), 2048, Some(64 * gib)), 16);
        // 1 MiB per position × 1024 positions = 1 GiB per sequence; half of 5 GiB holds 2.
        assert_eq!(parallel_for(None, 2, Some(1 << 20), 1024, Some(5 * gib)), 2);
        assert_eq!(parallel_for(None, 2, Some(1 << 20), 1024, Some(gib)), 1);
        assert_eq!(parallel_for(None, 2, Some(1 << 20), 1024, None), 8);
        // A runtime that cannot batch, and the flag.
        assert_eq!(parallel_for(None, 8, None, 2048, Some(64 * gib)), 1);
        assert_eq!(parallel_for(Some(3), 8, None, 2048, None), 3);
        assert_eq!(parallel_for(Some(0), 8, Some(1), 1, None), 1);
    }
}
