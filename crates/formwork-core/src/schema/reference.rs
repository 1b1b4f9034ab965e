//! A reference acceptor: does a grammar accept a byte string, under the IR's lexing rule
//! (greedy maximal munch among the lexemes the parser allows next)?
//!
//! Owns nothing but this yes/no question, answered simply (an Earley recognizer over lexemes,
//! one lazy DFA per lexeme) so the schema compiler's conformance runs (MaskBench,
//! JSON-Schema-Test-Suite, the hand-written cases) can check grammars independently of the
//! token-level matcher. Not for decoding: no masks, no tokens, no incremental state.
//! Permutation rules (objects in any order) are read from their definition in
//! [`crate::grammar::Permutation`]: each item of one carries the set written and the exact
//! count, and a member is predicted only when some way to end remains.
//! Costs: O(n · items) per input byte boundary; fine for test instances.

use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap, HashSet};

use regex_automata::hybrid::dfa::{Cache, DFA};
use regex_automata::util::start::Config as StartConfig;
use regex_automata::Anchored;

use crate::grammar::{Grammar, LexemeId, PermMember, Permutation, RuleId, Symbol};

/// A grammar prepared for [`Acceptor::accepts`].
#[derive(Debug)]
pub struct Acceptor<'g> {
    g: &'g Grammar,
    dfas: Vec<(DFA, Cache)>,
    nullable: Vec<bool>,
    /// Permutation states (written listed members, members written), by index; 0 is the
    /// start state.
    states: RefCell<Vec<(BTreeSet<u32>, u64)>>,
}

/// Why an input was rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    /// Byte offset where no allowed lexeme could continue (or the input length if it ended
    /// early).
    pub offset: usize,
    /// What went wrong.
    pub reason: String,
}

/// A lexeme whose automaton the acceptor cannot build.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("lexeme {lexeme}: {message}")]
pub struct LexemeBuildError {
    /// The lexeme's name.
    pub lexeme: String,
    /// `regex-automata`'s message.
    pub message: String,
}

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct Item {
    rule: u32,
    alt: u32,
    dot: u32,
    origin: u32,
    /// For an item of a permutation rule, the permutation's state (see `states`); else 0.
    state: u32,
}

impl<'g> Acceptor<'g> {
    /// Prepares the lexeme automata of `g`.
    ///
    /// # Errors
    /// A lexeme regex the lazy DFA cannot build (e.g. too large).
    pub fn new(g: &'g Grammar) -> Result<Self, LexemeBuildError> {
        let mut dfas = Vec::with_capacity(g.lexemes().len());
        for lx in g.lexemes() {
            // The lexeme followed by a sentinel byte that never occurs in UTF-8 text: a live
            // state then always means "a viable prefix" (the lazy DFA reports matches one
            // byte late, so without the sentinel a finished lexeme looks alive for one more
            // byte), and feeding the sentinel tells whether the lexeme is complete.
            let dfa = DFA::builder()
                .configure(DFA::config().cache_capacity(4 << 20))
                .syntax(regex_automata::util::syntax::Config::new().utf8(false))
                .thompson(regex_automata::nfa::thompson::Config::new().utf8(false))
                .build(&format!("(?:{})(?-u:\\xFF)", lx.regex()))
                .map_err(|e| LexemeBuildError {
                    lexeme: lx.name.clone(),
                    message: e.to_string(),
                })?;
            let cache = dfa.create_cache();
            dfas.push((dfa, cache));
        }
        let nullable = nullable(g);
        Ok(Acceptor {
            g,
            dfas,
            nullable,
            states: RefCell::new(vec![(BTreeSet::new(), 0)]),
        })
    }

