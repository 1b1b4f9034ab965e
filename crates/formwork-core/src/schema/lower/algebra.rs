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
//! against [`MAX_WORK`](super::lowerer::MAX_WORK), so adversarial `allOf`/`oneOf`/`not` nests
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

use super::lowerer::{Lowerer, MAX_DEPTH};
use crate::schema::error::SchemaError;
use crate::schema::ir::{
    is_multiple, json_eq, of_type, of_types, tighter_max, tighter_min, type_of, types, union,
    ArraySchema, Bound, NumberSchema, ObjectSchema, RefTarget, Schema, StringSchema,
};
use crate::schema::regexes;

/// What [`Lowerer::deeper`] reports when `$ref` expansion inside the algebra nests too deep.
const REF_DEPTH: &str = "`$ref` expansion depth";

/// Whether two schemas have no common instance but (perhaps) the empty object: closed
/// objects (no additional or pattern properties) no name of which both may hold. Decided on
/// the structure alone, so no intersection is attempted (it may refuse).
fn share_only_empty(a: &Schema, b: &Schema) -> bool {
    let (Schema::Object(x), Schema::Object(y)) = (a, b) else {
        return false;
    };
    let closed = |o: &ObjectSchema| {
        matches!(o.additional, Schema::Unsat(_)) && o.pattern_properties.is_empty()
    };
    let may_hold = |o: &ObjectSchema, k: &str| {
        o.property(k)
            .is_some_and(|s| !matches!(s, Schema::Unsat(_)))
    };
    closed(x)
        && closed(y)
        && !x
            .properties
            .iter()
            .any(|(k, _)| may_hold(x, k) && may_hold(y, k))
}

/// Whether a count (length, items, properties) lies within `min..=max`.
fn within(n: u64, min: u64, max: Option<u64>) -> bool {
    n >= min && max.is_none_or(|m| n <= m)
}

/// The count ranges outside `min..=max`, as `(min, max)` pairs: below `min` (when `min > 0`)
/// and above `max` (when there is one). What negation of a length or count bound allows.
fn outside(min: u64, max: Option<u64>) -> impl Iterator<Item = (u64, Option<u64>)> {
    let below = (min > 0).then(|| (0, Some(min - 1)));
    let above = max.map(|m| (m + 1, None));
    below.into_iter().chain(above)
}

/// Appends the items of `more` that `to` does not hold yet, in order (sets kept in schema
/// order: `required` names, pattern properties, excluded strings).
pub(super) fn extend_unique<T: PartialEq>(to: &mut Vec<T>, more: impl IntoIterator<Item = T>) {
    for x in more {
        if !to.contains(&x) {
            to.push(x);
        }
    }
}

fn min_opt(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (None, x) | (x, None) => x,
        (Some(a), Some(b)) => Some(a.min(b)),
    }
}

