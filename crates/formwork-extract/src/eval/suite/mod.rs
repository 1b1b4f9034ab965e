//! Eval suites: cases read from JSONL, in formwork's own format or in the formats of the data sets
//! in `../shared/data` (SNIPS, BFCL, GSM8K), each read in place.
//!
//! Owns the case types and reading suite files (one reader per line format in `formats`); a
//! bad line is reported with its line number and why ([`CaseError`]) and skipped, never
//! counted as right or wrong. Does not run models or judge outputs beyond
//! [`Case::score`], which applies the case's judging rule to one output.
//!
//! Files: `formats`.
//!
//! formwork's own line format (`evals/*.jsonl`):
//! ```json
//! {"id": "c1", "input": "text or [{\"role\":\"user\",\"content\":\"...\"}]",
//!  "schema": {...} | "tools": [...], "gold": <value>,
//!  "judge": {"kind": "exact"} | "judges": {"/field": {"kind": "numeric", "abs_tol": 0.01}} | "judge": "slots"}
//! ```

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;
use serde_json::Value;

use super::error::EvalError;
use super::judge::{call_verdict, slot_scores, Judge, SlotScores, Verdict};

mod formats;

pub(crate) use formats::bfcl_params;
pub use formats::CaseError;

/// One chat message of a case's input.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Message {
    /// `system`, `user` or `assistant`.
    pub role: String,
    /// The text.
    pub content: String,
}

/// What the model is given.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum Input {
    /// A document or question.
    Text(String),
    /// A chat transcript.
    Messages(Vec<Message>),
}

impl Input {
    /// All the text of the input, for grounding and for number-extraction pitfalls.
    pub fn text(&self) -> String {
        match self {
            Input::Text(t) => t.clone(),
            Input::Messages(m) => m
                .iter()
                .map(|m| m.content.as_str())
                .collect::<Vec<_>>()
                .join("\n"),
        }
    }
}

/// What shape the output must have.
#[derive(Clone, Debug, PartialEq)]
pub enum Target {
    /// A JSON Schema.
    Schema(Value),
    /// A tool list in the OpenAI function format (`[{"name", "description", "parameters"}]`).
    Tools(Vec<Value>),
}

/// How a case's output is scored.
#[derive(Clone, Debug, PartialEq)]
pub enum Scoring {
    /// One judge for the whole output.
    Whole(Judge),
    /// One judge per field, by JSON pointer into gold and output; the case score is the share
    /// of fields judged right.
    Fields(BTreeMap<String, Judge>),
    /// Slot filling: precision/recall/F1 of slot/value pairs; the case is right when exact.
    Slots,
    /// A function call judged as BFCL does: for each acceptable call (`{name: {arg:
    /// [acceptable values]}}`, `""` meaning "may be omitted"), the name matches, no argument is
    /// unknown, and every argument's value is acceptable.
    Call(Vec<Value>),
}

/// One eval case.
#[derive(Clone, Debug, PartialEq)]
pub struct Case {
    /// Unique id within the suite.
    pub id: String,
    /// What the model is given.
    pub input: Input,
    /// What shape the answer must have.
    pub target: Target,
    /// The gold answer.
    pub gold: Value,
    /// How to score.
    pub scoring: Scoring,
    /// The case's group for per-group limits (`--per-intent`): the SNIPS intent; `None` for
    /// suites without groups.
    pub group: Option<String>,
    /// Candidate worked examples for few-shot prompting, as (document, answer): other cases of
    /// the suite, attached by [`attach_examples`](super::run::attach_examples), of which each
    /// configuration shows its `shots`; empty when read.
    pub examples: Vec<(String, Value)>,
}

/// The score of one output of one case.
#[derive(Clone, Debug, PartialEq)]
pub struct CaseScore {
    /// Whether the case counts as right (exact match of the case's rule).
    pub correct: bool,
    /// Field-level accuracy in [0, 1] (1 or 0 for whole-output judges).
    pub field_accuracy: f64,
    /// Slot counts, for slot-filling cases.
    pub slots: Option<SlotScores>,
    /// Why, for failure listings.
    pub reason: String,
}

