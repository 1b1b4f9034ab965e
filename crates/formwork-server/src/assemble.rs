//! From generated text to what it says: the final [`Answer`] (content, tool calls or a
//! refusal) and, for `stream: true`, the [`Piece`]s of it as they become certain; with the
//! Chat Completions wire format of both (the `message`, and the chunk deltas the SDK's stream
//! accumulator expects). Other wire formats ([`anthropic`](crate::anthropic),
//! [`responses`](crate::responses)) are built from the same answers and pieces.
//!
//! Owns how tool calls are read out of the output. Under the tool grammar the model writes
//! `{"name":"<tool>","arguments":<object>}` (compact, exactly as
//! [`formwork_extract::compose::call_rule`] spells it), one per line when several calls are
//! allowed, or with `tool_choice: auto` plain text whose first byte is not `{`. A streamed call
//! sends its index, `id`, `type` and `name` once, as soon as the name is complete, then the
//! argument text in fragments; the arguments end where a `}` comes at nesting depth 0 outside a
//! string (the wrapper's), so the wrapper is never sent as part of them. The `i`-th call's id
//! is [`nth_id`] of the request's.
//!
//! A schema request that may refuse ([`Reading::Refusable`]) is content unless the whole output
//! is `{"refusal":"<reason>"}` ([`refusal_reason`]): then the message has `content: null` and
//! `refusal: "<reason>"`, as OpenAI's API answers a refusal, so the SDK's `parse()` sets
//! `message.refusal` instead of parsing it. A stream holds text back while it could still be a
//! refusal (at most the `{"refusal":` head; a refusal is sent whole at the end).
//!
//! May use: nothing else in the crate.

use formwork_extract::compose::refusal_reason;
use serde_json::{json, Value};

/// How the output is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reading {
    /// As message content (text or JSON).
    Content,
    /// As tool calls, or content when it does not start with `{`.
    Tools,
    /// As content, or a refusal when it is a refusal object.
    Refusable,
}

/// How a refusal object starts, as the refusal grammar writes it (compact).
const REFUSAL_HEAD: &str = "{\"refusal\":";

/// One tool call.
#[derive(Clone, Debug, PartialEq)]
pub struct Call {
    /// The tool.
    pub name: String,
    /// Its arguments (valid under its schema when the output completed).
    pub arguments: Value,
}

/// What a finished output says, whatever the wire format.
#[derive(Clone, Debug, PartialEq)]
pub enum Answer {
    /// Message content (text or JSON).
    Content(String),
    /// One or more tool calls, in order.
    Calls(Vec<Call>),
    /// A refusal, with its reason.
    Refusal(String),
}

/// The id of a response's `i`-th tool call: the first has `base` itself (so a single call's
/// id does not depend on whether more were allowed), the others `base_i`.
pub fn nth_id(base: &str, i: usize) -> String {
    if i == 0 {
        base.to_string()
    } else {
        format!("{base}_{i}")
    }
}

/// The calls of a tools output, when the whole of it is calls (one JSON wrapper per line).
fn calls_in(text: &str) -> Option<Vec<Call>> {
    let mut calls = Vec::new();
    for value in serde_json::Deserializer::from_str(text).into_iter::<Value>() {
        let call = value.ok()?;
        let (Some(name), Some(arguments)) = (call["name"].as_str(), call.get("arguments")) else {
            return None;
        };
        calls.push(Call {
            name: name.to_string(),
            arguments: arguments.clone(),
        });
    }
    Some(calls).filter(|c| !c.is_empty())
}

/// Reads a finished output: calls when the tool grammar's wrappers parse, a refusal when a
/// refusable output is exactly a refusal object, else content (also calls cut by the budget,
/// which do not parse).
pub fn read(reading: Reading, text: &str) -> Answer {
    if reading == Reading::Tools && text.starts_with('{') {
        if let Some(calls) = calls_in(text) {
            return Answer::Calls(calls);
        }
    }
    if reading == Reading::Refusable {
        if let Some(reason) = refusal_in(text) {
            return Answer::Refusal(reason);
        }
    }
    Answer::Content(text.to_string())
}

