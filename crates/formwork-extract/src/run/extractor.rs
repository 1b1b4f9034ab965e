//! The decode driver: [`Extractor`], a [`Prepared`] constraint and one model, run over
//! documents one at a time ([`Extractor::extract`]): build the prompt, decode (constrained,
//! thinking first, or the unconstrained `prompt` / `retry` baselines), judge the output and
//! make the record; invalid baseline outputs go to the bad-samples log.
//!
//! Does not own the batch loops ([`batch_loop`](super::batch_loop)), compiling the constraint
//! or judging.
//!
//! Cost per record: one prompt encoding and one generation (two for a retry); a
//! document-independent grammar's matcher is reused (reset) across records, so its lazy-DFA
//! caches stay warm; a grounded grammar is compiled per document.
//!
//! May use (within `run`): `config`, `prepare`, `judge`, `record`.

use std::sync::Arc;
use std::time::Instant;

use super::config::{ChatEncoder, Constraint, ExtractConfig, Mode};
use super::prepare::{document_matcher, user_message, Kind, Prepared};
use super::record::{add_reasoning, constrained_result, fill_counts, from_judged, result};
use crate::batch::{BadSamples, RecordResult, RecordStatus};
use crate::prompt::retry_prompt;
use crate::ExtractError;
use formwork_core::generate::{Generator, LogitsSource};
use formwork_core::matcher::{CompiledGrammar, Matcher};
use formwork_core::toktrie::{TokEnv, TokenId, Vocab};

/// Runs a prepared constraint over documents with one model.
pub struct Extractor<S> {
    pub(super) gen: Generator<S>,
    /// The vocabulary with its token trie, built once: per-document grammars (grounded
    /// fields) compile against it without rebuilding the trie.
    pub(super) env: TokEnv,
    pub(super) encode: ChatEncoder,
    /// Stop tokens of unconstrained generation (end of turn, EOS).
    pub(super) stop: Vec<TokenId>,
    pub(super) prepared: Prepared,
    pub(super) cfg: ExtractConfig,
    /// The matcher of a document-independent grammar, reused (reset) across records so its
    /// lazy-DFA caches stay warm.
    pub(super) matcher: Option<Matcher>,
    bad_samples: Option<BadSamples>,
    warnings: Vec<String>,
}

impl<S> std::fmt::Debug for Extractor<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Extractor")
            .field("prepared", &self.prepared)
            .field("cfg", &self.cfg)
            .finish_non_exhaustive()
    }
}

impl<S: LogitsSource> Extractor<S> {
    /// An extractor over `source` (the model) with `vocab` (its tokenizer), the chat encoder,
    /// and the stop tokens used by the baselines.
    pub fn new(
        source: S,
        vocab: Arc<dyn Vocab>,
        encode: ChatEncoder,
        stop: Vec<TokenId>,
        constraint: &Constraint,
        cfg: ExtractConfig,
    ) -> Result<Self, ExtractError> {
        let prepared = Prepared::new(constraint, &cfg)?;
        Self::with_prepared(source, vocab, encode, stop, prepared, cfg)
    }

    /// [`new`](Self::new) with a constraint already prepared (e.g. checked before loading the
    /// model, so a bad schema is reported without waiting for weights).
    pub fn with_prepared(
        source: S,
        vocab: Arc<dyn Vocab>,
        encode: ChatEncoder,
        stop: Vec<TokenId>,
        prepared: Prepared,
        cfg: ExtractConfig,
    ) -> Result<Self, ExtractError> {
        Self::with_env(source, TokEnv::new(vocab), encode, stop, prepared, cfg)
    }

    /// [`with_prepared`](Self::with_prepared) over a vocabulary whose token trie is already
    /// built: a process that runs many constraints on one model (an eval, a server) builds one
    /// [`TokEnv`] and shares it, instead of sorting the whole vocabulary again per extractor
    /// (~100 ms at 262k tokens).
    pub fn with_env(
        source: S,
        env: TokEnv,
        encode: ChatEncoder,
        stop: Vec<TokenId>,
        prepared: Prepared,
        mut cfg: ExtractConfig,
    ) -> Result<Self, ExtractError> {
        use formwork_core::generate::Closing;
        // JSON's closing ranking is for JSON; a regex or grammar output is text.
        if matches!(prepared.kind, Kind::Text) && cfg.generate.closing == Closing::Json {
            cfg.generate.closing = Closing::Generic;
        }
        let vocab = env.vocab().clone();
        let matcher = if prepared.base.is_some() && !prepared.per_document() {
            let g = prepared
                .grammar_for("")?
                .expect("constrained mode has a grammar");
            let cg = CompiledGrammar::with_env(g, &env, cfg.limits)?;
            Some(Matcher::new(Arc::new(cg))?)
        } else {
            None
        };
        Ok(Extractor {
            gen: Generator::new(source, vocab),
            env,
            encode,
            stop,
            prepared,
            cfg,
            matcher,
            bad_samples: None,
            warnings: Vec::new(),
        })
    }

    /// Appends invalid outputs of the baselines to this log.
    pub fn with_bad_samples(mut self, log: BadSamples) -> Self {
        self.bad_samples = Some(log);
        self
    }

