//! The attention kernels: causal, optionally sliding-window attention of a batch's query
//! rows over their sequences' caches ([`attention`]), with the shared-prefix cascade as its
//! phase 1 and the per-(row, head) online softmax as its phase 2, each in a portable, an AVX2
//! and an AVX-512 instantiation that give the same bits. Reads caches through [`SeqView`]s;
//! does not append to them (the layer loop in `native` does).

use super::cache::{Seg, SeqView};
use super::ops::dot;
use super::weights::Hparams;
use crate::kernels::expf;
use crate::kernels::{simd_level, SimdLevel};

/// One unit of the shared-prefix attention pass: the rows of a prefix group, one KV head,
/// and the queries (row, head) that read it.
type PrefixUnit<'a> = (&'a [usize], usize, Vec<(usize, usize)>);

/// A unit's partial attention: its queries' unnormalized outputs and (running max, running
/// sum) per query.
type PartialAttention = (Vec<f32>, Vec<(f32, f32)>);

/// Causal (optionally sliding-window) attention of a batch's query rows, each against its
/// own sequence's cache, which already holds their keys: batch row `r` is row `i` of
/// sequence `q` (`row_seq[r] = (q, i)`), at position `pos[q] + i`, attending to
/// `caches[q]`. `qkv` rows hold the rotated queries first; `out` is `[row][head][head_dim]`.
///
/// Online softmax: one pass over the visible keys per (row, head), in position order,
/// rescaling the partial sum when a larger score appears, so no score buffer is needed. Query
/// heads share KV head `h / (n_head / n_kv_head)` (GQA).
///
/// Two phases, each (row, head) computed with the same operations in the same order whatever
/// the batch is (so a sequence's output is bit-identical alone and batched):
/// 1. **Shared prefix** (cascade): the rows whose sequences start with the same shared
///    segment (forks of one prefilled prompt prefix) walk it together, one KV head at a
///    time: each key and value row is loaded once and applied to every query of that KV
///    head (`rows × n_head / n_kv_head` of them) while it is in L1, instead of once per
///    (row, head). With 8 sequences on a 700-position few-shot prefix that reads the
///    prefix's keys a few times per layer instead of `8 × n_head` times (attention was half
///    of a batched extraction's time, most of it waiting on those loads). Units of work are
///    (prefix, KV head, ≤ 16 queries), run in parallel.
/// 2. **The rest**: every (row, head) continues from its phase-1 state over its remaining
///    positions (its own, and any later shared segments); all (row, head) pairs of the batch
///    form one parallel loop, so a decode batch keeps both threads busy. With AVX-512 the
///    unit is (row, KV head): that row's query heads of the KV head walk its keys together
///    through the same kernel as phase 1 ([`cascade_avx512`]).
///
/// With AVX-512 ([`SimdLevel::Avx512Vnni`]) both phases walk each block of 8 positions with
/// two or three queries at once; every query still gets [`softmax_step`]'s operations in
/// the same order, so the kernel set never changes the output.
pub(super) fn attention(
    qkv: &[f32],
    caches: &[SeqView<'_>],
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
    let avx512 = simd_level() == SimdLevel::Avx512Vnni;
    let threads = rayon::current_num_threads();
    // Position of batch row `r`, and the first position it sees (sliding window as in
    // llama.cpp/HF Gemma 3: key j is visible iff p - j < window).
    let at = |r: usize| {
        let (seq, i) = row_seq[r];
        let p = pos[seq] + i;
        (p, window.map_or(0, |w| (p + 1).saturating_sub(w)))
    };
    let query = |r: usize, head: usize| &qkv[r * qkvd + head * d..r * qkvd + (head + 1) * d];

    // Phase 1: group rows by their first shared segment.
    let mut groups: Vec<(usize, Vec<usize>)> = Vec::new();
    for (r, &(seq, _)) in row_seq.iter().enumerate() {
        if let Some(id) = caches[seq].first {
            match groups.iter_mut().find(|(g, _)| *g == id) {
                Some((_, rows)) => rows.push(r),
                None => groups.push((id, vec![r])),
            }
        }
    }
    // The state each (row, head) starts phase 2 from: its partial output (unnormalized),
    // (running max, running sum), and the first position it has not seen yet.
    let mut st_o = Vec::new();
    let mut st = Vec::new();
    if !groups.is_empty() {
        st_o = vec![0f32; out.len()];
        st = vec![(f32::NEG_INFINITY, 0f32); out.len() / d];
        // (group rows, KV head, queries as (row, head)).
        let mut units: Vec<PrefixUnit<'_>> = Vec::new();
        let pairs = groups.len() * hp.n_kv_head;
        for (_, rows) in &groups {
            for g in 0..hp.n_kv_head {
                let qs: Vec<(usize, usize)> = rows
                    .iter()
                    .flat_map(|&r| (g * rep..(g + 1) * rep).map(move |h| (r, h)))
                    .collect();
                let chunks = (2 * threads).div_ceil(pairs).max(qs.len().div_ceil(16));
                let size = qs.len().div_ceil(chunks.min(qs.len()));
                for c in qs.chunks(size) {
                    units.push((rows, g, c.to_vec()));
                }
            }
        }
        let run = |(rows, g, qs): &(&[usize], usize, Vec<(usize, usize)>)| {
            // Every row of the group reads the same storage; views may differ in length.
            let (seq0, _) = row_seq[rows[0]];
            let mut seg = caches[seq0].segs[0];
            for &r in rows.iter() {
                let s = caches[row_seq[r].0].segs[0];
                if s.len > seg.len {
                    seg = s;
                }
            }
            let keys = Keys {
                k: seg.k,
                v: seg.v,
                stride: kvd,
                off: g * d,
            };
            let ranges: Vec<(usize, usize)> = qs
                .iter()
                .map(|&(r, _)| {
                    let (p, lo) = at(r);
                    (lo, (p + 1).min(caches[row_seq[r].0].segs[0].len))
                })
                .collect();
            let q: Vec<&[f32]> = qs.iter().map(|&(r, h)| query(r, h)).collect();
            let mut o = vec![0f32; qs.len() * d];
            let mut s = vec![(f32::NEG_INFINITY, 0f32); qs.len()];
            #[cfg(target_arch = "x86_64")]
            if avx512 {
                // SAFETY: `simd_level` never reports more than the CPU has, and at
                // `Avx512Vnni` it has AVX2, FMA and AVX-512 F, BW, VL.
                unsafe { cascade_avx512::<3>(&q, &ranges, keys, scale, &mut o, &mut s) };
                return (o, s);
            }
            #[cfg(target_arch = "x86_64")]
            if avx2 {
                // SAFETY: `simd_level` never reports more than the CPU has, and above scalar
                // it has AVX2 and FMA.
                unsafe { cascade_avx2(&q, &ranges, keys, scale, &mut o, &mut s) };
                return (o, s);
            }
            cascade::<false>(&q, &ranges, keys, scale, &mut o, &mut s);
            (o, s)
        };
        let work: usize = units
            .iter()
            .map(|(_, _, qs)| qs.len() * d * caches[row_seq[qs[0].0].0].segs[0].len)
            .sum();
        let done: Vec<PartialAttention> = if work < 1 << 17 || threads <= 1 {
            units.iter().map(run).collect()
        } else {
            use rayon::prelude::*;
            units.par_iter().map(run).collect()
        };
        for ((_, _, qs), (o, s)) in units.iter().zip(done) {
            for (n, &(r, h)) in qs.iter().enumerate() {
                let c = r * hp.n_head + h;
                st_o[c * d..(c + 1) * d].copy_from_slice(&o[n * d..(n + 1) * d]);
                st[c] = s[n];
            }
        }
    }

    // Phase 2.
    let one = |c: usize, o: &mut [f32]| {
        let (r, head) = (c / hp.n_head, c % hp.n_head);
        let (seq, _) = row_seq[r];
        let (p, mut lo) = at(r);
        let view = &caches[seq];
        let mut state = (f32::NEG_INFINITY, 0f32);
        if view.first.is_some() {
            // Phase 1 walked the first segment.
            o.copy_from_slice(&st_o[c * d..(c + 1) * d]);
            state = st[c];
            lo = lo.max(view.segs[0].len);
        } else {
            o.fill(0.0);
        }
        let q = query(r, head);
        let off = head / rep * d;
        #[cfg(target_arch = "x86_64")]
        if avx2 {
            // SAFETY: as above.
            return unsafe { attend_avx2(q, &view.segs, kvd, off, lo, p, scale, o, state) };
        }
        let _ = avx2;
        attend::<false>(q, &view.segs, kvd, off, lo, p, scale, o, state)
    };
    // With AVX-512, the `rep` heads of a row that read one KV head walk its keys together
    // (`cascade_avx512`, two of them per pass over a block): unit `u` is (row, KV head)
    // `(u / n_kv_head, u % n_kv_head)`, its heads' outputs the `rep · d` floats at `u · rep · d`.
    #[cfg(target_arch = "x86_64")]
    let heads = |u: usize, o: &mut [f32]| {
        let (r, g) = (u / hp.n_kv_head, u % hp.n_kv_head);
        let (seq, _) = row_seq[r];
        let (p, mut lo) = at(r);
        let view = &caches[seq];
        let c = u * rep;
        let mut state = vec![(f32::NEG_INFINITY, 0f32); rep];
        if view.first.is_some() {
            o.copy_from_slice(&st_o[c * d..(c + rep) * d]);
            state.copy_from_slice(&st[c..c + rep]);
            lo = lo.max(view.segs[0].len);
        } else {
            o.fill(0.0);
        }
        let q: Vec<&[f32]> = (g * rep..(g + 1) * rep).map(|h| query(r, h)).collect();
        for seg in &view.segs {
            let Some((keys, a, b)) = Keys::of_seg(seg, kvd, g * d, lo, p) else {
                continue;
            };
            // SAFETY: only called when `simd_level` is `Avx512Vnni` (see `run`).
            unsafe { cascade_avx512::<3>(&q, &vec![(a, b); rep], keys, scale, o, &mut state) };
        }
        for (o, &(_, sum)) in o.chunks_exact_mut(d).zip(&state) {
            let inv = 1.0 / sum;
            o.iter_mut().for_each(|x| *x *= inv);
        }
    };
    let work: usize = row_seq
        .iter()
        .map(|&(seq, i)| {
            let shared = caches[seq].first.map_or(0, |_| caches[seq].segs[0].len);
            hp.n_head * (pos[seq] + i + 1).saturating_sub(shared) * d
        })
        .sum();
    #[cfg(target_arch = "x86_64")]
    if avx512 {
        if work < 1 << 17 || threads <= 1 {
            out.chunks_exact_mut(rep * d)
                .enumerate()
                .for_each(|(u, o)| heads(u, o));
        } else {
            use rayon::prelude::*;
            out.par_chunks_mut(rep * d)
                .enumerate()
                .for_each(|(u, o)| heads(u, o));
        }
        return;
    }
    if work < 1 << 17 || threads <= 1 {
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

impl<'a> Keys<'a> {
    /// The keys of `seg` and its positions within `lo..=p` (relative to its start), or
    /// `None` when it has none there.
    #[inline(always)]
    fn of_seg(
        seg: &Seg<'a>,
        stride: usize,
        off: usize,
        lo: usize,
        p: usize,
    ) -> Option<(Self, usize, usize)> {
        let (a, b) = (lo.max(seg.start), (p + 1).min(seg.start + seg.len));
        let keys = Keys {
            k: seg.k,
            v: seg.v,
            stride,
            off,
        };
        // Lazily: with no positions here, `b` may lie before the segment's start.
        (a < b).then(|| (keys, a - seg.start, b - seg.start))
    }

    /// Position `j`'s key and value rows (`d` floats each).
    #[inline(always)]
    fn row(&self, j: usize, d: usize) -> (&'a [f32], &'a [f32]) {
        let a = j * self.stride + self.off;
        (&self.k[a..a + d], &self.v[a..a + d])
    }
}

/// One position of the online softmax: the score of query `q` against key `k`, and value
/// `v` folded into the partial output `o` and `(max, sum)`, rescaling them when the score is
/// a new maximum. Every path computes a (row, head) with these operations: here, one position
/// at a time (the portable path, and AVX2's leftovers), and in [`fold8_avx2`], 8 positions
/// at a time with the same operations per position. The exponentials are [`expf::exp`],
/// whose 8-lane twin gives the same bits (and both glibc's `expf` bits, see [`expf`]).
/// `AVX2` (only inside the `*_avx2` functions) takes the dot product with AVX intrinsics.
#[inline(always)]
fn softmax_step<const AVX2: bool>(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    scale: f32,
    o: &mut [f32],
    (max, sum): &mut (f32, f32),
) {
    #[cfg(target_arch = "x86_64")]
    let score = if AVX2 {
        // SAFETY: only instantiated inside the `*_avx2` functions, whose callers checked AVX2.
        unsafe { dot_avx(q, k) }
    } else {
        dot(q, k)
    } * scale;
    #[cfg(not(target_arch = "x86_64"))]
    let score = dot(q, k) * scale;
    if score > *max {
        let c = expf::exp(*max - score);
        *sum *= c;
        o.iter_mut().for_each(|x| *x *= c);
        *max = score;
    }
    let w = expf::exp(score - *max);
    *sum += w;
    o.iter_mut().zip(v).for_each(|(x, v)| *x += w * v);
}

/// Prefetches position `j`'s key and value rows (no effect on results).
#[inline(always)]
fn prefetch_position<const AVX2: bool>(at: Keys<'_>, j: usize, d: usize) {
    #[cfg(target_arch = "x86_64")]
    if AVX2 {
        let (k, v) = at.row(j, d);
        // SAFETY: SSE is part of x86-64; the caller passes a position the cache holds.
        unsafe {
            prefetch_row(k);
            prefetch_row(v);
        }
    }
    let _ = (at, j, d);
}

/// Phase 1 of [`attention`]: queries `q[n]` (all of one KV head) over the positions
/// `ranges[n].0..ranges[n].1` of one shared segment, walked once in position order; query
/// `n`'s partial output is `o[n · d..]` and its state `st[n]`. Each query sees the
/// operations of [`attend`] over the same positions, in the same order.
#[inline(always)]
fn cascade<const AVX2: bool>(
    q: &[&[f32]],
    ranges: &[(usize, usize)],
    at: Keys<'_>,
    scale: f32,
    o: &mut [f32],
    st: &mut [(f32, f32)],
) {
    let d = o.len() / q.len().max(1);
    let lo = ranges.iter().map(|r| r.0).min().unwrap_or(0);
    let hi = ranges.iter().map(|r| r.1).max().unwrap_or(0);
    for j in lo..hi {
        // Keys and values come from L3 or memory once per unit; the queries' partial
        // outputs (≤ 16 rows) stay in L1.
        prefetch_position::<AVX2>(at, (j + PREFETCH).min(hi - 1), d);
        let (k, v) = at.row(j, d);
        for (n, (q, &(a, b))) in q.iter().zip(ranges).enumerate() {
            if j >= a && j < b {
                softmax_step::<AVX2>(q, k, v, scale, &mut o[n * d..(n + 1) * d], &mut st[n]);
            }
        }
    }
}

/// [`cascade`] compiled for AVX2, 8 positions at a time ([`scores8_avx2`], [`fold8_avx2`]):
/// the same bits (see [`attend_avx2`]).
///
/// # Safety
/// The CPU must have AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn cascade_avx2(
    q: &[&[f32]],
    ranges: &[(usize, usize)],
    at: Keys<'_>,
    scale: f32,
    o: &mut [f32],
    st: &mut [(f32, f32)],
) {
    let d = o.len() / q.len().max(1);
    if d % 8 != 0 {
        return cascade::<true>(q, ranges, at, scale, o, st);
    }
    let lo = ranges.iter().map(|r| r.0).min().unwrap_or(0);
    let hi = ranges.iter().map(|r| r.1).max().unwrap_or(0);
    let mut j = lo;
    // Blocks of 8 positions, all queries per block: the block's keys and values (4 KB at
    // head_dim 64) are loaded from L3 or memory once and stay in L1 for every query.
    while j + 8 <= hi {
        prefetch_block(at, j + 8, hi, d);
        for (n, (q, &(a, b))) in q.iter().zip(ranges).enumerate() {
            let (i0, i1) = (a.saturating_sub(j).min(8), b.saturating_sub(j).min(8));
            if i0 < i1 {
                let s = scores8_avx2(q, at, j, scale);
                fold8_avx2(s, at, j, (i0, i1), &mut o[n * d..(n + 1) * d], &mut st[n]);
            }
        }
        j += 8;
    }
    for j in j..hi {
        let (k, v) = at.row(j, d);
        for (n, (q, &(a, b))) in q.iter().zip(ranges).enumerate() {
            if j >= a && j < b {
                softmax_step::<true>(q, k, v, scale, &mut o[n * d..(n + 1) * d], &mut st[n]);
            }
        }
    }
}

/// One (query row, head) of [`attention`] over the positions `lo..=p` of its segments,
/// starting from the partial output `o` and `state` (`(-inf, 0)` and zeros for a fresh
/// start), then normalized: an online softmax, one pass over the keys.
/// `AVX2` (only inside [`attend_avx2`]) takes the dot products with AVX intrinsics and
/// prefetches the keys and values a few positions ahead.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn attend<const AVX2: bool>(
    q: &[f32],
    segs: &[Seg<'_>],
    stride: usize,
    off: usize,
    lo: usize,
    p: usize,
    scale: f32,
    o: &mut [f32],
    mut state: (f32, f32),
) {
    let d = q.len();
    for seg in segs {
        let Some((at, a, b)) = Keys::of_seg(seg, stride, off, lo, p) else {
            continue;
        };
        for j in a..b {
            // At decode the cache of every layer is read once per token (~14 MB for SmolLM2
            // at 300 positions): it comes from L3 or memory, and `perf` showed the first
            // load of each key and value row as the hottest instructions.
            prefetch_position::<AVX2>(at, (j + PREFETCH).min(b - 1), d);
            let (k, v) = at.row(j, d);
            softmax_step::<AVX2>(q, k, v, scale, o, &mut state);
        }
    }
    let inv = 1.0 / state.1;
    o.iter_mut().for_each(|x| *x *= inv);
}

/// [`attend`] for AVX2, 8 positions at a time: 8 scores at once ([`scores8_avx2`]), their
/// exponentials 8 lanes at a time and the weighted sums in registers ([`fold8_avx2`]), the
/// positions left over one at a time ([`softmax_step`]). Every position gets the portable
/// path's operations in the same order — Rust never contracts `a · b + c` into an FMA, and
/// [`expf`]'s scalar and 8-lane exponentials give the same bits — so the results are
/// bit-identical to the portable instantiation whatever the blocks' alignment (tested): the
/// kernel set never changes the output. (Before blocking, a batched extraction spent ~60 %
/// of its time here and in [`cascade_avx2`], a third of that in libm's `expf`.)
///
/// # Safety
/// The CPU must have AVX2 and FMA.
#[allow(clippy::too_many_arguments)]
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn attend_avx2(
    q: &[f32],
    segs: &[Seg<'_>],
    stride: usize,
    off: usize,
    lo: usize,
    p: usize,
    scale: f32,
    o: &mut [f32],
    mut state: (f32, f32),
) {
    let d = q.len();
    if d % 8 != 0 {
        return attend::<true>(q, segs, stride, off, lo, p, scale, o, state);
    }
    for seg in segs {
        let Some((at, a, b)) = Keys::of_seg(seg, stride, off, lo, p) else {
            continue;
        };
        let mut j = a;
        while j + 8 <= b {
            prefetch_block(at, j + 8, b, d);
            let s = scores8_avx2(q, at, j, scale);
            fold8_avx2(s, at, j, (0, 8), o, &mut state);
            j += 8;
        }
        for j in j..b {
            let (k, v) = at.row(j, d);
            softmax_step::<true>(q, k, v, scale, o, &mut state);
        }
    }
    let inv = 1.0 / state.1;
    o.iter_mut().for_each(|x| *x *= inv);
}

/// Prefetches the keys and values of positions `j..j + 8` (those below `end`) into L1 (no
/// effect on results).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn prefetch_block(at: Keys<'_>, j: usize, end: usize, d: usize) {
    for j in j..(j + 8).min(end) {
        prefetch_position::<true>(at, j, d);
    }
}

/// The scores of query `q` against the keys of positions `j..j + 8`, each with the bits of
/// `dot_avx(q, k) * scale` (the score [`softmax_step`] computes): 8 accumulators, one per
/// position, updated like [`dot_avx`]'s (multiply, then add), then transposed so that each
/// position's 8 lanes are summed in `dot_avx`'s order, from the same start value.
/// `q.len()` must be a multiple of 8.
///
/// # Safety
/// The CPU must have AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn scores8_avx2(q: &[f32], at: Keys<'_>, j: usize, scale: f32) -> std::arch::x86_64::__m256 {
    use std::arch::x86_64::*;
    let d = q.len();
    debug_assert_eq!(d % 8, 0);
    let rows: [*const f32; 8] = std::array::from_fn(|i| at.row(j + i, d).0.as_ptr());
    let mut acc = [_mm256_setzero_ps(); 8];
    let mut c = 0;
    while c < d {
        let x = _mm256_loadu_ps(q.as_ptr().add(c));
        for (a, row) in acc.iter_mut().zip(rows) {
            *a = _mm256_add_ps(*a, _mm256_mul_ps(x, _mm256_loadu_ps(row.add(c))));
        }
        c += 8;
    }
    lane_sums(acc, scale)
}

/// The 8 scores of a block from its 8 dot-product accumulators (one per position): an 8 × 8
/// transpose, so that each position's lanes are summed in [`dot_avx`]'s order from the same
/// start value, times `scale`.
///
/// # Safety
/// The CPU must have AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn lane_sums(acc: [std::arch::x86_64::__m256; 8], scale: f32) -> std::arch::x86_64::__m256 {
    use std::arch::x86_64::*;
    // 8 × 8 transpose: `t[l]` holds lane `l` of every position's accumulator.
    let [a0, a1, a2, a3, a4, a5, a6, a7] = acc;
    let (u0, u1) = (_mm256_unpacklo_ps(a0, a1), _mm256_unpackhi_ps(a0, a1));
    let (u2, u3) = (_mm256_unpacklo_ps(a2, a3), _mm256_unpackhi_ps(a2, a3));
    let (u4, u5) = (_mm256_unpacklo_ps(a4, a5), _mm256_unpackhi_ps(a4, a5));
    let (u6, u7) = (_mm256_unpacklo_ps(a6, a7), _mm256_unpackhi_ps(a6, a7));
    let (v0, v1) = (
        _mm256_shuffle_ps::<0x44>(u0, u2),
        _mm256_shuffle_ps::<0xee>(u0, u2),
    );
    let (v2, v3) = (
        _mm256_shuffle_ps::<0x44>(u1, u3),
        _mm256_shuffle_ps::<0xee>(u1, u3),
    );
    let (v4, v5) = (
        _mm256_shuffle_ps::<0x44>(u4, u6),
        _mm256_shuffle_ps::<0xee>(u4, u6),
    );
    let (v6, v7) = (
        _mm256_shuffle_ps::<0x44>(u5, u7),
        _mm256_shuffle_ps::<0xee>(u5, u7),
    );
    let t = [
        _mm256_permute2f128_ps::<0x20>(v0, v4),
        _mm256_permute2f128_ps::<0x20>(v1, v5),
        _mm256_permute2f128_ps::<0x20>(v2, v6),
        _mm256_permute2f128_ps::<0x20>(v3, v7),
        _mm256_permute2f128_ps::<0x31>(v0, v4),
        _mm256_permute2f128_ps::<0x31>(v1, v5),
        _mm256_permute2f128_ps::<0x31>(v2, v6),
        _mm256_permute2f128_ps::<0x31>(v3, v7),
    ];
    // `dot_avx` sums its lanes with `Iterator::sum`, a fold from that impl's start value.
    let mut sum = _mm256_set1_ps(std::iter::empty::<f32>().sum());
    for t in t {
        sum = _mm256_add_ps(sum, t);
    }
    _mm256_mul_ps(sum, _mm256_set1_ps(scale))
}

