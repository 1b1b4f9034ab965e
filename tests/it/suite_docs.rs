//! Documents of the shipped suites for per-document extraction, each with its schema: the
//! README example (`examples/course`), the project's own suites
//! (`evals/{calendar_events,course_progress,incident_triage,calculator}.jsonl`), SNIPS
//! (`snips/snips_validate.jsonl`) and BFCL simple (`bfcl/bfcl_simple_python.jsonl`; its one
//! function's `parameters` schema is the target, the question the document), read in place
//! from the shared data directory and spread over each file (SNIPS is sorted by intent).
//!
//! Shared by the speculation exactness test (`tests/it/speculate.rs`) and
//! `benches/speculate.rs`, which includes this file by path; both have a `data` module at
//! their root with `data_dir`.

use std::path::{Path, PathBuf};

use serde_json::Value;

use formwork::eval::suite::{read_suite, Target};

/// One document to extract: where it comes from, its schema and text.
pub struct Doc {
    /// The suite file and the case's id (`course` for the README example).
    pub name: String,
    /// The JSON Schema of the answer.
    pub schema: Value,
    /// The document.
    pub text: String,
}

/// How many documents of each suite [`suites`] takes.
#[derive(Clone, Copy, Debug)]
pub struct Counts {
    /// Of each of the 4 own suites (each has 3 to 5 cases).
    pub own: usize,
    /// Of SNIPS.
    pub snips: usize,
    /// Of BFCL simple.
    pub bfcl: usize,
}

/// `n` cases of the suite at `path`, evenly spaced over the file.
fn spread(path: PathBuf, n: usize) -> anyhow::Result<Vec<Doc>> {
    let (cases, bad) = read_suite(&path)?;
    anyhow::ensure!(bad.is_empty(), "{}: bad lines {bad:?}", path.display());
    let step = (cases.len() / n.max(1)).max(1);
    let file = path.file_stem().unwrap_or_default().to_string_lossy();
    Ok(cases
        .iter()
        .step_by(step)
        .take(n)
        .filter_map(|c| {
            let schema = match &c.target {
                Target::Schema(s) => s.clone(),
                Target::Tools(t) => t.first()?.get("parameters")?.clone(),
            };
            Some(Doc {
                name: format!("{file}/{}", c.id),
                schema,
                text: c.input.text(),
            })
        })
        .collect())
}

/// The documents of each suite, by suite name: "README example", "own suites", "SNIPS",
/// "BFCL simple", `counts` of each (fewer where a suite has fewer).
pub fn suites(counts: Counts) -> anyhow::Result<Vec<(&'static str, Vec<Doc>)>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let read = |p: &str| -> anyhow::Result<String> { Ok(std::fs::read_to_string(root.join(p))?) };
    let readme = Doc {
        name: "course".into(),
        schema: serde_json::from_str(&read("examples/course/schema.json")?)?,
        text: read("examples/course/doc.txt")?,
    };
    let mut own = Vec::new();
    for s in [
        "calendar_events",
        "course_progress",
        "incident_triage",
        "calculator",
    ] {
        own.extend(spread(root.join(format!("evals/{s}.jsonl")), counts.own)?);
    }
    let data = crate::data::data_dir();
    Ok(vec![
        ("README example", vec![readme]),
        ("own suites", own),
        (
            "SNIPS",
            spread(data.join("snips/snips_validate.jsonl"), counts.snips)?,
        ),
        (
            "BFCL simple",
            spread(data.join("bfcl/bfcl_simple_python.jsonl"), counts.bfcl)?,
        ),
    ])
}
