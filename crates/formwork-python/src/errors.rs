//! The package's exception types and the conversions of engine errors into them.
//!
//! Every exception derives from `formwork.FormworkError`. A schema the engine cannot enforce is a
//! `formwork.SchemaError` carrying `keyword` (for unsupported keywords), `pointer` (JSON pointer
//! into the caller's schema) and `category` (the engine's classification, e.g.
//! `unsupported:uniqueItems`) as attributes, so callers never parse the message. Bad Python
//! arguments (a row outside the buffer, a read-only buffer) are the usual `ValueError` /
//! `TypeError` / `IndexError`.

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;

use formwork_core::schema::SchemaError as CoreSchemaError;
use formwork_core::{Error as CoreError, MatcherError as CoreMatcherError};
use formwork_model::ModelError;

create_exception!(
    formwork,
    FormworkError,
    PyException,
    "Base of formwork's exceptions."
);
create_exception!(
    formwork,
    SchemaError,
    FormworkError,
    "A JSON Schema the engine refuses: `keyword`, `pointer` and `category` say what and where."
);
create_exception!(
    formwork,
    GrammarError,
    FormworkError,
    "A regex, GBNF text or choice list that cannot be compiled (GBNF errors name line:column)."
);
create_exception!(
    formwork,
    TokenizerError,
    FormworkError,
    "A tokenizer that cannot be read or used (file, JSON, vocabulary size, EOS ids)."
);
create_exception!(
    formwork,
    MatcherError,
    FormworkError,
    "A matcher failure other than a refused token: a budget ran out, or a bad call."
);

/// A `SchemaError` with its structured fields as attributes.
pub(crate) fn schema_error(py: Python<'_>, e: &CoreSchemaError) -> PyErr {
    let err = SchemaError::new_err(e.to_string());
    let (keyword, pointer) = match e {
        CoreSchemaError::Unsupported {
            keyword, pointer, ..
        } => (Some(keyword.as_str()), Some(pointer.as_str())),
        CoreSchemaError::Invalid { pointer, .. }
        | CoreSchemaError::RemoteRef { pointer, .. }
        | CoreSchemaError::Unsatisfiable { pointer, .. } => (None, Some(pointer.as_str())),
        _ => (None, None),
    };
    let value = err.value(py);
    // Setting attributes on a fresh exception instance cannot fail but for memory exhaustion,
    // which then surfaces on the next allocation anyway.
    let _ = value.setattr("keyword", keyword);
    let _ = value.setattr("pointer", pointer);
    let _ = value.setattr("category", e.category());
    err
}

/// Any engine error as the matching exception.
pub(crate) fn core_error(py: Python<'_>, e: &CoreError) -> PyErr {
    match e {
        CoreError::Schema(s) => schema_error(py, s),
        CoreError::Grammar(_) | CoreError::Gbnf(_) | CoreError::Regex(_) => {
            GrammarError::new_err(e.to_string())
        }
        _ => MatcherError::new_err(e.to_string()),
    }
}

/// A matcher error (budgets, internal failures) as `MatcherError`.
pub(crate) fn matcher_error(e: &CoreMatcherError) -> PyErr {
    MatcherError::new_err(e.to_string())
}

/// A tokenizer-loading error as `TokenizerError`.
pub(crate) fn model_error(e: &ModelError) -> PyErr {
    TokenizerError::new_err(e.to_string())
}
