//! The candle-op forward pass ([`Backend::Candle`](super::Backend::Candle)): production code
//! kept as the reference the native pass (`crate::forward`) is tested against, with its own
//! numerics (candle ops and quantized matmuls, rotary tables, the embedding scale in f64, a
//! per-layer KV cache of plain vectors and a written-out attention). Owns those weights and
//! that state (`CandleNet`); the loader fills them.

use std::sync::Arc;

use candle_core::quantized::{QMatMul, QTensor};
use candle_core::{DType, Device, Module, Tensor};

use crate::forward::{Act, Hparams};

/// A matrix with an optional bias (qwen2's q/k/v projections).
#[derive(Debug)]
pub(super) struct Linear {
    pub(super) weight: QMatMul,
    pub(super) bias: Option<Tensor>,
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
pub(super) struct KvCache {
    /// `k[g]`: the keys of KV head `g`, `len × head_dim`.
    pub(super) k: Vec<Vec<f32>>,
    /// `v[g]`: the values of KV head `g`, `len × head_dim`.
    pub(super) v: Vec<Vec<f32>>,
    pub(super) len: usize,
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

    pub(super) fn truncate(&mut self, len: usize, head_dim: usize) {
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
pub(super) struct Rope {
    pub(super) base: f64,
    /// Position multiplier (1 / linear scaling factor).
    pub(super) scale: f64,
    pub(super) dim: usize,
    pub(super) cos: Tensor,
    pub(super) sin: Tensor,
    pub(super) len: usize,
}

impl Rope {
    pub(super) fn new(base: f64, scale: f64, dim: usize) -> candle_core::Result<Self> {
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
pub(super) struct Layer {
    pub(super) attn_norm: Tensor,
    pub(super) q: Linear,
    pub(super) k: Linear,
    pub(super) v: Linear,
    pub(super) o: QMatMul,
    pub(super) q_norm: Option<Tensor>,
    pub(super) k_norm: Option<Tensor>,
    pub(super) post_attn_norm: Option<Tensor>,
    pub(super) ffn_norm: Tensor,
    pub(super) gate: QMatMul,
    pub(super) up: QMatMul,
    pub(super) down: QMatMul,
    pub(super) post_ffn_norm: Option<Tensor>,
    /// Index into `Model::ropes`.
    pub(super) rope: usize,
    /// Sliding-window size for local-attention layers (gemma3).
    pub(super) window: Option<usize>,
    pub(super) cache: KvCache,
}

/// The candle-op forward pass's weights and state ([`Backend::Candle`]).
#[derive(Debug)]
pub(super) struct CandleNet {
    /// The embedding table, kept quantized; rows are dequantized on lookup.
    pub(super) embed: Arc<QTensor>,
    pub(super) layers: Vec<Layer>,
    pub(super) norm: Tensor,
    pub(super) output: QMatMul,
    pub(super) ropes: Vec<Rope>,
}

impl CandleNet {
    /// Feeds `tokens` at positions `pos..pos + tokens.len()` (validated by `Model::forward`,
    /// the cache truncated to `pos`) and returns the logits of the last one.
    pub(super) fn forward(
        &mut self,
        hp: Hparams,
        tokens: &[u32],
        pos: usize,
    ) -> candle_core::Result<Vec<f32>> {
        let net = self;
        let t = tokens.len();
        let total = pos + t;
        for rope in &mut net.ropes {
            rope.ensure(total)?;
        }
        let ids = Tensor::new(tokens, &Device::Cpu)?;
        let mut x = net.embed.embedding(&ids)?.unsqueeze(0)?;
        // The scale in f64, as candle's scalar ops take it (the native pass keeps an f32).
        if hp.embed_scale.is_some() {
            x = (x * (hp.hidden as f64).sqrt())?;
        }
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
