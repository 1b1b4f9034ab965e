//! `e^x` for attention's online softmax: [`exp`] (one value, portable) and [`exp8_avx2`]
//! (8 lanes), the same operations, so the same bits on every CPU and kernel set.
//!
//! Both compute glibc's single-precision `expf` (`sysdeps/ieee754/flt-32/e_expf.c`, glibc ≥
//! 2.27) exactly as the variant glibc dispatches to on an x86-64 CPU with FMA and AVX2
//! (`__expf_fma`, the C source compiled with `-mfma -mavx2`) evaluates it: `x` is widened to
//! double, `x · 32/ln 2 = k + r` with `k` rounded to an integer by adding `0x1.8p52`, `2^(k/32)`
//! from a 32-entry table plus exponent bits, `2^(r/32)` by a cubic, the product rounded to
//! float. Which multiply-adds are fused is what makes the bits: GCC contracted the two uses
//! of `x · 32/ln 2` (`+ shift` and `− k`) and three of the polynomial's into FMAs (read off the
//! disassembly of Debian's glibc 2.36 `libm.so.6`, then checked over every input below). Over
//! `[-104, 0]` only the fused `x · 32/ln 2 − k` matters: all 32 fused/unfused combinations of
//! the five candidates were compared with libm on each of those 1.12 G inputs, and the 16
//! without it differ at one input (`-63.09946`), the 16 with it at none. So on
//! such a machine (every CPU formwork's AVX2 kernels run on, with glibc) [`exp`] is
//! bit-identical to `f32::exp` — the libm call attention made before — over every input it
//! computes itself: every `x ≤ 0` and `-0.0` and `-inf` (test
//! `tests::matches_libm_on_every_nonpositive_f32`, run by hand). Positive `x` and NaN, which
//! attention never produces from real scores, go to `f32::exp` on both paths.
//!
//! Why not `f32::exp`: a call per position, twice per position and query, was a fifth of a
//! batched extraction's time (`perf`: `__expf_fma` 18 %), and libm has no 8-lane version
//! whose bits match it. Why glibc's bits: logits stay bit-identical to builds before this
//! module (on glibc with FMA), and on other libms the AVX2 and portable attention still agree.
//!
//! Cost: [`exp8_avx2`] ≈ two 4-double evaluations (two 4-lane gathers from the 256-byte
//! table); [`exp`] ≈ glibc's, with `f64::mul_add` a library call where the target has no FMA.
//! Accuracy: glibc's, < 0.502 ulp.
//!
//! May use: nothing else in the crate.

/// `2^(i/32)` with `i << 47` subtracted from its bits, so adding `k << 47` for `k ≡ i (mod
/// 32)` gives `2^(k/32)` (glibc's `__exp2f_data.tab`).
const TAB: [u64; 32] = [
    0x3ff0000000000000,
    0x3fefd9b0d3158574,
    0x3fefb5586cf9890f,
    0x3fef9301d0125b51,
    0x3fef72b83c7d517b,
    0x3fef54873168b9aa,
    0x3fef387a6e756238,
    0x3fef1e9df51fdee1,
    0x3fef06fe0a31b715,
    0x3feef1a7373aa9cb,
    0x3feedea64c123422,
    0x3feece086061892d,
    0x3feebfdad5362a27,
    0x3feeb42b569d4f82,
    0x3feeab07dd485429,
    0x3feea47eb03a5585,
    0x3feea09e667f3bcd,
    0x3fee9f75e8ec5f74,
    0x3feea11473eb0187,
    0x3feea589994cce13,
    0x3feeace5422aa0db,
    0x3feeb737b0cdc5e5,
    0x3feec49182a3f090,
    0x3feed503b23e255d,
    0x3feee89f995ad3ad,
    0x3feeff76f2fb5e47,
    0x3fef199bdd85529c,
    0x3fef3720dcef9069,
    0x3fef5818dcfba487,
    0x3fef7c97337b9b5f,
    0x3fefa4afa2a490da,
    0x3fefd0765b6e4540,
];
/// `32 / ln 2` (`0x1.71547652b82fep+5`).
const INV_LN2_N: f64 = f64::from_bits(0x40471547652b82fe);
/// `0x1.8p52`: adding it rounds a double of magnitude < 2^51 to an integer (ties to even),
/// which then sits in the low bits of the sum's representation.
const SHIFT: f64 = f64::from_bits(0x4338000000000000);
/// The cubic for `2^(r/32)`: `C0 r³ + C1 r² + C2 r + 1` (`0x1.c6af84b912394p-20`,
/// `0x1.ebfce50fac4f3p-13`, `0x1.62e42ff0c52d6p-6`).
const C0: f64 = f64::from_bits(0x3ebc6af84b912394);
const C1: f64 = f64::from_bits(0x3f2ebfce50fac4f3);
const C2: f64 = f64::from_bits(0x3f962e42ff0c52d6);
/// Below this (`-0x1.9fe368p6 ≈ log 2^-150`) the result is `+0.0`.
const UFLOW: f32 = f32::from_bits(0xc2cff1b4);
/// Below this (`-0x1.9d1d9ep6 ≈ log 2^-149`), and not below [`UFLOW`], the result is the
/// smallest subnormal (glibc's `__math_may_uflowf`).
const MAY_UFLOW: f32 = f32::from_bits(0xc2ce8ecf);

