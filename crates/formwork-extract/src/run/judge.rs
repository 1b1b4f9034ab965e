//! The output checker: [`Prepared::judge`] reads an output text as the constraint says (JSON,
//! text, a tool call or a refusal), applies the [`GroundedSpans`] rule, validates the value
//! against the whole schema and checks that grounded values quote the document, giving a
//! [`Judged`] (status, value, errors).
//! Not to be confused with [`eval::judge`](crate::eval::judge), which scores an output
//! against a case's expected answer.
//!
//! Does not own turning a [`Judged`] into a record ([`record`](super::record)) or logging bad
//! samples.
//!
//! May use (within `run`): `config`, `prepare`.

use serde_json::Value;

use super::config::GroundedSpans;
use super::prepare::{Kind, Prepared};
use crate::batch::RecordStatus;
use crate::grounded::{grounded_values, is_grounded};
use crate::prompt::parse_output;
use crate::tools;
use crate::validate::SchemaValidator;
use formwork_core::schema::pointer;

impl Prepared {
    /// Reads and checks an output text: the value to report and the errors (empty when valid).
    /// A refusal object (with the refusal branch on) is reported as `Refusal`.
    pub(super) fn judge(&self, text: &str, document: &str, constrained: bool) -> Judged {
        let as_json = |t: &str| {
            if constrained {
                serde_json::from_str::<Value>(t).map_err(|e| format!("malformed JSON: {e}"))
            } else {
                parse_output(t).map_err(|e| e.to_string())
            }
        };
        if let Kind::Text = self.kind {
            return Judged::ok(Value::String(text.to_string()), None);
        }
        if let Kind::Tools { auto: true, .. } = self.kind {
            let starts_call = text.trim_start().starts_with('{');
            if !starts_call || (!constrained && parse_output(text).is_err()) {
                return Judged::ok(Value::String(text.to_string()), Some("text"));
            }
        }
        let value = match as_json(text) {
            Ok(v) => v,
            Err(e) => return Judged::invalid(None, vec![e]),
        };
        if self.allow_refusal && is_refusal(&value) {
            return Judged {
                status: RecordStatus::Refusal,
                value: Some(value),
                errors: vec![],
                kind: None,
            };
        }
        match &self.kind {
            Kind::Schema {
                validator,
                grounded,
            } => {
                let value =
                    drop_shared_spans(value, grounded, validator, document, self.grounded_spans);
                let mut errors = validator.errors(&value);
                for (at, s) in grounded_values(&value, grounded) {
                    if !is_grounded(document, s) {
                        errors.push(format!("{at}: not a verbatim substring of the document"));
                    }
                }
                Judged::checked(value, errors, None)
            }
            Kind::Json => Judged::ok(value, None),
            Kind::Tools { allowed, .. } => {
                let errors = tools::validate_call(&value, &allowed.iter().collect::<Vec<_>>());
                Judged::checked(value, errors, Some("tool_call"))
            }
            Kind::Text => unreachable!("handled above"),
        }
    }
}

/// Removes the grounded values that break `rule` (see [`GroundedSpans`]), unless the removal
/// makes the value less valid than it was (a required field stays).
fn drop_shared_spans(
    value: Value,
    grounded: &[String],
    validator: &SchemaValidator,
    document: &str,
    rule: GroundedSpans,
) -> Value {
    if rule == GroundedSpans::Any {
        return value;
    }
    let mut found = grounded_values(&value, grounded);
    // Output order: instance pointers sort as the members were written, since a schema's
    // properties are emitted in schema order and array items in index order.
    found.sort_by_key(|(at, _)| value_order(&value, at));
    let mut dropped: Vec<(Vec<usize>, String)> = Vec::new();
    match rule {
        GroundedSpans::Any => {}
        GroundedSpans::Distinct => {
            let mut seen = std::collections::HashSet::new();
            for (at, s) in found {
                if !seen.insert(s) {
                    dropped.push((value_order(&value, &at), at));
                }
            }
        }
        GroundedSpans::Disjoint => {
            // Shortest first (stable, so ties keep output order): a long value that swallows
            // a short one ("at Caribbean Cinemas" over "Caribbean Cinemas") is the one to go.
            found.sort_by_key(|(_, s)| s.chars().count());
            let mut taken: Vec<(usize, usize)> = Vec::new();
            for (at, s) in found {
                let free = document
                    .match_indices(s)
                    .map(|(i, _)| (i, i + s.len()))
                    .find(|&(a, b)| taken.iter().all(|&(c, d)| b <= c || d <= a));
                match free {
                    Some(span) => taken.push(span),
                    // A value that is not in the document is the validator's to report.
                    None if !is_grounded(document, s) => {}
                    None => dropped.push((value_order(&value, &at), at)),
                }
            }
        }
    }
    let mut value = value;
    let errors = validator.errors(&value).len();
    // Last first, so removing an array item leaves the earlier pointers intact.
    dropped.sort();
    for (_, at) in dropped.iter().rev() {
        let mut candidate = value.clone();
        if remove_at(&mut candidate, at) && validator.errors(&candidate).len() <= errors {
            value = candidate;
        }
    }
    value
}

/// The position of the member at `pointer` in the serialized output: the chain of member
/// and item indices along the way.
fn value_order(value: &Value, pointer: &str) -> Vec<usize> {
    let mut out = Vec::new();
    let mut v = value;
    for step in pointer::tokens(pointer) {
        let next = match v {
            Value::Object(o) => o
                .iter()
                .enumerate()
                .find(|(_, (k, _))| **k == step)
                .map(|(i, (_, c))| (i, c)),
            Value::Array(a) => step
                .parse::<usize>()
                .ok()
                .and_then(|i| Some((i, a.get(i)?))),
            _ => None,
        };
        let Some((i, child)) = next else { break };
        out.push(i);
        v = child;
    }
    out
}

