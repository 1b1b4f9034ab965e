//! Fuzz target: arbitrary bytes into the GBNF reader must never panic, and every error
//! must point inside the text it came from.
//!
//! The grammar module is compiled from its sources here instead of through a dependency on
//! the whole `formwork` crate: it needs only regex-syntax, serde_json and thiserror, while an
//! instrumented build of candle and tokenizers costs tens of minutes on a 2-core machine.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[allow(dead_code)]
#[path = "../../src/grammar/mod.rs"]
mod grammar;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match grammar::gbnf::parse(text) {
        Ok(g) => assert!(!g.rules().is_empty()),
        Err(e) => {
            let _ = e.to_string();
            if let Some(at) = e.location() {
                assert!(at.line >= 1 && at.line <= text.split('\n').count());
                assert!(at.column >= 1 && at.column <= at.line_text.chars().count() + 1);
            }
        }
    }
});
