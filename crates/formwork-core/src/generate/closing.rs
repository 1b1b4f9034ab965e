//! Budget-aware closing: short token paths from a matcher's state to an accepted output, which
//! the decode loop appends instead of sampling when the token budget runs low.
//!
//! Owns the closing strategies ([`Closing`]) and their greedy walks, and *when* to close
//! ([`Closer`]: the per-generation state deciding from the remaining budget and the estimates
//! so far, shared by the single-sequence [`Generator`](super::Generator) and the batched
//! [`BatchGenerator`](super::batch::BatchGenerator), so both close at the same tokens); does
//! not own masks (the matcher) nor appending the path (each loop does, with its own output). Every walk takes the forced tokens when there are any,
//! never chooses EOS, stops as soon as the matcher accepts, and gives up (`None`) at its
//! token limit; it leaves the matcher as it found it (it rolls back) and clobbers the mask it
//! is given. Walks are greedy, so a path's length over-estimates the true shortest
//! completion: a conservative budget. A walk that finds nothing changes nothing: the loop
//! keeps sampling, and a truncated output stays `accepted == false`.
//!
//! - [`Closing::Json`] ranks tokens with JSON knowledge: the bytes closing what is open (`"`
//!   inside a string, then `}`/`]`), avoiding `,` `{` `[` and whitespace. Right for JSON
//!   Schema, JSON mode and tool calls; wrong for other text, where `"` or `]` are content.
//! - [`Closing::Generic`] knows nothing of the output's syntax: it prefers a token after which
//!   the matcher accepts, then variety of first-byte classes, then fewest bytes, then lowest
//!   id. For GBNF and regex constraints.
//!
//! # Costs
//! Per walked token that is not forced: `Json`, one mask and a scan of it; `Generic`, one
//! mask, a scan, and up to 256 one-token probes (consume, [`Matcher::is_accepting`],
//! rollback: one per distinct first byte among the allowed tokens).
//!
//! May use: `matcher` (masks, forced tokens, consume/rollback), `toktrie` (token bytes, EOS).

use std::time::Instant;

use super::{GenerateError, Generation};
use crate::matcher::Matcher;
use crate::toktrie::{TokTrie, TokenId, TokenSet, Vocab};

/// Extra tokens kept in reserve when deciding to close: one sampled token can lengthen the
/// shortest completion (opening a string or an object).
const CLOSE_MARGIN: usize = 3;

/// What [`Closer::check`] decided before a sampling step.
#[derive(Debug)]
pub(super) enum Check {
    /// Sample as usual. `mask_clobbered`: a closing walk ran and overwrote the mask, so the
    /// step must compute it again before sampling under it.
    Sample {
        /// Whether the caller's mask no longer holds this step's mask.
        mask_clobbered: bool,
    },
    /// Stop sampling: append this path (consume it, push its tokens) and end the generation
    /// [`ClosedEarly`](super::StopReason::ClosedEarly).
    Close(Vec<TokenId>),
}

/// The budget-aware closing decision of one generation: when a closing walk is due, the last
/// estimate, the longest path seen, and the fallback path of the current step. One per
/// generation, asked before each sampling step ([`check`](Self::check)) and after each
/// sampled token ([`after_sample`](Self::after_sample)); with [`Closing::Off`] it never walks.
#[derive(Debug)]
pub(super) struct Closer {
    closing: Closing,
    /// Last closing estimate (tokens).
    estimate: Option<usize>,
    /// Tokens generated when the last estimate was computed.
    estimated_at: usize,
    /// The longest closing path found so far: how long finishing a structure the model has
    /// just opened may take (a whole tool call, an item of a list).
    longest: usize,
    /// Whether the last closing walk found no path within the budget.
    hopeless: bool,
    /// A closing path found at this step that fits with room to spare: the way out if the
    /// sampled token would leave no completion within the budget.
    fallback: Option<Vec<TokenId>>,
}

