//! AVX2 + FMA + F16C dot products of a quantized weight row with a [`BlockQ8`] activation row.
//!
//! Same results as [`super::scalar`] up to the order of f32 additions: the integer part of
//! every block is exact. Unsigned × signed byte products go through `maddubs` (u8 × i8 → i16
//! pairs), then `madd` with ones (→ i32), converted to f32 and scaled per block. Signed weights
//! (Q8_0, Q5_0 − 16, Q6_K − 32) use the sign trick: `|w|` × `x·sign(w)`. No product pair
//! saturates i16: |w| ≤ 128 and |x| ≤ 127 give at most 2·128·127 = 32,512.
//!
//! # Safety
//! Every function requires the CPU to support `avx2`, `fma` and `f16c` (checked once by
//! [`super::simd_level`]) and a weight slice of exactly `x.len()` blocks' worth of bytes (the
//! callers in `super` slice rows from a validated matrix).

#![allow(unsafe_op_in_unsafe_fn)]

use std::arch::x86_64::*;

use super::BlockQ8;

#[inline(always)]
unsafe fn f16(p: *const u8) -> f32 {
    let h = (p as *const u16).read_unaligned();
    _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(h as i32)))
}

#[inline(always)]
unsafe fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_movehdup_ps(s));
    _mm_cvtss_f32(s)
}

/// 16 bytes of nibbles → 32 bytes: low nibbles in the low lane, high nibbles in the high one.
#[inline(always)]
unsafe fn nibbles16(p: *const u8) -> __m256i {
    let raw = _mm_loadu_si128(p as *const __m128i);
    let both = _mm256_set_m128i(_mm_srli_epi16(raw, 4), raw);
    _mm256_and_si256(both, _mm256_set1_epi8(0x0F))
}

#[inline(always)]
unsafe fn load_q(xb: &BlockQ8) -> __m256i {
    _mm256_loadu_si256(xb.q.as_ptr() as *const __m256i)
}

/// Σ u·s over 32 bytes as eight i32 lanes (lane `i` sums bytes `4i..4i+4`).
#[inline(always)]
unsafe fn dot_us(u: __m256i, s: __m256i) -> __m256i {
    _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1))
}

/// Σ w·x for signed bytes, via `|w|` and `x·sign(w)`.
#[inline(always)]
unsafe fn dot_ss(w: __m256i, x: __m256i) -> __m256i {
    dot_us(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w))
}

/// See [`super::scalar::dot_q4_1`].
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_q4_1(w: &[u8], x: &[BlockQ8]) -> f32 {
    let p = w.as_ptr();
    let mut acc = _mm256_setzero_ps();
    let mut mins = 0f32;
    for (i, xb) in x.iter().enumerate() {
        let b = p.add(20 * i);
        let (d, m) = (f16(b), f16(b.add(2)));
        let s = dot_us(nibbles16(b.add(4)), load_q(xb));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(d * xb.d), acc);
        mins += m * xb.s;
    }
    hsum(acc) + mins
}

/// 32 bits → 32 bytes, 0xFF where the bit is set (byte `i` ↔ bit `i`).
#[inline(always)]
unsafe fn bytes_from_bits(bits: u32) -> __m256i {
    let v = _mm256_set1_epi32(bits as i32);
    let shuf = _mm256_setr_epi8(
        0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3,
        3, 3,
    );
    let mask = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
    _mm256_cmpeq_epi8(_mm256_and_si256(_mm256_shuffle_epi8(v, shuf), mask), mask)
}

/// See [`super::scalar::dot_q5_0`].
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_q5_0(w: &[u8], x: &[BlockQ8]) -> f32 {
    let p = w.as_ptr();
    let mut acc = _mm256_setzero_ps();
    let high = _mm256_set1_epi8(0x10);
    let bias = _mm256_set1_epi8(16);
    for (i, xb) in x.iter().enumerate() {
        let b = p.add(22 * i);
        let d = f16(b);
        let qh = (b.add(2) as *const u32).read_unaligned();
        let q = _mm256_or_si256(
            nibbles16(b.add(6)),
            _mm256_and_si256(bytes_from_bits(qh), high),
        );
        let s = dot_ss(_mm256_sub_epi8(q, bias), load_q(xb));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(d * xb.d), acc);
    }
    hsum(acc)
}

