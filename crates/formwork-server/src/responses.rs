//! The OpenAI Responses API (`POST /v1/responses`, what `client.responses.create` and
//! `client.responses.parse(text_format=Model)` call), as a translation onto the Chat
//! Completions pipeline.
//!
//! Owns the Responses wire format and nothing else: [`parse`] rewrites a Responses body as the
//! Chat Completions body it means and reads that with [`ChatRequest::parse_with`], so the
//! checks, the chat template, the tool grammars, the grammar cache and the fail-closed 400s
//! are the ones `/v1/chat/completions` has; [`response`] writes a finished output as a
//! `response` object. Reading a tool call out of the text is [`assemble`](crate::assemble)'s.
//!
//! Mapping: `instructions` is a system message; `input` is a user message (a string) or a list
//! of items: messages (`role` user / system / developer / assistant, `content` a string or
//! `input_text` / `output_text` parts), `function_call` items (consecutive ones are one
//! assistant message's tool calls) and `function_call_output` items (tool messages);
//! `text.format` (`text` / `json_object` / `json_schema {name, schema, strict}`) is
//! `response_format`; function `tools` (`{type, name, description, parameters, strict}`) and
//! `tool_choice` (`none` / `auto` / `required` / `{type: "function", name}` /
//! `{type: "allowed_tools", mode, tools}`) are Chat
//! Completions'; `max_output_tokens` is the budget. An error's `param` names the Responses
//! field (`input[2]`, `text.format`, `max_output_tokens`).
//!
//! `stream: true` answers with the named SSE events the SDK's `responses.stream()` folds into
//! a response ([`Events`]): `response.created`, `response.in_progress`, per output item
//! `response.output_item.added`, its text (`response.content_part.added`,
//! `response.output_text.delta` / `.done`, `response.content_part.done`) or arguments
//! (`response.function_call_arguments.delta` / `.done`), `response.output_item.done`, and
//! `response.completed` (`response.incomplete` when the budget cut the output) carrying the
//! same response object a non-streamed request gets.
//!
//! Not supported, each a 400: `previous_response_id` and `conversation` (the server keeps no
//! state), non-function tools, and input parts other than text.
//!
//! May use: `error`, `request`, `assemble`, `worker`.

use serde_json::{json, Map, Value};

use crate::assemble::{nth_id, read, Answer, Deltas, Piece, Reading};
use crate::error::ApiError;
use crate::request::{field, object_body, ChatRequest};
use crate::worker::{Finish, JobEnd};

/// Reads a Responses body (already parsed JSON) into the internal request. `max_tokens_cap`
/// bounds `max_output_tokens`; `refusals` is the server's default for letting a `json_schema`
/// answer refuse.
///
/// # Errors
/// A 400 naming the Responses field for anything [`ChatRequest::parse_with`] refuses, and for
/// the unsupported fields above.
pub fn parse(body: &Value, max_tokens_cap: usize, refusals: bool) -> Result<ChatRequest, ApiError> {
    let chat = to_chat(body)?;
    ChatRequest::parse_with(&chat, max_tokens_cap, refusals).map_err(|e| {
        let param = e.param.clone().unwrap_or_default();
        let renamed = match param.as_str() {
            "response_format" => "text.format".to_string(),
            "max_completion_tokens" => "max_output_tokens".to_string(),
            p => match p.strip_prefix("messages") {
                Some(rest) => format!("input{rest}"),
                None => p.to_string(),
            },
        };
        let mut e = e.rename_param(&param, &renamed);
        if let Some(old) = ["response_format", "max_completion_tokens"]
            .into_iter()
            .find(|old| *old == param)
        {
            e.message = e.message.replace(old, &renamed);
        }
        e
    })
}

/// The text of a Responses content value: a string, or `input_text` / `output_text` parts.
fn parts_text(content: &Value, param: &str) -> Result<String, ApiError> {
    match content {
        Value::String(s) => Ok(s.clone()),
        Value::Array(parts) => {
            let mut out = String::new();
            for (i, p) in parts.iter().enumerate() {
                match (p.get("type").and_then(Value::as_str), p.get("text")) {
                    (Some("input_text" | "output_text" | "text"), Some(Value::String(t))) => {
                        out.push_str(t)
                    }
                    _ => {
                        return Err(ApiError::invalid(
                            format!("{param}[{i}]"),
                            "only text parts (`input_text`, `output_text`) are supported",
                        ))
                    }
                }
            }
            Ok(out)
        }
        _ => Err(ApiError::invalid(
            param,
            "`content` must be a string or an array of text parts",
        )),
    }
}

