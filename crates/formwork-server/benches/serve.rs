//! Serving speed, `formwork serve` beside llama.cpp's `llama-server` (issue 18): requests/s,
//! time to first token and generated tokens/s at 1, 4 and 8 concurrent clients, all sending
//! the same streamed Chat Completions request with a `response_format` JSON schema.
//!
//! `cargo bench -p formwork-server --bench serve`.
//!
//! # What runs
//! - **formwork**: the `formwork` binary of this target directory's release profile
//!   (`target/release/formwork`, built first with `cargo build --release --bin formwork` so it
//!   is current; `FORMWORK_BIN` names another), started as `formwork serve --model MODEL
//!   --threads THREADS --port 0 --queue max(8, C)` on loopback, one process per concurrency
//!   level `C`. It is whatever `formwork serve` is at the checked-out commit: one sequence
//!   decoding at a time with a queue, or batched, if the server does that.
//! - **llama.cpp**: `llama-server` from the pinned llama.cpp that `scripts/build-llamacpp`
//!   builds into `target/peers/` (the first run takes minutes; later runs reuse it), on the
//!   same GGUF file: `-m FILE -t THREADS -tb THREADS --parallel C -c C·1024 --host 127.0.0.1
//!   --port P --no-webui`, one process per level. Everything else is its default (continuous
//!   batching, prompt cache on, the chat template from the GGUF). If llama.cpp cannot be built
//!   the reason is printed and formwork's columns still are.
//!
//! Per server and level: one untimed warm-up request (formwork compiles and caches the
//! grammar), then `C` clients each send requests back to back until `REQUESTS · C` have been
//! started or `SECS` seconds have passed; in-flight requests are then finished. Every request is
//! the same except the user message, taken in turn from a fixed list of eight short event
//! descriptions (the same sequence for both servers; the warm-up uses a ninth), so neither
//! server answers from a cache of the whole prompt. The request: a system message, the user
//! message, `response_format: {type: json_schema, json_schema: {name: calendar_event, strict:
//! true, schema: SCHEMA}}`, `max_tokens: MAX_TOKENS`, `temperature: 0`, `stream: true`,
//! `stream_options: {include_usage: true}`.
//!
//! # Figures
//! - `req/s`: completed requests / wall time of the level (first send to last byte);
//! - `TTFT`: time from sending a request to the first chunk with non-empty `delta.content`,
//!   median (p50) and 90th percentile (p90) over the level's requests; queueing behind other
//!   clients' requests counts, as a client sees it;
//! - `tok/s`: generated tokens (`usage.completion_tokens` of the final chunk) / wall time;
//! - `fw/lc`: formwork over llama.cpp (above 1 is formwork ahead for `req/s` and `tok/s`,
//!   below 1 is formwork ahead for `TTFT`);
//! - `invalid`: responses whose content does not parse as JSON or is not valid under the
//!   schema (checked with the `jsonschema` crate for both servers), `length` how many stopped
//!   at `max_tokens`, `err` requests that failed (HTTP status, transport, no usage chunk).
//!
//! Both servers run in the same process run, one after the other per level, so the ratios are
//! the comparable figures: the machine is shared and absolute numbers move between runs. The
//! load average is printed per level.
//!
//! # Environment
//! `FORMWORK_BENCH_MODEL` (registry name, default `smollm2-135m`), `FORMWORK_THREADS` (default
//! 2), `FORMWORK_BENCH_REQUESTS` (requests per client per level, default 4),
//! `FORMWORK_BENCH_SECS` (time bound per level and server, default 120), `FORMWORK_BIN`
//! (a `formwork` binary to use instead of building one), `FORMWORK_LLAMA_SERVER` (a
//! `llama-server` to use instead of building one), `FORMWORK_NO_PEER=1` (formwork only),
//! `FORMWORK_PEERS` (the llama.cpp build cache).

#[path = "../../../benches/common/llamacpp.rs"]
mod llamacpp;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use formwork_model::fetch::{self, FetchConfig};
use formwork_model::registry::Registry;
use serde_json::{json, Value};

