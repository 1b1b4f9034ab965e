//! [`TokEnv`]: a vocabulary together with its token trie, built once per vocabulary and shared by
//! every grammar compiled for it.
//!
//! Building the trie sorts every token's bytes (~100 ms for a 262k vocabulary, more than
//! compiling a small schema's grammar), so a process that compiles many grammars for one model
//! builds one `TokEnv` and passes it to
//! [`CompiledGrammar::with_env`](crate::matcher::CompiledGrammar::with_env). Immutable; cloning
//! copies two `Arc`s.

use std::sync::Arc;

use super::{TokTrie, Vocab};

/// A vocabulary and its token trie: immutable, `Send + Sync`, cheap to clone.
///
/// # Example
/// ```
/// use std::sync::Arc;
/// use formwork::grammar::GrammarBuilder;
/// use formwork::matcher::{CompiledGrammar, Limits};
/// use formwork::toktrie::{SyntheticVocab, TokEnv};
///
/// let env = TokEnv::new(Arc::new(SyntheticVocab::byte_level()));
/// for word in ["yes", "no"] {
///     let mut b = GrammarBuilder::new();
///     let lit = b.literal(word);
///     let start = b.define("s", vec![vec![formwork::grammar::Symbol::Lexeme(lit)]]);
///     let cg = CompiledGrammar::with_env(b.build(start)?, &env, Limits::default())?;
///     assert!(Arc::ptr_eq(cg.tok_env().trie_arc(), env.trie_arc()));
/// }
/// # Ok::<(), formwork::Error>(())
/// ```
#[derive(Clone)]
pub struct TokEnv {
    vocab: Arc<dyn Vocab>,
    trie: Arc<TokTrie>,
}

impl TokEnv {
    /// Builds the trie of `vocab` (O(vocabulary bytes · log vocabulary)).
    pub fn new(vocab: Arc<dyn Vocab>) -> Self {
        let trie = Arc::new(TokTrie::new(vocab.as_ref()));
        Self { vocab, trie }
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
