//! Aggregate decode throughput of batched decoding (issue 17): `B` sequences advanced one
//! token each per [`Model::forward_batch`] step, for B = 1, 2, 4, 8, 16, beside llama.cpp's
//! `llama-batched-bench` on the same GGUF file, threads and batch sizes.
//!
//! `cargo bench -p formwork-model --bench batch`.
//!
//! # What runs
//! - **formwork**: each sequence first gets its own `PROMPT`-token prompt (all prefilled in one
//!   batched call, not timed), then one warm-up decode step, then `STEPS` decode steps are
//!   timed (positions `PROMPT + 1 ..= PROMPT + STEPS`); the figure is `B · STEPS / time`, the
//!   sum of tokens/s over the sequences, best of `REPS` runs. Every step reads the logits and
//!   takes their argmax. `forward` is the single-sequence `Model::forward` path at batch 1, for
//!   reference.
//! - **llama.cpp**: `llama-batched-bench` from the pinned llama.cpp that `scripts/build-llamacpp`
//!   builds into `target/peers/` (the first run takes minutes; later runs reuse it) with
//!   `-t THREADS -npp PROMPT -ntg STEPS -npl 1,2,4,8,16`: per batch size, `B` separate
//!   `PROMPT`-token prompts (not shared) are prefilled, then `STEPS` steps of `B` tokens each
//!   (positions `PROMPT .. PROMPT + STEPS`) are timed; its `S_TG` (`B · STEPS / T_TG`) is the
//!   figure, best of `REPS` runs of the tool. Everything else is its default (f16 KV cache,
//!   flash attention `auto`, i.e. on for the CPU backend; random token ids, logits computed
//!   for every sequence each step but not read). The context is sized to fit the largest batch.
//!   If llama.cpp cannot be built (no cmake, no compiler, no network) the reason is printed and
//!   formwork's columns still are.
//!
//! - **shared prefix** (formwork only, the shape of a batched `extract`): one sequence is fed
//!   a `FORMWORK_BENCH_PREFIX`-token prompt (default 768, about a 10-shot extraction prompt;
//!   `0` skips this part), `B` sequences are forked off it (`Sequence::fork`, positions shared,
//!   not copied) and fed `SUFFIX` tokens each in one batched call, then one warm-up step, then
//!   `STEPS` timed decode steps of all `B`: aggregate tokens/s, best of `REPS`, for B = 1
//!   and 8. Attention over the shared prefix is most of such a step (phase 1 of
//!   `forward::attention`), so this row moves with attention's speed; no llama.cpp column
//!   (`llama-batched-bench` has no shared-prefix mode over forked caches).
//!
//! Columns: `fw tok/s` and `lc tok/s` aggregate decode tokens/s, `x b1` each engine's ratio to
//! its own batch-1 figure, `fw/lc` formwork over llama.cpp at the same batch size. Both run in
//! the same process run, one after the other, so the ratio is the comparable figure: the
//! machine is shared, and absolute numbers move between runs. llama.cpp joins its threads at a
//! barrier after every operation, so another busy process costs it more than its share; the
//! load average is printed before and after each engine.
//!
//! Environment: `FORMWORK_THREADS` (default 2), `FORMWORK_BENCH_MODELS` (comma-separated
//! registry names; default `smollm2-135m,qwen2.5-coder-0.5b`), `FORMWORK_BENCH_STEPS`
//! (default 32), `FORMWORK_BENCH_PREFIX` (shared-prefix tokens, default 768, `0` skips that
//! part), `FORMWORK_LLAMA_BATCHED_BENCH` (a `llama-batched-bench` to use instead of
//! building one), `FORMWORK_NO_PEER=1` (formwork only), `FORMWORK_PEERS` (the build cache).

#[path = "../../../benches/common/llamacpp.rs"]
mod llamacpp;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use formwork_core::sampler::argmax;
use formwork_model::fetch::{self, FetchConfig};
use formwork_model::registry::Registry;
use formwork_model::runtime::init_threads;
use formwork_model::{Model, Sequence};

