//! formwork-core: the engine of grammar-constrained decoding, with no model runtime.
//!
//! A JSON Schema (or a GBNF grammar, or a regex) is compiled into a token-level automaton; while
//! a model samples, the automaton masks the logits so only valid output can be produced, and
//! tokens the grammar forces are fast-forwarded. Bring your own model: anything that implements
//! [`LogitsSource`] (tokens → logits) and [`Vocab`] (token id → bytes) can be decoded under a
//! constraint.
//!
//! Data flows [`schema`] (or [`lark`]) → [`grammar`] → `lexer` / `parser` → [`toktrie`] →
//! [`matcher`] → [`cache`] (compiled grammars kept across requests) → [`sampler`] →
//! [`generate`]. The grammar IR is what every stage shares, so it is the bottom layer (under
//! only `util`, the hasher of the hot maps), the schema compiler the one above it and the Lark
//! reader (whose `%json` uses the schema compiler) the next; each module may use only the
//! modules before it here (checked by the root package's `layering` test):
//!
//! Layers: `util` → `grammar` → `schema` → `lark` → `lexer` → `parser` → `toktrie` →
//! `matcher` → `cache` → `sampler` → `generate` → `chat`.
//!
//! # Key types
//! [`compile`] (JSON Schema → [`Grammar`]; also [`lark`], [`grammar::gbnf`] and
//! [`grammar::regex`]) →
//! [`CompiledGrammar`] (grammar × vocabulary, built once, shared across threads) →
//! [`Matcher`] (one per sequence: masks, forced tokens) → [`Generator`] (the decode loop over a
//! [`LogitsSource`]). Errors: [`Error`], one variant per stage.
//!
//! # Usage
//! Constrain any model to a schema. Here the "model" is a fake that always prefers `}` and
//! then `5`; the mask turns that into the only valid answer:
//! ```
//! use std::sync::Arc;
//! use formwork_core::generate::testing::FixedLogits;
//! use formwork_core::toktrie::SyntheticVocab;
//! use formwork_core::{compile, CompileOptions, CompiledGrammar, GenerateConfig, Generator};
//! use formwork_core::{Limits, Matcher, Vocab};
//!
//! let schema = serde_json::json!({
//!     "type": "object",
//!     "properties": {"done_lessons": {"type": "integer", "minimum": 0}},
//!     "required": ["done_lessons"],
//!     "additionalProperties": false
//! });
//! let grammar = compile(&schema, &CompileOptions::default())?.grammar;
//! let vocab = Arc::new(SyntheticVocab::byte_level()); // your tokenizer implements `Vocab`
//! let compiled = Arc::new(CompiledGrammar::new(grammar, vocab.clone(), Limits::default())?);
//! let mut matcher = Matcher::new(compiled)?;
//! let model = FixedLogits::preferring(vocab.vocab_len(), [u32::from(b'}'), u32::from(b'5')]);
//! let mut generator = Generator::new(model, vocab); // your model implements `LogitsSource`
//! let prompt = [u32::from(b'?')]; // the prompt's token ids
//! let out = generator.generate(&prompt, &mut matcher, &GenerateConfig::default(), &mut |_| {})?;
//! assert_eq!(out.text(), r#"{"done_lessons":5}"#);
//! # Ok::<(), formwork_core::Error>(())
//! ```
#![warn(missing_debug_implementations)]
#![deny(missing_docs)]

pub mod cache;
pub mod chat;
pub mod generate;
pub mod grammar;
pub mod lark;
mod lexer;
pub mod matcher;
mod parser;
pub mod sampler;
pub mod schema;
pub mod toktrie;
mod util;

pub use cache::GrammarCache;
pub use generate::{
    Closing, GenerateConfig, GenerateError, Generation, Generator, LogitsSource, SourceError,
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
    /// Reading a Lark grammar failed.
    #[error(transparent)]
    Lark(#[from] lark::LarkError),
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
