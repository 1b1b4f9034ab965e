//! formwork-model: local models for formwork's engine. The registry of known models, fetching
//! and verifying their weights, their tokenizers as the engine's
//! [`Vocab`](formwork_core::toktrie::Vocab), and running them on the CPU (a native forward pass
//! over GGUF weights with its own kernels, candle for tensors and quantized blocks). The only
//! crate of the workspace that imports candle and `tokenizers`.
//!
//! Pipeline order: [`registry`] / [`fetch`] (which file) → [`tokenizer`] (text ↔ ids) →
//! [`runtime::Model`] (weights, KV cache, forward pass; a
//! [`LogitsSource`](formwork_core::generate::LogitsSource) for the engine's decode loop, and
//! through [`Sequence`]s and [`Model::forward_batch`] a
//! [`BatchLogitsSource`](formwork_core::generate::batch::BatchLogitsSource) advancing many
//! sequences per pass) →
//! [`chat`] (chat templates and stop tokens per family); [`load`] bundles them for a model
//! name. Errors are [`ModelError`]. Does not own grammar masks or decoding: those are
//! `formwork_core`'s.
//!
//! Each module may use only the modules before it (checked by the root package's `layering`
//! test):
//!
//! Layers: `registry` → `error` → `gguf` → `fetch` → `tokenizer` → `kernels` → `forward` → `runtime` →
//! `chat` → `load`.
//!
//! # Key types
//! - [`Registry`]: the models formwork knows (`models/registry.json`, built in), and
//!   [`FetchConfig`] to fetch and verify one.
//! - [`Loaded`]: one call from a model name or `.gguf` path to weights, tokenizer, chat encoder
//!   and stop tokens.
//! - [`Model`]: the forward pass ([`ModelConfig`] chooses threads and backend); a
//!   `LogitsSource`, and a `BatchLogitsSource` through [`Sequence`]s.
//! - [`GgufTokenizer`]: the tokenizer rebuilt from GGUF metadata, the engine's `Vocab`.
//! - [`ModelError`]: every failure, naming the file, model or byte offset.
//!
//! # Usage
//! The registry needs no weights:
//! ```
//! use formwork_model::{Architecture, Registry};
//!
//! let registry = Registry::builtin()?;
//! let default = registry.get(&registry.default).expect("the default is registered");
//! assert_eq!(Architecture::from_gguf_name(&default.architecture), Some(Architecture::Qwen2));
//! assert!(registry.get("smollm2-135m").is_some_and(|m| m.vocab_len == 49_152));
//! # Ok::<(), formwork_model::ModelError>(())
//! ```
//! Load the default model (fetched and verified on first use) and decode under a regex
//! (`no_run`: it needs the weights):
//! ```no_run
//! use std::sync::Arc;
//! use formwork_core::grammar::regex::grammar_from_regex;
//! use formwork_core::{CompiledGrammar, GenerateConfig, Generator, Limits, Matcher};
//! use formwork_model::fetch::FetchConfig;
//! use formwork_model::{Loaded, ModelConfig};
//!
//! let mut loaded = Loaded::load(None, &FetchConfig::new(), &ModelConfig::new())?;
//! let prompt = loaded.encode_chat(None, "Pick a number from 1 to 9.")?;
//! let grammar = grammar_from_regex("[1-9]")?;
//! let compiled = CompiledGrammar::new(grammar, loaded.vocab(), Limits::default())?;
//! let mut matcher = Matcher::new(Arc::new(compiled))?;
//! let mut generator = Generator::new(&mut loaded.model, loaded.tokenizer.clone());
//! let out = generator.generate(&prompt, &mut matcher, &GenerateConfig::default(), &mut |_| {})?;
//! println!("{}", out.text());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![warn(missing_debug_implementations)]
#![deny(missing_docs)]

pub mod chat;
pub mod error;
pub mod fetch;
pub mod forward;
pub mod gguf;
pub mod kernels;
pub mod load;
pub mod registry;
pub mod runtime;
pub mod tokenizer;

pub use error::ModelError;
pub use fetch::FetchConfig;
pub use load::Loaded;
pub use registry::Registry;
pub use runtime::{Architecture, Backend, Model, ModelConfig, Sequence};
pub use tokenizer::GgufTokenizer;
