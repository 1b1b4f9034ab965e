//! End-to-end extraction on the small model (SmolLM2, named explicitly: the default is the larger
//! Qwen2.5-Coder, too slow for most of these on 2-core CI): constrained outputs always parse and validate,
//! grounded values are substrings, refusal and tool paths, batch with resume, and clear errors
//! for bad inputs (issue 5). Budgets are small (2-core CI): the budget-aware closing keeps
//! outputs valid anyway.

use std::process::Command;
use std::sync::{Arc, Mutex, OnceLock};

use serde_json::{json, Value};

use crate::schema_support::test_limits;
use formwork::extract::batch::{read_records, OutputLog, RecordResult, RecordStatus};
use formwork::extract::run::{Constraint, ExtractConfig, Extractor};
use formwork::extract::tools::{parse_tools, ToolChoice};
use formwork::extract::validate::validate;
use formwork::generate::{GenerateConfig, Generator, LogitsSource};
use formwork::matcher::{CompiledGrammar, Matcher};
use formwork::model::fetch::FetchConfig;
use formwork::model::{Loaded, ModelConfig};
use formwork::schema::{compile, CompileOptions};

/// The registry name of the small model the tests run on.
const SMALL: &str = "smollm2-135m";

/// The small model (SmolLM2-135M), loaded once and shared (tests lock it in turn).
fn model() -> &'static Mutex<Loaded> {
    static M: OnceLock<Mutex<Loaded>> = OnceLock::new();
    M.get_or_init(|| {
        Mutex::new(
            Loaded::load(Some(SMALL), &FetchConfig::new(), &ModelConfig::new())
                .expect("small model loads"),
        )
    })
}

const DOC: &str = "Incident report 2024-03-07. At 14:05 the primary database db-3 ran out of disk \
space and stopped accepting writes. Severity: high. On-call engineer Maria Lopez freed 40 GB by \
removing old WAL archives; service recovered at 14:40. Affected services: checkout, search.";

fn run(constraint: Constraint, cfg: ExtractConfig, doc: &str) -> RecordResult {
    let mut guard = model().lock().unwrap_or_else(|e| e.into_inner());
    let loaded = &mut *guard;
    let (vocab, encode) = (loaded.vocab(), loaded.chat_encoder());
    let mut ex = Extractor::new(
        &mut loaded.model,
        vocab,
        encode,
        loaded.stop.clone(),
        &constraint,
        cfg,
    )
    .expect("extractor");
    ex.extract("t", doc, &mut |_| {})
}

fn budget(max_tokens: usize) -> ExtractConfig {
    ExtractConfig {
        generate: GenerateConfig {
            max_tokens,
            ..Default::default()
        },
        ..Default::default()
    }
}