/// Positions `j + i0..j + i1` (`i1 ≤ 8`) folded into the partial output `o` and `state`,
/// given the scores of positions `j..j + 8` from [`scores8_avx2`]: exactly
/// [`softmax_step`]'s operations per position, in position order (the running max first,
/// then all exponentials of the block 8 lanes at a time by [`expf::exp8_avx2`], then the sum
/// and each 8 columns of `o` through the positions, in a register). A position that raises
/// no maximum multiplies `o` by `exp(0) = 1` when another position of the block does: an
/// exact no-op.
///
/// # Safety
/// The CPU must have AVX2 and FMA; `o.len()` must be a multiple of 8.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn fold8_avx2(
    scores: std::arch::x86_64::__m256,
    at: Keys<'_>,
    j: usize,
    (i0, i1): (usize, usize),
    o: &mut [f32],
    state: &mut (f32, f32),
) {
    use std::arch::x86_64::*;
    let d = o.len();
    debug_assert!(d % 8 == 0 && i1 <= 8);
    let (max, mut sum) = *state;
    let lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    let valid = _mm256_castsi256_ps(_mm256_and_si256(
        _mm256_cmpgt_epi32(lane, _mm256_set1_epi32(i0 as i32 - 1)),
        _mm256_cmpgt_epi32(_mm256_set1_epi32(i1 as i32), lane),
    ));
    let ninf = _mm256_set1_ps(f32::NEG_INFINITY);
    // Positions outside `i0..i1` score -inf: they never raise the maximum.
    let s = _mm256_blendv_ps(ninf, scores, valid);
    let (new_max, w, c, rescaled);
    if _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_UNORD_Q>(s, s)) == 0 {
        (w, c, rescaled, new_max) = running_max(s, max);
    } else {
        // A NaN score: softmax_step's comparisons one by one.
        let mut sc = [0f32; 8];
        _mm256_storeu_ps(sc.as_mut_ptr(), s);
        let (mut max, mut ca, mut wa, mut any) = (max, [0f32; 8], [0f32; 8], false);
        for i in i0..i1 {
            if sc[i] > max {
                ca[i] = max - sc[i];
                max = sc[i];
                any = true;
            }
            wa[i] = sc[i] - max;
        }
        (new_max, rescaled) = (max, any);
        (c, w) = (_mm256_loadu_ps(ca.as_ptr()), _mm256_loadu_ps(wa.as_ptr()));
    }
    let w = expf::exp8_avx2(w);
    let c = if rescaled {
        expf::exp8_avx2(c)
    } else {
        _mm256_set1_ps(1.0)
    };
    let at_lane = |x: __m256, i: usize| _mm256_permutevar8x32_ps(x, _mm256_set1_epi32(i as i32));
    for i in i0..i1 {
        if rescaled {
            sum *= _mm256_cvtss_f32(at_lane(c, i));
        }
        sum += _mm256_cvtss_f32(at_lane(w, i));
    }
    *state = (new_max, sum);
    let rows: [*const f32; 8] = std::array::from_fn(|i| {
        if i >= i0 && i < i1 {
            at.row(j + i, d).1.as_ptr()
        } else {
            std::ptr::null()
        }
    });
    // 64 columns of `o` at a time in 8 registers through the block's positions (each
    // element still sees its positions in order), one broadcast of the weight per position.
    let mut col = 0;
    while col + 64 <= d {
        let out = o.as_mut_ptr().add(col);
        let mut acc: [__m256; 8] = std::array::from_fn(|r| _mm256_loadu_ps(out.add(8 * r)));
        // (A `while`, not an iterator adapter: an adapter's `next` was left out of line, and
        // the call spilled the 8 registers every position.)
        let mut i = i0;
        while i < i1 {
            if rescaled {
                let c = at_lane(c, i);
                acc.iter_mut().for_each(|a| *a = _mm256_mul_ps(*a, c));
            }
            let (w, row) = (at_lane(w, i), rows[i].add(col));
            for (r, a) in acc.iter_mut().enumerate() {
                *a = _mm256_add_ps(*a, _mm256_mul_ps(w, _mm256_loadu_ps(row.add(8 * r))));
            }
            i += 1;
        }
        for (r, a) in acc.iter().enumerate() {
            _mm256_storeu_ps(out.add(8 * r), *a);
        }
        col += 64;
    }
    while col < d {
        let out = o.as_mut_ptr().add(col);
        let mut acc = _mm256_loadu_ps(out);
        let mut i = i0;
        while i < i1 {
            if rescaled {
                acc = _mm256_mul_ps(acc, at_lane(c, i));
            }
            let v = _mm256_loadu_ps(rows[i].add(col));
            acc = _mm256_add_ps(acc, _mm256_mul_ps(at_lane(w, i), v));
            i += 1;
        }
        _mm256_storeu_ps(out, acc);
        col += 8;
    }
}

