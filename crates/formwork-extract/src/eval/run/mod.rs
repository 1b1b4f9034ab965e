//! The eval runner: cases × configurations × runs through a [`Backend`], each attempt judged and
//! written to the results file as it comes, so a long run can be resumed.
//!
//! Owns configurations (TOML or flags, [`EvalConfig`]), case selection (`--limit`,
//! `--per-intent`, a [`CaseRange`](super::range::CaseRange) per group with `--cases`, and the worked examples' pool,
//! `--shots-from`), the seed of each attempt (`seed + run` mixed with the case id; a greedy
//! configuration runs once), output validation against the case's schema or tool list, and the
//! results JSONL. Does not own decoding (the backend's) nor aggregation (see
//! [`report`](super::report)).
//!
//! Invariant: every (case, config, run) triple is attempted at most once per results file; a
//! resumed run reads the triples already written and skips them. Cost: one backend attempt per
//! triple plus one schema validator build per attempt (a schema walk, negligible next to
//! decoding).
//!
//! Files: `config` → `select` → `fewshot` → `attempt` → `judging` → `log` → `plan`.
//!
//! Each file uses only those before it; the public items are re-exported here, so their
//! paths are `run::…`:
//! - `config`: the configurations ([`EvalConfig`], [`Mode`], [`EvalFile`]);
//! - `select`: which cases a run evaluates ([`select_cases`], [`GroupSelection`]);
//! - `fewshot`: the worked examples ([`attach_examples`], [`choose_examples`]);
//! - `attempt`: what answers an attempt ([`Backend`], [`Attempt`], [`ReplayBackend`]);
//! - `judging`: one attempt into a result row ([`judge_attempt`], [`check_output`]);
//! - `log`: the results JSONL ([`ResultsLog`]);
//! - `plan`: the attempts' order and the loop over them ([`plan`](plan()), [`run_eval`]).

mod attempt;
mod config;
mod fewshot;
mod judging;
mod log;
mod plan;
mod select;

pub use attempt::{error_chain, Attempt, AttemptError, Backend, ReplayBackend};
pub use config::{name_configs, EvalConfig, EvalFile, Mode, ShotSelection};
pub use fewshot::{attach_examples, choose_examples};
pub use judging::{check_output, judge_attempt, OutputError};
pub use log::ResultsLog;
pub use plan::{plan, run_eval};
pub use select::{select_cases, GroupSelection};

#[cfg(test)]
mod tests;
