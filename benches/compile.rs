//! Compile-time benchmark: time to first mask (TTFM = schema compile + grammar/vocabulary
//! setup + the first `compute_mask`) over the schemas of `maskbench-sample.jsonl`, cold (no
//! compile cache), for formwork and llguidance 1.9.1 in the same run, with the same SmolLM2
//! vocabulary, printing p50/p90/p99/max and the formwork/llguidance ratios.
//!
//! Both engines get their per-vocabulary state built once, before timing: formwork's
//! [`TokEnv`] (vocabulary + token trie, passed to `CompiledGrammar::with_env`) and llguidance's
//! `ParserFactory` (its tok env, token trie and slices). That state is shared by every schema in
//! a server, so it is not part of a schema's first-request latency.
//! Percentiles are reported over each engine's own successes and over the schemas both
//! compile (the fair comparison).
//!
//! Environment:
//! - `FORMWORK_BENCH_SCHEMAS`: how many schemas to time (default: all 619, spread evenly);
//! - `FORMWORK_BENCH_REPS`: repetitions per schema, the minimum is kept (default 1);
//! - `FORMWORK_BENCH_IDS`: only these comma-separated ids (to profile one schema, with
//!   `FORMWORK_BENCH_REPS` as the loop count);
//! - `FORMWORK_BENCH_SLOWEST`: also print the ids of the N schemas with the largest
//!   formwork/llguidance TTFM ratio (default 0), the ones to profile;
//! - `FORMWORK_BENCH_ORDER`: formwork's property order, `schema` (default), `any` or
//!   `window:N` (the MaskBench ratchet's order; llguidance always uses schema order).
//!
//! Run: `cargo bench --bench compile` (release, final figures) or
//! `cargo bench --profile dev --bench compile` (formwork at opt-level 2, about a minute).

#[path = "../tests/it/corpus.rs"]
mod corpus;
#[path = "common/data.rs"]
mod data;
#[path = "common/llg.rs"]
mod llg;
#[path = "common/order.rs"]
mod order;
#[path = "common/vocab.rs"]
mod vocab;

use std::sync::Arc;
use std::time::{Duration, Instant};

use formwork::matcher::{CompiledGrammar, Limits, Matcher};
use formwork::schema::{compile, CompileOptions, PropertyOrder};
use formwork::toktrie::{TokEnv, TokenSet, Vocab};
use serde_json::Value;

