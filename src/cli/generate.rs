//! `formwork generate`: plain (unconstrained) text generation with a local model, streamed to
//! stdout.
//!
//! Glue only: resolves `--model` through the registry (fetching on first use) or as a path,
//! builds the tokenizer, runtime and sampler from the flags, applies the chat template, and
//! prints tokens as they come.

use std::io::{Read, Write};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{bail, Context};

use crate::model::chat::ChatTemplate;
use crate::model::fetch::{self, FetchConfig};
use crate::model::registry::{self, ModelSpec, Registry};
use crate::model::runtime::init_threads;
use crate::model::textgen::{TextGeneration, Utf8Stream};
use crate::model::tokenizer::GgufTokenizer;
use crate::model::{Model, ModelConfig};
use crate::sampler::{Sampler, Sampling};
use crate::toktrie::{TokenId, Vocab};

/// Arguments of `formwork generate`.
#[derive(Debug, clap::Args)]
pub struct GenerateArgs {
    /// The prompt. Read from stdin when absent.
    pub prompt: Option<String>,

    /// A registry model name (fetched on first use) or a path to a .gguf file. Default: the
    /// registry's default model.
    #[arg(long, short = 'm')]
    pub model: Option<String>,

    /// Feed the prompt as-is, without the model's chat template.
    #[arg(long)]
    pub raw: bool,

    /// The system prompt. Default: the one the model's own template uses, if any.
    #[arg(long)]
    pub system: Option<String>,

    /// Stop after this many generated tokens.
    #[arg(long, default_value_t = 256)]
    pub max_tokens: usize,

    /// Sampling temperature; 0 is greedy (the default).
    #[arg(long, default_value_t = 0.0)]
    pub temperature: f64,

    /// Sample only among the k most likely tokens (with --temperature > 0).
    #[arg(long)]
    pub top_k: Option<usize>,

    /// Sample only from the smallest set of tokens whose probability reaches p (with
    /// --temperature > 0).
    #[arg(long)]
    pub top_p: Option<f64>,

    /// Seed of the sampler's random generator (runs are reproducible).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,

    /// Compute threads. Default: the number of physical cores.
    #[arg(long)]
    pub threads: Option<usize>,

    /// Print load time and speed to stderr.
    #[arg(long, short = 'v')]
    pub verbose: bool,
}

/// Runs `formwork generate`.
pub fn run(args: GenerateArgs) -> anyhow::Result<ExitCode> {
    let prompt = match args.prompt {
        Some(p) => p,
        None => {
            let mut s = String::new();
            std::io::stdin()
                .read_to_string(&mut s)
                .context("cannot read the prompt from stdin")?;
            s
        }
    };
    if prompt.trim().is_empty() {
        bail!("empty prompt: pass a prompt argument or pipe one on stdin");
    }
    let sampling = Sampling::from_params(Some(args.temperature), args.top_k, args.top_p);
    let sampler = Sampler::new(sampling, args.seed)?;
    let threads = init_threads(args.threads);

    let registry = Registry::builtin()?;
    let (path, entry) = match registry.resolve(args.model.as_deref())? {
        ModelSpec::Known(entry) => (fetch::ensure(&entry, &FetchConfig::new())?, Some(entry)),
        ModelSpec::Local { gguf, .. } => (gguf, None),
    };
    let start = Instant::now();
    let mut model = Model::load_with(&path, &ModelConfig::new())?;
    let tokenizer = match &entry {
        Some(e) => GgufTokenizer::for_model(e, &path)?,
        None => GgufTokenizer::from_gguf_file(&path)?,
    };
    let template = match &entry {
        Some(e) => match e.chat_template {
            registry::ChatTemplate::Chatml => Some(ChatTemplate::ChatMl {
                default_system: e.default_system_prompt.clone(),
            }),
            registry::ChatTemplate::Gemma => Some(ChatTemplate::Gemma),
            registry::ChatTemplate::Raw => None,
        },
        None => Some(ChatTemplate::for_model(
            model.architecture(),
            model.token_info(),
        )),
    };
    let template = if args.raw { None } else { template };

    let mut ids: Vec<u32> = Vec::new();
    if tokenizer.add_bos() {
        ids.extend(tokenizer.bos_token().map(|t| t.0));
    }
    match &template {
        Some(t) => {
            let pieces = t.render(args.system.as_deref(), &prompt);
            ids.extend(ChatTemplate::encode(
                &pieces,
                &model.token_info().special,
                &tokenizer,
            )?);
        }
        None => ids.extend(
            tokenizer
                .tokenize(prompt.as_bytes())
                .into_iter()
                .map(|t| t.0),
        ),
    }
    let mut stop: Vec<TokenId> = tokenizer.eos_tokens().to_vec();
    if let Some(t) = &template {
        stop.extend(t.stop_ids(model.token_info()));
    }
    if args.verbose {
        eprintln!(
            "loaded {} ({}, {} requantized) in {:.2}s, {} threads, prompt {} tokens",
            path.display(),
            model.architecture(),
            model.load_stats().requantized,
            start.elapsed().as_secs_f64(),
            threads,
            ids.len()
        );
    }

    let prompt_len = ids.len();
    let gen_start = Instant::now();
    let mut first_token_at = None;
    let mut generation = TextGeneration::new(&mut model, ids, sampler, stop, args.max_tokens);
    let mut text = Utf8Stream::new();
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    while let Some(token) = generation.next_token()? {
        first_token_at.get_or_insert_with(Instant::now);
        out.write_all(text.push(tokenizer.token_bytes(token)).as_bytes())?;
        out.flush()?;
    }
    writeln!(out, "{}", text.finish())?;
    out.flush()?;
    if args.verbose {
        let produced = generation.produced();
        let prefill = first_token_at.map_or(0.0, |t| (t - gen_start).as_secs_f64());
        let decode = first_token_at.map_or(0.0, |t| t.elapsed().as_secs_f64());
        eprintln!(
            "prefill {prompt_len} tokens in {prefill:.2}s ({:.1} tok/s); decode {} tokens in {decode:.2}s ({:.1} tok/s); stop: {:?}",
            prompt_len as f64 / prefill.max(1e-9),
            produced.saturating_sub(1),
            produced.saturating_sub(1) as f64 / decode.max(1e-9),
            generation.stop_reason()
        );
    }
    Ok(ExitCode::SUCCESS)
}
