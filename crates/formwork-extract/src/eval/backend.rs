//! The eval backend over the extraction library: each attempt is one
//! [`Extractor::extract`](crate::run::Extractor::extract) on a model.
//!
//! Owns the mapping from an [`EvalConfig`] to an [`ExtractConfig`] (mode, budget, sampling and
//! seed, refusal, template, whitespace) and what "grounded" means for a suite: every string
//! field of the case's schema is marked grounded ([`string_pointers`]). Does not own the model:
//! the caller loads it and passes a [`LogitsSource`], its vocabulary, chat encoder and stop
//! tokens (the CLI's `ModelBackend` does that, once per distinct model). Cost: one schema
//! compile and grammar build per attempt (schemas differ per case); decoding dominates, and
//! [`PrefixReuse`] keeps the prompt prefix that consecutive cases share (instruction and
//! schema) in the model's KV cache.

use std::sync::Arc;

use serde_json::Value;

use super::report::Status;
use super::run::{choose_examples, Attempt, AttemptError, Backend, EvalConfig, Mode};
use super::suite::{Case, EvalError, Target};
use crate::batch::RecordStatus;
use crate::prompt::PromptTemplate;
use crate::run::{self as xrun, ChatEncoder, Constraint, ExtractConfig, Extractor, Prepared};
use crate::tools::{parse_tools, ToolChoice};
use formwork_core::generate::{GenerateConfig, LogitsSource, Sampling, SourceError};
use formwork_core::schema::{pointer, CompileOptions, Whitespace};
use formwork_core::toktrie::{TokEnv, TokenId, Vocab};

/// Answers cases with a model through the extraction library.
pub struct ExtractBackend<S> {
    source: S,
    /// The vocabulary and its token trie, built once for every attempt.
    env: TokEnv,
    encode: ChatEncoder,
    stop: Vec<TokenId>,
}

impl<S> std::fmt::Debug for ExtractBackend<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExtractBackend")
            .field("stop", &self.stop)
            .finish_non_exhaustive()
    }
}

impl<S: LogitsSource> ExtractBackend<S> {
    /// A backend over `source` (the model) with its vocabulary, chat encoder and the stop
    /// tokens of unconstrained generation.
    pub fn new(source: S, vocab: Arc<dyn Vocab>, encode: ChatEncoder, stop: Vec<TokenId>) -> Self {
        ExtractBackend {
            source,
            env: TokEnv::new(vocab),
            encode,
            stop,
        }
    }
}

/// A logits source that remembers the tokens its KV cache holds, so that a call feeding a
/// prompt whose start is already cached feeds only the rest.
///
/// [`Extractor`] starts each attempt with a fresh generator that knows nothing of the source's
/// cache and feeds the whole prompt at position 0; consecutive eval cases of one suite share
/// the instruction and schema (hundreds of tokens for SNIPS), which this wrapper does not feed
/// again. Relies on the [`LogitsSource`] contract that feeding at `pos` drops what the source
/// cached from `pos` on. On an error the record is cleared, so the next call feeds everything.
#[derive(Debug)]
pub struct PrefixReuse<S> {
    inner: S,
    /// The tokens at positions `0..fed.len()` of the inner source's cache.
    fed: Vec<u32>,
    reused: usize,
}

impl<S> PrefixReuse<S> {
    /// Wraps a source whose cache is empty.
    pub fn new(inner: S) -> Self {
        PrefixReuse {
            inner,
            fed: Vec::new(),
            reused: 0,
        }
    }

    /// Tokens not fed again because they were cached, over the wrapper's life.
    pub fn reused_len(&self) -> usize {
        self.reused
    }
}

