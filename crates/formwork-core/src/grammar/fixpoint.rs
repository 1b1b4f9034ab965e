//! The least fixpoint over rules behind "which rules derive a finite string" (the grammar's
//! check that its start rule does, the parser's productive rules) and "which rules derive the
//! empty string" (the parser's nullable rules): [`least_fixpoint`].
//!
//! Owns the worklist only; what a symbol needs is the caller's ([`Need`]), so one
//! implementation serves the grammar IR and the parser's flat layout. Costs: O(grammar
//! symbols) time and memory (the round-robin sweeps it replaces were O(symbols × depth)).

/// What one symbol of an alternative needs for the alternative to count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Need {
    /// Nothing: the symbol always counts (a lexeme, for productivity).
    Nothing,
    /// The rule with this index must be in the set.
    Rule(u32),
    /// The alternative never counts (a lexeme that matches nothing, a dropped alternative).
    Never,
}

/// The least set of rules such that a rule is in it when one of its alternatives has every
/// symbol's [`Need`] met, as a flag per rule. `alternatives(r)` lists rule `r`'s alternatives,
/// each as its symbols' needs; it is called twice per rule and must list the same both times.
///
/// A worklist over rule occurrences: each alternative counts the rule symbols it still waits
/// for, and a rule entering the set decrements the alternatives it occurs in.
pub(crate) fn least_fixpoint<A, S>(rules_len: usize, alternatives: impl Fn(usize) -> A) -> Vec<bool>
where
    A: IntoIterator<Item = S>,
    S: IntoIterator<Item = Need>,
{
    let n = rules_len;
    let mut in_set = vec![false; n];
    // Per alternative: its rule and how many of its rule symbols are not in the set yet
    // (`u32::MAX`: never satisfied); per rule, the alternatives it occurs in, once per
    // occurrence.
    let mut alt_rule: Vec<u32> = Vec::new();
    let mut pending: Vec<u32> = Vec::new();
    let mut occ_start = vec![0u32; n + 1];
    let mut queue: Vec<u32> = Vec::new();
    #[allow(clippy::needless_range_loop)] // r names the rule as well as indexing `in_set`
    for r in 0..n {
        for alt in alternatives(r) {
            alt_rule.push(r as u32);
            let mut blocked = false;
            let mut k = 0;
            for need in alt {
                match need {
                    Need::Nothing => {}
                    Need::Rule(q) => {
                        k += 1;
                        occ_start[q as usize + 1] += 1;
                    }
                    Need::Never => blocked = true,
                }
            }
            pending.push(if blocked { u32::MAX } else { k });
            if !blocked && k == 0 && !in_set[r] {
                in_set[r] = true;
                queue.push(r as u32);
            }
        }
    }
    for r in 0..n {
        occ_start[r + 1] += occ_start[r];
    }
    let mut fill = occ_start.clone();
    let mut occ = vec![0u32; occ_start[n] as usize];
    let mut a = 0u32;
    for r in 0..n {
        for alt in alternatives(r) {
            for need in alt {
                if let Need::Rule(q) = need {
                    occ[fill[q as usize] as usize] = a;
                    fill[q as usize] += 1;
                }
            }
            a += 1;
        }
    }
    while let Some(r) = queue.pop() {
        let r = r as usize;
        for &a in &occ[occ_start[r] as usize..occ_start[r + 1] as usize] {
            let p = &mut pending[a as usize];
            if *p == u32::MAX {
                continue;
            }
            *p -= 1;
            let rule = alt_rule[a as usize] as usize;
            if *p == 0 && !in_set[rule] {
                in_set[rule] = true;
                queue.push(rule as u32);
            }
        }
    }
    in_set
}
