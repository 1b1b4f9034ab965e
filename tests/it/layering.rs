//! The module layering of each library crate and of the root package, checked from the code:
//! between the modules of a crate, and one level down, between the files of each module.
//!
//! - Each crate's `lib.rs` doc has one line `Layers: `a` → `b` → …`: a top-level module may use
//!   only the modules before it (and the crate root's items, such as the crate-wide error), and
//!   each top-level module's own doc has a line `May use: `x`, `y`.` (or `May use: nothing else
//!   in the crate.`) naming which of those it does use.
//! - Each module of several files (a `mod.rs`, or a `foo.rs` beside a `foo/` directory) has a
//!   doc line `Files: `a` → `b` → `c`.` naming every file it declares (its `mod` items, tests
//!   aside) in dependency order: a file may use only the files before it. A circle between two
//!   files always has one edge pointing forward, so it fails.
//!
//! Every `crate::…`, `super::…` and `self::…` path in the code outside `#[cfg(test)]` items is
//! read (in `use` lines and inline alike; comments and string literals are skipped) and
//! resolved to the module it names. An edge between two modules is checked at the level where
//! their paths part: at the crate root against `Layers:` and `May use:`, below it against the
//! `Files:` line of the module both sit in. A path into an ancestor (the parent's own items) or
//! a descendant (a `mod.rs` mapping its files) is no edge.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The library crates, as `(name, source directory)` under the workspace root; the root
/// package's library (`src/`, the CLI) is one of them.
const CRATES: [(&str, &str); 5] = [
    ("formwork-core", "crates/formwork-core/src"),
    ("formwork-model", "crates/formwork-model/src"),
    ("formwork-extract", "crates/formwork-extract/src"),
    ("formwork-server", "crates/formwork-server/src"),
    ("formwork", "src"),
];

/// Multi-file modules without a `Files:` line yet, as `<crate>/<module path>`: their files'
/// order is not checked. formwork-model is being restructured on its own branch (issue 40,
/// `layout-server`), which adds the line; the list then shrinks to empty. An entry whose module
/// has the line, or that names no module of several files, fails the test, so the list cannot
/// outlive its reason.
const UNANNOTATED: &[&str] = &["formwork-model/kernels"];

