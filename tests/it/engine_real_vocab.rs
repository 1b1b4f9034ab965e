//! The matcher with real tokenizers (SmolLM2, 49,152 tokens; Gemma 3, 262,144 tokens): the
//! model's own tokenization of MaskBench documents is never masked out and ends with EOS
//! allowed; masks exclude special tokens; forced tokens are the canonical tokenization of the
//! forced bytes. Models are fetched and verified on first use.

use std::sync::Arc;

use crate::schema_support::test_limits;
use formwork::grammar::{GrammarBuilder, Symbol};
use formwork::matcher::{CompiledGrammar, Matcher};
use formwork::model::registry::Registry;
use formwork::model::tokenizer::GgufTokenizer;
use formwork::toktrie::{TokenId, TokenSet, Vocab};

use crate::corpus::maskbench_valid_instances;
use crate::engine_json_grammar::json_grammar;
use crate::model_fetch::fetched;

fn tokenizer(name: &str) -> Arc<GgufTokenizer> {
    let registry = Registry::builtin().unwrap();
    let entry = registry.get(name).unwrap();
    let path = fetched(name);
    Arc::new(GgufTokenizer::for_model(entry, &path).unwrap())
}

fn documents_walk(name: &str, docs: usize) {
    let tok = tokenizer(name);
    let cg = Arc::new(CompiledGrammar::new(json_grammar(), tok.clone(), test_limits()).unwrap());
    let mut mask = TokenSet::new(tok.vocab_len());
    let all = maskbench_valid_instances();
    let step = all.len() / docs;
    for d in all.iter().step_by(step).take(docs) {
        let mut m = Matcher::new(cg.clone()).unwrap();
        for t in tok.tokenize(d.as_bytes()) {
            m.compute_mask(&mut mask).unwrap();
            assert!(
                mask.contains(t),
                "{name}: token {:?} masked out after {:?}",
                String::from_utf8_lossy(tok.token_bytes(t)),
                String::from_utf8_lossy(m.output())
            );
            assert!(
                !mask
                    .iter()
                    .any(|x| tok.is_special(x) && !tok.eos_tokens().contains(&x)),
                "{name}: a special token is in the mask"
            );
            m.consume_token(t).unwrap();
        }
        m.compute_mask(&mut mask).unwrap();
        for &e in tok.eos_tokens() {
            assert!(mask.contains(e), "{name}: EOS not allowed after {d}");
        }
        assert_eq!(m.output(), d.as_bytes());
    }
}

#[test]
fn smollm2_document_tokens_are_allowed() {
    documents_walk("smollm2-135m", 12);
}

#[test]
fn gemma3_document_tokens_are_allowed() {
    documents_walk("gemma3-270m", 5);
}

/// `Matcher::is_token_allowed` agrees with `compute_mask` on every token of the SmolLM2
/// vocabulary, at every 7th state of walks through MaskBench documents (about 40 states,
/// ~2M single-token checks), and leaves the state unchanged.
#[test]
fn smollm2_single_token_checks_agree_with_the_mask() {
    let tok = tokenizer("smollm2-135m");
    let cg = Arc::new(CompiledGrammar::new(json_grammar(), tok.clone(), test_limits()).unwrap());
    let mut mask = TokenSet::new(tok.vocab_len());
    let mut after = TokenSet::new(tok.vocab_len());
    let all = maskbench_valid_instances();
    let mut states = 0;
    for d in all.iter().step_by(all.len() / 4).take(4) {
        let mut m = Matcher::new(cg.clone()).unwrap();
        let toks = tok.tokenize(d.as_bytes());
        for (i, &t) in toks.iter().enumerate() {
            if i % 7 == 0 || i + 1 == toks.len() {
                states += 1;
                m.compute_mask(&mut mask).unwrap();
                for id in 0..tok.vocab_len() as u32 {
                    let x = TokenId(id);
                    assert_eq!(
                        m.is_token_allowed(x).unwrap(),
                        mask.contains(x),
                        "token {:?} after {:?}",
                        String::from_utf8_lossy(tok.token_bytes(x)),
                        String::from_utf8_lossy(m.output())
                    );
                }
                m.compute_mask(&mut after).unwrap();
                assert_eq!(after, mask);
            }
            m.consume_token(t).unwrap();
        }
        for &e in tok.eos_tokens() {
            assert!(m.is_token_allowed(e).unwrap());
        }
    }
    assert!(states >= 20, "only {states} states checked");
}

