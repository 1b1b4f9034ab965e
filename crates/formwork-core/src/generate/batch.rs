//! [`BatchGenerator`]: many constrained generations decoded together, one forward pass per
//! step for all of them (continuous batching over a [`BatchLogitsSource`]).
//!
//! Owns the batched decode loop: admitting queued requests while the batch has room,
//! feeding every active sequence's pending tokens (a new request's prompt and forced
//! tokens ride along as one chunk beside the others' decode tokens) in one
//! [`forward_batch`](BatchLogitsSource::forward_batch) call, then per sequence: sample under
//! its own mask, consume, fast-forward forced tokens, and finish on EOS, on a complete
//! grammar, by budget-aware closing or at the token budget, handing back each result as soon
//! as it is done. Does *not*
//! own the model's batching (the source), masks (each request brings its own [`Matcher`];
//! matchers of one schema share the `Arc<CompiledGrammar>`) or sampling (the [`Sampler`]).
//!
//! # Decode loop, per step
//! ```text
//! admit queued requests while active < max_batch      fast-forward, first mask (no forward)
//! logits = source.forward_batch(every active: pending)  one pass, weights read once
//! for each active sequence:
//!   token = unmasked pick if allowed, else sample(logits, mask); EOS -> done (Eos)
//!   consume; near the budget's end, no completion fits after it -> take it back, close
//!   forced = compute_forced_tokens(); pending = [token, forced..]
//!   mask = compute_mask() (unmasked-first: only when accepting); {EOS} only -> done
//!     (GrammarComplete); budget spent -> done
//!   closing due (the same `Closer` as the sequential loop) -> append the path, done
//! ```
//!
//! # Invariants
//! - A request's result depends only on its prompt, matcher, config and the logits its
//!   sequence gets, never on the other requests of the batch: with a source whose batched
//!   logits equal its single-sequence logits (formwork-model's do, bit for bit), output
//!   (greedy, or sampled with the same seed) equals
//!   [`Generator::generate`](super::Generator::generate) with the same config,
//!   unmasked-first and budget-aware closing included: both loops ask one shared decision state
//!   (`closing::Closer`) at the same points (before sampling, after consuming a sampled
//!   token) and append its path the same way.
//! - At most `max_batch` sequences (and their KV caches) are alive; a finished request's
//!   sequence is dropped before its result is handed back.
//!
//! # Streaming and cancelling
//! A request's output only grows (a token taken back by the closing is never appended), so
//! a caller streams it by reading [`BatchGenerator::outputs`] after each step and sending
//! what it has not sent yet; the rest comes with the [`Finished`] result.
//! [`BatchGenerator::cancel`] ends a request at once (a server's client went away): queued, it
//! is forgotten; in flight, its sequence and cache are dropped before the next pass.
//!
//! # Free text
//! [`BatchGenerator::push_free`] queues a request without a grammar (a server's plain-text
//! answer): sampled from the whole vocabulary until one of its stop tokens or the budget,
//! exactly as [`Generator::generate_free`](super::Generator::generate_free) decodes it, in
//! the same batches as the constrained requests.
//!
//! # Reasoning first
//! [`BatchGenerator::push_thinking`] queues a constrained request that reasons before its
//! answer, decoded as [`Generator::generate_thinking`](super::Generator::generate_thinking)
//! decodes it (one shared reasoning state, `think::Reasoning`, and one shared free-text pick):
//! free text until the trigger, a stop token or the thinking budget, then, in the same
//! sequence (its cache kept: the answer's context extends what was fed), the constrained
//! answer under a fresh sampler. The reasoning streams through
//! [`BatchGenerator::reasoning`] and comes back in [`Finished::thought`], never in the
//! answer's output.
//!
//! # Unmasked first
//! With [`GenerateConfig::argmax_first`] (the default) a sequence's mask is computed before
//! the pass only when its output is accepted (the grammar may be complete); otherwise the
//! sampler's pick from the unmasked logits is checked with one
//! [`Matcher::is_token_allowed`] and the mask computed only when it is rejected, exactly as
//! the sequential loop does (one shared function draws the pick), so sampled output equals
//! the sequential loop's for the same seed too.
//!
//! # Not (yet) here
//! Masks computed in parallel with each other or with the forward pass: with unmasked-first
//! the grammar side is under 1 % of a batched extraction's CPU samples (docs/inference.md,
//! "Batched extraction end to end"), attention over the long shared prompt most of it.
//!
//! # Speculation
//! With [`GenerateConfig::speculation`] on, a constrained sequence's drafts (module
//! `speculate`: prompt lookup and the grammar's forced tokens) ride along its pending tokens
//! in the pass ([`forward_batch_rows`](BatchLogitsSource::forward_batch_rows)), while the
//! pass has fewer than `DRAFT_PASS_ROWS` rows: speculation pays where a pass is bound by
//! reading the weights (a few sequences), not in a full batch. After the pass the sequence
//! decodes on from the logits of each drafted step its output agrees with, exactly as
//! without drafts; the drafts it did not keep are truncated from its cache
//! ([`BatchLogitsSource::truncate`]) before its next pass. Streaming readers of
//! [`outputs`](BatchGenerator::outputs) see the accepted tokens after each step.
//!
//! # Shared prompt prefixes
//! [`BatchGenerator::set_prefix`] prefills a common prefix (system prompt, instructions,
//! worked examples) once; every request admitted afterwards starts from a fork of the
//! longest part of it its prompt shares, so N documents pay one prefix prefill.
//!
//! # Costs
//! Per step: one batched forward pass, and per active sequence one mask (O(visited trie
//! nodes)) and one sample; near the end of a request's budget, its closing walks (see
//! [`Closing`](super::Closing)), as in the sequential loop. Each request's [`GenerateTimings::forward`](super::GenerateTimings::forward) counts the whole
//! batched passes it took part in.
//!
//! May use: `matcher`, `sampler`, `toktrie` (as its parent).

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use super::closing::{Check, Closer};
use super::speculate::Speculator;
use super::think::Reasoning;
use super::{
    close_along, empty_generation, penalize_repeats, push_token, sample_free,
    sample_unmasked_first, GenerateConfig, GenerateError, Generation, SourceError, StopReason,
    ThinkConfig, ThinkEnd, Thought,
};
use crate::matcher::Matcher;
use crate::sampler::Sampler;
use crate::toktrie::{TokenId, TokenSet, Vocab};

/// Most rows (tokens fed) of a batched pass that drafts may fill: drafts ride along only
/// while the pass is small. Decode on this CPU is bound by reading the weights, so a pass
/// of a few rows costs little more than one (batched decode, Qwen2.5-Coder-0.5B, 2 threads:
/// 24 ms a pass for 1 row, 38 ms for 4, 52 ms for 8, 80 ms for 16; docs/inference.md,
/// "Batched decoding"); a full batch is already past that point, and drafted rows there
/// would cost a row each for the tokens they may save. A lone sequence (a server with one
/// client) drafts up to 7 tokens.
const DRAFT_PASS_ROWS: usize = 8;

/// A model that advances many sequences in one forward pass, each with its own cache.
pub trait BatchLogitsSource {
    /// One sequence's state (its KV cache and length); dropping it frees the cache.
    type Sequence;

    /// A new, empty sequence.
    fn new_sequence(&mut self) -> Self::Sequence;

    /// Feeds each entry's tokens after its sequence's cached positions, in one pass, and
    /// returns the logits after each entry's last token, in batch order.
    ///
    /// # Errors
    /// The source's own error; then no sequence may have changed.
    fn forward_batch(
        &mut self,
        batch: &mut [(&mut Self::Sequence, &[u32])],
    ) -> Result<Vec<Vec<f32>>, SourceError>;

    /// A new sequence holding `seq`'s first `len` positions (at most its length): the
    /// shared-prefix path. Feeding the fork must give the logits feeding the original would.
    fn fork(&mut self, seq: &Self::Sequence, len: usize) -> Self::Sequence;

    /// Feeds each entry as [`forward_batch`](Self::forward_batch) does and returns, per
    /// entry, the logits after its tokens at the indices `rows[i]` (strictly increasing,
    /// each within the entry's tokens), in order: the verification pass of speculative
    /// decoding. Every token is cached, whichever rows are asked for.
    ///
    /// The default runs rounds of [`forward_batch`](Self::forward_batch), each feeding every
    /// entry up to its next asked row, so any source works; a model should override it with
    /// one pass. Unlike one pass, a failing later round leaves the earlier ones fed.
    ///
    /// # Panics
    /// If `rows` does not have one list per entry, strictly increasing within its tokens.
    fn forward_batch_rows(
        &mut self,
        batch: &mut [(&mut Self::Sequence, &[u32])],
        rows: &[Vec<usize>],
    ) -> Result<Vec<Vec<Vec<f32>>>, SourceError> {
        assert_eq!(batch.len(), rows.len(), "one list of rows per entry");
        let mut out: Vec<Vec<Vec<f32>>> = vec![Vec::new(); batch.len()];
        // How far each entry is fed, and the end of its chunk in this round.
        let mut fed = vec![0usize; batch.len()];
        loop {
            let ends: Vec<Option<usize>> = batch
                .iter()
                .enumerate()
                .map(|(i, (_, tokens))| {
                    let next = rows[i].get(out[i].len()).map_or(tokens.len(), |&r| r + 1);
                    assert!(next > fed[i] || fed[i] == tokens.len(), "rows out of order");
                    (fed[i] < tokens.len()).then_some(next)
                })
                .collect();
            let mut round: Vec<(&mut Self::Sequence, &[u32])> = batch
                .iter_mut()
                .zip(&ends)
                .zip(&fed)
                .filter_map(|(((seq, tokens), end), &from)| {
                    end.map(|end| (&mut **seq, &tokens[from..end]))
                })
                .collect();
            if round.is_empty() {
                return Ok(out);
            }
            let mut logits = self.forward_batch(&mut round)?.into_iter();
            for (i, end) in ends.iter().enumerate() {
                let Some(end) = *end else { continue };
                let l = logits
                    .next()
                    .expect("one logits row per entry of the round");
                if rows[i].get(out[i].len()) == Some(&(end - 1)) {
                    out[i].push(l);
                }
                fed[i] = end;
            }
        }
    }

