//! [`Model`]: a decoder-only transformer loaded from a GGUF file and run on candle's CPU backend.
//!
//! Owns the weights, the per-layer KV cache, the rotary tables and the forward pass for the three
//! supported families: llama (SmolLM2), qwen2 (Qwen2.5) and gemma3. It does *not* own the
//! tokenizer (`model::tokenizer`), the sampler (`formwork_core::sampler`) or chat templates
//! (`model::chat`).
//!
//! Two forward passes share the loader, the validation in [`Model::forward`] and the public
//! API ([`Backend`]): the native one (`model::forward` on `model::kernels`, the default) and
//! the candle-op one kept here as the reference the native path is tested against. Both cover
//! the three families; they differ only in data read from the GGUF metadata (biases on q/k/v,
//! q/k norms, post-norms, rotary layout, activation, sliding window). candle-transformers' own
//! `quantized_*` models are not used because (in 0.11) gemma3 allocates 131,072-position
//! rotary tables per layer (~2.3 GiB), mixes dtypes when several tokens follow a cached
//! prefix, uses SiLU where Gemma 3 uses tanh-GELU, and none of them let the loader requantize
//! tensors.
//!
//! The loader reads an architecture's facts from its one `ArchSpec` row and hands both passes
//! the same `forward::Hparams` (sizes and those facts: data, not numerics); the reference keeps
//! its own numerics (candle ops, attention, rotary tables, the embedding scale in f64), so it
//! checks the native kernels rather than sharing code with them.
//!
//! # Invariants
//! - `cached_len()` positions are in every layer's KV cache; `forward(tokens, pos)` accepts any
//!   `pos <= cached_len()` (a smaller `pos` truncates the cache first: rollback is free).
//! - Logits have `vocab_len()` entries (the output matrix rows), which may exceed the
//!   tokenizer's vocabulary (padding rows).
//!
//! # Costs
//! - Load: reading the file. The native backend keeps every matrix in its file format
//!   (SmolLM2-135M Q4_1: ~98 MB of weights, the file size); the candle backend by default
//!   requantizes Q4_1/Q5_0/Q5_1 to Q8_0 (about 1 s for SmolLM2-135M on 2 cores), because
//!   candle's kernels for those formats are scalar. See `docs/inference.md` for where the
//!   time of a forward pass goes.
//! - Batches ([`Model::forward_batch`], [`Sequence`]): one pass for `B` sequences reads the
//!   weights once; each sequence costs its own KV cache (as below) and attention over it.
//!   Aggregate decode throughput at batch 8 is 2.6–6× the single-sequence figure depending
//!   on the 1-token kernel, see `docs/inference.md`, "Batched decoding".
//! - Memory: weights stay quantized, including the embedding table (rows are dequantized on
//!   lookup); the KV cache grows by doubling, `2 · layers · kv_heads · head_dim · 4` bytes per
//!   position; the native scratch buffers grow to the largest number of tokens fed in one
//!   call (about `t · (hidden · 2 + qkv + 3 · ffn) · 4` bytes).
//!
//! May use: `error`, `gguf`, `kernels`, `forward`.

use std::collections::HashMap;
use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use candle_core::quantized::{gguf_file, GgmlDType, QMatMul, QTensor};
use candle_core::{DType, Device, Module, Tensor};

use crate::error::{candle_message, ModelError};
use crate::forward::{Act, Hparams, LayerWeights, Native, Profile, RopeTable, SeqCache};
use crate::gguf;
use crate::kernels::{Format, QMatrix};

/// The model families formwork can run, read from `general.architecture`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Architecture {
    /// Llama and its derivatives (SmolLM2): interleaved rotary, SiLU MLP.
    Llama,
    /// Qwen2 / Qwen2.5: q/k/v biases, split-half (NeoX) rotary, SiLU MLP.
    Qwen2,
    /// Gemma 3: q/k norms, post-norms, tanh-GELU MLP, scaled embeddings, sliding-window layers.
    Gemma3,
}

impl Architecture {
    /// Every supported architecture.
    const ALL: [Architecture; 3] = [Self::Llama, Self::Qwen2, Self::Gemma3];

    /// The architecture for a GGUF `general.architecture` value, if supported.
    pub fn from_gguf_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|a| a.spec().gguf_name == name)
    }

    /// The GGUF name (also the metadata key prefix).
    pub fn as_str(self) -> &'static str {
        self.spec().gguf_name
    }

    /// This architecture's row of facts, the one place they are written (see [`ArchSpec`]).
    fn spec(self) -> ArchSpec {
        match self {
            Self::Llama => ArchSpec {
                gguf_name: "llama",
                act: Act::Silu,
                rope_interleaved: true,
                rope_base: 10_000.0,
                sliding: None,
                scaled_embeddings: false,
            },
            Self::Qwen2 => ArchSpec {
                gguf_name: "qwen2",
                act: Act::Silu,
                rope_interleaved: false,
                rope_base: 10_000.0,
                sliding: None,
                scaled_embeddings: false,
            },
            Self::Gemma3 => ArchSpec {
                gguf_name: "gemma3",
                act: Act::GeluTanh,
                rope_interleaved: false,
                rope_base: 1_000_000.0,
                sliding: Some(Sliding {
                    pattern: 6,
                    local_rope_base: 10_000.0,
                }),
                scaled_embeddings: true,
            },
        }
    }
}

/// What the loader knows about an architecture beyond its GGUF metadata: one row per
/// [`Architecture`] ([`Architecture::spec`]), read by [`Model::load_with`] for both forward
/// passes. Sizes, the norm epsilon and which optional tensors exist (q/k/v biases, q/k norms,
/// post-norms) come from the file; defaults here apply only where the file is silent.
#[derive(Clone, Copy, Debug)]
struct ArchSpec {
    /// `general.architecture`, also the prefix of the architecture's metadata keys.
    gguf_name: &'static str,
    /// The MLP gate's activation.
    act: Act,
    /// Llama GGUFs store q/k permuted for interleaved pairs (2i, 2i+1); qwen2 and gemma3 use
    /// split halves (i, i + d/2), matching llama.cpp's `LLAMA_ROPE_TYPE_NORM` / `NEOX`.
    rope_interleaved: bool,
    /// The rotary base when the file has no `rope.freq_base`.
    rope_base: f32,
    /// Sliding-window (local) layers between the global ones (Gemma 3).
    sliding: Option<Sliding>,
    /// Embeddings are multiplied by sqrt(hidden) (Gemma).
    scaled_embeddings: bool,
}

/// How an architecture mixes sliding-window layers with global ones: the defaults of the
/// metadata that says so. The window itself (`attention.sliding_window`) must be in the file.
#[derive(Clone, Copy, Debug)]
struct Sliding {
    /// One global layer every `pattern` layers when the file has no
    /// `attention.sliding_window_type`.
    pattern: usize,
    /// The local layers' rotary base (unscaled) when the file has no `rope.local_freq_base`.
    local_rope_base: f32,
}

impl std::fmt::Display for Architecture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

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

/// A matrix with an optional bias (qwen2's q/k/v projections).
#[derive(Debug)]
struct Linear {
    weight: QMatMul,
    bias: Option<Tensor>,
}

impl Linear {
    fn forward(&self, xs: &Tensor) -> candle_core::Result<Tensor> {
        let ys = self.weight.forward(xs)?;
        match &self.bias {
            Some(b) => ys.broadcast_add(b),
            None => Ok(ys),
        }
    }
}

