//! formwork: grammar-constrained local decoding.
//!
//! A JSON Schema (or a GBNF grammar, or a regex) is compiled into a token-level automaton; while
//! a local model samples, the automaton masks the logits so only valid output can be produced.
//!
//! The engine lives in [`formwork_core`] (re-exported here module by module): `schema` →
//! [`grammar`] → `lexer` / `parser` → [`toktrie`] → `matcher` → `sampler` → `generate`. This
//! crate adds what runs it on a local model: [`model`] (re-exported from [`formwork_model`]:
//! registry, fetch, GGUF, tokenizer, forward pass), then `extract` / `eval` / `cli`.
#![warn(missing_debug_implementations)]

pub use formwork_core::{generate, grammar, matcher, sampler, schema, toktrie};
pub use formwork_core::{LexerError, ParserError};

pub mod cli;
pub mod error;
pub mod eval;
pub mod extract;

pub use formwork_model as model;

pub use error::Error;
