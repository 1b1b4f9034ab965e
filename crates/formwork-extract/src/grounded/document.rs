//! One document's grounded rules ([`GroundedDoc`]): its quote automaton, the product with a
//! field's DFAs and length counter under a budget, trimmed to live states and emitted as
//! right-recursive rules; and a grounded number's alternation of the document's numbers.

use std::collections::{BTreeMap, HashMap, VecDeque};

use regex_automata::dfa::Automaton;
use regex_automata::util::primitives::StateID;
use regex_automata::util::start;
use regex_automata::Anchored;

use formwork_core::grammar::{GrammarBuilder, LexemeId, RuleId, Symbol};

use super::field::{GroundedField, NumberField};
use super::numbers::document_numbers;
use super::span::{SpanAutomaton, SuffixAutomaton};
use crate::ExtractError;

/// A document prepared for grounded fields: the automaton of the quotes it allows — its
/// whole-word spans ([`SpanAutomaton`]), or, when that is over budget, all its non-empty
/// substrings ([`SuffixAutomaton`]).
#[derive(Clone, Debug)]
pub struct GroundedDoc {
    next: Vec<BTreeMap<char, u32>>,
    accept: Vec<bool>,
    whole_words: bool,
    /// Characters of the document (for the product budget).
    chars: usize,
    /// The numbers the document states ([`document_numbers`]).
    numbers: Vec<(f64, String)>,
}

/// The rule [`GroundedDoc::add_field`] adds for one field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FieldRule {
    /// The rule of the field's JSON string (quotes included).
    pub rule: RuleId,
    /// Whether some quote of the document satisfies the field (else the rule derives nothing).
    pub satisfiable: bool,
}

/// A DFA over characters as per-state transition maps; state 0 is the start.
struct CharDfa {
    next: Vec<BTreeMap<char, u32>>,
    accept: Vec<bool>,
}

impl GroundedDoc {
    /// Indexes `document`.
    pub fn new(document: &str) -> Self {
        let chars = document.chars().count();
        match SpanAutomaton::new(document) {
            Some(sa) => GroundedDoc {
                next: sa.next,
                accept: sa.accept,
                whole_words: true,
                chars,
                numbers: document_numbers(document),
            },
            None => {
                let sam = SuffixAutomaton::new(document);
                let mut accept = vec![true; sam.states_len()];
                accept[0] = false;
                GroundedDoc {
                    next: sam.next,
                    accept,
                    whole_words: false,
                    chars,
                    numbers: document_numbers(document),
                }
            }
        }
    }

    /// Whether quotes are restricted to whole-word spans (false only for documents over the
    /// span automaton's budget, where any non-empty substring is allowed).
    pub fn whole_words(&self) -> bool {
        self.whole_words
    }

    /// Most states the product of this document with one field may have: 64 per document
    /// character + 4096, as for the span automaton's own construction, so a field's rules
    /// stay O(document length) like the unconstrained quote's.
    pub fn product_limit(&self) -> usize {
        64 * self.chars + 4096
    }

    /// Adds the rules of `"` quote `"` (a JSON string whose value is a quote this document
    /// allows, escaped as `serde_json` escapes) to `b`; returns the rule. The same as
    /// [`add_field`](Self::add_field) for a field without constraints, which cannot fail.
    ///
    /// `prefix` keeps rule names apart from the rest of the grammar. The empty string is
    /// excluded: an empty quote is no evidence.
    pub fn add_to(&self, b: &mut GrammarBuilder, prefix: &str) -> RuleId {
        emit(b, prefix, &trim(self.automaton()))
    }

    /// The document's own automaton, as a [`CharDfa`].
    fn automaton(&self) -> CharDfa {
        CharDfa {
            next: self.next.clone(),
            accept: self.accept.clone(),
        }
    }