const BATCHES: [usize; 5] = [1, 2, 4, 8, 16];
const PROMPT: usize = 32;
const REPS: usize = 2;
/// Tokens each fork is fed after the shared prefix, before the timed steps.
const SUFFIX: usize = 16;
/// Batch sizes of the shared-prefix part.
const PREFIX_BATCHES: [usize; 2] = [1, 8];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let env = |k: &str| std::env::var(k).ok();
    let threads = init_threads(Some(
        env("FORMWORK_THREADS")
            .and_then(|t| t.parse().ok())
            .unwrap_or(2),
    ));
    let steps: usize = env("FORMWORK_BENCH_STEPS")
        .and_then(|t| t.parse().ok())
        .unwrap_or(32);
    let prefix: usize = env("FORMWORK_BENCH_PREFIX")
        .and_then(|t| t.parse().ok())
        .unwrap_or(768);
    let names =
        env("FORMWORK_BENCH_MODELS").unwrap_or_else(|| "smollm2-135m,qwen2.5-coder-0.5b".into());
    let registry = Registry::builtin()?;
    let peer = if env("FORMWORK_NO_PEER").is_some_and(|v| v == "1") {
        Err("skipped (FORMWORK_NO_PEER=1)".to_string())
    } else {
        batched_bench()
    };
    println!(
        "threads: {threads}, prompt {PROMPT} tokens per sequence, {steps} decode steps timed, best of {REPS}"
    );
    for name in names.split(',') {
        let entry = registry.get(name).ok_or(format!("unknown model {name}"))?;
        let path = fetch::ensure(entry, &FetchConfig::new())?;
        let path = std::fs::canonicalize(&path).unwrap_or(path);
        let mut model = Model::load(&path)?;
        let load_before = load_average();
        let single = (0..REPS)
            .map(|_| single_decode(&mut model, steps))
            .collect::<Result<Vec<_>, _>>()?
            .into_iter()
            .fold(0f64, f64::max);
        let mut ours = Vec::new();
        for b in BATCHES {
            let best = (0..REPS)
                .map(|_| batch_decode(&mut model, b, steps))
                .collect::<Result<Vec<_>, _>>()?
                .into_iter()
                .fold(0f64, f64::max);
            ours.push(best);
        }
        let mut forked = Vec::new();
        if prefix > 0 {
            for b in PREFIX_BATCHES {
                let best = (0..REPS)
                    .map(|_| shared_prefix_decode(&mut model, prefix, b, steps))
                    .collect::<Result<Vec<_>, _>>()?
                    .into_iter()
                    .fold(0f64, f64::max);
                forked.push(best);
            }
        }
        drop(model);
        let load_between = load_average();
        let theirs = match &peer {
            Ok(bin) => llama_batched(bin, &path, threads, steps),
            Err(why) => Err(why.clone()),
        };
        let load_after = load_average();

        println!(
            "\n{name} ({})",
            path.file_name().unwrap_or_default().to_string_lossy()
        );
        println!("load average: {load_before} before formwork, {load_between} before llama.cpp, {load_after} after");
        println!(
            "{:>8} {:>10} {:>7} {:>10} {:>7} {:>7}",
            "batch", "fw tok/s", "x b1", "lc tok/s", "x b1", "fw/lc"
        );
        println!("{:>8} {:>10.1}", "forward", single);
        for (i, (&b, &fw)) in BATCHES.iter().zip(&ours).enumerate() {
            let lc = theirs.as_ref().ok().map(|t| t[i]);
            let num = |v: Option<f64>, prec: usize| {
                v.map_or_else(|| "-".to_string(), |v| format!("{v:.prec$}"))
            };
            println!(
                "{:>8} {:>10.1} {:>7.2} {:>10} {:>7} {:>7}",
                b,
                fw,
                fw / ours[0],
                num(lc, 1),
                num(
                    lc.zip(theirs.as_ref().ok().map(|t| t[0]))
                        .map(|(l, l0)| l / l0),
                    2
                ),
                num(lc.map(|l| fw / l), 2),
            );
        }
        if !forked.is_empty() {
            println!("shared prefix of {prefix} tokens, {SUFFIX} own tokens per fork:");
            println!("{:>8} {:>10} {:>7}", "forks", "fw tok/s", "x b1");
            for (&b, &fw) in PREFIX_BATCHES.iter().zip(&forked) {
                println!("{:>8} {:>10.1} {:>7.2}", b, fw, fw / forked[0]);
            }
        }
        match (&theirs, &peer) {
            (Ok(_), Ok(bin)) => println!(
                "llama.cpp: {} -m {} {}",
                bin.display(),
                path.display(),
                llama_args(threads, steps).join(" ")
            ),
            (Err(why), _) => println!("llama.cpp: not run: {why}"),
            (Ok(_), Err(_)) => {}
        }
    }
    Ok(())
}

/// The `llama-batched-bench` binary: `$FORMWORK_LLAMA_BATCHED_BENCH`, else built (once) by
/// `scripts/build-llamacpp`. `Err` says why there is none.
fn batched_bench() -> Result<PathBuf, String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/build-llamacpp");
    llamacpp::llamacpp_bin(
        "llama-batched-bench",
        "FORMWORK_LLAMA_BATCHED_BENCH",
        &script,
    )
}

/// `llama-batched-bench`'s arguments beside `-m`: the same threads, prompt and decode lengths
/// and batch sizes as formwork's runs, a context holding the largest batch (`B · (PROMPT +
/// STEPS)` positions; the tool splits it evenly between `max(B)` sequences), JSON lines out.
fn llama_args(threads: usize, steps: usize) -> Vec<String> {
    let max_b = BATCHES.iter().copied().max().unwrap_or(1);
    let ctx = max_b * (PROMPT + steps + 16);
    let pl = BATCHES.map(|b| b.to_string()).join(",");
    [
        "-t",
        &threads.to_string(),
        "-c",
        &ctx.to_string(),
        "-npp",
        &PROMPT.to_string(),
        "-ntg",
        &steps.to_string(),
        "-npl",
        &pl,
        "--output-format",
        "jsonl",
    ]
    .map(String::from)
    .to_vec()
}

