//! The JSON grammar through the matcher: random walks under the mask end in documents that
//! serde_json parses; MaskBench's valid instances are accepted and none of their tokens is ever
//! masked out; malformed JSON is rejected at the first bad byte.

use std::sync::Arc;

use crate::schema_support::test_limits;
use formwork::matcher::{CompiledGrammar, Matcher, MatcherError};
use formwork::toktrie::{SyntheticVocab, TokenId, TokenSet, Vocab};
use rand::{Rng, SeedableRng};

use crate::engine_json_grammar::{json_grammar, json_like_vocab};

use crate::corpus::maskbench_valid_instances;

fn compiled(vocab: SyntheticVocab) -> Arc<CompiledGrammar> {
    Arc::new(CompiledGrammar::new(json_grammar(), Arc::new(vocab), test_limits()).unwrap())
}

#[test]
fn random_walks_produce_json() {
    let vocab = json_like_vocab(2000, 7);
    let eos = vocab.eos_tokens()[0];
    let cg = compiled(vocab.clone());
    let closers: Vec<TokenId> = ["\"", "}", "]", "0", "1"]
        .iter()
        .filter_map(|s| vocab.token_of(s.as_bytes()))
        .collect();
    let mut rng = rand::rngs::StdRng::seed_from_u64(42);
    let mut mask = TokenSet::new(vocab.vocab_len());
    let mut completed = 0;
    for walk in 0..60 {
        let mut m = Matcher::new(cg.clone()).unwrap();
        for step in 0..400 {
            m.compute_mask(&mut mask).unwrap();
            assert!(
                !mask.is_empty(),
                "walk {walk}: empty mask after {:?}",
                String::from_utf8_lossy(m.output())
            );
            let t = if mask.contains(eos) && (step > 30 || rng.random_bool(0.2)) {
                eos
            } else if step > 40 && closers.iter().any(|&c| mask.contains(c)) && rng.random_bool(0.8)
            {
                let ok: Vec<TokenId> = closers
                    .iter()
                    .copied()
                    .filter(|&c| mask.contains(c))
                    .collect();
                ok[rng.random_range(0..ok.len())]
            } else {
                let all: Vec<TokenId> = mask.iter().collect();
                all[rng.random_range(0..all.len())]
            };
            m.consume_token(t).unwrap();
            if m.is_stopped() {
                let out = m.output();
                // IgnoredAny: numbers like 1e400 are valid JSON but overflow an f64 Value.
                if let Err(e) = serde_json::from_slice::<serde::de::IgnoredAny>(out) {
                    panic!("walk {walk}: {e} in {:?}", String::from_utf8_lossy(out));
                }
                completed += 1;
                break;
            }
        }
    }
    assert!(completed >= 40, "only {completed} of 60 walks completed");
}

#[test]
fn maskbench_valid_instances_are_accepted() {
    let docs = maskbench_valid_instances();
    assert!(docs.len() > 500, "{} instances", docs.len());
    let cg = compiled(SyntheticVocab::byte_level());
    let mut m = Matcher::new(cg).unwrap();
    for d in &docs {
        m.reset();
        m.consume_bytes(d.as_bytes())
            .unwrap_or_else(|e| panic!("{e} in {d}"));
        assert!(m.is_accepting(), "not accepted: {d}");
    }
}

#[test]
fn instance_tokens_are_never_masked_out() {
    let vocab = json_like_vocab(3000, 11);
    let cg = compiled(vocab.clone());
    let mut mask = TokenSet::new(vocab.vocab_len());
    for d in maskbench_valid_instances().iter().step_by(15).take(30) {
        let mut m = Matcher::new(cg.clone()).unwrap();
        for t in vocab.tokenize(d.as_bytes()) {
            m.compute_mask(&mut mask).unwrap();
            assert!(
                mask.contains(t),
                "token {:?} masked out after {:?}",
                String::from_utf8_lossy(vocab.token_bytes(t)),
                String::from_utf8_lossy(m.output())
            );
            m.consume_token(t).unwrap();
        }
        m.compute_mask(&mut mask).unwrap();
        assert!(mask.contains(vocab.eos_tokens()[0]));
    }
}

#[test]
fn malformed_json_is_rejected_at_the_first_bad_byte() {
    let cg = compiled(SyntheticVocab::byte_level());
    for (text, offset) in [
        (&b"{\"a\" 1}"[..], 5),
        (b"[1,,2]", 3),
        (b"{\"a\":tru }", 8),
        (b"\"\x01\"", 1),
        (b"01", 1),
        (b"[1 2]", 3),
    ] {
        let mut m = Matcher::new(cg.clone()).unwrap();
        let err = m.consume_bytes(text).unwrap_err();
        match err {
            MatcherError::ByteRejected { offset: o, .. } => {
                assert_eq!(o, offset, "{:?}", String::from_utf8_lossy(text))
            }
            e => panic!("unexpected {e}"),
        }
    }
}
