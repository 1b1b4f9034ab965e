//! Prompts for extraction, and reading JSON out of free model text (the baselines).
//!
//! Owns the default extraction prompt (instruction + schema + document, in that order so the
//! part shared by every record of a batch is a prefix whose KV cache can be reused), the
//! `--prompt-template` placeholders, worked examples shown before the document (few-shot
//! prompting, [`Example`]), the correction turn of `--mode retry`, and [`parse_output`] (strip code fences, find the JSON, parse). Does not own chat templates:
//! the model's template wraps the text built here.
//!
//! May use: nothing else in the crate.

use serde_json::Value;

/// The default instruction, before the schema.
pub const DEFAULT_INSTRUCTION: &str = "Extract the information from the document below as a \
JSON value that follows this JSON Schema. Answer with the JSON only.";

/// The default instruction for any JSON value (`--json`: no schema to follow).
pub const JSON_INSTRUCTION: &str = "Extract the information from the document below as a \
JSON value. Answer with the JSON only.";

/// The default instruction for a regex constraint, before the regex.
pub const REGEX_INSTRUCTION: &str = "Extract the information from the document below as text \
that matches this regular expression as a whole. Answer with the text only.";

/// The default instruction for a grammar constraint (the grammar is not shown: its source
/// text is not kept, and the decoder holds the answer to it anyway).
pub const GRAMMAR_INSTRUCTION: &str = "Extract the information from the document below. \
Answer with the extracted text only.";

/// What the answer is, for the default prompt's wording when no schema or tools are given
/// (issue 20: regex and grammar constraints were asked for "a JSON value that follows this
/// JSON Schema", with no schema shown).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Answer<'a> {
    /// JSON: valid against [`PromptParts::schema`] when there is one, else any JSON value.
    #[default]
    Json,
    /// Text matching this regex as a whole (the regex is shown).
    Regex(&'a str),
    /// Text of a grammar.
    Grammar,
}

impl Answer<'_> {
    /// Whether the answer is JSON (the think instruction says "the JSON answer" then).
    pub fn is_json(&self) -> bool {
        matches!(self, Answer::Json)
    }
}

/// A worked example shown in the prompt before the document: a document and its answer, as
/// the answer text the model should produce (see [`order_like_schema`] for putting an object's
/// keys in the order a constrained decoder emits them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Example {
    /// The example's document.
    pub document: String,
    /// The answer, as the exact text the model should write (compact JSON).
    pub answer: String,
}

/// Writes `value` as compact JSON with each object's keys in the order its schema lists them
/// under `properties` (keys the schema does not list keep their place after the listed
/// ones), recursing through `properties` and `items`: the order a constrained decoder emits
/// them in, so a worked example shows the model the shape it will be held to.
pub fn order_like_schema(value: &Value, schema: &Value) -> String {
    fn reorder(v: &Value, s: &Value) -> Value {
        match v {
            Value::Object(o) => {
                let props = s.get("properties").and_then(Value::as_object);
                let sub = |k: &str| props.and_then(|p| p.get(k)).unwrap_or(&Value::Null);
                let mut out = serde_json::Map::new();
                for k in props.into_iter().flat_map(|p| p.keys()) {
                    if let Some(x) = o.get(k) {
                        out.insert(k.clone(), reorder(x, sub(k)));
                    }
                }
                for (k, x) in o {
                    if !out.contains_key(k) {
                        out.insert(k.clone(), reorder(x, sub(k)));
                    }
                }
                Value::Object(out)
            }
            Value::Array(a) => {
                let items = s.get("items").unwrap_or(&Value::Null);
                Value::Array(a.iter().map(|x| reorder(x, items)).collect())
            }
            other => other.clone(),
        }
    }
    reorder(value, schema).to_string()
}

/// What a prompt is built from.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PromptParts<'a> {
    /// The schema text (pretty or compact JSON), if any.
    pub schema: Option<&'a str>,
    /// Tool descriptions, if tools are given.
    pub tools: Option<&'a str>,
    /// The schema's top-level property names, comma-separated, if it lists any.
    pub keys: Option<&'a str>,
    /// What the answer is (the wording without a schema or tools).
    pub answer: Answer<'a>,
    /// Whether a refusal is allowed (the prompt then says how to refuse).
    pub allow_refusal: bool,
    /// Worked examples, shown before the document.
    pub examples: &'a [Example],
    /// The document.
    pub document: &'a str,
}

