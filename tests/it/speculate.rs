//! Speculative decoding is exact on real models (issue 45): greedy extraction of the shipped
//! suites' documents (the README example, the own suites, SNIPS, BFCL simple; see
//! `suite_docs.rs`) writes byte-identical output, and the same record, with speculation on
//! (the default of `formwork extract`) and off (`--no-speculate`), on SmolLM2-135M and the
//! default model, Qwen2.5-Coder-0.5B. Each document runs through [`Extractor::extract`] as
//! `formwork extract` runs it, over a model whose passes are counted: speculation must take
//! fewer passes in all, or the comparison would prove nothing.
//!
//! `--input` batches are compared both ways by `extract_parallel.rs`; the matcher's and the
//! KV cache's rollback on their own by formwork-core's `generate::speculate` tests and
//! formwork-model's `tests/batch.rs`. Cost: ~25 extractions of up to 96 tokens on SmolLM2
//! and 6 on Qwen2.5-Coder, both ways.

use formwork::extract::batch::RecordResult;
use formwork::extract::run::{Constraint, ExtractConfig, Extractor};
use formwork::generate::{GenerateConfig, LogitsSource, SourceError, Speculation};
use formwork::model::fetch::FetchConfig;
use formwork::model::{Loaded, Model, ModelConfig};

use crate::suite_docs::{suites, Counts};

/// The model, counting the passes asked of it.
struct Counted<'a> {
    model: &'a mut Model,
    passes: usize,
}

impl LogitsSource for Counted<'_> {
    fn forward(&mut self, tokens: &[u32], pos: usize) -> Result<Vec<f32>, SourceError> {
        self.passes += 1;
        LogitsSource::forward(self.model, tokens, pos)
    }

    fn forward_rows(
        &mut self,
        tokens: &[u32],
        pos: usize,
        rows: &[usize],
    ) -> Result<Vec<Vec<f32>>, SourceError> {
        self.passes += 1;
        LogitsSource::forward_rows(self.model, tokens, pos, rows)
    }

    fn context_len(&self) -> Option<usize> {
        LogitsSource::context_len(self.model)
    }
}

/// One greedy extraction of `text` under `schema`: the bytes streamed, the record (latency
/// zeroed) and the passes it took.
fn extract(
    loaded: &mut Loaded,
    schema: &serde_json::Value,
    text: &str,
    speculation: Speculation,
) -> (Vec<u8>, RecordResult, usize) {
    let cfg = ExtractConfig {
        generate: GenerateConfig {
            max_tokens: 96,
            speculation,
            ..Default::default()
        },
        ..Default::default()
    };
    let (vocab, encode, stop) = (loaded.vocab(), loaded.chat_encoder(), loaded.stop.clone());
    let source = Counted {
        model: &mut loaded.model,
        passes: 0,
    };
    let constraint = Constraint::Schema(schema.clone());
    let mut ex = Extractor::new(source, vocab, encode, stop, &constraint, cfg).unwrap();
    let mut bytes = Vec::new();
    let mut r = ex.extract("doc", text, &mut |b| bytes.extend_from_slice(b));
    r.latency_ms = 0.0;
    (bytes, r, ex.generator().source().passes)
}

/// Extracts every document of `counts` both ways on `model`; panics at the first difference.
fn both_ways(model: &str, counts: Counts) {
    let mut loaded = Loaded::load(Some(model), &FetchConfig::new(), &ModelConfig::new())
        .unwrap_or_else(|e| panic!("{model}: {e}"));
    let (mut docs, mut passes_on, mut passes_off, mut tokens) = (0, 0, 0, 0);
    for (suite, list) in suites(counts).unwrap() {
        assert!(!list.is_empty(), "{suite}: no documents");
        for doc in list {
            let (off, r_off, p_off) =
                extract(&mut loaded, &doc.schema, &doc.text, Speculation::Off);
            let (on, r_on, p_on) =
                extract(&mut loaded, &doc.schema, &doc.text, Speculation::default());
            let name = format!("{model} {suite} {}", doc.name);
            assert!(
                on == off,
                "{name}: speculation changed the output:\n  off {}\n  on  {}",
                String::from_utf8_lossy(&off),
                String::from_utf8_lossy(&on)
            );
            assert!(!off.is_empty(), "{name}: {r_off:?}");
            assert_eq!(r_on, r_off, "{name}");
            docs += 1;
            tokens += r_off.tokens;
            passes_on += p_on;
            passes_off += p_off;
        }
    }
    eprintln!("{model}: {docs} documents, {tokens} tokens, {passes_off} passes without speculation, {passes_on} with");
    assert!(
        passes_on < passes_off,
        "{model}: speculation saved no pass ({passes_on} vs {passes_off})"
    );
}

#[test]
fn greedy_extraction_is_byte_identical_with_and_without_speculation_smollm2() {
    both_ways(
        "smollm2-135m",
        Counts {
            own: 2,
            snips: 8,
            bfcl: 4,
        },
    );
}

#[test]
fn greedy_extraction_is_byte_identical_with_and_without_speculation_qwen() {
    both_ways(
        "qwen2.5-coder-0.5b",
        Counts {
            own: 1,
            snips: 2,
            bfcl: 1,
        },
    );
}
