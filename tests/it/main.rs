//! formwork's integration tests: one target, one module per topic.
mod schema_cases;
mod schema_maskbench;
mod schema_ratchet;
mod schema_suite;
mod schema_suite_optional;
mod schema_support;

mod cli_errors;
mod corpus;
mod data;
mod engine_json;
mod engine_json_grammar;
mod engine_real_vocab;
mod engine_reference;
mod eval;
mod extract;
mod extract_parallel;
mod gbnf;
mod kill_resume;
mod lark;
mod layering;
mod matcher;
mod model_fetch;
mod model_runtime;
mod readme_example;
mod schema_regex;
mod tokenizer;
