//! Hostile inputs (issue 20): schemas made to explode, bad grammars and regexes, bad batch
//! lines and crafted GGUF files. Each either gets a clear error naming what and where with exit
//! code 2, or (where the input is legal, only large) is compiled, and either way the process
//! stays within stated bounds of wall time and peak memory.
//!
//! Small inputs are files in `tests/data/hostile/` (see its README); large ones are generated
//! here (a 100,000-value enum, 60-deep `anyOf` nesting, a 5,000-long `$ref` chain, 100,000
//! nested parentheses, GGUF files). The bounds are generous on purpose — several times what a
//! loaded 2-core machine needs in the test profile — so they catch an explosion (minutes,
//! gigabytes), never a slow run; speed belongs in the benches. No case loads or fetches a
//! model: every command exits before that, or is `formwork compile`. Costs a few seconds of CI.
//!
//! Its own test binary, not a module of `it`: the peak RSS of a child comes from `wait4`, and a
//! child spawned with `vfork` (as `Command` does) records the *parent's* peak when it execs, so
//! in `it` it reported the in-process model tests' 1.3 GB for every command (CI, 2026-12-05).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use formwork::extract::batch::{check_unique_ids, read_records};
use formwork::model::gguf;
use serde_json::json;

#[path = "../crates/formwork-model/tests/common/fetched.rs"]
mod fetched;
use fetched::fetched;

/// Wall time any one case may take.
const MAX_WALL: Duration = Duration::from_secs(60);
/// Peak resident memory any one case may reach, in KiB.
const MAX_RSS_KIB: u64 = 1 << 20;

fn data(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/hostile")
        .join(rel)
}

/// What a run of `formwork` did: exit code, stdout, stderr, wall time and peak RSS (KiB).
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    wall: Duration,
    rss_kib: u64,
}

/// Runs `formwork ARGS` with no models and no pip (nothing can be fetched), measuring its wall
/// time and peak RSS (from `wait4`, which also reaps the child: `Child::wait` is not called).
#[allow(clippy::zombie_processes)]
fn formwork(args: &[&str], models: &Path) -> Run {
    let mut child = Command::new(env!("CARGO_BIN_EXE_formwork"))
        .args(args)
        .env("FORMWORK_MODELS", models)
        .env("FORMWORK_PIP", models.join("no-such-pip"))
        .env_remove("RUST_BACKTRACE")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let out_thread = std::thread::spawn(move || {
        let mut s = String::new();
        out.read_to_string(&mut s).map(|_| s).unwrap_or_default()
    });
    let err_thread = std::thread::spawn(move || {
        let mut s = String::new();
        err.read_to_string(&mut s).map(|_| s).unwrap_or_default()
    });
    let mut status = 0;
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waits for our own child, with valid pointers to locals.
    let pid = unsafe { libc::wait4(child.id() as libc::pid_t, &mut status, 0, &mut usage) };
    assert_eq!(pid, child.id() as libc::pid_t, "wait4 failed");
    let wall = start.elapsed();
    let code = libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status));
    Run {
        code,
        stdout: out_thread.join().unwrap(),
        stderr: err_thread.join().unwrap(),
        wall,
        rss_kib: usage.ru_maxrss as u64,
    }
}

impl Run {
    fn within_bounds(&self, what: &str) -> &Self {
        assert!(
            self.wall < MAX_WALL,
            "{what}: took {:?} (bound {MAX_WALL:?})",
            self.wall
        );
        assert!(
            self.rss_kib < MAX_RSS_KIB,
            "{what}: peak RSS {} MiB (bound {} MiB)",
            self.rss_kib >> 10,
            MAX_RSS_KIB >> 10
        );
        assert!(
            !self.stderr.contains("panicked") && !self.stderr.contains("RUST_BACKTRACE"),
            "{what}: {}",
            self.stderr
        );
        self
    }