    /// Adds the rules of `"` quote `"` where the quote's value is also valid under `field`'s
    /// own keywords: the product of this document's automaton with the field's DFAs and
    /// length bounds (see the module doc). A field no quote satisfies gets a rule with an
    /// empty language ([`FieldRule::satisfiable`] is false), so an optional field is left out
    /// and a required one makes the grammar empty.
    ///
    /// # Errors
    /// [`ExtractError::Grounded`] at the field's pointer when the product needs more than
    /// [`product_limit`](Self::product_limit) states.
    pub fn add_field(
        &self,
        b: &mut GrammarBuilder,
        prefix: &str,
        field: &GroundedField,
    ) -> Result<FieldRule, ExtractError> {
        if let Some(n) = &field.number {
            return Ok(self.add_number(b, prefix, n));
        }
        let dfa = trim(if field.is_plain() {
            self.automaton()
        } else {
            self.product(field)?
        });
        Ok(FieldRule {
            satisfiable: !dfa.next[0].is_empty(),
            rule: emit(b, prefix, &dfa),
        })
    }

    /// The rule of a grounded number: one literal per number of the document the field
    /// accepts (an empty language when there is none).
    fn add_number(&self, b: &mut GrammarBuilder, prefix: &str, n: &NumberField) -> FieldRule {
        let mut alts: Vec<Vec<Symbol>> = Vec::new();
        for (x, text) in &self.numbers {
            if n.accepts(*x) {
                alts.push(vec![Symbol::Lexeme(b.literal(text))]);
            }
        }
        let satisfiable = !alts.is_empty();
        let name = format!("{prefix}number");
        let rule = b.rule_ref(&name);
        if !satisfiable {
            // Derives nothing finite, as an unsatisfiable quote's root does.
            alts.push(vec![Symbol::Rule(rule)]);
        }
        b.define(&name, alts);
        FieldRule { rule, satisfiable }
    }

    /// The numbers the indexed document states, with their JSON texts.
    pub fn numbers(&self) -> &[(f64, String)] {
        &self.numbers
    }

    /// The product automaton (not trimmed): states are (document state, one state per field
    /// DFA, code points read, saturated at the largest bound that matters).
    fn product(&self, field: &GroundedField) -> Result<CharDfa, ExtractError> {
        // A bound no quote can reach is no bound: a quote is 1..=chars code points.
        let max_len = field.max_len.filter(|&m| m < self.chars as u64);
        let min_len = if field.min_len <= 1 { 0 } else { field.min_len };
        let cap = max_len.unwrap_or(min_len);
        let anchored = start::Config::new().anchored(Anchored::Yes);
        let mut starts = Vec::with_capacity(field.dfas.len());
        for d in &field.dfas {
            starts.push(
                d.start_state(&anchored)
                    .map_err(|e| ExtractError::Grounded {
                        pointer: field.pointer.clone(),
                        message: format!("internal: no anchored start state: {e}"),
                    })?,
            );
        }
        type Key = (u32, Vec<StateID>, u64);
        let root: Key = (0, starts, 0);
        let mut index: HashMap<Key, u32> = HashMap::from([(root.clone(), 0)]);
        let mut states: Vec<Key> = vec![root];
        let mut out = CharDfa {
            next: vec![BTreeMap::new()],
            accept: vec![false],
        };
        let limit = self.product_limit();
        let mut queue = VecDeque::from([0u32]);
        let mut buf = [0u8; 4];
        while let Some(p) = queue.pop_front() {
            let (q, ds, len) = states[p as usize].clone();
            if max_len.is_some_and(|m| len >= m) {
                continue;
            }
            'chars: for (&c, &to) in &self.next[q as usize] {
                let mut nds = ds.clone();
                for (d, s) in field.dfas.iter().zip(nds.iter_mut()) {
                    for &byte in c.encode_utf8(&mut buf).as_bytes() {
                        *s = d.next_state(*s, byte);
                    }
                    if d.is_dead_state(*s) {
                        continue 'chars;
                    }
                }
                let key: Key = (to, nds, (len + 1).min(cap));
                let id = match index.get(&key) {
                    Some(&id) => id,
                    None => {
                        let id = states.len() as u32;
                        if states.len() >= limit {
                            return Err(ExtractError::Grounded {
                                pointer: field.pointer.clone(),
                                message: format!(
                                    "the document's quotes that satisfy {} need more than {limit} \
                                     automaton states (64 per document character + 4096); a \
                                     shorter document or a looser length bound fits",
                                    field.keywords.join(", ")
                                ),
                            });
                        }
                        let (kq, kds, klen) = &key;
                        out.accept.push(
                            self.accept[*kq as usize]
                                && *klen >= min_len
                                && field
                                    .dfas
                                    .iter()
                                    .zip(kds)
                                    .all(|(d, &s)| d.is_match_state(d.next_eoi_state(s))),
                        );
                        out.next.push(BTreeMap::new());
                        index.insert(key.clone(), id);
                        states.push(key);
                        queue.push_back(id);
                        id
                    }
                };
                out.next[p as usize].insert(c, id);
            }
        }
        Ok(out)
    }
}

