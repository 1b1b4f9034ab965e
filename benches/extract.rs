//! Constrained vs unconstrained generation on the default model, same prompts and budgets.
//!
//! Reports end-to-end tokens/s of both (constrained counts sampled + fast-forwarded tokens),
//! the share of forced tokens, and mask time as a share of step time (issue 5 targets:
//! constrained throughput ≥ unconstrained, mask share < 2%). Greedy decoding, fixed prompts:
//! runs are reproducible. Run: `cargo bench --bench extract` (FORMWORK_BENCH_RECORDS=N for
//! more records per schema; default 3).

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;

use formwork::extract::load::load_model;
use formwork::extract::prompt::{PromptParts, PromptTemplate};
use formwork::generate::{GenerateConfig, Generator};
use formwork::matcher::{CompiledGrammar, Limits, Matcher};
use formwork::schema::{compile, CompileOptions};

const DOCS: [&str; 3] = [
    "Incident 2024-03-07: db-3 ran out of disk at 14:05, severity high, owner Maria Lopez; \
     recovered 14:40 after removing WAL archives. Affected: checkout, search.",
    "Course progress: Ana finished 7 of 10 modules of Rust Basics with an average score of 86; \
     the next module, Traits, is due on 2024-05-02.",
    "Ticket 5512: the login page shows a blank screen on Safari 17. Reported by Tom Ng, \
     priority medium, component web-frontend, status open.",
];

fn main() -> anyhow::Result<()> {
    let records: usize = std::env::var("FORMWORK_BENCH_RECORDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3)
        .min(DOCS.len());
    let schemas = [
        json!({"type": "object", "properties": {"title": {"type": "string", "maxLength": 40}, "severity": {"enum": ["low", "medium", "high"]}, "owner": {"type": "string", "maxLength": 30}, "date": {"type": "string", "format": "date"}}, "required": ["title", "severity", "owner", "date"], "additionalProperties": false}),
        json!({"type": "object", "properties": {"person": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 30}, "role": {"type": "string", "maxLength": 20}}, "required": ["name", "role"], "additionalProperties": false}, "items": {"type": "array", "items": {"type": "string", "maxLength": 20}, "maxItems": 3}, "count": {"type": "integer"}}, "required": ["person", "items", "count"], "additionalProperties": false}),
    ];
    let loaded = load_model(None)?;
    let mut gen = Generator::new(loaded.model, loaded.vocab.clone());
    let cfg = GenerateConfig {
        max_tokens: 96,
        ..Default::default()
    };
    let (mut c_tok, mut c_forced, mut c_time, mut c_mask) =
        (0usize, 0usize, Duration::ZERO, Duration::ZERO);
    let (mut u_tok, mut u_time) = (0usize, Duration::ZERO);
    let mut complete = 0usize;
    for schema in &schemas {
        let g = compile(schema, &CompileOptions::default())?.grammar;
        let cg = Arc::new(CompiledGrammar::new(
            g,
            loaded.vocab.clone(),
            Limits::default(),
        )?);
        let mut m = Matcher::new(cg)?;
        let schema_text = schema.to_string();
        for doc in &DOCS[..records] {
            let user = PromptTemplate::default_template().render(&PromptParts {
                schema: Some(&schema_text),
                document: doc,
                ..Default::default()
            });
            let prompt = (loaded.encode)(None, &user).map_err(anyhow::Error::msg)?;
            // Same prompt, both ways; the cache is cleared so both pay the full prompt.
            gen.forget_cache();
            m.reset();
            let t = Instant::now();
            let c = gen.generate(&prompt, &mut m, &cfg, &mut |_| {})?;
            c_time += t.elapsed();
            c_tok += c.tokens_len();
            c_forced += c.forced_tokens;
            c_mask += c.timings.mask + c.timings.closing;
            complete += usize::from(c.accepted);
            gen.forget_cache();
            let t = Instant::now();
            let u = gen.generate_free(&prompt, &loaded.stop, &cfg, &mut |_| {})?;
            u_time += t.elapsed();
            u_tok += u.tokens_len().max(1);
        }
    }
    let n = schemas.len() * records;
    println!("extract bench: smollm2-135m, cpu, {n} generations each way, max_tokens 96, greedy");
    println!(
        "constrained:   {c_tok} tokens in {:.2} s = {:.1} tok/s (forced {:.1}%, complete {complete}/{n})",
        c_time.as_secs_f64(),
        c_tok as f64 / c_time.as_secs_f64(),
        100.0 * c_forced as f64 / c_tok.max(1) as f64
    );
    println!(
        "unconstrained: {u_tok} tokens in {:.2} s = {:.1} tok/s",
        u_time.as_secs_f64(),
        u_tok as f64 / u_time.as_secs_f64()
    );
    println!(
        "mask time: {:.3} s = {:.2}% of constrained time",
        c_mask.as_secs_f64(),
        100.0 * c_mask.as_secs_f64() / c_time.as_secs_f64()
    );
    Ok(())
}