    /// Rolls `seq` back to its first `len` positions (the drafts a pass checked and the
    /// output did not keep). The default replaces it with a [`fork`](Self::fork) of them.
    fn truncate(&mut self, seq: &mut Self::Sequence, len: usize) {
        *seq = self.fork(seq, len);
    }

    /// Most positions a sequence can hold, if there is a limit: drafts never go past it.
    fn context_len(&self) -> Option<usize> {
        None
    }
}

impl<T: BatchLogitsSource + ?Sized> BatchLogitsSource for &mut T {
    type Sequence = T::Sequence;

    fn new_sequence(&mut self) -> Self::Sequence {
        (**self).new_sequence()
    }

    fn forward_batch(
        &mut self,
        batch: &mut [(&mut Self::Sequence, &[u32])],
    ) -> Result<Vec<Vec<f32>>, SourceError> {
        (**self).forward_batch(batch)
    }

    fn fork(&mut self, seq: &Self::Sequence, len: usize) -> Self::Sequence {
        (**self).fork(seq, len)
    }

    fn forward_batch_rows(
        &mut self,
        batch: &mut [(&mut Self::Sequence, &[u32])],
        rows: &[Vec<usize>],
    ) -> Result<Vec<Vec<Vec<f32>>>, SourceError> {
        (**self).forward_batch_rows(batch, rows)
    }

    fn truncate(&mut self, seq: &mut Self::Sequence, len: usize) {
        (**self).truncate(seq, len)
    }

    fn context_len(&self) -> Option<usize> {
        (**self).context_len()
    }
}

/// One generation to run: its prompt, its own matcher (fresh or reset) and its config.
#[derive(Debug)]
pub struct BatchRequest {
    /// The prompt's token ids (non-empty).
    pub prompt: Vec<u32>,
    /// The constraint; matchers of one schema share their compiled grammar.
    pub matcher: Matcher,
    /// How to decode.
    pub config: GenerateConfig,
}

/// A request that has ended, handed back by [`BatchGenerator::step`].
#[derive(Debug)]
pub struct Finished {
    /// The id [`BatchGenerator::push`] returned.
    pub id: usize,
    /// The generation, or why it failed (matcher or sampler errors, an empty prompt).
    pub result: Result<Generation, GenerateError>,
    /// The request's matcher, in its final state (`None` for free text).
    pub matcher: Option<Matcher>,
    /// The reasoning of a request queued with [`BatchGenerator::push_thinking`], once it
    /// ended (`None` otherwise, or when the request failed before it ended).
    pub thought: Option<Thought>,
}

/// What a request's output must follow.
enum Constraint {
    /// A grammar, through the request's own matcher (boxed: a matcher is large).
    Grammar(Box<Matcher>),
    /// None: free text, ending at one of these tokens (not part of the output).
    Free(Vec<TokenId>),
}

/// A request waiting for room.
enum Queued {
    /// Constrained, reasoning first when the second part is there.
    Grammar(Box<BatchRequest>, Option<Box<ThinkRequest>>),
    Free {
        prompt: Vec<u32>,
        stop: Vec<TokenId>,
        config: GenerateConfig,
    },
}

/// How a request reasons before its answer ([`BatchGenerator::push_thinking`]).
struct ThinkRequest {
    think: ThinkConfig,
    /// Tokens that end the reasoning (end of turn), not generated.
    stop: Vec<TokenId>,
}

/// A request that is still reasoning: the free phase before its constrained answer.
struct Thinking {
    reasoning: Reasoning,
    stop: Vec<TokenId>,
    /// The request's prompt (what the answer's drafts are looked up in, with the reasoning).
    prompt: Vec<u32>,
}

/// A request in flight.
struct Active<Q> {
    id: usize,
    seq: Q,
    constraint: Constraint,
    cfg: GenerateConfig,
    sampler: Sampler,
    g: Generation,
    /// Consumed by the matcher, not yet fed to the model.
    pending: Vec<u32>,
    /// The mask for the next token, if `have_mask`.
    mask: TokenSet,
    /// Whether `mask` holds the next token's mask (a closing walk clobbers it; unmasked-first
    /// skips it).
    have_mask: bool,
    /// Check the sampler's unmasked pick before masking ([`GenerateConfig::argmax_first`],
    /// where it keeps the distribution exact).
    unmasked_first: bool,
    /// When to close on budget.
    closer: Closer,
    /// Speculative decoding: drafts and the logits a pass returned for them.
    spec: Option<Speculator>,
    /// Positions in `seq` (drafts the output did not keep may follow them until the next
    /// pass truncates them).
    seq_len: usize,
    /// Of those, positions holding the prompt and the output (the rest are drafts).
    kept: usize,
    eos: Vec<TokenId>,
    start: Instant,
    /// While the request reasons: its reasoning so far (`g` is then still empty, and the
    /// matcher untouched).
    thinking: Option<Box<Thinking>>,
    /// The reasoning, once it ended.
    thought: Option<Thought>,
}

/// Decodes many constrained requests together over a [`BatchLogitsSource`]. See the module
/// docs.
pub struct BatchGenerator<S: BatchLogitsSource> {
    source: S,
    vocab: Arc<dyn Vocab>,
    max_batch: usize,
    next_id: usize,
    queue: VecDeque<(usize, Queued)>,
    active: Vec<Active<S::Sequence>>,
    /// A prefilled shared prefix: its tokens and its sequence, forked by every request whose
    /// prompt starts with some of it.
    prefix: Option<(Vec<u32>, S::Sequence)>,
    /// Chunked prefill: at most this many prompt tokens per pass ([`Self::set_prefill_chunk`]).
    prefill_chunk: Option<usize>,
}

impl<S: BatchLogitsSource> std::fmt::Debug for BatchGenerator<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatchGenerator")
            .field("max_batch", &self.max_batch)
            .field("queued", &self.queue.len())
            .field("active", &self.active.len())
            .finish_non_exhaustive()
    }
}

impl<S: BatchLogitsSource> BatchGenerator<S> {
    /// A generator over `source` (tokens of `vocab`) keeping at most `max_batch` sequences
    /// in flight (at least 1): that many KV caches are alive at once.
    pub fn new(source: S, vocab: Arc<dyn Vocab>, max_batch: usize) -> Self {
        BatchGenerator {
            source,
            vocab,
            max_batch: max_batch.max(1),
            next_id: 0,
            queue: VecDeque::new(),
            active: Vec::new(),
            prefix: None,
            prefill_chunk: None,
        }
    }

    /// Chunked prefill: a pass feeds at most `chunk` tokens of the prompts not yet fed (the
    /// oldest request's first), beside the decode steps of the requests already generating,
    /// so that a long prompt arriving does not stop every running stream for the whole of its
    /// prefill: it takes several passes instead, each about as long as `chunk` tokens take.
    /// Results are unchanged (the prompt's tokens reach the same cache positions, the logits
    /// of its last one start the output). Prompts arriving when nothing is decoding are fed
    /// whole: no stream waits then. `None` (the default) feeds each prompt whole always.
    pub fn set_prefill_chunk(&mut self, chunk: Option<usize>) {
        self.prefill_chunk = chunk.map(|c| c.max(1));
    }

    /// How many of each active request's pending tokens this pass feeds. Requests past their
    /// prompt feed all (a decode step: the sampled token, and any tokens forced after it);
    /// prompts share what is left of the chunk, in admission order. If no request is decoding,
    /// no stream waits on the pass: prompts are fed whole, as without chunking.
    fn feeds(&self) -> Vec<usize> {
        let prompt = |a: &Active<S::Sequence>| a.g.forward_calls == 0;
        let decoding: usize = self
            .active
            .iter()
            .filter(|a| !prompt(a))
            .map(|a| a.pending.len())
            .sum();
        let Some(chunk) = self.prefill_chunk.filter(|_| decoding > 0) else {
            return self.active.iter().map(|a| a.pending.len()).collect();
        };
        // At least one prompt token a pass, so that a prompt always makes progress.
        let mut left = chunk.saturating_sub(decoding).max(1);
        self.active
            .iter()
            .map(|a| {
                if !prompt(a) {
                    return a.pending.len();
                }
                let n = a.pending.len().min(left);
                left -= n;
                n
            })
            .collect()
    }