impl Closer {
    /// A fresh decision state for one generation with `closing`.
    pub(super) fn new(closing: Closing) -> Self {
        Closer {
            closing,
            estimate: None,
            estimated_at: 0,
            longest: 0,
            hopeless: false,
            fallback: None,
        }
    }

    /// Before sampling a token with `remaining` (> 0) tokens of budget left and `g.tokens`
    /// generated so far: walks a closing path when one is due, and decides whether to close
    /// now. Closing time goes to `g.timings.closing`.
    ///
    /// # Errors
    /// Matcher errors (budgets) of the walk.
    pub(super) fn check(
        &mut self,
        matcher: &mut Matcher,
        mask: &mut TokenSet,
        g: &mut Generation,
        remaining: usize,
    ) -> Result<Check, GenerateError> {
        self.fallback = None;
        if !self.closing.is_on() {
            return Ok(Check::Sample {
                mask_clobbered: false,
            });
        }
        let since = g.tokens.len() - self.estimated_at;
        let due = match self.estimate {
            None => true,
            // A failed walk is retried only every 8 tokens: it costs `remaining` masks.
            Some(_) if self.hopeless => since >= 8,
            // In the end zone every step: one sampled token can lengthen the shortest
            // completion past the budget (a `,` that opens a member), so the path is re-found
            // each step and each sampled token is checked against it (`after_sample`). The
            // zone is sized by the longest path seen, not only the last one: in an accepting
            // state the last is empty, yet one sampled token (a `{` after a finished tool
            // call) can open a structure as long as the first.
            Some(e) => remaining <= 2 * e.max(self.longest) + 16,
        };
        if !due {
            return Ok(Check::Sample {
                mask_clobbered: false,
            });
        }
        let t = Instant::now();
        let path = self.closing.path(matcher, mask, remaining)?;
        g.timings.closing += t.elapsed();
        self.estimated_at = g.tokens.len();
        self.hopeless = path.is_none();
        match path {
            Some(path) => {
                self.estimate = Some(path.len());
                self.longest = self.longest.max(path.len());
                if path.len() + CLOSE_MARGIN >= remaining {
                    return Ok(Check::Close(path));
                }
                self.fallback = Some(path);
            }
            // Nothing fits: keep sampling; the model may still finish in time.
            None => self.estimate = Some(remaining),
        }
        Ok(Check::Sample {
            mask_clobbered: true,
        })
    }

    /// After the sampled (non-EOS) token has been consumed, `remaining` being the budget
    /// [`check`](Self::check) was given: near the budget's end the token is kept only if a
    /// completion still fits after it. Otherwise the token is taken back (the matcher rolled
    /// back one token) and the path that fitted before it is returned: close along it. May
    /// clobber `mask`; `g.timings.closing` gets the walk's time.
    ///
    /// # Errors
    /// Matcher errors (budgets) of the walk or the rollback.
    pub(super) fn after_sample(
        &mut self,
        matcher: &mut Matcher,
        mask: &mut TokenSet,
        g: &mut Generation,
        remaining: usize,
    ) -> Result<Option<Vec<TokenId>>, GenerateError> {
        let Some(path) = self.fallback.take() else {
            return Ok(None);
        };
        let t = Instant::now();
        let after = self.closing.path(matcher, mask, remaining - 1)?;
        g.timings.closing += t.elapsed();
        if after.is_some() {
            return Ok(None);
        }
        matcher.rollback(1)?;
        Ok(Some(path))
    }
}

/// How the decode loop closes the output when the token budget runs low (budget-aware
/// closing), as [`GenerateConfig::closing`](super::GenerateConfig::closing).
///
/// When the remaining budget comes down to the length of a closing path found by the
/// strategy, the loop appends that path and marks the result
/// [`closed_early`](super::Generation::closed_early). Whatever the strategy, an output cut by
/// the budget without a path that fits is never marked accepted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Closing {
    /// Rank tokens with JSON knowledge (close the open string, then the open containers; skip
    /// optional members). The default: JSON Schema, JSON-mode and tool-call constraints, the
    /// bulk of formwork's use, produce JSON.
    #[default]
    Json,
    /// Rank tokens without knowledge of the output's syntax: a token after which the grammar
    /// accepts first, then the first-byte class used least in this walk (so a pattern such as
    /// `[a-z]+-[0-9]+` gets its `-`), then the fewest bytes, then the lowest id. For GBNF and
    /// regex constraints, where JSON's closers are ordinary content.
    Generic,
    /// Never close: sample until the budget, EOS or a complete grammar. For measuring, or
    /// when a truncated output is preferred to an early-closed one.
    Off,
}

