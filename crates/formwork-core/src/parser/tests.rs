//! The parser's tests: the fixpoints against a naive reference, the chart against the plain
//! algorithm and direct readings of its grammars.

use super::chart::*;
use super::error::ParserError;
use super::sigs::*;
use super::spec::*;
use crate::grammar::{GrammarBuilder, LexemeId, RuleId, Symbol};

/// The round-robin fixpoint `least_fixpoint` replaced (for speed: it was O(symbols ×
/// depth)), as the reference its result must equal.
fn naive_fixpoint(rules: &[Vec<Vec<PSym>>], base: impl Fn(PSym) -> Option<bool>) -> Vec<bool> {
    let mut in_set = vec![false; rules.len()];
    loop {
        let mut changed = false;
        for (i, alts) in rules.iter().enumerate() {
            if !in_set[i]
                && alts.iter().any(|alt| {
                    alt.iter().all(|&s| match (base(s), s) {
                        (Some(b), _) => b,
                        (None, PSym::Rule(r)) => in_set[r as usize],
                        (None, _) => false,
                    })
                })
            {
                in_set[i] = true;
                changed = true;
            }
        }
        if !changed {
            return in_set;
        }
    }
}

#[test]
fn worklist_fixpoint_equals_round_robin() {
    // Seeded random grammars: rules over rules (repeated occurrences, self-loops, empty
    // alternatives) and two lexemes, one that matches nothing non-empty.
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    for _ in 0..500 {
        let n = 1 + next(12) as u32;
        let rules: Vec<Vec<Vec<PSym>>> = (0..n)
            .map(|_| {
                (0..next(4))
                    .map(|_| {
                        (0..next(4))
                            .map(|_| match next(5) {
                                0 => PSym::Lexeme(next(2) as u32),
                                _ => PSym::Rule(next(n as u64) as u32),
                            })
                            .collect()
                    })
                    .collect()
            })
            .collect();
        let productive = |s| match s {
            PSym::Lexeme(l) => Some(l == 0),
            PSym::Rule(_) => None,
            PSym::End(_) => Some(true),
        };
        let nullable = |s| match s {
            PSym::Rule(_) => None,
            _ => Some(false),
        };
        let mut flat = Flat::default();
        for alts in &rules {
            for alt in alts {
                flat.syms.extend(alt.iter().map(|&s| encode(s)));
                flat.end_alt();
            }
            flat.end_rule();
        }
        let every = vec![true; flat.alts_len()];
        assert_eq!(
            least_fixpoint(&flat, &every, productive),
            naive_fixpoint(&rules, productive),
            "{rules:?}"
        );
        assert_eq!(
            least_fixpoint(&flat, &every, nullable),
            naive_fixpoint(&rules, nullable),
            "{rules:?}"
        );
    }
}

fn lexeme_seq(spec: &ParserSpec, seq: &[u32]) -> (bool, bool) {
    let mut c = Chart::new(spec, 10_000).unwrap();
    for &l in seq {
        if !c.scan(spec, &[LexemeId(l)]).unwrap() {
            return (false, false);
        }
    }
    (true, c.is_accepting(spec))
}

#[test]
fn left_recursion_and_empty_rules() {
    // list ::= list "," item | item ; item ::= "x" | opt ; opt ::= ""
    let mut b = GrammarBuilder::new();
    let x = b.literal("x");
    let comma = b.literal(",");
    let list = b.rule_ref("list");
    let item = b.rule_ref("item");
    let opt = b.define("opt", vec![vec![]]);
    b.define(
        "list",
        vec![
            vec![
                Symbol::Rule(list),
                Symbol::Lexeme(comma),
                Symbol::Rule(item),
            ],
            vec![Symbol::Rule(item)],
        ],
    );
    b.define(
        "item",
        vec![vec![Symbol::Lexeme(x)], vec![Symbol::Rule(opt)]],
    );
    let g = b.build(list).unwrap();
    let spec = ParserSpec::new(&g, &[false, false], &[true, true]).unwrap();
    let (x, c) = (x.0, comma.0);
    assert_eq!(lexeme_seq(&spec, &[]), (true, true));
    assert_eq!(lexeme_seq(&spec, &[x]), (true, true));
    assert_eq!(lexeme_seq(&spec, &[c, c]), (true, true));
    assert_eq!(lexeme_seq(&spec, &[x, c, x, c]), (true, true));
    assert_eq!(lexeme_seq(&spec, &[x, x]), (false, false));
}