/// The paragraph of `text`'s leading `//!` docs that starts with `label` (a line may wrap: it
/// runs to the end of its paragraph), joined onto one line; `None` without one.
fn doc_paragraph(text: &str, label: &str) -> Option<String> {
    let doc: Vec<&str> = text
        .lines()
        .take_while(|l| l.starts_with("//!") || l.starts_with("#!"))
        .filter(|l| l.starts_with("//!"))
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
fn layers(lib: &str) -> Option<Vec<String>> {
    Some(backticked(&doc_paragraph(lib, "Layers:")?).collect())
}

/// The `Files:` line of a module's docs (up to its final period), as file names in order.
fn files_line(text: &str) -> Option<Vec<String>> {
    let para = doc_paragraph(text, "Files:")?;
    Some(backticked(para.split(". ").next().unwrap_or("")).collect())
}

/// The modules a module's doc says it may use (its `//! May use:` line, up to its first
/// period), or `None` without one.
fn may_use(text: &str) -> Option<BTreeSet<String>> {
    let para = doc_paragraph(text, "May use:")?;
    Some(backticked(para.split('.').next().unwrap_or("")).collect())
}

/// `text` with comments, string and character literals blanked out (line breaks kept), so
/// that only code is left to search for paths.
fn code_only(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    // Blanks `b[from..to]`, keeping its line breaks.
    let blank = |out: &mut String, from: usize, to: usize| {
        for &c in &b[from..to.min(b.len())] {
            out.push(if c == b'\n' { '\n' } else { ' ' });
        }
    };
    while i < b.len() {
        let rest = &b[i..];
        let is_ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
        // `br"…"` is a raw string too: a lone `b` before the `r` is its prefix.
        let byte_prefix = i > 0 && b[i - 1] == b'b' && (i < 2 || !is_ident(b[i - 2]));
        let ident_before = i > 0 && is_ident(b[i - 1]) && !byte_prefix;
        if rest.starts_with(b"//") {
            let end = rest
                .iter()
                .position(|&c| c == b'\n')
                .map_or(b.len(), |p| i + p);
            blank(&mut out, i, end);
            i = end;
        } else if rest.starts_with(b"/*") {
            let (mut depth, mut j) = (0usize, i);
            while j < b.len() {
                if b[j..].starts_with(b"/*") {
                    depth += 1;
                    j += 2;
                } else if b[j..].starts_with(b"*/") {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += 1;
                }
            }
            blank(&mut out, i, j);
            i = j;
        } else if !ident_before && (rest.starts_with(b"r#") || rest.starts_with(b"r\"")) {
            let hashes = rest[1..].iter().take_while(|&&c| c == b'#').count();
            if rest.get(1 + hashes) != Some(&b'"') {
                out.push(b[i] as char);
                i += 1;
                continue;
            }
            let close: Vec<u8> = std::iter::once(b'"')
                .chain(std::iter::repeat_n(b'#', hashes))
                .collect();
            let body = i + 2 + hashes;
            let end = b[body..]
                .windows(close.len())
                .position(|w| w == close.as_slice())
                .map_or(b.len(), |p| body + p + close.len());
            blank(&mut out, i, end);
            i = end;
        } else if b[i] == b'"' {
            let mut j = i + 1;
            while j < b.len() && b[j] != b'"' {
                j += if b[j] == b'\\' { 2 } else { 1 };
            }
            blank(&mut out, i, j + 1);
            i = j + 1;
        } else if b[i] == b'\'' {
            // A character literal (`'x'`, `'\n'`, `'\u{1F600}'`, `'é'`), or a lifetime.
            let end = if rest.get(1) == Some(&b'\\') {
                rest.iter()
                    .skip(2)
                    .position(|&c| c == b'\'')
                    .map(|p| i + 2 + p + 1)
            } else {
                let ch = text[i + 1..].chars().next().map_or(1, char::len_utf8);
                (rest.get(1 + ch) == Some(&b'\'')).then_some(i + 2 + ch)
            };
            match end {
                Some(end) => {
                    blank(&mut out, i, end);
                    i = end;
                }
                None => {
                    out.push('\'');
                    i += 1;
                }
            }
        } else {
            let ch = text[i..].chars().next().unwrap_or(' ');
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    out
}

/// `code` (from [`code_only`]) without its `#[cfg(test)]` items: from the attribute to the end
/// of the item (its closing brace, or its `;`).
fn without_test_items(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    let mut rest = code;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let item = &rest[at + "#[cfg(test)]".len()..];
        // Braces end the item; a `;` ends it only outside brackets (`[u8; 4]`).
        let (mut braces, mut brackets) = (0usize, 0usize);
        let mut end = item.len();
        for (i, c) in item.char_indices() {
            match c {
                '{' => braces += 1,
                '(' | '[' => brackets += 1,
                ')' | ']' => brackets = brackets.saturating_sub(1),
                '}' => {
                    braces = braces.saturating_sub(1);
                    if braces == 0 {
                        end = i + 1;
                        break;
                    }
                }
                ';' if braces == 0 && brackets == 0 => {
                    end = i + 1;
                    break;
                }
                _ => {}
            }
        }
        rest = &item[end..];
    }
    out.push_str(rest);
    out
}

/// The lower-case identifier at the start of `s`, if any.
fn ident(s: &str) -> Option<&str> {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    let id = &s[..end];
    id.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
        .then_some(id)
}

/// The module paths `code` names from `module` (the path of the module the file is): every
/// `crate::a::b…`, `super::…` and `self::…` path, `{…}` groups expanded, resolved to an
/// absolute path of lower-case segments (a capitalized segment, an item, ends it).
fn named_paths(code: &str, module: &[String]) -> BTreeSet<Vec<String>> {
    let mut out = BTreeSet::new();
    let b = code.as_bytes();
    for start in 0..b.len() {
        let before_ok = start == 0
            || !(b[start - 1].is_ascii_alphanumeric()
                || b[start - 1] == b'_'
                || b[start - 1] == b'$'
                || b[start - 1] == b':');
        if !before_ok {
            continue;
        }
        let rest = &code[start..];
        let (mut base, mut tail): (Vec<String>, &str) =
            if let Some(t) = rest.strip_prefix("crate::") {
                (Vec::new(), t)
            } else if rest.starts_with("super::") {
                let mut base = module.to_vec();
                let mut t = rest;
                while let Some(after) = t.strip_prefix("super::") {
                    base.pop();
                    t = after.trim_start();
                }
                (base, t)
            } else if let Some(t) = rest.strip_prefix("self::") {
                (module.to_vec(), t)
            } else {
                continue;
            };
        expand(&mut base, &mut tail, &mut out);
    }
    out
}

/// Adds the paths under `base` written at the start of `tail` (`a::b::C`, `{a, b::c}`).
fn expand(base: &mut Vec<String>, tail: &mut &str, out: &mut BTreeSet<Vec<String>>) {
    let keep = base.len();
    loop {
        let t = tail.trim_start();
        if let Some(group) = t.strip_prefix('{') {
            // Each comma-separated part at depth 0 of the group is a path under `base`.
            let mut depth = 0usize;
            let mut part_start = 0;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        let mut part = &group[part_start..i];
                        expand(&mut base.clone(), &mut part, out);
                        break;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        let mut part = &group[part_start..i];
                        expand(&mut base.clone(), &mut part, out);
                        part_start = i + 1;
                    }
                    _ => {}
                }
            }
            base.truncate(keep);
            return;
        }
        match ident(t) {
            Some(id) if id != "self" => {
                base.push(id.to_string());
                let after = t[id.len()..].trim_start();
                match after.strip_prefix("::") {
                    Some(a) => *tail = a,
                    None => break,
                }
            }
            _ => break,
        }
    }
    out.insert(base.clone());
    base.truncate(keep);
}

