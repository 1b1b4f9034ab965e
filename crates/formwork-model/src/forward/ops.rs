//! The cheap per-row operations of the layer loop, O(hidden) each and run on the calling
//! thread: RMSNorm (fused with activation quantization), residual adds, rotary, tanh-GELU,
//! and the fixed-order dot product attention's portable path shares.

use super::weights::{Hparams, RopeTable};
use crate::kernels::{quantize_row, BlockQ8, QK};

/// `x += post_norm(h)` row by row (`h` is clobbered when there is a post-norm).
pub(super) fn residual(x: &mut [f32], h: &mut [f32], post_norm: Option<&[f32]>, hp: Hparams) {
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
pub(super) fn norm_quantize(
    x: &[f32],
    weight: &[f32],
    eps: f32,
    tmp: &mut [f32],
    out: &mut [BlockQ8],
) {
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

pub(super) fn rms_norm_in_place(x: &mut [f32], weight: &[f32], eps: f32) {
    let scale = rms_scale(x, eps);
    x.iter_mut().zip(weight).for_each(|(v, w)| *v *= scale * w);
}

/// Rotates one head in place at position `pos`.
pub(super) fn apply_rope(head: &mut [f32], rope: &RopeTable, pos: usize, interleaved: bool) {
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
pub(super) fn gelu_tanh(x: f32) -> f32 {
    const C: f32 = 0.797_884_6; // sqrt(2/π)
    0.5 * x * (1.0 + (C * (x + 0.044_715 * x * x * x)).tanh())
}

/// Dot product with eight independent accumulators (a fixed order).
#[inline(always)]
pub(super) fn dot(a: &[f32], b: &[f32]) -> f32 {
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
}
