//! Grounded fields: string values that must be verbatim substrings of the input document,
//! and numbers that must be numbers the document states.
//!
//! Owns two steps. [`mark_grounded`] rewrites a schema before it is compiled: every string
//! schema marked `"x-grounded": true` (or named by a `--grounded` JSON pointer; a marked array
//! grounds its items) becomes a `const` placeholder whose lexeme is easy to find in the compiled
//! grammar, and its own string keywords (`pattern`, `format`, `minLength`, `maxLength`, `const`,
//! `enum`) are kept aside as a [`GroundedField`]. [`GroundedDoc::add_field`] then builds, for
//! one document, the grammar of the quotes that field may take, which
//! [`compose`](super::compose) puts where the placeholder lexemes were.
//!
//! # Whole-word spans, as rules, not a regex
//! A grounded value is a **whole-word span** of the document ([`SpanAutomaton`]): it starts
//! and ends at word boundaries, so `"Boo"` cannot be cut out of "Book a table". The set of
//! substrings of an n-character document has no small regex (an alternation of suffixes is
//! O(n²)), but its minimal DFA, the suffix automaton, has at most 2n states and 3n transitions;
//! the span automaton is its word-aligned counterpart, built by subset construction over
//! positions under a linear work budget (over it, e.g. a long and highly repetitive document,
//! grounding falls back to any non-empty substring through [`SuffixAutomaton`], and
//! [`GroundedDoc::whole_words`] says so, for the record to report). Each state becomes one
//! right-recursive rule `S_q ::= "" (if accepting) | c S_δ(q,c) | ...` over one-character
//! lexemes (JSON-escaped, so a quote in the document is `\"` in the output). The automaton is
//! deterministic, so the Earley parser carries one item per open level: cost O(quote length)
//! items per character, and the grammar is O(document length).
//!
//! # A grounded value also satisfies its field's schema
//! Replacing the field by a placeholder must not drop its own constraints. Each of `pattern`
//! (search semantics), `format` and `const`/`enum` is a regular language over the *decoded*
//! value, which is the raw document text of the span (escaping happens only in the emitted
//! lexemes), so each becomes a full-match DFA over UTF-8 bytes, built once per run; lengths
//! are counted in code points, which are the span automaton's characters. The field's rules are
//! the product of the document's automaton with those DFAs and a length counter, explored from
//! the start and trimmed to the states that can still reach acceptance (so no prefix the
//! grammar allows is a dead end). The intersection is exact. Costs: the product is explored
//! under a budget of 64 states per document character + 4096, and over it the field is an
//! error naming its pointer ([`ExtractError::Grounded`]); a DFA over 4 MiB is an error too.
//! Other assertion keywords on a grounded string (`not`, `anyOf`, `$ref`, ...) are refused
//! by name rather than dropped.
//!
//! # Grounded numbers
//! A grounded `number` or `integer` schema takes only a number the document states: digits
//! as written (`12`, `1,200` → 1200, `3.5`, `-4` where the minus sign starts the word) or a
//! number word (`zero` to `nineteen`, the tens, and compounds such as `twenty-five`, in any
//! letter case). The candidates are found once per document ([`document_numbers`]), kept when
//! they satisfy the field's own keywords (`type` integer, `minimum`, `maximum`, the exclusive
//! bounds, `multipleOf`, `const`, `enum`; others are refused by name), and the field's grammar
//! is the alternation of their JSON texts. A document with no candidate for the field gives a
//! rule with an empty language, as for a string no quote satisfies: an optional field is left
//! out, a required one is an error naming the field ([`ExtractError::Grounded`]). Dates and
//! enums are grounded as strings: a quote that must also satisfy `format: date` or the `enum`.
//! The schema compiler never sees the document, so it refuses an `x-grounded: true` it is
//! given (`formwork compile`, a server `response_format`) rather than read it as an unknown
//! `x-` annotation and emit ungrounded values; [`mark_grounded`] removes every marker it
//! handles before compiling. Grounding happens only here.
//!
//! Does not own validation: a grounded value is checked by [`is_grounded`] (a verbatim
//! substring) after generation (constrained output always passes; the baselines may not).
//!
//! May use: nothing else in the crate.

use std::collections::{BTreeMap, HashMap, VecDeque};

use regex_automata::dfa::{dense, Automaton, StartKind};
use regex_automata::util::primitives::StateID;
use regex_automata::util::start;
use regex_automata::Anchored;
use serde_json::Value;

use formwork_core::grammar::{GrammarBuilder, LexemeId, RuleId, Symbol};
use formwork_core::schema::{pointer, regex};

use super::ExtractError;

/// The marker inside a placeholder constant; followed by the field's number and `__`.
pub const PLACEHOLDER_PREFIX: &str = "__formwork_grounded_";

/// The placeholder constant for grounded field `n`.
pub fn placeholder(n: usize) -> String {
    format!("{PLACEHOLDER_PREFIX}{n}__")
}

/// A schema with its grounded string schemas replaced by placeholders.
#[derive(Clone, Debug)]
pub struct MarkedSchema {
    /// The schema to compile.
    pub schema: Value,
    /// JSON pointers (into the original schema) of the grounded string schemas, in placeholder
    /// order.
    pub pointers: Vec<String>,
    /// The grounded fields' own constraints, in placeholder order (`fields[n]` belongs to
    /// placeholder `n`).
    pub fields: Vec<GroundedField>,
}

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
    pointer: String,
    /// The keywords enforced, for messages.
    keywords: Vec<&'static str>,
    /// Anchored full-match DFAs over the decoded value's UTF-8 bytes; all must match.
    dfas: Vec<dense::DFA<Vec<u32>>>,
    /// `minLength`, code points.
    min_len: u64,
    /// `maxLength`, code points.
    max_len: Option<u64>,
    /// For a grounded number or integer, its numeric keywords (`None` for a string).
    number: Option<NumberField>,
}

