//! The order of an eval's attempts ([`plan`]: case-major, then run, then configuration) and
//! the loop that makes the ones a results file lacks ([`run_eval`]).

use super::attempt::Backend;
use super::config::EvalConfig;
use super::judging::judge_attempt;
use super::log::ResultsLog;
use crate::eval::error::EvalError;
use crate::eval::report::CaseResult;
use crate::eval::suite::Case;

/// The attempts an eval makes, in order: case-major, then run, then configuration. All
/// attempts on one case come back to back, so configurations that render the same prompt
/// (the four modes under one template) and every run of them share its prefill through the
/// model's prompt-prefix cache; and an interrupted eval has every configuration and run on
/// the same cases, which is what the paired comparisons need.
pub fn plan<'a>(
    cases: &'a [Case],
    configs: &'a [EvalConfig],
    runs: usize,
) -> Vec<(&'a Case, &'a EvalConfig, usize)> {
    let max_runs = configs.iter().map(|c| c.runs(runs)).max().unwrap_or(0);
    let mut out = Vec::new();
    for case in cases {
        for run in 0..max_runs {
            for config in configs.iter().filter(|c| run < c.runs(runs)) {
                out.push((case, config, run));
            }
        }
    }
    out
}

/// Runs every planned attempt not already in `log` through `backend`
/// ([`Backend::attempt_many`]: in plan order, or several at once and written as they finish),
/// judging each and appending it to `log`; `progress` is called once per skipped attempt
/// (with `None`, first) and after each attempt made, with its result.
pub fn run_eval(
    cases: &[Case],
    configs: &[EvalConfig],
    runs: usize,
    backend: &mut dyn Backend,
    log: &mut ResultsLog,
    progress: &mut dyn FnMut(Option<&CaseResult>),
) -> Result<(), EvalError> {
    let mut todo = Vec::new();
    for (case, config, run) in plan(cases, configs, runs) {
        if log.has(&case.id, &config.name, run) {
            progress(None);
        } else {
            todo.push((case, config, run));
        }
    }
    backend.attempt_many(&todo, &mut |i, attempt, ms| {
        let (case, config, run) = todo[i];
        log.push(judge_attempt(case, config, run, attempt, ms))?;
        progress(log.results().last());
        Ok(())
    })
}