/// Per-layer key/value cache: for each KV head, `len · head_dim` floats, position-major.
///
/// Plain vectors rather than tensors: appending is an `extend`, truncation (rollback) is a
/// `truncate`, and [`attend`] reads them directly.
#[derive(Debug, Default)]
struct KvCache {
    /// `k[g]`: the keys of KV head `g`, `len × head_dim`.
    k: Vec<Vec<f32>>,
    /// `v[g]`: the values of KV head `g`, `len × head_dim`.
    v: Vec<Vec<f32>>,
    len: usize,
}

impl KvCache {
    /// Appends `t` positions: `k` is `[kv_head][t][head_dim]`, `v` is `[t][kv_head][head_dim]`
    /// (the layouts the projections produce without a transpose).
    fn append(&mut self, k: &[f32], v: &[f32], t: usize, n_kv_head: usize, head_dim: usize) {
        if self.k.len() != n_kv_head {
            self.k = vec![Vec::new(); n_kv_head];
            self.v = vec![Vec::new(); n_kv_head];
        }
        for g in 0..n_kv_head {
            self.k[g].extend_from_slice(&k[g * t * head_dim..(g + 1) * t * head_dim]);
            for i in 0..t {
                let row = (i * n_kv_head + g) * head_dim;
                self.v[g].extend_from_slice(&v[row..row + head_dim]);
            }
        }
        self.len += t;
    }

    fn truncate(&mut self, len: usize, head_dim: usize) {
        if len < self.len {
            for buf in self.k.iter_mut().chain(self.v.iter_mut()) {
                buf.truncate(len * head_dim);
            }
            self.len = len;
        }
    }
}

/// Rotary cos/sin tables for one frequency base, computed lazily up to the positions used.
#[derive(Debug)]
struct Rope {
    base: f64,
    /// Position multiplier (1 / linear scaling factor).
    scale: f64,
    dim: usize,
    cos: Tensor,
    sin: Tensor,
    len: usize,
}

impl Rope {
    fn new(base: f64, scale: f64, dim: usize) -> candle_core::Result<Self> {
        let empty = Tensor::zeros((0, dim / 2), DType::F32, &Device::Cpu)?;
        Ok(Self {
            base,
            scale,
            dim,
            cos: empty.clone(),
            sin: empty,
            len: 0,
        })
    }

    /// Makes the tables cover positions `0..needed` (grows to the next power of two).
    fn ensure(&mut self, needed: usize) -> candle_core::Result<()> {
        if needed <= self.len {
            return Ok(());
        }
        let len = needed.next_power_of_two().max(256);
        let half = self.dim / 2;
        let inv_freq: Vec<f64> = (0..half)
            .map(|i| 1.0 / self.base.powf((2 * i) as f64 / self.dim as f64))
            .collect();
        let mut cos = Vec::with_capacity(len * half);
        let mut sin = Vec::with_capacity(len * half);
        for p in 0..len {
            for f in &inv_freq {
                let angle = p as f64 * self.scale * f;
                cos.push(angle.cos() as f32);
                sin.push(angle.sin() as f32);
            }
        }
        self.cos = Tensor::from_vec(cos, (len, half), &Device::Cpu)?;
        self.sin = Tensor::from_vec(sin, (len, half), &Device::Cpu)?;
        self.len = len;
        Ok(())
    }
}

#[derive(Debug)]
struct Layer {
    attn_norm: Tensor,
    q: Linear,
    k: Linear,
    v: Linear,
    o: QMatMul,
    q_norm: Option<Tensor>,
    k_norm: Option<Tensor>,
    post_attn_norm: Option<Tensor>,
    ffn_norm: Tensor,
    gate: QMatMul,
    up: QMatMul,
    down: QMatMul,
    post_ffn_norm: Option<Tensor>,
    /// Index into `Model::ropes`.
    rope: usize,
    /// Sliding-window size for local-attention layers (gemma3).
    window: Option<usize>,
    cache: KvCache,
}

/// The candle-op forward pass's weights and state ([`Backend::Candle`]).
#[derive(Debug)]
struct CandleNet {
    /// The embedding table, kept quantized; rows are dequantized on lookup.
    embed: Arc<QTensor>,
    layers: Vec<Layer>,
    norm: Tensor,
    output: QMatMul,
    ropes: Vec<Rope>,
}

#[derive(Debug)]
enum Engine {
    Candle(CandleNet),
    Native(Box<Native>),
}

/// A loaded model: weights, KV cache and forward pass. See the module docs.
#[derive(Debug)]
pub struct Model {
    /// Distinguishes this model's [`Sequence`]s from other models' (unique per process).
    id: u64,
    arch: Architecture,
    path: PathBuf,
    /// Sizes and per-architecture facts, shared by both forward passes (the native one
    /// holds its own copy).
    hp: Hparams,
    embed_rows: usize,
    engine: Engine,
    vocab_len: usize,
    context_len: usize,
    cached: usize,
    tokens: TokenInfo,
    stats: LoadStats,
}

/// Reads tensors and metadata out of one open GGUF file.
struct Loader {
    path: PathBuf,
    content: gguf_file::Content,
    reader: BufReader<File>,
    arch: Architecture,
    requantize: bool,
    requantized: usize,
}

fn corrupt(path: &Path, message: impl Into<String>) -> ModelError {
    ModelError::InvalidGguf {
        path: path.to_path_buf(),
        message: message.into(),
    }
}

impl Loader {
    fn open(path: &Path, config: &ModelConfig) -> Result<Self, ModelError> {
        let io_err = |action| {
            move |source| ModelError::Io {
                action,
                path: path.to_path_buf(),
                source,
            }
        };
        let file = File::open(path).map_err(io_err("open"))?;
        let file_len = file.metadata().map_err(io_err("read"))?.len();
        let mut reader = BufReader::new(file);
        // Every count and length in the header is checked against the file before candle's
        // reader allocates from it (see `gguf`).
        let content = gguf::read_header(&mut reader, file_len, path)?;
        // candle reads tensor data lazily; check every tensor lies inside the file now, so a
        // truncated download fails at load with a clear message instead of mid-way.
        for (name, info) in &content.tensor_infos {
            let Some(elems) = info
                .shape
                .dims()
                .iter()
                .try_fold(1usize, |n, &d| n.checked_mul(d))
            else {
                return Err(corrupt(
                    path,
                    format!(
                        "tensor `{name}` has an impossible shape {:?}",
                        info.shape.dims()
                    ),
                ));
            };
            let block = info.ggml_dtype.block_size();
            if elems % block != 0 {
                return Err(corrupt(
                    path,
                    format!("tensor `{name}` has {elems} elements, not a multiple of {block}"),
                ));
            }
            let bytes = (elems / block) as u64 * info.ggml_dtype.type_size() as u64;
            let end = content
                .tensor_data_offset
                .checked_add(info.offset)
                .and_then(|s| s.checked_add(bytes));
            if end.is_none_or(|end| end > file_len) {
                return Err(corrupt(
                    path,
                    format!("truncated: tensor `{name}` extends past the end of the file ({file_len} bytes)"),
                ));
            }
        }
        let arch_name = match content.metadata.get("general.architecture") {
            Some(v) => v
                .to_string()
                .map_err(|_| corrupt(path, "`general.architecture` is not a string"))?
                .clone(),
            None => {
                return Err(ModelError::Metadata {
                    key: "general.architecture".into(),
                    problem: "missing".into(),
                })
            }
        };
        let arch = Architecture::from_gguf_name(&arch_name).ok_or_else(|| {
            ModelError::UnsupportedArchitecture {
                architecture: arch_name.clone(),
                path: path.to_path_buf(),
            }
        })?;
        Ok(Self {
            path: path.to_path_buf(),
            content,
            reader,
            arch,
            // The native kernels read Q4_1/Q5_0 directly: requantizing would only cost memory
            // bandwidth (Q8_0 is 8.5 bits per weight against 5 and 5.5) and load time.
            requantize: config.requantize && config.backend == Backend::Candle,
            requantized: 0,
        })
    }

