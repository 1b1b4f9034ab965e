//! Reading a Chat Completions request body into a checked [`ChatRequest`].
//!
//! Owns the wire format of requests: roles and content shapes of `messages`, `response_format`,
//! `tools` / `tool_choice`, the decoding parameters and their ranges. Unknown fields are
//! ignored (clients send many); a known field of the wrong type is a 400 naming it. Does not
//! compile anything: the constraint is [`Output`], compiled by [`cache`](crate::cache).
//!
//! May use: `error`.

use formwork_core::chat::{Role, Turn};
use formwork_extract::prompt;
use formwork_extract::tools::{self, Tool, ToolChoice};
use serde_json::{json, Value};

use crate::error::ApiError;

/// What the output must be.
#[derive(Clone, Debug, PartialEq)]
pub enum Output {
    /// Free text (`response_format` absent or `text`, or `tool_choice: none`).
    Text,
    /// Any JSON value (`json_object`).
    Json,
    /// JSON valid under `schema` (`json_schema`).
    Schema {
        /// The schema's name (shown in the prompt).
        name: String,
        /// The JSON Schema.
        schema: Value,
        /// OpenAI's strict mode: every property required, no others.
        strict: bool,
        /// Whether `{"refusal": "<reason>"}` is allowed instead (answered as a refusal).
        allow_refusal: bool,
    },
    /// A tool call (or text, with `auto`).
    Tools {
        /// The function tools.
        tools: Vec<Tool>,
        /// Which outputs are allowed.
        choice: ToolChoice,
        /// Whether one or more calls may be made (one per line), not exactly one.
        parallel: bool,
    },
}

impl Output {
    /// The cache key of the compiled constraint: canonical JSON of everything the grammar
    /// depends on (key order kept: it is the order properties are emitted in).
    pub fn cache_key(&self) -> Option<String> {
        let v = match self {
            Output::Text => return None,
            Output::Json => json!({"json_object": true}),
            Output::Schema {
                schema,
                strict,
                allow_refusal,
                ..
            } => json!({"schema": schema, "strict": strict, "refusal": allow_refusal}),
            Output::Tools {
                tools,
                choice,
                parallel,
            } => json!({
                "tools": tools.iter().map(|t| json!([t.name, t.parameters])).collect::<Vec<_>>(),
                "parallel": parallel,
                "choice": match choice {
                    ToolChoice::Auto => "auto".to_string(),
                    ToolChoice::Required => "required".to_string(),
                    ToolChoice::Named(n) => format!("function:{n}"),
                },
            }),
        };
        Some(v.to_string())
    }
}

/// A checked Chat Completions request.
#[derive(Clone, Debug, PartialEq)]
pub struct ChatRequest {
    /// The model the client asked for.
    pub model: String,
    /// The conversation, with the output instructions added to the system turn.
    pub turns: Vec<Turn>,
    /// The constraint.
    pub output: Output,
    /// `max_completion_tokens`, else `max_tokens`.
    pub max_tokens: Option<usize>,
    /// Sampling temperature (0 or absent: greedy).
    pub temperature: Option<f64>,
    /// Nucleus sampling.
    pub top_p: Option<f64>,
    /// Sampling from the `k` likeliest tokens only (Anthropic's `top_k`).
    pub top_k: Option<usize>,
    /// Sampler seed.
    pub seed: Option<u64>,
    /// Stop strings (free text only).
    pub stop: Vec<String>,
    /// Answer as Server-Sent Events.
    pub stream: bool,
    /// Send a final usage chunk (`stream_options.include_usage`).
    pub include_usage: bool,
    /// Tokens of reasoning before a constrained answer, as the extension object asks
    /// (`"formwork": {"think": N}`; 0 turns the server's default off); `None` when it does not
    /// say (the server's `--think` default applies).
    pub think: Option<usize>,
}

/// A 400 unless the body is a JSON object (every endpoint's first check).
pub(crate) fn object_body(body: &Value) -> Result<(), ApiError> {
    if body.is_object() {
        Ok(())
    } else {
        Err(ApiError::new(
            axum::http::StatusCode::BAD_REQUEST,
            "the request body must be a JSON object",
        ))
    }
}

