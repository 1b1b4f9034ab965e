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
//! Both engines are timed twice, the same way each time: **cold**, a fresh compiled grammar
//! (formwork, on the shared `TokEnv`) or a fresh parser (llguidance, from its factory) per
//! document, so every document starts with empty mask and lexer caches; and **warm**, one
//! compiled grammar (formwork) or clones of one parser (llguidance, whose clones share its
//! lexer) for all documents, so caches persist across documents as in a server's steady state.
//! This bench walks one generic JSON grammar; what users' schemas compile to is measured
//! per schema by `benches/schema_mask.rs`.
//!
//! Run: `cargo bench --bench mask` (prints a table, then criterion's compile and named-state
//! benches).

#[path = "../tests/it/corpus.rs"]
mod corpus;
#[path = "common/data.rs"]
mod data;
#[path = "../tests/it/engine_json_grammar.rs"]
mod engine_json_grammar;
#[path = "common/llg.rs"]
mod llg;
#[path = "common/vocab.rs"]
mod vocab;

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, Criterion};
use formwork::matcher::{CompiledGrammar, Limits, Matcher};
use formwork::toktrie::{TokEnv, TokenId, TokenSet, Vocab};

use engine_json_grammar::{json_grammar, json_lark, json_like_vocab};

fn documents() -> Vec<String> {
    let docs = corpus::maskbench_valid_instances();
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
    vocab::registry_vocab(name)
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

/// Whether each document gets fresh caches (a new compiled grammar / a new parser) or shares
/// one set across all documents.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Caches {
    /// formwork: one `CompiledGrammar` for all documents; llguidance: clones of one parser,
    /// which share its lexer and caches.
    Warm,
    /// formwork: a `CompiledGrammar` per document (on the shared `TokEnv`); llguidance: a
    /// parser per document from its factory.
    Cold,
}

fn walk_formwork(
    env: &TokEnv,
    docs: &[Vec<TokenId>],
    caches: Caches,
    trace: bool,
) -> Vec<Duration> {
    let shared = Arc::new(
        CompiledGrammar::with_env(json_grammar(), env, Limits::default()).expect("compile"),
    );
    let mut mask = TokenSet::new(env.trie().vocab_len());
    let mut times = Vec::new();
    for d in docs {
        let cg = match caches {
            Caches::Warm => shared.clone(),
            Caches::Cold => Arc::new(
                CompiledGrammar::with_env(json_grammar(), env, Limits::default()).expect("compile"),
            ),
        };
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
    caches: Caches,
) -> Vec<Option<Vec<Duration>>> {
    let fresh = || {
        let grm = llguidance::api::TopLevelGrammar::from_lark(lark.to_string());
        llguidance::Matcher::new(factory.create_parser(grm))
    };
    let shared = fresh();
    docs.iter()
        .map(|d| {
            let mut m = match caches {
                Caches::Warm => shared.clone(),
                Caches::Cold => fresh(),
            };
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
        CompiledGrammar::new(json_grammar(), vocab.clone(), Limits::default()).expect("compile");
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
        // Documents llguidance cannot take are left out for both engines.
        let llg_take = walk_llguidance(&factory, &json_lark(), &toks, Caches::Cold);
        let skipped = llg_take.iter().filter(|d| d.is_none()).count();
        let toks: Vec<Vec<TokenId>> = toks
            .into_iter()
            .zip(&llg_take)
            .filter(|(_, l)| l.is_some())
            .map(|(t, _)| t)
            .collect();
        if toks.is_empty() {
            println!("{name}: llguidance took none of the documents; skipped");
            continue;
        }
        println!(
            "{name} ({} ids, {ntok} document tokens, {skipped} documents llguidance could not take skipped): compile formwork {:.1} ms ({:.2} ms with a shared trie), llguidance factory {:.1} ms",
            vocab.vocab_len(),
            fw_compile.as_secs_f64() * 1e3,
            fw_compile_shared.as_secs_f64() * 1e3,
            llg_compile.as_secs_f64() * 1e3
        );
        let trace = std::env::var_os("FORMWORK_BENCH_TRACE").is_some();
        // Both sides run the same way in each row: cold (fresh caches per document: what a
        // user who compiles a grammar and generates once pays) and warm (caches shared across
        // all documents: a server's steady state on one grammar).
        for caches in [Caches::Cold, Caches::Warm] {
            let fw = Stats::new(walk_formwork(
                &env,
                &toks,
                caches,
                trace && caches == Caches::Cold,
            ));
            let llg = Stats::new(
                walk_llguidance(&factory, &json_lark(), &toks, caches)
                    .into_iter()
                    .flatten()
                    .flatten()
                    .collect(),
            );
            report(&format!("{name} {caches:?}"), &fw, &llg);
        }
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
