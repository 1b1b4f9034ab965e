//! The layer loop: [`Native`], the model state the forward pass runs on (weights, rotary
//! tables, scratch buffers and the cache of `Model::forward`'s own sequence), and its batched
//! step over many sequences' caches. Attention is `attention`'s; the per-row ops `ops`'.

use std::sync::Arc;

use super::attention::attention;
use super::cache::{SeqCache, SeqView};
use super::ops::{apply_rope, gelu_tanh, norm_quantize, residual, rms_norm_in_place};
use super::profile::{Clock, Op, Profile};
use super::weights::{Act, Hparams, LayerWeights, RopeTable};
use crate::kernels::{quantize_row, BlockQ8, QMatrix, QK};

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
        let mut logits = self.forward_rows(tokens, pos, &[tokens.len() - 1]);
        logits.pop().expect("one row asked for")
    }

    /// [`forward`](Self::forward) returning the logits after each token at the indices
    /// `rows` (increasing, within `tokens`; the caller has checked them): the verification
    /// pass of speculative decoding, one pass for all of them.
    pub fn forward_rows(&mut self, tokens: &[u32], pos: usize, rows: &[usize]) -> Vec<Vec<f32>> {
        debug_assert_eq!(pos, self.state.len);
        let _ = pos;
        // The model's own sequence goes through the batched step as a batch of one: the same
        // code, so `Model::forward` and a one-sequence `forward_batch` give the same bits.
        let mut state = std::mem::replace(&mut self.state, SeqCache::new(0));
        let logits = self.forward_batch_rows(&mut [(&mut state, tokens)], &[rows]);
        self.state = state;
        logits
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
        let last: Vec<[usize; 1]> = seqs.iter().map(|(_, toks)| [toks.len() - 1]).collect();
        let rows: Vec<&[usize]> = last.iter().map(|r| &r[..]).collect();
        self.forward_batch_rows(seqs, &rows)
    }

    /// [`forward_batch`](Self::forward_batch) returning, for each sequence, the logits after
    /// its tokens at the indices `rows[i]` (increasing, within its tokens; the caller has
    /// checked them), all sequences' rows in one list, in batch order. Only the asked rows
    /// go through the final norm and the logits matmul (for Qwen2.5-0.5B a row of it is
    /// 136 M multiply-adds, as much as a fifth of a token's pass); every row is computed as
    /// it would be alone, so the logits after a token are the same bits whichever rows are
    /// asked for and however the tokens are split between calls.
    pub fn forward_batch_rows(
        &mut self,
        seqs: &mut [(&mut SeqCache, &[u32])],
        rows: &[&[usize]],
    ) -> Vec<Vec<f32>> {
        if seqs.is_empty() {
            return Vec::new();
        }
        if rayon::current_thread_index().is_none() && rayon::current_num_threads() > 1 {
            return rayon::scope(|_| self.forward_in_pool(seqs, rows));
        }
        self.forward_in_pool(seqs, rows)
    }

    fn forward_in_pool(
        &mut self,
        seqs: &mut [(&mut SeqCache, &[u32])],
        out_rows: &[&[usize]],
    ) -> Vec<Vec<f32>> {
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
                let cache = &mut seqs[q_i].0.own_mut()[l];
                cache.k.extend_from_slice(k);
                cache.v.extend_from_slice(v);
            }
            clock.lap(Op::RopeCache);
            let views: Vec<SeqView> = seqs.iter().map(|(c, _)| c.view(l, kvd)).collect();
            attention(
                &s.qkv[..t * qkvd],
                &views,
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
        // The asked rows (each sequence's last, unless more are asked for), normalized and
        // quantized into consecutive rows of `xq`, then one logits matmul for them all.
        let mut start = 0;
        let mut n = 0;
        for ((_, toks), rows) in seqs.iter().zip(out_rows) {
            for &r in *rows {
                let row = &s.x[(start + r) * h..(start + r + 1) * h];
                norm_quantize(
                    row,
                    norm,
                    hp.eps,
                    &mut s.row,
                    &mut s.xq[n * h / QK..(n + 1) * h / QK],
                );
                n += 1;
            }
            start += toks.len();
        }
        let vocab = output.rows();
        let mut logits = vec![0f32; n * vocab];
        output.matmul(&s.xq[..n * h / QK], n, &mut logits);
        clock.lap(Op::Output);
        for (c, toks) in seqs.iter_mut() {
            c.len += toks.len();
        }
        if n == 1 {
            return vec![logits];
        }
        logits.chunks_exact(vocab).map(<[f32]>::to_vec).collect()
    }
}