impl<S: LogitsSource> LogitsSource for PrefixReuse<S> {
    fn forward(&mut self, tokens: &[u32], pos: usize) -> Result<Vec<f32>, SourceError> {
        let cached = self.fed.get(pos..).unwrap_or(&[]);
        // The last token is always fed: its logits are the answer.
        let common = cached
            .iter()
            .zip(tokens)
            .take_while(|(a, b)| a == b)
            .count()
            .min(tokens.len().saturating_sub(1));
        self.fed.truncate(pos + common);
        match self.inner.forward(&tokens[common..], pos + common) {
            Ok(logits) => {
                self.fed.extend_from_slice(&tokens[common..]);
                self.reused += common;
                Ok(logits)
            }
            Err(e) => {
                self.fed.clear();
                Err(e)
            }
        }
    }
}

/// JSON pointers to every string-typed schema under `properties` (recursively, and through
/// array `items`), for grounded mode. A string with `enum` or `const` is not grounded: its
/// values are fixed by the schema, not quoted from the document.
pub fn string_pointers(schema: &Value) -> Vec<String> {
    fn walk(s: &Value, at: &str, out: &mut Vec<String>) {
        let Some(o) = s.as_object() else { return };
        if o.get("type").and_then(Value::as_str) == Some("string")
            && !o.contains_key("enum")
            && !o.contains_key("const")
        {
            out.push(at.to_string());
            return;
        }
        if let Some(props) = o.get("properties").and_then(Value::as_object) {
            for (k, v) in props {
                walk(v, &pointer::push(&format!("{at}/properties"), k), out);
            }
        }
        if let Some(items) = o.get("items") {
            walk(items, &format!("{at}/items"), out);
        }
    }
    let mut out = Vec::new();
    walk(schema, "", &mut out);
    out
}

/// The extraction options of one configuration at one seed, for `schema` (grounded pointers)
/// and `document`, whose worked examples are picked from `examples` (its candidates).
pub fn extract_config(
    config: &EvalConfig,
    seed: u64,
    schema: Option<&Value>,
    document: &str,
    examples: &[(String, Value)],
) -> Result<ExtractConfig, EvalError> {
    if examples.len() < config.shots {
        return Err(EvalError::TooFewExamples {
            config: config.name.clone(),
            shots: config.shots,
            available: examples.len(),
        });
    }
    let template = match &config.template {
        Some(p) => {
            let path = p.display().to_string();
            let text = std::fs::read_to_string(p).map_err(|source| EvalError::File {
                path: path.clone(),
                source,
            })?;
            PromptTemplate::new(&text).map_err(|source| EvalError::Template { path, source })?
        }
        None => PromptTemplate::default_template(),
    };
    let mut compile = CompileOptions {
        property_order: config.property_order,
        ..CompileOptions::default()
    };
    if let Some(max_run) = config.flexible_whitespace {
        compile.whitespace = Whitespace::Flexible { max_run };
    }
    Ok(ExtractConfig {
        mode: match config.mode {
            Mode::Prompt => xrun::Mode::Prompt,
            Mode::Retry => xrun::Mode::Retry,
            Mode::Constrained | Mode::Grounded => xrun::Mode::Constrained,
        },
        generate: GenerateConfig {
            max_tokens: config.max_tokens,
            sampling: Sampling::from_temperature(Some(config.temperature)),
            seed,
            repeat_penalty: config.repeat_penalty,
            ..GenerateConfig::default()
        },
        allow_refusal: config.allow_refusal,
        grounded_spans: config.grounded_spans,
        grounded: match (config.mode, schema) {
            (Mode::Grounded, Some(s)) => string_pointers(s),
            _ => Vec::new(),
        },
        template,
        system: config.system.clone(),
        examples: choose_examples(document, examples, config.shots, config.shot_selection),
        compile,
        ..ExtractConfig::default()
    })
}

