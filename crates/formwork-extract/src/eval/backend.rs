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
//!
//! Batched: [`ExtractBackend::attempt_batch`] decodes up to `parallel` attempts together
//! through one [`BatchGenerator`] over a [`BatchLogitsSource`] (formwork-model's `Model`), every
//! mode included (`prompt` and `retry` as free-text requests; a retry's second round is queued
//! when its first round ends). Each attempt is the one [`Backend::attempt`] makes — the same
//! extraction config, seed, prompt, grammar and judging, through
//! [`RecordJob`] — so with a source whose batched logits equal its
//! single-sequence ones (the native model's are bit for bit) every result is the sequential
//! run's, greedy or sampled; only the order of finishing and the latencies differ.
//! Attempts that think before answering ([`ExtractConfig::think`]) are batched with the others
//! ([`BatchGenerator::push_thinking`]: their reasoning, then their answer, in one sequence).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use serde_json::Value;

use super::error::EvalError;
use super::report::Status;
use super::run::{choose_examples, Attempt, AttemptError, Backend, EvalConfig};
use super::suite::{Case, Target};
use crate::batch::RecordResult;
use crate::batch::RecordStatus;
use crate::prompt::PromptTemplate;
use crate::run::{
    ChatEncoder, Constraint, ExtractConfig, Extractor, KvBudget, Prepared, RecordJob, RecordStep,
};
use crate::tools::{parse_tools, ToolChoice};
use crate::ExtractError;
use formwork_core::generate::batch::{BatchGenerator, BatchLogitsSource, BatchRequest};
use formwork_core::generate::{
    GenerateConfig, LogitsSource, Sampling, SourceError, Speculation, ThinkConfig,
};
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

impl<S> PrefixReuse<S> {
    /// How many of `tokens`, fed at `pos`, are cached already (at most `first_row`: the
    /// tokens whose logits are asked for are always fed); drops the record past them.
    fn skip_cached(&mut self, tokens: &[u32], pos: usize, first_row: usize) -> usize {
        let cached = self.fed.get(pos..).unwrap_or(&[]);
        let common = cached
            .iter()
            .zip(tokens)
            .take_while(|(a, b)| a == b)
            .count()
            .min(first_row);
        self.fed.truncate(pos + common);
        common
    }

