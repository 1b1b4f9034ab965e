//! Emission: normalized [`Schema`] IR → grammar rules through [`GrammarBuilder`].
//!
//! Owns the JSON *syntax* of each schema: punctuation lexemes (with bounded whitespace in
//! flexible mode), property order and comma placement, counted repetition of items and
//! properties, and the generic JSON value grammar for unconstrained subschemas. It does not
//! decide keyword semantics (that is `lower.rs`). Invariants: the emitted rule for a schema
//! derives exactly the JSON texts (in the configured layout) of its instances; an
//! unsatisfiable schema yields `None` rather than a rule; object member rules are unambiguous
//! (one parse per member sequence), so their right recursion is a deterministic reduction
//! path for the parser (see the parser's module doc) instead of one live parse per optional
//! property. Costs: linear in the IR, except objects with `minProperties`/`maxProperties`
//! (properties × bound rules) and `uniqueItems` over small finite domains (2^values rules).

use std::collections::HashMap;

use serde_json::Value;

use super::error::{display_pointer, SchemaError};
use super::ir::{ArraySchema, ObjectSchema, Schema, StringSchema};
use super::lower::Lowerer;
use super::options::{CompileOptions, PropertyOrder, Whitespace};
use super::pointer;
use super::regexes;
use crate::grammar::{GrammarBuilder, LexemeId, RuleId, Symbol};

/// Largest number of object/array state rules one schema node may create.
const MAX_COUNTED_STATES: usize = 100_000;

/// Characters per chunk lexeme of a string longer than this (plain strings, without `pattern`
/// or `format`; see `Emitter::chunked_string`): small enough that each lexeme's NFA is a few
/// thousand states (a 4,096-character regex was ~74k, tens of ms to build), large enough that
/// strings in real documents rarely cross a chunk boundary.
const STRING_CHUNK: u64 = 256;
/// Largest finite item domain for which `uniqueItems` is enforced.
const MAX_UNIQUE_DOMAIN: usize = 8;

/// Builds grammar rules for IR schemas.
#[derive(Debug)]
pub(crate) struct Emitter<'a, 'd> {
    pub(crate) b: GrammarBuilder,
    low: &'a mut Lowerer<'d>,
    refs: HashMap<String, RuleId>,
    any: Option<RuleId>,
    lbrace: LexemeId,
    rbrace: LexemeId,
    lbrack: LexemeId,
    rbrack: LexemeId,
    comma: LexemeId,
    colon: LexemeId,
    string: LexemeId,
    number: LexemeId,
    literal_keywords: LexemeId,
    property_order: PropertyOrder,
    max_property_subsets: usize,
    /// The key lexeme of each set of excluded names (sorted, deduplicated) built so far: the
    /// same object schema is emitted in several places, and its key regex is the largest
    /// lexeme a schema has.
    except_keys: HashMap<Vec<String>, LexemeId>,
    /// The lexeme of each constrained string schema built so far: its regex is built and
    /// checked by parsing, which large objects repeat for property after property.
    strings: HashMap<StringSchema, LexemeId>,
    /// The largest grammar allowed ([`CompileOptions::max_grammar_size`]).
    max_grammar_size: usize,
    /// The nodes being emitted, outermost first: each one's pointer and the grammar size
    /// when it started, to name the node to blame for a size limit ([`Self::emit`]).
    active: Vec<(String, usize)>,
    /// Why the latest node without a value has none, and where: the leaf that has none (a
    /// `false` schema, bounds no number satisfies, ...) when the node's own last child was
    /// without a value too (a required property's value that has none ends its object at
    /// once), else the node itself. What an unsatisfiable root error names.
    pub(crate) unsat: Option<(String, String)>,
    /// Whether the latest [`Self::emit`] to return gave no value: read when a node ends, it
    /// says whether its last child had none (then that child's cause is the node's).
    last_none: bool,
    /// Bounded-number lexemes by regex text (`None`: no number satisfies the bounds), so a
    /// regex repeated over many properties is parsed once.
    numbers: HashMap<String, Option<LexemeId>>,
}

fn ws_regex(opts: &CompileOptions) -> String {
    match opts.whitespace {
        Whitespace::Compact => String::new(),
        Whitespace::Flexible { max_run } => format!("[ \\t\\n\\r]{{0,{max_run}}}"),
    }
}

impl<'a, 'd> Emitter<'a, 'd> {
    pub(crate) fn new(low: &'a mut Lowerer<'d>, opts: &CompileOptions) -> Self {
        let mut b = GrammarBuilder::new();
        let ws = ws_regex(opts);
        let esc = |s: &str| regex_syntax::escape(s);
        let (item_sep, key_sep) = match opts.whitespace {
            // In flexible mode the separators' own spaces are part of the bounded run.
            Whitespace::Flexible { .. } => (
                opts.item_separator.trim().to_string(),
                opts.key_separator.trim().to_string(),
            ),
            Whitespace::Compact => (opts.item_separator.clone(), opts.key_separator.clone()),
        };
        let lbrace = b.lexeme("{", &format!("\\{{{ws}"));
        let rbrace = b.lexeme("}", &format!("{ws}\\}}"));
        let lbrack = b.lexeme("[", &format!("\\[{ws}"));
        let rbrack = b.lexeme("]", &format!("{ws}\\]"));
        let comma = b.lexeme("item separator", &format!("{ws}{}{ws}", esc(&item_sep)));
        let colon = b.lexeme("key separator", &format!("{ws}{}{ws}", esc(&key_sep)));
        let string = b.lexeme("string", &regexes::any_string());
        let number = b.lexeme_parsed("number", regexes::any_number(), regexes::any_number_hir());
        let literal_keywords = b.lexeme("true|false|null", "true|false|null");
        Emitter {
            b,
            low,
            refs: HashMap::new(),
            any: None,
            lbrace,
            rbrace,
            lbrack,
            rbrack,
            comma,
            colon,
            string,
            number,
            literal_keywords,
            property_order: opts.property_order,
            max_property_subsets: opts.max_property_subsets,
            except_keys: HashMap::new(),
            strings: HashMap::new(),
            max_grammar_size: opts.max_grammar_size,
            active: Vec::new(),
            unsat: None,
            last_none: false,
            numbers: HashMap::new(),
        }
    }

    fn rule(&mut self, hint: &str, alts: Vec<Vec<Symbol>>) -> Symbol {
        Symbol::Rule(self.b.fresh_rule(hint, alts))
    }

    /// The generic JSON value rule.
    fn any_value(&mut self) -> Symbol {
        if let Some(r) = self.any {
            return Symbol::Rule(r);
        }
        let value = self.b.rule_ref("any_value");
        self.any = Some(value);
        let v = Symbol::Rule(value);
        let (lb, rb, lk, rk, comma, colon, string) = (
            Symbol::Lexeme(self.lbrace),
            Symbol::Lexeme(self.rbrace),
            Symbol::Lexeme(self.lbrack),
            Symbol::Lexeme(self.rbrack),
            Symbol::Lexeme(self.comma),
            Symbol::Lexeme(self.colon),
            Symbol::Lexeme(self.string),
        );
        let members = self.b.rule_ref("any_members");
        self.b.define(
            "any_members",
            vec![
                vec![string, colon, v],
                vec![Symbol::Rule(members), comma, string, colon, v],
            ],
        );
        let elems = self.b.rule_ref("any_elements");
        self.b.define(
            "any_elements",
            vec![vec![v], vec![Symbol::Rule(elems), comma, v]],
        );
        let object = self.rule(
            "any_object",
            vec![vec![lb, rb], vec![lb, Symbol::Rule(members), rb]],
        );
        let array = self.rule(
            "any_array",
            vec![vec![lk, rk], vec![lk, Symbol::Rule(elems), rk]],
        );
        self.b.define(
            "any_value",
            vec![
                vec![object],
                vec![array],
                vec![string],
                vec![Symbol::Lexeme(self.number)],
                vec![Symbol::Lexeme(self.literal_keywords)],
            ],
        );
        v
    }

