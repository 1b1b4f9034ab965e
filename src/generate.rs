//! The [`Generator`]: a logits source (the model) plus an optional compiled constraint →
//! tokens.
//!
//! Owns the constrained decode loop: compute the mask, sample under it, consume; fast-forward
//! forced tokens (fed to the model together with the sampled token, in one multi-token forward
//! pass); stop when the grammar allows only EOS, when EOS is sampled, or at the token budget.
//! Also owns **budget-aware closing** and the reuse of the KV cache across calls (the longest
//! common prefix of the previous and the new prompt is not fed again).
//!
//! Does not own masks (the matcher) or the model. Sampling here is the minimal masked pick
//! extraction needs ([`Sampling`]: greedy, or seeded temperature).
//!
//! # Budget-aware closing
//! A small model often rambles inside a string until the token cap. When the remaining budget
//! comes down to the length of a shortest way to finish (found by [`closing_path`], a greedy
//! walk under the mask that prefers closing bytes `"`, `}`, `]` and avoids `,` `{` `[`, so its
//! length in tokens is an over-estimate, never an under-estimate of what it will use), the
//! generator appends that path instead of sampling and marks the result
//! [`closed_early`](Generation::closed_early). When no path fits, the result is not accepted
//! ([`StopReason::MaxTokens`] with `accepted == false`): a truncated output is never passed off
//! as complete.
//!
//! # Costs
//! Per sampled token: one mask (O(visited trie nodes)), one forward pass, one sample. Forced
//! tokens cost no mask and no sampling. Near the end of the budget, a closing check costs one
//! mask per token of the closing path; it runs only while the remaining budget is within a
//! small margin of the last estimate, or every 8 steps in the last stretch.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::matcher::{Matcher, MatcherError};
use crate::toktrie::{TokenId, TokenSet, Vocab};

/// Something that turns tokens into next-token logits: the model, or a fake in tests.
pub trait LogitsSource {
    /// Feeds `tokens` at positions `pos..pos + tokens.len()` (dropping any cached positions from
    /// `pos` on) and returns the logits after the last one.
    fn forward(&mut self, tokens: &[u32], pos: usize) -> Result<Vec<f32>, crate::Error>;
}

impl LogitsSource for crate::model::Model {
    fn forward(&mut self, tokens: &[u32], pos: usize) -> Result<Vec<f32>, crate::Error> {
        crate::model::Model::forward(self, tokens, pos).map_err(crate::Error::from)
    }
}

impl<T: LogitsSource + ?Sized> LogitsSource for &mut T {
    fn forward(&mut self, tokens: &[u32], pos: usize) -> Result<Vec<f32>, crate::Error> {
        (**self).forward(tokens, pos)
    }
}

