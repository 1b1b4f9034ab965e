//! Fuzz target: arbitrary JSON into the JSON Schema compiler must end in a grammar or a clear
//! error — never a panic, never unbounded time or memory (run with `-timeout=` and
//! `-rss_limit_mb=`). Deep nesting, huge enums, `maxLength: 1000000` and regex bombs in
//! `pattern` are the cases this exists for; seed it with the MaskBench sample schemas and the
//! dictionary in `fuzz/schema.dict`.
//!
//! Like the `gbnf` target, the schema and grammar modules are compiled from their sources
//! instead of through a dependency on the whole `formwork` crate (an instrumented candle and
//! tokenizers build costs tens of minutes on a 2-core machine).
#![no_main]

use libfuzzer_sys::fuzz_target;

#[allow(dead_code)]
#[path = "../../src/grammar/mod.rs"]
mod grammar;

#[allow(dead_code, unused_imports)]
#[path = "../../src/schema/mod.rs"]
mod schema;

fuzz_target!(|data: &[u8]| {
    // Deeply nested input is part of the point: serde_json's own recursion limit (128) bounds
    // the parse, and the compiler must bound everything after it.
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    for opts in [
        schema::CompileOptions::default(),
        schema::CompileOptions {
            whitespace: schema::Whitespace::Flexible { max_run: 4 },
            lenient: true,
            coerce_one_of: true,
            ..Default::default()
        },
    ] {
        match schema::compile(&value, &opts) {
            Ok(c) => {
                assert!(c.grammar.size() <= opts.max_grammar_size);
                // Lenient mode is the only one that returns warnings.
                assert!(opts.lenient || c.warnings.is_empty());
            }
            Err(e) => {
                let msg = e.to_string();
                assert!(!msg.is_empty());
                let _ = e.category();
            }
        }
    }
});
