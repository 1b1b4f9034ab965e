//! JSON-Schema-Test-Suite ratchets, drafts 2020-12 and 7. Every test instance is judged twice:
//! by the reference acceptor (`schema::reference`, byte level, over the grammar) and by the
//! matcher (a `Matcher` over the byte-level vocabulary, the instance's compact text consumed
//! byte by byte, the mask computed before each byte and required to agree with the consume,
//! and EOS in the final mask exactly when the matcher accepts).
//!
//! - [`schema_suite`]: the suite without `optional/`, `format` not asserted (the
//!   specification makes it an annotation by default, so every `format.json` test is valid and
//!   a grammar accepting any string passes them). Ratchets:
//!   `tests/expected/json_schema_test_suite.json` (reference acceptor) and
//!   `tests/expected/json_schema_test_suite_matcher.json` (matcher).
//! - [`schema_suite_format`]: `optional/format/*.json` with `format` asserted (valid and
//!   invalid strings; what `format` is worth when it is enforced). Ratchet
//!   `tests/expected/json_schema_test_suite_format.json` (matcher; the reference acceptor's
//!   verdicts are printed beside it).
//! - `schema_suite_optional` (`schema_suite_optional.rs`): the other files of `optional/`.
//!
//! Each test's category: `pass`, `compile_error:<category>`, `budget` (a matcher budget ran
//! out: neither accepted nor rejected), `matcher_error`, `valid_rejected`, `invalid_accepted`,
//! `mask_disagrees` (the mask and consume disagreed: an engine bug whatever the label). No test
//! may be `invalid_accepted` or `mask_disagrees`, whatever the ratchet file says.
//!
//! Run: cargo test --test it schema_suite -- --nocapture

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use formwork::matcher::CompiledGrammar;
use formwork::schema::{compile, CompileOptions, Draft, SchemaError, SchemaRegistry};
use formwork::toktrie::{SyntheticVocab, TokEnv, TokenId, Vocab};
use serde_json::{Map, Value};

use crate::corpus::{suite_cases, suite_files, suite_root};
use crate::data::data_dir;
use crate::schema_ratchet::{assert_none_of, check, load};
use crate::schema_support::{accepts, crate_path, feed_tokens, test_limits, Fed};

/// One test's two verdicts: the reference acceptor's category and the matcher's, with the
/// compile error when the schema was refused.
pub(crate) struct Verdicts {
    pub(crate) reference: String,
    pub(crate) matcher: String,
    pub(crate) refusal: Option<SchemaError>,
}

/// The category of an accept/reject answer against the label.
fn judged(accepted: bool, valid: bool) -> String {
    match (accepted, valid) {
        (true, true) | (false, false) => "pass",
        (false, true) => "valid_rejected",
        (true, false) => "invalid_accepted",
    }
    .to_string()
}

/// The matcher's category for one instance text.
fn matcher_category(cg: &Arc<CompiledGrammar>, text: &str, valid: bool) -> String {
    // The byte-level vocabulary's token ids are the byte values.
    let tokens: Vec<TokenId> = text.bytes().map(|b| TokenId(b as u32)).collect();
    match feed_tokens(cg, &tokens, true, |_| {}) {
        Fed::Accepted => judged(true, valid),
        Fed::Rejected(_) => judged(false, valid),
        Fed::Budget(_) => "budget".to_string(),
        Fed::MaskDisagrees(m) => {
            println!("mask disagrees on {text}: {m}");
            "mask_disagrees".to_string()
        }
        Fed::Error(m) => {
            println!("matcher error on {text}: {m}");
            "matcher_error".to_string()
        }
    }
}

/// One case's description and its tests' (description, verdicts).
pub(crate) type CaseVerdicts = (String, Vec<(String, Verdicts)>);

/// Judges every test of one suite file (a list of cases) under `opts`.
pub(crate) fn run_file(f: &Path, opts: &CompileOptions, env: &TokEnv) -> Vec<CaseVerdicts> {
    let mut out = Vec::new();
    for case in suite_cases(f) {
        let compiled = compile(&case.schema, opts);
        // The matcher's grammar: compiled against the run's one byte-level environment.
        let cg = match &compiled {
            Ok(c) => {
                Some(CompiledGrammar::with_env(c.grammar.clone(), env, test_limits()).map(Arc::new))
            }
            Err(_) => None,
        };
        let mut tests = Vec::new();
        for t in case.tests {
            let valid = t.valid;
            let text = serde_json::to_string(&t.data).expect("serializable");
            let verdicts = match (&compiled, &cg) {
                (Ok(c), Some(cg)) => Verdicts {
                    reference: judged(accepts(&c.grammar, &text).is_ok(), valid),
                    matcher: match cg {
                        Ok(cg) => matcher_category(cg, &text, valid),
                        Err(_) => "compile_error:matcher".to_string(),
                    },
                    refusal: None,
                },
                // An unsatisfiable schema is judged as a grammar accepting nothing.
                (Err(SchemaError::Unsatisfiable { .. }), _) => Verdicts {
                    reference: judged(false, valid),
                    matcher: judged(false, valid),
                    refusal: None,
                },
                (Err(e), _) => Verdicts {
                    reference: format!("compile_error:{}", e.category()),
                    matcher: format!("compile_error:{}", e.category()),
                    refusal: Some(e.clone()),
                },
                (Ok(_), None) => unreachable!("a compiled schema has a matcher result"),
            };
            tests.push((t.description, verdicts));
        }
        out.push((case.description, tests));
    }
    out
}

