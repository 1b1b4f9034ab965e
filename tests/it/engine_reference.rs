//! An independent, slow reference for the matcher: tiny regexes simulated as NFAs, a textbook
//! Earley recognizer (fixpoint closure, no Aycock–Horspool), and the greedy lexing policy
//! written out step by step. Shares nothing with the engine except the grammar IR it reads.
//! For grammars from a front end (whose lexemes are any regexes), [`DfaLexemes`] matches the
//! lexemes with regex-automata's dense DFAs (built from the regex text, not by the engine's
//! lexer) instead of the tiny NFAs; the recognizer and the lexing policy are the same.

use std::collections::HashSet;

use formwork::grammar::{Grammar, GrammarBuilder, LexemeId, RuleId, Symbol};
use regex_automata::dfa::{dense, Automaton, StartKind};
use regex_automata::util::{primitives::StateID, start};
use regex_automata::{Anchored, MatchKind};

/// How the reference matches lexeme `l` of its grammar against a text.
pub trait LexemeOracle {
    /// Whether some extension of `s` (possibly empty) is a whole match of lexeme `l`.
    fn is_prefix(&self, l: usize, s: &[u8]) -> bool;
    /// Whether `s` is a whole match of lexeme `l`.
    fn is_match(&self, l: usize, s: &[u8]) -> bool;
}

impl LexemeOracle for RefGrammar {
    fn is_prefix(&self, l: usize, s: &[u8]) -> bool {
        self.pats[l].is_prefix(s)
    }

    fn is_match(&self, l: usize, s: &[u8]) -> bool {
        self.pats[l].is_match(s)
    }
}

/// Every lexeme of a grammar as an anchored dense DFA built from its regex text (not the
/// engine's lexer), all matches kept, with its *live* states: those from which a whole match
/// is reachable (regex-automata reports a match one byte late, so the state after a match and
/// one more byte is neither dead nor live). An exception lexeme matches where its regex does
/// and none of its excepted lexemes do.
pub struct DfaLexemes {
    dfas: Vec<LiveDfa>,
    except: Vec<Vec<usize>>,
}

struct LiveDfa {
    dfa: dense::DFA<Vec<u32>>,
    start: StateID,
    live: HashSet<StateID>,
}

impl LiveDfa {
    fn new(regex: &str) -> Self {
        let dfa = dense::Builder::new()
            .configure(
                dense::DFA::config()
                    .start_kind(StartKind::Anchored)
                    .match_kind(MatchKind::All),
            )
            .build(regex)
            .unwrap_or_else(|e| panic!("lexeme /{regex}/: {e}"));
        let start = dfa
            .start_state(&start::Config::new().anchored(Anchored::Yes))
            .expect("anchored start state");
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
                break;
            }
        }
        LiveDfa { dfa, start, live }
    }

    /// The state after `s`, `None` once no match can follow.
    fn walk(&self, s: &[u8]) -> Option<StateID> {
        let mut state = self.start;
        for &b in s {
            state = self.dfa.next_state(state, b);
            if !self.live.contains(&state) {
                return None;
            }
        }
        self.live.contains(&state).then_some(state)
    }

    fn matches(&self, s: &[u8]) -> bool {
        self.walk(s)
            .is_some_and(|st| self.dfa.is_match_state(self.dfa.next_eoi_state(st)))
    }
}

impl DfaLexemes {
    pub fn new(g: &Grammar) -> Self {
        let dfas = g
            .lexemes()
            .iter()
            .map(|l| LiveDfa::new(l.regex()))
            .collect();
        let except = g
            .lexemes()
            .iter()
            .map(|l| l.except().iter().map(|e| e.as_usize()).collect())
            .collect();
        Self { dfas, except }
    }
}

impl LexemeOracle for DfaLexemes {
    fn is_prefix(&self, l: usize, s: &[u8]) -> bool {
        self.dfas[l].walk(s).is_some()
    }

    fn is_match(&self, l: usize, s: &[u8]) -> bool {
        self.dfas[l].matches(s) && !self.except[l].iter().any(|&e| self.dfas[e].matches(s))
    }
}

