//! [`ModelVocab`]: a tokenizer's vocabulary widened to the model's vocabulary and given the
//! caller's end-of-sequence ids.
//!
//! Models often have more logits than their tokenizer has tokens (Qwen2.5: 151,936 logits,
//! 151,665 tokens), and the bitmask rows vLLM and SGLang allocate are as wide as the logits. The
//! ids past the tokenizer are padding: no bytes, special, so the token trie never allows them.
//! The EOS set is the tokenizer's unless the caller names its own (a transformers tokenizer's
//! `eos_token_id`, a generation config's list).

use formwork_core::toktrie::{TokenId, Vocab};
use formwork_model::GgufTokenizer;

/// A [`GgufTokenizer`] as a vocabulary of `len` ids with the EOS ids `eos`.
#[derive(Debug)]
pub(crate) struct ModelVocab {
    inner: GgufTokenizer,
    len: usize,
    eos: Vec<TokenId>,
}

impl ModelVocab {
    /// `inner` widened to `len` ids (at least its own), with EOS `eos` (default: its own).
    ///
    /// # Errors
    /// A message naming the problem: `len` below the tokenizer's ids, an EOS id outside `len`.
    pub(crate) fn new(
        inner: GgufTokenizer,
        len: Option<usize>,
        eos: Option<Vec<u32>>,
    ) -> Result<Self, String> {
        let own = inner.vocab_len();
        let len = len.unwrap_or(own);
        if len < own {
            return Err(format!(
                "vocab_size {len} is smaller than the tokenizer's {own} token ids"
            ));
        }
        let eos: Vec<TokenId> = match eos {
            Some(ids) => ids.into_iter().map(TokenId).collect(),
            None => inner.eos_tokens().to_vec(),
        };
        if let Some(bad) = eos.iter().find(|t| t.as_usize() >= len) {
            return Err(format!(
                "eos token id {} is outside the vocabulary of {len}",
                bad.0
            ));
        }
        Ok(Self { inner, len, eos })
    }

    /// The token ids the tokenizer itself defines (the rest up to `vocab_len` is padding).
    pub(crate) fn tokenizer_len(&self) -> usize {
        self.inner.vocab_len()
    }

    /// The tokenizer.
    pub(crate) fn inner(&self) -> &GgufTokenizer {
        &self.inner
    }
}

impl Vocab for ModelVocab {
    fn vocab_len(&self) -> usize {
        self.len
    }

    fn token_bytes(&self, id: TokenId) -> &[u8] {
        self.inner.token_bytes(id)
    }

    fn is_special(&self, id: TokenId) -> bool {
        id.as_usize() >= self.inner.vocab_len() || self.inner.is_special(id)
    }

    fn eos_tokens(&self) -> &[TokenId] {
        &self.eos
    }

    fn tokenize(&self, bytes: &[u8]) -> Vec<TokenId> {
        self.inner.tokenize(bytes)
    }
}
