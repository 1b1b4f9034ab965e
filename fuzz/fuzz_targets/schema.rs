//! Fuzz target: arbitrary JSON into the JSON Schema compiler, end to end (schema → grammar →
//! matcher → a few masks, each step's token taken from the mask), must end in a result or a
//! clear error — never a panic, never unbounded time or memory (run with `-timeout=` and
//! `-rss_limit_mb=`). Deep nesting, huge enums, `maxLength: 1000000` and regex bombs in
//! `pattern` are the cases this exists for; seeded with the MaskBench sample schemas and
//! `tests/data/hostile`, with the dictionary in `fuzz/schema.dict`.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../common.rs"]
mod common;

fuzz_target!(|data: &[u8]| {
    // Deeply nested input is part of the point: serde_json's own recursion limit (128) bounds
    // the parse, and the compiler must bound everything after it.
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    let mut k = data.len();
    common::compile_and_walk(&value, 8, &mut |n| {
        k = k.wrapping_mul(31).wrapping_add(7);
        k % n
    });
});
