//! Lowering: JSON Schema (a [`Document`]) → normalized [`Schema`] IR, including the algebra
//! that makes combinators exact: intersection (`allOf`, sibling keywords), negation (`not`,
//! `if`/`else`, `oneOf`), disjointness proofs (`oneOf`) and value membership (`enum`
//! filtering).
//!
//! Owns keyword semantics; does not build grammar rules. Every validation keyword is either
//! folded into the IR or reported through [`Lowerer::refuse`] by name and JSON pointer (in
//! lenient mode the refusal becomes a warning and the keyword is skipped). Costs: each
//! `$ref` target is lowered once; intersections that must look through `$ref` re-lower
//! nothing but copy the target's IR, bounded by [`MAX_WORK`].

use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value};

use super::compile::CompileOptions;
use super::error::SchemaError;
use super::ir::{
    dedup_values, json_eq, type_of, types, ArraySchema, Bound, NumberSchema, ObjectSchema,
    RefTarget, Schema, StringSchema,
};
use super::pointer;
use super::regexes;
use super::resolve::{join, Document};
use super::validate::Validator;

/// Budget on intersection/negation steps per schema, so adversarial `allOf`/`oneOf` nests end
/// in an error instead of exponential time.
pub const MAX_WORK: usize = 200_000;
/// Maximum nesting depth of schema objects (and `$ref` expansions inside one intersection).
pub const MAX_DEPTH: usize = 200;

// Annotation keywords (`title`, `description`, `default`, `examples`, `$comment`,
// `deprecated`, `readOnly`, `writeOnly`, `content*`) and unknown keywords (`x-...`) are never
// read below: the specification says they do not constrain instances.

const NUMBER_KW: &[&str] = &[
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
];
const STRING_KW: &[&str] = &["minLength", "maxLength", "pattern", "format"];
const ARRAY_KW: &[&str] = &[
    "items",
    "prefixItems",
    "additionalItems",
    "minItems",
    "maxItems",
    "contains",
    "minContains",
    "maxContains",
    "uniqueItems",
];
const OBJECT_KW: &[&str] = &[
    "properties",
    "patternProperties",
    "additionalProperties",
    "required",
    "minProperties",
    "maxProperties",
    "propertyNames",
];

/// Lowers one document.
#[derive(Debug)]
pub(crate) struct Lowerer<'d> {
    doc: &'d Document,
    opts: &'d CompileOptions,
    /// Lowered `$ref` targets by pointer.
    refs: HashMap<String, Schema>,
    in_progress: HashSet<String>,
    /// Refusals turned into warnings (lenient mode).
    pub warnings: Vec<SchemaError>,
    work: usize,
    depth: usize,
}

fn get_u64(m: &Map<String, Value>, k: &str, ptr: &str) -> Result<Option<u64>, SchemaError> {
    match m.get(k) {
        None => Ok(None),
        Some(v) => match v.as_u64().or_else(|| {
            v.as_f64()
                .filter(|f| *f >= 0.0 && f.fract() == 0.0)
                .map(|f| f as u64)
        }) {
            Some(n) => Ok(Some(n)),
            None => Err(SchemaError::invalid(
                &pointer::push(ptr, k),
                format!("`{k}` must be a non-negative integer"),
            )),
        },
    }
}

fn get_f64(m: &Map<String, Value>, k: &str, ptr: &str) -> Result<Option<f64>, SchemaError> {
    match m.get(k) {
        None => Ok(None),
        Some(Value::Number(n)) => Ok(n.as_f64()),
        Some(_) => Err(SchemaError::invalid(
            &pointer::push(ptr, k),
            format!("`{k}` must be a number"),
        )),
    }
}

/// The schema of all values of the given types, unconstrained.
pub(crate) fn of_types(set: u8) -> Schema {
    if set == types::ALL {
        return Schema::Any;
    }
    let mut alts = Vec::new();
    if set & types::NULL != 0 {
        alts.push(Schema::Null);
    }
    if set & types::BOOLEAN != 0 {
        alts.push(Schema::Boolean);
    }
    if set & types::NUMBER != 0 {
        alts.push(Schema::Number(NumberSchema::default()));
    }
    if set & types::STRING != 0 {
        alts.push(Schema::String(StringSchema::default()));
    }
    if set & types::ARRAY != 0 {
        alts.push(Schema::Array(Box::default()));
    }
    if set & types::OBJECT != 0 {
        alts.push(Schema::Object(Box::default()));
    }
    union(alts)
}

/// A union, flattened, without unsatisfiable members.
pub(crate) fn union(alts: Vec<Schema>) -> Schema {
    let mut out = Vec::new();
    let mut reason = String::from("no alternative is satisfiable");
    for a in alts {
        match a {
            Schema::AnyOf(xs) => out.extend(xs),
            Schema::Unsat(r) => reason = r,
            Schema::Any => return Schema::Any,
            x => out.push(x),
        }
    }
    match out.len() {
        0 => Schema::Unsat(reason),
        1 => out.pop().unwrap_or(Schema::Unsat(reason)),
        _ => Schema::AnyOf(out),
    }
}

fn tighter_min(a: Option<Bound>, b: Option<Bound>) -> Option<Bound> {
    match (a, b) {
        (None, x) | (x, None) => x,
        (Some(a), Some(b)) => {
            if a.value > b.value || (a.value == b.value && a.exclusive) {
                Some(a)
            } else {
                Some(b)
            }
        }
    }
}

fn tighter_max(a: Option<Bound>, b: Option<Bound>) -> Option<Bound> {
    match (a, b) {
        (None, x) | (x, None) => x,
        (Some(a), Some(b)) => {
            if a.value < b.value || (a.value == b.value && a.exclusive) {
                Some(a)
            } else {
                Some(b)
            }
        }
    }
}

fn min_opt(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (None, x) | (x, None) => x,
        (Some(a), Some(b)) => Some(a.min(b)),
    }
}

/// Whether `x` is a multiple of `m` (within floating-point tolerance for decimals).
pub(crate) fn is_multiple(x: f64, m: f64) -> bool {
    if m <= 0.0 {
        return false;
    }
    let q = x / m;
    if !q.is_finite() {
        return false;
    }
    (q - q.round()).abs() < 1e-9
}

impl<'d> Lowerer<'d> {
    pub(crate) fn new(doc: &'d Document, opts: &'d CompileOptions) -> Self {
        Lowerer {
            doc,
            opts,
            refs: HashMap::new(),
            in_progress: HashSet::new(),
            warnings: Vec::new(),
            work: 0,
            depth: 0,
        }
    }

    /// Refuses `keyword` at `ptr`: an error, or (lenient) a warning and `Ok`, after which the
    /// caller skips the keyword.
    pub(crate) fn refuse(
        &mut self,
        keyword: &str,
        ptr: &str,
        detail: impl Into<String>,
    ) -> Result<(), SchemaError> {
        let e = SchemaError::unsupported(keyword, ptr, detail);
        if self.opts.lenient {
            self.warnings.push(e);
            Ok(())
        } else {
            Err(e)
        }
    }

