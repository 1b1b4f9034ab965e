//! One document's [`RecordResult`], built from what happened to it: a [`Judged`] output, a
//! constrained [`Generation`] (incomplete when the budget cut it), a reasoning [`Thought`],
//! or an error.
//!
//! Does not own judging ([`judge`](super::judge)) or decoding.
//!
//! May use (within `run`): `config`, `prepare`, `judge`.

use serde_json::Value;

use super::config::ExtractConfig;
use super::judge::Judged;
use super::prepare::Prepared;
use crate::batch::{RecordResult, RecordStatus};
use formwork_core::generate::{Generation, Thought};

/// A thinking record: the reasoning in its own field, its tokens counted with the answer's.
pub(super) fn add_reasoning(r: &mut RecordResult, thought: &Thought) {
    r.reasoning = Some(thought.text());
    r.tokens += thought.tokens;
}

/// The record of a constrained generation `out` for `document`: incomplete when the budget cut
/// it, else the judged value (an invalid one is reported as formwork's bug).
pub(super) fn constrained_result(
    prepared: &Prepared,
    cfg: &ExtractConfig,
    id: &str,
    document: &str,
    out: &Generation,
    whole_words: bool,
) -> RecordResult {
    let mut r = if !out.accepted {
        result(
            id,
            RecordStatus::Incomplete,
            None,
            Some(format!(
                "the budget of {} tokens ran out before any valid completion fit \
                 (partial output: {:?})",
                cfg.generate.max_tokens,
                out.text()
            )),
        )
    } else {
        let j = prepared.judge(&out.text(), document, true);
        let mut r = from_judged(id, j);
        if r.status == RecordStatus::Invalid {
            // Valid by construction: an invalid output here is a formwork bug; say so.
            r.error = r
                .error
                .map(|e| format!("internal: constrained output failed validation: {e}"));
        }
        r
    };
    fill_counts(&mut r, out);
    // Reported rather than refused: the values are still verbatim quotes satisfying their
    // fields, only the word-boundary refinement is off, and refusing would leave a long
    // repetitive document with no grounded extraction at all.
    r.grounded_substrings = !whole_words;
    r
}

pub(super) fn result(
    id: &str,
    status: RecordStatus,
    output: Option<Value>,
    error: Option<String>,
) -> RecordResult {
    RecordResult {
        id: id.to_string(),
        status,
        kind: None,
        output,
        error,
        text: None,
        closed_early: false,
        grounded_substrings: false,
        tokens: 0,
        forced_tokens: 0,
        latency_ms: 0.0,
        reasoning: None,
    }
}

pub(super) fn from_judged(id: &str, j: Judged) -> RecordResult {
    let error = (!j.errors.is_empty()).then(|| j.errors.join("; "));
    let mut r = result(id, j.status, j.value, error);
    r.kind = j.kind.map(str::to_string);
    r
}

pub(super) fn fill_counts(r: &mut RecordResult, g: &Generation) {
    r.tokens = g.tokens_len();
    r.forced_tokens = g.forced_tokens;
    r.closed_early = g.closed_early;
}
