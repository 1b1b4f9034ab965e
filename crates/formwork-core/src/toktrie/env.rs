//! [`TokEnv`]: a vocabulary together with its token trie, built once per vocabulary and shared by
//! every grammar compiled for it.
//!
//! Building the trie sorts every token's bytes (~100 ms for a 262k vocabulary, more than
//! compiling a small schema's grammar), so a process that compiles many grammars for one model
//! builds one `TokEnv` and passes it to
//! [`CompiledGrammar::with_env`](crate::matcher::CompiledGrammar::with_env). Immutable but for
//! a cache of vocabulary slices ([`TokEnv::slice`]), which belong to the vocabulary, not to a
//! grammar: every grammar's free-text lexemes (JSON strings) use the same few classes, so the
//! first in-string mask of a new schema finds its slice already built. Cloning copies three
//! `Arc`s.

use std::sync::{Arc, Mutex};

use super::{SliceClass, TokTrie, TokenSlice, Vocab};

/// Most vocabulary slices kept per vocabulary: each is a few bitsets plus its frontier, and
/// grammars use few classes (JSON strings one or two; patterns a few more).
const MAX_SLICES: usize = 32;

/// A vocabulary and its token trie: immutable, `Send + Sync`, cheap to clone.
///
/// # Example
/// ```
/// use std::sync::Arc;
/// use formwork_core::grammar::GrammarBuilder;
/// use formwork_core::matcher::{CompiledGrammar, Limits};
/// use formwork_core::toktrie::{SyntheticVocab, TokEnv};
///
/// let env = TokEnv::new(Arc::new(SyntheticVocab::byte_level()));
/// for word in ["yes", "no"] {
///     let mut b = GrammarBuilder::new();
///     let lit = b.literal(word);
///     let start = b.define("s", vec![vec![formwork_core::grammar::Symbol::Lexeme(lit)]]);
///     let cg = CompiledGrammar::with_env(b.build(start)?, &env, Limits::default())?;
///     assert!(Arc::ptr_eq(cg.tok_env().trie_arc(), env.trie_arc()));
/// }
/// # Ok::<(), formwork_core::Error>(())
/// ```
#[derive(Clone)]
pub struct TokEnv {
    vocab: Arc<dyn Vocab>,
    trie: Arc<TokTrie>,
    slices: Arc<Mutex<SliceCache>>,
}

/// The slices computed so far, by class.
type SliceCache = Vec<(SliceClass, Arc<TokenSlice>)>;

impl TokEnv {
    /// Builds the trie of `vocab` (O(vocabulary bytes · log vocabulary)).
    pub fn new(vocab: Arc<dyn Vocab>) -> Self {
        let trie = Arc::new(TokTrie::new(vocab.as_ref()));
        Self {
            vocab,
            trie,
            slices: Arc::default(),
        }
    }

    /// The vocabulary slice of `class` ([`TokTrie::slice`]), computed on first use and shared
    /// by every grammar and matcher of this vocabulary, and whether this call computed it (one
    /// pass over the trie). `None` when `MAX_SLICES` other classes are already kept: the
    /// caller walks the trie instead.
    pub fn slice(&self, class: SliceClass) -> Option<(Arc<TokenSlice>, bool)> {
        let mut slices = self.slices.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, sl)) = slices.iter().find(|(c, _)| *c == class) {
            return Some((sl.clone(), false));
        }
        if slices.len() >= MAX_SLICES {
            return None;
        }
        let sl = Arc::new(self.trie.slice(class));
        slices.push((class, sl.clone()));
        Some((sl, true))
    }

    /// The classes of the slices computed so far.
    pub fn slice_classes(&self) -> Vec<SliceClass> {
        let slices = self.slices.lock().unwrap_or_else(|e| e.into_inner());
        slices.iter().map(|(c, _)| *c).collect()
    }

    /// The vocabulary.
    pub fn vocab(&self) -> &Arc<dyn Vocab> {
        &self.vocab
    }

    /// The token trie.
    pub fn trie(&self) -> &TokTrie {
        &self.trie
    }

    /// The token trie's `Arc` (to check sharing with `Arc::ptr_eq`).
    pub fn trie_arc(&self) -> &Arc<TokTrie> {
        &self.trie
    }
}

impl std::fmt::Debug for TokEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokEnv").field("trie", &self.trie).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::toktrie::SyntheticVocab;

    #[test]
    fn clones_share_the_trie() {
        let env = TokEnv::new(Arc::new(SyntheticVocab::byte_level()));
        let other = env.clone();
        assert!(Arc::ptr_eq(env.trie_arc(), other.trie_arc()));
        assert!(Arc::ptr_eq(env.vocab(), other.vocab()));
        assert_eq!(env.trie().vocab_len(), 257);
        // 256 single bytes; the EOS is kept out of the trie.
        assert_eq!(env.trie().tokens_len(), 256);
    }
}
