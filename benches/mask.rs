//! Mask benchmark: compile time and per-token mask time (mean, p50, p99, max) while walking
//! the valid JSON documents of `maskbench-sample.jsonl` through the JSON grammar, for formwork
//! and llguidance 1.9.1 on the same grammar (Lark translation), the same vocabulary and the same
//! token sequences, printing the ratio.
//!
//! Vocabularies: the SmolLM2 (49,152) and Gemma 3 (262,144) tokenizers from the models
//! directory (fetched and verified on first use), and synthetic JSON-flavoured ones. The
//! documents are tokenized by each vocabulary's own `tokenize`. Environment:
//! - `FORMWORK_BENCH_DOCS`: how many documents to walk (default 150, spread over the file);
//! - `FORMWORK_BENCH_VOCABS`: comma-separated vocabularies, each a registry model name or
//!   `synthetic-<size>` (default `smollm2-135m,gemma3-270m,synthetic-32000`);
//! - `FORMWORK_BENCH_TRACE`: print every formwork mask time of the first pass to stderr
//!   (`TRACE<tab>µs<tab>output tail<tab>token<tab>allowed tokens`), for profiling.
//!
//! formwork's masks are timed twice: the first pass over the documents is the comparison with
//! llguidance (caches start empty, so it includes every cold mask); the second pass over the
//! same documents, with the compiled grammar's shared caches warm, is the steady state, printed
//! apart so cold-entry costs (the max) and per-token costs (p50) can be told apart.
//!
//! Run: `cargo bench --bench mask` (prints a table, then criterion's compile and named-state
//! benches).

#[path = "common/data.rs"]
mod data;
#[path = "../tests/it/engine_json_grammar.rs"]
mod engine_json_grammar;
#[path = "common/llg.rs"]
mod llg;

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, Criterion};
use formwork::matcher::{CompiledGrammar, Limits, Matcher};
use formwork::toktrie::{TokEnv, TokenId, TokenSet, Vocab};

use data::data_dir;
use engine_json_grammar::{json_grammar, json_lark, json_like_vocab};

