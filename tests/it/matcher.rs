//! Matcher exactness: property tests against the independent reference in `engine_reference`
//! (mask ⇔ viability, EOS ⇔ acceptance, rollback + replay, forced bytes and tokens), on random
//! small grammars and random small vocabularies.

use std::sync::Arc;

use crate::schema_support::test_limits;
use formwork::matcher::{CompiledGrammar, Limits, Matcher};
use formwork::toktrie::{SyntheticVocab, TokenId, TokenSet, Vocab};
use proptest::prelude::*;
use proptest::test_runner::Config;

use crate::engine_reference::{build, Pat, Piece, RefGrammar, Reference};

const ALPHABET: &[u8] = b"ab,";

fn piece() -> impl Strategy<Value = Piece> {
    (
        proptest::sample::subsequence(ALPHABET.to_vec(), 1..=ALPHABET.len()),
        prop_oneof![
            Just((1, Some(1))),
            Just((0, Some(1))),
            Just((1, None)),
            Just((0, None)),
            Just((2, Some(3))),
        ],
    )
        .prop_map(|(class, (min, max))| Piece { class, min, max })
}

fn pat() -> impl Strategy<Value = Pat> {
    proptest::collection::vec(piece(), 1..=3).prop_map(|mut pieces| {
        // Lexemes never match the empty string (the engine makes such lexemes optional
        // symbols instead; the reference does not model that rewrite).
        if pieces.iter().all(|p| p.min == 0) {
            pieces[0].min = 1;
        }
        Pat { pieces }
    })
}

type Alt = Vec<Result<usize, usize>>;

fn grammar() -> impl Strategy<Value = Option<RefGrammar>> {
    let sym = prop_oneof![3 => (0usize..4).prop_map(Ok), 2 => (0usize..4).prop_map(Err)];
    let alt = proptest::collection::vec(sym, 0..=3);
    let rule = proptest::collection::vec(alt, 1..=3);
    (
        proptest::collection::vec(pat(), 1..=4),
        proptest::collection::vec(rule, 1..=4),
    )
        .prop_map(|(pats, rules): (Vec<Pat>, Vec<Vec<Alt>>)| build(&pats, &rules))
}

fn vocab() -> impl Strategy<Value = SyntheticVocab> {
    let tok = proptest::collection::vec(proptest::sample::select(ALPHABET.to_vec()), 1..=3);
    proptest::collection::vec(tok, 0..12).prop_map(|toks| {
        SyntheticVocab::new(toks)
            .with_eos("<eos>")
            .with_special("<sp>")
    })
}

/// A random viable prefix: at each step keep only the bytes the reference calls viable.
fn walk(r: &Reference, choices: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    for &c in choices {
        let options: Vec<u8> = ALPHABET
            .iter()
            .copied()
            .filter(|&b| {
                let mut t = out.clone();
                t.push(b);
                r.viable(&t)
            })
            .collect();
        if options.is_empty() {
            break;
        }
        out.push(options[c as usize % options.len()]);
    }
    out
}

fn compiled(g: &RefGrammar, v: &SyntheticVocab) -> Arc<CompiledGrammar> {
    compiled_with(g, v, test_limits())
}

fn compiled_with(g: &RefGrammar, v: &SyntheticVocab, limits: Limits) -> Arc<CompiledGrammar> {
    Arc::new(
        CompiledGrammar::new(g.grammar.clone(), Arc::new(v.clone()), limits)
            .expect("test grammars compile"),
    )
}

/// Limits with the in-lexeme mask cache off: every mask is a plain trie walk.
fn uncached() -> Limits {
    Limits {
        mask_cache_bytes: 0,
        ..test_limits()
    }
}

fn expected_mask(r: &Reference, v: &SyntheticVocab, prefix: &[u8]) -> TokenSet {
    let mut want = TokenSet::new(v.vocab_len());
    for id in 0..v.vocab_len() as u32 {
        let t = TokenId(id);
        if v.is_special(t) {
            continue;
        }
        let mut s = prefix.to_vec();
        s.extend_from_slice(v.token_bytes(t));
        if r.viable(&s) {
            want.insert(t);
        }
    }
    if r.accepted(prefix) {
        for &e in v.eos_tokens() {
            want.insert(e);
        }
    }
    want
}

fn describe(v: &SyntheticVocab, s: &TokenSet) -> Vec<String> {
    s.iter()
        .map(|t| String::from_utf8_lossy(v.token_bytes(t)).into_owned())
        .collect()
}