type Error = Box<dyn std::error::Error + Send + Sync>;

const CONCURRENCY: [usize; 3] = [1, 4, 8];
const MAX_TOKENS: usize = 128;

/// OpenAI's structured-outputs example (`CalendarEvent`) with a location: what a client's
/// Pydantic model sends in strict mode.
fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "date": {"type": "string"},
            "location": {"type": "string"},
            "participants": {"type": "array", "items": {"type": "string"}}
        },
        "required": ["name", "date", "location", "participants"],
        "additionalProperties": false
    })
}

const SYSTEM: &str = "Extract the event from the user's message as JSON.";

/// The user messages, in turn; `WARM_UP` is only used for the untimed first request.
const DOCS: [&str; 8] = [
    "Alice and Bob are going to a science fair on Friday, October 4th, at the Town Hall.",
    "Team standup moved to Monday 9 March at 10:00 in room 4B; Priya, Tom and Lena should attend.",
    "Join Marco and Sofia for the book club on 12 June at the Central Library.",
    "The quarterly review with Dana, Lee and the finance team is on 2025-01-15 at HQ, floor 3.",
    "Grandma's 80th birthday party: Saturday 21 September, Rosewood Inn. Family: Ana, Luis, Eva.",
    "Kickoff for Project Atlas on April 2 at the Berlin office with Jonas and Mei.",
    "Ravi invites Chen and Olga to a hackathon at the Makerspace on 7 November.",
    "Parent-teacher meeting at Lincoln Elementary on Thursday, May 8; Mr. Ortiz and Ms. Kim.",
];
const WARM_UP: &str = "Sam and Jo meet for lunch at Cafe Nero on Tuesday, 3 March.";

