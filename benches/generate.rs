//! Generation speed, formwork beside llama.cpp: prefill and decode tokens/s and peak RSS for
//! every `.gguf` in `models/`, with formwork/llama.cpp ratios (issue 7).
//!
//! `cargo bench --bench generate` (or `cargo bench --profile dev --bench generate` for a quick,
//! representative run: formwork and its dependencies are optimized in the dev profile too).
//!
//! # What runs
//! - **formwork**: this binary re-executed with `FORMWORK_BENCH_MODEL` set, one child process per
//!   model, so its peak RSS is its own. Prefill feeds a fixed 256-token prompt in one call;
//!   decode feeds 64 greedy tokens one at a time after it (positions 256..320). Each phase is
//!   warmed up once (first-call allocation, kernel repacking), then timed `REPEATS` times; the
//!   median is reported. The child's own line (`FORMWORK_BENCH_MODEL=<file>` runs just it)
//!   also carries `decode_median_step`, the median single decode step as tok/s: steps that
//!   lost the CPU to other processes are outliers there, so it is the steadier figure for
//!   A/B runs on a loaded machine.
//! - **llama.cpp**: `llama-bench` from the pinned llama.cpp that `scripts/build-llamacpp` builds
//!   once into `target/peers/` (the first run takes minutes; later runs reuse it). Same file,
//!   same threads, same lengths: `-p 256 -n 0` for prefill and `-p 0 -n 64 -d 256` for decode
//!   (64 tokens after a 256-token context, as formwork's decode), `-r REPEATS`, median of its
//!   samples. If llama.cpp cannot be built (no cmake, no compiler, no network), the reason is
//!   printed and formwork's columns still are.
//!
//! Peak RSS of both is the child's `ru_maxrss` from `wait4`, measured the same way.
//!
//! `oth` is the CPU time every other process used while that engine's child ran, as a share of
//! all CPUs (/proc/stat's busy time minus the child's own). Compare engines only when it is low
//! for both: llama.cpp joins its threads at a barrier after every operation, so when another
//! process holds one of the CPUs it loses far more than that share, while formwork's rayon
//! workers steal the work. On a shared machine run the bench at raised priority (both engines
//! are its children): `setsid sh -c 'echo -20 > /proc/$$/autogroup && exec nice -n -20 cargo
//! bench --bench generate'` as root; docs/measurements.md has the figures.
//!
//! # Environment
//! `FORMWORK_MODELS` (directory, default `<crate>/models`), `FORMWORK_THREADS` (default: physical
//! cores), `FORMWORK_BENCH_REPEATS` (default 3), `FORMWORK_NO_REQUANT=1` (run the file's exact
//! formats), `FORMWORK_LLAMA_BENCH` (a `llama-bench` to use instead of building one),
//! `FORMWORK_NO_PEER=1` (formwork only), `FORMWORK_PEERS` (the build cache directory).

#[path = "common/llamacpp.rs"]
mod llamacpp;

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::Instant;

