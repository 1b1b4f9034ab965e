//! Fuzz target: batch extraction's files. The input is split in two at its first `0xff` byte:
//! the first part is an input JSONL file, the second an output file left by an earlier (maybe
//! killed) run. Reading the input must give one record or bad line per non-blank line, in
//! order, with its line number (a line that is not UTF-8 is a bad line naming file and line),
//! and a repeated id must be named with both its lines; opening the output with `--resume`
//! must keep exactly its whole lines, remember the ids of those that are results, and leave a
//! file that a new result line extends cleanly.
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use formwork_extract::batch::{check_unique_ids, read_records, OutputLog};
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
    // Any bytes are read: a line that is not UTF-8 is a bad line like one that is not JSON.
    let records = read_records(&in_path).expect("read_records failed on a readable file");
    let mut lines: Vec<&[u8]> = input.split(|&b| b == b'\n').collect();
    if input.ends_with(b"\n") || input.is_empty() {
        lines.pop();
    }
    let non_blank: Vec<usize> = (1..=lines.len())
        .filter(|&n| {
            let l = lines[n - 1];
            let l = if n < lines.len() || input.ends_with(b"\n") {
                l.strip_suffix(b"\r").unwrap_or(l)
            } else {
                l
            };
            std::str::from_utf8(l).map_or(true, |t| !t.trim().is_empty())
        })
        .collect();
    let got: Vec<usize> = records
        .iter()
        .map(|r| match r {
            Ok(rec) => rec.line,
            Err(bad) => bad.line,
        })
        .collect();
    assert_eq!(
        got, non_blank,
        "one record or bad line per non-blank line, in order"
    );
    for r in &records {
        match r {
            Ok(rec) => {
                assert!(
                    !rec.id.is_empty() || lines[rec.line - 1].windows(4).any(|w| w == b"\"id\"")
                );
                assert!(std::str::from_utf8(lines[rec.line - 1]).is_ok());
            }
            Err(bad) => {
                assert!(
                    !bad.id.is_empty() || lines[bad.line - 1].windows(4).any(|w| w == b"\"id\""),
                    "{bad:?}"
                );
                let at = format!("line {} of {}: ", bad.line, in_path.display());
                assert!(bad.message.starts_with(&at), "{bad:?}");
            }
        }
    }
    // Ids are unique, or the first repeat is named with both its lines.
    match check_unique_ids(&records) {
        Ok(()) => {}
        Err(dup) => {
            assert!(dup.first < dup.second, "{dup:?}");
            assert!(
                got.contains(&dup.first) && got.contains(&dup.second),
                "{dup:?}"
            );
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