/// Per-keyword tallies of one column.
#[derive(Default, Clone, Copy)]
struct Tally {
    pass: usize,
    total: usize,
}

/// The results of one run: per column, the flat map (`draft / keyword / case / test` →
/// category), the nested file value, and per-`draft/keyword` tallies; plus the format run's
/// valid/invalid split.
#[derive(Default)]
pub(crate) struct Column {
    pub(crate) flat: BTreeMap<String, String>,
    file: Map<String, Value>,
    per_keyword: BTreeMap<String, Tally>,
}

impl Column {
    pub(crate) fn record(&mut self, draft: &str, keyword: &str, case: &str, test: &str, cat: &str) {
        let t = self
            .per_keyword
            .entry(format!("{draft}/{keyword}"))
            .or_default();
        t.total += 1;
        if cat == "pass" {
            t.pass += 1;
        }
        self.flat.insert(
            format!("{draft} / {keyword} / {case} / {test}"),
            cat.to_string(),
        );
        let d = self
            .file
            .entry(draft.to_string())
            .or_insert_with(|| Value::Object(Map::new()));
        let k = d
            .as_object_mut()
            .expect("object")
            .entry(keyword.to_string())
            .or_insert_with(|| Value::Object(Map::new()));
        let c = k
            .as_object_mut()
            .expect("object")
            .entry(case.to_string())
            .or_insert_with(|| Value::Object(Map::new()));
        c.as_object_mut()
            .expect("object")
            .insert(test.to_string(), Value::String(cat.to_string()));
    }

    pub(crate) fn by_category(&self) -> BTreeMap<&str, usize> {
        let mut cats = BTreeMap::new();
        for c in self.flat.values() {
            *cats.entry(c.as_str()).or_default() += 1;
        }
        cats
    }
}

/// Flattens a ratchet file (draft → keyword → case → test → category).
fn flatten(expected: &Value) -> BTreeMap<String, String> {
    let mut flat = BTreeMap::new();
    for (d, kws) in expected.as_object().into_iter().flatten() {
        for (k, cases) in kws.as_object().into_iter().flatten() {
            for (c, tests) in cases.as_object().into_iter().flatten() {
                for (t, cat) in tests.as_object().into_iter().flatten() {
                    flat.insert(
                        format!("{d} / {k} / {c} / {t}"),
                        cat.as_str().unwrap_or("").to_string(),
                    );
                }
            }
        }
    }
    flat
}

/// Checks `col` against the ratchet file `rel` (or blesses it).
pub(crate) fn check_column(rel: &str, col: &Column, command: &str) {
    let path = crate_path(rel);
    let expected = flatten(&load(&path));
    check(
        &path,
        &col.flat,
        &expected,
        Value::Object(col.file.clone()),
        command,
    );
}

/// The two drafts run, with the options' draft.
pub(crate) const DRAFTS: [(&str, Draft); 2] = [
    ("draft2020-12", Draft::Draft2020),
    ("draft7", Draft::Draft7),
];

/// Prints the tests where the two columns differ, then the hard checks, whatever the ratchet
/// files say: a bless must not be able to record an accepted invalid instance or a mask that
/// disagrees with consume.
pub(crate) fn compare_columns(reference: &Column, matcher: &Column) {
    for (k, r) in &reference.flat {
        let m = &matcher.flat[k];
        if m != r {
            println!("reference and matcher differ: {k}: {r} vs {m}");
        }
    }
    assert_none_of(&reference.flat, &["invalid_accepted"], "reference acceptor");
    assert_none_of(
        &matcher.flat,
        &["invalid_accepted", "mask_disagrees"],
        "matcher",
    );
}

/// The suite's `remotes/` directory as its runners serve it, at `http://localhost:1234/`: the
/// documents its remote `$ref`s name, given to the compiler (which never fetches).
pub(crate) fn remotes() -> SchemaRegistry {
    let dir = data_dir().join("json-schema-test-suite/remotes");
    SchemaRegistry::from_dir(&dir, Some("http://localhost:1234/")).expect("suite remotes")
}

/// The byte-level environment every grammar of a run is compiled against.
pub(crate) fn byte_env() -> TokEnv {
    let vocab: Arc<dyn Vocab> = Arc::new(SyntheticVocab::byte_level());
    TokEnv::new(vocab)
}