    fn value(&self, key: &str) -> Option<&gguf_file::Value> {
        self.content.metadata.get(key)
    }

    fn missing(&self, key: &str) -> ModelError {
        ModelError::Metadata {
            key: key.to_string(),
            problem: format!("missing or invalid in {}", self.path.display()),
        }
    }

    /// `{arch}.{suffix}` as a u32.
    fn arch_u32(&self, suffix: &str) -> Result<usize, ModelError> {
        let key = format!("{}.{suffix}", self.arch.as_str());
        self.value(&key)
            .and_then(|v| v.to_u32().ok())
            .map(|v| v as usize)
            .ok_or_else(|| self.missing(&key))
    }

    fn arch_u32_opt(&self, suffix: &str) -> Option<usize> {
        let key = format!("{}.{suffix}", self.arch.as_str());
        self.value(&key)
            .and_then(|v| v.to_u32().ok())
            .map(|v| v as usize)
    }

    fn arch_f32_opt(&self, suffix: &str) -> Option<f32> {
        let key = format!("{}.{suffix}", self.arch.as_str());
        self.value(&key).and_then(|v| v.to_f32().ok())
    }

    fn has_tensor(&self, name: &str) -> bool {
        self.content.tensor_infos.contains_key(name)
    }

    fn qtensor(&mut self, name: &str) -> Result<QTensor, ModelError> {
        if !self.has_tensor(name) {
            return Err(self.bad_tensor(name, "missing"));
        }
        self.content
            .tensor(&mut self.reader, name, &Device::Cpu)
            .map_err(|e| ModelError::Inference {
                step: format!("load {name}"),
                message: candle_message(&e),
            })
    }

    fn bad_tensor(&self, name: &str, problem: impl Into<String>) -> ModelError {
        ModelError::BadTensor {
            name: name.to_string(),
            path: self.path.clone(),
            problem: problem.into(),
        }
    }

    /// A 1-D f32 tensor (norm weights, biases) of length `len`.
    fn vector(&mut self, name: &str, len: usize) -> Result<Tensor, ModelError> {
        let t = self.qtensor(name)?;
        let t = t
            .dequantize(&Device::Cpu)
            .map_err(|e| ModelError::Inference {
                step: format!("dequantize {name}"),
                message: candle_message(&e),
            })?;
        if t.dims() != [len] {
            return Err(self.bad_tensor(name, format!("shape {:?}, expected [{len}]", t.dims())));
        }
        Ok(t)
    }

    fn check_matrix(
        &self,
        name: &str,
        t: &QTensor,
        rows: usize,
        cols: usize,
    ) -> Result<(), ModelError> {
        if t.shape().dims() != [rows, cols] {
            return Err(self.bad_tensor(
                name,
                format!("shape {:?}, expected [{rows}, {cols}]", t.shape().dims()),
            ));
        }
        Ok(())
    }

    /// Q4_1/Q5_0/Q5_1 → Q8_0 when requantization is on; other formats pass through.
    fn maybe_requantize(&mut self, name: &str, t: QTensor) -> Result<QTensor, ModelError> {
        if !self.requantize
            || !matches!(
                t.dtype(),
                GgmlDType::Q4_1 | GgmlDType::Q5_0 | GgmlDType::Q5_1
            )
        {
            return Ok(t);
        }
        let step = || format!("requantize {name}");
        let f = t
            .dequantize(&Device::Cpu)
            .map_err(|e| ModelError::Inference {
                step: step(),
                message: candle_message(&e),
            })?;
        let q = QTensor::quantize(&f, GgmlDType::Q8_0).map_err(|e| ModelError::Inference {
            step: step(),
            message: candle_message(&e),
        })?;
        self.requantized += 1;
        Ok(q)
    }

    /// A weight matrix of shape `[rows, cols]` (output × input), ready for matmul.
    fn matrix(&mut self, name: &str, rows: usize, cols: usize) -> Result<QMatMul, ModelError> {
        let t = self.qtensor(name)?;
        self.check_matrix(name, &t, rows, cols)?;
        let t = self.maybe_requantize(name, t)?;
        QMatMul::from_qtensor(t).map_err(|e| ModelError::Inference {
            step: format!("prepare {name}"),
            message: candle_message(&e),
        })
    }

    /// A weight matrix's raw blocks for the native kernels (requantized like
    /// [`matrix`](Self::matrix) when that is on).
    fn raw_matrix(
        &mut self,
        name: &str,
        rows: usize,
        cols: usize,
    ) -> Result<(Format, Vec<u8>), ModelError> {
        let t = self.qtensor(name)?;
        self.check_matrix(name, &t, rows, cols)?;
        let t = self.maybe_requantize(name, t)?;
        self.raw(name, &t)
    }

    fn raw(&self, name: &str, t: &QTensor) -> Result<(Format, Vec<u8>), ModelError> {
        let format = match t.dtype() {
            GgmlDType::Q4_1 => Format::Q4_1,
            GgmlDType::Q5_0 => Format::Q5_0,
            GgmlDType::Q8_0 => Format::Q8_0,
            GgmlDType::Q4K => Format::Q4K,
            GgmlDType::Q6K => Format::Q6K,
            other => {
                return Err(self.bad_tensor(
                    name,
                    format!("format {other:?} has no native kernel (load with the candle backend)"),
                ))
            }
        };
        let bytes = t.data().map_err(|e| ModelError::Inference {
            step: format!("read {name}"),
            message: candle_message(&e),
        })?;
        Ok((format, bytes.into_owned()))
    }

    /// Several matrices with the same column count stacked by rows into one [`QMatrix`].
    fn stacked(&mut self, parts: &[(&str, usize)], cols: usize) -> Result<QMatrix, ModelError> {
        let mut out: Option<QMatrix> = None;
        for &(name, rows) in parts {
            let (format, bytes) = self.raw_matrix(name, rows, cols)?;
            let res = match &mut out {
                Some(m) => m.stack(format, rows, cols, bytes),
                None => QMatrix::new(format, rows, cols, bytes).map(|m| out = Some(m)),
            };
            res.map_err(|e| self.bad_tensor(name, e.to_string()))?;
        }
        out.ok_or_else(|| self.bad_tensor("(stack)", "no tensors"))
    }

    fn vec_f32(&mut self, name: &str, len: usize) -> Result<Vec<f32>, ModelError> {
        self.vector(name, len)?
            .to_vec1::<f32>()
            .map_err(|e| ModelError::Inference {
                step: format!("read {name}"),
                message: candle_message(&e),
            })
    }

    fn optional_vec_f32(&mut self, name: &str, len: usize) -> Result<Option<Vec<f32>>, ModelError> {
        if self.has_tensor(name) {
            self.vec_f32(name, len).map(Some)
        } else {
            Ok(None)
        }
    }

    fn linear(&mut self, prefix: &str, rows: usize, cols: usize) -> Result<Linear, ModelError> {
        let weight = self.matrix(&format!("{prefix}.weight"), rows, cols)?;
        let bias_name = format!("{prefix}.bias");
        let bias = if self.has_tensor(&bias_name) {
            Some(self.vector(&bias_name, rows)?)
        } else {
            None
        };
        Ok(Linear { weight, bias })
    }

    fn optional_vector(&mut self, name: &str, len: usize) -> Result<Option<Tensor>, ModelError> {
        if self.has_tensor(name) {
            self.vector(name, len).map(Some)
        } else {
            Ok(None)
        }
    }