/// See [`super::scalar::dot_q8_0`].
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_q8_0(w: &[u8], x: &[BlockQ8]) -> f32 {
    let p = w.as_ptr();
    let mut acc = _mm256_setzero_ps();
    for (i, xb) in x.iter().enumerate() {
        let b = p.add(34 * i);
        let d = f16(b);
        let q = _mm256_loadu_si256(b.add(2) as *const __m256i);
        let s = dot_ss(q, load_q(xb));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(d * xb.d), acc);
    }
    hsum(acc)
}

/// See [`super::scalar::dot_q4_k`].
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_q4_k(w: &[u8], x: &[BlockQ8]) -> f32 {
    let p = w.as_ptr();
    let m4 = _mm256_set1_epi8(0x0F);
    let mut acc = _mm256_setzero_ps();
    let mut mins = 0f32;
    for (i, xs) in x.chunks_exact(8).enumerate() {
        let b = p.add(144 * i);
        let (d, dmin) = (f16(b), f16(b.add(2)));
        let scales = std::slice::from_raw_parts(b.add(4), 12);
        for c in 0..4 {
            let raw = _mm256_loadu_si256(b.add(16 + 32 * c) as *const __m256i);
            let lo = _mm256_and_si256(raw, m4);
            let hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
            let (sc0, m0) = super::scalar::q4_k_scale_min(2 * c, scales);
            let (sc1, m1) = super::scalar::q4_k_scale_min(2 * c + 1, scales);
            let (x0, x1) = (&xs[2 * c], &xs[2 * c + 1]);
            let s0 = dot_us(lo, load_q(x0));
            let s1 = dot_us(hi, load_q(x1));
            acc = _mm256_fmadd_ps(
                _mm256_cvtepi32_ps(s0),
                _mm256_set1_ps(d * sc0 as f32 * x0.d),
                acc,
            );
            acc = _mm256_fmadd_ps(
                _mm256_cvtepi32_ps(s1),
                _mm256_set1_ps(d * sc1 as f32 * x1.d),
                acc,
            );
            mins += dmin * (m0 as f32 * x0.s + m1 as f32 * x1.s);
        }
    }
    hsum(acc) - mins
}

/// See [`super::scalar::dot_q6_k`].
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn dot_q6_k(w: &[u8], x: &[BlockQ8]) -> f32 {
    let p = w.as_ptr();
    let m4 = _mm256_set1_epi8(0x0F);
    let m3 = _mm256_set1_epi8(3);
    let bias = _mm256_set1_epi8(32);
    let mut acc = _mm256_setzero_ps();
    for (i, xs) in x.chunks_exact(8).enumerate() {
        let b = p.add(210 * i);
        let d = f16(b.add(208));
        let sc = b.add(192) as *const i8;
        for n in 0..2 {
            let ql0 = _mm256_loadu_si256(b.add(64 * n) as *const __m256i);
            let ql1 = _mm256_loadu_si256(b.add(64 * n + 32) as *const __m256i);
            let qh = _mm256_loadu_si256(b.add(128 + 32 * n) as *const __m256i);
            let high = |shift: i32| -> __m256i {
                let h = match shift {
                    0 => qh,
                    2 => _mm256_srli_epi16(qh, 2),
                    4 => _mm256_srli_epi16(qh, 4),
                    _ => _mm256_srli_epi16(qh, 6),
                };
                _mm256_slli_epi16(_mm256_and_si256(h, m3), 4)
            };
            let qs = [
                _mm256_or_si256(_mm256_and_si256(ql0, m4), high(0)),
                _mm256_or_si256(_mm256_and_si256(ql1, m4), high(2)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4), high(4)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4), high(6)),
            ];
            for (k, q) in qs.into_iter().enumerate() {
                let xb = &xs[4 * n + k];
                let q = _mm256_sub_epi8(q, bias);
                let prod =
                    _mm256_maddubs_epi16(_mm256_sign_epi8(q, q), _mm256_sign_epi8(load_q(xb), q));
                let s_lo = *sc.add(8 * n + 2 * k) as i16;
                let s_hi = *sc.add(8 * n + 2 * k + 1) as i16;
                let scales = _mm256_set_m128i(_mm_set1_epi16(s_hi), _mm_set1_epi16(s_lo));
                let s = _mm256_madd_epi16(prod, scales);
                acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(d * xb.d), acc);
            }
        }
    }
    hsum(acc)
}

