//! formwork's own forward pass for the llama / qwen2 / gemma3 families on plain `Vec<f32>`
//! buffers and the quantized kernels of [`super::kernels`] — no candle ops in the decode loop.
//!
//! Owns the weights in kernel layout ([`LayerWeights`]), the rotary tables and the scratch
//! buffers, shared by every sequence, and the per-sequence KV caches (`SeqCache`: one held
//! by `Native` for `Model::forward`, any number more made for batches). Buffers are
//! allocated on first use and reused: a decode step allocates the logits it returns and a
//! few pointer-sized vectors per batch (once a KV cache has grown past the position; it grows
//! by doubling). Does *not* own loading (`model::runtime` reads the GGUF and builds
//! [`Native`]) or input validation (`runtime::Model::forward` and `forward_batch` check
//! positions, ids and cache ownership first).
//!
//! # Batches
//! `Native::forward_batch` advances several sequences at once: their rows are stacked
//! (`Σ t` rows, sequence after sequence), every matmul runs once over all of them (the
//! packed kernels read each weight block once per call, see `kernels`), rotary and the KV
//! append use each row's own sequence and position, and attention maps each (row, head) to
//! its sequence's cache. A single sequence is a batch of one, through the same code.
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
//! - Each `SeqCache` holds exactly `len` positions per layer, `[pos][kv_head][head_dim]`.
//! - A row's result never depends on the other rows of its batch, so a sequence's logits
//!   are bit-identical alone and batched (tested in `tests/batch.rs` on all three families).
//!
//! May use: `kernels`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::kernels::{quantize_row, simd_level, BlockQ8, QMatrix, SimdLevel, QK};

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
    fn q_dim(&self) -> usize {
        self.n_head * self.head_dim
    }

    fn kv_dim(&self) -> usize {
        self.n_kv_head * self.head_dim
    }

    fn qkv_dim(&self) -> usize {
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
    cos: Vec<f32>,
    sin: Vec<f32>,
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

    fn ensure(&mut self, needed: usize) {
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

/// Per-layer key/value cache, `[pos][kv_head][head_dim]`.
#[derive(Debug, Default)]
struct KvCache {
    k: Vec<f32>,
    v: Vec<f32>,
}

/// One sequence's keys and values for every layer, and how many positions they hold: the
/// per-sequence half of the model state (the weights, rotary tables and scratch buffers are
/// [`Native`]'s, shared by every sequence).
///
/// Invariant: every layer holds exactly `len` positions. Memory: `2 · layers · kv_dim · 4`
/// bytes per position, grown by doubling; dropping the value frees it.
#[derive(Debug)]
pub(crate) struct SeqCache {
    layers: Vec<KvCache>,
    len: usize,
}

impl SeqCache {
    /// An empty cache for a model of `n_layers` layers.
    pub fn new(n_layers: usize) -> Self {
        Self {
            layers: (0..n_layers).map(|_| KvCache::default()).collect(),
            len: 0,
        }
    }

    /// Positions held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Drops positions from `len` on (no-op if it holds fewer); keeps the allocation.
    pub fn truncate(&mut self, len: usize, kv_dim: usize) {
        for c in &mut self.layers {
            c.k.truncate(len * kv_dim);
            c.v.truncate(len * kv_dim);
        }
        self.len = self.len.min(len);
    }

    /// A new cache holding a copy of the first `len` positions (at most [`len`](Self::len)):
    /// `O(len · layers · kv_dim)` bytes copied, no arithmetic. The copy is exact, so feeding
    /// the fork the same tokens gives the same bits as feeding the original.
    pub fn fork(&self, len: usize, kv_dim: usize) -> Self {
        let len = len.min(self.len);
        let n = len * kv_dim;
        Self {
            layers: self
                .layers
                .iter()
                .map(|c| KvCache {
                    k: c.k[..n].to_vec(),
                    v: c.v[..n].to_vec(),
                })
                .collect(),
            len,
        }
    }

    /// Bytes allocated for keys and values (capacity, not just the positions held).
    pub fn allocated_bytes(&self) -> usize {
        self.layers
            .iter()
            .map(|c| (c.k.capacity() + c.v.capacity()) * std::mem::size_of::<f32>())
            .sum()
    }
}

/// Buffers reused across calls, sized for the largest number of rows fed so far.
#[derive(Debug, Default)]
struct Scratch {
    rows: usize,
    /// Residual stream, `t × hidden`.
    x: Vec<f32>,
    /// Matmul output added to the residual, `t × hidden`.
    h: Vec<f32>,
    /// Quantized matmul input, `t × max(hidden, q_dim, ffn) / 32`.
    xq: Vec<BlockQ8>,
    /// One normalized row before quantization.
    row: Vec<f32>,
    qkv: Vec<f32>,
    att: Vec<f32>,
    gate_up: Vec<f32>,
    act: Vec<f32>,
    /// Per fed row: (index of its sequence in the batch, row index within that sequence).
    row_seq: Vec<(usize, usize)>,
}

/// Ops the optional profile times separately.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Op {
    /// Embedding row lookup (dequantization).
    Embed,
    /// RMSNorms fused with activation quantization, and quantizing attention/MLP outputs.
    NormQuant,
    /// The stacked q/k/v matmul (+ biases).
    MatmulQkv,
    /// q/k norms, rotary, KV-cache append.
    RopeCache,
    /// Attention over the cache.
    Attention,
    /// The attention output matmul.
    MatmulO,
    /// The stacked gate/up matmul.
    MatmulGateUp,
    /// SiLU/GELU × up.
    Activation,
    /// The down matmul.
    MatmulDown,
    /// Post-norms and residual adds.
    Residual,
    /// Final norm and the output (logits) matmul.
    Output,
}

impl Op {
    /// All ops in forward order.
    pub const ALL: [Op; 11] = [
        Op::Embed,
        Op::NormQuant,
        Op::MatmulQkv,
        Op::RopeCache,
        Op::Attention,
        Op::MatmulO,
        Op::MatmulGateUp,
        Op::Activation,
        Op::MatmulDown,
        Op::Residual,
        Op::Output,
    ];

    /// A short name for tables.
    pub fn name(self) -> &'static str {
        match self {
            Op::Embed => "embedding lookup",
            Op::NormQuant => "rmsnorm + quantize",
            Op::MatmulQkv => "matmul q/k/v",
            Op::RopeCache => "q/k norm, rope, kv append",
            Op::Attention => "attention",
            Op::MatmulO => "matmul o",
            Op::MatmulGateUp => "matmul gate/up",
            Op::Activation => "silu/gelu x up",
            Op::MatmulDown => "matmul down",
            Op::Residual => "post-norms, residual",
            Op::Output => "final norm + logits matmul",
        }
    }
}

