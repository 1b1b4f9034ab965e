//! [`Model`]: a loaded model (see the module docs of `runtime`) and its single-sequence API:
//! facts about the weights, the model's own KV cache, and [`Model::forward`]. Loading is
//! `loader`'s, batches of sequences `sequence`'s.

use std::path::{Path, PathBuf};

use crate::error::{candle_message, ModelError};
use crate::forward::{Hparams, Native, Profile};

use super::arch::Architecture;
use super::candle::CandleNet;
use super::config::{LoadStats, TokenInfo};

#[derive(Debug)]
pub(super) enum Engine {
    Candle(CandleNet),
    Native(Box<Native>),
}

/// A loaded model: weights, KV cache and forward pass. See the module docs.
#[derive(Debug)]
pub struct Model {
    /// Distinguishes this model's [`Sequence`](crate::Sequence)s from other models' (unique per process).
    pub(super) id: u64,
    pub(super) arch: Architecture,
    pub(super) path: PathBuf,
    /// Sizes and per-architecture facts, shared by both forward passes (the native one
    /// holds its own copy).
    pub(super) hp: Hparams,
    pub(super) embed_rows: usize,
    pub(super) engine: Engine,
    pub(super) vocab_len: usize,
    pub(super) context_len: usize,
    pub(super) cached: usize,
    pub(super) tokens: TokenInfo,
    pub(super) stats: LoadStats,
}

impl Model {
    /// The model family.
    pub fn architecture(&self) -> Architecture {
        self.arch
    }

    /// The file the model was loaded from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Number of logits per position (rows of the output matrix; may exceed the tokenizer's
    /// vocabulary).
    pub fn vocab_len(&self) -> usize {
        self.vocab_len
    }

    /// The maximum number of positions (trained context, capped by
    /// [`ModelConfig::max_context`]).
    pub fn context_len(&self) -> usize {
        self.context_len
    }

    /// Positions currently in the KV cache.
    pub fn cached_len(&self) -> usize {
        self.cached
    }

    /// Tokenizer facts from the GGUF metadata (BOS/EOS ids, special tokens, chat template).
    pub fn token_info(&self) -> &TokenInfo {
        &self.tokens
    }

    /// What loading did (requantized matrices, load time).
    pub fn load_stats(&self) -> &LoadStats {
        &self.stats
    }

    /// Clears the KV cache: the next `forward` must start at position 0. Buffers are kept for
    /// reuse, so a reset costs nothing and the next prompt allocates nothing it already had.
    pub fn reset(&mut self) {
        self.truncate(0);
    }

    fn truncate(&mut self, len: usize) {
        match &mut self.engine {
            Engine::Candle(net) => {
                for layer in &mut net.layers {
                    layer.cache.truncate(len, self.hp.head_dim);
                }
            }
            Engine::Native(native) => native.truncate(len),
        }
        self.cached = self.cached.min(len);
    }

    /// Wall time per op of the native forward pass since load (or the last
    /// [`reset_profile`](Self::reset_profile)), when loaded with [`ModelConfig::profile`].
    pub fn profile(&self) -> Option<&Profile> {
        match &self.engine {
            Engine::Native(n) => n.profile.as_ref(),
            Engine::Candle(_) => None,
        }
    }

    /// Zeroes the profile (e.g. after a warm-up).
    pub fn reset_profile(&mut self) {
        if let Engine::Native(n) = &mut self.engine {
            if let Some(p) = &mut n.profile {
                *p = Profile::default();
            }
        }
    }

    /// Feeds `tokens` at positions `pos..pos + tokens.len()` and returns the logits of the last
    /// one (`vocab_len()` floats).
    ///
    /// `pos` may be anything up to [`cached_len`](Self::cached_len): a smaller `pos` first drops
    /// the cached positions from `pos` on (rollback), `0` starts afresh. Several tokens after a
    /// cached prefix are fine (fast-forwarding forced tokens relies on it); the result equals
    /// feeding them one by one, up to float rounding.
    ///
    /// Cost: one pass over all weights per call plus attention over `pos + tokens.len()`
    /// positions; feeding many tokens in one call is much cheaper per token than one at a time.
    ///
    /// # Errors
    /// [`ModelError::EmptyInput`], [`ModelError::PositionGap`], [`ModelError::ContextOverflow`],
    /// [`ModelError::TokenOutOfRange`]; [`ModelError::Inference`] if candle fails, in which case
    /// the cache is truncated back to `pos`.
    pub fn forward(&mut self, tokens: &[u32], pos: usize) -> Result<Vec<f32>, ModelError> {
        if tokens.is_empty() {
            return Err(ModelError::EmptyInput);
        }
        if pos > self.cached {
            return Err(ModelError::PositionGap {
                pos,
                cached: self.cached,
            });
        }
        self.check_span(pos, tokens)?;
        let needed = pos + tokens.len();
        self.truncate(pos);
        if let Engine::Native(native) = &mut self.engine {
            let logits = native.forward(tokens, pos);
            self.cached = needed;
            return Ok(logits);
        }
        match self.forward_inner(tokens, pos) {
            Ok(logits) => {
                self.cached = needed;
                Ok(logits)
            }
            Err(e) => {
                self.truncate(pos);
                Err(ModelError::Inference {
                    step: "forward".into(),
                    message: candle_message(&e),
                })
            }
        }
    }

