//! Budget-aware closing: a short token path from a matcher's state to an accepted output,
//! which the decode loop appends instead of sampling when the token budget runs low.
//!
//! Owns the closing walk ([`closing_path`]) and its JSON ranking of tokens; does not own
//! *when* to close (the loop in [`generate`](super) decides from the remaining budget and the
//! last estimate) nor masks (the matcher).
//!
//! # Costs
//! One mask and a scan of it per walked token that is not forced.
//!
//! Uses `matcher` (masks, forced tokens, consume/rollback) and `toktrie` (token bytes, EOS);
//! nothing after it in the pipeline.

use super::GenerateError;
use crate::matcher::Matcher;
use crate::toktrie::{TokenId, TokenSet};

/// How much a byte pulls a closing walk away from finishing: separators and openers start
/// more content, whitespace is content-free but endless.
fn badness(b: u8) -> u32 {
    match b {
        b',' => 3,
        b'{' | b'[' => 2,
        b' ' | b'\t' | b'\n' | b'\r' => 4,
        b'-' | b'+' | b'.' | b':' => 1,
        _ => 0,
    }
}

fn is_closer(b: u8) -> bool {
    matches!(b, b'"' | b'}' | b']')
}

/// The class of a token's first byte, for variety in a closing walk: letters, digits, and
/// every other byte on its own.
fn class_of(bytes: &[u8]) -> u8 {
    match bytes.first() {
        Some(b) if b.is_ascii_alphabetic() => b'a',
        Some(b) if b.is_ascii_digit() => b'0',
        Some(&b) => b,
        None => 0,
    }
}

/// The bytes that close the JSON text `out` from where it stands: `"` when inside a string,
/// then the closers of the open containers, innermost first. Empty at top level (and for
/// output that is not JSON-like, where it carries no information).
fn json_closers(out: &[u8]) -> Vec<u8> {
    let mut stack = Vec::new();
    let (mut in_string, mut escaped) = (false, false);
    for &b in out {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' => stack.push(b'}'),
            b'[' => stack.push(b']'),
            b'}' | b']' => {
                stack.pop();
            }
            _ => {}
        }
    }
    let mut closers = Vec::with_capacity(stack.len() + 1);
    if in_string {
        closers.push(b'"');
    }
    closers.extend(stack.iter().rev());
    closers
}

/// The ranking key of a token in a closing walk, smaller is better: how far the token follows
/// `closers` (the JSON closing sequence from here, see [`json_closers`]; when that is empty,
/// how many closing bytes `"` `}` `]` it starts with), then the class used least so far in
/// this walk (so a pattern such as `[a-z]+-[0-9]+` gets its `-` instead of letters forever),
/// then least badness, then shortest, then lowest id. Inside a JSON string only `"` closes:
/// a token `]]]]` there is content, and ranking it as closing kept walks from ever finishing.
fn closing_key(
    bytes: &[u8],
    id: TokenId,
    uses: &[u16; 256],
    closers: &[u8],
) -> (std::cmp::Reverse<usize>, u16, u32, usize, u32) {
    let lead = if closers.is_empty() {
        bytes.iter().take_while(|&&b| is_closer(b)).count()
    } else {
        bytes
            .iter()
            .zip(closers)
            .take_while(|(a, b)| a == b)
            .count()
    };
    let bad = bytes.iter().map(|&b| badness(b)).sum();
    let used = uses[class_of(bytes) as usize];
    (std::cmp::Reverse(lead), used, bad, bytes.len(), id.0)
}