/// Accumulated wall time per [`Op`] (only when profiling is on).
#[derive(Clone, Debug, Default)]
pub struct Profile {
    /// Time per op, indexed like [`Op::ALL`].
    pub totals: [Duration; 11],
    /// Forward calls timed.
    pub calls: u64,
}

/// Times consecutive ops when enabled; a branch per lap otherwise.
struct Clock<'a> {
    profile: Option<&'a mut Profile>,
    last: Option<Instant>,
}

impl Clock<'_> {
    fn lap(&mut self, op: Op) {
        if let Some(p) = self.profile.as_deref_mut() {
            let now = Instant::now();
            if let Some(last) = self.last {
                p.totals[op as usize] += now - last;
            }
            self.last = Some(now);
        }
    }
}

/// The model state our forward pass runs on. See the module docs.
#[derive(Debug)]
pub(crate) struct Native {
    pub hp: Hparams,
    pub layers: Vec<LayerWeights>,
    pub embed: Arc<QMatrix>,
    /// The output matrix (the embedding table when tied).
    pub output: Arc<QMatrix>,
    pub norm: Vec<f32>,
    pub ropes: Vec<RopeTable>,
    /// The cache of `Model::forward`'s own (single) sequence.
    state: SeqCache,
    scratch: Scratch,
    pub profile: Option<Profile>,
}

