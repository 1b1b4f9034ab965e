//! Fuzz target: the matcher fed arbitrary bytes and tokens, with masks, single-token checks,
//! forced tokens, rollback and reset interleaved; must never panic and must keep its invariants:
//! - a token taken from the mask is consumed without error, and `is_token_allowed` agrees with
//!   the mask on every token;
//! - a token outside the mask is refused by `consume_token` (and the error is sticky);
//! - `rollback(n)` followed by replaying the same tokens gives identical masks;
//! - forced tokens are consumable.
//!
//! Input layout: byte 0 picks the grammar (one of `grammars/*.gbnf`, or a small random grammar
//! built from the bytes after byte 1), byte 1 the vocabulary (byte-level, or byte-level plus
//! fixed multi-byte tokens), the rest is a program of operations.
//!
//! Setup is done once per process, not per input: the two vocabularies (byte-level, and
//! byte-level plus fixed multi-byte tokens) and the shipped grammars compiled against each are
//! built on first use and shared (the first version built them per input and ran at 5 execs/s).
#![no_main]

use std::sync::{Arc, OnceLock};

use formwork_core::grammar::{gbnf, Grammar, GrammarBuilder, Symbol};
use formwork_core::toktrie::SyntheticVocab;
use formwork_core::{CompiledGrammar, Limits, Matcher, MatcherError, TokEnv, TokenId, TokenSet};
use libfuzzer_sys::fuzz_target;

const GBNF: [&str; 4] = [
    include_str!("../../grammars/json.gbnf"),
    include_str!("../../grammars/list.gbnf"),
    include_str!("../../grammars/arithmetic.gbnf"),
    include_str!("../../grammars/c_like.gbnf"),
];

/// Reads the input front to back; past the end it yields zeros.
struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn byte(&mut self) -> u8 {
        match self.0.split_first() {
            Some((&b, rest)) => {
                self.0 = rest;
                b
            }
            None => 0,
        }
    }
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    fn take(&mut self, n: usize) -> &[u8] {
        let n = n.min(self.0.len());
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        a
    }
}

/// A small random grammar over the alphabet `ab,{}`: up to 4 lexemes from a fixed menu and up to
/// 4 rules of up to 3 alternatives of up to 3 symbols (possibly empty, left-recursive,
/// ambiguous, undefined-free by construction).
fn random_grammar(inp: &mut Input) -> Option<Grammar> {
    const LEXEMES: [&str; 8] = ["a", "b+", "a*b", "[ab]{1,3}", ",", "\\{", "\\}", "(ab)+"];
    let mut b = GrammarBuilder::new();
    let nlex = 1 + inp.byte() as usize % 4;
    let lexemes: Vec<_> = (0..nlex)
        .map(|i| {
            b.lexeme(
                &format!("l{i}"),
                LEXEMES[inp.byte() as usize % LEXEMES.len()],
            )
        })
        .collect();
    let nrules = 1 + inp.byte() as usize % 4;
    let rules: Vec<_> = (0..nrules).map(|i| b.rule_ref(&format!("r{i}"))).collect();
    for i in 0..nrules {
        let nalt = 1 + inp.byte() as usize % 3;
        let alts = (0..nalt)
            .map(|_| {
                let n = inp.byte() as usize % 4;
                (0..n)
                    .map(|_| {
                        let s = inp.byte() as usize;
                        if s % 3 == 0 {
                            Symbol::Rule(rules[(s / 3) % nrules])
                        } else {
                            Symbol::Lexeme(lexemes[(s / 3) % nlex])
                        }
                    })
                    .collect()
            })
            .collect();
        b.define(&format!("r{i}"), alts);
    }
    b.build(rules[0]).ok()
}

/// The two vocabularies: byte-level, and byte-level plus multi-byte tokens over the grammars'
/// alphabets, an end-of-sequence token and a special token that is never allowed.
fn envs() -> &'static [TokEnv; 2] {
    static ENVS: OnceLock<[TokEnv; 2]> = OnceLock::new();
    ENVS.get_or_init(|| {
        let multi: Vec<Vec<u8>> = [
            "ab", "ba", "aa", "bb", "a,", ",a", "{a", "b}", "{}", "}}", "{{", "\"a", "\":", "true",
            "null", "12", "+1", "*(", "))", "; ", "int", "= ",
        ]
        .iter()
        .map(|t| t.as_bytes().to_vec())
        .collect();
        [
            TokEnv::new(Arc::new(SyntheticVocab::byte_level())),
            TokEnv::new(Arc::new(
                SyntheticVocab::new(multi)
                    .with_eos("<eos>")
                    .with_special("<|tool|>"),
            )),
        ]
    })
}

/// The shipped grammars compiled against each vocabulary, once, with the target's limits and
/// the mask cache on or off.
fn shipped(grammar: usize, env: usize, cache: bool) -> Option<Arc<CompiledGrammar>> {
    type Table = Vec<Option<Arc<CompiledGrammar>>>;
    static SHIPPED: OnceLock<Table> = OnceLock::new();
    let table = SHIPPED.get_or_init(|| {
        let mut t = Vec::new();
        for text in GBNF {
            for env in envs() {
                for cache in [false, true] {
                    let g = gbnf::parse(text).expect("shipped grammars parse");
                    t.push(
                        CompiledGrammar::with_env(g, env, limits(cache))
                            .ok()
                            .map(Arc::new),
                    );
                }
            }
        }
        t
    });
    table[(grammar * 2 + env) * 2 + usize::from(cache)].clone()
}

/// Small budgets: a pathological random grammar must end in an error quickly, not a timeout.
fn limits(cache: bool) -> Limits {
    Limits {
        step_fuel: 2_000_000,
        max_forced_bytes: 64,
        mask_cache_bytes: if cache { 1 << 20 } else { 0 },
        ..Limits::default()
    }
}

