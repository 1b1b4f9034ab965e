//! Batch extraction I/O: documents in from JSONL, one result line out per document, resumable.
//!
//! Owns the file formats and their failure modes only (no model, no constraint): a bad input line
//! becomes an `error` record and the batch goes on; results are appended one whole line at a time
//! and flushed, so a killed run leaves at most one partial last line, which [`OutputLog::open`]
//! cuts off before resuming.
//!
//! Input line: `{"id": "...", "text": "..."}` (`document` or `input` are accepted for `text`;
//! a missing id becomes `line-N`). A line that is not UTF-8 or not such an object is a
//! [`BadLine`] whose message names the file and line. Ids key the results (written in finish
//! order) and `--resume`, so they must be unique: [`check_unique_ids`]. Output line: see
//! [`RecordResult`].
//!
//! May use: nothing else in the crate.

use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One input document.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// The record's id (from the line, or `line-N`).
    pub id: String,
    /// The document text.
    pub text: String,
    /// 1-based line number in the input file.
    pub line: usize,
}

/// An input line that could not be read: becomes an `error` result, never stops the batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadLine {
    /// The id to report it under (`line-N` when the line has no readable id).
    pub id: String,
    /// 1-based line number.
    pub line: usize,
    /// What is wrong, starting `line N of FILE: `.
    pub message: String,
}

/// Reads an input JSONL file into records and bad lines, in file order. Lines are split on
/// `\n` (a `\r` before it is dropped) and blank lines skipped. A line that is not UTF-8 is a
/// bad line like one that is not JSON, and the lines around it are still read (issue 20: the
/// whole file used to fail with "stream did not contain valid UTF-8", naming no line).
///
/// # Errors
/// Only when the file cannot be read.
pub fn read_records(path: &Path) -> std::io::Result<Vec<Result<Record, BadLine>>> {
    let mut reader = BufReader::new(File::open(path)?);
    let file = path.display().to_string();
    let mut out = Vec::new();
    let mut buf = Vec::new();
    for n in 1.. {
        buf.clear();
        if reader.read_until(b'\n', &mut buf)? == 0 {
            break;
        }
        let mut bytes = &buf[..];
        if let Some(rest) = bytes.strip_suffix(b"\n") {
            bytes = rest.strip_suffix(b"\r").unwrap_or(rest);
        }
        match std::str::from_utf8(bytes) {
            Ok(line) if line.trim().is_empty() => {}
            Ok(line) => out.push(parse_record(line, n, &file)),
            Err(e) => out.push(Err(BadLine {
                id: format!("line-{n}"),
                line: n,
                message: format!(
                    "line {n} of {file}: not valid UTF-8 (byte {} of the line)",
                    e.valid_up_to() + 1
                ),
            })),
        }
    }
    Ok(out)
}

fn parse_record(line: &str, n: usize, file: &str) -> Result<Record, BadLine> {
    let fallback = format!("line-{n}");
    let bad = |id: String, message: String| BadLine {
        id,
        line: n,
        message: format!("line {n} of {file}: {message}"),
    };
    let v: Value = serde_json::from_str(line)
        .map_err(|e| bad(fallback.clone(), format!("malformed JSON: {e}")))?;
    let id = match v.get("id") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(x)) => x.to_string(),
        _ => fallback,
    };
    let text = ["text", "document", "input"]
        .iter()
        .find_map(|k| v.get(*k).and_then(Value::as_str))
        .ok_or_else(|| {
            bad(
                id.clone(),
                "no `text` (or `document`/`input`) string".into(),
            )
        })?;
    Ok(Record {
        id,
        text: text.to_string(),
        line: n,
    })
}

/// Two input lines with one id (a bad line's fallback `line-N` counts too).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "duplicate id `{id}` on lines {first} and {second}: ids key the results in the output \
     and --resume, so each must be unique"
)]
pub struct DuplicateId {
    /// The repeated id.
    pub id: String,
    /// The line that has it first.
    pub first: usize,
    /// The next line that has it.
    pub second: usize,
}

