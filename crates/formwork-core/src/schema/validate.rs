//! A direct JSON Schema validator over the raw document: does one JSON value satisfy one
//! (sub)schema?
//!
//! Used by lowering for schema nodes whose instances form a finite set (`enum`/`const`, here or
//! in an `allOf` branch): the node is then exactly the listed values that validate, whatever
//! other keywords (`not`, `oneOf`, `if`, ...) the node carries, even those the grammar algebra
//! cannot complement. Owns keyword *evaluation* only; it never builds grammar. Answers `None`
//! ("cannot decide") for anything it does not evaluate exactly — `unevaluated*`, dynamic and
//! remote references, unknown formats, patterns that do not translate, or an exhausted budget
//! — and the caller then falls back to ordinary lowering. Cost: one walk of the schema per
//! value, bounded by [`MAX_STEPS`] and [`MAX_DEPTH`].

use serde_json::{Map, Value};

use super::ir::{dedup_values, is_multiple, json_eq, UNSUPPORTED_KEYWORDS};
use super::regexes;
use super::resolve::{join, Document, Draft};

/// Schema nodes visited per [`Validator`] before it gives up (answers `None`).
pub(crate) const MAX_STEPS: u64 = 100_000;
/// Largest listed value set [`Validator::finite_node`] filters.
const MAX_FINITE_VALUES: usize = 1_000;
/// Deepest nesting of schema nodes (including through `$ref`) before giving up.
const MAX_DEPTH: u32 = 64;

/// Validates values against subschemas of one document.
#[derive(Debug)]
pub(crate) struct Validator<'d> {
    doc: &'d Document,
    assert_format: bool,
    /// Unknown formats are undecidable (refused) rather than no constraint.
    strict_format: bool,
    steps: u64,
}

impl<'d> Validator<'d> {
    pub(crate) fn new(doc: &'d Document, assert_format: bool) -> Self {
        Validator {
            doc,
            assert_format,
            strict_format: false,
            steps: 0,
        }
    }

    /// With `strict`, an unknown format makes a value undecidable (as the compiler refuses
    /// it) instead of being no constraint ([`CompileOptions::strict_format`]).
    ///
    /// [`CompileOptions::strict_format`]: super::compile::CompileOptions::strict_format
    pub(crate) fn strict_format(mut self, strict: bool) -> Self {
        self.strict_format = strict;
        self
    }

    /// Whether `v` satisfies `schema` (found with base URI `base`); `None` when undecidable here.
    #[cfg(test)]
    pub(crate) fn valid(&mut self, v: &Value, schema: &Value, base: &str) -> Option<bool> {
        self.node(v, schema, base, 0)
    }

    /// [`valid`](Self::valid) for an object schema given as its map.
    pub(crate) fn valid_object(
        &mut self,
        v: &Value,
        schema: &Map<String, Value>,
        base: &str,
    ) -> Option<bool> {
        self.object(v, schema, base, 0)
    }

    /// The values of a schema node whose instances form a listed finite set — its `enum` or
    /// `const`, or those of an `allOf` branch — that satisfy the whole node, when the node
    /// also has combinators (`allOf`, `anyOf`, `oneOf`, `not`, `if`) and every value is
    /// decided; `None` otherwise (the caller lowers the node as usual).
    pub(crate) fn finite_node(&mut self, m: &Map<String, Value>, base: &str) -> Option<Vec<Value>> {
        if !["allOf", "anyOf", "oneOf", "not", "if"]
            .iter()
            .any(|k| m.contains_key(*k))
        {
            return None;
        }
        let listed = |m: &Map<String, Value>| -> Option<Vec<Value>> {
            match (m.get("const"), m.get("enum")) {
                (Some(c), _) => Some(vec![c.clone()]),
                (None, Some(Value::Array(e))) => Some(e.clone()),
                _ => None,
            }
        };
        let candidates = listed(m).or_else(|| {
            m.get("allOf")?
                .as_array()?
                .iter()
                .find_map(|b| listed(b.as_object()?))
        })?;
        if candidates.len() > MAX_FINITE_VALUES {
            return None;
        }
        let mut out = Vec::new();
        for c in dedup_values(candidates) {
            if self.valid_object(&c, m, base)? {
                out.push(c);
            }
        }
        Some(out)
    }

    fn node(&mut self, v: &Value, schema: &Value, base: &str, depth: u32) -> Option<bool> {
        self.steps += 1;
        if self.steps > MAX_STEPS || depth > MAX_DEPTH {
            return None;
        }
        match schema {
            Value::Bool(b) => Some(*b),
            Value::Object(m) => self.object(v, m, base, depth + 1),
            _ => None,
        }
    }

