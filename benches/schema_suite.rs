//! The JSON-Schema-Test-Suite per keyword file, formwork and llguidance 1.9.1 measured by the
//! same runner: a Markdown table of, per file and engine, tests passed (valid instances
//! accepted + invalid ones rejected), schemas refused (a compile error), valid instances
//! rejected, invalid instances accepted, and other outcomes (a budget or an engine error).
//!
//! Protocol, llguidance's own CI's (`json_schema_test_suite` in its repository) as far as one
//! runner allows: every file of `tests/<draft>/`, `tests/<draft>/optional/` and
//! `tests/<draft>/optional/format/` for drafts 2020-12 and 7; each case's schema compiled once
//! per engine, a compile error counting as refusing the schema; each instance's compact
//! serde_json text tokenized canonically by the SmolLM2 tokenizer (the same tokens for both
//! engines), fed one token at a time with the mask computed before each token and the token
//! required to be in it; at the end the engine must be accepting. A refused instance is a
//! rejection. llguidance: its CI's grammar `start: %json <schema>` with its default JSON
//! options (flexible whitespace, which admits the compact text; not lenient), one parser per
//! schema cloned per instance. formwork: the options of its ratchets
//! (`tests/it/schema_suite*.rs`): the draft directory's default draft; `format` an annotation
//! in the main files (what both drafts say by default, and what `format.json` tests) and
//! asserted in `optional/` (what `optional/format/` and `format-assertion.json` test);
//! property order `FORMWORK_BENCH_ORDER` (`schema`, the default, `any` or `window:N`); the
//! matcher's default limits without the wall-clock bound. llguidance always asserts the formats
//! it knows. An unsatisfiable schema is, for formwork, a grammar accepting nothing (as in the
//! ratchets).
//!
//! Environment: `FORMWORK_BENCH_VERBOSE=1` also lists every test that does not pass, per
//! engine, with its outcome.
//!
//! Run: `cargo bench --bench schema_suite` (release; the run itself takes seconds).

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

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use formwork::matcher::{CompiledGrammar, Limits, Matcher};
use formwork::schema::{compile, CompileOptions, Draft, PropertyOrder, SchemaError};
use formwork::toktrie::{TokEnv, TokenId, TokenSet, Vocab};
use serde_json::Value;

/// One instance: its description, tokens and label.
struct Instance {
    description: String,
    tokens: Vec<TokenId>,
    valid: bool,
}

/// One case of a suite file: its schema and instances.
struct Case {
    description: String,
    schema: Value,
    tests: Vec<Instance>,
}

/// How one engine did on one instance.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Outcome {
    Pass,
    ValidRejected,
    InvalidAccepted,
    /// A budget ran out, an engine error or a panic: neither an acceptance nor a rejection.
    Other,
}

/// One engine on one case: each instance's outcome, or the compile error refusing the schema.
type Verdict = Result<Vec<Outcome>, String>;

/// Per-file counts of one engine.
#[derive(Default, Clone, Copy)]
struct Counts {
    pass: usize,
    /// Schemas (cases) refused.
    refused: usize,
    valid_rejected: usize,
    invalid_accepted: usize,
    other: usize,
}

impl Counts {
    fn add(&mut self, o: &Counts) {
        self.pass += o.pass;
        self.refused += o.refused;
        self.valid_rejected += o.valid_rejected;
        self.invalid_accepted += o.invalid_accepted;
        self.other += o.other;
    }

    fn count(&mut self, o: Outcome) {
        match o {
            Outcome::Pass => self.pass += 1,
            Outcome::ValidRejected => self.valid_rejected += 1,
            Outcome::InvalidAccepted => self.invalid_accepted += 1,
            Outcome::Other => self.other += 1,
        }
    }
}

/// One row of the table: a suite file.
#[derive(Default, Clone, Copy)]
struct Row {
    schemas: usize,
    tests: usize,
    formwork: Counts,
    llguidance: Counts,
}

impl Row {
    fn add(&mut self, o: &Row) {
        self.schemas += o.schemas;
        self.tests += o.tests;
        self.formwork.add(&o.formwork);
        self.llguidance.add(&o.llguidance);
    }
}

fn judged(accepted: bool, valid: bool) -> Outcome {
    match (accepted, valid) {
        (true, true) | (false, false) => Outcome::Pass,
        (false, true) => Outcome::ValidRejected,
        (true, false) => Outcome::InvalidAccepted,
    }
}

