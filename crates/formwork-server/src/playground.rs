//! The playground: `GET /` (one self-contained page, embedded in the binary) and the endpoint
//! it drives, `POST /v1/formwork/extract` (`formwork extract` over HTTP, streamed).
//!
//! Owns the page text and the examples built into it, reading an extract request, planning
//! it as `formwork extract` does (the same [`Prepared`] constraint: grounded fields against
//! the document, regex, GBNF, tools; the same user message), the stream's named events and
//! judging the finished output (the validator, grounded quotes). Does not own HTTP, the
//! queue or the grammar cache (the `http` module runs the request through them like any
//! other, batched with the other endpoints' requests).
//!
//! # `POST /v1/formwork/extract`
//! Request: `{"model"?, "constraint": C, "document": string, "max_tokens"?, "temperature"?,
//! "seed"?}` where `C` is `{"type": "json_schema", "schema": {...}}` (`x-grounded` fields are
//! quotes of the document), `{"type": "json"}`, `{"type": "regex", "regex": "..."}`,
//! `{"type": "gbnf", "grammar": "..."}` or `{"type": "tools", "tools": [...], "tool_choice"?:
//! "auto" | "required" | NAME}`. A constraint the engine refuses is a 400 whose `error` has,
//! besides OpenAI's fields, `keyword` and `pointer` (JSON Schema) or the message's
//! `line:column` (GBNF), so the page can show them beside the text.
//!
//! Answer: Server-Sent Events, named: `start` `{id, prompt_tokens, cache}`; `tokens`
//! `{tokens: [{text, forced}]}` per decode step (forced: fast-forwarded by the grammar or
//! appended by the budget's closing, not sampled); `end` with the judged result ([`judge`]:
//! `status` ok / invalid / incomplete, `output`, `text`, `errors`, `grounded` [{pointer,
//! value, grounded}], `closed_early`, `finish`, `tokens`, `forced_tokens`, `ttft_ms`,
//! `total_ms`, `tokens_per_s`); or `error` `{error: {...}}` if the engine failed.
//!
//! May use: `error`, `worker`.

use std::sync::OnceLock;

use axum::http::StatusCode;
use formwork_core::grammar::gbnf;
use formwork_core::schema::SchemaError;
use formwork_core::Grammar;
use formwork_extract::grounded::{grounded_values, is_grounded, mark_grounded};
use formwork_extract::tools::{self, Tool, ToolChoice};
use formwork_extract::validate::SchemaValidator;
use formwork_extract::{Constraint, ExtractConfig, ExtractError, Prepared};
use serde_json::{json, Value};

use crate::error::ApiError;
use crate::worker::Finish;

/// The page's text before the examples are put in (`/*EXAMPLES*/`).
const PAGE_TEMPLATE: &str = include_str!("playground.html");

/// The examples shipped in `examples/`, one click each on the page: (name, schema,
/// document). Every directory of `examples/` must be here (a test checks).
pub const EXAMPLES: &[(&str, &str, &str)] = &[(
    "course",
    include_str!("../../../examples/course/schema.json"),
    include_str!("../../../examples/course/doc.txt"),
)];

/// The page served at `GET /`: HTML, CSS and script in one text, the examples inside it.
/// Nothing is fetched from elsewhere (the response's Content-Security-Policy says so).
pub fn page() -> &'static str {
    static PAGE: OnceLock<String> = OnceLock::new();
    PAGE.get_or_init(|| {
        let examples: Vec<Value> = EXAMPLES
            .iter()
            .map(|(name, schema, doc)| json!({"name": name, "schema": schema, "document": doc}))
            .collect();
        // `</` cannot end the script element from inside a JSON string.
        let examples = Value::Array(examples).to_string().replace("</", "<\\/");
        PAGE_TEMPLATE.replace("/*EXAMPLES*/[]", &examples)
    })
}

/// What the output must be, as the request names it.
#[derive(Clone, Debug, PartialEq)]
pub enum Kind {
    /// JSON valid under the schema (`x-grounded` fields quote the document).
    Schema(Value),
    /// Any JSON value.
    Json,
    /// A text matching the regex.
    Regex(String),
    /// A text of the GBNF grammar.
    Gbnf(String),
    /// A tool call (or text under `auto`).
    Tools(Vec<Tool>, ToolChoice),
}