/// The `{examples}` text: one `Request: "<document>"` / `Answer: <answer>` pair per example,
/// each followed by a blank line.
fn render_examples(examples: &[Example]) -> String {
    let mut out = String::new();
    for e in examples {
        out.push_str(&format!(
            "Request: \"{}\"\nAnswer: {}\n\n",
            e.document, e.answer
        ));
    }
    out
}

/// A user-message template with `{schema}`, `{keys}` (the schema's top-level property names),
/// `{tools}`, `{examples}` and `{document}` placeholders (`{{`/`}}` for literal braces).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PromptTemplate {
    text: String,
}

impl PromptTemplate {
    /// A template from its text. Errors on an unknown `{placeholder}` or an unclosed brace.
    pub fn new(text: &str) -> Result<Self, TemplateError> {
        let t = PromptTemplate {
            text: text.to_string(),
        };
        t.render_with(&PromptParts::default())?;
        Ok(t)
    }

    /// The default template: instruction, schema (or tools), document.
    pub fn default_template() -> Self {
        PromptTemplate {
            text: String::new(),
        }
    }

    /// The user message for `parts`.
    pub fn render(&self, parts: &PromptParts<'_>) -> String {
        self.render_with(parts)
            .unwrap_or_else(|_| default_prompt(parts))
    }

    fn render_with(&self, parts: &PromptParts<'_>) -> Result<String, TemplateError> {
        if self.text.is_empty() {
            return Ok(default_prompt(parts));
        }
        let at =
            |rest: &str, kind| TemplateError::at(&self.text, self.text.len() - rest.len(), kind);
        let mut out = String::new();
        let mut rest = self.text.as_str();
        while let Some(i) = rest.find(['{', '}']) {
            out.push_str(&rest[..i]);
            let r = &rest[i..];
            if r.starts_with("{{") || r.starts_with("}}") {
                out.push_str(&r[..1]);
                rest = &r[2..];
                continue;
            }
            if r.starts_with('}') {
                return Err(at(r, TemplateErrorKind::UnmatchedClose));
            }
            let end = r
                .find('}')
                .ok_or_else(|| at(r, TemplateErrorKind::UnclosedOpen))?;
            match &r[1..end] {
                "schema" => out.push_str(parts.schema.unwrap_or("")),
                "keys" => out.push_str(parts.keys.unwrap_or("")),
                "tools" => out.push_str(parts.tools.unwrap_or("")),
                "document" => out.push_str(parts.document),
                "examples" => out.push_str(&render_examples(parts.examples)),
                other => {
                    return Err(at(
                        r,
                        TemplateErrorKind::UnknownPlaceholder(other.to_string()),
                    ))
                }
            }
            rest = &r[end + 1..];
        }
        out.push_str(rest);
        Ok(out)
    }
}

/// A prompt template that cannot be used, with the line:column (1-based, in characters) of the
/// offending brace.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("prompt template {line}:{column}: {kind}")]
pub struct TemplateError {
    /// 1-based line.
    pub line: usize,
    /// 1-based column, in characters.
    pub column: usize,
    /// What is wrong.
    pub kind: TemplateErrorKind,
}

/// What is wrong with a prompt template.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TemplateErrorKind {
    /// A `}` that closes nothing.
    #[error("unmatched `}}` (write `}}}}` for a literal brace)")]
    UnmatchedClose,
    /// A `{` never closed.
    #[error("unclosed `{{` (write `{{{{` for a literal brace)")]
    UnclosedOpen,
    /// A placeholder the renderer does not know.
    #[error(
        "unknown placeholder `{{{0}}}` (known: {{schema}}, {{keys}}, {{tools}}, {{examples}}, \
         {{document}})"
    )]
    UnknownPlaceholder(String),
}

impl TemplateError {
    fn at(text: &str, offset: usize, kind: TemplateErrorKind) -> Self {
        let before = &text[..offset];
        let line = before.matches('\n').count() + 1;
        let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
        TemplateError { line, column, kind }
    }
}

