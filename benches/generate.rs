//! Generation speed: prefill and decode tokens/s and peak RSS for every `.gguf` in `models/`.
//!
//! `cargo bench --bench generate`. Each model runs in a fresh child process (this binary
//! re-executed with `FORMWORK_BENCH_MODEL` set), so its peak RSS (`VmHWM` from
//! `/proc/self/status`) is its own. Prefill feeds a fixed 256-token prompt in one call; decode
//! feeds 64 greedy tokens one at a time after it. Each phase is warmed up once (first-call
//! allocation and kernel repacking) and then timed once.
//!
//! Environment: `FORMWORK_MODELS` (directory, default `<crate>/models`), `FORMWORK_THREADS`
//! (default: physical cores), `FORMWORK_NO_REQUANT=1` (run the file's exact formats).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use formwork::model::runtime::init_threads;
use formwork::model::{Model, ModelConfig};
use formwork::sampler::argmax;

const PREFILL: usize = 256;
const DECODE: usize = 64;

fn main() -> anyhow::Result<()> {
    if let Ok(path) = std::env::var("FORMWORK_BENCH_MODEL") {
        return run_one(Path::new(&path));
    }
    let dir = std::env::var_os("FORMWORK_MODELS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("models"));
    let mut models = Vec::new();
    collect_gguf(&dir, &mut models);
    models.sort();
    if models.is_empty() {
        println!("generate bench: no .gguf files under {}", dir.display());
        return Ok(());
    }
    let exe = std::env::current_exe()?;
    println!(
        "{:<28} {:>9} {:>10} {:>15} {:>14} {:>9}",
        "model", "load s", "requant", "prefill tok/s", "decode tok/s", "peak MiB"
    );
    for model in models {
        let out = Command::new(&exe)
            .env("FORMWORK_BENCH_MODEL", &model)
            .output()?;
        let name = model
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        if out.status.success() {
            print!("{:<28} {}", name, String::from_utf8_lossy(&out.stdout));
        } else {
            println!(
                "{name:<28} failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
    }
    Ok(())
}

fn collect_gguf(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect_gguf(&path, out);
        } else if path.extension().is_some_and(|e| e == "gguf") {
            out.push(path);
        }
    }
}

fn run_one(path: &Path) -> anyhow::Result<()> {
    let threads = std::env::var("FORMWORK_THREADS")
        .ok()
        .and_then(|t| t.parse().ok());
    init_threads(threads);
    let requant = std::env::var("FORMWORK_NO_REQUANT").map_or(true, |v| v != "1");
    let mut model = Model::load_with(path, &ModelConfig::new().requantize(requant))?;
    let stats = model.load_stats().clone();
    // A fixed prompt of ordinary (non-special) ids; prefill cost does not depend on content.
    let span = (model.vocab_len() - 1000).min(20_000) as u32;
    let prompt: Vec<u32> = (0..PREFILL as u32)
        .map(|i| 1000 + (i * 7919) % span)
        .collect();

    let prefill = |model: &mut Model| -> anyhow::Result<(f64, u32)> {
        model.reset();
        let start = Instant::now();
        let logits = model.forward(&prompt, 0)?;
        let secs = start.elapsed().as_secs_f64();
        Ok((secs, argmax(&logits).unwrap_or(0)))
    };
    prefill(&mut model)?;
    let (prefill_secs, mut next) = prefill(&mut model)?;

    let decode = |model: &mut Model, mut next: u32| -> anyhow::Result<f64> {
        let start = Instant::now();
        for i in 0..DECODE {
            let logits = model.forward(&[next], PREFILL + i)?;
            next = argmax(&logits).unwrap_or(0);
        }
        Ok(start.elapsed().as_secs_f64())
    };
    decode(&mut model, next)?;
    (_, next) = prefill(&mut model)?;
    let decode_secs = decode(&mut model, next)?;

    println!(
        "{:>9.2} {:>10} {:>15.1} {:>14.1} {:>9.0}",
        stats.elapsed.as_secs_f64(),
        stats.requantized,
        PREFILL as f64 / prefill_secs,
        DECODE as f64 / decode_secs,
        peak_rss_mib()
    );
    Ok(())
}

/// Peak resident set size of this process, from `VmHWM` in `/proc/self/status`.
fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or(f64::NAN, |kb| kb / 1024.0)
}
