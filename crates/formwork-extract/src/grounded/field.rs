//! One grounded field's own constraints ([`GroundedField`]): a string's `pattern`, `format`,
//! `const`/`enum` as full-match DFAs over the decoded value plus its length bounds, or a
//! number's numeric keywords; any other assertion keyword is refused by name.

use regex_automata::dfa::{dense, Automaton, StartKind};
use regex_automata::util::start;
use regex_automata::Anchored;
use serde_json::Value;

use formwork_core::schema::{pointer, regex};

use crate::ExtractError;

/// The largest DFA (bytes) one grounded field's `pattern`, `format` or `const`/`enum` may
/// compile to, and the determinization budget for building it. The same 4 MiB as the schema
/// compiler's product checks; `format: date` is a few kB, an email address ~1 MB.
const MAX_FIELD_DFA_BYTES: usize = 4 << 20;

/// Schema keywords a grounded string may carry that assert nothing about its value.
const ANNOTATIONS: &[&str] = &[
    "type",
    "x-grounded",
    "title",
    "description",
    "default",
    "examples",
    "$comment",
    "$id",
    "$anchor",
    "$schema",
    "deprecated",
    "readOnly",
    "writeOnly",
    "contentEncoding",
    "contentMediaType",
];

/// One grounded field's own string constraints: what its value must satisfy besides being a
/// quote of the document. Built by [`mark_grounded`] from the keywords it replaces.
#[derive(Clone)]
pub struct GroundedField {
    /// JSON pointer of the field's schema (into the original schema).
    pub(super) pointer: String,
    /// The keywords enforced, for messages.
    pub(super) keywords: Vec<&'static str>,
    /// Anchored full-match DFAs over the decoded value's UTF-8 bytes; all must match.
    pub(super) dfas: Vec<dense::DFA<Vec<u32>>>,
    /// `minLength`, code points.
    pub(super) min_len: u64,
    /// `maxLength`, code points.
    pub(super) max_len: Option<u64>,
    /// For a grounded number or integer, its numeric keywords (`None` for a string).
    pub(super) number: Option<NumberField>,
}

/// The numeric keywords of a grounded `number` / `integer` field.
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct NumberField {
    integer: bool,
    minimum: Option<f64>,
    maximum: Option<f64>,
    exclusive_minimum: Option<f64>,
    exclusive_maximum: Option<f64>,
    multiple_of: Option<f64>,
    /// `const` / `enum`: the only values allowed.
    values: Option<Vec<f64>>,
}

impl NumberField {
    pub(super) fn accepts(&self, x: f64) -> bool {
        (!self.integer || x.fract() == 0.0)
            && self.minimum.is_none_or(|m| x >= m)
            && self.maximum.is_none_or(|m| x <= m)
            && self.exclusive_minimum.is_none_or(|m| x > m)
            && self.exclusive_maximum.is_none_or(|m| x < m)
            && self
                .multiple_of
                .is_none_or(|d| d > 0.0 && ((x / d) - (x / d).round()).abs() < 1e-9)
            && self.values.as_ref().is_none_or(|vs| vs.contains(&x))
    }
}

impl std::fmt::Debug for GroundedField {
    // The DFAs' own Debug prints every transition; the keywords say what they are.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroundedField")
            .field("pointer", &self.pointer)
            .field("keywords", &self.keywords)
            .field("min_len", &self.min_len)
            .field("max_len", &self.max_len)
            .field("number", &self.number)
            .finish_non_exhaustive()
    }
}

