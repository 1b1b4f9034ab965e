//! Constrained vs unconstrained generation on the default model: same prompts, schemas and
//! budgets, greedy decoding (reproducible).
//!
//! Four modes per prompt, interleaved so load noise hits them alike:
//! - `unconstrained`: no grammar, until a stop token or the budget;
//! - `full mask`: the grammar's mask computed before every sampled token (the classic loop);
//! - `argmax-first`: the argmax checked with `Matcher::is_token_allowed`, the mask computed
//!   only when it is rejected (the default);
//! - `argmax-first, no ff`: the same without fast-forward (forced tokens sampled one by one),
//!   to show what fast-forward pays.
//!
//! Reported per mode: end-to-end tokens/s (prompt included) and decode tokens/s (prompt
//! excluded), the share of forced tokens, forward passes per generated token, full masks per
//! step, a per-step breakdown in ms (forward, mask, sample, fast-forward + closing, rest),
//! and mask time as a share of decode time. Issue 5 targets: constrained throughput ≥
//! unconstrained, mask share < 2%.
//!
//! `cargo bench --bench extract` runs it fully (3 documents × 2 schemas, 96 tokens); without
//! `--bench` (as `cargo test --benches` runs it) it is a smoke run: one document, one schema,
//! 12 tokens. `FORMWORK_BENCH_RECORDS=N` sets the documents per schema (at most 3),
//! `FORMWORK_BENCH_TOKENS=N` the token budget, `FORMWORK_BENCH_MODEL=NAME` the model (a
//! registry name; default: the registry's default).
//!
//! `FORMWORK_BENCH_SUITE=maskbench[:N]` replaces the two small schemas with a schema-heavy suite:
//! the N (default 8) largest schemas of the MaskBench sample (`maskbench-sample.jsonl` in the
//! shared data directory) whose text fits in the prompt and that compile, each with its first
//! valid instance as the document (the model is asked to write it out as JSON). Large schemas
//! mean large objects, long enums and deep nesting, where masks cost the most, so the mask share
//! of decode time here is the heavy end of real extraction; compile time (to the first mask) is
//! reported beside it.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use formwork::extract::prompt::{PromptParts, PromptTemplate};
use formwork::generate::{GenerateConfig, Generation, Generator};
use formwork::matcher::{CompiledGrammar, Limits, Matcher};
use formwork::model::fetch::FetchConfig;
use formwork::model::{Loaded, ModelConfig};
use formwork::schema::{compile, CompileOptions};
use formwork::toktrie::TokenSet;

#[path = "../tests/it/corpus.rs"]
mod corpus;
#[path = "common/data.rs"]
mod data;

const DOCS: [&str; 3] = [
    "Incident 2024-03-07: db-3 ran out of disk at 14:05, severity high, owner Maria Lopez; \
     recovered 14:40 after removing WAL archives. Affected: checkout, search.",
    "Course progress: Ana finished 7 of 10 modules of Rust Basics with an average score of 86; \
     the next module, Traits, is due on 2024-05-02.",
    "Ticket 5512: the login page shows a blank screen on Safari 17. Reported by Tom Ng, \
     priority medium, component web-frontend, status open.",
];

/// A decoding mode of the bench.
#[derive(Clone, Copy)]
struct Mode {
    name: &'static str,
    constrained: bool,
    argmax_first: bool,
    fast_forward: bool,
}

const MODES: [Mode; 4] = [
    Mode {
        name: "unconstrained",
        constrained: false,
        argmax_first: false,
        fast_forward: false,
    },
    Mode {
        name: "full mask",
        constrained: true,
        argmax_first: false,
        fast_forward: true,
    },
    Mode {
        name: "argmax-first",
        constrained: true,
        argmax_first: true,
        fast_forward: true,
    },
    Mode {
        name: "argmax-first, no ff",
        constrained: true,
        argmax_first: true,
        fast_forward: false,
    },
];

/// Totals of one mode over all generations.
#[derive(Default)]
struct Totals {
    runs: usize,
    tokens: usize,
    sampled: usize,
    forced: usize,
    forward_calls: usize,
    mask_calls: usize,
    complete: usize,
    total: Duration,
    prompt: Duration,
    forward: Duration,
    mask: Duration,
    sample: Duration,
    forced_time: Duration,
    closing: Duration,
}

