//! Speculative decoding drafted by the grammar and the prompt, exact under the constraint.
//!
//! Decoding one token reads every weight once, so on a CPU a decode step costs about the same
//! for one token as for a handful: checking several tokens per pass is the way past the
//! memory wall. This module owns the *drafts* and the queue of logits they earn; the decode
//! loops (the parent's [`Generator`](super::Generator) and
//! [`BatchGenerator`](super::batch::BatchGenerator)) stay what they were, step for step.
//!
//! # Drafts
//! A draft is a list of *steps*, each what one decode step would add: a drafted token and the
//! tokens the grammar forces after it (fast-forward, source one). The drafted token comes from
//! *prompt lookup* (source two): the longest suffix of the output so far that also occurs in
//! the prompt (the document, the examples; at least [`Speculation::PromptLookup::min_match`]
//! bytes), proposing the prompt's own tokens that follow it there. Matching is on bytes, not
//! tokens: a value copied from a document is tokenized differently in its JSON string than in
//! the prose (`"Alice` against ` Alice`), but once the output has its first token the bytes
//! line up and the prompt's tokens after it are the ones the model tends to write. Where the
//! output ends inside a prompt token, the rest of that token's bytes is tokenized by the
//! vocabulary. Each drafted token is checked by the matcher (consume, forced tokens, and all
//! of it rolled back before the model sees anything): a token the grammar rejects ends the
//! draft and is never sent to the model, nor is EOS.
//!
//! # Verification, and why the output is exactly the non-speculative one
//! The loop feeds its pending tokens *and* the draft in one pass
//! ([`LogitsSource::forward_rows`](super::LogitsSource::forward_rows)), asking for the logits
//! after the pending tokens and after each step. It then decodes exactly as without
//! speculation — mask, repeat penalty, sampler, closing, fast-forward, all unchanged — only
//! taking each step's logits from the queue instead of a new pass, for as long as what it
//! decoded (the sampled token and its forced tokens) equals the next drafted step. At the
//! first difference the queue is dropped, and the next pass feeds from the last agreed
//! position, which rolls the KV cache back (a source truncates what it cached past the
//! position it is fed at). The logits of a step depend only on the tokens before it (causal
//! attention) and formwork-model computes each row independently of the others fed with it,
//! so greedy output is byte-identical to non-speculative greedy, and seeded sampling draws
//! the same tokens from the same logits with the same random numbers.
//!
//! For sampling this *is* the standard speculative-sampling acceptance rule on the masked
//! distribution `p`, for a deterministic draft (prompt lookup proposes one token, `q = δ_d`):
//! the rule accepts `d` with probability `min(1, p(d)/q(d)) = p(d)` and otherwise draws from
//! `max(0, p − q)` renormalized, which is `p` with `d` removed. Drawing `x ~ p` and accepting
//! exactly when `x == d` has the same acceptance probability `p(d)`, and given a rejection
//! `x` is distributed as `p` conditioned on `x ≠ d`: the same rule, implemented with the
//! sampler the loop already has. The output distribution is therefore `p`'s (tested against
//! known probabilities in this module's tests).
//!
//! # Draft length
//! Starts at 4 tokens and adapts to what the model accepted: a draft accepted whole doubles
//! it (up to [`Speculation::PromptLookup::max_draft`]); a rejection sets it to one more than
//! the tokens accepted. A rejected token costs one extra row in a pass (its share of the
//! matmuls and one logits row), not a pass.
//!
//! # Costs
//! Per draft: one lookup (the candidates of the last `min_match` bytes in a hash index of the
//! prompt, each extended backwards), and per drafted token one single-token check, one
//! consume, one forced-token computation and the rollback; a tokenization only where the
//! output ends inside a prompt token. Building the index: O(prompt bytes), once per
//! generation.
//!
//! May use: `matcher` (checks, consume, forced tokens, rollback), `toktrie` (token bytes).

use std::collections::{HashMap, VecDeque};

use super::{GenerateConfig, GenerateError, Generation};
use crate::matcher::Matcher;
use crate::toktrie::{TokenId, Vocab};