    fn tick(&mut self) -> Result<(), SchemaError> {
        self.work += 1;
        if self.work > MAX_WORK {
            return Err(SchemaError::LimitExceeded {
                what: "schema algebra steps".into(),
                limit: MAX_WORK,
                given: self.work,
            });
        }
        Ok(())
    }

    /// Lowered targets of every `$ref` seen so far (for emission).
    pub(crate) fn ref_schema(&mut self, t: &RefTarget) -> Result<Schema, SchemaError> {
        if let Some(s) = self.refs.get(&t.pointer) {
            return Ok(s.clone());
        }
        if self.in_progress.contains(&t.pointer) {
            // Recursive: keep symbolic; callers that need structure see a fresh lowering later.
            return Ok(Schema::Ref(t.clone()));
        }
        let Some(v) = self.doc.get(&t.pointer) else {
            return Err(SchemaError::invalid(
                &t.pointer,
                "`$ref` target does not exist",
            ));
        };
        self.in_progress.insert(t.pointer.clone());
        let r = self.lower(v, &t.pointer, &t.base);
        self.in_progress.remove(&t.pointer);
        let s = r?;
        self.refs.insert(t.pointer.clone(), s.clone());
        Ok(s)
    }

    /// Lowers the schema `v` found at `ptr` with base URI `base`.
    pub(crate) fn lower(
        &mut self,
        v: &Value,
        ptr: &str,
        base: &str,
    ) -> Result<Schema, SchemaError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            self.depth -= 1;
            return Err(SchemaError::LimitExceeded {
                what: "schema nesting depth".into(),
                limit: MAX_DEPTH,
                given: self.depth + 1,
            });
        }
        let r = match v {
            Value::Bool(true) => Ok(Schema::Any),
            Value::Bool(false) => Ok(Schema::Unsat(format!(
                "`false` schema at {}",
                super::error::display_pointer(ptr)
            ))),
            Value::Object(m) => self.lower_object(m, ptr, base),
            _ => Err(SchemaError::invalid(
                ptr,
                "a schema must be an object or a boolean",
            )),
        };
        self.depth -= 1;
        r
    }

    fn lower_ref(&mut self, r: &Value, ptr: &str, base: &str) -> Result<Schema, SchemaError> {
        let at = pointer::push(ptr, "$ref");
        let Value::String(r) = r else {
            return Err(SchemaError::invalid(&at, "`$ref` must be a string"));
        };
        let (target, tbase) = self.doc.resolve(r, base, &at)?;
        Ok(Schema::Ref(RefTarget {
            pointer: target,
            base: tbase,
        }))
    }

    fn lower_object(
        &mut self,
        m: &Map<String, Value>,
        ptr: &str,
        base: &str,
    ) -> Result<Schema, SchemaError> {
        let draft = self.doc.draft();
        let mut base = base.to_string();
        // Drafts 4-7: `$ref` overrides its siblings, `$id` included.
        let ref_only = draft.ref_overrides_siblings() && m.contains_key("$ref");
        if let Some(Value::String(id)) = m.get(draft.id_keyword()).filter(|_| !ref_only) {
            if !id.starts_with('#') {
                base = join(&base, id.split('#').next().unwrap_or(""));
            }
        }
        if let Some(r) = m.get("$ref") {
            if ref_only {
                return self.lower_ref(r, ptr, &base);
            }
        }
        // A finite listed set under combinators: exactly the listed values that validate,
        // even where the algebra could not complement a `not` or separate `oneOf` branches.
        if let Some(values) =
            Validator::new(self.doc, self.opts.assert_format).finite_node(m, &base)
        {
            self.tick()?;
            return Ok(if values.is_empty() {
                Schema::Unsat(format!(
                    "no listed value satisfies the schema at {}",
                    super::error::display_pointer(ptr)
                ))
            } else {
                Schema::Const(values)
            });
        }
        let mut parts: Vec<Schema> = Vec::new();
        if let Some(r) = m.get("$ref") {
            parts.push(self.lower_ref(r, ptr, &base)?);
        }
        for k in [
            "$dynamicRef",
            "$recursiveRef",
            "unevaluatedProperties",
            "unevaluatedItems",
        ] {
            if m.contains_key(k) {
                self.refuse(k, &pointer::push(ptr, k), "")?;
            }
        }
        parts.push(self.lower_types(m, ptr, &base)?);
        if let Some(e) = m.get("enum") {
            let Value::Array(vals) = e else {
                return Err(SchemaError::invalid(
                    &pointer::push(ptr, "enum"),
                    "`enum` must be an array",
                ));
            };
            parts.push(Schema::Const(dedup_values(vals.clone())));
        }
        if let Some(c) = m.get("const") {
            parts.push(Schema::Const(vec![c.clone()]));
        }
        for (kw, is_any) in [("allOf", false), ("anyOf", true)] {
            if let Some(v) = m.get(kw) {
                let kp = pointer::push(ptr, kw);
                let Value::Array(subs) = v else {
                    return Err(SchemaError::invalid(
                        &kp,
                        format!("`{kw}` must be an array"),
                    ));
                };
                let mut lowered = Vec::new();
                for (i, s) in subs.iter().enumerate() {
                    lowered.push(self.lower(s, &pointer::push(&kp, &i.to_string()), &base)?);
                }
                if is_any {
                    parts.push(union(lowered));
                } else {
                    parts.extend(lowered);
                }
            }
        }
        if let Some(n) = m.get("not") {
            let np = pointer::push(ptr, "not");
            let inner = self.lower(n, &np, &base)?;
            match self.negate(&inner, &np)? {
                Some(s) => parts.push(s),
                None => self.refuse("not", &np, "cannot complement this subschema exactly")?,
            }
        }
        // Drafts 4 and 6 have no `if`: a draft-4 schema using it is validated without it
        // (MaskBench Github_medium---o3385 and o39097 have valid instances its `then` rejects).
        if let Some(i) = m.get("if").filter(|_| self.doc.draft().has_conditionals()) {
            let ip = pointer::push(ptr, "if");
            let cond = self.lower(i, &ip, &base)?;
            let then = match m.get("then") {
                Some(t) => self.lower(t, &pointer::push(ptr, "then"), &base)?,
                None => Schema::Any,
            };
            let els = match m.get("else") {
                Some(t) => self.lower(t, &pointer::push(ptr, "else"), &base)?,
                None => Schema::Any,
            };
            if then != Schema::Any || els != Schema::Any {
                match self.negate(&cond, &ip)? {
                    Some(ncond) => {
                        let a = self.intersect(&cond, &then, &ip)?;
                        let b = self.intersect(&ncond, &els, &ip)?;
                        parts.push(union(vec![a, b]));
                    }
                    None => self.refuse("if", &ip, "cannot complement the condition exactly")?,
                }
            }
        }
        self.lower_dependencies(m, ptr, &base, &mut parts)?;

        let mut acc = Schema::Any;
        for p in parts {
            acc = self.intersect(&acc, &p, ptr)?;
        }
        if let Some(v) = m.get("oneOf") {
            let kp = pointer::push(ptr, "oneOf");
            let Value::Array(subs) = v else {
                return Err(SchemaError::invalid(&kp, "`oneOf` must be an array"));
            };
            let mut branches = Vec::new();
            let mut raw = Vec::new();
            for (i, s) in subs.iter().enumerate() {
                let b = self.lower(s, &pointer::push(&kp, &i.to_string()), &base)?;
                branches.push(self.intersect(&acc, &b, &kp)?);
                raw.push(b);
            }
            match self.one_of(branches, raw, &kp)? {
                Some(s) => acc = s,
                None => self.refuse("oneOf", &kp, "branches are not provably disjoint")?,
            }
        }
        Ok(acc)
    }

    fn lower_dependencies(
        &mut self,
        m: &Map<String, Value>,
        ptr: &str,
        base: &str,
        parts: &mut Vec<Schema>,
    ) -> Result<(), SchemaError> {
        for kw in ["dependentRequired", "dependentSchemas", "dependencies"] {
            let Some(v) = m.get(kw) else { continue };
            let kp = pointer::push(ptr, kw);
            let Value::Object(deps) = v else {
                return Err(SchemaError::invalid(
                    &kp,
                    format!("`{kw}` must be an object"),
                ));
            };
            for (name, dep) in deps {
                let dp = pointer::push(&kp, name);
                // "name absent, or name present and the dependency holds", over objects only.
                let absent = ObjectSchema {
                    properties: vec![(name.clone(), Schema::Unsat("dependency".into()))],
                    ..Default::default()
                };
                let present_req = ObjectSchema {
                    required: vec![name.clone()],
                    ..Default::default()
                };
                let mut present = Schema::Object(Box::new(present_req));
                match dep {
                    Value::Array(names) => {
                        let mut req = vec![name.clone()];
                        for n in names {
                            let Value::String(n) = n else {
                                return Err(SchemaError::invalid(
                                    &dp,
                                    "dependency names must be strings",
                                ));
                            };
                            if !req.contains(n) {
                                req.push(n.clone());
                            }
                        }
                        present = Schema::Object(Box::new(ObjectSchema {
                            required: req,
                            ..Default::default()
                        }));
                    }
                    s if kw != "dependentRequired" => {
                        let sub = self.lower(s, &dp, base)?;
                        present = self.intersect(&present, &sub, &dp)?;
                    }
                    _ => {
                        return Err(SchemaError::invalid(
                            &dp,
                            "`dependentRequired` values must be arrays",
                        ))
                    }
                }
                parts.push(union(vec![
                    of_types(types::ALL & !types::OBJECT),
                    Schema::Object(Box::new(absent)),
                    present,
                ]));
            }
        }
        Ok(())
    }

    fn lower_types(
        &mut self,
        m: &Map<String, Value>,
        ptr: &str,
        base: &str,
    ) -> Result<Schema, SchemaError> {
        let tp = pointer::push(ptr, "type");
        let mut set = match m.get("type") {
            None => types::ALL,
            Some(t) => {
                let names: Vec<&Value> = match t {
                    Value::Array(a) => a.iter().collect(),
                    v => vec![v],
                };
                let mut set = 0u8;
                let mut integer_only = false;
                for n in names {
                    let bit = match n.as_str() {
                        Some("null") => types::NULL,
                        Some("boolean") => types::BOOLEAN,
                        Some("number") => types::NUMBER,
                        Some("integer") => {
                            integer_only = true;
                            types::NUMBER
                        }
                        Some("string") => types::STRING,
                        Some("array") => types::ARRAY,
                        Some("object") => types::OBJECT,
                        _ => return Err(SchemaError::invalid(&tp, format!("unknown type {n}"))),
                    };
                    set |= bit;
                }
                let has_number = match t {
                    Value::Array(a) => a.iter().any(|n| n == "number"),
                    v => v == "number",
                };
                if integer_only && !has_number {
                    set |= 0x80; // marks "integer" for the number schema below
                }
                set
            }
        };
        let integer = set & 0x80 != 0;
        set &= types::ALL;
        let has = |kws: &[&str]| kws.iter().any(|k| m.contains_key(*k));
        let explicit = m.contains_key("type");
        if !explicit && !has(NUMBER_KW) && !has(STRING_KW) && !has(ARRAY_KW) && !has(OBJECT_KW) {
            return Ok(Schema::Any);
        }
        let mut alts = Vec::new();
        if set & types::NULL != 0 {
            alts.push(Schema::Null);
        }
        if set & types::BOOLEAN != 0 {
            alts.push(Schema::Boolean);
        }
        if set & types::NUMBER != 0 {
            alts.push(self.lower_number(m, ptr, integer)?);
        }
        if set & types::STRING != 0 {
            alts.push(self.lower_string(m, ptr)?);
        }
        if set & types::ARRAY != 0 {
            alts.push(self.lower_array(m, ptr, base)?);
        }
        if set & types::OBJECT != 0 {
            alts.push(self.lower_obj(m, ptr, base)?);
        }
        Ok(union(alts))
    }

    fn lower_number(
        &mut self,
        m: &Map<String, Value>,
        ptr: &str,
        integer: bool,
    ) -> Result<Schema, SchemaError> {
        let mut n = NumberSchema {
            integer,
            ..Default::default()
        };
        let excl_bool = |k: &str| matches!(m.get(k), Some(Value::Bool(true)));
        if let Some(v) = get_f64(m, "minimum", ptr)? {
            n.min = Some(Bound {
                value: v,
                exclusive: excl_bool("exclusiveMinimum"),
            });
        }
        if let Some(v) = get_f64(m, "maximum", ptr)? {
            n.max = Some(Bound {
                value: v,
                exclusive: excl_bool("exclusiveMaximum"),
            });
        }
        for (k, is_min) in [("exclusiveMinimum", true), ("exclusiveMaximum", false)] {
            match m.get(k) {
                Some(Value::Number(x)) => {
                    let b = Some(Bound {
                        value: x.as_f64().unwrap_or(0.0),
                        exclusive: true,
                    });
                    if is_min {
                        n.min = tighter_min(n.min.take(), b);
                    } else {
                        n.max = tighter_max(n.max.take(), b);
                    }
                }
                // Draft 4's boolean form modifies `minimum`/`maximum` (read above).
                Some(Value::Bool(_)) => {}
                None => {}
                Some(_) => {
                    return Err(SchemaError::invalid(
                        &pointer::push(ptr, k),
                        format!("`{k}` must be a number"),
                    ))
                }
            }
        }
        if let Some(mo) = get_f64(m, "multipleOf", ptr)? {
            if mo <= 0.0 {
                return Err(SchemaError::invalid(
                    &pointer::push(ptr, "multipleOf"),
                    "`multipleOf` must be positive",
                ));
            }
            // `multipleOf: 1` stays a multiple, not `integer`: on a `number` it admits
            // `6000.0`, which the canonical integer spelling would refuse (MaskBench
            // Github_ultra---o46322).
            n.multiple_of = Some(mo);
        }
        Ok(Schema::Number(n))
    }

    fn lower_string(&mut self, m: &Map<String, Value>, ptr: &str) -> Result<Schema, SchemaError> {
        let mut s = StringSchema {
            min_len: get_u64(m, "minLength", ptr)?.unwrap_or(0),
            max_len: get_u64(m, "maxLength", ptr)?,
            ..Default::default()
        };
        match m.get("pattern") {
            None => {}
            // Translated here as well as when emitting, so a pattern that cannot be enforced
            // (lookaround, backreferences) is refused with its own pointer rather than the
            // emitter's (which only knows the nearest `$ref`).
            Some(Value::String(p)) => match regexes::check_pattern(p) {
                Ok(()) => s.pattern = Some(p.clone()),
                Err(regexes::RegexFail::Unsupported { keyword, detail }) => {
                    self.refuse(&keyword, &pointer::push(ptr, "pattern"), detail)?
                }
                Err(e) => return Err(e.at(&pointer::push(ptr, "pattern"))),
            },
            Some(_) => {
                return Err(SchemaError::invalid(
                    &pointer::push(ptr, "pattern"),
                    "`pattern` must be a string",
                ))
            }
        }
        match m.get("format") {
            None => {}
            Some(Value::String(f)) if self.opts.assert_format => {
                if regexes::format_known(f) {
                    s.format = Some(f.clone());
                } else {
                    self.refuse(
                        "format",
                        &pointer::push(ptr, "format"),
                        format!("unknown format `{f}`"),
                    )?;
                }
            }
            Some(Value::String(_)) => {}
            Some(_) => {
                return Err(SchemaError::invalid(
                    &pointer::push(ptr, "format"),
                    "`format` must be a string",
                ))
            }
        }
        if s.max_len.is_some_and(|mx| mx < s.min_len) {
            return Ok(Schema::Unsat("maxLength < minLength".into()));
        }
        Ok(Schema::String(s))
    }

    fn lower_array(
        &mut self,
        m: &Map<String, Value>,
        ptr: &str,
        base: &str,
    ) -> Result<Schema, SchemaError> {
        let mut a = ArraySchema {
            min: get_u64(m, "minItems", ptr)?.unwrap_or(0),
            max: get_u64(m, "maxItems", ptr)?,
            ..Default::default()
        };
        let ip = pointer::push(ptr, "items");
        match m.get("prefixItems") {
            Some(Value::Array(ps)) => {
                let pp = pointer::push(ptr, "prefixItems");
                for (i, s) in ps.iter().enumerate() {
                    a.prefix
                        .push(self.lower(s, &pointer::push(&pp, &i.to_string()), base)?);
                }
            }
            Some(_) => {
                return Err(SchemaError::invalid(
                    &pointer::push(ptr, "prefixItems"),
                    "`prefixItems` must be an array",
                ))
            }
            None => {}
        }
        match m.get("items") {
            Some(Value::Array(ps)) => {
                for (i, s) in ps.iter().enumerate() {
                    a.prefix
                        .push(self.lower(s, &pointer::push(&ip, &i.to_string()), base)?);
                }
                if let Some(ai) = m.get("additionalItems") {
                    a.items = self.lower(ai, &pointer::push(ptr, "additionalItems"), base)?;
                }
            }
            Some(s) => a.items = self.lower(s, &ip, base)?,
            None => {}
        }
        if let Some(c) = m.get("contains") {
            let cp = pointer::push(ptr, "contains");
            let cs = self.lower(c, &cp, base)?;
            let min_c = get_u64(m, "minContains", ptr)?.unwrap_or(1);
            let max_c = get_u64(m, "maxContains", ptr)?;
            if max_c.is_some() {
                self.refuse("maxContains", &pointer::push(ptr, "maxContains"), "")?;
            }
            if min_c > 1 {
                self.refuse(
                    "minContains",
                    &pointer::push(ptr, "minContains"),
                    "only 0 or 1 is supported",
                )?;
            } else if min_c == 1 {
                a.contains = Some(cs);
            }
        }
        if let Some(u) = m.get("uniqueItems") {
            match u {
                Value::Bool(b) => a.unique = *b,
                _ => {
                    return Err(SchemaError::invalid(
                        &pointer::push(ptr, "uniqueItems"),
                        "`uniqueItems` must be a boolean",
                    ))
                }
            }
        }
        if a.max.is_some_and(|mx| mx < a.min) {
            return Ok(Schema::Unsat("maxItems < minItems".into()));
        }
        Ok(Schema::Array(Box::new(a)))
    }

    fn lower_obj(
        &mut self,
        m: &Map<String, Value>,
        ptr: &str,
        base: &str,
    ) -> Result<Schema, SchemaError> {
        let mut o = ObjectSchema {
            min: get_u64(m, "minProperties", ptr)?.unwrap_or(0),
            max: get_u64(m, "maxProperties", ptr)?,
            ..Default::default()
        };
        if let Some(p) = m.get("properties") {
            let pp = pointer::push(ptr, "properties");
            let Value::Object(props) = p else {
                return Err(SchemaError::invalid(&pp, "`properties` must be an object"));
            };
            for (k, s) in props {
                let s = self.lower(s, &pointer::push(&pp, k), base)?;
                o.properties.push((k.clone(), s));
            }
        }
        if let Some(p) = m.get("patternProperties") {
            let pp = pointer::push(ptr, "patternProperties");
            let Value::Object(props) = p else {
                return Err(SchemaError::invalid(
                    &pp,
                    "`patternProperties` must be an object",
                ));
            };
            for (k, s) in props {
                let s = self.lower(s, &pointer::push(&pp, k), base)?;
                o.pattern_properties.push((k.clone(), s));
            }
        }
        match m.get("additionalProperties") {
            Some(a) => {
                o.additional = self.lower(a, &pointer::push(ptr, "additionalProperties"), base)?
            }
            None => {
                if self.opts.no_additional_properties || self.opts.strict {
                    o.additional = Schema::Unsat("additionalProperties defaulted to false".into());
                }
            }
        }
        if let Some(r) = m.get("required") {
            let rp = pointer::push(ptr, "required");
            let Value::Array(names) = r else {
                return Err(SchemaError::invalid(&rp, "`required` must be an array"));
            };
            for n in names {
                let Value::String(n) = n else {
                    return Err(SchemaError::invalid(&rp, "`required` must hold strings"));
                };
                if !o.required.contains(n) {
                    o.required.push(n.clone());
                }
            }
        }
        if self.opts.strict {
            for (k, _) in &o.properties {
                if !o.required.contains(k) {
                    o.required.push(k.clone());
                }
            }
        }
        if let Some(pn) = m.get("propertyNames") {
            let pp = pointer::push(ptr, "propertyNames");
            let s = self.lower(pn, &pp, base)?;
            // Names are strings: keep only the string part of the schema.
            let s = self.intersect(&s, &Schema::String(StringSchema::default()), &pp)?;
            if !matches!(&s, Schema::String(st) if st.is_plain()) {
                o.property_names = Some(s);
            }
        }
        Ok(Schema::Object(Box::new(o)))
    }

    // ---------------------------------------------------------------- algebra

    fn resolve_for_algebra(&mut self, t: &RefTarget) -> Result<Schema, SchemaError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            self.depth -= 1;
            return Err(SchemaError::LimitExceeded {
                what: "`$ref` expansion depth".into(),
                limit: MAX_DEPTH,
                given: self.depth + 1,
            });
        }
        let r = self.ref_schema(t);
        self.depth -= 1;
        let s = r?;
        if let Schema::Ref(t2) = &s {
            if t2 == t {
                // A reference to a schema still being lowered (e.g. `allOf: [{$ref: "#"}]`).
                return Err(SchemaError::unsupported(
                    "$ref",
                    &t.pointer,
                    "recursive reference inside an intersection",
                ));
            }
        }
        Ok(s)
    }

    /// The intersection of two schemas (`allOf`).
    pub(crate) fn intersect(
        &mut self,
        a: &Schema,
        b: &Schema,
        ptr: &str,
    ) -> Result<Schema, SchemaError> {
        self.tick()?;
        Ok(match (a, b) {
            (Schema::Any, x) | (x, Schema::Any) => x.clone(),
            (Schema::Unsat(r), _) | (_, Schema::Unsat(r)) => Schema::Unsat(r.clone()),
            (Schema::Ref(r1), Schema::Ref(r2)) if r1 == r2 => a.clone(),
            // Argument order is kept (left first) so merged properties stay in the order the
            // schema lists them.
            (Schema::Ref(t), x) => {
                let s = self.resolve_for_algebra(&t.clone())?;
                let x = x.clone();
                self.intersect_deeper(&s, &x, ptr)?
            }
            (x, Schema::Ref(t)) => {
                let s = self.resolve_for_algebra(&t.clone())?;
                let x = x.clone();
                self.intersect_deeper(&x, &s, ptr)?
            }
            (Schema::AnyOf(xs), y) => {
                let (xs, y) = (xs.clone(), y.clone());
                let mut out = Vec::new();
                for x in &xs {
                    out.push(self.intersect(x, &y, ptr)?);
                }
                union(out)
            }
            (y, Schema::AnyOf(xs)) => {
                let (xs, y) = (xs.clone(), y.clone());
                let mut out = Vec::new();
                for x in &xs {
                    out.push(self.intersect(&y, x, ptr)?);
                }
                union(out)
            }
            (Schema::Const(vs), y) | (y, Schema::Const(vs)) => {
                let (vs, y) = (vs.clone(), y.clone());
                let mut keep = Vec::new();
                for v in vs {
                    if self.accepts(&y, &v, ptr)? {
                        keep.push(v);
                    }
                }
                if keep.is_empty() {
                    Schema::Unsat("no `enum`/`const` value satisfies the other constraints".into())
                } else {
                    Schema::Const(keep)
                }
            }
            (Schema::Null, Schema::Null) => Schema::Null,
            (Schema::Boolean, Schema::Boolean) => Schema::Boolean,
            (Schema::Number(x), Schema::Number(y)) => self.intersect_number(x, y, ptr)?,
            (Schema::String(x), Schema::String(y)) => self.intersect_string(x, y, ptr)?,
            (Schema::Array(x), Schema::Array(y)) => {
                let (x, y) = (x.clone(), y.clone());
                self.intersect_array(&x, &y, ptr)?
            }
            (Schema::Object(x), Schema::Object(y)) => {
                let (x, y) = (x.clone(), y.clone());
                self.intersect_object(&x, &y, ptr)?
            }
            _ => Schema::Unsat("types do not overlap".into()),
        })
    }

    fn intersect_deeper(
        &mut self,
        a: &Schema,
        b: &Schema,
        ptr: &str,
    ) -> Result<Schema, SchemaError> {
        self.depth += 1;
        let r = if self.depth > MAX_DEPTH {
            Err(SchemaError::LimitExceeded {
                what: "`$ref` expansion depth".into(),
                limit: MAX_DEPTH,
                given: self.depth,
            })
        } else {
            self.intersect(a, b, ptr)
        };
        self.depth -= 1;
        r
    }

    fn intersect_number(
        &mut self,
        x: &NumberSchema,
        y: &NumberSchema,
        ptr: &str,
    ) -> Result<Schema, SchemaError> {
        let multiple_of = match (x.multiple_of, y.multiple_of) {
            (None, m) | (m, None) => m,
            (Some(a), Some(b)) => {
                if is_multiple(a, b) {
                    Some(a)
                } else if is_multiple(b, a) {
                    Some(b)
                } else if a.fract() == 0.0 && b.fract() == 0.0 {
                    let (ai, bi) = (a as u64, b as u64);
                    let g = gcd(ai, bi);
                    Some((ai / g * bi) as f64)
                } else {
                    self.refuse(
                        "multipleOf",
                        ptr,
                        "two incommensurable `multipleOf` in `allOf`",
                    )?;
                    Some(a)
                }
            }
        };
        Ok(Schema::Number(NumberSchema {
            integer: x.integer || y.integer,
            min: tighter_min(x.min.clone(), y.min.clone()),
            max: tighter_max(x.max.clone(), y.max.clone()),
            multiple_of,
        }))
    }

    fn intersect_string(
        &mut self,
        x: &StringSchema,
        y: &StringSchema,
        ptr: &str,
    ) -> Result<Schema, SchemaError> {
        let mut s = StringSchema {
            min_len: x.min_len.max(y.min_len),
            max_len: min_opt(x.max_len, y.max_len),
            pattern: x.pattern.clone(),
            format: x.format.clone(),
            exclude: x.exclude.clone(),
        };
        match (&x.pattern, &y.pattern) {
            (Some(a), Some(b)) if a != b => {
                self.refuse("pattern", ptr, "intersection of two different patterns")?;
            }
            (None, Some(b)) => s.pattern = Some(b.clone()),
            _ => {}
        }
        match (&x.format, &y.format) {
            (Some(a), Some(b)) if a != b => {
                self.refuse("format", ptr, "intersection of two different formats")?;
            }
            (None, Some(b)) => s.format = Some(b.clone()),
            _ => {}
        }
        for e in &y.exclude {
            if !s.exclude.contains(e) {
                s.exclude.push(e.clone());
            }
        }
        if s.max_len.is_some_and(|m| m < s.min_len) {
            return Ok(Schema::Unsat("string length bounds conflict".into()));
        }
        Ok(Schema::String(s))
    }

    fn intersect_array(
        &mut self,
        x: &ArraySchema,
        y: &ArraySchema,
        ptr: &str,
    ) -> Result<Schema, SchemaError> {
        let n = x.prefix.len().max(y.prefix.len());
        let mut prefix = Vec::with_capacity(n);
        for i in 0..n {
            let a = x.prefix.get(i).unwrap_or(&x.items).clone();
            let b = y.prefix.get(i).unwrap_or(&y.items).clone();
            prefix.push(self.intersect(&a, &b, ptr)?);
        }
        let items = self.intersect(&x.items, &y.items, ptr)?;
        let contains = match (&x.contains, &y.contains) {
            (None, c) | (c, None) => c.clone(),
            (Some(a), Some(b)) if a == b => Some(a.clone()),
            _ => {
                self.refuse("contains", ptr, "two different `contains` in `allOf`")?;
                x.contains.clone()
            }
        };
        let a = ArraySchema {
            prefix,
            items,
            min: x.min.max(y.min),
            max: min_opt(x.max, y.max),
            contains,
            unique: x.unique || y.unique,
        };
        if a.max.is_some_and(|m| m < a.min) {
            return Ok(Schema::Unsat("item count bounds conflict".into()));
        }
        Ok(Schema::Array(Box::new(a)))
    }

    /// The schema an object's property `name` must satisfy, or `None` when pattern properties
    /// would need a regex match we cannot decide here.
    pub(crate) fn property_schema(
        &mut self,
        o: &ObjectSchema,
        name: &str,
        ptr: &str,
    ) -> Result<Schema, SchemaError> {
        if let Some(s) = o.property(name) {
            let mut s = s.clone();
            for (p, ps) in o.pattern_properties.clone() {
                if regexes::pattern_matches(&p, name).map_err(|e| e.at(ptr))? {
                    s = self.intersect(&s, &ps, ptr)?;
                }
            }
            return Ok(s);
        }
        let mut matched = false;
        let mut s = Schema::Any;
        for (p, ps) in o.pattern_properties.clone() {
            if regexes::pattern_matches(&p, name).map_err(|e| e.at(ptr))? {
                matched = true;
                s = self.intersect(&s, &ps, ptr)?;
            }
        }
        if matched {
            Ok(s)
        } else {
            Ok(o.additional.clone())
        }
    }

    fn intersect_object(
        &mut self,
        x: &ObjectSchema,
        y: &ObjectSchema,
        ptr: &str,
    ) -> Result<Schema, SchemaError> {
        if ((!x.pattern_properties.is_empty()
            && (y.additional != Schema::Any || !y.pattern_properties.is_empty()))
            || (!y.pattern_properties.is_empty() && x.additional != Schema::Any))
            && (x.pattern_properties != y.pattern_properties || x.additional != y.additional)
        {
            self.refuse(
                "patternProperties",
                ptr,
                "intersection of objects with pattern properties",
            )?;
        }
        let mut names: Vec<String> = x.properties.iter().map(|(k, _)| k.clone()).collect();
        for (k, _) in &y.properties {
            if !names.contains(k) {
                names.push(k.clone());
            }
        }
        let mut properties = Vec::with_capacity(names.len());
        for k in names {
            let a = if x.property(&k).is_some() || !x.pattern_properties.is_empty() {
                self.property_schema(x, &k, ptr)?
            } else {
                x.additional.clone()
            };
            let b = if y.property(&k).is_some() || !y.pattern_properties.is_empty() {
                self.property_schema(y, &k, ptr)?
            } else {
                y.additional.clone()
            };
            let s = self.intersect(&a, &b, ptr)?;
            properties.push((k, s));
        }
        let mut pattern_properties = x.pattern_properties.clone();
        for pp in &y.pattern_properties {
            if !pattern_properties.contains(pp) {
                pattern_properties.push(pp.clone());
            }
        }
        let additional = self.intersect(&x.additional, &y.additional, ptr)?;
        let mut required = x.required.clone();
        for r in &y.required {
            if !required.contains(r) {
                required.push(r.clone());
            }
        }
        let property_names = match (&x.property_names, &y.property_names) {
            (None, p) | (p, None) => p.clone(),
            (Some(a), Some(b)) => Some(self.intersect(a, b, ptr)?),
        };
        let o = ObjectSchema {
            properties,
            pattern_properties,
            additional,
            required,
            min: x.min.max(y.min),
            max: min_opt(x.max, y.max),
            property_names,
        };
        if o.max.is_some_and(|m| m < o.min) {
            return Ok(Schema::Unsat("property count bounds conflict".into()));
        }
        Ok(Schema::Object(Box::new(o)))
    }

    /// Whether `v` is an instance of `s`.
    pub(crate) fn accepts(
        &mut self,
        s: &Schema,
        v: &Value,
        ptr: &str,
    ) -> Result<bool, SchemaError> {
        self.tick()?;
        Ok(match s {
            Schema::Any => true,
            Schema::Unsat(_) => false,
            Schema::Null => v.is_null(),
            Schema::Boolean => v.is_boolean(),
            Schema::Number(n) => {
                let Value::Number(x) = v else {
                    return Ok(false);
                };
                let f = x.as_f64().unwrap_or(f64::NAN);
                if n.integer && f.fract() != 0.0 {
                    return Ok(false);
                }
                if let Some(b) = &n.min {
                    if f < b.value || (b.exclusive && f == b.value) {
                        return Ok(false);
                    }
                }
                if let Some(b) = &n.max {
                    if f > b.value || (b.exclusive && f == b.value) {
                        return Ok(false);
                    }
                }
                if let Some(m) = n.multiple_of {
                    if !is_multiple(f, m) {
                        return Ok(false);
                    }
                }
                true
            }
            Schema::String(st) => {
                let Value::String(x) = v else {
                    return Ok(false);
                };
                let len = x.chars().count() as u64;
                if len < st.min_len || st.max_len.is_some_and(|m| len > m) {
                    return Ok(false);
                }
                if st.exclude.contains(x) {
                    return Ok(false);
                }
                if let Some(p) = &st.pattern {
                    if !regexes::pattern_matches(p, x).map_err(|e| e.at(ptr))? {
                        return Ok(false);
                    }
                }
                if let Some(f) = &st.format {
                    if !regexes::format_matches(f, x).map_err(|e| e.at(ptr))? {
                        return Ok(false);
                    }
                }
                true
            }
            Schema::Array(a) => {
                let Value::Array(xs) = v else {
                    return Ok(false);
                };
                let n = xs.len() as u64;
                if n < a.min || a.max.is_some_and(|m| n > m) {
                    return Ok(false);
                }
                for (i, x) in xs.iter().enumerate() {
                    let sub = a.prefix.get(i).unwrap_or(&a.items).clone();
                    if !self.accepts(&sub, x, ptr)? {
                        return Ok(false);
                    }
                }
                if let Some(c) = &a.contains {
                    let c = c.clone();
                    let mut any = false;
                    for x in xs {
                        if self.accepts(&c, x, ptr)? {
                            any = true;
                            break;
                        }
                    }
                    if !any {
                        return Ok(false);
                    }
                }
                if a.unique {
                    for i in 0..xs.len() {
                        for j in i + 1..xs.len() {
                            if json_eq(&xs[i], &xs[j]) {
                                return Ok(false);
                            }
                        }
                    }
                }
                true
            }
            Schema::Object(o) => {
                let Value::Object(xs) = v else {
                    return Ok(false);
                };
                let n = xs.len() as u64;
                if n < o.min || o.max.is_some_and(|m| n > m) {
                    return Ok(false);
                }
                if o.required.iter().any(|r| !xs.contains_key(r)) {
                    return Ok(false);
                }
                let o = o.clone();
                for (k, x) in xs {
                    if let Some(pn) = &o.property_names {
                        if !self.accepts(pn, &Value::String(k.clone()), ptr)? {
                            return Ok(false);
                        }
                    }
                    let sub = self.property_schema(&o, k, ptr)?;
                    if !self.accepts(&sub, x, ptr)? {
                        return Ok(false);
                    }
                }
                true
            }
            Schema::Const(vs) => vs.iter().any(|w| json_eq(w, v)),
            Schema::AnyOf(xs) => {
                for x in xs {
                    if self.accepts(x, v, ptr)? {
                        return Ok(true);
                    }
                }
                false
            }
            Schema::Ref(t) => {
                let s = self.resolve_for_algebra(t)?;
                self.depth += 1;
                let r = if self.depth > MAX_DEPTH {
                    Err(SchemaError::LimitExceeded {
                        what: "`$ref` expansion depth".into(),
                        limit: MAX_DEPTH,
                        given: self.depth,
                    })
                } else {
                    self.accepts(&s, v, ptr)
                };
                self.depth -= 1;
                r?
            }
        })
    }

    /// The JSON types `s` can produce.
    pub(crate) fn type_set(&mut self, s: &Schema) -> Result<u8, SchemaError> {
        self.tick()?;
        Ok(match s {
            Schema::Any => types::ALL,
            Schema::Unsat(_) => 0,
            Schema::Null => types::NULL,
            Schema::Boolean => types::BOOLEAN,
            Schema::Number(_) => types::NUMBER,
            Schema::String(_) => types::STRING,
            Schema::Array(_) => types::ARRAY,
            Schema::Object(_) => types::OBJECT,
            Schema::Const(vs) => vs.iter().fold(0, |a, v| a | type_of(v)),
            Schema::AnyOf(xs) => {
                let mut t = 0;
                for x in xs {
                    t |= self.type_set(x)?;
                }
                t
            }
            Schema::Ref(r) => {
                if self.depth > MAX_DEPTH / 2 {
                    return Ok(types::ALL);
                }
                let s = self.resolve_for_algebra(r)?;
                if s == Schema::Ref(r.clone()) {
                    return Ok(types::ALL);
                }
                self.depth += 1;
                let t = self.type_set(&s);
                self.depth -= 1;
                t?
            }
        })
    }

    /// Whether no value is an instance of both (conservative: `false` means "not proven").
    pub(crate) fn disjoint(
        &mut self,
        a: &Schema,
        b: &Schema,
        ptr: &str,
    ) -> Result<bool, SchemaError> {
        self.tick()?;
        if self.type_set(a)? & self.type_set(b)? == 0 {
            return Ok(true);
        }
        Ok(match (a, b) {
            (Schema::Unsat(_), _) | (_, Schema::Unsat(_)) => true,
            (Schema::Ref(t), x) | (x, Schema::Ref(t)) => {
                if self.depth > MAX_DEPTH / 2 {
                    return Ok(false);
                }
                let s = self.resolve_for_algebra(t)?;
                if let Schema::Ref(_) = s {
                    return Ok(false);
                }
                let x = x.clone();
                self.depth += 1;
                let r = self.disjoint(&s, &x, ptr);
                self.depth -= 1;
                r?
            }
            (Schema::Const(vs), y) | (y, Schema::Const(vs)) => {
                let (vs, y) = (vs.clone(), y.clone());
                for v in &vs {
                    if self.accepts(&y, v, ptr)? {
                        return Ok(false);
                    }
                }
                true
            }
            (Schema::AnyOf(xs), y) | (y, Schema::AnyOf(xs)) => {
                let (xs, y) = (xs.clone(), y.clone());
                for x in &xs {
                    if !self.disjoint(x, &y, ptr)? {
                        return Ok(false);
                    }
                }
                true
            }
            (Schema::Object(x), Schema::Object(y)) => {
                let (x, y) = (x.clone(), y.clone());
                for (p, q) in [(&x, &y), (&y, &x)] {
                    for r in &p.required {
                        let sp = self.property_schema(p, r, ptr)?;
                        let sq = self.property_schema(q, r, ptr)?;
                        if self.disjoint(&sp, &sq, ptr)? {
                            return Ok(true);
                        }
                    }
                }
                let (xmin, xmax) = (x.min.max(x.required.len() as u64), x.max);
                let (ymin, ymax) = (y.min.max(y.required.len() as u64), y.max);
                xmax.is_some_and(|m| m < ymin) || ymax.is_some_and(|m| m < xmin)
            }
            (Schema::Array(x), Schema::Array(y)) => {
                if x.max.is_some_and(|m| m < y.min) || y.max.is_some_and(|m| m < x.min) {
                    return Ok(true);
                }
                let (x, y) = (x.clone(), y.clone());
                let both = x.min.min(y.min) as usize;
                for i in 0..both.min(x.prefix.len().max(y.prefix.len())) {
                    let a = x.prefix.get(i).unwrap_or(&x.items).clone();
                    let b = y.prefix.get(i).unwrap_or(&y.items).clone();
                    if self.disjoint(&a, &b, ptr)? {
                        return Ok(true);
                    }
                }
                false
            }
            (Schema::Number(x), Schema::Number(y)) => {
                let below = |hi: &Option<Bound>, lo: &Option<Bound>| match (hi, lo) {
                    (Some(h), Some(l)) => {
                        h.value < l.value || (h.value == l.value && (h.exclusive || l.exclusive))
                    }
                    _ => false,
                };
                below(&x.max, &y.min) || below(&y.max, &x.min)
            }
            (Schema::String(x), Schema::String(y)) => {
                x.max_len.is_some_and(|m| m < y.min_len) || y.max_len.is_some_and(|m| m < x.min_len)
            }
            _ => false,
        })
    }

    /// `oneOf` as an exact union: branches proven pairwise disjoint, or made disjoint by
    /// intersecting each with the complements of the others. `None` if neither works.
    ///
    /// `branches` are the branches already intersected with their sibling keywords; `raw` the
    /// branches alone. Complements are taken of the raw branches (inside the siblings' set,
    /// `acc ∩ ¬b` equals `acc ∩ ¬(acc ∩ b)`), since a bare `{"required": [..]}` negates
    /// exactly where its intersection with `additionalProperties: false` would not.
    fn one_of(
        &mut self,
        branches: Vec<Schema>,
        raw: Vec<Schema>,
        ptr: &str,
    ) -> Result<Option<Schema>, SchemaError> {
        let (branches, raw): (Vec<Schema>, Vec<Schema>) = branches
            .into_iter()
            .zip(raw)
            .filter(|(b, _)| !matches!(b, Schema::Unsat(_)))
            .unzip();
        let mut all_disjoint = true;
        'outer: for i in 0..branches.len() {
            for j in i + 1..branches.len() {
                if !self.disjoint(&branches[i], &branches[j], ptr)? {
                    all_disjoint = false;
                    break 'outer;
                }
            }
        }
        if all_disjoint {
            return Ok(Some(union(branches)));
        }
        if branches.len() <= 6 {
            let mut negs = Vec::new();
            for b in &raw {
                match self.negate(b, ptr)? {
                    Some(n) => negs.push(n),
                    None => {
                        negs.clear();
                        break;
                    }
                }
            }
            if negs.len() == branches.len() {
                let mut out = Vec::new();
                for (i, b) in branches.iter().enumerate() {
                    let mut acc = b.clone();
                    for (j, n) in negs.iter().enumerate() {
                        if i != j {
                            acc = self.intersect(&acc, n, ptr)?;
                        }
                    }
                    out.push(acc);
                }
                return Ok(Some(union(out)));
            }
        }
        if self.opts.coerce_one_of {
            return Ok(Some(union(branches)));
        }
        Ok(None)
    }

    /// The complement of `s`, when it can be written exactly in the IR.
    pub(crate) fn negate(&mut self, s: &Schema, ptr: &str) -> Result<Option<Schema>, SchemaError> {
        self.tick()?;
        let others = |t: u8| of_types(types::ALL & !t);
        Ok(match s {
            Schema::Any => Some(Schema::Unsat("`not` of an unconstrained schema".into())),
            Schema::Unsat(_) => Some(Schema::Any),
            Schema::Null => Some(others(types::NULL)),
            Schema::Boolean => Some(others(types::BOOLEAN)),
            Schema::Number(n) => {
                if n.integer || n.multiple_of.is_some() {
                    return Ok(None);
                }
                let mut alts = vec![others(types::NUMBER)];
                if let Some(b) = &n.min {
                    alts.push(Schema::Number(NumberSchema {
                        max: Some(Bound {
                            value: b.value,
                            exclusive: !b.exclusive,
                        }),
                        ..Default::default()
                    }));
                }
                if let Some(b) = &n.max {
                    alts.push(Schema::Number(NumberSchema {
                        min: Some(Bound {
                            value: b.value,
                            exclusive: !b.exclusive,
                        }),
                        ..Default::default()
                    }));
                }
                Some(union(alts))
            }
            Schema::String(st) => {
                if st.pattern.is_some() || st.format.is_some() || !st.exclude.is_empty() {
                    return Ok(None);
                }
                let mut alts = vec![others(types::STRING)];
                if st.min_len > 0 {
                    alts.push(Schema::String(StringSchema {
                        max_len: Some(st.min_len - 1),
                        ..Default::default()
                    }));
                }
                if let Some(m) = st.max_len {
                    alts.push(Schema::String(StringSchema {
                        min_len: m + 1,
                        ..Default::default()
                    }));
                }
                Some(union(alts))
            }
            Schema::Array(a) => {
                let plain = ArraySchema {
                    min: a.min,
                    max: a.max,
                    ..Default::default()
                };
                if **a != plain {
                    return Ok(None);
                }
                let mut alts = vec![others(types::ARRAY)];
                if a.min > 0 {
                    alts.push(Schema::Array(Box::new(ArraySchema {
                        max: Some(a.min - 1),
                        ..Default::default()
                    })));
                }
                if let Some(m) = a.max {
                    alts.push(Schema::Array(Box::new(ArraySchema {
                        min: m + 1,
                        ..Default::default()
                    })));
                }
                Some(union(alts))
            }
            Schema::Object(o) => {
                if !o.pattern_properties.is_empty()
                    || o.additional != Schema::Any
                    || o.property_names.is_some()
                {
                    return Ok(None);
                }
                let o = o.clone();
                let mut alts = vec![others(types::OBJECT)];
                for r in &o.required {
                    alts.push(Schema::Object(Box::new(ObjectSchema {
                        properties: vec![(r.clone(), Schema::Unsat("`not` required".into()))],
                        ..Default::default()
                    })));
                }
                for (k, ps) in &o.properties {
                    if *ps == Schema::Any {
                        continue;
                    }
                    let Some(n) = self.negate(ps, ptr)? else {
                        return Ok(None);
                    };
                    alts.push(Schema::Object(Box::new(ObjectSchema {
                        properties: vec![(k.clone(), n)],
                        required: vec![k.clone()],
                        ..Default::default()
                    })));
                }
                if o.min > 0 {
                    alts.push(Schema::Object(Box::new(ObjectSchema {
                        max: Some(o.min - 1),
                        ..Default::default()
                    })));
                }
                if let Some(m) = o.max {
                    alts.push(Schema::Object(Box::new(ObjectSchema {
                        min: m + 1,
                        ..Default::default()
                    })));
                }
                Some(union(alts))
            }
            Schema::Const(vs) => {
                let mut present = 0u8;
                for v in vs {
                    present |= type_of(v);
                }
                if present & (types::NUMBER | types::ARRAY | types::OBJECT) != 0 {
                    return Ok(None);
                }
                let mut alts = vec![of_types(types::ALL & !present)];
                if present & types::BOOLEAN != 0 {
                    let has_t = vs.contains(&Value::Bool(true));
                    let has_f = vs.contains(&Value::Bool(false));
                    if !(has_t && has_f) {
                        alts.push(Schema::Const(vec![Value::Bool(!has_t)]));
                    }
                }
                if present & types::STRING != 0 {
                    alts.push(Schema::String(StringSchema {
                        exclude: vs
                            .iter()
                            .filter_map(|v| v.as_str().map(str::to_string))
                            .collect(),
                        ..Default::default()
                    }));
                }
                Some(union(alts))
            }
            Schema::AnyOf(xs) => {
                let xs = xs.clone();
                let mut acc = Schema::Any;
                for x in &xs {
                    let Some(n) = self.negate(x, ptr)? else {
                        return Ok(None);
                    };
                    acc = self.intersect(&acc, &n, ptr)?;
                }
                Some(acc)
            }
            Schema::Ref(t) => {
                if self.depth > MAX_DEPTH / 2 {
                    return Ok(None);
                }
                let s = self.resolve_for_algebra(t)?;
                if let Schema::Ref(_) = s {
                    return Ok(None);
                }
                self.depth += 1;
                let r = self.negate(&s, ptr);
                self.depth -= 1;
                r?
            }
        })
    }
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}
