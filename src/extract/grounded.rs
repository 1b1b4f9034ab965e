//! Grounded fields: string values that must be verbatim substrings of the input document.
//!
//! Owns two steps. [`mark_grounded`] rewrites a schema before it is compiled: every string
//! schema marked `"x-grounded": true` (or named by a `--grounded` JSON pointer; a marked array
//! grounds its items) becomes a `const` placeholder whose lexeme is easy to find in the compiled
//! grammar. [`GroundedDoc::add_to`] then builds, for one document, the grammar of its
//! substrings, which [`compose`](super::compose) puts where the placeholder lexemes were.
//!
//! # Why a suffix automaton as rules, not a regex
//! The set of substrings of an n-character document has no small regex (an alternation of
//! suffixes is O(n²)), but its minimal DFA, the suffix automaton, has at most 2n states and 3n
//! transitions. Each state becomes one right-recursive rule `S_q ::= "" | c S_δ(q,c) | ...`
//! over one-character lexemes (JSON-escaped, so a quote in the document is `\"` in the output).
//! The automaton is deterministic, so the Earley parser carries one item per open level: cost
//! O(quote length) items per character, and the grammar is O(document length).
//!
//! Does not own validation: a grounded value is checked by [`is_grounded`] after generation
//! (constrained output always passes; the baselines may not).

use std::collections::BTreeMap;

use serde_json::Value;

use crate::grammar::{GrammarBuilder, LexemeId, Symbol};

use super::ExtractError;

/// The marker inside a placeholder constant; followed by the field's number and `__`.
pub const PLACEHOLDER_PREFIX: &str = "__formwork_grounded_";

/// The placeholder constant for grounded field `n`.
pub fn placeholder(n: usize) -> String {
    format!("{PLACEHOLDER_PREFIX}{n}__")
}

/// A schema with its grounded string schemas replaced by placeholders.
#[derive(Clone, Debug, PartialEq)]
pub struct MarkedSchema {
    /// The schema to compile.
    pub schema: Value,
    /// JSON pointers (into the original schema) of the grounded string schemas, in placeholder
    /// order.
    pub pointers: Vec<String>,
}

/// Replaces grounded string schemas by `{"const": placeholder(n)}`.
///
/// A schema is grounded when it has `"x-grounded": true` or its pointer is in `extra`
/// (`--grounded /properties/quote`). A grounded schema must be a string schema (`"type":
/// "string"`), or an array schema whose `items` then become grounded.
///
/// # Errors
/// [`ExtractError::Grounded`] when a pointer in `extra` names nothing, or a grounded schema is
/// neither a string nor an array of strings.
pub fn mark_grounded(schema: &Value, extra: &[String]) -> Result<MarkedSchema, ExtractError> {
    let mut out = schema.clone();
    for p in extra {
        let target =
            out.pointer_mut(p.trim_start_matches('#'))
                .ok_or_else(|| ExtractError::Grounded {
                    pointer: p.clone(),
                    message: "no schema at this pointer".into(),
                })?;
        match target {
            Value::Object(m) => {
                m.insert("x-grounded".into(), Value::Bool(true));
            }
            _ => {
                return Err(ExtractError::Grounded {
                    pointer: p.clone(),
                    message: "not a schema object".into(),
                })
            }
        }
    }
    let mut pointers = Vec::new();
    walk(&mut out, String::new(), &mut pointers)?;
    Ok(MarkedSchema {
        schema: out,
        pointers,
    })
}

fn escape_pointer(s: &str) -> String {
    s.replace('~', "~0").replace('/', "~1")
}