/// Whether and how the decode loops speculate ([`GenerateConfig::speculation`]).
///
/// Speculation never changes the output (see the module docs): greedy output is
/// byte-identical and seeded sampling draws the same tokens. It changes how many forward
/// passes the output takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Speculation {
    /// One pass per sampled token (plus the grammar's forced tokens riding along).
    Off,
    /// Drafts from the prompt (prompt lookup) and the grammar's forced tokens.
    PromptLookup {
        /// Most drafted tokens (forced ones included) sent to the model in one pass.
        max_draft: usize,
        /// Fewest bytes of the output's end that must occur in the prompt for a draft
        /// (1 to 8).
        min_match: usize,
    },
}

impl Default for Speculation {
    /// Prompt lookup, at most 16 tokens a pass, after a match of at least 3 bytes.
    fn default() -> Self {
        Speculation::PromptLookup {
            max_draft: 16,
            min_match: 3,
        }
    }
}

impl Speculation {
    /// Whether drafts are made.
    pub fn is_on(self) -> bool {
        match self {
            Speculation::Off => false,
            Speculation::PromptLookup { max_draft, .. } => max_draft > 0,
        }
    }
}

/// Longest match (bytes) looked at: longer ones are as good.
const MAX_MATCH: usize = 256;

/// Draft length at the start of a generation (tokens).
const FIRST_DRAFT: usize = 4;

/// The prompt's bytes, where its tokens start, and a hash index of its `key_len`-byte
/// windows (by the position just after each).
struct PromptIndex {
    tokens: Vec<TokenId>,
    bytes: Vec<u8>,
    /// Byte offset of each token of `tokens`.
    starts: Vec<usize>,
    key_len: usize,
    /// The last `key_len` bytes, packed, → every end position of those bytes in `bytes`.
    ends: HashMap<u64, Vec<u32>>,
}

fn key(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0u64, |k, &b| (k << 8) | u64::from(b))
}

impl PromptIndex {
    fn new(vocab: &dyn Vocab, prompt: &[u32], key_len: usize) -> Self {
        let key_len = key_len.clamp(1, 8);
        let mut bytes = Vec::new();
        let mut starts = Vec::with_capacity(prompt.len());
        let mut tokens = Vec::with_capacity(prompt.len());
        for &t in prompt {
            let t = TokenId(t);
            starts.push(bytes.len());
            tokens.push(t);
            if t.as_usize() < vocab.vocab_len() && !vocab.is_special(t) {
                bytes.extend_from_slice(vocab.token_bytes(t));
            }
        }
        let mut ends: HashMap<u64, Vec<u32>> = HashMap::new();
        for end in key_len..=bytes.len() {
            ends.entry(key(&bytes[end - key_len..end]))
                .or_default()
                .push(end as u32);
        }
        PromptIndex {
            tokens,
            bytes,
            starts,
            key_len,
            ends,
        }
    }

    /// Where in the prompt the longest suffix of `out` (at least `key_len` bytes) ends, the
    /// latest such place on a tie; `None` without a match or when nothing follows it.
    fn lookup(&self, out: &[u8]) -> Option<usize> {
        let k = self.key_len;
        if out.len() < k {
            return None;
        }
        let cands = self.ends.get(&key(&out[out.len() - k..]))?;
        let limit = out.len().min(MAX_MATCH);
        let mut best: Option<(usize, usize)> = None;
        for &end in cands {
            let end = end as usize;
            if end >= self.bytes.len() {
                continue;
            }
            let mut n = k;
            while n < limit && n < end && self.bytes[end - 1 - n] == out[out.len() - 1 - n] {
                n += 1;
            }
            if best.is_none_or(|(len, _)| n >= len) {
                best = Some((n, end));
            }
        }
        best.map(|(_, end)| end)
    }

