//! JSON-Schema-Test-Suite, the `optional/` files other than `optional/format/` (big numbers,
//! float overflow, ECMA-262 and non-BMP regexes, unknown keywords, `$id`/`$anchor` inside
//! non-schemas, `dependencies` in 2020-12, `contentMediaType`, cross-draft `$ref`s,
//! format-assertion metaschemas, `$dynamicRef`), drafts 2020-12 and 7: the same compile,
//! reference acceptor and byte-level matcher (mask before every byte, EOS in the final mask
//! exactly when accepting) as [`crate::schema_suite`].
//!
//! Options: formwork's defaults for the directory's draft, so `format` is asserted (only
//! `format-assertion.json` has one: its metaschemas turn the format-assertion vocabulary on,
//! which formwork cannot read from a remote metaschema, and `assert_format` is the option that
//! vocabulary stands for). Ratchet `tests/expected/json_schema_test_suite_optional.json`
//! (matcher; draft → `optional/<file>` → case → test → category). A refusal is recorded as
//! `compile_error:<category> at <JSON pointer>` (keyword and where). No test may be
//! `invalid_accepted` or `mask_disagrees`, and no refusal an internal error, whatever the file
//! says.
//!
//! Run: cargo test --test it schema_suite_optional -- --nocapture

use formwork::schema::{CompileOptions, SchemaError};

use crate::corpus::{suite_files, suite_root};
use crate::schema_ratchet::assert_none_of;
use crate::schema_suite::{
    byte_env, check_column, compare_columns, on_big_stack, run_file, Column, DRAFTS,
};

/// A refusal's ratchet label: the category (naming the keyword when one is unsupported) and
/// the JSON pointer of the schema node refused.
fn refusal_label(e: &SchemaError) -> String {
    let at = match e {
        SchemaError::Unsupported { pointer, .. }
        | SchemaError::Invalid { pointer, .. }
        | SchemaError::RemoteRef { pointer, .. }
        | SchemaError::Unsatisfiable { pointer, .. } => format!(" at {pointer}"),
        _ => String::new(),
    };
    format!("compile_error:{}{at}", e.category())
}

fn run_optional() {
    let root = suite_root();
    let env = byte_env();
    let (mut reference, mut matcher) = (Column::default(), Column::default());
    // Per draft/file: (passed, total), matcher.
    let mut tally: Vec<(String, usize, usize)> = Vec::new();
    for (draft_dir, draft) in DRAFTS {
        let opts = CompileOptions {
            default_draft: draft,
            registry: super::schema_suite::remotes(),
            ..Default::default()
        };
        for (stem, f) in suite_files(&root.join(draft_dir).join("optional")) {
            let file = format!("optional/{stem}");
            let (mut pass, mut total) = (0, 0);
            for (cdesc, tests) in run_file(&f, &opts, &env) {
                for (tdesc, v) in tests {
                    let (r, m) = match &v.refusal {
                        Some(e) => {
                            println!("{draft_dir} / {file} / {cdesc}: refused: {e}");
                            (refusal_label(e), refusal_label(e))
                        }
                        None => (v.reference, v.matcher),
                    };
                    if m != "pass" && v.refusal.is_none() {
                        println!("{draft_dir} / {file} / {cdesc} / {tdesc}: {m}");
                    }
                    total += 1;
                    pass += usize::from(m == "pass");
                    reference.record(draft_dir, &file, &cdesc, &tdesc, &r);
                    matcher.record(draft_dir, &file, &cdesc, &tdesc, &m);
                }
            }
            tally.push((format!("{draft_dir}/{file}"), pass, total));
        }
    }
    println!("optional/ (without format/), matcher pass/total:");
    let (mut pass, mut total) = (0, 0);
    for (k, p, t) in &tally {
        println!("{k}: {p}/{t}");
        pass += p;
        total += t;
    }
    println!(
        "JSON-Schema-Test-Suite optional/ (draft2020-12 + draft7): matcher {pass}/{total} pass"
    );
    println!("matcher by category: {:?}", matcher.by_category());
    compare_columns(&reference, &matcher);
    // An internal error has no pointer: its label is the bare category.
    assert_none_of(
        &matcher.flat,
        &["compile_error:internal"],
        "optional/ refusals (compiler bugs)",
    );
    check_column(
        "tests/expected/json_schema_test_suite_optional.json",
        &matcher,
        "cargo test --test it schema_suite_optional -- --nocapture",
    );
}

#[test]
fn schema_suite_optional() {
    on_big_stack(run_optional);
}