/// An error of the decode loop.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GenerateError {
    /// The logits source (model) failed.
    #[error("model: {0}")]
    Source(#[source] Box<crate::Error>),
    /// The matcher failed (a budget, or a bug: a token from its own mask was rejected).
    #[error("matcher: {0}")]
    Matcher(#[from] MatcherError),
    /// Every token was masked out (or had a -inf/NaN logit): nothing can be sampled.
    #[error("no token is allowed: all {vocab_len} logits are masked out")]
    NoAllowedToken {
        /// The number of logits.
        vocab_len: usize,
    },
    /// A sampling parameter is out of range.
    #[error("invalid temperature {temperature}: expected a finite number > 0")]
    InvalidTemperature {
        /// The value given.
        temperature: f64,
    },
    /// The prompt is empty: there is nothing to condition on.
    #[error("empty prompt")]
    EmptyPrompt,
}

impl From<crate::Error> for GenerateError {
    fn from(e: crate::Error) -> Self {
        GenerateError::Source(Box::new(e))
    }
}

/// How to choose a token from the masked logits.
#[derive(Clone, Debug, PartialEq)]
pub enum Sampling {
    /// Greedy: the highest logit (lowest id on ties).
    ArgMax,
    /// Sample from the softmax at `temperature` (> 0), seeded by [`GenerateConfig::seed`].
    Temperature {
        /// Softmax temperature.
        temperature: f64,
    },
}

impl Sampling {
    /// Temperature 0 (or absent) is greedy.
    pub fn from_temperature(t: Option<f64>) -> Self {
        match t {
            Some(t) if t > 0.0 => Sampling::Temperature { temperature: t },
            _ => Sampling::ArgMax,
        }
    }
}

/// Picks a token: logits outside `mask` (or past its universe) are ignored.
fn sample(
    logits: &[f32],
    mask: Option<&TokenSet>,
    sampling: &Sampling,
    rng: &mut StdRng,
) -> Result<TokenId, GenerateError> {
    let allowed =
        |i: usize| mask.is_none_or(|m| i < m.universe_len() && m.contains(TokenId(i as u32)));
    let mut best: Option<(usize, f32)> = None;
    for (i, &l) in logits.iter().enumerate() {
        if l.is_finite() && allowed(i) && best.is_none_or(|(_, b)| l > b) {
            best = Some((i, l));
        }
    }
    let (best, max) = best.ok_or(GenerateError::NoAllowedToken {
        vocab_len: logits.len(),
    })?;
    let temperature = match *sampling {
        Sampling::ArgMax => return Ok(TokenId(best as u32)),
        Sampling::Temperature { temperature } if temperature.is_finite() && temperature > 0.0 => {
            temperature
        }
        Sampling::Temperature { temperature } => {
            return Err(GenerateError::InvalidTemperature { temperature })
        }
    };
    let weight = |l: f32| ((l as f64 - max as f64) / temperature).exp();
    let total: f64 = logits
        .iter()
        .enumerate()
        .filter(|&(i, l)| l.is_finite() && allowed(i))
        .map(|(_, &l)| weight(l))
        .sum();
    let mut r = rng.random::<f64>() * total;
    for (i, &l) in logits.iter().enumerate() {
        if l.is_finite() && allowed(i) {
            let w = weight(l);
            if r < w {
                return Ok(TokenId(i as u32));
            }
            r -= w;
        }
    }
    Ok(TokenId(best as u32))
}

/// How to decode. Plain data; see each field for its default.
#[derive(Clone, Debug, PartialEq)]
pub struct GenerateConfig {
    /// Most tokens generated (sampled + forced + closing). Default 256.
    pub max_tokens: usize,
    /// Sampling strategy. Default greedy ([`Sampling::ArgMax`]): extraction wants the most
    /// likely value, and greedy runs are reproducible without a seed.
    pub sampling: Sampling,
    /// Seed of the sampler. Default 0.
    pub seed: u64,
    /// Feed forced tokens without sampling them. Default `true`; `false` only for measuring.
    pub fast_forward: bool,
    /// Steer to a shortest valid completion when the budget runs low. Default `true`.
    pub close_on_budget: bool,
}

impl Default for GenerateConfig {
    fn default() -> Self {
        GenerateConfig {
            max_tokens: 256,
            sampling: Sampling::ArgMax,
            seed: 0,
            fast_forward: true,
            close_on_budget: true,
        }
    }
}

/// Why a generation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// The model chose to stop: EOS (constrained, where it is allowed only once the grammar
    /// accepts) or a stop token (unconstrained).
    Eos,
    /// The grammar allows nothing but EOS, so generation stopped without asking the model.
    GrammarComplete,
    /// The budget ran low and the shortest completion was appended.
    ClosedEarly,
    /// The token budget ran out.
    MaxTokens,
}

/// Time spent per phase of the decode loop.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct GenerateTimings {
    /// Computing masks for sampling.
    pub mask: Duration,
    /// Finding closing paths (masks included).
    pub closing: Duration,
    /// Forward passes (prompt included).
    pub forward: Duration,
    /// Computing forced tokens.
    pub forced: Duration,
    /// The whole call.
    pub total: Duration,
}