/// The Chat Completions `message` and `finish_reason` of a finished output. `call_id` names
/// the tool calls (see [`nth_id`]).
pub fn message(reading: Reading, text: &str, length: bool, call_id: &str) -> (Value, &'static str) {
    let finish = if length { "length" } else { "stop" };
    match read(reading, text) {
        Answer::Calls(calls) => {
            let calls: Vec<Value> = calls
                .into_iter()
                .enumerate()
                .map(|(i, c)| {
                    json!({"id": nth_id(call_id, i), "type": "function",
                        "function": {"name": c.name, "arguments": c.arguments.to_string()}})
                })
                .collect();
            let m = json!({"role": "assistant", "content": null, "refusal": null,
                "tool_calls": calls});
            (m, if length { "length" } else { "tool_calls" })
        }
        Answer::Refusal(reason) => (
            json!({"role": "assistant", "content": null, "refusal": reason}),
            finish,
        ),
        Answer::Content(text) => (
            json!({"role": "assistant", "content": text, "refusal": null}),
            finish,
        ),
    }
}

/// The reason when the whole of `text` is a refusal object.
fn refusal_in(text: &str) -> Option<String> {
    let v = serde_json::from_str::<Value>(text).ok()?;
    refusal_reason(&v).map(str::to_string)
}

/// Where the argument text of a streamed call is: JSON nesting depth and string state.
#[derive(Debug, Default)]
struct Scan {
    depth: usize,
    in_string: bool,
    escaped: bool,
}

impl Scan {
    /// Advances over `text`; the byte offset of the wrapper's `}` (a `}` at depth 0 outside a
    /// string: the arguments end just before it), if it is in `text`.
    fn end_in(&mut self, text: &str) -> Option<usize> {
        for (i, c) in text.char_indices() {
            if self.in_string {
                match c {
                    _ if self.escaped => self.escaped = false,
                    '\\' => self.escaped = true,
                    '"' => self.in_string = false,
                    _ => {}
                }
                continue;
            }
            match c {
                '}' if self.depth == 0 => return Some(i),
                '"' => self.in_string = true,
                '{' | '[' => self.depth += 1,
                '}' | ']' => self.depth -= 1,
                _ => {}
            }
        }
        None
    }
}

#[derive(Debug)]
enum State {
    /// Nothing seen yet (tools: the first byte decides).
    Start,
    /// Plain content.
    Content,
    /// Text that may still be a refusal, held back.
    Maybe(String),
    /// A call's head, until `,"arguments":`.
    Head(String),
    /// Inside a call's arguments.
    Args(Scan),
    /// After a call's wrapper: a newline and the next call, or the end.
    Between,
}

/// One step of a streamed output, whatever the wire format.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Piece {
    /// Content text.
    Content(String),
    /// Tool call `index` starts: its name is complete (sent once, before any arguments).
    CallStart {
        /// The call's position in the output (0, 1, …).
        index: usize,
        /// The tool.
        name: String,
    },
    /// A fragment of call `index`'s argument text (the fragments concatenate to the
    /// arguments).
    Args {
        /// The call's position in the output.
        index: usize,
        /// The fragment.
        json: String,
    },
    /// A refusal, whole (sent at the end).
    Refusal(String),
}

/// Turns streamed text into [`Piece`]s (and, for Chat Completions, `delta` objects).
#[derive(Debug)]
pub struct Deltas {
    reading: Reading,
    call_id: String,
    state: State,
    /// Calls started so far.
    calls: usize,
    /// Whether a tool call was streamed.
    pub called: bool,
}

const ARGS: &str = ",\"arguments\":";

impl Deltas {
    /// A fresh assembler; `call_id` names streamed tool calls (Chat Completions deltas).
    pub fn new(reading: Reading, call_id: impl Into<String>) -> Self {
        Deltas {
            reading,
            call_id: call_id.into(),
            state: State::Start,
            calls: 0,
            called: false,
        }
    }