impl Totals {
    fn add(&mut self, g: &Generation) {
        let t = &g.timings;
        self.runs += 1;
        self.tokens += g.tokens_len();
        self.sampled += g.sampled_tokens;
        self.forced += g.forced_tokens;
        // The prompt's pass is not a decode step.
        self.forward_calls += g.forward_calls - 1;
        self.mask_calls += g.mask_calls;
        self.complete += usize::from(g.accepted);
        self.total += t.total;
        self.prompt += t.prompt;
        self.forward += t.forward;
        self.mask += t.mask;
        self.sample += t.sample;
        self.forced_time += t.forced;
        self.closing += t.closing;
    }

    fn row(&self, name: &str) -> String {
        let decode = (self.total - self.prompt).as_secs_f64();
        let steps = self.sampled.max(1) as f64;
        let ms = |d: Duration| 1e3 * d.as_secs_f64() / steps;
        let rest =
            (self.total - self.prompt).saturating_sub(self.forward + self.mask + self.sample);
        let rest = rest.saturating_sub(self.forced_time + self.closing);
        format!(
            "{name:<20} {:>6} {:>9.1} {:>9.1} {:>6.1}% {:>7.2} {:>6.2} {:>7.2} {:>6.3} {:>6.3} {:>6.3} {:>6.3} {:>6.3} {:>6.2}% {:>6.2}% {:>5}",
            self.tokens,
            self.tokens as f64 / self.total.as_secs_f64(),
            self.tokens as f64 / decode,
            100.0 * self.forced as f64 / self.tokens.max(1) as f64,
            self.forward_calls as f64 / self.tokens.max(1) as f64,
            self.mask_calls as f64 / steps,
            ms(self.forward),
            ms(self.mask),
            ms(self.sample),
            ms(self.forced_time),
            ms(self.closing),
            ms(rest),
            100.0 * self.mask.as_secs_f64() / decode,
            100.0 * (self.mask + self.forced_time + self.closing).as_secs_f64() / decode,
            format!("{}/{}", self.complete, self.runs),
        )
    }
}