    fn token_info(&self) -> TokenInfo {
        let u32_of = |k: &str| self.value(k).and_then(|v| v.to_u32().ok());
        let mut special = HashMap::new();
        if let (Some(Ok(tokens)), Some(Ok(types))) = (
            self.value("tokenizer.ggml.tokens").map(|v| v.to_vec()),
            self.value("tokenizer.ggml.token_type").map(|v| v.to_vec()),
        ) {
            for (id, (tok, ty)) in tokens.iter().zip(types.iter()).enumerate() {
                // GGUF token types: 3 = control, 4 = user-defined (llama.cpp's llama_token_type).
                let ty = ty.to_i32().unwrap_or(1);
                if ty == 3 || ty == 4 {
                    if let Ok(text) = tok.to_string() {
                        special.insert(text.clone(), id as u32);
                    }
                }
            }
        }
        TokenInfo {
            bos: u32_of("tokenizer.ggml.bos_token_id"),
            eos: u32_of("tokenizer.ggml.eos_token_id"),
            eot: u32_of("tokenizer.ggml.eot_token_id"),
            add_bos: self
                .value("tokenizer.ggml.add_bos_token")
                .and_then(|v| v.to_bool().ok())
                .unwrap_or(false),
            special,
            chat_template: self
                .value("tokenizer.chat_template")
                .and_then(|v| v.to_string().ok())
                .cloned(),
        }
    }
}

impl Model {
    /// Loads a GGUF file with default options (requantization on).
    pub fn load(path: impl AsRef<Path>) -> Result<Self, ModelError> {
        Self::load_with(path, &ModelConfig::default())
    }

    /// Loads a GGUF file.
    ///
    /// # Errors
    /// [`ModelError::Io`] if the file cannot be read, [`ModelError::InvalidGguf`] if it is not
    /// a complete GGUF file, [`ModelError::UnsupportedArchitecture`] for anything but
    /// llama/qwen2/gemma3, [`ModelError::Metadata`] / [`ModelError::BadTensor`] if the
    /// file lacks what its architecture needs.
    pub fn load_with(path: impl AsRef<Path>, config: &ModelConfig) -> Result<Self, ModelError> {
        let start = Instant::now();
        let mut ld = Loader::open(path.as_ref(), config)?;
        let arch = ld.arch;
        let hidden = ld.arch_u32("embedding_length")?;
        let n_layer = ld.arch_u32("block_count")?;
        let ffn = ld.arch_u32("feed_forward_length")?;
        let n_head = ld.arch_u32("attention.head_count")?;
        let n_kv_head = ld.arch_u32_opt("attention.head_count_kv").unwrap_or(n_head);
        if n_head == 0 || n_kv_head == 0 || n_head % n_kv_head != 0 {
            return Err(ld.missing(&format!("{arch}.attention.head_count_kv")));
        }
        let head_dim = match ld.arch_u32_opt("attention.key_length") {
            Some(d) => d,
            None if hidden % n_head == 0 => hidden / n_head,
            None => return Err(ld.missing(&format!("{arch}.attention.key_length"))),
        };
        if head_dim % 2 != 0 {
            return Err(ld.missing(&format!("{arch}.attention.key_length")));
        }
        let eps = ld
            .arch_f32_opt("attention.layer_norm_rms_epsilon")
            .ok_or_else(|| ld.missing(&format!("{arch}.attention.layer_norm_rms_epsilon")))?;
        let mut context_len = ld.arch_u32_opt("context_length").unwrap_or(4096);
        if let Some(cap) = config.max_context {
            context_len = context_len.min(cap);
        }
        let rope_scale = match ld.arch_f32_opt("rope.scaling.factor") {
            Some(f) if f > 0.0 => 1.0 / f as f64,
            _ => 1.0,
        };
        let spec = arch.spec();
        let base = ld.arch_f32_opt("rope.freq_base").unwrap_or(spec.rope_base) as f64;
        // Rotary bases: the global one, and for Gemma 3 the local one used by its five
        // sliding-window layers per global layer (no scaling there).
        let mut rope_params = vec![(base, rope_scale)];
        let sliding = match spec.sliding {
            Some(defaults) => {
                let window = ld.arch_u32("attention.sliding_window")?;
                let pattern = ld
                    .arch_u32_opt("attention.sliding_window_type")
                    .unwrap_or(defaults.pattern)
                    .max(1);
                let local_base = ld
                    .arch_f32_opt("rope.local_freq_base")
                    .unwrap_or(defaults.local_rope_base) as f64;
                rope_params.push((local_base, 1.0));
                Some((window, pattern))
            }
            None => None,
        };
        // (rope table, window) of layer `i`.
        let layer_kind = |i: usize| match sliding {
            Some((w, pattern)) if (i + 1) % pattern != 0 => (1, Some(w)),
            _ => (0, None),
        };
        let q_dim = n_head * head_dim;
        let kv_dim = n_kv_head * head_dim;
        let hp = Hparams {
            hidden,
            ffn,
            n_head,
            n_kv_head,
            head_dim,
            eps,
            rope_interleaved: spec.rope_interleaved,
            act: spec.act,
            embed_scale: spec.scaled_embeddings.then(|| (hidden as f32).sqrt()),
        };

        let embed = ld.qtensor("token_embd.weight")?;
        let embed_rows = match embed.shape().dims() {
            [rows, cols] if *cols == hidden => *rows,
            d => {
                return Err(ld.bad_tensor(
                    "token_embd.weight",
                    format!("shape {d:?}, expected [vocab, {hidden}]"),
                ))
            }
        };
        if hidden % embed.dtype().block_size() != 0 {
            return Err(ld.bad_tensor(
                "token_embd.weight",
                "row length not a multiple of the block size",
            ));
        }
        let output_rows = if ld.has_tensor("output.weight") {
            let info = &ld.content.tensor_infos["output.weight"];
            match info.shape.dims() {
                [rows, cols] if *cols == hidden => Some(*rows),
                d => {
                    return Err(ld.bad_tensor(
                        "output.weight",
                        format!("shape {d:?}, expected [vocab, {hidden}]"),
                    ))
                }
            }
        } else {
            None
        };
        let vocab_len = output_rows.unwrap_or(embed_rows);

        let engine = match config.backend {
            Backend::Native => {
                let (format, bytes) = ld.raw("token_embd.weight", &embed)?;
                drop(embed);
                let embed = QMatrix::new(format, embed_rows, hidden, bytes)
                    .map_err(|e| ld.bad_tensor("token_embd.weight", e.to_string()))?;
                let embed = Arc::new(embed);
                let output = match output_rows {
                    Some(rows) => Arc::new(ld.stacked(&[("output.weight", rows)], hidden)?),
                    // Tied embeddings: one table for lookup and logits (no requantization,
                    // which would double it).
                    None => embed.clone(),
                };
                let norm = ld.vec_f32("output_norm.weight", hidden)?;
                let mut layers = Vec::with_capacity(n_layer);
                for i in 0..n_layer {
                    let p = format!("blk.{i}");
                    let (rope, window) = layer_kind(i);
                    let n = |s: &str| format!("{p}.{s}");
                    let qkv_bias = if ld.has_tensor(&n("attn_q.bias")) {
                        let mut b = ld.vec_f32(&n("attn_q.bias"), q_dim)?;
                        b.extend(ld.vec_f32(&n("attn_k.bias"), kv_dim)?);
                        b.extend(ld.vec_f32(&n("attn_v.bias"), kv_dim)?);
                        Some(b)
                    } else {
                        None
                    };
                    let (wq, wk, wv) = (n("attn_q.weight"), n("attn_k.weight"), n("attn_v.weight"));
                    let (wg, wu) = (n("ffn_gate.weight"), n("ffn_up.weight"));
                    layers.push(LayerWeights {
                        attn_norm: ld.vec_f32(&n("attn_norm.weight"), hidden)?,
                        qkv: ld.stacked(&[(&wq, q_dim), (&wk, kv_dim), (&wv, kv_dim)], hidden)?,
                        qkv_bias,
                        o: ld.stacked(&[(&n("attn_output.weight"), hidden)], q_dim)?,
                        q_norm: ld.optional_vec_f32(&n("attn_q_norm.weight"), head_dim)?,
                        k_norm: ld.optional_vec_f32(&n("attn_k_norm.weight"), head_dim)?,
                        post_attn_norm: ld
                            .optional_vec_f32(&n("post_attention_norm.weight"), hidden)?,
                        ffn_norm: ld.vec_f32(&n("ffn_norm.weight"), hidden)?,
                        gate_up: ld.stacked(&[(&wg, ffn), (&wu, ffn)], hidden)?,
                        down: ld.stacked(&[(&n("ffn_down.weight"), hidden)], ffn)?,
                        post_ffn_norm: ld.optional_vec_f32(&n("post_ffw_norm.weight"), hidden)?,
                        rope,
                        window,
                    });
                }
                let ropes = rope_params
                    .iter()
                    .map(|&(b, s)| RopeTable::new(b, s, head_dim))
                    .collect();
                Engine::Native(Box::new(Native::new(
                    hp,
                    layers,
                    embed,
                    output,
                    norm,
                    ropes,
                    config.profile,
                )))
            }
            Backend::Candle => {
                let rope_err = |e| ModelError::Inference {
                    step: "rotary tables".into(),
                    message: candle_message(&e),
                };
                let ropes = rope_params
                    .iter()
                    .map(|&(b, s)| Rope::new(b, s, head_dim).map_err(rope_err))
                    .collect::<Result<Vec<_>, _>>()?;
                let embed = Arc::new(embed);
                let output = if output_rows.is_some() {
                    let t = ld.qtensor("output.weight")?;
                    let t = ld.maybe_requantize("output.weight", t)?;
                    QMatMul::from_qtensor(t)
                } else {
                    // Tied embeddings: share the table unless it needs requantizing.
                    let dt = embed.dtype();
                    if ld.requantize
                        && matches!(dt, GgmlDType::Q4_1 | GgmlDType::Q5_0 | GgmlDType::Q5_1)
                    {
                        let t = ld.qtensor("token_embd.weight")?;
                        let t = ld.maybe_requantize("token_embd.weight", t)?;
                        QMatMul::from_qtensor(t)
                    } else {
                        QMatMul::from_arc(embed.clone())
                    }
                };
                let output = output.map_err(|e| ModelError::Inference {
                    step: "prepare output.weight".into(),
                    message: candle_message(&e),
                })?;
                let norm = ld.vector("output_norm.weight", hidden)?;
                let mut layers = Vec::with_capacity(n_layer);
                for i in 0..n_layer {
                    let p = format!("blk.{i}");
                    let (rope, window) = layer_kind(i);
                    layers.push(Layer {
                        attn_norm: ld.vector(&format!("{p}.attn_norm.weight"), hidden)?,
                        q: ld.linear(&format!("{p}.attn_q"), q_dim, hidden)?,
                        k: ld.linear(&format!("{p}.attn_k"), kv_dim, hidden)?,
                        v: ld.linear(&format!("{p}.attn_v"), kv_dim, hidden)?,
                        o: ld.matrix(&format!("{p}.attn_output.weight"), hidden, q_dim)?,
                        q_norm: ld.optional_vector(&format!("{p}.attn_q_norm.weight"), head_dim)?,
                        k_norm: ld.optional_vector(&format!("{p}.attn_k_norm.weight"), head_dim)?,
                        post_attn_norm: ld
                            .optional_vector(&format!("{p}.post_attention_norm.weight"), hidden)?,
                        ffn_norm: ld.vector(&format!("{p}.ffn_norm.weight"), hidden)?,
                        gate: ld.matrix(&format!("{p}.ffn_gate.weight"), ffn, hidden)?,
                        up: ld.matrix(&format!("{p}.ffn_up.weight"), ffn, hidden)?,
                        down: ld.matrix(&format!("{p}.ffn_down.weight"), hidden, ffn)?,
                        post_ffn_norm: ld
                            .optional_vector(&format!("{p}.post_ffw_norm.weight"), hidden)?,
                        rope,
                        window,
                        cache: KvCache::default(),
                    });
                }
                Engine::Candle(CandleNet {
                    embed,
                    layers,
                    norm,
                    output,
                    ropes,
                })
            }
        };
        let tokens = ld.token_info();
        let stats = LoadStats {
            requantized: ld.requantized,
            elapsed: start.elapsed(),
        };
        static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        Ok(Self {
            id: NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            arch,
            path: ld.path,
            hp,
            embed_rows,
            engine,
            vocab_len,
            context_len,
            cached: 0,
            tokens,
            stats,
        })
    }