    /// The pieces of the next piece of text.
    pub fn pieces(&mut self, text: &str) -> Vec<Piece> {
        let mut out = Vec::new();
        if text.is_empty() {
            return out;
        }
        if let State::Start = self.state {
            self.state = match self.reading {
                Reading::Tools if text.starts_with('{') => State::Head(String::new()),
                Reading::Refusable => State::Maybe(String::new()),
                _ => State::Content,
            };
        }
        match &mut self.state {
            State::Start => {}
            State::Content => out.push(Piece::Content(text.to_string())),
            State::Maybe(held) => {
                held.push_str(text);
                let could_refuse =
                    held.starts_with(REFUSAL_HEAD) || REFUSAL_HEAD.starts_with(held.as_str());
                if !could_refuse {
                    out.push(Piece::Content(std::mem::take(held)));
                    self.state = State::Content;
                }
            }
            State::Head(buf) => {
                buf.push_str(text);
                if let Some(at) = buf.find(ARGS) {
                    let name: String =
                        serde_json::from_str(buf.get(8..at).unwrap_or("\"\"")).unwrap_or_default();
                    let rest = buf[at + ARGS.len()..].to_string();
                    out.push(Piece::CallStart {
                        index: self.calls,
                        name,
                    });
                    self.calls += 1;
                    self.called = true;
                    self.state = State::Args(Scan::default());
                    out.extend(self.pieces(&rest));
                }
            }
            State::Args(scan) => {
                let index = self.calls - 1;
                let end = scan.end_in(text);
                let json = &text[..end.unwrap_or(text.len())];
                if !json.is_empty() {
                    out.push(Piece::Args {
                        index,
                        json: json.to_string(),
                    });
                }
                if let Some(at) = end {
                    self.state = State::Between;
                    out.extend(self.pieces(&text[at + 1..]));
                }
            }
            State::Between => {
                let rest = text.trim_start();
                if rest.starts_with('{') {
                    self.state = State::Head(String::new());
                    out.extend(self.pieces(rest));
                }
            }
        }
        out
    }

    /// The pieces left at the end (a head that never became a call is sent as content when
    /// no call came before it; a later one was cut by the budget).
    pub fn end(&mut self) -> Vec<Piece> {
        match std::mem::replace(&mut self.state, State::Content) {
            State::Head(buf) if self.calls == 0 => vec![Piece::Content(buf)],
            State::Maybe(held) => match refusal_in(&held) {
                Some(reason) => vec![Piece::Refusal(reason)],
                None if held.is_empty() => Vec::new(),
                None => vec![Piece::Content(held)],
            },
            _ => Vec::new(),
        }
    }

    /// The Chat Completions delta of `piece`.
    fn chat_delta(&self, piece: Piece) -> Value {
        match piece {
            Piece::Content(text) => json!({"content": text}),
            Piece::CallStart { index, name } => {
                json!({"tool_calls": [{"index": index, "id": nth_id(&self.call_id, index),
                "type": "function", "function": {"name": name, "arguments": ""}}]})
            }
            Piece::Args { index, json } => {
                json!({"tool_calls": [{"index": index, "function": {"arguments": json}}]})
            }
            Piece::Refusal(reason) => json!({"refusal": reason}),
        }
    }

    /// The Chat Completions deltas for the next piece of text.
    pub fn push(&mut self, text: &str) -> Vec<Value> {
        let pieces = self.pieces(text);
        pieces.into_iter().map(|p| self.chat_delta(p)).collect()
    }