    /// A JSON string of `min..=max` characters (`max` `None`: unbounded) too long for one
    /// counted regex, as chunk lexemes of exactly [`STRING_CHUNK`] characters followed by one
    /// tail lexeme of fewer characters *and the closing quote*: a length `L = a·K + b` (`K`
    /// the chunk size, `0 ≤ b < K`) is the opening quote, `a` chunks and a tail of `b`.
    ///
    /// Greedy lexing splits every string this way, so the language is exact: while a chunk
    /// and a tail are both allowed, the tail dies at its `K`-th character (it needs its quote
    /// before), the chunk completes there, and the next character (or the quote) cannot
    /// extend it and starts the next lexeme. Each lexeme's automaton is a counted regex of at
    /// most `K` characters (~4,600 NFA states), and the chunk count is a counted repetition in
    /// the grammar (O(log n) rules). The string used to be a repetition of one-character
    /// lexemes: every byte a lexeme boundary, so a mask walked the whole trie with an Earley
    /// row per byte (seconds per mask at `maxLength` 32767; issue 24).
    fn chunked_string(&mut self, min: u64, max: Option<u64>) -> Symbol {
        let k = STRING_CHUNK;
        let ch = crate::schema::regex::json_char();
        let quote = Symbol::Lexeme(self.b.literal("\""));
        let chunk = Symbol::Lexeme(self.b.lexeme("string chunk", &format!("(?:{ch}){{{k}}}")));
        let clamp = |n: u64| n.min(u64::from(u32::MAX)) as u32;
        let tail = |b: &mut GrammarBuilder, lo: u64, hi: u64| {
            if hi == 0 {
                quote
            } else {
                Symbol::Lexeme(b.lexeme("string tail", &format!("(?:{ch}){{{lo},{hi}}}\"")))
            }
        };
        let (amin, bmin) = (min / k, min % k);
        let mut alts = Vec::new();
        let alt = |b: &mut GrammarBuilder, lo: u64, hi: Option<u64>, tail: Symbol| {
            let chunks = b.repeat(chunk, clamp(lo), hi.map(clamp));
            vec![quote, Symbol::Rule(chunks), tail]
        };
        match max {
            Some(max) if max / k == amin => {
                let t = tail(&mut self.b, bmin, max % k);
                alts.push(alt(&mut self.b, amin, Some(amin), t));
            }
            Some(max) => {
                let (amax, bmax) = (max / k, max % k);
                let t = tail(&mut self.b, bmin, k - 1);
                alts.push(alt(&mut self.b, amin, Some(amin), t));
                if amax > amin + 1 {
                    let t = tail(&mut self.b, 0, k - 1);
                    alts.push(alt(&mut self.b, amin + 1, Some(amax - 1), t));
                }
                let t = tail(&mut self.b, 0, bmax);
                alts.push(alt(&mut self.b, amax, Some(amax), t));
            }
            None => {
                let t = tail(&mut self.b, bmin, k - 1);
                alts.push(alt(&mut self.b, amin, Some(amin), t));
                let t = tail(&mut self.b, 0, k - 1);
                alts.push(alt(&mut self.b, amin + 1, None, t));
            }
        }
        self.rule("long_string", alts)
    }

    /// Emits `s`; `None` when it admits no value (then `unsat` says where and why, when a
    /// leaf of `s` was the cause).
    ///
    /// Checks the budgets as it goes (issue 20): the compile time
    /// ([`CompileOptions::max_compile_ms`]) before each node, and the grammar size
    /// ([`CompileOptions::max_grammar_size`]) after each, stopping as soon as it is passed
    /// rather than after building it all, with the pointer of the node to blame: the deepest
    /// node being emitted whose own rules are at least half the limit (the root always is,
    /// so one is found). A limit passed by many small siblings names their parent, not the
    /// sibling that happened to pass it.
    pub(crate) fn emit(&mut self, s: &Schema, ptr: &str) -> Result<Option<Symbol>, SchemaError> {
        self.low.check_time(Some(ptr))?;
        self.active.push((ptr.to_string(), self.b.size()));
        self.last_none = false;
        let r = self.emit_node(s, ptr);
        let (_, before) = self.active.pop().expect("pushed above");
        let r = r?;
        let size = self.b.size();
        if size > self.max_grammar_size {
            // This node and the ones enclosing it, deepest first.
            let own = |b: usize| size - b;
            let blame = std::iter::once((ptr, before))
                .chain(self.active.iter().rev().map(|(p, b)| (p.as_str(), *b)))
                .find(|&(_, b)| own(b) >= self.max_grammar_size / 2)
                .unwrap_or((ptr, before));
            return Err(SchemaError::LimitExceeded {
                what: format!(
                    "grammar size (the schema at {} adds {} symbols)",
                    display_pointer(blame.0),
                    own(blame.1)
                ),
                limit: self.max_grammar_size,
                given: size,
            });
        }
        if r.is_none() {
            let why = match s {
                Schema::Unsat(r) => Some(r.clone()),
                Schema::Number(_) => Some("no number satisfies its bounds".to_string()),
                Schema::String(_) => Some("no string satisfies its constraints".to_string()),
                Schema::Const(_) => Some("no listed value satisfies it".to_string()),
                // A container or union: its last child's cause if that child had no value
                // either (`last_none`, as that child's emit left it), else its own.
                _ if self.last_none && self.unsat.is_some() => None,
                _ => Some("no value satisfies every constraint".to_string()),
            };
            if let Some(why) = why {
                self.unsat = Some((ptr.to_string(), why));
            }
        }
        self.last_none = r.is_none();
        Ok(r)
    }

    /// [`Self::emit`] without the budget checks.
    fn emit_node(&mut self, s: &Schema, ptr: &str) -> Result<Option<Symbol>, SchemaError> {
        Ok(match s {
            Schema::Any => Some(self.any_value()),
            Schema::Unsat(_) => None,
            Schema::Null => Some(Symbol::Lexeme(self.b.literal("null"))),
            Schema::Boolean => Some(Symbol::Lexeme(self.b.lexeme("boolean", "true|false"))),
            Schema::Number(n) => {
                let regexes::NumberLexeme {
                    regex: re,
                    uncapped,
                } = regexes::number_lexeme(n).map_err(|e| e.at(ptr))?;
                let name = if n.integer { "integer" } else { "number" };
                // Bounds no number satisfies (`minimum` above `maximum`, no multiple of
                // `multipleOf` between them) give a regex matching nothing: no value, so an
                // optional property is left out and a required one is the unsatisfiable error
                // naming it, instead of a key the matcher could start but never finish.
                // (Parsed once per regex, here: the builder keeps the parse for the lexer.)
                let bounded = n.min.is_some() || n.max.is_some() || n.multiple_of.is_some();
                if !bounded && !n.integer {
                    // The generic number every grammar has (parsed once per process).
                    return Ok(Some(Symbol::Lexeme(self.number)));
                }
                if !bounded {
                    return Ok(Some(Symbol::Lexeme(self.b.lexeme(name, &re))));
                }
                if let Some(&l) = self.numbers.get(&re) {
                    return Ok(l.map(Symbol::Lexeme));
                }
                let l = match regex_syntax::Parser::new().parse(&re) {
                    Ok(h) if h.properties().minimum_len().is_none() => None,
                    // A remainder automaton's multiples (`multipleOf: 3`, no upper bound): no
                    // compact regex caps their digits, so the lexeme drops the texts beyond 308
                    // integer digits as an exception (numbers stay finite doubles, issue 19).
                    Ok(_) if uncapped => {
                        let beyond = self
                            .b
                            .lexeme("beyond 308 digits", super::regex::BEYOND_308_DIGITS);
                        Some(self.b.lexeme_except(name, &re, vec![beyond]))
                    }
                    Ok(h) => Some(self.b.lexeme_hir(name, h)),
                    // Reported by the builder, naming the lexeme.
                    Err(_) => Some(self.b.lexeme(name, &re)),
                };
                self.numbers.insert(re, l);
                l.map(Symbol::Lexeme)
            }
            Schema::String(st) => {
                if st.is_plain() {
                    return Ok(Some(Symbol::Lexeme(self.string)));
                }
                let long = st.max_len.unwrap_or(st.min_len).max(st.min_len) > STRING_CHUNK;
                if long && st.pattern.is_none() && st.format.is_none() && st.exclude.is_empty() {
                    return Ok(Some(self.chunked_string(st.min_len, st.max_len)));
                }
                if let Some(&l) = self.strings.get(st) {
                    return Ok(Some(Symbol::Lexeme(l)));
                }
                let lexeme = regexes::string_lexeme_exact(st).map_err(|e| e.at(ptr))?;
                let l = match &lexeme.outside_lengths {
                    None => self.b.lexeme("string", &lexeme.regex),
                    // Bounds no regex of the pattern carries compactly (issue 44): the lexer
                    // drops the strings of other lengths, so its automaton is the pattern's
                    // times a code-point counter, with liveness searched (exact).
                    Some(outside) => {
                        let outside = self.b.lexeme("string length outside bounds", outside);
                        self.b.lexeme_except("string", &lexeme.regex, vec![outside])
                    }
                };
                self.strings.insert(st.clone(), l);
                Some(Symbol::Lexeme(l))
            }
            Schema::Const(vs) => self.emit_values(vs, ptr)?,
            Schema::AnyOf(xs) => {
                let mut alts = Vec::new();
                for x in xs {
                    if let Some(sym) = self.emit(x, ptr)? {
                        if !alts.contains(&vec![sym]) {
                            alts.push(vec![sym]);
                        }
                    }
                }
                match alts.len() {
                    0 => None,
                    1 => Some(alts[0][0]),
                    _ => Some(self.rule("any_of", alts)),
                }
            }
            Schema::Ref(t) => {
                if let Some(&r) = self.refs.get(&t.pointer) {
                    return Ok(Some(Symbol::Rule(r)));
                }
                let name = format!("ref#{}", t.pointer);
                let r = self.b.rule_ref(&name);
                self.refs.insert(t.pointer.clone(), r);
                let target = self.low.ref_schema(t)?;
                match self.emit(&target, &t.pointer)? {
                    Some(sym) => {
                        self.b.define(&name, vec![vec![sym]]);
                    }
                    None => {
                        // Unsatisfiable: an unproductive rule, so uses of it derive nothing.
                        self.b.define(&name, vec![vec![Symbol::Rule(r)]]);
                    }
                }
                Some(Symbol::Rule(r))
            }
            Schema::Array(a) => self.emit_array(a, ptr)?,
            Schema::Object(o) => self.emit_object(o, ptr)?,
        })
    }