impl Native {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        hp: Hparams,
        layers: Vec<LayerWeights>,
        embed: Arc<QMatrix>,
        output: Arc<QMatrix>,
        norm: Vec<f32>,
        ropes: Vec<RopeTable>,
        profile: bool,
    ) -> Self {
        let state = SeqCache::new(layers.len());
        Self {
            hp,
            layers,
            embed,
            output,
            norm,
            ropes,
            state,
            scratch: Scratch::default(),
            profile: profile.then(Profile::default),
        }
    }

    /// Drops cached positions of the model's own sequence from `len` on.
    pub fn truncate(&mut self, len: usize) {
        self.state.truncate(len, self.hp.kv_dim());
    }

    /// Width of one position's keys (or values) in a cache: `n_kv_head · head_dim`.
    pub fn kv_dim(&self) -> usize {
        self.hp.kv_dim()
    }

    fn ensure_scratch(&mut self, t: usize) {
        let hp = self.hp;
        let s = &mut self.scratch;
        if s.rows >= t {
            return;
        }
        let widest = hp.hidden.max(hp.q_dim()).max(hp.ffn);
        s.rows = t;
        s.x.resize(t * hp.hidden, 0.0);
        s.h.resize(t * hp.hidden, 0.0);
        s.xq.resize(t * widest / QK, BlockQ8::default());
        s.row.resize(widest, 0.0);
        s.qkv.resize(t * hp.qkv_dim(), 0.0);
        s.att.resize(t * hp.q_dim(), 0.0);
        s.gate_up.resize(t * 2 * hp.ffn, 0.0);
        s.act.resize(t * hp.ffn, 0.0);
    }

    /// Feeds `tokens` at `pos..pos + t` (the caller has validated ids and positions and
    /// truncated the cache to `pos`) and returns the logits of the last one.
    ///
    /// Runs on a thread of the rayon pool. Called from outside the pool, every threaded
    /// region (~5 per layer, ~150 per SmolLM2 token) is injected into the pool while the
    /// caller sleeps, and costs two wake-ups (a worker, then the caller); from inside, a
    /// region's second half is only offered to the other worker, and the current thread runs
    /// it itself when no one has taken it. On the loaded machine of session 4 the two were
    /// within the noise on average, with the best runs clearly in favour of this one
    /// (`docs/inference.md`).
    pub fn forward(&mut self, tokens: &[u32], pos: usize) -> Vec<f32> {
        debug_assert_eq!(pos, self.state.len);
        let _ = pos;
        // The model's own sequence goes through the batched step as a batch of one: the same
        // code, so `Model::forward` and a one-sequence `forward_batch` give the same bits.
        let mut state = std::mem::replace(&mut self.state, SeqCache::new(0));
        let mut logits = self.forward_batch(&mut [(&mut state, tokens)]);
        self.state = state;
        logits.pop().expect("one sequence, one logits row")
    }

    /// Feeds each sequence its tokens at its positions `len..len + t` in one pass (the
    /// caller has validated ids, lengths and that every cache belongs to this model) and
    /// returns the logits of each sequence's last token, in batch order.
    ///
    /// Every weight matrix is applied once to the `Σ t` activation rows of the whole batch
    /// (the kernels read each weight block once per call and reuse it for every row, so a
    /// decode step of `B` sequences reads the weights once, not `B` times); attention runs
    /// per sequence over its own cache. Rows are independent in every kernel, so each
    /// sequence's logits are bit-identical to feeding it alone. Threading: see
    /// [`forward`](Self::forward).
    pub fn forward_batch(&mut self, seqs: &mut [(&mut SeqCache, &[u32])]) -> Vec<Vec<f32>> {
        if seqs.is_empty() {
            return Vec::new();
        }
        if rayon::current_thread_index().is_none() && rayon::current_num_threads() > 1 {
            return rayon::scope(|_| self.forward_in_pool(seqs));
        }
        self.forward_in_pool(seqs)
    }

    fn forward_in_pool(&mut self, seqs: &mut [(&mut SeqCache, &[u32])]) -> Vec<Vec<f32>> {
        let t: usize = seqs.iter().map(|(_, toks)| toks.len()).sum();
        let b = seqs.len();
        let total = seqs
            .iter()
            .map(|(c, toks)| c.len + toks.len())
            .max()
            .unwrap_or(0);
        for r in &mut self.ropes {
            r.ensure(total);
        }
        self.ensure_scratch(t.max(b));
        let hp = self.hp;
        let (h, qd, kvd, qkvd, ffn) = (hp.hidden, hp.q_dim(), hp.kv_dim(), hp.qkv_dim(), hp.ffn);
        let Self {
            layers,
            embed,
            output,
            norm,
            ropes,
            scratch: s,
            profile,
            ..
        } = self;
        // Row r of the batch is row `row_seq[r].1` of sequence `row_seq[r].0`.
        s.row_seq.clear();
        for (q, (_, toks)) in seqs.iter().enumerate() {
            s.row_seq.extend((0..toks.len()).map(|i| (q, i)));
        }
        let pos: Vec<usize> = seqs.iter().map(|(c, _)| c.len).collect();
        let mut clock = Clock {
            profile: profile.as_mut(),
            last: None,
        };
        clock.lap(Op::Embed);
        if let Some(p) = clock.profile.as_deref_mut() {
            p.calls += 1;
        }
        let tokens = seqs.iter().flat_map(|(_, toks)| toks.iter());
        for (i, &tok) in tokens.enumerate() {
            let row = &mut s.x[i * h..(i + 1) * h];
            embed.dequantize_row(tok as usize, row);
            if let Some(scale) = hp.embed_scale {
                row.iter_mut().for_each(|v| *v *= scale);
            }
        }
        clock.lap(Op::Embed);
        for (l, layer) in layers.iter().enumerate() {
            // Attention block.
            norm_quantize(
                &s.x[..t * h],
                &layer.attn_norm,
                hp.eps,
                &mut s.row,
                &mut s.xq,
            );
            clock.lap(Op::NormQuant);
            let qkv = &mut s.qkv[..t * qkvd];
            layer.qkv.matmul(&s.xq[..t * h / QK], t, qkv);
            if let Some(bias) = &layer.qkv_bias {
                for row in qkv.chunks_exact_mut(qkvd) {
                    row.iter_mut().zip(bias).for_each(|(v, b)| *v += b);
                }
            }
            clock.lap(Op::MatmulQkv);
            let rope = &ropes[layer.rope];
            for (row, &(q_i, i)) in qkv.chunks_exact_mut(qkvd).zip(&s.row_seq) {
                let p = pos[q_i] + i;
                let (q, rest) = row.split_at_mut(qd);
                let (k, v) = rest.split_at_mut(kvd);
                for head in q.chunks_exact_mut(hp.head_dim) {
                    if let Some(w) = &layer.q_norm {
                        rms_norm_in_place(head, w, hp.eps);
                    }
                    apply_rope(head, rope, p, hp.rope_interleaved);
                }
                for head in k.chunks_exact_mut(hp.head_dim) {
                    if let Some(w) = &layer.k_norm {
                        rms_norm_in_place(head, w, hp.eps);
                    }
                    apply_rope(head, rope, p, hp.rope_interleaved);
                }
                let cache = &mut seqs[q_i].0.layers[l];
                cache.k.extend_from_slice(k);
                cache.v.extend_from_slice(v);
            }
            clock.lap(Op::RopeCache);
            let caches: Vec<&KvCache> = seqs.iter().map(|(c, _)| &c.layers[l]).collect();
            attention(
                &s.qkv[..t * qkvd],
                &caches,
                &pos,
                &s.row_seq[..t],
                hp,
                layer.window,
                &mut s.att[..t * qd],
            );
            clock.lap(Op::Attention);
            for (a, q) in s.att[..t * qd]
                .chunks_exact(qd)
                .zip(s.xq.chunks_exact_mut(qd / QK))
            {
                quantize_row(a, q);
            }
            clock.lap(Op::NormQuant);
            layer.o.matmul(&s.xq[..t * qd / QK], t, &mut s.h[..t * h]);
            clock.lap(Op::MatmulO);
            residual(
                &mut s.x[..t * h],
                &mut s.h[..t * h],
                layer.post_attn_norm.as_deref(),
                hp,
            );
            clock.lap(Op::Residual);

            // MLP block.
            norm_quantize(
                &s.x[..t * h],
                &layer.ffn_norm,
                hp.eps,
                &mut s.row,
                &mut s.xq,
            );
            clock.lap(Op::NormQuant);
            layer
                .gate_up
                .matmul(&s.xq[..t * h / QK], t, &mut s.gate_up[..t * 2 * ffn]);
            clock.lap(Op::MatmulGateUp);
            for (gu, a) in s.gate_up[..t * 2 * ffn]
                .chunks_exact(2 * ffn)
                .zip(s.act.chunks_exact_mut(ffn))
            {
                let (g, u) = gu.split_at(ffn);
                match hp.act {
                    Act::Silu => {
                        for ((a, g), u) in a.iter_mut().zip(g).zip(u) {
                            *a = g / (1.0 + (-g).exp()) * u;
                        }
                    }
                    Act::GeluTanh => {
                        for ((a, g), u) in a.iter_mut().zip(g).zip(u) {
                            *a = gelu_tanh(*g) * u;
                        }
                    }
                }
            }
            clock.lap(Op::Activation);
            for (a, q) in s.act[..t * ffn]
                .chunks_exact(ffn)
                .zip(s.xq.chunks_exact_mut(ffn / QK))
            {
                quantize_row(a, q);
            }
            clock.lap(Op::NormQuant);
            layer
                .down
                .matmul(&s.xq[..t * ffn / QK], t, &mut s.h[..t * h]);
            clock.lap(Op::MatmulDown);
            residual(
                &mut s.x[..t * h],
                &mut s.h[..t * h],
                layer.post_ffn_norm.as_deref(),
                hp,
            );
            clock.lap(Op::Residual);
        }
        // Each sequence's last row, normalized and quantized into consecutive rows of `xq`,
        // then one logits matmul for the whole batch.
        let mut end = 0;
        for (q, (_, toks)) in seqs.iter().enumerate() {
            end += toks.len();
            let last = &s.x[(end - 1) * h..end * h];
            norm_quantize(
                last,
                norm,
                hp.eps,
                &mut s.row,
                &mut s.xq[q * h / QK..(q + 1) * h / QK],
            );
        }
        let vocab = output.rows();
        let mut logits = vec![0f32; b * vocab];
        output.matmul(&s.xq[..b * h / QK], b, &mut logits);
        clock.lap(Op::Output);
        for (c, toks) in seqs.iter_mut() {
            c.len += toks.len();
        }
        if b == 1 {
            return vec![logits];
        }
        logits.chunks_exact(vocab).map(<[f32]>::to_vec).collect()
    }
}