pub(crate) fn field<'a>(body: &'a Value, name: &str) -> Option<&'a Value> {
    body.get(name).filter(|v| !v.is_null())
}

pub(crate) fn string_field(body: &Value, name: &str) -> Result<Option<String>, ApiError> {
    match field(body, name) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(ApiError::invalid(
            name,
            format!("`{name}` must be a string"),
        )),
    }
}

pub(crate) fn number_field(
    body: &Value,
    name: &str,
    lo: f64,
    hi: f64,
) -> Result<Option<f64>, ApiError> {
    match field(body, name) {
        None => Ok(None),
        Some(v) => match v.as_f64() {
            Some(x) if (lo..=hi).contains(&x) => Ok(Some(x)),
            _ => Err(ApiError::invalid(
                name,
                format!("`{name}` must be a number from {lo} to {hi}"),
            )),
        },
    }
}

pub(crate) fn uint_field(body: &Value, name: &str) -> Result<Option<u64>, ApiError> {
    match field(body, name) {
        None => Ok(None),
        Some(v) => v.as_u64().map(Some).ok_or_else(|| {
            ApiError::invalid(name, format!("`{name}` must be a non-negative integer"))
        }),
    }
}

pub(crate) fn bool_field(body: &Value, name: &str) -> Result<bool, ApiError> {
    match field(body, name) {
        None => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(ApiError::invalid(
            name,
            format!("`{name}` must be a boolean"),
        )),
    }
}

/// The text of a message's `content`: a string, or an array of `{"type": "text", "text"}`
/// parts (other part types are refused: this server reads text only).
fn content_text(content: Option<&Value>, param: &str) -> Result<String, ApiError> {
    match content {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Array(parts)) => {
            let mut out = String::new();
            for (i, p) in parts.iter().enumerate() {
                match (p.get("type").and_then(Value::as_str), p.get("text")) {
                    (Some("text"), Some(Value::String(t))) => out.push_str(t),
                    _ => {
                        return Err(ApiError::invalid(
                            format!("{param}[{i}]"),
                            "only text content parts (`{\"type\": \"text\", \"text\": …}`) are supported",
                        ))
                    }
                }
            }
            Ok(out)
        }
        Some(_) => Err(ApiError::invalid(
            param,
            "`content` must be a string or an array of text parts",
        )),
    }
}

/// One earlier tool call as the model writes it under the tool grammar.
pub(crate) fn call_line(name: &str, arguments: &Value) -> String {
    json!({"name": name, "arguments": arguments}).to_string()
}

/// An assistant's earlier tool calls, written as the model writes them under the tool
/// grammar (`{"name": …, "arguments": …}`, one per line), so it sees its own format.
fn tool_calls_text(calls: &Value, param: &str) -> Result<String, ApiError> {
    let list = calls
        .as_array()
        .ok_or_else(|| ApiError::invalid(param, "`tool_calls` must be an array"))?;
    let mut lines = Vec::new();
    for (i, c) in list.iter().enumerate() {
        let f = c.get("function");
        let name = f.and_then(|f| f.get("name")).and_then(Value::as_str);
        let args = f.and_then(|f| f.get("arguments")).and_then(Value::as_str);
        let (Some(name), Some(args)) = (name, args) else {
            return Err(ApiError::invalid(
                format!("{param}[{i}]"),
                "a tool call needs `function.name` and `function.arguments` (a JSON string)",
            ));
        };
        let args: Value = serde_json::from_str(args).map_err(|e| {
            ApiError::invalid(
                format!("{param}[{i}].function.arguments"),
                format!("the arguments are not JSON: {e}"),
            )
        })?;
        lines.push(call_line(name, &args));
    }
    Ok(lines.join("\n"))
}

