//! The Anthropic Messages API (`POST /v1/messages`, what `anthropic.Anthropic().messages.create`
//! and `messages.stream()` call), as a translation onto the Chat Completions pipeline.
//!
//! Owns the Messages wire format and nothing else: [`parse`] reads a request into the same
//! checked [`ChatRequest`] `/v1/chat/completions` builds (so the chat template, the tool
//! grammars, the grammar cache and the worker are shared, and a schema the engine cannot
//! enforce fails closed the same way); [`message`] writes a finished output as a Messages
//! response; [`Events`] writes a streamed one as the SSE events the SDK's stream accumulator
//! folds into the same message (`message_start`, `content_block_start`,
//! `content_block_delta` with `text_delta` / `input_json_delta`, `content_block_stop`,
//! `message_delta`, `message_stop`). Reading a tool call out of the text is
//! [`assemble`](crate::assemble)'s.
//!
//! Mapping: `system` (a string or text blocks) is the system turn; `tool_use` blocks are the
//! assistant's call lines, as the model writes them under the tool grammar; each
//! `tool_result` is a tool turn (`is_error` says the call failed); `tools[].input_schema` are
//! the parameters; `tool_choice` `auto` / `any` / `tool` / `none` are Chat Completions' `auto` /
//! `required` / named / `none`; `output_config.format` (`json_schema`, the SDK's
//! `messages.parse(output_format=…)`) is a `json_schema` response format. `max_tokens` is
//! required, as Anthropic requires it. Like Chat Completions, temperature 0 or absent is greedy.
//! Errors are [`ApiError`]s whose `param` uses Anthropic's dotted paths (`messages.1.content.0`),
//! rendered in Anthropic's shape by the HTTP layer.
//!
//! Not supported, each a 400 rather than a silent approximation: a final assistant message
//! (prefill), image and document blocks, server tools, and `tools` together with
//! `output_config.format`.
//!
//! May use: `error`, `request`, `assemble`, `worker`.

use formwork_core::chat::{Role, Turn};
use formwork_extract::tools::{self, ToolChoice};
use serde_json::{json, Value};

use crate::assemble::{nth_id, read, Answer, Deltas, Piece, Reading};
use crate::error::ApiError;
use crate::request::{
    budget_field, call_line, field, instruct, number_field, object_body, refusal_asked,
    string_field, think_asked, uint_field, ChatRequest, Output,
};
use crate::worker::{Finish, JobEnd};

/// Longest `stop_sequences` list accepted (each is scanned for in every generated piece).
const MAX_STOP_SEQUENCES: usize = 16;

/// Reads a Messages request body (already parsed JSON) into the internal request.
/// `max_tokens_cap` bounds `max_tokens`; `refusals` is the server's default for letting an
/// `output_config.format` answer refuse (a request's `"formwork": {"allow_refusal": bool}`
/// overrides it).
///
/// # Errors
/// A 400 naming the field (Anthropic's dotted path) for a missing or ill-typed field, an
/// unsupported block or tool, or a budget above the cap.
pub fn parse(body: &Value, max_tokens_cap: usize, refusals: bool) -> Result<ChatRequest, ApiError> {
    parse_with(body, max_tokens_cap, refusals, true)
}

/// [`parse`] for `POST /v1/messages/count_tokens`, whose body has no `max_tokens`: the
/// conversation, tools and output format as a Messages request would render them.
///
/// # Errors
/// As [`parse`], less the missing budget.
pub fn parse_count(body: &Value, max_tokens_cap: usize) -> Result<ChatRequest, ApiError> {
    parse_with(body, max_tokens_cap, false, false)
}

