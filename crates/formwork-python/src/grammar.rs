//! `formwork.Grammar`: what the output must look like, independent of any tokenizer.
//!
//! A constructor turns a JSON Schema, a regex, GBNF text or a list of strings into the engine's
//! grammar IR right away, without the GIL, so a schema the engine cannot enforce raises
//! `SchemaError` here (keyword and JSON pointer as attributes), before any tokenizer is
//! involved. Compiling the grammar for a vocabulary happens per tokenizer
//! ([`PyTokenizer::compiled`](crate::tokenizer::PyTokenizer::compiled)), cached under this
//! grammar's key: its kind, its canonical text and the canonical compile options.

use std::sync::Arc;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString};
use serde_json::Value;

use formwork_core::grammar::{gbnf, regex::grammar_from_regex, GrammarBuilder, Symbol};
use formwork_core::schema::{compile, CompileOptions, SchemaError as CoreSchemaError};
use formwork_core::{Error as CoreError, Grammar};

use crate::errors::{core_error, GrammarError};

/// A grammar (JSON Schema, regex, GBNF or choice), ready to be compiled for any tokenizer.
#[pyclass(name = "Grammar", module = "formwork", frozen)]
pub(crate) struct PyGrammar {
    kind: &'static str,
    /// The cache key: kind, canonical text, canonical options.
    key: String,
    grammar: Arc<Grammar>,
    /// Keywords a lenient schema compile did not enforce.
    warnings: Vec<CoreSchemaError>,
}

impl PyGrammar {
    /// The key the per-tokenizer cache keeps the compiled grammar under.
    pub(crate) fn key(&self) -> &str {
        &self.key
    }

    /// The grammar IR.
    pub(crate) fn grammar(&self) -> Arc<Grammar> {
        self.grammar.clone()
    }

    fn new(kind: &'static str, key: String, grammar: Grammar) -> Self {
        Self {
            kind,
            key,
            grammar: Arc::new(grammar),
            warnings: Vec::new(),
        }
    }
}

/// A schema given as JSON text or as any value `json.dumps` accepts (a dict, a bool).
fn schema_value(py: Python<'_>, schema: &Bound<'_, PyAny>) -> PyResult<Value> {
    let text: String = if let Ok(s) = schema.cast::<PyString>() {
        s.to_str()?.to_owned()
    } else {
        py.import("json")?
            .call_method1("dumps", (schema,))?
            .extract()?
    };
    serde_json::from_str(&text)
        .map_err(|e| PyValueError::new_err(format!("the schema is not valid JSON: {e}")))
}

/// The compile options from keyword arguments: the fields of the engine's `CompileOptions`
/// (`lenient`, `strict`, `whitespace`, `property_order`, `coerce_one_of`, ...), plus the CLI's
/// spellings `flexible_whitespace=N` and `property_window=N`.
fn compile_options(
    py: Python<'_>,
    options: Option<&Bound<'_, PyDict>>,
) -> PyResult<CompileOptions> {
    let Some(options) = options else {
        return Ok(CompileOptions::default());
    };
    let text: String = py
        .import("json")?
        .call_method1("dumps", (options,))?
        .extract()?;
    let mut map: serde_json::Map<String, Value> = serde_json::from_str(&text)
        .map_err(|e| PyTypeError::new_err(format!("compile options: {e}")))?;
    if let Some(n) = map.remove("flexible_whitespace") {
        map.insert(
            "whitespace".into(),
            serde_json::json!({"flexible": {"max_run": n}}),
        );
    }
    if let Some(n) = map.remove("property_window") {
        map.insert("property_order".into(), serde_json::json!({"window": n}));
    }
    serde_json::from_value(Value::Object(map))
        .map_err(|e| PyTypeError::new_err(format!("compile options: {e}")))
}

