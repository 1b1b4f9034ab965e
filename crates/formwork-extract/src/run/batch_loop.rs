//! The batch loops over a JSONL input: [`Extractor::run_batch`] (one document at a time) and
//! [`Extractor::run_batch_parallel`] (up to `parallel` documents decoded together through one
//! [`BatchGenerator`], the prompt prefix they share prefilled once, the KV caches in flight
//! capped by a [`KvBudget`]), each writing one line per input, skipping the ids already done
//! (resume), and counting a [`BatchSummary`].
//!
//! Per record the parallel loop does exactly what [`Extractor::extract`] does (same prompt,
//! grammar, config and judging), so with a source whose batched logits equal its
//! single-sequence ones, greedy results are the same.
//!
//! Does not own the JSONL files and their format ([`crate::batch`]) or one record's decisions
//! (the ones [`Extractor::extract`] makes, from [`prepare`](super::prepare) and
//! [`record`](super::record)).
//!
//! May use (within `run`): `config`, `prepare`, `record`, `extractor`.

use std::time::Instant;

use super::config::Mode;
use super::extractor::Extractor;
use super::prepare::{document_matcher, user_message};
use super::record::{add_reasoning, constrained_result, result};
use crate::batch::{BadLine, Record, RecordResult, RecordStatus};
use crate::ExtractError;
use formwork_core::generate::batch::{BatchGenerator, BatchLogitsSource, BatchRequest};
use formwork_core::generate::{LogitsSource, ThinkConfig};
use formwork_core::matcher::Matcher;

impl<S: LogitsSource> Extractor<S> {
    /// Runs a batch: every input (record or bad line) becomes one line of `output`, in order,
    /// skipping ids already there (resume). `on_result` is called after each written line.
    /// Ids must be unique ([`check_unique_ids`](crate::batch::check_unique_ids)): a repeated
    /// id counts as done once its first result is written.
    ///
    /// # Errors
    /// Only writing the output fails the batch; bad records become `error` lines.
    pub fn run_batch(
        &mut self,
        inputs: &[Result<Record, BadLine>],
        output: &mut crate::batch::OutputLog,
        on_result: &mut dyn FnMut(&RecordResult),
    ) -> std::io::Result<BatchSummary> {
        let mut summary = BatchSummary::default();
        for input in inputs {
            if already_done(input, output, &mut summary) {
                continue;
            }
            let r = match input {
                Ok(rec) => self.extract(&rec.id, &rec.text, &mut |_| {}),
                Err(bad) => result(
                    &bad.id,
                    RecordStatus::Error,
                    None,
                    Some(bad.message.clone()),
                ),
            };
            output.write(&r)?;
            summary.count(r.status);
            on_result(&r);
        }
        Ok(summary)
    }
}

/// Whether `input`'s id already has a line in `output` (resume), counted as skipped if so:
/// both batch loops' rule, asked when an input's turn comes.
fn already_done(
    input: &Result<Record, BadLine>,
    output: &crate::batch::OutputLog,
    summary: &mut BatchSummary,
) -> bool {
    let id = match input {
        Ok(r) => &r.id,
        Err(b) => &b.id,
    };
    let done = output.is_done(id);
    if done {
        summary.skipped += 1;
    }
    done
}

/// A memory cap on the KV caches of the documents in flight in
/// [`Extractor::run_batch_parallel`], on top of its `parallel` cap.
///
/// A document is admitted only when its cache at full length — its prompt plus the token
/// budget, in positions, times `bytes_per_position`, **times 2** because caches grow by
/// doubling (the allocation can reach twice what is held) — fits beside those of the
/// documents already in flight and the shared prefix's. So the batch never holds more than
/// `bytes` of KV cache, however the lengths mix; a document that cannot fit even alone is an
/// `error` record saying so.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KvBudget {
    /// The cap, in bytes.
    pub bytes: usize,
    /// The model's KV cache bytes per position (all layers, keys and values).
    pub bytes_per_position: usize,
}

impl KvBudget {
    /// The most bytes a sequence of up to `positions` positions may allocate.
    pub fn sequence_bytes(&self, positions: usize) -> usize {
        positions
            .saturating_mul(self.bytes_per_position)
            .saturating_mul(2)
    }
}

