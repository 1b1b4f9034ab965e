//! The command-line interface: one file per subcommand (its clap arguments, then the glue that
//! runs it), the flag groups and resource helpers several share (`common`), and the top-level
//! [`Args`] (`args`).
//!
//! Holds no engine logic: each subcommand turns its arguments into library configs, calls the
//! library, and prints. `anyhow` is used here and nowhere else in the library.
//!
//! Files: `common` → `compile` → `debug` → `eval` → `extract` → `generate` → `models` → `serve` →
//! `args`.
//!
//! May use: nothing else in the crate.

mod args;
pub mod common;
pub mod compile;
pub mod debug;
pub mod eval;
pub mod extract;
pub mod generate;
pub mod models;
pub mod serve;

use std::ffi::OsString;
use std::process::ExitCode;

use clap::Parser;

pub use args::{Args, Command};

/// Parses `argv` and runs the subcommand. Returns the process exit code.
pub fn run<I: IntoIterator<Item = OsString>>(argv: I) -> anyhow::Result<ExitCode> {
    let args = match Args::try_parse_from(argv) {
        Ok(a) => a,
        Err(e) => {
            // --help and --version are not errors.
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return Ok(ExitCode::from(code));
        }
    };
    match args.command {
        Command::Compile(a) => compile::run(&a),
        Command::Eval(a) => eval::run(&a),
        Command::Models(a) => models::run(a),
        Command::Generate(a) => generate::run(a),
        Command::Extract(a) => extract::run(*a),
        Command::Serve(a) => serve::run(*a),
        Command::Debug(a) => debug::run(a),
    }
}

/// Whether the error chain ends in a broken pipe (stdout closed by e.g. `| head`).
pub fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|e| {
        e.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// How the commands fetch models: the library's defaults, with one progress line per step on
/// stderr (a fetch takes seconds to minutes, and silence looks like a hang).
pub(crate) fn fetch_config() -> crate::model::fetch::FetchConfig {
    crate::model::fetch::FetchConfig::new().progress(|line| eprintln!("formwork: {line}"))
}