/// See [`super::scalar::quantize_row`]; same rounding (ties to even), so the blocks are
/// identical.
#[target_feature(enable = "avx2,fma,f16c")]
pub unsafe fn quantize_row(x: &[f32], out: &mut [BlockQ8]) {
    let sign_mask = _mm256_set1_ps(-0.0);
    for (i, o) in out.iter_mut().enumerate().take(x.len() / 32) {
        let p = x.as_ptr().add(32 * i);
        let v = [
            _mm256_loadu_ps(p),
            _mm256_loadu_ps(p.add(8)),
            _mm256_loadu_ps(p.add(16)),
            _mm256_loadu_ps(p.add(24)),
        ];
        let mut m = _mm256_andnot_ps(sign_mask, v[0]);
        for vk in &v[1..] {
            m = _mm256_max_ps(m, _mm256_andnot_ps(sign_mask, *vk));
        }
        let m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        let m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        let m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        let amax = _mm_cvtss_f32(m4);
        let d = amax / 127.0;
        let id = _mm256_set1_ps(if d > 0.0 { 1.0 / d } else { 0.0 });
        let r = v.map(|vk| {
            _mm256_cvtps_epi32(_mm256_round_ps(
                _mm256_mul_ps(vk, id),
                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC,
            ))
        });
        let sum = _mm256_add_epi32(_mm256_add_epi32(r[0], r[1]), _mm256_add_epi32(r[2], r[3]));
        let s4 = _mm_add_epi32(
            _mm256_castsi256_si128(sum),
            _mm256_extracti128_si256(sum, 1),
        );
        let s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0b01_00_11_10));
        let s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0b10_11_00_01));
        // i32 → i16 → i8 packs work per 128-bit lane; the permute restores element order.
        let p16a = _mm256_packs_epi32(r[0], r[1]);
        let p16b = _mm256_packs_epi32(r[2], r[3]);
        let p8 = _mm256_packs_epi16(p16a, p16b);
        let perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
        let p8 = _mm256_permutevar8x32_epi32(p8, perm);
        _mm256_storeu_si256(o.q.as_mut_ptr() as *mut __m256i, p8);
        o.d = d;
        o.s = d * _mm_cvtsi128_si32(s4) as f32;
    }
}

// ---------------------------------------------------------------------------------------
// Packed (8-row interleaved) matrices: see `super::packed` for the layout. One 32-bit lane
// per weight row, so a block of 8 rows × 32 weights is 8 vectors of 4 weights per lane, each
// multiplied against 4 activation bytes broadcast to all lanes. A tile of `T` tokens is kept
// in registers (an i32 accumulator per token for the block, an f32 one per token for the
// row), so each weight block is unpacked once per tile, not once per token.
// ---------------------------------------------------------------------------------------

const F_Q4_1: u8 = 0;
const F_Q5_0: u8 = 1;
const F_Q8_0: u8 = 2;
const F_Q4K: u8 = 3;
const F_Q6K: u8 = 4;

/// Arguments of one tile: `groups` packed groups at `w`, `nb` blocks per row, `T` activation
/// rows at `x` (`nb` blocks apart), outputs at `out[k · stride + 8g + i]`.
#[derive(Clone, Copy)]
struct Tile {
    w: *const u8,
    groups: usize,
    nb: usize,
    x: *const BlockQ8,
    out: *mut f32,
    stride: usize,
}

#[inline(always)]
const fn packed_block_bytes(f: u8) -> usize {
    match f {
        F_Q4_1 => 160,
        F_Q5_0 => 176,
        F_Q4K => 192,
        F_Q6K => 320,
        _ => 272,
    }
}

/// Whether the format's kernel adds `m · s` per block: the mins of Q4_1 and Q4_K, and the
/// offsets that make Q5_0 (−16) and, with VNNI, Q8_0 (−128, weights stored as `w + 128`)
/// unsigned.
#[inline(always)]
const fn has_min(vnni: bool, f: u8) -> bool {
    match f {
        F_Q8_0 => vnni,
        F_Q6K => false,
        _ => true,
    }
}

