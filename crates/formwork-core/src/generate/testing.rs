//! Fake [`LogitsSource`]s for tests of code built on the generator (formwork's own unit
//! tests of the generator, extractor and eval backend use them, so the fakes are maintained
//! once instead of once per module): [`FixedLogits`], the same logits at every step, and
//! [`HistoryLogits`], logits that depend on the whole history.
//!
//! Uses only the [`LogitsSource`] and [`BatchLogitsSource`] traits of the decode loops.

use super::batch::BatchLogitsSource;
use super::{LogitsSource, SourceError};

/// A fake model: the same logits at every step, whatever was fed; records every call
/// (tokens, position) so tests can check cache reuse and fast-forward.
#[derive(Clone, Debug)]
pub struct FixedLogits {
    /// The logits returned by every call.
    pub logits: Vec<f32>,
    /// Every call's tokens and position, in order.
    pub calls: Vec<(Vec<u32>, usize)>,
}

impl FixedLogits {
    /// Returns `logits` at every step.
    pub fn new(logits: Vec<f32>) -> Self {
        FixedLogits {
            logits,
            calls: Vec::new(),
        }
    }

    /// Logits over `vocab_len` tokens favouring the ids `prefer`, in order of preference
    /// (10.0, 9.9, 9.8, ...); every other token has logit 0. With a byte-level vocabulary
    /// the ids are the bytes, so `preferring(257, b"{}")` favours `{` then `}`.
    pub fn preferring(vocab_len: usize, prefer: impl IntoIterator<Item = u32>) -> Self {
        let mut logits = vec![0.0f32; vocab_len];
        for (i, id) in prefer.into_iter().enumerate() {
            logits[id as usize] = 10.0 - i as f32 * 0.1;
        }
        Self::new(logits)
    }
}

impl LogitsSource for FixedLogits {
    fn forward(&mut self, tokens: &[u32], pos: usize) -> Result<Vec<f32>, SourceError> {
        self.calls.push((tokens.to_vec(), pos));
        Ok(self.logits.clone())
    }

    /// One pass, recorded as one call.
    fn forward_rows(
        &mut self,
        tokens: &[u32],
        pos: usize,
        rows: &[usize],
    ) -> Result<Vec<Vec<f32>>, SourceError> {
        self.calls.push((tokens.to_vec(), pos));
        Ok(vec![self.logits.clone(); rows.len()])
    }
}

/// The same fake, batched: a sequence is just its length (the logits do not depend on what
/// was fed), and every entry of a batch is recorded as a call of its own.
impl BatchLogitsSource for FixedLogits {
    type Sequence = usize;

    fn new_sequence(&mut self) -> usize {
        0
    }

    fn forward_batch(
        &mut self,
        batch: &mut [(&mut usize, &[u32])],
    ) -> Result<Vec<Vec<f32>>, SourceError> {
        batch
            .iter_mut()
            .map(|(len, tokens)| {
                let pos = **len;
                **len += tokens.len();
                self.forward(tokens, pos)
            })
            .collect()
    }

    fn fork(&mut self, seq: &usize, len: usize) -> usize {
        len.min(*seq)
    }
}

/// A fake model whose logits are a function of everything fed so far, prompt included, as a
/// real model's are: feeding the wrong context (a bad fork, a skipped token) changes what it
/// prefers, so a test comparing batched with sequential decoding sees it. A batched sequence
/// is its own token history, and [`widest`](Self::widest) records the batch sizes reached.
#[derive(Clone)]
pub struct HistoryLogits<F> {
    /// The logits after a history.
    logits: F,
    /// What the single-sequence path has been fed, in order.
    history: Vec<u32>,
    /// The most sequences in one batched pass so far.
    pub widest: usize,
    /// Single-sequence passes so far ([`LogitsSource::forward`] and
    /// [`LogitsSource::forward_rows`] calls).
    pub passes: usize,
}

impl<F: Fn(&[u32]) -> Vec<f32>> HistoryLogits<F> {
    /// A fake returning `logits(history)` after each call.
    pub fn new(logits: F) -> Self {
        HistoryLogits {
            logits,
            history: Vec::new(),
            widest: 0,
            passes: 0,
        }
    }
}

impl<F> std::fmt::Debug for HistoryLogits<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HistoryLogits")
            .field("history_len", &self.history.len())
            .field("widest", &self.widest)
            .field("passes", &self.passes)
            .finish_non_exhaustive()
    }
}

impl<F: Fn(&[u32]) -> Vec<f32>> LogitsSource for HistoryLogits<F> {
    fn forward(&mut self, tokens: &[u32], pos: usize) -> Result<Vec<f32>, SourceError> {
        self.passes += 1;
        self.history.truncate(pos);
        self.history.extend_from_slice(tokens);
        Ok((self.logits)(&self.history))
    }

    /// One pass: the logits after each asked row are those of the history up to it.
    fn forward_rows(
        &mut self,
        tokens: &[u32],
        pos: usize,
        rows: &[usize],
    ) -> Result<Vec<Vec<f32>>, SourceError> {
        self.passes += 1;
        self.history.truncate(pos);
        let mut out = Vec::with_capacity(rows.len());
        let mut rows = rows.iter().peekable();
        for (i, &t) in tokens.iter().enumerate() {
            self.history.push(t);
            if rows.next_if_eq(&&i).is_some() {
                out.push((self.logits)(&self.history));
            }
        }
        Ok(out)
    }
}

impl<F: Fn(&[u32]) -> Vec<f32>> BatchLogitsSource for HistoryLogits<F> {
    type Sequence = Vec<u32>;

    fn new_sequence(&mut self) -> Vec<u32> {
        Vec::new()
    }

    fn forward_batch(
        &mut self,
        batch: &mut [(&mut Vec<u32>, &[u32])],
    ) -> Result<Vec<Vec<f32>>, SourceError> {
        self.widest = self.widest.max(batch.len());
        Ok(batch
            .iter_mut()
            .map(|(seq, tokens)| {
                seq.extend_from_slice(tokens);
                (self.logits)(seq)
            })
            .collect())
    }

    fn fork(&mut self, seq: &Vec<u32>, len: usize) -> Vec<u32> {
        seq[..len.min(seq.len())].to_vec()
    }
}
