//! End to end, issue 17: `formwork extract --input` of 200 SNIPS requests with the few-shot
//! prompt (`evals/prompts/slots-shots.txt`), one document at a time (`--parallel 1`) vs
//! batched (the default `--parallel`), as processes: wall time and peak RSS of each run
//! (from `/usr/bin/time`), the ratio from the same run, and whether the output lines agree
//! (greedy: they must, latency aside).
//!
//! The 200 requests are the first 50 of four intents (AddToPlaylist, BookRestaurant,
//! GetWeather, PlayMusic), one `extract` run per intent with its schema
//! (`snips/schemas/<Intent>.json`, constrained mode); the 10 worked examples of an intent are
//! its cases 50–59 (never among the requests), written into the template with their answers
//! in schema key order. Budget 96 tokens, 2 threads, SmolLM2-135M (`FORMWORK_BENCH_MODEL`
//! names another registry model; the default model changed to Qwen2.5-Coder-0.5B after the
//! first figures, so the bench names its model). Data is read in place
//! from the shared data directory (`$FORMWORK_DATA`, else `../shared/data`, else
//! `/work/shared/data`); inputs and templates go to a temporary directory.
//!
//! `cargo bench --bench extract_batch` runs it fully; without `--bench` (as `cargo test
//! --benches` runs it) it is a smoke run: 4 requests of one intent.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use serde_json::Value;

use formwork::extract::prompt::order_like_schema;

#[path = "../tests/it/corpus.rs"]
mod corpus;
#[path = "common/data.rs"]
mod data;

const INTENTS: [&str; 4] = ["AddToPlaylist", "BookRestaurant", "GetWeather", "PlayMusic"];

/// The model of both runs: `FORMWORK_BENCH_MODEL`, else SmolLM2-135M.
fn model() -> String {
    std::env::var("FORMWORK_BENCH_MODEL").unwrap_or_else(|_| "smollm2-135m".into())
}

/// One `extract` process: (wall seconds, peak RSS in KiB, output lines without latency).
fn run(
    input: &Path,
    schema: &Path,
    template: &Path,
    out: &Path,
    parallel: &[&str],
) -> (f64, u64, Vec<Value>) {
    let time = Command::new("/usr/bin/time")
        .args(["-f", "%e %M", "-o"])
        .arg(out.with_extension("time"))
        .arg(env!("CARGO_BIN_EXE_formwork"))
        .arg("extract")
        .arg("--input")
        .arg(input)
        .arg("--output")
        .arg(out)
        .arg("--schema")
        .arg(schema)
        .arg("--prompt-template")
        .arg(template)
        .args(["--max-tokens", "96", "--threads", "2", "--model", &model()])
        .args(parallel)
        .output()
        .expect("/usr/bin/time runs");
    assert!(
        time.status.code().is_some_and(|c| c <= 1),
        "extract failed: {}",
        String::from_utf8_lossy(&time.stderr)
    );
    let t = std::fs::read_to_string(out.with_extension("time")).unwrap();
    let mut f = t.split_whitespace();
    let wall: f64 = f.next().unwrap().parse().unwrap();
    let rss: u64 = f.next().unwrap().parse().unwrap();
    let mut lines: Vec<Value> = std::fs::read_to_string(out)
        .unwrap()
        .lines()
        .map(|l| {
            let mut v: Value = serde_json::from_str(l).unwrap();
            v.as_object_mut().unwrap().remove("latency_ms");
            v
        })
        .collect();
    lines.sort_by(|a, b| a["id"].as_str().cmp(&b["id"].as_str()));
    (wall, rss, lines)
}

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let (intents, per) = if full {
        (&INTENTS[..], 50)
    } else {
        (&INTENTS[..1], 4)
    };
    let shots_template = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("evals/prompts/slots-shots.txt"),
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut jobs = Vec::new();
    for intent in intents {
        let cases = corpus::snips_requests(intent);
        let schema_path = corpus::snips_schema(intent);
        let schema: Value =
            serde_json::from_str(&std::fs::read_to_string(&schema_path).unwrap()).unwrap();
        let input = dir.path().join(format!("{intent}.jsonl"));
        corpus::write_extract_input(&input, &cases[..per]);
        // The worked examples, rendered as the template's `{examples}` does, braces escaped.
        let mut examples = String::new();
        for v in &cases[50..60] {
            let answer = order_like_schema(&v["gold"], &schema);
            examples.push_str(&format!(
                "Request: \"{}\"\nAnswer: {answer}\n\n",
                v["text"].as_str().unwrap()
            ));
        }
        let examples = examples.replace('{', "{{").replace('}', "}}");
        let template = dir.path().join(format!("{intent}.txt"));
        std::fs::write(&template, shots_template.replace("{examples}", &examples)).unwrap();
        jobs.push((input, schema_path, template));
    }
    let n = intents.len() * per;
    println!(
        "extract --input: {n} SNIPS requests, {} intents, 10 shots, 96 tokens, 2 threads, {}",
        intents.len(),
        model()
    );
    let mut rows = Vec::new();
    for (name, flags) in [
        ("sequential (--parallel 1)", &["--parallel", "1"][..]),
        ("batched (default --parallel)", &[][..]),
    ] {
        let (mut wall, mut rss, mut lines) = (0.0, 0u64, Vec::new());
        let t = Instant::now();
        for (k, (input, schema, template)) in jobs.iter().enumerate() {
            let out = dir.path().join(format!("out-{}-{k}.jsonl", rows.len()));
            let (w, r, l) = run(input, schema, template, &out, flags);
            wall += w;
            rss = rss.max(r);
            lines.extend(l);
        }
        let ok = lines.iter().filter(|l| l["status"] == "ok").count();
        println!(
            "{name:<30} wall {wall:7.1} s ({:.2} docs/s, measured here {:.1} s)  peak RSS {:6.1} MiB  ok {ok}/{n}",
            n as f64 / wall,
            t.elapsed().as_secs_f64(),
            rss as f64 / 1024.0
        );
        rows.push((wall, rss, lines));
    }
    let same = rows[0].2 == rows[1].2;
    println!(
        "batched / sequential: {:.2}x faster, peak RSS {:.2}x; output lines identical: {same}",
        rows[0].0 / rows[1].0,
        rows[1].1 as f64 / rows[0].1 as f64
    );
    assert!(same, "batched greedy output differs from sequential");
}