use anyhow::{bail, Context};
use formwork::model::runtime::{init_threads, physical_cores};
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
    let threads = env_usize("FORMWORK_THREADS").unwrap_or_else(physical_cores);
    let repeats = env_usize("FORMWORK_BENCH_REPEATS").unwrap_or(3).max(1);
    let peer = if std::env::var("FORMWORK_NO_PEER").is_ok_and(|v| v == "1") {
        Err("skipped (FORMWORK_NO_PEER=1)".to_string())
    } else {
        llama_bench()
    };
    let exe = std::env::current_exe()?;

    let mut rows = Vec::new();
    let mut notes = Vec::new();
    for model in &models {
        let name = model
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        eprintln!("generate bench: {name}: formwork");
        let mut cmd = Command::new(&exe);
        cmd.env("FORMWORK_BENCH_MODEL", model)
            .env("FORMWORK_THREADS", threads.to_string())
            .env("FORMWORK_BENCH_REPEATS", repeats.to_string());
        let ours = match run_measured(cmd) {
            Ok(run) if run.status.success() => {
                parse_ours(&run.stdout).map(|s| (s, run.peak_mib, run.others))
            }
            Ok(run) => Err(format!(
                "failed ({}): {}",
                run.status,
                last_line(&run.stderr)
            )),
            Err(e) => Err(format!("{e:#}")),
        };
        let theirs = match &peer {
            Ok(bin) => {
                eprintln!("generate bench: {name}: llama.cpp");
                llama_run(bin, model, threads, repeats)
            }
            Err(why) => Err(why.clone()),
        };
        if let Err(e) = &ours {
            notes.push(format!("{name}: formwork {e}"));
        }
        if let (Err(e), Ok(_)) = (&theirs, &peer) {
            notes.push(format!("{name}: llama.cpp {e}"));
        }
        rows.push((name, ours.ok(), theirs.ok()));
    }

    println!(
        "threads {threads}, median of {repeats}, prefill {PREFILL} tokens, decode {DECODE} tokens after them; load {}",
        load_average()
    );
    println!(
        "{:<34} {:>9} {:>9} {:>9} {:>9} {:>7} {:>7} {:>8} {:>8} {:>7} {:>7}",
        "model",
        "fw pp t/s",
        "fw tg t/s",
        "lc pp t/s",
        "lc tg t/s",
        "pp x",
        "tg x",
        "fw MiB",
        "lc MiB",
        "fw oth",
        "lc oth"
    );
    let num =
        |v: Option<f64>, prec: usize| v.map_or_else(|| "-".to_string(), |v| format!("{v:.prec$}"));
    for (name, ours, theirs) in rows {
        let (fw_pp, fw_tg, fw_mib, fw_oth) = match &ours {
            Some((s, mib, oth)) => (Some(s.prefill), Some(s.decode), Some(*mib), *oth),
            None => (None, None, None, None),
        };
        let (lc_pp, lc_tg, lc_mib, lc_oth) = match &theirs {
            Some(p) => (Some(p.prefill), Some(p.decode), Some(p.peak_mib), p.others),
            None => (None, None, None, None),
        };
        let pct =
            |v: Option<f64>| v.map_or_else(|| "-".to_string(), |v| format!("{:.0}%", v * 100.0));
        let ratio = |a: Option<f64>, b: Option<f64>| a.zip(b).map(|(a, b)| a / b);
        println!(
            "{:<34} {:>9} {:>9} {:>9} {:>9} {:>7} {:>7} {:>8} {:>8} {:>7} {:>7}",
            name,
            num(fw_pp, 1),
            num(fw_tg, 1),
            num(lc_pp, 1),
            num(lc_tg, 1),
            num(ratio(fw_pp, lc_pp), 2),
            num(ratio(fw_tg, lc_tg), 2),
            num(fw_mib, 0),
            num(lc_mib, 0),
            pct(fw_oth),
            pct(lc_oth),
        );
    }
    println!("(pp x, tg x: formwork / llama.cpp tokens per second; MiB: peak RSS of each process;");
    println!(
        " oth: CPU time other processes took during that engine's run, as a share of all CPUs."
    );
    println!(" llama.cpp loses far more than its share to them: see docs/measurements.md)");
    match &peer {
        Ok(bin) => {
            let t = threads.to_string();
            let r = repeats.to_string();
            for test in llama_tests() {
                println!(
                    "llama.cpp: {} -m MODEL -t {t} -r {r} {} -o json",
                    bin.display(),
                    test.join(" ")
                );
            }
        }
        Err(why) => println!("llama.cpp: not run: {why}"),
    }
    for note in notes {
        println!("note: {note}");
    }
    Ok(())
}

fn env_usize(name: &str) -> Option<usize> {
    std::env::var(name).ok().and_then(|t| t.trim().parse().ok())
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

/// The `llama-bench` binary: `$FORMWORK_LLAMA_BENCH`, else built (once) by
/// `scripts/build-llamacpp`. `Err` says why there is none.
fn llama_bench() -> Result<PathBuf, String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/build-llamacpp");
    llamacpp::llamacpp_bin("llama-bench", "FORMWORK_LLAMA_BENCH", &script)
}

/// A finished child process: its exit status, output, peak RSS, and how much of the machine
/// other processes took while it ran.
struct Measured {
    status: ExitStatus,
    stdout: String,
    stderr: String,
    peak_mib: f64,
    /// CPU time of every other process during the run, as a share of all CPUs' wall time
    /// (0 = the child had the machine to itself; `None` without /proc/stat).
    others: Option<f64>,
}