/// `e^x` with glibc's `__expf_fma` bits (see the module doc); `f32::exp` for `x > 0` and NaN.
#[inline(always)]
pub(crate) fn exp(x: f32) -> f32 {
    if x > 0.0 || x.is_nan() {
        return x.exp();
    }
    if x < MAY_UFLOW {
        return if x < UFLOW { 0.0 } else { f32::from_bits(1) };
    }
    let xd = x as f64;
    let kd = INV_LN2_N.mul_add(xd, SHIFT);
    let ki = kd.to_bits();
    let kd = kd - SHIFT;
    let r = INV_LN2_N.mul_add(xd, -kd);
    let s = f64::from_bits(TAB[(ki % 32) as usize].wrapping_add(ki << 47));
    let z = C0.mul_add(r, C1);
    let r2 = r * r;
    let y = C2.mul_add(r, 1.0);
    let y = z.mul_add(r2, y);
    (y * s) as f32
}

/// [`exp`] of 8 lanes: the same double-precision operations, 4 lanes per register.
///
/// # Safety
/// The CPU must have AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(crate) unsafe fn exp8_avx2(x: std::arch::x86_64::__m256) -> std::arch::x86_64::__m256 {
    use std::arch::x86_64::*;
    let lo = exp4d(_mm256_cvtps_pd(_mm256_castps256_ps128(x)));
    let hi = exp4d(_mm256_cvtps_pd(_mm256_extractf128_ps::<1>(x)));
    let mut y = _mm256_set_m128(_mm256_cvtpd_ps(hi), _mm256_cvtpd_ps(lo));
    let tiny = _mm256_cmp_ps::<_CMP_LT_OQ>(x, _mm256_set1_ps(MAY_UFLOW));
    if _mm256_movemask_ps(tiny) != 0 {
        let zero = _mm256_cmp_ps::<_CMP_LT_OQ>(x, _mm256_set1_ps(UFLOW));
        let under = _mm256_andnot_ps(zero, _mm256_set1_ps(f32::from_bits(1)));
        y = _mm256_blendv_ps(y, under, tiny);
    }
    let inside = _mm256_cmp_ps::<_CMP_LE_OQ>(x, _mm256_setzero_ps());
    let outside = !_mm256_movemask_ps(inside) & 0xff;
    if outside != 0 {
        let (mut xs, mut ys) = ([0f32; 8], [0f32; 8]);
        _mm256_storeu_ps(xs.as_mut_ptr(), x);
        _mm256_storeu_ps(ys.as_mut_ptr(), y);
        for (l, (x, y)) in xs.iter().zip(ys.iter_mut()).enumerate() {
            if outside >> l & 1 != 0 {
                *y = x.exp();
            }
        }
        y = _mm256_loadu_ps(ys.as_ptr());
    }
    y
}