/// A checked `POST /v1/formwork/extract` body.
#[derive(Clone, Debug, PartialEq)]
pub struct ExtractRequest {
    /// The model named (`None`: the served one).
    pub model: Option<String>,
    /// The constraint.
    pub kind: Kind,
    /// The document to extract from.
    pub document: String,
    /// The token budget (`None`: the server's cap).
    pub max_tokens: Option<usize>,
    /// Sampling temperature (`None` or 0: greedy).
    pub temperature: Option<f64>,
    /// Sampling seed.
    pub seed: u64,
}

/// A 400 about `param`.
fn bad(param: &str, message: impl Into<String>) -> ApiError {
    ApiError::invalid(param, message)
}

fn string_at<'v>(v: &'v Value, key: &str, param: &str) -> Result<&'v str, ApiError> {
    v.get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| bad(param, format!("`{param}` must be a string")))
}

impl ExtractRequest {
    /// Reads a request body; a 400 naming the field at fault.
    pub fn parse(v: &Value) -> Result<Self, ApiError> {
        if !v.is_object() {
            return Err(bad("body", "the body must be a JSON object"));
        }
        let model = match v.get("model") {
            None | Some(Value::Null) => None,
            Some(Value::String(m)) => Some(m.clone()),
            Some(_) => return Err(bad("model", "`model` must be a string")),
        };
        let c = v
            .get("constraint")
            .filter(|c| c.is_object())
            .ok_or_else(|| bad("constraint", "`constraint` must be an object with a `type`"))?;
        let kind = match c.get("type").and_then(Value::as_str) {
            Some("json_schema") => Kind::Schema(
                c.get("schema")
                    .filter(|s| s.is_object() || s.is_boolean())
                    .cloned()
                    .ok_or_else(|| {
                        bad(
                            "constraint.schema",
                            "`constraint.schema` must be a JSON Schema",
                        )
                    })?,
            ),
            Some("json") => Kind::Json,
            Some("regex") => Kind::Regex(string_at(c, "regex", "constraint.regex")?.into()),
            Some("gbnf") => Kind::Gbnf(string_at(c, "grammar", "constraint.grammar")?.into()),
            Some("tools") => {
                let list = c.get("tools").ok_or_else(|| {
                    bad(
                        "constraint.tools",
                        "`constraint.tools` must be an array of tools",
                    )
                })?;
                let tools = tools::parse_tools(list).map_err(|e| located(e, "constraint.tools"))?;
                let choice = match c.get("tool_choice") {
                    None | Some(Value::Null) => ToolChoice::Required,
                    Some(Value::String(s)) => match s.parse() {
                        Ok(ToolChoice::Named(name)) if !tools.iter().any(|t| t.name == name) => {
                            let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
                            return Err(bad(
                                "constraint.tool_choice",
                                format!(
                                    "`constraint.tool_choice` names no tool: {name:?} is none of {}",
                                    names.join(", ")
                                ),
                            ));
                        }
                        Ok(choice) => choice,
                        Err(never) => match never {},
                    },
                    Some(_) => {
                        return Err(bad(
                            "constraint.tool_choice",
                            "`constraint.tool_choice` must be `auto`, `required` or a tool name",
                        ))
                    }
                };
                Kind::Tools(tools, choice)
            }
            _ => {
                return Err(bad(
                    "constraint.type",
                    "`constraint.type` must be one of json_schema, json, regex, gbnf, tools",
                ))
            }
        };
        let document = string_at(v, "document", "document")?.to_string();
        let max_tokens = match v.get("max_tokens") {
            None | Some(Value::Null) => None,
            Some(n) => Some(
                n.as_u64()
                    .filter(|&n| n > 0)
                    .ok_or_else(|| bad("max_tokens", "`max_tokens` must be a positive integer"))?
                    as usize,
            ),
        };
        let temperature =
            match v.get("temperature") {
                None | Some(Value::Null) => None,
                Some(t) => Some(t.as_f64().filter(|t| (0.0..=2.0).contains(t)).ok_or_else(
                    || bad("temperature", "`temperature` must be a number in 0..=2"),
                )?),
            };
        let seed = match v.get("seed") {
            None | Some(Value::Null) => 0,
            Some(s) => s
                .as_u64()
                .ok_or_else(|| bad("seed", "`seed` must be a non-negative integer"))?,
        };
        Ok(ExtractRequest {
            model,
            kind,
            document,
            max_tokens,
            temperature,
            seed,
        })
    }

