//! [`SyntheticVocab`]: a vocabulary of byte strings chosen by the caller, for tests, fuzzing and
//! benches that must not depend on a model.
//!
//! Every single byte `0x00..=0xFF` is guaranteed to be a token (missing ones are appended), so
//! any byte string can be tokenized. [`tokenize`](Vocab::tokenize) is greedy longest match over
//! the non-special tokens, which makes it canonical by construction: it is what "the model's
//! tokenizer" means for a synthetic vocabulary.

use std::collections::HashMap;

use super::{TokenId, Vocab};

/// A vocabulary of caller-chosen byte strings, with optional special and EOS tokens.
#[derive(Clone, Debug)]
pub struct SyntheticVocab {
    tokens: Vec<Vec<u8>>,
    special: Vec<bool>,
    eos: Vec<TokenId>,
    by_bytes: HashMap<Vec<u8>, TokenId>,
    max_len: usize,
}

impl SyntheticVocab {
    /// A vocabulary with `tokens` as ids `0..tokens.len()`, then any missing single bytes, and
    /// no EOS. Duplicate byte strings keep distinct ids (real vocabularies have them too);
    /// tokenization uses the lowest id.
    pub fn new(tokens: Vec<Vec<u8>>) -> Self {
        let mut v = Self {
            tokens: Vec::new(),
            special: Vec::new(),
            eos: Vec::new(),
            by_bytes: HashMap::new(),
            max_len: 0,
        };
        for t in tokens {
            v.push(t, false);
        }
        for b in 0..=255u8 {
            if !v.by_bytes.contains_key(&[b][..]) {
                v.push(vec![b], false);
            }
        }
        v
    }

    /// The 256 single bytes (ids = byte values) plus one special EOS token `<eos>` (id 256).
    pub fn byte_level() -> Self {
        Self::new((0..=255u8).map(|b| vec![b]).collect()).with_eos("<eos>")
    }

    /// Adds a special token with this text and makes it an EOS id.
    pub fn with_eos(mut self, text: &str) -> Self {
        let id = self.push(text.as_bytes().to_vec(), true);
        self.eos.push(id);
        self
    }

    /// Adds a special (non-EOS) token with this text.
    pub fn with_special(mut self, text: &str) -> Self {
        self.push(text.as_bytes().to_vec(), true);
        self
    }

    fn push(&mut self, bytes: Vec<u8>, special: bool) -> TokenId {
        let id = TokenId(self.tokens.len() as u32);
        if !special && !bytes.is_empty() {
            self.max_len = self.max_len.max(bytes.len());
            self.by_bytes.entry(bytes.clone()).or_insert(id);
        }
        self.tokens.push(bytes);
        self.special.push(special);
        id
    }

    /// The id of the non-special token with exactly these bytes.
    pub fn token_of(&self, bytes: &[u8]) -> Option<TokenId> {
        self.by_bytes.get(bytes).copied()
    }
}

impl Vocab for SyntheticVocab {
    fn vocab_len(&self) -> usize {
        self.tokens.len()
    }

    fn token_bytes(&self, id: TokenId) -> &[u8] {
        self.tokens.get(id.as_usize()).map_or(&[], |t| t.as_slice())
    }

    fn is_special(&self, id: TokenId) -> bool {
        self.special.get(id.as_usize()).copied().unwrap_or(true)
    }

    fn eos_tokens(&self) -> &[TokenId] {
        &self.eos
    }

    fn tokenize(&self, bytes: &[u8]) -> Vec<TokenId> {
        let mut out = Vec::new();
        let mut i = 0;
        while i < bytes.len() {
            let longest = (1..=self.max_len.min(bytes.len() - i))
                .rev()
                .find_map(|l| self.by_bytes.get(&bytes[i..i + l]).map(|&t| (l, t)));
            match longest {
                Some((l, t)) => {
                    out.push(t);
                    i += l;
                }
                // Unreachable: every single byte is a token.
                None => i += 1,
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_longest_match() {
        let v = SyntheticVocab::new(vec![b"ab".to_vec(), b"abc".to_vec(), b"cd".to_vec()]);
        let toks = v.tokenize(b"abcdab");
        let strs: Vec<&[u8]> = toks.iter().map(|&t| v.token_bytes(t)).collect();
        assert_eq!(strs, vec![&b"abc"[..], b"d", b"ab"]);
        assert_eq!(v.vocab_len(), 3 + 256);
    }

    #[test]
    fn byte_level_has_eos() {
        let v = SyntheticVocab::byte_level();
        assert_eq!(v.vocab_len(), 257);
        assert_eq!(v.eos_tokens(), &[TokenId(256)]);
        assert!(v.is_special(TokenId(256)));
        assert_eq!(v.tokenize(b"hi"), vec![TokenId(104), TokenId(105)]);
    }
}
