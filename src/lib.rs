//! formwork: grammar-constrained local decoding.
//!
//! A JSON Schema (or a GBNF grammar, or a regex) is compiled into a token-level automaton; while
//! a local model samples, the automaton masks the logits so only valid output can be produced.
//!
//! The modules read in pipeline order: `schema` → [`grammar`] → `lexer` / `parser` →
//! [`toktrie`] → `matcher` → `sampler` → `generate` → `extract` / `eval` / `cli`.
#![warn(missing_debug_implementations)]

pub mod cli;
pub mod error;
pub mod eval;
pub mod extract;
pub mod generate;
pub mod grammar;
pub mod lexer;
pub mod matcher;
pub mod model;
pub mod parser;
pub mod sampler;
pub mod schema;
pub mod toktrie;

pub use error::Error;