    /// The request field holding the constraint's text, for errors.
    fn param(&self) -> &'static str {
        match self.kind {
            Kind::Schema(_) | Kind::Json => "constraint.schema",
            Kind::Regex(_) => "constraint.regex",
            Kind::Gbnf(_) => "constraint.grammar",
            Kind::Tools(..) => "constraint.tools",
        }
    }
}

/// A refused constraint: the 400 and, when the engine said where, the keyword and pointer.
#[derive(Clone, Debug, PartialEq)]
pub struct Refused {
    /// The error (status 400, `param` the constraint's field, code `unsupported_schema`).
    pub error: ApiError,
    /// The JSON Schema keyword at fault, if one is.
    pub keyword: Option<String>,
    /// Its JSON pointer in the schema or tools, if known (`""` is the root).
    pub pointer: Option<String>,
}

impl Refused {
    /// The error body: OpenAI's fields plus `keyword` and `pointer`.
    pub fn body(&self) -> Value {
        let mut body = self.error.body();
        body["error"]["keyword"] = json!(self.keyword);
        body["error"]["pointer"] = json!(self.pointer);
        body
    }
}

impl From<ApiError> for Refused {
    fn from(error: ApiError) -> Self {
        Refused {
            error,
            keyword: None,
            pointer: None,
        }
    }
}

/// `e` as a 400 about `param`, with the keyword and pointer it names.
fn refused(e: &ExtractError, param: &str) -> Refused {
    let (keyword, pointer) = match e {
        ExtractError::Engine(formwork_core::Error::Schema(s)) => match s {
            SchemaError::Unsupported {
                keyword, pointer, ..
            } => (Some(keyword.clone()), Some(pointer.clone())),
            SchemaError::Invalid { pointer, .. }
            | SchemaError::RemoteRef { pointer, .. }
            | SchemaError::Unsatisfiable { pointer, .. } => (None, Some(pointer.clone())),
            _ => (None, None),
        },
        ExtractError::Grounded { pointer, .. } => {
            (Some("x-grounded".into()), Some(pointer.clone()))
        }
        ExtractError::Tools { pointer, .. } => (None, Some(pointer.clone())),
        _ => (None, None),
    };
    Refused {
        error: located(e, param),
        keyword,
        pointer,
    }
}

/// A displayable error as the 400 `unsupported_schema` about `param`.
fn located(e: impl std::fmt::Display, param: &str) -> ApiError {
    ApiError::invalid(param, format!("the constraint cannot be enforced: {e}"))
        .code("unsupported_schema")
}

/// A request planned as `formwork extract` plans it: the grammar to decode under, the user
/// message, and what judging the output needs.
#[derive(Debug)]
pub struct Plan {
    /// The grammar for this document (grounded fields composed in).
    pub grammar: Grammar,
    /// The user message (instruction, schema or tools, document).
    pub user: String,
    /// The cache key of `grammar`: the constraint, and the document when the grammar depends
    /// on it.
    pub key: String,
    /// Output read as text (regex, GBNF) rather than JSON.
    pub text_output: bool,
    judge: Judge,
}

#[derive(Debug)]
enum Judge {
    Schema {
        validator: Box<SchemaValidator>,
        grounded: Vec<String>,
    },
    Json,
    Text,
    Tools {
        allowed: Vec<Tool>,
        auto: bool,
    },
}

