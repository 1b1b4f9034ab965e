//! The row-interleaved ("packed") weight layout for every format the shipped files use
//! (Q4_1, Q5_0, Q8_0, Q4_K, Q6_K), and its scalar reference matmul.
//!
//! Owns the byte layout (packing at load, unpacking one row's block back for embedding
//! lookups and tests) and the portable kernel; the SIMD kernels over the same layout are in
//! `super::avx2`. Does *not* own the split of rows over threads ([`super::QMatrix`]).
//!
//! # Why
//! The row layout makes every (weight row, token) pair a separate dot product that ends in a
//! horizontal sum and pays its own block-scale conversion. Interleaving 8 rows puts one row in
//! each 32-bit lane of a 256-bit register: four weights of row `i` sit in lane `i`, so one
//! `maddubs`+`madd` (or one VNNI `vpdpbusd`) against four activation bytes broadcast to every
//! lane advances 8 rows at once, the 8 block scales convert with one `vcvtph2ps`, and the
//! result of a block is 8 output values — no horizontal sum. A weight block is unpacked once
//! and then multiplied against a tile of several tokens kept in registers (prefill), which
//! is the matrix–matrix shape the row layout could not give.
//!
//! # Layout
//! Rows are taken in groups of 8; a group stores its 32-weight units in row order
//! (`group · cols / 32 + unit`), each packed unit holding the same 32 weights of all 8 rows
//! in [`unit_bytes`] bytes — exactly `8 · block_bytes` for the 32-wide formats, so packing
//! never changes their size:
//! - Q4_1 (160 bytes): 8 × f16 `d`, 8 × f16 `m`, then 4 chunks of 32 bytes; chunk `c`, lane
//!   `i` holds row `i`'s nibble bytes `4c..4c+4` (low nibbles: weights `4c..4c+4`, high
//!   nibbles: weights `16+4c..16+4c+4`).
//! - Q5_0 (176 bytes): 8 × f16 `d`, the 4 nibble chunks as in Q4_1, then 32 bytes of high
//!   bits: byte `4i+k` bit `c` (`c < 4`) is the fifth bit of row `i`'s weight `4c+k`, bit
//!   `4+c` that of weight `16+4c+k`.
//! - Q8_0 (272 bytes): 8 × f16 `d`, then 8 chunks of 32 bytes; chunk `j`, lane `i` holds row
//!   `i`'s weights `4j..4j+4`.
//! - Q4_K (192 bytes per 32 weights, +33 % over the file's 144 per 256): each 32-weight
//!   sub-block becomes a Q4_1-like unit with f32 scales: 8 × f32 `d·sc`, 8 × f32 `−dmin·m`,
//!   then the nibbles reordered into Q4_1's order and chunks. The products are exact in f32
//!   (an f16 times a 6-bit integer), so results equal the file-layout kernel's; f16 would
//!   round them.
//! - Q6_K (320 bytes per 32 weights, +52 % over the file's 210 per 256): each 32-weight
//!   group `4n + k` becomes a unit of 8 × f32 `d·sc` for its first 16 weights, 8 × f32 for
//!   its last 16, then the weights as signed bytes `q − 32` in Q8_0's chunk order. The
//!   kernels scale the two halves separately in f32 where the file-layout kernel combines
//!   them in i32 first, so Q6_K agrees with it up to f32 rounding, not bit for bit.
//!
//! # Invariants
//! A packed matrix has a multiple of 8 rows; the kernels produce, per token, 8 consecutive
//! outputs per group. The scalar kernel adds blocks in the same order as the row-layout
//! scalar kernels, so it is bit-identical to them.

use super::{scalar, BlockQ8, Format, QK, QK_K};

/// Rows per packed group.
pub const ROWS: usize = 8;

/// Whether `format` has a packed layout.
pub fn packable(format: Format) -> bool {
    matches!(
        format,
        Format::Q4_1 | Format::Q5_0 | Format::Q8_0 | Format::Q4K | Format::Q6K
    )
}

/// Bytes of one packed unit (8 rows × 32 weights).
pub fn unit_bytes(format: Format) -> usize {
    match format {
        Format::Q4K => 192,
        Format::Q6K => 320,
        _ => ROWS * format.block_bytes(),
    }
}

