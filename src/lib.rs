//! formwork: grammar-constrained local decoding.
//!
//! A JSON Schema (or a GBNF grammar, or a regex) is compiled into a token-level automaton; while
//! a local model samples, the automaton masks the logits so only valid output can be produced.
//!
//! The engine lives in [`formwork_core`] (re-exported here module by module): `schema` →
//! [`grammar`] → `lexer` / `parser` → [`toktrie`] → `matcher` → `sampler` → `generate`. This
//! crate adds what runs it on a local model: [`model`] (re-exported from [`formwork_model`]:
//! registry, fetch, GGUF, tokenizer, forward pass) and [`extract`] / [`eval`] (re-exported
//! from [`formwork_extract`]: extraction and the eval runner, generic over the engine's
//! traits), then the `formwork` command line ([`cli`]).
//!
//! The crate's own modules, each using only those before it (checked by the `layering` test;
//! the re-exported crates sit below both):
//!
//! Layers: `error` → `cli`.
//!
//! # Usage
//! Schema-constrained extraction on the default model (`no_run`: it needs the weights, which
//! `Loaded::load` fetches on first use):
//! ```no_run
//! use formwork::extract::{Constraint, ExtractConfig, Extractor};
//! use formwork::model::fetch::FetchConfig;
//! use formwork::model::{Loaded, ModelConfig};
//!
//! let loaded = Loaded::load(None, &FetchConfig::new(), &ModelConfig::new())?;
//! let (vocab, encode) = (loaded.vocab(), loaded.chat_encoder());
//! let schema = serde_json::json!({
//!     "type": "object",
//!     "properties": {"done_lessons": {"type": "integer"}},
//!     "required": ["done_lessons"]
//! });
//! let constraint = Constraint::Schema(schema);
//! let cfg = ExtractConfig::default();
//! let mut ex = Extractor::new(loaded.model, vocab, encode, loaded.stop, &constraint, cfg)?;
//! let r = ex.extract("doc", "The course has 5 lessons done.", &mut |_| {});
//! println!("{:?}: {:?}", r.status, r.output);
//! # Ok::<(), formwork::Error>(())
//! ```
#![warn(missing_debug_implementations)]
#![deny(missing_docs)]

pub use formwork_core::{generate, grammar, lark, matcher, sampler, schema, toktrie};
pub use formwork_core::{LexerError, ParserError};

pub mod cli;
pub mod error;

pub use formwork_extract as extract;
pub use formwork_extract::eval;
pub use formwork_model as model;

pub use error::Error;