impl Closing {
    /// Whether the loop closes at all (every strategy but [`Closing::Off`]).
    pub fn is_on(self) -> bool {
        self != Closing::Off
    }

    /// A short token path from the matcher's state to an accepted output, at most `limit`
    /// tokens, found by this strategy's greedy walk; `None` if it finds none within the
    /// limit (always for [`Closing::Off`]). The matcher is left as it was (the walk rolls
    /// back); `mask` is clobbered.
    ///
    /// # Errors
    /// Matcher errors (budgets).
    pub fn path(
        self,
        matcher: &mut Matcher,
        mask: &mut TokenSet,
        limit: usize,
    ) -> Result<Option<Vec<TokenId>>, GenerateError> {
        match self {
            Closing::Json => json_path(matcher, mask, limit),
            Closing::Generic => generic_path(matcher, mask, limit),
            Closing::Off => Ok(None),
        }
    }
}

/// A short token path from the matcher's state to an accepted output, at most `limit` tokens,
/// or `None` if the greedy walk finds none within the limit: [`Closing::Json`]'s walk. The
/// matcher is left as it was (the walk rolls back); `mask` is clobbered.
///
/// The walk takes forced tokens when there are any, else the best allowed token by the JSON
/// ranking (the closers of what is open first; see [`Closing::Json`]): it closes strings and containers as soon as the grammar allows, skips
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
    Closing::Json.path(matcher, mask, limit)
}

