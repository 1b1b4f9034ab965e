//! The [`Generator`]: a logits source (the model) plus an optional compiled constraint →
//! tokens.
//!
//! Owns the constrained decode loop: compute the mask, sample under it, consume; fast-forward
//! forced tokens (fed to the model together with the sampled token, in one multi-token forward
//! pass); stop when the grammar allows only EOS, when EOS is sampled, or at the token budget.
//! Also owns *when* to close on budget and the reuse of the KV cache across calls (the longest
//! common prefix of the previous and the new prompt is not fed again).
//!
//! Does not own masks (the matcher) or the model. Sampling here is the minimal masked pick
//! extraction needs ([`Sampling`]: greedy, or seeded temperature).
//!
//! Speculative decoding ([`Speculation`], on by default): drafts from the prompt and the
//! grammar's forced tokens ride along the pending tokens in one pass
//! ([`LogitsSource::forward_rows`]), and the loop below takes each drafted step's logits from
//! that pass while what it decodes agrees with the draft; the output is exactly the one
//! without speculation (module `speculate`).
//!
//! Submodules: `closing` (the closing strategies, [`Closing`], and their walks), `speculate`
//! (drafts, [`Speculation`]), `think`
//! (reasoning in free text before the constrained answer, [`ThinkConfig`]), `utf8`
//! ([`Utf8Stream`], for printing tokens as they come), [`batch`] (many sequences decoded in
//! lockstep) and [`testing`] (a fake model). This file holds the generator, its
//! configuration and errors, which the submodules use.
//!
//! Files: `utf8` → `closing` → `speculate` → `think` → `batch` → `testing`.
//!
//! The last stage of the pipeline:
//!
//! May use: `matcher`, `sampler`, `toktrie`.
//!
//! # Budget-aware closing
//! A small model often rambles inside a string until the token cap. When the remaining budget
//! comes down to the length of a shortest way to finish (found by the configured [`Closing`]
//! strategy, a greedy walk under the mask, so its length in tokens is an over-estimate, never
//! an under-estimate of what it will use), the generator appends that path instead of
//! sampling and marks the result [`closed_early`](Generation::closed_early). The default,
//! [`Closing::Json`], prefers the bytes closing what is open — `"` inside a string, then
//! `}`/`]` — and avoids `,` `{` `[`; [`Closing::Generic`] has no JSON knowledge, for GBNF and
//! regex constraints. When no path fits, the result is not accepted
//! ([`StopReason::MaxTokens`] with `accepted == false`): a truncated output is never passed off
//! as complete.
//!
//! # Costs
//! Per sampled token: one mask (O(visited trie nodes)), one forward pass, one sample. Forced
//! tokens cost no mask and no sampling. Near the end of the budget, a closing check costs one
//! mask per token of the closing path ([`Closing::Generic`]: plus up to 256 one-token probes
//! each); it runs only while the remaining budget is within a
//! small margin of the longest estimate seen (the last one is empty in an accepting state,
//! where one token may open a long structure), or every 8 steps in the last stretch.

pub mod batch;
mod closing;
mod speculate;
pub mod testing;
mod think;
mod utf8;

use std::sync::Arc;
use std::time::{Duration, Instant};

pub use closing::{closing_path, Closing};
use closing::{Check, Closer};
pub use speculate::Speculation;
use speculate::Speculator;
pub use think::{ThinkConfig, ThinkEnd, ThinkGeneration, Thought};
pub use utf8::Utf8Stream;

use crate::matcher::{Matcher, MatcherError};
pub use crate::sampler::Sampling;
use crate::sampler::{argmax, Sampler, SamplerError};
use crate::toktrie::{TokenId, TokenSet, Vocab};

/// What a [`LogitsSource`] fails with: the source's own error, boxed, so the engine does not
/// depend on any model runtime's error type.
pub type SourceError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Something that turns tokens into next-token logits: the model, or a fake in tests.
pub trait LogitsSource {
    /// Feeds `tokens` at positions `pos..pos + tokens.len()` (dropping any cached positions from
    /// `pos` on) and returns the logits after the last one.
    fn forward(&mut self, tokens: &[u32], pos: usize) -> Result<Vec<f32>, SourceError>;

    /// Feeds `tokens` at `pos` as [`forward`](Self::forward) does and returns the logits after
    /// each token at the indices `rows` (strictly increasing, each `< tokens.len()`), in
    /// order: the verification pass of speculative decoding (causal, so the logits after
    /// token `i` depend only on the tokens up to `i`). Every token is cached, whichever rows
    /// are asked for.
    ///
    /// The default feeds one chunk per row (one call per asked row, plus one for tokens after
    /// the last), so any source works; a model should override it with one pass.
    ///
    /// # Panics
    /// If `rows` is not strictly increasing within `tokens`.
    fn forward_rows(
        &mut self,
        tokens: &[u32],
        pos: usize,
        rows: &[usize],
    ) -> Result<Vec<Vec<f32>>, SourceError> {
        let mut out = Vec::with_capacity(rows.len());
        let mut start = 0;
        for &r in rows {
            assert!(
                r >= start && r < tokens.len(),
                "rows out of order: {rows:?}"
            );
            out.push(self.forward(&tokens[start..=r], pos + start)?);
            start = r + 1;
        }
        if start < tokens.len() {
            self.forward(&tokens[start..], pos + start)?;
        }
        Ok(out)
    }