/// Keeps the states of `dfa` from which an accepting state is reachable (and the start),
/// renumbered in order, so every prefix the emitted grammar allows can still be completed.
/// O(states + transitions).
fn trim(dfa: CharDfa) -> CharDfa {
    let n = dfa.next.len();
    let mut back: Vec<Vec<u32>> = vec![Vec::new(); n];
    for (q, ts) in dfa.next.iter().enumerate() {
        for &to in ts.values() {
            back[to as usize].push(q as u32);
        }
    }
    let mut live = dfa.accept.clone();
    let mut stack: Vec<u32> = (0..n as u32).filter(|&q| live[q as usize]).collect();
    while let Some(q) = stack.pop() {
        for &p in &back[q as usize] {
            if !live[p as usize] {
                live[p as usize] = true;
                stack.push(p);
            }
        }
    }
    let mut renum = vec![u32::MAX; n];
    let mut k = 0;
    for q in 0..n {
        if q == 0 || live[q] {
            renum[q] = k;
            k += 1;
        }
    }
    let mut out = CharDfa {
        next: Vec::with_capacity(k as usize),
        accept: Vec::with_capacity(k as usize),
    };
    for q in 0..n {
        if renum[q] == u32::MAX {
            continue;
        }
        out.accept.push(dfa.accept[q]);
        out.next.push(
            dfa.next[q]
                .iter()
                .filter(|(_, &to)| live[to as usize])
                .map(|(&c, &to)| (c, renum[to as usize]))
                .collect(),
        );
    }
    out
}

/// The rules of `"` quote `"` for a trimmed character DFA: one right-recursive rule per state.
fn emit(b: &mut GrammarBuilder, prefix: &str, dfa: &CharDfa) -> RuleId {
    let rules: Vec<_> = (0..dfa.next.len())
        .map(|q| b.rule_ref(&format!("{prefix}sub_{q}")))
        .collect();
    let mut lexemes: BTreeMap<char, LexemeId> = BTreeMap::new();
    let mut lexeme = |b: &mut GrammarBuilder, c: char| {
        *lexemes.entry(c).or_insert_with(|| {
            let mut buf = [0u8; 4];
            let text = serde_json::to_string(c.encode_utf8(&mut buf) as &str)
                .unwrap_or_else(|_| format!("\"{c}\""));
            // Strip the quotes serde_json adds: the lexeme is the escaped character.
            b.literal(&text[1..text.len() - 1])
        })
    };
    for (q, rule) in rules.iter().enumerate() {
        let mut alts: Vec<Vec<Symbol>> = Vec::new();
        if dfa.accept[q] {
            alts.push(vec![]);
        }
        for (&c, &to) in &dfa.next[q] {
            let lx = lexeme(b, c);
            alts.push(vec![Symbol::Lexeme(lx), Symbol::Rule(rules[to as usize])]);
        }
        if alts.is_empty() {
            // After trimming only the root can have no way on (no quote satisfies the field);
            // it derives nothing finite, so the grammar reports an empty language if a value
            // is required.
            alts.push(vec![Symbol::Rule(*rule)]);
        }
        b.define(&format!("{prefix}sub_{q}"), alts);
    }
    let quote = b.literal("\"");
    b.fresh_rule(
        &format!("{prefix}grounded"),
        vec![vec![
            Symbol::Lexeme(quote),
            Symbol::Rule(rules[0]),
            Symbol::Lexeme(quote),
        ]],
    )
}
