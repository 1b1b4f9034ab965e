//! Portable reference kernels: dequantization of one row and the dot product of a quantized
//! weight row with an [`BlockQ8`] activation row, for every [`Format`](super::Format).
//!
//! These are the definition the SIMD kernels are tested against and the fallback on CPUs
//! without AVX2. Integer sums are exact (i32), so the SIMD kernels agree with these up to the
//! order of f32 additions. Block layouts follow the GGUF/ggml definitions (`ggml-common.h`):
//! every block starts or ends with its f16 scale(s), quantized values are packed as described
//! at each function.

use super::{f16_to_f32, BlockQ8, QK, QK_K};

fn f16_at(b: &[u8], i: usize) -> f32 {
    f16_to_f32(u16::from_le_bytes([b[i], b[i + 1]]))
}

/// Q4_1: 20 bytes per 32 weights: f16 `d`, f16 `m`, 16 bytes of nibbles (low nibble of byte
/// `j` is weight `j`, high nibble weight `j + 16`); `w = d·q + m`.
pub fn dot_q4_1(w: &[u8], x: &[BlockQ8]) -> f32 {
    let mut acc = 0f32;
    for (b, xb) in w.chunks_exact(20).zip(x) {
        let (d, m) = (f16_at(b, 0), f16_at(b, 2));
        let mut isum = 0i32;
        for j in 0..16 {
            isum += (b[4 + j] & 0xF) as i32 * xb.q[j] as i32;
            isum += (b[4 + j] >> 4) as i32 * xb.q[j + 16] as i32;
        }
        acc += d * xb.d * isum as f32 + m * xb.s;
    }
    acc
}

/// Q5_0: 22 bytes per 32 weights: f16 `d`, u32 `qh` (bit `i` is the fifth bit of weight `i`),
/// 16 bytes of nibbles as in Q4_1; `w = d·(q − 16)`.
pub fn dot_q5_0(w: &[u8], x: &[BlockQ8]) -> f32 {
    let mut acc = 0f32;
    for (b, xb) in w.chunks_exact(22).zip(x) {
        let d = f16_at(b, 0);
        let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
        let mut isum = 0i32;
        for j in 0..16 {
            let lo = ((b[6 + j] & 0xF) as u32 | ((qh >> j) & 1) << 4) as i32 - 16;
            let hi = ((b[6 + j] >> 4) as u32 | ((qh >> (j + 16)) & 1) << 4) as i32 - 16;
            isum += lo * xb.q[j] as i32 + hi * xb.q[j + 16] as i32;
        }
        acc += d * xb.d * isum as f32;
    }
    acc
}

/// Q8_0: 34 bytes per 32 weights: f16 `d`, 32 × i8; `w = d·q`.
pub fn dot_q8_0(w: &[u8], x: &[BlockQ8]) -> f32 {
    let mut acc = 0f32;
    for (b, xb) in w.chunks_exact(34).zip(x) {
        let d = f16_at(b, 0);
        let mut isum = 0i32;
        for j in 0..QK {
            isum += b[2 + j] as i8 as i32 * xb.q[j] as i32;
        }
        acc += d * xb.d * isum as f32;
    }
    acc
}

/// The 6-bit scale and min of sub-block `j` (0..8) of a Q4_K super-block (ggml
/// `get_scale_min_k4`).
pub fn q4_k_scale_min(j: usize, s: &[u8]) -> (u8, u8) {
    if j < 4 {
        (s[j] & 63, s[j + 4] & 63)
    } else {
        (
            (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4),
            (s[j + 4] >> 4) | ((s[j] >> 6) << 4),
        )
    }
}

