//! formwork's integration tests: one target, one module per topic.

mod model_fetch;
mod schema_regex;
mod tokenizer;
