//! The post-checks after generation: whether a value is a verbatim substring of the document
//! ([`is_grounded`]) and where the grounded values of an instance are ([`grounded_values`]).

use serde_json::Value;

use formwork_core::schema::pointer;

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