    /// A finite set of values: scalars share one lexeme, containers are spelled structurally.
    fn emit_values(&mut self, vs: &[Value], ptr: &str) -> Result<Option<Symbol>, SchemaError> {
        let mut scalars = Vec::new();
        let mut alts = Vec::new();
        for v in vs {
            match v {
                Value::Array(_) | Value::Object(_) => {
                    let sym = self.emit_value(v, ptr)?;
                    alts.push(vec![sym]);
                }
                v => scalars.push(scalar_regex(v)),
            }
        }
        if !scalars.is_empty() {
            let name = if scalars.len() == 1 {
                serde_json::to_string(&vs[0]).unwrap_or_default()
            } else {
                "enum".to_string()
            };
            let lx = self.b.lexeme(&name, &scalars.join("|"));
            alts.push(vec![Symbol::Lexeme(lx)]);
        }
        Ok(match alts.len() {
            0 => None,
            1 if alts[0].len() == 1 => Some(alts[0][0]),
            _ => Some(self.rule("enum", alts)),
        })
    }

    /// The text of one constant value. Under [`PropertyOrder::Any`] a constant object's
    /// members may come in any order, so it is emitted as the object schema "exactly these
    /// members, each with its constant value".
    fn emit_value(&mut self, v: &Value, ptr: &str) -> Result<Symbol, SchemaError> {
        Ok(match v {
            Value::Array(xs) => {
                let mut seq = vec![Symbol::Lexeme(self.lbrack)];
                for (i, x) in xs.iter().enumerate() {
                    if i > 0 {
                        seq.push(Symbol::Lexeme(self.comma));
                    }
                    seq.push(self.emit_value(x, ptr)?);
                }
                seq.push(Symbol::Lexeme(self.rbrack));
                self.rule("const_array", vec![seq])
            }
            Value::Object(m) if self.property_order != PropertyOrder::Schema && m.len() > 1 => {
                let o = ObjectSchema {
                    properties: m
                        .iter()
                        .map(|(k, x)| (k.clone(), Schema::Const(vec![x.clone()])))
                        .collect(),
                    required: m.keys().cloned().collect(),
                    additional: Schema::Unsat("a constant object has no other members".into()),
                    ..Default::default()
                };
                match self.emit_object(&o, ptr)? {
                    Some(sym) => sym,
                    None => {
                        return Err(SchemaError::Unsatisfiable {
                            pointer: display_pointer(ptr),
                            reason: "a constant object is not writable".into(),
                        })
                    }
                }
            }
            Value::Object(m) => {
                let mut seq = vec![Symbol::Lexeme(self.lbrace)];
                for (i, (k, x)) in m.iter().enumerate() {
                    if i > 0 {
                        seq.push(Symbol::Lexeme(self.comma));
                    }
                    seq.push(Symbol::Lexeme(self.key_literal(k)));
                    seq.push(Symbol::Lexeme(self.colon));
                    seq.push(self.emit_value(x, ptr)?);
                }
                seq.push(Symbol::Lexeme(self.rbrace));
                self.rule("const_object", vec![seq])
            }
            v => {
                let re = scalar_regex(v);
                let name = serde_json::to_string(v).unwrap_or_default();
                Symbol::Lexeme(self.b.lexeme(&name, &re))
            }
        })
    }

    fn key_literal(&mut self, k: &str) -> LexemeId {
        let text = serde_json::to_string(k).unwrap_or_else(|_| format!("\"{k}\""));
        self.b.literal(&text)
    }

    fn emit_array(&mut self, a: &ArraySchema, ptr: &str) -> Result<Option<Symbol>, SchemaError> {
        let lk = Symbol::Lexeme(self.lbrack);
        let rk = Symbol::Lexeme(self.rbrack);
        let comma = Symbol::Lexeme(self.comma);
        let items = self.emit(&a.items, ptr)?;
        let max = a.max.map(|m| m.min(u32::MAX as u64) as u32);
        let min = a.min.min(u32::MAX as u64) as u32;
        if a.unique && max.is_none_or(|m| m > 1) {
            return self.emit_unique(a, ptr);
        }
        if let Some(c) = &a.contains {
            if !a.prefix.is_empty() || min > 1 || max.is_some() {
                self.low
                    .refuse("contains", ptr, "combined with prefixItems or item counts")?;
            } else {
                let hit_schema = self.low.intersect(&a.items, c, ptr)?;
                let Some(hit) = self.emit(&hit_schema, ptr)? else {
                    return Ok(None);
                };
                let Some(item) = items else {
                    // Only the hit itself could be an item, but items admit nothing.
                    return Ok(None);
                };
                let item_comma = self.rule("item_comma", vec![vec![item, comma]]);
                let comma_item = self.rule("comma_item", vec![vec![comma, item]]);
                let before = Symbol::Rule(self.b.repeat(item_comma, 0, None));
                let after = Symbol::Rule(self.b.repeat(comma_item, 0, None));
                return Ok(Some(
                    self.rule("contains", vec![vec![lk, before, hit, after, rk]]),
                ));
            }
        }
        let k = a.prefix.len() as u32;
        // Tail after the prefix: (sep item){lo,hi}, sep omitted for the very first element.
        let tail_min = min.saturating_sub(k);
        let tail_max = max.map(|m| m.saturating_sub(k));
        let tail: Option<Symbol> = match items {
            None => {
                if tail_min > 0 {
                    None
                } else {
                    Some(self.rule("empty", vec![vec![]]))
                }
            }
            Some(item) => {
                if tail_max == Some(0) {
                    if tail_min > 0 {
                        None
                    } else {
                        Some(self.rule("empty", vec![vec![]]))
                    }
                } else if k == 0 {
                    let comma_item = self.rule("comma_item", vec![vec![comma, item]]);
                    let rest = self.b.repeat(
                        comma_item,
                        tail_min.saturating_sub(1),
                        tail_max.map(|m| m - 1),
                    );
                    let mut alts = vec![vec![item, Symbol::Rule(rest)]];
                    if tail_min == 0 {
                        alts.push(vec![]);
                    }
                    Some(self.rule("items", alts))
                } else {
                    let comma_item = self.rule("comma_item", vec![vec![comma, item]]);
                    Some(Symbol::Rule(self.b.repeat(comma_item, tail_min, tail_max)))
                }
            }
        };
        // Prefix chain: P(i) = end-here | sep p_i P(i+1); P(k) = tail.
        let mut next = tail;
        for i in (0..k as usize).rev() {
            let mut alts = Vec::new();
            if (i as u32) >= min {
                alts.push(vec![]);
            }
            if max.is_none_or(|m| (i as u32) < m) {
                if let (Some(p), Some(rest)) = (self.emit(&a.prefix[i], ptr)?, next) {
                    let mut alt = Vec::new();
                    if i > 0 {
                        alt.push(comma);
                    }
                    alt.push(p);
                    alt.push(rest);
                    alts.push(alt);
                }
            }
            next = if alts.is_empty() {
                None
            } else {
                Some(self.rule("prefix", alts))
            };
        }
        Ok(next.map(|body| self.rule("array", vec![vec![lk, body, rk]])))
    }