/// The result of one generation.
#[derive(Clone, Debug, PartialEq)]
pub struct Generation {
    /// The generated tokens (EOS / stop token excluded).
    pub tokens: Vec<TokenId>,
    /// Their bytes.
    pub bytes: Vec<u8>,
    /// Why it ended.
    pub stop: StopReason,
    /// Whether the output is complete: accepted by the grammar (constrained), or ended by a
    /// stop token (unconstrained).
    pub accepted: bool,
    /// Whether the budget-aware closing was used.
    pub closed_early: bool,
    /// Tokens chosen by sampling.
    pub sampled_tokens: usize,
    /// Tokens fast-forwarded (forced by the grammar) or appended by the closing.
    pub forced_tokens: usize,
    /// Tokens of the prompt.
    pub prompt_tokens: usize,
    /// Of those, tokens whose KV cache was reused from the previous call.
    pub reused_prompt_tokens: usize,
    /// Forward passes run.
    pub forward_calls: usize,
    /// Where the time went.
    pub timings: GenerateTimings,
}

impl Generation {
    /// Tokens generated (sampled + forced).
    pub fn tokens_len(&self) -> usize {
        self.tokens.len()
    }

    /// The output as text (invalid UTF-8 replaced).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.bytes).into_owned()
    }
}

/// Decodes with a logits source, keeping its KV cache between calls.
///
/// # Decode loop (constrained)
/// ```text
/// feed prompt (minus the cached common prefix)       one forward pass
/// loop:
///   mask = matcher.compute_mask()                    O(visited trie nodes)
///   if mask == {EOS}: stop (GrammarComplete)          no forward needed
///   if budget low: append closing path, stop          one mask per closing token
///   logits = forward(pending tokens)                 sampled + forced, one pass
///   token = sample(logits, mask); consume
///   forced = matcher.compute_forced_tokens(); consume; pending = [token, forced..]
/// ```
pub struct Generator<S> {
    source: S,
    vocab: Arc<dyn Vocab>,
    /// Tokens whose keys and values are in the source's cache, in order.
    cached: Vec<u32>,
}

impl<S: std::fmt::Debug> std::fmt::Debug for Generator<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Generator")
            .field("source", &self.source)
            .field("cached", &self.cached.len())
            .finish_non_exhaustive()
    }
}

impl<S: LogitsSource> Generator<S> {
    /// A generator over `source`, whose tokens are `vocab`'s. The source's cache must be empty
    /// (or is treated as such).
    pub fn new(source: S, vocab: Arc<dyn Vocab>) -> Self {
        Generator {
            source,
            vocab,
            cached: Vec::new(),
        }
    }

    /// The logits source.
    pub fn source(&self) -> &S {
        &self.source
    }

    /// The logits source, mutably. Forget the cache ([`forget_cache`](Self::forget_cache)) if
    /// you feed it yourself.
    pub fn source_mut(&mut self) -> &mut S {
        &mut self.source
    }

    /// The vocabulary.
    pub fn vocab(&self) -> &Arc<dyn Vocab> {
        &self.vocab
    }

    /// Forgets what the source has cached: the next call feeds its whole prompt.
    pub fn forget_cache(&mut self) {
        self.cached.clear();
    }

    /// Feeds `tokens` at `pos`, keeping track of what is cached.
    fn feed(
        &mut self,
        tokens: &[u32],
        pos: usize,
        g: &mut Generation,
    ) -> Result<Vec<f32>, GenerateError> {
        let t = Instant::now();
        self.cached.truncate(pos);
        let r = self.source.forward(tokens, pos);
        g.timings.forward += t.elapsed();
        g.forward_calls += 1;
        match r {
            Ok(l) => {
                self.cached.extend_from_slice(tokens);
                Ok(l)
            }
            Err(e) => {
                self.cached.clear();
                Err(e.into())
            }
        }
    }

    /// Feeds the prompt, reusing the cached common prefix; returns the logits after it.
    fn feed_prompt(
        &mut self,
        prompt: &[u32],
        g: &mut Generation,
    ) -> Result<Vec<f32>, GenerateError> {
        if prompt.is_empty() {
            return Err(GenerateError::EmptyPrompt);
        }
        let common = self
            .cached
            .iter()
            .zip(prompt)
            .take_while(|(a, b)| a == b)
            .count()
            // At least one token must be fed to get logits.
            .min(prompt.len() - 1);
        g.prompt_tokens = prompt.len();
        g.reused_prompt_tokens = common;
        self.feed(&prompt[common..], common, g)
    }