/// Plans `req`: compiles the constraint to a grammar (not yet for the vocabulary: the cache
/// does that) and renders the user message. Costs the schema compile and, with grounded
/// fields, the document's span automaton.
///
/// # Errors
/// [`Refused`] for a constraint the engine cannot enforce (keyword and pointer when known).
pub fn plan(req: &ExtractRequest) -> Result<Plan, Refused> {
    let param = req.param();
    let (constraint, judge) = match &req.kind {
        Kind::Schema(schema) => {
            let validator = SchemaValidator::new(schema)
                .map_err(|e| Refused::from(bad(param, format!("not a valid JSON Schema: {e}"))))?;
            let marked = mark_grounded(schema, &[]).map_err(|e| refused(&e, param))?;
            (
                Constraint::Schema(schema.clone()),
                Judge::Schema {
                    validator: Box::new(validator),
                    grounded: marked.pointers,
                },
            )
        }
        Kind::Json => (Constraint::Json, Judge::Json),
        Kind::Regex(re) => (Constraint::Regex(re.clone()), Judge::Text),
        Kind::Gbnf(text) => {
            let g = gbnf::parse(text).map_err(|e| located(e, param))?;
            (Constraint::Grammar(g), Judge::Text)
        }
        Kind::Tools(list, choice) => {
            let allowed = tools::allowed(list, choice)
                .map_err(|e| refused(&e, param))?
                .into_iter()
                .cloned()
                .collect();
            (
                Constraint::Tools {
                    tools: list.clone(),
                    choice: choice.clone(),
                },
                Judge::Tools {
                    allowed,
                    auto: *choice == ToolChoice::Auto,
                },
            )
        }
    };
    let cfg = ExtractConfig::default();
    let prepared = Prepared::new(&constraint, &cfg).map_err(|e| refused(&e, param))?;
    let grammar = prepared
        .grammar_for(&req.document)
        .map_err(|e| refused(&e, param))?
        .ok_or_else(|| {
            Refused::from(ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "the constraint produced no grammar",
            ))
        })?;
    let user = prepared.user_message(&cfg.template, &req.document);
    let constraint_key = match &req.kind {
        Kind::Schema(s) => json!({"schema": s}),
        Kind::Json => json!({"json": true}),
        Kind::Regex(r) => json!({"regex": r}),
        Kind::Gbnf(g) => json!({"gbnf": g}),
        // Tools have no JSON form after parsing; their Debug text is as canonical.
        Kind::Tools(list, choice) => json!({"tools": format!("{:?}", (list, choice))}),
    };
    let document = prepared.per_document().then_some(req.document.as_str());
    let key = json!({"extract": constraint_key, "document": document}).to_string();
    Ok(Plan {
        grammar,
        user,
        key,
        text_output: matches!(judge, Judge::Text),
        judge,
    })
}

/// Timings and counts of a finished output, as the `end` event reports them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Figures {
    /// Tokens generated.
    pub tokens: usize,
    /// Of those, forced by the grammar.
    pub forced_tokens: usize,
    /// Time to the first token, milliseconds.
    pub ttft_ms: Option<f64>,
    /// Time from the request to the end, milliseconds.
    pub total_ms: f64,
}