fn main() -> Result<(), Error> {
    let env = |k: &str| std::env::var(k).ok();
    let env_usize = |k: &str, d: usize| env(k).and_then(|v| v.trim().parse().ok()).unwrap_or(d);
    let model_name = env("FORMWORK_BENCH_MODEL").unwrap_or_else(|| "smollm2-135m".into());
    let threads = env_usize("FORMWORK_THREADS", 2);
    let per_client = env_usize("FORMWORK_BENCH_REQUESTS", 4).max(1);
    let secs = env_usize("FORMWORK_BENCH_SECS", 120) as u64;

    let registry = Registry::builtin()?;
    let entry = registry
        .get(&model_name)
        .ok_or(format!("unknown model {model_name}"))?;
    let gguf = fetch::ensure(entry, &FetchConfig::new())?;
    let gguf = std::fs::canonicalize(&gguf).unwrap_or(gguf);
    let formwork = formwork_bin()?;
    let peer = if env("FORMWORK_NO_PEER").is_some_and(|v| v == "1") {
        Err("skipped (FORMWORK_NO_PEER=1)".to_string())
    } else {
        llama_server()
    };
    let schema = schema();
    let validator = jsonschema::validator_for(&schema)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    // A new connection per request: a pooled keep-alive connection the server has just closed
    // fails the next request on it (seen with llama-server), which would count as an error.
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(600))
        .pool_max_idle_per_host(0)
        .build()?;
    let run = RunConfig {
        model: model_name.clone(),
        schema: schema.clone(),
        per_client,
        deadline: Duration::from_secs(secs),
    };

    let mut rows = Vec::new();
    let mut notes = Vec::new();
    for c in CONCURRENCY {
        let load = load_average();
        eprintln!("serve bench: {c} client(s): formwork");
        let ours = Server::formwork(&formwork, &model_name, threads, c).and_then(|server| {
            let level = rt.block_on(measure(&client, &server.url, &run, c, &validator));
            drop(server);
            level
        });
        let theirs = match &peer {
            Ok(bin) => {
                eprintln!("serve bench: {c} client(s): llama.cpp");
                Server::llama(bin, &gguf, threads, c).and_then(|server| {
                    let level = rt.block_on(measure(&client, &server.url, &run, c, &validator));
                    drop(server);
                    level
                })
            }
            Err(why) => Err(why.clone().into()),
        };
        if let Err(e) = &ours {
            notes.push(format!("{c} clients: formwork: {e}"));
        }
        if let (Err(e), Ok(_)) = (&theirs, &peer) {
            notes.push(format!("{c} clients: llama.cpp: {e}"));
        }
        rows.push((c, load, ours.ok(), theirs.ok()));
    }

    println!(
        "model {model_name} ({}), threads {threads}, max_tokens {MAX_TOKENS}, temperature 0, streamed; up to {per_client} requests per client or {secs} s per level",
        gguf.file_name().unwrap_or_default().to_string_lossy()
    );
    println!("formwork: {}", formwork.display());
    println!(
        "{:>4} {:>7} {:>7} {:>5} | {:>8} {:>8} {:>5} {:>8} {:>8} | {:>7} {:>7} {:>5} | {:>9} {:>9} | {:>15}",
        "C",
        "fw r/s",
        "lc r/s",
        "fw/lc",
        "fw ttft",
        "lc ttft",
        "fw/lc",
        "fw p90",
        "lc p90",
        "fw t/s",
        "lc t/s",
        "fw/lc",
        "fw n/inv/len",
        "lc n/inv/len",
        "load"
    );
    let num = |v: Option<f64>, p: usize| v.map_or_else(|| "-".to_string(), |v| format!("{v:.p$}"));
    let ratio = |a: Option<f64>, b: Option<f64>| a.zip(b).map(|(a, b)| a / b);
    for (c, load, ours, theirs) in &rows {
        let get = |l: &Option<Level>, f: fn(&Level) -> Option<f64>| l.as_ref().and_then(f);
        let rps = |l: &Level| Some(l.requests_per_sec());
        let ttft = |l: &Level| percentile(&l.ttfts(), 0.5).map(|s| s * 1e3);
        let p90 = |l: &Level| percentile(&l.ttfts(), 0.9).map(|s| s * 1e3);
        let tps = |l: &Level| Some(l.tokens_per_sec());
        let counts = |l: &Option<Level>| {
            l.as_ref().map_or_else(
                || "-".to_string(),
                |l| format!("{}/{}/{}", l.done(), l.invalid(), l.length()),
            )
        };
        println!(
            "{:>4} {:>7} {:>7} {:>5} | {:>8} {:>8} {:>5} {:>8} {:>8} | {:>7} {:>7} {:>5} | {:>9} {:>9} | {:>15}",
            c,
            num(get(ours, rps), 2),
            num(get(theirs, rps), 2),
            num(ratio(get(ours, rps), get(theirs, rps)), 2),
            num(get(ours, ttft), 0),
            num(get(theirs, ttft), 0),
            num(ratio(get(ours, ttft), get(theirs, ttft)), 2),
            num(get(ours, p90), 0),
            num(get(theirs, p90), 0),
            num(get(ours, tps), 1),
            num(get(theirs, tps), 1),
            num(ratio(get(ours, tps), get(theirs, tps)), 2),
            counts(ours),
            counts(theirs),
            load,
        );
    }
    println!("(r/s requests per second; ttft/p90 time to first token, p50 and p90, ms; t/s generated tokens per second;");
    println!(" n/inv/len: requests completed / of them invalid under the schema / stopped at max_tokens;");
    println!(" load: 1-, 5-, 15-minute load average before the level)");
    for (c, _, ours, theirs) in &rows {
        for (who, level) in [("formwork", ours), ("llama.cpp", theirs)] {
            let Some(level) = level else { continue };
            println!(
                "{c} clients, {who}: mean prompt {:.0} tokens, mean completion {:.1} tokens, {} errors, wall {:.1} s",
                level.mean(|r| r.prompt_tokens as f64),
                level.mean(|r| r.completion_tokens as f64),
                level.errors.len(),
                level.wall.as_secs_f64(),
            );
            for e in level.errors.iter().take(3) {
                println!("  error: {e}");
            }
            if let Some(bad) = level.results.iter().find(|r| !r.valid) {
                println!("  first invalid content: {:?}", truncate(&bad.content, 300));
            }
        }
    }
    match &peer {
        Ok(bin) => println!(
            "llama.cpp: {} -m {} -t {threads} -tb {threads} --parallel C -c C*1024 --host 127.0.0.1 --port P --no-webui",
            bin.display(),
            gguf.display()
        ),
        Err(why) => println!("llama.cpp: not run: {why}"),
    }
    for note in notes {
        println!("note: {note}");
    }
    Ok(())
}