    /// The state a call at `it` of a permutation rule starts from: after `it`'s member when
    /// `it` is a permutation rule's alternative whose last symbol is the call, else the start.
    fn start_state(&self, it: &Item) -> u32 {
        let rule = self.g.rule(RuleId(it.rule));
        match &rule.perm {
            Some(p) if it.dot as usize + 1 == self.alt(it).len() => {
                let (mut set, count) = self.states.borrow()[it.state as usize].clone();
                if let PermMember::Listed(i) = p.members[it.alt as usize] {
                    set.insert(i);
                }
                let mut states = self.states.borrow_mut();
                let next = (set, count + 1);
                match states.iter().position(|s| *s == next) {
                    Some(k) => k as u32,
                    None => {
                        states.push(next);
                        states.len() as u32 - 1
                    }
                }
            }
            _ => 0,
        }
    }

    /// Whether state `s` of `p` may end here.
    fn complete(&self, p: &Permutation, s: u32) -> bool {
        let (set, count) = &self.states.borrow()[s as usize];
        p.required.iter().all(|r| set.contains(r)) && *count >= p.min
    }

    /// Whether member `m` may be written in state `s` of `p`, leaving a state that can still
    /// end: the required members left fit under `max`, and `min` can be reached.
    fn may_write(&self, p: &Permutation, s: u32, m: PermMember) -> bool {
        let (set, count) = &self.states.borrow()[s as usize];
        let mut set = set.clone();
        if let PermMember::Listed(i) = m {
            if !set.insert(i) {
                return false;
            }
        }
        let count = count + 1;
        let left = p.required.iter().filter(|r| !set.contains(r)).count() as u64;
        let fewest = (count + left).max(p.min);
        let most = if p.members.contains(&PermMember::Repeated) {
            u64::MAX
        } else {
            count + (p.listed as u64 - set.len() as u64)
        };
        fewest <= most.min(p.max.unwrap_or(u64::MAX))
    }

    fn alt(&self, it: &Item) -> &[Symbol] {
        &self.g.rule(RuleId(it.rule)).alternatives[it.alt as usize]
    }

    fn closure(&self, sets: &mut [Vec<Item>], j: usize) {
        let mut seen: HashSet<Item> = sets[j].iter().copied().collect();
        let mut k = 0;
        while k < sets[j].len() {
            let it = sets[j][k];
            k += 1;
            let alt = self.alt(&it);
            if (it.dot as usize) < alt.len() {
                if let Symbol::Rule(r) = alt[it.dot as usize] {
                    if let Some(p) = &self.g.rule(r).perm {
                        let s = self.start_state(&it);
                        for (a, &m) in p.members.iter().enumerate() {
                            let ok = match m {
                                PermMember::End => self.complete(p, s),
                                _ => self.may_write(p, s, m),
                            };
                            let n = Item {
                                rule: r.0,
                                alt: a as u32,
                                dot: 0,
                                origin: j as u32,
                                state: s,
                            };
                            if ok && seen.insert(n) {
                                sets[j].push(n);
                            }
                        }
                        let n = Item {
                            dot: it.dot + 1,
                            ..it
                        };
                        if self.complete(p, s) && seen.insert(n) {
                            sets[j].push(n);
                        }
                        continue;
                    }
                    for a in 0..self.g.rule(r).alternatives.len() {
                        let n = Item {
                            rule: r.0,
                            alt: a as u32,
                            dot: 0,
                            origin: j as u32,
                            state: 0,
                        };
                        if seen.insert(n) {
                            sets[j].push(n);
                        }
                    }
                    if self.nullable[r.as_usize()] {
                        let n = Item {
                            dot: it.dot + 1,
                            ..it
                        };
                        if seen.insert(n) {
                            sets[j].push(n);
                        }
                    }
                }
            } else {
                // Complete: advance items in the origin set waiting for this rule (for a
                // permutation rule, those whose call started from this item's state).
                if it.origin as usize == j && self.g.rule(RuleId(it.rule)).perm.is_some() {
                    // The end in the state it was predicted in: advanced at the prediction.
                    continue;
                }
                let origin = it.origin as usize;
                let is_perm = self.g.rule(RuleId(it.rule)).perm.is_some();
                let waiting: Vec<Item> = sets[origin]
                    .iter()
                    .filter(|w| {
                        let a = self.alt(w);
                        (w.dot as usize) < a.len()
                            && a[w.dot as usize] == Symbol::Rule(RuleId(it.rule))
                            && (!is_perm || self.start_state(w) == it.state)
                    })
                    .copied()
                    .collect();
                for w in waiting {
                    let n = Item {
                        dot: w.dot + 1,
                        ..w
                    };
                    if seen.insert(n) {
                        sets[j].push(n);
                    }
                }
            }
        }
    }

