//! A fake [`LogitsSource`] for tests of code built on the generator (formwork's own unit
//! tests of the generator, extractor and eval backend use it, so one fake model is
//! maintained instead of one per module).
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
