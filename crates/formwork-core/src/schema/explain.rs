//! What a compile does with each keyword of a schema: enforced (and how), an annotation, or
//! refused (with the reason), each at its JSON pointer — `formwork compile --explain`.
//!
//! The verdicts come from the compiler itself: the schema is compiled in lenient mode, whose
//! warnings are exactly the refusals (the compiler never drops a keyword silently), and every
//! other validation keyword was enforced. What this module adds is the walk over the document
//! that lists every keyword at its pointer and a sentence saying *how* each kind of keyword is
//! enforced; for a string node's `pattern`/`format`/length keywords it asks the lexeme builder
//! which form the node gets (one regex, or the pattern times a code-point counter). Keywords
//! under a refused keyword are reported as not enforced. Costs: one lenient compile plus one
//! walk of the document.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::compile::compile;
use super::error::{display_pointer, SchemaError};
use super::ir::StringSchema;
use super::options::{CompileOptions, PropertyOrder};
use super::pointer;
use super::regexes;

/// What the compiler does with one keyword.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome {
    /// Enforced exactly; the text says how.
    Enforced(String),
    /// Not a constraint: an annotation, an identifier or an unknown keyword.
    Annotation(String),
    /// Refused: the compile fails on it (or drops it in lenient mode); the reason.
    Refused(String),
    /// Inside a refused keyword, so not enforced either; names it.
    NotReached(String),
}

/// One keyword occurrence and its outcome.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeywordReport {
    /// The JSON pointer of the schema node holding the keyword (`#` for the root).
    pub pointer: String,
    /// The keyword.
    pub keyword: String,
    /// What the compiler does with it.
    pub outcome: Outcome,
}

/// The per-keyword report of one schema under one set of options.
#[derive(Clone, Debug)]
pub struct Explanation {
    /// Every keyword of the document, in document order.
    pub keywords: Vec<KeywordReport>,
    /// An error no keyword outcome explains (invalid schema, unsatisfiable, a size limit):
    /// the compile fails with it even in lenient mode.
    pub error: Option<SchemaError>,
}

impl Explanation {
    /// Whether a compile under the options (lenient or not) succeeds.
    pub fn compiles(&self, lenient: bool) -> bool {
        self.error.is_none()
            && (lenient
                || !self
                    .keywords
                    .iter()
                    .any(|k| matches!(k.outcome, Outcome::Refused(_))))
    }
}

/// Explains how `schema` compiles under `opts` (see the module doc).
pub fn explain(schema: &Value, opts: &CompileOptions) -> Explanation {
    let mut lenient = opts.clone();
    lenient.lenient = true;
    let mut refused: BTreeMap<(String, String), String> = BTreeMap::new();
    let mut error = None;
    let mut note = |e: SchemaError| match e {
        SchemaError::Unsupported {
            keyword,
            pointer,
            detail,
        } => {
            refused.insert((pointer, keyword), detail);
        }
        SchemaError::RemoteRef { reference, pointer } => {
            refused.insert(
                (pointer, "$ref".into()),
                format!("remote reference `{reference}` is not in the registry"),
            );
        }
        other => error = Some(other),
    };
    match compile(schema, &lenient) {
        Ok(c) => c.warnings.into_iter().for_each(&mut note),
        Err(e) => note(e),
    }
    let mut walker = Walker {
        opts,
        refused,
        out: Vec::new(),
    };
    walker.node(schema, "", None);
    // Refusals at places the walk does not visit (a registry document): listed too.
    let rest = std::mem::take(&mut walker.refused);
    for ((pointer, keyword), detail) in rest {
        walker.out.push(KeywordReport {
            pointer,
            keyword,
            outcome: Outcome::Refused(detail),
        });
    }
    Explanation {
        keywords: walker.out,
        error,
    }
}

struct Walker<'o> {
    opts: &'o CompileOptions,
    /// Refusals not yet matched to a keyword of the walk: (pointer as displayed, keyword).
    refused: BTreeMap<(String, String), String>,
    out: Vec<KeywordReport>,
}

/// Keywords that take one subschema.
const ONE_SCHEMA: &[&str] = &[
    "additionalProperties",
    "additionalItems",
    "unevaluatedProperties",
    "unevaluatedItems",
    "not",
    "if",
    "then",
    "else",
    "contains",
    "propertyNames",
    "items",
];
/// Keywords that take an array of subschemas.
const SCHEMA_ARRAY: &[&str] = &["allOf", "anyOf", "oneOf", "prefixItems", "items"];
/// Keywords that take a map of subschemas.
const SCHEMA_MAP: &[&str] = &[
    "properties",
    "patternProperties",
    "$defs",
    "definitions",
    "dependentSchemas",
    "dependencies",
];
/// Keywords that never constrain an instance.
const ANNOTATIONS: &[&str] = &[
    "title",
    "description",
    "default",
    "examples",
    "$comment",
    "deprecated",
    "readOnly",
    "writeOnly",
    "contentEncoding",
    "contentMediaType",
    "contentSchema",
    "$schema",
    "$id",
    "id",
    "$anchor",
    "$dynamicAnchor",
    "$recursiveAnchor",
    "$vocabulary",
];