fn parse_with(
    body: &Value,
    max_tokens_cap: usize,
    refusals: bool,
    needs_budget: bool,
) -> Result<ChatRequest, ApiError> {
    object_body(body)?;
    let model = string_field(body, "model")?
        .ok_or_else(|| ApiError::invalid("model", "this field is required"))?;
    let max_tokens = budget_field(body, "max_tokens", max_tokens_cap)?;
    if needs_budget && max_tokens.is_none() {
        return Err(ApiError::invalid(
            "max_tokens",
            "this field is required (the Messages API has no default budget)",
        ));
    }
    let mut turns = Vec::new();
    if let Some(system) = field(body, "system") {
        let text = blocks_text(system, "system")?;
        if !text.is_empty() {
            turns.push(Turn::new(Role::System, text));
        }
    }
    turns.extend(parse_messages(body)?);
    let tools = parse_tools(body)?;
    let format = parse_format(body)?;
    let mut output = match (tools, format) {
        (Some(_), Some(_)) => {
            return Err(ApiError::invalid(
                "output_config.format",
                "`tools` together with `output_config.format` is not supported: \
                 use one or the other (or `tool_choice: none`)",
            ))
        }
        (Some(tools), None) => tools,
        (None, Some(schema)) => schema,
        (None, None) => Output::Text,
    };
    let asked = refusal_asked(body)?;
    if let Output::Schema { allow_refusal, .. } = &mut output {
        *allow_refusal = asked.unwrap_or(refusals);
    }
    let stop = match field(body, "stop_sequences") {
        None => Vec::new(),
        Some(Value::Array(a))
            if a.iter().all(Value::is_string) && a.len() <= MAX_STOP_SEQUENCES =>
        {
            a.iter()
                .filter_map(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect()
        }
        Some(_) => {
            return Err(ApiError::invalid(
                "stop_sequences",
                format!("must be an array of at most {MAX_STOP_SEQUENCES} strings"),
            ))
        }
    };
    let stream = match field(body, "stream") {
        None => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(ApiError::invalid("stream", "must be a boolean")),
    };
    // Read so that asking for it here is an error (the Messages reply has no field for it),
    // not silently ignored.
    let think = think_asked(body, &output, max_tokens_cap)?;
    instruct(&mut turns, &output);
    Ok(ChatRequest {
        model,
        turns,
        output,
        max_tokens,
        temperature: number_field(body, "temperature", 0.0, 1.0)?,
        top_p: number_field(body, "top_p", 0.0, 1.0)?,
        top_k: uint_field(body, "top_k")?.map(|k| k as usize),
        seed: None,
        stop,
        stream,
        include_usage: false,
        think,
    })
}

/// The text of `system` or of a `tool_result`'s `content`: a string, or an array of text
/// blocks (joined by newlines).
fn blocks_text(v: &Value, param: &str) -> Result<String, ApiError> {
    match v {
        Value::String(s) => Ok(s.clone()),
        Value::Array(blocks) => {
            let mut parts = Vec::new();
            for (i, b) in blocks.iter().enumerate() {
                match (b.get("type").and_then(Value::as_str), b.get("text")) {
                    (Some("text"), Some(Value::String(t))) => parts.push(t.as_str()),
                    _ => return Err(ApiError::invalid(
                        format!("{param}.{i}"),
                        "only text blocks (`{\"type\": \"text\", \"text\": …}`) are supported here",
                    )),
                }
            }
            Ok(parts.join("\n"))
        }
        _ => Err(ApiError::invalid(
            param,
            "must be a string or an array of text blocks",
        )),
    }
}

/// Appends `text` to the last turn when it has `role`, else starts a turn.
fn push_text(turns: &mut Vec<Turn>, role: Role, text: &str) {
    match turns.last_mut() {
        Some(t) if t.role == role && role != Role::Tool => {
            if !t.content.is_empty() && !text.is_empty() {
                t.content.push('\n');
            }
            t.content.push_str(text);
        }
        _ => turns.push(Turn::new(role, text)),
    }
}

fn parse_messages(body: &Value) -> Result<Vec<Turn>, ApiError> {
    let list = match field(body, "messages") {
        Some(Value::Array(l)) if !l.is_empty() => l,
        Some(Value::Array(_)) => return Err(ApiError::invalid("messages", "must not be empty")),
        Some(_) => return Err(ApiError::invalid("messages", "must be an array")),
        None => return Err(ApiError::invalid("messages", "this field is required")),
    };
    let mut turns: Vec<Turn> = Vec::new();
    for (i, m) in list.iter().enumerate() {
        let at = format!("messages.{i}");
        let role = match m.get("role").and_then(Value::as_str) {
            Some("user") => Role::User,
            Some("assistant") => Role::Assistant,
            _ => {
                return Err(ApiError::invalid(
                    format!("{at}.role"),
                    "must be `user` or `assistant` (the system prompt goes in `system`)",
                ))
            }
        };
        if role == Role::Assistant && i + 1 == list.len() {
            return Err(ApiError::invalid(
                at,
                "a final assistant message (prefill) is not supported: end with a user message",
            ));
        }
        // Each message starts its own turn; its blocks join it, except tool results.
        turns.push(Turn::new(role, ""));
        let at = format!("{at}.content");
        let blocks = match m.get("content") {
            Some(Value::String(s)) => {
                push_text(&mut turns, role, s);
                continue;
            }
            Some(Value::Array(blocks)) => blocks,
            _ => {
                return Err(ApiError::invalid(
                    at,
                    "must be a string or an array of content blocks",
                ))
            }
        };
        for (j, b) in blocks.iter().enumerate() {
            let at = format!("{at}.{j}");
            match (role, b.get("type").and_then(Value::as_str)) {
                (_, Some("text")) => {
                    let text = b.get("text").and_then(Value::as_str).ok_or_else(|| {
                        ApiError::invalid(format!("{at}.text"), "must be a string")
                    })?;
                    push_text(&mut turns, role, text);
                }
                (Role::Assistant, Some("tool_use")) => {
                    let name = b.get("name").and_then(Value::as_str);
                    let input = b.get("input").filter(|v| v.is_object());
                    let (Some(name), Some(input)) = (name, input) else {
                        return Err(ApiError::invalid(
                            at,
                            "a `tool_use` block needs a string `name` and an object `input`",
                        ));
                    };
                    push_text(&mut turns, role, &call_line(name, input));
                }
                (Role::User, Some("tool_result")) => {
                    if !b.get("tool_use_id").is_some_and(Value::is_string) {
                        return Err(ApiError::invalid(
                            format!("{at}.tool_use_id"),
                            "this field is required",
                        ));
                    }
                    let content = match b.get("content").filter(|c| !c.is_null()) {
                        None => String::new(),
                        Some(c) => blocks_text(c, &format!("{at}.content"))?,
                    };
                    let failed = match b.get("is_error").filter(|c| !c.is_null()) {
                        None => false,
                        Some(Value::Bool(e)) => *e,
                        Some(_) => {
                            return Err(ApiError::invalid(
                                format!("{at}.is_error"),
                                "must be a boolean",
                            ))
                        }
                    };
                    let text = if failed {
                        format!("The call failed: {content}")
                    } else {
                        content
                    };
                    turns.push(Turn::new(Role::Tool, text));
                }
                // Reasoning from another model is not this model's to read.
                (Role::Assistant, Some("thinking" | "redacted_thinking")) => {}
                (_, kind) => {
                    return Err(ApiError::invalid(
                        format!("{at}.type"),
                        format!(
                            "`{}` blocks are not supported in {} messages (this server reads \
                             text, and tool_use / tool_result blocks)",
                            kind.unwrap_or("?"),
                            if role == Role::User {
                                "user"
                            } else {
                                "assistant"
                            }
                        ),
                    ))
                }
            }
        }
    }
    // A message made only of tool results leaves its opening turn empty.
    turns.retain(|t| !(t.content.is_empty() && t.role != Role::Tool));
    Ok(turns)
}

/// `tools` and `tool_choice`; `None` without tools or with `tool_choice: none`.
fn parse_tools(body: &Value) -> Result<Option<Output>, ApiError> {
    // Anthropic's default: one or more calls; `disable_parallel_tool_use: true`: at most one.
    let mut parallel = true;
    let choice = match field(body, "tool_choice") {
        None => None,
        Some(c) => {
            let kind = c.get("type").and_then(Value::as_str);
            match c.get("disable_parallel_tool_use") {
                None | Some(Value::Null) => {}
                Some(Value::Bool(d)) => parallel = !d,
                Some(_) => {
                    return Err(ApiError::invalid(
                        "tool_choice.disable_parallel_tool_use",
                        "must be a boolean",
                    ))
                }
            }
            Some(match kind {
                Some("none") => return Ok(None),
                Some("auto") => ToolChoice::Auto,
                Some("any") => ToolChoice::Required,
                Some("tool") => match c.get("name").and_then(Value::as_str) {
                    Some(n) => ToolChoice::Named(n.to_string()),
                    None => {
                        return Err(ApiError::invalid(
                            "tool_choice.name",
                            "this field is required with `type: tool`",
                        ))
                    }
                },
                _ => {
                    return Err(ApiError::invalid(
                        "tool_choice.type",
                        "must be `auto`, `any`, `tool` or `none`",
                    ))
                }
            })
        }
    };
    let list = match field(body, "tools") {
        None => None,
        Some(Value::Array(list)) if list.is_empty() => None,
        Some(Value::Array(list)) => Some(list),
        Some(_) => return Err(ApiError::invalid("tools", "must be an array")),
    };
    let Some(list) = list else {
        if choice.is_some_and(|c| c != ToolChoice::Auto) {
            return Err(ApiError::invalid("tool_choice", "needs `tools`"));
        }
        return Ok(None);
    };
    let mut defs = Vec::new();
    for (i, t) in list.iter().enumerate() {
        if t.get("type").is_some_and(|k| !k.is_null() && k != "custom") {
            return Err(ApiError::invalid(
                format!("tools.{i}.type"),
                "only client tools (`name`, `input_schema`) are supported, not server tools",
            ));
        }
        let schema = t
            .get("input_schema")
            .filter(|s| s.is_object())
            .ok_or_else(|| {
                ApiError::invalid(
                    format!("tools.{i}.input_schema"),
                    "this field is required (a JSON Schema object)",
                )
            })?;
        defs.push(
            json!({"name": t.get("name"), "description": t.get("description"),
            "parameters": schema}),
        );
    }
    let tools = tools::parse_tools(&Value::Array(defs))
        .map_err(|e| ApiError::invalid("tools", e.to_string()))?;
    let choice = choice.unwrap_or(ToolChoice::Auto);
    if let ToolChoice::Named(n) = &choice {
        if !tools.iter().any(|t| &t.name == n) {
            return Err(ApiError::invalid(
                "tool_choice.name",
                format!("`{n}` is not one of `tools`"),
            ));
        }
    }
    Ok(Some(Output::Tools {
        tools,
        choice,
        parallel,
    }))
}

/// `output_config.format`: a JSON Schema the text answer must match.
fn parse_format(body: &Value) -> Result<Option<Output>, ApiError> {
    let Some(format) = field(body, "output_config").and_then(|c| c.get("format")) else {
        return Ok(None);
    };
    if format.is_null() {
        return Ok(None);
    }
    match (
        format.get("type").and_then(Value::as_str),
        format.get("schema"),
    ) {
        (Some("json_schema"), Some(schema @ (Value::Object(_) | Value::Bool(_)))) => {
            Ok(Some(Output::Schema {
                name: "output".into(),
                schema: schema.clone(),
                strict: false,
                allow_refusal: false,
            }))
        }
        _ => Err(ApiError::invalid(
            "output_config.format",
            "must be `{\"type\": \"json_schema\", \"schema\": {…}}`",
        )),
    }
}

/// Why a Messages output stopped.
fn stop_reason(f: &JobEnd, called: bool, refused: bool) -> &'static str {
    match (f.finish, &f.stop_sequence) {
        (Finish::Length, _) => "max_tokens",
        (Finish::Stop, Some(_)) => "stop_sequence",
        _ if called => "tool_use",
        _ if refused => "refusal",
        _ => "end_turn",
    }
}