    /// Whether the grammar derives exactly `input`.
    pub fn accepts(&mut self, input: &[u8]) -> Result<(), Rejection> {
        let start = self.g.start();
        let mut sets: Vec<Vec<Item>> = vec![(0..self.g.rule(start).alternatives.len())
            .map(|a| Item {
                rule: start.0,
                alt: a as u32,
                dot: 0,
                origin: 0,
                state: 0,
            })
            .collect()];
        let mut pos = 0usize;
        loop {
            let j = sets.len() - 1;
            self.closure(&mut sets, j);
            let allowed: HashSet<LexemeId> = sets[j]
                .iter()
                .filter_map(|it| match self.alt(it).get(it.dot as usize) {
                    Some(Symbol::Lexeme(l)) => Some(*l),
                    _ => None,
                })
                .collect();
            if pos == input.len() {
                let done = sets[j].iter().any(|it| {
                    it.rule == start.0 && it.origin == 0 && it.dot as usize == self.alt(it).len()
                });
                return if done {
                    Ok(())
                } else {
                    Err(Rejection {
                        offset: pos,
                        reason: "input ended before the grammar accepts".into(),
                    })
                };
            }
            if allowed.is_empty() {
                return Err(Rejection {
                    offset: pos,
                    reason: "the grammar is complete; trailing input".into(),
                });
            }
            let (end, matched) = self.scan(&allowed, input, pos)?;
            let next: Vec<Item> = sets[j]
                .iter()
                .filter(|it| match self.alt(it).get(it.dot as usize) {
                    Some(Symbol::Lexeme(l)) => matched.contains(l),
                    _ => false,
                })
                .map(|it| Item {
                    dot: it.dot + 1,
                    ..*it
                })
                .collect();
            sets.push(next);
            pos = end;
        }
    }

    /// Greedy lexing from `pos`: the longest viable prefix, then the lexemes matching it.
    fn scan(
        &mut self,
        allowed: &HashSet<LexemeId>,
        input: &[u8],
        pos: usize,
    ) -> Result<(usize, HashSet<LexemeId>), Rejection> {
        let fail = |offset: usize, reason: &str| Rejection {
            offset,
            reason: reason.to_string(),
        };
        let mut live: HashMap<LexemeId, regex_automata::hybrid::LazyStateID> = HashMap::new();
        for &l in allowed {
            let (dfa, cache) = &mut self.dfas[l.as_usize()];
            let cfg = StartConfig::new().anchored(Anchored::Yes);
            let sid = dfa
                .start_state(cache, &cfg)
                .map_err(|e| fail(pos, &format!("lexer start: {e}")))?;
            live.insert(l, sid);
        }
        let mut end = pos;
        while end < input.len() {
            let b = input[end];
            let mut next = HashMap::new();
            for (&l, &sid) in &live {
                let (dfa, cache) = &mut self.dfas[l.as_usize()];
                let n = dfa
                    .next_state(cache, sid, b)
                    .map_err(|e| fail(end, &format!("lexer: {e}")))?;
                if !n.is_dead() {
                    next.insert(l, n);
                }
            }
            if next.is_empty() {
                break;
            }
            live = next;
            end += 1;
        }
        let mut matched = HashSet::new();
        for (&l, &sid) in &live {
            let (dfa, cache) = &mut self.dfas[l.as_usize()];
            let n = dfa
                .next_state(cache, sid, 0xFF)
                .and_then(|n| dfa.next_eoi_state(cache, n))
                .map_err(|e| fail(end, &format!("lexer: {e}")))?;
            if n.is_match() {
                matched.insert(l);
            }
        }
        // An excepting lexeme does not match a text one of its excepted lexemes matches.
        let text = &input[pos..end];
        let mut dropped = Vec::new();
        for &l in &matched {
            for &e in self.g.lexeme(l).except() {
                if self.matches_whole(e, text).map_err(|m| fail(end, &m))? {
                    dropped.push(l);
                    break;
                }
            }
        }
        for l in dropped {
            matched.remove(&l);
        }
        if matched.is_empty() {
            return Err(fail(end, "no allowed lexeme matches here"));
        }
        if end == pos {
            return Err(fail(pos, "empty lexeme"));
        }
        Ok((end, matched))
    }
}

