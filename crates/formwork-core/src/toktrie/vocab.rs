//! The vocabulary as the engine sees it: token ids and their exact byte strings.
//!
//! The engine never imports `tokenizers` or candle; model adapters (in `model/`) implement
//! [`Vocab`], and tests use [`ByteVocab`]-style synthetic vocabularies.

/// A token id of a model's vocabulary.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TokenId(pub u32);

impl TokenId {
    /// The id as an index.
    pub fn as_usize(self) -> usize {
        self.0 as usize
    }
}

/// What the engine needs to know about a model's vocabulary.
///
/// Implementations must be cheap to query: `token_bytes` is called once per token when the
/// token trie is built, `tokenize` once per fast-forward.
pub trait Vocab: Send + Sync {
    /// Number of token ids (ids are `0..vocab_len()`).
    fn vocab_len(&self) -> usize;

    /// The exact bytes the token stands for when it appears in generated text (after byte-level
    /// decoding, `Ġ` → space, `<0x0A>` → `\n`, `▁` → space). Special tokens return their
    /// textual form (e.g. `<|im_end|>`); they are excluded from masks via
    /// [`is_special`](Self::is_special).
    fn token_bytes(&self, id: TokenId) -> &[u8];

    /// Whether the token is a special/control token (never produced by text matching).
    fn is_special(&self, id: TokenId) -> bool;

    /// End-of-sequence tokens: allowed exactly when the grammar accepts.
    fn eos_tokens(&self) -> &[TokenId];

    /// The model's canonical tokenization of `bytes` as a continuation of generated text (no
    /// special tokens added, no leading space inserted). Used for fast-forwarded tokens.
    fn tokenize(&self, bytes: &[u8]) -> Vec<TokenId>;
}