/// The `end` event of a finished output: is it valid (the schema's validator, not only the
/// grammar), which values are grounded quotes of the document, and the figures.
pub fn judge(
    plan: &Plan,
    document: &str,
    text: &str,
    finish: Finish,
    closed_early: bool,
    figures: Figures,
) -> Value {
    let mut errors: Vec<String> = Vec::new();
    let mut grounded: Vec<Value> = Vec::new();
    let mut kind = Value::Null;
    let output: Value = match &plan.judge {
        Judge::Text => Value::String(text.to_string()),
        Judge::Tools { auto: true, .. } if !text.trim_start().starts_with('{') => {
            kind = json!("text");
            Value::String(text.to_string())
        }
        judge => match serde_json::from_str::<Value>(text) {
            Err(e) => {
                errors.push(format!("not JSON: {e}"));
                Value::Null
            }
            Ok(v) => {
                match judge {
                    Judge::Schema {
                        validator,
                        grounded: pointers,
                    } => {
                        errors.extend(validator.errors(&v));
                        for (at, s) in grounded_values(&v, pointers) {
                            let ok = is_grounded(document, s);
                            if !ok {
                                errors.push(format!("{at}: not a verbatim quote of the document"));
                            }
                            grounded.push(json!({"pointer": at, "value": s, "grounded": ok}));
                        }
                    }
                    Judge::Tools { allowed, .. } => {
                        kind = json!("tool_call");
                        errors.extend(tools::validate_call(
                            &v,
                            &allowed.iter().collect::<Vec<_>>(),
                        ));
                    }
                    Judge::Json | Judge::Text => {}
                }
                v
            }
        },
    };
    let status = if finish == Finish::Length {
        "incomplete"
    } else if errors.is_empty() {
        "ok"
    } else {
        "invalid"
    };
    if finish == Finish::Length {
        errors.insert(
            0,
            "the token budget ran out before the output was complete".into(),
        );
    }
    let generating_ms = figures.total_ms - figures.ttft_ms.unwrap_or(0.0);
    // Decoding speed: tokens after the first over the time after it; none when the model
    // sampled nothing (all forced or closed at once: no forward pass to time).
    let sampled = figures.tokens > figures.forced_tokens;
    let tokens_per_s = (sampled && figures.tokens > 1 && generating_ms > 0.0)
        .then(|| (figures.tokens - 1) as f64 / (generating_ms / 1e3));
    json!({
        "status": status,
        "kind": kind,
        "output": output,
        "text": text,
        "errors": errors,
        "grounded": grounded,
        "closed_early": closed_early,
        "finish": if finish == Finish::Length { "length" } else { "stop" },
        "tokens": figures.tokens,
        "forced_tokens": figures.forced_tokens,
        "ttft_ms": figures.ttft_ms,
        "total_ms": figures.total_ms,
        "tokens_per_s": tokens_per_s,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(constraint: Value, document: &str) -> Result<ExtractRequest, ApiError> {
        ExtractRequest::parse(&json!({"constraint": constraint, "document": document}))
    }

    fn figures() -> Figures {
        Figures {
            tokens: 5,
            forced_tokens: 2,
            ttft_ms: Some(10.0),
            total_ms: 50.0,
        }
    }

    #[test]
    fn every_example_directory_is_on_the_page() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples");
        let mut on_disk: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap())
            .filter(|e| e.path().is_dir())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        on_disk.sort();
        let mut listed: Vec<String> = EXAMPLES.iter().map(|e| e.0.to_string()).collect();
        listed.sort();
        assert_eq!(on_disk, listed);
        let page = page();
        assert!(!page.contains("/*EXAMPLES*/"));
        for (name, _, _) in EXAMPLES {
            assert!(page.contains(&format!("\"name\":\"{name}\"")), "{name}");
        }
        // Self-contained: nothing loaded from another origin.
        for outside in ["http://", "https://", "//cdn", "src=\"//"] {
            let at = page.find(outside);
            assert!(
                at.is_none_or(|i| page[i..].starts_with("https://json-schema.org")),
                "{outside} at {at:?}"
            );
        }
    }

    #[test]
    fn requests_are_checked_field_by_field() {
        let e = req(json!({"type": "xml"}), "d").unwrap_err();
        assert_eq!(e.param.as_deref(), Some("constraint.type"));
        let e = req(json!({"type": "regex"}), "d").unwrap_err();
        assert_eq!(e.param.as_deref(), Some("constraint.regex"));
        let e = ExtractRequest::parse(&json!({"constraint": {"type": "json"}})).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("document"));
        let e = ExtractRequest::parse(
            &json!({"constraint": {"type": "json"}, "document": "", "max_tokens": 0}),
        )
        .unwrap_err();
        assert_eq!(e.param.as_deref(), Some("max_tokens"));
        let r = req(
            json!({"type": "tools", "tools": [{"name": "f"}], "tool_choice": "auto"}),
            "",
        )
        .unwrap();
        assert!(matches!(r.kind, Kind::Tools(_, ToolChoice::Auto)));
        let r = req(
            json!({"type": "tools", "tools": [{"name": "f"}], "tool_choice": "f"}),
            "",
        )
        .unwrap();
        assert!(matches!(r.kind, Kind::Tools(_, ToolChoice::Named(ref n)) if n == "f"));
        let e = req(
            json!({"type": "tools", "tools": [{"name": "f"}, {"name": "g"}], "tool_choice": "h"}),
            "",
        )
        .unwrap_err();
        assert_eq!(e.param.as_deref(), Some("constraint.tool_choice"));
        assert!(e.message.contains("\"h\" is none of f, g"), "{}", e.message);
    }

    #[test]
    fn a_refused_schema_names_keyword_and_pointer() {
        let schema = json!({"type": "object", "properties": {
            "tags": {"type": "array", "unevaluatedItems": false}}});
        let r =
            plan(&req(json!({"type": "json_schema", "schema": schema}), "d").unwrap()).unwrap_err();
        assert_eq!(r.error.status, StatusCode::BAD_REQUEST);
        assert_eq!(r.keyword.as_deref(), Some("unevaluatedItems"));
        assert_eq!(
            r.pointer.as_deref(),
            Some("/properties/tags/unevaluatedItems")
        );
        let body = r.body();
        assert_eq!(body["error"]["param"], "constraint.schema");
        assert_eq!(body["error"]["keyword"], "unevaluatedItems");
        // GBNF errors carry their line:column in the message.
        let r = plan(&req(json!({"type": "gbnf", "grammar": "root ::= \"a\" (\n"}), "").unwrap());
        let r = r.unwrap_err();
        assert_eq!(r.error.param.as_deref(), Some("constraint.grammar"));
        assert!(r.error.message.contains(':'), "{}", r.error.message);
    }

    #[test]
    fn a_grounded_schema_plans_per_document_and_judges_its_quotes() {
        let (_, schema, doc) = EXAMPLES[0];
        let schema: Value = serde_json::from_str(schema).unwrap();
        let r = req(json!({"type": "json_schema", "schema": schema}), doc).unwrap();
        let p = plan(&r).unwrap();
        assert!(
            p.key.contains("Rust for Beginners"),
            "the document is in the key"
        );
        assert!(p.user.contains("Rust for Beginners"));
        let good = r#"{"course":"Rust for Beginners","done_lessons":5,"total_lessons":12,"status":"in_progress"}"#;
        let end = judge(&p, doc, good, Finish::Stop, false, figures());
        assert_eq!(end["status"], "ok", "{end}");
        assert_eq!(
            end["grounded"],
            json!([{"pointer": "/course", "value": "Rust for Beginners", "grounded": true}])
        );
        assert_eq!(end["tokens_per_s"], json!(4.0 / 0.04));
        let made_up = good.replace("Rust for Beginners", "Cooking");
        let end = judge(&p, doc, &made_up, Finish::Stop, false, figures());
        assert_eq!(end["status"], "invalid");
        assert_eq!(end["grounded"][0]["grounded"], false);
        let end = judge(
            &p,
            doc,
            r#"{"course":"Ru"#,
            Finish::Length,
            false,
            figures(),
        );
        assert_eq!(end["status"], "incomplete");
        // Without grounded fields the grammar does not depend on the document.
        let plain = json!({"type": "object", "properties": {"n": {"type": "integer"}}});
        let a = plan(&req(json!({"type": "json_schema", "schema": plain}), "one").unwrap());
        let b = plan(&req(json!({"type": "json_schema", "schema": plain}), "two").unwrap());
        assert_eq!(a.unwrap().key, b.unwrap().key);
    }

    #[test]
    fn text_and_tool_outputs_are_judged_by_their_kind() {
        let p = plan(&req(json!({"type": "regex", "regex": "[0-9]{4}-[0-9]{2}"}), "").unwrap())
            .unwrap();
        assert!(p.text_output);
        let end = judge(&p, "", "2024-05", Finish::Stop, false, figures());
        assert_eq!(
            (end["status"].as_str(), end["output"].as_str()),
            (Some("ok"), Some("2024-05"))
        );
        let tools = json!([{"type": "function", "function": {"name": "sum", "parameters": {
            "type": "object", "properties": {"xs": {"type": "array", "items": {"type": "number"}}},
            "required": ["xs"]}}}]);
        let p = plan(
            &req(
                json!({"type": "tools", "tools": tools, "tool_choice": "auto"}),
                "",
            )
            .unwrap(),
        )
        .unwrap();
        let call = r#"{"name":"sum","arguments":{"xs":[1,2]}}"#;
        let end = judge(&p, "", call, Finish::Stop, false, figures());
        assert_eq!(
            (end["status"].as_str(), end["kind"].as_str()),
            (Some("ok"), Some("tool_call"))
        );
        let end = judge(&p, "", "hello", Finish::Stop, false, figures());
        assert_eq!(end["kind"], "text");
        let bad_call = r#"{"name":"sum","arguments":{"xs":"no"}}"#;
        assert_eq!(
            judge(&p, "", bad_call, Finish::Stop, false, figures())["status"],
            "invalid"
        );
    }
}