/// The numeric keywords of a grounded `number` / `integer` field.
#[derive(Clone, Debug, Default, PartialEq)]
struct NumberField {
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
    fn accepts(&self, x: f64) -> bool {
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
    fn new(m: &serde_json::Map<String, Value>, ptr: &str) -> Result<Self, ExtractError> {
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
    fn number(m: &serde_json::Map<String, Value>, ptr: &str) -> Result<Self, ExtractError> {
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

/// Replaces grounded string schemas by `{"const": placeholder(n)}`, keeping each one's own
/// string keywords as [`MarkedSchema::fields`].
///
/// A schema is grounded when it has `"x-grounded": true` or its pointer is in `extra`
/// (`--grounded /properties/quote`). A grounded schema must be a string schema (`"type":
/// "string"`), or an array schema whose `items` then become grounded.
///
/// # Errors
/// [`ExtractError::Grounded`] when a pointer in `extra` names nothing, a grounded schema is
/// neither a string nor an array of strings, or it carries a keyword that cannot be enforced
/// on a quote (the pointer names the keyword); also for a bad `pattern`/`format` or one whose
/// automaton is over `MAX_FIELD_DFA_BYTES`.
pub fn mark_grounded(schema: &Value, extra: &[String]) -> Result<MarkedSchema, ExtractError> {
    let mut out = schema.clone();
    for p in extra {
        let target =
            out.pointer_mut(p.trim_start_matches('#'))
                .ok_or_else(|| ExtractError::Grounded {
                    pointer: p.clone(),
                    message: "no schema at this pointer".into(),
                })?;
        match target {
            Value::Object(m) => {
                m.insert("x-grounded".into(), Value::Bool(true));
            }
            _ => {
                return Err(ExtractError::Grounded {
                    pointer: p.clone(),
                    message: "not a schema object".into(),
                })
            }
        }
    }
    let mut fields = Vec::new();
    walk(&mut out, String::new(), &mut fields)?;
    Ok(MarkedSchema {
        schema: out,
        pointers: fields.iter().map(|f| f.pointer.clone()).collect(),
        fields,
    })
}

fn walk(v: &mut Value, ptr: String, found: &mut Vec<GroundedField>) -> Result<(), ExtractError> {
    match v {
        Value::Object(m) => {
            if m.get("x-grounded") == Some(&Value::Bool(true)) {
                let ty = m.get("type").and_then(Value::as_str);
                match ty {
                    Some("string") => {
                        let n = found.len();
                        found.push(GroundedField::new(m, &ptr)?);
                        *v = serde_json::json!({ "const": placeholder(n) });
                        return Ok(());
                    }
                    Some("number" | "integer") => {
                        let n = found.len();
                        found.push(GroundedField::number(m, &ptr)?);
                        *v = serde_json::json!({ "const": placeholder(n) });
                        return Ok(());
                    }
                    Some("array") => {
                        m.remove("x-grounded");
                        let items = m.get_mut("items").ok_or_else(|| ExtractError::Grounded {
                            pointer: ptr.clone(),
                            message: "a grounded array needs `items`".into(),
                        })?;
                        match items {
                            Value::Object(im) => {
                                im.insert("x-grounded".into(), Value::Bool(true));
                                if !im.contains_key("type") {
                                    im.insert("type".into(), Value::String("string".into()));
                                }
                            }
                            _ => {
                                return Err(ExtractError::Grounded {
                                    pointer: format!("{ptr}/items"),
                                    message: "a grounded array's `items` must be a schema".into(),
                                })
                            }
                        }
                    }
                    _ => {
                        return Err(ExtractError::Grounded {
                            pointer: if ptr.is_empty() { "/".into() } else { ptr },
                            message: "`x-grounded` applies to `\"type\": \"string\"`, \
                                      `\"number\"` and `\"integer\"` schemas or arrays of them"
                                .into(),
                        })
                    }
                }
            }
            for (k, child) in m.iter_mut() {
                // `const`, `enum`, `default` and `examples` hold instances, not schemas.
                if matches!(k.as_str(), "const" | "enum" | "default" | "examples") {
                    continue;
                }
                walk(child, pointer::push(&ptr, k), found)?;
            }
        }
        Value::Array(xs) => {
            for (i, child) in xs.iter_mut().enumerate() {
                walk(child, format!("{ptr}/{i}"), found)?;
            }
        }
        _ => {}
    }
    Ok(())
}

/// The number of a grounded placeholder named by a lexeme (by its name or regex), if any.
pub fn placeholder_index(text: &str) -> Option<usize> {
    let at = text.find(PLACEHOLDER_PREFIX)? + PLACEHOLDER_PREFIX.len();
    let rest = &text[at..];
    let end = rest.find("__")?;
    rest[..end].parse().ok()
}

/// The suffix automaton of a document's characters: the minimal DFA of its substrings.
#[derive(Clone, Debug)]
pub struct SuffixAutomaton {
    /// Per state: transitions by character (ordered, so grammars are reproducible).
    next: Vec<BTreeMap<char, u32>>,
    link: Vec<Option<u32>>,
    len: Vec<u32>,
}

impl SuffixAutomaton {
    /// Builds the automaton in O(n log σ) (the standard online construction).
    pub fn new(text: &str) -> Self {
        let mut sa = SuffixAutomaton {
            next: vec![BTreeMap::new()],
            link: vec![None],
            len: vec![0],
        };
        let mut last = 0u32;
        for c in text.chars() {
            let cur = sa.push(sa.len[last as usize] + 1, None);
            let mut p = Some(last);
            while let Some(q) = p {
                if sa.next[q as usize].contains_key(&c) {
                    break;
                }
                sa.next[q as usize].insert(c, cur);
                p = sa.link[q as usize];
            }
            match p {
                None => sa.link[cur as usize] = Some(0),
                Some(p) => {
                    let q = sa.next[p as usize][&c];
                    if sa.len[p as usize] + 1 == sa.len[q as usize] {
                        sa.link[cur as usize] = Some(q);
                    } else {
                        let clone = sa.push(sa.len[p as usize] + 1, sa.link[q as usize]);
                        sa.next[clone as usize] = sa.next[q as usize].clone();
                        let mut pp = Some(p);
                        while let Some(x) = pp {
                            if sa.next[x as usize].get(&c) != Some(&q) {
                                break;
                            }
                            sa.next[x as usize].insert(c, clone);
                            pp = sa.link[x as usize];
                        }
                        sa.link[q as usize] = Some(clone);
                        sa.link[cur as usize] = Some(clone);
                    }
                }
            }
            last = cur;
        }
        sa
    }

    fn push(&mut self, len: u32, link: Option<u32>) -> u32 {
        self.next.push(BTreeMap::new());
        self.link.push(link);
        self.len.push(len);
        (self.next.len() - 1) as u32
    }

    /// Number of states (at most 2n for n ≥ 2 characters).
    pub fn states_len(&self) -> usize {
        self.next.len()
    }

    /// Whether `s` is a substring of the text (every state is accepting).
    pub fn contains(&self, s: &str) -> bool {
        run(&self.next, s).is_some()
    }
}

/// The state a DFA given as per-state transition maps reaches on `s` from state 0, if any.
fn run(next: &[BTreeMap<char, u32>], s: &str) -> Option<u32> {
    s.chars()
        .try_fold(0u32, |q, c| next[q as usize].get(&c).copied())
}

/// The DFA of a document's **whole-word spans**: the non-empty substrings that start and end
/// at word boundaries (never inside a run of alphanumeric characters) and neither start nor
/// end with whitespace. A quote then never cuts a word (`"Boo"` out of "Book a table"), which
/// is what an extracted value or a piece of evidence is.
///
/// Built by subset construction over document positions: a state is the set of positions where
/// the span read so far can end, among occurrences that start at a word start; it accepts when
/// one of them is at a word end. Documents where this would exceed a work budget (long, highly
/// repetitive text) get `None`, and the caller falls back to any substring.
#[derive(Clone, Debug)]
pub struct SpanAutomaton {
    next: Vec<BTreeMap<char, u32>>,
    accept: Vec<bool>,
}

impl SpanAutomaton {
    /// Builds the automaton, or `None` when the construction would touch more than
    /// `64 n + 4096` positions in total (n = characters).
    pub fn new(text: &str) -> Option<Self> {
        let cs: Vec<char> = text.chars().collect();
        let n = cs.len();
        let word = |k: usize| cs[k].is_alphanumeric();
        let boundary = |k: usize| k == 0 || k == n || !(word(k - 1) && word(k));
        let starts: Vec<u32> = (0..n)
            .filter(|&i| boundary(i) && !cs[i].is_whitespace())
            .map(|i| i as u32)
            .collect();
        let end_ok: Vec<bool> = (0..=n)
            .map(|j| j > 0 && boundary(j) && !cs[j - 1].is_whitespace())
            .collect();
        let mut budget = 64 * n + 4096;
        let mut sets: Vec<Vec<u32>> = vec![starts];
        // The start state is never merged with a later one: it alone must not accept.
        let mut index: std::collections::HashMap<Vec<u32>, u32> = Default::default();
        let mut sa = SpanAutomaton {
            next: vec![BTreeMap::new()],
            accept: vec![false],
        };
        let mut q = 0;
        while q < sets.len() {
            budget = budget.checked_sub(sets[q].len())?;
            let mut by_char: BTreeMap<char, Vec<u32>> = BTreeMap::new();
            for &k in &sets[q] {
                if (k as usize) < n {
                    by_char.entry(cs[k as usize]).or_default().push(k + 1);
                }
            }
            for (c, to) in by_char {
                let id = match index.get(&to) {
                    Some(&id) => id,
                    None => {
                        let id = sets.len() as u32;
                        sa.accept.push(to.iter().any(|&j| end_ok[j as usize]));
                        sa.next.push(BTreeMap::new());
                        index.insert(to.clone(), id);
                        sets.push(to);
                        id
                    }
                };
                sa.next[q].insert(c, id);
            }
            q += 1;
        }
        Some(sa)
    }

    /// Number of states.
    pub fn states_len(&self) -> usize {
        self.next.len()
    }

    /// Whether `s` is a whole-word span of the text.
    pub fn contains(&self, s: &str) -> bool {
        run(&self.next, s).is_some_and(|q| self.accept[q as usize])
    }
}

/// A document prepared for grounded fields: the automaton of the quotes it allows — its
/// whole-word spans ([`SpanAutomaton`]), or, when that is over budget, all its non-empty
/// substrings ([`SuffixAutomaton`]).
#[derive(Clone, Debug)]
pub struct GroundedDoc {
    next: Vec<BTreeMap<char, u32>>,
    accept: Vec<bool>,
    whole_words: bool,
    /// Characters of the document (for the product budget).
    chars: usize,
    /// The numbers the document states ([`document_numbers`]).
    numbers: Vec<(f64, String)>,
}

/// The rule [`GroundedDoc::add_field`] adds for one field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FieldRule {
    /// The rule of the field's JSON string (quotes included).
    pub rule: RuleId,
    /// Whether some quote of the document satisfies the field (else the rule derives nothing).
    pub satisfiable: bool,
}

/// A DFA over characters as per-state transition maps; state 0 is the start.
struct CharDfa {
    next: Vec<BTreeMap<char, u32>>,
    accept: Vec<bool>,
}

impl GroundedDoc {
    /// Indexes `document`.
    pub fn new(document: &str) -> Self {
        let chars = document.chars().count();
        match SpanAutomaton::new(document) {
            Some(sa) => GroundedDoc {
                next: sa.next,
                accept: sa.accept,
                whole_words: true,
                chars,
                numbers: document_numbers(document),
            },
            None => {
                let sam = SuffixAutomaton::new(document);
                let mut accept = vec![true; sam.states_len()];
                accept[0] = false;
                GroundedDoc {
                    next: sam.next,
                    accept,
                    whole_words: false,
                    chars,
                    numbers: document_numbers(document),
                }
            }
        }
    }

    /// Whether quotes are restricted to whole-word spans (false only for documents over the
    /// span automaton's budget, where any non-empty substring is allowed).
    pub fn whole_words(&self) -> bool {
        self.whole_words
    }

    /// Most states the product of this document with one field may have: 64 per document
    /// character + 4096, as for the span automaton's own construction, so a field's rules
    /// stay O(document length) like the unconstrained quote's.
    pub fn product_limit(&self) -> usize {
        64 * self.chars + 4096
    }

    /// Adds the rules of `"` quote `"` (a JSON string whose value is a quote this document
    /// allows, escaped as `serde_json` escapes) to `b`; returns the rule. The same as
    /// [`add_field`](Self::add_field) for a field without constraints, which cannot fail.
    ///
    /// `prefix` keeps rule names apart from the rest of the grammar. The empty string is
    /// excluded: an empty quote is no evidence.
    pub fn add_to(&self, b: &mut GrammarBuilder, prefix: &str) -> RuleId {
        emit(b, prefix, &trim(self.automaton()))
    }

    /// The document's own automaton, as a [`CharDfa`].
    fn automaton(&self) -> CharDfa {
        CharDfa {
            next: self.next.clone(),
            accept: self.accept.clone(),
        }
    }

    /// Adds the rules of `"` quote `"` where the quote's value is also valid under `field`'s
    /// own keywords: the product of this document's automaton with the field's DFAs and
    /// length bounds (see the module doc). A field no quote satisfies gets a rule with an
    /// empty language ([`FieldRule::satisfiable`] is false), so an optional field is left out
    /// and a required one makes the grammar empty.
    ///
    /// # Errors
    /// [`ExtractError::Grounded`] at the field's pointer when the product needs more than
    /// [`product_limit`](Self::product_limit) states.
    pub fn add_field(
        &self,
        b: &mut GrammarBuilder,
        prefix: &str,
        field: &GroundedField,
    ) -> Result<FieldRule, ExtractError> {
        if let Some(n) = &field.number {
            return Ok(self.add_number(b, prefix, n));
        }
        let dfa = trim(if field.is_plain() {
            self.automaton()
        } else {
            self.product(field)?
        });
        Ok(FieldRule {
            satisfiable: !dfa.next[0].is_empty(),
            rule: emit(b, prefix, &dfa),
        })
    }

    /// The rule of a grounded number: one literal per number of the document the field
    /// accepts (an empty language when there is none).
    fn add_number(&self, b: &mut GrammarBuilder, prefix: &str, n: &NumberField) -> FieldRule {
        let mut alts: Vec<Vec<Symbol>> = Vec::new();
        for (x, text) in &self.numbers {
            if n.accepts(*x) {
                alts.push(vec![Symbol::Lexeme(b.literal(text))]);
            }
        }
        let satisfiable = !alts.is_empty();
        let name = format!("{prefix}number");
        let rule = b.rule_ref(&name);
        if !satisfiable {
            // Derives nothing finite, as an unsatisfiable quote's root does.
            alts.push(vec![Symbol::Rule(rule)]);
        }
        b.define(&name, alts);
        FieldRule { rule, satisfiable }
    }

    /// The numbers the indexed document states, with their JSON texts.
    pub fn numbers(&self) -> &[(f64, String)] {
        &self.numbers
    }

    /// The product automaton (not trimmed): states are (document state, one state per field
    /// DFA, code points read, saturated at the largest bound that matters).
    fn product(&self, field: &GroundedField) -> Result<CharDfa, ExtractError> {
        // A bound no quote can reach is no bound: a quote is 1..=chars code points.
        let max_len = field.max_len.filter(|&m| m < self.chars as u64);
        let min_len = if field.min_len <= 1 { 0 } else { field.min_len };
        let cap = max_len.unwrap_or(min_len);
        let anchored = start::Config::new().anchored(Anchored::Yes);
        let mut starts = Vec::with_capacity(field.dfas.len());
        for d in &field.dfas {
            starts.push(
                d.start_state(&anchored)
                    .map_err(|e| ExtractError::Grounded {
                        pointer: field.pointer.clone(),
                        message: format!("internal: no anchored start state: {e}"),
                    })?,
            );
        }
        type Key = (u32, Vec<StateID>, u64);
        let root: Key = (0, starts, 0);
        let mut index: HashMap<Key, u32> = HashMap::from([(root.clone(), 0)]);
        let mut states: Vec<Key> = vec![root];
        let mut out = CharDfa {
            next: vec![BTreeMap::new()],
            accept: vec![false],
        };
        let limit = self.product_limit();
        let mut queue = VecDeque::from([0u32]);
        let mut buf = [0u8; 4];
        while let Some(p) = queue.pop_front() {
            let (q, ds, len) = states[p as usize].clone();
            if max_len.is_some_and(|m| len >= m) {
                continue;
            }
            'chars: for (&c, &to) in &self.next[q as usize] {
                let mut nds = ds.clone();
                for (d, s) in field.dfas.iter().zip(nds.iter_mut()) {
                    for &byte in c.encode_utf8(&mut buf).as_bytes() {
                        *s = d.next_state(*s, byte);
                    }
                    if d.is_dead_state(*s) {
                        continue 'chars;
                    }
                }
                let key: Key = (to, nds, (len + 1).min(cap));
                let id = match index.get(&key) {
                    Some(&id) => id,
                    None => {
                        let id = states.len() as u32;
                        if states.len() >= limit {
                            return Err(ExtractError::Grounded {
                                pointer: field.pointer.clone(),
                                message: format!(
                                    "the document's quotes that satisfy {} need more than {limit} \
                                     automaton states (64 per document character + 4096); a \
                                     shorter document or a looser length bound fits",
                                    field.keywords.join(", ")
                                ),
                            });
                        }
                        let (kq, kds, klen) = &key;
                        out.accept.push(
                            self.accept[*kq as usize]
                                && *klen >= min_len
                                && field
                                    .dfas
                                    .iter()
                                    .zip(kds)
                                    .all(|(d, &s)| d.is_match_state(d.next_eoi_state(s))),
                        );
                        out.next.push(BTreeMap::new());
                        index.insert(key.clone(), id);
                        states.push(key);
                        queue.push_back(id);
                        id
                    }
                };
                out.next[p as usize].insert(c, id);
            }
        }
        Ok(out)
    }
}

/// Keeps the states of `dfa` from which an accepting state is reachable (and the start),
/// renumbered in order, so every prefix the emitted grammar allows can still be completed.
/// O(states + transitions).
fn trim(dfa: CharDfa) -> CharDfa {
    let n = dfa.next.len();
    let mut back: Vec<Vec<u32>> = vec![Vec::new(); n];
    for (q, ts) in dfa.next.iter().enumerate() {
        for &to in ts.values() {
            back[to as usize].push(q as u32);
        }
    }
    let mut live = dfa.accept.clone();
    let mut stack: Vec<u32> = (0..n as u32).filter(|&q| live[q as usize]).collect();
    while let Some(q) = stack.pop() {
        for &p in &back[q as usize] {
            if !live[p as usize] {
                live[p as usize] = true;
                stack.push(p);
            }
        }
    }
    let mut renum = vec![u32::MAX; n];
    let mut k = 0;
    for q in 0..n {
        if q == 0 || live[q] {
            renum[q] = k;
            k += 1;
        }
    }
    let mut out = CharDfa {
        next: Vec::with_capacity(k as usize),
        accept: Vec::with_capacity(k as usize),
    };
    for q in 0..n {
        if renum[q] == u32::MAX {
            continue;
        }
        out.accept.push(dfa.accept[q]);
        out.next.push(
            dfa.next[q]
                .iter()
                .filter(|(_, &to)| live[to as usize])
                .map(|(&c, &to)| (c, renum[to as usize]))
                .collect(),
        );
    }
    out
}

/// The rules of `"` quote `"` for a trimmed character DFA: one right-recursive rule per state.
fn emit(b: &mut GrammarBuilder, prefix: &str, dfa: &CharDfa) -> RuleId {
    let rules: Vec<_> = (0..dfa.next.len())
        .map(|q| b.rule_ref(&format!("{prefix}sub_{q}")))
        .collect();
    let mut lexemes: BTreeMap<char, LexemeId> = BTreeMap::new();
    let mut lexeme = |b: &mut GrammarBuilder, c: char| {
        *lexemes.entry(c).or_insert_with(|| {
            let mut buf = [0u8; 4];
            let text = serde_json::to_string(c.encode_utf8(&mut buf) as &str)
                .unwrap_or_else(|_| format!("\"{c}\""));
            // Strip the quotes serde_json adds: the lexeme is the escaped character.
            b.literal(&text[1..text.len() - 1])
        })
    };
    for (q, rule) in rules.iter().enumerate() {
        let mut alts: Vec<Vec<Symbol>> = Vec::new();
        if dfa.accept[q] {
            alts.push(vec![]);
        }
        for (&c, &to) in &dfa.next[q] {
            let lx = lexeme(b, c);
            alts.push(vec![Symbol::Lexeme(lx), Symbol::Rule(rules[to as usize])]);
        }
        if alts.is_empty() {
            // After trimming only the root can have no way on (no quote satisfies the field);
            // it derives nothing finite, so the grammar reports an empty language if a value
            // is required.
            alts.push(vec![Symbol::Rule(*rule)]);
        }
        b.define(&format!("{prefix}sub_{q}"), alts);
    }
    let quote = b.literal("\"");
    b.fresh_rule(
        &format!("{prefix}grounded"),
        vec![vec![
            Symbol::Lexeme(quote),
            Symbol::Rule(rules[0]),
            Symbol::Lexeme(quote),
        ]],
    )
}

/// Number words and their values: `zero` to `nineteen` and the tens; a compound such as
/// `twenty-five` is a ten, a hyphen and a unit.
const NUMBER_WORDS: [(&str, u32); 28] = [
    ("zero", 0),
    ("one", 1),
    ("two", 2),
    ("three", 3),
    ("four", 4),
    ("five", 5),
    ("six", 6),
    ("seven", 7),
    ("eight", 8),
    ("nine", 9),
    ("ten", 10),
    ("eleven", 11),
    ("twelve", 12),
    ("thirteen", 13),
    ("fourteen", 14),
    ("fifteen", 15),
    ("sixteen", 16),
    ("seventeen", 17),
    ("eighteen", 18),
    ("nineteen", 19),
    ("twenty", 20),
    ("thirty", 30),
    ("forty", 40),
    ("fifty", 50),
    ("sixty", 60),
    ("seventy", 70),
    ("eighty", 80),
    ("ninety", 90),
];

/// The numbers `text` states, each once, in order of first appearance, with the JSON text a
/// grounded number is written as: digit runs not inside a word (`12`, `3.5`; `1,200` with
/// thousands separators is 1200; a `-` that starts the word makes it negative; leading zeros
/// are dropped), and number words (see `NUMBER_WORDS`; `twenty-five` is 25). Digits inside
/// a word (`db-3`, `v2`) are not numbers the document states as such, and are skipped.
pub fn document_numbers(text: &str) -> Vec<(f64, String)> {
    let mut out: Vec<(f64, String)> = Vec::new();
    let mut push = |x: f64, text: String| {
        if x.is_finite() && !out.iter().any(|(_, t)| *t == text) {
            out.push((x, text));
        }
    };
    let b = text.as_bytes();
    let word_byte = |c: u8| c.is_ascii_alphanumeric() || c == b'_' || c >= 0x80;
    let mut i = 0;
    while i < b.len() {
        if !b[i].is_ascii_digit() || (i > 0 && (word_byte(b[i - 1]) || b[i - 1] == b'.')) {
            i += 1;
            continue;
        }
        // `db-3`: a digit run joined to a word by a hyphen is part of a name (a range such
        // as `5-12` is two numbers).
        if i > 1 && b[i - 1] == b'-' && (b[i - 2].is_ascii_alphabetic() || b[i - 2] >= 0x80) {
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
            }
            continue;
        }
        let negative = i > 0 && b[i - 1] == b'-' && (i < 2 || !word_byte(b[i - 2]));
        let mut digits = String::new();
        while i < b.len() {
            if b[i].is_ascii_digit() {
                digits.push(b[i] as char);
                i += 1;
            } else if b[i] == b','
                && b.len() > i + 3
                && b[i + 1..i + 4].iter().all(u8::is_ascii_digit)
                && b.get(i + 4).is_none_or(|c| !c.is_ascii_digit())
            {
                i += 1;
            } else {
                break;
            }
        }
        let mut frac = String::new();
        if i + 1 < b.len() && b[i] == b'.' && b[i + 1].is_ascii_digit() {
            i += 1;
            while i < b.len() && b[i].is_ascii_digit() {
                frac.push(b[i] as char);
                i += 1;
            }
        }
        // A number glued to letters after it (`3rd`, `2x`) is kept: the digits are as written.
        let int = digits.trim_start_matches('0');
        let int = if int.is_empty() { "0" } else { int };
        let frac = frac.trim_end_matches('0');
        let sign = if negative && (int != "0" || !frac.is_empty()) {
            "-"
        } else {
            ""
        };
        let json = if frac.is_empty() {
            format!("{sign}{int}")
        } else {
            format!("{sign}{int}.{frac}")
        };
        if let Ok(x) = json.parse::<f64>() {
            push(x, json);
        }
    }
    let lower = text.to_lowercase();
    for word in lower.split(|c: char| !(c.is_alphabetic() || c == '-')) {
        let value = |w: &str| NUMBER_WORDS.iter().find(|(n, _)| *n == w).map(|&(_, v)| v);
        let v = match word.split_once('-') {
            Some((tens, unit)) => match (value(tens), value(unit)) {
                (Some(t), Some(u)) if t >= 20 && t % 10 == 0 && (1..10).contains(&u) => Some(t + u),
                _ => None,
            },
            None => value(word),
        };
        if let Some(v) = v {
            push(f64::from(v), v.to_string());
        }
    }
    out
}

/// Whether `value` is a verbatim (non-empty) substring of `document`.
pub fn is_grounded(document: &str, value: &str) -> bool {
    !value.is_empty() && document.contains(value)
}

/// The instance pointers of every grounded value in `instance`, given the grounded schema
/// pointers of [`MarkedSchema::pointers`], paired with the string found there. Follows
/// `properties/NAME` and `items` steps; other keywords (`anyOf`, `$ref`) are not followed.
pub fn grounded_values<'v>(instance: &'v Value, pointers: &[String]) -> Vec<(String, &'v str)> {
    let mut out = Vec::new();
    for p in pointers {
        let steps: Vec<String> = pointer::tokens(p).collect();
        collect(instance, &steps, String::new(), &mut out);
    }
    out
}