struct RunConfig {
    model: String,
    schema: Value,
    per_client: usize,
    deadline: Duration,
}

/// One request's outcome.
struct Outcome {
    ttft: Option<Duration>,
    prompt_tokens: usize,
    completion_tokens: usize,
    finish_reason: String,
    content: String,
    valid: bool,
}

/// The results of one concurrency level on one server.
struct Level {
    results: Vec<Outcome>,
    errors: Vec<String>,
    wall: Duration,
}

impl Level {
    fn done(&self) -> usize {
        self.results.len()
    }
    fn invalid(&self) -> usize {
        self.results.iter().filter(|r| !r.valid).count()
    }
    fn length(&self) -> usize {
        self.results
            .iter()
            .filter(|r| r.finish_reason == "length")
            .count()
    }
    fn requests_per_sec(&self) -> f64 {
        self.done() as f64 / self.wall.as_secs_f64()
    }
    fn tokens_per_sec(&self) -> f64 {
        let tokens: usize = self.results.iter().map(|r| r.completion_tokens).sum();
        tokens as f64 / self.wall.as_secs_f64()
    }
    fn ttfts(&self) -> Vec<f64> {
        self.results
            .iter()
            .filter_map(|r| r.ttft.map(|d| d.as_secs_f64()))
            .collect()
    }
    fn mean(&self, f: impl Fn(&Outcome) -> f64) -> f64 {
        self.results.iter().map(f).sum::<f64>() / self.results.len().max(1) as f64
    }
}

fn percentile(v: &[f64], q: f64) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let i = ((v.len() - 1) as f64 * q).round() as usize;
    Some(v[i])
}

/// An error and its sources, `: `-separated.
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

fn truncate(s: &str, n: usize) -> String {
    s.chars().take(n).collect()
}

/// The request body for user message `doc`.
fn body(run: &RunConfig, doc: &str) -> Value {
    json!({
        "model": run.model,
        "messages": [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": doc}
        ],
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "calendar_event", "strict": true, "schema": run.schema}
        },
        "max_tokens": MAX_TOKENS,
        "temperature": 0,
        "stream": true,
        "stream_options": {"include_usage": true}
    })
}

/// One warm-up request, then `c` clients until `per_client · c` requests have started or the
/// deadline passed.
async fn measure(
    client: &reqwest::Client,
    base: &str,
    run: &RunConfig,
    c: usize,
    validator: &jsonschema::Validator,
) -> Result<Level, Error> {
    let url = format!("{base}/chat/completions");
    stream_one(client, &url, &body(run, WARM_UP))
        .await
        .map_err(|e| format!("warm-up request failed: {e}"))?;
    let next = Arc::new(AtomicUsize::new(0));
    let total = run.per_client * c;
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..c {
        let (client, url, next) = (client.clone(), url.clone(), next.clone());
        let bodies: Vec<Value> = DOCS.iter().map(|d| body(run, d)).collect();
        let deadline = run.deadline;
        tasks.push(tokio::spawn(async move {
            let mut out = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= total || start.elapsed() >= deadline {
                    break;
                }
                out.push(stream_one(&client, &url, &bodies[i % bodies.len()]).await);
            }
            out
        }));
    }
    let mut results = Vec::new();
    let mut errors = Vec::new();
    for t in tasks {
        for r in t.await? {
            match r {
                Ok(mut o) => {
                    o.valid = serde_json::from_str::<Value>(&o.content)
                        .is_ok_and(|v| validator.is_valid(&v));
                    results.push(o);
                }
                Err(e) => errors.push(e),
            }
        }
    }
    Ok(Level {
        results,
        errors,
        wall: start.elapsed(),
    })
}

