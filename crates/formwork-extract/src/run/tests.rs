//! End-to-end tests of [`run`](super): extractors over a fake model (a byte-level vocabulary
//! whose logits prefer some bytes), one record at a time and in batches.

use std::sync::Arc;

use serde_json::Value;

use super::*;
use crate::batch::{BadLine, BadSamples, Record, RecordResult, RecordStatus};
use crate::prompt::PromptTemplate;
use crate::tools::{self, ToolChoice};
use crate::validate;
use formwork_core::generate::{GenerateConfig, ThinkConfig};
use formwork_core::matcher::{CompiledGrammar, Limits, Matcher};
use formwork_core::schema::{CompileOptions, PropertyOrder};
use formwork_core::toktrie::SyntheticVocab;
use formwork_core::toktrie::{TokEnv, TokenId, Vocab};
use serde_json::json;

// The shared fake model: logits favouring some bytes (byte-level vocabulary, ids =
// bytes), in order of preference.
use formwork_core::generate::testing::FixedLogits;

fn extractor(prefer: &[u8], constraint: &Constraint, cfg: ExtractConfig) -> Extractor<FixedLogits> {
    let vocab = Arc::new(SyntheticVocab::byte_level());
    let source = FixedLogits::preferring(vocab.vocab_len(), prefer.iter().map(|&b| u32::from(b)));
    let encode: ChatEncoder = Arc::new(|_, user| Ok(user.bytes().map(u32::from).collect()));
    Extractor::new(source, vocab, encode, vec![TokenId(256)], constraint, cfg).unwrap()
}

fn cfg(max_tokens: usize) -> ExtractConfig {
    ExtractConfig {
        generate: GenerateConfig {
            max_tokens,
            ..Default::default()
        },
        ..Default::default()
    }
}

const DOC: &str = "Severity \"high\": db-3 was full.";

fn schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "quote": {"type": "string", "x-grounded": true},
            "level": {"type": "integer", "minimum": 1, "maximum": 5}
        },
        "required": ["quote", "level"],
        "additionalProperties": false
    })
}

#[test]
fn constrained_output_is_valid_and_grounded() {
    // The fake model loves "x", which is nowhere in the document: the grounded quote
    // cannot contain it, and the budget closing still finishes the object. The shortest
    // instance, `{"quote":"X","level":1}`, is 24 byte tokens: 14 cannot hold it.
    let mut ex = extractor(b"x\"", &Constraint::Schema(schema()), cfg(14));
    let r = ex.extract("r", DOC, &mut |_| {});
    assert_eq!(r.status, RecordStatus::Incomplete, "{r:?}");
    assert!(r.output.is_none());
    for max in [24, 40] {
        let mut ex = extractor(b"x\"", &Constraint::Schema(schema()), cfg(max));
        let r = ex.extract("r", DOC, &mut |_| {});
        assert_eq!(r.status, RecordStatus::Ok, "{max}: {r:?}");
        let v = r.output.unwrap();
        let q = v["quote"].as_str().unwrap();
        assert!(!q.is_empty() && DOC.contains(q), "{q:?}");
        assert!(validate::validate(&schema(), &v).unwrap().is_empty());
        assert!(r.tokens <= max);
    }
}