    /// The token the prompt continues with at byte `at`: the prompt's own token when one
    /// starts there, else the first token of the rest of the prompt token `at` falls in.
    /// `None` at the end, or at a special token.
    fn token_at(&self, vocab: &dyn Vocab, at: usize) -> Option<TokenId> {
        // The last token starting at `at` (special tokens have no bytes, so a special token
        // and the one after it start at the same byte).
        let i = self.starts.partition_point(|&s| s <= at);
        let tok = if i > 0 && self.starts[i - 1] == at {
            self.tokens[i - 1]
        } else {
            let end = self.starts.get(i).copied().unwrap_or(self.bytes.len());
            *vocab.tokenize(&self.bytes[at..end]).first()?
        };
        let next = at + vocab.token_bytes(tok).len();
        let ok = tok.as_usize() < vocab.vocab_len()
            && !vocab.is_special(tok)
            && next > at
            && self.bytes.get(at..next) == Some(vocab.token_bytes(tok));
        ok.then_some(tok)
    }
}

/// One generation's speculation: the prompt index, the adaptive draft length and the queue of
/// drafted steps whose logits the last pass returned.
pub(super) struct Speculator {
    index: PromptIndex,
    max_draft: usize,
    /// Draft length of the next draft (tokens).
    len: usize,
    /// Drafted steps (tokens) and the logits after each, in order.
    ahead: VecDeque<(Vec<u32>, Vec<f32>)>,
    /// Tokens of the queued draft accepted so far.
    accepted: usize,
}

impl std::fmt::Debug for Speculator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Speculator")
            .field("prompt_bytes", &self.index.bytes.len())
            .field("len", &self.len)
            .field("ahead", &self.ahead.len())
            .finish_non_exhaustive()
    }
}

impl Speculator {
    /// A speculator for a generation after `prompt` (the tokens the output is conditioned
    /// on), or `None` when `speculation` is off.
    pub(super) fn new(speculation: Speculation, vocab: &dyn Vocab, prompt: &[u32]) -> Option<Self> {
        match speculation {
            Speculation::Off => None,
            Speculation::PromptLookup { max_draft: 0, .. } => None,
            Speculation::PromptLookup {
                max_draft,
                min_match,
            } => Some(Speculator {
                index: PromptIndex::new(vocab, prompt, min_match),
                max_draft,
                len: FIRST_DRAFT.min(max_draft),
                ahead: VecDeque::new(),
                accepted: 0,
            }),
        }
    }

    /// Drafts steps after the matcher's state (the output `g` so far, every token of it
    /// consumed), at most `room` tokens in all (the context left after the pending tokens).
    /// The matcher is left as it was found. Each step is a token the grammar allows followed
    /// by the tokens it forces after it (when `cfg.fast_forward`), truncated to the budget as
    /// the decode loop truncates them.
    ///
    /// # Errors
    /// Matcher errors (budgets) of the checks; the matcher is then in its error state.
    pub(super) fn draft(
        &mut self,
        vocab: &dyn Vocab,
        matcher: &mut Matcher,
        g: &Generation,
        cfg: &GenerateConfig,
        room: usize,
    ) -> Result<Vec<Vec<u32>>, GenerateError> {
        let budget = room.min(cfg.max_tokens.saturating_sub(g.tokens.len()));
        let mut steps = Vec::new();
        if budget == 0 || self.len == 0 {
            return Ok(steps);
        }
        let mut consumed = 0;
        let r = self.walk(vocab, matcher, g, cfg, budget, &mut steps, &mut consumed);
        r?;
        matcher.rollback(consumed)?;
        Ok(steps)
    }

    #[allow(clippy::too_many_arguments)]
    fn walk(
        &self,
        vocab: &dyn Vocab,
        matcher: &mut Matcher,
        g: &Generation,
        cfg: &GenerateConfig,
        budget: usize,
        steps: &mut Vec<Vec<u32>>,
        consumed: &mut usize,
    ) -> Result<(), GenerateError> {
        let trie = matcher.compiled().trie().clone();
        // The output's tail, as far as a match can reach, and the draft's bytes after it.
        let mut text = g.bytes[g.bytes.len().saturating_sub(MAX_MATCH)..].to_vec();
        let mut at = self.index.lookup(&text);
        let mut n = 0;
        while n < self.len.min(budget) {
            let Some(c) = at else { break };
            let Some(tok) = self.index.token_at(vocab, c) else {
                break;
            };
            if trie.is_eos(tok) || !matcher.is_token_allowed(tok)? {
                break;
            }
            matcher.consume_token(tok)?;
            *consumed += 1;
            let mut step = vec![tok.0];
            let mut forced = Vec::new();
            if cfg.fast_forward {
                forced = matcher.compute_forced_tokens()?;
                forced.truncate(cfg.max_tokens.saturating_sub(g.tokens.len() + n + 1));
                matcher.consume_tokens(&forced)?;
                *consumed += forced.len();
                step.extend(forced.iter().map(|t| t.0));
            }
            if n + step.len() > budget {
                break;
            }
            n += step.len();
            steps.push(step);
            let c = c + vocab.token_bytes(tok).len();
            text.extend_from_slice(vocab.token_bytes(tok));
            let tail_start = text.len();
            for &t in &forced {
                text.extend_from_slice(vocab.token_bytes(t));
            }
            let tail = &text[tail_start..];
            // Along the same place in the prompt while the forced bytes agree with it,
            // else the longest match of the new output.
            at = if self.index.bytes[c..].starts_with(tail) {
                Some(c + tail.len())
            } else {
                self.index.lookup(&text)
            };
        }
        Ok(())
    }

