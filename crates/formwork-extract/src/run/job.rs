//! [`RecordJob`]: one record's extraction as the generations it needs, for a caller that runs
//! them itself — many records decoded together through a
//! [`BatchGenerator`](formwork_core::generate::batch::BatchGenerator) (`formwork eval`'s
//! batched runs).
//!
//! Owns the steps of [`Extractor::extract`](super::Extractor::extract) between generations:
//! the prompt, the matcher (constrained mode), judging each output, the baselines' second
//! round (`retry`: the errors fed back once) and the record. It makes the same decisions on the
//! same generations as the extractor, so with identical generations the records are identical
//! (the eval backend's tests compare both paths). Does not own decoding, the model or the
//! bad-samples log (the invalid outputs are handed to the caller instead).
//!
//! Cost per record: what the extractor pays (one grammar compile per record here, as the
//! extractor pays per document for grounded grammars; the extractor reuses one matcher for a
//! document-independent grammar), and one more prompt encoding for a retry.
//!
//! May use (within `run`): `config`, `prepare`, `record`.

use std::sync::Arc;

use formwork_core::generate::{Closing, GenerateError, Generation};
use formwork_core::matcher::{CompiledGrammar, Matcher};
use formwork_core::toktrie::TokEnv;

use super::config::{ChatEncoder, ExtractConfig, Mode};
use super::prepare::{document_matcher, Kind, Prepared};
use super::record::{constrained_result, from_judged, result};
use crate::batch::{RecordResult, RecordStatus};
use crate::prompt::retry_prompt;
use crate::ExtractError;

/// What a [`RecordJob`] needs next.
#[derive(Debug)]
pub enum RecordStep {
    /// Decode `prompt` under `matcher` with the job's [`RecordJob::generate_config`]
    /// ([`Generator::generate`](formwork_core::generate::Generator::generate) or a batched
    /// request).
    Constrained {
        /// The prompt's token ids.
        prompt: Vec<u32>,
        /// A fresh matcher of the record's grammar (boxed: a matcher is large).
        matcher: Box<Matcher>,
    },
    /// Decode `prompt` as free text ending at the model's stop tokens
    /// ([`Generator::generate_free`](formwork_core::generate::Generator::generate_free)).
    Free {
        /// The prompt's token ids.
        prompt: Vec<u32>,
    },
    /// The record is done.
    Done(RecordResult),
}

/// One record in progress (see the module docs): [`start`](Self::start), then
/// [`next`](Self::next) with each generation the last step asked for, until
/// [`RecordStep::Done`].
#[derive(Debug)]
pub struct RecordJob {
    id: String,
    document: String,
    /// The user message of the first round (a retry quotes it).
    user: String,
    cfg: ExtractConfig,
    /// Grounded values stay whole-word spans (constrained mode).
    whole_words: bool,
    /// The first free round's counts, once it is done: (tokens, forced tokens, closed early).
    first: Option<(usize, usize, bool)>,
    /// Invalid outputs of the baselines not yet taken: (raw text, errors).
    bad: Vec<(String, Vec<String>)>,
}

impl RecordJob {
    /// Starts extracting `document` (record `id`) under `prepared` and `cfg`, with the
    /// vocabulary `env` and the model's chat `encode`r.
    ///
    /// # Errors
    /// What [`Extractor::with_env`](super::Extractor::with_env) fails on before any record: a
    /// document-independent grammar that does not compile against the vocabulary. A config
    /// that thinks first ([`ExtractConfig::think`]) asks for its constrained step with the
    /// reasoning before it ([`think`](Self::think), decoded by
    /// [`BatchGenerator::push_thinking`](formwork_core::generate::batch::BatchGenerator::push_thinking));
    /// its prompt ends with the same instruction as the extractor's. Failures
    /// of the record itself (its prompt, its grounded grammar) are a
    /// [`RecordStep::Done`] error record, as [`Extractor::extract`](super::Extractor::extract)
    /// reports them.
    pub fn start(
        prepared: &Prepared,
        mut cfg: ExtractConfig,
        env: &TokEnv,
        encode: &ChatEncoder,
        id: &str,
        document: &str,
    ) -> Result<(RecordJob, RecordStep), ExtractError> {
        // As the extractor: JSON's closing ranking is for JSON; a regex or grammar output is
        // text.
        if matches!(prepared.kind, Kind::Text) && cfg.generate.closing == Closing::Json {
            cfg.generate.closing = Closing::Generic;
        }
        let shared = if prepared.base.is_some() && !prepared.per_document() {
            let g = prepared
                .grammar_for("")?
                .expect("constrained mode has a grammar");
            Some(Matcher::new(Arc::new(CompiledGrammar::with_env(
                g, env, cfg.limits,
            )?))?)
        } else {
            None
        };
        let mut user = prepared.user_message(&cfg.template, document);
        if let Some(think) = &cfg.think {
            user.push_str(&crate::prompt::think_instruction(
                &think.trigger,
                prepared.answer(),
            ));
        }
        let mut job = RecordJob {
            id: id.to_string(),
            document: document.to_string(),
            user,
            cfg,
            whole_words: true,
            first: None,
            bad: Vec::new(),
        };
        let step = match job.first_step(prepared, env, encode, shared) {
            Ok(s) => s,
            Err(e) => RecordStep::Done(job.fail(e.to_string())),
        };
        Ok((job, step))
    }