/// Offset of the quantized bytes inside a packed unit (after the scales).
fn quants_at(format: Format) -> usize {
    match format {
        Format::Q4_1 => 32,
        Format::Q4K => 64,
        _ => 16,
    }
}

/// Packs a row-major matrix of `rows` (a multiple of 8) rows of `row_bytes` bytes.
///
/// # Panics
/// If `format` is not [`packable`] or the sizes do not match.
pub fn pack(format: Format, rows: usize, row_bytes: usize, data: &[u8]) -> Vec<u8> {
    assert!(packable(format) && rows % ROWS == 0 && data.len() == rows * row_bytes);
    let bb = format.block_bytes();
    let nb = row_bytes / bb;
    match format {
        Format::Q4K => return pack_q4_k(rows, nb, data),
        Format::Q6K => return pack_q6_k(rows, nb, data),
        _ => {}
    }
    let mut out = vec![0u8; data.len()];
    for g in 0..rows / ROWS {
        for b in 0..nb {
            let dst = &mut out[(g * nb + b) * ROWS * bb..][..ROWS * bb];
            for i in 0..ROWS {
                let src = &data[(g * ROWS + i) * row_bytes + b * bb..][..bb];
                pack_row_block(format, src, i, dst);
            }
        }
    }
    out
}

/// Q4_K: every 32-weight sub-block of each super-block becomes one unit (see the module
/// docs).
fn pack_q4_k(rows: usize, nb: usize, data: &[u8]) -> Vec<u8> {
    let ub = unit_bytes(Format::Q4K);
    let units = nb * QK_K / QK;
    let mut out = vec![0u8; rows / ROWS * units * ub];
    for g in 0..rows / ROWS {
        for b in 0..nb {
            for j in 0..QK_K / QK {
                let dst = &mut out[(g * units + b * QK_K / QK + j) * ub..][..ub];
                for i in 0..ROWS {
                    let src = &data[((g * ROWS + i) * nb + b) * 144..][..144];
                    let d = super::f16_to_f32(u16::from_le_bytes([src[0], src[1]]));
                    let dmin = super::f16_to_f32(u16::from_le_bytes([src[2], src[3]]));
                    let (sc, m) = scalar::q4_k_scale_min(j, &src[4..16]);
                    dst[4 * i..4 * i + 4].copy_from_slice(&(d * sc as f32).to_le_bytes());
                    let negm = -(dmin * m as f32);
                    dst[32 + 4 * i..36 + 4 * i].copy_from_slice(&negm.to_le_bytes());
                    let q = |l: usize| (src[16 + 32 * (j / 2) + l] >> (4 * (j % 2))) & 0xF;
                    for k in 0..16 {
                        dst[64 + 32 * (k / 4) + 4 * i + k % 4] = q(k) | q(k + 16) << 4;
                    }
                }
            }
        }
    }
    out
}

/// Q6_K: every 32-weight group of each super-block becomes one unit (see the module docs).
fn pack_q6_k(rows: usize, nb: usize, data: &[u8]) -> Vec<u8> {
    let ub = unit_bytes(Format::Q6K);
    let units = nb * QK_K / QK;
    let mut out = vec![0u8; rows / ROWS * units * ub];
    for g in 0..rows / ROWS {
        for b in 0..nb {
            for j in 0..QK_K / QK {
                let (n, k) = (j / 4, j % 4);
                let dst = &mut out[(g * units + b * QK_K / QK + j) * ub..][..ub];
                for i in 0..ROWS {
                    let src = &data[((g * ROWS + i) * nb + b) * 210..][..210];
                    let (ql, qh, sc) = (&src[0..128], &src[128..192], &src[192..208]);
                    let d = super::f16_to_f32(u16::from_le_bytes([src[208], src[209]]));
                    for h in 0..2 {
                        let dsc = d * sc[8 * n + 2 * k + h] as i8 as f32;
                        dst[32 * h + 4 * i..][..4].copy_from_slice(&dsc.to_le_bytes());
                    }
                    for l in 0..QK {
                        let q = scalar::q6_k_value(ql, qh, n, k, l) - 32;
                        dst[64 + 32 * (l / 4) + 4 * i + l % 4] = q as i8 as u8;
                    }
                }
            }
        }
    }
    out
}