fn run() {
    let root = suite_root();
    let env = byte_env();
    let (mut reference, mut matcher) = (Column::default(), Column::default());
    for (draft_dir, draft) in DRAFTS {
        let opts = CompileOptions {
            assert_format: false,
            default_draft: draft,
            registry: remotes(),
            ..Default::default()
        };
        for (keyword, f) in suite_files(&root.join(draft_dir)) {
            for (cdesc, tests) in run_file(&f, &opts, &env) {
                for (tdesc, v) in tests {
                    reference.record(draft_dir, &keyword, &cdesc, &tdesc, &v.reference);
                    matcher.record(draft_dir, &keyword, &cdesc, &tdesc, &v.matcher);
                }
            }
        }
    }
    println!("keyword: reference acceptor pass/total, matcher pass/total");
    let (mut rp, mut mp, mut total) = (0, 0, 0);
    for (k, r) in &reference.per_keyword {
        let m = matcher.per_keyword[k];
        println!(
            "{k}: {}/{}, matcher {}/{}",
            r.pass, r.total, m.pass, m.total
        );
        rp += r.pass;
        mp += m.pass;
        total += r.total;
    }
    println!(
        "JSON-Schema-Test-Suite (draft2020-12 + draft7, without optional/): reference acceptor \
         {rp}/{total} pass, matcher {mp}/{total} pass"
    );
    println!(
        "reference acceptor by category: {:?}",
        reference.by_category()
    );
    println!("matcher by category: {:?}", matcher.by_category());
    compare_columns(&reference, &matcher);
    let command = "cargo test --test it schema_suite -- --nocapture";
    check_column(
        "tests/expected/json_schema_test_suite.json",
        &reference,
        command,
    );
    check_column(
        "tests/expected/json_schema_test_suite_matcher.json",
        &matcher,
        command,
    );
}

/// `optional/format/*.json` with `format` asserted: per format, valid strings accepted and
/// invalid ones rejected, through the matcher.
fn run_format() {
    let root = suite_root();
    let env = byte_env();
    let (mut reference, mut matcher) = (Column::default(), Column::default());
    // Per draft/format: (valid passed, valid total, invalid passed, invalid total), matcher.
    let mut split: BTreeMap<String, [usize; 4]> = BTreeMap::new();
    for (draft_dir, draft) in DRAFTS {
        let opts = CompileOptions {
            assert_format: true,
            default_draft: draft,
            registry: remotes(),
            ..Default::default()
        };
        for (format, f) in suite_files(&root.join(draft_dir).join("optional/format")) {
            let cases: Vec<Value> =
                serde_json::from_str(&std::fs::read_to_string(&f).expect("suite file"))
                    .expect("suite JSON");
            let labels: Vec<Vec<bool>> = cases
                .iter()
                .map(|c| {
                    c["tests"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|t| t["valid"].as_bool().unwrap_or(false))
                        .collect()
                })
                .collect();
            for ((cdesc, tests), labels) in run_file(&f, &opts, &env).into_iter().zip(labels) {
                for ((tdesc, v), valid) in tests.into_iter().zip(labels) {
                    reference.record(draft_dir, &format, &cdesc, &tdesc, &v.reference);
                    matcher.record(draft_dir, &format, &cdesc, &tdesc, &v.matcher);
                    let s = split.entry(format!("{draft_dir}/{format}")).or_default();
                    let i = if valid { 0 } else { 2 };
                    s[i + 1] += 1;
                    if v.matcher == "pass" {
                        s[i] += 1;
                    }
                    if v.matcher != "pass" {
                        println!("{draft_dir} / {format} / {cdesc} / {tdesc}: {}", v.matcher);
                    }
                }
            }
        }
    }
    println!("optional/format, format asserted, matcher: valid accepted, invalid rejected");
    for (k, [vp, vt, ip, it]) in &split {
        let r = reference.per_keyword[k];
        println!(
            "{k}: valid {vp}/{vt}, invalid {ip}/{it} (reference acceptor {}/{})",
            r.pass, r.total
        );
    }
    println!("matcher by category: {:?}", matcher.by_category());
    compare_columns(&reference, &matcher);
    check_column(
        "tests/expected/json_schema_test_suite_format.json",
        &matcher,
        "cargo test --test it schema_suite_format -- --nocapture",
    );
}

/// Runs `f` on a thread with a large stack (deeply nested schemas recurse deeply).
pub(crate) fn on_big_stack(f: fn()) {
    std::thread::Builder::new()
        .stack_size(256 << 20)
        .spawn(f)
        .expect("spawn")
        .join()
        .expect("suite run panicked");
}

#[test]
fn schema_suite() {
    on_big_stack(run);
}

#[test]
fn schema_suite_format() {
    on_big_stack(run_format);
}
