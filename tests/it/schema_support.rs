//! Shared helpers for the schema tests: data paths, instance texts, grammar checks.

use std::path::PathBuf;
use std::sync::Arc;

use formwork::grammar::Grammar;
use formwork::matcher::{CompiledGrammar, Limits, Matcher, MatcherError};
use formwork::schema::reference::Acceptor;
use formwork::schema::{CompileOptions, Whitespace};
use formwork::toktrie::{SyntheticVocab, TokenId, TokenSet, Vocab};
use formwork::LexerError;
use formwork::ParserError;
use serde_json::Value;

/// The matcher budgets tests use: the defaults without the wall-clock bound
/// (`Limits::default()` has a 5 s `step_time`). A test's outcome must depend on the work done
/// (`step_fuel`, item and state counts), not on how loaded the machine is; benches keep time.
pub fn test_limits() -> Limits {
    Limits {
        step_time: None,
        ..Limits::default()
    }
}

/// Whether `e` is a budget running out (fuel, time, a counted limit, the lexer's state cache)
/// rather than the grammar refusing the input: a budget error on an invalid instance is not a
/// rejection, and one on a valid instance is not a wrong answer either.
pub fn is_budget_error(e: &MatcherError) -> bool {
    matches!(
        e,
        MatcherError::LimitExceeded { .. }
            | MatcherError::TimeExceeded { .. }
            | MatcherError::Lexer(LexerError::CacheExhausted { .. })
            | MatcherError::Lexer(LexerError::LimitExceeded { .. })
            | MatcherError::Parser(ParserError::LimitExceeded { .. })
    )
}

/// What feeding an instance's tokens through a matcher gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fed {
    /// Every token consumed and the output accepted at the end.
    Accepted,
    /// A token was refused (or the output was not accepting at the end); the message says
    /// where ("... at byte N ...").
    Rejected(String),
    /// A budget ran out ([`is_budget_error`]): neither an acceptance nor a rejection.
    Budget(String),
    /// The mask and `consume_token` disagreed about a token (or the mask's EOS about
    /// `is_accepting`): an engine bug, whatever the instance's label.
    MaskDisagrees(String),
    /// Another matcher error (not a budget, not a rejection).
    Error(String),
}

/// Feeds `tokens` through a fresh matcher over `cg`, token by token. With `masks`, the mask is
/// computed before each token (`on_mask` gets each mask's time, for TBM) and must agree with
/// `consume_token`: a token in the mask is consumed, a token outside it is refused; at the end,
/// EOS is in the mask exactly when the matcher accepts.
pub fn feed_tokens(
    cg: &Arc<CompiledGrammar>,
    tokens: &[TokenId],
    masks: bool,
    mut on_mask: impl FnMut(std::time::Duration),
) -> Fed {
    let classify = |e: &MatcherError, at: String| {
        if is_budget_error(e) {
            Fed::Budget(format!("{at}: {e}"))
        } else if matches!(
            e,
            MatcherError::TokenRejected { .. }
                | MatcherError::ByteRejected { .. }
                | MatcherError::EosNotAccepted { .. }
        ) {
            Fed::Rejected(format!("{at}: {e}"))
        } else {
            Fed::Error(format!("{at}: {e}"))
        }
    };
    let mut m = match Matcher::new(cg.clone()) {
        Ok(m) => m,
        Err(e) => return classify(&e, "matcher".into()),
    };
    let vocab = cg.vocab();
    let mut mask = TokenSet::new(vocab.vocab_len());
    let mut offset = 0;
    for (i, &tok) in tokens.iter().enumerate() {
        let at = format!("token {i} at byte {offset}");
        let in_mask = if masks {
            let t0 = std::time::Instant::now();
            if let Err(e) = m.compute_mask(&mut mask) {
                return classify(&e, format!("mask before {at}"));
            }
            on_mask(t0.elapsed());
            Some(mask.contains(tok))
        } else {
            None
        };
        match (m.consume_token(tok), in_mask) {
            (Ok(()), Some(false)) => {
                return Fed::MaskDisagrees(format!("{at}: consumed, but not in the mask"))
            }
            (Err(e), Some(true)) if !is_budget_error(&e) => {
                return Fed::MaskDisagrees(format!("{at}: in the mask, but consume says: {e}"))
            }
            (Err(e), _) => return classify(&e, at),
            (Ok(()), _) => {}
        }
        offset += vocab.token_bytes(tok).len();
    }
    let accepting = m.is_accepting();
    if let Some(e) = m.error() {
        return classify(e, format!("end at byte {offset}"));
    }
    if masks {
        if let Err(e) = m.compute_mask(&mut mask) {
            return classify(&e, format!("mask at the end, byte {offset}"));
        }
        let eos = vocab.eos_tokens().iter().any(|&t| mask.contains(t));
        if eos != accepting {
            return Fed::MaskDisagrees(format!(
                "end at byte {offset}: EOS in the mask {eos}, accepting {accepting}"
            ));
        }
    }
    if accepting {
        Fed::Accepted
    } else {
        Fed::Rejected(format!("not accepting at the end, byte {offset}"))
    }
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
    let mut a = Acceptor::new(g).map_err(|e| e.to_string())?;
    a.accepts(text.as_bytes())
        .map_err(|r| format!("rejected at byte {}: {}", r.offset, r.reason))
}

/// Whether the matcher (byte-level vocabulary) accepts `text` to the end.
pub fn matcher_accepts(g: &Grammar, text: &str) -> Result<(), String> {
    let vocab = Arc::new(SyntheticVocab::byte_level());
    let cg = CompiledGrammar::new(g.clone(), vocab, test_limits()).map_err(|e| e.to_string())?;
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
    let cg =
        CompiledGrammar::new(g.clone(), vocab.clone(), test_limits()).map_err(|e| e.to_string())?;
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