/// The child modules `code` declares (`mod x;`, `pub mod x;`, …; test items already removed).
fn declared_children(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (i, _) in code.match_indices("mod ") {
        if i > 0
            && (code.as_bytes()[i - 1].is_ascii_alphanumeric() || code.as_bytes()[i - 1] == b'_')
        {
            continue;
        }
        let rest = code[i + 4..].trim_start();
        if let Some(id) = ident(rest) {
            if rest[id.len()..].trim_start().starts_with(';') {
                out.push(id.to_string());
            }
        }
    }
    out
}

/// One module file of a crate.
struct ModuleFile {
    /// Path relative to the crate's `src/`, for messages.
    rel: String,
    /// The module's path from the crate root (`[]` for `lib.rs`).
    path: Vec<String>,
    /// The file's text.
    text: String,
    /// Its code outside comments, literals and test items.
    code: String,
    /// The child modules it declares.
    children: Vec<String>,
}

/// Every module file under `src`, with its module path (`lib.rs` is the root; `main.rs`, a
/// separate binary crate, is left out).
fn module_files(src: &Path) -> Vec<ModuleFile> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    let mut paths = Vec::new();
    walk(src, &mut paths);
    paths.sort();
    let mut out = Vec::new();
    for p in paths {
        let rel = p.strip_prefix(src).unwrap();
        let mut parts: Vec<String> = rel
            .iter()
            .map(|c| c.to_string_lossy().into_owned())
            .collect();
        let file = parts.pop().unwrap();
        if parts.is_empty() && file == "main.rs" {
            continue;
        }
        match file.as_str() {
            "lib.rs" if parts.is_empty() => {}
            "mod.rs" => {}
            f => parts.push(f.trim_end_matches(".rs").to_string()),
        }
        let text = std::fs::read_to_string(&p).unwrap();
        let code = without_test_items(&code_only(&text));
        out.push(ModuleFile {
            rel: rel.display().to_string(),
            children: declared_children(&code),
            path: parts,
            text,
            code,
        });
    }
    out
}