fn is_budget(e: &MatcherError) -> bool {
    matches!(
        e,
        MatcherError::LimitExceeded { .. } | MatcherError::TimeExceeded { .. }
    )
}

fn check_mask(m: &mut Matcher, mask: &TokenSet, vocab_len: usize) {
    for id in 0..vocab_len as u32 {
        let t = TokenId(id);
        match m.is_token_allowed(t) {
            Ok(a) => assert_eq!(a, mask.contains(t), "is_token_allowed({id}) disagrees"),
            Err(e) if is_budget(&e) => return,
            Err(e) => panic!("is_token_allowed({id}): unexpected {e}"),
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let mut inp = Input(data);
    let choice = inp.byte() as usize;
    let env_ix = usize::from(inp.byte() % 2);
    let env = &envs()[env_ix];
    let vocab_len = env.trie().vocab_len();
    let cache = choice & 0x80 == 0;
    let cg = if choice % 8 < GBNF.len() {
        match shipped(choice % 8, env_ix, cache) {
            Some(cg) => cg,
            None => return,
        }
    } else {
        let Some(g) = random_grammar(&mut inp) else {
            return;
        };
        match CompiledGrammar::with_env(g, env, limits(cache)) {
            Ok(cg) => Arc::new(cg),
            Err(_) => return,
        }
    };
    let Ok(mut m) = Matcher::new(cg) else { return };
    let mut mask = TokenSet::new(vocab_len);
    // Tokens consumed since the last reset, with the mask computed before each.
    let mut taken: Vec<(TokenId, TokenSet)> = Vec::new();
    let mut steps = 0;
    while !inp.is_empty() && steps < 64 {
        steps += 1;
        let op = inp.byte();
        match op % 6 {
            // Take a token from the mask.
            0 | 1 => {
                if m.compute_mask(&mut mask).is_err() {
                    m.reset();
                    taken.clear();
                    continue;
                }
                if op % 6 == 0 {
                    check_mask(&mut m, &mask, vocab_len);
                }
                let allowed: Vec<TokenId> = mask.iter().collect();
                if allowed.is_empty() {
                    continue;
                }
                let k = (inp.byte() as usize) << 8 | inp.byte() as usize;
                let t = allowed[k % allowed.len()];
                match m.consume_token(t) {
                    Ok(()) => taken.push((t, mask.clone())),
                    Err(e) if is_budget(&e) => {
                        m.reset();
                        taken.clear();
                    }
                    Err(e) => panic!("token {t:?} from the mask refused: {e}"),
                }
            }
            // Any token: accepted exactly when the single-token check says so.
            2 => {
                let t = TokenId(inp.byte() as u32 % (vocab_len as u32 + 1));
                let Ok(allowed) = m.is_token_allowed(t) else {
                    m.reset();
                    taken.clear();
                    continue;
                };
                let before = taken.len();
                let mut full = TokenSet::new(vocab_len);
                let masked = m.compute_mask(&mut full);
                match m.consume_token(t) {
                    Ok(()) => {
                        assert!(allowed, "token {t:?} consumed but reported not allowed");
                        if masked.is_ok() {
                            assert!(full.contains(t));
                            taken.push((t, full));
                        } else {
                            m.reset();
                            taken.clear();
                        }
                    }
                    Err(e) if is_budget(&e) => {
                        m.reset();
                        taken.clear();
                    }
                    Err(e) => {
                        assert!(!allowed, "token {t:?} reported allowed but refused: {e}");
                        // Sticky until reset.
                        assert_eq!(m.consume_bytes(b"a"), Err(e.clone()));
                        assert_eq!(taken.len(), before);
                        m.reset();
                        taken.clear();
                    }
                }
            }
            // Roll back and replay: identical masks.
            3 => {
                let n = (inp.byte() as usize % 4).min(taken.len());
                if m.rollback(n).is_err() {
                    m.reset();
                    taken.clear();
                    continue;
                }
                let keep = taken.len() - n;
                let replay: Vec<(TokenId, TokenSet)> = taken.drain(keep..).collect();
                for (t, want) in replay {
                    match m.compute_mask(&mut mask) {
                        Ok(()) => assert_eq!(mask, want, "mask after rollback differs"),
                        Err(_) => {
                            m.reset();
                            taken.clear();
                            break;
                        }
                    }
                    match m.consume_token(t) {
                        Ok(()) => taken.push((t, want)),
                        Err(e) if is_budget(&e) => {
                            m.reset();
                            taken.clear();
                            break;
                        }
                        Err(e) => panic!("replayed token {t:?} refused: {e}"),
                    }
                }
            }
            // Raw bytes: one rollback step that is not a token, so the token history restarts.
            4 => {
                let n = 1 + inp.byte() as usize % 4;
                let bytes = inp.take(n).to_vec();
                if m.consume_bytes(&bytes).is_err() {
                    m.reset();
                }
                taken.clear();
            }
            // Forced tokens are consumable.
            _ => match m.compute_forced_tokens() {
                Ok(toks) => {
                    for t in toks {
                        match m.compute_mask(&mut mask) {
                            Ok(()) => {}
                            Err(_) => break,
                        }
                        assert!(mask.contains(t), "forced token {t:?} not in the mask");
                        match m.consume_token(t) {
                            Ok(()) => taken.push((t, mask.clone())),
                            Err(e) if is_budget(&e) => break,
                            Err(e) => panic!("forced token {t:?} refused: {e}"),
                        }
                    }
                }
                Err(_) => {
                    m.reset();
                    taken.clear();
                }
            },
        }
    }
});