    /// The Chat Completions deltas left at the end.
    pub fn finish(&mut self) -> Vec<Value> {
        let pieces = self.end();
        pieces.into_iter().map(|p| self.chat_delta(p)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Calls = Vec<(String, String, String)>;

    /// Accumulates deltas the way the SDK does: content concatenated, a call's fields set
    /// once (by its index), its arguments concatenated.
    fn accumulate(deltas: &[Value]) -> (String, Calls) {
        let mut content = String::new();
        let mut calls: Calls = Vec::new();
        for d in deltas {
            if let Some(c) = d["content"].as_str() {
                content.push_str(c);
            }
            if let Some(tc) = d["tool_calls"].get(0) {
                let i = tc["index"].as_u64().unwrap() as usize;
                if let Some(id) = tc["id"].as_str() {
                    assert_eq!(i, calls.len(), "calls start in index order, once each");
                    calls.push((
                        id.into(),
                        tc["function"]["name"].as_str().unwrap().into(),
                        String::new(),
                    ));
                }
                calls[i]
                    .2
                    .push_str(tc["function"]["arguments"].as_str().unwrap());
            }
        }
        (content, calls)
    }

    fn stream(reading: Reading, pieces: &[&str]) -> Vec<Value> {
        let mut d = Deltas::new(reading, "call_1");
        let mut out: Vec<Value> = pieces.iter().flat_map(|p| d.push(p)).collect();
        out.extend(d.finish());
        out
    }

    #[test]
    fn a_streamed_call_sends_its_name_once_then_argument_fragments() {
        let full = r#"{"name":"sum","arguments":{"numbers":[1,2.5]}}"#;
        for split in [1, 3, 7, 12] {
            let pieces: Vec<String> = full
                .as_bytes()
                .chunks(split)
                .map(|c| String::from_utf8(c.to_vec()).unwrap())
                .collect();
            let refs: Vec<&str> = pieces.iter().map(String::as_str).collect();
            let (content, calls) = accumulate(&stream(Reading::Tools, &refs));
            assert_eq!(content, "");
            assert_eq!(
                calls,
                [(
                    "call_1".into(),
                    "sum".into(),
                    r#"{"numbers":[1,2.5]}"#.into()
                )]
            );
        }
        let (m, finish) = message(Reading::Tools, full, false, "call_1");
        assert_eq!(finish, "tool_calls");
        assert_eq!(
            m["tool_calls"][0]["function"]["arguments"],
            r#"{"numbers":[1,2.5]}"#
        );
        assert_eq!(m["content"], Value::Null);
    }

    #[test]
    fn parallel_calls_stream_with_their_own_index_and_id() {
        // Braces and quotes inside strings must not end the arguments early.
        let first = r#"{"name":"note","arguments":{"text":"a } \" { ] [","n":[{"k":1}]}}"#;
        let second = r#"{"name":"sum","arguments":{"numbers":[1,2]}}"#;
        let full = format!("{first}\n{second}");
        for split in [1, 2, 5, 9, 200] {
            let pieces: Vec<String> = full
                .as_bytes()
                .chunks(split)
                .map(|c| String::from_utf8(c.to_vec()).unwrap())
                .collect();
            let refs: Vec<&str> = pieces.iter().map(String::as_str).collect();
            let (content, calls) = accumulate(&stream(Reading::Tools, &refs));
            assert_eq!(content, "", "split {split}");
            assert_eq!(
                calls,
                [
                    (
                        "call_1".into(),
                        "note".into(),
                        r#"{"text":"a } \" { ] [","n":[{"k":1}]}"#.into()
                    ),
                    (
                        "call_1_1".into(),
                        "sum".into(),
                        r#"{"numbers":[1,2]}"#.into()
                    )
                ],
                "split {split}"
            );
        }
        let (m, finish) = message(Reading::Tools, &full, false, "call_1");
        assert_eq!(finish, "tool_calls");
        let calls = m["tool_calls"].as_array().unwrap();
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[1]["id"], "call_1_1");
        assert_eq!(calls[1]["function"]["arguments"], r#"{"numbers":[1,2]}"#);
        // A second call cut by the budget: the output is not calls.
        let cut = format!("{first}\n{{\"name\":\"sum\",\"argu");
        assert!(matches!(read(Reading::Tools, &cut), Answer::Content(_)));
    }

    #[test]
    fn a_refusal_is_a_refusal_not_content_whole_or_streamed() {
        let refusal = r#"{"refusal":"I cannot tell from the text."}"#;
        let (m, finish) = message(Reading::Refusable, refusal, false, "c");
        assert_eq!(m["content"], Value::Null);
        assert_eq!(m["refusal"], "I cannot tell from the text.");
        assert_eq!(finish, "stop");
        let pieces = ["{\"ref", "usal\":\"I cannot", " tell from the text.\"}"];
        let deltas = stream(Reading::Refusable, &pieces);
        assert_eq!(
            deltas,
            vec![json!({"refusal": "I cannot tell from the text."})]
        );
        // An answer that is not a refusal streams as content, held back only while it could
        // still become one.
        let answer = stream(Reading::Refusable, &["{\"re", "sult\":", "1}"]);
        assert_eq!(answer[0], json!({"content": "{\"result\":"}), "{answer:?}");
        let (content, _) = accumulate(&answer);
        assert_eq!(content, "{\"result\":1}");
        let (m, _) = message(Reading::Refusable, "{\"result\":1}", false, "c");
        assert_eq!(
            (m["content"].as_str(), &m["refusal"]),
            (Some("{\"result\":1}"), &Value::Null)
        );
    }

    #[test]
    fn text_under_auto_and_json_content_stream_as_content() {
        let (content, calls) = accumulate(&stream(Reading::Tools, &["The ", "sum is 3."]));
        assert_eq!((content.as_str(), calls), ("The sum is 3.", vec![]));
        let (content, calls) = accumulate(&stream(Reading::Content, &["{\"a\"", ":1}"]));
        assert_eq!((content.as_str(), calls), ("{\"a\":1}", vec![]));
        let (m, finish) = message(Reading::Content, "{\"a\":1}", false, "x");
        assert_eq!((m["content"].as_str(), finish), (Some("{\"a\":1}"), "stop"));
        assert_eq!(message(Reading::Content, "ab", true, "x").1, "length");
    }
}