/// One piece of a tiny regex: a byte class repeated `min..=max` times (`None`: unbounded).
#[derive(Clone, Debug)]
pub struct Piece {
    pub class: Vec<u8>,
    pub min: u32,
    pub max: Option<u32>,
}

/// A tiny regex: a sequence of pieces. Every class is non-empty.
#[derive(Clone, Debug)]
pub struct Pat {
    pub pieces: Vec<Piece>,
}

impl Pat {
    /// A literal string.
    pub fn literal(s: &[u8]) -> Self {
        Pat {
            pieces: s
                .iter()
                .map(|&b| Piece {
                    class: vec![b],
                    min: 1,
                    max: Some(1),
                })
                .collect(),
        }
    }

    /// The regex-syntax form the engine compiles.
    pub fn to_regex(&self) -> String {
        let mut out = String::new();
        for p in &self.pieces {
            let alts: Vec<String> = p
                .class
                .iter()
                .map(|&b| regex_syntax::escape(&(b as char).to_string()))
                .collect();
            out.push_str(&format!("(?:{})", alts.join("|")));
            match p.max {
                Some(max) => out.push_str(&format!("{{{},{}}}", p.min, max)),
                None => out.push_str(&format!("{{{},}}", p.min)),
            }
        }
        out
    }

    /// NFA states (piece index, repetitions so far; saturated at `min` for unbounded pieces)
    /// after `s`, closed under skipping satisfied pieces.
    fn states(&self, s: &[u8]) -> HashSet<(usize, u32)> {
        let mut cur = self.close([(0usize, 0u32)].into_iter().collect());
        for &b in s {
            let mut next = HashSet::new();
            for &(i, c) in &cur {
                if i < self.pieces.len() {
                    let p = &self.pieces[i];
                    let room = p.max.is_none_or(|m| c < m);
                    if room && p.class.contains(&b) {
                        let c2 = if p.max.is_none() {
                            (c + 1).min(p.min)
                        } else {
                            c + 1
                        };
                        next.insert((i, c2));
                    }
                }
            }
            cur = self.close(next);
            if cur.is_empty() {
                break;
            }
        }
        cur
    }

    fn close(&self, mut set: HashSet<(usize, u32)>) -> HashSet<(usize, u32)> {
        loop {
            let add: Vec<(usize, u32)> = set
                .iter()
                .filter(|&&(i, c)| i < self.pieces.len() && c >= self.pieces[i].min)
                .map(|&(i, _)| (i + 1, 0))
                .filter(|s| !set.contains(s))
                .collect();
            if add.is_empty() {
                return set;
            }
            set.extend(add);
        }
    }

    /// Whether some extension of `s` (possibly empty) matches.
    pub fn is_prefix(&self, s: &[u8]) -> bool {
        // Every class is non-empty, so every live state can reach the end.
        !self.states(s).is_empty()
    }

    /// Whether `s` matches exactly.
    pub fn is_match(&self, s: &[u8]) -> bool {
        self.states(s).contains(&(self.pieces.len(), 0))
    }
}

/// A grammar together with the tiny regex of each of its lexemes.
#[derive(Clone, Debug)]
pub struct RefGrammar {
    pub grammar: Grammar,
    pub pats: Vec<Pat>,
}