    /// Most positions the source can hold, if it has a limit: drafts never go past it.
    fn context_len(&self) -> Option<usize> {
        None
    }
}

impl<T: LogitsSource + ?Sized> LogitsSource for &mut T {
    fn forward(&mut self, tokens: &[u32], pos: usize) -> Result<Vec<f32>, SourceError> {
        (**self).forward(tokens, pos)
    }

    fn forward_rows(
        &mut self,
        tokens: &[u32],
        pos: usize,
        rows: &[usize],
    ) -> Result<Vec<Vec<f32>>, SourceError> {
        (**self).forward_rows(tokens, pos, rows)
    }

    fn context_len(&self) -> Option<usize> {
        (**self).context_len()
    }
}

/// An error of the decode loop.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GenerateError {
    /// The logits source (model) failed.
    #[error("model: {0}")]
    Source(#[source] SourceError),
    /// The matcher failed (a budget, or a bug: a token from its own mask was rejected).
    #[error("matcher: {0}")]
    Matcher(#[from] MatcherError),
    /// The sampler failed: a parameter out of range, or every token masked out.
    #[error("sampler: {0}")]
    Sampler(#[from] SamplerError),
    /// The prompt is empty: there is nothing to condition on.
    #[error("empty prompt")]
    EmptyPrompt,
    /// Think-then-answer was asked for with an empty trigger ([`ThinkConfig::trigger`]).
    #[error("empty thinking trigger")]
    EmptyTrigger,
}

impl From<SourceError> for GenerateError {
    fn from(e: SourceError) -> Self {
        GenerateError::Source(e)
    }
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
    /// How to steer to a short valid completion when the budget runs low ([`Closing`]).
    /// Default [`Closing::Json`], the ranking for JSON outputs (JSON Schema, JSON mode, tool
    /// calls); [`Closing::Generic`] suits GBNF and regex constraints, whose output is not
    /// JSON; [`Closing::Off`] never closes.
    pub closing: Closing,
    /// Check the sampler's unmasked choice with [`Matcher::is_token_allowed`] first and
    /// compute the full mask only when it is rejected (the llama.cpp trick). Used only where
    /// it leaves the distribution exact ([`Sampling::is_exact_unmasked_first`]: greedy and
    /// plain temperature); top-k / top-p always mask first. Default `true` (see the extract
    /// bench in docs/measurements.md, "Constrained generation", for both figures).
    pub argmax_first: bool,
    /// Repeat penalty (llama.cpp's `repeat_penalty`): before each pick, the logit of every
    /// token already generated is divided by this factor when positive and multiplied by it
    /// when negative, so the model is less drawn to say the same words again (small models
    /// fill every slot of an extraction with one value). The prompt is not counted. `1.0`
    /// (default) is off; must be positive.
    pub repeat_penalty: f32,
    /// Speculative decoding: check several drafted tokens per forward pass. Never changes
    /// the output (greedy is byte-identical, seeded sampling draws the same tokens), only the
    /// number of passes. Default [`Speculation::PromptLookup`] (drafts from the prompt and
    /// the grammar's forced tokens); [`Speculation::Off`] to compare.
    pub speculation: Speculation,
}

impl Default for GenerateConfig {
    fn default() -> Self {
        GenerateConfig {
            max_tokens: 256,
            sampling: Sampling::ArgMax,
            seed: 0,
            fast_forward: true,
            closing: Closing::Json,
            argmax_first: true,
            repeat_penalty: 1.0,
            speculation: Speculation::default(),
        }
    }
}

impl GenerateConfig {
    fn check(&self) -> Result<(), GenerateError> {
        let p = self.repeat_penalty;
        if !(p.is_finite() && p > 0.0) {
            return Err(SamplerError::InvalidParameter {
                name: "repeat_penalty",
                value: f64::from(p),
                expected: "a positive number (1 = off)",
            }
            .into());
        }
        Ok(())
    }
}

/// Applies `penalty` to the logits of the tokens in `history` (each distinct token once):
/// positive logits are divided by it, negative ones multiplied, as llama.cpp does.
fn penalize_repeats(logits: &mut [f32], history: &[TokenId], penalty: f32) {
    if penalty == 1.0 || history.is_empty() {
        return;
    }
    let mut seen: Vec<usize> = history.iter().map(|t| t.as_usize()).collect();
    seen.sort_unstable();
    seen.dedup();
    for i in seen {
        if let Some(l) = logits.get_mut(i) {
            *l = if *l > 0.0 { *l / penalty } else { *l * penalty };
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
    /// The forward pass over the prompt (its uncached part).
    pub prompt: Duration,
    /// Forward passes after the prompt (sampled and forced tokens).
    pub forward: Duration,
    /// Computing masks for sampling, and single-token checks of argmax-first.
    pub mask: Duration,
    /// Choosing tokens from the logits (the sampler).
    pub sample: Duration,
    /// Finding closing paths (masks included).
    pub closing: Duration,
    /// Computing forced tokens.
    pub forced: Duration,
    /// Drafting for speculative decoding (lookups and the matcher's checks of the drafts).
    pub draft: Duration,
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
    /// Forward passes run (the prompt's included).
    pub forward_calls: usize,
    /// Full masks computed for sampling (closing walks not counted).
    pub mask_calls: usize,
    /// Sampled tokens chosen by the unmasked-first check, without a full mask.
    pub unmasked_hits: usize,
    /// Drafted tokens sent to the model to be checked (speculative decoding; forced tokens
    /// after a drafted one included).
    pub draft_tokens: usize,
    /// Of those, tokens the output kept.
    pub accepted_draft_tokens: usize,
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
///   logits = forward(pending tokens + draft)         sampled + forced (+ drafted), one
///                                                    pass; none while the step was drafted
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

    /// Feeds `fed` (the pending tokens, consumed by `matcher` already) at `pos` and, in the
    /// same pass, a draft of the steps after them; returns the logits after `fed` and queues
    /// the draft's steps with the logits after each in `spec`.
    fn feed_drafted(
        &mut self,
        spec: &mut Speculator,
        matcher: &mut Matcher,
        fed: &[u32],
        pos: usize,
        cfg: &GenerateConfig,
        g: &mut Generation,
    ) -> Result<Vec<f32>, GenerateError> {
        let t = Instant::now();
        let room = self
            .source
            .context_len()
            .map_or(usize::MAX, |c| c.saturating_sub(pos + fed.len()));
        let steps = spec.draft(&*self.vocab, matcher, g, cfg, room);
        g.timings.draft += t.elapsed();
        let steps = steps?;
        if steps.is_empty() {
            return self.feed(fed, pos, g);
        }
        let mut tokens = fed.to_vec();
        let mut rows = vec![fed.len() - 1];
        for step in &steps {
            tokens.extend_from_slice(step);
            rows.push(tokens.len() - 1);
        }
        g.draft_tokens += tokens.len() - fed.len();
        let t = Instant::now();
        self.cached.truncate(pos);
        let r = self.source.forward_rows(&tokens, pos, &rows);
        g.timings.forward += t.elapsed();
        g.forward_calls += 1;
        let mut logits = match r {
            Ok(l) => {
                self.cached.extend_from_slice(&tokens);
                l
            }
            Err(e) => {
                self.cached.clear();
                return Err(e.into());
            }
        };
        let after = logits.split_off(1);
        spec.queue(steps, after);
        Ok(logits.pop().expect("one row asked for the pending tokens"))
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
        let before = g.timings.forward;
        let r = self.feed(&prompt[common..], common, g);
        // The prompt is its own phase: decode figures exclude it.
        g.timings.prompt += g.timings.forward - before;
        g.timings.forward = before;
        r
    }

    /// Generates without a constraint until a token in `stop` or `cfg.max_tokens`.
    /// `on_bytes` receives each token's bytes as it is produced. Logits past the vocabulary
    /// (the model's padding rows) are never sampled.
    pub fn generate_free(
        &mut self,
        prompt: &[u32],
        stop: &[TokenId],
        cfg: &GenerateConfig,
        on_bytes: &mut dyn FnMut(&[u8]),
    ) -> Result<Generation, GenerateError> {
        let start = Instant::now();
        cfg.check()?;
        let mut g = empty_generation();
        let mut sampler = Sampler::new(cfg.sampling.clone(), cfg.seed)?;
        let vocab_len = self.vocab.vocab_len();
        let mut logits = self.feed_prompt(prompt, &mut g)?;
        let mut pos = prompt.len();
        g.stop = StopReason::MaxTokens;
        while g.tokens.len() < cfg.max_tokens {
            let (history, timings) = (&g.tokens, &mut g.timings);
            let pick = sample_free(
                vocab_len,
                &mut sampler,
                &mut logits,
                history,
                cfg,
                stop,
                timings,
            );
            let Some(token) = pick? else {
                g.stop = StopReason::Eos;
                g.accepted = true;
                break;
            };
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
        push_token(&*self.vocab, g, token, on_bytes);
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
        cfg.check()?;
        let mut sampler = Sampler::new(cfg.sampling.clone(), cfg.seed)?;
        let unmasked_first = cfg.argmax_first && cfg.sampling.is_exact_unmasked_first();
        let vocab_len = self.vocab.vocab_len();
        let mut mask = TokenSet::new(vocab_len);
        let eos: Vec<TokenId> = matcher.compiled().trie().eos_tokens().to_vec();
        let mut pos = prompt.len();
        let mut logits = Some(self.feed_prompt(prompt, &mut g)?);
        // Tokens consumed by the matcher but not fed to the model yet.
        let mut pending: Vec<u32> = Vec::new();
        let mut spec = Speculator::new(cfg.speculation, &*self.vocab, prompt);
        // When to close on budget (shared with the batched loop).
        let mut closer = Closer::new(cfg.closing);
        if cfg.fast_forward {
            self.fast_forward(matcher, cfg.max_tokens, &mut g, &mut pending, on_bytes)?;
        }
        g.stop = StopReason::MaxTokens;
        loop {
            // Whether `mask` holds the current step's mask. Unmasked-first skips it unless the
            // output is accepted: only then can EOS be allowed, so only then can the grammar be
            // complete (mask = EOS alone), which must be known before calling the model.
            let mut have_mask = false;
            let t = Instant::now();
            let accepting = unmasked_first && matcher.is_accepting();
            g.timings.mask += t.elapsed();
            if !unmasked_first || accepting {
                self.compute_mask(matcher, &mut mask, &mut g)?;
                have_mask = true;
                if mask.count() > 0 && mask.iter().all(|t| eos.contains(&t)) {
                    g.stop = StopReason::GrammarComplete;
                    break;
                }
            }
            let remaining = cfg.max_tokens - g.tokens.len();
            if remaining == 0 {
                break;
            }
            match closer.check(matcher, &mut mask, &mut g, remaining)? {
                Check::Sample { mask_clobbered } => have_mask &= !mask_clobbered,
                Check::Close(path) => {
                    close_along(&*self.vocab, matcher, &path, &mut g, on_bytes)?;
                    break;
                }
            }
            let mut l = match logits.take() {
                Some(l) if pending.is_empty() => l,
                _ => {
                    let fed = std::mem::take(&mut pending);
                    let l = match &mut spec {
                        Some(spec) => self.feed_drafted(spec, matcher, &fed, pos, cfg, &mut g)?,
                        None => self.feed(&fed, pos, &mut g)?,
                    };
                    pos += fed.len();
                    l
                }
            };
            penalize_repeats(&mut l, &g.tokens, cfg.repeat_penalty);
            let token = if have_mask {
                self.sample_masked(&mut sampler, &mut l, &mask, &mut g)?
            } else if unmasked_first {
                match self.sample_unmasked_first(&mut sampler, &mut l, matcher, &mut g)? {
                    Some(t) => t,
                    None => {
                        self.compute_mask(matcher, &mut mask, &mut g)?;
                        self.sample_masked(&mut sampler, &mut l, &mask, &mut g)?
                    }
                }
            } else {
                self.compute_mask(matcher, &mut mask, &mut g)?;
                self.sample_masked(&mut sampler, &mut l, &mask, &mut g)?
            };
            if eos.contains(&token) {
                matcher.consume_token(token)?;
                g.stop = StopReason::Eos;
                break;
            }
            matcher.consume_token(token)?;
            // Near the budget's end: keep the token only if a completion still fits after it;
            // otherwise it was taken back: close along the path that fitted before it.
            if let Some(path) = closer.after_sample(matcher, &mut mask, &mut g, remaining)? {
                close_along(&*self.vocab, matcher, &path, &mut g, on_bytes)?;
                break;
            }
            g.sampled_tokens += 1;
            self.push_token(&mut g, token, on_bytes);
            pending.push(token.0);
            if cfg.fast_forward {
                let left = cfg.max_tokens - g.tokens.len();
                self.fast_forward(matcher, left, &mut g, &mut pending, on_bytes)?;
            }
            // What this step decoded was drafted: the model has it, and the logits after it.
            if let Some(l) = spec.as_mut().and_then(|s| s.take(&pending, &mut g)) {
                pos += pending.len();
                pending.clear();
                logits = Some(l);
            }
        }
        g.accepted = matcher.is_accepting();
        // What the matcher consumed but the model never saw is not cached.
        g.timings.total = start.elapsed();
        Ok(g)
    }

    fn compute_mask(
        &self,
        matcher: &mut Matcher,
        mask: &mut TokenSet,
        g: &mut Generation,
    ) -> Result<(), GenerateError> {
        let t = Instant::now();
        let r = matcher.compute_mask(mask);
        g.timings.mask += t.elapsed();
        g.mask_calls += 1;
        Ok(r?)
    }

    fn sample_masked(
        &self,
        sampler: &mut Sampler,
        logits: &mut [f32],
        mask: &TokenSet,
        g: &mut Generation,
    ) -> Result<TokenId, GenerateError> {
        let t = Instant::now();
        let r = sampler.sample(logits, Some(mask));
        g.timings.sample += t.elapsed();
        Ok(TokenId(r?))
    }

    fn sample_unmasked_first(
        &self,
        sampler: &mut Sampler,
        logits: &mut [f32],
        matcher: &mut Matcher,
        g: &mut Generation,
    ) -> Result<Option<TokenId>, GenerateError> {
        sample_unmasked_first(&*self.vocab, sampler, logits, matcher, g)
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

/// The sampler's choice from the unmasked logits if the grammar allows it (one single-token
/// check instead of a mask), else `None`: the caller masks and samples again, which keeps the
/// distribution exact for greedy and plain temperature (see
/// [`Sampling::is_exact_unmasked_first`]). `logits` are left unchanged. Shared by the
/// sequential and the batched loop, so both draw the same tokens from the same logits.
pub(super) fn sample_unmasked_first(
    vocab: &dyn Vocab,
    sampler: &mut Sampler,
    logits: &mut [f32],
    matcher: &mut Matcher,
    g: &mut Generation,
) -> Result<Option<TokenId>, GenerateError> {
    let t = Instant::now();
    let pick = match sampler.sampling() {
        Sampling::ArgMax => argmax(logits),
        // A draw over every row; one past the vocabulary (padding) is rejected below.
        _ => sampler.sample(logits, None).ok(),
    };
    g.timings.sample += t.elapsed();
    let Some(pick) = pick.map(TokenId) else {
        return Ok(None);
    };
    let t = Instant::now();
    let ok = pick.as_usize() < vocab.vocab_len() && matcher.is_token_allowed(pick)?;
    g.timings.mask += t.elapsed();
    if ok {
        g.unmasked_hits += 1;
    }
    Ok(ok.then_some(pick))
}

/// One pick of free text (no grammar), shared by every loop that samples without one
/// ([`Generator::generate_free`], the reasoning of [`Generator::generate_thinking`], and the
/// batched loop's free-text and reasoning sequences), so all of them draw the same token from
/// the same logits: the repeat penalty over `history` (the tokens generated so far), then a
/// pick from the vocabulary's rows (padding rows past it never); `None` when the pick is one
/// of `stop` (which is not generated).
fn sample_free(
    vocab_len: usize,
    sampler: &mut Sampler,
    logits: &mut [f32],
    history: &[TokenId],
    cfg: &GenerateConfig,
    stop: &[TokenId],
    timings: &mut GenerateTimings,
) -> Result<Option<TokenId>, GenerateError> {
    let t = Instant::now();
    let n = vocab_len.min(logits.len());
    penalize_repeats(&mut logits[..n], history, cfg.repeat_penalty);
    let token = TokenId(sampler.sample(&mut logits[..n], None)?);
    timings.sample += t.elapsed();
    Ok((!stop.contains(&token)).then_some(token))
}

/// Appends `token` (and its bytes, also handed to `on_bytes`) to `g`.
fn push_token(
    vocab: &dyn Vocab,
    g: &mut Generation,
    token: TokenId,
    on_bytes: &mut dyn FnMut(&[u8]),
) {
    let bytes = vocab.token_bytes(token);
    g.tokens.push(token);
    g.bytes.extend_from_slice(bytes);
    on_bytes(bytes);
}

/// Ends a generation along a closing path (budget-aware closing, see [`Closer`]): the path's
/// tokens are consumed and appended (not fed to the model: nothing follows them). Shared by
/// the single-sequence and batched loops.
fn close_along(
    vocab: &dyn Vocab,
    matcher: &mut Matcher,
    path: &[TokenId],
    g: &mut Generation,
    on_bytes: &mut dyn FnMut(&[u8]),
) -> Result<(), GenerateError> {
    matcher.consume_tokens(path)?;
    for &tok in path {
        push_token(vocab, g, tok, on_bytes);
    }
    g.forced_tokens += path.len();
    g.closed_early = !path.is_empty();
    g.stop = StopReason::ClosedEarly;
    Ok(())
}

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
        mask_calls: 0,
        unmasked_hits: 0,
        draft_tokens: 0,
        accepted_draft_tokens: 0,
        timings: GenerateTimings::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grammar::{GrammarBuilder, Symbol};
    use crate::matcher::{CompiledGrammar, Limits};
    use crate::toktrie::SyntheticVocab;
    use testing::FixedLogits;

    /// Byte-level vocabulary plus a few multi-byte tokens and an EOS.
    pub(super) fn vocab() -> Arc<SyntheticVocab> {
        let mut toks: Vec<Vec<u8>> = (0u8..=255).map(|b| vec![b]).collect();
        for t in ["{\"", "\":", "name", "\"}", "aaaa", "\",\""] {
            toks.push(t.as_bytes().to_vec());
        }
        Arc::new(SyntheticVocab::new(toks).with_eos("<eos>"))
    }

    /// `{"name":"<letters>","n":<digits>}` with optional `"tag":"<letters>"` after name.
    pub(super) fn object_grammar() -> crate::grammar::Grammar {
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

    /// A generator whose fake model favours the token `fav` at every step, and a fresh
    /// matcher of [`object_grammar`].
    fn setup(fav: &[u8]) -> (Generator<FixedLogits>, Matcher, TokenId) {
        let v = vocab();
        let cg =
            Arc::new(CompiledGrammar::new(object_grammar(), v.clone(), Limits::default()).unwrap());
        let fav_id = v.token_of(fav).unwrap();
        let gen = Generator::new(
            FixedLogits::preferring(v.vocab_len(), [fav_id.0]),
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

    /// Inside a string, bytes such as `]` are content, not closers: the closing walk must
    /// close the string with `"` rather than fill it with `]]]]` until the budget is gone.
    #[test]
    fn closing_inside_a_string_closes_the_string() {
        let mut toks: Vec<Vec<u8>> = (0u8..=255).map(|b| vec![b]).collect();
        for t in ["aaaa", "]]]]", "}}}}", "\"}"] {
            toks.push(t.as_bytes().to_vec());
        }
        let v = Arc::new(SyntheticVocab::new(toks).with_eos("<eos>"));
        let mut b = GrammarBuilder::new();
        let open = b.literal("{\"note\":[");
        let s = b.lexeme("string", r#""[^"\\]*""#);
        let close = b.literal("]}");
        let start = b.define(
            "start",
            vec![vec![
                Symbol::Lexeme(open),
                Symbol::Lexeme(s),
                Symbol::Lexeme(close),
            ]],
        );
        let cg = Arc::new(
            CompiledGrammar::new(b.build(start).unwrap(), v.clone(), Limits::default()).unwrap(),
        );
        let fav = v.token_of(b"aaaa").unwrap();
        let mut gen = Generator::new(FixedLogits::preferring(v.vocab_len(), [fav.0]), v.clone());
        let mut m = Matcher::new(cg).unwrap();
        let cfg = GenerateConfig {
            max_tokens: 24,
            ..Default::default()
        };
        let out = gen.generate(&[1], &mut m, &cfg, &mut |_| {}).unwrap();
        assert!(out.accepted && out.closed_early, "{:?}", out.text());
        let v: serde_json::Value = serde_json::from_slice(&out.bytes).unwrap();
        assert!(v["note"][0].as_str().unwrap().starts_with("aaaa"), "{v}");
        assert!(!out.text().contains("]]"), "{}", out.text());
    }

    /// `{` member (`,` member)* `}` where a member is `"alpha":"<letters>"` or
    /// `"beta":"<letters>"`: after a `,` the key is a choice, so the shortest completion is
    /// several tokens that fast-forward cannot take.
    pub(super) fn repeated_members_grammar() -> crate::grammar::Grammar {
        let mut b = GrammarBuilder::new();
        let open = b.literal("{");
        let key = b.lexeme("key", r#""(alpha|beta)":"#);
        let s = b.lexeme("string", r#""[a-z]*""#);
        let comma = b.literal(",");
        let close = b.literal("}");
        let member = b.define("member", vec![vec![Symbol::Lexeme(key), Symbol::Lexeme(s)]]);
        let tail = b.define(
            "tail",
            vec![vec![Symbol::Lexeme(comma), Symbol::Rule(member)]],
        );
        let more = b.repeat(Symbol::Rule(tail), 0, None);
        let start = b.define(
            "start",
            vec![vec![
                Symbol::Lexeme(open),
                Symbol::Rule(member),
                Symbol::Rule(more),
                Symbol::Lexeme(close),
            ]],
        );
        b.build(start).unwrap()
    }

    #[test]
    fn a_member_opened_near_the_cap_is_taken_back_so_the_output_closes() {
        // Regression (SNIPS BookRestaurant_validate_0): a model that starts a new member
        // whenever it may ran out of budget after a `,` with the object still open.
        let v = vocab();
        let cg = Arc::new(
            CompiledGrammar::new(repeated_members_grammar(), v.clone(), Limits::default()).unwrap(),
        );
        let prefer: Vec<u32> = [&b","[..], &b"\""[..], &b"a"[..]]
            .iter()
            .map(|t| v.token_of(t).unwrap().0)
            .collect();
        for max in 12..60 {
            let mut gen = Generator::new(
                FixedLogits::preferring(v.vocab_len(), prefer.clone()),
                v.clone(),
            );
            let mut m = Matcher::new(cg.clone()).unwrap();
            let cfg = GenerateConfig {
                max_tokens: max,
                ..Default::default()
            };
            let out = gen.generate(&[1], &mut m, &cfg, &mut |_| {}).unwrap();
            assert!(out.tokens_len() <= max, "{max}: {}", out.tokens_len());
            assert!(out.accepted, "{max}: {:?}", out.text());
        }
    }

    #[test]
    fn closing_defaults_to_json() {
        assert_eq!(GenerateConfig::default().closing, Closing::Json);
    }

    #[test]
    fn without_closing_the_cap_leaves_an_incomplete_output() {
        let (mut gen, mut m, _) = setup(b"aaaa");
        let cfg = GenerateConfig {
            max_tokens: 16,
            closing: Closing::Off,
            ..Default::default()
        };
        let out = gen.generate(&[1], &mut m, &cfg, &mut |_| {}).unwrap();
        assert_eq!(out.stop, StopReason::MaxTokens);
        assert!(!out.accepted);
        assert_eq!(out.tokens_len(), 16);
    }

    /// A generator favouring `fav` at every step and a fresh matcher of `g` over [`vocab`].
    fn setup_grammar(g: crate::grammar::Grammar, fav: &[u8]) -> (Generator<FixedLogits>, Matcher) {
        let v = vocab();
        let cg = Arc::new(CompiledGrammar::new(g, v.clone(), Limits::default()).unwrap());
        let fav = v.token_of(fav).unwrap();
        let gen = Generator::new(FixedLogits::preferring(v.vocab_len(), [fav.0]), v.clone());
        (gen, Matcher::new(cg).unwrap())
    }

    #[test]
    fn gbnf_and_regex_outputs_close_within_budget_under_generic() {
        let gbnf = || {
            crate::grammar::gbnf::parse(
                "root ::= \"<\" item (\",\" item)* \">\"\n\
                 item ::= [a-z]+",
            )
            .unwrap()
        };
        let regex = || crate::grammar::regex::grammar_from_regex(r"[a-z]+@[a-z]+\.com").unwrap();
        for (name, g, shape) in [
            (
                "gbnf",
                gbnf as fn() -> crate::grammar::Grammar,
                r"^<[a-z]+(,[a-z]+)*>$",
            ),
            ("regex", regex, r"^[a-z]+@[a-z]+\.com$"),
        ] {
            let shape = regex_automata::meta::Regex::new(shape).unwrap();
            // (Below 7 tokens the regex has no completion at all: `a@a.com`, one byte each.)
            for max in [8, 12, 20, 40] {
                // The model wants `aaaa` forever.
                let (mut gen, mut m) = setup_grammar(g(), b"aaaa");
                let cfg = GenerateConfig {
                    max_tokens: max,
                    closing: Closing::Generic,
                    ..Default::default()
                };
                let out = gen.generate(&[1], &mut m, &cfg, &mut |_| {}).unwrap();
                let text = out.text();
                assert!(out.tokens_len() <= max, "{name} {max}: {text:?}");
                assert!(out.accepted && out.closed_early, "{name} {max}: {text:?}");
                assert_eq!(out.stop, StopReason::ClosedEarly);
                assert!(shape.is_match(&text), "{name} {max}: {text:?}");
                if max >= 20 {
                    assert!(
                        text.contains("aaaa"),
                        "{name} {max}: the model's own {text:?}"
                    );
                }
            }
        }
    }

    /// After a finished item the state is accepting and the last closing path is empty, but
    /// the model may open another item that takes 32 tokens to finish: whatever the budget
    /// left at that moment, the output must still close (regression: with 17 to 31 tokens
    /// left the newline went unchecked and the budget cut the next item).
    #[test]
    fn opening_a_long_structure_from_an_accepting_state_still_closes() {
        for max in 60..110 {
            let g = crate::grammar::gbnf::parse(
                "root ::= item (\"\\n\" item)*\nitem ::= \"<\" [a-z]{30} \">\"",
            )
            .unwrap();
            // The model wants another item forever.
            let (mut gen, mut m) = setup_grammar(g, b"\n");
            let cfg = GenerateConfig {
                max_tokens: max,
                ..Default::default()
            };
            let out = gen.generate(&[1], &mut m, &cfg, &mut |_| {}).unwrap();
            let text = out.text();
            assert!(out.tokens_len() <= max, "{max}: {text:?}");
            assert!(out.accepted, "{max}: cut by the budget: {text:?}");
            assert!(text.ends_with('>'), "{max}: {text:?}");
        }
    }

    #[test]
    fn a_truncated_output_is_never_accepted_whatever_the_strategy() {
        // Twelve letters, one token each: no completion fits in 5 tokens.
        for closing in [Closing::Json, Closing::Generic, Closing::Off] {
            let g = crate::grammar::regex::grammar_from_regex("[a-z]{12}").unwrap();
            let (mut gen, mut m) = setup_grammar(g, b"a");
            let cfg = GenerateConfig {
                max_tokens: 5,
                closing,
                ..Default::default()
            };
            let out = gen.generate(&[1], &mut m, &cfg, &mut |_| {}).unwrap();
            assert_eq!(out.text(), "aaaaa", "{closing:?}");
            assert_eq!(out.stop, StopReason::MaxTokens, "{closing:?}");
            assert!(!out.accepted && !out.closed_early, "{closing:?}");
        }
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
    fn repeat_penalty_turns_the_model_away_from_what_it_said() {
        let v = vocab();
        let (a, b) = (v.token_of(b"a").unwrap(), v.token_of(b"b").unwrap());
        // `a` at 10.0, `b` at 9.9: greedy says `a` forever; a penalty of 1.5 takes `a` to
        // 6.67 once said, so `b` comes next, then both are penalized and `a` leads again.
        let mut gen = Generator::new(FixedLogits::preferring(v.vocab_len(), [a.0, b.0]), v);
        let cfg = |p| GenerateConfig {
            max_tokens: 4,
            repeat_penalty: p,
            ..Default::default()
        };
        let out = gen
            .generate_free(&[1], &[], &cfg(1.0), &mut |_| {})
            .unwrap();
        assert_eq!(out.tokens, vec![a; 4]);
        let out = gen
            .generate_free(&[1], &[], &cfg(1.5), &mut |_| {})
            .unwrap();
        assert_eq!(out.tokens, vec![a, b, a, a]);
        for bad in [0.0, -1.0, f32::NAN] {
            let e = gen.generate_free(&[1], &[], &cfg(bad), &mut |_| {});
            assert!(e.unwrap_err().to_string().contains("repeat_penalty"));
        }
        let mut logits = vec![2.0, -2.0, 1.0];
        penalize_repeats(&mut logits, &[TokenId(0), TokenId(1), TokenId(0)], 2.0);
        assert_eq!(logits, [1.0, -4.0, 1.0]);
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

    /// Issue 5 (argmax-first): checking the argmax with `is_token_allowed` and masking only
    /// on rejection must not change greedy output, and must save masks.
    #[test]
    fn argmax_first_decodes_the_same_tokens_with_fewer_masks() {
        // The model prefers `","`, then `}`, then `7`: the argmax `","` is allowed inside the
        // name string (it closes it and opens the next key) and rejected elsewhere, where the
        // mask picks `"`, `n`, `7`, `}`.
        let v = vocab();
        let sep = v.token_of(b"\",\"").unwrap();
        let run = |argmax_first| {
            let cg = Arc::new(
                CompiledGrammar::new(object_grammar(), v.clone(), Limits::default()).unwrap(),
            );
            let mut m = Matcher::new(cg).unwrap();
            let src =
                FixedLogits::preferring(v.vocab_len(), [sep.0, u32::from(b'}'), u32::from(b'7')]);
            let mut gen = Generator::new(src, v.clone());
            let cfg = GenerateConfig {
                max_tokens: 40,
                argmax_first,
                ..Default::default()
            };
            gen.generate(&[1], &mut m, &cfg, &mut |_| {}).unwrap()
        };
        let (fast, full) = (run(true), run(false));
        assert_eq!(fast.tokens, full.tokens);
        assert_eq!(fast.stop, full.stop);
        assert_eq!(fast.text(), r#"{"name":"","n":7}"#);
        assert!(fast.unmasked_hits > 0, "{fast:?}");
        assert_eq!(full.unmasked_hits, 0);
        assert!(fast.mask_calls < full.mask_calls, "{fast:?} vs {full:?}");
    }

    /// One-token grammar `a|b|c` over a byte vocabulary whose fake model puts most mass on the
    /// disallowed `x`: how often each allowed byte comes out of `n` seeded generations.
    fn first_byte_counts(sampling: &Sampling, argmax_first: bool, n: u64) -> [usize; 3] {
        let mut b = GrammarBuilder::new();
        let abc = b.lexeme("abc", "[abc]");
        let start = b.define("start", vec![vec![Symbol::Lexeme(abc)]]);
        let v = Arc::new(SyntheticVocab::byte_level());
        let cg = Arc::new(
            CompiledGrammar::new(b.build(start).unwrap(), v.clone(), Limits::default()).unwrap(),
        );
        let mut logits = vec![f32::NEG_INFINITY; v.vocab_len()];
        // p(a) : p(b) : p(c) = 3 : 1 : 0.5 at temperature 1; x takes ~70% of the mass.
        logits[b'a' as usize] = 3f32.ln();
        logits[b'b' as usize] = 0.0;
        logits[b'c' as usize] = 0.5f32.ln();
        logits[b'x' as usize] = 10f32.ln();
        let mut gen = Generator::new(FixedLogits::new(logits), v.clone());
        let mut m = Matcher::new(cg).unwrap();
        let mut counts = [0usize; 3];
        for seed in 0..n {
            m.reset();
            let cfg = GenerateConfig {
                max_tokens: 1,
                sampling: sampling.clone(),
                seed,
                argmax_first,
                closing: Closing::Off,
                ..Default::default()
            };
            let out = gen.generate(&[1], &mut m, &cfg, &mut |_| {}).unwrap();
            counts[(out.bytes[0] - b'a') as usize] += 1;
        }
        counts
    }

    /// Unmasked-first sampling at a temperature is rejection sampling: the output distribution
    /// is exactly the masked one (3 : 1 : 0.5 here), not skewed by the disallowed mass.
    #[test]
    fn unmasked_first_sampling_keeps_the_masked_distribution() {
        let hot = Sampling::All { temperature: 1.0 };
        let n = 3000;
        for argmax_first in [true, false] {
            let c = first_byte_counts(&hot, argmax_first, n);
            let frac = |i: usize| c[i] as f64 / n as f64;
            for (i, want) in [(0, 3.0 / 4.5), (1, 1.0 / 4.5), (2, 0.5 / 4.5)] {
                assert!((frac(i) - want).abs() < 0.03, "{argmax_first}: {c:?}");
            }
        }
    }

    #[test]
    fn seeded_sampling_is_reproducible_and_stays_in_the_grammar() {
        for sampling in [
            Sampling::All { temperature: 2.0 },
            Sampling::TopK {
                k: 40,
                temperature: 2.0,
            },
            Sampling::TopP {
                p: 0.9,
                temperature: 2.0,
            },
        ] {
            let run = |seed| {
                let v = vocab();
                let cg = Arc::new(
                    CompiledGrammar::new(object_grammar(), v.clone(), Limits::default()).unwrap(),
                );
                let mut m = Matcher::new(cg).unwrap();
                // Flat logits with a little structure: many tokens are candidates.
                let logits = (0..v.vocab_len()).map(|i| (i % 13) as f32 * 0.2).collect();
                let mut gen = Generator::new(FixedLogits::new(logits), v.clone());
                let cfg = GenerateConfig {
                    max_tokens: 48,
                    sampling: sampling.clone(),
                    seed,
                    ..Default::default()
                };
                gen.generate(&[1], &mut m, &cfg, &mut |_| {}).unwrap()
            };
            let a = run(3);
            assert!(a.accepted, "{sampling:?}: {:?}", a.text());
            serde_json::from_slice::<serde_json::Value>(&a.bytes).unwrap();
            assert_eq!(a.tokens, run(3).tokens, "{sampling:?}");
            let others: Vec<_> = (4..8).map(|s| run(s).tokens).collect();
            assert!(
                others.iter().any(|t| *t != a.tokens),
                "{sampling:?}: seed ignored"
            );
        }
    }

    #[test]
    fn invalid_sampling_parameters_are_an_error() {
        let (mut gen, mut m, _) = setup(b"a");
        let cfg = GenerateConfig {
            sampling: Sampling::All { temperature: 0.0 },
            ..Default::default()
        };
        let e = gen.generate(&[1], &mut m, &cfg, &mut |_| {}).unwrap_err();
        assert!(matches!(e, GenerateError::Sampler(_)), "{e}");
    }
}