impl<'d> Lowerer<'d> {
    fn resolve_for_algebra(&mut self, t: &RefTarget) -> Result<Schema, SchemaError> {
        let s = self.deeper(REF_DEPTH, |me| me.ref_schema(t))?;
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
                let s = self.resolve_for_algebra(t)?;
                self.deeper(REF_DEPTH, |me| me.intersect(&s, x, ptr))?
            }
            (x, Schema::Ref(t)) => {
                let s = self.resolve_for_algebra(t)?;
                self.deeper(REF_DEPTH, |me| me.intersect(x, &s, ptr))?
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

    /// `f` over the target of `t`, one level deeper, for the questions that may give up
    /// (types, disjointness, complements): `None` once `$ref`s nest past half of
    /// [`MAX_DEPTH`], instead of the limit error.
    fn through_ref<T>(
        &mut self,
        t: &RefTarget,
        f: impl FnOnce(&mut Self, &Schema) -> Result<T, SchemaError>,
    ) -> Result<Option<T>, SchemaError> {
        if self.depth > MAX_DEPTH / 2 {
            return Ok(None);
        }
        let s = self.resolve_for_algebra(t)?;
        self.depth += 1;
        let r = f(self, &s);
        self.depth -= 1;
        r.map(Some)
    }

    /// The one value two operands can share for a keyword the IR cannot combine (`pattern`,
    /// `format`, `contains`): the one given, or the common one; when they differ, `keyword`
    /// is refused (lenient: the left operand's is kept).
    fn same_or_refuse<T: Clone + PartialEq>(
        &mut self,
        x: &Option<T>,
        y: &Option<T>,
        keyword: &str,
        ptr: &str,
        detail: &str,
    ) -> Result<Option<T>, SchemaError> {
        match (x, y) {
            (None, v) | (v, None) => Ok(v.clone()),
            (Some(a), Some(b)) if a == b => Ok(x.clone()),
            _ => {
                self.refuse(keyword, ptr, detail)?;
                Ok(x.clone())
            }
        }
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
        let pattern = self.same_or_refuse(
            &x.pattern,
            &y.pattern,
            "pattern",
            ptr,
            "intersection of two different patterns",
        )?;
        let format = self.same_or_refuse(
            &x.format,
            &y.format,
            "format",
            ptr,
            "intersection of two different formats",
        )?;
        let mut s = StringSchema {
            min_len: x.min_len.max(y.min_len),
            max_len: min_opt(x.max_len, y.max_len),
            pattern,
            format,
            exclude: x.exclude.clone(),
        };
        extend_unique(&mut s.exclude, y.exclude.iter().cloned());
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
        let contains = self.same_or_refuse(
            &x.contains,
            &y.contains,
            "contains",
            ptr,
            "two different `contains` in `allOf`",
        )?;
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

    /// The schema an object's property `name` must satisfy: its `properties` entry intersected
    /// with every pattern property whose pattern matches `name`, else those pattern
    /// properties, else `additionalProperties`.
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
        extend_unique(&mut names, y.properties.iter().map(|(k, _)| k.clone()));
        let mut properties = Vec::with_capacity(names.len());
        for k in names {
            let a = self.property_schema(x, &k, ptr)?;
            let b = self.property_schema(y, &k, ptr)?;
            let s = self.intersect(&a, &b, ptr)?;
            properties.push((k, s));
        }
        let mut pattern_properties = x.pattern_properties.clone();
        extend_unique(
            &mut pattern_properties,
            y.pattern_properties.iter().cloned(),
        );
        let additional = self.intersect(&x.additional, &y.additional, ptr)?;
        let mut required = x.required.clone();
        extend_unique(&mut required, y.required.iter().cloned());
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
                if !within(x.chars().count() as u64, st.min_len, st.max_len) {
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
                if !within(xs.len() as u64, a.min, a.max) {
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
                if !within(xs.len() as u64, o.min, o.max) {
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
                self.deeper(REF_DEPTH, |me| me.accepts(&s, v, ptr))?
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
            // A chain of `$ref`s is followed (`resolve_for_algebra` refuses a self-reference).
            Schema::Ref(r) => self
                .through_ref(r, |me, s| me.type_set(s))?
                .unwrap_or(types::ALL),
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
            (Schema::Ref(t), x) | (x, Schema::Ref(t)) => self
                .through_ref(t, |me, s| match s {
                    Schema::Ref(_) => Ok(false),
                    s => me.disjoint(s, x, ptr),
                })?
                .unwrap_or(false),
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
        if let Some(s) = self.one_of_by_type(&branches, ptr)? {
            return Ok(Some(s));
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

    /// `oneOf` one JSON type at a time: a value of type `t` matches a branch exactly when it
    /// matches the branch's part of type `t`, so the union of the parts is exact when, within
    /// each type, they are pairwise disjoint. Two overlaps are resolved on the way: a type two
    /// branches admit entirely (branches without `type` admit every string, number, ...)
    /// has no instance, since each of its values matches both; and two objects whose only
    /// common instance is `{}` (closed objects listing no name that both may hold) both lose
    /// `{}`. `None` when some overlap remains.
    fn one_of_by_type(
        &mut self,
        branches: &[Schema],
        ptr: &str,
    ) -> Result<Option<Schema>, SchemaError> {
        let mut out = Vec::new();
        for t in types::EACH {
            let whole = of_type(t);
            let mut parts = Vec::new();
            for b in branches {
                if self.type_set(b)? & t == 0 {
                    continue;
                }
                let p = self.intersect(b, &whole, ptr)?;
                if !matches!(p, Schema::Unsat(_)) {
                    parts.push(p);
                }
            }
            if parts.iter().filter(|p| **p == whole).count() >= 2 {
                continue;
            }
            let empty = Value::Object(serde_json::Map::new());
            let mut drop_empty = vec![false; parts.len()];
            for i in 0..parts.len() {
                for j in i + 1..parts.len() {
                    if self.disjoint(&parts[i], &parts[j], ptr)? {
                        continue;
                    }
                    if !share_only_empty(&parts[i], &parts[j]) {
                        return Ok(None);
                    }
                    // The common instance is `{}` if both admit it, else there is none.
                    let (a, b) = (parts[i].clone(), parts[j].clone());
                    if self.accepts(&a, &empty, ptr)? && self.accepts(&b, &empty, ptr)? {
                        drop_empty[i] = true;
                        drop_empty[j] = true;
                    }
                }
            }
            for (k, mut p) in parts.into_iter().enumerate() {
                if drop_empty[k] {
                    match &mut p {
                        Schema::Object(o) => o.min = o.min.max(1),
                        _ => return Ok(None),
                    }
                }
                out.push(p);
            }
        }
        Ok(Some(union(out)))
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
                // Below the minimum is up to it, with the opposite exclusivity; likewise above.
                let flip = |b: &Bound| {
                    Some(Bound {
                        value: b.value,
                        exclusive: !b.exclusive,
                    })
                };
                let mut alts = vec![others(types::NUMBER)];
                if let Some(b) = &n.min {
                    alts.push(Schema::Number(NumberSchema {
                        max: flip(b),
                        ..Default::default()
                    }));
                }
                if let Some(b) = &n.max {
                    alts.push(Schema::Number(NumberSchema {
                        min: flip(b),
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
                alts.extend(outside(st.min_len, st.max_len).map(|(min_len, max_len)| {
                    Schema::String(StringSchema {
                        min_len,
                        max_len,
                        ..Default::default()
                    })
                }));
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
                alts.extend(outside(a.min, a.max).map(|(min, max)| {
                    Schema::Array(Box::new(ArraySchema {
                        min,
                        max,
                        ..Default::default()
                    }))
                }));
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
                alts.extend(outside(o.min, o.max).map(|(min, max)| {
                    Schema::Object(Box::new(ObjectSchema {
                        min,
                        max,
                        ..Default::default()
                    }))
                }));
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
            Schema::Ref(t) => self
                .through_ref(t, |me, s| match s {
                    Schema::Ref(_) => Ok(None),
                    s => me.negate(s, ptr),
                })?
                .flatten(),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::lower::lowerer::MAX_WORK;
    use crate::schema::options::CompileOptions;
    use crate::schema::resolve::{Document, Draft};
    use crate::schema::validate::Validator;
    use serde_json::json;

    /// Runs `f` with a lowerer over `root` (the document `$ref`s resolve in).
    fn with_doc<R>(
        root: Value,
        opts: CompileOptions,
        f: impl FnOnce(&mut Lowerer<'_>, &Document) -> R,
    ) -> R {
        let doc = Document::new(root, Draft::Draft2020).expect("document");
        let mut low = Lowerer::new(&doc, &opts);
        f(&mut low, &doc)
    }

    /// Runs `f` with a lowerer over an empty document (default options).
    fn with<R>(f: impl FnOnce(&mut Lowerer<'_>, &Document) -> R) -> R {
        with_doc(json!({}), CompileOptions::default(), f)
    }

    /// Lowers `s` as if it stood at the document's root (so `$ref`s resolve there).
    fn try_lower(low: &mut Lowerer<'_>, s: &Value) -> Result<Schema, SchemaError> {
        let base = low.doc.root_base();
        low.lower(s, "", &base)
    }

    fn lower(low: &mut Lowerer<'_>, s: &Value) -> Schema {
        try_lower(low, s).expect("lowers")
    }

    /// Checks that `ir` admits exactly the instances the direct validator (independent of the
    /// algebra) finds valid against the raw schema `raw`, on each of `instances`.
    fn agrees(
        low: &mut Lowerer<'_>,
        doc: &Document,
        ir: &Schema,
        raw: &Value,
        instances: &[Value],
    ) {
        let base = doc.root_base();
        for v in instances {
            let want = Validator::new(doc, low.opts.assert_format)
                .strict_format(low.opts.strict_format)
                .valid(v, raw, &base)
                .unwrap_or_else(|| panic!("validator cannot decide {v} against {raw}"));
            let got = low.accepts(ir, v, "").expect("accepts");
            assert_eq!(got, want, "{v} against {raw}: IR {ir:?}");
        }
    }

    /// `a ∩ b`, lowered from raw schemas, checked against `{"allOf": [a, b]}` on `instances`.
    fn intersect_checked(a: Value, b: Value, instances: &[Value]) -> Schema {
        with(|low, doc| {
            let (la, lb) = (lower(low, &a), lower(low, &b));
            let s = low.intersect(&la, &lb, "").expect("intersects");
            agrees(low, doc, &s, &json!({"allOf": [a, b]}), instances);
            s
        })
    }

    /// `¬s`, checked against `{"not": s}` on `instances`; `None` if not complemented.
    fn negate_checked(s: Value, instances: &[Value]) -> Option<Schema> {
        with(|low, doc| {
            let ls = lower(low, &s);
            let n = low.negate(&ls, "").expect("negates")?;
            agrees(low, doc, &n, &json!({"not": s}), instances);
            Some(n)
        })
    }

    fn refused_keyword(e: SchemaError) -> String {
        match e {
            SchemaError::Unsupported { keyword, .. } => keyword,
            e => panic!("expected a refusal, got {e}"),
        }
    }

    fn incl(value: f64) -> Option<Bound> {
        Some(Bound {
            value,
            exclusive: false,
        })
    }

    fn excl(value: f64) -> Option<Bound> {
        Some(Bound {
            value,
            exclusive: true,
        })
    }

    #[test]
    fn intersecting_numbers_takes_the_tighter_bounds_and_a_common_multiple() {
        let s = intersect_checked(
            json!({"type": "number", "minimum": 0, "maximum": 30, "multipleOf": 4}),
            json!({"type": "integer", "exclusiveMinimum": 0, "maximum": 40, "multipleOf": 6}),
            &[
                json!(0),
                json!(12),
                json!(24),
                json!(36),
                json!(6),
                json!(8),
                json!(-12),
            ],
        );
        assert_eq!(
            s,
            Schema::Number(NumberSchema {
                integer: true,
                min: excl(0.0),
                max: incl(30.0),
                multiple_of: Some(12.0),
            })
        );
        // At an equal value the exclusive bound is the tighter one, on either side.
        assert_eq!(tighter_min(incl(5.0), excl(5.0)), excl(5.0));
        assert_eq!(tighter_max(excl(5.0), incl(5.0)), excl(5.0));
        assert_eq!(tighter_min(None, incl(1.0)), incl(1.0));
        // A decimal multiple of the other multiple is kept as it is.
        let s = intersect_checked(
            json!({"type": "number", "multipleOf": 0.5}),
            json!({"type": "number", "multipleOf": 0.25}),
            &[json!(1.5), json!(0.25), json!(2)],
        );
        assert!(
            matches!(&s, Schema::Number(n) if n.multiple_of == Some(0.5)),
            "{s:?}"
        );
    }

    #[test]
    fn incommensurable_multiples_are_refused_or_warned() {
        let (a, b) = (json!({"multipleOf": 0.3}), json!({"multipleOf": 0.7}));
        let e = with(|low, _| {
            let (la, lb) = (lower(low, &a), lower(low, &b));
            low.intersect(&la, &lb, "/allOf").unwrap_err()
        });
        assert_eq!(refused_keyword(e), "multipleOf");
        let lenient = CompileOptions {
            lenient: true,
            ..Default::default()
        };
        with_doc(json!({}), lenient, |low, _| {
            let (la, lb) = (lower(low, &a), lower(low, &b));
            low.intersect(&la, &lb, "/allOf").expect("lenient");
            assert_eq!(low.warnings.len(), 1, "{:?}", low.warnings);
        });
    }

    #[test]
    fn intersecting_strings_combines_lengths_and_patterns() {
        let s = intersect_checked(
            json!({"type": "string", "minLength": 2, "maxLength": 5}),
            json!({"type": "string", "minLength": 3, "pattern": "^a"}),
            &[
                json!("ab"),
                json!("abc"),
                json!("abcde"),
                json!("abcdef"),
                json!("bcd"),
                json!(1),
            ],
        );
        assert_eq!(
            s,
            Schema::String(StringSchema {
                min_len: 3,
                max_len: Some(5),
                pattern: Some("^a".into()),
                ..Default::default()
            })
        );
        let s = intersect_checked(
            json!({"type": "string", "maxLength": 2}),
            json!({"type": "string", "minLength": 3}),
            &[json!(""), json!("abc")],
        );
        assert!(matches!(s, Schema::Unsat(_)), "{s:?}");
        // The same pattern twice is one pattern; two different ones cannot be combined.
        let same = json!({"type": "string", "pattern": "^a"});
        let s = intersect_checked(same.clone(), same, &[json!("a"), json!("b")]);
        assert!(matches!(&s, Schema::String(st) if st.pattern.as_deref() == Some("^a")));
        let e = with(|low, _| {
            let a = lower(low, &json!({"type": "string", "pattern": "^a"}));
            let b = lower(low, &json!({"type": "string", "pattern": "b$"}));
            low.intersect(&a, &b, "").unwrap_err()
        });
        assert_eq!(refused_keyword(e), "pattern");
    }

    #[test]
    fn intersecting_arrays_merges_items_position_by_position() {
        let s = intersect_checked(
            json!({"type": "array", "prefixItems": [{"type": "string"}],
                   "items": {"type": "integer"}, "minItems": 1}),
            json!({"type": "array", "items": {"minimum": 0}, "maxItems": 3,
                   "uniqueItems": true}),
            &[
                json!([]),
                json!(["a"]),
                json!(["a", 1]),
                json!(["a", -1]),
                json!(["a", 1.5]),
                json!([1]),
                json!(["a", 1, 2]),
                json!(["a", 1, 2, 3]),
                json!(["a", 1, 1]),
            ],
        );
        let Schema::Array(a) = s else { panic!("{s:?}") };
        assert_eq!(
            (a.prefix.len(), a.min, a.max, a.unique),
            (1, 1, Some(3), true)
        );
        let s = intersect_checked(
            json!({"type": "array", "maxItems": 1}),
            json!({"type": "array", "minItems": 2}),
            &[json!([]), json!([1, 2])],
        );
        assert!(matches!(s, Schema::Unsat(_)), "{s:?}");
        let e = with(|low, _| {
            let a = lower(low, &json!({"type": "array", "contains": {"const": 1}}));
            let b = lower(low, &json!({"type": "array", "contains": {"const": 2}}));
            low.intersect(&a, &b, "").unwrap_err()
        });
        assert_eq!(refused_keyword(e), "contains");
    }

    #[test]
    fn intersecting_objects_unites_required_and_intersects_properties() {
        let s = intersect_checked(
            json!({"type": "object",
                   "properties": {"a": {"type": "integer"}, "b": {"type": "string"}},
                   "required": ["a"]}),
            json!({"type": "object",
                   "properties": {"a": {"minimum": 0}, "c": {"type": "boolean"}},
                   "required": ["c", "a"], "additionalProperties": false}),
            &[
                json!({"a": 1, "c": true}),
                json!({"a": -1, "c": true}),
                json!({"a": 1.5, "c": true}),
                json!({"a": 1}),
                json!({"a": 1, "c": true, "b": "s"}),
                json!({"a": 1, "c": true, "d": 1}),
                json!([]),
            ],
        );
        let Schema::Object(o) = s else {
            panic!("{s:?}")
        };
        let names: Vec<&str> = o.properties.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(names, ["a", "b", "c"], "left operand's order first");
        assert!(
            matches!(o.property("b"), Some(Schema::Unsat(_))),
            "b must be absent"
        );
        assert_eq!(o.property("c"), Some(&Schema::Boolean));
        assert_eq!(o.required, ["a", "c"]);
        assert!(matches!(o.additional, Schema::Unsat(_)));
        // Pattern properties against a closed object would need regex intersection.
        let e = with(|low, _| {
            let a = lower(
                low,
                &json!({"type": "object", "patternProperties": {"^x": {"type": "string"}}}),
            );
            let b = lower(
                low,
                &json!({"type": "object", "additionalProperties": false}),
            );
            low.intersect(&a, &b, "").unwrap_err()
        });
        assert_eq!(refused_keyword(e), "patternProperties");
    }

    #[test]
    fn intersecting_type_sets_and_listed_values() {
        let s = intersect_checked(
            json!({"type": ["string", "null"]}),
            json!({"type": ["null", "integer"]}),
            &[json!(null), json!("a"), json!(1)],
        );
        assert_eq!(s, Schema::Null);
        let s = intersect_checked(
            json!({"type": "string"}),
            json!({"type": "boolean"}),
            &[json!("a"), json!(true)],
        );
        assert!(matches!(s, Schema::Unsat(_)), "{s:?}");
        // `enum` values are filtered by membership (`accepts`) in the other operand.
        let s = intersect_checked(
            json!({"enum": [1, 2, "x", 3.5, {"a": 1}, {"a": "s"}, [1, 2], null]}),
            json!({"type": ["integer", "object"], "minimum": 2,
                   "properties": {"a": {"type": "integer"}}}),
            &[json!(1), json!(2), json!({"a": 1}), json!({"a": "s"})],
        );
        // (`Const ∩ AnyOf` distributes over the union, one filtered set per type.)
        assert_eq!(
            s,
            Schema::AnyOf(vec![
                Schema::Const(vec![json!(2)]),
                Schema::Const(vec![json!({"a": 1})])
            ])
        );
        let s = intersect_checked(json!({"enum": ["a", "b"]}), json!({"minLength": 2}), &[]);
        assert!(matches!(s, Schema::Unsat(_)), "{s:?}");
        with(|low, _| {
            let s = lower(
                low,
                &json!({"anyOf": [{"const": 1}, {"type": "string"}, {"enum": [[]]}]}),
            );
            assert_eq!(
                low.type_set(&s).unwrap(),
                types::NUMBER | types::STRING | types::ARRAY
            );
        });
    }

    #[test]
    fn intersection_looks_through_refs() {
        let root = json!({"$defs": {"pos": {"type": "integer", "minimum": 1}}});
        with_doc(root, CompileOptions::default(), |low, doc| {
            let a = lower(low, &json!({"$ref": "#/$defs/pos"}));
            assert!(matches!(a, Schema::Ref(_)));
            let b = lower(low, &json!({"type": "number", "maximum": 5}));
            let s = low.intersect(&a, &b, "").unwrap();
            assert_eq!(
                s,
                Schema::Number(NumberSchema {
                    integer: true,
                    min: incl(1.0),
                    max: incl(5.0),
                    multiple_of: None,
                })
            );
            let raw = json!({"allOf": [{"$ref": "#/$defs/pos"}, {"maximum": 5}]});
            agrees(
                low,
                doc,
                &s,
                &raw,
                &[json!(0), json!(1), json!(5), json!(6)],
            );
        });
        // A reference to the schema being lowered cannot be intersected structurally.
        let root = json!({"type": "object", "allOf": [{"$ref": "#"}]});
        let e = with_doc(root.clone(), CompileOptions::default(), |low, _| {
            try_lower(low, &root).unwrap_err()
        });
        assert_eq!(refused_keyword(e), "$ref");
    }

    #[test]
    fn negating_bounds_gives_the_flipped_bounds() {
        let n = negate_checked(
            json!({"type": "number", "minimum": 0, "exclusiveMaximum": 10}),
            &[
                json!(-1),
                json!(0),
                json!(5),
                json!(9.99),
                json!(10),
                json!(11),
                json!("a"),
                json!(null),
            ],
        )
        .unwrap();
        let Schema::AnyOf(alts) = &n else {
            panic!("{n:?}")
        };
        let numbers: Vec<&NumberSchema> = alts
            .iter()
            .filter_map(|s| match s {
                Schema::Number(x) => Some(x),
                _ => None,
            })
            .collect();
        let below = NumberSchema {
            max: excl(0.0),
            ..Default::default()
        };
        let above = NumberSchema {
            min: incl(10.0),
            ..Default::default()
        };
        assert_eq!(numbers, [&below, &above]);
        negate_checked(
            json!({"type": "string", "minLength": 2, "maxLength": 3}),
            &[
                json!(""),
                json!("a"),
                json!("ab"),
                json!("abc"),
                json!("abcd"),
                json!(1),
            ],
        )
        .unwrap();
        negate_checked(
            json!({"type": "array", "minItems": 1, "maxItems": 2}),
            &[
                json!([]),
                json!([1]),
                json!([1, 2]),
                json!([1, 2, 3]),
                json!({}),
            ],
        )
        .unwrap();
        // What the IR cannot complement exactly is `None`, never an approximation.
        for s in [
            json!({"type": "integer"}),
            json!({"type": "number", "multipleOf": 2}),
            json!({"type": "string", "pattern": "^a"}),
            json!({"type": "array", "items": {"type": "string"}}),
            json!({"type": "object", "additionalProperties": false}),
            json!({"enum": [1, 2]}),
        ] {
            assert_eq!(negate_checked(s.clone(), &[]), None, "{s}");
        }
        with(|low, _| {
            assert!(matches!(
                low.negate(&Schema::Any, "").unwrap(),
                Some(Schema::Unsat(_))
            ));
            let u = Schema::Unsat("x".into());
            assert_eq!(low.negate(&u, "").unwrap(), Some(Schema::Any));
        });
    }

    #[test]
    fn negating_listed_values_excludes_exactly_them() {
        let n = negate_checked(
            json!({"enum": ["a", "b", true, null]}),
            &[
                json!("a"),
                json!("b"),
                json!("c"),
                json!(true),
                json!(false),
                json!(null),
                json!(1),
                json!([]),
            ],
        )
        .unwrap();
        let Schema::AnyOf(alts) = &n else {
            panic!("{n:?}")
        };
        assert!(alts.contains(&Schema::Const(vec![json!(false)])), "{n:?}");
        assert!(alts.contains(&Schema::String(StringSchema {
            exclude: vec!["a".into(), "b".into()],
            ..Default::default()
        })));
        assert!(!alts.contains(&Schema::Null) && !alts.contains(&Schema::Boolean));
        // Both booleans listed: no boolean is left.
        negate_checked(
            json!({"enum": [true, false]}),
            &[json!(true), json!(false), json!(0)],
        )
        .unwrap();
    }

    #[test]
    fn negating_objects_with_required_names_each_way_to_fail() {
        let n = negate_checked(
            json!({"type": "object", "required": ["a", "b"],
                   "properties": {"a": {"type": "string"}}, "maxProperties": 3}),
            &[
                json!({}),
                json!({"a": "x"}),
                json!({"a": "x", "b": 1}),
                json!({"a": 1, "b": 1}),
                json!({"a": "x", "b": 1, "c": 1, "d": 1}),
                json!(5),
            ],
        )
        .unwrap();
        let Schema::AnyOf(alts) = &n else {
            panic!("{n:?}")
        };
        let a_absent = Schema::Object(Box::new(ObjectSchema {
            properties: vec![("a".into(), Schema::Unsat("`not` required".into()))],
            ..Default::default()
        }));
        assert!(alts.contains(&a_absent), "{n:?}");
        let too_many = Schema::Object(Box::new(ObjectSchema {
            min: 4,
            ..Default::default()
        }));
        assert!(alts.contains(&too_many), "{n:?}");
        // ¬¬s admits what s admits.
        let s = json!({"type": "object", "required": ["a"], "minProperties": 2});
        with(|low, doc| {
            let ls = lower(low, &s);
            let nn = low.negate(&ls, "").unwrap().unwrap();
            let back = low.negate(&nn, "").unwrap().unwrap();
            let instances = [
                json!({"a": 1}),
                json!({"a": 1, "b": 2}),
                json!({"b": 1, "c": 2}),
                json!(1),
            ];
            agrees(low, doc, &back, &s, &instances);
        });
    }

    #[test]
    fn disjointness_is_proven_or_not_claimed() {
        let cases = [
            (json!({"type": "string"}), json!({"type": "integer"}), true),
            (json!({"const": "a"}), json!({"const": "b"}), true),
            (
                json!({"type": "object", "properties": {"kind": {"const": "a"}}, "required": ["kind"]}),
                json!({"type": "object", "properties": {"kind": {"const": "b"}}, "required": ["kind"]}),
                true,
            ),
            (
                json!({"type": "number", "maximum": 0}),
                json!({"type": "number", "exclusiveMinimum": 0}),
                true,
            ),
            (
                json!({"type": "array", "maxItems": 1}),
                json!({"type": "array", "minItems": 2}),
                true,
            ),
            (
                json!({"type": "array", "prefixItems": [{"type": "string"}], "minItems": 1}),
                json!({"type": "array", "prefixItems": [{"type": "integer"}], "minItems": 1}),
                true,
            ),
            (
                json!({"type": "string", "maxLength": 2}),
                json!({"type": "string", "minLength": 3}),
                true,
            ),
            // Overlapping, or not provable with what the algebra knows:
            (
                json!({"type": "number", "maximum": 0}),
                json!({"type": "number", "minimum": 0}),
                false,
            ),
            (
                json!({"type": "object", "required": ["a"]}),
                json!({"type": "object", "required": ["b"]}),
                false,
            ),
            (
                json!({"type": "array", "prefixItems": [{"type": "string"}]}),
                json!({"type": "array", "prefixItems": [{"type": "integer"}]}),
                false,
            ),
            (
                json!({"type": "string", "pattern": "^a"}),
                json!({"type": "string", "pattern": "^b"}),
                false,
            ),
        ];
        for (a, b, want) in cases {
            with(|low, _| {
                let (la, lb) = (lower(low, &a), lower(low, &b));
                assert_eq!(low.disjoint(&la, &lb, "").unwrap(), want, "{a} vs {b}");
                assert_eq!(low.disjoint(&lb, &la, "").unwrap(), want, "{b} vs {a}");
            });
        }
    }

    #[test]
    fn one_of_is_an_exact_union_or_refused() {
        let instances = [
            json!("a"),
            json!(""),
            json!(1),
            json!(-1),
            json!(0.5),
            json!({"kind": "a"}),
            json!({"kind": "b"}),
            json!({"kind": "c"}),
            json!(null),
        ];
        for s in [
            // Disjoint by type and by discriminator.
            json!({"oneOf": [{"type": "string"}, {"type": "integer"},
                             {"type": "object", "properties": {"kind": {"const": "a"}}, "required": ["kind"]},
                             {"type": "object", "properties": {"kind": {"const": "b"}}, "required": ["kind"]}]}),
            // Overlapping (0.5 and 1 are in both), made disjoint by negation.
            json!({"oneOf": [{"type": "number", "minimum": 0}, {"type": "number", "maximum": 1}]}),
        ] {
            with_doc(s.clone(), CompileOptions::default(), |low, doc| {
                let ls = try_lower(low, &s).unwrap();
                agrees(low, doc, &ls, &s, &instances);
            });
        }
        let s = json!({"oneOf": [{"type": "string", "pattern": "^a"}, {"type": "string", "pattern": "b$"}]});
        let e = with(|low, _| try_lower(low, &s).unwrap_err());
        assert_eq!(refused_keyword(e), "oneOf");
        let coerce = CompileOptions {
            coerce_one_of: true,
            ..Default::default()
        };
        with_doc(json!({}), coerce, |low, _| {
            let ls = try_lower(low, &s).unwrap();
            assert!(matches!(&ls, Schema::AnyOf(xs) if xs.len() == 2), "{ls:?}");
        });
    }

    #[test]
    fn accepts_matches_the_validator() {
        let s = json!({
            "type": ["object", "array", "string"],
            "properties": {"n": {"type": "integer", "multipleOf": 3}},
            "patternProperties": {"^x": {"type": "boolean"}},
            "additionalProperties": {"type": "null"},
            "required": ["n"],
            "propertyNames": {"maxLength": 3},
            "prefixItems": [{"const": "h"}],
            "contains": {"type": "number"},
            "uniqueItems": true,
            "minLength": 1,
            "maxLength": 2,
            "format": "email"
        });
        let instances = [
            json!({"n": 3}),
            json!({"n": 4}),
            json!({"n": 3, "xa": true}),
            json!({"n": 3, "xa": 1}),
            json!({"n": 3, "z": null}),
            json!({"n": 3, "z": 0}),
            json!({"n": 3, "long": null}),
            json!({"xa": true}),
            json!(["h", 1]),
            json!(["h", "i"]),
            json!(["g", 1]),
            json!(["h", 1, 1]),
            json!("é"),
            json!("éé"),
            json!("ééé"),
            json!(""),
            json!(1),
        ];
        let opts = CompileOptions {
            assert_format: false,
            ..Default::default()
        };
        with_doc(s.clone(), opts, |low, doc| {
            let ls = lower(low, &s);
            agrees(low, doc, &ls, &s, &instances);
        });
    }

    #[test]
    fn the_work_budget_turns_an_adversarial_nest_into_an_error() {
        // `allOf` of `anyOf`s: the intersection distributes, 10 → 100 → 1,000 → ... members.
        let any: Vec<Value> = (0..10)
            .map(|i| json!({"type": "integer", "minimum": i}))
            .collect();
        let nest = |depth: usize| json!({"allOf": vec![json!({"anyOf": any.clone()}); depth]});
        with(|low, _| {
            let s = try_lower(low, &nest(2)).expect("a small nest fits the budget");
            assert!(matches!(&s, Schema::AnyOf(xs) if xs.len() == 100), "{s:?}");
        });
        let e = with(|low, _| try_lower(low, &nest(8)).unwrap_err());
        assert!(
            matches!(e, SchemaError::LimitExceeded { limit, .. } if limit == MAX_WORK),
            "{e}"
        );
    }

    #[test]
    fn integer_helpers() {
        assert_eq!(gcd(12, 18), 6);
        assert_eq!(gcd(7, 0), 7);
        assert!(is_multiple(0.3, 0.1));
        assert!(!is_multiple(0.35, 0.1));
        assert!(!is_multiple(1.0, 0.0));
        assert_eq!(min_opt(Some(3), None), Some(3));
        assert_eq!(min_opt(Some(3), Some(2)), Some(2));
        assert_eq!(of_types(types::ALL), Schema::Any);
        assert_eq!(of_types(types::NULL), Schema::Null);
        assert_eq!(
            union(vec![Schema::Unsat("x".into()), Schema::Boolean]),
            Schema::Boolean
        );
        assert!(matches!(union(vec![Schema::Unsat("why".into())]), Schema::Unsat(r) if r == "why"));
    }
}
