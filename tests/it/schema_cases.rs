//! The hand-written keyword cases (`tests/data/schema_cases.json`): each case's valid
//! instances must be accepted and invalid ones rejected, under every configuration in
//! `schema_support::configs` (compact / flexible whitespace), by the reference acceptor and by
//! the matcher with fast-forward off and on; a case with
//! `"error"` must fail to compile with that category.
//!
//! Every case also runs under both property orders. `"valid_any"` instances have their
//! members out of schema order: accepted under `property_order: any`, rejected under the
//! default schema order. `"invalid_texts"` are raw texts (duplicate keys, which a JSON value
//! cannot hold) rejected under both; `"error_any"` is the error category expected under the
//! any order only (a size limit). A case with `"window_width"` also runs under
//! `property_order: {"window": width}`, where `"valid"` and `"valid_window"` instances are
//! accepted and `"invalid"`, `"invalid_texts"` and `"invalid_window"` (valid in any order, but
//! with an inversion wider than the window) rejected.

use formwork::schema::{compile, PropertyOrder};
use serde_json::Value;

use crate::schema_support::{
    accepts, configs, crate_path, instance_texts, matcher_accepts, matcher_accepts_forced,
};

#[test]
fn hand_written_cases() {
    let path = crate_path("tests/data/schema_cases.json");
    let text = std::fs::read_to_string(&path).expect("case file");
    let cases: Vec<Value> = serde_json::from_str(&text).expect("case file is JSON");
    let mut failures = Vec::new();
    for case in &cases {
        let name = case["name"].as_str().expect("name");
        let schema = &case["schema"];
        let window = case
            .get("window_width")
            .and_then(Value::as_u64)
            .map(|w| PropertyOrder::Window(w as u32));
        for ((ws, mut opts), order) in configs().into_iter().flat_map(|c| {
            [
                Some((c.clone(), PropertyOrder::Schema)),
                Some((c.clone(), PropertyOrder::Any)),
                window.map(|w| (c, w)),
            ]
            .into_iter()
            .flatten()
        }) {
            opts.property_order = order;
            let any = order == PropertyOrder::Any;
            let in_window = matches!(order, PropertyOrder::Window(_));
            let cfg = format!("{ws}/{order:?}");
            let compiled = compile(schema, &opts);
            let error = case.get("error").or(case.get("error_any").filter(|_| any));
            if let Some(cat) = error.and_then(Value::as_str) {
                match compiled {
                    Err(e) if e.category() == cat => {}
                    Err(e) => failures.push(format!("{name}/{cfg}: wrong error {e}")),
                    Ok(_) => failures.push(format!("{name}/{cfg}: compiled, expected {cat}")),
                }
                continue;
            }
            let c = match compiled {
                Ok(c) => c,
                Err(e) => {
                    failures.push(format!("{name}/{cfg}: compile error {e}"));
                    continue;
                }
            };
            for (kind, want) in [
                ("valid", true),
                ("valid_any", any),
                ("valid_window", any || in_window),
                ("invalid_window", any),
                ("invalid", false),
                ("invalid_texts", false),
            ] {
                let Some(insts) = case.get(kind) else {
                    continue;
                };
                for inst in insts.as_array().expect("instances") {
                    let texts = match (kind, inst) {
                        ("invalid_texts", Value::String(t)) => vec![t.clone()],
                        _ => instance_texts(inst, &opts),
                    };
                    for text in texts {
                        let got = accepts(&c.grammar, &text);
                        if got.is_ok() != want {
                            failures.push(format!(
                                "{name}/{cfg}: {kind} instance {text} -> {got:?}\n{}",
                                c.grammar
                            ));
                        }
                        // The token-level engine must agree (byte-level vocabulary), with
                        // fast-forward off (every byte sampled) and on (forced tokens
                        // consumed as a decoder would).
                        let engine = matcher_accepts(&c.grammar, &text);
                        if engine.is_ok() != want {
                            failures.push(format!(
                                "{name}/{cfg}: matcher on {kind} instance {text} -> {engine:?}"
                            ));
                        }
                        let forced = matcher_accepts_forced(&c.grammar, &text);
                        if forced.is_ok() != want {
                            failures.push(format!(
                                "{name}/{cfg}/fast-forward: matcher on {kind} instance {text} -> {forced:?}"
                            ));
                        }
                    }
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// `formwork compile --property-order any` reaches the compiler: an object of 13 listed
/// properties (over the old subset bound) compiles to a permutation rule, as does
/// `--property-window`.
#[test]
fn property_order_flags() {
    let props: serde_json::Map<String, Value> = (0..13)
        .map(|i| (format!("p{i}"), serde_json::json!({"type": "integer"})))
        .collect();
    let schema = serde_json::json!({"type": "object", "properties": {"inner": {"type": "object", "properties": props}}});
    let dir = std::env::temp_dir().join(format!("formwork-order-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("schema.json");
    std::fs::write(&path, schema.to_string()).expect("write schema");
    let run = |flags: &[&str]| formwork_compile(&path, flags);
    let any = run(&["--property-order", "any"]);
    let stdout = String::from_utf8_lossy(&any.stdout);
    assert!(
        any.status.success(),
        "{}",
        String::from_utf8_lossy(&any.stderr)
    );
    assert!(stdout.contains("any order"), "{stdout}");
    assert!(!run(&[]).stdout.windows(9).any(|w| w == b"any order"));
    assert!(run(&["--property-window", "4"]).status.success());
    assert!(run(&[]).status.success());
    std::fs::remove_dir_all(&dir).ok();
}

/// `formwork compile --explain` (issue 44): every keyword with its JSON pointer and outcome —
/// the length bounds of a pattern enforced by the counter product, an overlapping `oneOf`
/// refused with its reason and the keywords inside it not enforced, an annotation without
/// constraint — and exit 2 because the strict compile fails; 0 under `--lenient`.
#[test]
fn explain_reports_each_keyword() {
    let schema = serde_json::json!({"type": "object", "title": "Service", "properties": {
        "arn": {"type": "string", "maxLength": 146,
                "pattern": "^([a-z0-9-]+):([a-z0-9\\.-]+):([a-z0-9-]+)?:([a-z0-9-]+)$"},
        "kind": {"oneOf": [{"type": "string", "maxLength": 3},
                           {"type": "string", "pattern": "^a"}]}},
        "required": ["arn"]});
    let dir = std::env::temp_dir().join(format!("formwork-explain-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("schema.json");
    std::fs::write(&path, schema.to_string()).expect("write schema");
    let out = formwork_compile(&path, &["--explain"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(2), "{text}");
    let line = |ptr: &str, kw: &str| {
        text.lines()
            .find(|l| {
                let mut w = l.split_whitespace();
                w.next() == Some(ptr) && w.next() == Some(kw)
            })
            .unwrap_or_else(|| panic!("no line for {kw} at {ptr}:\n{text}"))
            .to_string()
    };
    assert!(line("/properties/arn", "maxLength").contains("code-point counter"));
    assert!(
        line("/properties/kind", "oneOf").contains("REFUSED: branches are not provably disjoint")
    );
    assert!(line("/properties/kind/oneOf/0", "maxLength").contains("not enforced"));
    assert!(line("#", "title").contains("no constraint"));
    assert!(line("#", "required").contains("enforced"));
    assert!(text.contains("1 refused"), "{text}");
    let lenient = formwork_compile(&path, &["--explain", "--lenient"]);
    assert!(lenient.status.success());
    assert!(String::from_utf8_lossy(&lenient.stdout)
        .contains("lenient: the refused keywords are dropped"));
    std::fs::remove_dir_all(&dir).ok();
}

/// The schema compiler's resource bounds through `formwork compile` (issue 20): a schema made
/// to explode (three objects of 260 optional properties under `maxProperties`, ~1.15M grammar
/// symbols each) is refused at the default grammar-size limit naming the node to blame (the
/// second object: the compile stops there instead of building the third), the same schema
/// under a 1 ms compile-time budget is refused naming compile time and a node, and bounds no
/// number satisfies on a required property are refused naming the property. Each exits 2.
#[test]
fn resource_limits_through_the_cli() {
    let hostile = |f: &str| crate_path(&format!("tests/data/hostile/schemas/{f}"));
    let run = |file: &std::path::Path, flags: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_formwork"))
            .arg("compile")
            .arg(file)
            .args(flags)
            .output()
            .expect("run formwork");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let counted = hostile("counted_properties.json");
    let (code, stderr) = run(&counted, &[]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("limit exceeded: grammar size (the schema at /properties/b adds "),
        "{stderr}"
    );
    assert!(stderr.contains(", limit 2000000"), "{stderr}");
    let (code, stderr) = run(&counted, &["--options", r#"{"max_compile_ms": 1}"#]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("limit exceeded: compile time in ms (at /properties/")
            || stderr.contains("limit exceeded: compile time in ms (at #)")
            || stderr.contains("limit exceeded: compile time in ms (in the schema algebra)"),
        "{stderr}"
    );
    assert!(stderr.contains(", limit 1\n"), "{stderr}");
    let (code, stderr) = run(&hostile("unsatisfiable_bounds.json"), &[]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains(
            "schema at /properties/port is unsatisfiable: no number satisfies its bounds"
        ),
        "{stderr}"
    );
}

/// `formwork compile --schema-dir` (issue 22): a remote `$ref` resolves against the documents
/// given, by `$id` and by path under `--schema-base`, and is enforced (the grammar has the
/// referenced document's constraint); without the directory it is refused (exit 2, naming
/// the reference), as is a directory holding a file that is not JSON (naming the file).
#[test]
fn schema_dir_resolves_remote_refs() {
    let dir = std::env::temp_dir().join(format!("formwork-schema-dir-{}", std::process::id()));
    let defs = dir.join("defs");
    std::fs::create_dir_all(defs.join("nested")).expect("temp dir");
    std::fs::write(
        defs.join("nested/count.json"),
        r#"{"type": "integer", "minimum": 0}"#,
    )
    .expect("write");
    std::fs::write(
        defs.join("name.json"),
        r#"{"$id": "https://example.com/name.json", "type": "string", "enum": ["ada", "bob"]}"#,
    )
    .expect("write");
    let schema = dir.join("schema.json");
    std::fs::write(
        &schema,
        r#"{"type": "object", "properties": {
            "n": {"$ref": "https://example.com/schemas/nested/count.json"},
            "who": {"$ref": "https://example.com/name.json"}},
           "required": ["n", "who"], "additionalProperties": false}"#,
    )
    .expect("write");
    let run = |flags: &[&str]| formwork_compile(&schema, flags);
    let d = defs.to_str().expect("utf-8 path");
    let ok = run(&[
        "--schema-dir",
        d,
        "--schema-base",
        "https://example.com/schemas/",
    ]);
    let grammar = String::from_utf8_lossy(&ok.stdout);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    assert!(
        grammar.contains("ada") && grammar.contains("bob"),
        "{grammar}"
    );
    let refused = run(&[]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("remote reference"), "{stderr}");
    std::fs::write(defs.join("broken.json"), "{not json").expect("write");
    let bad = run(&["--schema-dir", d]);
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert_eq!(bad.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("broken.json"), "{stderr}");
    std::fs::remove_dir_all(&dir).ok();
}

/// `formwork compile SCHEMA FLAGS`, its output.
fn formwork_compile(schema: &std::path::Path, flags: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_formwork"))
        .arg("compile")
        .arg(schema)
        .args(flags)
        .output()
        .expect("run formwork")
}