#[test]
fn unproductive_alternatives_are_dropped() {
    // s ::= "a" | loop ; loop ::= "b" loop
    let mut b = GrammarBuilder::new();
    let a = b.literal("a");
    let bb = b.literal("b");
    let lp = b.rule_ref("loop");
    b.define("loop", vec![vec![Symbol::Lexeme(bb), Symbol::Rule(lp)]]);
    let s = b.define("s", vec![vec![Symbol::Lexeme(a)], vec![Symbol::Rule(lp)]]);
    let g = b.build(s).unwrap();
    let spec = ParserSpec::new(&g, &[false, false], &[true, true]).unwrap();
    let c = Chart::new(&spec, 100).unwrap();
    let mut allowed = vec![];
    c.allowed_lexemes(&spec, &mut allowed);
    assert_eq!(allowed, vec![a]);
}

/// Rows with the same items over origin rows with the same signatures share a signature
/// (the k-th element of a list, whatever k), and rows at other nesting depths do not.
#[test]
fn row_signatures_identify_equal_futures() {
    // v ::= "x" | "[" items "]" ; items ::= v | items "," v
    let mut b = GrammarBuilder::new();
    let x = b.literal("x");
    let open = b.literal("[");
    let close = b.literal("]");
    let comma = b.literal(",");
    let v = b.rule_ref("v");
    let items = b.rule_ref("items");
    b.define(
        "items",
        vec![
            vec![Symbol::Rule(v)],
            vec![Symbol::Rule(items), Symbol::Lexeme(comma), Symbol::Rule(v)],
        ],
    );
    b.define(
        "v",
        vec![
            vec![Symbol::Lexeme(x)],
            vec![
                Symbol::Lexeme(open),
                Symbol::Rule(items),
                Symbol::Lexeme(close),
            ],
        ],
    );
    let g = b.build(v).unwrap();
    let spec = ParserSpec::new(&g, &[false; 4], &[true; 4]).unwrap();
    let table = RowSigs::new(1 << 20);
    let sig_after = |seq: &[LexemeId]| {
        let mut c = Chart::new(&spec, 1000).unwrap();
        for &l in seq {
            assert!(c.scan(&spec, &[l]).unwrap());
        }
        c.last_row_signature(&table).unwrap()
    };
    let (x, o, cl, cm) = (x, open, close, comma);
    assert_eq!(sig_after(&[o, x, cm]), sig_after(&[o, x, cm, x, cm, x, cm]));
    assert_eq!(sig_after(&[o, x, cm]), sig_after(&[o, o, x, cl, cm]));
    assert_ne!(sig_after(&[o, x, cm]), sig_after(&[o, o, x, cm]));
    assert_ne!(sig_after(&[o]), sig_after(&[o, x, cm]));
    assert_eq!(sig_after(&[o, o, x, cm]), sig_after(&[o, o, x, cm, x, cm]));
    // Memoized per row, also across truncation and re-scan.
    let mut c = Chart::new(&spec, 1000).unwrap();
    c.scan(&spec, &[o]).unwrap();
    let a = c.last_row_signature(&table);
    c.scan(&spec, &[o]).unwrap();
    let deeper = c.last_row_signature(&table);
    c.truncate(2);
    assert_eq!(c.last_row_signature(&table), a);
    c.scan(&spec, &[x]).unwrap();
    assert_ne!(c.last_row_signature(&table), deeper);
    // A full table signs nothing new.
    let tiny = RowSigs::new(0);
    let mut fresh = Chart::new(&spec, 1000).unwrap();
    assert_eq!(fresh.last_row_signature(&tiny), None);
}

#[test]
fn item_budget_is_an_error() {
    let mut b = GrammarBuilder::new();
    let a = b.literal("a");
    let alts: Vec<Vec<Symbol>> = (0..50)
        .map(|i| {
            let r = b.fresh_rule(&format!("r{i}"), vec![vec![Symbol::Lexeme(a)]]);
            vec![Symbol::Rule(r)]
        })
        .collect();
    let s = b.define("s", alts);
    let g = b.build(s).unwrap();
    let spec = ParserSpec::new(&g, &[false], &[true]).unwrap();
    assert!(matches!(
        Chart::new(&spec, 10),
        Err(ParserError::LimitExceeded { .. })
    ));
}

/// The largest row of `spec`'s chart after scanning `seq`, or `None` if it is rejected.
fn max_row_len(spec: &ParserSpec, seq: &[LexemeId]) -> Option<usize> {
    let mut c = Chart::new(spec, 1_000_000).unwrap();
    let mut widest = c.items_len();
    for &l in seq {
        let before = c.items_len();
        if !c.scan(spec, &[l]).unwrap() {
            return None;
        }
        widest = widest.max(c.items_len() - before);
    }
    c.is_accepting(spec).then_some(widest)
}