fn main() -> anyhow::Result<()> {
    let full = std::env::args().any(|a| a == "--bench");
    let records: usize = if full {
        std::env::var("FORMWORK_BENCH_RECORDS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(3)
            .clamp(1, DOCS.len())
    } else {
        1
    };
    let max_tokens = if full {
        std::env::var("FORMWORK_BENCH_TOKENS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(96)
    } else {
        12
    };
    let small = [
        json!({"type": "object", "properties": {"title": {"type": "string", "maxLength": 40}, "severity": {"enum": ["low", "medium", "high"]}, "owner": {"type": "string", "maxLength": 30}, "date": {"type": "string", "format": "date"}}, "required": ["title", "severity", "owner", "date"], "additionalProperties": false}),
        json!({"type": "object", "properties": {"person": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 30}, "role": {"type": "string", "maxLength": 20}}, "required": ["name", "role"], "additionalProperties": false}, "items": {"type": "array", "items": {"type": "string", "maxLength": 20}, "maxItems": 3}, "count": {"type": "integer"}}, "required": ["person", "items", "count"], "additionalProperties": false}),
    ];
    // (schema, documents, label) per suite entry.
    let suite: Vec<(serde_json::Value, Vec<String>, String)> =
        match std::env::var("FORMWORK_BENCH_SUITE").ok().as_deref() {
            None | Some("") | Some("small") => {
                let n = if full { small.len() } else { 1 };
                small[..n]
                    .iter()
                    .enumerate()
                    .map(|(i, s)| {
                        let docs = DOCS[..records].iter().map(|d| d.to_string()).collect();
                        (s.clone(), docs, format!("small-{i}"))
                    })
                    .collect()
            }
            Some(spec) => {
                let n = match spec.strip_prefix("maskbench") {
                    Some("") => 8,
                    Some(n) => n
                        .strip_prefix(':')
                        .and_then(|n| n.parse().ok())
                        .ok_or_else(|| {
                            anyhow::anyhow!("FORMWORK_BENCH_SUITE={spec}: expected maskbench[:N]")
                        })?,
                    None => anyhow::bail!(
                        "FORMWORK_BENCH_SUITE={spec}: expected small or maskbench[:N]"
                    ),
                };
                heavy_suite(n)?
            }
        };
    let model_name = std::env::var("FORMWORK_BENCH_MODEL").ok();
    let loaded = Loaded::load(
        model_name.as_deref(),
        &FetchConfig::new(),
        &ModelConfig::new(),
    )?;
    let vocab = loaded.vocab();
    let encode = loaded.chat_encoder();
    let mut gen = Generator::new(loaded.model, vocab.clone());
    let mut totals: Vec<Totals> = MODES.iter().map(|_| Totals::default()).collect();
    let mut warmed = false;
    let mut compile_ms = Vec::new();
    for (schema, docs, label) in &suite {
        let start = std::time::Instant::now();
        let g = compile(schema, &CompileOptions::default())?.grammar;
        let cg = Arc::new(CompiledGrammar::new(g, vocab.clone(), Limits::default())?);
        let mut m = Matcher::new(cg)?;
        m.compute_mask(&mut TokenSet::new(vocab.vocab_len()))?;
        compile_ms.push((label.clone(), 1e3 * start.elapsed().as_secs_f64()));
        let schema_text = schema.to_string();
        for doc in docs {
            let user = PromptTemplate::default_template().render(&PromptParts {
                schema: Some(&schema_text),
                document: doc.as_str(),
                ..Default::default()
            });
            let prompt = (encode)(None, &user).map_err(anyhow::Error::msg)?;
            // The first generation pays one-off allocations: a short one runs untimed.
            if !warmed {
                warmed = true;
                let cfg = GenerateConfig {
                    max_tokens: 4,
                    ..Default::default()
                };
                gen.generate(&prompt, &mut m, &cfg, &mut |_| {})?;
            }
            for (mode, tot) in MODES.iter().zip(&mut totals) {
                let cfg = GenerateConfig {
                    max_tokens,
                    argmax_first: mode.argmax_first,
                    fast_forward: mode.fast_forward,
                    ..Default::default()
                };
                // Every mode pays the full prompt.
                gen.forget_cache();
                let out = if mode.constrained {
                    m.reset();
                    gen.generate(&prompt, &mut m, &cfg, &mut |_| {})?
                } else {
                    gen.generate_free(&prompt, &loaded.stop, &cfg, &mut |_| {})?
                };
                tot.add(&out);
            }
        }
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let load = load.split_whitespace().next().unwrap_or("?");
    println!(
        "extract bench{}: {} model, cpu, {} schemas, {} prompts per mode, max_tokens {max_tokens}, greedy, load {load}",
        if full { "" } else { " (smoke)" },
        model_name.as_deref().unwrap_or("default"),
        suite.len(),
        suite.iter().map(|(_, d, _)| d.len()).sum::<usize>(),
    );
    let compile_list: Vec<String> = compile_ms
        .iter()
        .map(|(l, ms)| format!("{l} {ms:.1}"))
        .collect();
    println!("compile to first mask, ms: {}", compile_list.join(", "));
    println!(
        "{:<20} {:>6} {:>9} {:>9} {:>7} {:>7} {:>6} {:>7} {:>6} {:>6} {:>6} {:>6} {:>6} {:>7} {:>7} {:>5}",
        "mode",
        "tokens",
        "e2e t/s",
        "dec t/s",
        "forced",
        "fwd/tok",
        "mask/s",
        "fwd ms",
        "mask",
        "sample",
        "ff",
        "close",
        "rest",
        "mask%",
        "gram%",
        "ok"
    );
    for (mode, tot) in MODES.iter().zip(&totals) {
        println!("{}", tot.row(mode.name));
    }
    println!(
        "(per-step columns are ms per sampled token; mask% is mask time over decode time, gram% all grammar work (masks, forced tokens, closing) over it; \
         e2e includes the prompt pass)"
    );
    Ok(())
}

/// The `n` largest MaskBench-sample schemas (by text size) whose text fits a prompt and that
/// compile under the default options, each with its first valid instance as the document.
fn heavy_suite(n: usize) -> anyhow::Result<Vec<(serde_json::Value, Vec<String>, String)>> {
    /// Schema text longer than this would crowd the small models' context.
    const MAX_SCHEMA_CHARS: usize = 6_000;
    let mut rows = Vec::new();
    for row in corpus::maskbench_rows(&corpus::maskbench_files(false)) {
        let size = row.schema.to_string().len();
        let valid = row.tests.iter().find(|t| t.1).map(|t| t.0.to_string());
        if let (Some(doc), true) = (valid, size <= MAX_SCHEMA_CHARS) {
            rows.push((size, row.schema, doc, row.id));
        }
    }
    rows.sort_by(|a, b| b.0.cmp(&a.0).then(a.3.cmp(&b.3)));
    let mut suite = Vec::new();
    for (_, schema, doc, id) in rows {
        if suite.len() == n {
            break;
        }
        if compile(&schema, &CompileOptions::default()).is_ok() {
            let doc = format!("The record, as the system logged it: {doc}");
            suite.push((schema, vec![doc], id));
        }
    }
    Ok(suite)
}
