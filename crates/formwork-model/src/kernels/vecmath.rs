//! f32 vector math for the non-matmul parts of a forward pass: an exponential that
//! vectorizes, attention over the KV cache for one (query row, head), and the gated MLP
//! activations.
//!
//! Owns the numerics and the AVX2 multiversioning of these loops; does *not* own the model
//! graph. `model::forward` does not call these yet: with them one reference check flipped a
//! near-tied argmax (see `docs/inference.md`), which is open.
//!
//! # Why
//! The crate is compiled for baseline x86-64 (SSE2), so plain f32 loops use 4-wide vectors
//! and `f32::exp` is a libm call per element: in a prefill of 256 tokens on SmolLM2 that is
//! ~9 M exponentials in attention and ~12 M in SiLU. Each public function here has one
//! portable body (`#[inline(always)]`, written so LLVM vectorizes it) instantiated twice:
//! plainly and under `#[target_feature(enable = "avx2,fma")]`, chosen at run time. Rust never
//! contracts `a * b + c` into an FMA on its own, so both instantiations round identically and
//! give bit-identical results: the choice of kernel set never changes the output.
//!
//! # Accuracy
//! [`exp`] is within 2 · 10⁻⁷ relative of the true value on [−87, 88] (clamped outside:
//! never infinite, never zero), tested against `f64::exp`.

use super::{simd_level, SimdLevel};

/// `e^x` by range reduction to `r ∈ [−ln2/2, ln2/2]`, a degree-7 Taylor polynomial and an
/// exponent add. `x` is clamped to [−87.3, 88.3] so the result is a normal float.
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    // ln 2 split so that `n · LN2_HI` is exact for |n| < 2^9.
    const LN2_HI: f32 = 0.693_145_75;
    const LN2_LO: f32 = 1.428_606_8e-6;
    // 1.5 · 2^23: adding it rounds to an integer (ties to even) kept in the low mantissa bits.
    const MAGIC: f32 = 12_582_912.0;
    let x = x.clamp(-87.3, 88.3);
    let shifted = x * LOG2E + MAGIC;
    let n = shifted - MAGIC;
    let r = x - n * LN2_HI - n * LN2_LO;
    let p = 1.0 / 5040.0;
    let p = p * r + 1.0 / 720.0;
    let p = p * r + 1.0 / 120.0;
    let p = p * r + 1.0 / 24.0;
    let p = p * r + 1.0 / 6.0;
    let p = p * r + 0.5;
    let p = p * r + 1.0;
    let p = p * r + 1.0;
    // 2^n from n's integer bits (two's complement in the low mantissa bits of `shifted`).
    let ni = shifted.to_bits().wrapping_sub(MAGIC.to_bits());
    p * f32::from_bits(ni.wrapping_add(127) << 23)
}

fn avx2() -> bool {
    simd_level() != SimdLevel::Scalar
}

/// Keys per online-softmax step: scores of a chunk live in a stack array, the running max
/// and the output rescale happen once per chunk rather than once per key.
const CHUNK: usize = 16;