    fn all(&mut self, v: &Value, subs: &Value, base: &str, depth: u32) -> Option<bool> {
        for s in subs.as_array()? {
            if !self.node(v, s, base, depth)? {
                return Some(false);
            }
        }
        Some(true)
    }

    fn object(&mut self, v: &Value, m: &Map<String, Value>, base: &str, d: u32) -> Option<bool> {
        let draft = self.doc.draft();
        for k in UNSUPPORTED_KEYWORDS {
            if m.contains_key(k) {
                return None;
            }
        }
        let ref_only = draft.ref_overrides_siblings() && m.contains_key("$ref");
        let mut base = base.to_string();
        if let Some(Value::String(id)) = m.get(draft.id_keyword()).filter(|_| !ref_only) {
            if !id.starts_with('#') {
                base = join(&base, id.split('#').next().unwrap_or(""));
            }
        }
        if let Some(r) = m.get("$ref") {
            let (pointer, tbase) = self.doc.resolve(r.as_str()?, &base, "").ok()?;
            let target = self.doc.get(&pointer)?;
            if !self.node(v, target, &tbase, d)? {
                return Some(false);
            }
            if ref_only {
                return Some(true);
            }
        }
        let b = base.as_str();
        if let Some(t) = m.get("type") {
            let ok = match t {
                Value::String(t) => type_matches(v, t, draft)?,
                Value::Array(ts) => {
                    let mut any = false;
                    for t in ts {
                        any |= type_matches(v, t.as_str()?, draft)?;
                    }
                    any
                }
                _ => return None,
            };
            if !ok {
                return Some(false);
            }
        }
        if let Some(e) = m.get("enum") {
            if !e.as_array()?.iter().any(|x| json_eq(x, v)) {
                return Some(false);
            }
        }
        if let Some(c) = m.get("const") {
            if !json_eq(c, v) {
                return Some(false);
            }
        }
        if let Some(s) = m.get("allOf") {
            if !self.all(v, s, b, d)? {
                return Some(false);
            }
        }
        if let Some(s) = m.get("anyOf") {
            let mut any = false;
            for s in s.as_array()? {
                any |= self.node(v, s, b, d)?;
            }
            if !any {
                return Some(false);
            }
        }
        if let Some(s) = m.get("oneOf") {
            let mut n = 0;
            for s in s.as_array()? {
                n += usize::from(self.node(v, s, b, d)?);
            }
            if n != 1 {
                return Some(false);
            }
        }
        if let Some(s) = m.get("not") {
            if self.node(v, s, b, d)? {
                return Some(false);
            }
        }
        if let Some(s) = m.get("if").filter(|_| draft.has_conditionals()) {
            let branch = if self.node(v, s, b, d)? {
                m.get("then")
            } else {
                m.get("else")
            };
            if let Some(s) = branch {
                if !self.node(v, s, b, d)? {
                    return Some(false);
                }
            }
        }
        let ok = match v {
            Value::Number(n) => self.number(n.as_f64()?, m, draft)?,
            Value::String(s) => self.string(s, m)?,
            Value::Array(xs) => self.array(xs, m, b, d, draft)?,
            Value::Object(o) => self.properties(o, m, b, d)?,
            _ => true,
        };
        Some(ok)
    }

    fn number(&mut self, x: f64, m: &Map<String, Value>, draft: Draft) -> Option<bool> {
        let num = |k: &str| m.get(k).map(|v| v.as_f64());
        let flag = |k: &str| m.get(k).and_then(Value::as_bool).unwrap_or(false);
        if let Some(min) = num("minimum") {
            let min = min?;
            if x < min || (draft == Draft::Draft4 && flag("exclusiveMinimum") && x == min) {
                return Some(false);
            }
        }
        if let Some(max) = num("maximum") {
            let max = max?;
            if x > max || (draft == Draft::Draft4 && flag("exclusiveMaximum") && x == max) {
                return Some(false);
            }
        }
        if draft != Draft::Draft4 {
            if let Some(e) = num("exclusiveMinimum") {
                if x <= e? {
                    return Some(false);
                }
            }
            if let Some(e) = num("exclusiveMaximum") {
                if x >= e? {
                    return Some(false);
                }
            }
        }
        if let Some(q) = num("multipleOf") {
            if !is_multiple(x, q?) {
                return Some(false);
            }
        }
        Some(true)
    }