/// The 8 weight vectors of one packed unit (vector `j` pairs with activation bytes
/// `4j..4j+4`), the per-row scale vector and the per-row min vector.
#[inline(always)]
unsafe fn unpack<const V: bool, const F: u8>(p: *const u8) -> ([__m256i; 8], __m256, __m256) {
    let m4 = _mm256_set1_epi8(0x0F);
    let load = |off: usize| _mm256_loadu_si256(p.add(off) as *const __m256i);
    let mut u = [_mm256_setzero_si256(); 8];
    if F == F_Q4_1 || F == F_Q4K {
        let q = if F == F_Q4K { 64 } else { 32 };
        for c in 0..4 {
            let ch = load(q + 32 * c);
            u[c] = _mm256_and_si256(ch, m4);
            u[4 + c] = _mm256_and_si256(_mm256_srli_epi16(ch, 4), m4);
        }
        let (d, m) = if F == F_Q4K {
            (
                _mm256_loadu_ps(p as *const f32),
                _mm256_loadu_ps(p.add(32) as *const f32),
            )
        } else {
            (
                _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i)),
                _mm256_cvtph_ps(_mm_loadu_si128(p.add(16) as *const __m128i)),
            )
        };
        return (u, d, m);
    }
    if F == F_Q6K {
        // Signed bytes; the second "min" vector is the scale of the last 16 weights.
        for (j, uj) in u.iter_mut().enumerate() {
            *uj = load(64 + 32 * j);
        }
        let d_hi = _mm256_loadu_ps(p.add(32) as *const f32);
        return (u, _mm256_loadu_ps(p as *const f32), d_hi);
    }
    let d = _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i));
    match F {
        F_Q5_0 => {
            let planes = load(144);
            let bit4 = _mm256_set1_epi8(0x10);
            // Plane bit `c` (or `4 + c`) moved to bit 4 of its byte: 16-bit shifts by at most
            // 4 left or 3 right never bring a neighbouring byte's bit into bit 4.
            let lo_bits = [
                _mm256_slli_epi16(planes, 4),
                _mm256_slli_epi16(planes, 3),
                _mm256_slli_epi16(planes, 2),
                _mm256_slli_epi16(planes, 1),
            ];
            let hi_bits = [
                planes,
                _mm256_srli_epi16(planes, 1),
                _mm256_srli_epi16(planes, 2),
                _mm256_srli_epi16(planes, 3),
            ];
            for c in 0..4 {
                let ch = load(16 + 32 * c);
                u[c] =
                    _mm256_or_si256(_mm256_and_si256(ch, m4), _mm256_and_si256(lo_bits[c], bit4));
                u[4 + c] = _mm256_or_si256(
                    _mm256_and_si256(_mm256_srli_epi16(ch, 4), m4),
                    _mm256_and_si256(hi_bits[c], bit4),
                );
            }
            (u, d, _mm256_mul_ps(d, _mm256_set1_ps(-16.0)))
        }
        _ => {
            let flip = _mm256_set1_epi8(-128);
            for (j, uj) in u.iter_mut().enumerate() {
                let w = load(16 + 32 * j);
                // VNNI multiplies unsigned × signed: store `w + 128` and subtract 128·Σx.
                *uj = if V { _mm256_xor_si256(w, flip) } else { w };
            }
            (u, d, _mm256_mul_ps(d, _mm256_set1_ps(-128.0)))
        }
    }
}

/// `acc + Σ u·x` per 32-bit lane (4 byte products each).
#[inline(always)]
unsafe fn dot4<const V: bool, const F: u8>(acc: __m256i, u: __m256i, x: __m256i) -> __m256i {
    if V && F == F_Q6K {
        _mm256_dpbusd_epi32(acc, _mm256_sign_epi8(u, u), _mm256_sign_epi8(x, u))
    } else if V {
        _mm256_dpbusd_epi32(acc, u, x)
    } else if F == F_Q8_0 || F == F_Q6K {
        // Signed weights without VNNI: `maddubs` needs an unsigned side, and `w + 128`
        // would saturate its i16 pairs, so use |w| × x·sign(w).
        _mm256_add_epi32(acc, dot_ss(u, x))
    } else {
        _mm256_add_epi32(acc, dot_us(u, x))
    }
}