/// [`softmax_step`]'s maxima over a block of 8 scores without NaN (lanes not to fold score
/// `-inf`), starting from the running maximum `max`: the exponents of the weights (`score −
/// max` after that position), of the rescale factors (`max before − score` where a score
/// raises the maximum, `0` — a factor of exactly 1 — elsewhere), whether any position
/// raises it, and the maximum after the block.
///
/// # Safety
/// The CPU must have AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn running_max(
    s: std::arch::x86_64::__m256,
    max: f32,
) -> (
    std::arch::x86_64::__m256,
    std::arch::x86_64::__m256,
    bool,
    f32,
) {
    use std::arch::x86_64::*;
    let ninf = _mm256_set1_ps(f32::NEG_INFINITY);
    // The running maximum after each position, `if s > max { max = s }` in order, as a
    // prefix scan: `_mm256_max_ps(later, earlier)` is `later > earlier ? later : earlier`,
    // that step exactly, and without NaN it is associative (the first of the largest), so
    // three shifted steps give every prefix.
    let m0 = _mm256_set1_ps(max);
    let mut m = s;
    m = _mm256_max_ps(m, shift_lanes::<1>(m, ninf));
    m = _mm256_max_ps(m, shift_lanes::<2>(m, ninf));
    m = _mm256_max_ps(m, shift_lanes::<4>(m, ninf));
    m = _mm256_max_ps(m, m0);
    // The maximum before each position; a rescale where the score exceeds it.
    let before = shift_lanes::<1>(m, m0);
    let raised = _mm256_cmp_ps::<_CMP_GT_OQ>(s, before);
    let c = _mm256_and_ps(raised, _mm256_sub_ps(before, s));
    let new_max = _mm256_cvtss_f32(_mm256_permutevar8x32_ps(m, _mm256_set1_epi32(7)));
    (
        _mm256_sub_ps(s, m),
        c,
        _mm256_movemask_ps(raised) != 0,
        new_max,
    )
}