    /// Queues the steps of the pass just run and the logits after each.
    pub(super) fn queue(&mut self, steps: Vec<Vec<u32>>, logits: Vec<Vec<f32>>) {
        debug_assert_eq!(steps.len(), logits.len());
        self.ahead = steps.into_iter().zip(logits).collect();
        self.accepted = 0;
    }

    /// After a decode step added `decoded` (its sampled token and forced tokens): the logits
    /// after it when it is the next drafted step (it is then in the source's cache already),
    /// else `None` (and the rest of the draft is dropped). Counts accepted draft tokens in
    /// `g` and adapts the draft length.
    pub(super) fn take(&mut self, decoded: &[u32], g: &mut Generation) -> Option<Vec<f32>> {
        let (step, _) = self.ahead.front()?;
        if step.as_slice() != decoded {
            self.ahead.clear();
            self.len = (self.accepted + 1).min(self.max_draft);
            return None;
        }
        let (step, logits) = self.ahead.pop_front()?;
        self.accepted += step.len();
        g.accepted_draft_tokens += step.len();
        if self.ahead.is_empty() {
            self.len = (self.len * 2).clamp(1, self.max_draft);
        }
        Some(logits)
    }
}

#[cfg(test)]
pub(super) mod tests {
    use std::sync::Arc;

    use super::super::testing::{FixedLogits, HistoryLogits};
    use super::super::tests::{object_grammar, vocab};
    use super::super::{Closing, Generator};
    use super::*;
    use crate::matcher::{CompiledGrammar, Limits};
    use crate::sampler::Sampling;
    use crate::toktrie::{SyntheticVocab, TokenSet};

