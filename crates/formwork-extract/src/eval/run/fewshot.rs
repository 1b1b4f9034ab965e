//! Worked examples (few-shot prompting): each selected case's candidates, drawn from the cases
//! of its group the run does not evaluate ([`attach_examples`], `--shots-from`), and the
//! `shots` a configuration shows of them ([`choose_examples`], by [`ShotSelection`]).
//!
//! No case is ever shown its own answer, nor another evaluated case's.

use std::collections::{BTreeMap, HashSet};

use serde_json::Value;

use super::config::ShotSelection;
use super::select::{check_range, group_positions};
use crate::eval::error::EvalError;
use crate::eval::range::CaseRange;
use crate::eval::suite::{Case, Scoring};

/// Gives each selected case its candidate worked examples: the cases of `all` in the same group
/// that are not selected themselves (so no case is shown its own answer, nor another
/// evaluated case's), in suite order; with `pool`, only those at the pool's positions of the
/// group (`--shots-from`). Each configuration then picks its `shots` of them
/// ([`choose_examples`]).
///
/// # Errors
/// [`EvalError::Config`] when a group has fewer than `shots` candidates, the suite judges cases
/// as function calls (a tool call has no answer to show as an example), or a `pool` is given
/// with no shots to draw; [`EvalError::RangePastGroup`] when `pool` reaches past a group's
/// end; [`EvalError::ExampleEvaluated`] when `pool` holds a selected case.
pub fn attach_examples(
    selected: &mut [Case],
    all: &[Case],
    shots: usize,
    pool: Option<CaseRange>,
) -> Result<(), EvalError> {
    if shots == 0 {
        return match pool {
            None => Ok(()),
            Some(r) => Err(EvalError::Config {
                path: "shots".into(),
                message: format!(
                    "worked examples are drawn from {r}, but no configuration shows any (shots = 0)"
                ),
            }),
        };
    }
    if let Some(r) = pool {
        check_range(all, r, "shots from")?;
    }
    let chosen: HashSet<&str> = selected.iter().map(|c| c.id.as_str()).collect();
    let mut pools: BTreeMap<Option<&str>, Vec<&Case>> = BTreeMap::new();
    for (c, pos) in all.iter().zip(group_positions(all)) {
        let evaluated = chosen.contains(c.id.as_str());
        match pool {
            Some(r) if !r.contains(pos) => continue,
            Some(range) if evaluated => {
                return Err(EvalError::ExampleEvaluated {
                    range,
                    case: c.id.clone(),
                })
            }
            None if evaluated => continue,
            _ => pools.entry(c.group.as_deref()).or_default().push(c),
        }
    }
    let source = match pool {
        Some(r) => format!("cases in {r}"),
        None => "cases outside the run".to_string(),
    };
    for case in selected.iter_mut() {
        if matches!(case.scoring, Scoring::Call(_)) {
            return Err(EvalError::Config {
                path: "shots".into(),
                message: format!(
                    "case `{}` is judged as a function call and has no answer to show as an example",
                    case.id
                ),
            });
        }
        let pool = pools
            .get(&case.group.as_deref())
            .map_or(&[][..], Vec::as_slice);
        if pool.len() < shots {
            return Err(EvalError::Config {
                path: "shots".into(),
                message: format!(
                    "{shots} examples asked for, but group `{}` has only {} {source}",
                    case.group.as_deref().unwrap_or("(none)"),
                    pool.len()
                ),
            });
        }
        case.examples = pool
            .iter()
            .map(|c| (c.input.text(), c.gold.clone()))
            .collect();
    }
    Ok(())
}

/// Picks `shots` worked examples for `document` out of its `candidates` (see
/// [`ShotSelection`]). Fewer candidates than `shots` gives all of them.
pub fn choose_examples(
    document: &str,
    candidates: &[(String, Value)],
    shots: usize,
    selection: ShotSelection,
) -> Vec<(String, Value)> {
    let shots = shots.min(candidates.len());
    match selection {
        ShotSelection::First => candidates[..shots].to_vec(),
        ShotSelection::Similar => {
            let words = |t: &str| -> HashSet<String> {
                t.split(|c: char| !c.is_alphanumeric())
                    .filter(|w| !w.is_empty())
                    .map(str::to_lowercase)
                    .collect()
            };
            let sets: Vec<HashSet<String>> = candidates.iter().map(|(t, _)| words(t)).collect();
            let mut df: BTreeMap<&str, usize> = BTreeMap::new();
            for w in sets.iter().flatten() {
                *df.entry(w.as_str()).or_default() += 1;
            }
            let n = candidates.len() as f64;
            let doc = words(document);
            let score = |set: &HashSet<String>| -> f64 {
                set.intersection(&doc)
                    .map(|w| (1.0 + n / df[w.as_str()] as f64).ln())
                    .sum()
            };
            let mut ranked: Vec<(f64, usize)> = sets
                .iter()
                .enumerate()
                .map(|(i, s)| (score(s), i))
                .collect();
            // Most similar first, ties in suite order; then reversed so the most similar example
            // sits right before the document.
            ranked.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
            ranked[..shots]
                .iter()
                .rev()
                .map(|&(_, i)| candidates[i].clone())
                .collect()
        }
    }
}
