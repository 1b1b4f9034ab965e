//! Fuzz target: batch extraction's files. The input is split in two at its first `0xff` byte:
//! the first part is an input JSONL file, the second an output file left by an earlier (maybe
//! killed) run. Reading the input must give one record or bad line per non-blank line, in
//! order, with line numbers inside the file (or a plain I/O error for text that is not UTF-8);
//! opening the output with `--resume` must keep exactly its whole lines, remember the ids of
//! those that are results, and leave a file that a new result line extends cleanly.
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use formwork_extract::batch::{read_records, OutputLog};
use formwork_extract::{RecordResult, RecordStatus};
use libfuzzer_sys::fuzz_target;

fn dir() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let d = std::env::temp_dir().join(format!("formwork-fuzz-batch-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    })
}

fuzz_target!(|data: &[u8]| {
    let (input, output) = match data.iter().position(|&b| b == 0xff) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let in_path = dir().join("in.jsonl");
    std::fs::write(&in_path, input).unwrap();
    if let Ok(records) = read_records(&in_path) {
        let text = std::str::from_utf8(input).expect("read_records accepted non-UTF-8");
        let lines: Vec<&str> = text.lines().collect();
        let non_blank = lines.iter().filter(|l| !l.trim().is_empty()).count();
        assert_eq!(records.len(), non_blank);
        for r in &records {
            match r {
                Ok(rec) => assert!(!rec.id.is_empty() || text.contains("\"id\"")),
                Err(bad) => {
                    assert!(bad.line >= 1 && bad.line <= lines.len(), "{bad:?}");
                    assert!(!bad.id.is_empty() || text.contains("\"id\""), "{bad:?}");
                    assert!(
                        bad.message.contains(&format!("line {}", bad.line)),
                        "{bad:?}"
                    );
                }
            }
        }
    }

    let out_path = dir().join("out.jsonl");
    std::fs::write(&out_path, output).unwrap();
    let keep = output
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |p| p + 1);
    let whole: Vec<RecordResult> = output[..keep]
        .split(|&b| b == b'\n')
        .filter_map(|l| serde_json::from_slice(l).ok())
        .collect();
    let mut log = OutputLog::open(&out_path, true).unwrap();
    for r in &whole {
        assert!(log.is_done(&r.id), "resume forgot `{}`", r.id);
    }
    let after = std::fs::read(&out_path).unwrap();
    assert_eq!(
        after,
        output[..keep],
        "resume must keep exactly the whole lines"
    );
    let new = RecordResult {
        id: "fuzz-new-id".into(),
        status: RecordStatus::Error,
        kind: None,
        output: None,
        error: Some("x".into()),
        text: None,
        closed_early: false,
        grounded_substrings: false,
        tokens: 0,
        forced_tokens: 0,
        latency_ms: 0.0,
        reasoning: None,
    };
    log.write(&new).unwrap();
    drop(log);
    let again = OutputLog::open(&out_path, true).unwrap();
    assert!(again.is_done("fuzz-new-id"));
    for r in &whole {
        assert!(again.is_done(&r.id));
    }
});
