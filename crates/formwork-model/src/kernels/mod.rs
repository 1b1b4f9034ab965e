//! Quantized matrix kernels on the raw GGUF block layouts: [`QMatrix`] (weights as read from
//! the file, never dequantized), [`BlockQ8`] activations, and the matrix × activation product
//! the forward pass spends its time in.
//!
//! Owns the block formats the shipped models use (Q4_1, Q5_0, Q8_0, Q4_K, Q6_K), their scalar
//! reference kernels ([`scalar`]), the 8-row interleaved layout they are packed into at load
//! ([`packed`]), the AVX2 and AVX-512 VNNI kernels (`avx2`, chosen at run time by
//! [`simd_level`]) and the split of output rows over threads; also attention's exponential
//! (`expf`: glibc's `expf` bits, one value or 8 lanes). Does *not* own the model graph
//! (`forward`).
//!
//! # How a product is computed
//! The activation row is quantized once per matmul to blocks of 32 signed bytes with an f32
//! scale ([`BlockQ8`], as llama.cpp's Q8_0/Q8_1 "vec dot types"). Matrices whose row count
//! allows it (a multiple of 8, starting on a multiple of 8) are stored packed: 8 rows
//! interleaved so each SIMD lane holds one row, and a weight unit is unpacked once and
//! multiplied against a tile of up to 8 tokens held in registers — prefill is matrix–matrix
//! work (see [`packed`] for the layout and why). Decode (one token) runs a dedicated GEMV
//! kernel on the same layout with independent accumulator chains, bit-identical to the
//! 1-token tile ([`gemv_tokens`]).
//! Other matrices are dotted row by row ([`dot`]), each weight row read once per call and
//! reused from L1 by all tokens.
//!
//! # Invariants
//! Every matrix row is a whole number of blocks (checked by [`QMatrix::new`]); activations
//! have `cols / 32` blocks per row. A token's result never depends on how many tokens are
//! computed with it.
//!
//! # Costs
//! Q4_1, Q5_0, Q8_0 stay at their file size (e.g. Q4_1: 5 bits per weight); packed Q4_K and
//! Q6_K take 6 and 10 bits per weight (file: 4.5 and 6.6). Quantizing an activation row costs
//! O(cols); the product O(rows · cols) integer multiply-adds per token.
//!
//! May use: nothing else in the crate.

#[cfg(target_arch = "x86_64")]
mod avx2;
pub(crate) mod expf;
pub mod packed;
pub mod scalar;

use std::sync::OnceLock;

/// Weights per block of the 32-wide formats and of one [`BlockQ8`].
pub const QK: usize = 32;
/// Weights per super-block of the k-quant formats.
pub const QK_K: usize = 256;

/// A GGUF tensor format the kernels handle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Format {
    /// 4-bit with scale and min per 32 (20 bytes).
    Q4_1,
    /// 5-bit with scale per 32 (22 bytes).
    Q5_0,
    /// 8-bit with scale per 32 (34 bytes).
    Q8_0,
    /// 4-bit k-quant, super-blocks of 256 with 6-bit sub-block scales and mins (144 bytes).
    Q4K,
    /// 6-bit k-quant, super-blocks of 256 with 8-bit scales per 16 (210 bytes).
    Q6K,
}

impl Format {
    /// The format for a GGML type id (`ggml_type`), if the kernels support it.
    pub fn from_ggml_id(id: u32) -> Option<Self> {
        match id {
            3 => Some(Self::Q4_1),
            6 => Some(Self::Q5_0),
            8 => Some(Self::Q8_0),
            12 => Some(Self::Q4K),
            14 => Some(Self::Q6K),
            _ => None,
        }
    }