    fn string(&mut self, s: &str, m: &Map<String, Value>) -> Option<bool> {
        let len = s.chars().count() as u64;
        if let Some(n) = m.get("minLength") {
            if len < n.as_f64()? as u64 {
                return Some(false);
            }
        }
        if let Some(n) = m.get("maxLength") {
            if (len as f64) > n.as_f64()? {
                return Some(false);
            }
        }
        if let Some(p) = m.get("pattern") {
            if !regexes::pattern_matches(p.as_str()?, s).ok()? {
                return Some(false);
            }
        }
        if let (Some(f), true) = (m.get("format"), self.assert_format) {
            let f = f.as_str()?;
            if !regexes::format_known(f) {
                // An unknown format constrains nothing (unless strict: refused).
                return (!self.strict_format).then_some(true);
            }
            if !regexes::format_matches(f, s).ok()? {
                return Some(false);
            }
        }
        Some(true)
    }

    fn array(
        &mut self,
        xs: &[Value],
        m: &Map<String, Value>,
        b: &str,
        d: u32,
        draft: Draft,
    ) -> Option<bool> {
        let count = |k: &str| m.get(k).map(|v| v.as_f64().map(|f| f as u64));
        if let Some(n) = count("minItems") {
            if (xs.len() as u64) < n? {
                return Some(false);
            }
        }
        if let Some(n) = count("maxItems") {
            if (xs.len() as u64) > n? {
                return Some(false);
            }
        }
        if m.get("uniqueItems") == Some(&Value::Bool(true))
            && dedup_values(xs.to_vec()).len() != xs.len()
        {
            return Some(false);
        }
        // Tuple part and the schema for the rest, by draft.
        let (prefix, rest): (&[Value], Option<&Value>) = match draft {
            Draft::Draft2020 => (
                m.get("prefixItems")
                    .and_then(Value::as_array)
                    .map_or(&[][..], Vec::as_slice),
                m.get("items"),
            ),
            _ => match m.get("items") {
                Some(Value::Array(t)) => (t.as_slice(), m.get("additionalItems")),
                other => (&[][..], other),
            },
        };
        for (i, x) in xs.iter().enumerate() {
            let s = if i < prefix.len() {
                Some(&prefix[i])
            } else {
                rest
            };
            if let Some(s) = s {
                if !self.node(x, s, b, d)? {
                    return Some(false);
                }
            }
        }
        if let Some(c) = m.get("contains") {
            let mut hits = 0u64;
            for x in xs {
                hits += u64::from(self.node(x, c, b, d)?);
            }
            let min = match draft {
                Draft::Draft2019 | Draft::Draft2020 => count("minContains").unwrap_or(Some(1))?,
                _ => 1,
            };
            if hits < min {
                return Some(false);
            }
            if matches!(draft, Draft::Draft2019 | Draft::Draft2020) {
                if let Some(max) = count("maxContains") {
                    if hits > max? {
                        return Some(false);
                    }
                }
            }
        }
        Some(true)
    }

    fn properties(
        &mut self,
        o: &Map<String, Value>,
        m: &Map<String, Value>,
        b: &str,
        d: u32,
    ) -> Option<bool> {
        let count = |k: &str| m.get(k).map(|v| v.as_f64().map(|f| f as u64));
        if let Some(n) = count("minProperties") {
            if (o.len() as u64) < n? {
                return Some(false);
            }
        }
        if let Some(n) = count("maxProperties") {
            if (o.len() as u64) > n? {
                return Some(false);
            }
        }
        if let Some(r) = m.get("required") {
            for k in r.as_array()? {
                if !o.contains_key(k.as_str()?) {
                    return Some(false);
                }
            }
        }
        let props = m.get("properties").and_then(Value::as_object);
        let pats = m.get("patternProperties").and_then(Value::as_object);
        for (k, x) in o {
            let mut matched = false;
            if let Some(s) = props.and_then(|p| p.get(k)) {
                matched = true;
                if !self.node(x, s, b, d)? {
                    return Some(false);
                }
            }
            for (p, s) in pats.into_iter().flatten() {
                if regexes::pattern_matches(p, k).ok()? {
                    matched = true;
                    if !self.node(x, s, b, d)? {
                        return Some(false);
                    }
                }
            }
            if !matched {
                if let Some(s) = m.get("additionalProperties") {
                    if !self.node(x, s, b, d)? {
                        return Some(false);
                    }
                }
            }
            if let Some(s) = m.get("propertyNames") {
                if !self.node(&Value::String(k.clone()), s, b, d)? {
                    return Some(false);
                }
            }
        }
        for kw in ["dependentRequired", "dependentSchemas", "dependencies"] {
            let Some(deps) = m.get(kw) else { continue };
            for (name, dep) in deps.as_object()? {
                if !o.contains_key(name) {
                    continue;
                }
                let ok = match dep {
                    Value::Array(names) => {
                        let mut all = true;
                        for n in names {
                            all &= o.contains_key(n.as_str()?);
                        }
                        all
                    }
                    s => self.node(&Value::Object(o.clone()), s, b, d)?,
                };
                if !ok {
                    return Some(false);
                }
            }
        }
        Some(true)
    }
}