/// Everything wrong with the layering of one crate's modules and files.
fn violations(name: &str, files: &[ModuleFile]) -> Vec<String> {
    let mut bad = Vec::new();
    let all: BTreeMap<&[String], &ModuleFile> =
        files.iter().map(|f| (f.path.as_slice(), f)).collect();
    // Only the files the crate builds outside tests: each declared by a built parent.
    let built = |f: &ModuleFile| {
        (1..=f.path.len()).all(|n| {
            all.get(&f.path[..n - 1])
                .is_some_and(|p| p.children.contains(&f.path[n - 1]))
        })
    };
    let files: Vec<&ModuleFile> = files.iter().filter(|f| built(f)).collect();
    let by_path: BTreeMap<&[String], &ModuleFile> =
        files.iter().map(|f| (f.path.as_slice(), *f)).collect();
    let Some(root) = by_path.get(&[][..]) else {
        return vec![format!("{name}: no lib.rs")];
    };
    let Some(order) = layers(&root.text) else {
        return vec![format!("{name}: no `//! Layers:` line in lib.rs")];
    };
    let key = |p: &[String]| format!("{name}/{}", p.join("/"));
    // Each parent module's file order: `Layers:` at the root, `Files:` below it.
    let mut orders: BTreeMap<Vec<String>, Vec<String>> = BTreeMap::new();
    orders.insert(Vec::new(), order.clone());
    let mut unannotated = BTreeSet::new();
    for f in files.iter().filter(|f| !f.path.is_empty()) {
        let children: Vec<&String> = f.children.iter().filter(|c| *c != "tests").collect();
        let line = files_line(&f.text);
        let allowed = UNANNOTATED.contains(&key(&f.path).as_str());
        match (line, children.is_empty(), allowed) {
            (Some(_), _, true) => bad.push(format!(
                "{}: has a `Files:` line; remove `{}` from UNANNOTATED",
                f.rel,
                key(&f.path)
            )),
            (Some(line), _, false) => {
                let named: BTreeSet<&String> = line.iter().collect();
                let declared: BTreeSet<&String> = children.iter().copied().collect();
                for c in declared.difference(&named) {
                    bad.push(format!(
                        "{}: file `{c}` is missing from the `Files:` line",
                        f.rel
                    ));
                }
                for c in named.difference(&declared) {
                    bad.push(format!(
                        "{}: `Files:` names `{c}`, which it does not declare",
                        f.rel
                    ));
                }
                orders.insert(f.path.clone(), line);
            }
            (None, true, _) => {}
            (None, false, true) => {
                unannotated.insert(key(&f.path));
            }
            (None, false, false) => bad.push(format!(
                "{}: a module of several files has no `//! Files:` line",
                f.rel
            )),
        }
    }
    for entry in UNANNOTATED {
        let stale = entry.strip_prefix(name).is_some_and(|m| m.starts_with('/'))
            && !unannotated.contains(*entry)
            && !files
                .iter()
                .any(|f| key(&f.path) == *entry && files_line(&f.text).is_some());
        if stale {
            bad.push(format!(
                "UNANNOTATED names `{entry}`, which is not a module of several files: remove it"
            ));
        }
    }
    // The crate root's modules: all of them on the `Layers:` line, each with `May use:`.
    let mut declared_uses: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let rank = |list: &[String], m: &str| list.iter().position(|o| o == m);
    for m in &root.children {
        if rank(&order, m).is_none() {
            bad.push(format!("{name}: module `{m}` is not in the Layers line"));
        }
        let Some(f) = by_path.get(&[m.clone()][..]) else {
            continue;
        };
        match may_use(&f.text) {
            Some(names) => {
                for n in &names {
                    let before =
                        matches!((rank(&order, n), rank(&order, m)), (Some(a), Some(b)) if a < b);
                    if !before {
                        bad.push(format!(
                            "{}: `May use:` names `{n}`, which is not a layer before `{m}`",
                            f.rel
                        ));
                    }
                }
                declared_uses.insert(m.clone(), names);
            }
            None => bad.push(format!("{}: no `//! May use:` line", f.rel)),
        }
    }
    // Every edge, checked where the two paths part.
    for f in &files {
        for target in named_paths(&f.code, &f.path) {
            let common = f
                .path
                .iter()
                .zip(&target)
                .take_while(|(a, b)| a == b)
                .count();
            let (Some(from), Some(to)) = (f.path.get(common), target.get(common)) else {
                continue; // an ancestor's items or a descendant
            };
            let parent = &f.path[..common];
            let Some(parent_file) = by_path.get(parent) else {
                continue;
            };
            if !parent_file.children.contains(to) {
                continue; // an item of the parent, not a sibling module
            }
            let shown = target.join("::");
            match orders.get(parent) {
                Some(order) => {
                    let ok =
                        matches!((rank(order, to), rank(order, from)), (Some(a), Some(b)) if a < b);
                    if !ok {
                        let line = if parent.is_empty() { "Layers" } else { "Files" };
                        bad.push(format!(
                            "{}: `{from}` uses `{to}` ({shown}), which its `{line}:` line does not put before it",
                            f.rel
                        ));
                    }
                }
                None => continue, // a module on UNANNOTATED
            }
            if parent.is_empty() && declared_uses.get(from).is_some_and(|d| !d.contains(to)) {
                bad.push(format!(
                    "{}: `{from}` uses `{to}` ({shown}), which its `May use:` line does not name",
                    f.rel
                ));
            }
        }
    }
    bad
}