#[pymethods]
impl PyGrammar {
    /// A JSON Schema (a dict, or JSON text), compiled with the CLI's options as keyword
    /// arguments: `property_order="schema" | "any"` (or `property_window=N`),
    /// `flexible_whitespace=N` (default compact), `strict`, `no_additional_properties`,
    /// `coerce_one_of`, `lenient` (unsupported keywords become `warnings` instead of a
    /// `SchemaError`), `assert_format`, `strict_format`, `default_draft`, `max_compile_ms`, ...
    /// An unknown option is a `TypeError`.
    #[staticmethod]
    #[pyo3(signature = (schema, **options))]
    fn json_schema(
        py: Python<'_>,
        schema: &Bound<'_, PyAny>,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        let value = schema_value(py, schema)?;
        let opts = compile_options(py, options)?;
        let key = format!(
            "json_schema\0{}\0{}",
            serde_json::to_string(&value).unwrap_or_default(),
            serde_json::to_string(&opts).unwrap_or_default()
        );
        let compiled = py
            .detach(|| compile(&value, &opts))
            .map_err(|e| core_error(py, &CoreError::Schema(e)))?;
        Ok(Self {
            kind: "json_schema",
            key,
            grammar: Arc::new(compiled.grammar),
            warnings: compiled.warnings,
        })
    }

    /// Any JSON object (`{"type": "object"}`), with the same options as `json_schema`.
    #[staticmethod]
    #[pyo3(signature = (**options))]
    fn json_object(py: Python<'_>, options: Option<&Bound<'_, PyDict>>) -> PyResult<Self> {
        let schema = PyDict::new(py);
        schema.set_item("type", "object")?;
        let mut g = Self::json_schema(py, schema.as_any(), options)?;
        g.kind = "json_object";
        Ok(g)
    }

    /// Exactly the strings the regex matches in full (Rust `regex` syntax; `^`/`$` at the ends
    /// are implied; look-around is refused).
    #[staticmethod]
    fn regex(py: Python<'_>, pattern: &str) -> PyResult<Self> {
        let g = py
            .detach(|| grammar_from_regex(pattern))
            .map_err(|e| GrammarError::new_err(format!("regex: {e}")))?;
        Ok(Self::new("regex", format!("regex\0{pattern}"), g))
    }

    /// A GBNF grammar (llama.cpp's format; the start rule is `root`). Errors name line:column.
    #[staticmethod]
    fn gbnf(py: Python<'_>, text: &str) -> PyResult<Self> {
        let g = py
            .detach(|| gbnf::parse(text))
            .map_err(|e| GrammarError::new_err(format!("gbnf: {e}")))?;
        Ok(Self::new("gbnf", format!("gbnf\0{text}"), g))
    }

    /// Exactly one of the strings.
    #[staticmethod]
    fn choice(strings: Vec<String>) -> PyResult<Self> {
        if strings.is_empty() {
            return Err(PyValueError::new_err("choice needs at least one string"));
        }
        let mut b = GrammarBuilder::new();
        let alternatives = strings
            .iter()
            .map(|s| match s.as_str() {
                "" => Vec::new(),
                s => vec![Symbol::Lexeme(b.literal(s))],
            })
            .collect();
        let start = b.fresh_rule("choice", alternatives);
        let g = b
            .build(start)
            .map_err(|e| GrammarError::new_err(format!("choice: {e}")))?;
        let key = format!(
            "choice\0{}",
            serde_json::to_string(&strings).unwrap_or_default()
        );
        Ok(Self::new("choice", key, g))
    }

    /// `json_schema`, `json_object`, `regex`, `gbnf` or `choice`.
    #[getter]
    fn kind(&self) -> &'static str {
        self.kind
    }

    /// What a `lenient=True` schema compile did not enforce: one dict per dropped keyword
    /// (`keyword`, `pointer`, `category`, `message`). Empty otherwise.
    #[getter]
    fn warnings<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let list = PyList::empty(py);
        for w in &self.warnings {
            let d = PyDict::new(py);
            let (keyword, pointer) = match w {
                CoreSchemaError::Unsupported {
                    keyword, pointer, ..
                } => (Some(keyword.as_str()), Some(pointer.as_str())),
                _ => (None, None),
            };
            d.set_item("keyword", keyword)?;
            d.set_item("pointer", pointer)?;
            d.set_item("category", w.category())?;
            d.set_item("message", w.to_string())?;
            list.append(d)?;
        }
        Ok(list)
    }

    /// The grammar's rules as text (the engine's dump, as `formwork compile` prints it).
    fn __str__(&self) -> String {
        self.grammar.to_string()
    }

    fn __repr__(&self) -> String {
        format!(
            "Grammar(kind={:?}, rules={}, lexemes={})",
            self.kind,
            self.grammar.rules().len(),
            self.grammar.lexemes().len()
        )
    }
}