/// [`cascade_avx2`] with AVX-512's 32 registers (on 256-bit vectors): each block of 8
/// positions is walked by `G` (2 or 3) queries at once where all of them read all of it
/// ([`block_avx512`]: one load of each key and value chunk for the group, and independent
/// dependency chains — scores, maxima, exponentials, sums — side by side, where one
/// query's chain alone left the CPU waiting), in pairs where a group of `G` does not fit
/// (four queries as 2 + 2, so that none is left alone), and by [`scores8_avx2`] and
/// [`fold8_avx2`] elsewhere. Each query still gets [`softmax_step`]'s operations in the
/// same order: the same bits as [`cascade`]. Micro-timing (`tests::cascade_timing`, 24
/// queries over 768 positions, head_dim 64): ~10 ns per (query, position) through
/// [`cascade_avx2`], ~6 in pairs, ~5.6 in threes.
///
/// # Safety
/// The CPU must have AVX2, FMA, AVX-512 F and VL.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,avx512f,avx512vl")]
unsafe fn cascade_avx512<const G: usize>(
    q: &[&[f32]],
    ranges: &[(usize, usize)],
    at: Keys<'_>,
    scale: f32,
    o: &mut [f32],
    st: &mut [(f32, f32)],
) {
    let d = o.len() / q.len().max(1);
    if d % 64 != 0 || q.iter().any(|q| q.len() != d) {
        return cascade_avx2(q, ranges, at, scale, o, st);
    }
    let lo = ranges.iter().map(|r| r.0).min().unwrap_or(0);
    let hi = ranges.iter().map(|r| r.1).max().unwrap_or(0);
    if hi > lo {
        // The raw pointers of `block_avx512` stay inside the rows `at.row` would give.
        let end = (hi - 1) * at.stride + at.off + d;
        assert!(end <= at.k.len() && end <= at.v.len());
    }
    let mut j = lo;
    while j + 8 <= hi {
        prefetch_block(at, j + 8, hi, d);
        let full = |n: usize| ranges[n].0 <= j && ranges[n].1 >= j + 8;
        let mut n = 0;
        while n < q.len() {
            let full_n = |m: usize| n + m <= q.len() && (n..n + m).all(full);
            // Threes (SmolLM2's query heads per KV head), but 4 as 2 + 2 (no single left).
            if G == 3 && full_n(3) && q.len() - n != 4 {
                let qp = [q[n].as_ptr(), q[n + 1].as_ptr(), q[n + 2].as_ptr()];
                let op = o[n * d..(n + 3) * d].as_mut_ptr();
                let op = [op, op.add(d), op.add(2 * d)];
                block_avx512::<3>(qp, at, j, scale, d, op, &mut st[n..n + 3]);
                n += 3;
                continue;
            }
            if full_n(2) {
                let qp = [q[n].as_ptr(), q[n + 1].as_ptr()];
                let op = o[n * d..(n + 2) * d].as_mut_ptr();
                block_avx512::<2>(qp, at, j, scale, d, [op, op.add(d)], &mut st[n..n + 2]);
                n += 2;
                continue;
            }
            let (a, b) = ranges[n];
            let (i0, i1) = (a.saturating_sub(j).min(8), b.saturating_sub(j).min(8));
            if i0 < i1 {
                let s = scores8_avx2(q[n], at, j, scale);
                fold8_avx2(s, at, j, (i0, i1), &mut o[n * d..(n + 1) * d], &mut st[n]);
            }
            n += 1;
        }
        j += 8;
    }
    for j in j..hi {
        let (k, v) = at.row(j, d);
        for (n, (q, &(a, b))) in q.iter().zip(ranges).enumerate() {
            if j >= a && j < b {
                softmax_step::<true>(q, k, v, scale, &mut o[n * d..(n + 1) * d], &mut st[n]);
            }
        }
    }
}

