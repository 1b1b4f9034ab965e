//! Fuzz target: arbitrary bytes into the GBNF reader must never panic, and every error
//! must point inside the text it came from.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match formwork::grammar::gbnf::parse(text) {
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