    fn emit_unique(&mut self, a: &ArraySchema, ptr: &str) -> Result<Option<Symbol>, SchemaError> {
        let domain: Option<Vec<Value>> = if a.prefix.is_empty() {
            match &a.items {
                Schema::Const(vs) => Some(vs.clone()),
                Schema::Boolean => Some(vec![Value::Bool(false), Value::Bool(true)]),
                Schema::Null => Some(vec![Value::Null]),
                _ => None,
            }
        } else {
            None
        };
        let Some(domain) = domain.filter(|d| d.len() <= MAX_UNIQUE_DOMAIN) else {
            self.low.refuse(
                "uniqueItems",
                ptr,
                "items are not a small finite set of values",
            )?;
            let mut relaxed = a.clone();
            relaxed.unique = false;
            return self.emit_array(&relaxed, ptr);
        };
        let n = domain.len();
        let syms: Vec<Symbol> = domain
            .iter()
            .map(|v| self.emit_value(v, ptr))
            .collect::<Result<_, _>>()?;
        let comma = Symbol::Lexeme(self.comma);
        let max = a.max.unwrap_or(u64::MAX);
        // U(set): the rest of the list given the set of values used so far.
        let mut rules: HashMap<u32, Option<Symbol>> = HashMap::new();
        for set in (0u32..(1 << n)).rev() {
            let used = set.count_ones() as u64;
            let mut alts = Vec::new();
            if used >= a.min {
                alts.push(vec![]);
            }
            if used < max {
                for (i, &sym) in syms.iter().enumerate() {
                    if set & (1 << i) != 0 {
                        continue;
                    }
                    if let Some(Some(rest)) = rules.get(&(set | (1 << i))) {
                        let mut alt = Vec::new();
                        if set != 0 {
                            alt.push(comma);
                        }
                        alt.push(sym);
                        alt.push(*rest);
                        alts.push(alt);
                    }
                }
            }
            let r = if alts.is_empty() {
                None
            } else {
                Some(self.rule("unique", alts))
            };
            rules.insert(set, r);
        }
        let lk = Symbol::Lexeme(self.lbrack);
        let rk = Symbol::Lexeme(self.rbrack);
        Ok(rules
            .get(&0)
            .copied()
            .flatten()
            .map(|body| self.rule("unique_array", vec![vec![lk, body, rk]])))
    }

    /// The lexeme of a key that is none of `names`, built once per set of names. For
    /// printable-ASCII names (what real schemas list) it is a canonically spelled key
    /// ([`regexes::canonical_key`]) except the names' own key lexemes, which the lexer
    /// builds once per object (see [`LexemeKind::Except`](crate::grammar::LexemeKind::Except));
    /// otherwise one regex for the complement ([`regexes::string_except`]).
    fn except_key(&mut self, name: &str, names: &[String]) -> LexemeId {
        let mut set = names.to_vec();
        set.sort_unstable();
        set.dedup();
        if let Some(&id) = self.except_keys.get(&set) {
            return id;
        }
        let id = if set.iter().all(|n| regexes::is_printable_ascii(n)) {
            let except = set.iter().map(|n| self.key_literal(n)).collect();
            self.b
                .lexeme_except(name, &regexes::canonical_key(), except)
        } else {
            self.b.lexeme_hir(name, regexes::string_except(&set))
        };
        self.except_keys.insert(set, id);
        id
    }

    /// Key/value alternatives for properties not listed in `properties`.
    fn additional_entries(
        &mut self,
        o: &ObjectSchema,
        ptr: &str,
    ) -> Result<Vec<Vec<Symbol>>, SchemaError> {
        let colon = Symbol::Lexeme(self.colon);
        let known: Vec<String> = o.properties.iter().map(|(k, _)| k.clone()).collect();
        let mut out = Vec::new();
        if !o.pattern_properties.is_empty() {
            let all_any = o.pattern_properties.iter().all(|(_, s)| *s == Schema::Any);
            if !(all_any && o.additional == Schema::Any) {
                return self.pattern_entries(o, &known, ptr);
            }
        }
        let Some(value) = self.emit(&o.additional, ptr)? else {
            return Ok(out);
        };
        let key_re = match &o.property_names {
            None => {
                if known.is_empty() {
                    regexes::any_string()
                } else {
                    let key = Symbol::Lexeme(self.except_key("additional key", &known));
                    out.push(vec![key, colon, value]);
                    return Ok(out);
                }
            }
            Some(pn) => match pn {
                Schema::Const(vs) => {
                    let names: Vec<String> = vs
                        .iter()
                        .filter_map(|v| v.as_str().map(str::to_string))
                        .filter(|n| !known.contains(n))
                        .collect();
                    if names.is_empty() {
                        return Ok(out);
                    }
                    names
                        .iter()
                        .map(|n| {
                            regex_syntax::escape(&serde_json::to_string(n).unwrap_or_default())
                        })
                        .collect::<Vec<_>>()
                        .join("|")
                }
                Schema::String(st) if known.is_empty() => {
                    regexes::string_lexeme(st).map_err(|e| e.at(ptr))?
                }
                Schema::String(st)
                    if st.min_len == 0
                        && st.max_len.is_none()
                        && st.pattern.is_none()
                        && st.format.is_none() =>
                {
                    let mut names = known.clone();
                    names.extend(st.exclude.iter().cloned());
                    let key = Symbol::Lexeme(self.except_key("additional key", &names));
                    out.push(vec![key, colon, value]);
                    return Ok(out);
                }
                Schema::Unsat(_) => return Ok(out),
                _ => {
                    self.low.refuse(
                        "propertyNames",
                        ptr,
                        "only string schemas without listed properties, or enums",
                    )?;
                    let key = Symbol::Lexeme(self.except_key("additional key", &known));
                    out.push(vec![key, colon, value]);
                    return Ok(out);
                }
            },
        };
        let key = Symbol::Lexeme(self.b.lexeme("additional key", &key_re));
        out.push(vec![key, colon, value]);
        Ok(out)
    }

    /// Key/value alternatives for the names not listed in `properties` when
    /// `patternProperties` constrain them, as a partition of the names decided on automata:
    /// each group of patterns with one schema gets the keys its patterns match (but the listed
    /// names, which are their own entries with the listed and every matching pattern's schema
    /// intersected), and `additionalProperties` the keys no pattern matches (but the listed
    /// names). The regions are lexemes with exceptions ([`LexemeKind::Except`]), so no
    /// complement regex is built. Exact when every two patterns with different schemas are
    /// disjoint (decided on automata; otherwise a name could need both schemas at once, which
    /// would take an intersection of their key languages: refused). Keys are spelled as the
    /// string encoder spells a pattern's strings ([`regexes::json_key_space`]). A pattern
    /// matching every name is spelled as "any name but the listed ones", so listed names keep
    /// their own (stricter) schema.
    ///
    /// [`LexemeKind::Except`]: crate::grammar::LexemeKind::Except
    fn pattern_entries(
        &mut self,
        o: &ObjectSchema,
        known: &[String],
        ptr: &str,
    ) -> Result<Vec<Vec<Symbol>>, SchemaError> {
        let colon = Symbol::Lexeme(self.colon);
        let pats = &o.pattern_properties;
        if o.property_names.is_some() {
            self.low
                .refuse("propertyNames", ptr, "combined with patternProperties")?;
        }
        // Patterns with one schema form one group: their keys are one region.
        let mut groups: Vec<(Vec<String>, Schema)> = Vec::new();
        for (p, ps) in pats {
            match groups.iter_mut().find(|(_, s)| s == ps) {
                Some((g, _)) => g.push(p.clone()),
                None => groups.push((vec![p.clone()], ps.clone())),
            }
        }
        for (i, (g, _)) in groups.iter().enumerate() {
            for (h, _) in &groups[i + 1..] {
                for p in g {
                    for q in h {
                        if !regexes::patterns_disjoint(p, q) {
                            self.low.refuse(
                                "patternProperties",
                                ptr,
                                format!("patterns `{p}` and `{q}` overlap with different schemas"),
                            )?;
                        }
                    }
                }
            }
        }
        let universal = pats.iter().find(|(p, _)| regexes::pattern_is_universal(p));
        let mut out = Vec::new();
        if let Some((_, us)) = universal {
            // Every other pattern overlaps this one, so has the same schema (or was refused).
            if let Some(value) = self.emit(us, ptr)? {
                let key = Symbol::Lexeme(self.except_key("pattern key", known));
                out.push(vec![key, colon, value]);
            }
            return Ok(out);
        }
        // Every key a pattern matches, excepted from the additional keys.
        let mut matched = Vec::new();
        for (g, value_schema) in &groups {
            let mut res = Vec::new();
            for p in g {
                let re = regexes::string_lexeme(&StringSchema {
                    pattern: Some(p.clone()),
                    ..Default::default()
                })
                .map_err(|e| e.at(ptr))?;
                if re != crate::schema::regex::NOTHING {
                    res.push(re);
                }
            }
            let re = match res.len() {
                0 => continue,
                1 => res.pop().unwrap_or_default(),
                _ => format!("(?:{})", res.join(")|(?:")),
            };
            let plain = self.b.lexeme("pattern key", &re);
            matched.push(plain);
            let Some(value) = self.emit(value_schema, ptr)? else {
                continue;
            };
            let mut names = Vec::new();
            for k in known {
                let mut hit = false;
                for p in g {
                    hit |= regexes::pattern_matches(p, k).map_err(|e| e.at(ptr))?;
                }
                if hit {
                    names.push(self.name_lexeme(k));
                }
            }
            let key = if names.is_empty() {
                plain
            } else {
                self.b.lexeme_except("pattern key", &re, names)
            };
            out.push(vec![Symbol::Lexeme(key), colon, value]);
        }
        if let Some(value) = self.emit(&o.additional, ptr)? {
            let mut except: Vec<LexemeId> = known.iter().map(|k| self.name_lexeme(k)).collect();
            except.extend(matched);
            let key = self
                .b
                .lexeme_except("additional key", &regexes::json_key_space(), except);
            out.push(vec![Symbol::Lexeme(key), colon, value]);
        }
        Ok(out)
    }

