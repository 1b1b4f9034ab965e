//! The suite line formats: formwork's own and those of the data sets in `../shared/data`, one
//! reader each, picked per line by the fields it has ([`Format::of`]).
//!
//! Owns turning one JSON line into a [`Case`] and [`CaseError`], why a line is not one. May use
//! the suite's types (`super`) and the judges; knows nothing of running or reporting.
//!
//! | format | recognized by | input | target | scoring |
//! |---|---|---|---|---|
//! | formwork (`evals/*.jsonl`) | none of the others | `input` | `schema` or `tools` | `judge` / `judges` |
//! | SNIPS | `spans` | `text` | `schema` | slots |
//! | BFCL | `possible_answer` | `messages` | `functions` (BFCL types mapped to JSON Schema) | one call |
//! | GSM8K | `question` + `answer`, no `judge` | `question` | the `schema.json` beside the suite | `/answer` numeric |

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::{Case, Input, Message, Scoring, Target};
use crate::eval::judge::Judge;

/// Why one suite line is not a case. The line is reported (with its number) and skipped.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CaseError {
    /// The line is not JSON.
    #[error("malformed JSON: {0}")]
    Json(String),
    /// The line is JSON but not an object.
    #[error("a case must be a JSON object")]
    NotObject,
    /// The line has no string or number `id`.
    #[error("missing `id`")]
    NoId,
    /// A required field is absent.
    #[error("case `{id}`: missing `{field}`")]
    Missing {
        /// The case.
        id: String,
        /// The field.
        field: &'static str,
    },
    /// A field has the wrong JSON type.
    #[error("case `{id}`: `{field}` must be {expected}")]
    WrongType {
        /// The case.
        id: String,
        /// The field.
        field: &'static str,
        /// What it must be ("a string", "an array").
        expected: &'static str,
    },
    /// A field does not have the shape its format gives it.
    #[error("case `{id}`: bad `{field}`: {message}")]
    Invalid {
        /// The case.
        id: String,
        /// The field.
        field: &'static str,
        /// The deserializer's message.
        message: String,
    },
    /// formwork's format has no such field (a misspelt `judge` must not be ignored).
    #[error("case `{id}`: unknown field `{field}`")]
    Unknown {
        /// The case.
        id: String,
        /// The field.
        field: String,
    },
    /// Exactly one of two fields must be given.
    #[error("case `{id}`: give exactly one of `{}` or `{}`", .fields[0], .fields[1])]
    OneOf {
        /// The case.
        id: String,
        /// The two fields.
        fields: [&'static str; 2],
    },
    /// A BFCL case with several expected calls (the parallel categories), which this runner
    /// does not judge: refused rather than scored wrongly.
    #[error("case `{id}`: {calls} expected calls; only single-call BFCL cases are supported")]
    SeveralCalls {
        /// The case.
        id: String,
        /// How many calls it expects.
        calls: usize,
    },
    /// A GSM8K line in a directory without the data set's `schema.json`.
    #[error("GSM8K case without a schema.json beside the suite")]
    NoGsm8kSchema,
    /// Another line of the suite has the same id.
    #[error("duplicate id `{0}`")]
    DuplicateId(String),
}

/// The formats a suite line can be in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Format {
    Formwork,
    Snips,
    Bfcl,
    Gsm8k,
}

impl Format {
    /// The format of a line, by the fields only its format has.
    pub(super) fn of(o: &Map<String, Value>) -> Format {
        if o.contains_key("spans") {
            Format::Snips
        } else if o.contains_key("possible_answer") {
            Format::Bfcl
        } else if o.contains_key("question") && o.contains_key("answer") && !o.contains_key("judge")
        {
            Format::Gsm8k
        } else {
            Format::Formwork
        }
    }
}

/// Reads one line. `gsm8k_schema` is the `schema.json` beside the suite, if there is one.
pub(super) fn parse_line(line: &str, gsm8k_schema: Option<&Value>) -> Result<Case, CaseError> {
    let v: Value = serde_json::from_str(line).map_err(|e| CaseError::Json(e.to_string()))?;
    let o = v.as_object().ok_or(CaseError::NotObject)?;
    let id = match o.get("id") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        _ => return Err(CaseError::NoId),
    };
    let line = Line { id, o };
    match Format::of(o) {
        Format::Snips => line.snips(),
        Format::Bfcl => line.bfcl(),
        Format::Gsm8k => line.gsm8k(gsm8k_schema),
        Format::Formwork => line.formwork(),
    }
}

/// One line's object and id, with the field accessors every format uses.
struct Line<'a> {
    id: String,
    o: &'a Map<String, Value>,
}