/// [`exp`] of 8 lanes with AVX-512: the same double-precision operations on one 8-double
/// register, the table read by two two-register permutes (`vpermt2q`) instead of
/// [`exp8_avx2`]'s two gathers (slow on AMD: the instructions right after `vpgatherqq` were
/// a few % of attention in `perf`). The same bits as [`exp8_avx2`] and [`exp`].
///
/// # Safety
/// The CPU must have AVX2, FMA, AVX-512 F and VL.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,avx512f,avx512vl")]
#[inline]
pub(crate) unsafe fn exp8_avx512(x: std::arch::x86_64::__m256) -> std::arch::x86_64::__m256 {
    use std::arch::x86_64::*;
    let xd = _mm512_cvtps_pd(x);
    let inv = _mm512_set1_pd(INV_LN2_N);
    let shift = _mm512_set1_pd(SHIFT);
    let kd = _mm512_fmadd_pd(inv, xd, shift);
    let ki = _mm512_castpd_si512(kd);
    let kd = _mm512_sub_pd(kd, shift);
    let r = _mm512_fmsub_pd(inv, xd, kd);
    // `TAB[ki % 32]`: entries 0–15 and 16–31 by the low four bits, then bit 4 picks.
    let tab = |i: usize| _mm512_loadu_si512(TAB.as_ptr().add(i) as *const _);
    let low = _mm512_permutex2var_epi64(tab(0), ki, tab(8));
    let high = _mm512_permutex2var_epi64(tab(16), ki, tab(24));
    let upper = _mm512_test_epi64_mask(ki, _mm512_set1_epi64(16));
    let t = _mm512_mask_blend_epi64(upper, low, high);
    let s = _mm512_castsi512_pd(_mm512_add_epi64(t, _mm512_slli_epi64::<47>(ki)));
    let z = _mm512_fmadd_pd(_mm512_set1_pd(C0), r, _mm512_set1_pd(C1));
    let r2 = _mm512_mul_pd(r, r);
    let y = _mm512_fmadd_pd(_mm512_set1_pd(C2), r, _mm512_set1_pd(1.0));
    let y = _mm512_fmadd_pd(z, r2, y);
    let mut y = _mm512_cvtpd_ps(_mm512_mul_pd(y, s));
    let tiny = _mm256_cmp_ps_mask::<_CMP_LT_OQ>(x, _mm256_set1_ps(MAY_UFLOW));
    if tiny != 0 {
        let zero = _mm256_cmp_ps_mask::<_CMP_LT_OQ>(x, _mm256_set1_ps(UFLOW));
        let under =
            _mm256_mask_blend_ps(zero, _mm256_set1_ps(f32::from_bits(1)), _mm256_setzero_ps());
        y = _mm256_mask_blend_ps(tiny, y, under);
    }
    let outside = !_mm256_cmp_ps_mask::<_CMP_LE_OQ>(x, _mm256_setzero_ps());
    if outside != 0 {
        let (mut xs, mut ys) = ([0f32; 8], [0f32; 8]);
        _mm256_storeu_ps(xs.as_mut_ptr(), x);
        _mm256_storeu_ps(ys.as_mut_ptr(), y);
        for (l, (x, y)) in xs.iter().zip(ys.iter_mut()).enumerate() {
            if outside >> l & 1 != 0 {
                *y = x.exp();
            }
        }
        y = _mm256_loadu_ps(ys.as_ptr());
    }
    y
}