#[inline(always)]
unsafe fn tile<const V: bool, const T: usize, const F: u8>(a: Tile) {
    let pb = packed_block_bytes(F);
    for g in 0..a.groups {
        let gw = a.w.add(g * a.nb * pb);
        let mut facc = [_mm256_setzero_ps(); T];
        for b in 0..a.nb {
            let p = gw.add(b * pb);
            let (u, d, m) = unpack::<V, F>(p);
            // Q6_K scales its two 16-weight halves separately: two passes of 4 vectors.
            let halves = if F == F_Q6K { 2 } else { 1 };
            for h in 0..halves {
                let d = if h == 0 { d } else { m };
                let mut iacc = [_mm256_setzero_si256(); T];
                let per = 8 / halves;
                for (j, uj) in u.iter().enumerate().skip(per * h).take(per) {
                    for (k, acc) in iacc.iter_mut().enumerate() {
                        let xq = (*a.x.add(k * a.nb + b)).q.as_ptr().add(4 * j) as *const i32;
                        *acc = dot4::<V, F>(*acc, *uj, _mm256_set1_epi32(xq.read_unaligned()));
                    }
                }
                for (k, (fa, ia)) in facc.iter_mut().zip(iacc).enumerate() {
                    let xb = &*a.x.add(k * a.nb + b);
                    let scale = _mm256_mul_ps(d, _mm256_set1_ps(xb.d));
                    *fa = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ia), scale, *fa);
                    if has_min(V, F) {
                        *fa = _mm256_fmadd_ps(m, _mm256_set1_ps(xb.s), *fa);
                    }
                }
            }
        }
        for (k, fa) in facc.iter().enumerate() {
            _mm256_storeu_ps(a.out.add(k * a.stride + 8 * g), *fa);
        }
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tile_avx2<const T: usize, const F: u8>(a: Tile) {
    tile::<false, T, F>(a)
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn tile_vnni<const T: usize, const F: u8>(a: Tile) {
    tile::<true, T, F>(a)
}

/// One token against `G` packed groups whose units are read side by side (decode's GEMV).
///
/// The tile kernel's 1-token instance runs one dependent chain per unit — eight
/// `vpdpbusd` (5 cycles each) into one accumulator, then two dependent FMAs — and little
/// else, so it waits on latency. Here each group splits its eight byte products over two
/// integer accumulators (4-deep chains) and `G` groups share the activation broadcasts, giving
/// `2·G` independent integer chains and `G` float chains per block step. The f32 operations
/// per output are exactly the tile kernel's (`fma(cvt(Σ), d·x.d, acc)`, then
/// `fma(m, x.s, acc)`, block after block) and integer sums are exact in any order, so the
/// results are bit-identical to [`tile`] with one token.
#[inline(always)]
unsafe fn gemv_groups<const V: bool, const F: u8, const G: usize>(a: Tile, g0: usize) {
    let pb = packed_block_bytes(F);
    let mut facc = [_mm256_setzero_ps(); G];
    for b in 0..a.nb {
        let xb = &*a.x.add(b);
        let xq = xb.q.as_ptr() as *const i32;
        let xd = _mm256_set1_ps(xb.d);
        // Q6_K scales its two 16-weight halves separately: two passes of 4 vectors.
        let halves = if F == F_Q6K { 2 } else { 1 };
        let per = 8 / halves;
        let mut units = [(
            [_mm256_setzero_si256(); 8],
            _mm256_setzero_ps(),
            _mm256_setzero_ps(),
        ); G];
        for (gi, unit) in units.iter_mut().enumerate() {
            *unit = unpack::<V, F>(a.w.add(((g0 + gi) * a.nb + b) * pb));
        }
        for h in 0..halves {
            let mut i0 = [_mm256_setzero_si256(); G];
            let mut i1 = [_mm256_setzero_si256(); G];
            for j in (per * h..per * h + per).step_by(2) {
                let x0 = _mm256_set1_epi32(xq.add(j).read_unaligned());
                let x1 = _mm256_set1_epi32(xq.add(j + 1).read_unaligned());
                for gi in 0..G {
                    i0[gi] = dot4::<V, F>(i0[gi], units[gi].0[j], x0);
                    i1[gi] = dot4::<V, F>(i1[gi], units[gi].0[j + 1], x1);
                }
            }
            for gi in 0..G {
                let (_, d, m) = units[gi];
                let d = if h == 0 { d } else { m };
                let ia = _mm256_add_epi32(i0[gi], i1[gi]);
                let scale = _mm256_mul_ps(d, xd);
                facc[gi] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(ia), scale, facc[gi]);
                if has_min(V, F) {
                    facc[gi] = _mm256_fmadd_ps(m, _mm256_set1_ps(xb.s), facc[gi]);
                }
            }
        }
    }
    for (gi, fa) in facc.iter().enumerate() {
        _mm256_storeu_ps(a.out.add(8 * (g0 + gi)), *fa);
    }
}