    /// Prefills `tokens` once (one forward pass, now) as the shared prefix of the requests
    /// admitted from now on: each request whose prompt shares its first `n` tokens with it
    /// starts from a fork of those `n` positions ([`BatchLogitsSource::fork`]: a copy of the
    /// cache, no arithmetic) and feeds only the rest of its prompt (at least its last token,
    /// for logits); [`Generation::reused_prompt_tokens`] is `n`. Results are unchanged, as
    /// long as the source's forks are exact. Replaces any previous prefix; an empty `tokens`
    /// clears it.
    ///
    /// # Errors
    /// [`GenerateError::Source`] if the prefill fails (the prefix is then cleared).
    pub fn set_prefix(&mut self, tokens: Vec<u32>) -> Result<(), GenerateError> {
        self.prefix = None;
        if tokens.is_empty() {
            return Ok(());
        }
        let mut seq = self.source.new_sequence();
        self.source.forward_batch(&mut [(&mut seq, &tokens[..])])?;
        self.prefix = Some((tokens, seq));
        Ok(())
    }

    /// Queues a request; it joins the batch at the next step with room. Returns its id
    /// (consecutive from 0).
    pub fn push(&mut self, request: BatchRequest) -> usize {
        let id = self.next_id;
        self.next_id += 1;
        self.queue
            .push_back((id, Queued::Grammar(Box::new(request), None)));
        id
    }

    /// Queues a request that reasons first, as
    /// [`Generator::generate_thinking`](super::Generator::generate_thinking) decodes it: free
    /// text (its reasoning) until `think.trigger` is written, a token of `stop` is sampled or
    /// `think.budget` tokens are spent, then the constrained answer from the prompt, the
    /// reasoning and the trigger, in the same batches as the other requests. Its
    /// [`Finished::thought`] holds the reasoning and its result the answer alone;
    /// [`reasoning`](Self::reasoning) streams the reasoning while it is written. An empty
    /// trigger fails it ([`GenerateError::EmptyTrigger`]). Returns its id, from the same
    /// sequence as [`push`](Self::push).
    pub fn push_thinking(
        &mut self,
        request: BatchRequest,
        think: ThinkConfig,
        stop: Vec<TokenId>,
    ) -> usize {
        let id = self.next_id;
        self.next_id += 1;
        let think = ThinkRequest { think, stop };
        self.queue.push_back((
            id,
            Queued::Grammar(Box::new(request), Some(Box::new(think))),
        ));
        id
    }

    /// Queues a free-text request (no grammar): decoded as
    /// [`Generator::generate_free`](super::Generator::generate_free) decodes it, ending at
    /// the first of `stop` (not appended; [`StopReason::Eos`], accepted) or at the budget
    /// ([`StopReason::MaxTokens`], not accepted). Its [`Finished::matcher`] is `None`. Returns
    /// its id, from the same sequence as [`push`](Self::push).
    pub fn push_free(
        &mut self,
        prompt: Vec<u32>,
        stop: Vec<TokenId>,
        config: GenerateConfig,
    ) -> usize {
        let id = self.next_id;
        self.next_id += 1;
        self.queue.push_back((
            id,
            Queued::Free {
                prompt,
                stop,
                config,
            },
        ));
        id
    }

    /// Requests in flight.
    pub fn active_len(&self) -> usize {
        self.active.len()
    }

    /// Requests waiting for room in the batch.
    pub fn queued_len(&self) -> usize {
        self.queue.len()
    }

    /// The output so far (bytes) of each request in flight, by id. It only grows between
    /// steps; a finished request's whole output is in its [`Finished`] result.
    pub fn outputs(&self) -> impl Iterator<Item = (usize, &[u8])> {
        self.active.iter().map(|a| (a.id, a.g.bytes.as_slice()))
    }

    /// The reasoning so far of request `id`, if it is in flight and was queued with
    /// [`push_thinking`](Self::push_thinking): while it reasons, its text but a tail that may
    /// begin the trigger; once it answers, the whole reasoning ([`Thought::text`]). It only
    /// grows between steps.
    pub fn reasoning(&self, id: usize) -> Option<&[u8]> {
        let a = self.active.iter().find(|a| a.id == id)?;
        match (&a.thinking, &a.thought) {
            (Some(t), _) => Some(t.reasoning.shown()),
            (None, Some(t)) => Some(&t.text),
            (None, None) => None,
        }
    }

    /// The reasoning of request `id`, if it is in flight, was queued with
    /// [`push_thinking`](Self::push_thinking) and is answering (its reasoning has ended).
    pub fn thought(&self, id: usize) -> Option<&Thought> {
        self.active.iter().find(|a| a.id == id)?.thought.as_ref()
    }

    /// The generation so far of request `id` (its tokens, bytes and the counts of sampled and
    /// forced tokens), if it is in flight. Within one step a request's new tokens are its
    /// sampled token (if any) then the tokens forced after it, preceded in its first step by
    /// the grammar's forced start: what a caller needs to tell forced tokens from sampled ones.
    pub fn generation(&self, id: usize) -> Option<&Generation> {
        self.active.iter().find(|a| a.id == id).map(|a| &a.g)
    }

    /// The number of tokens (sampled and forced) request `id` has produced so far, if it is
    /// in flight.
    pub fn tokens_len(&self, id: usize) -> Option<usize> {
        self.active
            .iter()
            .find(|a| a.id == id)
            .map(|a| a.g.tokens.len())
    }

    /// Ends request `id` now, without a result: a queued one is removed, one in flight is
    /// dropped with its sequence (its cache freed here). Returns whether it was found (a
    /// finished request is not).
    pub fn cancel(&mut self, id: usize) -> bool {
        if let Some(i) = self.active.iter().position(|a| a.id == id) {
            self.active.swap_remove(i);
            return true;
        }
        let before = self.queue.len();
        self.queue.retain(|(q, _)| *q != id);
        self.queue.len() < before
    }

    /// Whether nothing is queued or in flight.
    pub fn is_idle(&self) -> bool {
        self.queue.is_empty() && self.active.is_empty()
    }

    /// The logits source.
    pub fn source_mut(&mut self) -> &mut S {
        &mut self.source
    }

    /// Admits queued requests while there is room, runs one batched forward pass and one
    /// decode step of every sequence in flight, and returns the requests that ended (in no
    /// particular order; some may end at admission without a forward pass, e.g. a grammar
    /// with only one output, or a failing matcher).
    ///
    /// # Errors
    /// [`GenerateError::Source`] if the forward pass fails: the requests in flight are then
    /// dropped (their sequences freed); queued ones stay queued.
    pub fn step(&mut self) -> Result<Vec<Finished>, GenerateError> {
        let mut done = Vec::new();
        while self.active.len() < self.max_batch {
            let Some((id, req)) = self.queue.pop_front() else {
                break;
            };
            if let Some(f) = self.admit(id, req) {
                done.push(f);
            }
        }
        if self.active.is_empty() {
            return Ok(done);
        }
        // Drafts (speculative decoding) ride along each sequence's pending tokens, within
        // what is left of `DRAFT_PASS_ROWS`; drafts a pass checked and the output did not keep
        // are rolled back first.
        let mut feed = self.feeds();
        let mut rows_left = DRAFT_PASS_ROWS.saturating_sub(feed.iter().sum::<usize>());
        let mut drafts = Vec::with_capacity(self.active.len());
        let mut failed = Vec::new();
        for (i, a) in self.active.iter_mut().enumerate() {
            if a.seq_len > a.kept {
                self.source.truncate(&mut a.seq, a.kept);
                a.seq_len = a.kept;
            }
            // A prompt fed in part this pass has no logits to draft from yet.
            if feed[i] < a.pending.len() {
                drafts.push(Vec::new());
                continue;
            }
            let room = self.source.context_len().map_or(usize::MAX, |c| {
                c.saturating_sub(a.seq_len + a.pending.len())
            });
            match draft(&*self.vocab, a, room.min(rows_left)) {
                Ok(steps) => {
                    rows_left -= steps.iter().map(Vec::len).sum::<usize>();
                    drafts.push(steps);
                }
                Err(e) => {
                    drafts.push(Vec::new());
                    failed.push((i, e));
                }
            }
        }
        // A request whose draft failed (a matcher budget) ends with that error.
        for (i, e) in failed.into_iter().rev() {
            drafts.remove(i);
            feed.remove(i);
            let a = self.active.remove(i);
            done.push(finish(a, Err(e)));
        }
        if self.active.is_empty() {
            return Ok(done);
        }
        let fed: Vec<Vec<u32>> = self
            .active
            .iter()
            .zip(&drafts)
            .zip(&feed)
            .map(|((a, steps), &n)| {
                let mut tokens = a.pending[..n].to_vec();
                tokens.extend(steps.iter().flatten());
                tokens
            })
            .collect();
        // Rows of the requests in this pass (a prompt waiting for its chunk sits it out).
        let rows: Vec<Vec<usize>> = drafts
            .iter()
            .zip(&feed)
            .filter(|&(_, &n)| n > 0)
            .map(|(steps, &n)| {
                let mut end = n;
                let mut rows = vec![end - 1];
                for step in steps {
                    end += step.len();
                    rows.push(end - 1);
                }
                rows
            })
            .collect();
        let t = Instant::now();
        let logits = {
            let mut batch: Vec<(&mut S::Sequence, &[u32])> = self
                .active
                .iter_mut()
                .zip(&fed)
                .filter(|(_, tokens)| !tokens.is_empty())
                .map(|(a, tokens)| (&mut a.seq, tokens.as_slice()))
                .collect();
            if drafts.iter().all(Vec::is_empty) {
                self.source
                    .forward_batch(&mut batch)
                    .map(|l| l.into_iter().map(|l| vec![l]).collect())
            } else {
                self.source.forward_batch_rows(&mut batch, &rows)
            }
        };
        let logits = match logits {
            Ok(l) => l,
            Err(e) => {
                self.active.clear();
                return Err(GenerateError::Source(e));
            }
        };
        let elapsed = t.elapsed();
        let mut still = Vec::with_capacity(self.active.len());
        let mut logits = logits.into_iter();
        let passes = std::mem::take(&mut self.active)
            .into_iter()
            .zip(drafts.into_iter().zip(&fed));
        for (mut a, (steps, tokens)) in passes {
            if tokens.is_empty() {
                still.push(a);
                continue;
            }
            let mut l = logits.next().expect("logits for every request in the pass");
            if tokens.len() < a.pending.len() {
                // A chunk of a prompt: in the cache now, the rest next pass; no output yet.
                a.g.timings.prompt += elapsed;
                a.seq_len += tokens.len();
                a.kept += tokens.len();
                a.pending.drain(..tokens.len());
                still.push(a);
                continue;
            }
            if a.g.forward_calls == 0 {
                a.g.timings.prompt += elapsed;
            } else {
                a.g.timings.forward += elapsed;
            }
            a.g.forward_calls += 1;
            a.seq_len += tokens.len();
            a.kept += a.pending.len();
            a.g.draft_tokens += tokens.len() - a.pending.len();
            a.pending.clear();
            let after = l.split_off(1);
            if let Some(spec) = &mut a.spec {
                spec.queue(steps, after);
            }
            let mut l = l.pop().expect("one row asked for the pending tokens");
            match self.advance_drafted(&mut a, &mut l) {
                Ok(false) => still.push(a),
                Ok(true) => done.push(finish(a, Ok(()))),
                Err(e) => done.push(finish(a, Err(e))),
            }
        }
        self.active = still;
        Ok(done)
    }

