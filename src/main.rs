//! The `formwork` binary: a thin front over the library (see `formwork::cli`).
//!
//! Exit codes: 0 success, 1 the work failed (e.g. invalid output, failed records), 2 bad input
//! or usage (unreadable schema, unknown model, corrupt file). A closed stdout pipe exits 0.

use std::process::ExitCode;

fn main() -> ExitCode {
    match formwork::cli::run(std::env::args_os()) {
        Ok(code) => code,
        Err(err) => {
            if formwork::cli::is_broken_pipe(&err) {
                return ExitCode::SUCCESS;
            }
            eprintln!("error: {err:#}");
            ExitCode::from(2)
        }
    }
}