/// Leo's optimization: a right-recursive nullable rule `L ::= "a" L | ""` keeps a bounded
/// row at every length (without it, row k holds k completed `L` items).
#[test]
fn right_recursion_keeps_rows_bounded() {
    let mut b = GrammarBuilder::new();
    let a = b.literal("a");
    let l = b.rule_ref("L");
    b.define("L", vec![vec![Symbol::Lexeme(a), Symbol::Rule(l)], vec![]]);
    let g = b.build(l).unwrap();
    let spec = ParserSpec::new(&g, &[false], &[true]).unwrap();
    for n in [1, 10, 100, 2000] {
        let widest = max_row_len(&spec, &vec![a; n]).unwrap();
        assert!(widest <= 6, "{n} lexemes: {widest} items in a row");
    }
}

/// The object shape of the schema emitter: `obj ::= "{" tail "}"`, `tail ::= "," kv tail |
/// ""` (plus a first member), `kv ::= "k" ":" value`, values nested objects or "x". A flat
/// object of 1,000 members and objects nested in the last member keep bounded rows.
#[test]
fn object_tails_keep_rows_bounded() {
    let mut b = GrammarBuilder::new();
    let [lb, rb, comma, colon, k, x] = ["{", "}", ",", ":", "k", "x"].map(|t| b.literal(t));
    let value = b.rule_ref("value");
    let tail = b.rule_ref("tail");
    let kv = vec![
        Symbol::Lexeme(k),
        Symbol::Lexeme(colon),
        Symbol::Rule(value),
    ];
    let mut more = vec![Symbol::Lexeme(comma)];
    more.extend(kv.iter().copied());
    more.push(Symbol::Rule(tail));
    b.define("tail", vec![more, vec![]]);
    let mut first = kv.clone();
    first.push(Symbol::Rule(tail));
    let body = b.define("body", vec![first, vec![]]);
    let obj = b.define(
        "obj",
        vec![vec![
            Symbol::Lexeme(lb),
            Symbol::Rule(body),
            Symbol::Lexeme(rb),
        ]],
    );
    b.define(
        "value",
        vec![vec![Symbol::Lexeme(x)], vec![Symbol::Rule(obj)]],
    );
    let g = b.build(value).unwrap();
    let spec = ParserSpec::new(&g, &[false; 6], &[true; 6]).unwrap();
    let member = |seq: &mut Vec<LexemeId>, i: usize| {
        if i > 0 {
            seq.push(comma);
        }
        seq.extend([k, colon]);
    };
    let mut flat = vec![lb];
    for i in 0..1000 {
        member(&mut flat, i);
        flat.push(x);
    }
    flat.push(rb);
    let mut nested = vec![];
    for _ in 0..50 {
        nested.push(lb);
        for i in 0..20 {
            member(&mut nested, i);
            nested.push(x);
        }
        member(&mut nested, 20);
    }
    nested.push(x);
    nested.extend(std::iter::repeat_n(rb, 50));
    let flat_widest = max_row_len(&spec, &flat).unwrap();
    assert!(flat_widest <= 12, "flat: {flat_widest} items in a row");
    let nested_widest = max_row_len(&spec, &nested).unwrap();
    assert!(
        nested_widest <= 12,
        "nested: {nested_widest} items in a row"
    );
}

/// A seeded xorshift, for the random grammars below.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// A random grammar over lexemes `a`, `b`, `c` (some of them nullable), with right, left
/// and unit recursion, empty alternatives and cycles of unit rules.
fn random_spec(rng: &mut Rng) -> Option<ParserSpec> {
    let mut b = GrammarBuilder::new();
    let lex = ["a", "b", "c"].map(|t| b.literal(t));
    let n_rules = 1 + rng.below(5);
    let rules: Vec<RuleId> = (0..n_rules).map(|i| b.rule_ref(&format!("r{i}"))).collect();
    for i in 0..n_rules {
        let alts = (0..1 + rng.below(3))
            .map(|_| {
                (0..rng.below(4))
                    .map(|_| match rng.below(5) {
                        0 | 1 => Symbol::Lexeme(lex[rng.below(3)]),
                        _ => Symbol::Rule(rules[rng.below(n_rules)]),
                    })
                    .collect()
            })
            .collect();
        b.define(&format!("r{i}"), alts);
    }
    let g = b.build(rules[0]).ok()?;
    let nullable = [false, rng.below(4) == 0, false];
    ParserSpec::new(&g, &nullable, &[true; 3]).ok()
}

