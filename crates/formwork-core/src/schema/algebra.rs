//! The set algebra over the normalized [`Schema`] IR that makes combinators exact:
//! intersection ([`Lowerer::intersect`]: `allOf`, sibling keywords, `if`/`then`), negation
//! ([`Lowerer::negate`]: `not`, `if`/`else`, `oneOf`), disjointness proofs
//! ([`Lowerer::disjoint`], for `oneOf`), the `oneOf` union itself, and value membership
//! ([`Lowerer::accepts`]: filtering `enum`/`const` values against the other constraints).
//!
//! # Invariants
//! - **Exact or refused, never an over-approximation.** `intersect` returns exactly the
//!   values of both operands, or refuses the keyword it cannot combine (two different
//!   `pattern`s, `format`s or `contains`, incommensurable `multipleOf`, differing
//!   `patternProperties`) through [`Lowerer::refuse`]: an error, or in lenient mode a warning
//!   after which the left operand's constraint is kept. `negate` returns the exact complement
//!   or `None` (the caller refuses `not`/`if`/`oneOf`); `one_of` returns the exact union of
//!   disjoint branches or `None` — only the opt-in `coerce_one_of` option turns it into the
//!   plain union.
//! - **Proofs are sound, not complete.** `disjoint` answers `true` only when no value can be
//!   in both; `false` means "not proven". `type_set` may over-approximate (every type, when
//!   `$ref`s nest too deep) but never omits a type the schema can produce.
//! - `accepts` decides membership as the IR means it (lengths in code points, numbers by
//!   value, `multipleOf` within 1e-9 of an integer quotient, as the validator does).
//! - Results are normalized through [`union`]: flattened, unsatisfiable members dropped, an
//!   empty union is [`Schema::Unsat`] with the reason.
//!
//! # Costs
//! Each call of `intersect`, `negate`, `accepts`, `type_set` and `disjoint` counts one step
//! against [`MAX_WORK`](super::lower::MAX_WORK), so adversarial `allOf`/`oneOf`/`not` nests
//! end in [`SchemaError::LimitExceeded`] rather than exponential time; `$ref` expansion inside
//! one operation is bounded by [`MAX_DEPTH`].
//!
//! # Uses
//! `ir` (the data), `regexes` (deciding whether a property name or a string matches a
//! `pattern`/`format`), `error`, and the [`Lowerer`]'s state from `lower`: its options, work
//! and depth budgets, [`Lowerer::refuse`], and [`Lowerer::ref_schema`], which lowers a `$ref`
//! target on demand — so `lower` and `algebra` call each other, one unit split by concern.
//! Never builds grammar rules (`emit`) and does not use the direct validator (`validate`).

use serde_json::Value;

use super::error::SchemaError;
use super::ir::{
    json_eq, type_of, types, ArraySchema, Bound, NumberSchema, ObjectSchema, RefTarget, Schema,
    StringSchema,
};
use super::lower::{Lowerer, MAX_DEPTH};
use super::regexes;

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

pub(super) fn tighter_min(a: Option<Bound>, b: Option<Bound>) -> Option<Bound> {
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

pub(super) fn tighter_max(a: Option<Bound>, b: Option<Bound>) -> Option<Bound> {
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
    pub(super) fn one_of(
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