/// `N` queries (2 or 3) over all 8 positions `j..j + 8`: for each, exactly what
/// [`scores8_avx2`] and [`fold8_avx2`] compute, interleaved — each key and value chunk
/// loaded once for all of them, the exponentials by [`expf::exp8_avx512`]. A NaN score sends
/// every query through [`fold8_avx2`]. Query `n` reads `q[n]` and updates `o[n]` (`d` floats
/// each, `d` a multiple of 64) and `st[n]`; the caller checked that the block's rows lie
/// inside `at`'s slices.
///
/// # Safety
/// The CPU must have AVX2, FMA, AVX-512 F and VL; `q[n]` and `o[n]` must point to `d`
/// floats, the `o[n]` not overlapping.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,avx512f,avx512vl")]
#[inline]
#[allow(clippy::needless_range_loop)] // Indexed loops over registers: see the column loop.
unsafe fn block_avx512<const N: usize>(
    q: [*const f32; N],
    at: Keys<'_>,
    j: usize,
    scale: f32,
    d: usize,
    o: [*mut f32; N],
    st: &mut [(f32, f32)],
) {
    use std::arch::x86_64::*;
    debug_assert!(d % 64 == 0 && st.len() == N);
    let stride = at.stride;
    let kb = at.k.as_ptr().add(j * stride + at.off);
    let vb = at.v.as_ptr().add(j * stride + at.off);
    // Scores: 8 accumulators per query, as in `scores8_avx2`.
    let mut acc = [[_mm256_setzero_ps(); 8]; N];
    let mut c = 0;
    while c < d {
        let mut x = [_mm256_setzero_ps(); N];
        for n in 0..N {
            x[n] = _mm256_loadu_ps(q[n].add(c));
        }
        for i in 0..8 {
            let k = _mm256_loadu_ps(kb.add(i * stride + c));
            for n in 0..N {
                acc[n][i] = _mm256_add_ps(acc[n][i], _mm256_mul_ps(x[n], k));
            }
        }
        c += 8;
    }
    let mut s = [_mm256_setzero_ps(); N];
    let mut nan = false;
    for n in 0..N {
        s[n] = lane_sums(acc[n], scale);
        nan |= _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_UNORD_Q>(s[n], s[n])) != 0;
    }
    if nan {
        for n in 0..N {
            let o = std::slice::from_raw_parts_mut(o[n], d);
            fold8_avx2(s[n], at, j, (0, 8), o, &mut st[n]);
        }
        return;
    }
    // Each step for every query before the next, so their chains overlap.
    let (mut wx, mut cx, mut rescaled, mut max) = ([s[0]; N], [s[0]; N], [false; N], [0f32; N]);
    for n in 0..N {
        (wx[n], cx[n], rescaled[n], max[n]) = running_max(s[n], st[n].0);
    }
    let (mut w, mut cf) = ([[0f32; 8]; N], [[1f32; 8]; N]);
    for n in 0..N {
        _mm256_storeu_ps(w[n].as_mut_ptr(), expf::exp8_avx512(wx[n]));
    }
    for n in 0..N {
        if rescaled[n] {
            _mm256_storeu_ps(cf[n].as_mut_ptr(), expf::exp8_avx512(cx[n]));
        }
    }
    for n in 0..N {
        let mut sum = st[n].1;
        for i in 0..8 {
            if rescaled[n] {
                sum *= cf[n][i];
            }
            sum += w[n][i];
        }
        st[n] = (max[n], sum);
    }
    // The queries' 64 columns at a time in 8 registers each through the positions, one load
    // of each value chunk for all of them. (Constant-bound `for` loops, which unroll; the
    // comment in `fold8_avx2`'s column loop says why no iterator adapters.)
    let mut col = 0;
    while col < d {
        let mut acc = [[_mm256_setzero_ps(); 8]; N];
        for n in 0..N {
            for x in 0..8 {
                acc[n][x] = _mm256_loadu_ps(o[n].add(col + 8 * x));
            }
        }
        for i in 0..8 {
            for n in 0..N {
                if rescaled[n] {
                    let c = _mm256_set1_ps(cf[n][i]);
                    for x in 0..8 {
                        acc[n][x] = _mm256_mul_ps(acc[n][x], c);
                    }
                }
            }
            let mut wb = [_mm256_setzero_ps(); N];
            for n in 0..N {
                wb[n] = _mm256_set1_ps(w[n][i]);
            }
            let row = vb.add(i * stride + col);
            for x in 0..8 {
                let v = _mm256_loadu_ps(row.add(8 * x));
                for n in 0..N {
                    acc[n][x] = _mm256_add_ps(acc[n][x], _mm256_mul_ps(wb[n], v));
                }
            }
        }
        for n in 0..N {
            for x in 0..8 {
                _mm256_storeu_ps(o[n].add(col + 8 * x), acc[n][x]);
            }
        }
        col += 64;
    }
}

