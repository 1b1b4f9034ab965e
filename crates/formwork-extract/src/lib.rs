//! formwork-extract: a schema and a document in, a JSON value out, one record or a batch; and
//! the eval runner that measures how often and how well.
//!
//! Generic over the engine's [`LogitsSource`](formwork_core::LogitsSource) and
//! [`Vocab`](formwork_core::Vocab): any model runtime can drive it (formwork's own is the
//! `formwork-model` crate, which this crate does not depend on). The caller hands over the
//! model, its vocabulary, a [`ChatEncoder`] and its stop tokens.
//!
//! Pipeline: [`grounded`] rewrites grounded fields of the schema to placeholders → the schema
//! compiler → [`compose`] adds refusal / tool-call / grounded-substring rules around the
//! compiled grammar → the generator decodes under it → [`validate`] checks the final value
//! against the whole schema. [`prompt`] builds the user message and reads JSON out of free text
//! for the unconstrained baselines; [`tools`] reads tool definitions; [`batch`] owns the JSONL
//! files of a batch.
//!
//! # Key types
//! - [`Extractor`]: a model, its vocabulary and a prepared [`Constraint`] (schema, JSON,
//!   regex, grammar or tools), run over documents under an [`ExtractConfig`] ([`Mode`]:
//!   constrained, or the prompt / retry baselines).
//! - [`RecordResult`]: one document's outcome, whose [`RecordStatus`] (ok, refusal, invalid,
//!   incomplete, error) says how it ended: not an error.
//! - [`eval::run::EvalConfig`] and [`eval::run::Backend`]: one configuration of an eval and
//!   what answers its attempts; [`eval::report`] turns results into verdicts.
//! - [`ExtractError`]: bad inputs around the schema, tools or files.
//!
//! Each module may use only the modules before it (checked by the root package's `layering`
//! test); [`run`] is the extraction driver over all of them, [`eval`] sits on top:
//!
//! Layers: `validate` → `prompt` → `tools` → `batch` → `grounded` → `compose` → `run` → `eval`.
//!
//! # Usage
//! One extraction, with a fake model that prefers `}` then `5` (any
//! [`LogitsSource`](formwork_core::LogitsSource) works; `formwork-model` has real ones):
//! ```
//! use std::sync::Arc;
//! use formwork_core::generate::testing::FixedLogits;
//! use formwork_core::toktrie::SyntheticVocab;
//! use formwork_core::{TokenId, Vocab};
//! use formwork_extract::{ChatEncoder, Constraint, ExtractConfig, Extractor, RecordStatus};
//!
//! let vocab = Arc::new(SyntheticVocab::byte_level());
//! let model = FixedLogits::preferring(vocab.vocab_len(), [u32::from(b'}'), u32::from(b'5')]);
//! // (system, user) → prompt ids; a real one applies the model's chat template.
//! let encode: ChatEncoder = Arc::new(|_, user| Ok(user.bytes().map(u32::from).collect()));
//! let schema = serde_json::json!({
//!     "type": "object",
//!     "properties": {"done_lessons": {"type": "integer"}},
//!     "required": ["done_lessons"],
//!     "additionalProperties": false
//! });
//! let constraint = Constraint::Schema(schema);
//! let eos = vec![TokenId(256)];
//! let mut ex = Extractor::new(model, vocab, encode, eos, &constraint, ExtractConfig::default())?;
//! let r = ex.extract("doc-1", "The course has 5 lessons done.", &mut |_| {});
//! assert_eq!(r.status, RecordStatus::Ok);
//! assert_eq!(r.output, Some(serde_json::json!({"done_lessons": 5})));
//! # Ok::<(), formwork_extract::ExtractError>(())
//! ```

#![warn(missing_debug_implementations)]
#![deny(missing_docs)]

pub mod batch;
pub mod compose;
pub mod eval;
pub mod grounded;
pub mod prompt;
pub mod run;
pub mod tools;
pub mod validate;

pub use batch::{RecordResult, RecordStatus};
pub use run::{ChatEncoder, Constraint, ExtractConfig, Extractor, Mode, Prepared};

use std::path::PathBuf;

/// An error of the extraction stage: bad inputs around the schema, tools or files.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExtractError {
    /// A grounded-field marker or `--grounded` pointer is unusable.
    #[error("bad grounded field at {pointer}: {message}")]
    Grounded {
        /// JSON pointer into the schema.
        pointer: String,
        /// What is wrong.
        message: String,
    },
    /// The tools file is not a usable list of tool definitions.
    #[error("bad tools file at {}: {message}", if pointer.is_empty() { "/" } else { pointer })]
    Tools {
        /// JSON pointer into the tools document.
        pointer: String,
        /// What is wrong.
        message: String,
    },
    /// A file could not be read.
    #[error("cannot read {}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A JSON input file does not parse.
    #[error("{}:{line}:{column}: malformed JSON: {message}", path.display())]
    Json {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// What serde_json said.
        message: String,
    },
    /// The chat template could not encode the prompt.
    #[error("cannot encode the prompt with the chat template")]
    Encode(#[source] formwork_core::SourceError),
    /// Options that cannot be used together (for example thinking with a baseline mode).
    #[error("{0}")]
    Config(String),
    /// The prompt template is malformed.
    #[error(transparent)]
    Template(#[from] prompt::TemplateError),
    /// The schema is rejected by the validator (`jsonschema`).
    #[error("invalid schema: {0}")]
    InvalidSchema(#[from] validate::InvalidSchema),
    /// The engine failed: compiling the schema (with its JSON pointer), building or compiling
    /// the composed grammar, or decoding.
    #[error(transparent)]
    Engine(#[from] formwork_core::Error),
}

/// Each engine stage's error is an [`ExtractError::Engine`].
macro_rules! from_engine {
    ($($stage:ty),*) => {$(
        impl From<$stage> for ExtractError {
            fn from(e: $stage) -> Self {
                ExtractError::Engine(e.into())
            }
        }
    )*};
}
from_engine!(
    formwork_core::SchemaError,
    formwork_core::GrammarError,
    formwork_core::grammar::gbnf::GbnfError,
    formwork_core::grammar::regex::RegexError,
    formwork_core::MatcherError,
    formwork_core::SamplerError,
    formwork_core::GenerateError
);

/// Reads and parses a JSON file; errors carry the path and line:column.
pub fn read_json(path: &std::path::Path) -> Result<serde_json::Value, ExtractError> {
    let text = std::fs::read_to_string(path).map_err(|source| ExtractError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    serde_json::from_str(&text).map_err(|e| ExtractError::Json {
        path: path.to_path_buf(),
        line: e.line(),
        column: e.column(),
        message: e.to_string(),
    })
}
