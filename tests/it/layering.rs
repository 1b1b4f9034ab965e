//! The module layering of each library crate, checked from its `use` lines.
//!
//! Each crate's `lib.rs` doc has one line `Layers: `a` → `b` → …`: a module may use only the
//! modules before it (and the crate root's items, such as the crate-wide error), and each
//! top-level module's own doc has a line `May use: `x`, `y`.` (or `May use: nothing else in the
//! crate.`) naming which of those it does use. This test reads every non-test `use` statement of
//! every module (`crate::x`, and `super::x` in top-level files) and fails on an edge that points
//! up or sideways, on an edge its module's doc does not name, or on a module missing from the
//! line, so the layering in the docs is the layering of the code.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

const CRATES: [&str; 4] = [
    "formwork-core",
    "formwork-model",
    "formwork-extract",
    "formwork-server",
];

/// The paragraph of `text`'s leading `//!` docs that starts with `label` (a line may wrap: it
/// runs to the end of its paragraph), joined onto one line; `None` without one.
fn doc_paragraph(text: &str, label: &str) -> Option<String> {
    let doc: Vec<&str> = text
        .lines()
        .take_while(|l| l.starts_with("//!"))
        .map(|l| l.trim_start_matches("//!").trim())
        .collect();
    let start = doc.iter().position(|l| l.starts_with(label))?;
    let para: Vec<&str> = doc[start..]
        .iter()
        .take_while(|l| !l.is_empty())
        .copied()
        .collect();
    Some(para.join(" "))
}

/// The names written in backticks in `text`, in order.
fn backticked(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split('`').skip(1).step_by(2).map(str::to_string)
}

/// The `Layers:` line of a crate root's docs, as module names in order.
fn layers(lib: &str) -> Vec<String> {
    let line = doc_paragraph(lib, "Layers:")
        .unwrap_or_else(|| panic!("no `//! Layers:` line in the crate docs"));
    backticked(&line).collect()
}

/// The `use` statements of `text` outside `#[cfg(test)]` items, each joined onto one line.
fn use_statements(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut lines = text.lines();
    let mut skip_next_item = false;
    while let Some(line) = lines.next() {
        let t = line.trim_start();
        if t.starts_with("#[cfg(test)]") {
            skip_next_item = true;
            continue;
        }
        let is_use = ["use ", "pub use ", "pub(crate) use ", "pub(super) use "]
            .iter()
            .any(|p| t.starts_with(p));
        if !is_use {
            if skip_next_item && !t.starts_with("#[") && !t.is_empty() {
                // A test module: everything from here to the end of the file is skipped when
                // it is the usual trailing `mod tests { … }`; a `mod tests;` line skips nothing.
                if t.starts_with("mod ") && t.ends_with('{') {
                    break;
                }
                skip_next_item = false;
            }
            continue;
        }
        let mut stmt = t.to_string();
        while !stmt.trim_end().ends_with(';') {
            match lines.next() {
                Some(l) => stmt.push_str(l.trim()),
                None => break,
            }
        }
        if !std::mem::take(&mut skip_next_item) {
            out.push(stmt);
        }
    }
    out
}

/// The sibling modules a statement names: `crate::x…`, and `super::x…` when `top_level`.
fn targets(stmt: &str, top_level: bool) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut prefixes = vec!["crate::"];
    if top_level {
        prefixes.push("super::");
    }
    for p in prefixes {
        for (i, _) in stmt.match_indices(p) {
            let rest = &stmt[i + p.len()..];
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            // Lower-case names are modules; capitalized ones are the crate root's items.
            if name.starts_with(|c: char| c.is_ascii_lowercase()) {
                out.insert(name);
            } else if name.is_empty() && rest.starts_with('{') {
                let group: String = rest[1..].chars().take_while(|&c| c != '}').collect();
                for part in group.split(',') {
                    let head = part.trim().split("::").next().unwrap_or("");
                    if head.starts_with(|c: char| c.is_ascii_lowercase()) {
                        out.insert(head.to_string());
                    }
                }
            }
        }
    }
    out
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The modules a module's doc says it may use (its `//! May use:` line, up to its first
/// period), or `None` without one.
fn may_use(text: &str) -> Option<BTreeSet<String>> {
    let para = doc_paragraph(text, "May use:")?;
    Some(backticked(para.split('.').next().unwrap_or("")).collect())
}

