//! Per-schema mask benchmark: the protocol of JSONSchemaBench's MaskBench, for formwork and
//! llguidance 1.9.1 side by side in the same run.
//!
//! Each schema of `maskbench-sample.jsonl` (or the full `maskbench/` set) is compiled fresh
//! against the vocabulary; each of its valid and invalid instances (compact JSON, keys in
//! instance order, tokenized canonically by the vocabulary's own tokenizer, the same tokens for
//! both engines) is walked token by token from a new matcher on that compiled grammar, with a
//! full mask computed before every token, until the instance ends or a token is masked out.
//! The instances of a schema share the compiled grammar's caches (formwork: the
//! `CompiledGrammar`; llguidance: clones of one parser, which share its lexer), as a server's
//! sequences on one schema do; nothing is shared between schemas but the vocabulary's trie
//! (formwork's `TokEnv`, llguidance's `ParserFactory`). One thread. Compact whitespace for
//! both (llguidance: `whitespace_flexible: false`); formwork's property order is the MaskBench
//! ratchet's `any` unless `FORMWORK_BENCH_ORDER` says otherwise (llguidance writes
//! properties in schema order, so it rejects some out-of-order instances earlier: each engine's
//! statistics are over its own masks, and the count of masks is printed beside them).
//!
//! Printed per vocabulary: masks, mean / p50 / p90 / p99 / p99.9 / max per mask, total mask
//! time, masks over 1 ms, time to first mask (compile + first mask) p50 / p99 / max, step-limit
//! errors, valid instances rejected; then the schemas with the most formwork mask time.
//!
//! Environment:
//! - `FORMWORK_BENCH_VOCABS`: comma-separated registry model names (default
//!   `smollm2-135m,gemma3-270m`);
//! - `FORMWORK_BENCH_SET`: `sample` (default, 619 schemas) or `full` (11,305);
//! - `FORMWORK_BENCH_SCHEMAS`: how many schemas (default all, spread evenly);
//! - `FORMWORK_BENCH_IDS`: only these comma-separated ids;
//! - `FORMWORK_BENCH_ORDER`: `schema`, `any` or `window:N` (default `any`);
//! - `FORMWORK_BENCH_SLOWEST`: how many of the slowest schemas to list (default 10);
//! - `FORMWORK_BENCH_SLOWEST_TTFM`: also list this many schemas with the largest formwork
//!   TTFM, with llguidance's beside them (default 0);
//! - `FORMWORK_BENCH_TAIL_US`: also list the schemas with the most formwork masks slower
//!   than this many µs (where the p99 comes from), with llguidance's count beside them;
//! - `FORMWORK_NO_PEER=1`: formwork only;
//! - `FORMWORK_BENCH_CLOCK=cpu`: time masks and TTFM by the thread's CPU time instead of the
//!   wall clock (both engines alike), so time the thread spends preempted on a busy machine
//!   does not count; each reading is a system call (~0.3 µs), so small masks read larger.
//!
//! `-- --id ID` dumps one schema's per-token mask times with the matcher's state (lexeme set,
//! DFA state, lexeme length, parser rows, cache outcome) to stdout, for profiling. The schema
//! runs once unseen first, so the vocabulary slices are warm as in a bench run.
//!
//! Run: `cargo bench --bench schema_mask` (release; about 2 minutes per vocabulary on the
//! sample), or `cargo bench --bench schema_mask -- --id Github_hard---o9843`.

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

use formwork::matcher::{CompiledGrammar, Limits, Matcher, MatcherError};
use formwork::schema::{compile, CompileOptions, PropertyOrder};
use formwork::toktrie::{TokEnv, TokenId, TokenSet, Vocab};
use serde_json::Value;

/// One MaskBench schema with its instances as token sequences.
struct Row {
    id: String,
    schema: Value,
    /// (tokens, valid) per instance.
    tests: Vec<(Vec<TokenId>, bool)>,
}