    /// Exit code 2, nothing on stdout, and an `error:` line containing every needle.
    fn bad_input(&self, what: &str, needles: &[&str]) {
        self.within_bounds(what);
        assert_eq!(
            self.code,
            Some(2),
            "{what}: exit code; stderr: {}",
            self.stderr
        );
        assert!(self.stdout.is_empty(), "{what}: stdout {}", self.stdout);
        let line = self
            .stderr
            .lines()
            .find(|l| l.starts_with("error: "))
            .unwrap_or_else(|| panic!("{what}: no error line: {}", self.stderr));
        for n in needles {
            assert!(line.contains(n), "{what}: `{n}` not in: {}", self.stderr);
        }
    }

    /// Exit code 0 (compiled).
    fn compiled(&self, what: &str) {
        self.within_bounds(what);
        assert_eq!(self.code, Some(0), "{what}: stderr: {}", self.stderr);
        assert!(
            self.stdout.starts_with("start ::="),
            "{what}: {}",
            self.stdout
        );
    }
}

struct Sandbox {
    dir: tempfile::TempDir,
    doc: PathBuf,
}

impl Sandbox {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("models")).unwrap();
        let doc = dir.path().join("doc.txt");
        std::fs::write(&doc, "Order 4471 shipped on 3 March.").unwrap();
        Sandbox { dir, doc }
    }
    fn models(&self) -> PathBuf {
        self.dir.path().join("models")
    }
    fn write(&self, name: &str, text: &str) -> PathBuf {
        let p = self.dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p
    }
    /// `formwork extract --schema FILE DOC`.
    fn extract_schema(&self, file: &Path) -> Run {
        let args = ["extract", "--schema", path(file), path(&self.doc)];
        formwork(&args, &self.models())
    }
    /// `formwork compile FILE`.
    fn compile(&self, file: &Path) -> Run {
        formwork(&["compile", path(file)], &self.models())
    }
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn schemas_that_are_bad_are_refused_with_their_pointer() {
    let s = Sandbox::new();
    let cases: [(&str, &[&str]); 6] = [
        ("bad_pattern.json", &["/properties/code/pattern", "regex"]),
        (
            "lookahead_pattern.json",
            &["/properties/pw/pattern", "lookahead", "offset 3"],
        ),
        ("ref_cycle.json", &["unsatisfiable", "#"]),
        ("dangling_ref.json", &["/$defs/missing"]),
        ("truncated.json", &["truncated.json:3:", "malformed JSON"]),
        ("regex_bomb.json", &["/pattern", "regex"]),
    ];
    for (file, needles) in cases {
        s.extract_schema(&data(&format!("schemas/{file}")))
            .bad_input(file, needles);
    }
    // Nesting past what the JSON reader accepts (128 levels): refused with line and column.
    let mut deep = json!({"type": "string"});
    for i in 0..200 {
        deep = json!({"anyOf": [deep, {"type": "integer", "minimum": i}]});
    }
    let f = s.write("deep.json", &deep.to_string());
    s.extract_schema(&f).bad_input(
        "deep nesting",
        &["deep.json", "recursion limit", "line 1 column"],
    );
}

#[test]
fn schemas_made_to_explode_compile_within_bounds() {
    let s = Sandbox::new();
    for file in ["max_length_100000.json", "min_items_5000.json"] {
        s.compile(&data(&format!("schemas/{file}"))).compiled(file);
    }
    // 60-deep anyOf nesting (just under the JSON reader's limit), each level its own range.
    let mut deep = json!({"type": "string"});
    for i in 0..60 {
        deep = json!({"anyOf": [deep, {"type": "integer", "minimum": i}]});
    }
    s.compile(&s.write("deep_anyof.json", &deep.to_string()))
        .compiled("deep anyOf");
    // A 100,000-value enum (issue 20: 55 s in release before dedup_values hashed).
    let values: Vec<String> = (0..100_000).map(|i| format!("value-{i}")).collect();
    let f = s.write("enum.json", &json!({ "enum": values }).to_string());
    s.compile(&f).compiled("huge enum");
    // 2,000 optional properties.
    let props: serde_json::Map<String, serde_json::Value> = (0..2000)
        .map(|i| (format!("p{i}"), json!({"type": "string"})))
        .collect();
    let f = s.write(
        "props.json",
        &json!({"type": "object", "properties": props}).to_string(),
    );
    s.compile(&f).compiled("many optional properties");
    // A 5,000-long $ref chain.
    let mut defs = serde_json::Map::new();
    for i in 0..5000 {
        defs.insert(
            format!("d{i}"),
            json!({"$ref": format!("#/$defs/d{}", i + 1)}),
        );
    }
    defs.insert("d5000".into(), json!({"type": "integer"}));
    let f = s.write(
        "chain.json",
        &json!({"$defs": defs, "$ref": "#/$defs/d0"}).to_string(),
    );
    s.compile(&f).compiled("deep $ref chain");
}