    /// Weights per block.
    pub fn block_len(self) -> usize {
        match self {
            Self::Q4_1 | Self::Q5_0 | Self::Q8_0 => QK,
            Self::Q4K | Self::Q6K => QK_K,
        }
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> usize {
        match self {
            Self::Q4_1 => 20,
            Self::Q5_0 => 22,
            Self::Q8_0 => 34,
            Self::Q4K => 144,
            Self::Q6K => 210,
        }
    }
}

/// One quantized activation block: 32 signed bytes `q`, scale `d` (value ≈ `d·q`) and
/// `s = d·Σq` (the block sum, which formats with a min term need).
#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
pub struct BlockQ8 {
    /// Scale.
    pub d: f32,
    /// `d · Σ q`.
    pub s: f32,
    /// Quantized values.
    pub q: [i8; QK],
}

/// Which kernel set runs: decided once per process from the CPU's features.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SimdLevel {
    /// Portable Rust ([`scalar`]).
    Scalar,
    /// AVX2 + FMA + F16C (`avx2`).
    Avx2,
    /// [`Avx2`](Self::Avx2) plus AVX-512 F/BW/VL/VNNI: packed matrices multiply with
    /// `vpdpbusd` on 256-bit registers (one instruction for `maddubs` + `madd`) and keep
    /// 8-token tiles in the 32 vector registers.
    Avx512Vnni,
}

/// The kernel set this CPU runs (`FORMWORK_SIMD=scalar` forces the portable one and
/// `FORMWORK_SIMD=avx2` caps it at AVX2, for comparisons).
pub fn simd_level() -> SimdLevel {
    static LEVEL: OnceLock<SimdLevel> = OnceLock::new();
    *LEVEL.get_or_init(|| match std::env::var("FORMWORK_SIMD").as_deref() {
        Ok("scalar") => SimdLevel::Scalar,
        Ok("avx2") if detect() != SimdLevel::Scalar => SimdLevel::Avx2,
        _ => detect(),
    })
}

/// Calls with at most this many tokens run each token through the 1-token (GEMV) kernels
/// instead of the token-tiled ones: 1 by default (decode); `FORMWORK_GEMV=N` sets it (`0`
/// turns the GEMV kernels off, for comparisons). Both give bit-identical results.
pub fn gemv_tokens() -> usize {
    static TOKENS: OnceLock<usize> = OnceLock::new();
    *TOKENS.get_or_init(|| {
        std::env::var("FORMWORK_GEMV")
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(1)
    })
}

/// What the CPU supports, detected once.
fn detect() -> SimdLevel {
    static HW: OnceLock<SimdLevel> = OnceLock::new();
    *HW.get_or_init(detect_uncached)
}

