//! formwork's own forward pass for the llama / qwen2 / gemma3 families on plain `Vec<f32>`
//! buffers and the quantized kernels of [`super::kernels`] — no candle ops in the decode loop.
//!
//! Owns the weights in kernel layout (`LayerWeights`), the rotary tables and the scratch
//! buffers, shared by every sequence, and the per-sequence KV caches (`SeqCache`: one held
//! by `Native` for `Model::forward`, any number more made for batches). Buffers are
//! allocated on first use and reused: a decode step allocates the logits it returns and a
//! few pointer-sized vectors per batch (once a KV cache has grown past the position; it grows
//! by doubling). Does *not* own loading (`model::runtime` reads the GGUF and builds
//! `Native`) or input validation (`runtime::Model::forward` and `forward_batch` check
//! positions, ids and cache ownership first).
//!
//! # Batches
//! `Native::forward_batch` advances several sequences at once: their rows are stacked
//! (`Σ t` rows, sequence after sequence), every matmul runs once over all of them (the
//! packed kernels read each weight block once per call, see `kernels`), rotary and the KV
//! append use each row's own sequence and position, and attention maps each (row, head) to
//! its sequence's cache. A single sequence is a batch of one, through the same code.
//! Sequences forked from one prefilled prefix share its keys and values read-only
//! (`SeqCache::fork`, copy-on-write), and attention walks that shared prefix once per KV
//! head for all their query rows together (`attention`, phase 1) before each (row, head)
//! finishes over its own positions.
//!
//! # Shape of one layer (per token row)
//! RMSNorm fused with activation quantization → one stacked q/k/v matmul (+ qwen2 biases) →
//! q/k norms (gemma3) and rotary, in place → K/V appended to the cache → attention (online
//! softmax, one pass over the cache) → o matmul → optional post-norm → residual add → RMSNorm +
//! quantize → stacked gate/up matmul → SiLU or tanh-GELU times up, quantized → down matmul →
//! optional post-norm → residual add. Five threaded regions per layer (qkv, attention when
//! large, o, gate/up, down); everything else is cheap O(hidden) work done on the calling
//! thread.
//!
//! # Invariants
//! - Every query row is computed in the same order whatever the number of rows fed, so feeding
//!   a prompt whole, in chunks or token by token gives bit-identical logits (the weight kernels
//!   compute each (row, token) dot product independently too).
//! - Each `SeqCache` holds exactly `len` positions per layer, `[pos][kv_head][head_dim]`,
//!   in shared read-only segments followed by its own positions.
//! - A row's result never depends on the other rows of its batch, so a sequence's logits
//!   are bit-identical alone and batched (tested in `tests/batch.rs` on all three families).
//!
//! # Files
//! `weights` (shape facts, layer weights, rotary tables), `cache` (the per-sequence KV
//! caches and the views attention reads), `ops` (the cheap per-row ops: norms, rotary,
//! activation, dot), `attention` (the attention kernels), `profile` (the optional per-op
//! timer), `native` (the layer loop over a batch). Each may use only the files before it.
//!
//! Files: `weights` → `cache` → `ops` → `attention` → `profile` → `native`.
//!
//! May use: `kernels`.

mod attention;
mod cache;
mod native;
mod ops;
mod profile;
mod weights;

pub(crate) use cache::SeqCache;
pub(crate) use native::Native;
pub use profile::{Op, Profile};
pub(crate) use weights::{Act, Hparams, LayerWeights, RopeTable};