/// `x += post_norm(h)` row by row (`h` is clobbered when there is a post-norm).
fn residual(x: &mut [f32], h: &mut [f32], post_norm: Option<&[f32]>, hp: Hparams) {
    for (xr, hr) in x
        .chunks_exact_mut(hp.hidden)
        .zip(h.chunks_exact_mut(hp.hidden))
    {
        if let Some(w) = post_norm {
            rms_norm_in_place(hr, w, hp.eps);
        }
        xr.iter_mut().zip(hr.iter()).for_each(|(a, b)| *a += b);
    }
}

/// RMSNorm of each row of `x` (rows of `weight.len()`) with `weight`, quantized into
/// consecutive rows of `out`. `tmp` holds one normalized row.
fn norm_quantize(x: &[f32], weight: &[f32], eps: f32, tmp: &mut [f32], out: &mut [BlockQ8]) {
    let n = weight.len();
    let tmp = &mut tmp[..n];
    for (xr, q) in x.chunks_exact(n).zip(out.chunks_exact_mut(n / QK)) {
        let scale = rms_scale(xr, eps);
        for ((o, v), w) in tmp.iter_mut().zip(xr).zip(weight) {
            *o = v * scale * w;
        }
        quantize_row(tmp, q);
    }
}

/// `1 / sqrt(mean(x²) + eps)`.
fn rms_scale(x: &[f32], eps: f32) -> f32 {
    let ss = dot(x, x);
    1.0 / (ss / x.len() as f32 + eps).sqrt()
}

