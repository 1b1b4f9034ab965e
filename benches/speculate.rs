//! Speculative decoding, issue 45: per-document extraction with and without speculation in
//! the same run, greedy (the outputs must be identical, and the bench checks they are).
//!
//! Documents: the README example (`examples/course`), the project's own suites
//! (`evals/{calendar_events,course_progress,incident_triage,calculator}.jsonl`), SNIPS
//! (`snips/snips_validate.jsonl`, spread over its intents) and BFCL simple
//! (`bfcl/bfcl_simple_python.jsonl`; its one function's `parameters` schema is the target,
//! the question the document), read in place from the shared data directory. Each is
//! extracted with the default prompt (`PromptTemplate::default_template`, the chat template
//! of the model), `max_tokens` 128, through `Generator::generate`, as `formwork extract`
//! decodes one document.
//!
//! Per document, three generations: *warm* (speculating, the KV cache left by the previous
//! document: the prompt prefix cache at work), then *off* and *on* each from an empty cache
//! (so both pay the whole prompt). Reported per model and suite: decode tok/s (tokens over
//! the time after the prompt) off / on and their ratio, wall ms per document off / on, the
//! share of drafted tokens accepted, tokens per decode pass off / on, prefill (ms per
//! document cold, and with the prefix cache; the share of prompt tokens it reused), and the
//! model's load time. Then `formwork extract` on the README example as a process (model load
//! included), median of 3 runs each way.
//!
//! `cargo bench --bench speculate` runs it fully (3 documents per own suite, 8 SNIPS, 8 BFCL,
//! Qwen2.5-Coder-0.5B and SmolLM2-135M); without `--bench` (as `cargo test --benches` runs it)
//! it is a smoke run: SmolLM2, one document per suite, 24 tokens, no process runs.
//! `FORMWORK_BENCH_MODELS=a,b` names the registry models; `FORMWORK_BENCH_DOCS=N` the
//! documents per suite.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use formwork::extract::prompt::PromptTemplate;
use formwork::extract::run::{Constraint, ExtractConfig, Prepared};
use formwork::generate::{GenerateConfig, Generation, Generator, Speculation};
use formwork::matcher::{CompiledGrammar, Limits, Matcher};
use formwork::model::fetch::FetchConfig;
use formwork::model::{Loaded, ModelConfig};

#[path = "common/data.rs"]
mod data;
#[path = "../tests/it/suite_docs.rs"]
mod suite_docs;
use suite_docs::{suites, Counts};

/// Sums over the documents of one suite in one mode.
#[derive(Default)]
struct Totals {
    docs: usize,
    tokens: usize,
    decode: Duration,
    wall: Duration,
    prompt: Duration,
    prompt_tokens: usize,
    reused: usize,
    passes: usize,
    drafted: usize,
    accepted: usize,
}

impl Totals {
    fn add(&mut self, g: &Generation) {
        self.docs += 1;
        self.tokens += g.tokens_len();
        self.decode += g.timings.total.saturating_sub(g.timings.prompt);
        self.wall += g.timings.total;
        self.prompt += g.timings.prompt;
        self.prompt_tokens += g.prompt_tokens;
        self.reused += g.reused_prompt_tokens;
        // The prompt's pass is not a decode pass.
        self.passes += g.forward_calls.saturating_sub(1);
        self.drafted += g.draft_tokens;
        self.accepted += g.accepted_draft_tokens;
    }

    fn tok_s(&self) -> f64 {
        self.tokens as f64 / self.decode.as_secs_f64()
    }

    fn per_doc_ms(&self, d: Duration) -> f64 {
        1e3 * d.as_secs_f64() / self.docs.max(1) as f64
    }

    fn per_pass(&self) -> f64 {
        self.tokens as f64 / self.passes.max(1) as f64
    }
}

