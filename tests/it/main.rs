//! formwork's integration tests: one target, one module per topic.

mod engine_json;
mod engine_json_grammar;
mod engine_real_vocab;
mod engine_reference;
mod matcher;
mod model_fetch;
mod schema_regex;
mod tokenizer;