fn walk(v: &mut Value, ptr: String, found: &mut Vec<String>) -> Result<(), ExtractError> {
    match v {
        Value::Object(m) => {
            if m.get("x-grounded") == Some(&Value::Bool(true)) {
                let ty = m.get("type").and_then(Value::as_str);
                match ty {
                    Some("string") => {
                        let n = found.len();
                        found.push(if ptr.is_empty() { "/".into() } else { ptr });
                        *v = serde_json::json!({ "const": placeholder(n) });
                        return Ok(());
                    }
                    Some("array") => {
                        m.remove("x-grounded");
                        let items = m.get_mut("items").ok_or_else(|| ExtractError::Grounded {
                            pointer: ptr.clone(),
                            message: "a grounded array needs `items`".into(),
                        })?;
                        match items {
                            Value::Object(im) => {
                                im.insert("x-grounded".into(), Value::Bool(true));
                                if !im.contains_key("type") {
                                    im.insert("type".into(), Value::String("string".into()));
                                }
                            }
                            _ => {
                                return Err(ExtractError::Grounded {
                                    pointer: format!("{ptr}/items"),
                                    message: "a grounded array's `items` must be a schema".into(),
                                })
                            }
                        }
                    }
                    _ => {
                        return Err(ExtractError::Grounded {
                            pointer: if ptr.is_empty() { "/".into() } else { ptr },
                            message: "`x-grounded` applies to `\"type\": \"string\"` schemas \
                                      or arrays of them"
                                .into(),
                        })
                    }
                }
            }
            for (k, child) in m.iter_mut() {
                // `const`, `enum`, `default` and `examples` hold instances, not schemas.
                if matches!(k.as_str(), "const" | "enum" | "default" | "examples") {
                    continue;
                }
                walk(child, format!("{ptr}/{}", escape_pointer(k)), found)?;
            }
        }
        Value::Array(xs) => {
            for (i, child) in xs.iter_mut().enumerate() {
                walk(child, format!("{ptr}/{i}"), found)?;
            }
        }
        _ => {}
    }
    Ok(())
}

/// The number of a grounded placeholder named by a lexeme (by its name or regex), if any.
pub fn placeholder_index(text: &str) -> Option<usize> {
    let at = text.find(PLACEHOLDER_PREFIX)? + PLACEHOLDER_PREFIX.len();
    let rest = &text[at..];
    let end = rest.find("__")?;
    rest[..end].parse().ok()
}

/// The suffix automaton of a document's characters: the minimal DFA of its substrings.
#[derive(Clone, Debug)]
pub struct SuffixAutomaton {
    /// Per state: transitions by character (ordered, so grammars are reproducible).
    next: Vec<BTreeMap<char, u32>>,
    link: Vec<Option<u32>>,
    len: Vec<u32>,
}

impl SuffixAutomaton {
    /// Builds the automaton in O(n log σ) (the standard online construction).
    pub fn new(text: &str) -> Self {
        let mut sa = SuffixAutomaton {
            next: vec![BTreeMap::new()],
            link: vec![None],
            len: vec![0],
        };
        let mut last = 0u32;
        for c in text.chars() {
            let cur = sa.push(sa.len[last as usize] + 1, None);
            let mut p = Some(last);
            while let Some(q) = p {
                if sa.next[q as usize].contains_key(&c) {
                    break;
                }
                sa.next[q as usize].insert(c, cur);
                p = sa.link[q as usize];
            }
            match p {
                None => sa.link[cur as usize] = Some(0),
                Some(p) => {
                    let q = sa.next[p as usize][&c];
                    if sa.len[p as usize] + 1 == sa.len[q as usize] {
                        sa.link[cur as usize] = Some(q);
                    } else {
                        let clone = sa.push(sa.len[p as usize] + 1, sa.link[q as usize]);
                        sa.next[clone as usize] = sa.next[q as usize].clone();
                        let mut pp = Some(p);
                        while let Some(x) = pp {
                            if sa.next[x as usize].get(&c) != Some(&q) {
                                break;
                            }
                            sa.next[x as usize].insert(c, clone);
                            pp = sa.link[x as usize];
                        }
                        sa.link[q as usize] = Some(clone);
                        sa.link[cur as usize] = Some(clone);
                    }
                }
            }
            last = cur;
        }
        sa
    }

    fn push(&mut self, len: u32, link: Option<u32>) -> u32 {
        self.next.push(BTreeMap::new());
        self.link.push(link);
        self.len.push(len);
        (self.next.len() - 1) as u32
    }

    /// Number of states (at most 2n for n ≥ 2 characters).
    pub fn states_len(&self) -> usize {
        self.next.len()
    }

