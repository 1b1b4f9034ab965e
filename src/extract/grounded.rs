//! Grounded fields: string values that must be verbatim substrings of the input document.
//!
//! Owns two steps. [`mark_grounded`] rewrites a schema before it is compiled: every string
//! schema marked `"x-grounded": true` (or named by a `--grounded` JSON pointer; a marked array
//! grounds its items) becomes a `const` placeholder whose lexeme is easy to find in the compiled
//! grammar. [`GroundedDoc::add_to`] then builds, for one document, the grammar of its
//! substrings, which [`compose`](super::compose) puts where the placeholder lexemes were.
//!
//! # Whole-word spans, as rules, not a regex
//! A grounded value is a **whole-word span** of the document ([`SpanAutomaton`]): it starts
//! and ends at word boundaries, so `"Boo"` cannot be cut out of "Book a table". The set of
//! substrings of an n-character document has no small regex (an alternation of suffixes is
//! O(n²)), but its minimal DFA, the suffix automaton, has at most 2n states and 3n transitions;
//! the span automaton is its word-aligned counterpart, built by subset construction over
//! positions under a linear work budget (over it, e.g. a long and highly repetitive document,
//! grounding falls back to any non-empty substring through [`SuffixAutomaton`]). Each state
//! becomes one right-recursive rule `S_q ::= "" (if accepting) | c S_δ(q,c) | ...` over
//! one-character lexemes (JSON-escaped, so a quote in the document is `\"` in the output). The
//! automaton is deterministic, so the Earley parser carries one item per open level: cost
//! O(quote length) items per character, and the grammar is O(document length).
//!
//! Does not own validation: a grounded value is checked by [`is_grounded`] (a verbatim
//! substring) after generation (constrained output always passes; the baselines may not).

use std::collections::BTreeMap;

use serde_json::Value;

use crate::grammar::{GrammarBuilder, LexemeId, Symbol};
use crate::schema::pointer;

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
                walk(child, pointer::push(&ptr, k), found)?;
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
        run(&self.next, s).is_some()
    }
}

/// The state a DFA given as per-state transition maps reaches on `s` from state 0, if any.
fn run(next: &[BTreeMap<char, u32>], s: &str) -> Option<u32> {
    s.chars()
        .try_fold(0u32, |q, c| next[q as usize].get(&c).copied())
}

/// The DFA of a document's **whole-word spans**: the non-empty substrings that start and end
/// at word boundaries (never inside a run of alphanumeric characters) and neither start nor
/// end with whitespace. A quote then never cuts a word (`"Boo"` out of "Book a table"), which
/// is what an extracted value or a piece of evidence is.
///
/// Built by subset construction over document positions: a state is the set of positions where
/// the span read so far can end, among occurrences that start at a word start; it accepts when
/// one of them is at a word end. Documents where this would exceed a work budget (long, highly
/// repetitive text) get `None`, and the caller falls back to any substring.
#[derive(Clone, Debug)]
pub struct SpanAutomaton {
    next: Vec<BTreeMap<char, u32>>,
    accept: Vec<bool>,
}

impl SpanAutomaton {
    /// Builds the automaton, or `None` when the construction would touch more than
    /// `64 n + 4096` positions in total (n = characters).
    pub fn new(text: &str) -> Option<Self> {
        let cs: Vec<char> = text.chars().collect();
        let n = cs.len();
        let word = |k: usize| cs[k].is_alphanumeric();
        let boundary = |k: usize| k == 0 || k == n || !(word(k - 1) && word(k));
        let starts: Vec<u32> = (0..n)
            .filter(|&i| boundary(i) && !cs[i].is_whitespace())
            .map(|i| i as u32)
            .collect();
        let end_ok: Vec<bool> = (0..=n)
            .map(|j| j > 0 && boundary(j) && !cs[j - 1].is_whitespace())
            .collect();
        let mut budget = 64 * n + 4096;
        let mut sets: Vec<Vec<u32>> = vec![starts];
        // The start state is never merged with a later one: it alone must not accept.
        let mut index: std::collections::HashMap<Vec<u32>, u32> = Default::default();
        let mut sa = SpanAutomaton {
            next: vec![BTreeMap::new()],
            accept: vec![false],
        };
        let mut q = 0;
        while q < sets.len() {
            budget = budget.checked_sub(sets[q].len())?;
            let mut by_char: BTreeMap<char, Vec<u32>> = BTreeMap::new();
            for &k in &sets[q] {
                if (k as usize) < n {
                    by_char.entry(cs[k as usize]).or_default().push(k + 1);
                }
            }
            for (c, to) in by_char {
                let id = match index.get(&to) {
                    Some(&id) => id,
                    None => {
                        let id = sets.len() as u32;
                        sa.accept.push(to.iter().any(|&j| end_ok[j as usize]));
                        sa.next.push(BTreeMap::new());
                        index.insert(to.clone(), id);
                        sets.push(to);
                        id
                    }
                };
                sa.next[q].insert(c, id);
            }
            q += 1;
        }
        Some(sa)
    }

