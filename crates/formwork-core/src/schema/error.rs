//! `SchemaError`: everything that can go wrong turning a JSON Schema into a grammar.
//!
//! Each variant keeps the JSON pointer (RFC 6901, into the document the caller gave) of the
//! schema location it is about, so a ratchet file or a user can find the offending keyword
//! without parsing the message. Unsupported, invalid, limit and internal failures are separate
//! variants so callers classify them by matching, never by string.

/// An error compiling a JSON Schema.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SchemaError {
    /// A keyword (or a form of it) that the compiler cannot enforce exactly.
    #[error("unsupported keyword `{keyword}` at {pointer}{}", detail_suffix(.detail))]
    Unsupported {
        /// The keyword, e.g. `not` or `uniqueItems`.
        keyword: String,
        /// Where it occurs (JSON pointer; empty string is the root, shown as `#`).
        pointer: String,
        /// Why this form is refused (may be empty).
        detail: String,
    },
    /// The schema is not a valid JSON Schema (wrong keyword type, bad `$ref`, ...).
    #[error("invalid schema at {pointer}: {message}")]
    Invalid {
        /// Where (JSON pointer).
        pointer: String,
        /// What is wrong.
        message: String,
    },
    /// A `$ref` to a document other than this one.
    #[error("remote reference `{reference}` at {pointer} is not supported")]
    RemoteRef {
        /// The reference as written.
        reference: String,
        /// Where (JSON pointer).
        pointer: String,
    },
    /// The schema admits no instance at all.
    #[error("schema at {pointer} is unsatisfiable: {reason}")]
    Unsatisfiable {
        /// Where (JSON pointer).
        pointer: String,
        /// Why.
        reason: String,
    },
    /// A configured budget was exceeded.
    #[error("limit exceeded: {what} is {given}, limit {limit}")]
    LimitExceeded {
        /// Which budget (e.g. `grammar size`, `allOf expansion`).
        what: String,
        /// The limit.
        limit: usize,
        /// The size reached.
        given: usize,
    },
    /// The grammar IR rejected what the compiler built: a compiler bug.
    #[error("internal error: {0}")]
    Internal(#[from] crate::grammar::GrammarError),
}

fn detail_suffix(detail: &str) -> String {
    if detail.is_empty() {
        String::new()
    } else {
        format!(": {detail}")
    }
}

impl SchemaError {
    /// A short category name for ratchet files and tables: `unsupported:<keyword>`,
    /// `invalid`, `remote_ref`, `unsatisfiable`, `limit`, `internal`.
    pub fn category(&self) -> String {
        match self {
            SchemaError::Unsupported { keyword, .. } => format!("unsupported:{keyword}"),
            SchemaError::Invalid { .. } => "invalid".to_string(),
            SchemaError::RemoteRef { .. } => "remote_ref".to_string(),
            SchemaError::Unsatisfiable { .. } => "unsatisfiable".to_string(),
            SchemaError::LimitExceeded { .. } => "limit".to_string(),
            SchemaError::Internal(_) => "internal".to_string(),
        }
    }

    pub(crate) fn unsupported(keyword: &str, pointer: &str, detail: impl Into<String>) -> Self {
        SchemaError::Unsupported {
            keyword: keyword.to_string(),
            pointer: display_pointer(pointer),
            detail: detail.into(),
        }
    }

    pub(crate) fn invalid(pointer: &str, message: impl Into<String>) -> Self {
        SchemaError::Invalid {
            pointer: display_pointer(pointer),
            message: message.into(),
        }
    }
}

/// Renders a JSON pointer for messages: the root (empty pointer) is shown as `#`.
pub(crate) fn display_pointer(pointer: &str) -> String {
    if pointer.is_empty() || pointer == "#" {
        "#".to_string()
    } else if let Some(rest) = pointer.strip_prefix('#') {
        rest.to_string()
    } else {
        pointer.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsupported_message_names_keyword_and_pointer() {
        let e = SchemaError::unsupported("not", "/definitions/Foo", "");
        assert_eq!(
            e.to_string(),
            "unsupported keyword `not` at /definitions/Foo"
        );
        assert_eq!(e.category(), "unsupported:not");
        let e = SchemaError::unsupported("uniqueItems", "", "item domain is infinite");
        assert_eq!(
            e.to_string(),
            "unsupported keyword `uniqueItems` at #: item domain is infinite"
        );
    }
}
