//! The eval runner and its building blocks: suites (cases read from JSONL), judges (how right is
//! one output), the runner (cases × configurations × runs through a backend, results written as
//! they come), statistics (mean ± spread over runs, paired-bootstrap A/B verdicts) and reports.
//!
//! Files: `judge` → `stats` → `report` → `range` → `error` → `suite` → `run` → `backend`.
//!
//! Each file uses only those before it: judges and statistics need nothing, reports aggregate
//! judged rows, a case range (`--cases`, `--shots-from`) is plain data the eval error and the
//! suites both name, the runner reads suites and drives a backend, and the model backend
//! (over the extraction library) implements the runner's `Backend`.
//!
//! May use: `validate`, `prompt`, `tools`, `batch`, `run`.

pub mod backend;
pub mod error;
pub mod judge;
pub mod range;
pub mod report;
pub mod run;
pub mod stats;
pub mod suite;