/// Sends one streamed request and reads its Server-Sent Events to the end.
async fn stream_one(client: &reqwest::Client, url: &str, body: &Value) -> Result<Outcome, String> {
    let sent = Instant::now();
    let mut resp = client
        .post(url)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .map_err(|e| format!("send: {}", chain(&e)))?;
    let status = resp.status();
    if !status.is_success() {
        let text = resp.text().await.unwrap_or_default();
        return Err(format!("HTTP {status}: {}", truncate(&text, 200)));
    }
    let mut buf = Vec::new();
    let mut out = Outcome {
        ttft: None,
        prompt_tokens: 0,
        completion_tokens: 0,
        finish_reason: String::new(),
        content: String::new(),
        valid: false,
    };
    let mut usage = false;
    while let Some(chunk) = resp
        .chunk()
        .await
        .map_err(|e| format!("read: {}", chain(&e)))?
    {
        buf.extend_from_slice(&chunk);
        while let Some(end) = buf.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = buf.drain(..=end).collect();
            let line = String::from_utf8_lossy(&line);
            let Some(data) = line.trim().strip_prefix("data:").map(str::trim) else {
                continue;
            };
            if data == "[DONE]" {
                continue;
            }
            let event: Value =
                serde_json::from_str(data).map_err(|e| format!("bad event {data:?}: {e}"))?;
            if let Some(err) = event.get("error") {
                return Err(format!("error event: {err}"));
            }
            if let Some(choice) = event.get("choices").and_then(|c| c.get(0)) {
                if let Some(text) = choice
                    .pointer("/delta/content")
                    .and_then(Value::as_str)
                    .filter(|t| !t.is_empty())
                {
                    out.ttft.get_or_insert_with(|| sent.elapsed());
                    out.content.push_str(text);
                }
                if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
                    out.finish_reason = reason.to_string();
                }
            }
            if let Some(u) = event.get("usage").filter(|u| u.is_object()) {
                let n = |k: &str| u.get(k).and_then(Value::as_u64).unwrap_or(0) as usize;
                out.prompt_tokens = n("prompt_tokens");
                out.completion_tokens = n("completion_tokens");
                usage = true;
            }
        }
    }
    if !usage {
        return Err("the stream had no usage chunk".into());
    }
    Ok(out)
}