fn collect<'v>(v: &'v Value, steps: &[String], at: String, out: &mut Vec<(String, &'v str)>) {
    match steps {
        [] => {
            if let Value::String(s) = v {
                out.push((if at.is_empty() { "/".into() } else { at }, s));
            }
        }
        [k, name, rest @ ..] if k == "properties" => {
            if let Some(child) = v.get(name.as_str()) {
                collect(child, rest, pointer::push(&at, name), out);
            }
        }
        [k, rest @ ..] if k == "items" => {
            if let Value::Array(xs) = v {
                for (i, x) in xs.iter().enumerate() {
                    collect(x, rest, format!("{at}/{i}"), out);
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// All substrings by brute force.
    fn substrings(s: &str) -> std::collections::BTreeSet<String> {
        let cs: Vec<char> = s.chars().collect();
        let mut out = std::collections::BTreeSet::new();
        for i in 0..=cs.len() {
            for j in i..=cs.len() {
                out.insert(cs[i..j].iter().collect());
            }
        }
        out
    }

    #[test]
    fn automaton_is_linear_in_size() {
        let text = "the quick brown fox jumps over the lazy dog ".repeat(50);
        let sam = SuffixAutomaton::new(&text);
        assert!(sam.states_len() <= 2 * text.chars().count());
        assert!(sam.contains("lazy dog the quick"));
        assert!(!sam.contains("lazy cat"));
    }

    proptest! {
        #[test]
        fn automaton_accepts_exactly_the_substrings(text in "[ab\"é]{0,12}", probe in "[ab\"é]{0,5}") {
            let sam = SuffixAutomaton::new(&text);
            prop_assert_eq!(sam.contains(&probe), substrings(&text).contains(&probe));
        }
    }

    /// Whole-word spans by brute force, with the same word and whitespace rules.
    fn spans(s: &str) -> std::collections::BTreeSet<String> {
        let cs: Vec<char> = s.chars().collect();
        let n = cs.len();
        let w = |k: usize| cs[k].is_alphanumeric();
        let b = |k: usize| k == 0 || k == n || !(w(k - 1) && w(k));
        let mut out = std::collections::BTreeSet::new();
        for i in 0..n {
            for j in i + 1..=n {
                if b(i) && b(j) && !cs[i].is_whitespace() && !cs[j - 1].is_whitespace() {
                    out.insert(cs[i..j].iter().collect());
                }
            }
        }
        out
    }

    proptest! {
        #[test]
        fn span_automaton_accepts_exactly_the_whole_word_spans(
            text in "[ab .é\"]{0,14}",
            probe in "[ab .é\"]{0,6}",
        ) {
            let sa = SpanAutomaton::new(&text).unwrap();
            prop_assert_eq!(sa.contains(&probe), spans(&text).contains(&probe));
        }
    }

    #[test]
    fn spans_never_cut_a_word() {
        let sa = SpanAutomaton::new("Book a table at Joe's, 8 pm.").unwrap();
        for ok in [
            "Book",
            "Book a table",
            "Joe",
            "Joe's",
            "Joe's,",
            "8 pm.",
            "pm",
            ".",
        ] {
            assert!(sa.contains(ok), "{ok:?}");
        }
        for bad in ["", "Boo", "ook", " a", "a ", "table a", "oe's", "p"] {
            assert!(!sa.contains(bad), "{bad:?}");
        }
        assert!(GroundedDoc::new("Book a table").whole_words());
    }

    #[test]
    fn repetitive_long_documents_fall_back_to_substrings() {
        let text = "a ".repeat(3000);
        assert!(SpanAutomaton::new(&text).is_none());
        let doc = GroundedDoc::new(&text);
        assert!(!doc.whole_words());
        let mut b = GrammarBuilder::new();
        let r = doc.add_to(&mut b, "g/");
        assert!(b.build(r).is_ok());
    }

    #[test]
    fn marks_strings_and_arrays_and_pointers() {
        let schema = serde_json::json!({
            "type": "object",
            "properties": {
                "quote": {"type": "string", "x-grounded": true},
                "spans": {"type": "array", "items": {"type": "string"}, "x-grounded": true},
                "name": {"type": "string"},
                "tag": {"const": {"x-grounded": true}}
            }
        });
        let m = mark_grounded(&schema, &["/properties/name".into()]).unwrap();
        assert_eq!(
            m.pointers,
            [
                "/properties/quote",
                "/properties/spans/items",
                "/properties/name"
            ]
        );
        assert_eq!(m.schema["properties"]["quote"]["const"], placeholder(0));
        assert_eq!(
            m.schema["properties"]["spans"]["items"]["const"],
            placeholder(1)
        );
        // Instances under `const` are not schemas and stay untouched.
        assert_eq!(m.schema["properties"]["tag"], schema["properties"]["tag"]);
        assert_eq!(
            placeholder_index(&format!("\"{}\"", placeholder(12))),
            Some(12)
        );
        assert_eq!(placeholder_index("\"plain\""), None);
    }

    #[test]
    fn bad_grounded_targets_are_errors_with_pointers() {
        let schema =
            serde_json::json!({"properties": {"n": {"type": "boolean", "x-grounded": true}}});
        let err = mark_grounded(&schema, &[]).unwrap_err();
        assert!(err.to_string().contains("/properties/n"), "{err}");
        let err = mark_grounded(&serde_json::json!({}), &["/properties/zz".into()]).unwrap_err();
        assert!(err.to_string().contains("/properties/zz"), "{err}");
    }

    #[test]
    fn finds_grounded_values_in_instances() {
        let m = mark_grounded(
            &serde_json::json!({"properties": {
                "q": {"type": "string", "x-grounded": true},
                "s": {"type": "array", "items": {"type": "string"}, "x-grounded": true}
            }}),
            &[],
        )
        .unwrap();
        let v = serde_json::json!({"q": "fox", "s": ["a", "b"]});
        let got = grounded_values(&v, &m.pointers);
        assert_eq!(
            got,
            vec![
                ("/q".into(), "fox"),
                ("/s/0".into(), "a"),
                ("/s/1".into(), "b")
            ]
        );
    }

    #[test]
    fn grammar_is_linear_in_document_size() {
        let doc = GroundedDoc::new(&"incident: disk full on db-3. ".repeat(40));
        let mut b = GrammarBuilder::new();
        let r = doc.add_to(&mut b, "g/");
        let g = b.build(r).unwrap();
        let n = 29 * 40;
        assert!(g.size() < 12 * n, "{} symbols for {n} chars", g.size());
        // One lexeme per distinct character plus the quote.
        assert!(g.lexemes().len() < 25, "{}", g.lexemes().len());
        assert!(g.lexemes().iter().any(|l| l.regex() == "\""));
    }

    // Issue 23: a grounded field's own `pattern`, `format`, lengths and `const`/`enum` used to
    // be replaced with the placeholder and never reach the grammar. Each test below drives
    // the composed grammar (as extraction composes it) on the byte-level vocabulary with a
    // document holding a quote that violates the field and one that satisfies it.

    use crate::run::{Constraint, ExtractConfig, Prepared};
    use formwork_core::matcher::{CompiledGrammar, Limits, Matcher};
    use formwork_core::toktrie::SyntheticVocab;
    use std::sync::Arc;

    /// An object schema with one required grounded field `v`.
    fn one_field(field: Value) -> Value {
        let mut field = field;
        field["type"] = "string".into();
        field["x-grounded"] = true.into();
        serde_json::json!({
            "type": "object",
            "properties": {"v": field},
            "required": ["v"],
            "additionalProperties": false
        })
    }

    /// The matcher of `schema`'s grounded grammar for `doc`.
    fn matcher(schema: &Value, doc: &str) -> Matcher {
        let p = Prepared::new(
            &Constraint::Schema(schema.clone()),
            &ExtractConfig::default(),
        )
        .unwrap();
        let g = p.grammar_for(doc).unwrap().unwrap();
        let vocab = Arc::new(SyntheticVocab::byte_level());
        let cg = CompiledGrammar::new(g, vocab, Limits::default()).unwrap();
        Matcher::new(Arc::new(cg)).unwrap()
    }

    /// Whether the grammar produces `{"v":<value>}` (compact, as the compiler emits).
    fn produces(m: &Matcher, value: &str) -> bool {
        let mut m = Matcher::new(m.compiled().clone()).unwrap();
        let text = serde_json::json!({ "v": value }).to_string();
        m.consume_bytes(text.as_bytes()).is_ok() && m.is_accepting()
    }

    #[test]
    fn document_numbers_are_digits_as_written_and_number_words() {
        let texts =
            |t: &str| -> Vec<String> { document_numbers(t).into_iter().map(|(_, s)| s).collect() };
        assert_eq!(
            texts("I finished 5 lessons so far out of the 12 in total, and 5 more."),
            ["5", "12"]
        );
        assert_eq!(
            texts("Revenue 1,200 (up 3.50%), -4 C at 007; db-3 and v2 are names."),
            ["1200", "3.5", "-4", "7"]
        );
        assert_eq!(
            texts("Five apples, twenty-five pears, Twelve plums; fivefold none."),
            ["5", "25", "12"]
        );
        assert_eq!(texts("5-12 lessons"), ["5", "12"]);
        assert!(texts("no numbers here").is_empty());
    }

    /// The README's course example with grounded numbers: `done_lessons` and `total_lessons`
    /// can only be 5 or 12, the numbers the text states (1, 2, 500 or 0 cannot be written),
    /// and the field's own bounds still hold.
    #[test]
    fn grounded_numbers_are_only_the_documents() {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/course/");
        let doc = std::fs::read_to_string(format!("{root}doc.txt")).unwrap();
        let mut schema: Value =
            serde_json::from_str(&std::fs::read_to_string(format!("{root}schema.json")).unwrap())
                .unwrap();
        for k in ["done_lessons", "total_lessons"] {
            schema["properties"][k]["x-grounded"] = true.into();
        }
        let m = matcher(&schema, &doc);
        let answer = |done: &str, total: &str| {
            let mut m = Matcher::new(m.compiled().clone()).unwrap();
            let text = format!(
                r#"{{"course":"Rust for Beginners","done_lessons":{done},"total_lessons":{total},"status":"in_progress"}}"#
            );
            m.consume_bytes(text.as_bytes()).is_ok() && m.is_accepting()
        };
        assert!(answer("5", "12"));
        assert!(answer("12", "5"));
        assert!(answer("5", "5"));
        for (d, t) in [
            ("1", "1"),
            ("2", "12"),
            ("5", "500"),
            ("0", "12"),
            ("5", "120"),
        ] {
            assert!(!answer(d, t), "{d} of {t}");
        }
        // `minimum: 13` leaves no candidate: a required field is an error naming it.
        schema["properties"]["total_lessons"]["minimum"] = 13.into();
        let p = Prepared::new(&Constraint::Schema(schema), &ExtractConfig::default()).unwrap();
        let e = p.grammar_for(&doc).unwrap_err().to_string();
        assert!(e.contains("/properties/total_lessons"), "{e}");
        // A keyword a candidate list cannot enforce is refused by name.
        let bad = serde_json::json!({"type": "integer", "x-grounded": true, "not": {"const": 5}});
        let e = mark_grounded(&bad, &[]).unwrap_err().to_string();
        assert!(e.contains("/not"), "{e}");
    }

    #[test]
    fn grounded_pattern_is_enforced() {
        let doc = "Start at 09:30, or at 9:30, or at 25:99.";
        let m = matcher(
            &one_field(serde_json::json!({"pattern": "^[0-2][0-9]:[0-5][0-9]$"})),
            doc,
        );
        assert!(produces(&m, "09:30"));
        for bad in ["9:30", "25:99", "Start"] {
            assert!(!produces(&m, bad), "{bad:?}");
        }
        // Without the pattern the same quotes are producible: the document is no filter.
        let plain = matcher(&one_field(serde_json::json!({})), doc);
        assert!(produces(&plain, "9:30") && produces(&plain, "25:99"));
        // Unanchored patterns keep JSON Schema's search semantics.
        let m = matcher(&one_field(serde_json::json!({"pattern": "[0-9]"})), doc);
        assert!(produces(&m, "at 9:30") && !produces(&m, "or at"));
    }

    #[test]
    fn grounded_format_is_enforced() {
        // 2026-02-30 has the shape of a date but is none.
        let doc = "Moved from 2026-02-30 to 2026-03-14, see ticket 2026.";
        let m = matcher(&one_field(serde_json::json!({"format": "date"})), doc);
        assert!(produces(&m, "2026-03-14"));
        for bad in ["2026-02-30", "2026", "Moved"] {
            assert!(!produces(&m, bad), "{bad:?}");
        }
    }

    #[test]
    fn grounded_length_bounds_count_code_points() {
        let doc = "Call Al or Alexandra at the café Zoë runs.";
        let m = matcher(
            &one_field(serde_json::json!({"minLength": 3, "maxLength": 9})),
            doc,
        );
        for ok in ["Alexandra", "Call", "café Zoë"] {
            assert!(produces(&m, ok), "{ok:?}");
        }
        // "Al" is too short, "Call Al or" one code point too long; "café Zoë runs" is 13.
        for bad in ["Al", "Call Al or", "café Zoë runs"] {
            assert!(!produces(&m, bad), "{bad:?}");
        }
        // "café" is 4 code points in 5 bytes: a byte count would refuse it.
        let m = matcher(&one_field(serde_json::json!({"maxLength": 4})), doc);
        assert!(produces(&m, "café") && !produces(&m, "Call Al"));
    }

    #[test]
    fn grounded_const_and_enum_are_enforced() {
        let doc = "Severity: high, not medium or low.";
        let m = matcher(
            &one_field(serde_json::json!({"enum": ["low", "high", "critical"]})),
            doc,
        );
        assert!(produces(&m, "high") && produces(&m, "low"));
        assert!(!produces(&m, "medium") && !produces(&m, "critical"));
        let m = matcher(&one_field(serde_json::json!({"const": "high"})), doc);
        assert!(produces(&m, "high") && !produces(&m, "low"));
    }

    #[test]
    fn all_keywords_of_a_field_hold_at_once() {
        // Pattern and format neither containing the other: the schema compiler refuses this
        // pair for a plain string; the product with the document needs no such shortcut.
        let doc = "Dates: 2026-03-14, 2027-03-14 and 2026-13-01.";
        let m = matcher(
            &one_field(serde_json::json!({"format": "date", "pattern": "^2026"})),
            doc,
        );
        assert!(produces(&m, "2026-03-14"));
        assert!(!produces(&m, "2027-03-14") && !produces(&m, "2026-13-01"));
    }

    #[test]
    fn an_unsatisfiable_required_field_is_an_error_naming_it() {
        let schema = one_field(serde_json::json!({"format": "date"}));
        let p = Prepared::new(&Constraint::Schema(schema), &ExtractConfig::default()).unwrap();
        let err = p
            .grammar_for("See you next Tuesday.")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("/properties/v") && err.contains("format"),
            "{err}"
        );
        // Optional: the object without it is still there.
        let schema = serde_json::json!({"type": "object", "properties": {
            "v": {"type": "string", "format": "date", "x-grounded": true}}});
        let p = Prepared::new(&Constraint::Schema(schema), &ExtractConfig::default()).unwrap();
        assert!(p.grammar_for("See you next Tuesday.").is_ok());
    }

    #[test]
    fn keywords_a_quote_cannot_enforce_are_refused_by_pointer() {
        let err = mark_grounded(&one_field(serde_json::json!({"not": {"const": "x"}})), &[])
            .unwrap_err()
            .to_string();
        assert!(err.contains("/properties/v/not"), "{err}");
        let err = mark_grounded(&one_field(serde_json::json!({"pattern": "(?<=a)b"})), &[])
            .unwrap_err()
            .to_string();
        assert!(err.contains("/properties/v/pattern"), "{err}");
        let err = mark_grounded(&one_field(serde_json::json!({"format": "colour"})), &[])
            .unwrap_err()
            .to_string();
        assert!(err.contains("/properties/v/format"), "{err}");
        // Annotations are fine.
        let m = mark_grounded(
            &one_field(serde_json::json!({"description": "d", "examples": ["x"], "x-note": 1})),
            &[],
        )
        .unwrap();
        assert!(m.fields[0].is_plain());
    }

    #[test]
    fn a_product_over_budget_is_an_error_naming_the_field() {
        // Single-letter words in a non-repeating order: almost every span of up to 2000
        // characters is distinct, far more (span, length) pairs than 64 per character.
        let mut x: u32 = 12345;
        let doc: String = (0..1500)
            .map(|_| {
                x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
                format!("{} ", char::from(b'a' + ((x >> 16) % 26) as u8))
            })
            .collect();
        let schema = one_field(serde_json::json!({"maxLength": 2000}));
        let p = Prepared::new(&Constraint::Schema(schema), &ExtractConfig::default()).unwrap();
        let err = p.grammar_for(&doc).unwrap_err().to_string();
        assert!(
            err.contains("/properties/v") && err.contains("maxLength"),
            "{err}"
        );
    }

    #[test]
    fn no_allowed_prefix_is_a_dead_end() {
        // The span "x a " (trailing space at the end of the document) can be neither ended
        // nor extended: the grammar must not let the quote walk into it.
        let m = matcher(&one_field(serde_json::json!({})), "x a ");
        let mut m = Matcher::new(m.compiled().clone()).unwrap();
        assert!(m.consume_bytes(b"{\"v\":\"x a").is_ok());
        assert!(m.consume_bytes(b" ").is_err());
        // Same for a field whose pattern only a longer quote could finish.
        let m = matcher(
            &one_field(serde_json::json!({"pattern": "^[a-z]+ [0-9]$"})),
            "ab cd 7",
        );
        assert!(produces(&m, "cd 7"));
        let mut m = Matcher::new(m.compiled().clone()).unwrap();
        assert!(
            m.consume_bytes(b"{\"v\":\"a").is_err(),
            "\"ab 7\" is no span"
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]
        /// The grammar's quotes are exactly the whole-word spans the field accepts.
        #[test]
        fn grounded_grammar_is_spans_intersected_with_the_field(
            doc in "[ab1 :-]{1,10}",
            which in 0usize..4,
        ) {
            let field = [
                serde_json::json!({"pattern": "^[a-z]"}),
                serde_json::json!({"maxLength": 3, "minLength": 2}),
                serde_json::json!({"enum": ["a", "b 1", "1:"]}),
                serde_json::json!({"pattern": "1$", "maxLength": 4}),
            ][which].clone();
            let schema = one_field(field);
            let marked = mark_grounded(&schema, &[]).unwrap();
            let f = &marked.fields[0];
            let want: Vec<String> = spans(&doc).into_iter().filter(|s| f.accepts(s)).collect();
            let p = Prepared::new(&Constraint::Schema(schema), &ExtractConfig::default()).unwrap();
            match p.grammar_for(&doc) {
                Err(_) => prop_assert!(want.is_empty()),
                Ok(g) => {
                    let vocab = Arc::new(SyntheticVocab::byte_level());
                    let cg = CompiledGrammar::new(g.unwrap(), vocab, Limits::default()).unwrap();
                    let m = Matcher::new(Arc::new(cg)).unwrap();
                    for s in substrings(&doc) {
                        prop_assert_eq!(produces(&m, &s), want.contains(&s), "{:?}", s);
                    }
                }
            }
        }
    }
}