    /// The lexeme of every spelling [`regexes::json_key_space`] has for the listed name `k`:
    /// its key literal when that is the only one (printable ASCII without `/`), else a regex.
    fn name_lexeme(&mut self, k: &str) -> LexemeId {
        if regexes::is_printable_ascii(k) && !k.contains('/') {
            self.key_literal(k)
        } else {
            self.b
                .lexeme("listed name", &crate::schema::regex::property_name(k))
        }
    }

    fn emit_object(&mut self, o: &ObjectSchema, ptr: &str) -> Result<Option<Symbol>, SchemaError> {
        let colon = Symbol::Lexeme(self.colon);
        // Known properties that may appear, with their key/value sequences.
        let mut entries: Vec<(Vec<Symbol>, bool)> = Vec::new();
        for (k, s) in &o.properties {
            let required = o.required.contains(k);
            let mut s = if o.pattern_properties.is_empty() {
                s.clone()
            } else {
                // Pattern properties matching a listed name apply to it too.
                self.low.property_schema(o, k, ptr)?
            };
            if let Some(pn) = &o.property_names {
                let pn = pn.clone();
                if !self.low.accepts(&pn, &Value::String(k.clone()), ptr)? {
                    s = Schema::Unsat("name rejected by propertyNames".into());
                }
            }
            // The property's own pointer, so errors inside it (a limit) name where it is.
            let pptr = pointer::push(&format!("{ptr}/properties"), k);
            match self.emit(&s, &pptr)? {
                Some(v) => {
                    let key = Symbol::Lexeme(self.key_literal(k));
                    entries.push((vec![key, colon, v], required));
                }
                None => {
                    if required {
                        return Ok(None);
                    }
                }
            }
        }
        // Required names not listed in `properties` are additional properties that must
        // appear: write them as listed properties with the additional schema.
        for r in &o.required {
            if o.property(r).is_none() {
                let s = self.low.property_schema(o, r, ptr)?;
                let Some(v) = self.emit(&s, ptr)? else {
                    return Ok(None);
                };
                let key = Symbol::Lexeme(self.key_literal(r));
                entries.push((vec![key, colon, v], true));
            }
        }
        let mut o2 = o.clone();
        for r in &o.required {
            if o2.property(r).is_none() {
                o2.properties.push((r.clone(), Schema::Any));
            }
        }
        let extra = self.additional_entries(&o2, ptr)?;
        let min = o.min;
        let max = o.max;
        let cap = max.unwrap_or(min).max(min).max(1);
        // One listed property has a single order: the schema-order rules are the same grammar.
        // Any order, and a window an object fits in, is exact: a permutation rule, whose
        // written set the parser carries. A larger object under a window gets the widest
        // window whose states fit the budget, down to width 1, which is schema order.
        let n = entries.len();
        let counts = if max.is_none() && min <= 1 {
            1
        } else {
            cap as usize + 1
        };
        let budget = self.max_property_subsets;
        let window = match self.property_order {
            PropertyOrder::Window(w) if n > 1 && (w as usize) < n => {
                let mut w = (w as usize).min(n - 1);
                let states = |w: usize| match 1usize.checked_shl(w as u32 - 1) {
                    Some(s) if w < 48 => s.saturating_mul(n + 1).saturating_mul(counts),
                    _ => usize::MAX,
                };
                while w > 1 && states(w) > budget {
                    w -= 1;
                }
                Some(w)
            }
            _ => None,
        };
        let any_order = self.property_order != PropertyOrder::Schema && n > 1 && window.is_none();
        let window = window.filter(|&w| w > 1);
        if any_order {
            return Ok(self.obj_permutation(&entries, &extra, min, max));
        } else if window.is_none() {
            let states = (entries.len() + 1).saturating_mul(cap as usize + 1);
            if states > MAX_COUNTED_STATES {
                return Err(SchemaError::LimitExceeded {
                    what: "object property-count states".into(),
                    limit: MAX_COUNTED_STATES,
                    given: states,
                });
            }
        }
        let mut st = ObjState {
            entries,
            extra,
            min,
            max,
            cap,
            memo: HashMap::new(),
            members: Vec::new(),
        };
        let body = if let Some(w) = window {
            self.obj_window_rule(&mut st, w, 0, 0, 0)
        } else {
            self.obj_rule(&mut st, 0, 0)
        };
        let Some(body) = body else {
            return Ok(None);
        };
        let lb = Symbol::Lexeme(self.lbrace);
        let rb = Symbol::Lexeme(self.rbrace);
        Ok(Some(self.rule("object", vec![vec![lb, body, rb]])))
    }

    fn next_count(st: &ObjState, c: u64) -> Option<u64> {
        match st.max {
            Some(m) => (c < m).then_some(c + 1),
            None => Some((c + 1).min(st.cap)),
        }
    }

    /// Declares the rule of a new object tail (`props#N`), to be defined by [`Self::finish_tail`].
    fn open_tail(&mut self) -> RuleId {
        self.b.declare("props")
    }

    /// Defines an object tail with `alts`; `None` when it has none (unproductive: still
    /// defined, since every declared rule must be, but never used).
    fn finish_tail(&mut self, id: RuleId, alts: Vec<Vec<Symbol>>) -> Option<Symbol> {
        if alts.is_empty() {
            self.b.define_declared(id, vec![vec![Symbol::Rule(id)]]);
            None
        } else {
            self.b.define_declared(id, alts);
            Some(Symbol::Rule(id))
        }
    }

    /// One member then the rest of the object: `, "key":value rest` (no comma before the
    /// first member, when `c` = 0 members were written).
    fn member_alt(&self, c: u64, kv: &[Symbol], rest: Symbol) -> Vec<Symbol> {
        let mut alt = Vec::with_capacity(kv.len() + 2);
        if c > 0 {
            alt.push(Symbol::Lexeme(self.comma));
        }
        alt.extend_from_slice(kv);
        alt.push(rest);
        alt
    }