impl Case {
    /// Scores `output` (the parsed JSON answer; a plain-text answer is a JSON string).
    pub fn score(&self, output: &Value) -> CaseScore {
        let question = self.input.text();
        match &self.scoring {
            Scoring::Whole(j) => {
                let v = j.judge(&self.gold, output, Some(&question));
                CaseScore {
                    correct: v.correct,
                    field_accuracy: f64::from(u8::from(v.correct)),
                    slots: None,
                    reason: v.reason,
                }
            }
            Scoring::Fields(judges) => {
                let mut right = 0;
                let mut reasons = Vec::new();
                for (ptr, j) in judges {
                    let gold = self.gold.pointer(ptr).unwrap_or(&Value::Null);
                    let out = output.pointer(ptr).unwrap_or(&Value::Null);
                    let v = j.judge(gold, out, Some(&question));
                    if v.correct {
                        right += 1;
                    } else {
                        reasons.push(format!("{ptr}: {}", v.reason));
                    }
                }
                let n = judges.len().max(1);
                CaseScore {
                    correct: right == judges.len(),
                    field_accuracy: right as f64 / n as f64,
                    slots: None,
                    reason: if reasons.is_empty() {
                        "all fields right".into()
                    } else {
                        reasons.join("; ")
                    },
                }
            }
            Scoring::Slots => {
                let s = slot_scores(&self.gold, output);
                CaseScore {
                    correct: s.exact(),
                    field_accuracy: s.f1(),
                    slots: Some(s),
                    reason: format!(
                        "{} of {} predicted slots right, {} expected",
                        s.true_positives, s.predicted, s.gold
                    ),
                }
            }
            Scoring::Call(answers) => {
                let verdicts: Vec<Verdict> =
                    answers.iter().map(|a| call_verdict(a, output)).collect();
                let correct = verdicts.iter().any(|v| v.correct);
                let reason = match verdicts.into_iter().find(|v| v.correct == correct) {
                    Some(v) => v.reason,
                    None => "no acceptable answer given".into(),
                };
                CaseScore {
                    correct,
                    field_accuracy: f64::from(u8::from(correct)),
                    slots: None,
                    reason,
                }
            }
        }
    }
}

/// A suite line that could not be read, reported and skipped.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{path}:{line}: {error}")]
pub struct SuiteLineError {
    /// The suite file.
    pub path: String,
    /// 1-based line number.
    pub line: usize,
    /// What is wrong.
    pub error: CaseError,
}