    /// Number of states.
    pub fn states_len(&self) -> usize {
        self.next.len()
    }

    /// Whether `s` is a whole-word span of the text.
    pub fn contains(&self, s: &str) -> bool {
        run(&self.next, s).is_some_and(|q| self.accept[q as usize])
    }
}

/// A document prepared for grounded fields: the automaton of the quotes it allows — its
/// whole-word spans ([`SpanAutomaton`]), or, when that is over budget, all its non-empty
/// substrings ([`SuffixAutomaton`]).
#[derive(Clone, Debug)]
pub struct GroundedDoc {
    next: Vec<BTreeMap<char, u32>>,
    accept: Vec<bool>,
    whole_words: bool,
}

impl GroundedDoc {
    /// Indexes `document`.
    pub fn new(document: &str) -> Self {
        match SpanAutomaton::new(document) {
            Some(sa) => GroundedDoc {
                next: sa.next,
                accept: sa.accept,
                whole_words: true,
            },
            None => {
                let sam = SuffixAutomaton::new(document);
                let mut accept = vec![true; sam.states_len()];
                accept[0] = false;
                GroundedDoc {
                    next: sam.next,
                    accept,
                    whole_words: false,
                }
            }
        }
    }

    /// Whether quotes are restricted to whole-word spans (false only for documents over the
    /// span automaton's budget).
    pub fn whole_words(&self) -> bool {
        self.whole_words
    }

    /// Adds the rules of `"` quote `"` (a JSON string whose value is a quote this document
    /// allows, escaped as `serde_json` escapes) to `b`; returns the rule.
    ///
    /// `prefix` keeps rule names apart from the rest of the grammar. The empty string is
    /// excluded: an empty quote is no evidence.
    pub fn add_to(&self, b: &mut GrammarBuilder, prefix: &str) -> crate::grammar::RuleId {
        let n = self.next.len();
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
            if self.accept[q] {
                alts.push(vec![]);
            }
            for (&c, &to) in &self.next[q] {
                let lx = lexeme(b, c);
                alts.push(vec![Symbol::Lexeme(lx), Symbol::Rule(rules[to as usize])]);
            }
            if alts.is_empty() {
                // Only the root of a document without a quotable character has no way on; it
                // derives nothing finite, so the grammar reports an empty language if a value
                // is required.
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
        let steps: Vec<String> = pointer::tokens(p).collect();
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
                collect(child, rest, pointer::push(&at, name), out);
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

    /// Whole-word spans by brute force, with the same word and whitespace rules.
    fn spans(s: &str) -> std::collections::BTreeSet<String> {
        let cs: Vec<char> = s.chars().collect();
        let n = cs.len();
        let w = |k: usize| cs[k].is_alphanumeric();
        let b = |k: usize| k == 0 || k == n || !(w(k - 1) && w(k));
        let mut out = std::collections::BTreeSet::new();
        for i in 0..n {
            for j in i + 1..=n {
                if b(i) && b(j) && !cs[i].is_whitespace() && !cs[j - 1].is_whitespace() {
                    out.insert(cs[i..j].iter().collect());
                }
            }
        }
        out
    }

    proptest! {
        #[test]
        fn span_automaton_accepts_exactly_the_whole_word_spans(
            text in "[ab .é\"]{0,14}",
            probe in "[ab .é\"]{0,6}",
        ) {
            let sa = SpanAutomaton::new(&text).unwrap();
            prop_assert_eq!(sa.contains(&probe), spans(&text).contains(&probe));
        }
    }

    #[test]
    fn spans_never_cut_a_word() {
        let sa = SpanAutomaton::new("Book a table at Joe's, 8 pm.").unwrap();
        for ok in [
            "Book",
            "Book a table",
            "Joe",
            "Joe's",
            "Joe's,",
            "8 pm.",
            "pm",
            ".",
        ] {
            assert!(sa.contains(ok), "{ok:?}");
        }
        for bad in ["", "Boo", "ook", " a", "a ", "table a", "oe's", "p"] {
            assert!(!sa.contains(bad), "{bad:?}");
        }
        assert!(GroundedDoc::new("Book a table").whole_words());
    }

    #[test]
    fn repetitive_long_documents_fall_back_to_substrings() {
        let text = "a ".repeat(3000);
        assert!(SpanAutomaton::new(&text).is_none());
        let doc = GroundedDoc::new(&text);
        assert!(!doc.whole_words());
        let mut b = GrammarBuilder::new();
        let r = doc.add_to(&mut b, "g/");
        assert!(b.build(r).is_ok());
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