impl Acceptor<'_> {
    /// Whether lexeme `l` matches all of `text`.
    fn matches_whole(&mut self, l: LexemeId, text: &[u8]) -> Result<bool, String> {
        let (dfa, cache) = &mut self.dfas[l.as_usize()];
        let cfg = StartConfig::new().anchored(Anchored::Yes);
        let mut sid = dfa
            .start_state(cache, &cfg)
            .map_err(|e| format!("lexer start: {e}"))?;
        for &b in text.iter().chain([0xFF].iter()) {
            sid = dfa
                .next_state(cache, sid, b)
                .map_err(|e| format!("lexer: {e}"))?;
            if sid.is_dead() {
                return Ok(false);
            }
        }
        let n = dfa
            .next_eoi_state(cache, sid)
            .map_err(|e| format!("lexer: {e}"))?;
        Ok(n.is_match())
    }
}

/// Which rules derive the empty string.
fn nullable(g: &Grammar) -> Vec<bool> {
    let mut n = vec![false; g.rules().len()];
    loop {
        let mut changed = false;
        for (i, r) in g.rules().iter().enumerate() {
            if n[i] {
                continue;
            }
            // A permutation's end is nullable only where its start state is complete.
            if r.perm
                .as_ref()
                .is_some_and(|p| !p.required.is_empty() || p.min > 0)
            {
                continue;
            }
            if r.alternatives.iter().any(|alt| {
                alt.iter().all(|s| match s {
                    Symbol::Lexeme(_) => false,
                    Symbol::Rule(r) => n[r.as_usize()],
                })
            }) {
                n[i] = true;
                changed = true;
            }
        }
        if !changed {
            return n;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grammar::GrammarBuilder;

    #[test]
    fn greedy_lexing_and_nullable_rules() {
        let mut b = GrammarBuilder::new();
        let num = b.lexeme("num", "[0-9]+");
        let comma = b.literal(",");
        let opt = b.fresh_rule(
            "opt",
            vec![vec![], vec![Symbol::Lexeme(comma), Symbol::Lexeme(num)]],
        );
        let s = b.define("s", vec![vec![Symbol::Lexeme(num), Symbol::Rule(opt)]]);
        let g = b.build(s).unwrap();
        let mut a = Acceptor::new(&g).unwrap();
        assert!(a.accepts(b"12").is_ok());
        assert!(a.accepts(b"12,3").is_ok());
        assert!(a.accepts(b"12,").is_err());
        assert_eq!(a.accepts(b"1x").unwrap_err().offset, 1);
        assert!(a.accepts(b"").is_err());
    }

    #[test]
    fn maximal_munch_does_not_backtrack() {
        // `a` then `ab`-prefixed lexeme: "ab" is a viable prefix of `abc` only, so "ab" fails.
        let mut b = GrammarBuilder::new();
        let a1 = b.lexeme("a", "a");
        let abc = b.lexeme("abc", "abc");
        let bl = b.lexeme("b", "b");
        let s = b.define(
            "s",
            vec![
                vec![Symbol::Lexeme(a1), Symbol::Lexeme(bl)],
                vec![Symbol::Lexeme(abc)],
            ],
        );
        let g = b.build(s).unwrap();
        let mut acc = Acceptor::new(&g).unwrap();
        assert!(acc.accepts(b"abc").is_ok());
        assert!(acc.accepts(b"ab").is_err());
    }
}