#[test]
fn bad_grammars_and_regexes_are_refused_with_their_place() {
    let s = Sandbox::new();
    let doc = path(&s.doc);
    let grammars: [(&str, &[&str]); 5] = [
        ("undefined_rule.gbnf", &["rule `name`", "1:23"]),
        ("unterminated_string.gbnf", &["unterminated string", "1:20"]),
        ("bad_class.gbnf", &["class range", "1:11"]),
        ("empty.gbnf", &["empty.gbnf", "empty"]),
        ("no_root.gbnf", &["no_root.gbnf", "`root`"]),
    ];
    for (file, needles) in grammars {
        let g = data(&format!("grammars/{file}"));
        formwork(&["extract", "--grammar", path(&g), doc], &s.models()).bad_input(file, needles);
    }
    // 100,000 nested parentheses: refused (or parsed) without overflowing the stack.
    let g = s.write(
        "parens.gbnf",
        &format!(
            "root ::= {}\"a\"{}\n",
            "(".repeat(100_000),
            ")".repeat(100_000)
        ),
    );
    formwork(&["extract", "--grammar", path(&g), doc], &s.models())
        .bad_input("nested parentheses", &["parens.gbnf", "1:"]);

    let regexes: [(&str, &[&str]); 4] = [
        ("(a", &["unclosed group"]),
        ("(?<=a)b", &["look"]),
        ("(a)\\1", &["backreference"]),
        ("[b-a]", &["range"]),
    ];
    for (re, needles) in regexes {
        formwork(&["extract", "--regex", re, doc], &s.models()).bad_input(re, needles);
    }
}

#[test]
fn bad_batch_lines_become_error_records_naming_their_line() {
    let file = data("bad_lines.jsonl");
    let records = read_records(&file).unwrap();
    let summary: Vec<(String, Option<usize>)> = records
        .iter()
        .map(|r| match r {
            Ok(r) => (r.id.clone(), None),
            Err(b) => (b.id.clone(), Some(b.line)),
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("ok-1".to_string(), None),
            ("line-2".into(), Some(2)),
            ("line-3".into(), Some(3)),
            ("no-text".into(), Some(4)),
            ("bad-type".into(), Some(5)),
            ("42".into(), None),
            // Not UTF-8 (a Latin-1 `é`): a bad line, not a failed file (issue 20).
            ("line-8".into(), Some(8)),
            // A CRLF line ending is read like LF.
            ("crlf".into(), None),
        ]
    );
    for b in records.iter().filter_map(|r| r.as_ref().err()) {
        let at = format!("line {} of {}: ", b.line, file.display());
        assert!(b.message.starts_with(&at), "{b:?}");
    }
    let latin = records[6].as_ref().unwrap_err();
    assert!(
        latin
            .message
            .ends_with("not valid UTF-8 (byte 31 of the line)"),
        "{latin:?}"
    );
    check_unique_ids(&records).unwrap();
}