/// A short token path from the matcher's state to an accepted output, at most `limit` tokens,
/// or `None` if the greedy walk finds none within the limit. The matcher is left as it was
/// (the walk rolls back); `mask` is clobbered.
///
/// The walk takes forced tokens when there are any, else the best allowed token by
/// [`closing_key`]: it closes strings and containers as soon as the grammar allows, skips
/// optional members, and writes the shortest content required (e.g. `""`, a digit). It is
/// greedy, so its length over-estimates the true shortest completion: a conservative budget.
///
/// # Errors
/// Matcher errors (budgets).
pub fn closing_path(
    matcher: &mut Matcher,
    mask: &mut TokenSet,
    limit: usize,
) -> Result<Option<Vec<TokenId>>, GenerateError> {
    let cg = matcher.compiled().clone();
    let vocab = cg.vocab();
    let trie = cg.trie();
    let mut path: Vec<TokenId> = Vec::new();
    let mut uses = [0u16; 256];
    let steps_before = matcher.steps_len();
    let result = (|| -> Result<bool, GenerateError> {
        while path.len() <= limit {
            if matcher.is_accepting() {
                return Ok(true);
            }
            if path.len() == limit {
                return Ok(false);
            }
            let forced = matcher.compute_forced_tokens()?;
            if !forced.is_empty() {
                let take = forced.len().min(limit - path.len());
                matcher.consume_tokens(&forced[..take])?;
                path.extend_from_slice(&forced[..take]);
                continue;
            }
            matcher.compute_mask(mask)?;
            let closers = json_closers(matcher.output());
            let best = mask
                .iter()
                .filter(|&t| !trie.is_eos(t))
                .min_by_key(|&t| closing_key(vocab.token_bytes(t), t, &uses, &closers));
            match best {
                Some(t) => {
                    let c = class_of(vocab.token_bytes(t)) as usize;
                    uses[c] = uses[c].saturating_add(1);
                    matcher.consume_token(t)?;
                    path.push(t);
                }
                None => return Ok(false),
            }
        }
        Ok(false)
    })();
    let done = matcher.steps_len() - steps_before;
    matcher.rollback(done)?;
    Ok(if result? { Some(path) } else { None })
}

#[cfg(test)]
mod tests {
    use super::super::tests::{object_grammar, vocab};
    use super::*;
    use crate::grammar::{GrammarBuilder, Symbol};
    use crate::matcher::{CompiledGrammar, Limits};
    use crate::toktrie::Vocab;
    use std::sync::Arc;

    #[test]
    fn json_closers_follow_strings_escapes_and_nesting() {
        assert_eq!(json_closers(br#"{"a":[{"b":"x"#), br#""}]}"#);
        assert_eq!(json_closers(br#"{"a":"\"]"#), br#""}"#);
        assert_eq!(json_closers(br#"{"a":"[{"}"#), b"");
        assert_eq!(json_closers(br#"[1,{"k":"#), b"}]");
        assert_eq!(json_closers(b"db-7 hi"), b"");
    }

    #[test]
    fn closing_path_leaves_the_matcher_unchanged() {
        let v = vocab();
        let cg =
            Arc::new(CompiledGrammar::new(object_grammar(), v.clone(), Limits::default()).unwrap());
        let mut m = Matcher::new(cg).unwrap();
        m.consume_bytes(b"{\"name\":\"ab").unwrap();
        let mut mask = TokenSet::new(v.vocab_len());
        let mut before = TokenSet::new(v.vocab_len());
        m.compute_mask(&mut before).unwrap();
        let path = closing_path(&mut m, &mut mask, 50).unwrap().unwrap();
        let mut after = TokenSet::new(v.vocab_len());
        m.compute_mask(&mut after).unwrap();
        assert_eq!(before.as_words(), after.as_words());
        let text: Vec<u8> = path
            .iter()
            .flat_map(|&t| v.token_bytes(t).to_vec())
            .collect();
        assert_eq!(String::from_utf8(text).unwrap(), "\",\"n\":0}");
        assert_eq!(closing_path(&mut m, &mut mask, 2).unwrap(), None);
    }

    /// Regression: a closing walk that always took the best-ranked letter never reached the
    /// `-` a pattern like `[a-z]+-[0-9]+` needs, so long outputs ended incomplete.
    #[test]
    fn closing_path_varies_classes_to_satisfy_patterns() {
        let mut b = GrammarBuilder::new();
        let host = b.lexeme("host", r#""[a-z]+-[0-9]+""#);
        let start = b.define("start", vec![vec![Symbol::Lexeme(host)]]);
        let v = vocab();
        let cg = Arc::new(
            CompiledGrammar::new(b.build(start).unwrap(), v.clone(), Limits::default()).unwrap(),
        );
        let mut m = Matcher::new(cg).unwrap();
        m.consume_bytes(b"\"db").unwrap();
        let mut mask = TokenSet::new(v.vocab_len());
        let path = closing_path(&mut m, &mut mask, 10).unwrap().unwrap();
        let text: Vec<u8> = path
            .iter()
            .flat_map(|&t| v.token_bytes(t).to_vec())
            .collect();
        assert_eq!(String::from_utf8(text).unwrap(), "a-0\"");
    }
}
