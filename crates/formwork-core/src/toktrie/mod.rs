//! Token trie over the exact byte strings of a vocabulary, the token bitset, and the
//! vocabulary trait the model adapters implement.
//!
//! Owns: [`Vocab`] (what the engine needs from a tokenizer), [`TokTrie`] (the preorder byte
//! trie and its pruning walk), [`TokEnv`] (a vocabulary with its trie, built once per
//! vocabulary and shared), [`TokenSet`] (the caller-owned mask bitset) and
//! [`SyntheticVocab`] (caller-chosen byte strings for tests and benches). Does not own any
//! grammar logic: the walk drives a byte-level [`Recognizer`] supplied by the matcher.
//!
//! Files: `vocab` → `tokenset` → `synthetic` → `trie` → `env`.
//!
//! May use: nothing else in the crate.

mod env;
mod synthetic;
mod tokenset;
mod trie;
mod vocab;

pub use env::TokEnv;
pub use synthetic::SyntheticVocab;
pub use tokenset::TokenSet;
pub use trie::{Recognizer, SliceClass, TokTrie, TokenSlice};
pub use vocab::{TokenId, Vocab};