/// A server process of ours, killed (by its pid) when dropped.
struct Server {
    child: Child,
    url: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    /// `formwork serve` on loopback with a free port, which it prints on stderr.
    fn formwork(bin: &Path, model: &str, threads: usize, c: usize) -> Result<Server, Error> {
        let mut child = Command::new(bin)
            .args([
                "serve",
                "--model",
                model,
                "--host",
                "127.0.0.1",
                "--port",
                "0",
            ])
            .args(["--threads", &threads.to_string()])
            .args(["--queue", &c.max(8).to_string()])
            .env_remove("FORMWORK_API_KEY")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", bin.display()))?;
        let stderr = child.stderr.take().ok_or("no stderr")?;
        let (tx, rx) = mpsc::channel();
        // Reads the server's log to the end (so its pipe never fills), passing on the address.
        std::thread::spawn(move || {
            let mut tx = Some(tx);
            let mut last = String::new();
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(url) = line
                    .split_once(" on http://")
                    .filter(|_| line.contains("serving"))
                    .map(|(_, rest)| format!("http://{}", rest.trim()))
                {
                    if let Some(tx) = tx.take() {
                        let _ = tx.send(Ok(url));
                    }
                }
                last = line;
            }
            if let Some(tx) = tx.take() {
                let _ = tx.send(Err(format!("exited before serving: {last}")));
            }
        });
        let server = |url| Server { child, url };
        match rx.recv_timeout(Duration::from_secs(600)) {
            Ok(Ok(url)) => Ok(server(url)),
            Ok(Err(e)) => {
                drop(server(String::new()));
                Err(e.into())
            }
            Err(_) => {
                drop(server(String::new()));
                Err("formwork serve did not start within 600 s".into())
            }
        }
    }

    /// `llama-server` on loopback, `--parallel c`, ready when `/health` answers 200.
    fn llama(bin: &Path, gguf: &Path, threads: usize, c: usize) -> Result<Server, Error> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let log = std::env::temp_dir().join(format!("formwork-serve-bench-llama-{port}.log"));
        let t = threads.to_string();
        let child = Command::new(bin)
            .arg("-m")
            .arg(gguf)
            .args(["-t", &t, "-tb", &t, "--parallel", &c.to_string()])
            .args(["-c", &(c * 1024).to_string()])
            .args([
                "--host",
                "127.0.0.1",
                "--port",
                &port.to_string(),
                "--no-webui",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", bin.display()))?;
        let mut server = Server {
            child,
            url: format!("http://127.0.0.1:{port}/v1"),
        };
        let health = format!("http://127.0.0.1:{port}/health");
        let start = Instant::now();
        loop {
            if let Some(status) = server.child.try_wait()? {
                return Err(
                    format!("llama-server exited ({status}); see {}", log.display()).into(),
                );
            }
            if health_ok(&health) {
                return Ok(server);
            }
            if start.elapsed() > Duration::from_secs(300) {
                return Err(
                    format!("llama-server not ready in 300 s; see {}", log.display()).into(),
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// Whether `GET url` answers 200 (a blocking HTTP/1.0 request, outside the async runtime).
fn health_ok(url: &str) -> bool {
    use std::io::{Read, Write};
    let Some(rest) = url.strip_prefix("http://") else {
        return false;
    };
    let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
    let Ok(mut s) = std::net::TcpStream::connect(host) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    if write!(s, "GET /{path} HTTP/1.0\r\nHost: {host}\r\n\r\n").is_err() {
        return false;
    }
    let mut head = [0u8; 12];
    s.read_exact(&mut head).is_ok() && head.starts_with(b"HTTP/1.1 200")
}

/// The `formwork` binary: `$FORMWORK_BIN`, else this target directory's release binary, built
/// (or brought up to date) with `cargo build --release --bin formwork` first.
fn formwork_bin() -> Result<PathBuf, Error> {
    if let Some(bin) = std::env::var_os("FORMWORK_BIN") {
        return Ok(PathBuf::from(bin));
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    eprintln!("serve bench: cargo build --release --bin formwork");
    let status = Command::new(cargo)
        .args(["build", "--release", "--bin", "formwork"])
        .current_dir(&root)
        .stdin(Stdio::null())
        .status()?;
    if !status.success() {
        return Err(format!("cargo build --release --bin formwork failed ({status})").into());
    }
    // This bench runs from <target>/release/deps/; the binary is in <target>/release/.
    let exe = std::env::current_exe()?;
    let bin = exe
        .parent()
        .and_then(Path::parent)
        .map(|d| d.join("formwork"))
        .ok_or("cannot find the target directory")?;
    if !bin.exists() {
        return Err(format!("{} not found after building it", bin.display()).into());
    }
    Ok(bin)
}

/// The `llama-server` binary: `$FORMWORK_LLAMA_SERVER`, else built (once) by
/// `scripts/build-llamacpp`. `Err` says why there is none.
fn llama_server() -> Result<PathBuf, String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/build-llamacpp");
    llamacpp::llamacpp_bin("llama-server", "FORMWORK_LLAMA_SERVER", &script)
}

/// The 1-, 5- and 15-minute load averages, from /proc/loadavg.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".to_string())
}
