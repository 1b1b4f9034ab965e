//! Local models: the registry of known models, fetching and verifying their weights, their
//! tokenizers as the engine's [`Vocab`](crate::toktrie::Vocab), and running them on candle's
//! CPU backend. The only place (with [`crate::sampler`]) that imports candle and `tokenizers`.
//!
//! Pipeline order: [`registry`] / [`fetch`] (which file) → [`tokenizer`] (text ↔ ids) →
//! [`runtime::Model`] (weights, KV cache, forward pass) → [`chat`] (chat templates and stop
//! tokens per family) → [`textgen`] (the plain decode loop behind `formwork generate`).
//! Errors are [`ModelError`]. Does not own grammar masks: the matcher computes them and
//! [`crate::sampler::Sampler`] applies them to the logits [`runtime::Model::forward`] returns.

pub mod chat;
pub mod error;
pub mod fetch;
pub mod forward;
pub mod kernels;
pub mod registry;
pub mod runtime;
pub mod textgen;
pub mod tokenizer;

pub use error::ModelError;
pub use runtime::{Architecture, Backend, Model, ModelConfig};