#[test]
fn forced_tokens_are_canonical_with_real_tokenizers() {
    for name in ["smollm2-135m", "gemma3-270m"] {
        let tok = tokenizer(name);
        // {"name": <string>, "count": <number>} with fixed keys.
        let mut b = GrammarBuilder::new();
        let open = b.literal("{\"name\":\"");
        let body = b.lexeme("body", r#"[^"\\]*""#);
        let mid = b.literal(",\"count\":");
        let num = b.lexeme("num", "[0-9]+");
        let close = b.literal("}");
        let s = b.define(
            "s",
            vec![[open, body, mid, num, close]
                .into_iter()
                .map(Symbol::Lexeme)
                .collect()],
        );
        let cg = Arc::new(
            CompiledGrammar::new(b.build(s).unwrap(), tok.clone(), test_limits()).unwrap(),
        );
        let mut m = Matcher::new(cg).unwrap();
        let forced = m.compute_forced_bytes().unwrap();
        assert_eq!(forced, b"{\"name\":\"", "{name}");
        let toks = m.compute_forced_tokens().unwrap();
        let full = tok.tokenize(&forced);
        assert!(full.starts_with(&toks), "{name}: {toks:?} vs {full:?}");
        // Kept tokens start tails no longer token extends; the first dropped one starts a tail
        // that some token extends (checked by scanning the whole vocabulary).
        let extendable = |tail: &[u8]| {
            (0..tok.vocab_len() as u32).map(TokenId).any(|u| {
                let b = tok.token_bytes(u);
                !tok.is_special(u) && b.len() > tail.len() && b.starts_with(tail)
            })
        };
        let mut off = 0;
        for (i, &t) in full.iter().enumerate() {
            if i < toks.len() {
                assert!(!extendable(&forced[off..]), "{name}: kept token {i}");
            } else if i == toks.len() {
                assert!(extendable(&forced[off..]), "{name}: dropped token {i}");
            }
            off += tok.token_bytes(t).len();
        }
        let spelled: Vec<u8> = toks
            .iter()
            .flat_map(|&t| tok.token_bytes(t).to_vec())
            .collect();
        assert!(forced.starts_with(&spelled));
        m.consume_tokens(&toks).unwrap();
        m.consume_bytes(&forced[spelled.len()..]).unwrap();
        m.consume_bytes(b"Ada\"").unwrap();
        assert_eq!(m.compute_forced_bytes().unwrap(), b",\"count\":");
        let mut mask = TokenSet::new(tok.vocab_len());
        m.compute_mask(&mut mask).unwrap();
        let comma: Vec<TokenId> = tok.tokenize(b",");
        assert!(mask.contains(comma[0]), "{name}");
    }
}

/// Issue 43: a client's grammar cannot produce the model's control tokens. For each registry
/// tokenizer, a grammar spelling the text of its special tokens (`<|im_end|>`, `<end_of_turn>`,
/// …, as GBNF or regex literals would) is walked by the model's own tokenization of that text:
/// no mask allows a special token (EOS only where the output is complete), the forced tokens
/// are ordinary ones, and the output is the text, byte for byte.
#[test]
fn grammars_spelling_special_tokens_yield_text_never_the_control_token() {
    for name in ["smollm2-135m", "qwen2.5-coder-0.5b", "gemma3-270m"] {
        let tok = tokenizer(name);
        let specials: Vec<(TokenId, String)> = (0..tok.vocab_len() as u32)
            .map(TokenId)
            .filter(|&t| tok.is_special(t))
            .filter_map(|t| {
                let text = std::str::from_utf8(tok.token_bytes(t)).ok()?;
                (text.len() > 2 && text.starts_with('<') && text.ends_with('>'))
                    .then(|| (t, text.to_string()))
            })
            .take(12)
            .collect();
        assert!(specials.len() >= 2, "{name}: {specials:?}");
        let mut mask = TokenSet::new(tok.vocab_len());
        for (id, text) in &specials {
            let mut b = GrammarBuilder::new();
            let lit = b.literal(text);
            let start = b.define("start", vec![vec![Symbol::Lexeme(lit)]]);
            let cg = Arc::new(
                CompiledGrammar::new(b.build(start).unwrap(), tok.clone(), test_limits()).unwrap(),
            );
            let mut m = Matcher::new(cg.clone()).unwrap();
            let forced = m.compute_forced_tokens().unwrap();
            assert!(
                forced.iter().all(|&t| !tok.is_special(t)),
                "{name}: forcing {text:?} gave a special token: {forced:?}"
            );
            m.compute_mask(&mut mask).unwrap();
            assert!(
                !mask.contains(*id),
                "{name}: {text:?} allows its control token"
            );
            for t in tok.tokenize(text.as_bytes()) {
                m.compute_mask(&mut mask).unwrap();
                assert!(
                    !mask.iter().any(|x| tok.is_special(x)),
                    "{name}: a special token is allowed inside {text:?}"
                );
                assert!(!tok.is_special(t), "{name}: {text:?} tokenizes to {t:?}");
                m.consume_token(t).unwrap();
            }
            assert_eq!(m.output(), text.as_bytes(), "{name}");
            assert!(m.is_accepting(), "{name}: {text:?}");
        }
    }
}