proptest! {
    #![proptest_config(Config::with_cases(300))]

    /// A token is in the mask iff the reference says prefix+token is viable; EOS iff the
    /// prefix is accepted.
    #[test]
    fn mask_is_exact(g in grammar(), v in vocab(), choices in proptest::collection::vec(0u8..=255, 0..8)) {
        let Some(g) = g else { return Ok(()) };
        let r = Reference::new(&g);
        let prefix = walk(&r, &choices);
        let cg = compiled(&g, &v);
        let mut m = Matcher::new(cg.clone()).unwrap();
        m.consume_bytes(&prefix).unwrap();
        let mut got = TokenSet::new(v.vocab_len());
        m.compute_mask(&mut got).unwrap();
        let want = expected_mask(&r, &v, &prefix);
        prop_assert_eq!(
            &got, &want,
            "grammar:\n{}prefix {:?}\ngot {:?}\nwant {:?}",
            g.grammar, String::from_utf8_lossy(&prefix), describe(&v, &got), describe(&v, &want)
        );
        prop_assert_eq!(m.is_accepting(), r.accepted(&prefix));
        // The same without the mask cache, and a second (cached) mask from the same state.
        let mut plain = Matcher::new(compiled_with(&g, &v, uncached())).unwrap();
        plain.consume_bytes(&prefix).unwrap();
        plain.compute_mask(&mut got).unwrap();
        prop_assert_eq!(&got, &want, "uncached");
        m.compute_mask(&mut got).unwrap();
        prop_assert_eq!(&got, &want, "second mask");
        // A second matcher of the same grammar reuses the shared in-lexeme entries.
        let mut m2 = Matcher::new(cg).unwrap();
        m2.consume_bytes(&prefix).unwrap();
        m2.compute_mask(&mut got).unwrap();
        prop_assert_eq!(&got, &want, "second matcher");
    }

    /// Token-level random walks under the mask: every token taken is consumable, masks after
    /// `rollback(n)` + replay are identical, and an output ended by EOS is accepted.
    #[test]
    fn walks_rollback_and_eos(g in grammar(), v in vocab(), choices in proptest::collection::vec(0u16..=u16::MAX, 1..10), back in 1usize..4) {
        let Some(g) = g else { return Ok(()) };
        let r = Reference::new(&g);
        let mut m = Matcher::new(compiled(&g, &v)).unwrap();
        let mut mask = TokenSet::new(v.vocab_len());
        let mut masks = Vec::new();
        let mut taken = Vec::new();
        for &c in &choices {
            m.compute_mask(&mut mask).unwrap();
            masks.push(mask.clone());
            let allowed: Vec<TokenId> = mask.iter().collect();
            if allowed.is_empty() {
                break;
            }
            let t = allowed[c as usize % allowed.len()];
            m.consume_token(t).unwrap();
            taken.push(t);
            if m.is_stopped() {
                prop_assert!(r.accepted(m.output()), "EOS after {:?}", String::from_utf8_lossy(m.output()));
                break;
            }
            prop_assert!(r.viable(m.output()));
        }
        let n = back.min(taken.len());
        m.rollback(n).unwrap();
        let keep = taken.len() - n;
        for (i, &t) in taken[keep..].iter().enumerate() {
            m.compute_mask(&mut mask).unwrap();
            prop_assert_eq!(&mask, &masks[keep + i], "mask after rollback differs at step {}", keep + i);
            m.consume_token(t).unwrap();
        }
    }

    /// `is_token_allowed` answers exactly as the mask does, for every token at every state of a
    /// random walk (EOS, specials and out-of-range ids included), and never changes the state:
    /// the mask after all the checks is the mask before them.
    #[test]
    fn single_token_checks_agree_with_the_mask(g in grammar(), v in vocab(), choices in proptest::collection::vec(0u16..=u16::MAX, 0..8)) {
        let Some(g) = g else { return Ok(()) };
        let mut m = Matcher::new(compiled(&g, &v)).unwrap();
        let mut mask = TokenSet::new(v.vocab_len());
        let mut again = TokenSet::new(v.vocab_len());
        for &c in &choices {
            m.compute_mask(&mut mask).unwrap();
            for id in 0..v.vocab_len() as u32 + 2 {
                let t = TokenId(id);
                prop_assert_eq!(m.is_token_allowed(t).unwrap(), mask.contains(t), "token {} after {:?}", id, String::from_utf8_lossy(m.output()));
            }
            prop_assert!(m.error().is_none());
            m.compute_mask(&mut again).unwrap();
            prop_assert_eq!(&again, &mask);
            let allowed: Vec<TokenId> = mask.iter().collect();
            if allowed.is_empty() {
                break;
            }
            m.consume_token(allowed[c as usize % allowed.len()]).unwrap();
        }
        // After EOS (or wherever the walk ended) nothing outside the mask is allowed.
        m.compute_mask(&mut mask).unwrap();
        for id in 0..v.vocab_len() as u32 {
            prop_assert_eq!(m.is_token_allowed(TokenId(id)).unwrap(), mask.contains(TokenId(id)));
        }
    }

    /// Forced bytes are exactly the bytes the reference forces, and forced tokens are the
    /// canonical tokenization of them, backed off where a longer token could span the end.
    #[test]
    fn forced_bytes_and_tokens(g in grammar(), v in vocab(), choices in proptest::collection::vec(0u8..=255, 0..6)) {
        let Some(g) = g else { return Ok(()) };
        let r = Reference::new(&g);
        let prefix = walk(&r, &choices);
        // A grammar with a greedy-lexing conflict (`/a+/ /a/`) forces bytes forever; cap it.
        let limits = Limits { max_forced_bytes: 40, ..test_limits() };
        let mut m = Matcher::new(compiled_with(&g, &v, limits)).unwrap();
        m.consume_bytes(&prefix).unwrap();
        let forced = m.compute_forced_bytes().unwrap();
        // Reference: extend while not accepted and exactly one byte is viable.
        let mut want = Vec::new();
        let mut cur = prefix.clone();
        loop {
            if r.accepted(&cur) {
                break;
            }
            // Lexemes only match bytes of the alphabet, so no other byte can be viable.
            let viable: Vec<u8> = ALPHABET
                .iter()
                .copied()
                .filter(|&b| {
                    let mut t = cur.clone();
                    t.push(b);
                    r.viable(&t)
                })
                .collect();
            if viable.len() != 1 || want.len() >= 40 {
                break;
            }
            want.push(viable[0]);
            cur.push(viable[0]);
        }
        prop_assert_eq!(&forced, &want);
        let toks = m.compute_forced_tokens().unwrap();
        let full = v.tokenize(&forced);
        prop_assert!(full.starts_with(&toks));
        // Every dropped token starts a tail that some longer token extends; the kept ones do not.
        let mut off = 0;
        for (i, &t) in full.iter().enumerate() {
            let tail = &forced[off..];
            let extendable = (0..v.vocab_len() as u32).map(TokenId).any(|u| {
                let b = v.token_bytes(u);
                !v.is_special(u) && b.len() > tail.len() && b.starts_with(tail)
            });
            if i < toks.len() {
                prop_assert!(!extendable, "kept token {} could be extended", i);
            } else if i == toks.len() {
                prop_assert!(extendable, "dropped token {} is not extendable", i);
            }
            off += v.token_bytes(t).len();
        }
        // The forced tokens are consumable.
        m.consume_tokens(&toks).unwrap();
    }
}

