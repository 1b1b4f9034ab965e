//! formwork's integration tests: one target, one module per topic.
mod schema_cases;
mod schema_maskbench;
mod schema_ratchet;
mod schema_suite;
mod schema_support;