#[cfg(target_arch = "x86_64")]
fn detect_uncached() -> SimdLevel {
    if !(is_x86_feature_detected!("avx2")
        && is_x86_feature_detected!("fma")
        && is_x86_feature_detected!("f16c"))
    {
        return SimdLevel::Scalar;
    }
    if is_x86_feature_detected!("avx512f")
        && is_x86_feature_detected!("avx512bw")
        && is_x86_feature_detected!("avx512vl")
        && is_x86_feature_detected!("avx512vnni")
    {
        SimdLevel::Avx512Vnni
    } else {
        SimdLevel::Avx2
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn detect_uncached() -> SimdLevel {
    SimdLevel::Scalar
}

/// The kernel set that really runs for a requested `level`: never more than the CPU has
/// (asking for AVX2 on a CPU without it falls back to scalar).
fn effective(level: SimdLevel) -> SimdLevel {
    match (level, detect()) {
        (SimdLevel::Scalar, _) | (_, SimdLevel::Scalar) => SimdLevel::Scalar,
        (SimdLevel::Avx512Vnni, SimdLevel::Avx512Vnni) => SimdLevel::Avx512Vnni,
        _ => SimdLevel::Avx2,
    }
}

/// IEEE half → single precision (exact; handles subnormals, infinities and NaN).
pub fn f16_to_f32(h: u16) -> f32 {
    let sign = ((h & 0x8000) as u32) << 16;
    let exp = ((h >> 10) & 0x1F) as u32;
    let man = (h & 0x3FF) as u32;
    let bits = match exp {
        0 if man == 0 => sign,
        0 => {
            // Subnormal: shift the mantissa up until its leading bit is the implicit one.
            let (mut e, mut m) = (113u32, man);
            while m & 0x400 == 0 {
                m <<= 1;
                e -= 1;
            }
            sign | (e << 23) | ((m & 0x3FF) << 13)
        }
        31 => sign | 0x7F80_0000 | (man << 13),
        _ => sign | ((exp + 112) << 23) | (man << 13),
    };
    f32::from_bits(bits)
}

/// Dot product of one weight row (`format`, `x.len() · 32` weights) with an activation row.
#[inline]
pub fn dot(format: Format, level: SimdLevel, w: &[u8], x: &[BlockQ8]) -> f32 {
    debug_assert_eq!(
        w.len(),
        x.len() * QK / format.block_len() * format.block_bytes()
    );
    match effective(level) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the CPU has avx2, fma and f16c (checked by `effective`, not trusted from
        // the caller); the callers pass a row of exactly `x.len()` blocks.
        SimdLevel::Avx2 | SimdLevel::Avx512Vnni => unsafe {
            match format {
                Format::Q4_1 => avx2::dot_q4_1(w, x),
                Format::Q5_0 => avx2::dot_q5_0(w, x),
                Format::Q8_0 => avx2::dot_q8_0(w, x),
                Format::Q4K => avx2::dot_q4_k(w, x),
                Format::Q6K => avx2::dot_q6_k(w, x),
            }
        },
        _ => match format {
            Format::Q4_1 => scalar::dot_q4_1(w, x),
            Format::Q5_0 => scalar::dot_q5_0(w, x),
            Format::Q8_0 => scalar::dot_q8_0(w, x),
            Format::Q4K => scalar::dot_q4_k(w, x),
            Format::Q6K => scalar::dot_q6_k(w, x),
        },
    }
}

/// Quantizes `x` (length a multiple of 32) into `out` (`x.len() / 32` blocks).
pub fn quantize_row(x: &[f32], out: &mut [BlockQ8]) {
    debug_assert_eq!(x.len(), out.len() * QK);
    match effective(simd_level()) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: see `dot`.
        SimdLevel::Avx2 | SimdLevel::Avx512Vnni => unsafe { avx2::quantize_row(x, out) },
        _ => scalar::quantize_row(x, out),
    }
}

/// Dequantizes one row of `format` into `out`.
pub fn dequantize_row(format: Format, w: &[u8], out: &mut [f32]) {
    match format {
        Format::Q4_1 => scalar::dequant_q4_1(w, out),
        Format::Q5_0 => scalar::dequant_q5_0(w, out),
        Format::Q8_0 => scalar::dequant_q8_0(w, out),
        Format::Q4K => scalar::dequant_q4_k(w, out),
        Format::Q6K => scalar::dequant_q6_k(w, out),
    }
}

/// Rows of one format inside a [`QMatrix`].
#[derive(Clone, Debug)]
struct Segment {
    format: Format,
    rows: usize,
    row_bytes: usize,
    /// In the 8-row interleaved layout of [`packed`] (else the file's row layout).
    packed: bool,
    data: Vec<u8>,
}

/// A quantized weight matrix `rows × cols` (output × input), possibly several GGUF tensors
/// stacked by rows (q/k/v, gate/up), each keeping its own format. Stacking lets one threaded
/// pass compute all of them: fewer hand-offs per layer.
#[derive(Clone, Debug)]
pub struct QMatrix {
    cols: usize,
    rows: usize,
    segments: Vec<Segment>,
}

/// A shape or size problem with raw tensor bytes.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum KernelError {
    /// The row length is not a whole number of blocks.
    #[error("{cols} columns are not a multiple of the {format:?} block length {block}")]
    RowNotBlocks {
        /// Format of the tensor.
        format: Format,
        /// Row length.
        cols: usize,
        /// Block length of the format.
        block: usize,
    },
    /// The byte count does not match the shape.
    #[error("{given} bytes for {rows}x{cols} {format:?}, expected {expected}")]
    Size {
        /// Format of the tensor.
        format: Format,
        /// Rows.
        rows: usize,
        /// Columns.
        cols: usize,
        /// Bytes given.
        given: usize,
        /// Bytes the shape needs.
        expected: usize,
    },
    /// Stacked tensors must have the same row length.
    #[error("cannot stack a {given}-column tensor under {cols} columns")]
    Columns {
        /// Row length of the matrix.
        cols: usize,
        /// Row length of the tensor stacked under it.
        given: usize,
    },
}

impl QMatrix {
    /// A matrix from one tensor's raw bytes (row-major, `rows · cols` weights).
    ///
    /// # Errors
    /// [`KernelError`] if the bytes do not fit the shape.
    pub fn new(
        format: Format,
        rows: usize,
        cols: usize,
        data: Vec<u8>,
    ) -> Result<Self, KernelError> {
        let mut m = Self {
            cols,
            rows: 0,
            segments: Vec::new(),
        };
        m.stack(format, rows, cols, data)?;
        Ok(m)
    }

