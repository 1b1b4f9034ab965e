//! Where the time of a forward pass goes, and how fast each kernel is.
//!
//! `cargo bench --profile dev --bench kernels`. Three parts:
//! 1. Per-op profile of the native forward pass on each model present in `models/` (prefill of
//!    a 256-token prompt, then 64 decode steps), from [`Model::profile`] — the table in
//!    `docs/inference.md`.
//! 2. Prefill/decode tok/s of the candle-op reference path vs the native one, same run.
//! 3. Kernel throughput per format on one thread, on a 1536 × 576 matrix (SmolLM2's gate):
//!    row-layout scalar and AVX2 dots, the packed token tiles and the 1-token (GEMV) kernel
//!    for 1, 2 and 3 tokens, and 64-token tiles.
//!
//! Environment: `FORMWORK_MODELS` (directory), `FORMWORK_THREADS` (default physical cores),
//! `FORMWORK_BENCH_ONLY_KERNELS=1` (part 3 only), `FORMWORK_BENCH_NO_KERNELS=1` (skip it).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use formwork::model::forward::{Op, Profile};
use formwork::model::kernels::{
    dot, quantize_row, simd_level, BlockQ8, Format, QMatrix, SimdLevel, QK,
};
use formwork::model::runtime::init_threads;
use formwork::model::{Backend, Model, ModelConfig};
use formwork::sampler::argmax;

const PREFILL: usize = 256;
const DECODE: usize = 64;

fn main() -> anyhow::Result<()> {
    let threads = std::env::var("FORMWORK_THREADS")
        .ok()
        .and_then(|t| t.parse().ok());
    let threads = init_threads(threads);
    println!("threads: {threads}");
    let dir = std::env::var_os("FORMWORK_MODELS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("models"));
    let mut models: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|e| e == "gguf"))
                .collect()
        })
        .unwrap_or_default();
    models.sort();
    if std::env::var_os("FORMWORK_BENCH_ONLY_KERNELS").is_some() {
        kernel_throughput();
        return Ok(());
    }
    for path in &models {
        profile_model(path)?;
    }
    // Same-run baseline: the candle-op path (Q4_1/Q5_0 requantized to Q8_0, its defaults)
    // against the native one (default config), best of three each.
    println!(
        "\n{:<34} {:>12} {:>12} {:>12} {:>12} {:>8} {:>8}",
        "model", "candle pre", "native pre", "candle dec", "native dec", "x pre", "x dec"
    );
    for path in &models {
        let (cp, cd) = speed(path, Backend::Candle)?;
        let (np, nd) = speed(path, Backend::Native)?;
        let name = path
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        println!(
            "{name:<34} {cp:>12.1} {np:>12.1} {cd:>12.1} {nd:>12.1} {:>8.2} {:>8.2}",
            np / cp,
            nd / cd
        );
    }
    if std::env::var_os("FORMWORK_BENCH_NO_KERNELS").is_none() {
        kernel_throughput();
    }
    Ok(())
}

/// Prefill (one 256-token call) and decode (64 single tokens) tok/s of one backend, each
/// the best of two runs after a warm-up.
fn speed(path: &Path, backend: Backend) -> anyhow::Result<(f64, f64)> {
    let mut model = Model::load_with(path, &ModelConfig::new().backend(backend))?;
    let span = (model.vocab_len() - 1000).min(20_000) as u32;
    let prompt: Vec<u32> = (0..PREFILL as u32)
        .map(|i| 1000 + (i * 7919) % span)
        .collect();
    let (mut best_prefill, mut best_decode) = (0f64, 0f64);
    for _ in 0..3 {
        model.reset();
        let start = Instant::now();
        let logits = model.forward(&prompt, 0)?;
        best_prefill = best_prefill.max(PREFILL as f64 / start.elapsed().as_secs_f64());
        let mut next = argmax(&logits).unwrap_or(0);
        let start = Instant::now();
        for i in 0..DECODE {
            let logits = model.forward(&[next], PREFILL + i)?;
            next = argmax(&logits).unwrap_or(0);
        }
        best_decode = best_decode.max(DECODE as f64 / start.elapsed().as_secs_f64());
    }
    Ok((best_prefill, best_decode))
}

