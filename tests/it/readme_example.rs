//! The README's first example, run as written (issue 19): the command under "Extract with a
//! schema" on the default model must print the JSON shown below it, which is the right answer
//! for `examples/course/doc.txt` (5 of 12 lessons, in progress). Also: the eval runner's default
//! model is the registry's. Cost: one greedy extraction of ~25 tokens on Qwen2.5-Coder-0.5B,
//! about 9 s of CPU (mostly loading the 491 MB model) in the dev profile.

use std::process::Command;

use serde_json::Value;

use formwork::eval::run::EvalConfig;
use formwork::model::registry::Registry;

/// The first fenced block of `lang` after the heading `heading` in `text`, as its lines.
fn block_after<'a>(text: &'a str, heading: &str, lang: &str) -> Vec<&'a str> {
    let start = text
        .find(heading)
        .unwrap_or_else(|| panic!("README has no `{heading}`"));
    let rest = &text[start..];
    let fence = format!("```{lang}\n");
    let open = rest
        .find(&fence)
        .unwrap_or_else(|| panic!("no ```{lang} block after `{heading}`"))
        + fence.len();
    let close = rest[open..].find("```").expect("the block is closed") + open;
    rest[open..close].lines().collect()
}

#[test]
fn readme_course_example_prints_the_right_answer() {
    let root = env!("CARGO_MANIFEST_DIR");
    let readme = std::fs::read_to_string(format!("{root}/README.md")).unwrap();
    let command = block_after(&readme, "## Extract with a schema", "sh");
    assert_eq!(command.len(), 1, "one command: {command:?}");
    let words: Vec<&str> = command[0].split_whitespace().collect();
    assert_eq!(words[..2], ["formwork", "extract"], "{command:?}");
    let shown = block_after(&readme, "## Extract with a schema", "json");
    let shown: Value = serde_json::from_str(&shown.join("\n")).unwrap();
    // The right answer for the document, whatever the README shows.
    assert_eq!(
        shown,
        serde_json::json!({"course": "Rust for Beginners", "done_lessons": 5,
            "total_lessons": 12, "status": "in_progress"}),
        "the README must show the right answer"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_formwork"))
        .args(&words[1..])
        .current_dir(root)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(printed, shown, "`{}` printed {printed}", command[0]);
}

/// `formwork eval` without a model named runs the registry's default, as extract and serve do.
#[test]
fn eval_default_model_is_the_registry_default() {
    let registry = Registry::builtin().unwrap();
    assert_eq!(EvalConfig::default().model, registry.default);
    assert_eq!(registry.default, "qwen2.5-coder-0.5b");
}

/// The README is a product page (issue 40): at most 250 lines, exactly two set-up commands (the
/// main job and the test suite), and every relative link names a file that exists.
#[test]
fn readme_is_a_product_page() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let lines = readme.lines().count();
    assert!(
        lines <= 250,
        "README.md has {lines} lines; details belong in docs/"
    );
    let setup = block_after(&readme, "## Set-up", "sh");
    assert_eq!(
        setup,
        [
            "cargo run --release -- extract --schema examples/course/schema.json examples/course/doc.txt",
            "./scripts/test"
        ],
        "the two set-up commands"
    );
    let mut missing = Vec::new();
    for (i, _) in readme.match_indices("](") {
        let rest = &readme[i + 2..];
        let target = &rest[..rest.find(')').expect("a closed link")];
        let path = target.split('#').next().unwrap();
        if path.is_empty() || path.contains("://") {
            continue;
        }
        if !root.join(path).exists() {
            missing.push(target.to_string());
        }
    }
    assert!(
        missing.is_empty(),
        "README links to missing files: {missing:?}"
    );
}
