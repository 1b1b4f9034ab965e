//! formwork's integration tests: one target, one module per topic.
mod engine_json;
mod engine_json_grammar;
mod engine_reference;
mod matcher;

fn main() {}