/// Bytes mostly from the test alphabet, sometimes anything.
fn fuzz_byte() -> impl Strategy<Value = u8> {
    prop_oneof![4 => proptest::sample::select(ALPHABET.to_vec()), 1 => 0u8..=255]
}

/// JSON-flavoured bytes, sometimes anything.
fn json_byte() -> impl Strategy<Value = u8> {
    prop_oneof![
        6 => proptest::sample::select(b"{}[]\",:0123456789.-eEtrufalsn \\u".to_vec()),
        1 => 0u8..=255,
    ]
}

proptest! {
    #![proptest_config(Config::with_cases(300))]

    /// The matcher fed arbitrary bytes (the fuzz property): each byte is accepted exactly when
    /// the reference says the output stays viable, and the first rejection is sticky.
    #[test]
    fn arbitrary_bytes_follow_the_reference(g in grammar(), bytes in proptest::collection::vec(fuzz_byte(), 0..12)) {
        let Some(g) = g else { return Ok(()) };
        let r = Reference::new(&g);
        let mut m = Matcher::new(compiled(&g, &SyntheticVocab::byte_level())).unwrap();
        for (i, &b) in bytes.iter().enumerate() {
            let viable = r.viable(&bytes[..=i]);
            let res = m.consume_bytes(&[b]);
            prop_assert_eq!(res.is_ok(), viable, "byte {} of {:?}", i, bytes);
            if let Err(e) = res {
                prop_assert_eq!(m.consume_bytes(b"a"), Err(e.clone()));
                let mut mask = TokenSet::new(257);
                prop_assert_eq!(m.compute_mask(&mut mask), Err(e));
                prop_assert_eq!(m.output(), &bytes[..i]);
                break;
            }
        }
    }

    /// The JSON grammar fed arbitrary bytes and tokens never panics; what it accepts to the
    /// end parses as JSON.
    #[test]
    fn json_arbitrary_input(bytes in proptest::collection::vec(json_byte(), 0..40), split in 1usize..5) {
        let g = crate::engine_json_grammar::json_grammar();
        let v = SyntheticVocab::byte_level();
        let cg = Arc::new(CompiledGrammar::new(g, Arc::new(v), test_limits()).unwrap());
        let mut m = Matcher::new(cg).unwrap();
        let mut ok = true;
        for chunk in bytes.chunks(split) {
            if m.consume_bytes(chunk).is_err() {
                ok = false;
                break;
            }
        }
        prop_assert!(bytes.starts_with(m.output()));
        if ok && m.is_accepting() {
            prop_assert!(serde_json::from_slice::<serde::de::IgnoredAny>(&bytes).is_ok(), "{:?}", String::from_utf8_lossy(&bytes));
        }
        let _ = m.compute_forced_tokens();
        m.reset();
        prop_assert_eq!(m.output(), b"");
    }
}
