//! formwork's integration tests: one target, one module per topic.
mod gbnf;
