//! What the forward pass runs on and shares among every sequence: the shape facts
//! ([`Hparams`], [`Act`]), one layer's weights in kernel layout ([`LayerWeights`]) and the
//! rotary tables ([`RopeTable`]). Filled by `runtime`'s loader; read-only during a pass but
//! for the rotary tables, which grow on demand.

use crate::kernels::QMatrix;

/// Activation of the MLP gate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Act {
    Silu,
    GeluTanh,
}

/// Shape facts shared by every layer.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Hparams {
    pub hidden: usize,
    pub ffn: usize,
    pub n_head: usize,
    pub n_kv_head: usize,
    pub head_dim: usize,
    pub eps: f32,
    /// Llama: pairs (2i, 2i+1); qwen2/gemma3: pairs (i, i + d/2).
    pub rope_interleaved: bool,
    pub act: Act,
    /// Gemma multiplies embeddings by sqrt(hidden).
    pub embed_scale: Option<f32>,
}

impl Hparams {
    pub(super) fn q_dim(&self) -> usize {
        self.n_head * self.head_dim
    }

    pub(super) fn kv_dim(&self) -> usize {
        self.n_kv_head * self.head_dim
    }

    pub(super) fn qkv_dim(&self) -> usize {
        self.q_dim() + 2 * self.kv_dim()
    }
}

/// One layer's weights in kernel layout.
#[derive(Debug)]
pub(crate) struct LayerWeights {
    pub attn_norm: Vec<f32>,
    /// q, k and v stacked by rows (`q_dim + 2 · kv_dim` rows).
    pub qkv: QMatrix,
    /// qwen2's q/k/v biases, stacked the same way.
    pub qkv_bias: Option<Vec<f32>>,
    pub o: QMatrix,
    pub q_norm: Option<Vec<f32>>,
    pub k_norm: Option<Vec<f32>>,
    pub post_attn_norm: Option<Vec<f32>>,
    pub ffn_norm: Vec<f32>,
    /// gate and up stacked by rows (`2 · ffn` rows).
    pub gate_up: QMatrix,
    pub down: QMatrix,
    pub post_ffn_norm: Option<Vec<f32>>,
    /// Index into the rotary tables.
    pub rope: usize,
    /// Sliding-window size (gemma3 local layers).
    pub window: Option<usize>,
}

/// Rotary cos/sin tables `[pos][head_dim / 2]`, grown on demand to the next power of two.
#[derive(Debug)]
pub(crate) struct RopeTable {
    base: f64,
    scale: f64,
    dim: usize,
    pub(super) cos: Vec<f32>,
    pub(super) sin: Vec<f32>,
    len: usize,
}

impl RopeTable {
    pub fn new(base: f64, scale: f64, dim: usize) -> Self {
        Self {
            base,
            scale,
            dim,
            cos: Vec::new(),
            sin: Vec::new(),
            len: 0,
        }
    }

    pub(super) fn ensure(&mut self, needed: usize) {
        if needed <= self.len {
            return;
        }
        let len = needed.next_power_of_two().max(256);
        let half = self.dim / 2;
        self.cos.clear();
        self.sin.clear();
        for p in 0..len {
            for i in 0..half {
                let freq = 1.0 / self.base.powf((2 * i) as f64 / self.dim as f64);
                let angle = p as f64 * self.scale * freq;
                self.cos.push(angle.cos() as f32);
                self.sin.push(angle.sin() as f32);
            }
        }
        self.len = len;
    }
}
