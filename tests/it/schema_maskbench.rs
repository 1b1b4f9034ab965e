//! MaskBench conformance ratchet (`tests/expected/maskbench.json`).
//!
//! Compiles each schema of the 619-schema sample, feeds the canonical SmolLM2 tokenization of
//! each instance's compact JSON (keys in instance order) through the matcher, computing the
//! mask before each token (it must agree with `consume_token`), and records per schema its
//! worst instance's outcome: `pass`, `compile_error:<category>`, `budget` (a matcher budget ran
//! out: for an invalid instance that is not a rejection), `matcher_error`, `valid_rejected`,
//! `invalid_accepted` or `mask_disagrees`. Fails on any regression or unrecorded improvement,
//! and on any `invalid_accepted` or `mask_disagrees` whatever the ratchet file says.
//!
//! CI (sample):   cargo test --test it schema_maskbench -- --nocapture
//! Full (11,305): FORMWORK_MASKBENCH=full cargo test --test it schema_maskbench -- --nocapture
//! (about an hour on one loaded core; FORMWORK_MASKBENCH_MASKS=none|first|all sets which
//! instances get per-token masks, see [`Masks`])
//! (the full run prints the table and checks `tests/expected/maskbench_full.json`).
//! One or more schemas by id, printing each outcome:
//! FORMWORK_MASKBENCH_ID=Github_ultra---o9981,... cargo test --test it schema_maskbench -- --nocapture
//! Property order: FORMWORK_MASKBENCH_ORDER=any|schema|window:N (default [`RATCHET_ORDER`]); a run under
//! the other order prints its table and differences but is not checked against the ratchet.
//! A rejected valid instance's message quotes the text around the rejected token
//! (`…before<<>>after…`), so the ratchet file says where each one failed.

use std::collections::BTreeMap;
use std::time::Instant;

use std::sync::Arc;

use formwork::matcher::{CompiledGrammar, Limits, Matcher};
use formwork::model::registry::Registry;
use formwork::model::tokenizer::GgufTokenizer;
use formwork::schema::{compile, CompileOptions, PropertyOrder, SchemaError};
use formwork::toktrie::{TokEnv, TokenSet, Vocab};
use serde_json::{json, Value};

use crate::corpus::{maskbench_files, maskbench_rows, MaskBenchRow};
use crate::model_fetch::fetched;
use crate::schema_ratchet::{assert_none_of, check, load, percentile, rank};
use crate::schema_support::{crate_path, feed_tokens, is_budget_error, test_limits, Fed};

/// Timings of one run, in microseconds.
#[derive(Default)]
struct Timings {
    compile: Vec<f64>,
    ttfm: Vec<f64>,
    tbm: Vec<f64>,
}

fn smollm2() -> Arc<GgufTokenizer> {
    let registry = Registry::builtin().expect("model registry");
    let entry = registry
        .get("smollm2-135m")
        .expect("smollm2 in the registry");
    let path = fetched("smollm2-135m");
    Arc::new(GgufTokenizer::for_model(entry, &path).expect("smollm2 tokenizer"))
}

/// The run's one vocabulary + token trie, shared by every compiled grammar.
fn tok_env(tok: &Arc<GgufTokenizer>) -> TokEnv {
    let vocab: Arc<dyn Vocab> = tok.clone();
    TokEnv::new(vocab)
}

/// The property order the ratchet files were recorded under. MaskBench's instances list their
/// keys in arbitrary order (the validators that labelled them ignore order), so schema order
/// rejected 127 valid instances of the full set. Any order is exact for objects of any size
/// (a permutation rule; docs/schema-support.md, "Which property order the ratchets use").
const RATCHET_ORDER: PropertyOrder = PropertyOrder::Any;

/// The run's property order: `FORMWORK_MASKBENCH_ORDER`, else [`RATCHET_ORDER`].
fn run_order() -> PropertyOrder {
    match std::env::var("FORMWORK_MASKBENCH_ORDER").as_deref() {
        Ok("any") => PropertyOrder::Any,
        Ok("schema") => PropertyOrder::Schema,
        Ok(w) if w.starts_with("window:") => PropertyOrder::Window(
            w["window:".len()..]
                .parse()
                .expect("FORMWORK_MASKBENCH_ORDER=window:N"),
        ),
        Ok(other) => {
            panic!("FORMWORK_MASKBENCH_ORDER must be `any`, `schema` or `window:N`, not {other:?}")
        }
        Err(_) => RATCHET_ORDER,
    }
}