    /// Problems that did not fail a record (e.g. the bad-samples log became unwritable) since
    /// the last call, for the caller to report; the library prints nothing.
    pub fn take_warnings(&mut self) -> Vec<String> {
        std::mem::take(&mut self.warnings)
    }

    /// The generator (for its source and statistics).
    pub fn generator(&self) -> &Generator<S> {
        &self.gen
    }

    /// Extracts from one document. Never fails: problems become the record's status.
    /// `on_bytes` streams the output of the (last) generation.
    pub fn extract(
        &mut self,
        id: &str,
        document: &str,
        on_bytes: &mut dyn FnMut(&[u8]),
    ) -> RecordResult {
        let start = Instant::now();
        let mut r = match self.extract_inner(id, document, on_bytes) {
            Ok(r) => r,
            Err(e) => result(id, RecordStatus::Error, None, Some(e.to_string())),
        };
        r.latency_ms = start.elapsed().as_secs_f64() * 1e3;
        r
    }

    fn extract_inner(
        &mut self,
        id: &str,
        document: &str,
        on_bytes: &mut dyn FnMut(&[u8]),
    ) -> Result<RecordResult, ExtractError> {
        let user = user_message(&self.prepared, &self.cfg, document);
        let prompt =
            (self.encode)(self.cfg.system.as_deref(), &user).map_err(ExtractError::Encode)?;
        match self.cfg.mode {
            Mode::Constrained => self.constrained(id, document, &prompt, on_bytes),
            Mode::Prompt | Mode::Retry => {
                self.unconstrained(id, document, &user, &prompt, on_bytes)
            }
        }
    }

    fn constrained(
        &mut self,
        id: &str,
        document: &str,
        prompt: &[u32],
        on_bytes: &mut dyn FnMut(&[u8]),
    ) -> Result<RecordResult, ExtractError> {
        let mut fresh;
        let mut whole_words = true;
        let matcher = match &mut self.matcher {
            Some(m) => {
                m.reset();
                m
            }
            None => {
                (fresh, whole_words) =
                    document_matcher(&self.prepared, &self.env, &self.cfg, document)?;
                &mut fresh
            }
        };
        let Some(think) = &self.cfg.think else {
            let out = self
                .gen
                .generate(prompt, matcher, &self.cfg.generate, on_bytes)
                .map_err(ExtractError::from)?;
            return Ok(constrained_result(
                &self.prepared,
                &self.cfg,
                id,
                document,
                &out,
                whole_words,
            ));
        };
        let out = self
            .gen
            .generate_thinking(
                prompt,
                think,
                &self.stop,
                matcher,
                &self.cfg.generate,
                &mut |_| {},
                on_bytes,
            )
            .map_err(ExtractError::from)?;
        let mut r = constrained_result(
            &self.prepared,
            &self.cfg,
            id,
            document,
            &out.answer,
            whole_words,
        );
        add_reasoning(&mut r, &out.thought);
        Ok(r)
    }

    fn unconstrained(
        &mut self,
        id: &str,
        document: &str,
        user: &str,
        prompt: &[u32],
        on_bytes: &mut dyn FnMut(&[u8]),
    ) -> Result<RecordResult, ExtractError> {
        let out = self
            .gen
            .generate_free(prompt, &self.stop, &self.cfg.generate, on_bytes)
            .map_err(ExtractError::from)?;
        let text = out.text();
        let mut j = self.prepared.judge(&text, document, false);
        let mut last = text.clone();
        let mut total = (out.tokens_len(), out.forced_tokens);
        if j.status == RecordStatus::Invalid {
            self.log_bad(id, document, &text, &j.errors);
        }
        if j.status == RecordStatus::Invalid && self.cfg.mode == Mode::Retry {
            let again = retry_prompt(user, &text, &j.errors);
            let prompt2 =
                (self.encode)(self.cfg.system.as_deref(), &again).map_err(ExtractError::Encode)?;
            let out2 = self
                .gen
                .generate_free(&prompt2, &self.stop, &self.cfg.generate, on_bytes)
                .map_err(ExtractError::from)?;
            let text2 = out2.text();
            j = self.prepared.judge(&text2, document, false);
            if j.status == RecordStatus::Invalid {
                self.log_bad(id, document, &text2, &j.errors);
            }
            last = text2;
            total.0 += out2.tokens_len();
        }
        let mut r = from_judged(id, j);
        fill_counts(&mut r, &out);
        r.tokens = total.0;
        if r.status == RecordStatus::Invalid {
            r.text = Some(last);
        }
        Ok(r)
    }

    fn log_bad(&mut self, id: &str, document: &str, raw: &str, errors: &[String]) {
        if let Some(log) = &mut self.bad_samples {
            // A failing bad-samples log must not fail the record; it is reported once, through
            // `take_warnings`, and logging stops.
            if let Err(e) = log.record(id, document, raw, errors) {
                self.warnings.push(format!(
                    "cannot append to the bad-samples log ({e}); no further bad samples are logged"
                ));
                self.bad_samples = None;
            }
        }
    }
}
