//! `pattern` (and `format`) with `minLength`/`maxLength` the pattern does not imply (issue 44):
//! the string lexeme is the pattern's except the strings of other lengths, which the lexer
//! turns into the product of the pattern with a code-point counter.
//!
//! Checked against brute force: over a three-letter alphabet, every string up to the bound is
//! tested against the pattern (regex-automata on the decoded value, search semantics, which
//! match ECMA-262 for these patterns) and its length in code points; the set of valid JSON
//! texts and their prefixes is then the truth for the matcher's masks. Walking the prefix tree
//! of the valid texts byte by byte (byte-level vocabulary, `rollback` between branches), each
//! mask must hold exactly the bytes that keep the text a prefix of a valid one — exact
//! liveness, a dead end is never offered — and EOS exactly at a valid text. The reference
//! acceptor must agree on every candidate string.

use std::collections::HashSet;
use std::sync::Arc;

use formwork::matcher::{CompiledGrammar, Matcher};
use formwork::schema::reference::Acceptor;
use formwork::schema::{compile, CompileOptions};
use formwork::toktrie::{SyntheticVocab, TokenId, TokenSet, Vocab};
use regex_automata::meta::Regex;
use serde_json::json;

use crate::schema_support::test_limits;

/// The letters strings are built from; `c` and `é` are outside every pattern's alphabet and
/// only probe the masks (`é` as its first UTF-8 byte).
const LETTERS: [char; 3] = ['a', 'b', ':'];
const PROBES: [u8; 6] = [b'a', b'b', b':', b'"', b'c', 0xC3];

/// Patterns with three variable-length parts (the shape no single regex narrows).
const PATTERNS: [&str; 4] = [
    "^(a|b)*:(a|b)*:?a*$",
    "^a+:b*:?(a|b)*$",
    "^(ab|b)*:(a:)*b*$",
    "^[ab]*:a*:[ab:]*$",
];

/// Every string over `LETTERS` of at most `n` characters.
fn strings_up_to(n: usize) -> Vec<String> {
    let mut out = vec![String::new()];
    let mut layer = vec![String::new()];
    for _ in 0..n {
        let next: Vec<String> = layer
            .iter()
            .flat_map(|s| LETTERS.iter().map(move |c| format!("{s}{c}")))
            .collect();
        out.extend(next.iter().cloned());
        layer = next;
    }
    out
}

/// Walks the prefix tree of `valid` from `prefix` (already consumed by `m`), checking each mask.
fn walk(
    m: &mut Matcher,
    prefix: &mut Vec<u8>,
    valid: &HashSet<Vec<u8>>,
    prefixes: &HashSet<Vec<u8>>,
    label: &str,
) -> Result<(), String> {
    let vocab = Arc::new(SyntheticVocab::byte_level());
    let mut mask = TokenSet::new(vocab.vocab_len());
    m.compute_mask(&mut mask).map_err(|e| e.to_string())?;
    let shown = String::from_utf8_lossy(prefix).into_owned();
    let eos = vocab.eos_tokens().iter().any(|&t| mask.contains(t));
    if eos != valid.contains(prefix) {
        return Err(format!("{label}: after {shown:?}: EOS in the mask {eos}"));
    }
    for b in PROBES {
        let mut next = prefix.clone();
        next.push(b);
        let live = prefixes.contains(&next);
        if mask.contains(TokenId(u32::from(b))) != live {
            return Err(format!(
                "{label}: after {shown:?}: byte {:?} in the mask {}, live {live}",
                b as char, !live
            ));
        }
        if live {
            m.consume_token(TokenId(u32::from(b)))
                .map_err(|e| e.to_string())?;
            prefix.push(b);
            walk(m, prefix, valid, prefixes, label)?;
            prefix.pop();
            m.rollback(1).map_err(|e| e.to_string())?;
        }
    }
    Ok(())
}