/// Refuses inputs in which two lines have one id (issue 20). Results are written in finish
/// order and matched to inputs by id alone, and `--resume` skips every input whose id is
/// already in the output: with a repeated id, the second document was silently skipped on
/// resume (and by the one-at-a-time batch loop even without it), and two results with one id
/// cannot be told apart. Refusing (rather than keying by line number) keeps the output
/// readable on its own and resume correct even when the input file is edited between runs.
///
/// # Errors
/// The first repeat, in file order, with both lines.
pub fn check_unique_ids(inputs: &[Result<Record, BadLine>]) -> Result<(), DuplicateId> {
    let mut seen = std::collections::HashMap::with_capacity(inputs.len());
    for input in inputs {
        let (id, line) = match input {
            Ok(r) => (&r.id, r.line),
            Err(b) => (&b.id, b.line),
        };
        if let Some(&first) = seen.get(id.as_str()) {
            return Err(DuplicateId {
                id: id.clone(),
                first,
                second: line,
            });
        }
        seen.insert(id.as_str(), line);
    }
    Ok(())
}

/// How one record ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecordStatus {
    /// A valid object.
    Ok,
    /// The model refused (the refusal branch); never retried.
    Refusal,
    /// The output does not parse or validate (only in unconstrained modes).
    Invalid,
    /// The token budget ran out before any valid completion fit.
    Incomplete,
    /// The record could not be processed (bad input line, failed schema, ...).
    Error,
}

/// One output line.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RecordResult {
    /// The input record's id.
    pub id: String,
    /// How it ended.
    pub status: RecordStatus,
    /// Which kind of output came out when several are allowed: `tool_call` or `text` (tools
    /// with `--tool-choice auto`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// The extracted value (for `ok`), or the refusal reason object (for `refusal`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
    /// What went wrong, for `invalid`, `incomplete` and `error`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The text the model wrote, when it is not a usable output (`invalid`: unparsable or
    /// failing validation), so a failure can be read and kept as a regression sample.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Whether the output was steered to its shortest completion because the budget ran low.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub closed_early: bool,
    /// Whether grounded values could be any non-empty substring of the document rather than
    /// only whole-word spans: the document was over the span automaton's budget (long, highly
    /// repetitive text), so a value may cut a word. The values are still verbatim quotes and
    /// still satisfy their fields' own keywords.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub grounded_substrings: bool,
    /// Tokens generated (sampled + forced).
    pub tokens: usize,
    /// Of those, forced (fast-forwarded) tokens.
    pub forced_tokens: usize,
    /// Wall time, milliseconds.
    pub latency_ms: f64,
    /// The free text the model wrote before its answer (think, then answer), never part of
    /// `output`; absent when it did not think.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
}

/// The results file of a batch: append-only, one flushed line per record.
#[derive(Debug)]
pub struct OutputLog {
    file: File,
    done: HashSet<String>,
    path: PathBuf,
}

impl OutputLog {
    /// Opens `path` for appending. With `resume`, the ids already recorded are remembered (see
    /// [`is_done`](Self::is_done)) and a partial last line left by a killed run is cut off;
    /// without it, the file is truncated.
    pub fn open(path: &Path, resume: bool) -> std::io::Result<OutputLog> {
        let mut done = HashSet::new();
        if resume && path.exists() {
            let text = std::fs::read(path)?;
            // Keep only whole lines; a trailing fragment is an interrupted write.
            let keep = text.iter().rposition(|&b| b == b'\n').map_or(0, |p| p + 1);
            for line in text[..keep].split(|&b| b == b'\n') {
                if let Ok(r) = serde_json::from_slice::<RecordResult>(line) {
                    done.insert(r.id);
                }
            }
            let f = OpenOptions::new().write(true).open(path)?;
            f.set_len(keep as u64)?;
        }
        let mut file = OpenOptions::new()
            .create(true)
            .append(resume)
            .write(true)
            .truncate(!resume)
            .open(path)?;
        file.seek(SeekFrom::End(0))?;
        Ok(OutputLog {
            file,
            done,
            path: path.to_path_buf(),
        })
    }

