//! Judging one attempt into a result row ([`judge_attempt`]): the output parsed and validated
//! against the case's schema or tool list ([`check_output`], [`OutputError`]), then scored by
//! the case's rule.
//!
//! One validator for extraction and evals alike ([`crate::validate`]); cost: one validator
//! build per attempt (a schema walk, negligible next to decoding).

use serde_json::Value;

use super::attempt::{error_chain, Attempt, AttemptError};
use super::config::EvalConfig;
use crate::eval::report::{CaseResult, SlotCounts, Status};
use crate::eval::suite::{bfcl_params, Case, Scoring, Target};
use crate::validate::InvalidSchema;

/// Parses `raw` as JSON and validates it against the case's schema, or as a call
/// `{"name", "arguments"}` of one of the case's tools. The error lists what is wrong.
pub fn check_output(case: &Case, raw: &str) -> Result<Value, OutputError> {
    let value: Value =
        serde_json::from_str(raw.trim()).map_err(|e| OutputError::Parse(e.to_string()))?;
    match &case.target {
        Target::Schema(schema) => validate(schema, &value)?,
        Target::Tools(tools) => {
            let name = value
                .get("name")
                .and_then(Value::as_str)
                .ok_or(OutputError::NoToolName)?;
            let tool = tools
                .iter()
                .find(|t| tool_name(t) == Some(name))
                .ok_or_else(|| OutputError::UnknownTool(name.to_string()))?;
            let args = value.get("arguments").cloned().unwrap_or(Value::Null);
            let params = tool
                .get("parameters")
                .or_else(|| tool.pointer("/function/parameters"));
            if let Some(p) = params {
                validate(&bfcl_params(p), &args)
                    .map_err(|e| OutputError::Arguments(Box::new(e)))?;
            }
        }
    }
    Ok(value)
}

/// Why an output is not a valid answer to its case ([`check_output`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OutputError {
    /// The output is not JSON.
    #[error("does not parse: {0}")]
    Parse(String),
    /// The case's schema does not compile in the validator.
    #[error("schema does not compile: {0}")]
    Schema(#[from] InvalidSchema),
    /// The output breaks the schema: every error, `<instance pointer>: <message>`.
    #[error("{}", .0.join("; "))]
    Invalid(Vec<String>),
    /// A tool call without a string `name`.
    #[error("a call needs a string `name`")]
    NoToolName,
    /// A call of a tool the case does not offer.
    #[error("unknown tool `{0}`")]
    UnknownTool(String),
    /// A call whose arguments break the tool's parameter schema.
    #[error("arguments: {0}")]
    Arguments(Box<OutputError>),
}

fn tool_name(tool: &Value) -> Option<&str> {
    tool.get("name")
        .or_else(|| tool.pointer("/function/name"))
        .and_then(Value::as_str)
}

/// The output's errors under `schema` (one validator, [`crate::validate`], for extraction and
/// evals alike).
fn validate(schema: &Value, value: &Value) -> Result<(), OutputError> {
    let errors = crate::validate::validate(schema, value)?;
    if errors.is_empty() {
        Ok(())
    } else {
        Err(OutputError::Invalid(errors))
    }
}

/// Judges one attempt into a result row.
pub fn judge_attempt(
    case: &Case,
    config: &EvalConfig,
    run: usize,
    attempt: Result<Attempt, AttemptError>,
    latency_ms: f64,
) -> CaseResult {
    let mut r = CaseResult {
        case: case.id.clone(),
        config: config.name.clone(),
        run,
        status: Status::Error,
        output: None,
        raw: String::new(),
        correct: false,
        field_accuracy: 0.0,
        // A slot case that produced nothing still has gold slots: they count as missed, so a
        // configuration cannot raise its F1 by failing.
        slots: matches!(case.scoring, Scoring::Slots).then(|| SlotCounts {
            true_positives: 0,
            predicted: 0,
            gold: case.gold.as_object().map_or(0, |o| o.len()),
        }),
        reason: String::new(),
        tokens: 0,
        forced_tokens: 0,
        grounded_substrings: false,
        latency_ms,
    };
    let a = match attempt {
        Ok(a) => a,
        Err(e) => {
            r.reason = error_chain(e.as_ref());
            return r;
        }
    };
    r.raw = a.raw;
    r.tokens = a.tokens;
    r.forced_tokens = a.forced_tokens;
    r.grounded_substrings = a.grounded_substrings;
    match a.status {
        // The backend's own verdict on a failed attempt stands (its validator saw the raw
        // text).
        Some(s @ (Status::Refusal | Status::Incomplete | Status::Error | Status::Invalid)) => {
            r.status = s;
            r.reason = format!("{s:?}").to_lowercase();
            if let Some(e) = a.error {
                r.reason = format!("{}: {e}", r.reason);
            }
            return r;
        }
        Some(Status::Ok) | None => {}
    }
    match check_output(case, &r.raw) {
        Ok(value) => {
            let s = case.score(&value);
            r.status = Status::Ok;
            r.correct = s.correct;
            r.field_accuracy = s.field_accuracy;
            if let Some(slots) = s.slots {
                r.slots = Some(slots.into());
            }
            r.reason = s.reason;
            r.output = Some(value);
        }
        Err(e) => {
            r.status = if a.status == Some(Status::Ok) {
                // The backend claims validity the validator denies: a formwork bug, surfaced.
                Status::Error
            } else {
                Status::Invalid
            };
            r.reason = e.to_string();
        }
    }
    r
}