    /// The rest of an object in schema order after the listed properties before `i` were
    /// settled (written or absent), with `c` members written: the state where additional
    /// properties (whose keys never equal a listed name, so the choice stays deterministic)
    /// may come, in any number the count bounds allow. Its alternatives: the end (every
    /// listed property from `i` on optional, the count reached), an additional property then
    /// this state again, or a listed property ([`Self::obj_next_rule`]).
    ///
    /// Unambiguous: an absent property is skipped only on the way to writing a later one, so
    /// each member sequence has one parse. An earlier layout also skipped on its own
    /// (`tail(i) → tail(i+1)`, extras at every `i`): an additional property could attach
    /// before or after each skip, one parse per optional property, all alive to the end of
    /// the object, each with its own chain of Earley items (the ESLint `rules` object of
    /// MaskBench's Github_ultra---o9981 reached 800k items over 240 rows).
    fn obj_rule(&mut self, st: &mut ObjState, i: usize, c: u64) -> Option<Symbol> {
        let key = (Tail::State, i, c);
        if let Some(r) = st.memo.get(&key) {
            return *r;
        }
        let id = self.open_tail();
        let mut alts = Vec::new();
        if st.entries[i..].iter().all(|(_, required)| !required) && c >= st.min {
            alts.push(vec![]);
        }
        if let Some(listed) = self.obj_next_rule(st, i, c) {
            alts.push(vec![listed]);
        }
        let next = Self::next_count(st, c);
        if let Some(nc) = next.filter(|_| !st.extra.is_empty()) {
            let rest = if nc == c {
                // Saturated count: loop on this rule, only if it is productive otherwise.
                (!alts.is_empty()).then_some(Symbol::Rule(id))
            } else {
                self.obj_rule(st, i, nc)
            };
            if let Some(rest) = rest {
                for kv in &st.extra {
                    alts.push(self.member_alt(c, kv, rest));
                }
            }
        }
        let r = self.finish_tail(id, alts);
        st.memo.insert(key, r);
        r
    }

    /// In schema order, the next member is a listed property at `i` or after, from the state
    /// [`Self::obj_rule`]`(i, c)`: property `i` then the state after it, or (when `i` is
    /// optional, so absent) a listed property after `i`.
    fn obj_next_rule(&mut self, st: &mut ObjState, i: usize, c: u64) -> Option<Symbol> {
        if i == st.entries.len() {
            return None;
        }
        let key = (Tail::Next, i, c);
        if let Some(r) = st.memo.get(&key) {
            return *r;
        }
        let id = self.open_tail();
        let mut alts = Vec::new();
        let (kv, required) = st.entries[i].clone();
        if let Some(nc) = Self::next_count(st, c) {
            if let Some(rest) = self.obj_rule(st, i + 1, nc) {
                alts.push(self.member_alt(c, &kv, rest));
            }
        }
        if !required {
            if let Some(later) = self.obj_next_rule(st, i + 1, c) {
                alts.push(vec![later]);
            }
        }
        let r = self.finish_tail(id, alts);
        st.memo.insert(key, r);
        r
    }
}

impl Emitter<'_, '_> {
    /// An object whose listed properties come in any order: `{`, a permutation rule
    /// ([`crate::grammar::Permutation`]) of the listed properties (each at most once, the
    /// required ones present) and the additional ones (any number, keys never a listed
    /// name), within `min`/`max` members, `}`. Exact for any number of properties: the
    /// parser carries the written set. `None` when no object fits (more required properties
    /// than `max`, or `min` out of reach).
    fn obj_permutation(
        &mut self,
        entries: &[(Vec<Symbol>, bool)],
        extra: &[Vec<Symbol>],
        min: u64,
        max: Option<u64>,
    ) -> Option<Symbol> {
        let n_required = entries.iter().filter(|(_, r)| *r).count() as u64;
        let lo = n_required.max(min);
        if max.is_some_and(|m| lo > m) || (extra.is_empty() && (entries.len() as u64) < lo) {
            return None;
        }
        let members: Vec<(Vec<Symbol>, Option<u32>)> = entries
            .iter()
            .enumerate()
            .map(|(j, (kv, _))| (kv.clone(), Some(j as u32)))
            .chain(extra.iter().map(|kv| (kv.clone(), None)))
            .collect();
        let required = (0..entries.len() as u32)
            .filter(|&j| entries[j as usize].1)
            .collect();
        let comma = Symbol::Lexeme(self.comma);
        let head = self
            .b
            .permutation("props", comma, &members, required, min, max);
        let lb = Symbol::Lexeme(self.lbrace);
        let rb = Symbol::Lexeme(self.rbrace);
        Some(self.rule("object", vec![vec![lb, Symbol::Rule(head), rb]]))
    }
}

/// Slides a window state past the written properties at its front: `(first, ahead)` with bit
/// 0 of `ahead` clear.
fn settle(mut first: usize, mut ahead: usize) -> (usize, usize) {
    while ahead & 1 != 0 {
        first += 1;
        ahead >>= 1;
    }
    (first, ahead)
}

impl Emitter<'_, '_> {
    /// The rest of an object under a property window of `w` after some listed properties
    /// were written or settled as absent: `first` is the first unsettled listed property,
    /// bit k of `ahead` says that property `first + k` was already written (bit 0 is
    /// clear), `c` members were written. Next may come any unwritten property in
    /// `first..first + w`, a property beyond the window ([`Self::obj_window_far_rule`]:
    /// the unwritten properties it pushes out of the window are settled as absent), or an
    /// additional property, anywhere the count allows; the object may end once every
    /// unwritten listed property is optional.
    ///
    /// Unambiguous: absent properties are settled only when a property beyond the window is
    /// written (or at the end), never by an empty step of their own, so each member sequence
    /// has one parse. (An earlier layout settled `first` by an empty step whenever it was
    /// optional: up to `w` parses of a prefix, with additional properties attached before or
    /// after each settling.)
    fn obj_window_rule(
        &mut self,
        st: &mut ObjState,
        w: usize,
        first: usize,
        ahead: usize,
        c: u64,
    ) -> Option<Symbol> {
        let key = (Tail::State, (first << 32) | ahead, c);
        if let Some(r) = st.memo.get(&key) {
            return *r;
        }
        let id = self.open_tail();
        let n = st.entries.len();
        let written = |j: usize| j - first < w && (ahead >> (j - first)) & 1 != 0;
        let mut alts = Vec::new();
        if (first..n).all(|j| written(j) || !st.entries[j].1) && c >= st.min {
            alts.push(vec![]);
        }
        let next = Self::next_count(st, c);
        if let Some(nc) = next {
            for k in 0..w.min(n - first) {
                if ahead & (1 << k) != 0 {
                    continue;
                }
                let (f2, a2) = settle(first, ahead | (1 << k));
                if let Some(rest) = self.obj_window_rule(st, w, f2, a2, nc) {
                    alts.push(self.window_member(st, first + k, c, rest));
                }
            }
        }
        if let Some(far) = self.obj_window_far_rule(st, w, first, ahead, c) {
            alts.push(vec![far]);
        }
        if let Some(nc) = next.filter(|_| !st.extra.is_empty()) {
            let rest = if nc == c {
                // Saturated count: loop on this rule, only if it is productive otherwise.
                (!alts.is_empty()).then_some(Symbol::Rule(id))
            } else {
                self.obj_window_rule(st, w, first, ahead, nc)
            };
            if let Some(rest) = rest {
                for i in 0..st.extra.len() {
                    alts.push(self.window_member(st, n + i, c, rest));
                }
            }
        }
        let r = self.finish_tail(id, alts);
        st.memo.insert(key, r);
        r
    }

    /// From the window state [`Self::obj_window_rule`]`(first, ahead, c)`, a listed property
    /// beyond the window written next. Writing it pushes `first` (unwritten) out of the
    /// window, settled as absent, so `first` must be optional; the window slides past it and
    /// past the written properties after it. Then either a property that entered the window
    /// is written, or one still beyond the slid window (settling the next unwritten one in
    /// turn).
    fn obj_window_far_rule(
        &mut self,
        st: &mut ObjState,
        w: usize,
        first: usize,
        ahead: usize,
        c: u64,
    ) -> Option<Symbol> {
        let n = st.entries.len();
        if first + w >= n || st.entries[first].1 {
            return None;
        }
        let key = (Tail::Next, (first << 32) | ahead, c);
        if let Some(r) = st.memo.get(&key) {
            return *r;
        }
        let id = self.open_tail();
        let mut alts = Vec::new();
        // The properties from `first + w` on are unwritten, so the slide stops by then.
        let (f2, a2) = settle(first + 1, ahead >> 1);
        if let Some(nc) = Self::next_count(st, c) {
            for t in first + w..(f2 + w).min(n) {
                let (f3, a3) = settle(f2, a2 | (1 << (t - f2)));
                if let Some(rest) = self.obj_window_rule(st, w, f3, a3, nc) {
                    alts.push(self.window_member(st, t, c, rest));
                }
            }
        }
        if let Some(later) = self.obj_window_far_rule(st, w, f2, a2, c) {
            alts.push(vec![later]);
        }
        let r = self.finish_tail(id, alts);
        st.memo.insert(key, r);
        r
    }

