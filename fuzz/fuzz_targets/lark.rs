//! Fuzz target: arbitrary text into the Lark reader must never panic, and every error must point
//! inside the text it came from (line and column on a real line). A grammar that parses is then
//! compiled against a byte-level vocabulary (built once) and asked for one mask: a parsed grammar
//! must compile or fail with an error, never panic. `%json` bodies reach the schema compiler
//! with a small grammar budget, so a fuzzed schema cannot run long.
#![no_main]

use std::sync::{Arc, OnceLock};

use formwork_core::lark;
use formwork_core::schema::CompileOptions;
use formwork_core::toktrie::SyntheticVocab;
use formwork_core::{CompiledGrammar, Limits, Matcher, TokEnv, TokenSet};
use libfuzzer_sys::fuzz_target;

fn env() -> &'static TokEnv {
    static ENV: OnceLock<TokEnv> = OnceLock::new();
    ENV.get_or_init(|| TokEnv::new(Arc::new(SyntheticVocab::byte_level().with_eos("<eos>"))))
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let json = CompileOptions {
        max_grammar_size: 100_000,
        ..CompileOptions::default()
    };
    match lark::parse_with(text, &json) {
        Ok(c) => {
            assert!(!c.grammar.rules().is_empty());
            let limits = Limits {
                step_fuel: 1_000_000,
                ..Limits::default()
            };
            if let Ok(cg) = CompiledGrammar::with_env(c.grammar, env(), limits) {
                if let Ok(mut m) = Matcher::new(Arc::new(cg)) {
                    let mut mask = TokenSet::new(env().trie().vocab_len());
                    let _ = m.compute_mask(&mut mask);
                }
            }
        }
        Err(e) => {
            assert!(!e.to_string().is_empty());
            if let Some(at) = e.location() {
                assert!(at.line >= 1 && at.line <= text.split('\n').count(), "{e}");
                assert!(
                    at.column >= 1 && at.column <= at.line_text.chars().count() + 1,
                    "{e}"
                );
            }
        }
    }
});