/// Builds a grammar from tiny regexes and rules given as alternatives of
/// `Ok(lexeme index)` / `Err(rule index)` symbols. Rule 0 is the start rule.
pub fn build(pats: &[Pat], rules: &[Vec<Vec<Result<usize, usize>>>]) -> Option<RefGrammar> {
    let mut b = GrammarBuilder::new();
    let lex: Vec<LexemeId> = pats
        .iter()
        .enumerate()
        .map(|(i, p)| b.lexeme(&format!("L{i}"), &p.to_regex()))
        .collect();
    let ids: Vec<RuleId> = (0..rules.len())
        .map(|i| b.rule_ref(&format!("r{i}")))
        .collect();
    for (i, alts) in rules.iter().enumerate() {
        let alts = alts
            .iter()
            .map(|alt| {
                alt.iter()
                    .map(|s| match *s {
                        Ok(l) => Symbol::Lexeme(lex[l % lex.len()]),
                        Err(r) => Symbol::Rule(ids[r % ids.len()]),
                    })
                    .collect()
            })
            .collect();
        b.define(&format!("r{i}"), alts);
    }
    let grammar = b.build(ids[0]).ok()?;
    // The builder shares lexemes with equal regexes; map each grammar lexeme to its pattern.
    let mut by_id: Vec<Option<Pat>> = vec![None; grammar.lexemes().len()];
    for (i, l) in lex.iter().enumerate() {
        by_id[l.as_usize()] = Some(pats[i].clone());
    }
    let pats = by_id
        .into_iter()
        .map(|p| p.expect("every lexeme has a pattern"))
        .collect();
    Some(RefGrammar { grammar, pats })
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Item {
    rule: usize,
    alt: usize,
    dot: usize,
    origin: usize,
}

/// The textbook recognizer over lexemes, with greedy lexing on top.
pub struct Reference<'a> {
    g: &'a Grammar,
    lexemes: &'a dyn LexemeOracle,
    /// Alternatives kept (those whose symbols all derive some string).
    alts: Vec<Vec<Vec<Symbol>>>,
}

impl<'a> Reference<'a> {
    pub fn new(g: &'a RefGrammar) -> Self {
        Self::with_lexemes(&g.grammar, g)
    }

    /// The reference for any grammar, its lexemes matched by `lexemes`.
    pub fn with_lexemes(g: &'a Grammar, lexemes: &'a dyn LexemeOracle) -> Self {
        let rules = g.rules();
        let mut productive = vec![false; rules.len()];
        let mut changed = true;
        while changed {
            changed = false;
            for (i, r) in rules.iter().enumerate() {
                if !productive[i]
                    && r.alternatives.iter().any(|a| {
                        a.iter().all(|s| match s {
                            Symbol::Lexeme(_) => true,
                            Symbol::Rule(r) => productive[r.as_usize()],
                        })
                    })
                {
                    productive[i] = true;
                    changed = true;
                }
            }
        }
        let alts = rules
            .iter()
            .map(|r| {
                r.alternatives
                    .iter()
                    .filter(|a| {
                        a.iter().all(|s| match s {
                            Symbol::Lexeme(_) => true,
                            Symbol::Rule(r) => productive[r.as_usize()],
                        })
                    })
                    .cloned()
                    .collect()
            })
            .collect();
        Self { g, lexemes, alts }
    }

    fn next_sym(&self, it: &Item) -> Option<Symbol> {
        self.alts[it.rule][it.alt].get(it.dot).copied()
    }

    fn closure(&self, sets: &[HashSet<Item>], mut set: HashSet<Item>) -> HashSet<Item> {
        let k = sets.len();
        loop {
            let mut add = Vec::new();
            for it in &set {
                match self.next_sym(it) {
                    Some(Symbol::Rule(r)) => {
                        for a in 0..self.alts[r.as_usize()].len() {
                            add.push(Item {
                                rule: r.as_usize(),
                                alt: a,
                                dot: 0,
                                origin: k,
                            });
                        }
                    }
                    Some(Symbol::Lexeme(_)) => {}
                    None => {
                        let from = if it.origin == k {
                            &set
                        } else {
                            &sets[it.origin]
                        };
                        for p in from {
                            if self.next_sym(p) == Some(Symbol::Rule(RuleId(it.rule as u32))) {
                                add.push(Item {
                                    dot: p.dot + 1,
                                    ..*p
                                });
                            }
                        }
                    }
                }
            }
            let before = set.len();
            set.extend(add);
            if set.len() == before {
                return set;
            }
        }
    }

