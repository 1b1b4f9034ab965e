//! Validation of final outputs against the whole schema, with the `jsonschema` crate.
//!
//! Owns turning `jsonschema` errors into `"<instance pointer>: <message>"` lines. Formats are
//! asserted (as the schema compiler enforces them by default). In constrained mode a failure
//! is a bug in formwork to surface, not to hide; in the baselines it is the expected way an
//! output goes wrong. Cost: building a validator is about one schema walk; keep one
//! [`SchemaValidator`] per schema for a batch.
//!
//! May use: nothing else in the crate.

use serde_json::Value;

/// A schema the validator cannot compile.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{pointer}: {message}")]
pub struct InvalidSchema {
    /// JSON pointer into the schema (`/` for the root).
    pub pointer: String,
    /// `jsonschema`'s message.
    pub message: String,
}

/// A compiled validator for one schema.
pub struct SchemaValidator {
    inner: jsonschema::Validator,
}

impl std::fmt::Debug for SchemaValidator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SchemaValidator").finish_non_exhaustive()
    }
}

impl SchemaValidator {
    /// Compiles `schema`; the error names the schema pointer and `jsonschema`'s message.
    pub fn new(schema: &Value) -> Result<Self, InvalidSchema> {
        jsonschema::options()
            .should_validate_formats(true)
            .build(schema)
            .map(|inner| SchemaValidator { inner })
            .map_err(|e| InvalidSchema {
                pointer: pointer_or_root(e.schema_path().as_str()).to_string(),
                message: e.to_string(),
            })
    }

    /// Every error, as `"<instance pointer>: <message>"` (empty when valid).
    pub fn errors(&self, instance: &Value) -> Vec<String> {
        self.inner
            .iter_errors(instance)
            .map(|e| format!("{}: {e}", pointer_or_root(e.instance_path().as_str())))
            .collect()
    }
}

fn pointer_or_root(p: &str) -> &str {
    if p.is_empty() {
        "/"
    } else {
        p
    }
}

/// One-shot validation: the errors of `instance` (see [`SchemaValidator::errors`]), or the
/// schema's own error.
pub fn validate(schema: &Value, instance: &Value) -> Result<Vec<String>, InvalidSchema> {
    Ok(SchemaValidator::new(schema)?.errors(instance))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn errors_carry_instance_pointers() {
        let schema = json!({
            "type": "object",
            "properties": {"tags": {"type": "array", "items": {"type": "integer"}}, "mail": {"type": "string", "format": "email"}},
            "required": ["tags"]
        });
        let v = SchemaValidator::new(&schema).unwrap();
        assert!(v.errors(&json!({"tags": [1, 2]})).is_empty());
        let errs = v.errors(&json!({"tags": [1, "x"], "mail": "not an address"}));
        assert_eq!(errs.len(), 2, "{errs:?}");
        assert!(errs.iter().any(|e| e.starts_with("/tags/1: ")), "{errs:?}");
        assert!(errs.iter().any(|e| e.starts_with("/mail: ")), "{errs:?}");
        let errs = v.errors(&json!({}));
        assert!(errs[0].starts_with("/: "), "{errs:?}");
    }

    #[test]
    fn bad_schema_is_an_error() {
        assert!(SchemaValidator::new(&json!({"type": 12})).is_err());
    }
}