/// `x` moved up by `K` (1, 2 or 4) lanes, lane `i` taking lane `i - K`; the first `K` lanes
/// from `fill`.
///
/// # Safety
/// The CPU must have AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
unsafe fn shift_lanes<const K: i32>(
    x: std::arch::x86_64::__m256,
    fill: std::arch::x86_64::__m256,
) -> std::arch::x86_64::__m256 {
    use std::arch::x86_64::*;
    let from = |i: i32| (i - K).max(0);
    let idx = _mm256_setr_epi32(
        from(0),
        from(1),
        from(2),
        from(3),
        from(4),
        from(5),
        from(6),
        from(7),
    );
    let moved = _mm256_permutevar8x32_ps(x, idx);
    match K {
        1 => _mm256_blend_ps::<0b1>(moved, fill),
        2 => _mm256_blend_ps::<0b11>(moved, fill),
        _ => _mm256_blend_ps::<0b1111>(moved, fill),
    }
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::super::cache::{KvCache, SeqCache};
    use super::super::weights::Act;
    use super::*;

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
        let bits = |x: &[f32]| x.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        let segs = [
            Seg {
                k: &k,
                v: &v,
                start: 0,
                len: 20,
            },
            Seg {
                k: &k[20 * stride..],
                v: &v[20 * stride..],
                start: 20,
                len: n - 20,
            },
        ];
        let init = (f32::NEG_INFINITY, 0.0);
        let (mut a, mut b) = (vec![0f32; d], vec![0f32; d]);
        attend::<false>(&q, &segs, stride, 64, 3, n - 1, 0.125, &mut a, init);
        // SAFETY: the CPU has AVX2 and FMA (checked above).
        unsafe { attend_avx2(&q, &segs, stride, 64, 3, n - 1, 0.125, &mut b, init) };
        assert_eq!(bits(&a), bits(&b));
        // The cascade over the same positions, for this query and a second one.
        let q2: Vec<f32> = (0..d).map(|i| f(i + 11)).collect();
        let (qs, ranges) = ([&q[..], &q2[..]], [(3, n), (0, n - 5)]);
        let (mut c, mut e) = (vec![0f32; 2 * d], vec![0f32; 2 * d]);
        let (mut sc, mut se) = ([init; 2], [init; 2]);
        cascade::<false>(&qs, &ranges, at, 0.125, &mut c, &mut sc);
        // SAFETY: as above.
        unsafe { cascade_avx2(&qs, &ranges, at, 0.125, &mut e, &mut se) };
        assert_eq!(bits(&c), bits(&e));
        assert_eq!(sc, se);
        if simd_level() == SimdLevel::Avx512Vnni {
            // Two queries per block where both read all of it (blocks 1–4 here), one at a
            // time at the ends.
            let (mut e, mut se) = (vec![0f32; 2 * d], [init; 2]);
            // SAFETY: the CPU has AVX-512 F and VL at this level.
            unsafe { cascade_avx512::<3>(&qs, &ranges, at, 0.125, &mut e, &mut se) };
            assert_eq!(bits(&c), bits(&e));
            assert_eq!(sc, se);
            // Three and two at a time: 5 queries, 3 + 2 where all read the block.
            let qv: Vec<Vec<f32>> = (0..5)
                .map(|m| (0..d).map(|i| f(i * 3 + 17 * m)).collect())
                .collect();
            let qs: Vec<&[f32]> = qv.iter().map(|q| &q[..]).collect();
            let ranges = [(0, n), (0, n), (2, n), (0, n - 9), (0, n)];
            let (mut c, mut e) = (vec![0f32; 5 * d], vec![0f32; 5 * d]);
            let (mut sc, mut se) = ([init; 5], [init; 5]);
            cascade::<false>(&qs, &ranges, at, 0.125, &mut c, &mut sc);
            // SAFETY: as above.
            unsafe { cascade_avx512::<3>(&qs, &ranges, at, 0.125, &mut e, &mut se) };
            assert_eq!(bits(&c), bits(&e));
            assert_eq!(sc, se);
        }
        // Normalized, the first query's cascade state is the plain pass's output.
        let inv = 1.0 / sc[0].1;
        c[..d].iter_mut().for_each(|x| *x *= inv);
        assert_eq!(bits(&c[..d]), bits(&a));
    }

    /// Non-finite scores (a key with an infinity, one with a NaN) take the blocked path's
    /// scalar fallback and its exponential's libm lanes: the AVX2 attention still gives the
    /// portable one's results (the same bits, or NaN where it gives NaN).
    #[test]
    fn attention_avx2_matches_portable_on_non_finite_scores() {
        if simd_level() == SimdLevel::Scalar {
            return;
        }
        let f = |i: usize| ((i * 7919 + 13) % 2001) as f32 / 500.0 - 2.0;
        let (d, n, stride) = (64, 40, 64);
        let q: Vec<f32> = (0..d).map(f).collect();
        let v: Vec<f32> = (0..n * stride).map(|i| f(i + 7)).collect();
        let same = |a: &[f32], b: &[f32]| {
            a.iter()
                .zip(b)
                .all(|(x, y)| x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()))
        };
        // +inf and -inf scores at positions 11 and 13, then a NaN score at 29.
        for (bad, val) in [(11, f32::INFINITY), (13, f32::NEG_INFINITY), (29, f32::NAN)] {
            let mut k: Vec<f32> = (0..n * stride).map(|i| f(i + 3)).collect();
            k[bad * stride] = val;
            let at = Keys {
                k: &k,
                v: &v,
                stride,
                off: 0,
            };
            let segs = [Seg {
                k: &k,
                v: &v,
                start: 0,
                len: n,
            }];
            let init = (f32::NEG_INFINITY, 0.0);
            let (mut a, mut b) = (vec![0f32; d], vec![0f32; d]);
            attend::<false>(&q, &segs, stride, 0, 2, n - 1, 0.125, &mut a, init);
            // SAFETY: the CPU has AVX2 and FMA (checked above).
            unsafe { attend_avx2(&q, &segs, stride, 0, 2, n - 1, 0.125, &mut b, init) };
            assert!(same(&a, &b), "{val} at {bad}: {a:?} vs {b:?}");
            let (qs, ranges) = ([&q[..], &q[..]], [(0, n), (5, n - 3)]);
            let (mut c, mut e) = (vec![0f32; 2 * d], vec![0f32; 2 * d]);
            let (mut sc, mut se) = ([init; 2], [init; 2]);
            cascade::<false>(&qs, &ranges, at, 0.125, &mut c, &mut sc);
            // SAFETY: as above.
            unsafe { cascade_avx2(&qs, &ranges, at, 0.125, &mut e, &mut se) };
            assert!(same(&c, &e), "{val} at {bad}");
            let flat = |s: [(f32, f32); 2]| [s[0].0, s[0].1, s[1].0, s[1].1];
            assert!(
                same(&flat(sc), &flat(se)),
                "{val} at {bad}: {sc:?} vs {se:?}"
            );
            if simd_level() == SimdLevel::Avx512Vnni {
                // The bad position's block is walked by both queries together.
                let (mut e, mut se) = (vec![0f32; 2 * d], [init; 2]);
                // SAFETY: the CPU has AVX-512 F and VL at this level.
                unsafe { cascade_avx512::<3>(&qs, &ranges, at, 0.125, &mut e, &mut se) };
                assert!(same(&c, &e), "AVX-512, {val} at {bad}");
                assert!(
                    same(&flat(sc), &flat(se)),
                    "AVX-512, {val} at {bad}: {sc:?} vs {se:?}"
                );
            }
        }
    }

    /// Thread CPU time (`CLOCK_THREAD_CPUTIME_ID`), for the timing test below.
    fn thread_cpu() -> Duration {
        extern "C" {
            fn clock_gettime(clock: i32, ts: *mut [i64; 2]) -> i32;
        }
        let mut ts = [0i64; 2];
        // SAFETY: a valid clock id and a pointer to a `struct timespec`-sized buffer.
        assert_eq!(unsafe { clock_gettime(3, &mut ts) }, 0);
        Duration::new(ts[0] as u64, ts[1] as u32)
    }

    /// Micro-timing of the shared-prefix kernels on a batched decode step's shape (SmolLM2:
    /// 8 rows × 3 query heads per KV head, head_dim 64, a 768-position prefix, 3 KV heads of
    /// stride 192): ns per (query, position), thread CPU time, kernels alternating.
    /// `cargo test --release -p formwork-model --lib cascade_timing -- --ignored --nocapture`
    #[test]
    #[ignore = "timing, by hand"]
    fn cascade_timing() {
        if simd_level() == SimdLevel::Scalar {
            return;
        }
        let f = |i: usize| ((i * 7919 + 13) % 2001) as f32 / 500.0 - 2.0;
        let (d, n, stride, nq) = (64, 768, 192, 24);
        let k: Vec<f32> = (0..n * stride).map(|i| f(i + 3) * 0.3).collect();
        let v: Vec<f32> = (0..n * stride).map(|i| f(i + 7)).collect();
        let qv: Vec<Vec<f32>> = (0..nq)
            .map(|m| (0..d).map(|i| f(i * 31 + m * 977)).collect())
            .collect();
        let qs: Vec<&[f32]> = qv.iter().map(|q| &q[..]).collect();
        let ranges = vec![(0, n); nq];
        let at = Keys {
            k: &k,
            v: &v,
            stride,
            off: 64,
        };
        type Kernel<'a> = (
            &'a str,
            unsafe fn(&[&[f32]], &[(usize, usize)], Keys<'_>, f32, &mut [f32], &mut [(f32, f32)]),
        );
        let mut kernels: Vec<Kernel> = vec![("avx2", cascade_avx2)];
        if simd_level() == SimdLevel::Avx512Vnni {
            kernels.push(("avx512 pairs", cascade_avx512::<2>));
            kernels.push(("avx512 threes", cascade_avx512::<3>));
        }
        let reps = 40;
        let mut out: Vec<Vec<u32>> = Vec::new();
        for round in 0..5 {
            for (name, kernel) in &kernels {
                let (mut o, mut st) = (vec![0f32; nq * d], vec![(f32::NEG_INFINITY, 0f32); nq]);
                let t = thread_cpu();
                for _ in 0..reps {
                    o.fill(0.0);
                    st.fill((f32::NEG_INFINITY, 0.0));
                    // SAFETY: the CPU has what each kernel needs (checked above).
                    unsafe { kernel(&qs, &ranges, at, 0.125, &mut o, &mut st) };
                }
                let ns = (thread_cpu() - t).as_nanos() as f64 / (reps * nq * n) as f64;
                println!("round {round} {name:>13}: {ns:.2} ns per (query, position)");
                out.push(o.iter().map(|x| x.to_bits()).collect());
            }
        }
        assert!(out.windows(2).all(|w| w[0] == w[1]));
    }

    /// One layer's cache holding `k` and `v` whole, nothing shared.
    fn whole(k: Vec<f32>, v: Vec<f32>, kvd: usize) -> SeqCache {
        let len = k.len() / kvd;
        SeqCache {
            shared: Vec::new(),
            own: Arc::new(vec![KvCache { k, v }]),
            len,
        }
    }

    /// The shared-prefix path of `attention` (phase 1 over a segment several sequences share,
    /// then each (row, head) over the rest) gives exactly the bits of every sequence alone
    /// with its positions in one unshared cache: forks of one base at different lengths,
    /// with own positions, a nested fork (two shared segments), a sequence that shares
    /// nothing, decode rows and multi-row chunks in one batch, with and without a window
    /// that starts inside the shared segment, on sizes that take the serial and the
    /// parallel loops.
    #[test]
    fn shared_prefix_attention_is_bit_identical_to_unshared() {
        let f = |i: usize, s: usize| ((i * 7919 + s * 104_729) % 2000) as f32 / 1000.0 - 1.0;
        for (base_len, head_dim) in [(9, 8), (300, 64)] {
            let hp = Hparams {
                hidden: 0,
                ffn: 0,
                n_head: 6,
                n_kv_head: 2,
                head_dim,
                eps: 1e-6,
                rope_interleaved: false,
                act: Act::Silu,
                embed_scale: None,
            };
            let kvd = hp.kv_dim();
            let gen = |n: usize, s: usize| (0..n * kvd).map(|i| f(i, s)).collect::<Vec<f32>>();
            let base = whole(gen(base_len, 1), gen(base_len, 2), kvd);
            // (fork point, own positions after it, rows fed this pass).
            let plan = [
                (base_len, 3, 1),
                (base_len - 2, 5, 1),
                (base_len, 4, 3),
                (base_len - 1, 1, 1),
            ];
            let mut seqs: Vec<SeqCache> = Vec::new();
            let mut alone: Vec<SeqCache> = Vec::new();
            for (n, &(at, own, _)) in plan.iter().enumerate() {
                let mut s = base.fork(at);
                let (k, v) = (gen(own, 10 + n), gen(own, 20 + n));
                s.own_mut()[0].k.extend_from_slice(&k);
                s.own_mut()[0].v.extend_from_slice(&v);
                s.len += own;
                let mut wk = base.own[0].k[..at * kvd].to_vec();
                let mut wv = base.own[0].v[..at * kvd].to_vec();
                wk.extend_from_slice(&k);
                wv.extend_from_slice(&v);
                alone.push(whole(wk, wv, kvd));
                seqs.push(s);
            }
            // A fork of the third sequence: the base's segment, then the third's own ones.
            seqs.push(seqs[2].fork(base_len + 2));
            alone.push(whole(
                alone[2].own[0].k[..(base_len + 2) * kvd].to_vec(),
                alone[2].own[0].v[..(base_len + 2) * kvd].to_vec(),
                kvd,
            ));
            // Nothing shared.
            seqs.push(whole(gen(6, 40), gen(6, 41), kvd));
            alone.push(whole(gen(6, 40), gen(6, 41), kvd));
            let rows: Vec<usize> = plan.iter().map(|p| p.2).chain([2, 1]).collect();
            let pos: Vec<usize> = seqs.iter().zip(&rows).map(|(s, t)| s.len - t).collect();
            let row_seq: Vec<(usize, usize)> = rows
                .iter()
                .enumerate()
                .flat_map(|(n, &t)| (0..t).map(move |i| (n, i)))
                .collect();
            let t = row_seq.len();
            let qkv: Vec<f32> = (0..t * hp.qkv_dim()).map(|i| f(i, 3)).collect();
            assert!(seqs[..5].iter().all(|s| !s.shared.is_empty()));
            assert_eq!(seqs[4].shared.len(), 2);
            for window in [None, Some(base_len / 2)] {
                let views: Vec<SeqView> = seqs.iter().map(|s| s.view(0, kvd)).collect();
                let mut out = vec![0f32; t * hp.q_dim()];
                attention(&qkv, &views, &pos, &row_seq, hp, window, &mut out);
                let qd = hp.q_dim();
                for (n, solo) in alone.iter().enumerate() {
                    let first = row_seq.iter().position(|&(s, _)| s == n).unwrap();
                    let mine: Vec<(usize, usize)> = (0..rows[n]).map(|i| (0, i)).collect();
                    let q = &qkv[first * hp.qkv_dim()..(first + rows[n]) * hp.qkv_dim()];
                    let mut want = vec![0f32; rows[n] * qd];
                    let view = [solo.view(0, kvd)];
                    attention(q, &view, &pos[n..=n], &mine, hp, window, &mut want);
                    let got = &out[first * qd..(first + rows[n]) * qd];
                    assert_eq!(
                        got.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                        want.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                        "base {base_len}, window {window:?}, sequence {n}"
                    );
                    // And each (row, head) alone through the portable loop: whichever
                    // kernels `attention` took (AVX2, AVX-512's head pairs), the same bits.
                    let scale = 1.0 / (head_dim as f32).sqrt();
                    for i in 0..rows[n] {
                        let p = pos[n] + i;
                        let lo = window.map_or(0, |w| (p + 1).saturating_sub(w));
                        for head in 0..hp.n_head {
                            let q = &q[i * hp.qkv_dim() + head * head_dim..][..head_dim];
                            let off = head / (hp.n_head / hp.n_kv_head) * head_dim;
                            let mut o = vec![0f32; head_dim];
                            let init = (f32::NEG_INFINITY, 0.0);
                            let segs = &view[0].segs;
                            attend::<false>(q, segs, kvd, off, lo, p, scale, &mut o, init);
                            let c = (i * hp.n_head + head) * head_dim;
                            assert_eq!(
                                got[c..c + head_dim].iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                                o.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
                                "portable: base {base_len}, window {window:?}, sequence {n}, row {i}, head {head}"
                            );
                        }
                    }
                }
            }
        }
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
        let caches: Vec<SeqCache> = seqs
            .iter()
            .enumerate()
            .map(|(n, &(total, _))| {
                whole(
                    (0..total * kvd).map(|i| f(i, 1 + 10 * n)).collect(),
                    (0..total * kvd).map(|i| f(i, 2 + 10 * n)).collect(),
                    kvd,
                )
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
        let refs: Vec<SeqView> = caches.iter().map(|c| c.view(0, kvd)).collect();
        for window in [None, Some(3)] {
            let mut out = vec![0f32; t * hp.q_dim()];
            attention(&qkv, &refs, &pos, &row_seq, hp, window, &mut out);
            for (r, &(n, i)) in row_seq.iter().enumerate() {
                let cache = &caches[n].own[0];
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
