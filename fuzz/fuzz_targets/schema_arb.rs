//! Fuzz target: structure-aware JSON Schemas (an `arbitrary` generator of the keywords formwork
//! supports and a few it refuses, nested through combinators, `$defs`/`$ref`, arrays and
//! objects) through the compiler end to end: schema → grammar → matcher → up to 16 masks, each
//! step's token taken from the mask. Must end in a result or a clear error, never a panic, a
//! hang or unbounded memory. Complements the `schema` target, whose raw bytes mostly fail to
//! parse as JSON or build schemas the compiler refuses at once.
#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use serde_json::{json, Map, Value};

#[path = "../common.rs"]
mod common;

#[derive(Arbitrary, Debug)]
enum Name {
    A,
    B,
    Id,
    Name,
    Other(String),
}

impl Name {
    fn text(&self) -> String {
        match self {
            Name::A => "a".into(),
            Name::B => "b".into(),
            Name::Id => "id".into(),
            Name::Name => "name".into(),
            Name::Other(s) => s.chars().take(12).collect(),
        }
    }
}

#[derive(Arbitrary, Debug)]
enum Pattern {
    Digits,
    Anchored,
    Alternation,
    Classes,
    Bounded,
    Unicode,
    Raw(String),
}

impl Pattern {
    fn text(&self) -> String {
        match self {
            Pattern::Digits => "^[0-9]+$".into(),
            Pattern::Anchored => "^ab*c?$".into(),
            Pattern::Alternation => "(foo|bar)+".into(),
            Pattern::Classes => "^\\w+@\\d{2,4}\\s?$".into(),
            Pattern::Bounded => "^(a{1,30}){1,30}$".into(),
            Pattern::Unicode => "^\\p{L}+$".into(),
            Pattern::Raw(s) => s.chars().take(40).collect(),
        }
    }
}

#[derive(Arbitrary, Debug)]
enum Lit {
    Null,
    Bool(bool),
    Int(i64),
    Float(f32),
    Str(String),
    Arr(Vec<Lit>),
    Obj(Vec<(Name, Lit)>),
}

impl Lit {
    fn value(&self) -> Value {
        match self {
            Lit::Null => Value::Null,
            Lit::Bool(b) => json!(b),
            Lit::Int(i) => json!(i),
            Lit::Float(f) if f.is_finite() => json!(f),
            Lit::Float(_) => json!(0.5),
            Lit::Str(s) => json!(s),
            Lit::Arr(v) => Value::Array(v.iter().map(Lit::value).collect()),
            Lit::Obj(v) => Value::Object(v.iter().map(|(k, l)| (k.text(), l.value())).collect()),
        }
    }
}

const FORMATS: [&str; 12] = [
    "date",
    "date-time",
    "time",
    "duration",
    "email",
    "uuid",
    "ipv4",
    "ipv6",
    "uri",
    "hostname",
    "regex",
    "no-such-format",
];

#[derive(Arbitrary, Debug)]
enum S {
    Bool(bool),
    Any,
    Null,
    Boolean,
    Str {
        min: Option<u16>,
        max: Option<u16>,
        pattern: Option<Pattern>,
        format: Option<u8>,
    },
    Int {
        min: Option<i32>,
        max: Option<i32>,
        exclusive: bool,
        multiple: Option<u8>,
    },
    Num {
        min: Option<i16>,
        max: Option<i16>,
        multiple: Option<u8>,
    },
    Arr {
        items: Option<Box<S>>,
        prefix: Vec<S>,
        min: Option<u16>,
        max: Option<u16>,
        unique: bool,
        contains: Option<Box<S>>,
    },
    Obj {
        props: Vec<(Name, S)>,
        required: Vec<Name>,
        additional: Option<Box<S>>,
        pattern_props: Vec<(Pattern, S)>,
        min: Option<u8>,
        max: Option<u8>,
    },
    Types(Vec<u8>),
    Enum(Vec<Lit>),
    Const(Lit),
    AnyOf(Vec<S>),
    OneOf(Vec<S>),
    AllOf(Vec<S>),
    Not(Box<S>),
    Ref(u8),
    If(Box<S>, Box<S>, Option<Box<S>>),
    Unknown(Name, Lit),
}

fn list(v: &[S], defs: usize) -> Value {
    Value::Array(v.iter().map(|s| s.value(defs)).collect())
}