fn profile_model(path: &Path) -> anyhow::Result<()> {
    let mut model = Model::load_with(path, &ModelConfig::new().requantize(false).profile(true))?;
    let span = (model.vocab_len() - 1000).min(20_000) as u32;
    let prompt: Vec<u32> = (0..PREFILL as u32)
        .map(|i| 1000 + (i * 7919) % span)
        .collect();
    // Warm-up (buffers, rotary tables), then one timed prefill and one timed decode run.
    model.forward(&prompt, 0)?;
    model.reset();
    model.reset_profile();
    let start = Instant::now();
    let logits = model.forward(&prompt, 0)?;
    let prefill = start.elapsed();
    let prefill_profile = model.profile().cloned().unwrap_or_default();
    model.reset_profile();
    let mut next = argmax(&logits).unwrap_or(0);
    let start = Instant::now();
    for i in 0..DECODE {
        let logits = model.forward(&[next], PREFILL + i)?;
        next = argmax(&logits).unwrap_or(0);
    }
    let decode = start.elapsed();
    let decode_profile = model.profile().cloned().unwrap_or_default();
    let name = path
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    println!(
        "\n{name}: prefill {:.1} tok/s, decode {:.1} tok/s",
        PREFILL as f64 / prefill.as_secs_f64(),
        DECODE as f64 / decode.as_secs_f64()
    );
    println!(
        "{:<28} {:>16} {:>8} {:>18} {:>8}",
        "op", "prefill ms/call", "share", "decode µs/token", "share"
    );
    let table = |p: &Profile, per: f64, unit: f64| -> Vec<(f64, f64)> {
        let total: Duration = p.totals.iter().sum();
        p.totals
            .iter()
            .map(|d| {
                (
                    d.as_secs_f64() * unit / per,
                    d.as_secs_f64() / total.as_secs_f64().max(1e-12) * 100.0,
                )
            })
            .collect()
    };
    let pre = table(&prefill_profile, 1.0, 1e3);
    let dec = table(&decode_profile, DECODE as f64, 1e6);
    for (i, op) in Op::ALL.iter().enumerate() {
        println!(
            "{:<28} {:>16.2} {:>7.1}% {:>18.1} {:>7.1}%",
            op.name(),
            pre[i].0,
            pre[i].1,
            dec[i].0,
            dec[i].1
        );
    }
    let unaccounted =
        decode.as_secs_f64() - decode_profile.totals.iter().sum::<Duration>().as_secs_f64();
    println!(
        "{:<28} {:>16} {:>8} {:>18.1}",
        "(outside forward: argmax)",
        "",
        "",
        unaccounted * 1e6 / DECODE as f64
    );
    Ok(())
}

fn kernel_throughput() {
    let (rows, cols) = (1536, 576);
    // One thread: kernel speed without the pool's hand-offs (those are in the profile above).
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .expect("1-thread pool");
    println!("\nkernel throughput, {rows}x{cols} matrix (k-quants {rows}x512), one thread, best of 30; load {}", load_average());
    println!(
        "{:<6} {:>10} {:>10} {:>12} {:>12} {:>11} {:>11} {:>11} {:>11}",
        "format",
        "row scalar",
        "row avx2",
        "tile t=1",
        "gemv t=1",
        "tile t=2/tok",
        "gemv t=2/tok",
        "tile t=3/tok",
        "t=64/tok"
    );
    println!("(µs per token; tile/gemv: the packed kernels of the CPU's best SIMD level)");
    let w: Vec<f32> = (0..rows * cols)
        .map(|i| ((i * 7919) % 2001) as f32 / 1000.0 - 1.0)
        .collect();
    let w = Tensor::from_vec(w, (rows, cols), &Device::Cpu).expect("tensor");
    let x: Vec<f32> = (0..64 * cols)
        .map(|i| ((i * 104_729) % 2001) as f32 / 1000.0 - 1.0)
        .collect();
    let level = simd_level();
    for (format, dtype, cols) in [
        (Format::Q4_1, GgmlDType::Q4_1, cols),
        (Format::Q5_0, GgmlDType::Q5_0, cols),
        (Format::Q8_0, GgmlDType::Q8_0, cols),
        (Format::Q4K, GgmlDType::Q4K, 512),
        (Format::Q6K, GgmlDType::Q6K, 512),
    ] {
        let wt = w
            .narrow(1, 0, cols)
            .expect("narrow")
            .contiguous()
            .expect("contiguous");
        let q = QTensor::quantize(&wt, dtype).expect("quantize");
        let bytes = q.data().expect("data").into_owned();
        let row_bytes = bytes.len() / rows;
        let m = QMatrix::new(format, rows, cols, bytes.clone()).expect("matrix");
        let bpr = cols / QK;
        let mut xs = vec![BlockQ8::default(); 64 * bpr];
        for (xr, qr) in x.chunks(576).take(64).zip(xs.chunks_mut(bpr)) {
            quantize_row(&xr[..cols], qr);
        }
        // Minimum over repetitions: on a shared machine the mean mostly measures preemption.
        let time = |f: &mut dyn FnMut()| -> f64 {
            f();
            (0..30)
                .map(|_| {
                    let start = Instant::now();
                    f();
                    start.elapsed().as_secs_f64() * 1e6
                })
                .fold(f64::INFINITY, f64::min)
        };
        let mut sink = 0f32;
        let mut row = |level: SimdLevel| {
            time(&mut || {
                for r in 0..rows {
                    sink += dot(
                        format,
                        level,
                        &bytes[r * row_bytes..(r + 1) * row_bytes],
                        &xs[..bpr],
                    );
                }
            })
        };
        let (scalar, avx2) = (row(SimdLevel::Scalar), row(SimdLevel::Avx2));
        std::hint::black_box(sink);
        let mut out = vec![0f32; 64 * rows];
        let mut packed = |gemv: usize, t: usize| {
            pool.install(|| {
                time(&mut || m.matmul_with(level, gemv, &xs[..t * bpr], t, &mut out[..t * rows]))
                    / t as f64
            })
        };
        let cells = [
            packed(0, 1),
            packed(1, 1),
            packed(0, 2),
            packed(2, 2),
            packed(0, 3),
            packed(0, 64),
        ];
        println!(
            "{:<6} {:>10.1} {:>10.1} {:>12.1} {:>12.1} {:>11.1} {:>11.1} {:>11.1} {:>11.1}",
            format!("{format:?}"),
            scalar,
            avx2,
            cells[0],
            cells[1],
            cells[2],
            cells[3],
            cells[4],
            cells[5]
        );
    }
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".to_string())
}
