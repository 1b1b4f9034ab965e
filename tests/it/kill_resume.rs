//! Crash safety of batch extraction (issue 20): `formwork extract --input … --output …` killed
//! with SIGKILL at random points, again and again, then `--resume`d, must end with exactly one
//! result line per input: none lost, none duplicated, none half-written.
//!
//! SmolLM2 (the small registry model), twelve one-sentence documents, a one-field schema and a
//! 12-token budget, so a whole run is a few seconds and the kills land during model load,
//! decoding and line writes alike. The kill times come from a seeded generator (the same every
//! run). A torn last line (what a kill in the middle of a long write would leave) is also
//! written by hand once, since a SIGKILL cannot split the small `write` calls these lines take.
//! Costs about 20 s of CI time (seven model loads plus the documents).

use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use formwork::extract::batch::{RecordResult, RecordStatus};
use rand::{Rng, SeedableRng};

use super::model_fetch::fetched;

const DOCS: usize = 12;

fn extract(input: &Path, schema: &Path, out: &Path, parallel: &str) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_formwork"));
    cmd.arg("extract")
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
            "12",
            "--threads",
            "2",
            "--parallel",
            parallel,
            "--resume",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    cmd
}

/// The whole lines of `out` (each must be a result), and whether a partial last line follows.
fn read_lines(out: &Path) -> (Vec<RecordResult>, bool) {
    let text = std::fs::read(out).unwrap_or_default();
    let keep = text.iter().rposition(|&b| b == b'\n').map_or(0, |p| p + 1);
    let lines = text[..keep]
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| {
            serde_json::from_slice(l).unwrap_or_else(|e| {
                panic!(
                    "a whole line that is not a result ({e}): {}",
                    String::from_utf8_lossy(l)
                )
            })
        })
        .collect();
    (lines, keep < text.len())
}

fn assert_no_duplicates(lines: &[RecordResult]) {
    let mut seen = HashMap::new();
    for r in lines {
        if let Some(n) = seen.insert(r.id.clone(), 1) {
            panic!("id `{}` written {} times", r.id, n + 1);
        }
    }
}

#[test]
fn extract_killed_at_random_points_then_resumed_writes_each_result_once() {
    fetched("smollm2-135m");
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    let cities = ["Lisbon", "Oslo", "Quito", "Lagos", "Perth", "Hanoi"];
    let lines: Vec<String> = (0..DOCS)
        .map(|i| {
            serde_json::json!({
                "id": format!("doc-{i}"),
                "text": format!("Order {} shipped to {} on day {}.", 100 + i, cities[i % 6], i + 1)
            })
            .to_string()
        })
        .collect();
    std::fs::write(&input, lines.join("\n") + "\n").unwrap();
    let schema = dir.path().join("schema.json");
    std::fs::write(
        &schema,
        r#"{"type": "object", "properties": {"order": {"type": "integer"}}, "required": ["order"], "additionalProperties": false}"#,
    )
    .unwrap();
    let out = dir.path().join("out.jsonl");

    let mut rng = rand::rngs::StdRng::seed_from_u64(20);
    let mut killed_with_progress = 0;
    for round in 0..6 {
        let parallel = if round % 2 == 0 { "1" } else { "4" };
        let before = read_lines(&out).0.len();
        let mut child = extract(&input, &schema, &out, parallel).spawn().unwrap();
        // Odd rounds: a kill at a random time, often during model load (~0.5-1.5 s here).
        // Even rounds: a kill a random 0-150 ms after the run's first new line, so it lands
        // mid-batch however slow the machine is.
        let delay = Duration::from_millis(rng.random_range(50..2000));
        let extra = Duration::from_millis(rng.random_range(0..150));
        let start = Instant::now();
        let mut finished = false;
        let mut wrote_at = None;
        loop {
            if child.try_wait().unwrap().is_some() {
                finished = true;
                break;
            }
            if round % 2 == 1 && start.elapsed() >= delay {
                break;
            }
            if round % 2 == 0 {
                if wrote_at.is_none() && read_lines(&out).0.len() > before {
                    wrote_at = Some(Instant::now());
                }
                if wrote_at.is_some_and(|t| t.elapsed() >= extra) {
                    break;
                }
                assert!(start.elapsed() < Duration::from_secs(300), "no progress");
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        if !finished {
            child.kill().unwrap(); // SIGKILL
        }
        child.wait().unwrap();
        let (done, _partial) = read_lines(&out);
        assert_no_duplicates(&done);
        if !finished && done.len() > before {
            killed_with_progress += 1;
        }
        if round == 2 {
            // A torn write: the first half of a result line for a document not yet done.
            let next = (0..DOCS)
                .map(|i| format!("doc-{i}"))
                .find(|id| done.iter().all(|r| &r.id != id));
            if let Some(id) = next {
                let line = serde_json::json!({"id": id, "status": "ok", "output": {"order": 1}, "tokens": 3, "forced_tokens": 1, "latency_ms": 1.0}).to_string();
                let mut f = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&out)
                    .unwrap();
                std::io::Write::write_all(&mut f, &line.as_bytes()[..line.len() / 2]).unwrap();
            }
        }
    }
    // The last run is left to finish.
    let status = extract(&input, &schema, &out, "4").status().unwrap();
    let (done, partial) = read_lines(&out);
    assert!(!partial, "a partial last line after a finished run");
    assert_no_duplicates(&done);
    let mut ids: Vec<&str> = done.iter().map(|r| r.id.as_str()).collect();
    ids.sort_unstable();
    let mut want: Vec<String> = (0..DOCS).map(|i| format!("doc-{i}")).collect();
    want.sort_unstable();
    assert_eq!(ids, want, "one line per input");
    for r in &done {
        assert_eq!(r.status, RecordStatus::Ok, "{r:?}");
        assert!(
            r.output.as_ref().is_some_and(|o| o["order"].is_i64()),
            "{r:?}"
        );
    }
    assert!(status.success(), "{status}");
    // The kills must have interrupted runs that were writing, or the test proves little.
    eprintln!("kills that interrupted a run after it had written lines: {killed_with_progress}");
    assert!(killed_with_progress >= 1, "no kill landed mid-batch");
}