fn rms_norm_in_place(x: &mut [f32], weight: &[f32], eps: f32) {
    let scale = rms_scale(x, eps);
    x.iter_mut().zip(weight).for_each(|(v, w)| *v *= scale * w);
}

/// Rotates one head in place at position `pos`.
fn apply_rope(head: &mut [f32], rope: &RopeTable, pos: usize, interleaved: bool) {
    let half = head.len() / 2;
    let cos = &rope.cos[pos * half..(pos + 1) * half];
    let sin = &rope.sin[pos * half..(pos + 1) * half];
    if interleaved {
        for (i, pair) in head.chunks_exact_mut(2).enumerate() {
            let (a, b) = (pair[0], pair[1]);
            pair[0] = a * cos[i] - b * sin[i];
            pair[1] = a * sin[i] + b * cos[i];
        }
    } else {
        let (lo, hi) = head.split_at_mut(half);
        for i in 0..half {
            let (a, b) = (lo[i], hi[i]);
            lo[i] = a * cos[i] - b * sin[i];
            hi[i] = a * sin[i] + b * cos[i];
        }
    }
}

/// tanh-approximated GELU (Gemma's `gelu_pytorch_tanh`).
fn gelu_tanh(x: f32) -> f32 {
    const C: f32 = 0.797_884_6; // sqrt(2/π)
    0.5 * x * (1.0 + (C * (x + 0.044_715 * x * x * x)).tanh())
}