/// The f32 at byte `at`.
fn f32_at(b: &[u8], at: usize) -> f32 {
    f32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Dequantizes row `i` of one packed unit into `out` (32 floats), equal to the file-layout
/// dequantization of the same weights (for Q4_K the same f32 operations, `d·sc·q − dmin·m`).
pub fn dequant_unit(format: Format, unit: &[u8], i: usize, out: &mut [f32]) {
    if format == Format::Q4K {
        let (dsc, negm) = (f32_at(unit, 4 * i), f32_at(unit, 32 + 4 * i));
        for k in 0..16 {
            let byte = unit[64 + 32 * (k / 4) + 4 * i + k % 4];
            out[k] = dsc * (byte & 0xF) as f32 + negm;
            out[k + 16] = dsc * (byte >> 4) as f32 + negm;
        }
        return;
    }
    if format == Format::Q6K {
        for (l, o) in out.iter_mut().enumerate().take(QK) {
            let dsc = f32_at(unit, 32 * (l / 16) + 4 * i);
            *o = dsc * unit[64 + 32 * (l / 4) + 4 * i + l % 4] as i8 as f32;
        }
        return;
    }
    let mut buf = [0u8; MAX_BLOCK];
    let block = unpack_row_block(format, unit, i, &mut buf);
    super::dequantize_row(format, block, out);
}

/// Row `i` of one packed unit times one activation block, computed as the file-layout
/// scalar kernel computes that block (so sums over units in order are bit-identical).
fn unit_dot(format: Format, unit: &[u8], i: usize, xb: &BlockQ8) -> f32 {
    if format == Format::Q4K {
        let (dsc, negm) = (f32_at(unit, 4 * i), f32_at(unit, 32 + 4 * i));
        let mut isum = 0i32;
        for k in 0..16 {
            let byte = unit[64 + 32 * (k / 4) + 4 * i + k % 4];
            isum += (byte & 0xF) as i32 * xb.q[k] as i32;
            isum += (byte >> 4) as i32 * xb.q[k + 16] as i32;
        }
        return dsc * xb.d * isum as f32 + negm * xb.s;
    }
    if format == Format::Q6K {
        let mut acc = 0f32;
        for h in 0..2 {
            let mut isum = 0i32;
            for l in 16 * h..16 * h + 16 {
                let q = unit[64 + 32 * (l / 4) + 4 * i + l % 4] as i8;
                isum += q as i32 * xb.q[l] as i32;
            }
            acc += f32_at(unit, 32 * h + 4 * i) * xb.d * isum as f32;
        }
        return acc;
    }
    let mut buf = [0u8; MAX_BLOCK];
    let block = unpack_row_block(format, unit, i, &mut buf);
    let one = std::slice::from_ref(xb);
    match format {
        Format::Q4_1 => scalar::dot_q4_1(block, one),
        Format::Q5_0 => scalar::dot_q5_0(block, one),
        _ => scalar::dot_q8_0(block, one),
    }
}

/// Writes row `i`'s block `src` (row layout) into the packed block `dst`.
fn pack_row_block(format: Format, src: &[u8], i: usize, dst: &mut [u8]) {
    dst[2 * i..2 * i + 2].copy_from_slice(&src[0..2]);
    let q = quants_at(format);
    match format {
        Format::Q4_1 => {
            dst[16 + 2 * i..18 + 2 * i].copy_from_slice(&src[2..4]);
            for c in 0..4 {
                dst[q + 32 * c + 4 * i..][..4].copy_from_slice(&src[4 + 4 * c..][..4]);
            }
        }
        Format::Q5_0 => {
            let qh = u32::from_le_bytes([src[2], src[3], src[4], src[5]]);
            for c in 0..4 {
                dst[q + 32 * c + 4 * i..][..4].copy_from_slice(&src[6 + 4 * c..][..4]);
            }
            for k in 0..4 {
                let mut plane = 0u8;
                for c in 0..4 {
                    plane |= (((qh >> (4 * c + k)) & 1) as u8) << c;
                    plane |= (((qh >> (16 + 4 * c + k)) & 1) as u8) << (4 + c);
                }
                dst[144 + 4 * i + k] = plane;
            }
        }
        Format::Q8_0 => {
            for j in 0..8 {
                dst[q + 32 * j + 4 * i..][..4].copy_from_slice(&src[2 + 4 * j..][..4]);
            }
        }
        Format::Q4K | Format::Q6K => unreachable!("not packed per block"),
    }
}

/// Largest row-layout block of a packable format (Q8_0).
pub const MAX_BLOCK: usize = 34;

/// Rebuilds row `i`'s block (row layout) from a packed block into `out`, returning the
/// `block_bytes` prefix that holds it.
pub fn unpack_row_block<'a>(
    format: Format,
    packed: &[u8],
    i: usize,
    out: &'a mut [u8; MAX_BLOCK],
) -> &'a [u8] {
    out[0..2].copy_from_slice(&packed[2 * i..2 * i + 2]);
    let q = quants_at(format);
    match format {
        Format::Q4_1 => {
            out[2..4].copy_from_slice(&packed[16 + 2 * i..18 + 2 * i]);
            for c in 0..4 {
                out[4 + 4 * c..][..4].copy_from_slice(&packed[q + 32 * c + 4 * i..][..4]);
            }
        }
        Format::Q5_0 => {
            let mut qh = 0u32;
            for k in 0..4 {
                let plane = packed[144 + 4 * i + k] as u32;
                for c in 0..4 {
                    qh |= ((plane >> c) & 1) << (4 * c + k);
                    qh |= ((plane >> (4 + c)) & 1) << (16 + 4 * c + k);
                }
            }
            out[2..6].copy_from_slice(&qh.to_le_bytes());
            for c in 0..4 {
                out[6 + 4 * c..][..4].copy_from_slice(&packed[q + 32 * c + 4 * i..][..4]);
            }
        }
        Format::Q8_0 => {
            for j in 0..8 {
                out[2 + 4 * j..][..4].copy_from_slice(&packed[q + 32 * j + 4 * i..][..4]);
            }
        }
        Format::Q4K | Format::Q6K => unreachable!("not packed per block"),
    }
    &out[..format.block_bytes()]
}