/// Think, then answer: the reasoning (here the budget's 6 tokens of the fake model's "x")
/// is reported apart and counted in `tokens`, the output is valid and holds none of it,
/// and the prompt ends with the instruction naming the trigger. A baseline mode cannot
/// think.
#[test]
fn thinking_is_reported_apart_from_a_valid_output() {
    let think = ExtractConfig {
        think: Some(ThinkConfig::new(6, "Answer:")),
        ..cfg(40)
    };
    let mut ex = extractor(b"x\"", &Constraint::Schema(schema()), think.clone());
    let r = ex.extract("r", DOC, &mut |_| {});
    assert_eq!(r.status, RecordStatus::Ok, "{r:?}");
    assert_eq!(r.reasoning.as_deref(), Some("xxxxxx"));
    let v = r.output.unwrap();
    assert!(validate::validate(&schema(), &v).unwrap().is_empty(), "{v}");
    assert!(!v.to_string().contains('x'), "{v}");
    let plain =
        extractor(b"x\"", &Constraint::Schema(schema()), cfg(40)).extract("r", DOC, &mut |_| {});
    assert_eq!(plain.reasoning, None);
    // The answer's tokens plus the reasoning's 6 (the appended trigger is not counted).
    assert!(r.tokens > 6 && r.tokens <= 6 + 40, "{}", r.tokens);
    let prompt = &ex.generator().source().calls[0].0;
    let prompt = String::from_utf8(prompt.iter().map(|&b| b as u8).collect()).unwrap();
    assert!(
        prompt.ends_with(&crate::prompt::think_instruction(
            "Answer:",
            crate::prompt::Answer::Json
        )),
        "{prompt}"
    );
    let baseline = ExtractConfig {
        mode: Mode::Prompt,
        ..think
    };
    let e = Prepared::new(&Constraint::Schema(schema()), &baseline).unwrap_err();
    assert!(e.to_string().contains("constrained"), "{e}");
}

/// Issue 23: over the span automaton's budget, grounded values silently became any
/// substring. The record now says so.
#[test]
fn the_substring_fallback_is_reported_in_the_record() {
    let long = "a ".repeat(3000);
    for (doc, fallback) in [(DOC, false), (long.as_str(), true)] {
        let mut ex = extractor(b"a", &Constraint::Schema(schema()), cfg(30));
        let r = ex.extract("r", doc, &mut |_| {});
        assert_eq!(r.status, RecordStatus::Ok, "{r:?}");
        assert_eq!(r.grounded_substrings, fallback, "{r:?}");
        let line = serde_json::to_string(&r).unwrap();
        assert_eq!(
            line.contains("\"grounded_substrings\":true"),
            fallback,
            "{line}"
        );
    }
}

#[test]
fn quotes_in_the_document_are_escaped_in_grounded_values() {
    // Prefers the bytes of `\"high` so the quote walks through an escaped quote.
    let mut ex = extractor(b"\\\"high", &Constraint::Schema(schema()), cfg(60));
    let r = ex.extract("r", DOC, &mut |_| {});
    assert_eq!(r.status, RecordStatus::Ok, "{r:?}");
    let q = r.output.unwrap()["quote"].as_str().unwrap().to_string();
    assert!(DOC.contains(&q), "{q:?}");
    assert!(q.contains('"'), "{q:?}");
}

#[test]
fn refusal_branch_gives_refusal_status() {
    let c = ExtractConfig {
        allow_refusal: true,
        ..cfg(40)
    };
    let mut ex = extractor(b"r", &Constraint::Schema(schema()), c);
    let r = ex.extract("r", DOC, &mut |_| {});
    assert_eq!(r.status, RecordStatus::Refusal, "{r:?}");
    assert!(r.output.unwrap()["refusal"].is_string());
}