#[test]
fn every_crate_and_module_uses_only_earlier_layers() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let bad: Vec<String> = CRATES
        .iter()
        .flat_map(|(name, src)| violations(name, &module_files(&root.join(src))))
        .collect();
    assert!(bad.is_empty(), "layering broken:\n{}", bad.join("\n"));
}

/// A crate in memory: `(file under src/, text)`.
fn synthetic(files: &[(&str, &str)]) -> Vec<String> {
    let files: Vec<ModuleFile> = files
        .iter()
        .map(|(rel, text)| {
            let mut parts: Vec<String> = rel.split('/').map(str::to_string).collect();
            let file = parts.pop().unwrap();
            match file.as_str() {
                "lib.rs" | "mod.rs" => {}
                f => parts.push(f.trim_end_matches(".rs").to_string()),
            }
            let code = without_test_items(&code_only(text));
            ModuleFile {
                rel: rel.to_string(),
                children: declared_children(&code),
                path: parts,
                text: text.to_string(),
                code,
            }
        })
        .collect();
    violations("synthetic", &files)
}

const LIB: &str = "//! Layers: `low` → `high`.\npub mod low;\npub mod high;\n";
const LOW: &str = "//! May use: nothing else in the crate.\n";
const HIGH: &str =
    "//! May use: `low`.\n//!\n//! Files: `a` → `b`.\n\nmod a;\nmod b;\n#[cfg(test)]\nmod tests;\n";

#[test]
fn a_circle_between_two_files_fails() {
    let ok = synthetic(&[
        ("lib.rs", LIB),
        ("low.rs", LOW),
        ("high/mod.rs", HIGH),
        ("high/a.rs", "pub struct A;\n"),
        ("high/b.rs", "use super::a::A;\npub fn f(_: A) {}\n"),
    ]);
    assert!(ok.is_empty(), "{ok:?}");
    // `a` names `b` inline (no `use` line): with `b` using `a`, a circle.
    let circle = synthetic(&[
        ("lib.rs", LIB),
        ("low.rs", LOW),
        ("high/mod.rs", HIGH),
        (
            "high/a.rs",
            "pub struct A;\npub fn g() { crate::high::b::f(A) }\n",
        ),
        ("high/b.rs", "use super::a::A;\npub fn f(_: A) {}\n"),
    ]);
    assert_eq!(circle.len(), 1, "{circle:?}");
    assert!(
        circle[0].contains("`a` uses `b`") && circle[0].contains("Files:"),
        "{circle:?}"
    );
}