    /// One member under a property window, then the rest of the object: `member rest`,
    /// where `member` is a rule `, "key":value` (no comma before the first member, when `c` =
    /// 0) for listed property `idx` (additional-property form `idx - entries.len()` past
    /// them), built once per object and comma form. A window makes `2^(w-1)` states per
    /// position, each listing up to `w` members: sharing each member's symbols shrinks the
    /// grammar (the largest objects' compile time is proportional to its symbols) for one
    /// more Earley item per predicted member.
    fn window_member(
        &mut self,
        st: &mut ObjState,
        idx: usize,
        c: u64,
        rest: Symbol,
    ) -> Vec<Symbol> {
        let n = st.entries.len();
        if st.members.is_empty() {
            st.members = vec![[None; 2]; n + st.extra.len()];
        }
        let comma = usize::from(c > 0);
        let member = match st.members[idx][comma] {
            Some(m) => m,
            None => {
                let kv = if idx < n {
                    &st.entries[idx].0
                } else {
                    &st.extra[idx - n]
                };
                let mut alt = Vec::with_capacity(kv.len() + 1);
                if c > 0 {
                    alt.push(Symbol::Lexeme(self.comma));
                }
                alt.extend_from_slice(kv);
                let id = self.b.declare("member");
                self.b.define_declared(id, vec![alt]);
                st.members[idx][comma] = Some(Symbol::Rule(id));
                Symbol::Rule(id)
            }
        };
        vec![member, rest]
    }
}

/// Which rule of an object state a memo entry is: the state itself, or its "next listed
/// property" chain ([`Emitter::obj_next_rule`], [`Emitter::obj_window_far_rule`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Tail {
    State,
    Next,
}

struct ObjState {
    entries: Vec<(Vec<Symbol>, bool)>,
    extra: Vec<Vec<Symbol>>,
    min: u64,
    max: Option<u64>,
    cap: u64,
    memo: HashMap<(Tail, usize, u64), Option<Symbol>>,
    /// Under a property window, each member as one rule ([`Emitter::window_member`]): per
    /// listed property, then per additional-property form, without and with its comma.
    members: Vec<[Option<Symbol>; 2]>,
}