impl S {
    fn value(&self, defs: usize) -> Value {
        let mut m = Map::new();
        let mut put = |k: &str, v: Value| {
            m.insert(k.to_string(), v);
        };
        match self {
            S::Bool(b) => return json!(b),
            S::Any => {}
            S::Null => put("type", json!("null")),
            S::Boolean => put("type", json!("boolean")),
            S::Str {
                min,
                max,
                pattern,
                format,
            } => {
                put("type", json!("string"));
                min.map(|n| put("minLength", json!(n)));
                max.map(|n| put("maxLength", json!(n)));
                if let Some(p) = pattern {
                    put("pattern", json!(p.text()));
                }
                if let Some(f) = format {
                    put("format", json!(FORMATS[*f as usize % FORMATS.len()]));
                }
            }
            S::Int {
                min,
                max,
                exclusive,
                multiple,
            } => {
                put("type", json!("integer"));
                let (lo, hi) = if *exclusive {
                    ("exclusiveMinimum", "exclusiveMaximum")
                } else {
                    ("minimum", "maximum")
                };
                min.map(|n| put(lo, json!(n)));
                max.map(|n| put(hi, json!(n)));
                multiple.map(|n| put("multipleOf", json!(n.max(1))));
            }
            S::Num { min, max, multiple } => {
                put("type", json!("number"));
                min.map(|n| put("minimum", json!(f64::from(n) / 4.0)));
                max.map(|n| put("maximum", json!(n)));
                multiple.map(|n| put("multipleOf", json!(f64::from(n.max(1)) / 8.0)));
            }
            S::Arr {
                items,
                prefix,
                min,
                max,
                unique,
                contains,
            } => {
                put("type", json!("array"));
                if let Some(i) = items {
                    put("items", i.value(defs));
                }
                if !prefix.is_empty() {
                    put("prefixItems", list(prefix, defs));
                }
                min.map(|n| put("minItems", json!(n)));
                max.map(|n| put("maxItems", json!(n)));
                if *unique {
                    put("uniqueItems", json!(true));
                }
                if let Some(c) = contains {
                    put("contains", c.value(defs));
                }
            }
            S::Obj {
                props,
                required,
                additional,
                pattern_props,
                min,
                max,
            } => {
                put("type", json!("object"));
                let p: Map<String, Value> = props
                    .iter()
                    .map(|(k, s)| (k.text(), s.value(defs)))
                    .collect();
                put("properties", Value::Object(p));
                put(
                    "required",
                    Value::Array(required.iter().map(|n| json!(n.text())).collect()),
                );
                if let Some(a) = additional {
                    put("additionalProperties", a.value(defs));
                }
                if !pattern_props.is_empty() {
                    let p: Map<String, Value> = pattern_props
                        .iter()
                        .map(|(k, s)| (k.text(), s.value(defs)))
                        .collect();
                    put("patternProperties", Value::Object(p));
                }
                min.map(|n| put("minProperties", json!(n)));
                max.map(|n| put("maxProperties", json!(n)));
            }
            S::Types(ts) => {
                const T: [&str; 7] = [
                    "null", "boolean", "integer", "number", "string", "array", "object",
                ];
                put(
                    "type",
                    Value::Array(ts.iter().map(|t| json!(T[*t as usize % 7])).collect()),
                );
            }
            S::Enum(v) => put("enum", Value::Array(v.iter().map(Lit::value).collect())),
            S::Const(l) => put("const", l.value()),
            S::AnyOf(v) => put("anyOf", list(v, defs)),
            S::OneOf(v) => put("oneOf", list(v, defs)),
            S::AllOf(v) => put("allOf", list(v, defs)),
            S::Not(s) => put("not", s.value(defs)),
            S::Ref(i) => {
                if defs == 0 {
                    put("$ref", json!("#"));
                } else {
                    put("$ref", json!(format!("#/$defs/d{}", *i as usize % defs)));
                }
            }
            S::If(c, t, e) => {
                put("if", c.value(defs));
                put("then", t.value(defs));
                if let Some(e) = e {
                    put("else", e.value(defs));
                }
            }
            S::Unknown(k, v) => put(&k.text(), v.value()),
        }
        Value::Object(m)
    }
}

#[derive(Arbitrary, Debug)]
struct Root {
    defs: Vec<S>,
    root: S,
    picks: Vec<u16>,
}

fuzz_target!(|data: &[u8]| {
    let Ok(r) = Root::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    let n = r.defs.len().min(8);
    let mut schema = r.root.value(n);
    if n > 0 {
        let defs: Map<String, Value> = r.defs[..n]
            .iter()
            .enumerate()
            .map(|(i, s)| (format!("d{i}"), s.value(n)))
            .collect();
        if let Value::Object(m) = &mut schema {
            m.insert("$defs".into(), Value::Object(defs));
        } else {
            schema = json!({"$defs": defs, "allOf": [schema]});
        }
    }
    let mut i = 0;
    common::compile_and_walk(&schema, 16, &mut |len| {
        i += 1;
        r.picks.get(i).map_or(i, |&p| p as usize) % len
    });
});