fn parse_messages(body: &Value) -> Result<Vec<Turn>, ApiError> {
    let list = match field(body, "messages") {
        Some(Value::Array(l)) if !l.is_empty() => l,
        Some(Value::Array(_)) => return Err(ApiError::invalid("messages", "`messages` is empty")),
        Some(_) => return Err(ApiError::invalid("messages", "`messages` must be an array")),
        None => return Err(ApiError::invalid("messages", "`messages` is required")),
    };
    let mut turns = Vec::new();
    for (i, m) in list.iter().enumerate() {
        let at = format!("messages[{i}]");
        let role = m.get("role").and_then(Value::as_str).ok_or_else(|| {
            ApiError::invalid(format!("{at}.role"), "every message needs a string `role`")
        })?;
        let content = content_text(m.get("content"), &format!("{at}.content"))?;
        let turn = match role {
            "system" | "developer" => Turn::new(Role::System, content),
            "user" => Turn::new(Role::User, content),
            "assistant" => {
                let mut text = content;
                if let Some(calls) = m.get("tool_calls").filter(|c| !c.is_null()) {
                    let calls = tool_calls_text(calls, &format!("{at}.tool_calls"))?;
                    if !text.is_empty() && !calls.is_empty() {
                        text.push('\n');
                    }
                    text.push_str(&calls);
                }
                Turn::new(Role::Assistant, text)
            }
            "tool" => Turn::new(Role::Tool, content),
            other => {
                return Err(ApiError::invalid(
                    format!("{at}.role"),
                    format!(
                    "unknown role `{other}` (expected system, developer, user, assistant or tool)"
                ),
                ))
            }
        };
        turns.push(turn);
    }
    Ok(turns)
}

fn parse_response_format(body: &Value) -> Result<Output, ApiError> {
    let Some(rf) = field(body, "response_format") else {
        return Ok(Output::Text);
    };
    let bad = |m: &str| ApiError::invalid("response_format", m.to_string());
    match rf.get("type").and_then(Value::as_str) {
        Some("text") => Ok(Output::Text),
        Some("json_object") => Ok(Output::Json),
        Some("json_schema") => {
            let js = rf
                .get("json_schema")
                .filter(|v| v.is_object())
                .ok_or_else(|| bad("`json_schema` response format needs a `json_schema` object"))?;
            let name = js
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or("response")
                .to_string();
            let schema = match js.get("schema") {
                Some(s @ (Value::Object(_) | Value::Bool(_))) => s.clone(),
                None => json!({}),
                Some(_) => return Err(bad("`json_schema.schema` must be a JSON Schema object")),
            };
            let strict = js.get("strict").and_then(Value::as_bool).unwrap_or(false);
            Ok(Output::Schema {
                name,
                schema,
                strict,
                allow_refusal: false,
            })
        }
        _ => Err(bad(
            "`response_format.type` must be `text`, `json_object` or `json_schema`",
        )),
    }
}

/// `tool_choice: {"type": "allowed_tools", "allowed_tools": {"mode", "tools"}}`: keeps only the
/// named tools (the grammar and the prompt then offer only those) and returns the mode.
fn allowed_tools(choice: &Value, tools: &mut Vec<Tool>) -> Result<ToolChoice, ApiError> {
    let param = "tool_choice.allowed_tools";
    let spec = choice
        .get("allowed_tools")
        .filter(|a| a.is_object())
        .ok_or_else(|| ApiError::invalid(param, "`allowed_tools` must be an object"))?;
    let mode = match spec.get("mode").and_then(Value::as_str) {
        Some("auto") => ToolChoice::Auto,
        Some("required") => ToolChoice::Required,
        _ => {
            return Err(ApiError::invalid(
                format!("{param}.mode"),
                "`mode` must be `auto` or `required`",
            ))
        }
    };
    let list = match spec.get("tools") {
        Some(Value::Array(l)) if !l.is_empty() => l,
        _ => {
            return Err(ApiError::invalid(
                format!("{param}.tools"),
                "`tools` must be a non-empty array of `{\"type\": \"function\", \"function\": {\"name\": …}}`",
            ))
        }
    };
    let mut names = Vec::new();
    for (i, t) in list.iter().enumerate() {
        let name = t
            .get("function")
            .and_then(|f| f.get("name"))
            .and_then(Value::as_str)
            .filter(|n| tools.iter().any(|t| t.name == *n))
            .ok_or_else(|| {
                ApiError::invalid(
                    format!("{param}.tools[{i}]"),
                    "must name a function in `tools`: `{\"type\": \"function\", \"function\": {\"name\": …}}`",
                )
            })?;
        names.push(name);
    }
    tools.retain(|t| names.contains(&t.name.as_str()));
    Ok(mode)
}

