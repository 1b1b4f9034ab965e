//! Terminal priorities (`TERM.N: ...`): accepted exactly where they cannot matter.
//!
//! In Lark a priority picks between terminals that match at the same place. formwork's lexer
//! never picks (it follows every allowed terminal and takes the longest match), so a priority
//! can be honoured only when there is nothing to pick: no other terminal of a different
//! priority *competes* with it, i.e. no text of one is a prefix of (or equal to) a text of the
//! other. Then at any place at most one of them can match, in Lark's lexers as in formwork's.
//! Anything else is refused with the competitor's name.
//!
//! The check walks the product of the two terminals' DFAs (regex-automata, dense, anchored):
//! a pair of states where one has matched and the other can still go on is a competition.
//! Costs: two DFAs (at most [`MAX_PAIRS`] states each, liveness by a reverse sweep) and at most
//! [`MAX_PAIRS`] product states per pair of terminals compared; running out of budget counts
//! as competing (refusing is the safe answer).

use std::collections::HashSet;

use regex_automata::dfa::{dense, Automaton, StartKind};
use regex_automata::nfa::thompson;
use regex_automata::util::primitives::StateID;
use regex_automata::util::start;
use regex_automata::{Anchored, MatchKind};
use regex_syntax::hir::Hir;

/// Most DFA states, and product states, explored per pair of terminals (10,000) before calling
/// it a competition.
pub const MAX_PAIRS: usize = 10_000;

/// Size limit of each DFA the check builds, in bytes (1 MiB); a larger one counts as competing.
const DFA_LIMIT: usize = 1 << 20;

/// An anchored DFA of `hir` with its start state and its *live* states: those from which a
/// whole match is reachable (regex-automata reports a match one byte late, so the state one
/// byte past a match is neither dead nor live).
struct Dfa {
    dfa: dense::DFA<Vec<u32>>,
    start: StateID,
    live: HashSet<StateID>,
}

impl Dfa {
    fn new(hir: &Hir) -> Option<Self> {
        let nfa = thompson::Compiler::new().build_from_hir(hir).ok()?;
        let dfa = dense::Builder::new()
            .configure(
                dense::DFA::config()
                    .match_kind(MatchKind::All)
                    .start_kind(StartKind::Anchored)
                    .dfa_size_limit(Some(DFA_LIMIT))
                    .determinize_size_limit(Some(DFA_LIMIT)),
            )
            .build_from_nfa(&nfa)
            .ok()?;
        let start = dfa
            .start_state(&start::Config::new().anchored(Anchored::Yes))
            .ok()?;
        let mut seen = HashSet::from([start]);
        let mut stack = vec![start];
        let mut edges = Vec::new();
        while let Some(s) = stack.pop() {
            for b in 0..=255u8 {
                let t = dfa.next_state(s, b);
                if dfa.is_dead_state(t) || dfa.is_quit_state(t) {
                    continue;
                }
                edges.push((s, t));
                if seen.insert(t) {
                    if seen.len() > MAX_PAIRS {
                        return None;
                    }
                    stack.push(t);
                }
            }
        }
        let mut live: HashSet<StateID> = seen
            .iter()
            .copied()
            .filter(|&s| dfa.is_match_state(dfa.next_eoi_state(s)))
            .collect();
        loop {
            let before = live.len();
            for &(s, t) in &edges {
                if live.contains(&t) {
                    live.insert(s);
                }
            }
            if live.len() == before {
                return Some(Dfa { dfa, start, live });
            }
        }
    }

    /// Whether the text read so far is a whole match (matches are reported one step late).
    fn matched(&self, s: StateID) -> bool {
        self.dfa.is_match_state(self.dfa.next_eoi_state(s))
    }

    /// Whether some non-empty text leads from `s` to a whole match.
    fn goes_on(&self, s: StateID) -> bool {
        (0..=255u8).any(|b| self.live.contains(&self.dfa.next_state(s, b)))
    }
}

/// Whether a non-empty text of `a` is a prefix of, or equal to, a text of `b`, or the other way
/// round (`true` also when the check cannot decide within its budget).
pub(super) fn compete(a: &Hir, b: &Hir) -> bool {
    let (Some(a), Some(b)) = (Dfa::new(a), Dfa::new(b)) else {
        return true;
    };
    let mut seen = HashSet::from([(a.start, b.start)]);
    let mut stack = vec![(a.start, b.start)];
    while let Some((x, y)) = stack.pop() {
        for byte in 0..=255u8 {
            let next = (a.dfa.next_state(x, byte), b.dfa.next_state(y, byte));
            if !a.live.contains(&next.0) || !b.live.contains(&next.1) || !seen.insert(next) {
                continue;
            }
            let (am, bm) = (a.matched(next.0), b.matched(next.1));
            if (am && (bm || b.goes_on(next.1))) || (bm && a.goes_on(next.0)) {
                return true;
            }
            if seen.len() > MAX_PAIRS {
                return true;
            }
            stack.push(next);
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hir(re: &str) -> Hir {
        regex_syntax::parse(re).unwrap()
    }

    #[test]
    fn competition_is_prefix_or_equality() {
        assert!(compete(&hir("if"), &hir("[a-z]+")));
        assert!(compete(&hir("[a-z]+"), &hir("if")));
        assert!(compete(&hir("ab"), &hir("abc")));
        assert!(compete(&hir("x|yz"), &hir("y")));
        assert!(!compete(&hir("[0-9]+"), &hir("[a-z]+")));
        assert!(!compete(&hir("ab"), &hir("ac")));
        assert!(!compete(&hir("a[0-9]"), &hir("b[0-9]+")));
        // Only non-empty texts count: the empty string is no lexeme.
        assert!(!compete(&hir("a?"), &hir("b")));
    }
}
