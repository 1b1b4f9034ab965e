//! Shared helpers for the schema tests: data paths, instance texts, grammar checks.

use std::path::PathBuf;
use std::sync::Arc;

use formwork::grammar::Grammar;
use formwork::matcher::{CompiledGrammar, Limits, Matcher};
use formwork::schema::reference::Acceptor;
use formwork::schema::{CompileOptions, Whitespace};
use formwork::toktrie::{SyntheticVocab, Vocab};
use serde_json::Value;

/// The shared data directory: `FORMWORK_DATA`, else `<crate>/../shared/data`, else
/// `/work/shared/data`.
pub fn data_dir() -> PathBuf {
    if let Ok(d) = std::env::var("FORMWORK_DATA") {
        return PathBuf::from(d);
    }
    let local = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/data");
    if local.exists() {
        return local;
    }
    PathBuf::from("/work/shared/data")
}

/// The crate's own test data directory.
pub fn crate_path(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(rel)
}

/// The configurations every hand-written case runs under.
pub fn configs() -> Vec<(&'static str, CompileOptions)> {
    vec![
        ("compact", CompileOptions::default()),
        (
            "flexible",
            CompileOptions {
                whitespace: Whitespace::Flexible { max_run: 64 },
                ..Default::default()
            },
        ),
    ]
}

/// The texts an instance is fed as under `opts`: compact JSON, plus pretty-printed JSON in
/// flexible mode.
pub fn instance_texts(v: &Value, opts: &CompileOptions) -> Vec<String> {
    let mut out = vec![serde_json::to_string(v).expect("serializable")];
    if matches!(opts.whitespace, Whitespace::Flexible { .. }) {
        out.push(serde_json::to_string_pretty(v).expect("serializable"));
    }
    out
}

/// Whether `g` accepts `text`, by the reference acceptor (byte level).
pub fn accepts(g: &Grammar, text: &str) -> Result<(), String> {
    let mut a = Acceptor::new(g)?;
    a.accepts(text.as_bytes())
        .map_err(|r| format!("rejected at byte {}: {}", r.offset, r.reason))
}

/// Whether the matcher (byte-level vocabulary) accepts `text` to the end.
pub fn matcher_accepts(g: &Grammar, text: &str) -> Result<(), String> {
    let vocab = Arc::new(SyntheticVocab::byte_level());
    let cg =
        CompiledGrammar::new(g.clone(), vocab, Limits::default()).map_err(|e| e.to_string())?;
    let mut m = Matcher::new(Arc::new(cg)).map_err(|e| e.to_string())?;
    m.consume_bytes(text.as_bytes())
        .map_err(|e| e.to_string())?;
    if m.is_accepting() {
        Ok(())
    } else {
        Err("matcher not accepting at the end".into())
    }
}

/// Like [`matcher_accepts`], with fast-forward on, as a decoder runs it: before each sampled
/// byte the forced tokens are computed and consumed, and their bytes must be exactly the text's
/// next bytes (a forced byte that differs rejects the text).
pub fn matcher_accepts_forced(g: &Grammar, text: &str) -> Result<(), String> {
    let vocab = Arc::new(SyntheticVocab::byte_level());
    let cg = CompiledGrammar::new(g.clone(), vocab.clone(), Limits::default())
        .map_err(|e| e.to_string())?;
    let mut m = Matcher::new(Arc::new(cg)).map_err(|e| e.to_string())?;
    let bytes = text.as_bytes();
    let mut pos = 0;
    while pos < bytes.len() {
        let forced = m.compute_forced_tokens().map_err(|e| e.to_string())?;
        if forced.is_empty() {
            m.consume_bytes(&bytes[pos..pos + 1])
                .map_err(|e| e.to_string())?;
            pos += 1;
            continue;
        }
        let fb: Vec<u8> = forced
            .iter()
            .flat_map(|&t| vocab.token_bytes(t).to_vec())
            .collect();
        if !bytes[pos..].starts_with(&fb) {
            return Err(format!(
                "forced {:?} at byte {pos}",
                String::from_utf8_lossy(&fb)
            ));
        }
        m.consume_tokens(&forced).map_err(|e| e.to_string())?;
        pos += fb.len();
    }
    if m.is_accepting() {
        Ok(())
    } else {
        Err("matcher not accepting at the end".into())
    }
}