/// The `content` blocks of an answer; the `i`-th `tool_use` block's id is
/// [`nth_id`]`(tool_id, i)`.
fn content(answer: Answer, tool_id: &str) -> Vec<Value> {
    match answer {
        Answer::Content(text) if text.is_empty() => Vec::new(),
        Answer::Content(text) | Answer::Refusal(text) => {
            vec![json!({"type": "text", "text": text})]
        }
        Answer::Calls(calls) => calls
            .into_iter()
            .enumerate()
            .map(|(i, c)| {
                json!({"type": "tool_use", "id": nth_id(tool_id, i), "name": c.name,
                    "input": c.arguments})
            })
            .collect(),
    }
}

fn usage(input_tokens: usize, output_tokens: usize) -> Value {
    json!({"input_tokens": input_tokens, "output_tokens": output_tokens})
}

/// The Messages response for a finished output `text`: `id` is the message's, `tool_id` a
/// `tool_use` block's.
pub fn message(
    id: &str,
    model: &str,
    reading: Reading,
    text: &str,
    f: &JobEnd,
    tool_id: &str,
) -> Value {
    let answer = read(reading, text);
    let called = matches!(answer, Answer::Calls(_)) && f.finish == Finish::Stop;
    let refused = matches!(answer, Answer::Refusal(_));
    json!({
        "id": id, "type": "message", "role": "assistant", "model": model,
        "content": content(answer, tool_id),
        "stop_reason": stop_reason(f, called, refused),
        "stop_sequence": f.stop_sequence,
        "usage": usage(f.prompt_tokens, f.completion_tokens),
        "formwork": f.extension(),
    })
}

