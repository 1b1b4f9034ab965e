//! `formwork debug masks`: the engine's masks along token walks, as digests, for checking other
//! front ends against the Rust matcher bit for bit (the Python package's masks test).
//!
//! Reads JSON lines from stdin, `{"schema": S, "options": O, "walks": [[id, ...], ...]}` (`O`:
//! the fields of `CompileOptions`, optional), compiles each schema for the tokenizer of
//! `--gguf FILE` (built as the Python package's `Tokenizer.from_gguf` builds it: the file's
//! vocabulary, its EOS plus the common end-of-turn tokens), walks every token list from a
//! fresh matcher and prints one JSON line per input line: `{"error": E}` when the schema does
//! not compile, else `{"walks": [{"digests": [...], "refused_at": k|null, "accepting": b}]}`.
//! Each digest is the SHA-256 (hex) of the mask before a token (and after the last one) as the
//! shared int32 bitmask row: token i is bit i % 32 of 32-bit little-endian word i / 32,
//! `ceil(vocab / 32)` words. A walk stops at the first token outside the mask (`refused_at`).
//! Glue only: compile, matcher and tokenizer are the library's.

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::{Args, Subcommand};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::matcher::{CompiledGrammar, Limits, Matcher};
use crate::model::fetch::LocatedModel;
use crate::model::tokenizer::GgufTokenizer;
use crate::schema::{compile, CompileOptions};
use crate::toktrie::{TokEnv, TokenId, TokenSet, Vocab};

/// `formwork debug ...`
#[derive(Debug, Args)]
pub struct DebugArgs {
    /// What to show.
    #[command(subcommand)]
    pub command: DebugCommand,
}

/// The `debug` subcommands.
#[derive(Debug, Subcommand)]
pub enum DebugCommand {
    /// Print mask digests along token walks (JSON lines on stdin, see the module doc).
    Masks {
        /// The GGUF file whose tokenizer is the vocabulary.
        #[arg(long)]
        gguf: PathBuf,
    },
}

/// Runs a `debug` subcommand.
pub fn run(args: DebugArgs) -> anyhow::Result<ExitCode> {
    match args.command {
        DebugCommand::Masks { gguf } => masks(gguf),
    }
}

fn masks(gguf: PathBuf) -> anyhow::Result<ExitCode> {
    let located = LocatedModel {
        path: gguf,
        entry: None,
        tokenizer_json: None,
    };
    let vocab: Arc<dyn Vocab> = Arc::new(GgufTokenizer::load(&located)?);
    let env = TokEnv::new(vocab);
    let mut out = std::io::stdout().lock();
    for (n, line) in std::io::stdin().lock().lines().enumerate() {
        let line = line.context("reading stdin")?;
        if line.trim().is_empty() {
            continue;
        }
        let input: Value =
            serde_json::from_str(&line).with_context(|| format!("line {}: not JSON", n + 1))?;
        let result = walk_line(&env, &input).with_context(|| format!("line {}", n + 1))?;
        writeln!(out, "{result}")?;
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// The digests of one input line's walks.
fn walk_line(env: &TokEnv, input: &Value) -> anyhow::Result<Value> {
    let opts: CompileOptions = match input.get("options") {
        Some(o) => serde_json::from_value(o.clone()).context("options")?,
        None => CompileOptions::default(),
    };
    let schema = input.get("schema").context("no `schema`")?;
    let grammar = match compile(schema, &opts) {
        Ok(c) => c.grammar,
        Err(e) => return Ok(json!({ "error": e.to_string() })),
    };
    let compiled = match CompiledGrammar::with_env(grammar, env, Limits::default()) {
        Ok(c) => Arc::new(c),
        Err(e) => return Ok(json!({ "error": e.to_string() })),
    };
    let walks: Vec<Vec<u32>> =
        serde_json::from_value(input.get("walks").cloned().unwrap_or(json!([])))
            .context("walks")?;
    let mut results = Vec::new();
    let mut mask = TokenSet::new(env.vocab().vocab_len());
    for walk in walks {
        let mut m = Matcher::new(compiled.clone())?;
        let mut digests = Vec::new();
        let mut refused_at = None;
        for i in 0..=walk.len() {
            m.compute_mask(&mut mask)?;
            digests.push(digest(&mask));
            let Some(&t) = walk.get(i) else { break };
            if !mask.contains(TokenId(t)) {
                refused_at = Some(i);
                break;
            }
            m.consume_token(TokenId(t))?;
        }
        results.push(json!({
            "digests": digests,
            "refused_at": refused_at,
            "accepting": m.is_accepting(),
        }));
    }
    Ok(json!({ "walks": results }))
}

/// SHA-256 (hex) of the mask as the shared int32 bitmask row.
fn digest(mask: &TokenSet) -> String {
    let words = mask.universe_len().div_ceil(32);
    let mut h = Sha256::new();
    for i in 0..words {
        let w = mask.as_words()[i / 2];
        let word = if i % 2 == 0 {
            w as u32
        } else {
            (w >> 32) as u32
        };
        h.update(word.to_le_bytes());
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}