/// Whether `v` has JSON Schema type `t` (`integer`: a number with no fractional part; draft 4
/// also requires it to be written without one).
fn type_matches(v: &Value, t: &str, draft: Draft) -> Option<bool> {
    Some(match t {
        "null" => v.is_null(),
        "boolean" => v.is_boolean(),
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "number" => v.is_number(),
        "integer" => match v {
            Value::Number(n) if n.is_i64() || n.is_u64() => true,
            Value::Number(n) => {
                draft != Draft::Draft4 && n.as_f64().is_some_and(|f| f.fract() == 0.0)
            }
            _ => false,
        },
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check(schema: Value, v: Value) -> Option<bool> {
        let doc = Document::new(schema, Draft::Draft2020).expect("document");
        let root = doc.root().clone();
        Validator::new(&doc, true).valid(&v, &root, &doc.root_base())
    }

    #[test]
    fn finite_nodes_keep_exactly_the_valid_listed_values() {
        // MaskBench's Synthesized schemas: `allOf: [{enum: [v]}, X]` with X beyond the algebra.
        let s = json!({"allOf": [{"enum": [1, "a", 2.5]}, {"not": {"not": {"type": ["integer", "string"]}}}]});
        let doc = Document::new(s, Draft::Draft2020).expect("document");
        let m = doc.root().as_object().expect("object").clone();
        let got = Validator::new(&doc, true).finite_node(&m, &doc.root_base());
        assert_eq!(got, Some(vec![json!(1), json!("a")]));
        // No combinator: left to ordinary lowering.
        let s = json!({"type": "string", "enum": ["a", 1]});
        let doc = Document::new(s, Draft::Draft2020).expect("document");
        let m = doc.root().as_object().expect("object").clone();
        assert_eq!(
            Validator::new(&doc, true).finite_node(&m, &doc.root_base()),
            None
        );
    }

    #[test]
    fn combinators_and_negation() {
        let s = json!({"not": {"not": {"pattern": "^a*$"}}});
        assert_eq!(check(s.clone(), json!("aaa")), Some(true));
        assert_eq!(check(s.clone(), json!("ab")), Some(false));
        assert_eq!(
            check(s, json!(true)),
            Some(true),
            "pattern ignores non-strings"
        );
        let s = json!({"oneOf": [{"required": ["foo", "bar"]}, {"required": ["foo", "baz"]}]});
        assert_eq!(check(s.clone(), json!({"foo": 1, "baz": 3})), Some(true));
        assert_eq!(check(s, json!({"foo": 1, "bar": 2, "baz": 3})), Some(false));
        let s = json!({"if": {"minimum": 0}, "then": {"multipleOf": 2}, "else": {"const": -1}});
        assert_eq!(check(s.clone(), json!(4)), Some(true));
        assert_eq!(check(s.clone(), json!(3)), Some(false));
        assert_eq!(check(s, json!(-2)), Some(false));
    }

    #[test]
    fn objects_arrays_and_refs() {
        let s = json!({
            "$defs": {"pos": {"type": "integer", "exclusiveMinimum": 0}},
            "type": "object",
            "properties": {"a": {"$ref": "#/$defs/pos"}},
            "patternProperties": {"^x": {"type": "string"}},
            "additionalProperties": false
        });
        assert_eq!(check(s.clone(), json!({"a": 1, "xy": "s"})), Some(true));
        assert_eq!(check(s.clone(), json!({"a": 0})), Some(false));
        assert_eq!(check(s.clone(), json!({"b": 1})), Some(false));
        assert_eq!(check(s, json!({"xy": 1})), Some(false));
        let s = json!({"prefixItems": [{"type": "string"}], "items": {"type": "integer"},
                       "contains": {"const": 2}, "maxContains": 1, "uniqueItems": true});
        assert_eq!(check(s.clone(), json!(["a", 2, 3])), Some(true));
        assert_eq!(check(s.clone(), json!(["a", 2, 2])), Some(false));
        assert_eq!(check(s, json!([1, 2])), Some(false));
    }

    #[test]
    fn undecidable_answers_none() {
        let doc = Document::new(json!({"format": "color"}), Draft::Draft2020).expect("document");
        let strict = |on: bool| {
            Validator::new(&doc, true).strict_format(on).valid(
                &json!("red"),
                doc.root(),
                &doc.root_base(),
            )
        };
        assert_eq!(strict(true), None);
        assert_eq!(strict(false), Some(true));
        assert_eq!(
            check(json!({"unevaluatedProperties": false}), json!({})),
            None
        );
        assert_eq!(check(json!({"pattern": "(?=a)"}), json!("a")), None);
    }
}