    /// The model family.
    pub fn architecture(&self) -> Architecture {
        self.arch
    }

    /// The file the model was loaded from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Number of logits per position (rows of the output matrix; may exceed the tokenizer's
    /// vocabulary).
    pub fn vocab_len(&self) -> usize {
        self.vocab_len
    }

    /// The maximum number of positions (trained context, capped by
    /// [`ModelConfig::max_context`]).
    pub fn context_len(&self) -> usize {
        self.context_len
    }

    /// Positions currently in the KV cache.
    pub fn cached_len(&self) -> usize {
        self.cached
    }

    /// Tokenizer facts from the GGUF metadata (BOS/EOS ids, special tokens, chat template).
    pub fn token_info(&self) -> &TokenInfo {
        &self.tokens
    }

    /// What loading did (requantized matrices, load time).
    pub fn load_stats(&self) -> &LoadStats {
        &self.stats
    }

    /// Clears the KV cache: the next `forward` must start at position 0. Buffers are kept for
    /// reuse, so a reset costs nothing and the next prompt allocates nothing it already had.
    pub fn reset(&mut self) {
        self.truncate(0);
    }

    fn truncate(&mut self, len: usize) {
        match &mut self.engine {
            Engine::Candle(net) => {
                for layer in &mut net.layers {
                    layer.cache.truncate(len, self.hp.head_dim);
                }
            }
            Engine::Native(native) => native.truncate(len),
        }
        self.cached = self.cached.min(len);
    }

    /// Wall time per op of the native forward pass since load (or the last
    /// [`reset_profile`](Self::reset_profile)), when loaded with [`ModelConfig::profile`].
    pub fn profile(&self) -> Option<&Profile> {
        match &self.engine {
            Engine::Native(n) => n.profile.as_ref(),
            Engine::Candle(_) => None,
        }
    }

    /// Zeroes the profile (e.g. after a warm-up).
    pub fn reset_profile(&mut self) {
        if let Engine::Native(n) = &mut self.engine {
            if let Some(p) = &mut n.profile {
                *p = Profile::default();
            }
        }
    }

