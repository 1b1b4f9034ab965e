//! The normalized schema IR: what a JSON Schema means, with keywords folded into per-type
//! constraint records and combinators reduced to unions.
//!
//! Owns the data types and the free helpers over them (the schema of whole types, normalized
//! unions, bound tightening, the `multipleOf` test); lowering (`lower`) builds them from JSON
//! and computes intersections and negations, emission (`emit`) turns them into grammar rules. Invariant: every [`Schema::AnyOf`] is a union whose grammar (the alternation
//! of its members) accepts exactly the schema's instances, so `oneOf` only becomes an `AnyOf`
//! once its branches are proven disjoint (or made disjoint by negation).

use serde_json::Value;

/// A normalized schema.
#[derive(Clone, Debug, PartialEq)]
pub enum Schema {
    /// Every JSON value.
    Any,
    /// No JSON value; the string says why (for error messages).
    Unsat(String),
    /// `null`.
    Null,
    /// `true` or `false`.
    Boolean,
    /// Numbers (or integers) with bounds.
    Number(NumberSchema),
    /// Strings with constraints.
    String(StringSchema),
    /// Arrays.
    Array(Box<ArraySchema>),
    /// Objects.
    Object(Box<ObjectSchema>),
    /// A finite set of values (`enum`, `const`), without duplicates.
    Const(Vec<Value>),
    /// A union of schemas.
    AnyOf(Vec<Schema>),
    /// A reference to the schema at a JSON pointer, kept symbolic so recursion stays finite.
    Ref(RefTarget),
}

/// Where a [`Schema::Ref`] points.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RefTarget {
    /// JSON pointer into the document.
    pub pointer: String,
    /// The base URI in effect at the target.
    pub base: String,
}

/// A numeric bound.
#[derive(Clone, Debug, PartialEq)]
pub struct Bound {
    /// The bound's value.
    pub value: f64,
    /// Whether the bound itself is excluded.
    pub exclusive: bool,
}

/// Constraints on numbers.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct NumberSchema {
    /// Only integers (any number with a zero fractional part, written as an integer).
    pub integer: bool,
    /// Lower bound.
    pub min: Option<Bound>,
    /// Upper bound.
    pub max: Option<Bound>,
    /// `multipleOf`.
    pub multiple_of: Option<f64>,
}

/// Constraints on strings. Lengths are in code points.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct StringSchema {
    /// `minLength`.
    pub min_len: u64,
    /// `maxLength`.
    pub max_len: Option<u64>,
    /// `pattern` (ECMA-262 source, unanchored semantics).
    pub pattern: Option<String>,
    /// `format`.
    pub format: Option<String>,
    /// Decoded values that are excluded (from `not` over `enum`/`const`).
    pub exclude: Vec<String>,
}

impl StringSchema {
    /// Whether this is the unconstrained string.
    pub fn is_plain(&self) -> bool {
        *self == StringSchema::default()
    }
}

/// Constraints on arrays.
#[derive(Clone, Debug, PartialEq)]
pub struct ArraySchema {
    /// Schemas of the leading items (`prefixItems`, or array-form `items`).
    pub prefix: Vec<Schema>,
    /// Schema of the items after the prefix.
    pub items: Schema,
    /// `minItems`.
    pub min: u64,
    /// `maxItems`.
    pub max: Option<u64>,
    /// `contains` (at least one item matches).
    pub contains: Option<Schema>,
    /// `uniqueItems: true`.
    pub unique: bool,
}

impl Default for ArraySchema {
    fn default() -> Self {
        ArraySchema {
            prefix: Vec::new(),
            items: Schema::Any,
            min: 0,
            max: None,
            contains: None,
            unique: false,
        }
    }
}

/// Constraints on objects.
#[derive(Clone, Debug, PartialEq)]
pub struct ObjectSchema {
    /// `properties`, in schema order. A property whose schema is [`Schema::Unsat`] must be absent.
    pub properties: Vec<(String, Schema)>,
    /// `patternProperties` (ECMA-262 source, schema).
    pub pattern_properties: Vec<(String, Schema)>,
    /// `additionalProperties`: keys matching neither a property nor a pattern.
    pub additional: Schema,
    /// `required`, without duplicates.
    pub required: Vec<String>,
    /// `minProperties`.
    pub min: u64,
    /// `maxProperties`.
    pub max: Option<u64>,
    /// `propertyNames`.
    pub property_names: Option<Schema>,
}

