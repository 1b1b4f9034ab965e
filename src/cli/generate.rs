//! `formwork generate`: plain (unconstrained) text generation with a local model, streamed to
//! stdout.
//!
//! Glue only: loads `--model` ([`Loaded::load`]: registry name fetched on first use, or a
//! path), builds the sampler from the flags, applies the chat template, and prints tokens as
//! they come.

use std::io::{Read, Write};
use std::process::ExitCode;

use anyhow::{bail, Context};

use super::common::{ModelArg, ThreadsArg};
use super::fetch_config;
use crate::generate::{GenerateConfig, Generator, Utf8Stream};
use crate::model::chat::ChatTemplate;
use crate::model::runtime::init_threads;
use crate::model::{Loaded, ModelConfig};
use crate::sampler::{Sampler, Sampling};

/// Arguments of `formwork generate`.
#[derive(Debug, clap::Args)]
pub struct GenerateArgs {
    /// The prompt. Read from stdin when absent.
    pub prompt: Option<String>,

    /// --model.
    #[command(flatten)]
    pub model: ModelArg,

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

    /// --threads.
    #[command(flatten)]
    pub threads: ThreadsArg,

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
    // Checks the parameters before the model is loaded.
    Sampler::new(sampling.clone(), args.seed)?;
    let threads = init_threads(args.threads.threads);

    let mut loaded = Loaded::load(
        args.model.model.as_deref(),
        &fetch_config(),
        &ModelConfig::new(),
    )?;
    let ids = if args.raw {
        ChatTemplate::Raw.encode(&loaded.tokenizer, args.system.as_deref(), &prompt)?
    } else {
        loaded
            .template
            .encode(&loaded.tokenizer, args.system.as_deref(), &prompt)?
    };
    let ids: Vec<u32> = ids.into_iter().map(|t| t.0).collect();
    if args.verbose {
        eprintln!(
            "loaded {} ({}, {} requantized) in {:.2}s, {} threads, prompt {} tokens",
            loaded.path.display(),
            loaded.model.architecture(),
            loaded.model.load_stats().requantized,
            loaded.load_time.as_secs_f64(),
            threads,
            ids.len()
        );
    }

    let cfg = GenerateConfig {
        max_tokens: args.max_tokens,
        sampling,
        seed: args.seed,
        ..GenerateConfig::default()
    };
    let mut generator = Generator::new(&mut loaded.model, loaded.tokenizer.clone());
    let mut text = Utf8Stream::new();
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let mut write_error = None;
    let generation = generator.generate_free(&ids, &loaded.stop, &cfg, &mut |bytes| {
        if write_error.is_none() {
            let r = out.write_all(text.push(bytes).as_bytes());
            write_error = r.and_then(|()| out.flush()).err();
        }
    })?;
    if let Some(e) = write_error {
        return Err(e).context("cannot write to stdout");
    }
    writeln!(out, "{}", text.finish())?;
    out.flush()?;
    if args.verbose {
        let t = &generation.timings;
        let (prefill, decode) = (t.prompt.as_secs_f64(), t.forward.as_secs_f64());
        let decoded = generation.forward_calls.saturating_sub(1);
        eprintln!(
            "prefill {} tokens in {prefill:.2}s ({:.1} tok/s); decode {decoded} tokens in {decode:.2}s ({:.1} tok/s); stop: {:?}",
            generation.prompt_tokens,
            generation.prompt_tokens as f64 / prefill.max(1e-9),
            decoded as f64 / decode.max(1e-9),
            generation.stop
        );
    }
    Ok(ExitCode::SUCCESS)
}