    /// Appends another tensor's rows below the existing ones.
    ///
    /// # Errors
    /// [`KernelError`] if the bytes do not fit the shape or the row length differs.
    pub fn stack(
        &mut self,
        format: Format,
        rows: usize,
        cols: usize,
        data: Vec<u8>,
    ) -> Result<(), KernelError> {
        let block = format.block_len();
        if cols != self.cols {
            return Err(KernelError::Columns {
                cols: self.cols,
                given: cols,
            });
        }
        if cols % block != 0 {
            return Err(KernelError::RowNotBlocks {
                format,
                cols,
                block,
            });
        }
        let row_bytes = cols / block * format.block_bytes();
        if data.len() != rows * row_bytes {
            return Err(KernelError::Size {
                format,
                rows,
                cols,
                given: data.len(),
                expected: rows * row_bytes,
            });
        }
        // Packed segments start on a multiple of 8 rows, so the 8-aligned row ranges
        // `matmul` hands to threads never split a group.
        let packed = packed::packable(format) && rows % packed::ROWS == 0 && self.rows % 8 == 0;
        let data = if packed {
            packed::pack(format, rows, row_bytes, &data)
        } else {
            data
        };
        self.rows += rows;
        self.segments.push(Segment {
            format,
            rows,
            row_bytes,
            packed,
            data,
        });
        Ok(())
    }

    /// Output rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Input columns.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Bytes of weight data.
    pub fn bytes(&self) -> usize {
        self.segments.iter().map(|s| s.data.len()).sum()
    }

    /// The segment holding row `r` and the row's index inside it.
    fn segment_of(&self, mut r: usize) -> (&Segment, usize) {
        for s in &self.segments {
            if r < s.rows {
                return (s, r);
            }
            r -= s.rows;
        }
        panic!("row {r} past the end of a {}-row matrix", self.rows)
    }

    /// Dequantizes row `r` into `out` (`cols` floats). Used for embedding lookups.
    ///
    /// # Panics
    /// If `r >= rows()` or `out.len() != cols()`.
    pub fn dequantize_row(&self, r: usize, out: &mut [f32]) {
        assert_eq!(out.len(), self.cols);
        let (s, r) = self.segment_of(r);
        if !s.packed {
            dequantize_row(
                s.format,
                &s.data[r * s.row_bytes..(r + 1) * s.row_bytes],
                out,
            );
            return;
        }
        // One 32-weight unit at a time: no allocation per lookup.
        let ub = packed::unit_bytes(s.format);
        let nb = self.cols / QK;
        for (b, o) in out.chunks_exact_mut(QK).enumerate() {
            let unit = &s.data[((r / packed::ROWS) * nb + b) * ub..][..ub];
            packed::dequant_unit(s.format, unit, r % packed::ROWS, o);
        }
    }

    /// `out[t][r] = row r · x[t]` for `t` activation rows of `cols / 32` blocks each; `out`
    /// is `t × rows`. Output rows are split over the rayon pool when there is enough work.
    ///
    /// # Panics
    /// If the slice lengths do not match `t`, `rows()` and `cols()`.
    pub fn matmul(&self, x: &[BlockQ8], t: usize, out: &mut [f32]) {
        self.matmul_with(simd_level(), gemv_tokens(), x, t, out);
    }

