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
//! # Files
//! `arch` (the supported families and their facts), `config` (load options and what loading
//! reports), `candle` (the candle-op reference pass), `model` (the [`Model`] type and its
//! single-sequence API), `loader` (GGUF → weights for either pass: [`Model::load_with`]),
//! `sequence` ([`Sequence`] and the batched API), `threads` (the compute pool). Each may use
//! only the files before it.
//!
//! Files: `arch` → `config` → `candle` → `model` → `loader` → `sequence` → `threads`.
//!
//! May use: `error`, `gguf`, `kernels`, `forward`.

mod arch;
mod candle;
mod config;
mod loader;
mod model;
mod sequence;
mod threads;

pub use arch::Architecture;
pub use config::{Backend, LoadStats, ModelConfig, TokenInfo};
pub use model::Model;
pub use sequence::Sequence;
pub use threads::{init_threads, physical_cores};