fn default_prompt(parts: &PromptParts<'_>) -> String {
    let mut out = String::new();
    if let Some(tools) = parts.tools {
        out.push_str(
            "You can call one of these tools. To call one, answer with JSON only: \
             {\"name\": <tool name>, \"arguments\": <arguments object>}.\n\nTools:\n",
        );
        out.push_str(tools);
    } else if let Some(s) = parts.schema {
        out.push_str(DEFAULT_INSTRUCTION);
        out.push_str("\n\nSchema:\n");
        out.push_str(s);
    } else {
        match parts.answer {
            Answer::Json => out.push_str(JSON_INSTRUCTION),
            Answer::Regex(re) => {
                out.push_str(REGEX_INSTRUCTION);
                out.push_str("\n\nRegular expression:\n");
                out.push_str(re);
            }
            Answer::Grammar => out.push_str(GRAMMAR_INSTRUCTION),
        }
    }
    if parts.allow_refusal {
        out.push_str(
            "\n\nIf the document does not contain the information, answer \
             {\"refusal\": \"<the reason>\"} instead.",
        );
    }
    if !parts.examples.is_empty() {
        out.push_str("\n\nExamples:\n\n");
        out.push_str(render_examples(parts.examples).trim_end());
    }
    out.push_str("\n\nDocument:\n");
    out.push_str(parts.document);
    out
}

/// The trigger that ends the reasoning by default (`extract --think`, eval `think`).
pub const DEFAULT_THINK_TRIGGER: &str = "Answer:";

/// What think-then-answer appends to the user message: reason first in plain text, then write
/// `trigger` and the answer ("the JSON answer" unless `answer` is text). The answer after the
/// trigger is decoded under the grammar; the reasoning before it is free.
///
/// It comes after the prompt's own instruction, which ends "Answer with the JSON only." in the
/// default prompt, so it says that the answer waits (issue 19): asked only to "first think it
/// through", Qwen2.5-Coder-0.5B obeyed the earlier sentence and wrote the trigger at once (an
/// empty reasoning on 13 of 16 GSM8K dev problems), which made think-then-answer the
/// constrained answer alone.
pub fn think_instruction(trigger: &str, answer: Answer<'_>) -> String {
    let (first, what) = if answer.is_json() {
        ("the JSON", "the JSON answer")
    } else {
        ("the answer", "the answer")
    };
    format!(
        "\n\nDo not write {first} yet. Start with \"Reasoning:\" and think it through step by \
         step in plain text, in a few short sentences. Only then write \"{trigger}\" followed by \
         {what}."
    )
}

/// The user message of the correction round of `--mode retry`: the first prompt, the previous
/// answer and what was wrong with it.
pub fn retry_prompt(first: &str, previous: &str, errors: &[String]) -> String {
    let mut out = String::from(first);
    out.push_str("\n\nYour previous answer was:\n");
    out.push_str(previous);
    out.push_str("\n\nIt is not valid:\n");
    for e in errors {
        out.push_str("- ");
        out.push_str(e);
        out.push('\n');
    }
    out.push_str("Answer again with corrected JSON only.");
    out
}

/// Reads a JSON value out of a model's free text: the contents of the first code fence if
/// there is one, else the text from the first `{` or `[` to the matching last `}` or `]`.
/// The error says why nothing parsed.
pub fn parse_output(text: &str) -> Result<Value, OutputParseError> {
    let body = strip_fences(text);
    let trimmed = body.trim();
    if let Ok(v) = serde_json::from_str::<Value>(trimmed) {
        return Ok(v);
    }
    let start = trimmed.find(['{', '[']).ok_or(OutputParseError::NoJson)?;
    let close = if trimmed.as_bytes()[start] == b'{' {
        '}'
    } else {
        ']'
    };
    trimmed
        .rfind(close)
        .filter(|&e| e > start)
        .ok_or(OutputParseError::Unterminated { close, start })
        .and_then(|end| {
            serde_json::from_str(&trimmed[start..=end])
                .map_err(|e| OutputParseError::Malformed(e.to_string()))
        })
}