    /// Records `r`, the result of feeding `tokens[common..]`.
    fn record<T>(
        &mut self,
        tokens: &[u32],
        common: usize,
        r: Result<T, SourceError>,
    ) -> Result<T, SourceError> {
        match r {
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

impl<S: LogitsSource> LogitsSource for PrefixReuse<S> {
    fn forward(&mut self, tokens: &[u32], pos: usize) -> Result<Vec<f32>, SourceError> {
        // The last token is always fed: its logits are the answer.
        let common = self.skip_cached(tokens, pos, tokens.len().saturating_sub(1));
        let r = self.inner.forward(&tokens[common..], pos + common);
        self.record(tokens, common, r)
    }

    fn forward_rows(
        &mut self,
        tokens: &[u32],
        pos: usize,
        rows: &[usize],
    ) -> Result<Vec<Vec<f32>>, SourceError> {
        let first = rows
            .first()
            .copied()
            .unwrap_or(tokens.len().saturating_sub(1));
        let common = self.skip_cached(tokens, pos, first);
        let rows: Vec<usize> = rows.iter().map(|r| r - common).collect();
        let r = self
            .inner
            .forward_rows(&tokens[common..], pos + common, &rows);
        self.record(tokens, common, r)
    }

    fn context_len(&self) -> Option<usize> {
        self.inner.context_len()
    }
}

/// Batched passes go to the inner source untouched: its sequences are its own, apart from the
/// single-sequence cache this wrapper tracks (formwork-model's `Model` keeps them apart).
impl<S: BatchLogitsSource> BatchLogitsSource for PrefixReuse<S> {
    type Sequence = S::Sequence;

    fn new_sequence(&mut self) -> Self::Sequence {
        self.inner.new_sequence()
    }

    fn forward_batch(
        &mut self,
        batch: &mut [(&mut Self::Sequence, &[u32])],
    ) -> Result<Vec<Vec<f32>>, SourceError> {
        self.inner.forward_batch(batch)
    }

    fn fork(&mut self, seq: &Self::Sequence, len: usize) -> Self::Sequence {
        self.inner.fork(seq, len)
    }

    fn forward_batch_rows(
        &mut self,
        batch: &mut [(&mut Self::Sequence, &[u32])],
        rows: &[Vec<usize>],
    ) -> Result<Vec<Vec<Vec<f32>>>, SourceError> {
        self.inner.forward_batch_rows(batch, rows)
    }

    fn truncate(&mut self, seq: &mut Self::Sequence, len: usize) {
        self.inner.truncate(seq, len)
    }

    fn context_len(&self) -> Option<usize> {
        BatchLogitsSource::context_len(&self.inner)
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
    let (mode, grounded) = config.mode.extraction();
    Ok(ExtractConfig {
        mode,
        generate: GenerateConfig {
            max_tokens: config.max_tokens,
            sampling: Sampling::from_temperature(Some(config.temperature)),
            seed,
            repeat_penalty: config.repeat_penalty,
            speculation: if config.speculate {
                Speculation::default()
            } else {
                Speculation::Off
            },
            ..GenerateConfig::default()
        },
        allow_refusal: config.allow_refusal,
        grounded_spans: config.grounded_spans,
        grounded: match schema {
            Some(s) if grounded => string_pointers(s),
            _ => Vec::new(),
        },
        template,
        system: config.system.clone(),
        examples: choose_examples(document, examples, config.shots, config.shot_selection),
        compile,
        think: config.think.map(|budget| {
            let trigger = config.think_trigger.as_deref();
            formwork_core::generate::ThinkConfig::new(
                budget,
                trigger.unwrap_or(crate::prompt::DEFAULT_THINK_TRIGGER),
            )
        }),
        ..ExtractConfig::default()
    })
}

/// The document, extraction options and prepared constraint of one attempt: run `run` of
/// `case` under `config` (its seed from [`EvalConfig::seed_for`]).
fn prepare(
    case: &Case,
    config: &EvalConfig,
    run: usize,
) -> Result<(String, ExtractConfig, Prepared), AttemptError> {
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
    Ok((document, cfg, prepared))
}

/// What the eval judges of an extraction record.
fn attempt_of(r: RecordResult) -> Attempt {
    let raw = match (&r.output, &r.text) {
        (Some(v), _) => v.to_string(),
        (None, Some(t)) => t.clone(),
        (None, None) => String::new(),
    };
    Attempt {
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
    }
}

impl<S: LogitsSource> Backend for ExtractBackend<S> {
    fn attempt(
        &mut self,
        case: &Case,
        config: &EvalConfig,
        run: usize,
    ) -> Result<Attempt, AttemptError> {
        let (document, cfg, prepared) = prepare(case, config, run)?;
        let mut ex = Extractor::with_env(
            &mut self.source,
            self.env.clone(),
            self.encode.clone(),
            self.stop.clone(),
            prepared,
            cfg,
        )?;
        Ok(attempt_of(ex.extract(&case.id, &document, &mut |_| {})))
    }
}

/// Receives each answered attempt: its index among the items, the attempt, its latency (ms).
pub type AttemptSink<'a> =
    dyn FnMut(usize, Result<Attempt, AttemptError>, f64) -> Result<(), EvalError> + 'a;

/// An attempt started in a batch: where it is in the items, its prepared constraint and job,
/// when it started, and the KV bytes it holds in flight.
struct Slot {
    item: usize,
    prepared: Prepared,
    job: RecordJob,
    start: Instant,
    need: usize,
}

impl Slot {
    fn ms(&self) -> f64 {
        self.start.elapsed().as_secs_f64() * 1000.0
    }
}

impl<S: LogitsSource + BatchLogitsSource> ExtractBackend<S> {
    /// [`Backend::attempt_many`] with up to `parallel` attempts decoded together (see the
    /// module docs); `parallel` ≤ 1 answers one at a time through [`Backend::attempt`]. The
    /// prompt prefix shared by the first attempts started (system prompt, instructions) is
    /// prefilled once and forked. With a [`KvBudget`] an attempt joins only when its cache at
    /// full length (prompt + `max_tokens`) fits beside those in flight, as in
    /// [`Extractor::run_batch_parallel`]; one that fits only alone runs alone, as it would
    /// sequentially. Latencies run from an attempt's start to its result, so they include the
    /// passes shared with the others.
    ///
    /// # Errors
    /// The first error `done` returns. A failed forward pass is an `error` result for each
    /// attempt in flight at the time, and the run goes on.
    pub fn attempt_batch(
        &mut self,
        items: &[(&Case, &EvalConfig, usize)],
        parallel: usize,
        kv: Option<KvBudget>,
        done: &mut AttemptSink<'_>,
    ) -> Result<(), EvalError> {
        if parallel <= 1 {
            for (i, &(case, config, run)) in items.iter().enumerate() {
                let start = Instant::now();
                let attempt = self.attempt(case, config, run);
                done(i, attempt, start.elapsed().as_secs_f64() * 1000.0)?;
            }
            return Ok(());
        }
        let ExtractBackend {
            source,
            env,
            encode,
            stop,
        } = self;
        let mut batch = BatchGenerator::new(&mut *source, env.vocab().clone(), parallel);
        let mut kv_free = kv.map(|k| k.bytes);
        // Started attempts whose next generation is not queued yet, and those in flight by
        // request id.
        let mut ready: VecDeque<(Slot, RecordStep)> = VecDeque::new();
        let mut inflight: HashMap<usize, Slot> = HashMap::new();
        let mut next = 0;
        let mut prefix_done = false;
        loop {
            while ready.len() + batch.active_len() + batch.queued_len() < parallel
                && next < items.len()
            {
                let (case, config, run) = items[next];
                let start = Instant::now();
                let started = prepare(case, config, run).and_then(|(document, cfg, prepared)| {
                    let (job, step) =
                        RecordJob::start(&prepared, cfg, env, encode, &case.id, &document)?;
                    Ok((prepared, job, step))
                });
                let ms = || start.elapsed().as_secs_f64() * 1000.0;
                match started {
                    Err(e) => done(next, Err(e), ms())?,
                    Ok((_, _, RecordStep::Done(r))) => done(next, Ok(attempt_of(r)), ms())?,
                    Ok((prepared, job, step)) => {
                        let slot = Slot {
                            item: next,
                            prepared,
                            job,
                            start,
                            need: 0,
                        };
                        ready.push_back((slot, step));
                    }
                }
                next += 1;
            }
            if !prefix_done && !ready.is_empty() {
                prefix_done = true;
                let prompts: Vec<&[u32]> = ready.iter().filter_map(|(_, s)| prompt(s)).collect();
                if let [first, rest @ ..] = &prompts[..] {
                    let common = rest.iter().fold(first.len(), |n, p| {
                        n.min(first.iter().zip(*p).take_while(|(a, b)| a == b).count())
                    });
                    let cost = kv.map_or(0, |k| k.sequence_bytes(common));
                    // Only when it leaves room for an attempt; a failed prefill only costs
                    // speed (every request then feeds its whole prompt).
                    let room = kv_free.is_none_or(|free| {
                        let one = kv.map_or(0, |k| k.sequence_bytes(first.len()));
                        cost.saturating_add(one) <= free
                    });
                    if !rest.is_empty()
                        && common > 0
                        && room
                        && batch.set_prefix(first[..common].to_vec()).is_ok()
                    {
                        kv_free = kv_free.map(|free| free - cost);
                    }
                }
            }
            while let Some((mut slot, step)) = ready.pop_front() {
                let cfg = slot.job.generate_config().clone();
                // Reasoning first: its positions are in the sequence too.
                let thinking = slot.job.think().map_or(0, ThinkConfig::max_positions);
                let positions = prompt(&step).map_or(0, <[u32]>::len) + thinking + cfg.max_tokens;
                let need = kv.map_or(0, |k| k.sequence_bytes(positions));
                let busy = batch.active_len() + batch.queued_len() > 0;
                if busy && kv_free.is_some_and(|free| need > free) {
                    ready.push_front((slot, step));
                    break;
                }
                kv_free = kv_free.map(|free| free.saturating_sub(need));
                slot.need = need;
                let id = match step {
                    RecordStep::Constrained { prompt, matcher } => {
                        let request = BatchRequest {
                            prompt,
                            matcher: *matcher,
                            config: cfg,
                        };
                        match slot.job.think() {
                            Some(t) => batch.push_thinking(request, t.clone(), stop.clone()),
                            None => batch.push(request),
                        }
                    }
                    RecordStep::Free { prompt } => batch.push_free(prompt, stop.clone(), cfg),
                    RecordStep::Done(_) => unreachable!("finished attempts are not queued"),
                };
                inflight.insert(id, slot);
            }
            if batch.is_idle() {
                if ready.is_empty() && next >= items.len() {
                    break;
                }
                continue;
            }
            let finished = match batch.step() {
                Ok(f) => f,
                Err(e) => {
                    // Every request was admitted before the pass, so all in flight went.
                    let message = ExtractError::from(e).to_string();
                    let mut lost: Vec<(usize, Slot)> = inflight.drain().collect();
                    lost.sort_unstable_by_key(|(id, _)| *id);
                    for (_, slot) in lost {
                        kv_free = kv_free.map(|free| free + slot.need);
                        let r = slot.job.fail(message.clone());
                        done(slot.item, Ok(attempt_of(r)), slot.ms())?;
                    }
                    continue;
                }
            };
            for f in finished {
                let Some(mut slot) = inflight.remove(&f.id) else {
                    continue;
                };
                kv_free = kv_free.map(|free| free + slot.need);
                let thought = f.thought.as_ref();
                let step = match f.result {
                    Ok(g) => slot
                        .job
                        .next_thought(&slot.prepared, encode, thought, Ok(&g)),
                    Err(e) => slot
                        .job
                        .next_thought(&slot.prepared, encode, thought, Err(e)),
                };
                match step {
                    RecordStep::Done(r) => done(slot.item, Ok(attempt_of(r)), slot.ms())?,
                    // A retry's second round goes first: its attempt is half done.
                    step => ready.push_front((slot, step)),
                }
            }
        }
        Ok(())
    }
}

/// The prompt a step feeds, if it generates.
fn prompt(step: &RecordStep) -> Option<&[u32]> {
    match step {
        RecordStep::Constrained { prompt, .. } | RecordStep::Free { prompt } => Some(prompt),
        RecordStep::Done(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::error::EvalError;
    use crate::eval::run::{judge_attempt, Mode};
    use crate::eval::suite::{Input, Scoring};
    use crate::run as xrun;
    use formwork_core::generate::testing::HistoryLogits;
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

    /// The logits of a fake model after `history` (run as a [`HistoryLogits`]): a hash of
    /// everything fed so far, batched or not, so each case, configuration and seed takes its
    /// own path; bytes of JSON and a few letters favoured, the rest a little below.
    fn hashy_logits(history: &[u32]) -> Vec<f32> {
        let mut h = history.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &t| {
            (h ^ u64::from(t)).wrapping_mul(0x0100_0000_01b3)
        });
        let mut logits = vec![0.0f32; 257];
        for (i, l) in logits.iter_mut().enumerate() {
            h ^= h >> 29;
            h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
            *l = (h >> 40) as f32 / (1u64 << 24) as f32;
            if b"{}\":,0123456789abcnoptu ".contains(&(i as u8)) {
                *l += 2.0;
            }
        }
        logits
    }

    /// The batched path answers every attempt as the sequential path does: constrained,
    /// grounded, prompt and retry (a second round for the invalid first answers), reasoning
    /// first (issue 19: batched with the others, no longer one at a time after them), greedy
    /// and sampled (two runs), at several batch sizes and with a KV budget that holds only some
    /// attempts at once; each attempt is handed back once.
    #[test]
    fn batched_attempts_equal_the_sequential_ones() {
        let vocab = Arc::new(SyntheticVocab::byte_level());
        let encode: ChatEncoder = Arc::new(|system, user| {
            let text = format!("{}|{user}", system.unwrap_or(""));
            Ok(text.bytes().map(u32::from).collect())
        });
        let backend = || {
            ExtractBackend::new(
                HistoryLogits::new(hashy_logits),
                vocab.clone(),
                encode.clone(),
                vec![TokenId(256)],
            )
        };
        let schema = json!({"type": "object", "properties": {
            "name": {"type": "string", "maxLength": 6}, "n": {"type": "integer"}},
            "required": ["name", "n"], "additionalProperties": false});
        let cases: Vec<Case> = ["ana has 7", "bob counts 12 cats", "cy: 3", "dot 40 0"]
            .iter()
            .enumerate()
            .map(|(i, text)| Case {
                id: format!("c{i}"),
                input: Input::Text((*text).into()),
                target: Target::Schema(schema.clone()),
                gold: json!({"name": "x", "n": 1}),
                scoring: Scoring::Fields(BTreeMap::new()),
                group: None,
                examples: Vec::new(),
            })
            .collect();
        let config = |name: &str, mode, temperature| EvalConfig {
            name: name.into(),
            mode,
            temperature,
            max_tokens: 48,
            seed: 5,
            ..EvalConfig::default()
        };
        let configs = [
            config("c", Mode::Constrained, 0.0),
            config("g", Mode::Grounded, 0.0),
            config("p", Mode::Prompt, 0.0),
            config("r", Mode::Retry, 0.0),
            config("cs", Mode::Constrained, 1.0),
            config("rs", Mode::Retry, 1.5),
            // Reasoning first (issue 19), ended by the budget or by a trigger the fake writes.
            EvalConfig {
                think: Some(12),
                ..config("t", Mode::Constrained, 0.0)
            },
            EvalConfig {
                think: Some(10),
                think_trigger: Some("n".into()),
                ..config("ts", Mode::Grounded, 1.0)
            },
        ];
        let items: Vec<(&Case, &EvalConfig, usize)> = crate::eval::run::plan(&cases, &configs, 2);
        let mut one = backend();
        let want: Vec<Attempt> = items
            .iter()
            .map(|&(c, cfg, run)| one.attempt(c, cfg, run).unwrap())
            .collect();
        // The fake makes the baselines fail and sampling vary, or this test would be weak.
        let retried = items
            .iter()
            .zip(&want)
            .filter(|((_, c, _), a)| c.mode == Mode::Retry && a.status != Some(Status::Ok))
            .count();
        assert!(retried > 0, "{want:?}");
        let sampled: std::collections::HashSet<&str> = items
            .iter()
            .zip(&want)
            .filter(|((_, c, _), _)| c.name == "cs")
            .map(|(_, a)| a.raw.as_str())
            .collect();
        assert!(sampled.len() > 4, "{sampled:?}");
        // The thinking attempts reasoned (their tokens count the reasoning's).
        for ((_, c, _), a) in items.iter().zip(&want) {
            if c.think.is_some() {
                assert!(a.tokens > 8, "{a:?}");
            }
        }
        // A budget for about 3 attempts of the longest prompt at once.
        let longest = items
            .iter()
            .map(|&(c, cfg, run)| {
                let (document, x, prepared) = prepare(c, cfg, run).unwrap();
                (encode)(None, &prepared.user_message(&x.template, &document))
                    .unwrap()
                    .len()
            })
            .max()
            .unwrap();
        let per_position = 64;
        let three = 3 * 2 * per_position * (longest + 48) + 1;
        for (parallel, kv) in [
            (2, None),
            (5, None),
            (16, None),
            (
                6,
                Some(KvBudget {
                    bytes: three,
                    bytes_per_position: per_position,
                }),
            ),
        ] {
            let mut b = backend();
            let mut got: Vec<Option<Attempt>> = vec![None; items.len()];
            b.attempt_batch(&items, parallel, kv, &mut |i, a, _| {
                assert!(got[i].is_none(), "attempt {i} answered twice");
                got[i] = Some(a.unwrap());
                Ok(())
            })
            .unwrap();
            let widest = b.source.widest;
            match kv {
                Some(_) => assert!((2..=3).contains(&widest), "{widest}"),
                None => assert_eq!(widest, parallel.min(items.len()), "the batch fills up"),
            }
            for (i, (g, w)) in got.into_iter().zip(&want).enumerate() {
                let (c, cfg, run) = items[i];
                assert_eq!(
                    g.as_ref(),
                    Some(w),
                    "parallel {parallel} {kv:?}: {} {} run {run}",
                    c.id,
                    cfg.name
                );
            }
        }
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
