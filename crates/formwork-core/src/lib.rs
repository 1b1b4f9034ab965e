//! formwork-core: the engine of grammar-constrained decoding, with no model runtime.
//!
//! A JSON Schema (or a GBNF grammar, or a regex) is compiled into a token-level automaton; while
//! a model samples, the automaton masks the logits so only valid output can be produced, and
//! tokens the grammar forces are fast-forwarded. Bring your own model: anything that implements
//! [`LogitsSource`] (tokens → logits) and [`Vocab`] (token id → bytes) can be decoded under a
//! constraint.
//!
//! Modules, in pipeline order; each may use only the ones before it:
//! [`schema`] → [`grammar`] → `lexer` / `parser` → [`toktrie`] → [`matcher`] → [`sampler`] →
//! [`generate`].
#![warn(missing_debug_implementations)]
#![deny(missing_docs)]

pub mod generate;
pub mod grammar;
mod lexer;
pub mod matcher;
mod parser;
pub mod sampler;
pub mod schema;
pub mod toktrie;

pub use generate::{
    GenerateConfig, GenerateError, Generation, Generator, LogitsSource, SourceError,
};
pub use grammar::{Grammar, GrammarBuilder, GrammarError};
pub use lexer::LexerError;
pub use matcher::{CompiledGrammar, Limits, Matcher, MatcherError};
pub use parser::ParserError;
pub use sampler::{Sampler, SamplerError, Sampling};
pub use schema::{compile, CompileOptions, CompiledSchema, SchemaError};
pub use toktrie::{TokEnv, TokenId, TokenSet, Vocab};

/// Any error the engine can return: one variant per pipeline stage, each wrapping that stage's
/// own error (which carries the JSON pointer, line:column or budget that names the cause).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Compiling a JSON Schema failed.
    #[error(transparent)]
    Schema(#[from] schema::SchemaError),
    /// Building a grammar failed.
    #[error(transparent)]
    Grammar(#[from] grammar::GrammarError),
    /// Reading GBNF grammar text failed.
    #[error(transparent)]
    Gbnf(#[from] grammar::gbnf::GbnfError),
    /// Turning a regex into a grammar failed.
    #[error(transparent)]
    Regex(#[from] grammar::regex::RegexError),
    /// Compiling a grammar for a vocabulary, or matching tokens against it, failed.
    #[error(transparent)]
    Matcher(#[from] matcher::MatcherError),
    /// Sampling failed (bad parameters, or every token masked out).
    #[error(transparent)]
    Sampler(#[from] sampler::SamplerError),
    /// The constrained decode loop failed.
    #[error(transparent)]
    Generate(#[from] generate::GenerateError),
}