/// Tools and choice; `None` when there are no tools or the choice is `none`.
fn parse_tools(body: &Value) -> Result<Option<Output>, ApiError> {
    let Some(list) = field(body, "tools") else {
        if field(body, "tool_choice").is_some_and(|c| c != "none" && c != "auto") {
            return Err(ApiError::invalid(
                "tool_choice",
                "`tool_choice` needs `tools`",
            ));
        }
        return Ok(None);
    };
    if let Some(arr) = list.as_array() {
        for (i, t) in arr.iter().enumerate() {
            if t.get("type").and_then(Value::as_str) != Some("function") {
                return Err(ApiError::invalid(
                    format!("tools[{i}].type"),
                    "only `function` tools are supported",
                ));
            }
        }
    }
    let mut tools =
        tools::parse_tools(list).map_err(|e| ApiError::invalid("tools", e.to_string()))?;
    let choice = match field(body, "tool_choice") {
        None => ToolChoice::Auto,
        Some(Value::String(s)) => match s.as_str() {
            "none" => return Ok(None),
            "auto" => ToolChoice::Auto,
            "required" => ToolChoice::Required,
            other => {
                return Err(ApiError::invalid(
                    "tool_choice",
                    format!("unknown tool_choice `{other}` (expected none, auto, required, a function object or allowed_tools)"),
                ))
            }
        },
        Some(obj) if obj.get("type").and_then(Value::as_str) == Some("allowed_tools") => {
            allowed_tools(obj, &mut tools)?
        }
        Some(obj) => {
            let name = obj
                .get("function")
                .and_then(|f| f.get("name"))
                .and_then(Value::as_str)
                .ok_or_else(|| {
                    ApiError::invalid(
                        "tool_choice",
                        "a `tool_choice` object must be `{\"type\": \"function\", \"function\": {\"name\": …}}`",
                    )
                })?;
            ToolChoice::Named(name.to_string())
        }
    };
    tools::allowed(&tools, &choice).map_err(|e| {
        let ToolChoice::Named(n) = &choice else {
            return ApiError::invalid("tool_choice", e.to_string());
        };
        ApiError::invalid(
            "tool_choice",
            format!("`tool_choice` names `{n}`, which is not in `tools`"),
        )
    })?;
    // OpenAI's default is `true`: one or more calls.
    let parallel = field(body, "parallel_tool_calls")
        .and_then(Value::as_bool)
        .unwrap_or(true);
    Ok(Some(Output::Tools {
        tools,
        choice,
        parallel,
    }))
}

/// The instruction added to the system turn so the model knows the shape it is held to.
fn instruction(output: &Output) -> Option<String> {
    match output {
        Output::Text => None,
        Output::Json => Some("Answer with a JSON value.".into()),
        Output::Schema {
            name,
            schema,
            allow_refusal,
            ..
        } => Some(format!(
            "Answer with a JSON object `{name}` matching this JSON Schema:\n{schema}{}",
            if *allow_refusal {
                "\nIf you cannot or must not answer, reply {\"refusal\": \"<the reason>\"} instead."
            } else {
                ""
            }
        )),
        Output::Tools {
            tools,
            choice,
            parallel,
        } => {
            let allowed = tools::allowed(tools, choice).unwrap_or_default();
            let how = if *parallel {
                "To call a tool, answer with one JSON object {\"name\": <tool name>, \"arguments\": <its arguments>} per call, one call per line."
            } else {
                "To call a tool, answer with one JSON object {\"name\": <tool name>, \"arguments\": <its arguments>}."
            };
            let tail = match choice {
                ToolChoice::Auto => " Or answer in plain text without calling a tool.",
                _ => "",
            };
            Some(format!(
                "You can call these tools:\n{}\n{how}{tail} A tool's result comes back in <tool_response> tags.",
                tools::describe(&allowed)
            ))
        }
    }
}