#[test]
fn the_checker_reads_inline_paths_groups_and_upward_edges() {
    // An inline path up the crate's layers, and one the `May use:` line leaves out.
    let up = synthetic(&[
        ("lib.rs", LIB),
        ("low.rs", "//! May use: nothing else in the crate.\nfn f() { super::high::g() }\n"),
        ("high/mod.rs", "//! May use: nothing else in the crate.\n//!\n//! Files: `a` → `b`.\nmod a;\nmod b;\npub fn g() { crate::low::h() }\n"),
        ("high/a.rs", ""),
        ("high/b.rs", ""),
    ]);
    assert_eq!(up.len(), 3, "{up:?}");
    let says = |what: &str, line: &str| up.iter().any(|e| e.contains(what) && e.contains(line));
    assert!(says("`low` uses `high`", "`Layers:` line"), "{up:?}");
    assert!(says("`low` uses `high`", "`May use:` line"), "{up:?}");
    assert!(says("`high` uses `low`", "`May use:` line"), "{up:?}");
    // A file missing from the `Files:` line, and a module of several files without one.
    let missing = synthetic(&[
        ("lib.rs", LIB),
        ("low.rs", LOW),
        (
            "high/mod.rs",
            "//! May use: `low`.\n//!\n//! Files: `a`.\nmod a;\nmod b;\n",
        ),
        ("high/a.rs", ""),
        ("high/b.rs", ""),
        ("low/x.rs", ""),
    ]);
    assert_eq!(missing.len(), 1, "{missing:?}");
    assert!(missing[0].contains("`b` is missing"), "{missing:?}");
    let unannotated = synthetic(&[
        ("lib.rs", LIB),
        (
            "low.rs",
            "//! May use: nothing else in the crate.\nmod x;\nmod y;\n",
        ),
        ("low/x.rs", ""),
        ("low/y.rs", ""),
        ("high.rs", "//! May use: `low`.\n"),
    ]);
    assert_eq!(unannotated.len(), 1, "{unannotated:?}");
    assert!(
        unannotated[0].contains("no `//! Files:` line"),
        "{unannotated:?}"
    );
    // Grouped and nested paths, `super::super`, comments, strings and test items.
    let code = code_only(
        "use crate::{low::X, high::{a::A, b}};\nfn f() { super::super::low::y(); }\n\
         // crate::nope::x\nconst S: &str = \"crate::nope::y\";\nfn g<'a>(c: char) -> bool { c == '\"' }\n\
         #[cfg(test)]\nmod tests {\n    use crate::nope::z;\n}\n",
    );
    let paths = named_paths(&without_test_items(&code), &["high".into(), "a".into()]);
    let want: BTreeSet<Vec<String>> = [
        vec!["low"],
        vec!["high", "a"],
        vec!["high", "b"],
        vec!["low", "y"],
    ]
    .into_iter()
    .map(|p| p.into_iter().map(String::from).collect())
    .collect();
    assert_eq!(paths, want);
    let lib = "//! Intro.\n//!\n//! Layers: `grammar` → `schema` →\n//! `matcher`.\n//!\n//! `x`\n";
    assert_eq!(layers(lib).unwrap(), ["grammar", "schema", "matcher"]);
    assert_eq!(
        files_line("//! Owns x.\n//!\n//! Files: `a` → `b` →\n//! `c`. Then `d`.\n").unwrap(),
        ["a", "b", "c"]
    );
    let module = "//! Owns x.\n//!\n//! May use: `grammar`,\n//! `schema`. And `toktrie` is not on the line.\n";
    assert_eq!(
        may_use(module).unwrap(),
        ["grammar", "schema"].map(String::from).into()
    );
    assert_eq!(
        may_use("//! May use: nothing else in the crate.\n"),
        Some(BTreeSet::new())
    );
    assert_eq!(may_use("//! Owns x.\n"), None);
}