/// Every constrained output parses and validates: a dozen schemas covering the keyword
/// families the issue lists.
#[test]
fn a_dozen_schemas_all_valid() {
    let schemas = [
        json!({"type": "object", "properties": {"title": {"type": "string"}, "severity": {"enum": ["low", "medium", "high"]}}, "required": ["title", "severity"], "additionalProperties": false}),
        json!({"type": "object", "properties": {"owner": {"type": "object", "properties": {"name": {"type": "string"}, "team": {"type": "string"}}, "required": ["name"], "additionalProperties": false}}, "required": ["owner"], "additionalProperties": false}),
        json!({"type": "object", "properties": {"services": {"type": "array", "items": {"type": "string", "maxLength": 20}, "minItems": 1, "maxItems": 3}}, "required": ["services"], "additionalProperties": false}),
        json!({"type": "object", "properties": {"minutes": {"type": "integer", "minimum": 0, "maximum": 600}}, "required": ["minutes"], "additionalProperties": false}),
        json!({"type": "object", "properties": {"gb": {"type": "number", "minimum": 0, "maximum": 1000}}, "required": ["gb"], "additionalProperties": false}),
        json!({"type": "object", "properties": {"root_cause": {"type": ["string", "null"]}}, "required": ["root_cause"], "additionalProperties": false}),
        json!({"type": "object", "properties": {"host": {"type": "string", "pattern": "^[a-z]+-[0-9]+$"}}, "required": ["host"], "additionalProperties": false}),
        json!({"type": "object", "properties": {"date": {"type": "string", "format": "date"}}, "required": ["date"], "additionalProperties": false}),
        json!({"$defs": {"node": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12}, "children": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2}}, "required": ["name"], "additionalProperties": false}}, "$ref": "#/$defs/node"}),
        json!({"type": "object", "properties": {"resolved": {"type": "boolean"}, "impact": {"const": "writes"}}, "required": ["resolved", "impact"], "additionalProperties": false}),
        json!({"type": "array", "items": {"type": "object", "properties": {"time": {"type": "string", "pattern": "^[0-9]{2}:[0-9]{2}$"}, "event": {"type": "string"}}, "required": ["time", "event"], "additionalProperties": false}, "minItems": 2, "maxItems": 2}),
        json!({"anyOf": [{"type": "object", "properties": {"kind": {"const": "outage"}, "hours": {"type": "integer"}}, "required": ["kind", "hours"], "additionalProperties": false}, {"type": "string", "maxLength": 10}]}),
    ];
    let mut failures = Vec::new();
    for (i, schema) in schemas.iter().enumerate() {
        let r = run(Constraint::Schema(schema.clone()), budget(48), DOC);
        match (&r.status, &r.output) {
            (RecordStatus::Ok, Some(v)) => {
                let errs = validate(schema, v).unwrap();
                if !errs.is_empty() {
                    failures.push(format!("schema {i}: {v} invalid: {errs:?}"));
                }
                assert!(r.tokens <= 48, "schema {i}: {} tokens", r.tokens);
            }
            _ => failures.push(format!("schema {i}: {r:?}")),
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
fn grounded_fields_are_substrings_of_the_document() {
    let schema = json!({
        "type": "object",
        "properties": {
            "evidence": {"type": "string", "x-grounded": true},
            "names": {"type": "array", "items": {"type": "string"}, "maxItems": 2, "x-grounded": true}
        },
        "required": ["evidence", "names"],
        "additionalProperties": false
    });
    let r = run(Constraint::Schema(schema), budget(64), DOC);
    assert_eq!(r.status, RecordStatus::Ok, "{r:?}");
    let v = r.output.unwrap();
    let ev = v["evidence"].as_str().unwrap();
    assert!(!ev.is_empty() && DOC.contains(ev), "{ev:?}");
    for n in v["names"].as_array().unwrap() {
        let n = n.as_str().unwrap();
        assert!(!n.is_empty() && DOC.contains(n), "{n:?}");
    }
}

#[test]
fn refusal_branch_is_a_status_never_invalid() {
    let schema = json!({"type": "object", "properties": {"flight_number": {"type": "string", "pattern": "^[A-Z]{2}[0-9]{3}$"}}, "required": ["flight_number"], "additionalProperties": false});
    let cfg = ExtractConfig {
        allow_refusal: true,
        system: Some(
            "You only answer with JSON. When the document does not contain the requested \
             information, you answer {\"refusal\": \"<why>\"}."
                .into(),
        ),
        ..budget(40)
    };
    let r = run(
        Constraint::Schema(schema.clone()),
        cfg,
        "The weather is nice today.",
    );
    match r.status {
        RecordStatus::Refusal => {
            let v = r.output.unwrap();
            assert!(v["refusal"].is_string(), "{v}");
        }
        RecordStatus::Ok => assert!(validate(&schema, &r.output.unwrap()).unwrap().is_empty()),
        _ => panic!("{r:?}"),
    }
}

#[test]
fn tool_calls_required_and_auto() {
    let tools = parse_tools(&json!([
        {"type": "function", "function": {"name": "page_oncall", "description": "Page the on-call engineer", "parameters": {"type": "object", "properties": {"service": {"type": "string", "maxLength": 20}, "urgent": {"type": "boolean"}}, "required": ["service", "urgent"], "additionalProperties": false}}},
        {"type": "function", "function": {"name": "close_ticket", "parameters": {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"], "additionalProperties": false}}}
    ]))
    .unwrap();
    let r = run(
        Constraint::Tools {
            tools: tools.clone(),
            choice: ToolChoice::Required,
        },
        budget(40),
        DOC,
    );
    assert_eq!(r.status, RecordStatus::Ok, "{r:?}");
    assert_eq!(r.kind.as_deref(), Some("tool_call"));
    let call = r.output.unwrap();
    assert!(["page_oncall", "close_ticket"].contains(&call["name"].as_str().unwrap()));
    assert!(call["arguments"].is_object(), "{call}");

    let r = run(
        Constraint::Tools {
            tools,
            choice: ToolChoice::Auto,
        },
        budget(40),
        DOC,
    );
    assert_eq!(r.status, RecordStatus::Ok, "{r:?}");
    match r.kind.as_deref() {
        Some("tool_call") => assert!(r.output.unwrap()["name"].is_string()),
        Some("text") => assert!(r.output.unwrap().is_string()),
        k => panic!("kind {k:?}"),
    }
}

#[test]
fn batch_resume_and_bad_lines() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.jsonl");
    let output = dir.path().join("out.jsonl");
    std::fs::write(
        &input,
        format!(
            "{}\n{{not json\n{}\n",
            json!({"id": "a", "text": DOC}),
            json!({"id": "b", "text": "Severity low: a typo on the status page."})
        ),
    )
    .unwrap();
    let schema = json!({"type": "object", "properties": {"severity": {"enum": ["low", "medium", "high"]}}, "required": ["severity"], "additionalProperties": false});
    let records = read_records(&input).unwrap();
    let mut guard = model().lock().unwrap_or_else(|e| e.into_inner());
    let loaded = &mut *guard;
    let (vocab, encode) = (loaded.vocab(), loaded.chat_encoder());
    let mut ex = Extractor::new(
        &mut loaded.model,
        vocab,
        encode,
        loaded.stop.clone(),
        &Constraint::Schema(schema),
        budget(16),
    )
    .unwrap();
    // First run: stop after the first record, as if killed.
    {
        let mut log = OutputLog::open(&output, false).unwrap();
        ex.run_batch(&records[..1], &mut log, &mut |_| {}).unwrap();
    }
    let mut log = OutputLog::open(&output, true).unwrap();
    let summary = ex.run_batch(&records, &mut log, &mut |_| {}).unwrap();
    assert_eq!(summary.skipped, 1);
    assert_eq!((summary.ok, summary.error), (1, 1), "{summary:?}");
    // Cache reuse: the second record shares the instruction + schema prefix.
    drop(log);
    let lines: Vec<RecordResult> = std::fs::read_to_string(&output)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let ids: Vec<&str> = lines.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids, ["a", "line-2", "b"]);
    assert_eq!(lines[1].status, RecordStatus::Error);
    assert!(lines[1].error.as_deref().unwrap().contains("line 2"));
    assert_eq!(lines[2].status, RecordStatus::Ok);
}

#[test]
fn prompt_mode_logs_bad_samples() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.jsonl");
    // A budget of 4 tokens cannot hold the object: the baseline's output is invalid.
    let schema = json!({"type": "object", "properties": {"summary": {"type": "string", "minLength": 30}}, "required": ["summary"]});
    let mut guard = model().lock().unwrap_or_else(|e| e.into_inner());
    let loaded = &mut *guard;
    let (vocab, encode) = (loaded.vocab(), loaded.chat_encoder());
    let mut ex = Extractor::new(
        &mut loaded.model,
        vocab,
        encode,
        loaded.stop.clone(),
        &Constraint::Schema(schema),
        ExtractConfig {
            mode: formwork::extract::run::Mode::Prompt,
            ..budget(4)
        },
    )
    .unwrap()
    .with_bad_samples(formwork::extract::batch::BadSamples::open(&bad).unwrap());
    let r = ex.extract("p", DOC, &mut |_| {});
    assert_eq!(r.status, RecordStatus::Invalid, "{r:?}");
    let logged: Value = serde_json::from_str(
        std::fs::read_to_string(&bad)
            .unwrap()
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(logged["id"], "p");
    assert!(!logged["errors"].as_array().unwrap().is_empty());
}

/// `formwork extract` as a process: bad inputs exit 2 with a clear message, before any model
/// is loaded.
#[test]
fn cli_bad_inputs_exit_2_with_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let bad_schema = dir.path().join("bad.json");
    std::fs::write(&bad_schema, "{\"type\": \"object\",\n \"properties\": }").unwrap();
    let bin = env!("CARGO_BIN_EXE_formwork");
    let out = Command::new(bin)
        .args(["extract", "--schema"])
        .arg(&bad_schema)
        .arg(dir.path().join("doc.txt"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad.json:2:"), "{err}");

    let schema = dir.path().join("s.json");
    std::fs::write(&schema, "{\"type\": \"object\"}").unwrap();
    let out = Command::new(bin)
        .args(["extract", "--schema"])
        .arg(&schema)
        .arg(dir.path().join("missing.txt"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("missing.txt"), "{err}");

    let out = Command::new(bin)
        .args(["extract", "--json", "--input"])
        .arg(dir.path().join("nope.jsonl"))
        .arg("--output")
        .arg(dir.path().join("o.jsonl"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("nope.jsonl"));
}

/// The whole CLI on the small model: JSON on stdout, exit 0.
#[test]
fn cli_extracts_json_to_stdout() {
    let dir = tempfile::tempdir().unwrap();
    let schema = dir.path().join("s.json");
    std::fs::write(
        &schema,
        json!({"type": "object", "properties": {"service": {"type": "string", "maxLength": 20}, "severity": {"enum": ["low", "high"]}}, "required": ["service", "severity"], "additionalProperties": false}).to_string(),
    )
    .unwrap();
    let doc = dir.path().join("doc.txt");
    std::fs::write(&doc, DOC).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_formwork"))
        .args([
            "extract",
            "--model",
            SMALL,
            "--max-tokens",
            "32",
            "--schema",
        ])
        .arg(&schema)
        .arg(&doc)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        ["low", "high"].contains(&v["severity"].as_str().unwrap()),
        "{v}"
    );
}

/// A fake model over the real vocabulary: zero logits (so greedy takes the lowest allowed
/// id), recording every token it is fed.
struct Recorder {
    vocab_len: usize,
    fed: Vec<u32>,
}

impl LogitsSource for Recorder {
    fn forward(
        &mut self,
        tokens: &[u32],
        _pos: usize,
    ) -> Result<Vec<f32>, formwork::generate::SourceError> {
        self.fed.extend_from_slice(tokens);
        Ok(vec![0.0; self.vocab_len])
    }
}

/// Issue 5 (fast-forward with canonical tokenization): the forced `{"name":"Maria Lopez"`
/// reaches the model as the tokenizer's own ids for that text, not byte by byte or split at
/// grammar boundaries, and a tail that could merge with what follows is backed off.
#[test]
fn forced_tokens_reach_the_model_as_the_tokenizer_would_split_them() {
    let vocab = model().lock().unwrap_or_else(|e| e.into_inner()).vocab();
    let schema = json!({"type": "object", "properties": {"name": {"const": "Maria Lopez"}, "ok": {"type": "boolean"}}, "required": ["name", "ok"], "additionalProperties": false});
    let grammar = compile(&schema, &CompileOptions::default())
        .unwrap()
        .grammar;
    let cg = Arc::new(CompiledGrammar::new(grammar, vocab.clone(), test_limits()).unwrap());
    let mut m = Matcher::new(cg).unwrap();
    let prompt: Vec<u32> = vocab.tokenize(b"Extract.").iter().map(|t| t.0).collect();
    let mut gen = Generator::new(
        Recorder {
            vocab_len: vocab.vocab_len(),
            fed: Vec::new(),
        },
        vocab.clone(),
    );
    let out = gen
        .generate(&prompt, &mut m, &GenerateConfig::default(), &mut |_| {})
        .unwrap();
    assert!(out.accepted, "{:?}", out.text());
    let text = out.text();
    assert!(text.starts_with(r#"{"name":"Maria Lopez","ok":"#), "{text}");
    // Everything up to the boolean is forced: one forward pass carries it.
    let forced = r#"{"name":"Maria Lopez","ok":"#;
    let canonical = vocab.tokenize(forced.as_bytes());
    assert!(
        out.tokens.starts_with(&canonical[..canonical.len() - 1]),
        "{:?} vs {canonical:?}",
        out.tokens
    );
    assert!(out.forced_tokens >= canonical.len() - 1, "{out:?}");
    // The model was fed the forced text as those canonical ids (the sampled tokens after it
    // are the fake model's choice: lowest allowed id, not canonical by design).
    let fed = &gen.source().fed[prompt.len()..];
    let forced_ids: Vec<u32> = canonical[..canonical.len() - 1]
        .iter()
        .map(|t| t.0)
        .collect();
    assert!(
        fed.starts_with(&forced_ids),
        "fed {fed:?}, canonical {canonical:?}"
    );
}

/// Runs the CLI on the incident document with `args`; returns (exit code, stdout, stderr).
fn cli(args: &[&str]) -> (Option<i32>, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let doc = dir.path().join("doc.txt");
    std::fs::write(&doc, DOC).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_formwork"))
        .args(["extract", "--model", SMALL])
        .args(args)
        .arg(&doc)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `--regex` end to end: the printed output is a JSON string matching the whole regex.
#[test]
fn cli_regex_constrains_the_whole_output() {
    let re = "db-[0-9]+ (high|low)";
    let (code, stdout, stderr) = cli(&["--regex", re, "--max-tokens", "16"]);
    assert_eq!(code, Some(0), "{stderr}");
    let v: Value = serde_json::from_str(&stdout).unwrap();
    let s = v.as_str().unwrap();
    let full = regex_automata::meta::Regex::new(&format!("^(?:{re})$")).unwrap();
    assert!(full.is_match(s), "{s:?}");
}

/// `--lark` end to end: the output is a sentence of OpenAI's arithmetic custom-tool grammar
/// (`INT`s joined by ` + ` and ` * `); a grammar error is bad input (exit 2, before the model
/// loads) naming the file and line:column.
#[test]
fn cli_lark_constrains_the_whole_output() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/lark/openai_math.lark"
    );
    let (code, stdout, stderr) = cli(&["--lark", path, "--max-tokens", "16"]);
    assert_eq!(code, Some(0), "{stderr}");
    let v: Value = serde_json::from_str(&stdout).unwrap();
    let s = v.as_str().unwrap();
    let language = regex_automata::meta::Regex::new("^[0-9]+( [+*] [0-9]+)*$").unwrap();
    assert!(language.is_match(s), "{s:?}");

    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.lark");
    std::fs::write(&bad, "start: item+\nitem: \"a\" | \"b\n").unwrap();
    let (code, stdout, stderr) = cli(&["--lark", bad.to_str().unwrap()]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stdout.is_empty(), "{stdout}");
    assert!(
        stderr.contains("bad.lark") && stderr.contains("unterminated string literal at 2:"),
        "{stderr}"
    );
}

/// `--json` (any JSON value) with `--stream`: stdout is JSON, and the streamed text on stderr
/// is the same value as it was generated.
#[test]
fn cli_any_json_streams_what_it_prints() {
    let (code, stdout, stderr) = cli(&["--json", "--stream", "--max-tokens", "24"]);
    assert_eq!(code, Some(0), "{stderr}");
    let printed: Value = serde_json::from_str(&stdout).unwrap();
    assert!(
        stderr
            .lines()
            .any(|l| serde_json::from_str::<Value>(l).is_ok_and(|v| v == printed)),
        "printed {printed}, stderr {stderr}"
    );
}

/// `--grounded-spans disjoint` end to end: every value is a quote of the document, and the
/// values can be placed in it without overlapping; an unknown rule is a usage error.
#[test]
fn cli_grounded_spans_are_disjoint() {
    let dir = tempfile::tempdir().unwrap();
    let schema = dir.path().join("s.json");
    let field = json!({"type": "string", "x-grounded": true});
    let props: serde_json::Map<String, Value> = ["a", "b", "c", "d"]
        .iter()
        .map(|k| (k.to_string(), field.clone()))
        .collect();
    std::fs::write(
        &schema,
        json!({"type": "object", "properties": props, "additionalProperties": false}).to_string(),
    )
    .unwrap();
    let schema = schema.to_str().unwrap();
    let args = ["--schema", schema, "--max-tokens", "48", "--grounded-spans"];
    let (code, stdout, stderr) = cli(&[&args[..], &["disjoint"]].concat());
    assert_eq!(code, Some(0), "{stderr}");
    let v: Value = serde_json::from_str(&stdout).unwrap();
    let mut values: Vec<&str> = v
        .as_object()
        .unwrap()
        .values()
        .map(|x| x.as_str().unwrap())
        .collect();
    values.sort_by_key(|s| s.len());
    let mut taken: Vec<(usize, usize)> = Vec::new();
    for s in values {
        let span = DOC
            .match_indices(s)
            .map(|(i, _)| (i, i + s.len()))
            .find(|&(a, b)| taken.iter().all(|&(c, d)| b <= c || d <= a));
        taken.push(span.unwrap_or_else(|| panic!("{s:?} overlaps another value of {v}")));
    }
    let (code, _, stderr) = cli(&[&args[..], &["some"]].concat());
    assert_eq!(code, Some(2), "{stderr}");
}