/// Busy CPU time of the whole machine so far (every state of /proc/stat's `cpu` line but idle
/// and iowait), in seconds.
fn machine_busy_secs() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let fields: Vec<f64> = stat
        .lines()
        .next()?
        .strip_prefix("cpu ")?
        .split_whitespace()
        .take(8)
        .map(|v| v.parse().ok())
        .collect::<Option<_>>()?;
    // user nice system idle iowait irq softirq steal
    let busy: f64 = fields
        .iter()
        .enumerate()
        .filter(|&(i, _)| i != 3 && i != 4)
        .map(|(_, v)| v)
        .sum();
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (ticks > 0).then(|| busy / ticks as f64)
}

/// Runs `cmd` to completion and reports its peak RSS (`ru_maxrss` from `wait4`, which is the
/// child's own high-water mark, unlike `getrusage(RUSAGE_CHILDREN)`).
fn run_measured(mut cmd: Command) -> anyhow::Result<Measured> {
    let dir = tempfile::tempdir()?;
    let (out_path, err_path) = (dir.path().join("stdout"), dir.path().join("stderr"));
    let child = cmd
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_path)?)
        .stderr(std::fs::File::create(&err_path)?)
        .spawn()
        .with_context(|| format!("cannot start {cmd:?}"))?;
    let (start, busy_before) = (Instant::now(), machine_busy_secs());
    let pid = child.id() as libc::pid_t;
    let mut raw = 0;
    // SAFETY: `rusage` is plain data, zero is a valid bit pattern for it; wait4 writes it.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `pid` is our own unwaited child (std's `Child` is dropped without waiting, which
    // neither kills nor reaps it), and both pointers are to live locals.
    let rc = unsafe { libc::wait4(pid, &mut raw, 0, &mut usage) };
    drop(child);
    if rc != pid {
        bail!("wait4 failed: {}", std::io::Error::last_os_error());
    }
    let wall = start.elapsed().as_secs_f64();
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    let child_cpu = secs(usage.ru_utime) + secs(usage.ru_stime);
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    let others = busy_before
        .zip(machine_busy_secs())
        .map(|(before, after)| ((after - before - child_cpu) / (cpus * wall)).clamp(0.0, 1.0));
    Ok(Measured {
        status: ExitStatus::from_raw(raw),
        stdout: std::fs::read_to_string(&out_path)?,
        stderr: std::fs::read_to_string(&err_path)?,
        // Linux reports ru_maxrss in KiB.
        peak_mib: usage.ru_maxrss as f64 / 1024.0,
        others,
    })
}

fn last_line(text: &str) -> &str {
    text.lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim()
}

/// formwork's figures for one model, as the child prints them.
struct Ours {
    prefill: f64,
    decode: f64,
}

fn parse_ours(stdout: &str) -> Result<Ours, String> {
    let line = stdout
        .lines()
        .find_map(|l| l.strip_prefix("formwork-bench "))
        .ok_or_else(|| format!("no result line in {stdout:?}"))?;
    let mut prefill = None;
    let mut decode = None;
    for field in line.split_whitespace() {
        let slot = match field.split_once('=') {
            Some(("prefill", v)) => (&mut prefill, v),
            Some(("decode", v)) => (&mut decode, v),
            _ => continue,
        };
        *slot.0 = Some(
            slot.1
                .parse::<f64>()
                .map_err(|_| format!("bad field {field}"))?,
        );
    }
    match (prefill, decode) {
        (Some(prefill), Some(decode)) => Ok(Ours { prefill, decode }),
        _ => Err(format!("incomplete result line {line:?}")),
    }
}

/// llama.cpp's figures for one model.
struct Theirs {
    prefill: f64,
    decode: f64,
    peak_mib: f64,
    others: Option<f64>,
}

/// The two `llama-bench` tests, beside `-m`, `-t`, `-r`: prefill of `PREFILL` tokens, and
/// `DECODE` single tokens after a `PREFILL`-token context. In this llama-bench `-d N` first
/// fills the KV cache with N tokens (untimed, reused between repetitions), then times the test,
/// so `-p 0 -n 64 -d 256` is formwork's decode (positions 256..320). Everything else is
/// llama-bench's default (f16 KV cache, `-fa auto`, which is on for the CPU backend, batch
/// 2048 / ubatch 512, OpenMP threads with their default wait policy).
fn llama_tests() -> [Vec<String>; 2] {
    let s = |v: usize| v.to_string();
    [
        vec!["-p".into(), s(PREFILL), "-n".into(), "0".into()],
        vec![
            "-p".into(),
            "0".into(),
            "-n".into(),
            s(DECODE),
            "-d".into(),
            s(PREFILL),
        ],
    ]
}