/// `(id, schema)` of the sample, spread evenly when a count is requested.
fn schemas() -> Vec<(String, Value)> {
    let rows: Vec<(String, Value)> = corpus::maskbench_rows(&corpus::maskbench_files(false))
        .into_iter()
        .map(|r| (r.id, r.schema))
        .collect();
    if let Ok(ids) = std::env::var("FORMWORK_BENCH_IDS") {
        let ids: Vec<&str> = ids.split(',').map(str::trim).collect();
        return rows
            .into_iter()
            .filter(|(id, _)| ids.contains(&id.as_str()))
            .collect();
    }
    let want: usize = std::env::var("FORMWORK_BENCH_SCHEMAS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(rows.len());
    let step = (rows.len() / want.max(1)).max(1);
    rows.into_iter().step_by(step).take(want).collect()
}

fn reps() -> usize {
    std::env::var("FORMWORK_BENCH_REPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1usize)
        .max(1)
}

fn smollm2() -> Arc<dyn Vocab> {
    vocab::registry_vocab("smollm2-135m")
}

/// formwork's compile options: the defaults, with `FORMWORK_BENCH_ORDER`'s property order.
fn options() -> CompileOptions {
    let property_order = order::from_env(PropertyOrder::Schema);
    CompileOptions {
        property_order,
        ..Default::default()
    }
}

/// formwork's schema → grammar time alone (the part `schema::compile` owns).
fn compile_formwork(schema: &Value) -> Option<Duration> {
    let t0 = Instant::now();
    compile(schema, &options()).ok()?;
    Some(t0.elapsed())
}

/// formwork's TTFM for one schema, `None` when it refuses the schema.
fn ttfm_formwork(schema: &Value, env: &TokEnv) -> Option<Duration> {
    let t0 = Instant::now();
    let c = compile(schema, &options()).ok()?;
    let cg = Arc::new(CompiledGrammar::with_env(c.grammar, env, Limits::default()).ok()?);
    let mut m = Matcher::new(cg).ok()?;
    let mut mask = TokenSet::new(env.vocab().vocab_len());
    m.compute_mask(&mut mask).ok()?;
    Some(t0.elapsed())
}

/// llguidance's TTFM for one schema, `None` when it refuses the schema.
fn ttfm_llguidance(schema: &Value, factory: &llguidance::ParserFactory) -> Option<Duration> {
    let t0 = Instant::now();
    let grm = llguidance::api::TopLevelGrammar::from_json_schema(schema.clone());
    let parser = factory.create_parser(grm).ok()?;
    let mut m = llguidance::Matcher::new(Ok(parser));
    m.compute_mask().ok()?;
    Some(t0.elapsed())
}

fn best_of(n: usize, mut f: impl FnMut() -> Option<Duration>) -> Option<Duration> {
    (0..n).map(|_| f()).min().flatten()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Percentile `p` (0..=1) of sorted durations.
fn pct(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn line(name: &str, mut xs: Vec<Duration>) -> [f64; 4] {
    xs.sort();
    let row = [
        ms(pct(&xs, 0.5)),
        ms(pct(&xs, 0.9)),
        ms(pct(&xs, 0.99)),
        ms(xs.last().copied().unwrap_or_default()),
    ];
    println!(
        "{name:<34} {:>6} {:>9.3} {:>9.3} {:>9.3} {:>9.1}",
        xs.len(),
        row[0],
        row[1],
        row[2],
        row[3]
    );
    row
}

fn main() {
    let rows = schemas();
    let vocab = smollm2();
    let env = TokEnv::new(vocab.clone());
    let llg_env = llg::llg_env(vocab.as_ref());
    let mut factory = llguidance::ParserFactory::new_simple(&llg_env).expect("llguidance factory");
    factory.quiet();
    let n = reps();
    let mut fw = Vec::new();
    let mut llg = Vec::new();
    let mut both: Vec<(Duration, Duration)> = Vec::new();
    let mut by_id: Vec<(f64, &str, Duration, Duration)> = Vec::new();
    let mut grammar_only = Vec::new();
    for (id, schema) in &rows {
        if let Some(c) = best_of(n, || compile_formwork(schema)) {
            grammar_only.push(c);
        }
        let a = best_of(n, || ttfm_formwork(schema, &env));
        let b = best_of(n, || ttfm_llguidance(schema, &factory));
        if let Some(a) = a {
            fw.push(a);
        }
        if let Some(b) = b {
            llg.push(b);
        }
        if let (Some(a), Some(b)) = (a, b) {
            both.push((a, b));
            by_id.push((ms(a) / ms(b).max(1e-6), id, a, b));
        }
    }
    println!(
        "TTFM (compile + first mask), cold, {} MaskBench sample schemas, SmolLM2 vocabulary, best of {n} (ms)",
        rows.len()
    );
    println!(
        "{:<34} {:>6} {:>9} {:>9} {:>9} {:>9}",
        "engine (schemas timed)", "n", "p50", "p90", "p99", "max"
    );
    line("formwork schema->grammar only", grammar_only);
    line("formwork (own successes)", fw);
    line("llguidance (own successes)", llg);
    let f = line(
        "formwork (both compile)",
        both.iter().map(|p| p.0).collect(),
    );
    let l = line(
        "llguidance (both compile)",
        both.iter().map(|p| p.1).collect(),
    );
    println!(
        "ratio formwork/llguidance on schemas both compile: p50 {:.2}  p90 {:.2}  p99 {:.2}",
        f[0] / l[0],
        f[1] / l[1],
        f[2] / l[2]
    );
    let slowest: usize = std::env::var("FORMWORK_BENCH_SLOWEST")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    by_id.sort_by(|x, y| y.0.total_cmp(&x.0));
    for (ratio, id, a, b) in by_id.iter().take(slowest) {
        println!(
            "slow: {id}  formwork {:.3} ms  llguidance {:.3} ms  ratio {ratio:.1}",
            ms(*a),
            ms(*b)
        );
    }
}