    fn first_step(
        &mut self,
        prepared: &Prepared,
        env: &TokEnv,
        encode: &ChatEncoder,
        shared: Option<Matcher>,
    ) -> Result<RecordStep, ExtractError> {
        let prompt =
            (encode)(self.cfg.system.as_deref(), &self.user).map_err(ExtractError::Encode)?;
        Ok(match self.cfg.mode {
            Mode::Constrained => {
                let matcher = match shared {
                    Some(m) => m,
                    None => {
                        let (m, whole_words) =
                            document_matcher(prepared, env, &self.cfg, &self.document)?;
                        self.whole_words = whole_words;
                        m
                    }
                };
                RecordStep::Constrained {
                    prompt,
                    matcher: Box::new(matcher),
                }
            }
            Mode::Prompt | Mode::Retry => RecordStep::Free { prompt },
        })
    }

    /// The decoding options of every generation of this record.
    pub fn generate_config(&self) -> &formwork_core::generate::GenerateConfig {
        &self.cfg.generate
    }

    /// How the record's constrained step reasons first, if its config thinks: the caller then
    /// decodes it as [`Generator::generate_thinking`](formwork_core::generate::Generator::generate_thinking)
    /// does, and hands the reasoning to [`next_thought`](Self::next_thought).
    pub fn think(&self) -> Option<&formwork_core::generate::ThinkConfig> {
        self.cfg.think.as_ref()
    }

    /// [`next`](Self::next) for a step decoded with its reasoning first ([`think`](Self::think)):
    /// the record also carries the reasoning and counts its tokens, as
    /// [`Extractor::extract`](super::Extractor::extract)'s does.
    pub fn next_thought(
        &mut self,
        prepared: &Prepared,
        encode: &ChatEncoder,
        thought: Option<&formwork_core::generate::Thought>,
        out: Result<&Generation, GenerateError>,
    ) -> RecordStep {
        match (self.next(prepared, encode, out), thought) {
            (RecordStep::Done(mut r), Some(t)) => {
                r.reasoning = Some(t.text());
                r.tokens += t.tokens;
                RecordStep::Done(r)
            }
            (step, _) => step,
        }
    }

    /// Takes the generation the last step asked for (or its failure) and says what comes
    /// next.
    pub fn next(
        &mut self,
        prepared: &Prepared,
        encode: &ChatEncoder,
        out: Result<&Generation, GenerateError>,
    ) -> RecordStep {
        let out = match out {
            Ok(g) => g,
            Err(e) => return RecordStep::Done(self.fail(ExtractError::from(e).to_string())),
        };
        if self.cfg.mode == Mode::Constrained {
            return RecordStep::Done(constrained_result(
                prepared,
                &self.cfg,
                &self.id,
                &self.document,
                out,
                self.whole_words,
            ));
        }
        let text = out.text();
        let j = prepared.judge(&text, &self.document, false);
        if j.status == RecordStatus::Invalid {
            self.bad.push((text.clone(), j.errors.clone()));
        }
        let (tokens, forced, closed_early) = match self.first {
            // The second round: its tokens add up, the counts of the first stay.
            Some((t, f, c)) => (t + out.tokens_len(), f, c),
            None => {
                self.first = Some((out.tokens_len(), out.forced_tokens, out.closed_early));
                if j.status == RecordStatus::Invalid && self.cfg.mode == Mode::Retry {
                    let again = retry_prompt(&self.user, &text, &j.errors);
                    return match (encode)(self.cfg.system.as_deref(), &again) {
                        Ok(prompt) => RecordStep::Free { prompt },
                        Err(e) => RecordStep::Done(self.fail(ExtractError::Encode(e).to_string())),
                    };
                }
                (out.tokens_len(), out.forced_tokens, out.closed_early)
            }
        };
        let mut r = from_judged(&self.id, j);
        (r.tokens, r.forced_tokens, r.closed_early) = (tokens, forced, closed_early);
        if r.status == RecordStatus::Invalid {
            r.text = Some(text);
        }
        RecordStep::Done(r)
    }

    /// The invalid outputs of the baselines so far, (raw text, errors), for a bad-samples
    /// log; each is handed out once.
    pub fn take_bad_samples(&mut self) -> Vec<(String, Vec<String>)> {
        std::mem::take(&mut self.bad)
    }

    /// The record's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The record of a job that failed outside it (a batched forward pass that failed for
    /// every sequence in it): an `error` record with `message`.
    pub fn fail(&self, message: String) -> RecordResult {
        result(&self.id, RecordStatus::Error, None, Some(message))
    }
}