    /// Whether `s` is a substring of the text (every state is accepting).
    pub fn contains(&self, s: &str) -> bool {
        let mut q = 0u32;
        for c in s.chars() {
            match self.next[q as usize].get(&c) {
                Some(&n) => q = n,
                None => return false,
            }
        }
        true
    }
}

/// A document prepared for grounded fields: its suffix automaton.
#[derive(Clone, Debug)]
pub struct GroundedDoc {
    sam: SuffixAutomaton,
}

impl GroundedDoc {
    /// Indexes `document`. O(n log σ) time, O(n) states.
    pub fn new(document: &str) -> Self {
        GroundedDoc {
            sam: SuffixAutomaton::new(document),
        }
    }

    /// The automaton.
    pub fn automaton(&self) -> &SuffixAutomaton {
        &self.sam
    }

    /// Adds the rules of `"` substring `"` (a JSON string whose value is a non-empty substring
    /// of the document, escaped as `serde_json` escapes) to `b`; returns the rule.
    ///
    /// `prefix` keeps rule names apart from the rest of the grammar. The empty string is
    /// excluded: an empty quote is no evidence.
    pub fn add_to(&self, b: &mut GrammarBuilder, prefix: &str) -> crate::grammar::RuleId {
        let n = self.sam.states_len();
        let rules: Vec<_> = (0..n)
            .map(|q| b.rule_ref(&format!("{prefix}sub_{q}")))
            .collect();
        let mut lexemes: BTreeMap<char, LexemeId> = BTreeMap::new();
        let mut lexeme = |b: &mut GrammarBuilder, c: char| {
            *lexemes.entry(c).or_insert_with(|| {
                let mut buf = [0u8; 4];
                let text = serde_json::to_string(c.encode_utf8(&mut buf) as &str)
                    .unwrap_or_else(|_| format!("\"{c}\""));
                // Strip the quotes serde_json adds: the lexeme is the escaped character.
                b.literal(&text[1..text.len() - 1])
            })
        };
        for (q, rule) in rules.iter().enumerate() {
            let mut alts: Vec<Vec<Symbol>> = Vec::new();
            if q != 0 {
                alts.push(vec![]);
            }
            for (&c, &to) in &self.sam.next[q] {
                let lx = lexeme(b, c);
                alts.push(vec![Symbol::Lexeme(lx), Symbol::Rule(rules[to as usize])]);
            }
            if alts.is_empty() {
                // Only the root of an empty document has no way on; it derives nothing
                // finite, so the grammar reports an empty language if a value is required.
                alts.push(vec![Symbol::Rule(*rule)]);
            }
            b.define(&format!("{prefix}sub_{q}"), alts);
        }
        let quote = b.literal("\"");
        b.fresh_rule(
            &format!("{prefix}grounded"),
            vec![vec![
                Symbol::Lexeme(quote),
                Symbol::Rule(rules[0]),
                Symbol::Lexeme(quote),
            ]],
        )
    }
}

/// Whether `value` is a verbatim (non-empty) substring of `document`.
pub fn is_grounded(document: &str, value: &str) -> bool {
    !value.is_empty() && document.contains(value)
}

/// The instance pointers of every grounded value in `instance`, given the grounded schema
/// pointers of [`MarkedSchema::pointers`], paired with the string found there. Follows
/// `properties/NAME` and `items` steps; other keywords (`anyOf`, `$ref`) are not followed.
pub fn grounded_values<'v>(instance: &'v Value, pointers: &[String]) -> Vec<(String, &'v str)> {
    let mut out = Vec::new();
    for p in pointers {
        let steps: Vec<String> = p
            .split('/')
            .skip(1)
            .map(|s| s.replace("~1", "/").replace("~0", "~"))
            .collect();
        collect(instance, &steps, String::new(), &mut out);
    }
    out
}

