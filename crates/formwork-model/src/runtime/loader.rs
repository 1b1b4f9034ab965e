//! Loading: a GGUF file's header, metadata and tensors checked and read (`Loader`), and the
//! weights of either forward pass built from them ([`Model::load_with`]).

use std::collections::HashMap;
use std::fs::File;
use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use candle_core::quantized::{gguf_file, GgmlDType, QMatMul, QTensor};
use candle_core::{Device, Tensor};

use crate::error::{candle_message, ModelError};
use crate::forward::{Hparams, LayerWeights, Native, RopeTable};
use crate::gguf;
use crate::kernels::{Format, QMatrix};

use super::arch::Architecture;
use super::candle::{CandleNet, KvCache, Layer, Linear, Rope};
use super::config::{Backend, LoadStats, ModelConfig, TokenInfo};
use super::model::{Engine, Model};

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
            requantize: config.get_requantize() && config.get_backend() == Backend::Candle,
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
        if let Some(cap) = config.get_max_context() {
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

        let engine = match config.get_backend() {
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
                    config.get_profile(),
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
}