/// The compile options of a run: the defaults, under `order`, without the compile-time budget
/// (`max_compile_ms`, a wall-clock bound: a debug build on a loaded machine takes several
/// seconds over the slowest schemas), so outcomes do not depend on load, as with the matcher's
/// [`ratchet_limits`].
fn run_options(order: PropertyOrder) -> CompileOptions {
    CompileOptions {
        property_order: order,
        max_compile_ms: u64::MAX,
        ..Default::default()
    }
}

/// `text` around byte `offset` (`…before<<>>after…`, cut at character boundaries): where an
/// instance was rejected.
fn context(text: &str, offset: usize) -> String {
    let mut lo = offset.saturating_sub(40).min(text.len());
    while !text.is_char_boundary(lo) {
        lo -= 1;
    }
    let mut mid = offset.min(text.len());
    while !text.is_char_boundary(mid) {
        mid -= 1;
    }
    let mut hi = (offset + 20).min(text.len());
    while !text.is_char_boundary(hi) {
        hi += 1;
    }
    format!("…{}<<>>{}…", &text[lo..mid], &text[mid..hi])
}

/// The matcher budgets of the ratchet: the test budgets ([`test_limits`]: the defaults
/// without the wall-clock bound), so an outcome depends on the work a schema needs (fuel, item
/// and state counts), not on how loaded the machine is.
fn ratchet_limits() -> Limits {
    test_limits()
}

/// One instance's outcome under its label: `None` when it is answered right (a valid instance
/// accepted, an invalid one rejected), else the category and a message.
fn judge(fed: Fed, valid: bool, text: &str) -> Option<(&'static str, String)> {
    match (fed, valid) {
        (Fed::Accepted, true) | (Fed::Rejected(_), false) => None,
        (Fed::Rejected(e), true) => {
            // "... at byte N...": quote the text there.
            let at = e
                .split("at byte ")
                .nth(1)
                .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
                .and_then(|n| n.parse::<usize>().ok());
            let near = at.map(|o| format!(" {}", context(text, o)));
            Some(("valid_rejected", format!("{e}{}", near.unwrap_or_default())))
        }
        (Fed::Accepted, false) => Some(("invalid_accepted", text.to_string())),
        // A budget running out is neither an acceptance nor a rejection, for either label.
        (Fed::Budget(e), _) => Some(("budget", e)),
        (Fed::MaskDisagrees(e), _) => Some(("mask_disagrees", e)),
        (Fed::Error(e), _) => Some(("matcher_error", e)),
    }
}

/// Which instances get a mask computed before each token (and checked against the consume).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Masks {
    /// None: `consume_token` alone decides acceptance.
    None,
    /// The first valid instance of each schema: agreement is checked on every schema at a
    /// fraction of the cost (the CI default in debug builds, where masks over the 49k-token
    /// vocabulary on every instance multiplied the sample's run time).
    FirstValid,
    /// Every instance (the default in release builds).
    All,
}

impl Masks {
    /// `FORMWORK_MASKBENCH_MASKS=none|first|all`, else `first` in debug builds and `all` in
    /// release ones.
    fn from_env() -> Self {
        match std::env::var("FORMWORK_MASKBENCH_MASKS").as_deref() {
            Ok("none") => Masks::None,
            Ok("first") => Masks::FirstValid,
            Ok("all") => Masks::All,
            Ok(other) => {
                panic!("FORMWORK_MASKBENCH_MASKS must be none, first or all, not {other:?}")
            }
            Err(_) if cfg!(debug_assertions) => Masks::FirstValid,
            Err(_) => Masks::All,
        }
    }
}

/// Budget errors of a run, by the label of the instance they hit: one on an invalid instance
/// is not a rejection, so it is counted here and never as one.
#[derive(Default, Debug)]
struct Budgets {
    valid: usize,
    invalid: usize,
}