/// The Chat Completions messages of `input` (after `instructions`).
fn messages(body: &Value) -> Result<Vec<Value>, ApiError> {
    let mut out = Vec::new();
    if let Some(instructions) = field(body, "instructions") {
        let text = parts_text(instructions, "instructions")?;
        out.push(json!({"role": "system", "content": text}));
    }
    let items = match field(body, "input") {
        None => return Err(ApiError::invalid("input", "`input` is required")),
        Some(Value::String(s)) => {
            out.push(json!({"role": "user", "content": s}));
            return Ok(out);
        }
        Some(Value::Array(items)) if !items.is_empty() => items,
        Some(_) => {
            return Err(ApiError::invalid(
                "input",
                "`input` must be a string or a non-empty array of items",
            ))
        }
    };
    for (i, item) in items.iter().enumerate() {
        let at = format!("input[{i}]");
        let kind = item.get("type").and_then(Value::as_str);
        match kind {
            None | Some("message") => {
                let role = item.get("role").and_then(Value::as_str).unwrap_or("");
                let content = match item.get("content") {
                    Some(c) => parts_text(c, &format!("{at}.content"))?,
                    None => String::new(),
                };
                out.push(json!({"role": role, "content": content}));
            }
            Some("function_call") => {
                let (Some(call_id), Some(name), Some(arguments)) = (
                    item.get("call_id").and_then(Value::as_str),
                    item.get("name").and_then(Value::as_str),
                    item.get("arguments").and_then(Value::as_str),
                ) else {
                    return Err(ApiError::invalid(
                        at,
                        "a `function_call` item needs string `call_id`, `name` and `arguments`",
                    ));
                };
                let call = json!({"id": call_id, "type": "function",
                    "function": {"name": name, "arguments": arguments}});
                // Consecutive calls are one assistant turn's calls.
                match out.last_mut() {
                    Some(prev) if prev["role"] == "assistant" && prev["tool_calls"].is_array() => {
                        if let Some(calls) = prev["tool_calls"].as_array_mut() {
                            calls.push(call);
                        }
                    }
                    _ => out.push(json!({"role": "assistant", "content": null,
                        "tool_calls": [call]})),
                }
            }
            Some("function_call_output") => {
                let call_id = item.get("call_id").and_then(Value::as_str);
                let output = item.get("output").ok_or_else(|| {
                    ApiError::invalid(format!("{at}.output"), "`output` is required")
                })?;
                let Some(call_id) = call_id else {
                    return Err(ApiError::invalid(
                        format!("{at}.call_id"),
                        "`call_id` is required",
                    ));
                };
                let output = parts_text(output, &format!("{at}.output"))?;
                out.push(json!({"role": "tool", "tool_call_id": call_id, "content": output}));
            }
            // Reasoning from another model is not this model's to read.
            Some("reasoning") => {}
            Some(other) => {
                return Err(ApiError::invalid(
                    format!("{at}.type"),
                    format!(
                        "`{other}` items are not supported (this server reads messages, \
                         function_call and function_call_output items)"
                    ),
                ))
            }
        }
    }
    Ok(out)
}