/// Every edge `module → module` that breaks the crate's `Layers:` order or is not named by
/// its module's `May use:` line.
fn violations(crate_dir: &Path) -> Vec<String> {
    let src = crate_dir.join("src");
    let order = layers(&std::fs::read_to_string(src.join("lib.rs")).unwrap());
    let rank = |m: &str| order.iter().position(|o| o == m);
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut bad = Vec::new();
    let mut declared = std::collections::BTreeMap::new();
    for f in &files {
        let rel = f.strip_prefix(&src).unwrap();
        let parts: Vec<_> = rel
            .iter()
            .map(|c| c.to_string_lossy().into_owned())
            .collect();
        let top_file =
            parts.len() == 1 && parts[0] != "lib.rs" || parts.len() == 2 && parts[1] == "mod.rs";
        if !top_file {
            continue;
        }
        let module = parts[0].trim_end_matches(".rs").to_string();
        let text = std::fs::read_to_string(f).unwrap();
        match may_use(&text) {
            Some(names) => {
                for n in &names {
                    let before = matches!((rank(n), rank(&module)), (Some(a), Some(b)) if a < b);
                    if !before {
                        bad.push(format!(
                            "{}: `May use:` names `{n}`, which is not a layer before `{module}`",
                            rel.display()
                        ));
                    }
                }
                declared.insert(module, names);
            }
            None => bad.push(format!("{}: no `//! May use:` line", rel.display())),
        }
    }
    for f in files {
        let rel = f.strip_prefix(&src).unwrap();
        let parts: Vec<_> = rel
            .iter()
            .map(|c| c.to_string_lossy().into_owned())
            .collect();
        if parts == ["lib.rs"] || parts.last().is_some_and(|p| p == "tests.rs") {
            continue;
        }
        let module = parts[0].trim_end_matches(".rs").to_string();
        let Some(own) = rank(&module) else {
            bad.push(format!(
                "{}: module `{module}` is not in the Layers line",
                rel.display()
            ));
            continue;
        };
        let text = std::fs::read_to_string(&f).unwrap();
        for stmt in use_statements(&text) {
            for t in targets(&stmt, parts.len() == 1) {
                if t == module {
                    continue;
                }
                match rank(&t) {
                    Some(r) if r < own => {}
                    _ => bad.push(format!(
                        "{}: `{module}` uses `{t}`, which is not before it: {stmt}",
                        rel.display()
                    )),
                }
                if declared.get(&module).is_some_and(|d| !d.contains(&t)) {
                    bad.push(format!(
                        "{}: `{module}` uses `{t}`, which its `May use:` line does not name",
                        rel.display()
                    ));
                }
            }
        }
    }
    bad
}

#[test]
fn every_crate_uses_only_earlier_layers() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let bad: Vec<String> = CRATES
        .iter()
        .flat_map(|c| violations(&root.join("crates").join(c)))
        .collect();
    assert!(bad.is_empty(), "layering broken:\n{}", bad.join("\n"));
}

#[test]
fn the_checker_sees_upward_and_grouped_edges() {
    let text = "use crate::{grammar::Grammar, matcher::Matcher};\nuse super::toktrie::TokenSet;\n\
                #[cfg(test)]\nmod tests {\n    use crate::generate::Generator;\n}\n";
    let found: Vec<BTreeSet<String>> = use_statements(text)
        .iter()
        .map(|s| targets(s, true))
        .collect();
    let want: Vec<BTreeSet<String>> = vec![
        ["grammar", "matcher"].map(String::from).into(),
        ["toktrie"].map(String::from).into(),
    ];
    assert_eq!(found, want);
    let lib = "//! Intro.\n//!\n//! Layers: `grammar` → `schema` →\n//! `matcher`.\n//!\n//! `x`\n";
    assert_eq!(layers(lib), ["grammar", "schema", "matcher"]);
    let module = "//! Owns x.\n//!\n//! May use: `grammar`,\n//! `schema`. And `toktrie` is not on the line.\n";
    let names = may_use(module).unwrap();
    assert_eq!(names, ["grammar", "schema"].map(String::from).into());
    assert_eq!(
        may_use("//! May use: nothing else in the crate.\n"),
        Some(BTreeSet::new())
    );
    assert_eq!(may_use("//! Owns x.\n"), None);
}