/// Whether the request's extension object `"formwork": {"allow_refusal": bool}` asks for
/// refusals (`None`: it does not say).
pub(crate) fn refusal_asked(body: &Value) -> Result<Option<bool>, ApiError> {
    Ok(match field(body, "formwork") {
        None => None,
        Some(Value::Object(ext)) => match ext.get("allow_refusal") {
            None => None,
            Some(Value::Bool(b)) => Some(*b),
            Some(_) => {
                return Err(ApiError::invalid(
                    "formwork.allow_refusal",
                    "`formwork.allow_refusal` must be a boolean",
                ))
            }
        },
        Some(_) => {
            return Err(ApiError::invalid(
                "formwork",
                "`formwork` must be an object of formwork's extension fields",
            ))
        }
    })
}

/// The reasoning budget the extension object asks for, `"formwork": {"think": N}` (`None`: it
/// does not say; 0: no reasoning). A budget needs a constrained output (there is no answer to
/// reason before in free text) and is at most `cap`, the server's `max_tokens` cap.
pub(crate) fn think_asked(
    body: &Value,
    output: &Output,
    cap: usize,
) -> Result<Option<usize>, ApiError> {
    let Some(Value::Object(ext)) = field(body, "formwork") else {
        // Not an object: `refusal_asked` names it.
        return Ok(None);
    };
    let Some(v) = ext.get("think") else {
        return Ok(None);
    };
    let param = "formwork.think";
    let n = v.as_u64().ok_or_else(|| {
        ApiError::invalid(param, "`formwork.think` must be a token count (0: off)")
    })?;
    if n as usize > cap {
        return Err(ApiError::invalid(
            param,
            format!("`formwork.think` is {n}; it must be at most {cap} (the server's cap)"),
        ));
    }
    if n > 0 && *output == Output::Text {
        return Err(ApiError::invalid(
            param,
            "`formwork.think` reasons before a constrained answer: it needs `response_format` \
             json_schema or json_object, or tools",
        ));
    }
    Ok(Some(n as usize))
}

/// The instruction that asks the model to reason, then write `trigger` and its answer: added
/// to the last user turn (what a small model follows best), or to the system turn when the
/// conversation does not end with one.
///
/// The wording is `formwork extract --think`'s ([`prompt::think_instruction`], one function
/// for both): thinking is only asked for a JSON answer (a schema, `json_object` or tools), and
/// the request's own instruction may well say to answer with the JSON only, which a small model
/// obeyed at once when merely asked to "first think it through" (issue 19).
pub fn instruct_thinking(turns: &mut Vec<Turn>, trigger: &str) {
    // The instruction starts with its own paragraph break ("\n\nDo not write the JSON yet…").
    let text = prompt::think_instruction(trigger, prompt::Answer::Json);
    match turns.last_mut() {
        Some(t) if t.role == Role::User => t.content.push_str(&text),
        _ => match turns.first_mut() {
            Some(t) if t.role == Role::System => t.content.push_str(&text),
            _ => turns.insert(0, Turn::new(Role::System, text.trim_start())),
        },
    }
}

/// Adds the instruction for `output` to the system turn (or a new one), so the model knows
/// the shape it is held to: every endpoint's requests go through this.
pub fn instruct(turns: &mut Vec<Turn>, output: &Output) {
    if let Some(text) = instruction(output) {
        match turns.first_mut() {
            Some(t) if t.role == Role::System => {
                t.content = format!("{}\n\n{text}", t.content);
            }
            _ => turns.insert(0, Turn::new(Role::System, text)),
        }
    }
}

/// The token budget in the field `name`, if given: from 1 to `cap`, else a 400
/// `max_tokens_exceeded` naming the field.
pub(crate) fn budget_field(
    body: &Value,
    name: &str,
    cap: usize,
) -> Result<Option<usize>, ApiError> {
    match uint_field(body, name)? {
        Some(n) if n == 0 || n as usize > cap => Err(ApiError::invalid(
            name,
            format!("`{name}` is {n}; it must be from 1 to {cap} (the server's cap)"),
        )
        .code("max_tokens_exceeded")),
        n => Ok(n.map(|n| n as usize)),
    }
}

impl ChatRequest {
    /// Checks `body` (already parsed JSON). `max_tokens_cap` bounds the token budget.
    ///
    /// # Errors
    /// A 400 naming the field for a missing or ill-typed field, an out-of-range parameter, a
    /// budget above the cap, or a bad tool list.
    pub fn parse(body: &Value, max_tokens_cap: usize) -> Result<ChatRequest, ApiError> {
        Self::parse_with(body, max_tokens_cap, false)
    }

