//! The compiler's entry point: [`compile`] (JSON Schema → [`Grammar`]) under
//! [`CompileOptions`] (`options`). Caching compiled grammars across requests is
//! [`crate::cache`]'s.
//!
//! Owns the pipeline order — load and index the document (`resolve`), lower it to the IR
//! (`lower`), emit rules (`emit`), build and check the grammar. Costs: one pass over the
//! document plus the algebra budget ([`MAX_WORK`](super::lower::lowerer::MAX_WORK)); typical schemas
//! compile in well under a millisecond.

use serde_json::Value;

use super::emit::Emitter;
use super::error::{display_pointer, SchemaError};
use super::lower::Lowerer;
use super::options::CompileOptions;
use super::resolve::{Document, Draft};
use crate::grammar::Grammar;

/// The result of [`compile`].
#[derive(Debug, Clone)]
pub struct CompiledSchema {
    /// The grammar: it accepts exactly the compact (or flexibly spaced) JSON texts of the
    /// schema's instances, properties in schema order.
    pub grammar: Grammar,
    /// Keywords that were not enforced (only in lenient mode).
    pub warnings: Vec<SchemaError>,
    /// The draft the document was read under.
    pub draft: Draft,
}

/// Compiles a JSON Schema into a grammar.
///
/// # Example
/// ```
/// use formwork_core::schema::{compile, CompileOptions};
/// let schema = serde_json::json!({
///     "type": "object",
///     "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
///     "required": ["name"],
///     "additionalProperties": false
/// });
/// let out = compile(&schema, &CompileOptions::default())?;
/// assert!(out.grammar.to_string().contains("\"name\""));
/// # Ok::<(), formwork_core::schema::SchemaError>(())
/// ```
pub fn compile(schema: &Value, opts: &CompileOptions) -> Result<CompiledSchema, SchemaError> {
    let doc = Document::with_registry(schema.clone(), opts.default_draft, &opts.registry)?;
    let mut low = Lowerer::new(&doc, opts);
    let root = low.lower(doc.root(), "", &doc.root_base())?;
    let mut em = Emitter::new(&mut low, opts);
    let Some(sym) = em.emit(&root, "")? else {
        // Name the node that has no value (a required property's, say), not only the root.
        let (pointer, reason) = match (&root, em.unsat.take()) {
            (crate::schema::ir::Schema::Unsat(r), _) => ("#".to_string(), r.clone()),
            (_, Some((p, why))) => (display_pointer(&p), why),
            _ => (
                "#".to_string(),
                "no value satisfies every constraint".to_string(),
            ),
        };
        return Err(SchemaError::Unsatisfiable { pointer, reason });
    };
    let mut b = std::mem::take(&mut em.b);
    let start = b.fresh_rule("start", vec![vec![sym]]);
    drop(em);
    let grammar = match b.build(start) {
        Ok(g) => g,
        Err(crate::grammar::GrammarError::EmptyLanguage { .. }) => {
            return Err(SchemaError::Unsatisfiable {
                pointer: "#".into(),
                reason: "no finite value satisfies every constraint".into(),
            })
        }
        Err(e) => return Err(e.into()),
    };
    if grammar.size() > opts.max_grammar_size {
        return Err(SchemaError::LimitExceeded {
            what: "grammar size".into(),
            limit: opts.max_grammar_size,
            given: grammar.size(),
        });
    }
    Ok(CompiledSchema {
        grammar,
        warnings: low.warnings,
        draft: doc.draft(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::reference::Acceptor;
    use proptest::prelude::*;
    use serde_json::json;

    #[test]
    fn lenient_turns_refusals_into_warnings() {
        let s = json!({"type": "object", "unevaluatedProperties": false});
        let e = compile(&s, &CompileOptions::default()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "unsupported keyword `unevaluatedProperties` at /unevaluatedProperties"
        );
        let opts = CompileOptions {
            lenient: true,
            ..Default::default()
        };
        let c = compile(&s, &opts).unwrap();
        assert_eq!(c.warnings.len(), 1);
    }

    #[test]
    fn a_grounded_marker_is_refused_not_dropped() {
        // Grounding needs the document; compiled alone, the marker would be an ignored `x-`
        // keyword and the value ungrounded (fail open).
        let s = json!({"properties": {"q": {"type": "string", "x-grounded": true},
                                      "r": {"type": "string", "x-grounded": false, "x-note": 1}}});
        let e = compile(&s, &CompileOptions::default()).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("unsupported keyword `x-grounded` at /properties/q/x-grounded"),
            "{e}"
        );
        // Inside a `const` it is data, not a marker.
        let c = json!({"const": {"x-grounded": true}});
        compile(&c, &CompileOptions::default()).expect("a const value");
    }

    #[test]
    fn unknown_formats_are_no_constraint_unless_strict() {
        let s = json!({"type": "object", "properties": {"u": {"type": "string", "format": "url"}}});
        let c = compile(&s, &CompileOptions::default()).expect("unknown format ignored");
        assert!(c.warnings.is_empty());
        let strict = CompileOptions {
            strict_format: true,
            ..Default::default()
        };
        let e = compile(&s, &strict).unwrap_err();
        assert_eq!(e.category(), "unsupported:format");
        assert!(e.to_string().contains("/properties/u/format"), "{e}");
    }

    #[test]
    fn unsupported_errors_carry_the_pointer() {
        let s = json!({"$defs": {"Foo": {"type": "array", "items": {"type": "string"}, "uniqueItems": true}},
                       "$ref": "#/$defs/Foo"});
        match compile(&s, &CompileOptions::default()).unwrap_err() {
            SchemaError::Unsupported {
                keyword, pointer, ..
            } => {
                assert_eq!(keyword, "uniqueItems");
                assert_eq!(pointer, "/$defs/Foo");
            }
            e => panic!("unexpected {e}"),
        }
    }

    /// Regression (session 2 CLI test): a nested `pattern` with lookahead was refused at `#`
    /// (the emitter's pointer), not where it occurs.
    #[test]
    fn nested_pattern_refusal_carries_its_pointer() {
        let s = json!({"type": "object",
                       "properties": {"code": {"type": "string", "pattern": "^(?=A)[A-Z]+$"}}});
        match compile(&s, &CompileOptions::default()).unwrap_err() {
            SchemaError::Unsupported {
                keyword, pointer, ..
            } => {
                assert_eq!(keyword, "pattern");
                assert_eq!(pointer, "/properties/code/pattern");
            }
            e => panic!("unexpected {e}"),
        }
        // Lenient: a warning with the same pointer, and the pattern is not enforced.
        let lenient = CompileOptions {
            lenient: true,
            ..Default::default()
        };
        let out = compile(&s, &lenient).unwrap();
        assert_eq!(out.warnings.len(), 1);
        assert!(out.warnings[0]
            .to_string()
            .contains("/properties/code/pattern"));
    }

    #[test]
    fn adversarial_schemas_end_in_a_result() {
        // Deep nesting.
        let mut deep = json!({"type": "integer"});
        for _ in 0..500 {
            deep = json!({"type": "array", "items": deep});
        }
        let r = std::thread::Builder::new()
            .stack_size(64 << 20)
            .spawn(move || compile(&deep, &CompileOptions::default()).map(|_| ()))
            .unwrap()
            .join()
            .unwrap();
        assert!(matches!(r, Err(SchemaError::LimitExceeded { .. })), "{r:?}");
        // Huge enum: compiled, and it is the enum (first, middle and last values in, near
        // misses out), not some grammar that merely compiled.
        let big: Vec<Value> = (0..20_000).map(|i| json!(format!("v{i}"))).collect();
        let g = compile(&json!({"enum": big}), &CompileOptions::default())
            .unwrap()
            .grammar;
        let mut a = Acceptor::new(&g).unwrap();
        for yes in [r#""v0""#, r#""v12345""#, r#""v19999""#] {
            assert!(a.accepts(yes.as_bytes()).is_ok(), "{yes} rejected");
        }
        for no in [
            r#""v20000""#,
            r#""v""#,
            r#""v01""#,
            r#""x1""#,
            "0",
            r#"["v0"]"#,
        ] {
            assert!(a.accepts(no.as_bytes()).is_err(), "{no} accepted");
        }
        // Huge maxLength: a clear limit error, or a grammar that is the bound (a long string
        // in, a non-string out).
        let r = compile(
            &json!({"type": "string", "maxLength": 1_000_000}),
            &CompileOptions::default(),
        );
        match r {
            Err(SchemaError::LimitExceeded { .. }) => {}
            Ok(c) => {
                let mut a = Acceptor::new(&c.grammar).unwrap();
                let long = format!("\"{}\"", "x".repeat(300));
                assert!(a.accepts(long.as_bytes()).is_ok());
                assert!(a.accepts(b"1").is_err());
            }
            Err(e) => panic!("unexpected {e}"),
        }
        // oneOf explosion.
        let branches: Vec<Value> = (0..40)
            .map(|i| json!({"required": [format!("k{i}")]}))
            .collect();
        let r = compile(
            &json!({"type": "object", "oneOf": branches}),
            &CompileOptions::default(),
        );
        assert!(r.is_err());
    }

    /// Bounds no number satisfies (issue 20): the number has no value, so a required
    /// property holding it makes the root unsatisfiable, with the error naming the property
    /// (it compiled to a key whose value lexeme matched nothing: `{"a":` could be generated
    /// and never finished), an optional one is left out, and an untyped node keeps its other
    /// types. No built grammar has a lexeme that matches nothing.
    #[test]
    fn bounds_no_number_satisfies_have_no_value() {
        let empty_lexemes = |g: &Grammar| {
            g.lexeme_hirs()
                .iter()
                .filter(|h| h.properties().minimum_len().is_none())
                .count()
        };
        let opts = CompileOptions::default();
        for (schema, pointer) in [
            (json!({"type": "integer", "minimum": 10, "maximum": 5}), "#"),
            (
                json!({"type": "object", "required": ["a"],
                       "properties": {"a": {"type": "integer", "minimum": 10, "maximum": 5}}}),
                "/properties/a",
            ),
            (
                json!({"type": "object", "required": ["b"],
                       "properties": {"b": {"type": "number", "exclusiveMinimum": 3, "maximum": 3}}}),
                "/properties/b",
            ),
            (
                json!({"properties": {"m": {"properties": {"n": {"type": "integer",
                       "minimum": 1, "maximum": 4, "multipleOf": 5}}, "required": ["n"],
                       "type": "object"}}, "required": ["m"], "type": "object"}),
                "/properties/m/properties/n",
            ),
        ] {
            match compile(&schema, &opts) {
                Err(SchemaError::Unsatisfiable { pointer: p, reason }) => {
                    assert_eq!(p, pointer, "{schema}: {reason}");
                    assert!(reason.contains("no number"), "{schema}: {reason}");
                }
                other => panic!("{schema}: {other:?}"),
            }
        }
        let optional = json!({"type": "object",
            "properties": {"a": {"type": "integer", "minimum": 10, "maximum": 5}, "b": {"type": "integer"}}});
        let g = compile(&optional, &opts).unwrap().grammar;
        assert_eq!(empty_lexemes(&g), 0, "{g}");
        let mut a = Acceptor::new(&g).unwrap();
        for yes in [r#"{}"#, r#"{"b":1}"#, r#"{"c":[]}"#] {
            assert!(a.accepts(yes.as_bytes()).is_ok(), "{yes} rejected");
        }
        for no in [r#"{"a":7}"#, r#"{"a":10}"#, r#"{"b":1,"a":5}"#] {
            assert!(a.accepts(no.as_bytes()).is_err(), "{no} accepted");
        }
        let untyped = compile(&json!({"minimum": 10, "maximum": 5}), &opts)
            .unwrap()
            .grammar;
        assert_eq!(empty_lexemes(&untyped), 0, "{untyped}");
        let mut a = Acceptor::new(&untyped).unwrap();
        for yes in ["null", r#""x""#, "[1]", "true"] {
            assert!(a.accepts(yes.as_bytes()).is_ok(), "{yes} rejected");
        }
        for no in ["7", "10", "5"] {
            assert!(a.accepts(no.as_bytes()).is_err(), "{no} accepted");
        }
    }

    /// The grammar-size limit stops the compile at the node to blame and names it (issue 20):
    /// the object whose count states blow the limit, not the root, nor the small property
    /// after it; many small siblings name their parent.
    #[test]
    fn grammar_size_limit_names_the_node() {
        let props: serde_json::Map<String, Value> = (0..40)
            .map(|i| (format!("p{i}"), json!({"type": "integer"})))
            .collect();
        let schema = json!({"type": "object", "properties": {
            "small": {"type": "string"},
            "big": {"type": "object", "properties": props, "maxProperties": 40},
            "after": {"type": "integer"}
        }});
        let opts = CompileOptions {
            max_grammar_size: 20_000,
            ..Default::default()
        };
        let e = compile(&schema, &opts).unwrap_err();
        let SchemaError::LimitExceeded { what, limit, given } = &e else {
            panic!("{e}");
        };
        assert_eq!(*limit, 20_000);
        assert!(*given > 20_000);
        assert!(
            what.starts_with("grammar size (the schema at /properties/big adds "),
            "{e}"
        );
        // Within the limit, it compiles.
        let roomy = CompileOptions {
            max_grammar_size: 2_000_000,
            ..opts.clone()
        };
        assert!(compile(&schema, &roomy).is_ok());
        // Many small siblings: their parent is named.
        let many: serde_json::Map<String, Value> = (0..3000)
            .map(|i| {
                (
                    format!("k{i}"),
                    json!({"type": "object", "properties": {"x": {"type": "integer"}}}),
                )
            })
            .collect();
        let schema = json!({"properties": {"wrap": {"properties": many}}});
        let opts = CompileOptions {
            max_grammar_size: 5_000,
            ..Default::default()
        };
        let e = compile(&schema, &opts).unwrap_err().to_string();
        assert!(
            e.contains("grammar size (the schema at /properties/wrap adds "),
            "{e}"
        );
        // A schema made to explode: twenty objects of 100 optional properties under
        // `maxProperties` (~10,000 count states, ~170,000 symbols each). The compile stops at
        // the second, which passes the limit, instead of building all twenty (~3.4M symbols)
        // and checking the size after.
        let counted = json!({"type": "object", "maxProperties": 100, "properties":
            (0..100).map(|i| (format!("p{i}"), json!({"type": "integer"})))
                .collect::<serde_json::Map<String, Value>>()});
        let schema = json!({"type": "object", "properties":
            (0..20).map(|i| (format!("o{i}"), counted.clone()))
                .collect::<serde_json::Map<String, Value>>()});
        let opts = CompileOptions {
            max_grammar_size: 200_000,
            ..Default::default()
        };
        let e = compile(&schema, &opts).unwrap_err();
        let SchemaError::LimitExceeded { what, given, .. } = &e else {
            panic!("{e}");
        };
        assert!(
            what.starts_with("grammar size (the schema at /properties/o1 adds "),
            "{e}"
        );
        assert!(
            *given < 400_000,
            "built past the limit before stopping: {e}"
        );
    }

    /// The compile-time budget (issue 20) stops a long compile with a limit error naming
    /// compile time and the node it was at. The schema takes far more than the 1 ms budget on
    /// any machine (ten 40-property objects under `maxProperties`, ~50,000 symbols of count
    /// states each), so the outcome does not depend on load; with the default budget it
    /// compiles.
    #[test]
    fn compile_time_budget_names_what_ran_out() {
        let objs: Vec<Value> = (0..10)
            .map(|i| {
                let props: serde_json::Map<String, Value> = (0..40)
                    .map(|j| (format!("p{i}_{j}"), json!({"type": "integer"})))
                    .collect();
                json!({"type": "object", "properties": props, "maxProperties": 40})
            })
            .collect();
        let schema = json!({"anyOf": objs});
        let opts = CompileOptions {
            max_compile_ms: 1,
            ..Default::default()
        };
        let e = compile(&schema, &opts).unwrap_err();
        let SchemaError::LimitExceeded { what, limit, given } = &e else {
            panic!("{e}");
        };
        assert_eq!(*limit, 1);
        assert!(*given > 1, "{e}");
        assert!(what.starts_with("compile time in ms (at "), "{e}");
        let roomy = CompileOptions {
            max_compile_ms: CompileOptions::default().max_compile_ms,
            ..opts
        };
        if let Err(e) = compile(&schema, &roomy) {
            panic!("{e}");
        }
    }

    fn arb_schema() -> impl Strategy<Value = Value> {
        let kw = prop::sample::select(vec![
            "type",
            "enum",
            "const",
            "$ref",
            "allOf",
            "anyOf",
            "oneOf",
            "not",
            "if",
            "then",
            "else",
            "minimum",
            "maximum",
            "exclusiveMinimum",
            "multipleOf",
            "minLength",
            "maxLength",
            "pattern",
            "format",
            "items",
            "prefixItems",
            "minItems",
            "maxItems",
            "contains",
            "uniqueItems",
            "properties",
            "patternProperties",
            "additionalProperties",
            "required",
            "minProperties",
            "maxProperties",
            "propertyNames",
            "dependentRequired",
            "dependencies",
            "$defs",
            "a",
            "b",
        ]);
        let leaf = prop_oneof![
            Just(json!(null)),
            any::<bool>().prop_map(Value::Bool),
            (-5i64..50).prop_map(|n| json!(n)),
            prop::sample::select(vec![
                "string",
                "integer",
                "object",
                "array",
                "a",
                "#",
                "#/$defs/a",
                "^x"
            ])
            .prop_map(|s| json!(s)),
        ];
        leaf.prop_recursive(5, 64, 6, move |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::vec((kw.clone(), inner), 0..5).prop_map(|kvs| {
                    Value::Object(kvs.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
                }),
            ]
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]
        /// The compiler's fuzz target: arbitrary JSON in, a result or an error out, within the
        /// compiler's work bound. The bound is the grammar size (`max_grammar_size`, here lowered
        /// to 50,000 symbols so that it binds), not wall time: a time bound made the outcome
        /// depend on machine load. A hang is still a failure (the test never ends).
        #[test]
        fn arbitrary_json_never_panics(schema in arb_schema()) {
            let opts = CompileOptions { max_grammar_size: 50_000, ..Default::default() };
            if let Ok(c) = compile(&schema, &opts) {
                prop_assert!(
                    c.grammar.size() <= opts.max_grammar_size,
                    "grammar of {} symbols over the bound: {schema}",
                    c.grammar.size()
                );
            }
        }
    }
}