/// Leo's optimization recognizes exactly what the plain algorithm does: over random
/// grammars and every input of up to 7 lexemes, the same prefixes are viable, the same
/// ones accepted, and the same lexemes allowed next (also after truncating and rescanning,
/// so memos of popped rows are never read).
#[test]
fn leo_recognizes_what_the_plain_algorithm_does() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut grammars = 0;
    while grammars < 300 {
        let Some(spec) = random_spec(&mut rng) else {
            continue;
        };
        grammars += 1;
        let mut leo = Chart::new(&spec, 100_000).unwrap();
        let mut plain = leo.clone();
        plain.leo_enabled = false;
        // Depth-first over all inputs, pushing and popping rows as the matcher does.
        let mut stack = vec![(1usize, 0u32)];
        while let Some((rows, l)) = stack.pop() {
            leo.truncate(rows);
            plain.truncate(rows);
            if l > 0 {
                let lexeme = [LexemeId(l - 1)];
                let ok = leo.scan(&spec, &lexeme).unwrap();
                assert_eq!(ok, plain.scan(&spec, &lexeme).unwrap());
                if !ok {
                    continue;
                }
            }
            assert_eq!(leo.is_accepting(&spec), plain.is_accepting(&spec));
            let (mut a, mut p) = (vec![], vec![]);
            leo.allowed_lexemes(&spec, &mut a);
            plain.allowed_lexemes(&spec, &mut p);
            assert_eq!(a, p);
            assert!(leo.items_len() <= plain.items_len());
            if leo.rows_len() <= 7 {
                stack.extend((1..=3).map(|l| (leo.rows_len(), l)));
            }
        }
    }
}

/// Row signatures still mean equal futures with Leo's optimization: over random grammars,
/// prefixes whose last rows share a signature allow the same lexemes and accept alike
/// after every continuation of up to 3 lexemes.
#[test]
fn leo_rows_with_equal_signatures_have_equal_futures() {
    fn future(spec: &ParserSpec, prefix: &[u32]) -> Option<Vec<(Vec<LexemeId>, bool)>> {
        let mut c = Chart::new(spec, 100_000).unwrap();
        for &l in prefix {
            if !c.scan(spec, &[LexemeId(l)]).unwrap() {
                return None;
            }
        }
        let base = c.rows_len();
        let mut out = vec![];
        let mut stack = vec![(base, 0u32)];
        while let Some((rows, l)) = stack.pop() {
            c.truncate(rows);
            if l > 0 && !c.scan(spec, &[LexemeId(l - 1)]).unwrap() {
                out.push((vec![], false));
                continue;
            }
            let mut a = vec![];
            c.allowed_lexemes(spec, &mut a);
            out.push((a, c.is_accepting(spec)));
            if c.rows_len() < base + 3 {
                stack.extend((1..=3).map(|l| (c.rows_len(), l)));
            }
        }
        Some(out)
    }
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let mut grammars = 0;
    let mut shared = 0;
    while grammars < 200 {
        let Some(spec) = random_spec(&mut rng) else {
            continue;
        };
        grammars += 1;
        let table = RowSigs::new(1 << 20);
        let mut by_sig: std::collections::HashMap<RowSig, Vec<u32>> = Default::default();
        for n in 0..=5u32 {
            for code in 0..3u32.pow(n) {
                let prefix: Vec<u32> = (0..n).map(|i| code / 3u32.pow(i) % 3).collect();
                let mut c = Chart::new(&spec, 100_000).unwrap();
                if !prefix
                    .iter()
                    .all(|&l| c.scan(&spec, &[LexemeId(l)]).unwrap())
                {
                    continue;
                }
                let sig = c.last_row_signature(&table).unwrap();
                match by_sig.get(&sig) {
                    Some(other) => {
                        shared += 1;
                        assert_eq!(
                            future(&spec, other),
                            future(&spec, &prefix),
                            "{other:?} and {prefix:?}"
                        );
                    }
                    None => {
                        by_sig.insert(sig, prefix);
                    }
                }
            }
        }
    }
    assert!(shared > 100, "only {shared} prefixes shared a signature");
}

