//! What answers an attempt: the [`Backend`] trait, the [`Attempt`] it returns before judging,
//! and the [`ReplayBackend`] of outputs recorded earlier. The model backend is
//! [`ExtractBackend`](crate::eval::backend::ExtractBackend), a layer above.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

use serde::Deserialize;
use serde_json::Value;

use super::config::EvalConfig;
use crate::eval::error::EvalError;
use crate::eval::report::Status;
use crate::eval::suite::Case;

/// What a backend produced for one attempt, before judging.
#[derive(Clone, Debug, PartialEq)]
pub struct Attempt {
    /// The raw text produced (for a failed attempt, what the model wrote, if anything).
    pub raw: String,
    /// How decoding ended, if the backend knows better than the runner (a refusal branch, a
    /// budget that ran out); `None` lets the runner decide by parsing and validating `raw`.
    pub status: Option<Status>,
    /// The backend's reason for a failed `status` (what did not parse or validate, the budget
    /// that ran out), reported after the status.
    pub error: Option<String>,
    /// Tokens generated (sampled plus forced).
    pub tokens: usize,
    /// Tokens the grammar forced.
    pub forced_tokens: usize,
    /// Whether grounded values could be any substring, not only whole-word spans.
    pub grounded_substrings: bool,
}

/// Something that answers cases: the extraction library over a model, or recorded outputs.
pub trait Backend {
    /// Answers `case` under `config` in run `run` (a sampling backend draws with
    /// [`EvalConfig::seed_for`]). An `Err` is the attempt's own failure (recorded as
    /// [`Status::Error`] with the error and its causes as the reason), not the run's.
    fn attempt(
        &mut self,
        case: &Case,
        config: &EvalConfig,
        run: usize,
    ) -> Result<Attempt, AttemptError>;

    /// Answers every item of `items` (case, configuration, run), handing each to `done` with
    /// its index in `items` and its latency in milliseconds as soon as it is answered. A
    /// backend that decodes several attempts together overrides it (the model backend: see
    /// [`ExtractBackend::attempt_batch`](super::backend::ExtractBackend::attempt_batch)); each answer must be
    /// the one [`attempt`](Self::attempt) would give, only the order and latencies differ.
    /// The default answers them one at a time, in order.
    ///
    /// # Errors
    /// The first error `done` returns (answering stops there).
    fn attempt_many(
        &mut self,
        items: &[(&Case, &EvalConfig, usize)],
        done: &mut dyn FnMut(usize, Result<Attempt, AttemptError>, f64) -> Result<(), EvalError>,
    ) -> Result<(), EvalError> {
        for (i, &(case, config, run)) in items.iter().enumerate() {
            let start = Instant::now();
            let attempt = self.attempt(case, config, run);
            done(i, attempt, start.elapsed().as_secs_f64() * 1000.0)?;
        }
        Ok(())
    }
}

/// Why one attempt failed: the backend's own error, boxed.
pub type AttemptError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// An error and its causes on one line, `outer: cause: root cause`, for result rows.
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

/// Outputs recorded earlier (by formwork, another engine or a person), replayed for judging:
/// JSONL lines `{"id": ..., "output": "raw text", "config"?: name, "run"?: n, "tokens"?: n}`.
/// A line without `config` answers for every configuration.
#[derive(Debug, Default)]
pub struct ReplayBackend {
    outputs: BTreeMap<(String, Option<String>, usize), (String, usize)>,
}

impl ReplayBackend {
    /// Reads an outputs file; a bad line is an error with its line number.
    pub fn read(path: &Path) -> Result<ReplayBackend, EvalError> {
        let text = std::fs::read_to_string(path).map_err(|source| EvalError::File {
            path: path.display().to_string(),
            source,
        })?;
        ReplayBackend::parse(&text, &path.display().to_string())
    }

    /// Parses outputs JSONL text; `path` names the source in errors.
    pub fn parse(text: &str, path: &str) -> Result<ReplayBackend, EvalError> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Line {
            id: Value,
            output: String,
            config: Option<String>,
            #[serde(default)]
            run: usize,
            #[serde(default)]
            tokens: usize,
        }
        let mut outputs = BTreeMap::new();
        for (i, l) in text.lines().enumerate() {
            if l.trim().is_empty() {
                continue;
            }
            let line: Line = serde_json::from_str(l).map_err(|e| EvalError::Line {
                path: path.into(),
                line: i + 1,
                message: e.to_string(),
            })?;
            let id = match line.id {
                Value::String(s) => s,
                other => other.to_string(),
            };
            outputs.insert((id, line.config, line.run), (line.output, line.tokens));
        }
        Ok(ReplayBackend { outputs })
    }
}

impl Backend for ReplayBackend {
    fn attempt(
        &mut self,
        case: &Case,
        config: &EvalConfig,
        run: usize,
    ) -> Result<Attempt, AttemptError> {
        let keys = [
            (case.id.clone(), Some(config.name.clone()), run),
            (case.id.clone(), None, run),
            (case.id.clone(), Some(config.name.clone()), 0),
            (case.id.clone(), None, 0),
        ];
        let (raw, tokens) = keys
            .iter()
            .find_map(|k| self.outputs.get(k))
            .ok_or_else(|| format!("no recorded output for case `{}`", case.id))?;
        Ok(Attempt {
            raw: raw.clone(),
            status: None,
            error: None,
            tokens: *tokens,
            forced_tokens: 0,
            grounded_substrings: false,
        })
    }
}