/// The Chat Completions body a Responses body means.
fn to_chat(body: &Value) -> Result<Value, ApiError> {
    object_body(body)?;
    for name in ["previous_response_id", "conversation"] {
        if field(body, name).is_some() {
            return Err(ApiError::invalid(
                name,
                format!("`{name}` is not supported: this server keeps no state; send the whole conversation in `input`"),
            ));
        }
    }
    let mut chat = Map::new();
    for name in [
        "model",
        "temperature",
        "top_p",
        "parallel_tool_calls",
        "stream",
        "formwork",
    ] {
        if let Some(v) = field(body, name) {
            chat.insert(name.into(), v.clone());
        }
    }
    chat.insert("messages".into(), Value::Array(messages(body)?));
    if let Some(n) = field(body, "max_output_tokens") {
        chat.insert("max_completion_tokens".into(), n.clone());
    }
    if let Some(format) = field(body, "text").and_then(|t| t.get("format")) {
        let rf = match format.get("type").and_then(Value::as_str) {
            Some("json_schema") => {
                let mut js = Map::new();
                for key in ["name", "schema", "strict", "description"] {
                    if let Some(v) = format.get(key).filter(|v| !v.is_null()) {
                        js.insert(key.into(), v.clone());
                    }
                }
                json!({"type": "json_schema", "json_schema": js})
            }
            _ => format.clone(),
        };
        chat.insert("response_format".into(), rf);
    }
    if let Some(tools) = field(body, "tools") {
        let list = tools
            .as_array()
            .ok_or_else(|| ApiError::invalid("tools", "`tools` must be an array"))?;
        let mut out = Vec::new();
        for (i, t) in list.iter().enumerate() {
            if t.get("type").and_then(Value::as_str) != Some("function") {
                return Err(ApiError::invalid(
                    format!("tools[{i}].type"),
                    "only `function` tools are supported",
                ));
            }
            let mut f = Map::new();
            for key in ["name", "description", "parameters", "strict"] {
                if let Some(v) = t.get(key).filter(|v| !v.is_null()) {
                    f.insert(key.into(), v.clone());
                }
            }
            out.push(json!({"type": "function", "function": f}));
        }
        if !out.is_empty() {
            chat.insert("tools".into(), Value::Array(out));
        }
    }
    if let Some(choice) = field(body, "tool_choice") {
        let c = match choice {
            Value::Object(o) if o.get("type").and_then(Value::as_str) == Some("function") => {
                json!({"type": "function", "function": {"name": o.get("name")}})
            }
            // Responses' `{type, mode, tools: [{type, name}]}` is Chat Completions'
            // `{type, allowed_tools: {mode, tools: [{type, function: {name}}]}}`.
            Value::Object(o) if o.get("type").and_then(Value::as_str) == Some("allowed_tools") => {
                let tools: Vec<Value> = o
                    .get("tools")
                    .and_then(Value::as_array)
                    .map(|l| {
                        l.iter()
                            .map(|t| json!({"type": "function", "function": {"name": t.get("name")}}))
                            .collect()
                    })
                    .unwrap_or_default();
                json!({"type": "allowed_tools",
                    "allowed_tools": {"mode": o.get("mode"), "tools": tools}})
            }
            other => other.clone(),
        };
        chat.insert("tool_choice".into(), c);
    }
    Ok(Value::Object(chat))
}

