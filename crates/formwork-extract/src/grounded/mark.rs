//! Schema marking ([`mark_grounded`]): every grounded schema becomes a `const` placeholder
//! the compiled grammar's lexemes name ([`placeholder`], [`placeholder_index`]), its own
//! keywords kept aside as a [`GroundedField`].

use serde_json::Value;

use formwork_core::schema::pointer;

use super::field::GroundedField;
use crate::ExtractError;

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