impl GroundedField {
    /// Reads the string keywords of the grounded schema `m` at `ptr`.
    pub(super) fn new(m: &serde_json::Map<String, Value>, ptr: &str) -> Result<Self, ExtractError> {
        let err = |kw: &str, message: String| ExtractError::Grounded {
            pointer: pointer::push(ptr, kw),
            message,
        };
        let mut field = GroundedField {
            pointer: if ptr.is_empty() {
                "/".into()
            } else {
                ptr.into()
            },
            keywords: Vec::new(),
            dfas: Vec::new(),
            min_len: 0,
            max_len: None,
            number: None,
        };
        for (k, v) in m {
            let kw: &'static str = match k.as_str() {
                "pattern" => "pattern",
                "format" => "format",
                "minLength" => "minLength",
                "maxLength" => "maxLength",
                "const" => "const",
                "enum" => "enum",
                k if ANNOTATIONS.contains(&k) || k.starts_with("x-") => continue,
                other => {
                    return Err(err(
                        other,
                        format!(
                            "`{other}` cannot be enforced on a grounded string (a grounded \
                             value takes `pattern`, `format`, `minLength`, `maxLength`, `const` \
                             and `enum`); remove it or the grounding"
                        ),
                    ))
                }
            };
            let decoded = match kw {
                "pattern" => {
                    let p = v
                        .as_str()
                        .ok_or_else(|| err(kw, "`pattern` must be a string".into()))?;
                    regex::search_regex(p).map_err(|e| err(kw, e.to_string()))?
                }
                "format" => {
                    let f = v
                        .as_str()
                        .ok_or_else(|| err(kw, "`format` must be a string".into()))?;
                    if !regex::is_known_format(f) {
                        // As the schema compiler refuses it: an unknown format cannot be
                        // asserted, and silently accepting any span would be the bug again.
                        return Err(err(kw, format!("unknown format `{f}`")));
                    }
                    regex::format_decoded(f).map_err(|e| err(kw, e.to_string()))?
                }
                "minLength" | "maxLength" => {
                    let n = v
                        .as_u64()
                        .ok_or_else(|| err(kw, format!("`{kw}` must be a non-negative integer")))?;
                    if kw == "minLength" {
                        field.min_len = n;
                    } else {
                        field.max_len = Some(n);
                    }
                    field.keywords.push(kw);
                    continue;
                }
                _ => {
                    // `const` / `enum`: only string members can be a string's value.
                    let values: Vec<&Value> = match (kw, v) {
                        ("const", v) => vec![v],
                        (_, Value::Array(xs)) => xs.iter().collect(),
                        _ => return Err(err(kw, "`enum` must be an array".into())),
                    };
                    let alts: Vec<String> = values
                        .iter()
                        .filter_map(|v| v.as_str())
                        .map(regex_syntax::escape)
                        .collect();
                    if alts.is_empty() {
                        regex::NOTHING.to_string()
                    } else {
                        alts.join("|")
                    }
                }
            };
            let dfa = dense::Builder::new()
                .configure(
                    dense::Config::new()
                        .start_kind(StartKind::Anchored)
                        .dfa_size_limit(Some(MAX_FIELD_DFA_BYTES))
                        .determinize_size_limit(Some(MAX_FIELD_DFA_BYTES)),
                )
                .build(&format!("^(?:{decoded})$"))
                .map_err(|e| {
                    err(
                        kw,
                        format!("cannot build the automaton of `{kw}` (limit 4 MiB): {e}"),
                    )
                })?;
            field.dfas.push(dfa);
            field.keywords.push(kw);
        }
        Ok(field)
    }

    /// Reads the numeric keywords of the grounded number or integer schema `m` at `ptr`.
    pub(super) fn number(
        m: &serde_json::Map<String, Value>,
        ptr: &str,
    ) -> Result<Self, ExtractError> {
        let err = |kw: &str, message: String| ExtractError::Grounded {
            pointer: pointer::push(ptr, kw),
            message,
        };
        let integer = m.get("type").and_then(Value::as_str) == Some("integer");
        let mut n = NumberField {
            integer,
            ..NumberField::default()
        };
        let mut keywords = vec![if integer { "integer" } else { "number" }];
        for (k, v) in m {
            let num = |v: &Value| {
                v.as_f64()
                    .ok_or_else(|| err(k, format!("`{k}` must be a number")))
            };
            let kw: &'static str = match k.as_str() {
                "type" => continue,
                "minimum" => {
                    n.minimum = Some(num(v)?);
                    "minimum"
                }
                "maximum" => {
                    n.maximum = Some(num(v)?);
                    "maximum"
                }
                "exclusiveMinimum" => {
                    n.exclusive_minimum = Some(num(v)?);
                    "exclusiveMinimum"
                }
                "exclusiveMaximum" => {
                    n.exclusive_maximum = Some(num(v)?);
                    "exclusiveMaximum"
                }
                "multipleOf" => {
                    n.multiple_of = Some(num(v)?);
                    "multipleOf"
                }
                "const" | "enum" => {
                    let values: Vec<&Value> = match v {
                        Value::Array(xs) if k == "enum" => xs.iter().collect(),
                        _ if k == "const" => vec![v],
                        _ => return Err(err(k, "`enum` must be an array".into())),
                    };
                    let mut keep: Vec<f64> = values.iter().filter_map(|v| v.as_f64()).collect();
                    if let Some(old) = &n.values {
                        keep.retain(|x| old.contains(x));
                    }
                    n.values = Some(keep);
                    if k == "const" {
                        "const"
                    } else {
                        "enum"
                    }
                }
                k if ANNOTATIONS.contains(&k) || k.starts_with("x-") => continue,
                other => {
                    return Err(err(
                        other,
                        format!(
                            "`{other}` cannot be enforced on a grounded number (a grounded \
                             number takes `minimum`, `maximum`, `exclusiveMinimum`, \
                             `exclusiveMaximum`, `multipleOf`, `const` and `enum`); remove it \
                             or the grounding"
                        ),
                    ))
                }
            };
            keywords.push(kw);
        }
        Ok(GroundedField {
            pointer: if ptr.is_empty() {
                "/".into()
            } else {
                ptr.into()
            },
            keywords,
            dfas: Vec::new(),
            min_len: 0,
            max_len: None,
            number: Some(n),
        })
    }

    /// Whether the field is a grounded number or integer (its values are numbers the document
    /// states, not quotes).
    pub fn is_number(&self) -> bool {
        self.number.is_some()
    }

    /// The field's JSON pointer into the original schema.
    pub fn pointer(&self) -> &str {
        &self.pointer
    }

    /// The keywords enforced on the field's value, in schema order.
    pub fn keywords(&self) -> &[&'static str] {
        &self.keywords
    }

    /// Whether the field asks nothing of its value beyond being a quote.
    pub fn is_plain(&self) -> bool {
        self.keywords.is_empty()
    }

    /// Whether the decoded value `s` satisfies the field's own keywords (lengths in code
    /// points). A reference for tests: the grammar enforces the same through
    /// [`GroundedDoc::add_field`].
    pub fn accepts(&self, s: &str) -> bool {
        let n = s.chars().count() as u64;
        n >= self.min_len
            && self.max_len.is_none_or(|m| n <= m)
            && self.dfas.iter().all(|d| {
                let Ok(mut q) = d.start_state(&start::Config::new().anchored(Anchored::Yes)) else {
                    return false;
                };
                for &b in s.as_bytes() {
                    q = d.next_state(q, b);
                }
                d.is_match_state(d.next_eoi_state(q))
            })
    }
}