/// The `response` object for a finished output `text`: `id` is the response's (the output
/// items' ids derive from it); `echo` is [`echo`] of the request.
pub fn response(
    id: &str,
    model: &str,
    created_at: u64,
    reading: Reading,
    text: &str,
    f: &JobEnd,
    echo: &Value,
) -> Value {
    let suffix = id.trim_start_matches("resp_");
    let items: Vec<Value> = match read(reading, text) {
        Answer::Calls(calls) => calls
            .into_iter()
            .enumerate()
            .map(|(i, c)| {
                json!({"id": nth_id(&format!("fc_{suffix}"), i), "type": "function_call",
                    "status": "completed", "call_id": nth_id(&format!("call_{suffix}"), i),
                    "name": c.name, "arguments": c.arguments.to_string()})
            })
            .collect(),
        Answer::Refusal(reason) => vec![json!({"id": format!("msg_{suffix}"), "type": "message",
            "role": "assistant", "status": "completed",
            "content": [{"type": "refusal", "refusal": reason}]})],
        Answer::Content(text) => vec![json!({"id": format!("msg_{suffix}"), "type": "message",
            "role": "assistant",
            "status": if f.finish == Finish::Length { "incomplete" } else { "completed" },
            "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]})],
    };
    let (status, incomplete) = match f.finish {
        Finish::Length => ("incomplete", json!({"reason": "max_output_tokens"})),
        Finish::Stop => ("completed", Value::Null),
    };
    let mut r = envelope(id, model, created_at, status, echo);
    r["incomplete_details"] = incomplete;
    r["output"] = Value::Array(items);
    r["usage"] = json!({"input_tokens": f.prompt_tokens,
        "input_tokens_details": {"cached_tokens": 0}, "output_tokens": f.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": f.prompt_tokens + f.completion_tokens});
    r["formwork"] = f.extension();
    r
}

/// The request fields a response object repeats, with the API's defaults: `instructions`,
/// `max_output_tokens`, `parallel_tool_calls`, `temperature`, `text`, `tool_choice`, `tools`,
/// `top_p`.
pub fn echo(body: &Value) -> Value {
    let mut out = json!({"instructions": null, "max_output_tokens": null,
        "parallel_tool_calls": true, "temperature": null,
        "text": {"format": {"type": "text"}}, "tool_choice": "auto", "tools": [], "top_p": null});
    for (key, slot) in out.as_object_mut().into_iter().flatten() {
        if let Some(v) = field(body, key) {
            *slot = v.clone();
        }
    }
    out
}

/// A `response` object with no output yet; `echo` is [`echo`] of the request.
fn envelope(id: &str, model: &str, created_at: u64, status: &str, echo: &Value) -> Value {
    let mut r = json!({
        "id": id, "object": "response", "created_at": created_at, "status": status,
        "error": null, "incomplete_details": null, "model": model, "output": [],
        "usage": null,
    });
    if let (Some(r), Some(echo)) = (r.as_object_mut(), echo.as_object()) {
        r.extend(echo.clone());
    }
    r
}

/// One SSE event: its `event:` name and its data (whose `type` is the same name).
pub type SseEvent = (String, Value);

/// The output item being streamed.
#[derive(Debug)]
enum Item {
    /// A message: its text so far.
    Message(String),
    /// A function call: its item id, call id, name and arguments so far.
    Call {
        id: String,
        call_id: String,
        name: String,
        arguments: String,
    },
}

/// Turns streamed text into Responses SSE events, numbered in order (`sequence_number`).
#[derive(Debug)]
pub struct Events {
    id: String,
    model: String,
    created_at: u64,
    echo: Value,
    reading: Reading,
    deltas: Deltas,
    /// The whole text, for the final response object.
    text: String,
    open: Option<Item>,
    /// Output items started so far.
    items: usize,
    sequence: u64,
}

impl Events {
    /// A fresh stream for the response `id`; `echo` is [`echo`] of the request.
    pub fn new(id: &str, model: &str, created_at: u64, reading: Reading, echo: Value) -> Self {
        Events {
            id: id.to_string(),
            model: model.to_string(),
            created_at,
            echo,
            reading,
            deltas: Deltas::new(reading, ""),
            text: String::new(),
            open: None,
            items: 0,
            sequence: 0,
        }
    }

    fn event(&mut self, out: &mut Vec<SseEvent>, kind: &str, mut data: Value) {
        data["type"] = json!(kind);
        data["sequence_number"] = json!(self.sequence);
        self.sequence += 1;
        out.push((kind.to_string(), data));
    }

    fn message_id(&self) -> String {
        format!("msg_{}", self.id.trim_start_matches("resp_"))
    }

    /// `response.created` and `response.in_progress`.
    pub fn start(&mut self) -> Vec<SseEvent> {
        let mut out = Vec::new();
        let r = envelope(
            &self.id,
            &self.model,
            self.created_at,
            "in_progress",
            &self.echo,
        );
        self.event(&mut out, "response.created", json!({"response": r}));
        self.event(&mut out, "response.in_progress", json!({"response": r}));
        out
    }

    /// Ends the open item, if any: its `.done` events.
    fn close(&mut self, out: &mut Vec<SseEvent>) {
        let Some(item) = self.open.take() else {
            return;
        };
        let index = self.items - 1;
        match item {
            Item::Message(text) => {
                let item_id = self.message_id();
                let part = json!({"type": "output_text", "text": text, "annotations": [],
                    "logprobs": []});
                let at = json!({"item_id": item_id, "output_index": index, "content_index": 0});
                let mut done = at.clone();
                done["text"] = json!(text);
                done["logprobs"] = json!([]);
                self.event(out, "response.output_text.done", done);
                let mut done = at;
                done["part"] = part.clone();
                self.event(out, "response.content_part.done", done);
                let item = json!({"id": item_id, "type": "message", "role": "assistant",
                    "status": "completed", "content": [part]});
                let data = json!({"output_index": index, "item": item});
                self.event(out, "response.output_item.done", data);
            }
            Item::Call {
                id,
                call_id,
                name,
                arguments,
            } => {
                let data = json!({"item_id": id, "output_index": index, "name": name,
                    "arguments": arguments});
                self.event(out, "response.function_call_arguments.done", data);
                let item = json!({"id": id, "type": "function_call", "status": "completed",
                    "call_id": call_id, "name": name, "arguments": arguments});
                let data = json!({"output_index": index, "item": item});
                self.event(out, "response.output_item.done", data);
            }
        }
    }

    /// Starts a message item unless one is open.
    fn open_message(&mut self, out: &mut Vec<SseEvent>) {
        if matches!(self.open, Some(Item::Message(_))) {
            return;
        }
        self.close(out);
        self.items += 1;
        self.open = Some(Item::Message(String::new()));
        let item_id = self.message_id();
        let index = self.items - 1;
        let item = json!({"id": item_id, "type": "message", "role": "assistant",
            "status": "in_progress", "content": []});
        let data = json!({"output_index": index, "item": item});
        self.event(out, "response.output_item.added", data);
        let data = json!({"item_id": item_id, "output_index": index, "content_index": 0,
            "part": {"type": "output_text", "text": "", "annotations": []}});
        self.event(out, "response.content_part.added", data);
    }

    fn events(&mut self, pieces: Vec<Piece>) -> Vec<SseEvent> {
        let mut out = Vec::new();
        for piece in pieces {
            match piece {
                Piece::Content(text) | Piece::Refusal(text) if text.is_empty() => {}
                // A refusal streams as the text of its message; the final response (read
                // from the whole output) has the refusal part.
                Piece::Content(text) | Piece::Refusal(text) => {
                    self.open_message(&mut out);
                    if let Some(Item::Message(so_far)) = &mut self.open {
                        so_far.push_str(&text);
                    }
                    let data = json!({"item_id": self.message_id(),
                        "output_index": self.items - 1, "content_index": 0, "delta": text,
                        "logprobs": []});
                    self.event(&mut out, "response.output_text.delta", data);
                }
                Piece::CallStart { index: call, name } => {
                    self.close(&mut out);
                    self.items += 1;
                    let suffix = self.id.trim_start_matches("resp_").to_string();
                    let id = nth_id(&format!("fc_{suffix}"), call);
                    let call_id = nth_id(&format!("call_{suffix}"), call);
                    let item = json!({"id": id, "type": "function_call", "status": "in_progress",
                        "call_id": call_id, "name": name, "arguments": ""});
                    let data = json!({"output_index": self.items - 1, "item": item});
                    self.event(&mut out, "response.output_item.added", data);
                    self.open = Some(Item::Call {
                        id,
                        call_id,
                        name,
                        arguments: String::new(),
                    });
                }
                Piece::Args { json, .. } => {
                    let index = self.items - 1;
                    if let Some(Item::Call { id, arguments, .. }) = &mut self.open {
                        arguments.push_str(&json);
                        let data = json!({"item_id": id, "output_index": index, "delta": json});
                        self.event(&mut out, "response.function_call_arguments.delta", data);
                    }
                }
            }
        }
        out
    }

    /// The events for the next piece of text.
    pub fn push(&mut self, text: &str) -> Vec<SseEvent> {
        self.text.push_str(text);
        let pieces = self.deltas.pieces(text);
        self.events(pieces)
    }

    /// The last events: what was held back, the open item's `.done` events, and
    /// `response.completed` (`response.incomplete` when the budget cut the output) with the
    /// response object a non-streamed request gets.
    pub fn finish(&mut self, f: &JobEnd) -> Vec<SseEvent> {
        let pieces = self.deltas.end();
        let mut out = self.events(pieces);
        self.close(&mut out);
        let r = response(
            &self.id,
            &self.model,
            self.created_at,
            self.reading,
            &self.text,
            f,
            &self.echo,
        );
        let kind = match f.finish {
            Finish::Stop => "response.completed",
            Finish::Length => "response.incomplete",
        };
        self.event(&mut out, kind, json!({"response": r}));
        out
    }

    /// The `error` event of a generation that failed after the headers were sent.
    pub fn error(&mut self, e: &ApiError) -> Vec<SseEvent> {
        let mut out = Vec::new();
        let data = json!({"code": e.code, "message": e.message, "param": e.param});
        self.event(&mut out, "error", data);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::Output;
    use formwork_core::chat::Role;
    use formwork_extract::tools::ToolChoice;

    fn parse_ok(v: Value) -> ChatRequest {
        parse(&v, 256, false).unwrap_or_else(|e| panic!("{e:?}"))
    }

    #[test]
    fn a_string_input_with_a_schema_format() {
        let r = parse_ok(
            json!({"model": "m", "input": "Triage this.", "instructions": "Be brief.",
            "max_output_tokens": 64, "text": {"format": {"type": "json_schema", "name": "T",
            "strict": true, "schema": {"type": "object"}}}}),
        );
        assert!(matches!(r.output, Output::Schema { strict: true, ref name, .. } if name == "T"));
        assert_eq!(r.max_tokens, Some(64));
        assert_eq!(r.turns.len(), 2);
        assert_eq!(r.turns[0].role, Role::System);
        assert!(r.turns[0]
            .content
            .starts_with("Be brief.\n\nAnswer with a JSON object `T`"));
        assert_eq!(r.turns[1].content, "Triage this.");
    }

    #[test]
    fn function_calls_and_outputs_become_tool_turns() {
        let r = parse_ok(json!({"model": "m",
            "tools": [{"type": "function", "name": "sum", "strict": true,
                "parameters": {"type": "object"}}],
            "tool_choice": {"type": "function", "name": "sum"},
            "input": [
                {"role": "user", "content": [{"type": "input_text", "text": "add 1 2"}]},
                {"type": "function_call", "call_id": "c1", "name": "sum",
                    "arguments": "{\"numbers\":[1,2]}"},
                {"type": "function_call_output", "call_id": "c1", "output": "3"}]}));
        assert!(matches!(
            &r.output,
            Output::Tools { choice: ToolChoice::Named(n), .. } if n == "sum"
        ));
        let roles: Vec<Role> = r.turns.iter().map(|t| t.role).collect();
        assert_eq!(
            roles,
            [Role::System, Role::User, Role::Assistant, Role::Tool]
        );
        assert_eq!(
            r.turns[2].content,
            r#"{"name":"sum","arguments":{"numbers":[1,2]}}"#
        );
        assert_eq!(r.turns[3].content, "3");
        let r = parse_ok(json!({"model": "m", "input": "x",
            "tools": [{"type": "function", "name": "a"}, {"type": "function", "name": "b"}],
            "tool_choice": {"type": "allowed_tools", "mode": "required",
                "tools": [{"type": "function", "name": "b"}]}}));
        assert!(matches!(
            &r.output,
            Output::Tools { choice: ToolChoice::Required, tools, .. } if tools.len() == 1 && tools[0].name == "b"
        ));
    }

    #[test]
    fn errors_name_the_responses_field() {
        let cases = [
            (json!({"model": "m"}), "input"),
            (
                json!({"model": "m", "input": "x", "max_output_tokens": 100000}),
                "max_output_tokens",
            ),
            (
                json!({"model": "m", "input": "x", "text": {"format": {"type": "xml"}}}),
                "text.format",
            ),
            (
                json!({"model": "m", "input": [{"role": "robot", "content": "x"}]}),
                "input[0].role",
            ),
            (
                json!({"model": "m", "input": [{"role": "user", "content": [
                    {"type": "input_image", "image_url": "x"}]}]}),
                "input[0].content[0]",
            ),
            (
                json!({"model": "m", "input": "x", "tools": [{"type": "web_search"}]}),
                "tools[0].type",
            ),
            (
                json!({"model": "m", "input": "x", "stream": "yes"}),
                "stream",
            ),
            (
                json!({"model": "m", "input": "x", "previous_response_id": "resp_1"}),
                "previous_response_id",
            ),
        ];
        for (body, param) in cases {
            let e = parse(&body, 256, false).unwrap_err();
            assert_eq!(e.status, axum::http::StatusCode::BAD_REQUEST, "{body}");
            assert_eq!(e.param.as_deref(), Some(param), "{body}: {}", e.message);
        }
    }

    /// Folds events the way the SDK's `ResponseStreamState` does (items added by index, text
    /// and argument deltas appended), checks every `.done` item against what was accumulated,
    /// and returns the accumulated output and the final response.
    fn accumulate(events: &[SseEvent]) -> (Vec<Value>, Value) {
        let mut output: Vec<Value> = Vec::new();
        let mut last = Value::Null;
        let append = |v: &mut Value, tail: &Value| {
            *v = json!(format!("{}{}", v.as_str().unwrap(), tail.as_str().unwrap()));
        };
        for (n, (name, data)) in events.iter().enumerate() {
            assert_eq!(data["type"], name.as_str());
            assert_eq!(data["sequence_number"], n);
            let i = data["output_index"].as_u64().unwrap_or(0) as usize;
            match name.as_str() {
                "response.created" | "response.in_progress" => {
                    assert_eq!(data["response"]["status"], "in_progress")
                }
                "response.output_item.added" => {
                    assert_eq!(i, output.len());
                    output.push(data["item"].clone());
                }
                "response.content_part.added" => output[i]["content"]
                    .as_array_mut()
                    .unwrap()
                    .push(data["part"].clone()),
                "response.output_text.delta" => {
                    append(&mut output[i]["content"][0]["text"], &data["delta"])
                }
                "response.function_call_arguments.delta" => {
                    append(&mut output[i]["arguments"], &data["delta"])
                }
                "response.output_item.done" => {
                    let done = &data["item"];
                    assert_eq!(done["id"], output[i]["id"]);
                    if done["type"] == "message" {
                        assert_eq!(done["content"][0]["text"], output[i]["content"][0]["text"]);
                    } else {
                        assert_eq!(done["arguments"], output[i]["arguments"]);
                    }
                    output[i] = done.clone();
                }
                "response.completed" | "response.incomplete" => last = data["response"].clone(),
                _ => {}
            }
        }
        (output, last)
    }

    #[test]
    fn a_stream_accumulates_to_the_non_streamed_response() {
        let f = JobEnd {
            finish: Finish::Stop,
            closed_early: false,
            duplicate_call_dropped: false,
            dropped_constraints: Vec::new(),
            prompt_tokens: 7,
            completion_tokens: 30,
            reasoning_tokens: 0,
            stop_sequence: None,
        };
        let calls = concat!(
            r#"{"name":"sum","arguments":{"numbers":[1]}}"#,
            "\n",
            r#"{"name":"sum","arguments":{"numbers":[2]}}"#
        );
        for (reading, text) in [
            (Reading::Content, r#"{"checks":["a","b"]}"#),
            (Reading::Tools, calls),
        ] {
            let echo = echo(&json!({"max_output_tokens": 64}));
            let whole = response("resp_9", "m", 5, reading, text, &f, &echo);
            for split in [1, 3, 8, 100] {
                let mut e = Events::new("resp_9", "m", 5, reading, echo.clone());
                let mut events = e.start();
                for chunk in text.as_bytes().chunks(split) {
                    events.extend(e.push(std::str::from_utf8(chunk).unwrap()));
                }
                events.extend(e.finish(&f));
                let (output, last) = accumulate(&events);
                assert_eq!(last, whole, "split {split}");
                assert_eq!(Value::Array(output), whole["output"], "split {split}");
            }
        }
    }

    #[test]
    fn outputs_are_message_or_function_call_items() {
        let f = JobEnd {
            finish: Finish::Stop,
            closed_early: false,
            duplicate_call_dropped: false,
            dropped_constraints: Vec::new(),
            prompt_tokens: 7,
            completion_tokens: 3,
            reasoning_tokens: 0,
            stop_sequence: None,
        };
        let request = json!({"input": "x", "max_output_tokens": 9, "instructions": "Be brief.",
            "tools": [{"type": "function", "name": "sum"}]});
        let echoed = echo(&request);
        let r = response("resp_1", "m", 5, Reading::Content, "{\"a\":1}", &f, &echoed);
        assert_eq!(
            (
                &r["max_output_tokens"],
                &r["instructions"],
                &r["tools"],
                &r["tool_choice"]
            ),
            (
                &json!(9),
                &json!("Be brief."),
                &request["tools"],
                &json!("auto")
            )
        );
        assert_eq!(r["object"], "response");
        assert_eq!(r["status"], "completed");
        assert_eq!(
            r["output"][0]["content"],
            json!([{"type": "output_text", "text": "{\"a\":1}", "annotations": [], "logprobs": []}])
        );
        assert_eq!(r["usage"]["total_tokens"], 10);
        let call = r#"{"name":"sum","arguments":{"numbers":[1]}}"#;
        let r = response("resp_2", "m", 5, Reading::Tools, call, &f, &echoed);
        assert_eq!(
            r["output"][0],
            json!({"id": "fc_2", "type": "function_call", "status": "completed",
                "call_id": "call_2", "name": "sum", "arguments": "{\"numbers\":[1]}"})
        );
        let cut = JobEnd {
            finish: Finish::Length,
            ..f
        };
        let r = response("resp_3", "m", 5, Reading::Content, "abc", &cut, &echoed);
        assert_eq!(
            (&r["status"], &r["incomplete_details"]["reason"]),
            (&json!("incomplete"), &json!("max_output_tokens"))
        );
    }
}
