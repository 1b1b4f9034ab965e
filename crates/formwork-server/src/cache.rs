//! The grammar cache: compiled constraints shared across requests.
//!
//! Owns turning an [`Output`] into an `Arc<CompiledGrammar>` for the served vocabulary, and
//! keeping the most recently used ones (keyed by [`Output::cache_key`], the canonical JSON of
//! the schema or tool set), so a repeated schema does not recompile. Bounded: at most
//! `capacity` grammars, the least recently used evicted first. Compiling happens outside the
//! lock (a slow schema does not block requests for cached ones); two requests racing on the
//! same new schema may both compile it, and the second result is kept.
//!
//! Fail closed: a schema or tool set the engine cannot enforce is an error naming the keyword
//! and its JSON pointer, never an unconstrained fallback.

use std::sync::{Arc, Mutex};

use formwork_core::matcher::{CompiledGrammar, Limits};
use formwork_core::schema::{compile, CompileOptions};
use formwork_core::toktrie::TokEnv;
use formwork_core::Grammar;
use formwork_extract::{Constraint, ExtractConfig, Prepared};
use serde_json::json;

use crate::error::ApiError;
use crate::request::Output;

/// A bounded LRU of compiled grammars for one vocabulary.
pub struct GrammarCache {
    env: TokEnv,
    capacity: usize,
    /// (use counter, entries); small enough that a linear scan is cheaper than a map.
    entries: Mutex<(u64, Vec<Entry>)>,
}

/// (key, grammar, last use).
type Entry = (String, Arc<CompiledGrammar>, u64);

impl std::fmt::Debug for GrammarCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrammarCache")
            .field("capacity", &self.capacity)
            .field("len", &self.len())
            .finish()
    }
}

/// Whether [`GrammarCache::get`] compiled the grammar or found it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// Found in the cache.
    Hit,
    /// Compiled now.
    Compiled,
}

fn grammar_of(output: &Output) -> Result<Grammar, ApiError> {
    let unsupported = |param: &str, e: &dyn std::fmt::Display| {
        ApiError::invalid(
            param,
            format!("the constraint cannot be enforced exactly: {e}"),
        )
        .code("unsupported_schema")
    };
    match output {
        Output::Text => Err(ApiError::new(
            axum::http::StatusCode::INTERNAL_SERVER_ERROR,
            "free text has no grammar",
        )),
        Output::Json => compile(&json!({}), &CompileOptions::default())
            .map(|c| c.grammar)
            .map_err(|e| unsupported("response_format", &e)),
        Output::Schema { schema, strict, .. } => {
            let opts = CompileOptions {
                strict: *strict,
                ..CompileOptions::default()
            };
            compile(schema, &opts)
                .map(|c| c.grammar)
                .map_err(|e| unsupported("response_format", &e))
        }
        Output::Tools { tools, choice } => {
            let c = Constraint::Tools {
                tools: tools.clone(),
                choice: choice.clone(),
            };
            let prepared = Prepared::new(&c, &ExtractConfig::default())
                .map_err(|e| unsupported("tools", &e))?;
            prepared
                .grammar_for("")
                .map_err(|e| unsupported("tools", &e))?
                .ok_or_else(|| {
                    ApiError::new(
                        axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                        "the tool constraint produced no grammar",
                    )
                })
        }
    }
}

impl GrammarCache {
    /// An empty cache of at most `capacity` (≥ 1) grammars for `env`'s vocabulary.
    pub fn new(env: TokEnv, capacity: usize) -> Self {
        GrammarCache {
            env,
            capacity: capacity.max(1),
            entries: Mutex::new((0, Vec::new())),
        }
    }

    /// Grammars held.
    pub fn len(&self) -> usize {
        self.entries.lock().map(|e| e.1.len()).unwrap_or(0)
    }

