//! Plain data around loading: the load options ([`ModelConfig`], [`Backend`]) and what loading
//! reports ([`LoadStats`], and the tokenizer facts of the GGUF metadata, [`TokenInfo`]).

use std::collections::HashMap;
use std::time::Duration;

/// Which forward pass runs the model.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Backend {
    /// formwork's own forward pass and quantized kernels (`model::forward`,
    /// `model::kernels`): the fast path.
    #[default]
    Native,
    /// The forward pass composed of candle ops and candle's quantized matmuls: the reference
    /// the native path is tested against.
    Candle,
}

/// Load options for [`Model::load_with`].
#[derive(Clone, Debug)]
pub struct ModelConfig {
    requantize: bool,
    max_context: Option<usize>,
    backend: Backend,
    profile: bool,
}

impl Default for ModelConfig {
    fn default() -> Self {
        Self {
            requantize: true,
            max_context: None,
            backend: Backend::Native,
            profile: false,
        }
    }
}

impl ModelConfig {
    /// Default options.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether Q4_1/Q5_0/Q5_1 matrices are requantized to Q8_0 at load, for the
    /// [`Backend::Candle`] path only. Default `true`: candle's kernels for those formats are
    /// scalar, Q8_0's use AVX2 (see the module docs for the measured gain). Turn off to run
    /// the file's exact weights. The native backend always runs the file's formats: its
    /// kernels handle them directly, and fewer bytes per weight is what decode is bound by.
    pub fn requantize(mut self, yes: bool) -> Self {
        self.requantize = yes;
        self
    }

    /// Caps the context length below the model's trained one. Default `None` (the GGUF's
    /// `context_length`). Memory is only spent on positions actually fed, so this is a limit,
    /// not a reservation.
    pub fn max_context(mut self, limit: Option<usize>) -> Self {
        self.max_context = limit;
        self
    }

    /// Which forward pass runs. Default [`Backend::Native`]; [`Backend::Candle`] is the
    /// reference path (slower, supports any format candle does).
    pub fn backend(mut self, backend: Backend) -> Self {
        self.backend = backend;
        self
    }

    /// Times each op of the native forward pass ([`Model::profile`]). Default `false`: the
    /// timer costs two clock reads per op (~60 per layer), negligible but not free.
    pub fn profile(mut self, yes: bool) -> Self {
        self.profile = yes;
        self
    }

    /// See [`backend`](Self::backend).
    pub fn get_backend(&self) -> Backend {
        self.backend
    }

    /// See [`profile`](Self::profile).
    pub fn get_profile(&self) -> bool {
        self.profile
    }

    /// See [`requantize`](Self::requantize).
    pub fn get_requantize(&self) -> bool {
        self.requantize
    }

    /// See [`max_context`](Self::max_context).
    pub fn get_max_context(&self) -> Option<usize> {
        self.max_context
    }
}

/// What loading did: useful for benches and `--verbose` output.
#[derive(Clone, Debug, Default)]
pub struct LoadStats {
    /// Matrices requantized to Q8_0.
    pub requantized: usize,
    /// Wall time of the whole load.
    pub elapsed: Duration,
}

/// Tokenizer facts read from the GGUF metadata that the runtime's callers need.
#[derive(Clone, Debug, Default)]
pub struct TokenInfo {
    /// `tokenizer.ggml.bos_token_id`.
    pub bos: Option<u32>,
    /// `tokenizer.ggml.eos_token_id`.
    pub eos: Option<u32>,
    /// `tokenizer.ggml.eot_token_id` (end of turn), when present.
    pub eot: Option<u32>,
    /// Whether a BOS token is prepended to prompts (`tokenizer.ggml.add_bos_token`).
    pub add_bos: bool,
    /// Control and user-defined tokens by text (e.g. `<|im_end|>` → 2).
    pub special: HashMap<String, u32>,
    /// `tokenizer.chat_template`, the Jinja source, when present.
    pub chat_template: Option<String>,
}