    /// [`matmul`](Self::matmul) with a given kernel set (capped at what the CPU has), and
    /// the 1-token (GEMV) kernels for calls of at most `gemv_tokens` tokens (the default is
    /// [`gemv_tokens()`]), for comparisons between kernels. Every choice gives the same
    /// results, bit for bit, except the scalar set (equal up to f32 rounding).
    ///
    /// # Panics
    /// As [`matmul`](Self::matmul).
    pub fn matmul_with(
        &self,
        level: SimdLevel,
        gemv_tokens: usize,
        x: &[BlockQ8],
        t: usize,
        out: &mut [f32],
    ) {
        let bpr = self.cols / QK;
        assert_eq!(x.len(), t * bpr);
        assert_eq!(out.len(), t * self.rows);
        let level = effective(level);
        let threads = rayon::current_num_threads();
        // Below ~64k multiply-adds a hand-off to another thread costs more than it saves.
        let work = self.rows * self.cols * t;
        let out_ptr = SyncPtr(out.as_mut_ptr());
        let run = |r0: usize, r1: usize| {
            let out_ptr = &out_ptr;
            let mut off = 0;
            for s in &self.segments {
                let (a, e) = (r0.max(off), r1.min(off + s.rows));
                if a < e {
                    // SAFETY: rows `a..e` belong to this task only, and every index written
                    // is `i · rows + r` with `i < t`, `r < rows` (asserted above).
                    unsafe {
                        s.matmul_rows(
                            level,
                            a - off,
                            e - off,
                            x,
                            bpr,
                            t,
                            out_ptr.0.add(off),
                            self.rows,
                            gemv_tokens,
                        )
                    };
                }
                off += s.rows;
            }
        };
        if threads <= 1 || work < 1 << 16 {
            run(0, self.rows);
            return;
        }
        // One task per thread for a single token (minimum hand-off); more, smaller tasks for
        // prefill so a thread slowed by other load does not hold everyone up. Chunks are
        // multiples of 8 rows, so they never split a packed group.
        let tasks = if t == 1 { threads } else { threads * 4 };
        let chunk = self.rows.div_ceil(tasks).next_multiple_of(8);
        use rayon::prelude::*;
        (0..self.rows.div_ceil(chunk))
            .into_par_iter()
            .for_each(|c| run(c * chunk, ((c + 1) * chunk).min(self.rows)));
    }
}

impl Segment {
    /// Rows `a..e` of this segment against `t` activation rows, written to
    /// `out[i · stride + r]` (`out` points at the segment's first row); `x` has `bpr`
    /// blocks per activation row.
    ///
    /// # Safety
    /// `out` must be valid for writes at every `i · stride + r`, `i < t`, `a ≤ r < e`, with
    /// no other writer; for a packed segment `a` is a multiple of 8 and `e` is too or is
    /// `rows`; `x` has `t · cols / 32` blocks.
    #[allow(clippy::too_many_arguments)]
    unsafe fn matmul_rows(
        &self,
        level: SimdLevel,
        a: usize,
        e: usize,
        x: &[BlockQ8],
        bpr: usize,
        t: usize,
        out: *mut f32,
        stride: usize,
        gemv_tokens: usize,
    ) {
        if !self.packed {
            for r in a..e {
                let w = &self.data[r * self.row_bytes..(r + 1) * self.row_bytes];
                for (i, xr) in x.chunks_exact(bpr).enumerate() {
                    *out.add(i * stride + r) = dot(self.format, level, w, xr);
                }
            }
            return;
        }
        debug_assert!(a % packed::ROWS == 0 && e % packed::ROWS == 0);
        let ub = packed::unit_bytes(self.format);
        let w = &self.data[a / packed::ROWS * bpr * ub..e / packed::ROWS * bpr * ub];
        let out = out.add(a);
        match level {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `level` went through `effective`, so the CPU has the features; the
            // caller guarantees the output range.
            SimdLevel::Avx2 | SimdLevel::Avx512Vnni => avx2::matmul_packed(
                self.format,
                level == SimdLevel::Avx512Vnni,
                w,
                bpr,
                x,
                t,
                out,
                stride,
                gemv_tokens,
            ),
            _ => packed::matmul_scalar(self.format, w, bpr, x, t, |i, r, v| {
                *out.add(i * stride + r) = v;
            }),
        }
    }
}