/// One attention head for one query: `out = softmax(q · K[j] · scale) · V[j]` over the
/// positions `lo..=hi`, where position `j`'s key and value are `k[j · stride + off..][..d]`
/// and `v[..]` likewise (`d = q.len() = out.len()`).
///
/// Online softmax over chunks of 16 keys: no buffer beyond 16 scores on the stack, and the
/// result for a query does not depend on how many other queries are computed with it.
#[allow(clippy::too_many_arguments)]
pub fn attend(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    stride: usize,
    off: usize,
    lo: usize,
    hi: usize,
    scale: f32,
    out: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    if avx2() {
        // SAFETY: `avx2()` means the CPU has AVX2 and FMA (`simd_level` never reports more
        // than the CPU has).
        return unsafe { attend_avx2(q, k, v, stride, off, lo, hi, scale, out) };
    }
    attend_body(q, k, v, stride, off, lo, hi, scale, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[allow(clippy::too_many_arguments)]
unsafe fn attend_avx2(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    stride: usize,
    off: usize,
    lo: usize,
    hi: usize,
    scale: f32,
    out: &mut [f32],
) {
    attend_body(q, k, v, stride, off, lo, hi, scale, out)
}

#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn attend_body(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    stride: usize,
    off: usize,
    lo: usize,
    hi: usize,
    scale: f32,
    out: &mut [f32],
) {
    let d = q.len();
    out.fill(0.0);
    let (mut max, mut sum) = (f32::NEG_INFINITY, 0f32);
    let mut s = [0f32; CHUNK];
    let mut c = lo;
    while c <= hi {
        let n = (hi + 1 - c).min(CHUNK);
        for (j, sj) in s.iter_mut().enumerate() {
            *sj = if j < n {
                let at = (c + j) * stride + off;
                dot(q, &k[at..at + d]) * scale
            } else {
                f32::NEG_INFINITY
            };
        }
        let cmax = s.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
        if cmax > max {
            // First chunk: `max` is −∞, the factor is ~1e-38 and everything it scales is 0.
            let r = exp(max - cmax);
            sum *= r;
            out.iter_mut().for_each(|o| *o *= r);
            max = cmax;
        }
        for sj in s.iter_mut() {
            *sj = exp(*sj - max);
        }
        // Padding lanes are exp(−∞) ≈ 1e-38: below f32 resolution of any real sum (≥ 1).
        sum += s.iter().sum::<f32>();
        for (j, &w) in s.iter().enumerate().take(n) {
            let at = (c + j) * stride + off;
            out.iter_mut()
                .zip(&v[at..at + d])
                .for_each(|(o, &x)| *o += w * x);
        }
        c += n;
    }
    let inv = 1.0 / sum;
    out.iter_mut().for_each(|o| *o *= inv);
}

/// Dot product with eight independent accumulators (a fixed order that vectorizes).
#[inline(always)]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
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

/// `out[i] = silu(g[i]) · u[i]`.
pub fn silu_mul(g: &[f32], u: &[f32], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if avx2() {
        // SAFETY: see `attend`.
        return unsafe { silu_mul_avx2(g, u, out) };
    }
    silu_mul_body(g, u, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn silu_mul_avx2(g: &[f32], u: &[f32], out: &mut [f32]) {
    silu_mul_body(g, u, out)
}

#[inline(always)]
fn silu_mul_body(g: &[f32], u: &[f32], out: &mut [f32]) {
    for ((o, &g), &u) in out.iter_mut().zip(g).zip(u) {
        *o = g / (1.0 + exp(-g)) * u;
    }
}

/// `out[i] = gelu_tanh(g[i]) · u[i]` (Gemma's `gelu_pytorch_tanh`).
pub fn gelu_tanh_mul(g: &[f32], u: &[f32], out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if avx2() {
        // SAFETY: see `attend`.
        return unsafe { gelu_tanh_mul_avx2(g, u, out) };
    }
    gelu_tanh_mul_body(g, u, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn gelu_tanh_mul_avx2(g: &[f32], u: &[f32], out: &mut [f32]) {
    gelu_tanh_mul_body(g, u, out)
}

#[inline(always)]
fn gelu_tanh_mul_body(g: &[f32], u: &[f32], out: &mut [f32]) {
    for ((o, &g), &u) in out.iter_mut().zip(g).zip(u) {
        *o = gelu_tanh(g) * u;
    }
}

/// tanh-approximated GELU, with `tanh(y) = 1 − 2 / (e^{2y} + 1)` on [`exp`].
#[inline(always)]
pub fn gelu_tanh(x: f32) -> f32 {
    const C: f32 = 0.797_884_6; // sqrt(2/π)
    let y = C * (x + 0.044_715 * x * x * x);
    0.5 * x * (2.0 - 2.0 / (exp(2.0 * y) + 1.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_is_accurate_and_finite() {
        let mut worst = 0f64;
        let mut x = -87.0f32;
        while x < 88.0 {
            let want = (x as f64).exp();
            let rel = ((exp(x) as f64 - want) / want).abs();
            worst = worst.max(rel);
            x += 0.0137;
        }
        assert!(worst < 2e-7, "worst relative error {worst}");
        assert!(exp(f32::NEG_INFINITY) > 0.0 && exp(f32::NEG_INFINITY) < 1e-37);
        assert!(exp(1000.0).is_finite());
        assert_eq!(exp(0.0), 1.0);
    }

    #[test]
    fn gelu_and_silu_match_libm_forms() {
        for i in -400..400 {
            let x = i as f32 / 37.0;
            let gelu = 0.5 * x * (1.0 + (0.797_884_6f32 * (x + 0.044_715 * x * x * x)).tanh());
            assert!(
                (gelu_tanh(x) - gelu).abs() <= 1e-6 * (1.0 + gelu.abs()),
                "{x}"
            );
            let mut out = [0f32];
            silu_mul(&[x], &[2.0], &mut out);
            let silu = x / (1.0 + (-x).exp()) * 2.0;
            assert!((out[0] - silu).abs() <= 1e-6 * (1.0 + silu.abs()), "{x}");
        }
    }

    /// The AVX2 instantiation and the portable one give bit-identical results.
    #[test]
    fn avx2_and_portable_bodies_are_bit_identical() {
        if !avx2() {
            return;
        }
        let f = |i: usize| ((i * 7919 + 13) % 2001) as f32 / 500.0 - 2.0;
        let (d, n) = (64, 50);
        let q: Vec<f32> = (0..d).map(f).collect();
        let k: Vec<f32> = (0..n * d).map(|i| f(i + 3)).collect();
        let v: Vec<f32> = (0..n * d).map(|i| f(i + 7)).collect();
        let (mut a, mut b) = (vec![0f32; d], vec![0f32; d]);
        attend_body(&q, &k, &v, d, 0, 3, n - 1, 0.125, &mut a);
        // SAFETY: `avx2()` checked above.
        unsafe { attend_avx2(&q, &k, &v, d, 0, 3, n - 1, 0.125, &mut b) };
        assert_eq!(a, b);
        let (mut a, mut b) = (vec![0f32; n * d], vec![0f32; n * d]);
        silu_mul_body(&k, &v, &mut a);
        // SAFETY: as above.
        unsafe { silu_mul_avx2(&k, &v, &mut b) };
        assert_eq!(a, b);
        gelu_tanh_mul_body(&k, &v, &mut a);
        // SAFETY: as above.
        unsafe { gelu_tanh_mul_avx2(&k, &v, &mut b) };
        assert_eq!(a, b);
    }
}
