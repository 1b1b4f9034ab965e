//! Which cases a run evaluates: `--limit`, `--per-intent` and `--cases` ([`GroupSelection`],
//! [`select_cases`]), counted per group (SNIPS intent) in suite order.
//!
//! A range past a group's end is an error, so a dev subset never silently shrinks.

use std::collections::BTreeMap;

use crate::eval::error::EvalError;
use crate::eval::range::CaseRange;
use crate::eval::suite::Case;

/// Which cases of each group (SNIPS intent; the whole suite when cases have no group) a run
/// evaluates.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum GroupSelection {
    /// Every case.
    #[default]
    All,
    /// The first K of each group (`--per-intent K`); a smaller group gives all it has.
    First(usize),
    /// The cases at these positions of each group (`--cases FIRST..LAST`). A group with no
    /// case at the last position is an error, so a dev subset never silently shrinks.
    Range(CaseRange),
}

/// Keeps the cases `per_group` asks for in each group, then the first `limit` of those, in
/// suite order.
///
/// # Errors
/// [`EvalError::RangePastGroup`] when `per_group` is a range that reaches past a group's end.
pub fn select_cases(
    cases: Vec<Case>,
    limit: Option<usize>,
    per_group: GroupSelection,
) -> Result<Vec<Case>, EvalError> {
    if let GroupSelection::Range(r) = per_group {
        check_range(&cases, r, "cases")?;
    }
    let positions = group_positions(&cases);
    let mut out: Vec<Case> = cases
        .into_iter()
        .zip(positions)
        .filter(|(_, pos)| match per_group {
            GroupSelection::All => true,
            GroupSelection::First(k) => *pos < k,
            GroupSelection::Range(r) => r.contains(*pos),
        })
        .map(|(c, _)| c)
        .collect();
    if let Some(k) = limit {
        out.truncate(k);
    }
    Ok(out)
}

/// Each case's position within its group, counted from 0 in suite order.
pub(super) fn group_positions(cases: &[Case]) -> Vec<usize> {
    let mut seen: BTreeMap<Option<&str>, usize> = BTreeMap::new();
    cases
        .iter()
        .map(|c| {
            let n = seen.entry(c.group.as_deref()).or_insert(0);
            *n += 1;
            *n - 1
        })
        .collect()
}

/// Fails when a group of `cases` (the first in suite order) has no case at `range`'s last
/// position; `what` names the range in the error.
pub(super) fn check_range(
    cases: &[Case],
    range: CaseRange,
    what: &'static str,
) -> Result<(), EvalError> {
    let mut sizes: BTreeMap<Option<&str>, usize> = BTreeMap::new();
    for c in cases {
        *sizes.entry(c.group.as_deref()).or_default() += 1;
    }
    for c in cases {
        let len = sizes[&c.group.as_deref()];
        if len <= range.last() {
            return Err(EvalError::RangePastGroup {
                what,
                range,
                group: c.group.clone(),
                len,
            });
        }
    }
    Ok(())
}