impl Default for ObjectSchema {
    fn default() -> Self {
        ObjectSchema {
            properties: Vec::new(),
            pattern_properties: Vec::new(),
            additional: Schema::Any,
            required: Vec::new(),
            min: 0,
            max: None,
            property_names: None,
        }
    }
}

impl ObjectSchema {
    /// The schema of a property by name, if listed in `properties`.
    pub fn property(&self, name: &str) -> Option<&Schema> {
        self.properties
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, s)| s)
    }
}

/// The JSON types, as a bit set.
pub mod types {
    /// `null`.
    pub const NULL: u8 = 1;
    /// `true`/`false`.
    pub const BOOLEAN: u8 = 2;
    /// Numbers.
    pub const NUMBER: u8 = 4;
    /// Strings.
    pub const STRING: u8 = 8;
    /// Arrays.
    pub const ARRAY: u8 = 16;
    /// Objects.
    pub const OBJECT: u8 = 32;
    /// All of them.
    pub const ALL: u8 = 63;
    /// Each type on its own, in the order unions list them.
    pub const EACH: [u8; 6] = [NULL, BOOLEAN, NUMBER, STRING, ARRAY, OBJECT];
}

/// The type bit of a JSON value.
pub fn type_of(v: &Value) -> u8 {
    match v {
        Value::Null => types::NULL,
        Value::Bool(_) => types::BOOLEAN,
        Value::Number(_) => types::NUMBER,
        Value::String(_) => types::STRING,
        Value::Array(_) => types::ARRAY,
        Value::Object(_) => types::OBJECT,
    }
}

/// JSON Schema equality of values: numbers compare by value (`1 == 1.0`), objects ignore key
/// order.
pub fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            if let (Some(x), Some(y)) = (x.as_i64(), y.as_i64()) {
                x == y
            } else if let (Some(x), Some(y)) = (x.as_u64(), y.as_u64()) {
                x == y
            } else {
                x.as_f64() == y.as_f64()
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| json_eq(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_eq(v, w)))
        }
        _ => a == b,
    }
}

/// Removes values equal (under [`json_eq`]) to an earlier one. Values are bucketed by
/// `json_hash` (equal values hash alike) and compared only within a bucket, so an `enum` of
/// n values costs O(n), not O(n²) (issue 20: 100,000 values took 55 s).
pub fn dedup_values(values: Vec<Value>) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::with_capacity(values.len());
    let mut buckets: std::collections::HashMap<u64, Vec<usize>> = Default::default();
    for v in values {
        let kept = buckets.entry(json_hash(&v)).or_default();
        if !kept.iter().any(|&i| json_eq(&out[i], &v)) {
            kept.push(out.len());
            out.push(v);
        }
    }
    out
}

/// A hash under which values equal by [`json_eq`] are equal: numbers hash by their `f64`
/// value (which every pair [`json_eq`] calls equal shares), objects by an order-independent
/// sum over their members.
fn json_hash(v: &Value) -> u64 {
    use std::hash::{Hash, Hasher};
    fn feed(v: &Value, h: &mut std::hash::DefaultHasher) {
        match v {
            Value::Null => 0u8.hash(h),
            Value::Bool(b) => (1u8, b).hash(h),
            Value::Number(n) => {
                let f = n.as_f64().unwrap_or(0.0);
                // -0.0 == 0.0 but their bits differ.
                (2u8, if f == 0.0 { 0 } else { f.to_bits() }).hash(h)
            }
            Value::String(s) => (3u8, s).hash(h),
            Value::Array(a) => {
                (4u8, a.len()).hash(h);
                a.iter().for_each(|x| feed(x, h));
            }
            Value::Object(o) => {
                let sum = o.iter().fold(0u64, |acc, (k, x)| {
                    let mut m = std::hash::DefaultHasher::new();
                    k.hash(&mut m);
                    feed(x, &mut m);
                    acc.wrapping_add(m.finish())
                });
                (5u8, o.len(), sum).hash(h)
            }
        }
    }
    let mut h = std::hash::DefaultHasher::new();
    feed(v, &mut h);
    h.finish()
}

