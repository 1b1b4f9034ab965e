//! Aggregate decode throughput of batched decoding (issue 17): `B` sequences advanced one
//! token each per [`Model::forward_batch`] step, for B = 1, 2, 4, 8, 16.
//!
//! `cargo bench -p formwork-model --bench batch`. Each sequence first gets its own
//! `PROMPT`-token prompt (all prefilled in one batched call, not timed), then `STEPS` decode
//! steps are timed (after one warm-up step); the figure is `B · STEPS / time`, the sum of
//! tokens/s over the sequences, best of `REPS` runs. The `x b1` column is the ratio to the
//! batch-1 figure of the same run (the machine is shared: compare ratios, not absolute
//! numbers across runs). `forward` is the single-sequence `Model::forward` path at batch 1,
//! for reference.
//!
//! Environment: `FORMWORK_THREADS` (default 2), `FORMWORK_BENCH_MODELS` (comma-separated
//! registry names; default `smollm2-135m,qwen2.5-coder-0.5b`), `FORMWORK_BENCH_STEPS`
//! (default 32).

use std::time::Instant;

use formwork_core::sampler::argmax;
use formwork_model::fetch::{self, FetchConfig};
use formwork_model::registry::Registry;
use formwork_model::runtime::init_threads;
use formwork_model::{Model, Sequence};

const BATCHES: [usize; 5] = [1, 2, 4, 8, 16];
const PROMPT: usize = 32;
const REPS: usize = 2;

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
    let names =
        env("FORMWORK_BENCH_MODELS").unwrap_or_else(|| "smollm2-135m,qwen2.5-coder-0.5b".into());
    let registry = Registry::builtin()?;
    println!("threads: {threads}, prompt {PROMPT} tokens, {steps} decode steps, best of {REPS}");
    for name in names.split(',') {
        let entry = registry.get(name).ok_or(format!("unknown model {name}"))?;
        let mut model = Model::load(fetch::ensure(entry, &FetchConfig::new())?)?;
        println!("\n{name}");
        println!("{:>8} {:>12} {:>8}", "batch", "tok/s", "x b1");
        let single = (0..REPS)
            .map(|_| single_decode(&mut model, steps))
            .collect::<Result<Vec<_>, _>>()?
            .into_iter()
            .fold(0f64, f64::max);
        println!("{:>8} {:>12.1}", "forward", single);
        let mut base = None;
        for b in BATCHES {
            let best = (0..REPS)
                .map(|_| batch_decode(&mut model, b, steps))
                .collect::<Result<Vec<_>, _>>()?
                .into_iter()
                .fold(0f64, f64::max);
            let base = *base.get_or_insert(best);
            println!("{:>8} {:>12.1} {:>8.2}", b, best, best / base);
        }
    }
    Ok(())
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

/// Aggregate decode tokens/s of `b` sequences batched.
fn batch_decode(
    model: &mut Model,
    b: usize,
    steps: usize,
) -> Result<f64, formwork_model::ModelError> {
    let mut seqs: Vec<Sequence> = (0..b).map(|_| model.new_sequence()).collect();
    let mut next: Vec<Vec<u32>> = (0..b).map(|i| prompt(model, i)).collect();
    let mut start = Instant::now();
    // Step 0: the prompts (prefill, not timed); step 1: warm-up; then `steps` timed.
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
    Ok((b * steps) as f64 / start.elapsed().as_secs_f64())
}