    /// Generates without a constraint until a token in `stop` or `cfg.max_tokens`.
    /// `on_bytes` receives each token's bytes as it is produced.
    pub fn generate_free(
        &mut self,
        prompt: &[u32],
        stop: &[TokenId],
        cfg: &GenerateConfig,
        on_bytes: &mut dyn FnMut(&[u8]),
    ) -> Result<Generation, GenerateError> {
        let start = Instant::now();
        let mut g = empty_generation();
        let mut rng = StdRng::seed_from_u64(cfg.seed);
        let mut logits = self.feed_prompt(prompt, &mut g)?;
        let mut pos = prompt.len();
        g.stop = StopReason::MaxTokens;
        while g.tokens.len() < cfg.max_tokens {
            let token = sample(&logits, None, &cfg.sampling, &mut rng)?;
            if stop.contains(&token) {
                g.stop = StopReason::Eos;
                g.accepted = true;
                break;
            }
            g.sampled_tokens += 1;
            self.push_token(&mut g, token, on_bytes);
            if g.tokens.len() >= cfg.max_tokens {
                break;
            }
            logits = self.feed(&[token.0], pos, &mut g)?;
            pos += 1;
        }
        g.timings.total = start.elapsed();
        Ok(g)
    }

    fn push_token(&self, g: &mut Generation, token: TokenId, on_bytes: &mut dyn FnMut(&[u8])) {
        let bytes = self.vocab.token_bytes(token);
        g.tokens.push(token);
        g.bytes.extend_from_slice(bytes);
        on_bytes(bytes);
    }

    /// Generates under `matcher` (which should be fresh, or reset) until the grammar is
    /// complete, EOS, closing, or `cfg.max_tokens`. `on_bytes` receives each token's bytes.
    ///
    /// # Errors
    /// Model, matcher and sampler errors. Running out of budget is not an error: see
    /// [`Generation::accepted`].
    pub fn generate(
        &mut self,
        prompt: &[u32],
        matcher: &mut Matcher,
        cfg: &GenerateConfig,
        on_bytes: &mut dyn FnMut(&[u8]),
    ) -> Result<Generation, GenerateError> {
        let start = Instant::now();
        let mut g = empty_generation();
        let mut rng = StdRng::seed_from_u64(cfg.seed);
        let vocab_len = self.vocab.vocab_len();
        let mut mask = TokenSet::new(vocab_len);
        let eos: Vec<TokenId> = matcher.compiled().trie().eos_tokens().to_vec();
        let mut pos = prompt.len();
        let mut logits = Some(self.feed_prompt(prompt, &mut g)?);
        // Tokens consumed by the matcher but not fed to the model yet.
        let mut pending: Vec<u32> = Vec::new();
        // Last closing estimate (tokens), and when it was computed.
        let mut estimate: Option<usize> = None;
        let mut estimated_at = 0usize;
        // Whether the last closing walk found no path within the budget.
        let mut hopeless = false;
        if cfg.fast_forward {
            self.fast_forward(matcher, cfg.max_tokens, &mut g, &mut pending, on_bytes)?;
        }
        g.stop = StopReason::MaxTokens;
        loop {
            let t = Instant::now();
            matcher.compute_mask(&mut mask)?;
            g.timings.mask += t.elapsed();
            if mask.count() > 0 && mask.iter().all(|t| eos.contains(&t)) {
                g.stop = StopReason::GrammarComplete;
                break;
            }
            let remaining = cfg.max_tokens - g.tokens.len();
            if remaining == 0 {
                break;
            }
            if cfg.close_on_budget {
                let since = g.tokens.len() - estimated_at;
                let due = match estimate {
                    None => true,
                    // A failed walk is retried only every 8 tokens: it costs `remaining` masks.
                    Some(_) if hopeless => since >= 8,
                    Some(e) => {
                        remaining <= e + CLOSE_MARGIN + 2 || (remaining <= 2 * e + 16 && since >= 8)
                    }
                };
                if due {
                    let t = Instant::now();
                    let path = closing_path(matcher, &mut mask, remaining)?;
                    g.timings.closing += t.elapsed();
                    estimated_at = g.tokens.len();
                    hopeless = path.is_none();
                    if let Some(path) = path {
                        estimate = Some(path.len());
                        if path.len() + CLOSE_MARGIN >= remaining {
                            matcher.consume_tokens(&path)?;
                            for &tok in &path {
                                self.push_token(&mut g, tok, on_bytes);
                            }
                            g.forced_tokens += path.len();
                            g.closed_early = !path.is_empty();
                            g.stop = StopReason::ClosedEarly;
                            break;
                        }
                    } else {
                        // Nothing fits: keep sampling; the model may still finish in time.
                        estimate = Some(remaining);
                    }
                    // The closing walk reused `mask`; recompute it for sampling.
                    let t = Instant::now();
                    matcher.compute_mask(&mut mask)?;
                    g.timings.mask += t.elapsed();
                }
            }
            let l = match logits.take() {
                Some(l) if pending.is_empty() => l,
                _ => {
                    let fed = std::mem::take(&mut pending);
                    let l = self.feed(&fed, pos, &mut g)?;
                    pos += fed.len();
                    l
                }
            };
            let token = sample(&l, Some(&mask), &cfg.sampling, &mut rng)?;
            if eos.contains(&token) {
                matcher.consume_token(token)?;
                g.stop = StopReason::Eos;
                break;
            }
            matcher.consume_token(token)?;
            g.sampled_tokens += 1;
            self.push_token(&mut g, token, on_bytes);
            pending.push(token.0);
            if cfg.fast_forward {
                let left = cfg.max_tokens - g.tokens.len();
                self.fast_forward(matcher, left, &mut g, &mut pending, on_bytes)?;
            }
        }
        g.accepted = matcher.is_accepting();
        // What the matcher consumed but the model never saw is not cached.
        g.timings.total = start.elapsed();
        Ok(g)
    }