    /// Feeds `tokens` at `pos` as [`forward`](Self::forward) does and returns the logits
    /// after each token at the indices `rows` (strictly increasing, within `tokens`): the
    /// verification pass of speculative decoding. The native backend runs one pass and
    /// computes logits only for those rows; each is the same bits as feeding the tokens up
    /// to it alone. The candle backend feeds one chunk per row.
    ///
    /// # Errors
    /// As [`forward`](Self::forward), and [`ModelError::BadRows`] when `rows` is empty, out
    /// of order or past the tokens.
    pub fn forward_rows(
        &mut self,
        tokens: &[u32],
        pos: usize,
        rows: &[usize],
    ) -> Result<Vec<Vec<f32>>, ModelError> {
        check_rows(rows, tokens.len())?;
        if !matches!(self.engine, Engine::Native(_)) {
            let mut out = Vec::with_capacity(rows.len());
            let mut start = 0;
            for &r in rows {
                out.push(self.forward(&tokens[start..=r], pos + start)?);
                start = r + 1;
            }
            if start < tokens.len() {
                self.forward(&tokens[start..], pos + start)?;
            }
            return Ok(out);
        }
        if pos > self.cached {
            return Err(ModelError::PositionGap {
                pos,
                cached: self.cached,
            });
        }
        self.check_span(pos, tokens)?;
        self.truncate(pos);
        let Engine::Native(native) = &mut self.engine else {
            unreachable!("checked above: the engine is native");
        };
        let logits = native.forward_rows(tokens, pos, rows);
        self.cached = pos + tokens.len();
        Ok(logits)
    }

    fn forward_inner(&mut self, tokens: &[u32], pos: usize) -> candle_core::Result<Vec<f32>> {
        let Engine::Candle(net) = &mut self.engine else {
            return Err(candle_core::Error::Msg("not the candle backend".into()));
        };
        net.forward(self.hp, tokens, pos)
    }

    /// Checks that `tokens` fed after `start` cached positions fit the context and are all
    /// rows of the embedding: [`ModelError::ContextOverflow`], [`ModelError::TokenOutOfRange`].
    pub(super) fn check_span(&self, start: usize, tokens: &[u32]) -> Result<(), ModelError> {
        let needed = start + tokens.len();
        if needed > self.context_len {
            return Err(ModelError::ContextOverflow {
                needed,
                limit: self.context_len,
            });
        }
        if let Some(&token) = tokens.iter().find(|&&t| t as usize >= self.embed_rows) {
            return Err(ModelError::TokenOutOfRange {
                token,
                vocab_len: self.embed_rows,
            });
        }
        Ok(())
    }
}

/// Checks the rows asked of a verification pass over `len` tokens: non-empty, strictly
/// increasing, below `len`.
pub(super) fn check_rows(rows: &[usize], len: usize) -> Result<(), ModelError> {
    let ordered = rows.windows(2).all(|w| w[0] < w[1]);
    match rows.last() {
        Some(&last) if ordered && last < len => Ok(()),
        _ => Err(ModelError::BadRows {
            rows: rows.to_vec(),
            tokens: len,
        }),
    }
}

impl formwork_core::generate::LogitsSource for Model {
    fn forward(
        &mut self,
        tokens: &[u32],
        pos: usize,
    ) -> Result<Vec<f32>, formwork_core::generate::SourceError> {
        Model::forward(self, tokens, pos).map_err(Into::into)
    }

    fn forward_rows(
        &mut self,
        tokens: &[u32],
        pos: usize,
        rows: &[usize],
    ) -> Result<Vec<Vec<f32>>, formwork_core::generate::SourceError> {
        Model::forward_rows(self, tokens, pos, rows).map_err(Into::into)
    }

    fn context_len(&self) -> Option<usize> {
        Some(self.context_len)
    }
}