/// Scalar reference: calls `put(k, 8g + i, row (8g + i) · x[k])` for the groups in `w`
/// (`nb` units of 32 weights per row) and the `t` activation rows of `nb` blocks in `x`.
///
/// # Panics
/// If the slices are shorter than the shapes say.
pub fn matmul_scalar(
    format: Format,
    w: &[u8],
    nb: usize,
    x: &[BlockQ8],
    t: usize,
    mut put: impl FnMut(usize, usize, f32),
) {
    let ub = unit_bytes(format);
    let groups = w.len() / (nb * ub);
    for g in 0..groups {
        for k in 0..t {
            let xr = &x[k * nb..(k + 1) * nb];
            for i in 0..ROWS {
                let mut acc = 0f32;
                for (b, xb) in xr.iter().enumerate() {
                    acc += unit_dot(format, &w[(g * nb + b) * ub..][..ub], i, xb);
                }
                put(k, ROWS * g + i, acc);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Packing then unpacking every row's block gives back the file's bytes.
    #[test]
    fn pack_round_trips() {
        for format in [Format::Q4_1, Format::Q5_0, Format::Q8_0] {
            let bb = format.block_bytes();
            let (rows, nb) = (16, 3);
            let data: Vec<u8> = (0..rows * nb * bb)
                .map(|i| (i as u32).wrapping_mul(2_654_435_761).rotate_right(13) as u8)
                .collect();
            let packed = pack(format, rows, nb * bb, &data);
            assert_eq!(packed.len(), data.len());
            let mut buf = [0u8; MAX_BLOCK];
            for r in 0..rows {
                for b in 0..nb {
                    let pb = &packed[((r / ROWS) * nb + b) * ROWS * bb..];
                    let got = unpack_row_block(format, pb, r % ROWS, &mut buf);
                    assert_eq!(
                        got,
                        &data[r * nb * bb + b * bb..][..bb],
                        "{format:?} {r} {b}"
                    );
                }
            }
        }
    }
}