    fn fast_forward(
        &self,
        matcher: &mut Matcher,
        limit: usize,
        g: &mut Generation,
        pending: &mut Vec<u32>,
        on_bytes: &mut dyn FnMut(&[u8]),
    ) -> Result<(), GenerateError> {
        let t = Instant::now();
        let mut forced = matcher.compute_forced_tokens()?;
        g.timings.forced += t.elapsed();
        forced.truncate(limit);
        matcher.consume_tokens(&forced)?;
        for tok in forced {
            self.push_token(g, tok, on_bytes);
            pending.push(tok.0);
            g.forced_tokens += 1;
        }
        Ok(())
    }
}

/// Extra tokens kept in reserve when deciding to close: one sampled token can lengthen the
/// shortest completion (opening a string or an object).
const CLOSE_MARGIN: usize = 3;

fn empty_generation() -> Generation {
    Generation {
        tokens: Vec::new(),
        bytes: Vec::new(),
        stop: StopReason::MaxTokens,
        accepted: false,
        closed_early: false,
        sampled_tokens: 0,
        forced_tokens: 0,
        prompt_tokens: 0,
        reused_prompt_tokens: 0,
        forward_calls: 0,
        timings: GenerateTimings::default(),
    }
}

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

/// The ranking key of a token in a closing walk, smaller is better: most leading closing bytes
/// (`"` `}` `]`), then the class used least so far in this walk (so a pattern such as
/// `[a-z]+-[0-9]+` gets its `-` instead of letters forever), then least badness, then
/// shortest, then lowest id.
fn closing_key(
    bytes: &[u8],
    id: TokenId,
    uses: &[u16; 256],
) -> (std::cmp::Reverse<usize>, u16, u32, usize, u32) {
    let lead = bytes.iter().take_while(|&&b| is_closer(b)).count();
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
            let best = mask
                .iter()
                .filter(|&t| !trie.is_eos(t))
                .min_by_key(|&t| closing_key(vocab.token_bytes(t), t, &uses));
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
    use super::*;
    use crate::grammar::{GrammarBuilder, Symbol};
    use crate::matcher::{CompiledGrammar, Limits};
    use crate::toktrie::SyntheticVocab;

    /// A fake model: logits favour one token (by its bytes) at every step, whatever was fed;
    /// records every call so tests can check cache reuse and fast-forward.
    #[derive(Debug)]
    struct Rambler {
        favourite: Vec<f32>,
        calls: Vec<(Vec<u32>, usize)>,
    }

    impl LogitsSource for Rambler {
        fn forward(&mut self, tokens: &[u32], pos: usize) -> Result<Vec<f32>, crate::Error> {
            self.calls.push((tokens.to_vec(), pos));
            Ok(self.favourite.clone())
        }
    }

    /// Byte-level vocabulary plus a few multi-byte tokens and an EOS.
    fn vocab() -> Arc<SyntheticVocab> {
        let mut toks: Vec<Vec<u8>> = (0u8..=255).map(|b| vec![b]).collect();
        for t in ["{\"", "\":", "name", "\"}", "aaaa", "\",\""] {
            toks.push(t.as_bytes().to_vec());
        }
        Arc::new(SyntheticVocab::new(toks).with_eos("<eos>"))
    }

    /// `{"name":"<letters>","n":<digits>}` with optional `"tag":"<letters>"` after name.
    fn object_grammar() -> crate::grammar::Grammar {
        let mut b = GrammarBuilder::new();
        let open = b.literal("{\"name\":");
        let s = b.lexeme("string", r#""[a-z ]*""#);
        let tag = b.literal(",\"tag\":");
        let n = b.literal(",\"n\":");
        let int = b.lexeme("int", "[0-9]+");
        let close = b.literal("}");
        let opt = b.define(
            "opt",
            vec![vec![], vec![Symbol::Lexeme(tag), Symbol::Lexeme(s)]],
        );
        let start = b.define(
            "start",
            vec![vec![
                Symbol::Lexeme(open),
                Symbol::Lexeme(s),
                Symbol::Rule(opt),
                Symbol::Lexeme(n),
                Symbol::Lexeme(int),
                Symbol::Lexeme(close),
            ]],
        );
        b.build(start).unwrap()
    }

    fn setup(fav: &[u8]) -> (Generator<Rambler>, Matcher, TokenId) {
        let v = vocab();
        let cg =
            Arc::new(CompiledGrammar::new(object_grammar(), v.clone(), Limits::default()).unwrap());
        let fav_id = v.token_of(fav).unwrap();
        let mut favourite = vec![0.0f32; v.vocab_len()];
        favourite[fav_id.as_usize()] = 10.0;
        let gen = Generator::new(
            Rambler {
                favourite,
                calls: Vec::new(),
            },
            v.clone(),
        );
        (gen, Matcher::new(cg).unwrap(), fav_id)
    }

    #[test]
    fn rambling_model_is_closed_within_budget() {
        // The model wants "aaaa" forever: without closing it hits the cap inside the string.
        for max in [12, 16, 30, 64] {
            let (mut gen, mut m, _) = setup(b"aaaa");
            let cfg = GenerateConfig {
                max_tokens: max,
                ..Default::default()
            };
            let out = gen.generate(&[1, 2, 3], &mut m, &cfg, &mut |_| {}).unwrap();
            assert!(out.tokens_len() <= max, "{max}: {}", out.tokens_len());
            assert!(out.accepted, "{max}: {:?}", out.text());
            assert!(out.closed_early, "{max}");
            let v: serde_json::Value = serde_json::from_slice(&out.bytes).unwrap();
            // With 12 tokens the closing (7 tokens after the 3 forced ones) is due at once.
            if max >= 16 {
                assert!(v["name"].as_str().unwrap().starts_with("aaaa"), "{v}");
            }
            assert!(v.get("tag").is_none(), "optional member skipped: {v}");
        }
    }

    #[test]
    fn without_closing_the_cap_leaves_an_incomplete_output() {
        let (mut gen, mut m, _) = setup(b"aaaa");
        let cfg = GenerateConfig {
            max_tokens: 16,
            close_on_budget: false,
            ..Default::default()
        };
        let out = gen.generate(&[1], &mut m, &cfg, &mut |_| {}).unwrap();
        assert_eq!(out.stop, StopReason::MaxTokens);
        assert!(!out.accepted);
        assert_eq!(out.tokens_len(), 16);
    }

    #[test]
    fn budget_too_small_for_any_completion_is_incomplete() {
        let (mut gen, mut m, _) = setup(b"aaaa");
        let cfg = GenerateConfig {
            max_tokens: 3,
            ..Default::default()
        };
        let out = gen.generate(&[1], &mut m, &cfg, &mut |_| {}).unwrap();
        assert!(!out.accepted, "{:?}", out.text());
        assert!(out.tokens_len() <= 3);
    }

    #[test]
    fn forced_tokens_are_fed_with_the_sampled_token_in_one_pass() {
        // The model likes `"}`: it closes the name at once; the optional tag leaves `,` forced.
        let (mut gen, mut m, _) = setup(b"\"}");
        let cfg = GenerateConfig::default();
        let mut streamed = Vec::new();
        let out = gen
            .generate(&[7, 8, 9], &mut m, &cfg, &mut |b| {
                streamed.extend_from_slice(b)
            })
            .unwrap();
        assert_eq!(streamed, out.bytes);
        assert!(out.accepted);
        assert!(out.forced_tokens > 0);
        // Every forward call after the prompt feeds the tokens consumed since the last one.
        let fed: Vec<u32> = gen.source().calls[1..]
            .iter()
            .flat_map(|(t, _)| t.clone())
            .collect();
        assert!(out
            .tokens
            .iter()
            .map(|t| t.0)
            .collect::<Vec<_>>()
            .starts_with(&fed));
        assert!(out.forward_calls < out.tokens_len(), "{out:?}");
    }

    #[test]
    fn the_cached_prompt_prefix_is_not_fed_again() {
        let (mut gen, mut m, _) = setup(b"\"}");
        let cfg = GenerateConfig::default();
        gen.generate(&[5, 6, 7, 8], &mut m, &cfg, &mut |_| {})
            .unwrap();
        m.reset();
        let out = gen
            .generate(&[5, 6, 7, 9], &mut m, &cfg, &mut |_| {})
            .unwrap();
        assert_eq!(out.reused_prompt_tokens, 3);
        let last_prompt_call = gen
            .source()
            .calls
            .iter()
            .rfind(|(t, _)| t == &vec![9])
            .unwrap();
        assert_eq!(last_prompt_call.1, 3);
    }

    #[test]
    fn closing_path_leaves_the_matcher_unchanged() {
        let (_, mut m, _) = setup(b"a");
        let v = vocab();
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

    #[test]
    fn unconstrained_generation_stops_at_stop_tokens_and_budget() {
        let (mut gen, _, fav) = setup(b"a");
        let cfg = GenerateConfig {
            max_tokens: 5,
            ..Default::default()
        };
        let out = gen.generate_free(&[1, 2], &[], &cfg, &mut |_| {}).unwrap();
        assert_eq!(out.tokens, vec![fav; 5]);
        assert!(!out.accepted);
        let out = gen
            .generate_free(&[1, 2], &[fav], &cfg, &mut |_| {})
            .unwrap();
        assert!(out.tokens.is_empty() && out.accepted);
    }

    #[test]
    fn sampling_never_leaves_the_mask_and_is_seeded() {
        let mut mask = TokenSet::new(4);
        mask.insert(TokenId(1));
        mask.insert(TokenId(3));
        let logits = [5.0, 1.0, 9.0, 1.5, 7.0];
        let mut rng = StdRng::seed_from_u64(1);
        assert_eq!(
            sample(&logits, Some(&mask), &Sampling::ArgMax, &mut rng).unwrap(),
            TokenId(3)
        );
        let hot = Sampling::Temperature { temperature: 5.0 };
        let draw = |seed| {
            let mut rng = StdRng::seed_from_u64(seed);
            (0..50)
                .map(|_| sample(&logits, Some(&mask), &hot, &mut rng).unwrap().0)
                .collect::<Vec<_>>()
        };
        let a = draw(7);
        assert!(a.iter().all(|&t| t == 1 || t == 3), "{a:?}");
        assert!(a.contains(&1) && a.contains(&3), "{a:?}");
        assert_eq!(a, draw(7));
        let empty = TokenSet::new(4);
        assert!(sample(&logits, Some(&empty), &Sampling::ArgMax, &mut rng).is_err());
    }
}