/// Runs `llama-bench` twice on `model` (prefill; decode after a 256-token context) and takes
/// the median of each test's samples.
fn llama_run(bin: &Path, model: &Path, threads: usize, repeats: usize) -> Result<Theirs, String> {
    let run = |args: &[String]| -> Result<(f64, f64, Option<f64>), String> {
        let mut cmd = Command::new(bin);
        cmd.arg("-m")
            .arg(model)
            .args(["-t", &threads.to_string(), "-r", &repeats.to_string()])
            .args(args)
            .args(["-o", "json"]);
        let run = run_measured(cmd).map_err(|e| format!("{e:#}"))?;
        if !run.status.success() {
            return Err(format!(
                "failed ({}): {}",
                run.status,
                last_line(&run.stderr)
            ));
        }
        let tests: serde_json::Value = serde_json::from_str(&run.stdout)
            .map_err(|e| format!("unreadable llama-bench json: {e}"))?;
        let samples: Vec<f64> = tests
            .as_array()
            .and_then(|a| a.first())
            .and_then(|t| t.get("samples_ts"))
            .and_then(|s| s.as_array())
            .map(|s| s.iter().filter_map(serde_json::Value::as_f64).collect())
            .unwrap_or_default();
        median(samples)
            .map(|m| (m, run.peak_mib, run.others))
            .ok_or_else(|| "llama-bench json has no samples_ts".to_string())
    };
    let [pp, tg] = llama_tests();
    let (prefill, rss_pp, oth_pp) = run(&pp)?;
    let (decode, rss_tg, oth_tg) = run(&tg)?;
    Ok(Theirs {
        prefill,
        decode,
        peak_mib: rss_pp.max(rss_tg),
        others: oth_pp.zip(oth_tg).map(|(a, b)| a.max(b)),
    })
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    Some(if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    })
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".to_string())
}

/// The child: loads one model and prints `formwork-bench prefill=<tok/s> decode=<tok/s> ...`.
fn run_one(path: &Path) -> anyhow::Result<()> {
    init_threads(env_usize("FORMWORK_THREADS"));
    let repeats = env_usize("FORMWORK_BENCH_REPEATS").unwrap_or(3).max(1);
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
    let decode =
        |model: &mut Model, mut next: u32, token_secs: &mut Vec<f64>| -> anyhow::Result<f64> {
            let start = Instant::now();
            for i in 0..DECODE {
                let step = Instant::now();
                let logits = model.forward(&[next], PREFILL + i)?;
                next = argmax(&logits).unwrap_or(0);
                token_secs.push(step.elapsed().as_secs_f64());
            }
            Ok(start.elapsed().as_secs_f64())
        };

    // Warm-up of both phases, then `repeats` timed rounds of each.
    let (_, next) = prefill(&mut model)?;
    let mut token_secs = Vec::new();
    decode(&mut model, next, &mut token_secs)?;
    let mut prefill_tps = Vec::new();
    let mut decode_tps = Vec::new();
    token_secs.clear();
    for _ in 0..repeats {
        let (secs, next) = prefill(&mut model)?;
        prefill_tps.push(PREFILL as f64 / secs);
        decode_tps.push(DECODE as f64 / decode(&mut model, next, &mut token_secs)?);
    }
    // The median single step, as tok/s: on a loaded machine a step that lost the CPU is an
    // outlier here, while it drags the whole-run figure down (for A/B runs under load).
    let step = median(std::mem::take(&mut token_secs)).unwrap_or(f64::NAN);
    println!(
        "formwork-bench prefill={:.3} decode={:.3} decode_median_step={:.3} load_s={:.3} requantized={}",
        median(prefill_tps).unwrap_or(f64::NAN),
        median(decode_tps).unwrap_or(f64::NAN),
        1.0 / step,
        stats.elapsed.as_secs_f64(),
        stats.requantized,
    );
    Ok(())
}