/// Why no JSON value could be read out of a model's text ([`parse_output`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OutputParseError {
    /// The text has no `{` or `[`.
    #[error("no JSON object or array in the output")]
    NoJson,
    /// The text opens a value that is never closed.
    #[error("unterminated JSON: no `{close}` after byte {start}")]
    Unterminated {
        /// The closing bracket looked for.
        close: char,
        /// Byte offset of the opening bracket in the trimmed text.
        start: usize,
    },
    /// The bracketed text is not JSON (serde_json's message, with line and column).
    #[error("malformed JSON: {0}")]
    Malformed(String),
}

fn strip_fences(text: &str) -> &str {
    let Some(open) = text.find("```") else {
        return text;
    };
    let after = &text[open + 3..];
    // Skip an info string such as `json`.
    let body_start = after.find('\n').map_or(after.len(), |i| i + 1);
    let body = &after[body_start..];
    match body.find("```") {
        Some(close) => &body[..close],
        None => body,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn default_prompt_puts_the_document_last() {
        let p = PromptTemplate::default_template().render(&PromptParts {
            schema: Some("{\"type\":\"object\"}"),
            document: "DOC",
            allow_refusal: true,
            ..Default::default()
        });
        assert!(p.starts_with(DEFAULT_INSTRUCTION));
        assert!(p.ends_with("Document:\nDOC"));
        assert!(p.contains("refusal"));
        let a = PromptTemplate::default_template().render(&PromptParts {
            document: "one",
            ..Default::default()
        });
        let b = PromptTemplate::default_template().render(&PromptParts {
            document: "two",
            ..Default::default()
        });
        assert_eq!(a.len(), b.len());
    }

    /// Issue 19: the think instruction follows a prompt that ends "Answer with the JSON only.",
    /// and asked only to "first think it through", Qwen2.5-Coder-0.5B wrote the trigger at once
    /// (an empty reasoning on all 16 GSM8K dev problems, 200-215). The instruction must
    /// countermand the earlier sentence: the answer waits, the reasoning opens the reply.
    #[test]
    fn the_think_instruction_defers_the_answer_the_prompt_asked_for() {
        let prompt = PromptTemplate::default_template().render(&PromptParts {
            schema: Some("{\"type\":\"object\"}"),
            document: "DOC",
            ..Default::default()
        });
        assert!(prompt.contains("Answer with the JSON only."), "{prompt}");
        for (answer, what) in [(Answer::Json, "the JSON"), (Answer::Grammar, "the answer")] {
            let think = think_instruction("Answer:", answer);
            assert!(
                think.contains(&format!("Do not write {what} yet.")),
                "{think}"
            );
            let reason = think
                .find("Start with \"Reasoning:\"")
                .expect("reasoning first");
            let trigger = think.find("write \"Answer:\"").expect("then the trigger");
            assert!(reason < trigger, "{think}");
        }
    }

    /// The schema prompt, byte for byte: eval results depend on it, so a change must be
    /// deliberate (issue 20 reworded only the prompts without a schema).
    #[test]
    fn the_schema_prompt_is_unchanged() {
        let p = PromptTemplate::default_template().render(&PromptParts {
            schema: Some("{\"type\":\"string\"}"),
            document: "DOC",
            ..Default::default()
        });
        assert_eq!(
            p,
            "Extract the information from the document below as a JSON value that follows \
             this JSON Schema. Answer with the JSON only.\n\nSchema:\n{\"type\":\"string\"}\n\n\
             Document:\nDOC"
        );
        assert_eq!(
            think_instruction("Answer:", Answer::Json),
            "\n\nDo not write the JSON yet. Start with \"Reasoning:\" and think it through step \
             by step in plain text, in a few short sentences. Only then write \"Answer:\" \
             followed by the JSON answer."
        );
    }

    /// Issue 20: without a schema the prompt said "follows this JSON Schema" (and showed
    /// none) whatever the constraint; now the wording fits it, and the regex is shown.
    #[test]
    fn prompts_without_a_schema_fit_the_constraint() {
        let render = |answer| {
            PromptTemplate::default_template().render(&PromptParts {
                answer,
                document: "DOC",
                ..Default::default()
            })
        };
        let json = render(Answer::Json);
        assert_eq!(json, format!("{JSON_INSTRUCTION}\n\nDocument:\nDOC"));
        let re = render(Answer::Regex("[A-Z]{2}-\\d+"));
        assert_eq!(
            re,
            format!(
                "{REGEX_INSTRUCTION}\n\nRegular expression:\n[A-Z]{{2}}-\\d+\n\nDocument:\nDOC"
            )
        );
        let g = render(Answer::Grammar);
        assert_eq!(g, format!("{GRAMMAR_INSTRUCTION}\n\nDocument:\nDOC"));
        for p in [&json, &re, &g] {
            assert!(!p.contains("Schema"), "{p}");
        }
        for p in [&re, &g] {
            assert!(!p.contains("JSON"), "{p}");
        }
        let think = think_instruction("Answer:", Answer::Grammar);
        assert!(
            think.ends_with("write \"Answer:\" followed by the answer."),
            "{think}"
        );
    }

    #[test]
    fn templates_fill_placeholders_and_reject_unknown_ones() {
        let t = PromptTemplate::new("S={schema} {{x}} K={keys} D={document}").unwrap();
        let p = t.render(&PromptParts {
            schema: Some("s"),
            keys: Some("a, b"),
            document: "d",
            ..Default::default()
        });
        assert_eq!(p, "S=s {x} K=a, b D=d");
        let err = PromptTemplate::new("{doc}").unwrap_err().to_string();
        assert!(err.contains("unknown placeholder `{doc}`"), "{err}");
        let err = PromptTemplate::new("Schema:\n  {schema").unwrap_err();
        assert_eq!((err.line, err.column), (2, 3), "{err}");
        assert_eq!(err.kind, TemplateErrorKind::UnclosedOpen);
        let err = PromptTemplate::new("a } b").unwrap_err();
        assert_eq!(
            err.to_string(),
            "prompt template 1:3: unmatched `}` (write `}}` for a literal brace)"
        );
    }

    #[test]
    fn examples_render_in_templates_and_the_default_prompt() {
        let ex = [Example {
            document: "add Yesterday".into(),
            answer: "{\"track\":\"Yesterday\"}".into(),
        }];
        let t = PromptTemplate::new("{examples}Request: \"{document}\"").unwrap();
        let p = t.render(&PromptParts {
            examples: &ex,
            document: "d",
            ..Default::default()
        });
        assert_eq!(
            p,
            "Request: \"add Yesterday\"\nAnswer: {\"track\":\"Yesterday\"}\n\nRequest: \"d\""
        );
        let p = PromptTemplate::default_template().render(&PromptParts {
            examples: &ex,
            document: "DOC",
            ..Default::default()
        });
        assert!(p.contains("Examples:\n\nRequest: \"add Yesterday\""), "{p}");
        assert!(p.ends_with("Document:\nDOC"));
    }

    #[test]
    fn examples_follow_the_schema_property_order() {
        let schema = json!({"properties": {
            "b": {}, "a": {"items": {"properties": {"y": {}, "x": {}}}}
        }});
        let v = json!({"z": 0, "a": [{"x": 1, "y": 2}], "b": 3});
        assert_eq!(
            order_like_schema(&v, &schema),
            r#"{"b":3,"a":[{"y":2,"x":1}],"z":0}"#
        );
    }

    #[test]
    fn parses_fenced_and_chatty_outputs() {
        assert_eq!(
            parse_output("```json\n{\"a\": 1}\n```").unwrap(),
            json!({"a": 1})
        );
        assert_eq!(
            parse_output("Sure! Here it is: {\"a\": [1]} Hope it helps.").unwrap(),
            json!({"a": [1]})
        );
        assert_eq!(parse_output(" [1,2] ").unwrap(), json!([1, 2]));
        assert_eq!(parse_output("no json here"), Err(OutputParseError::NoJson));
        assert!(parse_output("{\"a\": ")
            .unwrap_err()
            .to_string()
            .contains("unterminated"));
        assert!(matches!(
            parse_output("{\"a\" 1}"),
            Err(OutputParseError::Malformed(_))
        ));
    }

    #[test]
    fn retry_prompt_lists_errors() {
        let p = retry_prompt("Q", "{}", &["/name: missing".into()]);
        assert!(p.starts_with("Q\n\n"));
        assert!(p.contains("- /name: missing\n"));
    }
}
