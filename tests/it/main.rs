//! formwork's integration tests: one target, one module per topic.
mod schema_regex;