/// Removes the member or item at `pointer`; `false` when there is none.
fn remove_at(value: &mut Value, pointer: &str) -> bool {
    let Some((parent, last)) = pointer.rsplit_once('/') else {
        return false;
    };
    let last = pointer::unescape(last);
    match value.pointer_mut(parent) {
        Some(Value::Object(o)) => o.shift_remove(&last).is_some(),
        Some(Value::Array(a)) => match last.parse::<usize>() {
            Ok(i) if i < a.len() => {
                a.remove(i);
                true
            }
            _ => false,
        },
        _ => false,
    }
}

/// `{"refusal": "<string>"}` and nothing else.
fn is_refusal(v: &Value) -> bool {
    crate::compose::refusal_reason(v).is_some()
}

/// An output as read and checked: its status, the value to report and the errors (empty when
/// valid), and its kind (`text`, `tool_call`) where the constraint allows several.
pub(super) struct Judged {
    pub(super) status: RecordStatus,
    pub(super) value: Option<Value>,
    pub(super) errors: Vec<String>,
    pub(super) kind: Option<&'static str>,
}

impl Judged {
    fn ok(value: Value, kind: Option<&'static str>) -> Self {
        Judged {
            status: RecordStatus::Ok,
            value: Some(value),
            errors: vec![],
            kind,
        }
    }

    fn invalid(value: Option<Value>, errors: Vec<String>) -> Self {
        Judged {
            status: RecordStatus::Invalid,
            value,
            errors,
            kind: None,
        }
    }

    fn checked(value: Value, errors: Vec<String>, kind: Option<&'static str>) -> Self {
        if errors.is_empty() {
            Judged::ok(value, kind)
        } else {
            Judged {
                kind,
                ..Judged::invalid(Some(value), errors)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn repeated_grounded_values_are_dropped_where_the_schema_allows() {
        let schema = json!({
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "country": {"type": "string"},
                "state": {"type": "string"},
                "tags": {"type": "array", "items": {"type": "string"}}
            },
            "required": ["state"]
        });
        let v = SchemaValidator::new(&schema).unwrap();
        let grounded: Vec<String> = ["/properties/city", "/properties/country"]
            .into_iter()
            .chain(["/properties/state", "/properties/tags/items"])
            .map(String::from)
            .collect();
        let doc = "KY a b";
        let distinct =
            |out: Value| drop_shared_spans(out, &grounded, &v, doc, GroundedSpans::Distinct);
        let out = distinct(
            json!({"city": "KY", "country": "KY", "state": "KY", "tags": ["a", "KY", "a", "b"]}),
        );
        // `state` is required, so it stays although it repeats `city`; the later repeats go.
        assert_eq!(
            out,
            json!({"city": "KY", "state": "KY", "tags": ["a", "b"]})
        );
        let plain = json!({"city": "KY", "country": "US", "state": "AL"});
        assert_eq!(distinct(plain.clone()), plain);
        let any = drop_shared_spans(out.clone(), &grounded, &v, doc, GroundedSpans::Any);
        assert_eq!(any, out);
    }

    #[test]
    fn overlapping_grounded_values_keep_the_shorter_where_the_schema_allows() {
        let schema = json!({
            "type": "object",
            "properties": {
                "location": {"type": "string"},
                "relation": {"type": "string"},
                "time": {"type": "string"},
                "when": {"type": "string"}
            },
            "required": ["time"]
        });
        let v = SchemaValidator::new(&schema).unwrap();
        let grounded: Vec<String> = ["location", "relation", "time", "when"]
            .iter()
            .map(|k| format!("/properties/{k}"))
            .collect();
        let disjoint = |doc: &str, out: Value| {
            drop_shared_spans(out, &grounded, &v, doc, GroundedSpans::Disjoint)
        };
        let doc = "movie times at Caribbean Cinemas tonight";
        // The longer value swallows the shorter one, whatever the output order.
        assert_eq!(
            disjoint(
                doc,
                json!({"location": "Caribbean Cinemas", "relation": "at Caribbean Cinemas"})
            ),
            json!({"location": "Caribbean Cinemas"})
        );
        assert_eq!(
            disjoint(
                doc,
                json!({"location": "at Caribbean Cinemas", "relation": "Caribbean"})
            ),
            json!({"relation": "Caribbean"})
        );
        // Overlapping without containment, and a plain repeat: both go; required `time` stays.
        assert_eq!(
            disjoint(
                doc,
                json!({"location": "at Caribbean", "relation": "Caribbean Cinemas",
                       "time": "tonight", "when": "tonight"})
            ),
            json!({"location": "at Caribbean", "time": "tonight"})
        );
        assert_eq!(
            disjoint(doc, json!({"location": "times", "time": "movie times"})),
            json!({"location": "times", "time": "movie times"})
        );
        // A value that occurs twice takes the occurrence left free.
        let doc = "from Paris to Paris, Texas";
        assert_eq!(
            disjoint(
                doc,
                json!({"location": "Paris", "relation": "Paris, Texas"})
            ),
            json!({"location": "Paris", "relation": "Paris, Texas"})
        );
        // Disjoint values stay; a value not in the document is left to the validator.
        assert_eq!(
            disjoint(
                doc,
                json!({"location": "Paris", "relation": "Lyon", "time": "Texas"})
            ),
            json!({"location": "Paris", "relation": "Lyon", "time": "Texas"})
        );
    }
}