fn collect<'v>(v: &'v Value, steps: &[String], at: String, out: &mut Vec<(String, &'v str)>) {
    match steps {
        [] => {
            if let Value::String(s) = v {
                out.push((if at.is_empty() { "/".into() } else { at }, s));
            }
        }
        [k, name, rest @ ..] if k == "properties" => {
            if let Some(child) = v.get(name.as_str()) {
                collect(child, rest, format!("{at}/{}", escape_pointer(name)), out);
            }
        }
        [k, rest @ ..] if k == "items" => {
            if let Value::Array(xs) = v {
                for (i, x) in xs.iter().enumerate() {
                    collect(x, rest, format!("{at}/{i}"), out);
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// All substrings by brute force.
    fn substrings(s: &str) -> std::collections::BTreeSet<String> {
        let cs: Vec<char> = s.chars().collect();
        let mut out = std::collections::BTreeSet::new();
        for i in 0..=cs.len() {
            for j in i..=cs.len() {
                out.insert(cs[i..j].iter().collect());
            }
        }
        out
    }

    #[test]
    fn automaton_is_linear_in_size() {
        let text = "the quick brown fox jumps over the lazy dog ".repeat(50);
        let sam = SuffixAutomaton::new(&text);
        assert!(sam.states_len() <= 2 * text.chars().count());
        assert!(sam.contains("lazy dog the quick"));
        assert!(!sam.contains("lazy cat"));
    }

    proptest! {
        #[test]
        fn automaton_accepts_exactly_the_substrings(text in "[ab\"é]{0,12}", probe in "[ab\"é]{0,5}") {
            let sam = SuffixAutomaton::new(&text);
            prop_assert_eq!(sam.contains(&probe), substrings(&text).contains(&probe));
        }
    }

    #[test]
    fn marks_strings_and_arrays_and_pointers() {
        let schema = serde_json::json!({
            "type": "object",
            "properties": {
                "quote": {"type": "string", "x-grounded": true},
                "spans": {"type": "array", "items": {"type": "string"}, "x-grounded": true},
                "name": {"type": "string"},
                "tag": {"const": {"x-grounded": true}}
            }
        });
        let m = mark_grounded(&schema, &["/properties/name".into()]).unwrap();
        assert_eq!(
            m.pointers,
            [
                "/properties/quote",
                "/properties/spans/items",
                "/properties/name"
            ]
        );
        assert_eq!(m.schema["properties"]["quote"]["const"], placeholder(0));
        assert_eq!(
            m.schema["properties"]["spans"]["items"]["const"],
            placeholder(1)
        );
        // Instances under `const` are not schemas and stay untouched.
        assert_eq!(m.schema["properties"]["tag"], schema["properties"]["tag"]);
        assert_eq!(
            placeholder_index(&format!("\"{}\"", placeholder(12))),
            Some(12)
        );
        assert_eq!(placeholder_index("\"plain\""), None);
    }

    #[test]
    fn bad_grounded_targets_are_errors_with_pointers() {
        let schema =
            serde_json::json!({"properties": {"n": {"type": "integer", "x-grounded": true}}});
        let err = mark_grounded(&schema, &[]).unwrap_err();
        assert!(err.to_string().contains("/properties/n"), "{err}");
        let err = mark_grounded(&serde_json::json!({}), &["/properties/zz".into()]).unwrap_err();
        assert!(err.to_string().contains("/properties/zz"), "{err}");
    }

    #[test]
    fn finds_grounded_values_in_instances() {
        let m = mark_grounded(
            &serde_json::json!({"properties": {
                "q": {"type": "string", "x-grounded": true},
                "s": {"type": "array", "items": {"type": "string"}, "x-grounded": true}
            }}),
            &[],
        )
        .unwrap();
        let v = serde_json::json!({"q": "fox", "s": ["a", "b"]});
        let got = grounded_values(&v, &m.pointers);
        assert_eq!(
            got,
            vec![
                ("/q".into(), "fox"),
                ("/s/0".into(), "a"),
                ("/s/1".into(), "b")
            ]
        );
    }

    #[test]
    fn grammar_is_linear_in_document_size() {
        let doc = GroundedDoc::new(&"incident: disk full on db-3. ".repeat(40));
        let mut b = GrammarBuilder::new();
        let r = doc.add_to(&mut b, "g/");
        let g = b.build(r).unwrap();
        let n = 29 * 40;
        assert!(g.size() < 12 * n, "{} symbols for {n} chars", g.size());
        // One lexeme per distinct character plus the quote.
        assert!(g.lexemes().len() < 25, "{}", g.lexemes().len());
        assert!(g.lexemes().iter().any(|l| l.regex() == "\""));
    }
}