/// Decode: one token against every group of `a`, two groups at a time.
#[inline(always)]
unsafe fn gemv<const V: bool, const F: u8>(a: Tile) {
    let mut g = 0;
    while g + 2 <= a.groups {
        gemv_groups::<V, F, 2>(a, g);
        g += 2;
    }
    if g < a.groups {
        gemv_groups::<V, F, 1>(a, g);
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn gemv_avx2<const F: u8>(a: Tile) {
    gemv::<false, F>(a)
}

#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")]
unsafe fn gemv_vnni<const F: u8>(a: Tile) {
    gemv::<true, F>(a)
}

/// Token tiles of up to `TT` rows for one format.
#[inline(always)]
unsafe fn tiles<const F: u8>(vnni: bool, mut a: Tile, t: usize, gemv_tokens: usize) {
    if t <= gemv_tokens {
        // Each token through the GEMV kernel (bit-identical to its 1-token tile).
        for _ in 0..t {
            if vnni {
                gemv_vnni::<F>(a);
            } else {
                gemv_avx2::<F>(a);
            }
            a.x = a.x.add(a.nb);
            a.out = a.out.add(a.stride);
        }
        return;
    }
    // AVX2 has 16 vector registers: 4 tokens keep both accumulators of each in registers;
    // with AVX-512 (32 registers) 8 do.
    let tt = if vnni { 8 } else { 4 };
    // More tokens than one tile (a batch of decode rows, or prefill): weight-stationary
    // order. Each run of groups (≤ `STATIONARY_BYTES` of weights) is read from memory once
    // and every token tile multiplies against it while it sits in L1/L2, instead of every
    // tile streaming the whole matrix again. Decode is bound by reading weights, so a batch
    // of B rows then costs one weight read, not ⌈B / tile⌉. Each (row, token) is computed
    // exactly as before (same tile kernel, same block order), so results do not change.
    let group_bytes = a.nb * packed_block_bytes(F);
    let run = if t > tt {
        (STATIONARY_BYTES / group_bytes).max(1)
    } else {
        a.groups
    };
    let mut g0 = 0;
    while g0 < a.groups {
        let mut c = a;
        c.w = a.w.add(g0 * group_bytes);
        c.groups = run.min(a.groups - g0);
        c.out = a.out.add(8 * g0);
        let mut k0 = 0;
        while k0 < t {
            let n = (t - k0).min(tt);
            macro_rules! go {
                ($($n:literal)*) => {
                    match (vnni, n) {
                        $((true, $n) => tile_vnni::<$n, F>(c),)*
                        $((false, $n) => tile_avx2::<$n, F>(c),)*
                        _ => unreachable!("tile of {n} tokens"),
                    }
                };
            }
            go!(1 2 3 4 5 6 7 8);
            c.x = c.x.add(n * c.nb);
            c.out = c.out.add(n * c.stride);
            k0 += n;
        }
        g0 += c.groups;
    }
}

/// Weight bytes a run of packed groups may span in the weight-stationary order of [`tiles`]:
/// half of a 32 KiB L1 data cache, leaving the rest for the activation blocks the tiles read.
const STATIONARY_BYTES: usize = 16 << 10;

/// `out[k · stride + r] = row r · x[k]` for the packed rows in `w` (see `super::packed`),
/// `t` activation rows of `nb` blocks. `vnni` selects the AVX-512 VNNI kernels; calls with at
/// most `gemv_tokens` tokens run the 1-token kernel per token instead of token tiles.
///
/// # Safety
/// The CPU has `avx2`, `fma`, `f16c` (and, if `vnni`, `avx512f`, `avx512bw`, `avx512vl`,
/// `avx512vnni`); `w` holds whole groups of `nb` packed blocks of `format` (packable);
/// `x` has `t · nb` blocks; `out` is valid for writes at every `k · stride + r`.
#[allow(clippy::too_many_arguments)]
pub unsafe fn matmul_packed(
    format: super::Format,
    vnni: bool,
    w: &[u8],
    nb: usize,
    x: &[BlockQ8],
    t: usize,
    out: *mut f32,
    stride: usize,
    gemv_tokens: usize,
) {
    use super::Format;
    let ub = super::packed::unit_bytes(format);
    debug_assert!(w.len() % (nb * ub) == 0 && x.len() >= t * nb);
    let a = Tile {
        w: w.as_ptr(),
        groups: w.len() / (nb * ub),
        nb,
        x: x.as_ptr(),
        out,
        stride,
    };
    match format {
        Format::Q4_1 => tiles::<F_Q4_1>(vnni, a, t, gemv_tokens),
        Format::Q5_0 => tiles::<F_Q5_0>(vnni, a, t, gemv_tokens),
        Format::Q8_0 => tiles::<F_Q8_0>(vnni, a, t, gemv_tokens),
        Format::Q4K => tiles::<F_Q4K>(vnni, a, t, gemv_tokens),
        Format::Q6K => tiles::<F_Q6K>(vnni, a, t, gemv_tokens),
    }
}
