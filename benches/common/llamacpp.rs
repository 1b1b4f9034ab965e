//! A llama.cpp binary for the side-by-side benches: from an environment variable, else built
//! (once, into a cache) by `scripts/build-llamacpp`. Shared by the root benches and, through
//! `#[path]`, by the model and server crates' benches.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The llama.cpp `target` binary (`llama-bench`, `llama-batched-bench`, `llama-server`):
/// `$env_var` if set, else what `build_script` builds and prints last. `Err` says why there
/// is none; the script's own progress and errors go to stderr.
pub fn llamacpp_bin(target: &str, env_var: &str, build_script: &Path) -> Result<PathBuf, String> {
    if let Some(bin) = std::env::var_os(env_var) {
        return Ok(PathBuf::from(bin));
    }
    eprintln!(
        "{} {target} (builds llama.cpp once into the cache; the first time takes minutes)",
        build_script.display()
    );
    let out = Command::new("bash")
        .arg(build_script)
        .arg(target)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", build_script.display()))?;
    if !out.status.success() {
        return Err(format!(
            "{} failed ({}; its error is above)",
            build_script.display(),
            out.status
        ));
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    match stdout.lines().last().map(str::trim) {
        Some(line) if !line.is_empty() => Ok(PathBuf::from(line)),
        _ => Err(format!("{} printed no binary path", build_script.display())),
    }
}