    /// Feeds `tokens` at positions `pos..pos + tokens.len()` and returns the logits of the last
    /// one (`vocab_len()` floats).
    ///
    /// `pos` may be anything up to [`cached_len`](Self::cached_len): a smaller `pos` first drops
    /// the cached positions from `pos` on (rollback), `0` starts afresh. Several tokens after a
    /// cached prefix are fine (fast-forwarding forced tokens relies on it); the result equals
    /// feeding them one by one, up to float rounding.
    ///
    /// Cost: one pass over all weights per call plus attention over `pos + tokens.len()`
    /// positions; feeding many tokens in one call is much cheaper per token than one at a time.
    ///
    /// # Errors
    /// [`ModelError::EmptyInput`], [`ModelError::PositionGap`], [`ModelError::ContextOverflow`],
    /// [`ModelError::TokenOutOfRange`]; [`ModelError::Inference`] if candle fails, in which case
    /// the cache is truncated back to `pos`.
    pub fn forward(&mut self, tokens: &[u32], pos: usize) -> Result<Vec<f32>, ModelError> {
        if tokens.is_empty() {
            return Err(ModelError::EmptyInput);
        }
        if pos > self.cached {
            return Err(ModelError::PositionGap {
                pos,
                cached: self.cached,
            });
        }
        self.check_span(pos, tokens)?;
        let needed = pos + tokens.len();
        self.truncate(pos);
        if let Engine::Native(native) = &mut self.engine {
            let logits = native.forward(tokens, pos);
            self.cached = needed;
            return Ok(logits);
        }
        match self.forward_inner(tokens, pos) {
            Ok(logits) => {
                self.cached = needed;
                Ok(logits)
            }
            Err(e) => {
                self.truncate(pos);
                Err(ModelError::Inference {
                    step: "forward".into(),
                    message: candle_message(&e),
                })
            }
        }
    }

    fn forward_inner(&mut self, tokens: &[u32], pos: usize) -> candle_core::Result<Vec<f32>> {
        let Engine::Candle(net) = &mut self.engine else {
            return Err(candle_core::Error::Msg("not the candle backend".into()));
        };
        let t = tokens.len();
        let total = pos + t;
        for rope in &mut net.ropes {
            rope.ensure(total)?;
        }
        let ids = Tensor::new(tokens, &Device::Cpu)?;
        let mut x = net.embed.embedding(&ids)?.unsqueeze(0)?;
        // The scale in f64, as candle's scalar ops take it (the native pass keeps an f32).
        if self.hp.embed_scale.is_some() {
            x = (x * (self.hp.hidden as f64).sqrt())?;
        }
        let hp = self.hp;
        let eps = hp.eps;
        for layer in &mut net.layers {
            let rope = &net.ropes[layer.rope];
            let h = candle_nn::ops::rms_norm(&x, &layer.attn_norm, eps)?;
            let h = attention(layer, hp, rope, &h, pos)?;
            let h = match &layer.post_attn_norm {
                Some(n) => candle_nn::ops::rms_norm(&h, n, eps)?,
                None => h,
            };
            x = (h + &x)?;
            let h = candle_nn::ops::rms_norm(&x, &layer.ffn_norm, eps)?;
            let gate = layer.gate.forward(&h)?;
            let up = layer.up.forward(&h)?;
            let gate = match hp.act {
                Act::Silu => gate.silu()?,
                Act::GeluTanh => gate.gelu()?,
            };
            let h = layer.down.forward(&(gate * up)?)?;
            let h = match &layer.post_ffn_norm {
                Some(n) => candle_nn::ops::rms_norm(&h, n, eps)?,
                None => h,
            };
            x = (h + x)?;
        }
        let last = x.narrow(1, t - 1, 1)?.contiguous()?;
        let last = candle_nn::ops::rms_norm(&last, &net.norm, eps)?;
        let logits = net.output.forward(&last)?;
        logits.flatten_all()?.to_dtype(DType::F32)?.to_vec1::<f32>()
    }
}

/// One sequence of a batch: its own KV cache and length, made by [`Model::new_sequence`]
/// and advanced by [`Model::forward_batch`] together with other sequences of the same model.
///
/// Owns the keys and values of every layer for its positions (`2 · layers · kv_dim · 4`
/// bytes per position, growing by doubling), except those it shares read-only with the
/// sequence it was [forked](Self::fork) from; does *not* own weights, rotary tables or
/// scratch buffers, which the [`Model`] shares among all its sequences. Dropping a
/// `Sequence` frees its cache at once (a finished or cancelled request leaves the batch by
/// being dropped). Invariant: the cache holds exactly [`len`](Self::len) positions of one
/// model.
#[derive(Debug)]
pub struct Sequence {
    model: u64,
    kv_dim: usize,
    cache: SeqCache,
}

impl Sequence {
    /// Positions fed so far (the next token goes at this position).
    pub fn len(&self) -> usize {
        self.cache.len()
    }

    /// Whether nothing has been fed yet.
    pub fn is_empty(&self) -> bool {
        self.cache.len() == 0
    }

    /// Rolls back to the first `len` positions (no-op if it holds fewer); the allocation is
    /// kept for the positions fed next. Free.
    pub fn truncate(&mut self, len: usize) {
        self.cache.truncate(len, self.kv_dim);
    }

    /// A new sequence of the same model starting from this one's first `len` positions (at
    /// most [`len`](Self::len)): the shared-prefix path. Prefill a common prompt prefix
    /// once, then fork one sequence per document and feed each its own suffix. The positions
    /// are shared read-only, not copied (a reference count; SmolLM2-135M's cache is 46 KB per
    /// position, so 8 copies of a 700-token prefix were 260 MB), and a batch of forks reads
    /// the shared keys together in attention. Feeding or truncating this sequence afterwards
    /// copies its own positions first while a fork still holds them (copy-on-write). The
    /// fork's logits are bit-identical to those of a sequence that was fed the whole prefix
    /// itself.
    pub fn fork(&self, len: usize) -> Sequence {
        Sequence {
            model: self.model,
            kv_dim: self.kv_dim,
            cache: self.cache.fork(len),
        }
    }

    /// Bytes allocated for this sequence's own keys and values (positions it shares with
    /// the sequence it was forked from are not counted).
    pub fn kv_bytes(&self) -> usize {
        self.cache.allocated_bytes()
    }
}

impl Model {
    /// A new, empty sequence for [`forward_batch`](Self::forward_batch). Allocates only the
    /// per-layer cache headers; positions are allocated as they are fed.
    pub fn new_sequence(&self) -> Sequence {
        let (layers, kv_dim) = match &self.engine {
            Engine::Native(n) => (n.layers.len(), n.kv_dim()),
            Engine::Candle(net) => (net.layers.len(), self.hp.n_kv_head * self.hp.head_dim),
        };
        Sequence {
            model: self.id,
            kv_dim,
            cache: SeqCache::new(layers),
        }
    }

    /// Checks that `tokens` fed after `start` cached positions fit the context and are all
    /// rows of the embedding: [`ModelError::ContextOverflow`], [`ModelError::TokenOutOfRange`].
    fn check_span(&self, start: usize, tokens: &[u32]) -> Result<(), ModelError> {
        let needed = start + tokens.len();
        if needed > self.context_len {
            return Err(ModelError::ContextOverflow {
                needed,
                limit: self.context_len,
            });
        }
        if let Some(&token) = tokens.iter().find(|&&t| t as usize >= self.embed_rows) {
            return Err(ModelError::TokenOutOfRange {
                token,
                vocab_len: self.embed_rows,
            });
        }
        Ok(())
    }