/// The walk every strategy shares: forced tokens when there are any, else `choose`'s pick from
/// the mask (`None`: give up), until the matcher accepts (the path) or `limit` tokens are
/// spent (`None`). Rolls the matcher back to where it was.
fn walk(
    matcher: &mut Matcher,
    mask: &mut TokenSet,
    limit: usize,
    mut choose: impl FnMut(&mut Matcher, &TokenSet) -> Result<Option<TokenId>, GenerateError>,
) -> Result<Option<Vec<TokenId>>, GenerateError> {
    let mut path: Vec<TokenId> = Vec::new();
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
            match choose(matcher, mask)? {
                Some(t) => {
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

// ------------------------------------------------------------------------------------ JSON

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

/// The ranking key of a token in a JSON closing walk, smaller is better: how far the token
/// follows `closers` (the JSON closing sequence from here, see [`json_closers`]; when that is
/// empty, how many closing bytes `"` `}` `]` it starts with), then the class used least so far
/// in this walk (so a pattern such as `[a-z]+-[0-9]+` gets its `-` instead of letters
/// forever), then least badness, then shortest, then lowest id. Inside a JSON string only `"`
/// closes: a token `]]]]` there is content, and ranking it as closing kept walks from ever
/// finishing.
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

/// [`Closing::Json`]'s walk: the best allowed token by [`closing_key`] at each step.
fn json_path(
    matcher: &mut Matcher,
    mask: &mut TokenSet,
    limit: usize,
) -> Result<Option<Vec<TokenId>>, GenerateError> {
    let cg = matcher.compiled().clone();
    let vocab = cg.vocab();
    let trie = cg.trie();
    let mut uses = [0u16; 256];
    walk(matcher, mask, limit, |matcher, mask| {
        let closers = json_closers(matcher.output());
        let best = json_pick(trie, &**vocab, mask, &uses, &closers, true);
        if let Some(t) = best {
            let c = class_of(vocab.token_bytes(t)) as usize;
            uses[c] = uses[c].saturating_add(1);
        }
        Ok(best)
    })
}

/// The allowed token (in `mask`, not EOS) that [`closing_key`] ranks best, `None` if there is
/// none. The ranking puts a token that starts closing (lead ≥ 1) before any other, and such a
/// token starts with the first closer (with no closers, with one of `"` `}` `]`); with
/// `via_trie` those are looked at first, through the trie, and the whole mask (inside a string
/// nearly the whole vocabulary) is scanned only when none of them is allowed. Same pick either
/// way: a few hundred tokens looked at instead of tens of thousands.
fn json_pick(
    trie: &TokTrie,
    vocab: &dyn Vocab,
    mask: &TokenSet,
    uses: &[u16; 256],
    closers: &[u8],
    via_trie: bool,
) -> Option<TokenId> {
    let key = |t: TokenId| closing_key(vocab.token_bytes(t), t, uses, closers);
    let mut best: Option<TokenId> = None;
    if via_trie {
        let firsts: &[u8] = match closers.first() {
            Some(b) => std::slice::from_ref(b),
            None => b"\"}]",
        };
        for &b in firsts {
            if let Some(node) = trie.node_of(&[b]) {
                trie.for_each_subtree_token(node, |t| {
                    if mask.contains(t) && !trie.is_eos(t) && best.is_none_or(|b| key(t) < key(b)) {
                        best = Some(t);
                    }
                });
            }
        }
    }
    best.or_else(|| {
        mask.iter()
            .filter(|&t| !trie.is_eos(t))
            .min_by_key(|&t| key(t))
    })
}

// --------------------------------------------------------------------------------- generic

/// [`Closing::Generic`]'s walk. At each step it probes the shortest allowed token of each
/// distinct first byte (lowest id on ties), shortest first, and takes the first after which
/// the matcher accepts; failing that, the allowed token with the least-used first-byte class
/// in this walk, then the fewest bytes, then the lowest id. Tokens without bytes are never
/// chosen (they make no progress).
fn generic_path(
    matcher: &mut Matcher,
    mask: &mut TokenSet,
    limit: usize,
) -> Result<Option<Vec<TokenId>>, GenerateError> {
    let cg = matcher.compiled().clone();
    let vocab = cg.vocab();
    let trie = cg.trie();
    let mut uses = [0u16; 256];
    walk(matcher, mask, limit, |matcher, mask| {
        // (bytes, id) of the shortest token per first byte, and the best by the fallback key.
        let mut probes: [Option<(usize, TokenId)>; 256] = [None; 256];
        let mut best: Option<((u16, usize, u32), TokenId)> = None;
        for t in mask.iter().filter(|&t| !trie.is_eos(t)) {
            let bytes = vocab.token_bytes(t);
            let Some(&first) = bytes.first() else {
                continue;
            };
            let slot = &mut probes[first as usize];
            if slot.is_none_or(|(len, id)| (bytes.len(), t.0) < (len, id.0)) {
                *slot = Some((bytes.len(), t));
            }
            let key = (uses[class_of(bytes) as usize], bytes.len(), t.0);
            if best.is_none_or(|(k, _)| key < k) {
                best = Some((key, t));
            }
        }
        let mut probes: Vec<(usize, TokenId)> = probes.into_iter().flatten().collect();
        probes.sort_unstable_by_key(|&(len, id)| (len, id.0));
        for (_, t) in probes {
            matcher.consume_token(t)?;
            let accepts = matcher.is_accepting();
            matcher.rollback(1)?;
            if accepts {
                return Ok(Some(t));
            }
        }
        let pick = best.map(|(_, t)| t);
        if let Some(t) = pick {
            let c = class_of(vocab.token_bytes(t)) as usize;
            uses[c] = uses[c].saturating_add(1);
        }
        Ok(pick)
    })
}

#[cfg(test)]
mod tests {
    use super::super::tests::{object_grammar, vocab};
    use super::*;
    use crate::grammar::{gbnf, GrammarBuilder, Symbol};
    use crate::matcher::{CompiledGrammar, Limits};
    use crate::toktrie::{SyntheticVocab, Vocab};
    use std::sync::Arc;

    /// A fresh matcher of `g` over `v`, fed `prefix`.
    fn matcher(g: crate::grammar::Grammar, v: &Arc<SyntheticVocab>, prefix: &[u8]) -> Matcher {
        let cg = Arc::new(CompiledGrammar::new(g, v.clone(), Limits::default()).unwrap());
        let mut m = Matcher::new(cg).unwrap();
        m.consume_bytes(prefix).unwrap();
        m
    }

    /// The text of `strategy`'s path from `m`, at most `limit` tokens (`None`: no path).
    fn path_text(
        strategy: Closing,
        m: &mut Matcher,
        v: &Arc<SyntheticVocab>,
        limit: usize,
    ) -> Option<String> {
        let mut mask = TokenSet::new(v.vocab_len());
        let path = strategy.path(m, &mut mask, limit).unwrap()?;
        let text: Vec<u8> = path
            .iter()
            .flat_map(|&t| v.token_bytes(t).to_vec())
            .collect();
        Some(String::from_utf8(text).unwrap())
    }

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
        for strategy in [Closing::Json, Closing::Generic] {
            let mut m = matcher(object_grammar(), &v, b"{\"name\":\"ab");
            let mut before = TokenSet::new(v.vocab_len());
            m.compute_mask(&mut before).unwrap();
            let steps = m.steps_len();
            let text = path_text(strategy, &mut m, &v, 50).unwrap();
            let mut after = TokenSet::new(v.vocab_len());
            m.compute_mask(&mut after).unwrap();
            assert_eq!(before.as_words(), after.as_words(), "{strategy:?}");
            assert_eq!((m.steps_len(), m.output()), (steps, &b"{\"name\":\"ab"[..]));
            if strategy == Closing::Json {
                // The JSON walk closes the string at once and skips the optional member.
                assert_eq!(text, "\",\"n\":0}");
                let mut mask = TokenSet::new(v.vocab_len());
                assert_eq!(closing_path(&mut m, &mut mask, 2).unwrap(), None);
            }
            assert_eq!(path_text(strategy, &mut m, &v, 2), None, "{strategy:?}");
        }
        let mut m = matcher(object_grammar(), &v, b"{");
        assert_eq!(path_text(Closing::Off, &mut m, &v, 50), None);
    }

    /// Regression: a closing walk that always took the best-ranked letter never reached the
    /// `-` a pattern like `[a-z]+-[0-9]+` needs, so long outputs ended incomplete.
    #[test]
    fn closing_path_varies_classes_to_satisfy_patterns() {
        let mut b = GrammarBuilder::new();
        let host = b.lexeme("host", r#""[a-z]+-[0-9]+""#);
        let start = b.define("start", vec![vec![Symbol::Lexeme(host)]]);
        let v = vocab();
        let g = b.build(start).unwrap();
        let mut m = matcher(g.clone(), &v, b"\"db");
        assert_eq!(path_text(Closing::Json, &mut m, &v, 10).unwrap(), "a-0\"");
        // Generic: `-` is the lowest allowed byte, then a digit, then the probe of `"` accepts.
        let mut m = matcher(g, &v, b"\"db");
        assert_eq!(path_text(Closing::Generic, &mut m, &v, 10).unwrap(), "-0\"");
    }

    /// Why GBNF and regex constraints want their own strategy: in text, `"` is content, and
    /// the JSON ranking keeps writing it (each `"` "opens" or "closes" a JSON string) instead
    /// of the `.` that ends this grammar.
    #[test]
    fn generic_closing_knows_no_json() {
        let g = gbnf::parse(r#"root ::= [a-z"]+ ".""#).unwrap();
        let v = vocab();
        let mut m = matcher(g.clone(), &v, b"ab");
        assert_eq!(path_text(Closing::Json, &mut m, &v, 12), None);
        let mut m = matcher(g, &v, b"ab");
        assert_eq!(path_text(Closing::Generic, &mut m, &v, 12).unwrap(), ".");
    }

    /// Nested structure: the probe finds no accepting token until the innermost item is
    /// written; class variety stops the walk from opening `(` forever, and the closers are
    /// forced.
    #[test]
    fn generic_closing_finishes_nested_grammars() {
        let g = gbnf::parse(
            "root ::= \"(\" root \")\" | item\n\
             item ::= [a-z]+ (\",\" [a-z]+)*",
        )
        .unwrap();
        let v = vocab();
        let mut m = matcher(g.clone(), &v, b"(((ab,c");
        assert_eq!(path_text(Closing::Generic, &mut m, &v, 10).unwrap(), ")))");
        let mut m = matcher(g.clone(), &v, b"((");
        let text = path_text(Closing::Generic, &mut m, &v, 10).unwrap();
        assert!(text.ends_with("))"), "{text}");
        let mut m = matcher(g, &v, b"((");
        assert_eq!(path_text(Closing::Generic, &mut m, &v, 2), None);
    }

    /// The JSON walk looks for its pick among the tokens starting with the first closer
    /// before scanning the whole mask: at states all over a schema's grammar (strings, keys,
    /// numbers, nested containers, after a finished value) and with varied class counts, the
    /// pick must be the full scan's.
    #[test]
    fn json_pick_via_the_trie_is_the_full_scans_pick() {
        let mut toks: Vec<Vec<u8>> = (0u8..=255).map(|b| vec![b]).collect();
        for t in [
            "\"}", "\"]", "}]", "]}", "\"}]", "}}", "\"},", "\",", "\":", "{\"", "[\"", "]]",
            "\"a", "ab", "name", "tags", "12", "\"}}", "}]}", "\"]}", "]}}", "\"]\"", "}\"",
        ] {
            toks.push(t.as_bytes().to_vec());
        }
        toks.push(b"\"}".to_vec()); // a duplicate of a closing token
        let v = Arc::new(SyntheticVocab::new(toks).with_eos("<eos>"));
        let schema = serde_json::json!({
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "tags": {"type": "array", "items": {"type": "string"}},
                "n": {"type": "integer"},
                "inner": {"type": "object", "properties": {"a": {"type": "array", "items": {"type": "object", "properties": {"b": {"type": "string"}}}}}}
            },
            "required": ["name", "tags", "inner"]
        });
        let json = crate::schema::compile(&schema, &Default::default())
            .unwrap()
            .grammar;
        // Text where the closers are content: with no JSON open, `}` and `]` tokens compete.
        let text = gbnf::parse(r#"root ::= [a-z"}\]]+ ".""#).unwrap();
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let mut mask = TokenSet::new(v.vocab_len());
        let mut compared = [0; 2];
        for (g, compared) in [json, text].into_iter().zip(&mut compared) {
            let cg = Arc::new(CompiledGrammar::new(g, v.clone(), Limits::default()).unwrap());
            let trie = cg.trie();
            for _ in 0..40 {
                let mut m = Matcher::new(cg.clone()).unwrap();
                for _ in 0..60 {
                    m.compute_mask(&mut mask).unwrap();
                    if mask.count() == 0 || m.is_accepting() {
                        break;
                    }
                    let mut uses = [0u16; 256];
                    for u in uses.iter_mut() {
                        *u = (next() % 3) as u16;
                    }
                    let closers = json_closers(m.output());
                    let fast = json_pick(trie, &*v, &mask, &uses, &closers, true);
                    let full = json_pick(trie, &*v, &mask, &uses, &closers, false);
                    assert_eq!(
                        fast,
                        full,
                        "after {:?}",
                        String::from_utf8_lossy(m.output())
                    );
                    *compared += 1;
                    let allowed: Vec<TokenId> = mask.iter().collect();
                    let t = allowed[(next() % allowed.len() as u64) as usize];
                    m.consume_token(t).unwrap();
                }
            }
        }
        assert!(compared.iter().all(|&n| n > 300), "{compared:?}");
    }

    #[test]
    fn the_default_strategy_is_json() {
        assert_eq!(Closing::default(), Closing::Json);
        assert!(Closing::Json.is_on() && Closing::Generic.is_on() && !Closing::Off.is_on());
    }
}