impl<S: LogitsSource + BatchLogitsSource> Extractor<S> {
    /// [`run_batch`](Self::run_batch) with up to `parallel` documents decoded together
    /// (constrained mode; the baselines, and `parallel` ≤ 1, run one document at a time
    /// through `run_batch`). Each record gets the prompt, grammar, config and judging
    /// [`extract`](Self::extract) would give it (a config that thinks first reasons in the
    /// same batches, [`BatchGenerator::push_thinking`], its KV reservation counting the
    /// reasoning's budget and trigger); the prompt prefix shared by the first two
    /// documents (system prompt, instructions, schema, examples) is prefilled once and forked.
    /// Lines are written **as documents finish** (finish order, not input order; a bad input
    /// line is written when it is reached), each whole and flushed, so an interrupted run
    /// resumes like [`run_batch`](Self::run_batch)'s. `latency_ms` runs from a document's
    /// admission to its result, so it includes the passes shared with the others. With a
    /// [`KvBudget`], fewer documents may be in flight than `parallel` (see its docs).
    ///
    /// # Errors
    /// Only writing the output fails the batch; a failed forward pass becomes an `error`
    /// line for each document in flight at the time, and the batch goes on.
    pub fn run_batch_parallel(
        &mut self,
        inputs: &[Result<Record, BadLine>],
        output: &mut crate::batch::OutputLog,
        parallel: usize,
        kv: Option<KvBudget>,
        on_result: &mut dyn FnMut(&RecordResult),
    ) -> std::io::Result<BatchSummary> {
        if parallel <= 1 || self.cfg.mode != Mode::Constrained {
            return self.run_batch(inputs, output, on_result);
        }
        let mut summary = BatchSummary::default();
        let todo: Vec<_> = inputs
            .iter()
            .filter(|input| !already_done(input, output, &mut summary))
            .collect();
        let Extractor {
            gen,
            env,
            encode,
            prepared,
            cfg,
            stop,
            matcher: shared,
            ..
        } = self;
        let vocab = env.vocab().clone();
        let mut write = |r: &RecordResult| -> std::io::Result<()> {
            output.write(r)?;
            summary.count(r.status);
            on_result(r);
            Ok(())
        };
        // The prompt `extract` gives the document.
        let prompt_of = |document: &str| -> Result<Vec<u32>, ExtractError> {
            let user = user_message(prepared, cfg, document);
            (encode)(cfg.system.as_deref(), &user).map_err(ExtractError::Encode)
        };
        // Positions a document's sequence may take past its prompt: the answer's budget, and
        // with thinking first the reasoning's.
        let max_tokens = cfg.generate.max_tokens;
        let thinking = cfg.think.as_ref().map_or(0, ThinkConfig::max_positions);
        let mut batch = BatchGenerator::new(gen.source_mut(), vocab, parallel);
        // KV bytes free for documents in flight (the shared prefix's cache is taken out).
        let mut kv_free = kv.map(|k| k.bytes);
        let docs: Vec<&Record> = todo.iter().filter_map(|r| r.as_ref().ok()).collect();
        if let [a, b, ..] = docs[..] {
            if let (Ok(pa), Ok(pb)) = (prompt_of(&a.text), prompt_of(&b.text)) {
                let common = pa.iter().zip(&pb).take_while(|(x, y)| x == y).count();
                let cost = kv.map_or(0, |k| k.sequence_bytes(common));
                // Only when it leaves room for a document; a failed prefill only costs speed
                // (every request then feeds its whole prompt).
                let room = kv_free.is_none_or(|free| {
                    let one = kv.map_or(0, |k| k.sequence_bytes(pa.len() + thinking + max_tokens));
                    cost.saturating_add(one) <= free
                });
                if common > 0 && room && batch.set_prefix(pa[..common].to_vec()).is_ok() {
                    kv_free = kv_free.map(|free| free - cost);
                }
            }
        }
        // Requests in flight, by batch id: (record, grounded whole words, admission time,
        // KV bytes reserved).
        let mut inflight: std::collections::HashMap<usize, (&Record, bool, Instant, usize)> =
            std::collections::HashMap::new();
        // A prepared document waiting for KV room: (record, admission time, prompt, matcher,
        // grounded whole words, KV bytes it needs).
        type Waiting<'r> = (&'r Record, Instant, Vec<u32>, Matcher, bool, usize);
        let mut waiting: Option<Waiting> = None;
        let mut next = todo.into_iter();
        let mut exhausted = false;
        loop {
            // Keep the batch full, and no more: documents are prepared as they are admitted.
            while batch.active_len() + batch.queued_len() < parallel {
                if let Some((rec, start, prompt, matcher, whole_words, need)) = waiting.take() {
                    if kv_free.is_some_and(|free| need > free) {
                        waiting = Some((rec, start, prompt, matcher, whole_words, need));
                        break;
                    }
                    kv_free = kv_free.map(|free| free - need);
                    let request = BatchRequest {
                        prompt,
                        matcher,
                        config: cfg.generate.clone(),
                    };
                    // Thinking first: the reasoning is decoded in the same batches, as
                    // `generate_thinking` decodes it for one document.
                    let id = match &cfg.think {
                        Some(think) => batch.push_thinking(request, think.clone(), stop.clone()),
                        None => batch.push(request),
                    };
                    inflight.insert(id, (rec, whole_words, start, need));
                    continue;
                }
                if exhausted {
                    break;
                }
                let Some(input) = next.next() else {
                    exhausted = true;
                    break;
                };
                let rec = match input {
                    Ok(rec) => rec,
                    Err(bad) => {
                        let message = Some(bad.message.clone());
                        write(&result(&bad.id, RecordStatus::Error, None, message))?;
                        continue;
                    }
                };
                let start = Instant::now();
                let req = prompt_of(&rec.text).and_then(|prompt| {
                    let (matcher, whole_words) = match shared {
                        Some(m) => (Matcher::new(m.compiled().clone())?, true),
                        None => document_matcher(prepared, env, cfg, &rec.text)?,
                    };
                    Ok((prompt, matcher, whole_words))
                });
                match req {
                    Ok((prompt, matcher, whole_words)) => {
                        let positions = prompt.len() + thinking + max_tokens;
                        let need = kv.map_or(0, |k| k.sequence_bytes(positions));
                        match kv {
                            Some(k) if need > k.bytes => {
                                let reasoning = if thinking > 0 {
                                    format!(" + {thinking} of reasoning and its trigger")
                                } else {
                                    String::new()
                                };
                                let message = format!(
                                    "the document needs {need} bytes of KV cache ({positions} \
                                     positions: its {} prompt tokens{reasoning} + max_tokens \
                                     {max_tokens}, × {} bytes, × 2 for the cache's growth), \
                                     over the KV budget of {} bytes",
                                    prompt.len(),
                                    k.bytes_per_position,
                                    k.bytes
                                );
                                let r = result(&rec.id, RecordStatus::Error, None, Some(message));
                                write(&r)?;
                            }
                            _ => waiting = Some((rec, start, prompt, matcher, whole_words, need)),
                        }
                    }
                    Err(e) => {
                        let mut r = result(&rec.id, RecordStatus::Error, None, Some(e.to_string()));
                        r.latency_ms = start.elapsed().as_secs_f64() * 1e3;
                        write(&r)?;
                    }
                }
            }
            if batch.is_idle() {
                if waiting.is_some() {
                    // Nothing in flight, yet the waiting document does not fit: it fits alone
                    // (checked against the whole budget), only not beside the shared prefix,
                    // which is dropped (later documents feed their whole prompts).
                    batch.set_prefix(Vec::new()).ok();
                    kv_free = kv.map(|k| k.bytes);
                    continue;
                }
                break;
            }
            let finished = match batch.step() {
                Ok(f) => f,
                Err(e) => {
                    // Every request was admitted before the pass (the queue never outgrows
                    // the batch), so all in flight were dropped with it.
                    let mut lost: Vec<_> = inflight.drain().collect();
                    lost.sort_unstable_by_key(|(id, _)| *id);
                    for (_, (rec, _, start, need)) in lost {
                        kv_free = kv_free.map(|free| free + need);
                        let mut r = result(&rec.id, RecordStatus::Error, None, Some(e.to_string()));
                        r.latency_ms = start.elapsed().as_secs_f64() * 1e3;
                        write(&r)?;
                    }
                    continue;
                }
            };
            for f in finished {
                let Some((rec, whole_words, start, need)) = inflight.remove(&f.id) else {
                    continue;
                };
                kv_free = kv_free.map(|free| free + need);
                let mut r = match f.result {
                    Ok(out) => {
                        let mut r = constrained_result(
                            prepared,
                            cfg,
                            &rec.id,
                            &rec.text,
                            &out,
                            whole_words,
                        );
                        if let Some(t) = &f.thought {
                            add_reasoning(&mut r, t);
                        }
                        r
                    }
                    Err(e) => result(
                        &rec.id,
                        RecordStatus::Error,
                        None,
                        Some(ExtractError::from(e).to_string()),
                    ),
                };
                r.latency_ms = start.elapsed().as_secs_f64() * 1e3;
                write(&r)?;
            }
        }
        Ok(summary)
    }
}

/// Counts of a batch run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BatchSummary {
    /// Records already in the output (resume).
    pub skipped: usize,
    /// `ok` records.
    pub ok: usize,
    /// `refusal` records.
    pub refusal: usize,
    /// `invalid` records.
    pub invalid: usize,
    /// `incomplete` records.
    pub incomplete: usize,
    /// `error` records.
    pub error: usize,
}

impl BatchSummary {
    fn count(&mut self, s: RecordStatus) {
        match s {
            RecordStatus::Ok => self.ok += 1,
            RecordStatus::Refusal => self.refusal += 1,
            RecordStatus::Invalid => self.invalid += 1,
            RecordStatus::Incomplete => self.incomplete += 1,
            RecordStatus::Error => self.error += 1,
        }
    }

    /// Records processed in this run.
    pub fn processed(&self) -> usize {
        self.ok + self.refusal + self.invalid + self.incomplete + self.error
    }

    /// Whether every processed record is `ok` (or a refusal).
    pub fn all_ok(&self) -> bool {
        self.invalid + self.incomplete + self.error == 0
    }
}
