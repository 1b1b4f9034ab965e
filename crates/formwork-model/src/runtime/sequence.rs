//! Batches: [`Sequence`], one sequence's KV cache, and the batched API of [`Model`]
//! ([`Model::new_sequence`], [`Model::forward_batch`], the engine's `BatchLogitsSource`).

use crate::error::ModelError;
use crate::forward::SeqCache;

use super::model::{check_rows, Engine, Model};

/// One sequence of a batch: its own KV cache and length, made by [`Model::new_sequence`]
/// and advanced by [`Model::forward_batch`] together with other sequences of the same model.
///
/// Owns the keys and values of every layer for its positions (`2 · layers · kv_dim · 4`
/// bytes per position, growing by doubling), except those it shares read-only with the
/// sequence it was [forked](Self::fork) from; does *not* own weights, rotary tables or
/// scratch buffers, which the [`Model`] shares among all its sequences. Dropping a
/// `Sequence` frees its cache at once (a finished or cancelled request leaves the batch by
/// being dropped). Invariant: the cache holds exactly [`len`](Self::len) positions of one
/// model.
#[derive(Debug)]
pub struct Sequence {
    model: u64,
    kv_dim: usize,
    cache: SeqCache,
}

impl Sequence {
    /// Positions fed so far (the next token goes at this position).
    pub fn len(&self) -> usize {
        self.cache.len()
    }

    /// Whether nothing has been fed yet.
    pub fn is_empty(&self) -> bool {
        self.cache.len() == 0
    }

    /// Rolls back to the first `len` positions (no-op if it holds fewer); the allocation is
    /// kept for the positions fed next. Free.
    pub fn truncate(&mut self, len: usize) {
        self.cache.truncate(len, self.kv_dim);
    }

    /// A new sequence of the same model starting from this one's first `len` positions (at
    /// most [`len`](Self::len)): the shared-prefix path. Prefill a common prompt prefix
    /// once, then fork one sequence per document and feed each its own suffix. The positions
    /// are shared read-only, not copied (a reference count; SmolLM2-135M's cache is 46 KB per
    /// position, so 8 copies of a 700-token prefix were 260 MB), and a batch of forks reads
    /// the shared keys together in attention. Feeding or truncating this sequence afterwards
    /// copies its own positions first while a fork still holds them (copy-on-write). The
    /// fork's logits are bit-identical to those of a sequence that was fed the whole prefix
    /// itself.
    pub fn fork(&self, len: usize) -> Sequence {
        Sequence {
            model: self.model,
            kv_dim: self.kv_dim,
            cache: self.cache.fork(len),
        }
    }

    /// Bytes allocated for this sequence's own keys and values (positions it shares with
    /// the sequence it was forked from are not counted).
    pub fn kv_bytes(&self) -> usize {
        self.cache.allocated_bytes()
    }
}

impl Model {
    /// A new, empty sequence for [`forward_batch`](Self::forward_batch). Allocates only the
    /// per-layer cache headers; positions are allocated as they are fed.
    pub fn new_sequence(&self) -> Sequence {
        let (layers, kv_dim) = match &self.engine {
            Engine::Native(n) => (n.layers.len(), n.kv_dim()),
            Engine::Candle(net) => (net.layers.len(), self.hp.n_kv_head * self.hp.head_dim),
        };
        Sequence {
            model: self.id,
            kv_dim,
            cache: SeqCache::new(layers),
        }
    }

    /// Advances several sequences in one forward pass: each `(sequence, tokens)` entry feeds
    /// `tokens` at the sequence's positions `len()..len() + tokens.len()`, and the result
    /// holds, in batch order, the logits of each entry's last token (`vocab_len()` floats
    /// each).
    ///
    /// Entries may mix decode steps (one token) with prefill chunks (many tokens); sequences
    /// join a batch by appearing in it and leave by not appearing (or being dropped). Every
    /// weight matrix is applied once to all `Σ tokens` rows (each weight block is read once
    /// for the whole batch: decode on CPU is bound by reading weights, so a step of `B`
    /// one-token sequences costs much less than `B` single steps); attention runs per
    /// sequence over its own cache. Each sequence's logits are bit-identical to feeding it
    /// alone, through this or through [`forward`](Self::forward) (tested on all three
    /// families). The model's own sequence ([`cached_len`](Self::cached_len)) is untouched.
    ///
    /// # Errors
    /// [`ModelError::BatchUnsupported`] on the candle backend, and per entry
    /// [`ModelError::ForeignSequence`], [`ModelError::EmptyInput`],
    /// [`ModelError::ContextOverflow`], [`ModelError::TokenOutOfRange`]. All entries are
    /// checked before anything is fed: on error no sequence has changed.
    ///
    /// # Example
    /// ```no_run
    /// # use formwork_model::Model;
    /// let mut model = Model::load("models/SmolLM2-135M-Instruct.Q4_1.gguf")?;
    /// let mut prefix = model.new_sequence();
    /// model.forward_batch(&mut [(&mut prefix, &[1, 4093, 198][..])])?;
    /// let (mut a, mut b) = (prefix.fork(3), prefix.fork(3));
    /// let logits = model.forward_batch(&mut [(&mut a, &[1780][..]), (&mut b, &[314, 260][..])])?;
    /// assert_eq!((logits.len(), a.len(), b.len()), (2, 4, 5));
    /// # Ok::<(), formwork_model::ModelError>(())
    /// ```
    pub fn forward_batch(
        &mut self,
        batch: &mut [(&mut Sequence, &[u32])],
    ) -> Result<Vec<Vec<f32>>, ModelError> {
        self.check_batch(batch)?;
        let Engine::Native(native) = &mut self.engine else {
            unreachable!("checked: the engine is native");
        };
        let mut caches: Vec<(&mut SeqCache, &[u32])> = batch
            .iter_mut()
            .map(|(seq, tokens)| (&mut seq.cache, &**tokens))
            .collect();
        Ok(native.forward_batch(&mut caches))
    }

