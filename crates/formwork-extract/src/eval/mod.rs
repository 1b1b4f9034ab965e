//! The eval runner and its building blocks: suites (cases read from JSONL), judges (how right is
//! one output), the runner (cases × configurations × runs through a backend, results written as
//! they come), statistics (mean ± spread over runs, paired-bootstrap A/B verdicts) and reports.
//!
//! May use: `validate`, `prompt`, `tools`, `batch`, `run`.

pub mod backend;
pub mod judge;
pub mod report;
pub mod run;
pub mod stats;
pub mod suite;