/// Causal (optionally sliding-window) attention of a batch's query rows, each against its
/// own sequence's cache, which already holds their keys: batch row `r` is row `i` of
/// sequence `q` (`row_seq[r] = (q, i)`), at position `pos[q] + i`, attending to
/// `caches[q]`. `qkv` rows hold the rotated queries first; `out` is `[row][head][head_dim]`.
///
/// Online softmax: one pass over the visible keys per (row, head), rescaling the partial sum
/// when a larger score appears, so no score buffer is needed. Each (row, head) is computed
/// the same way whatever the batch is. Query heads share KV head `h / (n_head / n_kv_head)`
/// (GQA). The (row, head) pairs of all sequences form one parallel loop, so a decode batch
/// keeps both threads busy even when each sequence alone is too small to split.
fn attention(
    qkv: &[f32],
    caches: &[&KvCache],
    pos: &[usize],
    row_seq: &[(usize, usize)],
    hp: Hparams,
    window: Option<usize>,
    out: &mut [f32],
) {
    let d = hp.head_dim;
    let (qkvd, kvd) = (hp.qkv_dim(), hp.kv_dim());
    let rep = hp.n_head / hp.n_kv_head;
    let scale = 1.0 / (d as f32).sqrt();
    let avx2 = simd_level() != SimdLevel::Scalar;
    let one = |c: usize, o: &mut [f32]| {
        let (r, head) = (c / hp.n_head, c % hp.n_head);
        let (seq, i) = row_seq[r];
        let p = pos[seq] + i;
        let cache = caches[seq];
        let q = &qkv[r * qkvd + head * d..r * qkvd + (head + 1) * d];
        // Sliding window as in llama.cpp/HF Gemma 3: key j is visible iff p - j < window.
        let lo = window.map_or(0, |w| (p + 1).saturating_sub(w));
        let at = Keys {
            k: &cache.k,
            v: &cache.v,
            stride: kvd,
            off: head / rep * d,
        };
        #[cfg(target_arch = "x86_64")]
        if avx2 {
            // SAFETY: `simd_level` never reports more than the CPU has, and above scalar
            // it has AVX2 and FMA.
            return unsafe { attend_avx2(q, at, lo, p, scale, o) };
        }
        let _ = avx2;
        attend::<false>(q, at, lo, p, scale, o)
    };
    let work: usize = row_seq
        .iter()
        .map(|&(seq, i)| hp.n_head * (pos[seq] + i + 1) * d)
        .sum();
    if work < 1 << 17 || rayon::current_num_threads() <= 1 {
        out.chunks_exact_mut(d)
            .enumerate()
            .for_each(|(c, o)| one(c, o));
    } else {
        use rayon::prelude::*;
        out.par_chunks_mut(d)
            .enumerate()
            .for_each(|(c, o)| one(c, o));
    }
}

/// Where the keys and values of one KV head are: position `j`'s at
/// `k[j · stride + off..][..head_dim]` and `v[..]` likewise.
#[derive(Clone, Copy)]
struct Keys<'a> {
    k: &'a [f32],
    v: &'a [f32],
    stride: usize,
    off: usize,
}

/// One (query row, head) of [`attention`] over the positions `lo..=p`: an online softmax,
/// one pass over the keys, rescaling the partial sum when a larger score appears.
/// `AVX2` (only inside [`attend_avx2`]) takes the dot products with AVX intrinsics and
/// prefetches the keys and values a few positions ahead.
#[inline(always)]
fn attend<const AVX2: bool>(
    q: &[f32],
    at: Keys<'_>,
    lo: usize,
    p: usize,
    scale: f32,
    o: &mut [f32],
) {
    let d = q.len();
    o.fill(0.0);
    let (mut max, mut sum) = (f32::NEG_INFINITY, 0f32);
    for j in lo..=p {
        let k = &at.k[j * at.stride + at.off..][..d];
        let v = &at.v[j * at.stride + at.off..][..d];
        #[cfg(target_arch = "x86_64")]
        let score = if AVX2 {
            // At decode the cache of every layer is read once per token (~14 MB for SmolLM2
            // at 300 positions): it comes from L3 or memory, and `perf` showed the first
            // load of each key and value row as the hottest instructions.
            let ahead = (j + PREFETCH).min(p) * at.stride + at.off;
            // SAFETY: only instantiated inside `attend_avx2`, whose caller checked AVX2;
            // `ahead + d` is within both caches (position `min(j + PREFETCH, p)` exists).
            unsafe {
                prefetch_row(&at.k[ahead..ahead + d]);
                prefetch_row(&at.v[ahead..ahead + d]);
                dot_avx(q, k)
            }
        } else {
            dot(q, k)
        } * scale;
        #[cfg(not(target_arch = "x86_64"))]
        let score = dot(q, k) * scale;
        if score > max {
            let c = (max - score).exp();
            sum *= c;
            o.iter_mut().for_each(|x| *x *= c);
            max = score;
        }
        let w = (score - max).exp();
        sum += w;
        o.iter_mut().zip(v).for_each(|(x, v)| *x += w * v);
    }
    let inv = 1.0 / sum;
    o.iter_mut().for_each(|x| *x *= inv);
}