/// The kind of the content block being streamed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Block {
    Text,
    ToolUse,
}

/// Turns streamed text into Messages SSE events: `(event name, data)` pairs.
#[derive(Debug)]
pub struct Events {
    deltas: Deltas,
    tool_id: String,
    /// The open block and its index.
    open: Option<(Block, usize)>,
    /// Blocks started so far.
    blocks: usize,
    refused: bool,
}

/// One SSE event: its `event:` name (the SDK skips events without one) and its data.
pub type SseEvent = (&'static str, Value);

impl Events {
    /// A fresh stream; `tool_id` names a `tool_use` block.
    pub fn new(reading: Reading, tool_id: impl Into<String>) -> Self {
        Events {
            deltas: Deltas::new(reading, ""),
            tool_id: tool_id.into(),
            open: None,
            blocks: 0,
            refused: false,
        }
    }

    /// The `message_start` event: an empty message with the prompt's token count.
    pub fn start(id: &str, model: &str, input_tokens: usize) -> SseEvent {
        (
            "message_start",
            json!({"type": "message_start", "message": {"id": id, "type": "message",
                "role": "assistant", "model": model, "content": [], "stop_reason": null,
                "stop_sequence": null, "usage": usage(input_tokens, 0)}}),
        )
    }

    /// Closes the open block, if any.
    fn close(&mut self, out: &mut Vec<SseEvent>) {
        if let Some((_, index)) = self.open.take() {
            out.push((
                "content_block_stop",
                json!({"type": "content_block_stop", "index": index}),
            ));
        }
    }

    /// Opens a block of `kind` unless one of that kind is open (a tool call, `Some((call
    /// index, name))`, always opens its own); returns its index.
    fn open(&mut self, kind: Block, out: &mut Vec<SseEvent>, call: Option<(usize, &str)>) -> usize {
        match self.open {
            Some((k, index)) if k == kind && call.is_none() => index,
            _ => {
                self.close(out);
                let index = self.blocks;
                self.blocks += 1;
                self.open = Some((kind, index));
                let block = match (kind, call) {
                    (Block::ToolUse, call) => {
                        let (i, name) = call.unwrap_or_default();
                        json!({"type": "tool_use", "id": nth_id(&self.tool_id, i),
                            "name": name, "input": {}})
                    }
                    (Block::Text, _) => json!({"type": "text", "text": ""}),
                };
                out.push((
                    "content_block_start",
                    json!({"type": "content_block_start", "index": index, "content_block": block}),
                ));
                index
            }
        }
    }

    fn events(&mut self, pieces: Vec<Piece>) -> Vec<SseEvent> {
        let mut out = Vec::new();
        for piece in pieces {
            let (index, delta) = match piece {
                Piece::Content(text) | Piece::Refusal(text) if text.is_empty() => continue,
                Piece::Refusal(text) => {
                    self.refused = true;
                    let index = self.open(Block::Text, &mut out, None);
                    (index, json!({"type": "text_delta", "text": text}))
                }
                Piece::Content(text) => {
                    let index = self.open(Block::Text, &mut out, None);
                    (index, json!({"type": "text_delta", "text": text}))
                }
                Piece::CallStart { index, name } => {
                    self.open(Block::ToolUse, &mut out, Some((index, &name)));
                    continue;
                }
                Piece::Args { json, .. } => {
                    let index = self.open(Block::ToolUse, &mut out, None);
                    (
                        index,
                        json!({"type": "input_json_delta", "partial_json": json}),
                    )
                }
            };
            out.push((
                "content_block_delta",
                json!({"type": "content_block_delta", "index": index, "delta": delta}),
            ));
        }
        out
    }

    /// The events for the next piece of text.
    pub fn push(&mut self, text: &str) -> Vec<SseEvent> {
        let pieces = self.deltas.pieces(text);
        self.events(pieces)
    }

    /// The last events: what was held back, the open block's stop, `message_delta` (stop
    /// reason and usage) and `message_stop`.
    pub fn finish(&mut self, f: &JobEnd) -> Vec<SseEvent> {
        let pieces = self.deltas.end();
        let mut out = self.events(pieces);
        self.close(&mut out);
        let called = self.deltas.called && f.finish == Finish::Stop;
        out.push((
            "message_delta",
            json!({"type": "message_delta",
                "delta": {"stop_reason": stop_reason(f, called, self.refused),
                    "stop_sequence": f.stop_sequence},
                "usage": usage(f.prompt_tokens, f.completion_tokens),
                "formwork": f.extension()}),
        ));
        out.push(("message_stop", json!({"type": "message_stop"})));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_ok(v: Value) -> ChatRequest {
        parse(&v, 256, false).unwrap_or_else(|e| panic!("{e:?}"))
    }

    fn base(extra: Value) -> Value {
        let mut body = json!({"model": "m", "max_tokens": 64,
            "messages": [{"role": "user", "content": "hi"}]});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        body
    }

    const SUBMIT: &str = r#"[{"name": "submit_result", "description": "Submit it.",
        "input_schema": {"type": "object", "properties": {"name": {"type": "string"},
        "score": {"type": "number"}}, "required": ["name", "score"]}}]"#;

    #[test]
    fn a_tool_conversation_becomes_the_chat_turns() {
        let tools: Value = serde_json::from_str(SUBMIT).unwrap();
        let r = parse_ok(base(json!({
            "system": [{"type": "text", "text": "Be exact."}],
            "tools": tools, "tool_choice": {"type": "tool", "name": "submit_result"},
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "Score Ann."}]},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1",
                    "name": "submit_result", "input": {"name": "Ann", "score": "high"}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                    "is_error": true, "content": "score must be a number"},
                    {"type": "text", "text": "Try again."}]}]})));
        assert!(matches!(
            &r.output,
            Output::Tools { choice: ToolChoice::Named(n), tools, .. } if n == "submit_result"
                && tools[0].parameters["required"] == json!(["name", "score"])
        ));
        let roles: Vec<Role> = r.turns.iter().map(|t| t.role).collect();
        assert_eq!(
            roles,
            [
                Role::System,
                Role::User,
                Role::Assistant,
                Role::Tool,
                Role::User
            ]
        );
        assert!(r.turns[0].content.starts_with("Be exact.\n\nYou can call"));
        assert_eq!(
            r.turns[2].content,
            r#"{"name":"submit_result","arguments":{"name":"Ann","score":"high"}}"#
        );
        assert_eq!(
            r.turns[3].content,
            "The call failed: score must be a number"
        );
        assert_eq!(r.turns[4].content, "Try again.");
        assert_eq!(r.max_tokens, Some(64));
    }

    #[test]
    fn count_tokens_bodies_need_no_budget() {
        let body = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
        assert!(parse(&body, 256, false).is_err());
        let r = parse_count(&body, 256).unwrap();
        assert_eq!((r.max_tokens, r.turns.len()), (None, 1));
    }

    #[test]
    fn tool_choice_shapes_and_output_config() {
        let tools: Value = serde_json::from_str(SUBMIT).unwrap();
        let choice =
            |c: Value| match parse_ok(base(json!({"tools": tools, "tool_choice": c}))).output {
                Output::Tools { choice, .. } => Some(choice),
                _ => None,
            };
        assert_eq!(choice(json!({"type": "auto"})), Some(ToolChoice::Auto));
        assert_eq!(
            choice(json!({"type": "any", "disable_parallel_tool_use": true})),
            Some(ToolChoice::Required)
        );
        assert_eq!(choice(json!({"type": "none"})), None);
        let r = parse_ok(base(
            json!({"output_config": {"format": {"type": "json_schema",
            "schema": {"type": "object"}}}, "stop_sequences": ["END"], "top_k": 5}),
        ));
        assert!(matches!(r.output, Output::Schema { .. }));
        assert_eq!((r.stop, r.top_k), (vec!["END".to_string()], Some(5)));
    }

    #[test]
    fn bad_requests_are_400s_naming_the_dotted_field() {
        let tools: Value = serde_json::from_str(SUBMIT).unwrap();
        let no_budget = json!({"model": "m", "messages": [{"role": "user", "content": "x"}]});
        let cases = [
            (no_budget, "max_tokens"),
            (base(json!({"max_tokens": 100000})), "max_tokens"),
            (
                base(json!({"messages": [{"role": "system", "content": "x"}]})),
                "messages.0.role",
            ),
            (
                base(json!({"messages": [{"role": "user", "content": [
                {"type": "image", "source": {}}]}]})),
                "messages.0.content.0.type",
            ),
            (
                base(json!({"messages": [{"role": "user", "content": "x"},
                {"role": "assistant", "content": "The answer is"}]})),
                "messages.1",
            ),
            (
                base(json!({"tools": [{"name": "f"}]})),
                "tools.0.input_schema",
            ),
            (
                base(json!({"tools": [{"type": "web_search_20250305", "name": "web_search"}]})),
                "tools.0.type",
            ),
            (
                base(json!({"tools": tools, "tool_choice": {"type": "tool", "name": "nope"}})),
                "tool_choice.name",
            ),
            (base(json!({"tool_choice": {"type": "any"}})), "tool_choice"),
            (base(json!({"temperature": 1.5})), "temperature"),
            (
                base(
                    json!({"tools": tools, "output_config": {"format": {"type": "json_schema",
                "schema": {}}}}),
                ),
                "output_config.format",
            ),
        ];
        for (body, param) in cases {
            let e = parse(&body, 256, false).unwrap_err();
            assert_eq!(e.status, axum::http::StatusCode::BAD_REQUEST, "{body}");
            assert_eq!(e.param.as_deref(), Some(param), "{body}: {}", e.message);
        }
    }

    fn finished(finish: Finish, stop_sequence: Option<&str>) -> JobEnd {
        JobEnd {
            finish,
            closed_early: false,
            duplicate_call_dropped: false,
            dropped_constraints: Vec::new(),
            prompt_tokens: 10,
            completion_tokens: 5,
            reasoning_tokens: 0,
            stop_sequence: stop_sequence.map(str::to_string),
        }
    }

    /// Folds events the way the SDK's `accumulate_event` does: the message from
    /// `message_start`, blocks appended on `content_block_start`, text deltas concatenated,
    /// `input` parsed from the concatenated `partial_json`, stop reason and usage from
    /// `message_delta`.
    fn accumulate(events: &[SseEvent]) -> Value {
        let mut message = Value::Null;
        let mut json_bufs: Vec<String> = Vec::new();
        for (name, data) in events {
            assert_eq!(data["type"], *name, "event name and data type agree");
            match *name {
                "message_start" => message = data["message"].clone(),
                "content_block_start" => {
                    let blocks = message["content"].as_array_mut().unwrap();
                    assert_eq!(data["index"], blocks.len());
                    blocks.push(data["content_block"].clone());
                    json_bufs.push(String::new());
                }
                "content_block_delta" => {
                    let i = data["index"].as_u64().unwrap() as usize;
                    let block = &mut message["content"][i];
                    match data["delta"]["type"].as_str().unwrap() {
                        "text_delta" => {
                            let text = format!(
                                "{}{}",
                                block["text"].as_str().unwrap(),
                                data["delta"]["text"].as_str().unwrap()
                            );
                            block["text"] = json!(text);
                        }
                        "input_json_delta" => {
                            json_bufs[i].push_str(data["delta"]["partial_json"].as_str().unwrap());
                        }
                        other => panic!("delta type {other}"),
                    }
                }
                "content_block_stop" => {
                    let i = data["index"].as_u64().unwrap() as usize;
                    if message["content"][i]["type"] == "tool_use" {
                        message["content"][i]["input"] =
                            serde_json::from_str(&json_bufs[i]).unwrap();
                    }
                }
                "message_delta" => {
                    message["stop_reason"] = data["delta"]["stop_reason"].clone();
                    message["stop_sequence"] = data["delta"]["stop_sequence"].clone();
                    message["usage"]["output_tokens"] = data["usage"]["output_tokens"].clone();
                    // The extension rides on this event; the SDK's accumulator does not copy
                    // it onto the message, this fold does, so the comparison covers it.
                    message["formwork"] = data["formwork"].clone();
                }
                "message_stop" => {}
                other => panic!("event {other}"),
            }
        }
        message
    }

    fn streamed(reading: Reading, text: &str, split: usize, f: &JobEnd) -> Value {
        let mut events = vec![Events::start("msg_1", "m", f.prompt_tokens)];
        let mut e = Events::new(reading, "toolu_1");
        for chunk in text.as_bytes().chunks(split) {
            events.extend(e.push(std::str::from_utf8(chunk).unwrap()));
        }
        events.extend(e.finish(f));
        assert_eq!(events.last().unwrap().0, "message_stop");
        accumulate(&events)
    }

    #[test]
    fn a_streamed_call_accumulates_to_the_non_streamed_message() {
        let call = r#"{"name":"submit_result","arguments":{"name":"Ann","score":2.5}}"#;
        let f = finished(Finish::Stop, None);
        let whole = message("msg_1", "m", Reading::Tools, call, &f, "toolu_1");
        assert_eq!(whole["stop_reason"], "tool_use");
        assert_eq!(
            whole["content"],
            json!([{"type": "tool_use", "id": "toolu_1", "name": "submit_result",
                "input": {"name": "Ann", "score": 2.5}}])
        );
        assert_eq!(
            whole["usage"],
            json!({"input_tokens": 10, "output_tokens": 5})
        );
        for split in [1, 2, 5, 13, 100] {
            assert_eq!(
                streamed(Reading::Tools, call, split, &f),
                whole,
                "split {split}"
            );
        }
    }

    #[test]
    fn text_stop_sequences_budgets_and_refusals() {
        let f = finished(Finish::Stop, Some("END"));
        let whole = message("msg_1", "m", Reading::Content, "Hello.", &f, "t");
        assert_eq!(
            whole["content"],
            json!([{"type": "text", "text": "Hello."}])
        );
        assert_eq!(
            (&whole["stop_reason"], &whole["stop_sequence"]),
            (&json!("stop_sequence"), &json!("END"))
        );
        assert_eq!(streamed(Reading::Content, "Hello.", 2, &f), whole);
        let cut = finished(Finish::Length, None);
        let whole = message("msg_1", "m", Reading::Tools, "Well", &cut, "t");
        assert_eq!(whole["stop_reason"], "max_tokens");
        assert_eq!(streamed(Reading::Tools, "Well", 3, &cut), whole);
        let done = finished(Finish::Stop, None);
        let refusal = r#"{"refusal":"Not in the text."}"#;
        let whole = message("msg_1", "m", Reading::Refusable, refusal, &done, "t");
        assert_eq!(whole["stop_reason"], "refusal");
        assert_eq!(
            whole["content"],
            json!([{"type": "text", "text": "Not in the text."}])
        );
        assert_eq!(streamed(Reading::Refusable, refusal, 4, &done), whole);
        let empty = message("msg_1", "m", Reading::Content, "", &done, "t");
        assert_eq!(
            (&empty["content"], &empty["stop_reason"]),
            (&json!([]), &json!("end_turn"))
        );
        assert_eq!(streamed(Reading::Content, "", 1, &done), empty);
    }
}