    /// Advances several sequences in one forward pass: each `(sequence, tokens)` entry feeds
    /// `tokens` at the sequence's positions `len()..len() + tokens.len()`, and the result
    /// holds, in batch order, the logits of each entry's last token (`vocab_len()` floats
    /// each).
    ///
    /// Entries may mix decode steps (one token) with prefill chunks (many tokens); sequences
    /// join a batch by appearing in it and leave by not appearing (or being dropped). Every
    /// weight matrix is applied once to all `Σ tokens` rows (each weight block is read once
    /// for the whole batch: decode on CPU is bound by reading weights, so a step of `B`
    /// one-token sequences costs much less than `B` single steps); attention runs per
    /// sequence over its own cache. Each sequence's logits are bit-identical to feeding it
    /// alone, through this or through [`forward`](Self::forward) (tested on all three
    /// families). The model's own sequence ([`cached_len`](Self::cached_len)) is untouched.
    ///
    /// # Errors
    /// [`ModelError::BatchUnsupported`] on the candle backend, and per entry
    /// [`ModelError::ForeignSequence`], [`ModelError::EmptyInput`],
    /// [`ModelError::ContextOverflow`], [`ModelError::TokenOutOfRange`]. All entries are
    /// checked before anything is fed: on error no sequence has changed.
    ///
    /// # Example
    /// ```no_run
    /// # use formwork_model::Model;
    /// let mut model = Model::load("models/SmolLM2-135M-Instruct.Q4_1.gguf")?;
    /// let mut prefix = model.new_sequence();
    /// model.forward_batch(&mut [(&mut prefix, &[1, 4093, 198][..])])?;
    /// let (mut a, mut b) = (prefix.fork(3), prefix.fork(3));
    /// let logits = model.forward_batch(&mut [(&mut a, &[1780][..]), (&mut b, &[314, 260][..])])?;
    /// assert_eq!((logits.len(), a.len(), b.len()), (2, 4, 5));
    /// # Ok::<(), formwork_model::ModelError>(())
    /// ```
    pub fn forward_batch(
        &mut self,
        batch: &mut [(&mut Sequence, &[u32])],
    ) -> Result<Vec<Vec<f32>>, ModelError> {
        if !matches!(self.engine, Engine::Native(_)) {
            return Err(ModelError::BatchUnsupported { backend: "candle" });
        }
        for (index, (seq, tokens)) in batch.iter().enumerate() {
            if seq.model != self.id {
                return Err(ModelError::ForeignSequence { index });
            }
            if tokens.is_empty() {
                return Err(ModelError::EmptyInput);
            }
            self.check_span(seq.len(), tokens)?;
        }
        let Engine::Native(native) = &mut self.engine else {
            unreachable!("checked above: the engine is native");
        };
        let mut caches: Vec<(&mut SeqCache, &[u32])> = batch
            .iter_mut()
            .map(|(seq, tokens)| (&mut seq.cache, &**tokens))
            .collect();
        Ok(native.forward_batch(&mut caches))
    }
}

impl formwork_core::generate::LogitsSource for Model {
    fn forward(
        &mut self,
        tokens: &[u32],
        pos: usize,
    ) -> Result<Vec<f32>, formwork_core::generate::SourceError> {
        Model::forward(self, tokens, pos).map_err(Into::into)
    }
}

/// Batched decoding for the engine's [`BatchGenerator`](formwork_core::generate::batch::BatchGenerator):
/// [`Model::new_sequence`] and [`Model::forward_batch`].
impl formwork_core::generate::batch::BatchLogitsSource for Model {
    type Sequence = Sequence;

    fn new_sequence(&mut self) -> Sequence {
        Model::new_sequence(self)
    }

    fn forward_batch(
        &mut self,
        batch: &mut [(&mut Sequence, &[u32])],
    ) -> Result<Vec<Vec<f32>>, formwork_core::generate::SourceError> {
        Model::forward_batch(self, batch).map_err(Into::into)
    }

    fn fork(&mut self, seq: &Sequence, len: usize) -> Sequence {
        seq.fork(len)
    }
}

/// Self-attention of one layer over `x` `(1, t, hidden)` at positions `pos..pos + t`.
fn attention(
    layer: &mut Layer,
    hp: Hparams,
    rope: &Rope,
    x: &Tensor,
    pos: usize,
) -> candle_core::Result<Tensor> {
    let (b, t, _) = x.dims3()?;
    let Hparams {
        n_head,
        n_kv_head,
        head_dim,
        eps,
        rope_interleaved,
        ..
    } = hp;
    let q = layer
        .q
        .forward(x)?
        .reshape((b, t, n_head, head_dim))?
        .transpose(1, 2)?
        .contiguous()?;
    let k = layer
        .k
        .forward(x)?
        .reshape((b, t, n_kv_head, head_dim))?
        .transpose(1, 2)?
        .contiguous()?;
    let v = layer.v.forward(x)?;
    let q = match &layer.q_norm {
        Some(n) => candle_nn::ops::rms_norm(&q, n, eps)?,
        None => q,
    };
    let k = match &layer.k_norm {
        Some(n) => candle_nn::ops::rms_norm(&k, n, eps)?,
        None => k,
    };
    let cos = rope.cos.narrow(0, pos, t)?;
    let sin = rope.sin.narrow(0, pos, t)?;
    let (q, k) = if rope_interleaved {
        (
            candle_nn::rotary_emb::rope_i(&q, &cos, &sin)?,
            candle_nn::rotary_emb::rope_i(&k, &cos, &sin)?,
        )
    } else {
        (
            candle_nn::rotary_emb::rope(&q, &cos, &sin)?,
            candle_nn::rotary_emb::rope(&k, &cos, &sin)?,
        )
    };
    let q = q.flatten_all()?.to_vec1::<f32>()?;
    let k = k.flatten_all()?.to_vec1::<f32>()?;
    let v = v.flatten_all()?.to_vec1::<f32>()?;
    layer.cache.append(&k, &v, t, n_kv_head, head_dim);
    let y = attend(&q, &layer.cache, hp, t, pos, layer.window);
    let y = Tensor::from_vec(y, (b, t, n_head * head_dim), x.device())?;
    layer.o.forward(&y)
}

/// Causal (optionally sliding-window) attention of `t` queries at positions `pos..pos + t`
/// against the cache, which already holds their own keys. `q` is `[head][t][head_dim]`; the
/// result is `[t][head][head_dim]`.
///
/// Written out rather than composed from tensor ops so that each query row is computed in the
/// same order whatever `t` is: feeding a prompt whole, in chunks or token by token gives
/// bit-identical results (gemm picks different kernels for different row counts, which made
/// chunked logits drift by up to ~0.6). Query heads share KV head `h / (n_head / n_kv_head)`,
/// as in llama.cpp and HF `repeat_kv`. Cost: O(t · heads · context · head_dim), parallel over
/// (query, head) pairs.
fn attend(
    q: &[f32],
    cache: &KvCache,
    hp: Hparams,
    t: usize,
    pos: usize,
    window: Option<usize>,
) -> Vec<f32> {
    use rayon::prelude::*;
    let Hparams {
        n_head,
        n_kv_head,
        head_dim: d,
        ..
    } = hp;
    let rep = n_head / n_kv_head;
    let scale = 1.0 / (d as f32).sqrt();
    let mut out = vec![0f32; t * n_head * d];
    out.par_chunks_mut(d).enumerate().for_each(|(c, out)| {
        let (i, h) = (c / n_head, c % n_head);
        let p = pos + i;
        let g = h / rep;
        let qrow = &q[(h * t + i) * d..(h * t + i + 1) * d];
        let (keys, values) = (&cache.k[g], &cache.v[g]);
        // Sliding window as in llama.cpp/HF Gemma 3: key j is visible iff p - j < window.
        let lo = window.map_or(0, |w| (p + 1).saturating_sub(w));
        let mut scores: Vec<f32> = (lo..=p)
            .map(|j| dot(qrow, &keys[j * d..(j + 1) * d]) * scale)
            .collect();
        let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let mut sum = 0f32;
        for s in &mut scores {
            *s = (*s - max).exp();
            sum += *s;
        }
        for (j, s) in (lo..=p).zip(&scores) {
            let w = s / sum;
            for (o, v) in out.iter_mut().zip(&values[j * d..(j + 1) * d]) {
                *o += w * v;
            }
        }
    });
    out
}

/// Dot product with eight independent accumulators (a fixed order that still vectorizes).
#[inline]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let chunks = a.len() / 8;
    for c in 0..chunks {
        for l in 0..8 {
            acc[l] += a[c * 8 + l] * b[c * 8 + l];
        }
    }
    let mut sum = acc.iter().sum::<f32>();
    for k in chunks * 8..a.len() {
        sum += a[k] * b[k];
    }
    sum
}