/// [`attend`] compiled for AVX2: 8-wide instead of SSE2's 4-wide vectors for the dot
/// products and the weighted sums. Rust never contracts `a · b + c` into an FMA, and the
/// exponentials are the same libm calls, so the results are bit-identical to the portable
/// instantiation (tested) — the kernel set never changes the output.
///
/// # Safety
/// The CPU must have AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn attend_avx2(q: &[f32], at: Keys<'_>, lo: usize, p: usize, scale: f32, o: &mut [f32]) {
    attend::<true>(q, at, lo, p, scale, o)
}

/// Positions [`attend`] prefetches ahead.
const PREFETCH: usize = 4;

/// Prefetches the cache lines of `row` into L1.
///
/// # Safety
/// The CPU must have SSE (every x86-64 does).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn prefetch_row(row: &[f32]) {
    use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
    for line in row.chunks(16) {
        _mm_prefetch::<_MM_HINT_T0>(line.as_ptr() as *const i8);
    }
}

/// [`dot`] with AVX: lane `l` of one 8-wide accumulator is `acc[l]` of [`dot`], updated with
/// a separate multiply and add (no FMA), then summed in the same order — the same bits.
/// Over slices LLVM kept [`dot`]'s eight accumulators in scalar registers (`vmulss`/
/// `vaddss` per element, the hottest loop of attention in `perf`).
///
/// # Safety
/// The CPU must have AVX.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn dot_avx(a: &[f32], b: &[f32]) -> f32 {
    use std::arch::x86_64::*;
    let n = a.len().min(b.len());
    let mut acc = _mm256_setzero_ps();
    let mut i = 0;
    while i + 8 <= n {
        let x = _mm256_loadu_ps(a.as_ptr().add(i));
        let y = _mm256_loadu_ps(b.as_ptr().add(i));
        acc = _mm256_add_ps(acc, _mm256_mul_ps(x, y));
        i += 8;
    }
    let mut lanes = [0f32; 8];
    _mm256_storeu_ps(lanes.as_mut_ptr(), acc);
    let mut sum = lanes.iter().sum::<f32>();
    for (x, y) in a[i..n].iter().zip(&b[i..n]) {
        sum += x * y;
    }
    sum
}