    /// Decode steps of `a` from the logits of a pass, and on from the logits of each drafted
    /// step the output agrees with (speculative decoding: they are in the sequence already);
    /// `true` when it has ended.
    fn advance_drafted(
        &self,
        a: &mut Active<S::Sequence>,
        l: &mut Vec<f32>,
    ) -> Result<bool, GenerateError> {
        loop {
            if self.advance(a, l)? {
                return Ok(true);
            }
            let Some(spec) = &mut a.spec else {
                return Ok(false);
            };
            let Some(next) = spec.take(&a.pending, &mut a.g) else {
                return Ok(false);
            };
            a.kept += a.pending.len();
            a.pending.clear();
            *l = next;
        }
    }

    /// Steps until every request has ended, handing each to `on_finish` as soon as it does.
    ///
    /// # Errors
    /// As [`step`](Self::step).
    pub fn run(&mut self, mut on_finish: impl FnMut(Finished)) -> Result<(), GenerateError> {
        while !self.is_idle() {
            for f in self.step()? {
                on_finish(f);
            }
        }
        Ok(())
    }

    /// Starts a request: checks it, fast-forwards the forced start and computes the first
    /// mask. Returns it finished if it already ended (error, complete grammar, no budget).
    fn admit(&mut self, id: usize, req: Queued) -> Option<Finished> {
        let (prompt, constraint, cfg, think) = match req {
            Queued::Grammar(req, think) => {
                let BatchRequest {
                    prompt,
                    matcher,
                    config,
                } = *req;
                (
                    prompt,
                    Constraint::Grammar(Box::new(matcher)),
                    config,
                    think,
                )
            }
            Queued::Free {
                prompt,
                stop,
                config,
            } => (prompt, Constraint::Free(stop), config, None),
        };
        let fail = |constraint: Constraint, e| {
            Some(Finished {
                id,
                result: Err(e),
                matcher: match constraint {
                    Constraint::Grammar(m) => Some(*m),
                    Constraint::Free(_) => None,
                },
                thought: None,
            })
        };
        if think.as_ref().is_some_and(|t| t.think.trigger.is_empty()) {
            return fail(constraint, GenerateError::EmptyTrigger);
        }
        if prompt.is_empty() {
            return fail(constraint, GenerateError::EmptyPrompt);
        }
        if let Err(e) = cfg.check() {
            return fail(constraint, e);
        }
        let sampler = match Sampler::new(cfg.sampling.clone(), cfg.seed) {
            Ok(s) => s,
            Err(e) => return fail(constraint, e.into()),
        };
        let mut g = empty_generation();
        g.prompt_tokens = prompt.len();
        let spec = match (&constraint, &think) {
            (Constraint::Grammar(_), None) => {
                Speculator::new(cfg.speculation, &*self.vocab, &prompt)
            }
            _ => None,
        };
        let full_prompt = think.is_some().then(|| prompt.clone());
        let (seq, prompt) = match &self.prefix {
            Some((tokens, seq)) => {
                let common = tokens
                    .iter()
                    .zip(&prompt)
                    .take_while(|(a, b)| a == b)
                    .count()
                    .min(prompt.len() - 1);
                g.reused_prompt_tokens = common;
                let seq = if common > 0 {
                    self.source.fork(seq, common)
                } else {
                    self.source.new_sequence()
                };
                (seq, prompt[common..].to_vec())
            }
            None => (self.source.new_sequence(), prompt),
        };
        let thinking = think.map(|t| {
            Box::new(Thinking {
                reasoning: Reasoning::new(&t.think),
                stop: t.stop,
                prompt: full_prompt.unwrap_or_default(),
            })
        });
        let mut a = Active {
            id,
            seq,
            eos: match &constraint {
                Constraint::Grammar(m) => m.compiled().trie().eos_tokens().to_vec(),
                Constraint::Free(stop) => stop.clone(),
            },
            mask: TokenSet::new(self.vocab.vocab_len()),
            have_mask: false,
            unmasked_first: cfg.argmax_first && cfg.sampling.is_exact_unmasked_first(),
            closer: Closer::new(cfg.closing),
            spec,
            seq_len: g.reused_prompt_tokens,
            kept: g.reused_prompt_tokens,
            constraint,
            cfg,
            sampler,
            g,
            pending: prompt,
            start: Instant::now(),
            thinking,
            thought: None,
        };
        let r = match a.constraint {
            // No reasoning at all: straight to the answer, the prompt not fed yet.
            Constraint::Grammar(_)
                if a.thinking
                    .as_ref()
                    .is_some_and(|t| t.reasoning.budget() == 0) =>
            {
                self.answer(&mut a, ThinkEnd::Budget, None)
            }
            // Reasoning first: the prompt is fed in the first pass.
            Constraint::Grammar(_) if a.thinking.is_some() => Ok(false),
            Constraint::Grammar(_) => self.fast_forward(&mut a).and_then(|()| self.ready(&mut a)),
            // The free loop samples until the budget is spent: none, no pass.
            Constraint::Free(_) => {
                a.g.stop = StopReason::MaxTokens;
                Ok(a.cfg.max_tokens == 0)
            }
        };
        match r {
            Ok(false) => {
                self.active.push(a);
                None
            }
            Ok(true) => Some(finish(a, Ok(()))),
            Err(e) => Some(finish(a, Err(e))),
        }
    }

    /// One decode step of `a` from its logits; `true` when it has ended.
    fn advance(&self, a: &mut Active<S::Sequence>, l: &mut [f32]) -> Result<bool, GenerateError> {
        if let Constraint::Free(_) = a.constraint {
            return self.advance_free(a, l);
        }
        if a.thinking.is_some() {
            return self.advance_think(a, l);
        }
        penalize_repeats(l, &a.g.tokens, a.cfg.repeat_penalty);
        // As the sequential loop picks: the mask computed before the pass, else the unmasked
        // pick if the grammar allows it, else a mask now.
        let mut token = None;
        if !a.have_mask && a.unmasked_first {
            let matcher = grammar(&mut a.constraint);
            token = sample_unmasked_first(&*self.vocab, &mut a.sampler, l, matcher, &mut a.g)?;
        }
        let token = match token {
            Some(t) => t,
            None => {
                if !a.have_mask {
                    compute_mask(a)?;
                }
                let t = Instant::now();
                let token = TokenId(a.sampler.sample(l, Some(&a.mask))?);
                a.g.timings.sample += t.elapsed();
                token
            }
        };
        let matcher = grammar(&mut a.constraint);
        matcher.consume_token(token)?;
        if a.eos.contains(&token) {
            a.g.stop = StopReason::Eos;
            return Ok(true);
        }
        // Near the budget's end: keep the token only if a completion still fits after it;
        // otherwise it was taken back: close along the path that fitted before it.
        let remaining = a.cfg.max_tokens - a.g.tokens.len();
        let path = a
            .closer
            .after_sample(matcher, &mut a.mask, &mut a.g, remaining)?;
        if let Some(path) = path {
            close_along(&*self.vocab, matcher, &path, &mut a.g, &mut |_| {})?;
            return Ok(true);
        }
        a.g.sampled_tokens += 1;
        self.push_token(&mut a.g, token);
        a.pending.push(token.0);
        self.fast_forward(a)?;
        self.ready(a)
    }

