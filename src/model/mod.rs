//! Model adapters: the registry of known models, fetching and verifying their weights, and their
//! tokenizers as the engine's [`Vocab`](crate::toktrie::Vocab). The only place (with the runtime)
//! that imports candle and `tokenizers`.

pub mod error;
pub mod fetch;
pub mod registry;
pub mod tokenizer;

pub use error::ModelError;
