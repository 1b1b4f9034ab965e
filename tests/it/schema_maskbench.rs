//! MaskBench conformance ratchet (`tests/expected/maskbench.json`).
//!
//! Compiles each schema of the 619-schema sample, feeds each instance's compact JSON (keys in
//! instance order) through the compiled grammar, and records per schema: `pass`,
//! `compile_error:<category>`, `valid_rejected` or `invalid_accepted`. Fails on any
//! regression or unrecorded improvement.
//!
//! CI (sample):   cargo test --test it schema_maskbench -- --nocapture
//! Full (11,305): FORMWORK_MASKBENCH=full cargo test --release --test it schema_maskbench -- --nocapture
//! (the full run prints the table and checks `tests/expected/maskbench_full.json`).

use std::collections::BTreeMap;
use std::time::Instant;

use formwork::schema::{compile, CompileOptions};
use serde_json::{json, Value};

use crate::schema_ratchet::{check, load, percentile};
use crate::schema_support::{accepts, crate_path, data_dir};

struct Row {
    id: String,
    schema: Value,
    tests: Vec<(Value, bool)>,
}

fn load_rows(full: bool) -> Vec<Row> {
    let dir = data_dir();
    let files: Vec<std::path::PathBuf> = if full {
        let mut v: Vec<_> = std::fs::read_dir(dir.join("maskbench"))
            .expect("maskbench dir")
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
            .collect();
        v.sort();
        v
    } else {
        vec![dir.join("maskbench-sample.jsonl")]
    };
    let mut rows = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).expect("maskbench file");
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let v: Value = serde_json::from_str(line).expect("jsonl row");
            let tests = v["tests"]
                .as_array()
                .map(|ts| {
                    ts.iter()
                        .map(|t| (t["data"].clone(), t["valid"].as_bool().unwrap_or(false)))
                        .collect()
                })
                .unwrap_or_default();
            rows.push(Row {
                id: v["id"].as_str().unwrap_or("").to_string(),
                schema: v["schema"].clone(),
                tests,
            });
        }
    }
    rows
}

/// One schema's outcome: the category and a message.
fn run_row(row: &Row, opts: &CompileOptions, compile_us: &mut Vec<f64>) -> (String, String) {
    let t0 = Instant::now();
    let compiled = compile(&row.schema, opts);
    compile_us.push(t0.elapsed().as_secs_f64() * 1e6);
    let c = match compiled {
        Ok(c) => c,
        Err(e) => return (format!("compile_error:{}", e.category()), e.to_string()),
    };
    for (i, (data, valid)) in row.tests.iter().enumerate() {
        let text = serde_json::to_string(data).expect("serializable");
        match (accepts(&c.grammar, &text), valid) {
            (Err(e), true) => return ("valid_rejected".into(), format!("test {i}: {e}")),
            (Ok(()), false) => return ("invalid_accepted".into(), format!("test {i}: {text}")),
            _ => {}
        }
    }
    ("pass".into(), String::new())
}

fn run(full: bool) {
    let rows = load_rows(full);
    let opts = CompileOptions::default();
    let mut compile_us = Vec::new();
    let mut got = BTreeMap::new();
    let mut file = serde_json::Map::new();
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for row in &rows {
        let (cat, msg) = run_row(row, &opts, &mut compile_us);
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
                json!({"category": cat, "message": msg})
            },
        );
    }
    compile_us.sort_by(f64::total_cmp);
    println!(
        "MaskBench ({} schemas{}):",
        rows.len(),
        if full { ", full" } else { ", sample" }
    );
    println!("| engine   | passing | compile errors | valid rejected | invalid accepted | compile p50 | compile p99 |");
    println!("|----------|---------|----------------|----------------|------------------|-------------|-------------|");
    println!(
        "| formwork | {} | {} | {} | {} | {:.0} µs | {:.0} µs |",
        counts.get("pass").copied().unwrap_or(0),
        counts.get("compile errors").copied().unwrap_or(0),
        counts.get("valid_rejected").copied().unwrap_or(0),
        counts.get("invalid_accepted").copied().unwrap_or(0),
        percentile(&compile_us, 50.0),
        percentile(&compile_us, 99.0),
    );
    let mut by_cat: BTreeMap<&str, usize> = BTreeMap::new();
    for c in got.values() {
        *by_cat.entry(c.as_str()).or_default() += 1;
    }
    println!("by category: {by_cat:?}");
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
    let command = if full {
        "FORMWORK_MASKBENCH=full cargo test --release --test it schema_maskbench -- --nocapture"
    } else {
        "cargo test --test it schema_maskbench -- --nocapture"
    };
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