/// Dot product with eight independent accumulators (a fixed order).
#[inline(always)]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for l in 0..8 {
            acc[l] += x[l] * y[l];
        }
    }
    let mut sum = acc.iter().sum::<f32>();
    for (x, y) in ra.iter().zip(rb) {
        sum += x * y;
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gelu_and_rope_match_textbook_values() {
        assert!((gelu_tanh(1.0) - 0.841_192).abs() < 1e-5);
        assert_eq!(gelu_tanh(0.0), 0.0);
        let mut rope = RopeTable::new(10_000.0, 1.0, 4);
        rope.ensure(3);
        // Position 1 rotates the first pair by 1 rad (frequency 1) in both layouts.
        let mut a = [1.0, 0.0, 0.0, 0.0];
        apply_rope(&mut a, &rope, 1, true);
        assert!((a[0] - 1f32.cos()).abs() < 1e-6 && (a[1] - 1f32.sin()).abs() < 1e-6);
        let mut b = [1.0, 0.0, 0.0, 0.0];
        apply_rope(&mut b, &rope, 1, false);
        assert!((b[0] - 1f32.cos()).abs() < 1e-6 && (b[2] - 1f32.sin()).abs() < 1e-6);
    }

    /// The AVX2 instantiation of the attention loop gives exactly the portable one's bits
    /// (so `FORMWORK_SIMD` never changes logits through attention).
    #[test]
    fn attention_avx2_is_bit_identical_to_portable() {
        if simd_level() == SimdLevel::Scalar {
            return;
        }
        let f = |i: usize| ((i * 7919 + 13) % 2001) as f32 / 500.0 - 2.0;
        let (d, n, stride) = (64, 50, 192);
        let q: Vec<f32> = (0..d).map(f).collect();
        let k: Vec<f32> = (0..n * stride).map(|i| f(i + 3)).collect();
        let v: Vec<f32> = (0..n * stride).map(|i| f(i + 7)).collect();
        let at = Keys {
            k: &k,
            v: &v,
            stride,
            off: 64,
        };
        let (mut a, mut b) = (vec![0f32; d], vec![0f32; d]);
        attend::<false>(&q, at, 3, n - 1, 0.125, &mut a);
        // SAFETY: the CPU has AVX2 and FMA (checked above).
        unsafe { attend_avx2(&q, at, 3, n - 1, 0.125, &mut b) };
        assert_eq!(
            a.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
            b.iter().map(|x| x.to_bits()).collect::<Vec<_>>()
        );
    }

    /// Online softmax against the textbook two-pass softmax, with GQA and a window, for two
    /// sequences of different lengths attended in one batch (each row sees only its own
    /// sequence's cache and positions).
    #[test]
    fn attention_matches_two_pass_softmax() {
        let hp = Hparams {
            hidden: 0,
            ffn: 0,
            n_head: 4,
            n_kv_head: 2,
            head_dim: 8,
            eps: 1e-6,
            rope_interleaved: false,
            act: Act::Silu,
            embed_scale: None,
        };
        let f = |i: usize, s: usize| ((i * 7919 + s * 104_729) % 2000) as f32 / 1000.0 - 1.0;
        let kvd = hp.kv_dim();
        // Sequence 0: 3 rows after 4 cached positions; sequence 1: 1 row after 8.
        let seqs = [(7, 3), (9, 1)];
        let caches: Vec<KvCache> = seqs
            .iter()
            .enumerate()
            .map(|(n, &(total, _))| KvCache {
                k: (0..total * kvd).map(|i| f(i, 1 + 10 * n)).collect(),
                v: (0..total * kvd).map(|i| f(i, 2 + 10 * n)).collect(),
            })
            .collect();
        let pos: Vec<usize> = seqs.iter().map(|&(total, t)| total - t).collect();
        let row_seq: Vec<(usize, usize)> = seqs
            .iter()
            .enumerate()
            .flat_map(|(n, &(_, t))| (0..t).map(move |i| (n, i)))
            .collect();
        let t = row_seq.len();
        let qkv: Vec<f32> = (0..t * hp.qkv_dim()).map(|i| f(i, 3)).collect();
        let refs: Vec<&KvCache> = caches.iter().collect();
        for window in [None, Some(3)] {
            let mut out = vec![0f32; t * hp.q_dim()];
            attention(&qkv, &refs, &pos, &row_seq, hp, window, &mut out);
            for (r, &(n, i)) in row_seq.iter().enumerate() {
                let cache = &caches[n];
                for head in 0..hp.n_head {
                    let g = head / 2;
                    let q = &qkv[r * hp.qkv_dim() + head * 8..][..8];
                    let p = pos[n] + i;
                    let vis: Vec<usize> = (0..=p)
                        .filter(|&j| window.is_none_or(|w| p - j < w))
                        .collect();
                    let s: Vec<f64> = vis
                        .iter()
                        .map(|&j| {
                            let k = &cache.k[j * kvd + g * 8..][..8];
                            q.iter().zip(k).map(|(a, b)| (a * b) as f64).sum::<f64>() / 8f64.sqrt()
                        })
                        .collect();
                    let m = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                    let z: f64 = s.iter().map(|x| (x - m).exp()).sum();
                    for c in 0..8 {
                        let e: f64 = vis
                            .iter()
                            .zip(&s)
                            .map(|(&j, x)| (x - m).exp() / z * cache.v[j * kvd + g * 8 + c] as f64)
                            .sum();
                        let got = out[(r * hp.n_head + head) * 8 + c];
                        assert!(
                            (e as f32 - got).abs() < 1e-5,
                            "{window:?} seq {n} row {i} head {head}: {e} vs {got}"
                        );
                    }
                }
            }
        }
    }
}
