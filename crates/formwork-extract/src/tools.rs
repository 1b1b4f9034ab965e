//! Tool definitions (OpenAI function format) and the tool-choice policy.
//!
//! Owns reading a tools file (`[{"type": "function", "function": {"name", "description",
//! "parameters"}}]`, or the bare `{"name", "parameters"}` objects) and [`ToolChoice`]. The grammar
//! of a call is built by [`compose`](super::compose); validation of a call by
//! [`validate_call`], which checks the arguments with the crate's one validator.
//!
//! May use: `validate`.

use std::str::FromStr;

use serde_json::Value;

use super::validate::validate;
use super::ExtractError;

/// One tool the model may call.
#[derive(Clone, Debug, PartialEq)]
pub struct Tool {
    /// The function name.
    pub name: String,
    /// What it does (shown in the prompt).
    pub description: Option<String>,
    /// JSON Schema of the arguments (`{"type": "object"}` when absent).
    pub parameters: Value,
}

/// Which outputs are allowed when tools are given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToolChoice {
    /// A call to any tool, or a plain-text answer.
    Auto,
    /// A call to any tool.
    Required,
    /// A call to this tool.
    Named(String),
}

impl FromStr for ToolChoice {
    type Err = std::convert::Infallible;

    /// `auto`, `required`, or a tool name.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "auto" => ToolChoice::Auto,
            "required" => ToolChoice::Required,
            name => ToolChoice::Named(name.to_string()),
        })
    }
}

/// Parses a tools document. Errors name the JSON pointer of the bad entry.
pub fn parse_tools(v: &Value) -> Result<Vec<Tool>, ExtractError> {
    let bad = |pointer: String, message: &str| ExtractError::Tools {
        pointer,
        message: message.to_string(),
    };
    let list = v
        .as_array()
        .ok_or_else(|| bad("".into(), "expected an array of tool definitions"))?;
    if list.is_empty() {
        return Err(bad("".into(), "the tool list is empty"));
    }
    let mut tools: Vec<Tool> = Vec::new();
    for (i, t) in list.iter().enumerate() {
        let (f, at) = match t.get("function") {
            Some(f) => (f, format!("/{i}/function")),
            None => (t, format!("/{i}")),
        };
        let name = f
            .get("name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            .ok_or_else(|| bad(format!("{at}/name"), "missing or empty tool name"))?;
        if tools.iter().any(|t| t.name == name) {
            return Err(bad(format!("{at}/name"), "duplicate tool name"));
        }
        let parameters = match f.get("parameters") {
            None => serde_json::json!({"type": "object"}),
            Some(p @ (Value::Object(_) | Value::Bool(_))) => p.clone(),
            Some(_) => return Err(bad(format!("{at}/parameters"), "not a JSON Schema")),
        };
        tools.push(Tool {
            name: name.to_string(),
            description: f
                .get("description")
                .and_then(Value::as_str)
                .map(str::to_string),
            parameters,
        });
    }
    Ok(tools)
}

/// The tools a choice allows.
pub fn allowed<'t>(tools: &'t [Tool], choice: &ToolChoice) -> Result<Vec<&'t Tool>, ExtractError> {
    match choice {
        ToolChoice::Auto | ToolChoice::Required => Ok(tools.iter().collect()),
        ToolChoice::Named(n) => match tools.iter().find(|t| &t.name == n) {
            Some(t) => Ok(vec![t]),
            None => Err(ExtractError::Tools {
                pointer: String::new(),
                message: format!(
                    "--tool-choice names `{n}`, which is not a tool (tools: {})",
                    tools
                        .iter()
                        .map(|t| t.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            }),
        },
    }
}

/// Checks a call object `{"name", "arguments"}` against the allowed tools: the errors, each
/// prefixed by the JSON pointer it is about (empty when valid).
pub fn validate_call(call: &Value, tools: &[&Tool]) -> Vec<String> {
    let Some(name) = call.get("name").and_then(Value::as_str) else {
        return vec!["/name: missing tool name".into()];
    };
    let Some(tool) = tools.iter().find(|t| t.name == name) else {
        return vec![format!("/name: `{name}` is not an allowed tool")];
    };
    let Some(args) = call.get("arguments") else {
        return vec!["/arguments: missing".into()];
    };
    let mut errs = validate(&tool.parameters, args).unwrap_or_else(|e| vec![e.to_string()]);
    for e in &mut errs {
        *e = format!("/arguments{e}");
    }
    errs
}

/// The tools as text for the prompt: one line per tool with its parameters schema.
pub fn describe(tools: &[&Tool]) -> String {
    let mut out = String::new();
    for t in tools {
        out.push_str(&format!(
            "- {}: {} parameters: {}\n",
            t.name,
            t.description.as_deref().unwrap_or(""),
            t.parameters
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_both_shapes_and_names_bad_entries() {
        let v = json!([
            {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
            {"name": "ping"}
        ]);
        let tools = parse_tools(&v).unwrap();
        assert_eq!(tools[0].name, "get_weather");
        assert_eq!(tools[1].parameters, json!({"type": "object"}));
        let err = parse_tools(&json!([{"function": {"parameters": {}}}])).unwrap_err();
        assert_eq!(
            err.to_string(),
            "bad tools file at /0/function/name: missing or empty tool name"
        );
        assert!(parse_tools(&json!({})).is_err());
        assert!(parse_tools(&json!([{"name": "a"}, {"name": "a"}])).is_err());
    }

    #[test]
    fn choice_and_validation() {
        let tools = parse_tools(&json!([
            {"name": "add", "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}},
            {"name": "ping"}
        ]))
        .unwrap();
        assert_eq!("auto".parse::<ToolChoice>().unwrap(), ToolChoice::Auto);
        let only = allowed(&tools, &ToolChoice::Named("add".into())).unwrap();
        assert_eq!(only.len(), 1);
        assert!(allowed(&tools, &ToolChoice::Named("nope".into())).is_err());
        let all = allowed(&tools, &ToolChoice::Required).unwrap();
        assert!(validate_call(&json!({"name": "add", "arguments": {"x": 1}}), &all).is_empty());
        let errs = validate_call(&json!({"name": "add", "arguments": {"x": "one"}}), &all);
        assert!(errs[0].starts_with("/arguments/x"), "{errs:?}");
        let errs = validate_call(&json!({"name": "add", "arguments": {"x": 1}}), &all[1..]);
        assert_eq!(errs, ["/name: `add` is not an allowed tool"]);
    }
}
