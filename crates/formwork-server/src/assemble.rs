//! From generated text to what it says: the final [`Answer`] (content, a tool call or a
//! refusal) and, for `stream: true`, the [`Piece`]s of it as they become certain; with the
//! Chat Completions wire format of both (the `message`, and the chunk deltas the SDK's stream
//! accumulator expects). Other wire formats ([`anthropic`](crate::anthropic)) are built from
//! the same answers and pieces.
//!
//! Owns how a tool call is read out of the output. Under the tool grammar the model writes
//! `{"name":"<tool>","arguments":<object>}` (compact, exactly as
//! [`formwork_extract::compose::call_rule`] spells it), or with `tool_choice: auto` plain text
//! whose first byte is not `{`. A streamed call sends `id`, `type` and `name` once, as soon as
//! the name is complete, then the argument text in fragments; the wrapper's closing `}` is held
//! back one byte so it is never sent as part of the arguments.
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
    /// As a tool call, or content when it does not start with `{`.
    Tools,
    /// As content, or a refusal when it is a refusal object.
    Refusable,
}

/// How a refusal object starts, as the refusal grammar writes it (compact).
const REFUSAL_HEAD: &str = "{\"refusal\":";

/// What a finished output says, whatever the wire format.
#[derive(Clone, Debug, PartialEq)]
pub enum Answer {
    /// Message content (text or JSON).
    Content(String),
    /// A tool call: the tool's name and its argument object.
    Call {
        /// The tool.
        name: String,
        /// Its arguments (valid under its schema when the output completed).
        arguments: Value,
    },
    /// A refusal, with its reason.
    Refusal(String),
}

/// Reads a finished output: a call when the tool grammar's wrapper parses, a refusal when a
/// refusable output is exactly a refusal object, else content (also a call cut by the budget,
/// which does not parse).
pub fn read(reading: Reading, text: &str) -> Answer {
    if reading == Reading::Tools && text.starts_with('{') {
        if let Ok(call) = serde_json::from_str::<Value>(text) {
            if let (Some(name), Some(args)) = (call["name"].as_str(), call.get("arguments")) {
                return Answer::Call {
                    name: name.to_string(),
                    arguments: args.clone(),
                };
            }
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
/// the tool call.
pub fn message(reading: Reading, text: &str, length: bool, call_id: &str) -> (Value, &'static str) {
    let finish = if length { "length" } else { "stop" };
    match read(reading, text) {
        Answer::Call { name, arguments } => {
            let m = json!({"role": "assistant", "content": null, "refusal": null,
                "tool_calls": [{"id": call_id, "type": "function",
                    "function": {"name": name, "arguments": arguments.to_string()}}]});
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
    /// Inside the arguments; the last byte held back.
    Args(String),
}

/// One step of a streamed output, whatever the wire format.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Piece {
    /// Content text.
    Content(String),
    /// A tool call starts: its name is complete (sent once, before any arguments).
    CallStart {
        /// The tool.
        name: String,
    },
    /// A fragment of the call's argument text (the fragments concatenate to the arguments).
    Args(String),
    /// A refusal, whole (sent at the end).
    Refusal(String),
}

/// Turns streamed text into [`Piece`]s (and, for Chat Completions, `delta` objects).
#[derive(Debug)]
pub struct Deltas {
    reading: Reading,
    call_id: String,
    state: State,
    /// Whether a tool call was streamed.
    pub called: bool,
}

const ARGS: &str = ",\"arguments\":";

impl Deltas {
    /// A fresh assembler; `call_id` names a streamed tool call (Chat Completions deltas).
    pub fn new(reading: Reading, call_id: impl Into<String>) -> Self {
        Deltas {
            reading,
            call_id: call_id.into(),
            state: State::Start,
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
                    out.push(Piece::CallStart { name });
                    self.called = true;
                    self.state = State::Args(String::new());
                    out.extend(self.pieces(&rest));
                }
            }
            State::Args(held) => {
                held.push_str(text);
                let keep = held.char_indices().last().map(|(i, _)| i).unwrap_or(0);
                if keep > 0 {
                    out.push(Piece::Args(held.drain(..keep).collect()));
                }
            }
        }
        out
    }

    /// The pieces left at the end (a head that never became a call is sent as content).
    pub fn end(&mut self) -> Vec<Piece> {
        match std::mem::replace(&mut self.state, State::Content) {
            State::Head(buf) => vec![Piece::Content(buf)],
            State::Maybe(held) => match refusal_in(&held) {
                Some(reason) => vec![Piece::Refusal(reason)],
                None if held.is_empty() => Vec::new(),
                None => vec![Piece::Content(held)],
            },
            // The held byte is the wrapper's `}`; anything else was cut by the budget.
            State::Args(held) if held != "}" && !held.is_empty() => vec![Piece::Args(held)],
            _ => Vec::new(),
        }
    }

    /// The Chat Completions delta of `piece`.
    fn chat_delta(&self, piece: Piece) -> Value {
        match piece {
            Piece::Content(text) => json!({"content": text}),
            Piece::CallStart { name } => json!({"tool_calls": [{"index": 0, "id": self.call_id,
                "type": "function", "function": {"name": name, "arguments": ""}}]}),
            Piece::Args(frag) => {
                json!({"tool_calls": [{"index": 0, "function": {"arguments": frag}}]})
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

    /// Accumulates deltas the way the SDK does: content concatenated, a call's fields set
    /// once, its arguments concatenated.
    fn accumulate(deltas: &[Value]) -> (String, Option<(String, String, String)>) {
        let mut content = String::new();
        let mut call: Option<(String, String, String)> = None;
        for d in deltas {
            if let Some(c) = d["content"].as_str() {
                content.push_str(c);
            }
            if let Some(tc) = d["tool_calls"].get(0) {
                assert_eq!(tc["index"], 0);
                let c = call.get_or_insert_with(Default::default);
                if let Some(id) = tc["id"].as_str() {
                    assert!(c.0.is_empty(), "id sent twice");
                    c.0 = id.into();
                    c.1 = tc["function"]["name"].as_str().unwrap().into();
                }
                c.2.push_str(tc["function"]["arguments"].as_str().unwrap());
            }
        }
        (content, call)
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
            let (content, call) = accumulate(&stream(Reading::Tools, &refs));
            assert_eq!(content, "");
            assert_eq!(
                call,
                Some((
                    "call_1".into(),
                    "sum".into(),
                    r#"{"numbers":[1,2.5]}"#.into()
                ))
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
        let (content, call) = accumulate(&stream(Reading::Tools, &["The ", "sum is 3."]));
        assert_eq!((content.as_str(), call), ("The sum is 3.", None));
        let (content, call) = accumulate(&stream(Reading::Content, &["{\"a\"", ":1}"]));
        assert_eq!((content.as_str(), call), ("{\"a\":1}", None));
        let (m, finish) = message(Reading::Content, "{\"a\":1}", false, "x");
        assert_eq!((m["content"].as_str(), finish), (Some("{\"a\":1}"), "stop"));
        assert_eq!(message(Reading::Content, "ab", true, "x").1, "length");
    }
}