/// The cases of one suite file, each instance as tokens of `vocab`.
fn load_cases(path: &Path, vocab: &dyn Vocab) -> Vec<Case> {
    corpus::suite_cases(path)
        .into_iter()
        .map(|c| Case {
            description: c.description,
            schema: c.schema,
            tests: c
                .tests
                .into_iter()
                .map(|t| {
                    let text = serde_json::to_string(&t.data).expect("serializable");
                    Instance {
                        description: t.description,
                        tokens: vocab.tokenize(text.as_bytes()),
                        valid: t.valid,
                    }
                })
                .collect(),
        })
        .collect()
}

fn property_order() -> PropertyOrder {
    order::from_env(PropertyOrder::Schema)
}

/// formwork's walk of one instance: the mask before each token must contain it.
fn formwork_walk(cg: &Arc<CompiledGrammar>, tokens: &[TokenId], valid: bool) -> Outcome {
    let Ok(mut m) = Matcher::new(cg.clone()) else {
        return Outcome::Other;
    };
    let mut mask = TokenSet::new(cg.vocab().vocab_len());
    for &t in tokens {
        if m.compute_mask(&mut mask).is_err() {
            return Outcome::Other;
        }
        if !mask.contains(t) {
            return judged(false, valid);
        }
        if m.consume_token(t).is_err() {
            // In the mask but refused by consume: an engine error, not an answer.
            return Outcome::Other;
        }
    }
    judged(m.is_accepting(), valid)
}

/// formwork's outcomes for one case's instances, or why it refused the schema.
fn formwork_case(case: &Case, opts: &CompileOptions, env: &TokEnv) -> Verdict {
    let limits = Limits {
        step_time: None,
        ..Limits::default()
    };
    let cg = match compile(&case.schema, opts) {
        Ok(c) => match CompiledGrammar::with_env(c.grammar, env, limits) {
            Ok(cg) => Arc::new(cg),
            Err(e) => return Err(e.to_string()),
        },
        // An unsatisfiable schema is a grammar that accepts nothing.
        Err(SchemaError::Unsatisfiable { .. }) => {
            return Ok(case.tests.iter().map(|t| judged(false, t.valid)).collect())
        }
        Err(e) => return Err(e.to_string()),
    };
    Ok(case
        .tests
        .iter()
        .map(|t| formwork_walk(&cg, &t.tokens, t.valid))
        .collect())
}

/// llguidance's outcomes for one case's instances, as its CI's `json_schema_accepts` judges
/// them.
fn llguidance_case(case: &Case, factory: &llguidance::ParserFactory) -> Verdict {
    let lark = format!(
        "start: %json {}",
        serde_json::to_string(&case.schema).expect("serializable")
    );
    let grammar = llguidance::api::TopLevelGrammar::from_lark(lark);
    let mut base = factory.create_parser(grammar).map_err(|e| e.to_string())?;
    base.start_without_prompt();
    Ok(case
        .tests
        .iter()
        .map(|t| {
            let mut p = base.clone();
            for &tok in &t.tokens {
                match p.compute_mask() {
                    Ok(mask) if mask.is_allowed(tok.0) => {}
                    Ok(_) => return judged(false, t.valid),
                    Err(_) => return Outcome::Other,
                }
                if p.consume_token(tok.0).is_err() {
                    return Outcome::Other;
                }
            }
            judged(p.is_accepting(), t.valid)
        })
        .collect())
}

/// Runs `f`, a panic counting as [`Outcome::Other`] for every instance.
fn guarded(n: usize, f: impl FnOnce() -> Verdict) -> Verdict {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|_| Ok(vec![Outcome::Other; n]))
}

fn cell(n: usize) -> String {
    if n == 0 {
        "·".to_string()
    } else {
        n.to_string()
    }
}

fn row_line(name: &str, r: &Row) -> String {
    let (f, l) = (&r.formwork, &r.llguidance);
    format!(
        "| {name} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
        r.schemas,
        r.tests,
        f.pass,
        cell(f.refused),
        cell(f.valid_rejected),
        cell(f.invalid_accepted),
        cell(f.other),
        l.pass,
        cell(l.refused),
        cell(l.valid_rejected),
        cell(l.invalid_accepted),
        cell(l.other),
    )
}

