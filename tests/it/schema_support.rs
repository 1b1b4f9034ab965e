//! Shared helpers for the schema tests: data paths, instance texts, grammar checks.

use std::path::PathBuf;

use formwork::grammar::Grammar;
use formwork::schema::reference::Acceptor;
use formwork::schema::{CompileOptions, Whitespace};
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

/// Whether `g` accepts `text` (reference acceptor, byte level).
pub fn accepts(g: &Grammar, text: &str) -> Result<(), String> {
    let mut a = Acceptor::new(g)?;
    a.accepts(text.as_bytes())
        .map_err(|r| format!("rejected at byte {}: {}", r.offset, r.reason))
}