impl Line<'_> {
    fn field(&self, field: &'static str) -> Result<&Value, CaseError> {
        self.o.get(field).ok_or_else(|| CaseError::Missing {
            id: self.id.clone(),
            field,
        })
    }

    fn string(&self, field: &'static str) -> Result<String, CaseError> {
        self.field(field)?
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| self.wrong_type(field, "a string"))
    }

    fn array(&self, field: &'static str) -> Result<&Vec<Value>, CaseError> {
        self.field(field)?
            .as_array()
            .ok_or_else(|| self.wrong_type(field, "an array"))
    }

    fn wrong_type(&self, field: &'static str, expected: &'static str) -> CaseError {
        CaseError::WrongType {
            id: self.id.clone(),
            field,
            expected,
        }
    }

    /// Deserializes `value` (the content of `field`) into `T`.
    fn parse<T: serde::de::DeserializeOwned>(
        &self,
        field: &'static str,
        value: &Value,
    ) -> Result<T, CaseError> {
        serde_json::from_value(value.clone()).map_err(|e| CaseError::Invalid {
            id: self.id.clone(),
            field,
            message: e.to_string(),
        })
    }

    fn case(self, input: Input, target: Target, gold: Value, scoring: Scoring) -> Case {
        Case {
            id: self.id,
            input,
            target,
            gold,
            scoring,
            group: None,
            examples: Vec::new(),
        }
    }

    /// SNIPS: slot names → exact substrings of the text; the intent is the case's group.
    fn snips(self) -> Result<Case, CaseError> {
        let input = Input::Text(self.string("text")?);
        let target = Target::Schema(self.field("schema")?.clone());
        let gold = self.field("gold")?.clone();
        let group = self
            .o
            .get("intent")
            .and_then(Value::as_str)
            .map(str::to_string);
        Ok(Case {
            group,
            ..self.case(input, target, gold, Scoring::Slots)
        })
    }

    /// BFCL: one call (the simple and multiple categories), tools with standard JSON Schema
    /// parameters so the constrained modes compile them.
    fn bfcl(self) -> Result<Case, CaseError> {
        let answers = self.array("possible_answer")?;
        if answers.len() != 1 {
            return Err(CaseError::SeveralCalls {
                id: self.id.clone(),
                calls: answers.len(),
            });
        }
        let messages: Vec<Message> = self.parse("messages", self.field("messages")?)?;
        let tools = self.array("functions")?.iter().map(bfcl_params).collect();
        let gold = self.o.get("gold_example").cloned().unwrap_or(Value::Null);
        let scoring = Scoring::Call(answers.clone());
        Ok(self.case(
            Input::Messages(messages),
            Target::Tools(tools),
            gold,
            scoring,
        ))
    }

    /// GSM8K: a question, a numeric answer judged exactly at `/answer`.
    fn gsm8k(self, schema: Option<&Value>) -> Result<Case, CaseError> {
        let schema = schema.cloned().ok_or(CaseError::NoGsm8kSchema)?;
        let judges = BTreeMap::from([(
            "/answer".to_string(),
            Judge::Numeric {
                abs_tol: 0.0,
                rel_tol: 0.0,
            },
        )]);
        let input = Input::Text(self.string("question")?);
        let gold = serde_json::json!({ "answer": self.field("answer")? });
        Ok(self.case(input, Target::Schema(schema), gold, Scoring::Fields(judges)))
    }

    /// formwork's own format (see the suite module's docs); unknown fields are an error.
    fn formwork(self) -> Result<Case, CaseError> {
        const KNOWN: [&str; 7] = ["id", "input", "schema", "tools", "gold", "judge", "judges"];
        if let Some(k) = self.o.keys().find(|k| !KNOWN.contains(&k.as_str())) {
            return Err(CaseError::Unknown {
                id: self.id.clone(),
                field: k.clone(),
            });
        }
        let input: Input = self.parse("input", self.field("input")?)?;
        let one_of = |fields| CaseError::OneOf {
            id: self.id.clone(),
            fields,
        };
        let target = match (self.o.get("schema"), self.o.get("tools")) {
            (Some(s), None) => Target::Schema(s.clone()),
            (None, Some(Value::Array(t))) => Target::Tools(t.clone()),
            (None, Some(_)) => return Err(self.wrong_type("tools", "an array")),
            _ => return Err(one_of(["schema", "tools"])),
        };
        let gold = self.field("gold")?.clone();
        let scoring = match (self.o.get("judge"), self.o.get("judges")) {
            (Some(Value::String(s)), None) if s == "slots" => Scoring::Slots,
            (Some(j), None) => Scoring::Whole(self.parse("judge", j)?),
            (None, Some(js)) => Scoring::Fields(self.parse("judges", js)?),
            _ => return Err(one_of(["judge", "judges"])),
        };
        Ok(self.case(input, target, gold, scoring))
    }
}

/// BFCL writes parameter schemas with Python type names (`dict`, `float`, `tuple`); map them to
/// JSON Schema so the validator judges what the data set means.
pub(crate) fn bfcl_params(schema: &Value) -> Value {
    match schema {
        Value::Object(o) => Value::Object(
            o.iter()
                .map(|(k, v)| {
                    let v = match (k.as_str(), v) {
                        ("type", Value::String(t)) => Value::String(
                            match t.as_str() {
                                "dict" => "object",
                                "float" => "number",
                                "tuple" => "array",
                                "any" => return (k.clone(), Value::Bool(true)),
                                other => other,
                            }
                            .to_string(),
                        ),
                        _ => bfcl_params(v),
                    };
                    (k.clone(), v)
                })
                .filter(|(k, v)| !(k == "type" && v == &Value::Bool(true)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(bfcl_params).collect()),
        other => other.clone(),
    }
}
