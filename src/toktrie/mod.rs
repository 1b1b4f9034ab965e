//! Token trie over the exact byte strings of a vocabulary, and the token bitset.

mod vocab;

pub use vocab::{TokenId, Vocab};