/// The body of [`exp`] on 4 doubles widened from floats (any value: lanes outside the range
/// come out as garbage for the caller to replace, never a fault).
///
/// # Safety
/// The CPU must have AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn exp4d(xd: std::arch::x86_64::__m256d) -> std::arch::x86_64::__m256d {
    use std::arch::x86_64::*;
    let inv = _mm256_set1_pd(INV_LN2_N);
    let shift = _mm256_set1_pd(SHIFT);
    let kd = _mm256_fmadd_pd(inv, xd, shift);
    let ki = _mm256_castpd_si256(kd);
    let kd = _mm256_sub_pd(kd, shift);
    let r = _mm256_fmsub_pd(inv, xd, kd);
    let idx = _mm256_and_si256(ki, _mm256_set1_epi64x(31));
    let t = _mm256_i64gather_epi64::<8>(TAB.as_ptr() as *const i64, idx);
    let s = _mm256_castsi256_pd(_mm256_add_epi64(t, _mm256_slli_epi64::<47>(ki)));
    let z = _mm256_fmadd_pd(_mm256_set1_pd(C0), r, _mm256_set1_pd(C1));
    let r2 = _mm256_mul_pd(r, r);
    let y = _mm256_fmadd_pd(_mm256_set1_pd(C2), r, _mm256_set1_pd(1.0));
    let y = _mm256_fmadd_pd(z, r2, y);
    _mm256_mul_pd(y, s)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether `f32::exp` is glibc's `__expf_fma` (the reference of the module doc): glibc on
    /// x86-64 picks it when the CPU has FMA and AVX2.
    fn libm_is_glibc_fma() -> bool {
        #[cfg(all(target_arch = "x86_64", target_os = "linux", target_env = "gnu"))]
        return is_x86_feature_detected!("fma") && is_x86_feature_detected!("avx2");
        #[allow(unreachable_code)]
        false
    }

    fn has_avx2() -> bool {
        #[cfg(target_arch = "x86_64")]
        return is_x86_feature_detected!("fma") && is_x86_feature_detected!("avx2");
        #[allow(unreachable_code)]
        false
    }

    fn has_avx512() -> bool {
        #[cfg(target_arch = "x86_64")]
        return has_avx2()
            && is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512vl");
        #[allow(unreachable_code)]
        false
    }

    /// [`exp8_avx512`] of 8 values, as an array.
    #[cfg(target_arch = "x86_64")]
    fn exp8_512(x: [f32; 8]) -> [f32; 8] {
        use std::arch::x86_64::*;
        let mut y = [0f32; 8];
        // SAFETY: callers checked `has_avx512`.
        unsafe { _mm256_storeu_ps(y.as_mut_ptr(), exp8_avx512(_mm256_loadu_ps(x.as_ptr()))) };
        y
    }

    /// [`exp8_avx2`] of 8 values, as an array.
    #[cfg(target_arch = "x86_64")]
    fn exp8(x: [f32; 8]) -> [f32; 8] {
        use std::arch::x86_64::*;
        let mut y = [0f32; 8];
        // SAFETY: callers checked `has_avx2`.
        unsafe { _mm256_storeu_ps(y.as_mut_ptr(), exp8_avx2(_mm256_loadu_ps(x.as_ptr()))) };
        y
    }

    /// The inputs around which the branches change: both underflow thresholds, `-0.0`, `0`,
    /// `-inf`, `-104`, where glibc's special-case test starts (`|x| ≥ 88`), and one
    /// subnormal-producing value, each with its neighbours; plus NaN and positives (libm).
    fn edges() -> Vec<f32> {
        let mut v = vec![
            f32::NEG_INFINITY,
            f32::NAN,
            -f32::NAN,
            1.0,
            88.5,
            100.0,
            -f32::MAX,
        ];
        for c in [
            UFLOW,
            MAY_UFLOW,
            -0.0,
            0.0,
            -104.0,
            -88.0,
            -100.0,
            -1e-30,
            -f32::MIN_POSITIVE,
        ] {
            let b = c.to_bits();
            v.extend([c, f32::from_bits(b + 1), f32::from_bits(b.wrapping_sub(1))]);
        }
        v
    }

    /// Checks `xs` 8 at a time: [`exp`] against `f32::exp` when that is glibc's FMA variant,
    /// and [`exp8_avx2`] and [`exp8_avx512`] against [`exp`] when the CPU has AVX2 and
    /// AVX-512; returns the values checked.
    fn check(xs: impl Iterator<Item = f32>) -> u64 {
        let (glibc, avx2, avx512) = (libm_is_glibc_fma(), has_avx2(), has_avx512());
        let same = |a: f32, b: f32| a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan());
        let mut n = 0;
        let mut block = [0f32; 8];
        let mut fill = 0;
        let flush = |block: &[f32; 8], fill: usize| {
            for &x in &block[..fill] {
                if glibc {
                    assert!(same(exp(x), x.exp()), "{x:e} ({:#x})", x.to_bits());
                }
            }
            #[cfg(target_arch = "x86_64")]
            if avx2 {
                let y = exp8(*block);
                for (x, y) in block[..fill].iter().zip(y) {
                    assert!(same(y, exp(*x)), "8 lanes: {x:e} ({:#x})", x.to_bits());
                }
            }
            #[cfg(target_arch = "x86_64")]
            if avx512 {
                let y = exp8_512(*block);
                for (x, y) in block[..fill].iter().zip(y) {
                    assert!(same(y, exp(*x)), "AVX-512: {x:e} ({:#x})", x.to_bits());
                }
            }
            let _ = (avx2, avx512);
        };
        for x in xs {
            block[fill] = x;
            fill += 1;
            n += 1;
            if fill == 8 {
                flush(&block, fill);
                fill = 0;
            }
        }
        flush(&block, fill);
        n
    }

    /// Every 997th f32 from `-0.0` down to `-104` (bits `0x8000_0000..=0xc2d0_0000`, 1.1 M
    /// values), and the edges: the fast version of the exhaustive test below.
    #[test]
    fn matches_libm_on_sampled_nonpositive_f32() {
        let sampled = (0x8000_0000u32..=0xc2d0_0000)
            .step_by(997)
            .map(f32::from_bits);
        let n = check(sampled.chain(edges()));
        assert!(n > 1_000_000);
        // The values the module doc names, whatever the libm.
        assert_eq!(exp(-0.0), 1.0);
        assert_eq!(exp(0.0), 1.0);
        assert_eq!(exp(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp(-104.0).to_bits(), 0);
        assert_eq!(exp(MAY_UFLOW).to_bits(), 1);
        assert!((exp(-1.0) - std::f32::consts::E.recip()).abs() < 1e-7);
    }

    /// Every non-positive f32 (`-0.0` through `-inf`, 2.1 G values: every value above `-104`
    /// and all of glibc's underflow branches), then every NaN with the sign bit set, in
    /// parallel. Release mode only (minutes): `cargo test -p formwork-model --release --lib
    /// expf -- --ignored`. Run 2026-12-05 on an AMD EPYC (AVX2, FMA, AVX-512), Debian glibc
    /// 2.36: all equal to `f32::exp`, the 8-lane version equal to the scalar one.
    #[test]
    #[ignore = "2.1 G values; run by hand in release mode"]
    fn matches_libm_on_every_nonpositive_f32() {
        use rayon::prelude::*;
        let chunks: Vec<u32> = (0x8000u32..=0xffff).collect();
        let n: u64 = chunks
            .par_iter()
            .map(|&hi| check((0..=0xffffu32).map(move |lo| f32::from_bits(hi << 16 | lo))))
            .sum();
        assert_eq!(n, 1 << 31);
    }
}