#[test]
fn pattern_with_lengths_masks_are_exact() {
    let bounds: [(u64, Option<u64>); 4] = [(0, Some(3)), (2, Some(4)), (4, Some(5)), (5, None)];
    let candidates = strings_up_to(7);
    let vocab = Arc::new(SyntheticVocab::byte_level());
    let mut failures = Vec::new();
    for p in PATTERNS {
        let re = Regex::new(p).expect("pattern");
        for (lo, hi) in bounds {
            let label = format!("{p} {lo}..{hi:?}");
            let mut schema = json!({"type": "string", "pattern": p, "minLength": lo});
            if let Some(h) = hi {
                schema["maxLength"] = json!(h);
            }
            let g = match compile(&schema, &CompileOptions::default()) {
                Ok(c) => c.grammar,
                Err(e) => {
                    failures.push(format!("{label}: {e}"));
                    continue;
                }
            };
            let mut acceptor = Acceptor::new(&g).expect("acceptor");
            let mut valid = HashSet::new();
            let mut prefixes = HashSet::new();
            for s in &candidates {
                let n = s.chars().count() as u64;
                let want = re.is_match(s) && lo <= n && hi.is_none_or(|h| n <= h);
                let text = serde_json::to_string(s).expect("a string");
                if acceptor.accepts(text.as_bytes()).is_ok() != want {
                    failures.push(format!("{label}: reference acceptor on {text}: not {want}"));
                }
                // Without a maximum only the lengths enumerated are known.
                if want && (hi.is_some() || n < 7) {
                    let bytes = text.into_bytes();
                    for k in 1..=bytes.len() {
                        prefixes.insert(bytes[..k].to_vec());
                    }
                    valid.insert(bytes);
                }
            }
            if hi.is_none() {
                // Masks are only checked where the enumeration is complete.
                continue;
            }
            let cg = CompiledGrammar::new(g.clone(), vocab.clone(), test_limits())
                .expect("compiled grammar");
            let mut m = Matcher::new(Arc::new(cg)).expect("matcher");
            if let Err(e) = walk(&mut m, &mut Vec::new(), &valid, &prefixes, &label) {
                failures.push(e);
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn format_with_lengths_is_exact() {
    // MaskBench `format: email` with `maxLength` (Github_medium---o37683 and others), and a
    // `format: uri` under a bound on its hostname-like tail.
    let g = compile(
        &json!({"type": "string", "format": "email", "minLength": 6, "maxLength": 8}),
        &CompileOptions {
            assert_format: true,
            ..Default::default()
        },
    )
    .expect("email with lengths compiles")
    .grammar;
    let mut acceptor = Acceptor::new(&g).expect("acceptor");
    for (s, want) in [
        ("a@b.co", true),
        ("ab@cd.ef", true),
        ("a@b.c", false),
        ("abc@de.fg", false),
        ("abcdefgh", false),
    ] {
        let text = serde_json::to_string(s).expect("a string");
        assert_eq!(acceptor.accepts(text.as_bytes()).is_ok(), want, "{s}");
        assert_eq!(
            crate::schema_support::matcher_accepts(&g, &text).is_ok(),
            want,
            "{s}"
        );
    }
    // Escapes count one code point each: `\n` and `é` are one character of the eight.
    let g = compile(
        &json!({"type": "string", "pattern": "^[^:]+:[^:]*:.+$", "maxLength": 5}),
        &CompileOptions::default(),
    )
    .expect("pattern with maxLength compiles")
    .grammar;
    let mut acceptor = Acceptor::new(&g).expect("acceptor");
    for (s, want) in [
        ("\n:é:x", true),
        ("\n:é:xy", false),
        ("\u{e9}::\u{1}b", true),
    ] {
        let text = serde_json::to_string(s).expect("a string");
        assert_eq!(acceptor.accepts(text.as_bytes()).is_ok(), want, "{text}");
        assert_eq!(
            crate::schema_support::matcher_accepts(&g, &text).is_ok(),
            want,
            "{text}"
        );
    }
}