impl Walker<'_> {
    /// Reports the keywords of the node at `ptr`; `under` names a refused keyword above it.
    fn node(&mut self, v: &Value, ptr: &str, under: Option<&str>) {
        let Value::Object(m) = v else {
            return;
        };
        let shown = display_pointer(ptr);
        for (k, sub) in m {
            let kptr = pointer::push(ptr, k);
            // Refusals name the node (`pattern` at /properties/a) or, for combinators, the
            // keyword's own location (`oneOf` at /oneOf).
            let refusal = self
                .refused
                .remove(&(shown.clone(), k.clone()))
                .or_else(|| self.refused.remove(&(display_pointer(&kptr), k.clone())));
            let outcome = match (under, refusal) {
                (Some(above), _) => Outcome::NotReached(format!("inside refused {above}")),
                (None, Some(detail)) => Outcome::Refused(if detail.is_empty() {
                    "not enforced exactly".into()
                } else {
                    detail
                }),
                (None, None) => self.outcome(k, m),
            };
            let refused_here = matches!(outcome, Outcome::Refused(_));
            self.out.push(KeywordReport {
                pointer: shown.clone(),
                keyword: k.clone(),
                outcome,
            });
            let here = format!("`{k}` at {shown}");
            let below = under.or(refused_here.then_some(here.as_str()));
            match sub {
                Value::Object(children) if SCHEMA_MAP.contains(&k.as_str()) => {
                    for (name, child) in children {
                        self.node(child, &pointer::push(&kptr, name), below);
                    }
                }
                Value::Array(items) if SCHEMA_ARRAY.contains(&k.as_str()) => {
                    for (i, child) in items.iter().enumerate() {
                        self.node(child, &format!("{kptr}/{i}"), below);
                    }
                }
                Value::Object(_) if ONE_SCHEMA.contains(&k.as_str()) => {
                    self.node(sub, &kptr, below);
                }
                _ => {}
            }
        }
    }

    /// The outcome of keyword `k` of node `m`, which the compiler did not refuse.
    fn outcome(&self, k: &str, m: &Map<String, Value>) -> Outcome {
        let enforced = |s: &str| Outcome::Enforced(s.to_string());
        match k {
            _ if ANNOTATIONS.contains(&k) => Outcome::Annotation("annotation or identifier".into()),
            "format" if !self.opts.assert_format => Outcome::Annotation(
                "annotation (not asserted; compile option `assert_format: true` enforces it)"
                    .into(),
            ),
            "pattern" | "format" | "minLength" | "maxLength" => self.string_outcome(m),
            "type" => enforced("the grammar offers only values of the listed types"),
            "enum" | "const" => enforced(
                "literal alternatives: the listed values that also satisfy the node's other \
                 keywords",
            ),
            "properties" => Outcome::Enforced(format!(
                "object rule over the listed keys ({}), each value by its schema",
                match self.opts.property_order {
                    PropertyOrder::Schema => "in schema order".to_string(),
                    PropertyOrder::Any => "in any order, each at most once".to_string(),
                    PropertyOrder::Window(w) => format!("in any order within a window of {w}"),
                }
            )),
            "required" => enforced("the object rule closes only after every required key"),
            "additionalProperties" | "patternProperties" | "propertyNames" => enforced(
                "key lexemes: names matching the key constraint (other names excepted), each \
                 value by its schema",
            ),
            "minProperties" | "maxProperties" | "dependentRequired" | "dependentSchemas"
            | "dependencies" => enforced("counted or tracked in the object rule"),
            "items" | "prefixItems" | "additionalItems" => {
                enforced("array rule: positional items, then repeated items by their schema")
            }
            "minItems" | "maxItems" => enforced("counted repetition in the array rule"),
            "contains" | "minContains" | "maxContains" => {
                enforced("array rule counting the items that match")
            }
            "uniqueItems" => enforced("items from a finite set, each at most once"),
            "minimum" | "maximum" | "exclusiveMinimum" | "exclusiveMaximum" | "multipleOf" => {
                enforced("number lexeme: exact digit-level regex (no floating point)")
            }
            "allOf" => enforced("intersected into one schema by the schema algebra"),
            "anyOf" => enforced("union of the branches"),
            "oneOf" => enforced("union of branches proven disjoint (exactly one matches)"),
            "not" => enforced("complemented exactly by the schema algebra"),
            "if" | "then" | "else" => enforced("lowered as (if and then) or (not if and else)"),
            "$ref" => enforced("rule reference to the target (recursion allowed)"),
            "$defs" | "definitions" => enforced("definitions: enforced where referenced"),
            _ => Outcome::Annotation("unknown keyword".into()),
        }
    }

    /// How a string node's `pattern`, `format` and length keywords are enforced together.
    fn string_outcome(&self, m: &Map<String, Value>) -> Outcome {
        let s = StringSchema {
            min_len: m.get("minLength").and_then(Value::as_u64).unwrap_or(0),
            max_len: m.get("maxLength").and_then(Value::as_u64),
            pattern: m.get("pattern").and_then(Value::as_str).map(str::to_string),
            format: m
                .get("format")
                .and_then(Value::as_str)
                .filter(|_| self.opts.assert_format)
                .map(str::to_string),
            exclude: Vec::new(),
        };
        let how = match regexes::string_lexeme_exact(&s) {
            Ok(l) if l.outside_lengths.is_some() => {
                "string lexeme: the pattern's automaton times a code-point counter (strings of \
                 other lengths excepted; a prefix is live only if a completion within the \
                 bounds exists)"
            }
            Ok(_) if s.pattern.is_none() && s.format.is_none() => {
                "string lexeme: counted repetition of JSON characters (code points)"
            }
            Ok(_) => "string lexeme: one regex over the JSON encoding, bounds narrowed into it",
            // Combined with the node's other keywords (`allOf`, ...) the compiler built a
            // lexeme this node's keywords alone do not give.
            Err(_) => "string lexeme, combined with the constraints around it",
        };
        Outcome::Enforced(how.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn outcome_of<'e>(e: &'e Explanation, ptr: &str, kw: &str) -> &'e Outcome {
        &e.keywords
            .iter()
            .find(|k| k.pointer == ptr && k.keyword == kw)
            .unwrap_or_else(|| panic!("{kw} at {ptr} in {:?}", e.keywords))
            .outcome
    }

    #[test]
    fn keywords_are_enforced_refused_or_annotations() {
        let schema = json!({
            "type": "object",
            "title": "t",
            "properties": {
                "id": {"type": "string", "pattern": "^[a-z]+:[a-z]+:[a-z]+$", "maxLength": 20},
                "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": true},
                "n": {"not": {"type": "string", "pattern": "x"}},
                "x-note": {"x-vendor": 1}
            },
            "required": ["id"]
        });
        let e = explain(&schema, &CompileOptions::default());
        assert!(e.error.is_none(), "{:?}", e.error);
        assert!(matches!(
            outcome_of(&e, "#", "title"),
            Outcome::Annotation(_)
        ));
        assert!(matches!(
            outcome_of(&e, "#", "required"),
            Outcome::Enforced(_)
        ));
        match outcome_of(&e, "/properties/id", "maxLength") {
            Outcome::Enforced(how) => assert!(how.contains("code-point counter"), "{how}"),
            o => panic!("{o:?}"),
        }
        assert!(matches!(
            outcome_of(&e, "/properties/tags", "uniqueItems"),
            Outcome::Refused(_)
        ));
        assert!(matches!(
            outcome_of(&e, "/properties/x-note", "x-vendor"),
            Outcome::Annotation(_)
        ));
        assert!(!e.compiles(false) && e.compiles(true));
    }

    #[test]
    fn keywords_under_a_refused_keyword_are_not_reached() {
        let schema = json!({"type": "array", "items": {"type": "integer", "minimum": 1},
                            "uniqueItems": true, "contains": {"const": 1}});
        let e = explain(&schema, &CompileOptions::default());
        if let Outcome::Refused(_) = outcome_of(&e, "#", "uniqueItems") {
            assert!(matches!(
                outcome_of(&e, "/items", "minimum"),
                Outcome::Enforced(_)
            ));
        }
        // Overlapping `oneOf` branches: refused, and nothing inside them is enforced.
        let schema = json!({"oneOf": [{"type": "string", "maxLength": 3},
                                      {"type": "string", "pattern": "^a"}]});
        let e = explain(&schema, &CompileOptions::default());
        assert!(
            matches!(outcome_of(&e, "#", "oneOf"), Outcome::Refused(_)),
            "{:?}",
            e.keywords
        );
        assert!(matches!(
            outcome_of(&e, "/oneOf/0", "maxLength"),
            Outcome::NotReached(_)
        ));
    }

    #[test]
    fn a_hard_error_is_kept() {
        let e = explain(
            &json!({"type": "string", "minLength": "x"}),
            &Default::default(),
        );
        assert!(matches!(e.error, Some(SchemaError::Invalid { .. })));
        assert!(!e.compiles(true));
    }
}
