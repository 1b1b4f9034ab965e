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
//! and its JSON pointer, never an unconstrained fallback. Only a cache made
//! [`lenient`](ConstraintCache::lenient) by the operator (`formwork serve --lenient`) compiles
//! such constraints with the unsupported keywords dropped, and reports each dropped one
//! ([`Dropped`]) with every grammar it hands out, hit or miss.
//!
//! May use: `error`, `request`.

use std::sync::Arc;

use formwork_core::grammar::{GrammarBuilder, Symbol};
use formwork_core::matcher::{CompiledGrammar, Limits};
use formwork_core::schema::{compile, CompileOptions, SchemaError};
use formwork_core::toktrie::TokEnv;
use formwork_core::Grammar;
use formwork_extract::compose::{import, text_rule};
use formwork_extract::tools::{self, ToolChoice};
use formwork_extract::{Constraint, ExtractConfig, Prepared};
use serde_json::{json, Value};

use crate::error::ApiError;
use crate::request::Output;

/// A bounded LRU of compiled grammars for one vocabulary: the engine's
/// [`formwork_core::GrammarCache`], keyed by [`Output::cache_key`], with the server's errors.
#[derive(Debug)]
pub struct ConstraintCache {
    inner: formwork_core::GrammarCache,
    lenient: bool,
}

/// A constraint a lenient cache did not enforce: where it is and what it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dropped {
    /// The request field holding the schema: `response_format` or `tools.<name>`.
    pub param: String,
    /// The keyword, e.g. `unevaluatedProperties`.
    pub keyword: String,
    /// Its JSON pointer in that schema (`#` for the root).
    pub pointer: String,
}

impl Dropped {
    /// As the response's extension field lists it.
    pub fn to_json(&self) -> Value {
        json!({"param": self.param, "keyword": self.keyword, "pointer": self.pointer})
    }

    /// As the `formwork-dropped-constraints` header lists it: `param:keyword@pointer`, with
    /// any byte outside printable ASCII (and `%`, `,`) percent-encoded so it is a valid header.
    pub fn header_item(&self) -> String {
        let raw = format!("{}:{}@{}", self.param, self.keyword, self.pointer);
        let mut out = String::with_capacity(raw.len());
        for b in raw.bytes() {
            if b.is_ascii_graphic() && b != b'%' && b != b',' {
                out.push(char::from(b));
            } else {
                out.push_str(&format!("%{b:02X}"));
            }
        }
        out
    }
}

/// A grammar from the cache: the compiled constraint, whether it was a hit, and what a
/// lenient cache dropped from it (always empty otherwise).
#[derive(Debug)]
pub struct Cached {
    /// The compiled grammar.
    pub grammar: Arc<CompiledGrammar>,
    /// Hit or compiled now.
    pub lookup: Lookup,
    /// The constraints not enforced.
    pub dropped: Vec<Dropped>,
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

/// Whether [`ConstraintCache::get`] compiled the grammar or found it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// Found in the cache.
    Hit,
    /// Compiled now.
    Compiled,
}

/// The schema options of the server: exact unless `lenient`.
fn options(lenient: bool) -> CompileOptions {
    CompileOptions {
        lenient,
        ..CompileOptions::default()
    }
}

/// What a lenient compile of `output` drops: each schema compiled as [`grammar_of`] compiles
/// it (tools' parameters with no other properties, as extraction compiles them), keeping the
/// warnings. Only the schema compile (no token-level work).
fn dropped_from(output: &Output) -> Result<Vec<Dropped>, ApiError> {
    let opts = options(true);
    let mut schemas: Vec<(String, &Value, CompileOptions)> = Vec::new();
    match output {
        Output::Text | Output::Json => {}
        Output::Schema { schema, strict, .. } => {
            let o = CompileOptions {
                strict: *strict,
                ..opts
            };
            schemas.push(("response_format".into(), schema, o));
        }
        Output::Tools { tools, choice, .. } => {
            let allowed = tools::allowed(tools, choice).map_err(|e| unsupported("tools", &e))?;
            for t in allowed {
                let o = CompileOptions {
                    no_additional_properties: true,
                    ..opts.clone()
                };
                schemas.push((format!("tools.{}", t.name), &t.parameters, o));
            }
        }
    }
    let mut out = Vec::new();
    for (param, schema, o) in schemas {
        let compiled = compile(schema, &o).map_err(|e| unsupported(&param, &e))?;
        out.extend(compiled.warnings.into_iter().map(|w| match w {
            SchemaError::Unsupported {
                keyword, pointer, ..
            } => Dropped {
                param: param.clone(),
                keyword,
                pointer: if pointer.is_empty() {
                    "#".into()
                } else {
                    pointer
                },
            },
            other => Dropped {
                param: param.clone(),
                keyword: other.to_string(),
                pointer: "#".into(),
            },
        }));
    }
    Ok(out)
}