/// The CLI's side of bad batch input (issue 20): duplicate ids are refused before any model
/// is loaded, naming both lines; the bad lines of `bad_lines.jsonl` (one not UTF-8) become
/// error records naming file and line while the good lines are extracted, and exit code 1
/// (the batch ran, some records failed). Loads SmolLM2 once; a few seconds.
#[test]
fn bad_batch_input_through_the_cli() {
    let s = Sandbox::new();
    let schema = s.write("schema.json", r#"{"type": "string", "maxLength": 8}"#);
    let out = s.dir.path().join("out.jsonl");
    let dup = s.write(
        "dup.jsonl",
        "{\"id\": \"a\", \"text\": \"x\"}\n{\"id\": \"b\", \"text\": \"y\"}\n{\"id\": \"a\", \"text\": \"z\"}\n",
    );
    let args = |input: &Path| {
        vec![
            "extract".to_string(),
            "--schema".into(),
            path(&schema).into(),
            "--input".into(),
            path(input).into(),
            "--output".into(),
            path(&out).into(),
            "--max-tokens".into(),
            "16".into(),
        ]
    };
    let dup_args = args(&dup);
    let dup_args: Vec<&str> = dup_args.iter().map(String::as_str).collect();
    formwork(&dup_args, &s.models()).bad_input(
        "duplicate ids",
        &["dup.jsonl", "duplicate id `a` on lines 1 and 3"],
    );
    assert!(!out.exists(), "no output file for a refused input");

    // The real model directory: the run loads SmolLM2.
    let model = fetched("smollm2-135m");
    let mut run_args = args(&data("bad_lines.jsonl"));
    run_args.extend([
        "--model".into(),
        path(&model).into(),
        "--threads".into(),
        "1".into(),
    ]);
    let run_args: Vec<&str> = run_args.iter().map(String::as_str).collect();
    let run = formwork(&run_args, &s.models());
    run.within_bounds("bad lines through the CLI");
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&out)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let status = |id: &str| {
        let r = lines
            .iter()
            .find(|r| r["id"] == id)
            .unwrap_or_else(|| panic!("{id}: {lines:?}"));
        (
            r["status"].as_str().unwrap().to_string(),
            r["error"].as_str().unwrap_or("").to_string(),
        )
    };
    assert_eq!(
        lines.len(),
        8,
        "one line per non-blank input line: {lines:?}"
    );
    for id in ["ok-1", "42", "crlf"] {
        assert_eq!(status(id).0, "ok", "{id}: {lines:?}");
    }
    let file = data("bad_lines.jsonl");
    for (id, n) in [
        ("line-2", 2),
        ("line-3", 3),
        ("no-text", 4),
        ("bad-type", 5),
        ("line-8", 8),
    ] {
        let (st, error) = status(id);
        assert_eq!(st, "error", "{id}");
        assert!(
            error.starts_with(&format!("line {n} of {}: ", file.display())),
            "{id}: {error}"
        );
    }
}

/// A GGUF file with `tensors` tensors and one `general.architecture` entry, then `rest`.
fn gguf_bytes(tensors: u64, kvs: u64, rest: &[u8]) -> Vec<u8> {
    let mut b = b"GGUF".to_vec();
    b.extend(3u32.to_le_bytes());
    b.extend(tensors.to_le_bytes());
    b.extend(kvs.to_le_bytes());
    b.extend(rest);
    b
}

fn gguf_string(b: &mut Vec<u8>, s: &str) {
    b.extend((s.len() as u64).to_le_bytes());
    b.extend(s.as_bytes());
}