/// The regex of a scalar constant's JSON text. Integer-valued numbers also match their
/// `.0` spellings, since JSON Schema compares numbers by value.
fn scalar_regex(v: &Value) -> String {
    let text = serde_json::to_string(v).unwrap_or_default();
    match v {
        Value::Number(n) => {
            let f = n.as_f64().unwrap_or(f64::NAN);
            if n.is_i64() || n.is_u64() {
                format!("{}(?:\\.0+)?", regex_syntax::escape(&text))
            } else if f.fract() == 0.0 && f.abs() < 1e15 {
                let int = format!("{}", f as i64);
                format!("{}(?:\\.0+)?", regex_syntax::escape(&int))
            } else {
                regex_syntax::escape(&text)
            }
        }
        _ => regex_syntax::escape(&text),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use crate::matcher::{CompiledGrammar, Limits, Matcher};
    use crate::schema::{compile, CompileOptions, PropertyOrder};
    use crate::toktrie::{SyntheticVocab, TokenId};

    /// Whether the grammar of `schema` accepts `text`, fed byte by byte.
    fn accepts(cg: &Arc<CompiledGrammar>, text: &str) -> bool {
        let mut m = Matcher::new(cg.clone()).unwrap();
        m.consume_bytes(text.as_bytes()).is_ok() && m.is_accepting()
    }

    /// Long strings are chunk lexemes plus a tail (issue 24): every length on either side of
    /// the bounds and of the chunk boundaries is accepted exactly when it is within the
    /// bounds, with characters that are escapes or several bytes counted once.
    #[test]
    fn chunked_strings_accept_exactly_the_bounded_lengths() {
        let vocab = Arc::new(SyntheticVocab::byte_level());
        let k = super::STRING_CHUNK;
        for (min, max) in [
            (0, Some(k + 1)),
            (k - 6, Some(2 * k + 3)),
            (k + 1, None),
            (2 * k, Some(2 * k)),
            (3, Some(5 * k)),
            (0, Some(32767)),
        ] {
            let mut schema = json!({ "type": "string", "minLength": min });
            if let Some(max) = max {
                schema["maxLength"] = json!(max);
            }
            let c = compile(&schema, &CompileOptions::default()).unwrap();
            let cg = Arc::new(
                CompiledGrammar::new(c.grammar, vocab.clone(), Limits::default()).unwrap(),
            );
            let mut lengths = vec![0, 1, min.saturating_sub(1), min, min + 1, k - 1, k, k + 1];
            lengths.extend([2 * k - 1, 2 * k, 2 * k + 1, 2 * k + 2, 2 * k + 3, 2 * k + 4]);
            if let Some(max) = max {
                lengths.extend([max.saturating_sub(1), max, max + 1]);
            }
            for len in lengths.into_iter().filter(|&l| l <= 6 * k) {
                // Plain, escaped and multi-byte characters, in turn.
                let body: String = (0..len)
                    .map(|i| match i % 3 {
                        0 => "a",
                        1 => "\\n",
                        _ => "é",
                    })
                    .collect();
                let want = len >= min && max.is_none_or(|m| len <= m);
                assert_eq!(
                    accepts(&cg, &format!("\"{body}\"")),
                    want,
                    "minLength {min}, maxLength {max:?}, length {len}"
                );
            }
        }
    }

    /// Issue 19: a small model looped `1000…` past 400 digits under `{"type": "integer"}`,
    /// valid JSON that serde_json refuses ("number out of range"), and `1e400` was grammatical.
    /// Numbers the grammar takes are finite doubles: the matcher and the reference acceptor
    /// both stop at 308 integer digits and at an exponent that would pass 1e308.
    #[test]
    fn numbers_stay_finite_doubles() {
        use crate::schema::reference::Acceptor;
        let vocab = Arc::new(SyntheticVocab::byte_level());
        let d308 = format!("1{}", "0".repeat(307));
        let d309 = format!("1{}", "0".repeat(308));
        let d400 = format!("1{}", "0".repeat(399));
        let cases = [
            (json!({"type": "integer"}), "{}"),
            (json!({"type": "number"}), "{}"),
            (json!({"type": "integer", "minimum": 1}), "{}"),
            (json!({"type": "integer", "multipleOf": 2}), "{}"),
            (json!({}), "{}"),
            (
                json!({"type": "object", "properties": {"n": {"type": "integer"}},
                       "required": ["n"], "additionalProperties": false}),
                r#"{"n":{}}"#,
            ),
            (
                json!({"type": "object", "properties": {"x": {"type": "number"}},
                       "required": ["x"], "additionalProperties": false}),
                r#"{"x":{}}"#,
            ),
        ];
        for (schema, wrap) in cases {
            let c = compile(&schema, &CompileOptions::default()).unwrap();
            let mut acceptor = Acceptor::new(&c.grammar).unwrap();
            let cg = Arc::new(
                CompiledGrammar::new(c.grammar.clone(), vocab.clone(), Limits::default()).unwrap(),
            );
            let integer = schema.to_string().contains("integer");
            let mut check = |n: &str, want: bool| {
                let text = wrap.replace("{}", n);
                assert_eq!(accepts(&cg, &text), want, "{schema}: {text:.60}");
                assert_eq!(
                    acceptor.accepts(text.as_bytes()).is_ok(),
                    want,
                    "{schema}: {text:.60}"
                );
                if want {
                    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
                    let n = if v.is_object() {
                        v.as_object().unwrap().values().next().unwrap().clone()
                    } else {
                        v
                    };
                    assert!(n.as_f64().is_some_and(f64::is_finite), "{text:.60}");
                }
            };
            check("12", true);
            check(&d308, true);
            check(&d309, false);
            check(&d400, false);
            check("1e400", false);
            check("1e308", false);
            if !integer {
                check("1e307", true);
                check("1e0000307", true);
                check("2.5e-400", true);
            }
        }
        // A remainder automaton's multiples are capped by an exception lexeme instead.
        for schema in [
            json!({"type": "integer", "multipleOf": 3}),
            json!({"type": "number", "multipleOf": 7, "minimum": 0}),
            json!({"type": "array", "items": {"type": "integer", "multipleOf": 3}}),
        ] {
            let c = compile(&schema, &CompileOptions::default()).unwrap();
            let mut acceptor = Acceptor::new(&c.grammar).unwrap();
            let cg = Arc::new(
                CompiledGrammar::new(c.grammar.clone(), vocab.clone(), Limits::default()).unwrap(),
            );
            let wrap = |n: &str| {
                if schema["type"] == "array" {
                    format!("[{n},{n}]")
                } else {
                    n.to_string()
                }
            };
            for (n, want) in [
                ("21".to_string(), true),
                ("22".to_string(), false),
                (format!("21{}", "0".repeat(306)), true),
                (format!("21{}", "0".repeat(307)), false),
                (format!("21{}", "0".repeat(400)), false),
            ] {
                let text = wrap(&n);
                assert_eq!(accepts(&cg, &text), want, "{schema}: {text:.60}");
                assert_eq!(
                    acceptor.accepts(text.as_bytes()).is_ok(),
                    want,
                    "{schema}: {text:.60}"
                );
            }
        }
        let e = compile(
            &json!({"properties": {"huge": {"type": "number", "minimum": 1e308}}}),
            &CompileOptions::default(),
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("unsupported keyword `minimum` at /properties/huge"),
            "{e}"
        );
    }

    /// Where listed properties may come, for the oracle below: a window of `w` schema
    /// positions (1: schema order), or any order.
    #[derive(Clone, Copy, Debug)]
    enum Order {
        Window(usize),
        Any,
    }

    /// An object's shape for the oracle: which listed properties are required, whether
    /// additional properties are allowed, the member count bounds.
    #[derive(Debug)]
    struct Shape {
        required: Vec<bool>,
        extras: bool,
        min: u64,
        max: Option<u64>,
    }

    /// Brute-force oracle: whether the member sequence `seq` (`Some(i)` listed property `i`,
    /// `None` an additional one) is an instance of `shape` written in `order`. Under a window,
    /// writing property `t` settles as absent every unwritten property more than `w - 1`
    /// positions before it (each must be optional, and may not come later).
    fn oracle(shape: &Shape, order: Order, seq: &[Option<usize>]) -> bool {
        let n = shape.required.len();
        let mut written = vec![false; n];
        let mut first = 0;
        for m in seq {
            let Some(t) = *m else {
                if !shape.extras {
                    return false;
                }
                continue;
            };
            if written[t] {
                return false;
            }
            if let Order::Window(w) = order {
                if t < first {
                    return false;
                }
                let settled = first.max((t + 1).saturating_sub(w));
                if (first..settled).any(|j| !written[j] && shape.required[j]) {
                    return false;
                }
                first = settled;
            }
            written[t] = true;
            while first < n && written[first] {
                first += 1;
            }
        }
        let count = seq.len() as u64;
        (0..n).all(|j| written[j] || !shape.required[j])
            && count >= shape.min
            && shape.max.is_none_or(|m| count <= m)
    }

    /// The object rules (schema order, windows, any order) accept exactly the member
    /// sequences of the brute-force oracle, over small objects: every required/optional
    /// pattern of up to 3 listed properties (some of 4), with and without additional
    /// properties, under member count bounds, every sequence of up to 5 members (4 for 4
    /// properties). A token per member (with and without its comma), so the walk is over
    /// member sequences; a member with the wrong comma is never allowed. Guards the
    /// unambiguous tails (states where additional properties attach, chains of skipped
    /// properties) against the languages of the earlier ambiguous rules.
    #[test]
    fn object_rules_accept_exactly_the_oracle_sequences() {
        let mut checked = 0usize;
        for n in 0..=4usize {
            // Tokens: `{`, `}`, then per member `"k":0` and `,"k":0` (listed, then extra).
            let mut tokens: Vec<Vec<u8>> = vec![b"{".to_vec(), b"}".to_vec()];
            let keys: Vec<String> = (0..n)
                .map(|i| format!("p{i}"))
                .chain(["x".to_string()])
                .collect();
            for k in &keys {
                tokens.push(format!("\"{k}\":0").into_bytes());
                tokens.push(format!(",\"{k}\":0").into_bytes());
            }
            let vocab = Arc::new(SyntheticVocab::new(tokens));
            let tok = |m: Option<usize>, comma: bool| {
                let i = m.unwrap_or(n);
                TokenId((2 + 2 * i + comma as usize) as u32)
            };
            let masks: Vec<u32> = if n == 4 {
                vec![0b0000, 0b1010, 0b0110, 0b1111]
            } else {
                (0..1u32 << n).collect()
            };
            let max_len = if n == 4 { 4 } else { 5 };
            for mask in masks {
                for extras in [false, true] {
                    for (min, max) in [(0, None), (1, None), (2, Some(3)), (0, Some(2))] {
                        let shape = Shape {
                            required: (0..n).map(|i| mask & (1 << i) != 0).collect(),
                            extras,
                            min,
                            max,
                        };
                        let mut schema = json!({
                            "type": "object",
                            "properties": {},
                            "required": [],
                            "additionalProperties": if extras { json!({"type": "integer"}) } else { json!(false) },
                            "minProperties": min,
                        });
                        for i in 0..n {
                            schema["properties"][format!("p{i}")] = json!({"type": "integer"});
                            if shape.required[i] {
                                schema["required"]
                                    .as_array_mut()
                                    .unwrap()
                                    .push(json!(format!("p{i}")));
                            }
                        }
                        if let Some(max) = max {
                            schema["maxProperties"] = json!(max);
                        }
                        for order in [
                            PropertyOrder::Schema,
                            PropertyOrder::Window(2),
                            PropertyOrder::Window(3),
                            PropertyOrder::Any,
                        ] {
                            let want_order = match order {
                                _ if n <= 1 => Order::Window(1),
                                PropertyOrder::Schema => Order::Window(1),
                                PropertyOrder::Window(w) if w as usize >= n => Order::Any,
                                PropertyOrder::Window(w) => Order::Window(w as usize),
                                PropertyOrder::Any => Order::Any,
                            };
                            let opts = CompileOptions {
                                property_order: order,
                                ..Default::default()
                            };
                            let what = format!("{shape:?} {order:?}");
                            let Ok(c) = compile(&schema, &opts) else {
                                // Unsatisfiable: no sequence may be an instance.
                                let mut seq = vec![];
                                assert!(
                                    !any_accepted(&shape, want_order, &mut seq, max_len),
                                    "{what}: the oracle accepts"
                                );
                                continue;
                            };
                            let cg = Arc::new(
                                CompiledGrammar::new(c.grammar, vocab.clone(), Limits::default())
                                    .unwrap(),
                            );
                            let mut m = Matcher::new(cg).unwrap();
                            m.consume_token(TokenId(0)).unwrap();
                            let mut seq = vec![];
                            walk(&mut m, &shape, want_order, &mut seq, max_len, &tok, &what);
                            checked += 1;
                        }
                    }
                }
            }
        }
        assert!(checked > 500, "{checked} objects checked");
    }

    /// Whether the oracle accepts some extension of `seq` up to `max_len` members.
    fn any_accepted(
        shape: &Shape,
        order: Order,
        seq: &mut Vec<Option<usize>>,
        max_len: usize,
    ) -> bool {
        if oracle(shape, order, seq) {
            return true;
        }
        if seq.len() == max_len {
            return false;
        }
        let n = shape.required.len();
        (0..=n).any(|i| {
            seq.push((i < n).then_some(i));
            let r = any_accepted(shape, order, seq, max_len);
            seq.pop();
            r
        })
    }

    /// Depth-first over member sequences from the matcher's state after `seq`, comparing
    /// with the oracle: the end (`}`) is allowed exactly when the oracle accepts, and a
    /// member not allowed has no accepted extension.
    fn walk(
        m: &mut Matcher,
        shape: &Shape,
        order: Order,
        seq: &mut Vec<Option<usize>>,
        max_len: usize,
        tok: &dyn Fn(Option<usize>, bool) -> TokenId,
        what: &str,
    ) {
        let end = m.is_token_allowed(TokenId(1)).unwrap();
        assert_eq!(end, oracle(shape, order, seq), "{what}: end after {seq:?}");
        if seq.len() == max_len {
            return;
        }
        let n = shape.required.len();
        for i in 0..=n {
            let member = (i < n).then_some(i);
            let comma = !seq.is_empty();
            assert!(
                !m.is_token_allowed(tok(member, !comma)).unwrap(),
                "{what}: wrong comma after {seq:?}"
            );
            seq.push(member);
            if m.is_token_allowed(tok(member, comma)).unwrap() {
                m.consume_token(tok(member, comma)).unwrap();
                walk(m, shape, order, seq, max_len, tok, what);
                m.rollback(1).unwrap();
            } else {
                assert!(
                    !any_accepted(shape, order, seq, max_len),
                    "{what}: {seq:?} not allowed"
                );
            }
            seq.pop();
        }
    }
}