/// A raw output pointer shared by tasks that write disjoint elements.
struct SyncPtr(*mut f32);
// SAFETY: tasks write disjoint indices (see `QMatrix::matmul`), and the pointer does not
// outlive the borrow of `out` (the parallel loop finishes before `matmul` returns).
unsafe impl Sync for SyncPtr {}
unsafe impl Send for SyncPtr {}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::quantized::{GgmlDType, QTensor};
    use candle_core::{Device, Tensor};

    /// Deterministic pseudo-random floats in [-1, 1) with some large outliers.
    fn floats(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        (0..n)
            .map(|i| {
                s = s
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                let v = ((s >> 33) as f32 / (1u64 << 31) as f32) * 2.0 - 1.0;
                if i % 97 == 0 {
                    v * 8.0
                } else {
                    v
                }
            })
            .collect()
    }

    const FORMATS: [(Format, GgmlDType); 5] = [
        (Format::Q4_1, GgmlDType::Q4_1),
        (Format::Q5_0, GgmlDType::Q5_0),
        (Format::Q8_0, GgmlDType::Q8_0),
        (Format::Q4K, GgmlDType::Q4K),
        (Format::Q6K, GgmlDType::Q6K),
    ];

    /// Random weights quantized by candle, with candle's own dequantization as reference.
    fn random_matrix(dtype: GgmlDType, rows: usize, cols: usize, seed: u64) -> (Vec<u8>, Vec<f32>) {
        let w = Tensor::from_vec(floats(rows * cols, seed), (rows, cols), &Device::Cpu).unwrap();
        let q = QTensor::quantize(&w, dtype).unwrap();
        let bytes = q.data().unwrap().into_owned();
        let deq = q
            .dequantize(&Device::Cpu)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        (bytes, deq)
    }

    #[test]
    fn f16_conversion_matches_half_semantics() {
        assert_eq!(f16_to_f32(0x3C00), 1.0);
        assert_eq!(f16_to_f32(0xC000), -2.0);
        assert_eq!(f16_to_f32(0x7BFF), 65504.0);
        assert_eq!(f16_to_f32(0x0001), 2f32.powi(-24));
        assert_eq!(f16_to_f32(0x03FF), 1023.0 * 2f32.powi(-24));
        assert_eq!(f16_to_f32(0x8000).to_bits(), (-0.0f32).to_bits());
        assert!(f16_to_f32(0x7C00).is_infinite());
        assert!(f16_to_f32(0x7E00).is_nan());
    }

    #[test]
    fn dequantization_matches_candle() {
        let (rows, cols) = (3, 512);
        for (i, (format, dtype)) in FORMATS.into_iter().enumerate() {
            let (bytes, expected) = random_matrix(dtype, rows, cols, i as u64);
            let m = QMatrix::new(format, rows, cols, bytes).unwrap();
            let mut row = vec![0f32; cols];
            for r in 0..rows {
                m.dequantize_row(r, &mut row);
                assert_eq!(
                    &row[..],
                    &expected[r * cols..(r + 1) * cols],
                    "{format:?} row {r}"
                );
            }
        }
    }

    #[test]
    fn simd_quantize_row_equals_scalar() {
        let x = floats(1024, 7);
        let mut a = vec![BlockQ8::default(); 32];
        let mut b = vec![BlockQ8::default(); 32];
        scalar::quantize_row(&x, &mut a);
        quantize_row(&x, &mut b);
        for (a, b) in a.iter().zip(&b) {
            assert_eq!((a.d, a.q), (b.d, b.q));
            assert!((a.s - b.s).abs() <= 1e-6 * a.s.abs().max(1.0));
        }
        // Zeros quantize to zeros with a zero scale (no division by zero).
        let mut z = [BlockQ8::default()];
        quantize_row(&[0.0; 32], &mut z);
        assert_eq!((z[0].d, z[0].s, z[0].q), (0.0, 0.0, [0; 32]));
    }

    /// Every kernel against the scalar reference (exact integer parts: relative 1e-5) and the
    /// scalar reference against candle's dequantized weights times the unquantized
    /// activations (the int8 activations cost up to ~1% of the row norm product).
    #[test]
    fn kernels_agree_with_scalar_and_candle() {
        let (rows, cols) = (8, 768);
        let x = floats(cols, 99);
        let mut xq = vec![BlockQ8::default(); cols / QK];
        quantize_row(&x, &mut xq);
        let xnorm = x.iter().map(|v| v * v).sum::<f32>().sqrt();
        for (i, (format, dtype)) in FORMATS.into_iter().enumerate() {
            let (bytes, deq) = random_matrix(dtype, rows, cols, 10 + i as u64);
            let row_len = bytes.len() / rows;
            let m = QMatrix::new(format, rows, cols, bytes.clone()).unwrap();
            let mut fast = vec![0f32; rows];
            m.matmul(&xq, 1, &mut fast);
            for r in 0..rows {
                let w = &bytes[r * row_len..(r + 1) * row_len];
                let reference = dot(format, SimdLevel::Scalar, w, &xq);
                let wrow = &deq[r * cols..(r + 1) * cols];
                let exact: f32 = wrow.iter().zip(&x).map(|(a, b)| a * b).sum();
                let wnorm = wrow.iter().map(|v| v * v).sum::<f32>().sqrt();
                assert!(
                    (fast[r] - reference).abs() <= 1e-5 * (1.0 + reference.abs()) + 1e-4,
                    "{format:?} row {r}: simd {} vs scalar {reference}",
                    fast[r]
                );
                assert!(
                    (reference - exact).abs() <= 0.01 * wnorm * xnorm,
                    "{format:?} row {r}: scalar {reference} vs exact {exact}"
                );
            }
        }
    }

    #[test]
    fn multi_token_matmul_equals_row_by_row_and_stacking_keeps_formats() {
        let (cols, t) = (256, 3);
        let (a, _) = random_matrix(GgmlDType::Q4_1, 40, cols, 1);
        let (b, _) = random_matrix(GgmlDType::Q6K, 24, cols, 2);
        let mut m = QMatrix::new(Format::Q4_1, 40, cols, a.clone()).unwrap();
        m.stack(Format::Q6K, 24, cols, b).unwrap();
        assert_eq!(m.rows(), 64);
        let x = floats(t * cols, 3);
        let mut xq = vec![BlockQ8::default(); t * cols / QK];
        for (xr, qr) in x.chunks(cols).zip(xq.chunks_mut(cols / QK)) {
            quantize_row(xr, qr);
        }
        let mut all = vec![0f32; t * 64];
        m.matmul(&xq, t, &mut all);
        let single = QMatrix::new(Format::Q4_1, 40, cols, a).unwrap();
        for i in 0..t {
            let mut one = vec![0f32; 64];
            m.matmul(&xq[i * cols / QK..(i + 1) * cols / QK], 1, &mut one);
            assert_eq!(&all[i * 64..(i + 1) * 64], &one[..], "token {i}");
            let mut first = vec![0f32; 40];
            single.matmul(&xq[i * cols / QK..(i + 1) * cols / QK], 1, &mut first);
            assert_eq!(&one[..40], &first[..]);
        }
    }

    /// The packed kernels (scalar, AVX2, AVX-512 VNNI — those this CPU has) against the
    /// row-layout scalar dot of the same rows, for token counts that are not multiples of the
    /// 4- or 8-token tiles (issue 7: every fast kernel tested against the scalar path).
    #[test]
    fn packed_kernels_agree_with_row_scalar_on_ragged_tiles() {
        // 3 groups of 8 rows: the GEMV kernels' 2-group step and its 1-group remainder.
        let (rows, cols) = (24, 512);
        let bpr = cols / QK;
        for (i, (format, dtype)) in FORMATS.into_iter().enumerate() {
            if !packed::packable(format) {
                continue;
            }
            let (bytes, _) = random_matrix(dtype, rows, cols, 40 + i as u64);
            let m = QMatrix::new(format, rows, cols, bytes.clone()).unwrap();
            assert!(m.segments[0].packed, "{format:?} should be packed");
            let row_len = bytes.len() / rows;
            for t in [1, 2, 3, 4, 5, 7, 8, 9, 13, 17] {
                let x = floats(t * cols, 50 + t as u64);
                let mut xq = vec![BlockQ8::default(); t * bpr];
                for (xr, qr) in x.chunks(cols).zip(xq.chunks_mut(bpr)) {
                    quantize_row(xr, qr);
                }
                for level in [SimdLevel::Scalar, SimdLevel::Avx2, SimdLevel::Avx512Vnni] {
                    let mut out = vec![f32::NAN; t * rows];
                    m.matmul_with(level, 0, &xq, t, &mut out);
                    // The 1-token (GEMV) kernels, each token on its own, must give exactly
                    // what the token tiles give (issue 2: decode and prefill agree bit for
                    // bit, so feeding token by token equals feeding whole).
                    let mut gemv = vec![f32::NAN; t * rows];
                    m.matmul_with(level, usize::MAX, &xq, t, &mut gemv);
                    assert_eq!(
                        gemv.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                        out.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                        "{format:?} {level:?} t={t}: gemv vs tiles"
                    );
                    for k in 0..t {
                        for r in 0..rows {
                            let w = &bytes[r * row_len..(r + 1) * row_len];
                            let xr = &xq[k * bpr..(k + 1) * bpr];
                            let reference = dot(format, SimdLevel::Scalar, w, xr);
                            let got = out[k * rows + r];
                            let tol = 1e-5 * (1.0 + reference.abs()) + 1e-4;
                            if level == SimdLevel::Scalar && format != Format::Q6K {
                                // Same block order as the row kernel: bit-identical (Q6_K
                                // scales its halves in f32, see `packed`).
                                assert_eq!(got, reference, "{format:?} scalar t={t} {k} {r}");
                            }
                            assert!(
                                (got - reference).abs() <= tol,
                                "{format:?} {level:?} t={t} token {k} row {r}: {got} vs {reference}"
                            );
                        }
                    }
                }
            }
            // Embedding lookups read packed rows back exactly.
            let mut a = vec![0f32; cols];
            let mut b = vec![0f32; cols];
            for r in [0, 7, 8, rows - 1] {
                m.dequantize_row(r, &mut a);
                dequantize_row(format, &bytes[r * row_len..(r + 1) * row_len], &mut b);
                assert_eq!(a, b, "{format:?} row {r}");
            }
        }
    }

    /// Batched decode (issue 17): a call with more tokens than one register tile runs the
    /// weight-stationary order (runs of groups, every token tile against each run). Every
    /// token's outputs must equal that token computed alone through the 1-token (GEMV)
    /// kernel bit for bit, for matrices spanning several runs and token counts around the
    /// tile sizes, or a sequence's logits would depend on the batch it rides in.
    #[test]
    fn batched_tokens_equal_each_token_alone() {
        // 64 rows × 1024 columns: 8 groups of 8.7 KB (Q8_0) to 10 KB (Q6_K), more than one
        // 16 KB run.
        let (rows, cols) = (64, 1024);
        let bpr = cols / QK;
        for (i, (format, dtype)) in FORMATS.into_iter().enumerate() {
            let (bytes, _) = random_matrix(dtype, rows, cols, 70 + i as u64);
            let m = QMatrix::new(format, rows, cols, bytes).unwrap();
            for t in [2, 8, 9, 16, 17] {
                let x = floats(t * cols, 80 + t as u64);
                let mut xq = vec![BlockQ8::default(); t * bpr];
                for (xr, qr) in x.chunks(cols).zip(xq.chunks_mut(bpr)) {
                    quantize_row(xr, qr);
                }
                let mut all = vec![f32::NAN; t * rows];
                m.matmul_with(simd_level(), 1, &xq, t, &mut all);
                for k in 0..t {
                    let mut one = vec![f32::NAN; rows];
                    m.matmul_with(simd_level(), 1, &xq[k * bpr..(k + 1) * bpr], 1, &mut one);
                    assert_eq!(
                        all[k * rows..(k + 1) * rows]
                            .iter()
                            .map(|v| v.to_bits())
                            .collect::<Vec<_>>(),
                        one.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                        "{format:?} t={t} token {k}"
                    );
                }
            }
        }
    }

    /// A segment after an unpacked one whose row count is not a multiple of 8 stays
    /// in the row layout (a group must never straddle a thread's row range).
    #[test]
    fn packing_needs_an_aligned_start() {
        let cols = 64;
        let (a, _) = random_matrix(GgmlDType::Q8_0, 4, cols, 1);
        let (b, _) = random_matrix(GgmlDType::Q4_1, 8, cols, 2);
        let mut m = QMatrix::new(Format::Q8_0, 4, cols, a).unwrap();
        m.stack(Format::Q4_1, 8, cols, b).unwrap();
        assert!(!m.segments[0].packed && !m.segments[1].packed);
    }

    #[test]
    fn shape_errors_are_reported() {
        assert!(matches!(
            QMatrix::new(Format::Q4K, 1, 32, vec![0; 20]),
            Err(KernelError::RowNotBlocks { .. })
        ));
        assert!(matches!(
            QMatrix::new(Format::Q8_0, 2, 32, vec![0; 34]),
            Err(KernelError::Size { expected: 68, .. })
        ));
        let mut m = QMatrix::new(Format::Q8_0, 1, 32, vec![0; 34]).unwrap();
        assert!(matches!(
            m.stack(Format::Q8_0, 1, 64, vec![0; 68]),
            Err(KernelError::Columns { .. })
        ));
    }
}
