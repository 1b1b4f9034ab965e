//! The results JSONL ([`ResultsLog`]): one result row per line, appended and flushed as each
//! attempt ends, and read back on resume (a torn last line from a killed run is dropped).

use std::io::Write as _;
use std::path::{Path, PathBuf};

use crate::eval::error::EvalError;
use crate::eval::report::CaseResult;

/// The results JSONL: one [`CaseResult`] per line, appended and flushed as each attempt ends.
#[derive(Debug)]
pub struct ResultsLog {
    path: PathBuf,
    file: Option<std::fs::File>,
    done: Vec<CaseResult>,
}

impl ResultsLog {
    /// Opens `path` for writing. With `resume`, the results already there are kept and their
    /// triples skipped (a torn last line, from a killed run, is dropped); without, the file is
    /// truncated.
    pub fn open(path: &Path, resume: bool) -> Result<ResultsLog, EvalError> {
        let err = |source| EvalError::File {
            path: path.display().to_string(),
            source,
        };
        let mut done = Vec::new();
        if resume && path.exists() {
            let text = std::fs::read_to_string(path).map_err(err)?;
            let lines: Vec<&str> = text.lines().collect();
            for (i, l) in lines.iter().enumerate() {
                match serde_json::from_str::<CaseResult>(l) {
                    Ok(r) => done.push(r),
                    Err(_) if i + 1 == lines.len() => {}
                    Err(e) => {
                        return Err(EvalError::Line {
                            path: path.display().to_string(),
                            line: i + 1,
                            message: e.to_string(),
                        })
                    }
                }
            }
            // Rewrite without a torn line so appends start on a fresh line.
            let mut f = std::fs::File::create(path).map_err(err)?;
            for r in &done {
                writeln!(f, "{}", serde_json::to_string(r).unwrap_or_default()).map_err(err)?;
            }
        } else {
            std::fs::File::create(path).map_err(err)?;
        }
        let file = std::fs::OpenOptions::new()
            .append(true)
            .open(path)
            .map_err(err)?;
        Ok(ResultsLog {
            path: path.to_path_buf(),
            file: Some(file),
            done,
        })
    }

    /// A log that keeps results in memory only.
    pub fn in_memory() -> ResultsLog {
        ResultsLog {
            path: PathBuf::new(),
            file: None,
            done: Vec::new(),
        }
    }

    /// The results so far (resumed and new).
    pub fn results(&self) -> &[CaseResult] {
        &self.done
    }

    /// Takes the results.
    pub fn into_results(self) -> Vec<CaseResult> {
        self.done
    }

    /// Whether the triple (case, configuration name, run) has a result.
    pub fn has(&self, case: &str, config: &str, run: usize) -> bool {
        self.done
            .iter()
            .any(|r| r.case == case && r.config == config && r.run == run)
    }

    pub(super) fn push(&mut self, r: CaseResult) -> Result<(), EvalError> {
        if let Some(f) = &mut self.file {
            let line = serde_json::to_string(&r).map_err(|e| EvalError::Line {
                path: self.path.display().to_string(),
                line: self.done.len() + 1,
                message: e.to_string(),
            })?;
            writeln!(f, "{line}")
                .and_then(|()| f.flush())
                .map_err(|source| EvalError::File {
                    path: self.path.display().to_string(),
                    source,
                })?;
        }
        self.done.push(r);
        Ok(())
    }
}