fn table_header() {
    println!(
        "| file | schemas | tests | formwork pass | refused | valid rej. | invalid acc. | other \
         | llguidance pass | refused | valid rej. | invalid acc. | other |"
    );
    println!("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|");
}

fn run() {
    let verbose = std::env::var("FORMWORK_BENCH_VERBOSE").as_deref() == Ok("1");
    let vocab = vocab::registry_vocab("smollm2-135m");
    let env = TokEnv::new(vocab.clone());
    let llg_env = llg::llg_env(vocab.as_ref());
    let mut factory = llguidance::ParserFactory::new_simple(&llg_env).expect("llguidance factory");
    factory.set_stderr_log_level(0);
    factory.set_buffer_log_level(0);
    let root = corpus::suite_root();
    let order = property_order();
    let drafts = [
        ("draft2020-12", Draft::Draft2020),
        ("draft7", Draft::Draft7),
    ];
    let t0 = std::time::Instant::now();
    // Per draft: (file, row), in table order.
    let mut tables: Vec<(&str, Vec<(String, Row)>)> = Vec::new();
    for (draft_dir, draft) in drafts {
        let dir = root.join(draft_dir);
        let mut files: Vec<(String, PathBuf, bool)> = Vec::new();
        for (sub, assert_format) in [("", false), ("optional/", true), ("optional/format/", true)] {
            for (stem, p) in corpus::suite_files(&dir.join(sub)) {
                files.push((format!("{sub}{stem}"), p, assert_format));
            }
        }
        let mut rows = Vec::new();
        for (name, path, assert_format) in files {
            let opts = CompileOptions {
                default_draft: draft,
                assert_format,
                property_order: order,
                ..Default::default()
            };
            let mut row = Row::default();
            for case in load_cases(&path, vocab.as_ref()) {
                let n = case.tests.len();
                row.schemas += 1;
                row.tests += n;
                let fw = guarded(n, || formwork_case(&case, &opts, &env));
                let lg = guarded(n, || llguidance_case(&case, &factory));
                for (counts, outcomes, engine) in [
                    (&mut row.formwork, &fw, "formwork"),
                    (&mut row.llguidance, &lg, "llguidance"),
                ] {
                    let outcomes = match outcomes {
                        Ok(o) => o,
                        Err(e) => {
                            counts.refused += 1;
                            if verbose {
                                println!(
                                    "{engine}: {draft_dir}/{name} / {}: refused: {e}",
                                    case.description
                                );
                            }
                            continue;
                        }
                    };
                    for (o, t) in outcomes.iter().zip(&case.tests) {
                        counts.count(*o);
                        if verbose && *o != Outcome::Pass {
                            println!(
                                "{engine}: {draft_dir}/{name} / {} / {}: {o:?}",
                                case.description, t.description
                            );
                        }
                    }
                }
            }
            eprintln!("{draft_dir}/{name}: {:.1} s", t0.elapsed().as_secs_f64());
            rows.push((name, row));
        }
        tables.push((draft_dir, rows));
    }
    println!(
        "\nJSON-Schema-Test-Suite per file, formwork vs llguidance 1.9.1, SmolLM2 tokenizer \
         (property order {order:?}; {:.0} s)",
        t0.elapsed().as_secs_f64()
    );
    let mut all = Row::default();
    let mut totals: BTreeMap<&str, Row> = BTreeMap::new();
    for (draft_dir, rows) in &tables {
        println!("\n**{draft_dir}**\n");
        table_header();
        let mut total = Row::default();
        for (name, row) in rows {
            println!("{}", row_line(name, row));
            total.add(row);
        }
        println!("{}", row_line(&format!("**{draft_dir} total**"), &total));
        all.add(&total);
        totals.insert(draft_dir, total);
    }
    println!("\n**Totals**\n");
    table_header();
    for (draft_dir, t) in &totals {
        println!("{}", row_line(draft_dir, t));
    }
    println!("{}", row_line("**both drafts**", &all));
}

fn main() {
    // Deeply nested schemas recurse deeply in both compilers.
    std::thread::Builder::new()
        .stack_size(256 << 20)
        .spawn(run)
        .expect("spawn")
        .join()
        .expect("suite run panicked");
}