/// llama.cpp's aggregate decode tokens/s (`speed_tg`) per entry of `BATCHES`, best of `REPS`
/// runs of `llama-batched-bench`.
fn llama_batched(
    bin: &Path,
    model: &Path,
    threads: usize,
    steps: usize,
) -> Result<Vec<f64>, String> {
    let mut best = vec![0f64; BATCHES.len()];
    for rep in 0..REPS {
        eprintln!("batch bench: llama-batched-bench run {}/{REPS}", rep + 1);
        let out = Command::new(bin)
            .arg("-m")
            .arg(model)
            .args(llama_args(threads, steps))
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run {}: {e}", bin.display()))?;
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            let last = err.lines().rev().find(|l| !l.trim().is_empty());
            return Err(format!("failed ({}): {}", out.status, last.unwrap_or("")));
        }
        let mut seen = vec![false; BATCHES.len()];
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let Ok(row) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            let field = |k: &str| row.get(k).and_then(serde_json::Value::as_f64);
            let (Some(pl), Some(speed)) = (field("pl"), field("speed_tg")) else {
                continue;
            };
            if let Some(i) = BATCHES.iter().position(|&b| b as f64 == pl) {
                best[i] = best[i].max(speed);
                seen[i] = true;
            }
        }
        if let Some(i) = seen.iter().position(|s| !s) {
            return Err(format!(
                "no result for batch {} in llama-batched-bench's output",
                BATCHES[i]
            ));
        }
    }
    Ok(best)
}

/// The 1-, 5- and 15-minute load averages, from /proc/loadavg.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".to_string())
}

/// A distinct prompt per sequence.
fn prompt(model: &Model, seed: usize) -> Vec<u32> {
    let bos = model.token_info().bos.unwrap_or(1);
    std::iter::once(bos)
        .chain((1..PROMPT).map(|i| 300 + ((i * 37 + seed * 101) % 5000) as u32))
        .collect()
}

/// Decode tokens/s of `Model::forward`, one sequence.
fn single_decode(model: &mut Model, steps: usize) -> Result<f64, formwork_model::ModelError> {
    model.reset();
    let p = prompt(model, 0);
    let mut logits = model.forward(&p, 0)?;
    let mut start = Instant::now();
    for i in 0..=steps {
        if i == 1 {
            start = Instant::now();
        }
        let t = argmax(&logits).unwrap_or(0);
        logits = model.forward(&[t], p.len() + i)?;
    }
    Ok(steps as f64 / start.elapsed().as_secs_f64())
}

/// Aggregate decode tokens/s of `b` sequences forked off one `prefix`-token prompt, each
/// fed its own `SUFFIX` tokens first (prefix and suffixes not timed).
fn shared_prefix_decode(
    model: &mut Model,
    prefix: usize,
    b: usize,
    steps: usize,
) -> Result<f64, formwork_model::ModelError> {
    let bos = model.token_info().bos.unwrap_or(1);
    let shared: Vec<u32> = std::iter::once(bos)
        .chain((1..prefix).map(|i| 300 + ((i * 53) % 5000) as u32))
        .collect();
    let mut base = model.new_sequence();
    model.forward_batch(&mut [(&mut base, shared.as_slice())])?;
    let mut seqs: Vec<Sequence> = (0..b).map(|_| base.fork(prefix)).collect();
    let next: Vec<Vec<u32>> = (0..b)
        .map(|i| prompt(model, i + 1)[1..=SUFFIX].to_vec())
        .collect();
    // Step 0: the suffixes (not timed); step 1: warm-up; then `steps` timed.
    timed_steps(model, &mut seqs, next, steps)
}

/// Aggregate decode tokens/s of `b` sequences batched.
fn batch_decode(
    model: &mut Model,
    b: usize,
    steps: usize,
) -> Result<f64, formwork_model::ModelError> {
    let mut seqs: Vec<Sequence> = (0..b).map(|_| model.new_sequence()).collect();
    let next: Vec<Vec<u32>> = (0..b).map(|i| prompt(model, i)).collect();
    // Step 0: the prompts (prefill, not timed); step 1: warm-up; then `steps` timed.
    timed_steps(model, &mut seqs, next, steps)
}

/// Feeds `next[i]` to `seqs[i]`, all in one batched call, then each sequence's argmax, for
/// `steps + 2` steps; the last `steps` are timed. Aggregate tokens/s over the sequences.
fn timed_steps(
    model: &mut Model,
    seqs: &mut [Sequence],
    mut next: Vec<Vec<u32>>,
    steps: usize,
) -> Result<f64, formwork_model::ModelError> {
    let mut start = Instant::now();
    for i in 0..steps + 2 {
        if i == 2 {
            start = Instant::now();
        }
        let mut batch: Vec<(&mut Sequence, &[u32])> = seqs
            .iter_mut()
            .zip(&next)
            .map(|(s, n)| (s, n.as_slice()))
            .collect();
        let logits = model.forward_batch(&mut batch)?;
        for (n, l) in next.iter_mut().zip(&logits) {
            *n = vec![argmax(l).unwrap_or(0)];
        }
    }
    Ok((seqs.len() * steps) as f64 / start.elapsed().as_secs_f64())
}