    /// Whether a result for `id` is already in the file (only with `resume`).
    pub fn is_done(&self, id: &str) -> bool {
        self.done.contains(id)
    }

    /// Appends one result as one line and flushes it.
    pub fn write(&mut self, r: &RecordResult) -> std::io::Result<()> {
        let mut line = serde_json::to_vec(r).map_err(std::io::Error::other)?;
        line.push(b'\n');
        self.file.write_all(&line)?;
        self.file.flush()?;
        self.done.insert(r.id.clone());
        Ok(())
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Appends unparsable or invalid outputs (input, raw output, errors) to a JSONL file, so they
/// can become regression cases.
#[derive(Debug)]
pub struct BadSamples {
    file: File,
}

impl BadSamples {
    /// Opens (creating if needed) `path` for appending.
    pub fn open(path: &Path) -> std::io::Result<BadSamples> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(BadSamples { file })
    }

    /// Records one bad sample as one flushed line.
    pub fn record(
        &mut self,
        id: &str,
        input: &str,
        raw_output: &str,
        errors: &[String],
    ) -> std::io::Result<()> {
        let v = serde_json::json!({"id": id, "input": input, "raw_output": raw_output, "errors": errors});
        let mut line = serde_json::to_vec(&v).map_err(std::io::Error::other)?;
        line.push(b'\n');
        self.file.write_all(&line)?;
        self.file.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(id: &str) -> RecordResult {
        RecordResult {
            id: id.into(),
            status: RecordStatus::Ok,
            kind: None,
            output: Some(serde_json::json!({"a": 1})),
            error: None,
            text: None,
            closed_early: false,
            grounded_substrings: false,
            tokens: 3,
            forced_tokens: 1,
            latency_ms: 1.5,
            reasoning: None,
        }
    }

    #[test]
    fn bad_input_lines_become_error_records_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("in.jsonl");
        std::fs::write(
            &p,
            "{\"id\": \"a\", \"text\": \"x\"}\n{broken\n\n{\"id\": 7}\n{\"document\": \"y\"}\n",
        )
        .unwrap();
        let rs = read_records(&p).unwrap();
        assert_eq!(rs.len(), 4);
        assert_eq!(rs[0].as_ref().unwrap().id, "a");
        let e = rs[1].as_ref().unwrap_err();
        assert_eq!((e.id.as_str(), e.line), ("line-2", 2));
        assert!(e.message.contains("malformed JSON"), "{}", e.message);
        let e = rs[2].as_ref().unwrap_err();
        assert_eq!(e.id, "7");
        assert!(e.message.contains("no `text`"), "{}", e.message);
        assert_eq!(
            rs[3].as_ref().unwrap(),
            &Record {
                id: "line-5".into(),
                text: "y".into(),
                line: 5,
            }
        );
    }

    /// Issue 20: a line that is not UTF-8 failed the whole file ("stream did not contain
    /// valid UTF-8", no line named). Now it is a bad line naming file, line and byte, like a
    /// line that is not JSON, and the lines after it are read; CRLF endings are accepted.
    #[test]
    fn a_line_that_is_not_utf8_is_a_bad_line_naming_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("in.jsonl");
        let mut bytes = b"{\"id\": \"a\", \"text\": \"x\"}\r\n".to_vec();
        bytes.extend(b"{\"id\": \"b\", \"text\": \"caf\xe9\"}\n\n");
        bytes.extend(b"{\"id\": \"c\", \"text\": \"z\"}");
        std::fs::write(&p, &bytes).unwrap();
        let rs = read_records(&p).unwrap();
        assert_eq!(rs.len(), 3);
        assert_eq!(rs[0].as_ref().unwrap().text, "x");
        let e = rs[1].as_ref().unwrap_err();
        assert_eq!((e.id.as_str(), e.line), ("line-2", 2));
        let want = format!(
            "line 2 of {}: not valid UTF-8 (byte 25 of the line)",
            p.display()
        );
        assert_eq!(e.message, want);
        let c = rs[2].as_ref().unwrap();
        assert_eq!((c.id.as_str(), c.line), ("c", 4));
    }

