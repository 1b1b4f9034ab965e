//! The grammar cache: compiled constraints shared across requests.
//!
//! Owns turning an [`Output`] into an `Arc<CompiledGrammar>` for the served vocabulary and the
//! errors a client sees; keeping the most recently used ones (keyed by [`Output::cache_key`],
//! the canonical JSON of the schema or tool set, bounded, least recently used evicted first,
//! compiled outside the lock) is the engine's [`formwork_core::GrammarCache`].
//!
//! Tool sets compile as extraction composes them (one call); with parallel calls allowed, that
//! grammar of one call is repeated, one call per line (`calls := call | call "\n" calls`),
//! plain text staying the other alternative under `auto`.
//!
//! Fail closed: a schema or tool set the engine cannot enforce is an error naming the keyword
//! and its JSON pointer, never an unconstrained fallback.
//!
//! May use: `error`, `request`.

use std::sync::Arc;

use formwork_core::grammar::{GrammarBuilder, Symbol};
use formwork_core::matcher::{CompiledGrammar, Limits};
use formwork_core::schema::{compile, CompileOptions};
use formwork_core::toktrie::TokEnv;
use formwork_core::Grammar;
use formwork_extract::compose::{import, text_rule};
use formwork_extract::tools::ToolChoice;
use formwork_extract::{Constraint, ExtractConfig, Prepared};
use serde_json::json;

use crate::error::ApiError;
use crate::request::Output;

/// A bounded LRU of compiled grammars for one vocabulary: the engine's
/// [`formwork_core::GrammarCache`], keyed by [`Output::cache_key`], with the server's errors.
#[derive(Debug)]
pub struct GrammarCache {
    inner: formwork_core::GrammarCache,
}

/// Why a miss produced no grammar: the constraint itself, or the matcher's compile.
enum MissError {
    Api(ApiError),
    Matcher(formwork_core::MatcherError),
}

impl From<formwork_core::MatcherError> for MissError {
    fn from(e: formwork_core::MatcherError) -> Self {
        MissError::Matcher(e)
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
    match output {
        Output::Text => Err(ApiError::new(
            axum::http::StatusCode::INTERNAL_SERVER_ERROR,
            "free text has no grammar",
        )),
        Output::Json => compile(&json!({}), &CompileOptions::default())
            .map(|c| c.grammar)
            .map_err(|e| unsupported("response_format", &e)),
        Output::Schema {
            schema,
            strict,
            allow_refusal,
            ..
        } => {
            let compile_opts = CompileOptions {
                strict: *strict,
                ..CompileOptions::default()
            };
            if !allow_refusal {
                return compile(schema, &compile_opts)
                    .map(|c| c.grammar)
                    .map_err(|e| unsupported("response_format", &e));
            }
            // The schema or `{"refusal": …}`, composed as extraction composes it.
            let cfg = ExtractConfig {
                allow_refusal: true,
                compile: compile_opts,
                ..ExtractConfig::default()
            };
            composed(&Constraint::Schema(schema.clone()), &cfg, "response_format")
        }
        Output::Tools {
            tools,
            choice,
            parallel: false,
        } => {
            let c = Constraint::Tools {
                tools: tools.clone(),
                choice: choice.clone(),
            };
            composed(&c, &ExtractConfig::default(), "tools")
        }
        Output::Tools {
            tools,
            choice,
            parallel: true,
        } => {
            // Exactly one call (to any allowed tool), as extraction composes it, repeated one
            // per line; with `auto`, plain text instead.
            let one = Constraint::Tools {
                tools: tools.clone(),
                choice: match choice {
                    ToolChoice::Auto => ToolChoice::Required,
                    c => c.clone(),
                },
            };
            let one = composed(&one, &ExtractConfig::default(), "tools")?;
            let mut b = GrammarBuilder::new();
            let call = import(&mut b, &one, "call/", |_, _| None);
            let newline = b.literal("\n");
            let calls = b.rule_ref("calls");
            b.define(
                "calls",
                vec![
                    vec![Symbol::Rule(call)],
                    vec![
                        Symbol::Rule(call),
                        Symbol::Lexeme(newline),
                        Symbol::Rule(calls),
                    ],
                ],
            );
            let mut alts = vec![vec![Symbol::Rule(calls)]];
            if *choice == ToolChoice::Auto {
                alts.push(vec![Symbol::Rule(text_rule(&mut b))]);
            }
            let top = b.define("output", alts);
            b.build(top).map_err(|e| {
                ApiError::new(
                    axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                    format!("the parallel tool-call grammar does not build: {e}"),
                )
            })
        }
    }
}

/// A 400 `unsupported_schema` naming `param`: the constraint cannot be enforced exactly.
fn unsupported(param: &str, e: &dyn std::fmt::Display) -> ApiError {
    ApiError::invalid(
        param,
        format!("the constraint cannot be enforced exactly: {e}"),
    )
    .code("unsupported_schema")
}

/// The grammar extraction composes for `constraint` under `cfg` (refusal branch, tool calls);
/// the request's constraints never depend on a document, so it is composed for none. A
/// failure is a 400 naming `param`.
fn composed(
    constraint: &Constraint,
    cfg: &ExtractConfig,
    param: &str,
) -> Result<Grammar, ApiError> {
    let prepared = Prepared::new(constraint, cfg).map_err(|e| unsupported(param, &e))?;
    prepared
        .grammar_for("")
        .map_err(|e| unsupported(param, &e))?
        .ok_or_else(|| {
            ApiError::new(
                axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                "the constraint produced no grammar",
            )
        })
}

impl GrammarCache {
    /// An empty cache of at most `capacity` (≥ 1) grammars for `env`'s vocabulary.
    pub fn new(env: TokEnv, capacity: usize) -> Self {
        GrammarCache {
            inner: formwork_core::GrammarCache::new(env, Limits::default(), capacity),
        }
    }

    /// Grammars held.
    pub fn len(&self) -> usize {
        self.inner.len()
    }

    /// Whether the cache is empty.
    pub fn is_empty(&self) -> bool {
        self.inner.is_empty()
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
        let mut lookup = Lookup::Hit;
        let compiled = self
            .inner
            .get_or_compile(key.as_bytes(), || {
                lookup = Lookup::Compiled;
                grammar_of(output).map_err(MissError::Api)
            })
            .map_err(|e| match e {
                MissError::Api(e) => e,
                MissError::Matcher(e) => ApiError::invalid(
                    match output {
                        Output::Tools { .. } => "tools",
                        _ => "response_format",
                    },
                    format!("the constraint cannot be compiled within the engine's limits: {e}"),
                )
                .code("unsupported_schema"),
            })?;
        Ok(Some((compiled, lookup)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use formwork_core::toktrie::SyntheticVocab;
    use formwork_extract::tools::Tool;

    fn cache(capacity: usize) -> GrammarCache {
        let vocab = Arc::new(SyntheticVocab::byte_level());
        GrammarCache::new(TokEnv::new(vocab), capacity)
    }

    fn schema(n: u32) -> Output {
        Output::Schema {
            name: "s".into(),
            schema: json!({"type": "integer", "maximum": n}),
            strict: false,
            allow_refusal: false,
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
            allow_refusal: false,
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
            parallel: false,
        };
        let e = c.get(&tools).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("tools"));
        assert!(e.message.contains("unevaluatedProperties"), "{}", e.message);
    }
}