impl<S: LogitsSource> Backend for ExtractBackend<S> {
    fn attempt(
        &mut self,
        case: &Case,
        config: &EvalConfig,
        run: usize,
    ) -> Result<Attempt, AttemptError> {
        let seed = config.seed_for(run, &case.id);
        let (constraint, schema) = match &case.target {
            Target::Schema(s) => (Constraint::Schema(s.clone()), Some(s)),
            Target::Tools(t) => (
                Constraint::Tools {
                    tools: parse_tools(&Value::Array(t.clone()))?,
                    choice: ToolChoice::Required,
                },
                None,
            ),
        };
        let document = case.input.text();
        let cfg = extract_config(config, seed, schema, &document, &case.examples)?;
        let prepared = Prepared::new(&constraint, &cfg)?;
        let mut ex = Extractor::with_env(
            &mut self.source,
            self.env.clone(),
            self.encode.clone(),
            self.stop.clone(),
            prepared,
            cfg,
        )?;
        let r = ex.extract(&case.id, &document, &mut |_| {});
        let raw = match (&r.output, &r.text) {
            (Some(v), _) => v.to_string(),
            (None, Some(t)) => t.clone(),
            (None, None) => String::new(),
        };
        Ok(Attempt {
            raw,
            error: r.error,
            status: Some(match r.status {
                RecordStatus::Ok => Status::Ok,
                RecordStatus::Refusal => Status::Refusal,
                RecordStatus::Invalid => Status::Invalid,
                RecordStatus::Incomplete => Status::Incomplete,
                RecordStatus::Error => Status::Error,
            }),
            tokens: r.tokens,
            forced_tokens: r.forced_tokens,
            grounded_substrings: r.grounded_substrings,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::run::judge_attempt;
    use crate::eval::suite::{EvalError, Input, Scoring};
    use formwork_core::toktrie::SyntheticVocab;
    use serde_json::json;
    use std::collections::BTreeMap;

    /// A fake model over the byte-level vocabulary that prefers bytes in the given order.
    #[derive(Debug)]
    struct Fake {
        logits: Vec<f32>,
    }

    impl LogitsSource for Fake {
        fn forward(&mut self, _: &[u32], _: usize) -> Result<Vec<f32>, SourceError> {
            Ok(self.logits.clone())
        }
    }

    fn backend(prefer: &[u8]) -> ExtractBackend<Fake> {
        let vocab = Arc::new(SyntheticVocab::byte_level());
        let mut logits = vec![0.0f32; vocab.vocab_len()];
        for (i, &b) in prefer.iter().enumerate() {
            logits[b as usize] = 10.0 - i as f32 * 0.1;
        }
        let encode: ChatEncoder = Arc::new(|_, user| Ok(user.bytes().map(u32::from).collect()));
        ExtractBackend::new(Fake { logits }, vocab, encode, vec![TokenId(256)])
    }

    #[test]
    fn constrained_is_valid_where_the_prompt_baseline_is_not() {
        let mut judges = BTreeMap::new();
        judges.insert("/n".to_string(), crate::eval::judge::Judge::Exact);
        let case = Case {
            id: "n".into(),
            input: Input::Text("the number is 7".into()),
            target: Target::Schema(json!({
                "type": "object", "properties": {"n": {"type": "integer"}},
                "required": ["n"], "additionalProperties": false})),
            gold: json!({"n": 7}),
            scoring: Scoring::Fields(judges),
            group: None,
            examples: Vec::new(),
        };
        // The fake wants `}` most, then `7`: free text is `}}}}...`, while the grammar forces
        // `{"n":`, then allows `7`, then `}`.
        let mut b = backend(b"}7");
        let run = |b: &mut ExtractBackend<Fake>, mode| {
            let cfg = EvalConfig {
                name: "c".into(),
                mode,
                max_tokens: 12,
                ..EvalConfig::default()
            };
            let a = b.attempt(&case, &cfg, 0);
            judge_attempt(&case, &cfg, 0, a, 0.0)
        };
        let r = run(&mut b, Mode::Constrained);
        assert_eq!(r.status, Status::Ok, "{}", r.reason);
        assert!(r.correct, "{}", r.raw);
        assert!(r.forced_tokens > 0);
        let r = run(&mut b, Mode::Prompt);
        assert_ne!(r.status, Status::Ok, "{}", r.raw);
        assert!(!r.correct);
    }

    #[test]
    fn grounded_marks_every_string_field() {
        let s = json!({"type": "object", "properties": {
            "a": {"type": "string"}, "n": {"type": "integer"},
            "e": {"type": "string", "enum": ["x"]},
            "l": {"type": "array", "items": {"type": "string"}},
            "o": {"type": "object", "properties": {"a/b": {"type": "string"}}}}});
        assert_eq!(
            string_pointers(&s),
            [
                "/properties/a",
                "/properties/l/items",
                "/properties/o/properties/a~1b"
            ]
        );
        let cfg = EvalConfig {
            mode: Mode::Grounded,
            temperature: 0.5,
            ..EvalConfig::default()
        };
        let x = extract_config(&cfg, 3, Some(&s), "", &[]).unwrap();
        assert_eq!(x.grounded.len(), 3);
        assert_eq!(x.generate.seed, 3);
        assert_eq!(x.mode, xrun::Mode::Constrained);
        let greedy = EvalConfig::default();
        let x = extract_config(&greedy, 0, Some(&s), "", &[]).unwrap();
        assert!(x.grounded.is_empty());
        assert_eq!(x.generate.sampling, Sampling::ArgMax);
        assert_eq!(x.system, None, "the model's own system prompt by default");
        let told = EvalConfig {
            system: Some("Answer in JSON.".into()),
            ..EvalConfig::default()
        };
        let x = extract_config(&told, 0, Some(&s), "", &[]).unwrap();
        assert_eq!(x.system.as_deref(), Some("Answer in JSON."));
    }

    /// Records what reaches the model.
    #[derive(Debug, Default)]
    struct Recorder {
        calls: Vec<(Vec<u32>, usize)>,
        fail: bool,
    }

    impl LogitsSource for Recorder {
        fn forward(&mut self, tokens: &[u32], pos: usize) -> Result<Vec<f32>, SourceError> {
            self.calls.push((tokens.to_vec(), pos));
            if self.fail {
                return Err(EvalError::Backend {
                    message: "failing on purpose".into(),
                }
                .into());
            }
            Ok(vec![tokens.last().map_or(0.0, |&t| t as f32)])
        }
    }

    #[test]
    fn prefix_reuse_feeds_only_what_the_cache_lacks() {
        let mut p = PrefixReuse::new(Recorder::default());
        let last = |p: &mut PrefixReuse<Recorder>, t: &[u32], pos| {
            let logits = p.forward(t, pos).unwrap();
            assert_eq!(
                logits,
                [*t.last().unwrap() as f32],
                "logits of the last token"
            );
            p.inner.calls.last().cloned().unwrap()
        };
        assert_eq!(last(&mut p, &[1, 2, 3, 4], 0), (vec![1, 2, 3, 4], 0));
        // A decode step after the prompt.
        assert_eq!(last(&mut p, &[8], 4), (vec![8], 4));
        // The next case shares [1, 2, 3]: only the rest is fed, where it belongs.
        assert_eq!(last(&mut p, &[1, 2, 3, 5, 6], 0), (vec![5, 6], 3));
        // The same prompt again: the last token is still fed, for its logits.
        assert_eq!(last(&mut p, &[1, 2, 3, 5, 6], 0), (vec![6], 4));
        // Feeding mid-sequence compares against what is cached there.
        assert_eq!(last(&mut p, &[3, 5, 7], 2), (vec![7], 4));
        assert_eq!(last(&mut p, &[9], 0), (vec![9], 0));
        assert_eq!(p.reused_len(), 3 + 4 + 2);
        // After a failure nothing is trusted: the whole prompt is fed again.
        p.inner.fail = true;
        assert!(p.forward(&[9, 1], 0).is_err());
        p.inner.fail = false;
        assert_eq!(last(&mut p, &[9, 1], 0), (vec![9, 1], 0));
    }
}
