//! The shared corpora as the tests and the benches read them, in place from the shared data
//! directory (never copied): MaskBench rows, the JSON-Schema-Test-Suite's files and cases, and
//! the SNIPS requests the extraction runs take as `--input`. One reader each, so a test and the
//! bench that measures the same corpus read the same rows.
//!
//! Part of the `it` test target, and included by the benches with `#[path]`; both have the
//! data directory's rule as a crate-root module `data` (`tests/it/data.rs`, which
//! `benches/common/data.rs` includes). Each bench uses a part, hence the `dead_code` allowance.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::data::data_dir;

/// One MaskBench schema and its labelled instances.
pub struct MaskBenchRow {
    /// The row's id.
    pub id: String,
    /// The JSON Schema.
    pub schema: Value,
    /// Each instance and whether it is valid under the schema.
    pub tests: Vec<(Value, bool)>,
}

/// The MaskBench files: `maskbench-sample.jsonl` (619 schemas), or with `full` every
/// `maskbench/*.jsonl` (11,305), sorted.
pub fn maskbench_files(full: bool) -> Vec<PathBuf> {
    let dir = data_dir();
    if !full {
        return vec![dir.join("maskbench-sample.jsonl")];
    }
    let mut v: Vec<_> = std::fs::read_dir(dir.join("maskbench"))
        .expect("maskbench dir")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    v.sort();
    v
}

/// The rows of `files`, in file then line order (blank lines skipped).
pub fn maskbench_rows(files: &[PathBuf]) -> Vec<MaskBenchRow> {
    let mut rows = Vec::new();
    for f in files {
        let text =
            std::fs::read_to_string(f).unwrap_or_else(|e| panic!("reading {}: {e}", f.display()));
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let v: Value = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("{}:{}: {e}", f.display(), i + 1));
            let tests = v["tests"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|t| (t["data"].clone(), t["valid"].as_bool().unwrap_or(false)))
                .collect();
            rows.push(MaskBenchRow {
                id: v["id"].as_str().unwrap_or("").to_string(),
                schema: v["schema"].clone(),
                tests,
            });
        }
    }
    rows
}

/// Compact JSON of every valid instance in the MaskBench sample, in file order.
pub fn maskbench_valid_instances() -> Vec<String> {
    maskbench_rows(&maskbench_files(false))
        .iter()
        .flat_map(|r| &r.tests)
        .filter(|(_, valid)| *valid)
        .map(|(data, _)| serde_json::to_string(data).expect("serializable"))
        .collect()
}

/// The JSON-Schema-Test-Suite's `tests/` directory.
pub fn suite_root() -> PathBuf {
    data_dir().join("json-schema-test-suite/tests")
}

/// The suite files of `dir` (`*.json`, sorted), with their keyword (file stem).
pub fn suite_files(dir: &Path) -> Vec<(String, PathBuf)> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("suite dir {}: {e}", dir.display()))
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .map(|p| {
            let k = p
                .file_stem()
                .and_then(|s| s.to_str())
                .unwrap_or("")
                .to_string();
            (k, p)
        })
        .collect();
    files.sort();
    files
}

/// One case of a suite file: a schema and its labelled tests.
pub struct SuiteCase {
    /// The case's description.
    pub description: String,
    /// The JSON Schema.
    pub schema: Value,
    /// The tests, in file order.
    pub tests: Vec<SuiteTest>,
}

/// One test of a suite case.
pub struct SuiteTest {
    /// The test's description.
    pub description: String,
    /// The instance.
    pub data: Value,
    /// Whether the instance is valid under the case's schema.
    pub valid: bool,
}

/// The cases of one suite file.
pub fn suite_cases(path: &Path) -> Vec<SuiteCase> {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("suite file {}: {e}", path.display()));
    let cases: Vec<Value> = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("suite JSON {}: {e}", path.display()));
    let text_of = |v: &Value| v.as_str().unwrap_or("").to_string();
    cases
        .iter()
        .map(|c| SuiteCase {
            description: text_of(&c["description"]),
            schema: c["schema"].clone(),
            tests: c["tests"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|t| SuiteTest {
                    description: text_of(&t["description"]),
                    data: t["data"].clone(),
                    valid: t["valid"].as_bool().unwrap_or(false),
                })
                .collect(),
        })
        .collect()
}

/// The SNIPS directory (`snips_validate.jsonl`, `schemas/<Intent>.json`).
pub fn snips_dir() -> PathBuf {
    data_dir().join("snips")
}

/// The SNIPS validation requests of `intent`, in file order (each the whole row: `id`,
/// `text`, `intent`, `gold`, …).
pub fn snips_requests(intent: &str) -> Vec<Value> {
    let path = snips_dir().join("snips_validate.jsonl");
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|v| v["intent"] == intent)
        .collect()
}

/// The schema file of a SNIPS `intent`.
pub fn snips_schema(intent: &str) -> PathBuf {
    snips_dir().join("schemas").join(format!("{intent}.json"))
}

/// Writes `requests` to `path` as `extract --input` lines, `{"id": …, "text": …}`.
pub fn write_extract_input(path: &Path, requests: &[Value]) {
    let lines: Vec<String> = requests
        .iter()
        .map(|v| serde_json::json!({"id": v["id"], "text": v["text"]}).to_string())
        .collect();
    std::fs::write(path, lines.join("\n") + "\n")
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
}