fn load_rows(vocab: &dyn Vocab) -> Vec<Row> {
    let full = std::env::var("FORMWORK_BENCH_SET").as_deref() == Ok("full");
    let ids: Option<Vec<String>> = std::env::var("FORMWORK_BENCH_IDS")
        .ok()
        .map(|s| s.split(',').map(|x| x.trim().to_string()).collect());
    let rows: Vec<Row> = corpus::maskbench_rows(&corpus::maskbench_files(full))
        .into_iter()
        .filter(|r| ids.as_ref().is_none_or(|ids| ids.contains(&r.id)))
        .map(|r| Row {
            id: r.id,
            schema: r.schema,
            tests: r
                .tests
                .iter()
                .map(|(data, valid)| {
                    let text = serde_json::to_string(data).expect("serializable");
                    (vocab.tokenize(text.as_bytes()), *valid)
                })
                .collect(),
        })
        .collect();
    let want: usize = std::env::var("FORMWORK_BENCH_SCHEMAS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(rows.len());
    let step = (rows.len() / want.max(1)).max(1);
    rows.into_iter().step_by(step).take(want).collect()
}

fn options() -> CompileOptions {
    let property_order = order::from_env(PropertyOrder::Any);
    CompileOptions {
        property_order,
        ..Default::default()
    }
}

/// What one engine did on one schema.
#[derive(Default, Clone)]
struct Outcome {
    masks: Vec<Duration>,
    ttfm: Option<Duration>,
    compiled: bool,
    step_limit: usize,
    /// Instances not walked because the schema's walks had used up [`SCHEMA_BUDGET`].
    skipped: usize,
    valid_rejected: usize,
    invalid_accepted: usize,
}

/// Walking time per schema (masks and consumes) after which its remaining instances are left
/// unfinished (and counted), so one pathological schema cannot hold the run for minutes.
const SCHEMA_BUDGET: Duration = Duration::from_secs(20);

/// How an instance walk ended.
enum Walk {
    Accepted,
    Rejected,
    StepLimit,
    /// The schema's [`SCHEMA_BUDGET`] ran out during the walk.
    OutOfBudget,
}

/// Whether a matcher error is a budget (time or fuel), not a rejection.
fn is_budget(e: &MatcherError) -> bool {
    matches!(
        e,
        MatcherError::TimeExceeded { .. } | MatcherError::LimitExceeded { .. }
    )
}

/// A reading of the clock masks are timed with: the wall clock, or with
/// `FORMWORK_BENCH_CLOCK=cpu` the calling thread's CPU time.
fn clock() -> Duration {
    static CPU: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    static BASE: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    if *CPU.get_or_init(|| std::env::var("FORMWORK_BENCH_CLOCK").as_deref() == Ok("cpu")) {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid timespec to write to.
        unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
    } else {
        BASE.get_or_init(Instant::now).elapsed()
    }
}

fn walk_formwork(
    cg: &Arc<CompiledGrammar>,
    tokens: &[TokenId],
    masks: &mut Vec<Duration>,
    deadline: Instant,
    dump: bool,
) -> Walk {
    let Ok(mut m) = Matcher::new(cg.clone()) else {
        return Walk::Rejected;
    };
    let vocab = cg.vocab().clone();
    let mut mask = TokenSet::new(vocab.vocab_len());
    for (i, &t) in tokens.iter().enumerate() {
        if Instant::now() > deadline {
            return Walk::OutOfBudget;
        }
        let before = dump.then(|| m.debug_state());
        let t0 = clock();
        let r = m.compute_mask(&mut mask);
        let dt = clock() - t0;
        masks.push(dt);
        if dump {
            println!(
                "{i}\t{:.1}\t{:?}\t{}\t{}",
                dt.as_secs_f64() * 1e6,
                String::from_utf8_lossy(vocab.token_bytes(t)),
                mask.count(),
                before.unwrap_or_default()
            );
        }
        match r {
            Ok(()) => {}
            Err(e) if is_budget(&e) => return Walk::StepLimit,
            Err(_) => return Walk::Rejected,
        }
        if !mask.contains(t) || m.consume_token(t).is_err() {
            return Walk::Rejected;
        }
    }
    if m.is_accepting() {
        Walk::Accepted
    } else {
        Walk::Rejected
    }
}

fn run_formwork(row: &Row, env: &TokEnv, dump: bool) -> Outcome {
    let mut out = Outcome::default();
    let t0 = clock();
    let Ok(c) = compile(&row.schema, &options()) else {
        return out;
    };
    let Ok(cg) = CompiledGrammar::with_env(c.grammar, env, Limits::default()) else {
        return out;
    };
    let cg = Arc::new(cg);
    let Ok(mut m) = Matcher::new(cg.clone()) else {
        return out;
    };
    let mut mask = TokenSet::new(env.vocab().vocab_len());
    if m.compute_mask(&mut mask).is_err() {
        return out;
    }
    out.ttfm = Some(clock() - t0);
    out.compiled = true;
    let deadline = Instant::now() + SCHEMA_BUDGET;
    for (tokens, valid) in &row.tests {
        if Instant::now() > deadline {
            out.skipped += 1;
            continue;
        }
        if dump {
            println!("# instance valid={valid} tokens={}", tokens.len());
        }
        match (
            walk_formwork(&cg, tokens, &mut out.masks, deadline, dump),
            valid,
        ) {
            (Walk::StepLimit, _) => out.step_limit += 1,
            (Walk::OutOfBudget, _) => out.skipped += 1,
            (Walk::Rejected, true) => out.valid_rejected += 1,
            (Walk::Accepted, false) => out.invalid_accepted += 1,
            _ => {}
        }
    }
    out
}

/// `schema` with llguidance's options for compact whitespace and no lenient mode.
fn llg_schema(schema: &Value) -> Value {
    let mut s = schema.clone();
    if let Value::Object(m) = &mut s {
        m.insert(
            "x-guidance".into(),
            serde_json::json!({ "whitespace_flexible": false, "lenient": false }),
        );
    }
    s
}

fn run_llguidance(row: &Row, factory: &llguidance::ParserFactory) -> Outcome {
    let mut out = Outcome::default();
    let t0 = clock();
    let grm = llguidance::api::TopLevelGrammar::from_json_schema(llg_schema(&row.schema));
    let Ok(parser) = factory.create_parser(grm) else {
        return out;
    };
    // Clones of this matcher share its lexer and caches, as instances share formwork's
    // compiled grammar.
    let mut base = llguidance::Matcher::new(Ok(parser));
    if base.compute_mask().is_err() {
        return out;
    }
    out.ttfm = Some(clock() - t0);
    out.compiled = true;
    let deadline = Instant::now() + SCHEMA_BUDGET;
    'instances: for (tokens, valid) in &row.tests {
        if Instant::now() > deadline {
            out.skipped += 1;
            continue;
        }
        let mut m = base.clone();
        let mut accepted = true;
        for &t in tokens {
            if Instant::now() > deadline {
                out.skipped += 1;
                continue 'instances;
            }
            let t0 = clock();
            let r = m.compute_mask();
            out.masks.push(clock() - t0);
            match r {
                Ok(mask) if mask.is_allowed(t.0) => {}
                _ => {
                    accepted = false;
                    break;
                }
            }
            if m.consume_token(t.0).is_err() {
                accepted = false;
                break;
            }
        }
        let accepted = accepted && m.is_accepting().unwrap_or(false);
        match (accepted, valid) {
            (false, true) => out.valid_rejected += 1,
            (true, false) => out.invalid_accepted += 1,
            _ => {}
        }
    }
    out
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// Summary columns of one engine: masks, mean, p50, p90, p99, p99.9, max (µs), total (s),
/// masks over 1 ms, TTFM p50 / p99 / max (ms), compiled, step-limit errors, instances
/// skipped, valid rejected, invalid accepted.
fn summary(outcomes: &[Outcome]) -> Vec<String> {
    let mut masks: Vec<Duration> = outcomes.iter().flat_map(|o| o.masks.clone()).collect();
    masks.sort();
    let total: Duration = masks.iter().sum();
    let mean = if masks.is_empty() {
        Duration::ZERO
    } else {
        total / masks.len() as u32
    };
    let mut ttfm: Vec<Duration> = outcomes.iter().filter_map(|o| o.ttfm).collect();
    ttfm.sort();
    let ms = |d: Duration| format!("{:.2}", d.as_secs_f64() * 1e3);
    let sum = |f: fn(&Outcome) -> usize| outcomes.iter().map(f).sum::<usize>().to_string();
    vec![
        masks.len().to_string(),
        format!("{:.1}", us(mean)),
        format!("{:.1}", us(pct(&masks, 0.5))),
        format!("{:.1}", us(pct(&masks, 0.9))),
        format!("{:.1}", us(pct(&masks, 0.99))),
        format!("{:.1}", us(pct(&masks, 0.999))),
        format!("{:.1}", us(masks.last().copied().unwrap_or_default())),
        format!("{:.2}", total.as_secs_f64()),
        masks
            .iter()
            .filter(|d| **d > Duration::from_millis(1))
            .count()
            .to_string(),
        ms(pct(&ttfm, 0.5)),
        ms(pct(&ttfm, 0.99)),
        ms(ttfm.last().copied().unwrap_or_default()),
        outcomes.iter().filter(|o| o.compiled).count().to_string(),
        sum(|o| o.step_limit),
        sum(|o| o.skipped),
        sum(|o| o.valid_rejected),
        sum(|o| o.invalid_accepted),
    ]
}

const COLUMNS: [&str; 17] = [
    "masks",
    "mean µs",
    "p50 µs",
    "p90 µs",
    "p99 µs",
    "p99.9 µs",
    "max µs",
    "total s",
    "masks > 1 ms",
    "TTFM p50 ms",
    "TTFM p99 ms",
    "TTFM max ms",
    "schemas compiled",
    "step-limit errors",
    "instances not finished (20 s per schema)",
    "valid rejected",
    "invalid accepted",
];

fn table(fw: &[Outcome], llg: Option<&[Outcome]>) {
    let a = summary(fw);
    let b = llg.map(summary);
    println!("| | formwork | llguidance 1.9.1 |");
    println!("|---|---|---|");
    for (i, c) in COLUMNS.iter().enumerate() {
        let other = b.as_ref().map_or("—", |b| b[i].as_str());
        println!("| {c} | {} | {other} |", a[i]);
    }
}

/// The schemas holding the most of formwork's masks slower than `over` (where its p99 comes
/// from), with llguidance's count on the same schema beside them.
fn tail(rows: &[Row], fw: &[Outcome], lg: &[Outcome], over: Duration) {
    let slow = |o: &Outcome| {
        let v: Vec<Duration> = o.masks.iter().copied().filter(|d| *d > over).collect();
        (v.len(), v.iter().sum::<Duration>())
    };
    let mut by_count: Vec<(usize, Duration, usize)> = fw
        .iter()
        .enumerate()
        .map(|(i, o)| {
            let (n, t) = slow(o);
            (n, t, i)
        })
        .filter(|x| x.0 > 0)
        .collect();
    by_count.sort_by(|x, y| y.cmp(x));
    let all: usize = by_count.iter().map(|x| x.0).sum();
    let peer_all: usize = lg.iter().map(|o| slow(o).0).sum();
    println!(
        "masks over {} µs: formwork {all} in {} schemas; llguidance {peer_all}",
        over.as_micros(),
        by_count.len()
    );
    for &(n, t, i) in by_count.iter().take(25) {
        println!(
            "tail: {}  formwork {n} masks ({:.1} ms) of {}{}",
            rows[i].id,
            t.as_secs_f64() * 1e3,
            fw[i].masks.len(),
            lg.get(i).map_or(String::new(), |o| {
                let (m, u) = slow(o);
                format!(
                    "; llguidance {m} ({:.1} ms) of {}",
                    u.as_secs_f64() * 1e3,
                    o.masks.len()
                )
            })
        );
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let dump_id = args
        .iter()
        .position(|a| a == "--id")
        .and_then(|i| args.get(i + 1).cloned());
    if let Some(id) = &dump_id {
        std::env::set_var("FORMWORK_BENCH_IDS", id);
    }
    let peer = std::env::var("FORMWORK_NO_PEER").as_deref() != Ok("1") && dump_id.is_none();
    let vocabs = std::env::var("FORMWORK_BENCH_VOCABS")
        .unwrap_or_else(|_| "smollm2-135m,gemma3-270m".into());
    let slowest: usize = std::env::var("FORMWORK_BENCH_SLOWEST")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    for name in vocabs.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let vocab = vocab::registry_vocab(name);
        let rows = load_rows(vocab.as_ref());
        let env = TokEnv::new(vocab.clone());
        if dump_id.is_some() {
            println!("# mask\tµs\ttoken\tallowed\tstate before the mask");
            for row in &rows {
                // A first run, not shown, computes the vocabulary slices the schema's lexer
                // states use, as the schemas before it would in a bench run (the environment
                // is per vocabulary); the shown run compiles the schema afresh.
                run_formwork(row, &env, false);
                let o = run_formwork(row, &env, true);
                println!("# {}: ttfm {:?}", row.id, o.ttfm);
            }
            continue;
        }
        let llg_env = llg::llg_env(vocab.as_ref());
        let mut factory =
            llguidance::ParserFactory::new_simple(&llg_env).expect("llguidance factory");
        factory.quiet();
        let mut fw = Vec::new();
        let mut lg = Vec::new();
        let t0 = Instant::now();
        for (i, row) in rows.iter().enumerate() {
            let t = Instant::now();
            fw.push(run_formwork(row, &env, false));
            let a = t.elapsed();
            let t = Instant::now();
            if peer {
                lg.push(run_llguidance(row, &factory));
            }
            let b = t.elapsed();
            if a + b > Duration::from_secs(2) || (i + 1) % 100 == 0 {
                eprintln!(
                    "[{}/{}] {}: formwork {:.1} s, llguidance {:.1} s",
                    i + 1,
                    rows.len(),
                    row.id,
                    a.as_secs_f64(),
                    b.as_secs_f64()
                );
            }
        }
        println!(
            "\nPer-schema masks, {} MaskBench schemas, {name} vocabulary ({} tokens), order {:?}, \
             one thread ({:.0} s)",
            rows.len(),
            vocab.vocab_len(),
            options().property_order,
            t0.elapsed().as_secs_f64()
        );
        table(&fw, peer.then_some(lg.as_slice()));
        if peer {
            // Like with like: an engine that compiles more schemas also walks more masks, so
            // the totals above are not over the same work when the compiled sets differ.
            let both: Vec<usize> = (0..rows.len())
                .filter(|&i| fw[i].compiled && lg[i].compiled)
                .collect();
            if both.len() < rows.len() {
                let pick = |v: &[Outcome]| both.iter().map(|&i| v[i].clone()).collect::<Vec<_>>();
                println!(
                    "\nThe same, on the {} schemas both engines compile",
                    both.len()
                );
                table(&pick(&fw), Some(&pick(&lg)));
            }
        }
        let slowest_ttfm: usize = std::env::var("FORMWORK_BENCH_SLOWEST_TTFM")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let mut by_ttfm: Vec<(Duration, usize)> = fw
            .iter()
            .enumerate()
            .filter_map(|(i, o)| Some((o.ttfm?, i)))
            .collect();
        by_ttfm.sort_by(|x, y| y.cmp(x));
        for &(ttfm, i) in by_ttfm.iter().take(slowest_ttfm) {
            println!(
                "slow ttfm: {}  formwork {:.2} ms{}",
                rows[i].id,
                ttfm.as_secs_f64() * 1e3,
                lg.get(i)
                    .and_then(|o| o.ttfm)
                    .map_or(String::new(), |t| format!(
                        "; llguidance {:.2} ms",
                        t.as_secs_f64() * 1e3
                    ))
            );
        }
        if let Some(us) = std::env::var("FORMWORK_BENCH_TAIL_US")
            .ok()
            .and_then(|s| s.parse::<u64>().ok())
        {
            tail(&rows, &fw, &lg, Duration::from_micros(us));
        }
        let mut by_total: Vec<(Duration, usize)> = fw
            .iter()
            .enumerate()
            .map(|(i, o)| (o.masks.iter().sum(), i))
            .collect();
        by_total.sort_by(|x, y| y.cmp(x));
        for &(total, i) in by_total.iter().take(slowest) {
            let max = fw[i].masks.iter().max().copied().unwrap_or_default();
            let peer_total: Option<Duration> = lg.get(i).map(|o| o.masks.iter().sum());
            println!(
                "slow: {}  formwork total {:.1} ms, max {:.1} ms, {} masks{}{}",
                rows[i].id,
                total.as_secs_f64() * 1e3,
                max.as_secs_f64() * 1e3,
                fw[i].masks.len(),
                peer_total.map_or(String::new(), |t| format!(
                    "; llguidance total {:.1} ms",
                    t.as_secs_f64() * 1e3
                )),
                if fw[i].step_limit > 0 {
                    format!("; {} step-limit errors", fw[i].step_limit)
                } else {
                    String::new()
                }
            );
        }
    }
}
