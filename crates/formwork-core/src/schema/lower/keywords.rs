//! Lowering keyword by keyword: JSON Schema (a [`Document`](crate::schema::resolve::Document))
//! → normalized [`Schema`] IR.
//!
//! Owns keyword semantics: `$ref` targets lowered on demand ([`Lowerer::ref_schema`]), the
//! per-type keywords folded into the IR's constraint records, and combinators reduced with
//! the set algebra (`algebra`). Every validation keyword is either folded into the IR or
//! reported through [`Lowerer::refuse`] by name and JSON pointer (in lenient mode the refusal
//! becomes a warning and the keyword is skipped). Costs: each `$ref` target is lowered once.
//!
//! Uses `resolve` (the document, `$ref` resolution), `ir`, `regexes` (pattern and format
//! checks), `validate` (finite `enum`/`const` nodes), and this module's `lowerer` and
//! `algebra`.

use serde_json::{Map, Value};

use super::algebra::extend_unique;
use super::lowerer::Lowerer;
use crate::schema::error::{display_pointer, SchemaError};
use crate::schema::ir::{
    dedup_values, of_type, of_types, tighter_max, tighter_min, types, union, ArraySchema, Bound,
    NumberSchema, ObjectSchema, RefTarget, Schema, StringSchema, UNSUPPORTED_KEYWORDS,
};
use crate::schema::pointer;
use crate::schema::regexes;
use crate::schema::resolve::{join, Draft};
use crate::schema::validate::Validator;

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

/// A count range given by a keyword pair (`minLength`/`maxLength`, `minItems`/`maxItems`,
/// `minProperties`/`maxProperties`): the minimum (0 when absent) and the maximum.
fn get_range(
    m: &Map<String, Value>,
    min_kw: &str,
    max_kw: &str,
    ptr: &str,
) -> Result<(u64, Option<u64>), SchemaError> {
    Ok((
        get_u64(m, min_kw, ptr)?.unwrap_or(0),
        get_u64(m, max_kw, ptr)?,
    ))
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

impl<'d> Lowerer<'d> {
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
        self.check_time(Some(ptr))?;
        self.deeper("schema nesting depth", |me| match v {
            Value::Bool(true) => Ok(Schema::Any),
            Value::Bool(false) => Ok(Schema::Unsat(format!(
                "`false` schema at {}",
                display_pointer(ptr)
            ))),
            Value::Object(m) => me.lower_object(m, ptr, base),
            _ => Err(SchemaError::invalid(
                ptr,
                "a schema must be an object or a boolean",
            )),
        })
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
        // `x-grounded` is formwork's own marker, not an annotation: it promises that the value
        // quotes a document, which only the extraction pipeline (it has the document) can
        // enforce, by rewriting the marked schemas before they reach this compiler. One that
        // arrives here would otherwise be read as an unknown `x-` keyword and dropped.
        if m.get("x-grounded") == Some(&Value::Bool(true)) {
            self.refuse(
                "x-grounded",
                &pointer::push(ptr, "x-grounded"),
                "a grounded value must quote a document, and compiling a schema alone has none \
                 (`formwork extract` and the server's /v1/formwork/extract ground it)",
            )?;
        }
        let draft = self.doc.draft();
        // Draft 7 lets a validator assert `contentEncoding`/`contentMediaType` (2019-09 on
        // makes them annotations only; drafts 4 and 6 do not have them), and a validator
        // asserting formats asserts the ones it knows (the suite's draft-7
        // `optional/content.json`): base64 and a JSON document. Neither is enforced, so under
        // `assert_format` they are refused rather than read as annotations; other encodings
        // and media types are no constraint, as unknown formats are.
        if draft == Draft::Draft7 && self.opts.assert_format {
            for (k, known) in [
                ("contentEncoding", "base64"),
                ("contentMediaType", "application/json"),
            ] {
                if m.get(k).and_then(Value::as_str) == Some(known) {
                    self.refuse(
                        k,
                        &pointer::push(ptr, k),
                        format!(
                            "draft 7 with assert_format asserts `{k}: {known}`, which is not \
                             enforced"
                        ),
                    )?;
                }
            }
        }
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
        if let Some(values) = Validator::new(self.doc, self.opts.assert_format)
            .strict_format(self.opts.strict_format)
            .finite_node(m, &base)
        {
            self.tick()?;
            return Ok(if values.is_empty() {
                Schema::Unsat(format!(
                    "no listed value satisfies the schema at {}",
                    display_pointer(ptr)
                ))
            } else {
                Schema::Const(values)
            });
        }
        let mut parts: Vec<Schema> = Vec::new();
        if let Some(r) = m.get("$ref") {
            parts.push(self.lower_ref(r, ptr, &base)?);
        }
        for k in UNSUPPORTED_KEYWORDS {
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
        for t in types::EACH.into_iter().filter(|t| set & t != 0) {
            alts.push(match t {
                types::NUMBER => self.lower_number(m, ptr, integer)?,
                types::STRING => self.lower_string(m, ptr)?,
                types::ARRAY => self.lower_array(m, ptr, base)?,
                types::OBJECT => self.lower_obj(m, ptr, base)?,
                t => of_type(t),
            });
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
        let (min_len, max_len) = get_range(m, "minLength", "maxLength", ptr)?;
        let mut s = StringSchema {
            min_len,
            max_len,
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
                } else if self.opts.strict_format {
                    self.refuse(
                        "format",
                        &pointer::push(ptr, "format"),
                        format!("unknown format `{f}` (strict_format)"),
                    )?;
                }
                // Otherwise an unknown format constrains nothing: every draft's validators
                // ignore formats they do not know (JSON-Schema-Test-Suite
                // `optional/format/unknown.json`), so any string is an instance.
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
        let (min, max) = get_range(m, "minItems", "maxItems", ptr)?;
        let mut a = ArraySchema {
            min,
            max,
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
        let (min, max) = get_range(m, "minProperties", "maxProperties", ptr)?;
        let mut o = ObjectSchema {
            min,
            max,
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
            let names = o.properties.iter().map(|(k, _)| k.clone());
            extend_unique(&mut o.required, names);
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
}
