//! JSON-Schema-Test-Suite ratchet (`tests/expected/json_schema_test_suite.json`), drafts
//! 2020-12 and 7, `optional/` excluded (counted separately in the printout).
//!
//! Each test's category: `pass`, `compile_error:<category>`, `valid_rejected` or
//! `invalid_accepted`. `format` is not asserted here: the suite follows the specification,
//! where `format` is an annotation by default.
//!
//! Run: cargo test --test it schema_suite -- --nocapture

use std::collections::BTreeMap;

use formwork::schema::{compile, CompileOptions, Draft, SchemaError};
use serde_json::{Map, Value};

use crate::schema_ratchet::{check, load};
use crate::schema_support::{accepts, crate_path, data_dir};

fn run() {
    let root = data_dir().join("json-schema-test-suite/tests");
    let mut got = BTreeMap::new();
    let mut file = Map::new();
    let mut per_keyword: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for (draft_dir, draft) in [
        ("draft2020-12", Draft::Draft2020),
        ("draft7", Draft::Draft7),
    ] {
        let opts = CompileOptions {
            assert_format: false,
            default_draft: draft,
            ..Default::default()
        };
        let mut files: Vec<_> = std::fs::read_dir(root.join(draft_dir))
            .expect("suite dir")
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect();
        files.sort();
        let mut draft_obj = Map::new();
        for f in files {
            let keyword = f
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or("")
                .to_string();
            let cases: Vec<Value> =
                serde_json::from_str(&std::fs::read_to_string(&f).expect("suite file"))
                    .expect("suite JSON");
            let mut kw_obj = Map::new();
            for case in &cases {
                let cdesc = case["description"].as_str().unwrap_or("").to_string();
                let compiled = compile(&case["schema"], &opts);
                let mut case_obj = Map::new();
                for t in case["tests"].as_array().into_iter().flatten() {
                    let tdesc = t["description"].as_str().unwrap_or("").to_string();
                    let valid = t["valid"].as_bool().unwrap_or(false);
                    let text = serde_json::to_string(&t["data"]).expect("serializable");
                    let verdict = match &compiled {
                        Ok(c) => Ok(accepts(&c.grammar, &text).is_ok()),
                        // An unsatisfiable schema is judged as a grammar accepting nothing.
                        Err(SchemaError::Unsatisfiable { .. }) => Ok(false),
                        Err(e) => Err(e),
                    };
                    let cat = match verdict {
                        Err(e) => format!("compile_error:{}", e.category()),
                        Ok(accepted) => match (accepted, valid) {
                            (true, true) | (false, false) => "pass".to_string(),
                            (false, true) => "valid_rejected".to_string(),
                            (true, false) => "invalid_accepted".to_string(),
                        },
                    };
                    let e = per_keyword
                        .entry(format!("{draft_dir}/{keyword}"))
                        .or_default();
                    e.1 += 1;
                    if cat == "pass" {
                        e.0 += 1;
                    }
                    got.insert(
                        format!("{draft_dir} / {keyword} / {cdesc} / {tdesc}"),
                        cat.clone(),
                    );
                    case_obj.insert(tdesc, Value::String(cat));
                }
                kw_obj.insert(cdesc, Value::Object(case_obj));
            }
            draft_obj.insert(keyword, Value::Object(kw_obj));
        }
        file.insert(draft_dir.to_string(), Value::Object(draft_obj));
    }
    let (mut pass, mut total) = (0, 0);
    for (k, (p, t)) in &per_keyword {
        println!("{k}: {p}/{t}");
        pass += p;
        total += t;
    }
    println!(
        "JSON-Schema-Test-Suite (draft2020-12 + draft7, without optional/): {pass}/{total} pass"
    );
    let mut cats: BTreeMap<&str, usize> = BTreeMap::new();
    for c in got.values() {
        *cats.entry(c.as_str()).or_default() += 1;
    }
    println!("by category: {cats:?}");
    let path = crate_path("tests/expected/json_schema_test_suite.json");
    let expected = load(&path);
    let mut expected_flat = BTreeMap::new();
    if let Some(drafts) = expected.as_object() {
        for (d, kws) in drafts {
            for (k, cases) in kws.as_object().into_iter().flatten() {
                for (c, tests) in cases.as_object().into_iter().flatten() {
                    for (t, cat) in tests.as_object().into_iter().flatten() {
                        expected_flat.insert(
                            format!("{d} / {k} / {c} / {t}"),
                            cat.as_str().unwrap_or("").to_string(),
                        );
                    }
                }
            }
        }
    }
    check(
        &path,
        &got,
        &expected_flat,
        Value::Object(file),
        "cargo test --test it schema_suite -- --nocapture",
    );
}

#[test]
fn schema_suite() {
    std::thread::Builder::new()
        .stack_size(256 << 20)
        .spawn(run)
        .expect("spawn")
        .join()
        .expect("suite run panicked");
}