    /// One decode step of free-text `a`, as the sequential free loop takes it: sample from
    /// the whole vocabulary; a stop token ends it (accepted), the budget ends it after
    /// appending.
    fn advance_free(
        &self,
        a: &mut Active<S::Sequence>,
        l: &mut [f32],
    ) -> Result<bool, GenerateError> {
        let vocab_len = self.vocab.vocab_len();
        let (history, timings) = (&a.g.tokens, &mut a.g.timings);
        let pick = sample_free(
            vocab_len,
            &mut a.sampler,
            l,
            history,
            &a.cfg,
            &a.eos,
            timings,
        )?;
        let Some(token) = pick else {
            a.g.stop = StopReason::Eos;
            a.g.accepted = true;
            return Ok(true);
        };
        a.g.sampled_tokens += 1;
        self.push_token(&mut a.g, token);
        if a.g.tokens.len() >= a.cfg.max_tokens {
            return Ok(true);
        }
        a.pending.push(token.0);
        Ok(false)
    }

    /// One step of reasoning `a`, as the sequential free phase takes it: sample from the whole
    /// vocabulary; a stop token, the trigger or the budget ends the reasoning and the answer
    /// starts ([`answer`](Self::answer)).
    fn advance_think(
        &self,
        a: &mut Active<S::Sequence>,
        l: &mut [f32],
    ) -> Result<bool, GenerateError> {
        let vocab_len = self.vocab.vocab_len();
        let th = a.thinking.as_mut().expect("a reasoning request");
        let (history, stop) = (&th.reasoning.tokens, &th.stop);
        let pick = sample_free(
            vocab_len,
            &mut a.sampler,
            l,
            history,
            &a.cfg,
            stop,
            &mut a.g.timings,
        )?;
        // Every token of the reasoning but one that ends it has been fed by now.
        let (end, fed) = match pick {
            None => (ThinkEnd::Stop, th.reasoning.tokens.len()),
            Some(token) => match th.reasoning.push(&*self.vocab, token) {
                Some(end) => (end, th.reasoning.tokens.len() - 1),
                None => {
                    a.pending.push(token.0);
                    return Ok(false);
                }
            },
        };
        self.answer(a, end, Some(fed))
    }

    /// Ends `a`'s reasoning (`end`) and starts its answer as
    /// [`Generator::generate_thinking`](super::Generator::generate_thinking) does: a fresh
    /// generation and sampler, conditioned on the prompt and the thought's context, of which
    /// the first `fed` tokens are in the sequence already (`None`: not even the prompt was
    /// fed, the budget was 0); then the forced start and the first mask. `true` if the
    /// request ends here.
    fn answer(
        &self,
        a: &mut Active<S::Sequence>,
        end: ThinkEnd,
        fed: Option<usize>,
    ) -> Result<bool, GenerateError> {
        let th = a.thinking.take().expect("a reasoning request");
        let thought = th.reasoning.finish(&*self.vocab, end);
        let mut g = empty_generation();
        let prompt_len = th.prompt.len();
        g.prompt_tokens = prompt_len + thought.context.len();
        let mut context = th.prompt;
        context.extend(thought.context.iter().map(|t| t.0));
        a.spec = Speculator::new(a.cfg.speculation, &*self.vocab, &context);
        match fed {
            Some(fed) => {
                // The context extends the tokens fed (only a last, unfed token may differ),
                // so the sequence is kept whole and the rest of the context follows it.
                g.reused_prompt_tokens = prompt_len + fed;
                a.pending = thought.context[fed..].iter().map(|t| t.0).collect();
            }
            None => {
                g.reused_prompt_tokens = a.g.reused_prompt_tokens;
                a.pending.extend(thought.context.iter().map(|t| t.0));
            }
        }
        a.g = g;
        a.sampler = Sampler::new(a.cfg.sampling.clone(), a.cfg.seed)?;
        a.thought = Some(thought);
        self.fast_forward(a)?;
        self.ready(a)
    }

    /// Consumes the forced tokens (within the budget) and queues them for the model.
    fn fast_forward(&self, a: &mut Active<S::Sequence>) -> Result<(), GenerateError> {
        if !a.cfg.fast_forward {
            return Ok(());
        }
        let t = Instant::now();
        let matcher = grammar(&mut a.constraint);
        let mut forced = matcher.compute_forced_tokens()?;
        a.g.timings.forced += t.elapsed();
        forced.truncate(a.cfg.max_tokens.saturating_sub(a.g.tokens.len()));
        matcher.consume_tokens(&forced)?;
        for tok in forced {
            self.push_token(&mut a.g, tok);
            a.pending.push(tok.0);
            a.g.forced_tokens += 1;
        }
        Ok(())
    }

    /// Computes the next mask and asks the closing; `true` if the request ends here (the
    /// grammar allows only EOS, the budget is spent, or it closed along a path), as the
    /// sequential loop decides before calling the model.
    fn ready(&self, a: &mut Active<S::Sequence>) -> Result<bool, GenerateError> {
        a.have_mask = false;
        // Unmasked-first skips the mask unless the output is accepted: only then can EOS be
        // allowed, so only then can the grammar be complete (mask = EOS alone), which must be
        // known before the pass.
        let t = Instant::now();
        let accepting = a.unmasked_first && grammar(&mut a.constraint).is_accepting();
        a.g.timings.mask += t.elapsed();
        if !a.unmasked_first || accepting {
            compute_mask(a)?;
            if a.mask.count() > 0 && a.mask.iter().all(|t| a.eos.contains(&t)) {
                a.g.stop = StopReason::GrammarComplete;
                return Ok(true);
            }
        }
        let remaining = a.cfg.max_tokens.saturating_sub(a.g.tokens.len());
        if remaining == 0 {
            return Ok(true);
        }
        let matcher = grammar(&mut a.constraint);
        match a.closer.check(matcher, &mut a.mask, &mut a.g, remaining)? {
            Check::Sample { mask_clobbered } => a.have_mask &= !mask_clobbered,
            Check::Close(path) => {
                close_along(&*self.vocab, matcher, &path, &mut a.g, &mut |_| {})?;
                return Ok(true);
            }
        }
        Ok(false)
    }

    fn push_token(&self, g: &mut Generation, token: TokenId) {
        push_token(&*self.vocab, g, token, &mut |_| {});
    }
}

/// Drafts for `a`'s next pass (none for free text, while reasoning, or with speculation
/// off), at most `room` tokens; draft time and tokens go to `a.g`.
fn draft<Q>(
    vocab: &dyn Vocab,
    a: &mut Active<Q>,
    room: usize,
) -> Result<Vec<Vec<u32>>, GenerateError> {
    let (Some(spec), Constraint::Grammar(matcher)) = (&mut a.spec, &mut a.constraint) else {
        return Ok(Vec::new());
    };
    if a.thinking.is_some() || a.pending.is_empty() {
        return Ok(Vec::new());
    }
    let t = Instant::now();
    let steps = spec.draft(vocab, matcher, &a.g, &a.cfg, room);
    a.g.timings.draft += t.elapsed();
    steps
}

/// The matcher of a constrained request (only those reach the grammar steps).
fn grammar(c: &mut Constraint) -> &mut Matcher {
    match c {
        Constraint::Grammar(m) => m,
        Constraint::Free(_) => unreachable!("free-text requests take no grammar step"),
    }
}

/// Computes `a`'s mask for its next token.
fn compute_mask<Q>(a: &mut Active<Q>) -> Result<(), GenerateError> {
    let t = Instant::now();
    let r = grammar(&mut a.constraint).compute_mask(&mut a.mask);
    a.g.timings.mask += t.elapsed();
    a.g.mask_calls += 1;
    r?;
    a.have_mask = true;
    Ok(())
}