    /// Whether the cache is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The compiled grammar of `output` (`None` for free text), from the cache or compiled
    /// now. Cost on a miss: the schema compile plus O(grammar) against the shared token trie.
    ///
    /// # Errors
    /// A 400 naming the keyword and JSON pointer the engine cannot enforce.
    pub fn get(&self, output: &Output) -> Result<Option<(Arc<CompiledGrammar>, Lookup)>, ApiError> {
        let Some(key) = output.cache_key() else {
            return Ok(None);
        };
        if let Ok(mut guard) = self.entries.lock() {
            guard.0 += 1;
            let now = guard.0;
            if let Some(e) = guard.1.iter_mut().find(|e| e.0 == key) {
                e.2 = now;
                return Ok(Some((e.1.clone(), Lookup::Hit)));
            }
        }
        let grammar = grammar_of(output)?;
        let compiled = CompiledGrammar::with_env(grammar, &self.env, Limits::default())
            .map(Arc::new)
            .map_err(|e| {
                ApiError::invalid(
                    match output {
                        Output::Tools { .. } => "tools",
                        _ => "response_format",
                    },
                    format!("the constraint cannot be compiled within the engine's limits: {e}"),
                )
                .code("unsupported_schema")
            })?;
        if let Ok(mut guard) = self.entries.lock() {
            guard.0 += 1;
            let now = guard.0;
            let entries = &mut guard.1;
            entries.retain(|e| e.0 != key);
            if entries.len() >= self.capacity {
                if let Some(oldest) = entries
                    .iter()
                    .enumerate()
                    .min_by_key(|(_, e)| e.2)
                    .map(|(i, _)| i)
                {
                    entries.swap_remove(oldest);
                }
            }
            entries.push((key, compiled.clone(), now));
        }
        Ok(Some((compiled, Lookup::Compiled)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use formwork_core::toktrie::SyntheticVocab;
    use formwork_extract::tools::{Tool, ToolChoice};

    fn cache(capacity: usize) -> GrammarCache {
        let vocab = Arc::new(SyntheticVocab::byte_level());
        GrammarCache::new(TokEnv::new(vocab), capacity)
    }

    fn schema(n: u32) -> Output {
        Output::Schema {
            name: "s".into(),
            schema: json!({"type": "integer", "maximum": n}),
            strict: false,
        }
    }

    #[test]
    fn a_repeated_schema_is_not_recompiled() {
        let c = cache(4);
        let (a, first) = c.get(&schema(1)).unwrap().unwrap();
        let (b, second) = c.get(&schema(1)).unwrap().unwrap();
        assert_eq!((first, second), (Lookup::Compiled, Lookup::Hit));
        assert!(Arc::ptr_eq(&a, &b));
        assert!(c.get(&Output::Text).unwrap().is_none());
    }

    #[test]
    fn the_least_recently_used_grammar_is_evicted() {
        let c = cache(2);
        c.get(&schema(1)).unwrap();
        c.get(&schema(2)).unwrap();
        c.get(&schema(1)).unwrap(); // 2 is now the oldest
        c.get(&schema(3)).unwrap();
        assert_eq!(c.len(), 2);
        assert_eq!(c.get(&schema(1)).unwrap().unwrap().1, Lookup::Hit);
        assert_eq!(c.get(&schema(2)).unwrap().unwrap().1, Lookup::Compiled);
    }

    #[test]
    fn unsupported_keywords_fail_closed_naming_keyword_and_pointer() {
        let c = cache(2);
        let bad = Output::Schema {
            name: "s".into(),
            schema: json!({"type": "object", "properties": {"a": {"type": "object", "unevaluatedProperties": false}}}),
            strict: false,
        };
        let e = c.get(&bad).unwrap_err();
        assert_eq!(e.status, axum::http::StatusCode::BAD_REQUEST);
        assert_eq!(e.code, Some("unsupported_schema"));
        assert!(e.message.contains("unevaluatedProperties"), "{}", e.message);
        assert!(
            e.message.contains("/properties/a/unevaluatedProperties"),
            "{}",
            e.message
        );
        assert!(c.is_empty());
        let tools = Output::Tools {
            tools: vec![Tool {
                name: "f".into(),
                description: None,
                parameters: json!({"type": "object", "unevaluatedProperties": false}),
            }],
            choice: ToolChoice::Required,
        };
        let e = c.get(&tools).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("tools"));
        assert!(e.message.contains("unevaluatedProperties"), "{}", e.message);
    }
}