#[test]
fn crafted_gguf_files_are_refused_before_allocating() {
    let s = Sandbox::new();
    let mut arch = Vec::new();
    gguf_string(&mut arch, "general.architecture");
    arch.extend(8u32.to_le_bytes());
    gguf_string(&mut arch, "llama");
    let tensor = |name: &str, dims: &[u64], dtype: u32, offset: u64| {
        let mut t = Vec::new();
        gguf_string(&mut t, name);
        t.extend((dims.len() as u32).to_le_bytes());
        dims.iter().for_each(|d| t.extend(d.to_le_bytes()));
        t.extend(dtype.to_le_bytes());
        t.extend(offset.to_le_bytes());
        t
    };
    let pad = |mut b: Vec<u8>, data: usize| {
        b.resize(b.len().div_ceil(32) * 32 + data, 0);
        b
    };
    // A one-byte array of 40 M elements: 40 MB on disk, 1.3 GB as candle values.
    let mut big = arch.clone();
    gguf_string(&mut big, "tokenizer.ggml.token_type");
    big.extend(9u32.to_le_bytes());
    big.extend(0u32.to_le_bytes());
    big.extend(40_000_000u64.to_le_bytes());
    let mut big = gguf_bytes(0, 2, &big);
    big.resize(big.len() + 40_000_000, 1);
    let cases: Vec<(&str, Vec<u8>, Vec<&str>)> = vec![
        (
            "huge tensor count",
            gguf_bytes(u64::MAX / 4, 1, &arch),
            vec!["header declares", "(at byte 8)"],
        ),
        (
            "huge key-value count",
            gguf_bytes(0, 1 << 40, &arch),
            vec!["header declares", "(at byte 8)"],
        ),
        (
            "huge string length",
            gguf_bytes(
                0,
                1,
                &[&(1u64 << 40).to_le_bytes()[..], &[b'k'; 32]].concat(),
            ),
            vec!["1099511627776 bytes long", "(at byte 24)"],
        ),
        (
            "offset past the end",
            pad(
                gguf_bytes(
                    1,
                    1,
                    &[arch.clone(), tensor("w", &[32], 0, 1 << 20)].concat(),
                ),
                128,
            ),
            vec!["tensor `w`", "extends past the end"],
        ),
        (
            "overlapping tensors",
            pad(
                gguf_bytes(
                    2,
                    1,
                    &[
                        arch.clone(),
                        tensor("a", &[32], 0, 0),
                        tensor("b", &[32], 0, 64),
                    ]
                    .concat(),
                ),
                256,
            ),
            vec!["tensor `b`", "overlaps tensor `a`"],
        ),
        (
            "unknown dtype",
            pad(
                gguf_bytes(1, 1, &[arch.clone(), tensor("w", &[32], 77, 0)].concat()),
                128,
            ),
            vec!["tensor `w` has unknown dtype 77"],
        ),
        (
            "zero alignment",
            gguf_bytes(
                0,
                1,
                &[
                    &20u64.to_le_bytes()[..],
                    b"general.alignment\0\0\0",
                    &4u32.to_le_bytes(),
                    &0u32.to_le_bytes(),
                ]
                .concat(),
            ),
            vec!["general.alignment", "power of two"],
        ),
        (
            "truncated",
            gguf_bytes(0, 1, &arch[..arch.len() - 3]),
            vec!["claims 5 bytes"],
        ),
        ("memory amplification", big, vec!["of memory to read"]),
    ];
    for (what, bytes, needles) in cases {
        let f = s
            .dir
            .path()
            .join(format!("{}.gguf", what.replace(' ', "_")));
        std::fs::write(&f, &bytes).unwrap();
        // The check itself, then the whole CLI path (model loader).
        let p = gguf::check_bytes(&bytes).expect_err(what);
        assert!(p.offset <= bytes.len() as u64, "{what}: {p}");
        let mut want = vec!["invalid gguf file", path(&f), "(at byte "];
        want.extend(&needles);
        formwork(&["generate", "--model", path(&f), "hello"], &s.models()).bad_input(what, &want);
    }
}

/// The three registry models' headers pass the check (the check must not refuse real files).
#[test]
fn real_model_headers_pass_the_gguf_check() {
    for name in ["smollm2-135m", "qwen2.5-coder-0.5b", "gemma3-270m"] {
        let p = fetched(name);
        let s = gguf::check_file(&p).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(s.tensor_count > 100 && s.kv_count > 10, "{name}: {s:?}");
        assert!(s.memory < 64 << 20, "{name}: {s:?}");
    }
}
