//! The eval runner's building blocks: judges (how right is one output) and statistics
//! (mean ± spread over runs, paired-bootstrap A/B verdicts).

pub mod judge;
pub mod report;
pub mod stats;
pub mod suite;
