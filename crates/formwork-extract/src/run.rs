//! The [`Extractor`]: one prepared constraint and one model, run over documents.
//!
//! Owns what happens to one record: build the prompt, decode (constrained, or one of the
//! unconstrained baselines `prompt` / `retry`), read the value out, validate it, classify it
//! ([`RecordStatus`]) and log bad samples; and the batch loop over a JSONL input. Preparing is
//! done once per run ([`Prepared::new`]: schema compiled, tools composed, validator built); per
//! record only a grammar with grounded fields is rebuilt (it depends on the document), and the
//! KV cache of the prompt prefix shared by all records (instruction + schema) is reused by the
//! generator.
//!
//! [`Extractor::run_batch_parallel`] decodes the documents of a batch together
//! (constrained mode, over a [`BatchLogitsSource`] such as formwork-model's `Model`): up to
//! `parallel` documents in flight through one [`BatchGenerator`], the prompt prefix they share
//! prefilled once, each result written as soon as its document finishes. Per record it does
//! exactly what [`Extractor::extract`] does (same prompt, grammar, config and judging), so with
//! a source whose batched logits equal its single-sequence ones, greedy results are the same.
//!
//! Does not own the model, the tokenizer or chat templates: the caller passes a
//! [`LogitsSource`] and a [`ChatEncoder`].
//!
//! # Modules
//! Files: `config` → `prepare` → `judge` → `record` → `extractor` → `batch_loop` → `job`.
//!
//! One job each, in dependency order (each uses only those before it); the public types are
//! re-exported here, so their paths are `run::…`:
//! - `config`: what a run is asked for ([`Constraint`], [`ExtractConfig`], [`Mode`],
//!   [`GroundedSpans`], [`ChatEncoder`]);
//! - `prepare`: the constraint compiler ([`Prepared`]; per document its grammar, matcher and
//!   user message);
//! - `judge`: the output checker (read, apply the [`GroundedSpans`] rule, validate);
//! - `record`: one document's [`RecordResult`](crate::batch::RecordResult) from a judged
//!   output or a generation;
//! - `extractor`: the decode driver ([`Extractor`], one document at a time);
//! - `batch_loop`: the batch loops ([`Extractor::run_batch`],
//!   [`Extractor::run_batch_parallel`], [`KvBudget`], [`BatchSummary`]);
//! - `job`: one record's steps for a caller that decodes them itself ([`RecordJob`]).
//!
//! May use: `validate`, `prompt`, `tools`, `batch`, `grounded`, `compose`.
//!
//! [`RecordStatus`]: crate::batch::RecordStatus
//! [`BatchLogitsSource`]: formwork_core::generate::batch::BatchLogitsSource
//! [`BatchGenerator`]: formwork_core::generate::batch::BatchGenerator
//! [`LogitsSource`]: formwork_core::generate::LogitsSource

mod batch_loop;
mod config;
mod extractor;
mod job;
mod judge;
mod prepare;
mod record;

pub use batch_loop::{BatchSummary, KvBudget};
pub use config::{ChatEncoder, Constraint, ExtractConfig, GroundedSpans, Mode};
pub use extractor::Extractor;
pub use job::{RecordJob, RecordStep};
pub use prepare::Prepared;

#[cfg(test)]
mod tests;