#[test]
fn tools_required_gives_a_valid_call() {
    let tools = tools::parse_tools(&json!([
            {"name": "page", "parameters": {"type": "object", "properties": {"who": {"type": "string", "maxLength": 5}}, "required": ["who"], "additionalProperties": false}},
            {"name": "close", "parameters": {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"], "additionalProperties": false}}
        ]))
        .unwrap();
    for (choice, prefer) in [(ToolChoice::Required, &b"p"[..]), (ToolChoice::Auto, b"H")] {
        let c = Constraint::Tools {
            tools: tools.clone(),
            choice: choice.clone(),
        };
        let mut ex = extractor(prefer, &c, cfg(60));
        let r = ex.extract("t", DOC, &mut |_| {});
        assert_eq!(r.status, RecordStatus::Ok, "{r:?}");
        if choice == ToolChoice::Required {
            assert_eq!(r.kind.as_deref(), Some("tool_call"));
            assert_eq!(r.output.unwrap()["name"], "page");
        } else {
            assert_eq!(r.kind.as_deref(), Some("text"), "{r:?}");
        }
    }
}

/// Issue 20: a request with 500 tools (MCP servers list hundreds) compiles within the
/// default budgets, one sub-grammar per tool under one choice, and decodes a valid call
/// to one of them.
#[test]
fn five_hundred_tools_compile_and_give_a_valid_call() {
    let defs: Vec<Value> = (0..500)
        .map(|i| {
            json!({"name": format!("tool_{i}"), "parameters": {"type": "object",
                    "properties": {
                        "query": {"type": "string", "maxLength": 40},
                        "limit": {"type": "integer", "minimum": 1, "maximum": 100},
                        "mode": {"enum": ["fast", "exact", format!("m{i}")]},
                        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 4}
                    },
                    "required": ["query", "mode"]}})
        })
        .collect();
    let tools = tools::parse_tools(&Value::Array(defs)).unwrap();
    let c = Constraint::Tools {
        tools,
        choice: ToolChoice::Required,
    };
    let mut ex = extractor(b"tool_4", &c, cfg(120));
    let r = ex.extract("t", DOC, &mut |_| {});
    assert_eq!(r.status, RecordStatus::Ok, "{r:?}");
    let call = r.output.unwrap();
    let name = call["name"].as_str().unwrap();
    let i: usize = name.strip_prefix("tool_").unwrap().parse().unwrap();
    assert!(i < 500, "{call}");
    assert!(call["arguments"]["query"].is_string(), "{call}");
    assert!(call["arguments"]["mode"].is_string(), "{call}");
}

#[test]
fn examples_are_shown_in_the_order_the_grammar_will_emit() {
    let answer = json!({"level": 2, "quote": "db-3"});
    let shown = |order: PropertyOrder| {
        let c = ExtractConfig {
            examples: vec![("doc".into(), answer.clone())],
            compile: CompileOptions {
                property_order: order,
                ..CompileOptions::default()
            },
            ..cfg(10)
        };
        let p = Prepared::new(&Constraint::Schema(schema()), &c).unwrap();
        p.examples[0].answer.clone()
    };
    assert_eq!(
        shown(PropertyOrder::Schema),
        r#"{"quote":"db-3","level":2}"#
    );
    assert_eq!(shown(PropertyOrder::Any), r#"{"level":2,"quote":"db-3"}"#);
    assert_eq!(
        shown(PropertyOrder::Window(4)),
        r#"{"level":2,"quote":"db-3"}"#
    );
}

#[test]
fn keys_placeholder_lists_the_schema_properties() {
    let c = ExtractConfig {
        template: PromptTemplate::new("Slots: {keys}.\n{document}").unwrap(),
        ..cfg(10)
    };
    let p = Prepared::new(&Constraint::Schema(schema()), &c).unwrap();
    assert_eq!(
        p.user_message(&c.template, "the doc"),
        "Slots: quote, level.\nthe doc"
    );
}

#[test]
fn tool_arguments_are_only_the_declared_ones() {
    let tools = tools::parse_tools(&json!([{"name": "page", "parameters": {
        "type": "object", "properties": {"who": {"type": "string"}}
    }}]))
    .unwrap();
    let c = Constraint::Tools {
        tools,
        choice: ToolChoice::Required,
    };
    let g = Prepared::new(&c, &cfg(10))
        .unwrap()
        .grammar_for(DOC)
        .unwrap();
    let vocab = Arc::new(SyntheticVocab::byte_level());
    let cg = Arc::new(CompiledGrammar::new(g.unwrap(), vocab, Limits::default()).unwrap());
    let accepts = |text: &str| {
        let mut m = Matcher::new(cg.clone()).unwrap();
        m.consume_bytes(text.as_bytes()).is_ok() && m.is_accepting()
    };
    assert!(accepts(r#"{"name":"page","arguments":{"who":"a"}}"#));
    assert!(accepts(r#"{"name":"page","arguments":{}}"#));
    assert!(!accepts(r#"{"name":"page","arguments":{"who":"a","x":1}}"#));
    assert!(!accepts(r#"{"name":"page","arguments":{"type":"object"}}"#));
}

#[test]
fn prompt_mode_invalid_outputs_are_logged_and_retried_once() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.jsonl");
    let c = ExtractConfig {
        mode: Mode::Retry,
        ..cfg(6)
    };
    let mut ex = extractor(b"{", &Constraint::Schema(schema()), c)
        .with_bad_samples(BadSamples::open(&bad).unwrap());
    let r = ex.extract("p", DOC, &mut |_| {});
    assert_eq!(r.status, RecordStatus::Invalid, "{r:?}");
    assert_eq!(r.tokens, 12, "two rounds of 6 tokens");
    assert_eq!(
        r.text.as_deref(),
        Some("{{{{{{"),
        "the retry's text is kept"
    );
    let lines = std::fs::read_to_string(&bad).unwrap();
    assert_eq!(lines.lines().count(), 2, "{lines}");
    assert!(lines.contains("\"raw_output\":\"{{{{{{\""), "{lines}");
}

#[cfg(target_os = "linux")]
#[test]
fn an_unwritable_bad_samples_log_is_one_warning_not_a_failed_record() {
    let c = ExtractConfig {
        mode: Mode::Retry,
        ..cfg(6)
    };
    // Every write to /dev/full fails with "no space left on device".
    let mut ex = extractor(b"{", &Constraint::Schema(schema()), c)
        .with_bad_samples(BadSamples::open(std::path::Path::new("/dev/full")).unwrap());
    let r = ex.extract("p", DOC, &mut |_| {});
    assert_eq!(r.status, RecordStatus::Invalid, "{r:?}");
    let w = ex.take_warnings();
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(w[0].contains("bad-samples log"), "{w:?}");
    ex.extract("q", DOC, &mut |_| {});
    assert!(ex.take_warnings().is_empty(), "reported once");
}

/// `extract --regex '^\d+$'`: anchors mean "the whole output", which the constraint is
/// anyway; a look-around with no whole-output meaning is an error with its position.
#[test]
fn regex_constraints_take_anchors_and_refuse_look_arounds() {
    let mut ex = extractor(b"7a", &Constraint::Regex(r"^\d{2}$".into()), cfg(8));
    use formwork_core::generate::Closing;
    // Text closes without JSON's ranking; JSON keeps it.
    assert_eq!(ex.cfg.generate.closing, Closing::Generic);
    let json = extractor(b"1", &Constraint::Json, cfg(8));
    assert_eq!(json.cfg.generate.closing, Closing::Json);
    let r = ex.extract("r", DOC, &mut |_| {});
    assert_eq!(r.status, RecordStatus::Ok, "{r:?}");
    let text = r
        .output
        .as_ref()
        .and_then(Value::as_str)
        .unwrap_or_default();
    assert_eq!(text, "77", "{r:?}");
    let e = Prepared::new(&Constraint::Regex(r"a\bb".into()), &cfg(8)).unwrap_err();
    assert!(
        e.to_string().contains("unsupported in a regex constraint"),
        "{e}"
    );
}

/// Extractors built over one `TokEnv` share its token trie instead of building their own.
#[test]
fn extractors_share_the_token_trie_they_are_given() {
    let env = TokEnv::new(Arc::new(SyntheticVocab::byte_level()));
    let encode: ChatEncoder = Arc::new(|_, user| Ok(user.bytes().map(u32::from).collect()));
    for constraint in [Constraint::Json, Constraint::Regex("[0-9]+".into())] {
        let prepared = Prepared::new(&constraint, &cfg(4)).unwrap();
        let source = FixedLogits::preferring(257, [u32::from(b'1')]);
        let ex = Extractor::with_env(
            source,
            env.clone(),
            encode.clone(),
            vec![],
            prepared,
            cfg(4),
        )
        .unwrap();
        assert!(Arc::ptr_eq(ex.env.trie_arc(), env.trie_arc()));
        let m = ex.matcher.as_ref().expect("one grammar for every document");
        assert!(Arc::ptr_eq(
            m.compiled().tok_env().trie_arc(),
            env.trie_arc()
        ));
    }
}

#[test]
fn bad_constraints_are_errors_before_any_record() {
    let vocab = Arc::new(SyntheticVocab::byte_level());
    let encode: ChatEncoder = Arc::new(|_, _| Ok(vec![1]));
    let make = |c: &Constraint, cfg: ExtractConfig| {
        Extractor::new(
            FixedLogits::new(vec![]),
            vocab.clone(),
            encode.clone(),
            vec![],
            c,
            cfg,
        )
        .map(|_| ())
    };
    let err = make(&Constraint::Schema(json!({"type": 5})), cfg(8)).unwrap_err();
    assert!(err.to_string().contains("invalid schema"), "{err}");
    let c = ExtractConfig {
        grounded: vec!["/properties/nope".into()],
        ..cfg(8)
    };
    let err = make(&Constraint::Schema(schema()), c).unwrap_err();
    assert!(err.to_string().contains("/properties/nope"), "{err}");
}

#[test]
fn batch_continues_after_bad_lines() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.jsonl");
    let inputs = vec![
        Ok(Record {
            id: "a".into(),
            text: DOC.into(),
            line: 1,
        }),
        Err(BadLine {
            id: "line-2".into(),
            line: 2,
            message: "line 2: malformed JSON".into(),
        }),
        Ok(Record {
            id: "b".into(),
            text: "db-3 ok".into(),
            line: 3,
        }),
    ];
    let mut ex = extractor(b"\"", &Constraint::Schema(schema()), cfg(30));
    let mut log = super::super::batch::OutputLog::open(&out, false).unwrap();
    let mut seen = Vec::new();
    let s = ex
        .run_batch(&inputs, &mut log, &mut |r| seen.push(r.id.clone()))
        .unwrap();
    assert_eq!((s.ok, s.error, s.skipped), (2, 1, 0), "{s:?}");
    assert_eq!(seen, ["a", "line-2", "b"]);
    let mut log = super::super::batch::OutputLog::open(&out, true).unwrap();
    let s = ex.run_batch(&inputs, &mut log, &mut |_| {}).unwrap();
    assert_eq!((s.processed(), s.skipped), (0, 3));
}

/// `run_batch_parallel` writes, for every record, the line `run_batch` writes (latency
/// aside), one line each, whatever the batch size: grounded schemas (a grammar per
/// document), a plain schema (one shared grammar), a budget that forces closing, thinking
/// first (issue 19: the reasoning decoded in the batch, reported and counted as `extract`
/// reports it) and a bad input line; a second run with resume skips everything.
#[test]
fn parallel_batches_write_the_sequential_lines() {
    let texts = [
        DOC,
        "db-3 ok",
        "level 4: disk \"sda\" died",
        "x",
        "Severity low.",
    ];
    let mut inputs: Vec<Result<Record, BadLine>> = texts
        .iter()
        .enumerate()
        .map(|(i, t)| {
            Ok(Record {
                id: format!("r{i}"),
                text: t.to_string(),
                line: i + 1,
            })
        })
        .collect();
    inputs.insert(
        2,
        Err(BadLine {
            id: "line-3".into(),
            line: 3,
            message: "line 3: malformed JSON".into(),
        }),
    );
    let plain = json!({"type": "object", "properties": {"note": {"type": "string"}},
            "required": ["note"], "additionalProperties": false});
    let dir = tempfile::tempdir().unwrap();
    let read = |path: &std::path::Path| -> Vec<RecordResult> {
        let mut lines: Vec<RecordResult> = std::fs::read_to_string(path)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        for l in &mut lines {
            l.latency_ms = 0.0;
        }
        lines
    };
    for (k, (constraint, max_tokens, think)) in [
        (Constraint::Schema(schema()), 30, None),
        (Constraint::Schema(schema()), 24, None),
        (Constraint::Schema(plain), 16, None),
        (
            Constraint::Schema(schema()),
            30,
            Some(ThinkConfig::new(5, "Answer:")),
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let run = |parallel: usize, kv: Option<KvBudget>| {
            let budget = kv.map_or(0, |k| k.bytes);
            let out = dir
                .path()
                .join(format!("out-{k}-{parallel}-{budget}.jsonl"));
            let config = ExtractConfig {
                think: think.clone(),
                ..cfg(max_tokens)
            };
            let mut ex = extractor(b"db\"4", &constraint, config);
            let mut log = super::super::batch::OutputLog::open(&out, false).unwrap();
            let mut seen = Vec::new();
            let s = ex
                .run_batch_parallel(&inputs, &mut log, parallel, kv, &mut |r| {
                    seen.push(r.id.clone())
                })
                .unwrap();
            assert_eq!(s.processed(), inputs.len(), "{k}/{parallel}: {s:?}");
            let mut log = super::super::batch::OutputLog::open(&out, true).unwrap();
            let again = ex
                .run_batch_parallel(&inputs, &mut log, parallel, kv, &mut |_| {})
                .unwrap();
            assert_eq!((again.processed(), again.skipped), (0, inputs.len()));
            let mut lines = read(&out);
            let ids: Vec<String> = lines.iter().map(|l| l.id.clone()).collect();
            assert_eq!(ids, seen, "{k}/{parallel}: lines in the order reported");
            lines.sort_by(|a, b| a.id.cmp(&b.id));
            (lines, s)
        };
        let (want, s) = run(1, None);
        assert_eq!(s.error, 1, "{k}: the bad line");
        if k == 2 {
            // The plain note rambles `dbdb…`: the budget closes it.
            assert!(want.iter().any(|l| l.closed_early), "{k}: {want:?}");
        }
        if think.is_some() {
            // The fake model's favourite byte, for the budget's 5 tokens.
            for l in want.iter().filter(|l| l.status != RecordStatus::Error) {
                assert_eq!(l.reasoning.as_deref(), Some("ddddd"), "{l:?}");
            }
        } else {
            assert!(want.iter().all(|l| l.reasoning.is_none()), "{want:?}");
        }
        // Prompts are ~340 bytes here, one position each: 2500 bytes hold the prefix and two
        // documents at full length (× 2), 1000 one document and no prefix. Thinking adds
        // the instruction (~130 bytes) to the prompt and 13 positions to the sequence.
        let (two, one) = if think.is_some() {
            (3400, 1300)
        } else {
            (2500, 1000)
        };
        for (parallel, bytes) in [(2, 0), (3, 0), (8, 0), (8, two), (8, one)] {
            let kv = (bytes > 0).then_some(KvBudget {
                bytes,
                bytes_per_position: 1,
            });
            let (got, _) = run(parallel, kv);
            assert_eq!(got, want, "constraint {k}, parallel {parallel}, kv {bytes}");
        }
        // A budget no document fits: each is an error naming the budget.
        let tiny = KvBudget {
            bytes: 100,
            bytes_per_position: 1,
        };
        let (got, s) = run(8, Some(tiny));
        assert_eq!(s.error, inputs.len(), "{got:?}");
        let e = got[1].error.as_deref().unwrap();
        assert!(e.contains("over the KV budget of 100 bytes"), "{e}");
        // Only the batched loop reserves KV: thinking went through it, its reasoning's
        // budget and trigger reserved (5 + 7 bytes + a newline).
        let reasoning = e.contains("+ 13 of reasoning and its trigger");
        assert_eq!(reasoning, think.is_some(), "{e}");
    }
}
