//! Shared by the schema targets: a schema's grammar driven through a matcher for a few steps.

use std::sync::{Arc, OnceLock};

use formwork_core::schema::{compile, CompileOptions, Whitespace};
use formwork_core::toktrie::SyntheticVocab;
use formwork_core::{CompiledGrammar, Limits, Matcher, TokEnv, TokenSet};

/// A byte-level vocabulary plus JSON-ish multi-byte tokens, built once per process.
pub fn env() -> &'static TokEnv {
    static ENV: OnceLock<TokEnv> = OnceLock::new();
    ENV.get_or_init(|| {
        let multi: Vec<Vec<u8>> = [
            "{\"", "\":", "\",\"", "\"}", "[]", "{}", "true", "false", "null", "\"a", "ab", "12",
            "-1", ".5", "e+", "\\u", "\\\"", "  ", ",\"", "\":\"", "\"]", "[\"",
        ]
        .iter()
        .map(|t| t.as_bytes().to_vec())
        .collect();
        TokEnv::new(Arc::new(SyntheticVocab::new(multi).with_eos("<eos>")))
    })
}

/// Compiles `schema` under default and lenient flexible options; a grammar that comes out is
/// compiled against the vocabulary and walked for up to `steps` tokens, each picked from the
/// mask by `pick`. Errors are fine; panics, unbounded time and unbounded memory are not.
pub fn compile_and_walk(
    schema: &serde_json::Value,
    steps: usize,
    pick: &mut dyn FnMut(usize) -> usize,
) {
    for opts in [
        CompileOptions::default(),
        CompileOptions {
            whitespace: Whitespace::Flexible { max_run: 2 },
            lenient: true,
            coerce_one_of: true,
            max_grammar_size: 200_000,
            ..Default::default()
        },
    ] {
        let c = match compile(schema, &opts) {
            Ok(c) => c,
            Err(e) => {
                assert!(!e.to_string().is_empty());
                let _ = e.category();
                continue;
            }
        };
        assert!(c.grammar.size() <= opts.max_grammar_size);
        // Lenient mode is the only one that returns warnings.
        assert!(opts.lenient || c.warnings.is_empty());
        let limits = Limits {
            step_fuel: 2_000_000,
            max_grammar_size: 200_000,
            ..Limits::default()
        };
        let Ok(cg) = CompiledGrammar::with_env(c.grammar, env(), limits) else {
            continue;
        };
        let Ok(mut m) = Matcher::new(Arc::new(cg)) else {
            continue;
        };
        let mut mask = TokenSet::new(env().trie().vocab_len());
        for _ in 0..steps {
            if m.compute_mask(&mut mask).is_err() {
                break;
            }
            let allowed: Vec<_> = mask.iter().collect();
            if allowed.is_empty() {
                break;
            }
            let t = allowed[pick(allowed.len()) % allowed.len()];
            m.consume_token(t)
                .unwrap_or_else(|e| panic!("token {t:?} from the mask refused: {e}"));
        }
    }
}