/// Keywords no stage of the compiler evaluates: the dynamic references (`$dynamicRef`,
/// `$recursiveRef`) and `unevaluated*`, whose meaning depends on which subschemas evaluated a
/// value, which the IR does not record. Lowering refuses them by name; the direct validator
/// answers "cannot decide".
pub(crate) const UNSUPPORTED_KEYWORDS: [&str; 4] = [
    "$dynamicRef",
    "$recursiveRef",
    "unevaluatedProperties",
    "unevaluatedItems",
];

// The free helpers over the IR, shared by lowering, the algebra and the validator: the
// schemas of whole types, normalized unions, bound tightening and the `multipleOf` test.

/// The schema of all values of one type (a single bit of [`types`]), unconstrained.
pub(crate) fn of_type(t: u8) -> Schema {
    match t {
        types::NULL => Schema::Null,
        types::BOOLEAN => Schema::Boolean,
        types::NUMBER => Schema::Number(NumberSchema::default()),
        types::STRING => Schema::String(StringSchema::default()),
        types::ARRAY => Schema::Array(Box::default()),
        types::OBJECT => Schema::Object(Box::default()),
        _ => of_types(t),
    }
}

/// The schema of all values of the given types, unconstrained.
pub(crate) fn of_types(set: u8) -> Schema {
    if set == types::ALL {
        return Schema::Any;
    }
    let alts = types::EACH.into_iter().filter(|t| set & t != 0);
    union(alts.map(of_type).collect())
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

/// The tighter of two bounds on the same side: `a` when `inside(a, b)` (its value lies inside
/// `b`'s range) or, at an equal value, when `a` excludes it.
fn tighter(a: Option<Bound>, b: Option<Bound>, inside: fn(f64, f64) -> bool) -> Option<Bound> {
    match (a, b) {
        (None, x) | (x, None) => x,
        (Some(a), Some(b)) => {
            if inside(a.value, b.value) || (a.value == b.value && a.exclusive) {
                Some(a)
            } else {
                Some(b)
            }
        }
    }
}

/// The tighter of two lower bounds.
pub(crate) fn tighter_min(a: Option<Bound>, b: Option<Bound>) -> Option<Bound> {
    tighter(a, b, |a, b| a > b)
}

/// The tighter of two upper bounds.
pub(crate) fn tighter_max(a: Option<Bound>, b: Option<Bound>) -> Option<Bound> {
    tighter(a, b, |a, b| a < b)
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_equality_is_by_value() {
        assert!(json_eq(&json!(1), &json!(1.0)));
        assert!(!json_eq(&json!(1), &json!("1")));
        assert!(json_eq(
            &json!({"a": 1, "b": [2]}),
            &json!({"b": [2.0], "a": 1})
        ));
        assert_eq!(dedup_values(vec![json!(1), json!(1.0), json!(2)]).len(), 2);
    }

    /// Issue 20: dedup by hash buckets keeps exactly what comparing with every earlier value
    /// kept, including values equal only by value (1 and 1.0, -0.0 and 0, reordered objects).
    #[test]
    fn dedup_keeps_the_first_of_each_equal_value() {
        let vals = vec![
            json!(1),
            json!({"a": 1, "b": [0.0]}),
            json!(1.0),
            json!(-0.0),
            json!(0),
            json!({"b": [-0.0], "a": 1.0}),
            json!("1"),
            json!([1, "x"]),
            json!([1.0, "x"]),
            json!(null),
            json!(u64::MAX),
            json!(i64::MIN),
        ];
        let slow: Vec<Value> = vals.iter().fold(Vec::new(), |mut out, v| {
            if !out.iter().any(|w| json_eq(w, v)) {
                out.push(v.clone());
            }
            out
        });
        assert_eq!(dedup_values(vals), slow);
        assert_eq!(slow.len(), 8);
        let many: Vec<Value> = (0..100_000)
            .map(|i| json!(format!("v{}", i % 50_000)))
            .collect();
        assert_eq!(dedup_values(many).len(), 50_000);
    }
}