    /// Seeded xorshift.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
    }

    fn fnv(seed: u64, history: &[u32]) -> u64 {
        history.iter().fold(seed ^ 0xcbf2_9ce4_8422_2325, |h, &t| {
            (h ^ u64::from(t)).wrapping_mul(0x0100_0000_01b3)
        })
    }

    /// A fake model over [`vocab`] that mostly copies `doc`: after a history, it favours the
    /// byte that follows the longest of the history's last 1 to 4 bytes in `doc` (its latest
    /// occurrence), except at one history in four (a hash of it, and of `seed`), where the
    /// noise decides. The
    /// noise is a hash of the whole history, so feeding the wrong context (a cache not
    /// rolled back, a skipped token) changes what it prefers.
    pub(in crate::generate) fn copying_model(
        doc: &'static [u8],
        seed: u64,
        vocab_len: usize,
    ) -> impl Fn(&[u32]) -> Vec<f32> {
        move |history: &[u32]| {
            let h = fnv(seed, history);
            let mut logits: Vec<f32> = (0..vocab_len)
                .map(|t| (fnv(h, &[t as u32]) % 1000) as f32 / 1000.0)
                .collect();
            let tail: Vec<u8> = history
                .iter()
                .rev()
                .take(4)
                .rev()
                .filter_map(|&t| u8::try_from(t).ok())
                .collect();
            let next = (1..=tail.len()).rev().find_map(|n| {
                let i = doc.windows(n).rposition(|w| w == &tail[tail.len() - n..])?;
                doc.get(i + n)
            });
            if let Some(&next) = next.filter(|_| h % 4 != 0) {
                logits[usize::from(next)] += 5.0;
            }
            logits
        }
    }

    pub(in crate::generate) const DOC: &[u8] =
        b"the name is alice smith and n is 4217; tag bob jones; name carol, n 99";

    pub(in crate::generate) fn ids(v: &SyntheticVocab, s: &[u8]) -> Vec<u32> {
        v.tokenize(s).into_iter().map(|t| t.0).collect()
    }

    /// One generation of [`object_grammar`] after `DOC` with the copying model.
    fn run(seed: u64, cfg: &GenerateConfig) -> (Generation, usize) {
        let v = vocab();
        let cg =
            Arc::new(CompiledGrammar::new(object_grammar(), v.clone(), Limits::default()).unwrap());
        let mut m = Matcher::new(cg).unwrap();
        let src = HistoryLogits::new(copying_model(DOC, seed, v.vocab_len()));
        let mut gen = Generator::new(src, v.clone());
        let prompt = ids(&v, DOC);
        let out = gen.generate(&prompt, &mut m, cfg, &mut |_| {}).unwrap();
        // The matcher followed the output, drafts rolled back (a closing path is consumed
        // too, so it holds the whole output).
        assert_eq!(m.output(), out.bytes.as_slice());
        (out, gen.source().passes)
    }

    /// Issue 45: greedy output with speculation is byte-identical to greedy without, over
    /// random models that copy the prompt most of the time (so drafts are accepted and
    /// rejected, the KV cache — here the fake's history — and the matcher rolled back) and
    /// budgets from one that closes at once to one with room; and it takes fewer passes.
    #[test]
    fn greedy_output_is_identical_with_and_without_speculation() {
        let (mut drafted, mut accepted, mut passes_on, mut passes_off) = (0, 0, 0, 0);
        for seed in 0..40 {
            for max_tokens in [12, 20, 40, 80] {
                let cfg = |speculation| GenerateConfig {
                    max_tokens,
                    speculation,
                    ..Default::default()
                };
                let (off, p_off) = run(seed, &cfg(Speculation::Off));
                let on_cfg = cfg(Speculation::PromptLookup {
                    max_draft: 8,
                    min_match: 3,
                });
                let (on, p_on) = run(seed, &on_cfg);
                assert_eq!(on.text(), off.text(), "seed {seed} max {max_tokens}");
                assert_eq!(on.tokens, off.tokens, "seed {seed} max {max_tokens}");
                assert_eq!((on.stop, on.accepted), (off.stop, off.accepted));
                assert_eq!(off.draft_tokens, 0);
                assert!(on.accepted_draft_tokens <= on.draft_tokens);
                drafted += on.draft_tokens;
                accepted += on.accepted_draft_tokens;
                passes_on += p_on;
                passes_off += p_off;
            }
        }
        assert!(accepted > 100, "drafts accepted: {accepted} of {drafted}");
        assert!(
            drafted > accepted + 100,
            "drafts rejected: {accepted} of {drafted}"
        );
        assert!(passes_on < passes_off, "{passes_on} passes vs {passes_off}");
    }

    /// Seeded sampling draws the same tokens with and without speculation (top-k, top-p and
    /// plain temperature, unmasked-first on and off).
    #[test]
    fn seeded_sampling_is_identical_with_and_without_speculation() {
        let mut accepted = 0;
        for sampling in [
            Sampling::All { temperature: 0.7 },
            Sampling::TopK {
                k: 5,
                temperature: 1.0,
            },
            Sampling::TopP {
                p: 0.9,
                temperature: 0.8,
            },
        ] {
            for seed in 0..12 {
                for argmax_first in [true, false] {
                    let cfg = |speculation| GenerateConfig {
                        max_tokens: 60,
                        sampling: sampling.clone(),
                        seed,
                        argmax_first,
                        speculation,
                        ..Default::default()
                    };
                    let (off, _) = run(seed, &cfg(Speculation::Off));
                    let (on, _) = run(seed, &cfg(Speculation::default()));
                    assert_eq!(on.tokens, off.tokens, "{sampling:?} seed {seed}");
                    accepted += on.accepted_draft_tokens;
                }
            }
        }
        assert!(accepted > 50, "{accepted}");
    }

    /// The speculative-sampling rule on the masked distribution: `[ab]{3}` under a model
    /// with p(a) : p(b) = 0.7 : 0.3 (and most of its mass on the disallowed `x`), drafted
    /// from a prompt of every 3-byte word over `ab`, gives each of the 8 outputs with its
    /// probability (χ² with 7 degrees of freedom below 24.3, p = 0.001, over 4000 seeded
    /// runs), while drafts are both accepted and rejected.
    #[test]
    fn sampled_output_keeps_the_masked_distribution() {
        let v = Arc::new(SyntheticVocab::byte_level());
        let g = || crate::grammar::regex::grammar_from_regex("[ab]{3}").unwrap();
        let cg = Arc::new(CompiledGrammar::new(g(), v.clone(), Limits::default()).unwrap());
        let mut logits = vec![f32::NEG_INFINITY; v.vocab_len()];
        logits[usize::from(b'a')] = 0.7f32.ln();
        logits[usize::from(b'b')] = 0.3f32.ln();
        logits[usize::from(b'x')] = 2f32.ln();
        let mut gen = Generator::new(FixedLogits::new(logits), v.clone());
        let prompt = ids(&v, b"aaababbbaa");
        let n = 4000;
        let mut counts = [0usize; 8];
        let (mut drafted, mut accepted) = (0, 0);
        for seed in 0..n {
            let mut m = Matcher::new(cg.clone()).unwrap();
            let cfg = GenerateConfig {
                max_tokens: 3,
                sampling: Sampling::All { temperature: 1.0 },
                seed,
                closing: Closing::Off,
                speculation: Speculation::PromptLookup {
                    max_draft: 4,
                    min_match: 1,
                },
                ..Default::default()
            };
            let out = gen.generate(&prompt, &mut m, &cfg, &mut |_| {}).unwrap();
            let i = out
                .bytes
                .iter()
                .fold(0, |i, &b| i * 2 + usize::from(b == b'b'));
            counts[i] += 1;
            drafted += out.draft_tokens;
            accepted += out.accepted_draft_tokens;
        }
        let chi2: f64 = (0..8)
            .map(|i: usize| {
                let bs = i.count_ones() as i32;
                let want = 0.7f64.powi(3 - bs) * 0.3f64.powi(bs) * n as f64;
                (counts[i] as f64 - want).powi(2) / want
            })
            .sum();
        assert!(chi2 < 24.3, "χ² {chi2}: {counts:?}");
        assert!(
            accepted > 1000 && drafted > accepted + 500,
            "{accepted} of {drafted}"
        );
    }

    /// Drafts are checked by the grammar before the model sees them: a prompt whose
    /// continuation the grammar rejects (`!` is no letter of the name) never feeds it.
    #[test]
    fn drafts_the_grammar_rejects_are_never_sent() {
        let v = vocab();
        let cg =
            Arc::new(CompiledGrammar::new(object_grammar(), v.clone(), Limits::default()).unwrap());
        let mut m = Matcher::new(cg).unwrap();
        let (a, bang) = (u32::from(b'a'), u32::from(b'!'));
        // The model says `a` forever; the prompt continues `"aaa` with `aaaaa!`.
        let mut gen = Generator::new(FixedLogits::preferring(v.vocab_len(), [a]), v.clone());
        let mut prompt = vec![u32::from(b'"')];
        prompt.extend([a; 8]);
        prompt.push(bang);
        let cfg = GenerateConfig {
            max_tokens: 30,
            ..Default::default()
        };
        let out = gen.generate(&prompt, &mut m, &cfg, &mut |_| {}).unwrap();
        assert!(out.draft_tokens > 0, "{out:?}");
        for (tokens, _) in &gen.source().calls[1..] {
            assert!(!tokens.contains(&bang), "{tokens:?}");
        }
    }

    /// Rollback of the matcher on its own: along random walks under [`object_grammar`],
    /// drafting from a random prompt (drafted tokens consumed, their forced tokens computed
    /// and consumed, all rolled back) leaves the matcher where a twin that never drafted
    /// is: the same output, steps, acceptance and mask at every step.
    #[test]
    fn drafting_leaves_the_matcher_as_it_found_it() {
        let v = vocab();
        let cg =
            Arc::new(CompiledGrammar::new(object_grammar(), v.clone(), Limits::default()).unwrap());
        let mut rng = Rng(0x2545_f491_4f6c_dd1d);
        let (mut got, mut want) = (TokenSet::new(v.vocab_len()), TokenSet::new(v.vocab_len()));
        let mut drafted = 0;
        for walk in 0..30 {
            let prompt: Vec<u32> = (0..200)
                .map(|_| {
                    let pieces = b"{\"name:,tg}0123 abc";
                    u32::from(pieces[rng.next() as usize % pieces.len()])
                })
                .collect();
            let mut spec = Speculator::new(
                Speculation::PromptLookup {
                    max_draft: 8,
                    min_match: 1,
                },
                &*v,
                &prompt,
            )
            .unwrap();
            let (mut m, mut twin) = (
                Matcher::new(cg.clone()).unwrap(),
                Matcher::new(cg.clone()).unwrap(),
            );
            let mut g = super::super::empty_generation();
            let cfg = GenerateConfig::default();
            for step in 0..40 {
                let steps = spec.draft(&*v, &mut m, &g, &cfg, usize::MAX).unwrap();
                drafted += steps.len();
                spec.len = 1 + (rng.next() % 8) as usize;
                assert_eq!(m.output(), twin.output(), "walk {walk} step {step}");
                assert_eq!(m.steps_len(), twin.steps_len());
                assert_eq!(m.is_accepting(), twin.is_accepting());
                m.compute_mask(&mut got).unwrap();
                twin.compute_mask(&mut want).unwrap();
                assert_eq!(got, want, "walk {walk} step {step}");
                let allowed: Vec<TokenId> = want
                    .iter()
                    .filter(|t| !v.eos_tokens().contains(t))
                    .collect();
                let Some(&t) = allowed.get(rng.next() as usize % allowed.len().max(1)) else {
                    break;
                };
                m.consume_token(t).unwrap();
                twin.consume_token(t).unwrap();
                g.tokens.push(t);
                g.bytes.extend_from_slice(v.token_bytes(t));
            }
        }
        assert!(drafted > 100, "{drafted}");
    }

    #[test]
    fn lookup_finds_the_longest_suffix_and_prefers_the_latest_tie() {
        let v = SyntheticVocab::byte_level();
        let idx = PromptIndex::new(&v, &ids(&v, b"Bob Marley; Alice Cooper; Alice Smith."), 3);
        let cont = |out: &[u8]| idx.lookup(out).map(|e| &idx.bytes[e..]);
        // "Alice" occurs twice: the later one wins the tie.
        assert_eq!(cont(b"\"Alice"), Some(&b" Smith."[..]));
        // A longer match decides.
        assert_eq!(
            cont(b"ob Marley, Alice C"),
            Some(&b"ooper; Alice Smith."[..])
        );
        // Shorter than the key, absent, or at the very end: no draft.
        assert_eq!(cont(b"Al"), None);
        assert_eq!(cont(b"xyz"), None);
        assert_eq!(cont(b"ith."), None);
    }

    #[test]
    fn token_at_uses_prompt_tokens_and_tokenizes_inside_one() {
        let mut toks: Vec<Vec<u8>> = (0u8..=255).map(|b| vec![b]).collect();
        toks.push(b" Alice".to_vec());
        toks.push(b"lice".to_vec());
        let v = SyntheticVocab::new(toks);
        let alice = v.token_of(b" Alice").unwrap();
        let lice = v.token_of(b"lice").unwrap();
        let idx = PromptIndex::new(&v, &[u32::from(b'x'), alice.0, u32::from(b'.')], 3);
        assert_eq!(idx.token_at(&v, 1), Some(alice));
        // Inside ` Alice`: the rest, tokenized.
        assert_eq!(idx.token_at(&v, 3), Some(lice));
        assert_eq!(idx.token_at(&v, 7), Some(TokenId(u32::from(b'.'))));
        assert_eq!(idx.token_at(&v, 8), None);
    }
}