/// One schema's outcome: the category and a message. Instances are fed as the canonical
/// SmolLM2 tokenization of their compact JSON (keys in instance order) through the matcher.
/// Every grammar is compiled against `env`, the one vocabulary + token trie of the run (as a
/// server shares it), so TTFM is the schema's own cost.
fn run_row(
    row: &MaskBenchRow,
    opts: &CompileOptions,
    tok: &Arc<GgufTokenizer>,
    env: &TokEnv,
    masks: Masks,
    t: &mut Timings,
    budgets: &mut Budgets,
) -> (String, String) {
    let t0 = Instant::now();
    let compiled = compile(&row.schema, opts);
    t.compile.push(t0.elapsed().as_secs_f64() * 1e6);
    let cg = match compiled {
        Ok(c) => match CompiledGrammar::with_env(c.grammar, env, ratchet_limits()) {
            Ok(cg) => {
                let cg = Arc::new(cg);
                let first = Matcher::new(cg.clone()).and_then(|mut m| {
                    let mut mask = TokenSet::new(tok.vocab_len());
                    m.compute_mask(&mut mask)
                });
                if let Err(e) = first {
                    let cat = if is_budget_error(&e) {
                        "budget"
                    } else {
                        "compile_error:matcher"
                    };
                    return (cat.into(), format!("first mask: {e}"));
                }
                t.ttfm.push(t0.elapsed().as_secs_f64() * 1e6);
                Some(cg)
            }
            Err(e) => return ("compile_error:matcher".into(), e.to_string()),
        },
        // An unsatisfiable schema is judged as a grammar that accepts nothing.
        Err(SchemaError::Unsatisfiable { .. }) => None,
        Err(e) => return (format!("compile_error:{}", e.category()), e.to_string()),
    };
    // Every instance is run, and the schema's outcome is its worst instance's (the first of
    // equal rank): a budget error on one instance must not hide an accepted invalid one.
    let mut worst: Option<(&'static str, String)> = None;
    let first_valid = row.tests.iter().position(|(_, v)| *v);
    for (i, (data, valid)) in row.tests.iter().enumerate() {
        let text = serde_json::to_string(data).expect("serializable");
        let with_masks = match masks {
            Masks::None => false,
            Masks::FirstValid => Some(i) == first_valid,
            Masks::All => true,
        };
        let fed = match &cg {
            Some(cg) => feed_tokens(cg, &tok.tokenize(text.as_bytes()), with_masks, |d| {
                t.tbm.push(d.as_secs_f64() * 1e6)
            }),
            None => Fed::Rejected("the schema is unsatisfiable".to_string()),
        };
        if matches!(fed, Fed::Budget(_)) {
            if *valid {
                budgets.valid += 1;
            } else {
                budgets.invalid += 1;
            }
        }
        if let Some((cat, msg)) = judge(fed, *valid, &text) {
            if worst.as_ref().is_none_or(|(w, _)| rank(cat) > rank(w)) {
                worst = Some((cat, format!("test {i}: {msg}")));
            }
        }
    }
    match worst {
        Some((cat, msg)) => (cat.into(), msg),
        None => ("pass".into(), String::new()),
    }
}

/// Runs the schemas named in `ids` (from the full set) and prints each outcome with its time,
/// without checking a ratchet file: the debugging aid for single schemas.
fn run_ids(ids: &str) {
    let want: Vec<&str> = ids.split(',').map(str::trim).collect();
    let rows: Vec<MaskBenchRow> = maskbench_rows(&maskbench_files(true))
        .into_iter()
        .filter(|r| want.contains(&r.id.as_str()))
        .collect();
    let tok = smollm2();
    let env = tok_env(&tok);
    let opts = run_options(run_order());
    for row in &rows {
        let mut t = Timings::default();
        let t0 = Instant::now();
        let (cat, msg) = run_row(
            row,
            &opts,
            &tok,
            &env,
            Masks::All,
            &mut t,
            &mut Budgets::default(),
        );
        println!(
            "{}: {cat} {msg} ({:.1} ms, compile {:.0} µs)",
            row.id,
            t0.elapsed().as_secs_f64() * 1e3,
            t.compile.first().copied().unwrap_or(f64::NAN)
        );
    }
    let missing: Vec<&&str> = want
        .iter()
        .filter(|w| !rows.iter().any(|r| r.id == **w))
        .collect();
    assert!(missing.is_empty(), "unknown ids: {missing:?}");
}

fn run(full: bool) {
    if let Ok(ids) = std::env::var("FORMWORK_MASKBENCH_ID") {
        run_ids(&ids);
        return;
    }
    let rows = maskbench_rows(&maskbench_files(full));
    let order = run_order();
    let opts = run_options(order);
    let tok = smollm2();
    let env = tok_env(&tok);
    // Per-token masks: each instance token must be in the mask computed before it (and a
    // refused one outside it), which `consume_token` alone does not show; they also give TBM.
    let masks = Masks::from_env();
    let mut t = Timings::default();
    let mut budgets = Budgets::default();
    let mut got = BTreeMap::new();
    let mut file = serde_json::Map::new();
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    let started = Instant::now();
    for (i, row) in rows.iter().enumerate() {
        // The full run takes about an hour: a progress line every 500 schemas says how far an
        // interrupted run got.
        if full && i > 0 && i % 500 == 0 {
            println!(
                "progress: {i}/{} schemas, {:.0} s: {counts:?}",
                rows.len(),
                started.elapsed().as_secs_f64()
            );
        }
        let (cat, msg) = run_row(row, &opts, &tok, &env, masks, &mut t, &mut budgets);
        let key = if cat.starts_with("compile_error") {
            "compile errors".to_string()
        } else {
            cat.clone()
        };
        *counts.entry(key).or_default() += 1;
        got.insert(row.id.clone(), cat.clone());
        file.insert(
            row.id.clone(),
            if cat == "pass" {
                json!("pass")
            } else {
                // Messages can quote a whole instance (megabytes): the ratchet keeps the start.
                json!({"category": cat, "message": msg.chars().take(300).collect::<String>()})
            },
        );
    }
    for v in [&mut t.compile, &mut t.ttfm, &mut t.tbm] {
        v.sort_by(f64::total_cmp);
    }
    println!(
        "MaskBench ({} schemas{}, property order {order:?}), SmolLM2 tokenizer:",
        rows.len(),
        if full { ", full" } else { ", sample" }
    );
    println!("| engine   | passing | compile errors | valid rejected | invalid accepted | budget | compile p50/p99 | TTFM p50/p99 | TBM p50/p99 |");
    println!("|----------|---------|----------------|----------------|------------------|--------|-----------------|--------------|-------------|");
    println!(
        "| formwork | {} | {} | {} | {} | {} | {:.0}/{:.0} µs | {:.0}/{:.0} µs | {} |",
        counts.get("pass").copied().unwrap_or(0),
        counts.get("compile errors").copied().unwrap_or(0),
        counts.get("valid_rejected").copied().unwrap_or(0),
        counts.get("invalid_accepted").copied().unwrap_or(0),
        counts.get("budget").copied().unwrap_or(0),
        percentile(&t.compile, 50.0),
        percentile(&t.compile, 99.0),
        percentile(&t.ttfm, 50.0),
        percentile(&t.ttfm, 99.0),
        if masks == Masks::None {
            "not measured (FORMWORK_MASKBENCH_MASKS=none)".to_string()
        } else {
            format!(
                "{:.0}/{:.0} µs ({masks:?})",
                percentile(&t.tbm, 50.0),
                percentile(&t.tbm, 99.0)
            )
        },
    );
    let mut by_cat: BTreeMap<&str, usize> = BTreeMap::new();
    for c in got.values() {
        *by_cat.entry(c.as_str()).or_default() += 1;
    }
    println!("by category: {by_cat:?}");
    println!(
        "budget errors (not rejections): {} on valid instances, {} on invalid instances; \
         mask/consume agreement {}",
        budgets.valid,
        budgets.invalid,
        match masks {
            Masks::None => "not checked (FORMWORK_MASKBENCH_MASKS=none)",
            Masks::FirstValid => "checked on every token of each schema's first valid instance",
            Masks::All => "checked on every token of every instance",
        }
    );
    let name = if full {
        "tests/expected/maskbench_full.json"
    } else {
        "tests/expected/maskbench.json"
    };
    let path = crate_path(name);
    let expected = load(&path);
    let expected_flat: BTreeMap<String, String> = expected
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| {
                    let c = v
                        .as_str()
                        .map(str::to_string)
                        .unwrap_or_else(|| v["category"].as_str().unwrap_or("").to_string());
                    (k.clone(), c)
                })
                .collect()
        })
        .unwrap_or_default();
    // Hard checks under every order and before any bless: no schema accepts an invalid
    // instance, and no mask disagrees with consume (a bless must not be able to record either).
    assert_none_of(&got, &["invalid_accepted", "mask_disagrees"], "MaskBench");
    let command = if full {
        "FORMWORK_MASKBENCH=full cargo test --test it schema_maskbench -- --nocapture"
    } else {
        "cargo test --test it schema_maskbench -- --nocapture"
    };
    if order != RATCHET_ORDER {
        // The differences are printed, but the ratchet records the other order.
        let diffs = got
            .iter()
            .filter(|(k, g)| expected_flat.get(*k) != Some(*g))
            .count();
        println!(
            "property order {order:?}: {diffs} outcomes differ from {} (recorded under {RATCHET_ORDER:?}); not checked",
            path.display()
        );
        for (k, g) in &got {
            match expected_flat.get(k) {
                Some(e) if e != g => println!("  {k}: {e} -> {g}"),
                _ => {}
            }
        }
        return;
    }
    check(&path, &got, &expected_flat, Value::Object(file), command);
}

#[test]
fn schema_maskbench() {
    let full = std::env::var("FORMWORK_MASKBENCH").is_ok_and(|v| v == "full");
    // Deeply nested schemas recurse deeply: run on a thread with a large stack.
    std::thread::Builder::new()
        .stack_size(256 << 20)
        .spawn(move || run(full))
        .expect("spawn")
        .join()
        .expect("maskbench run panicked");
}