/// An object grammar over lexemes with a permutation rule: members `a`, `b` (required)
/// and `n {…}` (a nested object) listed, `x` repeated (or absent), under count bounds. The
/// chart must accept exactly what a direct reading of the rules accepts (each listed
/// member at most once per object, the required one present, the count within bounds),
/// keep each nested object's state apart, and never reach a dead end: from every prefix
/// it scans, following its own allowed lexemes completes a sentence the oracle accepts.
#[test]
fn permutation_rules_accept_exactly_the_side_conditions() {
    const LB: u32 = 0;
    const RB: u32 = 1;
    const COMMA: u32 = 2;
    const A: u32 = 3;
    const B: u32 = 4;
    const N: u32 = 5;
    const X: u32 = 6;
    /// The oracle: parses one object at `i`, returning the index after it.
    fn object(seq: &[u32], mut i: usize, k: (u64, Option<u64>, bool)) -> Option<usize> {
        let (min, max, with_x) = k;
        if seq.get(i) != Some(&LB) {
            return None;
        }
        i += 1;
        let mut written = [false; 3];
        let mut count = 0u64;
        if seq.get(i) != Some(&RB) {
            loop {
                let m = *seq.get(i)?;
                i += 1;
                match m {
                    A | B | N => {
                        let w = (m - A) as usize;
                        if written[w] {
                            return None;
                        }
                        written[w] = true;
                        if m == N {
                            i = object(seq, i, k)?;
                        }
                    }
                    X if with_x => {}
                    _ => return None,
                }
                count += 1;
                match seq.get(i) {
                    Some(&COMMA) => i += 1,
                    _ => break,
                }
            }
        }
        if seq.get(i) != Some(&RB) || !written[1] || count < min {
            return None;
        }
        if max.is_some_and(|m| count > m) {
            return None;
        }
        Some(i + 1)
    }
    let bounds = [
        (0, None, true),
        (3, None, true),
        (0, Some(2), true),
        (2, Some(3), true),
        (3, None, false),
        (2, Some(2), false),
    ];
    for k @ (min, max, with_x) in bounds {
        let oracle = |seq: &[u32]| object(seq, 0, k) == Some(seq.len());
        let mut b = GrammarBuilder::new();
        for t in ["{", "}", ",", "a", "b", "n", "x"] {
            b.literal(t);
        }
        let lex = |i: u32| Symbol::Lexeme(LexemeId(i));
        let obj = b.rule_ref("obj");
        let mut members = vec![
            (vec![lex(A)], Some(0)),
            (vec![lex(B)], Some(1)),
            (vec![lex(N), Symbol::Rule(obj)], Some(2)),
        ];
        if with_x {
            members.push((vec![lex(X)], None));
        }
        let head = b.permutation("props", lex(COMMA), &members, vec![1], min, max);
        b.define("obj", vec![vec![lex(LB), Symbol::Rule(head), lex(RB)]]);
        let g = b.build(obj).unwrap();
        let spec = match ParserSpec::new(&g, &[false; 7], &[true; 7]) {
            // Three members, no repeated one: every object must hold a nested one.
            Err(ParserError::EmptyLanguage { .. }) if k == (3, None, false) => continue,
            spec => spec.unwrap(),
        };
        assert_ne!(k, (3, None, false), "an object that must contain itself");
        let mut rng = Rng(0x5eed_0000 + min * 7 + max.unwrap_or(9) + with_x as u64);
        for _ in 0..3000 {
            // Random sequences that look like objects (brackets and members alternate).
            let len = 2 + rng.below(14);
            let mut seq = vec![LB];
            for k in 1..len {
                let t = if k % 2 == 0 && rng.below(5) > 0 {
                    COMMA
                } else {
                    [LB, RB, A, B, N, X, X][rng.below(7)]
                };
                seq.push(t);
            }
            let mut c = Chart::new(&spec, 10_000).unwrap();
            let mut scanned = 0;
            while scanned < seq.len() && c.scan(&spec, &[LexemeId(seq[scanned])]).unwrap() {
                scanned += 1;
            }
            let accepted = scanned == seq.len() && c.is_accepting(&spec);
            assert_eq!(accepted, oracle(&seq), "{k:?} {seq:?}");
            // The prefix the chart scanned completes, by the chart's own allowed lexemes.
            let mut done = seq[..scanned].to_vec();
            let mut steps = 0;
            while !c.is_accepting(&spec) {
                let mut allowed = Vec::new();
                c.allowed_lexemes(&spec, &mut allowed);
                let pick = [RB, B, X, COMMA, A, N, LB]
                    .into_iter()
                    .find(|t| allowed.contains(&LexemeId(*t)));
                let Some(t) = pick else {
                    panic!("dead end after {done:?} ({k:?})");
                };
                assert!(c.scan(&spec, &[LexemeId(t)]).unwrap());
                done.push(t);
                steps += 1;
                assert!(steps < 40, "no completion of {:?}", &seq[..scanned]);
            }
            assert!(oracle(&done), "{k:?} {done:?}");
        }
    }
}