/// `formwork extract` of the README example as a process: median wall seconds of `runs`.
fn process_wall(model: &str, extra: &[&str], runs: usize) -> anyhow::Result<f64> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut walls = Vec::new();
    for _ in 0..runs {
        let start = Instant::now();
        let out = Command::new(env!("CARGO_BIN_EXE_formwork"))
            .arg("extract")
            .arg("--schema")
            .arg(root.join("examples/course/schema.json"))
            .arg(root.join("examples/course/doc.txt"))
            .args(["--model", model])
            .args(extra)
            .output()?;
        walls.push(start.elapsed().as_secs_f64());
        anyhow::ensure!(
            out.status.success(),
            "extract failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    walls.sort_by(f64::total_cmp);
    Ok(walls[walls.len() / 2])
}

fn main() -> anyhow::Result<()> {
    let full = std::env::args().any(|a| a == "--bench");
    let env_usize = |k: &str| std::env::var(k).ok().and_then(|s| s.parse().ok());
    let n: usize = env_usize("FORMWORK_BENCH_DOCS").unwrap_or(if full { 4 } else { 1 });
    let max_tokens = if full { 128 } else { 24 };
    let models: Vec<String> = match std::env::var("FORMWORK_BENCH_MODELS") {
        Ok(m) => m.split(',').map(str::to_string).collect(),
        Err(_) if full => vec!["qwen2.5-coder-0.5b".into(), "smollm2-135m".into()],
        Err(_) => vec!["smollm2-135m".into()],
    };
    let suites = suites(Counts {
        own: n.div_ceil(2),
        snips: 2 * n,
        bfcl: 2 * n,
    })?;
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "speculate bench{}: greedy, max_tokens {max_tokens}, 2 threads, load at start {}",
        if full { "" } else { " (smoke)" },
        load.split_whitespace().next().unwrap_or("?")
    );
    for model in &models {
        let start = Instant::now();
        let loaded = Loaded::load(
            Some(model.as_str()),
            &FetchConfig::new(),
            &ModelConfig::new(),
        )?;
        let load_ms = 1e3 * start.elapsed().as_secs_f64();
        let vocab = loaded.vocab();
        let encode = loaded.chat_encoder();
        let mut gen = Generator::new(loaded.model, vocab.clone());
        println!("\n{model}: load {load_ms:.0} ms (file in the page cache)");
        println!(
            "{:<15} {:>4} {:>6} {:>15} {:>6} {:>15} {:>6} {:>11} {:>17} {:>7}",
            "suite",
            "docs",
            "tokens",
            "decode tok/s",
            "ratio",
            "wall ms/doc",
            "accept",
            "tok/pass",
            "prefill ms cold/pc",
            "reused"
        );
        let mut warmed = false;
        for (suite, docs) in &suites {
            let (mut off, mut on, mut warm) =
                (Totals::default(), Totals::default(), Totals::default());
            for doc in docs {
                // As `formwork extract --schema` prepares it: the grammar for this document
                // (grounded fields quote it) and the user message.
                let prepared = Prepared::new(
                    &Constraint::Schema(doc.schema.clone()),
                    &ExtractConfig::default(),
                )?;
                let g = prepared
                    .grammar_for(&doc.text)?
                    .expect("a schema constraint has a grammar");
                let cg = Arc::new(CompiledGrammar::new(g, vocab.clone(), Limits::default())?);
                let mut m = Matcher::new(cg)?;
                let user =
                    prepared.user_message(&PromptTemplate::default_template(), doc.text.as_str());
                let prompt = (encode)(None, &user).map_err(anyhow::Error::msg)?;
                let cfg = |speculation| GenerateConfig {
                    max_tokens,
                    speculation,
                    ..Default::default()
                };
                if !warmed {
                    // The first generation pays one-off allocations.
                    warmed = true;
                    gen.generate(&prompt, &mut m, &cfg(Speculation::Off), &mut |_| {})?;
                }
                m.reset();
                warm.add(&gen.generate(
                    &prompt,
                    &mut m,
                    &cfg(Speculation::default()),
                    &mut |_| {},
                )?);
                let mut outs = Vec::new();
                for (speculation, tot) in [
                    (Speculation::Off, &mut off),
                    (Speculation::default(), &mut on),
                ] {
                    gen.forget_cache();
                    m.reset();
                    let out = gen.generate(&prompt, &mut m, &cfg(speculation), &mut |_| {})?;
                    tot.add(&out);
                    outs.push(out.bytes);
                }
                anyhow::ensure!(
                    outs[0] == outs[1],
                    "{model} {suite} {}: speculation changed the output: {:?} vs {:?}",
                    doc.name,
                    String::from_utf8_lossy(&outs[0]),
                    String::from_utf8_lossy(&outs[1])
                );
            }
            println!(
                "{:<15} {:>4} {:>6} {:>7.1} / {:>5.1} {:>5.2}x {:>7.0} / {:>5.0} {:>5.0}% {:>5.2} / {:>3.2} {:>8.0} / {:>6.0} {:>6.0}%",
                suite,
                on.docs,
                on.tokens,
                off.tok_s(),
                on.tok_s(),
                on.tok_s() / off.tok_s(),
                off.per_doc_ms(off.wall),
                on.per_doc_ms(on.wall),
                100.0 * on.accepted as f64 / on.drafted.max(1) as f64,
                off.per_pass(),
                on.per_pass(),
                on.per_doc_ms(on.prompt),
                warm.per_doc_ms(warm.prompt),
                100.0 * warm.reused as f64 / warm.prompt_tokens.max(1) as f64,
            );
        }
        if full {
            let off = process_wall(model, &["--no-speculate"], 3)?;
            let on = process_wall(model, &[], 3)?;
            println!(
                "formwork extract, README example, process wall (median of 3): {off:.2} s without, {on:.2} s with speculation ({:.2}x)",
                on / off
            );
        }
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!(
        "\nload at end {}",
        load.split_whitespace().next().unwrap_or("?")
    );
    Ok(())
}