/// Sets the size of the rayon pool candle computes on. `None` uses the physical core count
/// (hyper-threads share the vector units, so more threads than cores only adds contention).
/// Returns the number of threads in use; a pool that was already built keeps its size.
pub fn init_threads(threads: Option<usize>) -> usize {
    let n = threads.unwrap_or_else(physical_cores).max(1);
    match rayon::ThreadPoolBuilder::new()
        .num_threads(n)
        .build_global()
    {
        Ok(()) => n,
        Err(_) => rayon::current_num_threads(),
    }
}

/// Physical cores from `/proc/cpuinfo` (distinct physical id × core id), falling back to the
/// available parallelism.
pub fn physical_cores() -> usize {
    let fallback = || std::thread::available_parallelism().map_or(1, |n| n.get());
    let Ok(info) = std::fs::read_to_string("/proc/cpuinfo") else {
        return fallback();
    };
    let mut cores = std::collections::HashSet::new();
    let mut physical = "";
    for line in info.lines() {
        let mut kv = line.splitn(2, ':').map(str::trim);
        match (kv.next(), kv.next()) {
            (Some("physical id"), Some(v)) => physical = v,
            (Some("core id"), Some(v)) => {
                cores.insert((physical.to_string(), v.to_string()));
            }
            _ => {}
        }
    }
    if cores.is_empty() {
        fallback()
    } else {
        cores.len().min(fallback())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn architecture_names_round_trip() {
        for a in [
            Architecture::Llama,
            Architecture::Qwen2,
            Architecture::Gemma3,
        ] {
            assert_eq!(Architecture::from_gguf_name(a.as_str()), Some(a));
        }
        assert_eq!(Architecture::from_gguf_name("mamba"), None);
    }

    fn dims(n_head: usize, n_kv_head: usize, head_dim: usize) -> Hparams {
        Hparams {
            hidden: n_head * head_dim,
            ffn: 0,
            n_head,
            n_kv_head,
            head_dim,
            eps: 1e-6,
            rope_interleaved: false,
            act: Act::Silu,
            embed_scale: None,
        }
    }

    /// Deterministic pseudo-random floats in [-1, 1).
    fn floats(n: usize, seed: u32) -> Vec<f32> {
        (0..n as u32)
            .map(|i| {
                let x = (i.wrapping_mul(2_654_435_761) ^ seed.wrapping_mul(40_503)) % 2000;
                x as f32 / 1000.0 - 1.0
            })
            .collect()
    }

    /// Textbook attention for one query row: softmax over visible keys, weighted values.
    fn naive(q: &[f32], keys: &[Vec<f32>], values: &[Vec<f32>], visible: &[usize]) -> Vec<f32> {
        let d = q.len();
        let s: Vec<f64> = visible
            .iter()
            .map(|&j| {
                q.iter()
                    .zip(&keys[j])
                    .map(|(a, b)| (a * b) as f64)
                    .sum::<f64>()
                    / (d as f64).sqrt()
            })
            .collect();
        let m = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let e: Vec<f64> = s.iter().map(|x| (x - m).exp()).collect();
        let z: f64 = e.iter().sum();
        (0..d)
            .map(|c| {
                visible
                    .iter()
                    .zip(&e)
                    .map(|(&j, w)| w / z * values[j][c] as f64)
                    .sum::<f64>() as f32
            })
            .collect()
    }

    #[test]
    fn attend_matches_naive_attention_with_gqa_and_window() {
        let (n_head, n_kv, d, total) = (4, 2, 8, 7);
        for window in [None, Some(3)] {
            let mut cache = KvCache::default();
            // k in [kv_head][t][d] layout, v in [t][kv_head][d].
            let k = floats(n_kv * total * d, 1);
            let v = floats(total * n_kv * d, 2);
            cache.append(&k, &v, total, n_kv, d);
            // Queries for the last 3 positions, [head][t][d].
            let t = 3;
            let pos = total - t;
            let q = floats(n_head * t * d, 3);
            let out = attend(&q, &cache, dims(n_head, n_kv, d), t, pos, window);
            for h in 0..n_head {
                let g = h / (n_head / n_kv);
                let keys: Vec<Vec<f32>> = (0..total)
                    .map(|j| k[(g * total + j) * d..][..d].to_vec())
                    .collect();
                let values: Vec<Vec<f32>> = (0..total)
                    .map(|j| v[(j * n_kv + g) * d..][..d].to_vec())
                    .collect();
                for i in 0..t {
                    let p = pos + i;
                    let visible: Vec<usize> = (0..=p)
                        .filter(|&j| window.is_none_or(|w| p - j < w))
                        .collect();
                    let expected = naive(&q[(h * t + i) * d..][..d], &keys, &values, &visible);
                    let got = &out[(i * n_head + h) * d..][..d];
                    for (e, g) in expected.iter().zip(got) {
                        assert!(
                            (e - g).abs() < 1e-5,
                            "window {window:?} head {h} row {i}: {e} vs {g}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn attend_rows_do_not_depend_on_how_many_are_fed() {
        let (n_head, n_kv, d, total) = (2, 1, 16, 5);
        let k = floats(n_kv * total * d, 4);
        let v = floats(total * n_kv * d, 5);
        let q_all = floats(n_head * total * d, 6);
        let mut whole = KvCache::default();
        whole.append(&k, &v, total, n_kv, d);
        let all = attend(&q_all, &whole, dims(n_head, n_kv, d), total, 0, None);
        // The last row alone, against the same cache.
        let q_last: Vec<f32> = (0..n_head)
            .flat_map(|h| q_all[(h * total + total - 1) * d..][..d].to_vec())
            .collect();
        let last = attend(&q_last, &whole, dims(n_head, n_kv, d), 1, total - 1, None);
        assert_eq!(&all[(total - 1) * n_head * d..], &last[..]);
    }

    #[test]
    fn kv_cache_appends_and_truncates() {
        let mut cache = KvCache::default();
        // Two KV heads, d = 2, two positions: k is [head][t][d], v is [t][head][d].
        cache.append(
            &[1., 2., 3., 4., 5., 6., 7., 8.],
            &[1., 2., 3., 4., 5., 6., 7., 8.],
            2,
            2,
            2,
        );
        assert_eq!(cache.k[0], vec![1., 2., 3., 4.]);
        assert_eq!(cache.k[1], vec![5., 6., 7., 8.]);
        assert_eq!(cache.v[0], vec![1., 2., 5., 6.]);
        assert_eq!(cache.v[1], vec![3., 4., 7., 8.]);
        cache.truncate(1, 2);
        assert_eq!(cache.len, 1);
        assert_eq!(cache.k[1], vec![5., 6.]);
        cache.append(&[9., 9., 0., 0.], &[9., 9., 0., 0.], 1, 2, 2);
        assert_eq!(cache.k[0], vec![1., 2., 9., 9.]);
        assert_eq!(cache.v[1], vec![3., 4., 0., 0.]);
    }

    #[test]
    fn rope_tables_grow_on_demand() {
        let mut rope = Rope::new(10_000.0, 1.0, 4).unwrap();
        rope.ensure(3).unwrap();
        assert!(rope.len >= 3);
        rope.ensure(1000).unwrap();
        assert_eq!(rope.cos.dims(), [1024, 2]);
        // Position 1, frequency 0: angle 1 rad.
        let c = rope.cos.to_vec2::<f32>().unwrap();
        assert!((c[1][0] - 1f32.cos()).abs() < 1e-6);
    }

    #[test]
    fn physical_cores_is_positive() {
        assert!(physical_cores() >= 1);
    }
}
