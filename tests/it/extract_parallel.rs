//! `formwork extract --input --parallel N` on the small model (SmolLM2, named): documents decoded
//! together through the batched forward pass write, greedy, exactly the lines `--parallel 1`
//! writes (latency aside; the order is finish order), resume skips what is done, and a KV
//! budget too small for one document is an error record naming the budget; speculative decoding
//! (the default) writes the lines `--no-speculate` writes, either way. Six SNIPS
//! requests, read in place from the shared data, with small budgets so the test stays fast.

use std::path::Path;
use std::process::Command;

use formwork::extract::batch::{RecordResult, RecordStatus};

use super::corpus::{snips_requests, snips_schema, write_extract_input};

/// The first `n` requests of `intent` as `--input` lines, and the intent's schema path.
fn snips(dir: &Path, intent: &str, n: usize) -> (std::path::PathBuf, std::path::PathBuf) {
    let requests: Vec<_> = snips_requests(intent).into_iter().take(n).collect();
    let input = dir.join("in.jsonl");
    write_extract_input(&input, &requests);
    (input, snips_schema(intent))
}

/// Runs `formwork extract --input` with `extra` flags; returns the exit code, the lines
/// (latency zeroed) in file order, and stderr.
fn extract(
    input: &Path,
    schema: &Path,
    out: &Path,
    extra: &[&str],
) -> (i32, Vec<RecordResult>, String) {
    let run = Command::new(env!("CARGO_BIN_EXE_formwork"))
        .arg("extract")
        .arg("--input")
        .arg(input)
        .arg("--output")
        .arg(out)
        .arg("--schema")
        .arg(schema)
        .args([
            "--model",
            "smollm2-135m",
            "--max-tokens",
            "40",
            "--threads",
            "2",
        ])
        .args(extra)
        .output()
        .unwrap();
    let lines = std::fs::read_to_string(out)
        .unwrap_or_default()
        .lines()
        .map(|l| {
            let mut r: RecordResult = serde_json::from_str(l).unwrap();
            r.latency_ms = 0.0;
            r
        })
        .collect();
    let stderr = String::from_utf8_lossy(&run.stderr).into_owned();
    (run.status.code().unwrap_or(-1), lines, stderr)
}

#[test]
fn parallel_extraction_writes_the_lines_one_at_a_time_writes() {
    let dir = tempfile::tempdir().unwrap();
    let (input, schema) = snips(dir.path(), "BookRestaurant", 6);
    let (code, mut want, err) = extract(
        &input,
        &schema,
        &dir.path().join("one.jsonl"),
        &["--parallel", "1"],
    );
    assert_eq!(want.len(), 6, "{err}");
    assert!(
        want.iter().all(|r| r.status == RecordStatus::Ok),
        "{code} {want:?}"
    );
    let ids: Vec<&str> = want.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(
        ids[0], "BookRestaurant_validate_0",
        "--parallel 1 keeps input order"
    );
    want.sort_by(|a, b| a.id.cmp(&b.id));
    for extra in [
        &["--parallel", "4"][..],
        &["--parallel", "3", "--kv-budget", "64M"],
        &[],
        // Speculation (on in all of the above) changes no line, batched or not (issue 45).
        &["--no-speculate"],
        &["--parallel", "4", "--no-speculate"],
    ] {
        let out = dir.path().join("many.jsonl");
        let (code2, mut got, err) = extract(&input, &schema, &out, extra);
        assert_eq!(code2, code, "{extra:?}: {err}");
        got.sort_by(|a, b| a.id.cmp(&b.id));
        assert_eq!(got, want, "{extra:?}");
        // Resume: everything is done, nothing is added.
        let (_, again, err) = extract(&input, &schema, &out, &[extra, &["--resume"]].concat());
        assert_eq!(again.len(), 6, "{extra:?}: {err}");
        assert!(err.contains("6 skipped"), "{err}");
    }
    // A budget too small for one document (its prompt + 40 positions, ~1 MB on SmolLM2).
    let (code, got, err) = extract(
        &input,
        &schema,
        &dir.path().join("tiny.jsonl"),
        &["--kv-budget", "64K"],
    );
    assert_eq!(code, 1, "{err}");
    assert_eq!(got.len(), 6);
    for r in &got {
        assert_eq!(r.status, RecordStatus::Error);
        let e = r.error.as_deref().unwrap();
        assert!(e.contains("over the KV budget of 65536 bytes"), "{e}");
    }
}

/// Issue 19: `--think N` batches reason in parallel as they decode (`push_thinking`), and write,
/// greedy, exactly the lines `--parallel 1` writes one document at a time — the reasoning in
/// its own field, its tokens counted — and resume skips what is done. Four requests, 12
/// tokens of reasoning.
#[test]
fn thinking_batches_write_the_lines_one_at_a_time_writes() {
    let dir = tempfile::tempdir().unwrap();
    let (input, schema) = snips(dir.path(), "GetWeather", 4);
    let think = ["--think", "12"];
    let (code, mut want, err) = extract(
        &input,
        &schema,
        &dir.path().join("one.jsonl"),
        &[&think[..], &["--parallel", "1"]].concat(),
    );
    assert_eq!(want.len(), 4, "{err}");
    for r in &want {
        assert_eq!(r.status, RecordStatus::Ok, "{code} {r:?}");
        let reasoning = r.reasoning.as_deref().unwrap_or_default();
        assert!(!reasoning.trim().is_empty(), "{r:?}");
        assert!(r.tokens > 0);
    }
    want.sort_by(|a, b| a.id.cmp(&b.id));
    let out = dir.path().join("many.jsonl");
    let (code2, mut got, err) = extract(
        &input,
        &schema,
        &out,
        &[&think[..], &["--parallel", "4"]].concat(),
    );
    assert_eq!(code2, code, "{err}");
    got.sort_by(|a, b| a.id.cmp(&b.id));
    assert_eq!(got, want);
    let (_, again, err) = extract(
        &input,
        &schema,
        &out,
        &[&think[..], &["--parallel", "4", "--resume"]].concat(),
    );
    assert_eq!(again.len(), 4, "{err}");
    assert!(err.contains("4 skipped"), "{err}");
    // Only the batched loop reserves KV: a budget too small for one document names the
    // reasoning's positions (12 + "Answer:" and a newline).
    let (code, tiny, err) = extract(
        &input,
        &schema,
        &dir.path().join("tiny.jsonl"),
        &[&think[..], &["--kv-budget", "64K"]].concat(),
    );
    assert_eq!((code, tiny.len()), (1, 4), "{err}");
    for r in &tiny {
        let e = r.error.as_deref().unwrap_or_default();
        assert!(e.contains("+ 20 of reasoning and its trigger"), "{e}");
    }
    // Without --think, the same batch does not reason.
    let (_, plain, err) = extract(
        &input,
        &schema,
        &dir.path().join("plain.jsonl"),
        &["--parallel", "4"],
    );
    assert_eq!(plain.len(), 4, "{err}");
    assert!(plain.iter().all(|r| r.reasoning.is_none()), "{plain:?}");
}