    fn initial(&self) -> Vec<HashSet<Item>> {
        let start = self.g.start().as_usize();
        let set = (0..self.alts[start].len())
            .map(|a| Item {
                rule: start,
                alt: a,
                dot: 0,
                origin: 0,
            })
            .collect();
        vec![self.closure(&[], set)]
    }

    fn expected(&self, set: &HashSet<Item>) -> Vec<usize> {
        let mut out: Vec<usize> = set
            .iter()
            .filter_map(|it| match self.next_sym(it) {
                Some(Symbol::Lexeme(l)) => Some(l.as_usize()),
                _ => None,
            })
            .collect();
        out.sort();
        out.dedup();
        out
    }

    fn scan(&self, sets: &mut Vec<HashSet<Item>>, matched: &[usize]) -> bool {
        let last = sets.last().expect("non-empty chart");
        let kernel: HashSet<Item> = last
            .iter()
            .filter(|it| {
                matches!(self.next_sym(it), Some(Symbol::Lexeme(l)) if matched.contains(&l.as_usize()))
            })
            .map(|it| Item { dot: it.dot + 1, ..*it })
            .collect();
        if kernel.is_empty() {
            return false;
        }
        let set = self.closure(sets, kernel);
        sets.push(set);
        true
    }

    fn accepts(&self, set: &HashSet<Item>) -> bool {
        let start = self.g.start().as_usize();
        set.iter()
            .any(|it| it.rule == start && it.origin == 0 && self.next_sym(it).is_none())
    }

    /// Runs greedy lexing over `input`: the chart and the current lexeme's text, or `None` if
    /// some byte is rejected.
    fn run(&self, input: &[u8]) -> Option<(Vec<HashSet<Item>>, Vec<u8>)> {
        let mut sets = self.initial();
        let mut cur: Vec<u8> = Vec::new();
        for &b in input {
            let allowed = self.expected(sets.last()?);
            let mut ext = cur.clone();
            ext.push(b);
            if allowed.iter().any(|&l| self.lexemes.is_prefix(l, &ext)) {
                cur = ext;
                continue;
            }
            if cur.is_empty() {
                return None;
            }
            let matched: Vec<usize> = allowed
                .into_iter()
                .filter(|&l| self.lexemes.is_match(l, &cur))
                .collect();
            if matched.is_empty() || !self.scan(&mut sets, &matched) {
                return None;
            }
            cur = vec![b];
            let allowed = self.expected(sets.last()?);
            if !allowed.iter().any(|&l| self.lexemes.is_prefix(l, &cur)) {
                return None;
            }
        }
        Some((sets, cur))
    }

    /// Whether `input` is a viable prefix under greedy lexing.
    pub fn viable(&self, input: &[u8]) -> bool {
        self.run(input).is_some()
    }

    /// Whether `input` is a sentence under greedy lexing.
    pub fn accepted(&self, input: &[u8]) -> bool {
        let Some((mut sets, cur)) = self.run(input) else {
            return false;
        };
        if cur.is_empty() {
            return self.accepts(sets.last().expect("non-empty chart"));
        }
        let allowed = self.expected(sets.last().expect("non-empty chart"));
        let matched: Vec<usize> = allowed
            .into_iter()
            .filter(|&l| self.lexemes.is_match(l, &cur))
            .collect();
        !matched.is_empty()
            && self.scan(&mut sets, &matched)
            && self.accepts(sets.last().expect("non-empty chart"))
    }
}

#[test]
fn reference_sanity() {
    // s ::= A | s "," A with A = [ab]+
    let pats = vec![
        Pat {
            pieces: vec![Piece {
                class: b"ab".to_vec(),
                min: 1,
                max: None,
            }],
        },
        Pat::literal(b","),
    ];
    let g = build(&pats, &[vec![vec![Ok(0)], vec![Err(0), Ok(1), Ok(0)]]]).unwrap();
    let r = Reference::new(&g);
    assert!(r.accepted(b"ab,ba"));
    assert!(r.viable(b"ab,"));
    assert!(!r.accepted(b"ab,"));
    assert!(!r.viable(b",a"));
    assert!(!r.viable(b"ac"));
}