    /// [`parse`](Self::parse) with the server's default for refusals: a `json_schema` request
    /// may refuse when `refusals` is on, or when its extension object says
    /// `"formwork": {"allow_refusal": true}` (`false` there turns the default off).
    pub fn parse_with(
        body: &Value,
        max_tokens_cap: usize,
        refusals: bool,
    ) -> Result<ChatRequest, ApiError> {
        object_body(body)?;
        let model = string_field(body, "model")?
            .ok_or_else(|| ApiError::invalid("model", "`model` is required"))?;
        let mut turns = parse_messages(body)?;
        // `true` (OpenAI's default): one or more calls; `false`: at most one.
        bool_field(body, "parallel_tool_calls")?;
        let mut output = match parse_tools(body)? {
            Some(tools) => tools,
            None => parse_response_format(body)?,
        };
        let asked = refusal_asked(body)?;
        if let Output::Schema { allow_refusal, .. } = &mut output {
            *allow_refusal = asked.unwrap_or(refusals);
        }
        let mut max_tokens = None;
        for name in ["max_completion_tokens", "max_tokens"] {
            let n = budget_field(body, name, max_tokens_cap)?;
            max_tokens = max_tokens.or(n);
        }
        if let Some(n) = uint_field(body, "n")? {
            if n != 1 {
                return Err(ApiError::invalid("n", "only `n: 1` is supported"));
            }
        }
        let stop = match field(body, "stop") {
            None => Vec::new(),
            Some(Value::String(s)) => vec![s.clone()],
            Some(Value::Array(a)) if a.iter().all(Value::is_string) && a.len() <= 4 => a
                .iter()
                .filter_map(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect(),
            Some(_) => {
                return Err(ApiError::invalid(
                    "stop",
                    "`stop` must be a string or an array of at most 4 strings",
                ))
            }
        };
        let include_usage = match field(body, "stream_options") {
            None => false,
            Some(o) => o
                .get("include_usage")
                .and_then(Value::as_bool)
                .unwrap_or(false),
        };
        let think = think_asked(body, &output, max_tokens_cap)?;
        instruct(&mut turns, &output);
        Ok(ChatRequest {
            model,
            turns,
            output,
            max_tokens,
            temperature: number_field(body, "temperature", 0.0, 2.0)?,
            top_p: number_field(body, "top_p", 0.0, 1.0)?,
            top_k: None,
            seed: match field(body, "seed") {
                None => None,
                Some(v) => Some(
                    v.as_u64()
                        .or(v.as_i64().map(|i| i as u64))
                        .ok_or_else(|| ApiError::invalid("seed", "`seed` must be an integer"))?,
                ),
            },
            stop,
            stream: bool_field(body, "stream")?,
            include_usage,
            think,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(v: Value) -> Result<ChatRequest, ApiError> {
        ChatRequest::parse(&v, 512)
    }

    /// The server asks for reasoning with `formwork extract --think`'s instruction (issue 19):
    /// it defers the JSON ("Do not write the JSON yet"), where the server's own wording ("First
    /// think it through…") let a small model answer at once, and it lands once, after the
    /// last user turn's text, else in the system turn.
    #[test]
    fn thinking_is_asked_with_the_extract_instruction() {
        let want = prompt::think_instruction("Answer:", prompt::Answer::Json);
        assert!(want.contains("Do not write the JSON yet"), "{want}");
        let mut turns = vec![
            Turn::new(Role::System, "Be exact."),
            Turn::new(Role::User, "Tom has 3 apples."),
        ];
        instruct_thinking(&mut turns, "Answer:");
        assert_eq!(turns[0].content, "Be exact.");
        assert_eq!(turns[1].content, format!("Tom has 3 apples.{want}"));
        let mut turns = vec![
            Turn::new(Role::System, "Be exact."),
            Turn::new(Role::User, "hi"),
            Turn::new(Role::Assistant, "hello"),
        ];
        instruct_thinking(&mut turns, "Answer:");
        assert_eq!(turns[0].content, format!("Be exact.{want}"));
        let mut turns = vec![Turn::new(Role::Assistant, "hello")];
        instruct_thinking(&mut turns, "Answer:");
        assert_eq!(turns[0], Turn::new(Role::System, want.trim_start()));
    }

    #[test]
    fn a_body_that_is_not_an_object_is_a_400_on_every_endpoint() {
        let cap = 512;
        for body in [json!([1, 2]), json!("text"), json!(null)] {
            for e in [
                ChatRequest::parse(&body, cap).unwrap_err(),
                crate::anthropic::parse(&body, cap, false).unwrap_err(),
                crate::responses::parse(&body, cap, false).unwrap_err(),
            ] {
                assert_eq!(e.status, axum::http::StatusCode::BAD_REQUEST, "{body}");
                assert_eq!(
                    e.message, "the request body must be a JSON object",
                    "{body}"
                );
            }
        }
    }

    #[test]
    fn a_minimal_request_is_free_text_and_ignores_unknown_fields() {
        let r = parse(
            json!({"model": "m", "messages": [{"role": "user", "content": "hi"}],
            "frequency_penalty": 0, "logprobs": false, "user": "x"}),
        )
        .unwrap();
        assert_eq!(r.output, Output::Text);
        assert_eq!(r.turns, vec![Turn::new(Role::User, "hi")]);
        assert_eq!(r.max_tokens, None);
        assert!(!r.stream);
    }

    #[test]
    fn json_schema_goes_in_the_system_turn() {
        let r = parse(json!({"model": "m", "messages": [
                {"role": "developer", "content": "Be exact."},
                {"role": "user", "content": [{"type": "text", "text": "hi"}]}],
            "response_format": {"type": "json_schema", "json_schema": {
                "name": "Ev", "strict": true, "schema": {"type": "object"}}}}))
        .unwrap();
        assert!(matches!(r.output, Output::Schema { strict: true, .. }));
        assert_eq!(r.turns.len(), 2);
        assert!(r.turns[0]
            .content
            .starts_with("Be exact.\n\nAnswer with a JSON object `Ev`"));
        assert_eq!(r.turns[1].content, "hi");
    }

    #[test]
    fn assistant_tool_calls_and_tool_results_become_turns() {
        let r = parse(json!({"model": "m", "messages": [
            {"role": "user", "content": "sum 1 2"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
                "function": {"name": "sum", "arguments": "{\"numbers\": [1, 2]}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "3"}]}))
        .unwrap();
        assert_eq!(
            r.turns[1],
            Turn::new(
                Role::Assistant,
                r#"{"name":"sum","arguments":{"numbers":[1,2]}}"#
            )
        );
        assert_eq!(r.turns[2], Turn::new(Role::Tool, "3"));
    }

    #[test]
    fn tool_choice_shapes() {
        let tools = json!([{"type": "function", "function": {"name": "sum",
            "parameters": {"type": "object"}}}]);
        let body = |choice: Value| {
            json!({"model": "m", "messages": [{"role": "user", "content": "x"}],
            "tools": tools, "tool_choice": choice})
        };
        let choice = |v| match parse(body(v)).unwrap().output {
            Output::Tools { choice, .. } => Some(choice),
            _ => None,
        };
        assert_eq!(choice(json!("auto")), Some(ToolChoice::Auto));
        assert_eq!(choice(json!("required")), Some(ToolChoice::Required));
        assert_eq!(
            choice(json!({"type": "function", "function": {"name": "sum"}})),
            Some(ToolChoice::Named("sum".into()))
        );
        assert_eq!(choice(json!("none")), None);
        let e = parse(body(
            json!({"type": "function", "function": {"name": "nope"}}),
        ))
        .unwrap_err();
        assert_eq!(e.param.as_deref(), Some("tool_choice"));
        assert!(e.message.contains("`nope`"), "{}", e.message);
    }

    #[test]
    fn allowed_tools_keeps_only_the_named_tools() {
        let tools = json!([
            {"type": "function", "function": {"name": "sum", "parameters": {"type": "object"}}},
            {"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}},
            {"type": "function", "function": {"name": "timer", "parameters": {"type": "object"}}}]);
        let body = |allowed: Value| {
            json!({"model": "m", "messages": [{"role": "user", "content": "x"}], "tools": tools,
                "tool_choice": {"type": "allowed_tools", "allowed_tools": allowed}})
        };
        let r = parse(body(json!({"mode": "required", "tools": [
            {"type": "function", "function": {"name": "timer"}},
            {"type": "function", "function": {"name": "sum"}}]})))
        .unwrap();
        let Output::Tools {
            tools: kept,
            choice,
            ..
        } = &r.output
        else {
            panic!("{:?}", r.output)
        };
        let names: Vec<&str> = kept.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(
            (names, choice),
            (vec!["sum", "timer"], &ToolChoice::Required)
        );
        assert!(
            !r.turns[0].content.contains("weather"),
            "the prompt offers only the allowed"
        );
        let auto = parse(body(json!({"mode": "auto", "tools": [
            {"type": "function", "function": {"name": "weather"}}]})))
        .unwrap();
        assert!(
            matches!(auto.output, Output::Tools { choice: ToolChoice::Auto, ref tools, .. } if tools.len() == 1)
        );
        for (allowed, param) in [
            (
                json!({"mode": "sometimes", "tools": []}),
                "tool_choice.allowed_tools.mode",
            ),
            (
                json!({"mode": "auto", "tools": []}),
                "tool_choice.allowed_tools.tools",
            ),
            (
                json!({"mode": "auto", "tools": [{"type": "function", "function": {"name": "nope"}}]}),
                "tool_choice.allowed_tools.tools[0]",
            ),
        ] {
            let e = parse(body(allowed)).unwrap_err();
            assert_eq!(e.param.as_deref(), Some(param), "{}", e.message);
        }
    }

    #[test]
    fn bad_fields_are_400s_naming_the_field() {
        let msgs = json!([{"role": "user", "content": "x"}]);
        let cases = [
            (json!({"messages": msgs}), "model"),
            (json!({"model": 3, "messages": msgs}), "model"),
            (json!({"model": "m", "messages": "hi"}), "messages"),
            (
                json!({"model": "m", "messages": [{"role": "robot", "content": "x"}]}),
                "messages[0].role",
            ),
            (
                json!({"model": "m", "messages": msgs, "temperature": "hot"}),
                "temperature",
            ),
            (
                json!({"model": "m", "messages": msgs, "max_tokens": 100000}),
                "max_tokens",
            ),
            (
                json!({"model": "m", "messages": msgs, "max_completion_tokens": -1}),
                "max_completion_tokens",
            ),
            (
                json!({"model": "m", "messages": msgs, "stream": "yes"}),
                "stream",
            ),
            (
                json!({"model": "m", "messages": msgs, "response_format": {"type": "xml"}}),
                "response_format",
            ),
            (
                json!({"model": "m", "messages": msgs, "tools": [{"type": "function", "function": {}}]}),
                "tools",
            ),
        ];
        for (body, param) in cases {
            let e = parse(body.clone()).unwrap_err();
            assert_eq!(e.status, axum::http::StatusCode::BAD_REQUEST, "{body}");
            assert_eq!(e.param.as_deref(), Some(param), "{body}: {}", e.message);
        }
    }

    #[test]
    fn cache_key_depends_on_schema_strictness_and_refusal_only() {
        let a = Output::Schema {
            name: "A".into(),
            schema: json!({"type": "object"}),
            strict: true,
            allow_refusal: false,
        };
        let b = Output::Schema {
            name: "B".into(),
            schema: json!({"type": "object"}),
            strict: true,
            allow_refusal: false,
        };
        let c = Output::Schema {
            name: "A".into(),
            schema: json!({"type": "object"}),
            strict: false,
            allow_refusal: false,
        };
        assert_eq!(a.cache_key(), b.cache_key());
        assert_ne!(a.cache_key(), c.cache_key());
        let refusable = Output::Schema {
            name: "A".into(),
            schema: json!({"type": "object"}),
            strict: true,
            allow_refusal: true,
        };
        assert_ne!(a.cache_key(), refusable.cache_key());
        assert_eq!(Output::Text.cache_key(), None);
    }
}