/// Ends `a` (its sequence is dropped here, freeing the cache) into its result.
fn finish<Q>(a: Active<Q>, r: Result<(), GenerateError>) -> Finished {
    let Active {
        id,
        seq,
        constraint,
        mut g,
        start,
        thought,
        ..
    } = a;
    drop(seq);
    let mut matcher = match constraint {
        Constraint::Grammar(m) => Some(*m),
        Constraint::Free(_) => None,
    };
    let result = r.map(|()| {
        if let Some(m) = &mut matcher {
            g.accepted = m.is_accepting();
        }
        g.timings.total = start.elapsed();
        g
    });
    Finished {
        id,
        result,
        matcher,
        thought,
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{FixedLogits, HistoryLogits};
    use super::super::tests::{object_grammar, repeated_members_grammar, vocab};
    use super::super::{Closing, Generator};
    use super::*;
    use crate::matcher::{CompiledGrammar, Limits};

    /// Requests with different preferences in a batch of 2 (so some wait in the queue)
    /// end exactly as the sequential generator ends each, and each is handed back once:
    /// under every closing strategy and budgets from one that forces closing at once to one
    /// with room, including a model that rambles inside a string until the budget closes it
    /// and one that keeps choosing a token the closing must take back.
    #[test]
    fn batch_results_equal_the_sequential_generator() {
        let v = vocab();
        let compile = |g| Arc::new(CompiledGrammar::new(g, v.clone(), Limits::default()).unwrap());
        let (object, members) = (
            compile(object_grammar()),
            compile(repeated_members_grammar()),
        );
        let id = |t: &[u8]| v.token_of(t).unwrap().0;
        let bytes = |b: &[u8]| b.iter().map(|&b| u32::from(b)).collect::<Vec<_>>();
        let prefs: [(&Arc<CompiledGrammar>, Vec<u32>); 5] = [
            (&object, bytes(b"ab\"5}")),
            (&object, bytes(b"z\",\"tag\":\"q\",1}")),
            (&object, bytes(b"\"9")),
            // Rambles `aaaa` in every string, then opens the optional member when it can.
            (&object, vec![id(b"aaaa"), id(b","), id(b"\""), id(b"7")]),
            // Opens a new member whenever it may: near the cap the `,` must be taken back.
            (&members, bytes(b",\"a")),
        ];
        let fake = |p: &[u32]| FixedLogits::preferring(v.vocab_len(), p.iter().copied());
        let mut closed = [0usize; 3];
        for (c, closing) in [Closing::Json, Closing::Generic, Closing::Off]
            .into_iter()
            .enumerate()
        {
            for max_tokens in [9, 12, 16, 19, 23, 28, 40] {
                let cfg = GenerateConfig {
                    closing,
                    max_tokens,
                    ..GenerateConfig::default()
                };
                for (i, (compiled, p)) in prefs.iter().enumerate() {
                    let mut m = Matcher::new((*compiled).clone()).unwrap();
                    let mut g = Generator::new(fake(p), v.clone());
                    let want = g.generate(&[1], &mut m, &cfg, &mut |_| {}).unwrap();
                    closed[c] += usize::from(want.closed_early);
                    // The batch uses one fake: every request gets the same preferences.
                    let mut one = BatchGenerator::new(fake(p), v.clone(), 2);
                    for _ in 0..3 {
                        one.push(BatchRequest {
                            prompt: vec![1],
                            matcher: Matcher::new((*compiled).clone()).unwrap(),
                            config: cfg.clone(),
                        });
                    }
                    let mut seen = Vec::new();
                    let case = format!("{closing:?} max {max_tokens} prefs {i}");
                    one.run(|f| {
                        let g = f.result.unwrap();
                        assert_eq!(g.text(), want.text(), "{case} request {}", f.id);
                        assert_eq!(g.tokens, want.tokens, "{case} request {}", f.id);
                        let ends = |g: &Generation| {
                            let counts = (g.sampled_tokens, g.forced_tokens);
                            (g.stop, g.accepted, g.closed_early, counts)
                        };
                        assert_eq!(ends(&g), ends(&want), "{case}");
                        assert_eq!(f.matcher.unwrap().output(), want.bytes.as_slice(), "{case}");
                        seen.push(f.id);
                    })
                    .unwrap();
                    seen.sort_unstable();
                    assert_eq!(seen, [0, 1, 2], "{case}");
                    assert!(one.is_idle());
                }
            }
        }
        // The budget forced closing in some cases of both strategies (else this test would
        // not exercise it), never with closing off.
        assert!(closed[0] > 0 && closed[1] > 0, "{closed:?}");
        assert_eq!(closed[2], 0);
        let cfg = GenerateConfig {
            closing: Closing::Off,
            max_tokens: 40,
            ..GenerateConfig::default()
        };
        let mut batch = BatchGenerator::new(fake(&[]), v.clone(), 2);
        // A shared prefix the second request's prompt starts with (the first's is empty).
        batch.set_prefix(vec![7, 8, 9]).unwrap();
        // An empty prompt fails alone; the other request still finishes.
        batch.push(BatchRequest {
            prompt: vec![],
            matcher: Matcher::new(object.clone()).unwrap(),
            config: cfg.clone(),
        });
        batch.push(BatchRequest {
            prompt: vec![7, 8, 1],
            matcher: Matcher::new(object.clone()).unwrap(),
            config: cfg.clone(),
        });
        let mut results = Vec::new();
        batch
            .run(|f| {
                let reused = f.result.as_ref().map(|g| g.reused_prompt_tokens).ok();
                results.push((f.id, reused));
            })
            .unwrap();
        results.sort_unstable();
        assert_eq!(results, [(0, None), (1, Some(2))]);
        // The fork held the prefix's first two tokens, so only the prompt's last one (then
        // the grammar's forced start) was fed, at position 2.
        let calls = &batch.source_mut().calls;
        assert_eq!(calls[0], (vec![7, 8, 9], 0));
        assert_eq!((calls[1].0[0], calls[1].1), (1, 2));
    }

    /// The speculation and chunked-prefill tests' cases: the object grammar, the copying
    /// model's document as tokens, and three prompts that start with it.
    #[allow(clippy::type_complexity)]
    fn document_cases() -> (
        Arc<crate::toktrie::SyntheticVocab>,
        Arc<CompiledGrammar>,
        Vec<u32>,
        Vec<Vec<u32>>,
    ) {
        use super::super::speculate::tests::{ids, DOC};
        let v = vocab();
        let cg =
            Arc::new(CompiledGrammar::new(object_grammar(), v.clone(), Limits::default()).unwrap());
        let doc = ids(&v, DOC);
        let prompts = (0..3u32)
            .map(|i| {
                let mut p = doc.clone();
                p.extend(ids(&v, format!(" case {i}").as_bytes()));
                p
            })
            .collect();
        (v, cg, doc, prompts)
    }

    /// Issue 45: with speculation (drafts checked in the batched pass, rejected ones
    /// truncated from each sequence before its next pass) every request ends exactly as the
    /// sequential generator without speculation ends it, greedy and sampled, with a shared
    /// prefix forked, in batches of 2 of 3 requests; and drafts are accepted and rejected.
    #[test]
    fn speculative_batches_equal_the_sequential_generator() {
        use super::super::speculate::tests::{copying_model, DOC};
        use super::super::Speculation;
        let (v, cg, doc, prompts) = document_cases();
        let (mut drafted, mut accepted) = (0, 0);
        for seed in 0..8 {
            for (max_tokens, sampling) in [
                (24, crate::sampler::Sampling::ArgMax),
                (70, crate::sampler::Sampling::ArgMax),
                (70, crate::sampler::Sampling::All { temperature: 0.8 }),
            ] {
                let cfg = |speculation| GenerateConfig {
                    max_tokens,
                    sampling: sampling.clone(),
                    seed,
                    speculation,
                    ..GenerateConfig::default()
                };
                let want: Vec<Generation> = prompts
                    .iter()
                    .map(|p| {
                        let src = HistoryLogits::new(copying_model(DOC, seed, v.vocab_len()));
                        let mut gen = Generator::new(src, v.clone());
                        let mut m = Matcher::new(cg.clone()).unwrap();
                        gen.generate(p, &mut m, &cfg(Speculation::Off), &mut |_| {})
                            .unwrap()
                    })
                    .collect();
                let src = HistoryLogits::new(copying_model(DOC, seed, v.vocab_len()));
                let mut batch = BatchGenerator::new(src, v.clone(), 2);
                batch.set_prefix(doc.clone()).unwrap();
                for p in &prompts {
                    batch.push(BatchRequest {
                        prompt: p.clone(),
                        matcher: Matcher::new(cg.clone()).unwrap(),
                        config: cfg(Speculation::default()),
                    });
                }
                batch
                    .run(|f| {
                        let g = f.result.unwrap();
                        let w = &want[f.id];
                        let case = format!("seed {seed} max {max_tokens} request {}", f.id);
                        assert_eq!(g.text(), w.text(), "{case}");
                        assert_eq!((g.stop, g.accepted), (w.stop, w.accepted), "{case}");
                        assert_eq!(f.matcher.unwrap().output(), w.bytes.as_slice(), "{case}");
                        drafted += g.draft_tokens;
                        accepted += g.accepted_draft_tokens;
                    })
                    .unwrap();
            }
        }
        assert!(
            accepted > 100 && drafted > accepted + 100,
            "{accepted} of {drafted}"
        );
    }

    /// Issue 43: chunked prefill changes no result. Prompts fed `chunk` tokens a pass (1, 5,
    /// 16), with and without speculation, with and without a shared prefix, over a model whose
    /// logits hash the whole history: every request ends as the sequential generator ends it.
    /// And a request already decoding gets a token in every pass while a long prompt arriving
    /// after it is prefilled chunk by chunk.
    #[test]
    fn chunked_prefill_changes_no_result_and_keeps_decoding() {
        use super::super::speculate::tests::{copying_model, ids, DOC};
        use super::super::Speculation;
        let (v, cg, doc, prompts) = document_cases();
        let model = || HistoryLogits::new(copying_model(DOC, 3, v.vocab_len()));
        for speculation in [Speculation::Off, Speculation::default()] {
            let cfg = GenerateConfig {
                max_tokens: 40,
                speculation,
                ..GenerateConfig::default()
            };
            let want: Vec<Generation> = prompts
                .iter()
                .map(|p| {
                    let mut m = Matcher::new(cg.clone()).unwrap();
                    Generator::new(model(), v.clone())
                        .generate(p, &mut m, &cfg, &mut |_| {})
                        .unwrap()
                })
                .collect();
            for chunk in [1, 5, 16] {
                for prefix in [false, true] {
                    let mut batch = BatchGenerator::new(model(), v.clone(), 2);
                    batch.set_prefill_chunk(Some(chunk));
                    if prefix {
                        batch.set_prefix(doc[..20].to_vec()).unwrap();
                    }
                    for p in &prompts {
                        batch.push(BatchRequest {
                            prompt: p.clone(),
                            matcher: Matcher::new(cg.clone()).unwrap(),
                            config: cfg.clone(),
                        });
                    }
                    let mut ended = 0;
                    batch
                        .run(|f| {
                            let g = f.result.unwrap();
                            let w = &want[f.id];
                            let case = format!("chunk {chunk} prefix {prefix} request {}", f.id);
                            assert_eq!(g.text(), w.text(), "{case}");
                            assert_eq!((g.stop, g.accepted), (w.stop, w.accepted), "{case}");
                            ended += 1;
                        })
                        .unwrap();
                    assert_eq!(ended, 3);
                }
            }
        }

        // Interleaving: a short request decodes; a long prompt arrives and is prefilled 4
        // tokens a pass (3 beside the short request's one), and the short one never waits.
        let mut batch = BatchGenerator::new(model(), v.clone(), 2);
        batch.set_prefill_chunk(Some(4));
        let cfg = GenerateConfig {
            max_tokens: 200,
            speculation: Speculation::Off,
            ..GenerateConfig::default()
        };
        let short = batch.push(BatchRequest {
            prompt: ids(&v, b"n is"),
            matcher: Matcher::new(cg.clone()).unwrap(),
            config: cfg.clone(),
        });
        // Admitted and past its prompt (fed whole: nothing else was decoding).
        batch.step().unwrap();
        assert_eq!(batch.generation(short).map(|g| g.forward_calls), Some(1));
        let long = batch.push(BatchRequest {
            prompt: prompts[0].clone(),
            matcher: Matcher::new(cg.clone()).unwrap(),
            config: cfg,
        });
        let (mut prefill_passes, mut short_waited, mut short_decoded) = (0, 0, 0);
        loop {
            let before = batch.generation(short).map(|g| g.forward_calls);
            batch.step().unwrap();
            let Some(g) = batch.generation(long) else {
                break;
            };
            if g.forward_calls > 0 {
                break;
            }
            prefill_passes += 1;
            let after = batch.generation(short).map(|g| g.forward_calls);
            if let (Some(b), Some(a)) = (before, after) {
                short_waited += usize::from(a == b);
                short_decoded += 1;
            }
        }
        assert!(
            short_decoded >= 10,
            "the short request decoded in {short_decoded} passes"
        );
        assert!(
            prefill_passes >= prompts[0].len() / 4,
            "the long prompt took {prefill_passes} passes for {} tokens",
            prompts[0].len()
        );
        assert_eq!(short_waited, 0, "the decoding request waited a pass");
    }

    /// Sampled requests draw what the sequential generator draws with the same seed, with
    /// unmasked-first on (the pick checked before any mask) and off, so an eval's sampled
    /// runs are the same batched or not; unmasked-first saves masks here as it does there.
    #[test]
    fn sampled_results_equal_the_sequential_generator_per_seed() {
        let v = vocab();
        let object =
            Arc::new(CompiledGrammar::new(object_grammar(), v.clone(), Limits::default()).unwrap());
        let id = |t: &[u8]| v.token_of(t).unwrap().0;
        // Mass spread over allowed and disallowed tokens, so draws differ with the seed and
        // unmasked picks are both accepted and rejected.
        let prefs = [
            id(b"\",\""),
            id(b"}"),
            id(b"7"),
            id(b"a"),
            id(b"\""),
            id(b"z"),
        ];
        let fake = || FixedLogits::preferring(v.vocab_len(), prefs);
        let mut hits = [0usize; 2];
        let mut texts = std::collections::HashSet::new();
        for (k, argmax_first) in [false, true].into_iter().enumerate() {
            let cfg = |seed| GenerateConfig {
                max_tokens: 30,
                sampling: crate::sampler::Sampling::All { temperature: 8.0 },
                seed,
                argmax_first,
                ..GenerateConfig::default()
            };
            let mut batch = BatchGenerator::new(fake(), v.clone(), 3);
            let mut want = Vec::new();
            for seed in 0..8 {
                let mut m = Matcher::new(object.clone()).unwrap();
                let g = Generator::new(fake(), v.clone())
                    .generate(&[1], &mut m, &cfg(seed), &mut |_| {})
                    .unwrap();
                hits[k] += g.unmasked_hits;
                texts.insert(g.text());
                want.push(g);
                batch.push(BatchRequest {
                    prompt: vec![1],
                    matcher: Matcher::new(object.clone()).unwrap(),
                    config: cfg(seed),
                });
            }
            batch
                .run(|f| {
                    let g = f.result.unwrap();
                    let w = &want[f.id];
                    assert_eq!(
                        g.tokens, w.tokens,
                        "argmax_first {argmax_first} seed {}",
                        f.id
                    );
                    assert_eq!((g.stop, g.accepted), (w.stop, w.accepted));
                    assert_eq!(
                        (g.unmasked_hits, g.mask_calls),
                        (w.unmasked_hits, w.mask_calls)
                    );
                })
                .unwrap();
        }
        assert!(
            texts.len() > 4,
            "the seeds draw different outputs: {texts:?}"
        );
        assert_eq!(hits[0], 0);
        assert!(hits[1] > 0, "unmasked picks were accepted");
    }

    /// Streaming: the bytes read from `outputs` after each step are prefixes of the final
    /// output, and the increments add up to it. Cancelling drops a request in flight or
    /// queued at once, and the others finish as they would have.
    #[test]
    fn outputs_stream_and_cancel_ends_one_request() {
        let v = vocab();
        let object =
            Arc::new(CompiledGrammar::new(object_grammar(), v.clone(), Limits::default()).unwrap());
        let prefs: Vec<u32> = b"z\",\"tag\":\"q\",1}"
            .iter()
            .map(|&b| u32::from(b))
            .collect();
        let fake = || FixedLogits::preferring(v.vocab_len(), prefs.iter().copied());
        let cfg = GenerateConfig {
            closing: Closing::Off,
            max_tokens: 40,
            ..GenerateConfig::default()
        };
        let request = || BatchRequest {
            prompt: vec![1],
            matcher: Matcher::new(object.clone()).unwrap(),
            config: cfg.clone(),
        };
        let mut m = Matcher::new(object.clone()).unwrap();
        let want = Generator::new(fake(), v.clone())
            .generate(&[1], &mut m, &cfg, &mut |_| {})
            .unwrap();
        let mut batch = BatchGenerator::new(fake(), v.clone(), 2);
        let ids: Vec<usize> = (0..4).map(|_| batch.push(request())).collect();
        let mut streamed = vec![Vec::new(); ids.len()];
        let mut results = Vec::new();
        let mut steps = 0;
        while !batch.is_idle() {
            for f in batch.step().unwrap() {
                let g = f.result.unwrap();
                // Whatever was streamed is the start of the output; the rest comes here.
                assert!(g.bytes.starts_with(&streamed[f.id]), "request {}", f.id);
                streamed[f.id] = g.bytes.clone();
                results.push((f.id, g.text()));
            }
            for (id, out) in batch.outputs() {
                assert!(out.starts_with(&streamed[id]), "output of {id} only grows");
                streamed[id] = out.to_vec();
            }
            steps += 1;
            if steps == 2 {
                // Request 0 is in flight, request 3 queued: both go.
                assert!(batch.outputs().any(|(id, _)| id == 0));
                assert!(
                    !streamed[0].is_empty(),
                    "request 0 streamed something by now"
                );
                assert!(batch.cancel(0) && batch.cancel(3));
                assert!(!batch.cancel(0), "gone");
                assert_eq!(batch.active_len() + batch.queued_len(), 2);
            }
        }
        results.sort();
        let text = want.text();
        assert_eq!(results, [(1, text.clone()), (2, text)]);
    }

    /// A fake model whose logits depend on everything fed before (as a real model's do): after
    /// the prompt it prefers `script[i]` at the i-th position, then `then` in order; every
    /// logit also gets a little of a hash of the whole history, which decides among the
    /// tokens it does not prefer (what a grammar leaves it), so feeding the wrong context
    /// changes the output. Run as a [`HistoryLogits`].
    #[derive(Clone)]
    struct Scripted {
        prompt_len: usize,
        script: Vec<u32>,
        then: Vec<u32>,
        vocab_len: usize,
    }

    impl Scripted {
        fn logits(&self, history: &[u32]) -> Vec<f32> {
            let mut h: u64 = 0xcbf2_9ce4_8422_2325;
            let mut logits = Vec::with_capacity(self.vocab_len);
            for &t in history {
                h = (h ^ u64::from(t)).wrapping_mul(0x100_0000_01b3);
            }
            for i in 0..self.vocab_len {
                let x = (h ^ i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 40;
                logits.push((x % 1000) as f32 * 0.00005);
            }
            let at = history.len() - self.prompt_len;
            match self.script.get(at) {
                Some(&t) => logits[t as usize] += 10.0,
                None => {
                    for (i, &t) in self.then.iter().enumerate() {
                        logits[t as usize] += 10.0 - i as f32 * 0.1;
                    }
                }
            }
            logits
        }
    }

    /// Issue 19: a batched request that reasons first ends exactly as
    /// `Generator::generate_thinking` ends it alone — the same reasoning (text, tokens, how
    /// it ended, the context the answer saw) and the same answer — greedy and sampled, beside
    /// plain constrained and free-text requests in a batch of 2 (so some wait), whatever ends
    /// the reasoning: the trigger written (also inside a token that runs past it), the budget
    /// (0 included), a stop token. While it reasons its streamed reasoning only grows and
    /// ends as the thought's text, and none of it reaches its answer's output.
    #[test]
    fn thinking_requests_equal_the_sequential_generate_thinking() {
        let v = vocab();
        let eos = v.eos_tokens()[0];
        let object =
            Arc::new(CompiledGrammar::new(object_grammar(), v.clone(), Limits::default()).unwrap());
        let text = |t: &str| -> Vec<u32> { v.tokenize(t.as_bytes()).iter().map(|t| t.0).collect() };
        let prompt = vec![1u32, 2, 3];
        let then = text("x\"");
        // (script, trigger, budget, whether the script ends with the stop token)
        let cases: [(&str, &str, usize, bool); 7] = [
            ("two and two is four ANSWER:", "ANSWER:", 64, false),
            ("two and two is four ANSWER:", "ANSWER:", 9, false),
            ("hmm hmm hmm hmm hmm hmm", "ANSWER:", 0, false),
            ("hmm hmm hmm hmm hmm hmm", "ANSWER:", 1, false),
            ("hmm hmm hmm hmm hmm hmm", "ANSWER:", 40, false),
            ("done", "ANSWER:", 64, true),
            ("ok #\"}", "#\"", 64, false),
        ];
        let mut ends = std::collections::HashSet::new();
        for sampling in [
            crate::sampler::Sampling::ArgMax,
            crate::sampler::Sampling::All { temperature: 0.7 },
        ] {
            for (k, &(script, trigger, budget, stops)) in cases.iter().enumerate() {
                let mut script = text(script);
                if stops {
                    script.push(eos.0);
                }
                let scripted = Scripted {
                    prompt_len: prompt.len(),
                    script,
                    then: then.clone(),
                    vocab_len: v.vocab_len(),
                };
                let model = HistoryLogits::new(move |h: &[u32]| scripted.logits(h));
                let think = ThinkConfig::new(budget, trigger);
                let cfg = |seed| GenerateConfig {
                    max_tokens: 30,
                    sampling: sampling.clone(),
                    seed,
                    ..GenerateConfig::default()
                };
                let mut batch = BatchGenerator::new(model.clone(), v.clone(), 2);
                let mut want = std::collections::HashMap::new();
                let mut thinking = std::collections::HashSet::new();
                for seed in 0..3 {
                    let mut m = Matcher::new(object.clone()).unwrap();
                    let mut streamed = Vec::new();
                    let w = Generator::new(model.clone(), v.clone())
                        .generate_thinking(
                            &prompt,
                            &think,
                            &[eos],
                            &mut m,
                            &cfg(seed),
                            &mut |b| streamed.extend_from_slice(b),
                            &mut |_| {},
                        )
                        .unwrap();
                    assert_eq!(streamed, w.thought.text);
                    ends.insert(w.thought.end);
                    let request = || BatchRequest {
                        prompt: prompt.clone(),
                        matcher: Matcher::new(object.clone()).unwrap(),
                        config: cfg(seed),
                    };
                    let id = batch.push_thinking(request(), think.clone(), vec![eos]);
                    thinking.insert(id);
                    want.insert(id, w);
                    // Beside it: the same request without reasoning, and free text.
                    batch.push(request());
                    batch.push_free(prompt.clone(), vec![eos], cfg(seed));
                }
                let mut streamed: std::collections::HashMap<usize, Vec<u8>> = Default::default();
                let mut seen = 0;
                while !batch.is_idle() {
                    for f in batch.step().unwrap() {
                        let case = format!("{sampling:?} case {k} request {}", f.id);
                        let Some(w) = want.get(&f.id) else {
                            assert!(f.thought.is_none(), "{case}");
                            continue;
                        };
                        let g = f.result.unwrap();
                        let thought = f.thought.unwrap();
                        assert_eq!(thought, w.thought, "{case}");
                        assert!(thought
                            .text
                            .starts_with(&streamed.remove(&f.id).unwrap_or_default()));
                        assert_eq!(g.tokens, w.answer.tokens, "{case}");
                        let ends = |g: &Generation| {
                            let counts = (g.sampled_tokens, g.forced_tokens);
                            let prompt = (g.prompt_tokens, g.reused_prompt_tokens);
                            (g.stop, g.accepted, g.closed_early, counts, prompt)
                        };
                        assert_eq!(ends(&g), ends(&w.answer), "{case}");
                        seen += 1;
                    }
                    for &id in &thinking {
                        let Some(r) = batch.reasoning(id) else {
                            continue;
                        };
                        let before = streamed.entry(id).or_default();
                        assert!(r.starts_with(before), "the reasoning of {id} only grows");
                        *before = r.to_vec();
                        // The answer's output never holds the reasoning.
                        let out = batch.outputs().find(|(i, _)| *i == id).unwrap().1;
                        assert!(!out.starts_with(b"hmm") && !out.starts_with(b"two"));
                    }
                }
                assert_eq!(seen, 3);
            }
        }
        // Every way to end the reasoning was exercised.
        assert_eq!(ends.len(), 3, "{ends:?}");
        // An empty trigger fails the request alone.
        let mut batch =
            BatchGenerator::new(FixedLogits::new(vec![0.0; v.vocab_len()]), v.clone(), 2);
        batch.push_thinking(
            BatchRequest {
                prompt: vec![1],
                matcher: Matcher::new(object.clone()).unwrap(),
                config: GenerateConfig::default(),
            },
            ThinkConfig::new(4, ""),
            vec![],
        );
        let f = batch.step().unwrap().pop().unwrap();
        assert!(matches!(f.result, Err(GenerateError::EmptyTrigger)));
    }

    /// Free-text requests (no grammar) in a batch beside constrained ones end as
    /// `Generator::generate_free` ends them: at a stop token (accepted) or at the budget.
    #[test]
    fn free_text_requests_equal_the_sequential_free_loop() {
        let v = vocab();
        let object =
            Arc::new(CompiledGrammar::new(object_grammar(), v.clone(), Limits::default()).unwrap());
        let id = |t: &[u8]| v.token_of(t).unwrap();
        let prefs = [id(b"a").0, id(b"\"").0, id(b"5").0, id(b"}").0];
        let fake = || FixedLogits::preferring(v.vocab_len(), prefs);
        for (stop, max_tokens) in [(vec![], 5), (vec![id(b"a")], 5), (vec![id(b"z")], 0)] {
            let cfg = GenerateConfig {
                max_tokens,
                ..GenerateConfig::default()
            };
            let want = Generator::new(fake(), v.clone())
                .generate_free(&[1], &stop, &cfg, &mut |_| {})
                .unwrap();
            let mut batch = BatchGenerator::new(fake(), v.clone(), 3);
            let free = batch.push_free(vec![1], stop.clone(), cfg.clone());
            let constrained = batch.push(BatchRequest {
                prompt: vec![1],
                matcher: Matcher::new(object.clone()).unwrap(),
                config: GenerateConfig {
                    max_tokens: 40,
                    ..GenerateConfig::default()
                },
            });
            let mut seen = Vec::new();
            batch
                .run(|f| {
                    let g = f.result.unwrap();
                    if f.id == free {
                        assert!(f.matcher.is_none());
                        assert_eq!(g.tokens, want.tokens, "{stop:?} {max_tokens}");
                        assert_eq!((g.stop, g.accepted), (want.stop, want.accepted));
                    } else {
                        assert!(f.matcher.unwrap().is_accepting());
                    }
                    seen.push(f.id);
                })
                .unwrap();
            seen.sort_unstable();
            assert_eq!(seen, [free, constrained]);
        }
    }
}