/// Q4_K: 144 bytes per 256 weights: f16 `d`, f16 `dmin`, 12 bytes of packed 6-bit
/// scales/mins for 8 sub-blocks of 32, 128 bytes of nibbles (bytes `32c..32c+32` hold
/// sub-block `2c` in the low and `2c+1` in the high nibbles); `w = d·sc·q − dmin·m`.
pub fn dot_q4_k(w: &[u8], x: &[BlockQ8]) -> f32 {
    let mut acc = 0f32;
    for (b, xs) in w.chunks_exact(144).zip(x.chunks_exact(QK_K / QK)) {
        let (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
        let scales = &b[4..16];
        let qs = &b[16..144];
        for c in 0..4 {
            for half in 0..2 {
                let j = 2 * c + half;
                let (sc, m) = q4_k_scale_min(j, scales);
                let xb = &xs[j];
                let mut isum = 0i32;
                for l in 0..32 {
                    let q = (qs[32 * c + l] >> (4 * half)) & 0xF;
                    isum += q as i32 * xb.q[l] as i32;
                }
                acc += d * sc as f32 * xb.d * isum as f32 - dmin * m as f32 * xb.s;
            }
        }
    }
    acc
}

/// The 6-bit value (0..64) of weight `128·n + 32·k + l` of a Q6_K super-block.
pub(super) fn q6_k_value(ql: &[u8], qh: &[u8], n: usize, k: usize, l: usize) -> i32 {
    let low = match k {
        0 => ql[64 * n + l] & 0xF,
        1 => ql[64 * n + l + 32] & 0xF,
        2 => ql[64 * n + l] >> 4,
        _ => ql[64 * n + l + 32] >> 4,
    };
    let high = (qh[32 * n + l] >> (2 * k)) & 3;
    (low | high << 4) as i32
}

/// Q6_K: 210 bytes per 256 weights: 128 bytes of low nibbles, 64 bytes of high 2-bit pairs,
/// 16 × i8 scales (one per 16 weights), f16 `d`; `w = d·sc·(q − 32)`. Weight `128n + 32k + l`
/// takes its scale from `scales[8n + 2k + l/16]`.
pub fn dot_q6_k(w: &[u8], x: &[BlockQ8]) -> f32 {
    let mut acc = 0f32;
    for (b, xs) in w.chunks_exact(210).zip(x.chunks_exact(QK_K / QK)) {
        let (ql, qh, sc) = (&b[0..128], &b[128..192], &b[192..208]);
        let d = f16_at(b, 208);
        for n in 0..2 {
            for k in 0..4 {
                let xb = &xs[4 * n + k];
                let mut halves = [0i32; 2];
                for l in 0..32 {
                    halves[l / 16] += (q6_k_value(ql, qh, n, k, l) - 32) * xb.q[l] as i32;
                }
                let isum = sc[8 * n + 2 * k] as i8 as i32 * halves[0]
                    + sc[8 * n + 2 * k + 1] as i8 as i32 * halves[1];
                acc += d * xb.d * isum as f32;
            }
        }
    }
    acc
}

/// Dequantizes one Q4_1 row into `out`.
pub fn dequant_q4_1(w: &[u8], out: &mut [f32]) {
    for (b, o) in w.chunks_exact(20).zip(out.chunks_exact_mut(QK)) {
        let (d, m) = (f16_at(b, 0), f16_at(b, 2));
        for j in 0..16 {
            o[j] = d * (b[4 + j] & 0xF) as f32 + m;
            o[j + 16] = d * (b[4 + j] >> 4) as f32 + m;
        }
    }
}

/// Dequantizes one Q5_0 row into `out`.
pub fn dequant_q5_0(w: &[u8], out: &mut [f32]) {
    for (b, o) in w.chunks_exact(22).zip(out.chunks_exact_mut(QK)) {
        let d = f16_at(b, 0);
        let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
        for j in 0..16 {
            let lo = ((b[6 + j] & 0xF) as u32 | ((qh >> j) & 1) << 4) as i32 - 16;
            let hi = ((b[6 + j] >> 4) as u32 | ((qh >> (j + 16)) & 1) << 4) as i32 - 16;
            o[j] = d * lo as f32;
            o[j + 16] = d * hi as f32;
        }
    }
}

/// Dequantizes one Q8_0 row into `out`.
pub fn dequant_q8_0(w: &[u8], out: &mut [f32]) {
    for (b, o) in w.chunks_exact(34).zip(out.chunks_exact_mut(QK)) {
        let d = f16_at(b, 0);
        for j in 0..QK {
            o[j] = d * b[2 + j] as i8 as f32;
        }
    }
}

/// Dequantizes one Q4_K row into `out`.
pub fn dequant_q4_k(w: &[u8], out: &mut [f32]) {
    for (b, o) in w.chunks_exact(144).zip(out.chunks_exact_mut(QK_K)) {
        let (d, dmin) = (f16_at(b, 0), f16_at(b, 2));
        for c in 0..4 {
            for half in 0..2 {
                let j = 2 * c + half;
                let (sc, m) = q4_k_scale_min(j, &b[4..16]);
                for l in 0..32 {
                    let q = (b[16 + 32 * c + l] >> (4 * half)) & 0xF;
                    o[32 * j + l] = d * sc as f32 * q as f32 - dmin * m as f32;
                }
            }
        }
    }
}

/// Dequantizes one Q6_K row into `out`.
pub fn dequant_q6_k(w: &[u8], out: &mut [f32]) {
    for (b, o) in w.chunks_exact(210).zip(out.chunks_exact_mut(QK_K)) {
        let (ql, qh, sc) = (&b[0..128], &b[128..192], &b[192..208]);
        let d = f16_at(b, 208);
        for n in 0..2 {
            for k in 0..4 {
                for l in 0..32 {
                    let s = sc[8 * n + 2 * k + l / 16] as i8 as f32;
                    o[128 * n + 32 * k + l] = d * s * (q6_k_value(ql, qh, n, k, l) - 32) as f32;
                }
            }
        }
    }
}

/// Quantizes `x` (a multiple of 32 long) into Q8 blocks: per block `d = max|x|/127`,
/// `q = round(x/d)`, `s = d·Σq`.
pub fn quantize_row(x: &[f32], out: &mut [BlockQ8]) {
    for (xs, o) in x.chunks_exact(QK).zip(out.iter_mut()) {
        let amax = xs.iter().fold(0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let id = if d > 0.0 { 1.0 / d } else { 0.0 };
        let mut sum = 0i32;
        for (q, v) in o.q.iter_mut().zip(xs) {
            let r = (v * id).round_ties_even() as i32;
            *q = r as i8;
            sum += r;
        }
        o.d = d;
        o.s = d * sum as f32;
    }
}
