//! formwork: grammar-constrained local decoding.
//!
//! A JSON Schema (or a GBNF grammar, or a regex) is compiled into a token-level automaton; while
//! a local model samples, the automaton masks the logits so only valid output can be produced.
//!
//! The modules read in pipeline order: `schema` → [`grammar`] → `lexer` / `parser` →
//! [`toktrie`] → `matcher` → `sampler` → `generate` → `extract` / `eval` / `cli`.
#![warn(missing_debug_implementations)]

pub mod error;
pub mod grammar;
pub mod model;
pub mod sampler;
pub mod toktrie;

pub use error::Error;
pub mod cli;