    /// Issue 20: with two lines of one id, `--resume` skipped the second document (its id was
    /// "done"). Both lines are named, and a bad line's fallback id counts.
    #[test]
    fn duplicate_ids_are_refused_naming_both_lines() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("in.jsonl");
        std::fs::write(
            &p,
            "{\"id\": \"a\", \"text\": \"x\"}\n{\"id\": \"b\", \"text\": \"y\"}\n\n{\"id\": \"a\", \"text\": \"z\"}\n",
        )
        .unwrap();
        let e = check_unique_ids(&read_records(&p).unwrap()).unwrap_err();
        assert_eq!((e.id.as_str(), e.first, e.second), ("a", 1, 4));
        assert!(
            e.to_string()
                .starts_with("duplicate id `a` on lines 1 and 4"),
            "{e}"
        );
        // A number and a string that print alike, and an explicit `line-N` against a bad line.
        std::fs::write(
            &p,
            "{\"id\": 7, \"text\": \"x\"}\n{\"id\": \"7\", \"text\": \"y\"}\n",
        )
        .unwrap();
        let e = check_unique_ids(&read_records(&p).unwrap()).unwrap_err();
        assert_eq!((e.first, e.second), (1, 2));
        std::fs::write(&p, "{\"id\": \"line-2\", \"text\": \"x\"}\n{broken\n").unwrap();
        let e = check_unique_ids(&read_records(&p).unwrap()).unwrap_err();
        assert_eq!((e.id.as_str(), e.first, e.second), ("line-2", 1, 2));
        std::fs::write(
            &p,
            "{\"id\": \"a\", \"text\": \"x\"}\n{broken\n{\"text\": \"y\"}\n",
        )
        .unwrap();
        check_unique_ids(&read_records(&p).unwrap()).unwrap();
    }

    #[test]
    fn resume_skips_done_ids_and_cuts_a_partial_line() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("out.jsonl");
        {
            let mut log = OutputLog::open(&p, false).unwrap();
            log.write(&result("a")).unwrap();
            log.write(&result("b")).unwrap();
        }
        // A killed run left half a line.
        let mut f = OpenOptions::new().append(true).open(&p).unwrap();
        f.write_all(b"{\"id\": \"c\", \"sta").unwrap();
        drop(f);
        let mut log = OutputLog::open(&p, true).unwrap();
        assert!(log.is_done("a") && log.is_done("b") && !log.is_done("c"));
        log.write(&result("c")).unwrap();
        drop(log);
        let text = std::fs::read_to_string(&p).unwrap();
        let ids: Vec<String> = text
            .lines()
            .map(|l| serde_json::from_str::<RecordResult>(l).unwrap().id)
            .collect();
        assert_eq!(ids, ["a", "b", "c"]);
        // Without --resume the file starts over.
        let log = OutputLog::open(&p, false).unwrap();
        assert!(!log.is_done("a"));
        drop(log);
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "");
    }

    #[test]
    fn bad_samples_append_jsonl() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("bad.jsonl");
        let mut b = BadSamples::open(&p).unwrap();
        b.record("x", "doc", "{oops", &["expected value at line 1".into()])
            .unwrap();
        b.record("y", "doc", "[]", &["/: not an object".into()])
            .unwrap();
        let lines: Vec<Value> = std::fs::read_to_string(&p)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0]["raw_output"], "{oops");
        assert_eq!(lines[1]["errors"][0], "/: not an object");
    }
}