fn grammar_of(output: &Output, lenient: bool) -> Result<Grammar, ApiError> {
    let extract = ExtractConfig {
        compile: options(lenient),
        ..ExtractConfig::default()
    };
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
                ..options(lenient)
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
            composed(&c, &extract, "tools")
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
            let one = composed(&one, &extract, "tools")?;
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

impl ConstraintCache {
    /// An empty cache of at most `capacity` (≥ 1) grammars for `env`'s vocabulary.
    pub fn new(env: TokEnv, capacity: usize) -> Self {
        ConstraintCache {
            inner: formwork_core::GrammarCache::new(env, Limits::default(), capacity),
            lenient: false,
        }
    }

    /// Lenient (the operator's `--lenient`) or exact (the default): a lenient cache compiles
    /// schemas with unsupported keywords dropped instead of refusing them, and reports them.
    pub fn lenient(mut self, lenient: bool) -> Self {
        self.lenient = lenient;
        self
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
    /// now, with what a lenient cache dropped from it. Cost on a miss: the schema compile plus
    /// O(grammar) against the shared token trie; a lenient cache also recompiles the schemas
    /// (not the grammar) on every call to list what it dropped.
    ///
    /// # Errors
    /// A 400 naming the keyword and JSON pointer the engine cannot enforce (a lenient cache:
    /// only what it cannot drop, e.g. an invalid schema).
    pub fn get(&self, output: &Output) -> Result<Option<Cached>, ApiError> {
        let Some(key) = output.cache_key() else {
            return Ok(None);
        };
        let dropped = if self.lenient {
            dropped_from(output)?
        } else {
            Vec::new()
        };
        let mut lookup = Lookup::Hit;
        let grammar = self
            .inner
            .get_or_compile(key.as_bytes(), || {
                lookup = Lookup::Compiled;
                grammar_of(output, self.lenient).map_err(MissError::Api)
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
        Ok(Some(Cached {
            grammar,
            lookup,
            dropped,
        }))
    }
}

impl ConstraintCache {
    /// A grammar the caller built (the playground's, composed as `formwork extract` composes
    /// it), compiled for the vocabulary and kept under `key` beside the others; `key` must
    /// determine the grammar. A grammar over the matcher's limits is a 400 naming `param`.
    pub fn compiled(
        &self,
        key: &str,
        param: &str,
        grammar: impl FnOnce() -> Grammar,
    ) -> Result<(Arc<CompiledGrammar>, Lookup), ApiError> {
        let mut lookup = Lookup::Hit;
        let g = self
            .inner
            .get_or_compile(key.as_bytes(), || {
                lookup = Lookup::Compiled;
                Ok::<_, formwork_core::MatcherError>(grammar())
            })
            .map_err(|e| {
                ApiError::invalid(
                    param,
                    format!("the constraint cannot be compiled within the engine's limits: {e}"),
                )
                .code("unsupported_schema")
            })?;
        Ok((g, lookup))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use formwork_core::toktrie::SyntheticVocab;
    use formwork_extract::tools::Tool;

    fn cache(capacity: usize) -> ConstraintCache {
        let vocab = Arc::new(SyntheticVocab::byte_level());
        ConstraintCache::new(TokEnv::new(vocab), capacity)
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
        let a = c.get(&schema(1)).unwrap().unwrap();
        let b = c.get(&schema(1)).unwrap().unwrap();
        assert_eq!((a.lookup, b.lookup), (Lookup::Compiled, Lookup::Hit));
        assert!(Arc::ptr_eq(&a.grammar, &b.grammar));
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
        assert_eq!(c.get(&schema(1)).unwrap().unwrap().lookup, Lookup::Hit);
        assert_eq!(c.get(&schema(2)).unwrap().unwrap().lookup, Lookup::Compiled);
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

    #[test]
    fn a_lenient_cache_drops_unsupported_keywords_and_says_which() {
        let bad_schema = json!({"type": "object", "properties": {
            "a": {"type": "integer", "maximum": 9},
            "ü": {"type": "object", "unevaluatedProperties": false}}});
        let schema_output = Output::Schema {
            name: "s".into(),
            schema: bad_schema.clone(),
            strict: false,
            allow_refusal: false,
        };
        // Exact (the default): a 400.
        assert!(cache(2).get(&schema_output).is_err());
        let c = cache(4).lenient(true);
        for lookup in [Lookup::Compiled, Lookup::Hit] {
            let got = c.get(&schema_output).unwrap().unwrap();
            assert_eq!(got.lookup, lookup);
            let want = Dropped {
                param: "response_format".into(),
                keyword: "unevaluatedProperties".into(),
                pointer: "/properties/ü/unevaluatedProperties".into(),
            };
            assert_eq!(
                got.dropped,
                std::slice::from_ref(&want),
                "reported on hits too"
            );
            assert_eq!(
                want.header_item(),
                "response_format:unevaluatedProperties@/properties/%C3%BC/unevaluatedProperties"
            );
            // What is supported is still enforced: `a` is at most 9.
            let mut m = formwork_core::matcher::Matcher::new(got.grammar.clone()).unwrap();
            m.consume_bytes(b"{\"a\":1").unwrap();
            assert!(
                m.consume_bytes(b"2").is_err(),
                "maximum 9 is still enforced"
            );
        }
        // A supported schema drops nothing; tools name their tool.
        assert!(c.get(&schema(3)).unwrap().unwrap().dropped.is_empty());
        let tools = Output::Tools {
            tools: vec![Tool {
                name: "f".into(),
                description: None,
                parameters: bad_schema,
            }],
            choice: ToolChoice::Required,
            parallel: true,
        };
        let got = c.get(&tools).unwrap().unwrap();
        assert_eq!(got.dropped.len(), 1);
        assert_eq!(got.dropped[0].param, "tools.f");
        // Lenient does not make an invalid schema valid.
        let invalid = Output::Schema {
            name: "s".into(),
            schema: json!({"type": 5}),
            strict: false,
            allow_refusal: false,
        };
        assert_eq!(
            c.get(&invalid).unwrap_err().status,
            axum::http::StatusCode::BAD_REQUEST
        );
    }
}
