//! Local models: loading GGUF files and running them on candle's CPU backend.
//!
//! The only place (with [`crate::sampler`]) that touches candle. Pipeline order:
//! [`runtime::Model`] (weights, KV cache, forward pass) → [`chat`] (per-family chat templates
//! and stop tokens) → [`textgen`] (the plain, unconstrained decode loop behind
//! `formwork generate`). Errors are [`ModelError`].
//!
//! Does not own grammar masks: the matcher computes them and [`crate::sampler::Sampler`]
//! applies them to the logits this module returns.

pub mod chat;
pub mod error;
pub mod runtime;
pub mod textgen;

pub use error::ModelError;
pub use runtime::{Architecture, Model, ModelConfig};