/// Reads a suite file. Returns the cases read and the lines skipped (with line numbers).
/// The format is recognized per line: formwork's own (`judge`/`judges`), SNIPS (`spans`), BFCL
/// (`possible_answer`), GSM8K (`question` + `answer`; the answer object schema is read from the
/// `schema.json` the data set ships beside `test.jsonl`).
pub fn read_suite(path: &Path) -> Result<(Vec<Case>, Vec<SuiteLineError>), EvalError> {
    let text = std::fs::read_to_string(path).map_err(|source| EvalError::Io {
        path: path.display().to_string(),
        source,
    })?;
    let gsm8k_schema = path
        .parent()
        .map(|d| d.join("schema.json"))
        .and_then(|p| std::fs::read_to_string(p).ok())
        .and_then(|s| serde_json::from_str(&s).ok());
    let mut cases = Vec::new();
    let mut errors = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let err = |error| SuiteLineError {
            path: path.display().to_string(),
            line: i + 1,
            error,
        };
        match formats::parse_line(line, gsm8k_schema.as_ref()) {
            Ok(case) if !seen.insert(case.id.clone()) => {
                errors.push(err(CaseError::DuplicateId(case.id)))
            }
            Ok(case) => cases.push(case),
            Err(error) => errors.push(err(error)),
        }
    }
    Ok((cases, errors))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::io::Write;

    fn suite(lines: &[&str]) -> (Vec<Case>, Vec<SuiteLineError>) {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        for l in lines {
            writeln!(f, "{l}").unwrap();
        }
        read_suite(f.path()).unwrap()
    }

    #[test]
    fn io_errors_name_the_file_and_their_cause_once() {
        let missing = Path::new("no-such-suite.jsonl");
        let err = read_suite(missing).unwrap_err();
        let shown = format!("{:#}", anyhow::Error::from(err));
        let cause = std::fs::read(missing).unwrap_err().to_string();
        assert_eq!(
            shown,
            format!("cannot read suite no-such-suite.jsonl: {cause}")
        );
        let err = crate::eval::run::EvalFile::read(Path::new("no-such.toml")).unwrap_err();
        let shown = format!("{:#}", anyhow::Error::from(err));
        assert_eq!(shown, format!("cannot use no-such.toml: {cause}"));
        let err = crate::read_json(Path::new("no-such.json")).unwrap_err();
        let shown = format!("{:#}", anyhow::Error::from(err));
        assert_eq!(shown, format!("cannot read no-such.json: {cause}"));
    }

    #[test]
    fn bad_lines_are_reported_with_line_numbers_and_skipped() {
        let (cases, errors) = suite(&[
            r#"{"id": "ok", "input": "x", "schema": {}, "gold": 1, "judge": {"kind": "exact"}}"#,
            r#"{"id": "broken", "input": "#,
            r#"{"id": "j", "input": "x", "schema": {}, "gold": 1, "judge": {"kind": "fuzzy"}}"#,
            r#"{"id": "nogold", "input": "x", "schema": {}, "judge": {"kind": "exact"}}"#,
            "",
            r#"{"id": "ok", "input": "x", "schema": {}, "gold": 1, "judge": {"kind": "exact"}}"#,
        ]);
        assert_eq!(cases.len(), 1);
        let lines: Vec<usize> = errors.iter().map(|e| e.line).collect();
        assert_eq!(lines, vec![2, 3, 4, 6]);
        assert!(
            errors[0].error.to_string().starts_with("malformed JSON"),
            "{}",
            errors[0]
        );
        assert!(
            errors[1].error.to_string().contains("fuzzy"),
            "{}",
            errors[1]
        );
        assert!(
            errors[2].error.to_string().contains("missing `gold`"),
            "{}",
            errors[2]
        );
        assert!(
            errors[3].error.to_string().contains("duplicate id"),
            "{}",
            errors[3]
        );
    }

    #[test]
    fn field_judges_score_each_field() {
        let (cases, errors) = suite(&[
            r#"{"id": "c", "input": "The course has 5 lessons done of 12.", "schema": {}, "gold": {"done": 5, "total": 12}, "judges": {"/done": {"kind": "exact"}, "/total": {"kind": "exact"}}}"#,
        ]);
        assert!(errors.is_empty(), "{errors:?}");
        let s = cases[0].score(&json!({"done": 5, "total": 11}));
        assert!(!s.correct);
        assert_eq!(s.field_accuracy, 0.5);
        assert!(s.reason.contains("/total"), "{}", s.reason);
        assert!(cases[0].score(&json!({"total": 12, "done": 5})).correct);
    }

    #[test]
    fn bfcl_tools_are_read_as_json_schema_and_compile() {
        let line = r#"{"id": "s0", "messages": [{"role": "user", "content": "area?"}],
            "functions": [{"name": "area", "description": "d", "parameters": {"type": "dict",
              "properties": {"base": {"type": "float"}, "dims": {"type": "tuple",
              "items": {"type": "integer"}}, "x": {"type": "any"}}, "required": ["base"]}}],
            "possible_answer": [{"area": {"base": [10.0]}}]}"#
            .replace('\n', " ");
        let (cases, errors) = suite(&[&line]);
        assert!(errors.is_empty(), "{errors:?}");
        let Target::Tools(tools) = &cases[0].target else {
            panic!("not a tool case")
        };
        let params = &tools[0]["parameters"];
        assert_eq!(
            *params,
            json!({"type": "object", "properties": {"base": {"type": "number"},
                "dims": {"type": "array", "items": {"type": "integer"}}, "x": {}},
                "required": ["base"]})
        );
        formwork_core::schema::compile(params, &formwork_core::schema::CompileOptions::default())
            .unwrap();
    }

    #[test]
    fn bfcl_call_rules() {
        let answers = vec![json!({"area": {"base": [10], "unit": ["units", ""]}})];
        let case = Case {
            id: "b".into(),
            input: Input::Text("".into()),
            target: Target::Tools(vec![]),
            gold: Value::Null,
            scoring: Scoring::Call(answers),
            group: None,
            examples: Vec::new(),
        };
        let ok = |v: Value| case.score(&v).correct;
        assert!(ok(json!({"name": "area", "arguments": {"base": 10}})));
        assert!(ok(
            json!({"name": "area", "arguments": {"base": 10.0, "unit": " Units"}})
        ));
        assert!(!ok(json!({"name": "area", "arguments": {"base": 11}})));
        assert!(
            !ok(json!({"name": "area", "arguments": {}})),
            "base is required"
        );
        assert!(!ok(
            json!({"name": "area", "arguments": {"base": 10, "extra": 1}})
        ));
        assert!(!ok(json!({"name": "volume", "arguments": {"base": 10}})));
        assert!(!ok(json!("area(10)")));
    }

    fn data_dir() -> Option<std::path::PathBuf> {
        let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
        std::env::var_os("FORMWORK_DATA")
            .map(Into::into)
            .into_iter()
            .chain([
                manifest.join("../../../shared/data"),
                "/work/shared/data".into(),
            ])
            .find(|p: &std::path::PathBuf| p.is_dir())
    }

    #[test]
    fn reads_the_shared_data_sets() {
        let Some(dir) = data_dir() else {
            panic!("../shared/data not found; set FORMWORK_DATA");
        };
        let (snips, e) = read_suite(&dir.join("snips/snips_validate.jsonl")).unwrap();
        assert_eq!((snips.len(), e.len()), (700, 0));
        // Gold values are spans of the text.
        let c = &snips[0];
        assert_eq!(c.scoring, Scoring::Slots);
        assert!(c.score(&c.gold).correct);
        let (bfcl, e) = read_suite(&dir.join("bfcl/bfcl_simple_python.jsonl")).unwrap();
        assert_eq!((bfcl.len(), e.len()), (400, 0));
        let right = bfcl.iter().filter(|c| c.score(&c.gold).correct).count();
        assert!(right >= 390, "gold examples judged right: {right} of 400");
        let (gsm, e) = read_suite(&dir.join("gsm8k/test.jsonl")).unwrap();
        assert_eq!((gsm.len(), e.len()), (1319, 0));
        assert!(
            gsm[0]
                .score(&json!({"reasoning": "", "answer": 18}))
                .correct
        );
        assert!(
            !gsm[0]
                .score(&json!({"reasoning": "", "answer": 17}))
                .correct
        );
        // Parallel BFCL categories are refused per line, not scored wrongly.
        let (par, e) = read_suite(&dir.join("bfcl/bfcl_parallel.jsonl")).unwrap();
        assert!(par.len() + e.len() == 200 && !e.is_empty());
    }
}
