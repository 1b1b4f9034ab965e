//! `ModelError`: everything that can go wrong finding, loading and running a model.
//!
//! Owns the error type of the `model` stage only. Each variant carries the path, metadata key
//! or tensor it is about, so the CLI can print one clear line.

use std::path::PathBuf;

/// An error of the model stage (GGUF reading, runtime).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ModelError {
    /// A file-system operation failed.
    #[error("{action} {}: {source}", path.display())]
    Io {
        /// What was being done ("open", "read", ...).
        action: &'static str,
        /// The path it was done to.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },

    /// The file is not a readable GGUF file (truncated, corrupt, or not GGUF at all).
    #[error("invalid gguf file {}: {message}", path.display())]
    InvalidGguf {
        /// The file.
        path: PathBuf,
        /// What the reader reported.
        message: String,
    },

    /// A GGUF metadata key is missing or has the wrong type.
    #[error("gguf metadata `{key}`: {problem}")]
    Metadata {
        /// The metadata key.
        key: String,
        /// What is wrong ("missing", "expected a string array", ...).
        problem: String,
    },

    /// The GGUF's `general.architecture` is not one formwork runs.
    #[error("unsupported architecture `{architecture}` in {} (supported: llama, qwen2, gemma3)", path.display())]
    UnsupportedArchitecture {
        /// The architecture named in the file.
        architecture: String,
        /// The file.
        path: PathBuf,
    },

    /// A tensor the architecture needs is missing or has an unexpected shape.
    #[error("bad tensor `{name}` in {}: {problem}", path.display())]
    BadTensor {
        /// The tensor name, e.g. `blk.0.attn_q.weight`.
        name: String,
        /// The file.
        path: PathBuf,
        /// What is wrong.
        problem: String,
    },

    /// `Model::forward` was called with no tokens.
    #[error("no tokens to feed")]
    EmptyInput,

    /// `Model::forward` was called at a position past the cached prefix.
    #[error("cannot feed at position {pos}: only {cached} positions are cached")]
    PositionGap {
        /// The requested position of the first token.
        pos: usize,
        /// The number of cached positions.
        cached: usize,
    },

    /// Feeding the tokens would exceed the model's context length.
    #[error("context overflow: {needed} positions needed, the model supports {limit}")]
    ContextOverflow {
        /// Positions needed after this call.
        needed: usize,
        /// The model's context length.
        limit: usize,
    },

    /// A token id is outside the model's embedding table.
    #[error("token id {token} is outside the model's vocabulary of {vocab_len}")]
    TokenOutOfRange {
        /// The token id.
        token: u32,
        /// The number of embedding rows.
        vocab_len: usize,
    },

    /// A tensor operation failed inside candle.
    #[error("inference failed in {step}: {source}")]
    Inference {
        /// The step, e.g. `load blk.3.ffn_up.weight` or `forward`.
        step: String,
        /// Candle's error.
        #[source]
        source: candle_core::Error,
    },
}