    /// [`forward_batch`](Self::forward_batch) returning, per entry, the logits after its
    /// tokens at the indices `rows[i]` (strictly increasing, within its tokens): the
    /// verification pass of speculative decoding for a batch, one pass for every entry and
    /// row. Each row's logits are the same bits as feeding its sequence the tokens up to it
    /// alone.
    ///
    /// # Errors
    /// As [`forward_batch`](Self::forward_batch), and [`ModelError::BadRows`] when an entry's
    /// rows are empty, out of order or past its tokens (or `rows` has not one list per
    /// entry). All entries are checked before anything is fed.
    pub fn forward_batch_rows(
        &mut self,
        batch: &mut [(&mut Sequence, &[u32])],
        rows: &[Vec<usize>],
    ) -> Result<Vec<Vec<Vec<f32>>>, ModelError> {
        if rows.len() != batch.len() {
            return Err(ModelError::BadRows {
                rows: Vec::new(),
                tokens: 0,
            });
        }
        for ((_, tokens), rows) in batch.iter().zip(rows) {
            check_rows(rows, tokens.len())?;
        }
        self.check_batch(batch)?;
        let Engine::Native(native) = &mut self.engine else {
            unreachable!("checked: the engine is native");
        };
        let mut caches: Vec<(&mut SeqCache, &[u32])> = batch
            .iter_mut()
            .map(|(seq, tokens)| (&mut seq.cache, &**tokens))
            .collect();
        let asked: Vec<&[usize]> = rows.iter().map(Vec::as_slice).collect();
        let mut flat = native.forward_batch_rows(&mut caches, &asked).into_iter();
        Ok(rows
            .iter()
            .map(|r| flat.by_ref().take(r.len()).collect())
            .collect())
    }

    /// The checks of a batch before anything is fed: the native backend, the model's own
    /// sequences, non-empty entries that fit the context.
    fn check_batch(&self, batch: &[(&mut Sequence, &[u32])]) -> Result<(), ModelError> {
        if !matches!(self.engine, Engine::Native(_)) {
            return Err(ModelError::BatchUnsupported { backend: "candle" });
        }
        for (index, (seq, tokens)) in batch.iter().enumerate() {
            if seq.model != self.id {
                return Err(ModelError::ForeignSequence { index });
            }
            if tokens.is_empty() {
                return Err(ModelError::EmptyInput);
            }
            self.check_span(seq.len(), tokens)?;
        }
        Ok(())
    }
}

/// Batched decoding for the engine's [`BatchGenerator`](formwork_core::generate::batch::BatchGenerator):
/// [`Model::new_sequence`] and [`Model::forward_batch`].
impl formwork_core::generate::batch::BatchLogitsSource for Model {
    type Sequence = Sequence;

    fn new_sequence(&mut self) -> Sequence {
        Model::new_sequence(self)
    }

    fn forward_batch(
        &mut self,
        batch: &mut [(&mut Sequence, &[u32])],
    ) -> Result<Vec<Vec<f32>>, formwork_core::generate::SourceError> {
        Model::forward_batch(self, batch).map_err(Into::into)
    }

    fn fork(&mut self, seq: &Sequence, len: usize) -> Sequence {
        seq.fork(len)
    }

    fn forward_batch_rows(
        &mut self,
        batch: &mut [(&mut Sequence, &[u32])],
        rows: &[Vec<usize>],
    ) -> Result<Vec<Vec<Vec<f32>>>, formwork_core::generate::SourceError> {
        Model::forward_batch_rows(self, batch, rows).map_err(Into::into)
    }

    fn truncate(&mut self, seq: &mut Sequence, len: usize) {
        seq.truncate(len);
    }

    fn context_len(&self) -> Option<usize> {
        Some(self.context_len)
    }
}
