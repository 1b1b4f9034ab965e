//! The eval stage's error ([`EvalError`]): a suite, configuration, results or outputs file that
//! cannot be used, a case range past a group's end, or a backend that failed as a whole.
//!
//! Below the suites and the runner, which both return it. One case's failure is not an
//! error but a [`Status`](super::report::Status) in its result row.

use super::range::CaseRange;

/// An error of the eval stage: a suite, configuration or results file that cannot be used, or
/// a backend that failed as a whole. One case's failure is a [`Status`](super::report::Status),
/// not an error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EvalError {
    /// The suite file cannot be read. The I/O error is the `source`, not part of the message,
    /// so a printed error chain (`{:#}`, as the CLI prints) names it once.
    #[error("cannot read suite {path}")]
    Io {
        /// The file.
        path: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A file the runner writes or reads besides the suite (results, outputs) failed.
    #[error("cannot use {path}")]
    File {
        /// The file.
        path: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The configuration file or flags are unusable.
    #[error("bad eval configuration {path}: {message}")]
    Config {
        /// The configuration file (`flags` for command-line flags).
        path: String,
        /// What is wrong, with line:column when the TOML parser gives it.
        message: String,
    },
    /// A line of a results or outputs file cannot be read.
    #[error("{path}:{line}: {message}")]
    Line {
        /// The file.
        path: String,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// A configuration asks for more worked examples (`shots`) than the case has candidates.
    #[error("configuration `{config}` asks for {shots} examples, the case has {available}")]
    TooFewExamples {
        /// The configuration.
        config: String,
        /// The examples it asks for.
        shots: usize,
        /// The candidates the case has.
        available: usize,
    },
    /// A configuration's prompt template is malformed.
    #[error("bad prompt template {path}")]
    Template {
        /// The template file.
        path: String,
        /// What is wrong, with line:column.
        #[source]
        source: crate::prompt::TemplateError,
    },
    /// A case range (`--cases`, `--shots-from`) reaches past the end of a group: a dev subset
    /// that silently shrank would not be the one the docs name.
    #[error("{what} {range}: {} has only {len} cases", group_label(.group.as_deref()))]
    RangePastGroup {
        /// Which range: `cases` or `shots from`.
        what: &'static str,
        /// The range.
        range: CaseRange,
        /// The group (SNIPS intent); `None` for a suite without groups.
        group: Option<String>,
        /// How many cases the group has.
        len: usize,
    },
    /// A worked example drawn from a range (`--shots-from`) is a case the run evaluates, which
    /// would show the model that case's answer.
    #[error("shots from {range} include case `{case}`, which the run evaluates")]
    ExampleEvaluated {
        /// The pool's range.
        range: CaseRange,
        /// The evaluated case in it.
        case: String,
    },
    /// The backend failed as a whole (e.g. the model cannot be loaded).
    #[error("eval backend failed: {message}")]
    Backend {
        /// What failed.
        message: String,
    },
}

/// "group `NAME`", or "the suite" for cases without a group.
fn group_label(group: Option<&str>) -> String {
    match group {
        Some(g) => format!("group `{g}`"),
        None => "the suite".to_string(),
    }
}