fn documents() -> Vec<String> {
    let text = std::fs::read_to_string(data_dir().join("maskbench-sample.jsonl"))
        .expect("maskbench-sample.jsonl is readable");
    let mut docs = Vec::new();
    for line in text.lines() {
        let row: serde_json::Value = serde_json::from_str(line).expect("valid JSONL");
        for t in row["tests"].as_array().into_iter().flatten() {
            if t["valid"] == serde_json::Value::Bool(true) {
                docs.push(serde_json::to_string(&t["data"]).expect("serializable"));
            }
        }
    }
    let want: usize = std::env::var("FORMWORK_BENCH_DOCS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(150);
    let step = (docs.len() / want.max(1)).max(1);
    docs.into_iter().step_by(step).take(want).collect()
}

fn vocab_names() -> Vec<String> {
    std::env::var("FORMWORK_BENCH_VOCABS")
        .unwrap_or_else(|_| "smollm2-135m,gemma3-270m,synthetic-32000".to_string())
        .split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

/// A vocabulary by name: `synthetic-<n>` or a registry model.
fn load_vocab(name: &str) -> Arc<dyn Vocab> {
    if let Some(n) = name.strip_prefix("synthetic-") {
        return Arc::new(json_like_vocab(n.parse().expect("synthetic-<size>"), 1));
    }
    let registry = formwork::model::registry::Registry::builtin().expect("registry");
    let entry = registry.get(name).expect("a registry model name");
    let path = formwork::model::fetch::ensure(entry, &formwork::model::fetch::FetchConfig::new())
        .expect("model fetched");
    Arc::new(formwork::model::tokenizer::GgufTokenizer::for_model(entry, &path).expect("tokenizer"))
}

/// Mask times, sorted.
struct Stats {
    times: Vec<Duration>,
}

impl Stats {
    fn new(mut times: Vec<Duration>) -> Self {
        times.sort();
        Self { times }
    }
    fn pct(&self, p: f64) -> Duration {
        let i = ((self.times.len() as f64 - 1.0) * p).round() as usize;
        self.times[i]
    }
    fn mean(&self) -> Duration {
        self.times.iter().sum::<Duration>() / self.times.len() as u32
    }
    fn max(&self) -> Duration {
        *self.times.last().expect("non-empty")
    }
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn walk_formwork(cg: &Arc<CompiledGrammar>, docs: &[Vec<TokenId>], trace: bool) -> Vec<Duration> {
    let mut mask = TokenSet::new(cg.trie().vocab_len());
    let mut times = Vec::new();
    for d in docs {
        let mut m = Matcher::new(cg.clone()).expect("matcher");
        for &t in d {
            let t0 = Instant::now();
            m.compute_mask(&mut mask).expect("mask");
            let el = t0.elapsed();
            times.push(el);
            if trace {
                let out = m.output();
                eprintln!(
                    "TRACE\t{:.2}\t{:?}\t{:?}\t{}",
                    us(el),
                    String::from_utf8_lossy(&out[out.len().saturating_sub(12)..]),
                    String::from_utf8_lossy(cg.vocab().token_bytes(t)),
                    mask.count()
                );
            }
            assert!(mask.contains(t), "formwork masked out a document token");
            m.consume_token(t).expect("consume");
        }
    }
    times
}

/// llguidance's mask times per document, or `None` for a document it cannot take (an error
/// from its parser or lexer, or a document token it masks out): such documents are skipped for
/// both engines and counted in the table, so the bench never panics on a peer's limitation
/// (it once did under `cargo test --benches` with a Lark lexer error).
fn walk_llguidance(
    factory: &llguidance::ParserFactory,
    lark: &str,
    docs: &[Vec<TokenId>],
) -> Vec<Option<Vec<Duration>>> {
    docs.iter()
        .map(|d| {
            let grm = llguidance::api::TopLevelGrammar::from_lark(lark.to_string());
            let parser = factory.create_parser(grm);
            let mut m = llguidance::Matcher::new(parser);
            let mut times = Vec::with_capacity(d.len());
            for &t in d {
                let t0 = Instant::now();
                let mask = m.compute_mask().ok()?;
                times.push(t0.elapsed());
                if !mask.is_allowed(t.0) {
                    return None;
                }
                m.consume_token(t.0).ok()?;
            }
            Some(times)
        })
        .collect()
}

fn report(name: &str, fw: &Stats, llg: &Stats) {
    println!(
        "{name:<28} {:>9} {:>9} {:>9} {:>10}   (llguidance {:.1} / {:.1} / {:.1} / {:.0} µs)",
        format!("{:.1}", us(fw.mean())),
        format!("{:.1}", us(fw.pct(0.5))),
        format!("{:.1}", us(fw.pct(0.99))),
        format!("{:.0}", us(fw.max())),
        us(llg.mean()),
        us(llg.pct(0.5)),
        us(llg.pct(0.99)),
        us(llg.max()),
    );
    println!(
        "{:<28} ratio formwork/llguidance: mean {:.2}  p50 {:.2}  p99 {:.2}  max {:.2}",
        "",
        us(fw.mean()) / us(llg.mean()),
        us(fw.pct(0.5)) / us(llg.pct(0.5)),
        us(fw.pct(0.99)) / us(llg.pct(0.99)),
        us(fw.max()) / us(llg.max()),
    );
}

fn walk_table() {
    let docs = documents();
    println!(
        "mask time per token, JSON grammar, {} MaskBench documents (µs)",
        docs.len()
    );
    println!(
        "{:<28} {:>9} {:>9} {:>9} {:>10}",
        "vocabulary", "mean", "p50", "p99", "max"
    );
    for name in vocab_names() {
        let vocab = load_vocab(&name);
        let toks: Vec<Vec<TokenId>> = docs.iter().map(|d| vocab.tokenize(d.as_bytes())).collect();
        let ntok: usize = toks.iter().map(Vec::len).sum();
        let t0 = Instant::now();
        let cg = Arc::new(
            CompiledGrammar::new(json_grammar(), vocab.clone(), Limits::default())
                .expect("compile"),
        );
        let fw_compile = t0.elapsed();
        let env = TokEnv::new(vocab.clone());
        let t0 = Instant::now();
        CompiledGrammar::with_env(json_grammar(), &env, Limits::default()).expect("compile");
        let fw_compile_shared = t0.elapsed();
        let llg_tok = llg::llg_env(vocab.as_ref());
        let t0 = Instant::now();
        let mut factory = llguidance::ParserFactory::new_simple(&llg_tok).expect("factory");
        factory.quiet();
        let llg_compile = t0.elapsed();
        let llg_docs = walk_llguidance(&factory, &json_lark(), &toks);
        let skipped = llg_docs.iter().filter(|d| d.is_none()).count();
        let toks: Vec<Vec<TokenId>> = toks
            .into_iter()
            .zip(&llg_docs)
            .filter(|(_, l)| l.is_some())
            .map(|(t, _)| t)
            .collect();
        if toks.is_empty() {
            println!("{name}: llguidance took none of the documents; skipped");
            continue;
        }
        let llg = Stats::new(llg_docs.into_iter().flatten().flatten().collect());
        let trace = std::env::var_os("FORMWORK_BENCH_TRACE").is_some();
        let fw = Stats::new(walk_formwork(&cg, &toks, trace));
        let warm = Stats::new(walk_formwork(&cg, &toks, false));
        println!(
            "{name} ({} ids, {ntok} document tokens, {skipped} documents llguidance could not take skipped): compile formwork {:.1} ms ({:.2} ms with a shared trie), llguidance factory {:.1} ms",
            vocab.vocab_len(),
            fw_compile.as_secs_f64() * 1e3,
            fw_compile_shared.as_secs_f64() * 1e3,
            llg_compile.as_secs_f64() * 1e3
        );
        report(&name, &fw, &llg);
        println!(
            "{:<28} {:>9} {:>9} {:>9} {:>10}   (formwork second pass, caches warm)",
            "",
            format!("{:.1}", us(warm.mean())),
            format!("{:.1}", us(warm.pct(0.5))),
            format!("{:.1}", us(warm.pct(0.99))),
            format!("{:.0}", us(warm.max())),
        );
    }
}

fn bench_compile(c: &mut Criterion) {
    let mut g = c.benchmark_group("compile");
    g.sample_size(10);
    for name in vocab_names() {
        let vocab = load_vocab(&name);
        g.bench_function(format!("json/{name}/cpu"), |b| {
            b.iter(|| {
                CompiledGrammar::new(json_grammar(), vocab.clone(), Limits::default())
                    .expect("compile")
            })
        });
        // With the vocabulary's trie built once (what a server compiling many schemas pays).
        let env = TokEnv::new(vocab.clone());
        g.bench_function(format!("json-shared-trie/{name}/cpu"), |b| {
            b.iter(|| {
                CompiledGrammar::with_env(json_grammar(), &env, Limits::default()).expect("compile")
            })
        });
    }
    g.finish();
}

/// Masks at named parser states, with a warm matcher (caches filled).
fn bench_states(c: &mut Criterion) {
    let mut g = c.benchmark_group("mask");
    for name in vocab_names() {
        let vocab = load_vocab(&name);
        let cg = Arc::new(
            CompiledGrammar::new(json_grammar(), vocab.clone(), Limits::default())
                .expect("compile"),
        );
        for (state, prefix) in [
            ("START", &b""[..]),
            ("AFTER_KEY", b"{\"name\""),
            ("IN_STRING", b"{\"name\":\"Jo"),
            ("IN_NUMBER", b"[12"),
        ] {
            let mut m = Matcher::new(cg.clone()).expect("matcher");
            m.consume_bytes(prefix).expect("valid prefix");
            let mut mask = TokenSet::new(vocab.vocab_len());
            g.bench_function(format!("{state}/{name}/cpu"), |b| {
                b.iter(|| m.compute_mask(&mut mask).expect("mask"))
            });
        }
    }
    g.finish();
}

criterion_group!(benches, bench_compile, bench_states);

fn main() {
    walk_table();
    benches();
    Criterion::default().configure_from_args().final_summary();
}
