use formwork_core::grammar::GrammarBuilder;
use proptest::prelude::*;
use serde_json::Value;

use super::*;

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
    let schema = serde_json::json!({"properties": {"n": {"type": "boolean", "x-grounded": true}}});
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

// Issue 23: a grounded field's own `pattern`, `format`, lengths and `const`/`enum` used to
// be replaced with the placeholder and never reach the grammar. Each test below drives
// the composed grammar (as extraction composes it) on the byte-level vocabulary with a
// document holding a quote that violates the field and one that satisfies it.

use crate::run::{Constraint, ExtractConfig, Prepared};
use formwork_core::matcher::{CompiledGrammar, Limits, Matcher};
use formwork_core::toktrie::SyntheticVocab;
use std::sync::Arc;

/// An object schema with one required grounded field `v`.
fn one_field(field: Value) -> Value {
    let mut field = field;
    field["type"] = "string".into();
    field["x-grounded"] = true.into();
    serde_json::json!({
        "type": "object",
        "properties": {"v": field},
        "required": ["v"],
        "additionalProperties": false
    })
}

/// The matcher of `schema`'s grounded grammar for `doc`.
fn matcher(schema: &Value, doc: &str) -> Matcher {
    let p = Prepared::new(
        &Constraint::Schema(schema.clone()),
        &ExtractConfig::default(),
    )
    .unwrap();
    let g = p.grammar_for(doc).unwrap().unwrap();
    let vocab = Arc::new(SyntheticVocab::byte_level());
    let cg = CompiledGrammar::new(g, vocab, Limits::default()).unwrap();
    Matcher::new(Arc::new(cg)).unwrap()
}

/// Whether the grammar produces `{"v":<value>}` (compact, as the compiler emits).
fn produces(m: &Matcher, value: &str) -> bool {
    let mut m = Matcher::new(m.compiled().clone()).unwrap();
    let text = serde_json::json!({ "v": value }).to_string();
    m.consume_bytes(text.as_bytes()).is_ok() && m.is_accepting()
}

#[test]
fn document_numbers_are_digits_as_written_and_number_words() {
    let texts =
        |t: &str| -> Vec<String> { document_numbers(t).into_iter().map(|(_, s)| s).collect() };
    assert_eq!(
        texts("I finished 5 lessons so far out of the 12 in total, and 5 more."),
        ["5", "12"]
    );
    assert_eq!(
        texts("Revenue 1,200 (up 3.50%), -4 C at 007; db-3 and v2 are names."),
        ["1200", "3.5", "-4", "7"]
    );
    assert_eq!(
        texts("Five apples, twenty-five pears, Twelve plums; fivefold none."),
        ["5", "25", "12"]
    );
    assert_eq!(texts("5-12 lessons"), ["5", "12"]);
    assert!(texts("no numbers here").is_empty());
}

/// The README's course example with grounded numbers: `done_lessons` and `total_lessons`
/// can only be 5 or 12, the numbers the text states (1, 2, 500 or 0 cannot be written),
/// and the field's own bounds still hold.
#[test]
fn grounded_numbers_are_only_the_documents() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/course/");
    let doc = std::fs::read_to_string(format!("{root}doc.txt")).unwrap();
    let mut schema: Value =
        serde_json::from_str(&std::fs::read_to_string(format!("{root}schema.json")).unwrap())
            .unwrap();
    for k in ["done_lessons", "total_lessons"] {
        schema["properties"][k]["x-grounded"] = true.into();
    }
    let m = matcher(&schema, &doc);
    let answer = |done: &str, total: &str| {
        let mut m = Matcher::new(m.compiled().clone()).unwrap();
        let text = format!(
            r#"{{"course":"Rust for Beginners","done_lessons":{done},"total_lessons":{total},"status":"in_progress"}}"#
        );
        m.consume_bytes(text.as_bytes()).is_ok() && m.is_accepting()
    };
    assert!(answer("5", "12"));
    assert!(answer("12", "5"));
    assert!(answer("5", "5"));
    for (d, t) in [
        ("1", "1"),
        ("2", "12"),
        ("5", "500"),
        ("0", "12"),
        ("5", "120"),
    ] {
        assert!(!answer(d, t), "{d} of {t}");
    }
    // `minimum: 13` leaves no candidate: a required field is an error naming it.
    schema["properties"]["total_lessons"]["minimum"] = 13.into();
    let p = Prepared::new(&Constraint::Schema(schema), &ExtractConfig::default()).unwrap();
    let e = p.grammar_for(&doc).unwrap_err().to_string();
    assert!(e.contains("/properties/total_lessons"), "{e}");
    // A keyword a candidate list cannot enforce is refused by name.
    let bad = serde_json::json!({"type": "integer", "x-grounded": true, "not": {"const": 5}});
    let e = mark_grounded(&bad, &[]).unwrap_err().to_string();
    assert!(e.contains("/not"), "{e}");
}

#[test]
fn grounded_pattern_is_enforced() {
    let doc = "Start at 09:30, or at 9:30, or at 25:99.";
    let m = matcher(
        &one_field(serde_json::json!({"pattern": "^[0-2][0-9]:[0-5][0-9]$"})),
        doc,
    );
    assert!(produces(&m, "09:30"));
    for bad in ["9:30", "25:99", "Start"] {
        assert!(!produces(&m, bad), "{bad:?}");
    }
    // Without the pattern the same quotes are producible: the document is no filter.
    let plain = matcher(&one_field(serde_json::json!({})), doc);
    assert!(produces(&plain, "9:30") && produces(&plain, "25:99"));
    // Unanchored patterns keep JSON Schema's search semantics.
    let m = matcher(&one_field(serde_json::json!({"pattern": "[0-9]"})), doc);
    assert!(produces(&m, "at 9:30") && !produces(&m, "or at"));
}

#[test]
fn grounded_format_is_enforced() {
    // 2026-02-30 has the shape of a date but is none.
    let doc = "Moved from 2026-02-30 to 2026-03-14, see ticket 2026.";
    let m = matcher(&one_field(serde_json::json!({"format": "date"})), doc);
    assert!(produces(&m, "2026-03-14"));
    for bad in ["2026-02-30", "2026", "Moved"] {
        assert!(!produces(&m, bad), "{bad:?}");
    }
}

#[test]
fn grounded_length_bounds_count_code_points() {
    let doc = "Call Al or Alexandra at the café Zoë runs.";
    let m = matcher(
        &one_field(serde_json::json!({"minLength": 3, "maxLength": 9})),
        doc,
    );
    for ok in ["Alexandra", "Call", "café Zoë"] {
        assert!(produces(&m, ok), "{ok:?}");
    }
    // "Al" is too short, "Call Al or" one code point too long; "café Zoë runs" is 13.
    for bad in ["Al", "Call Al or", "café Zoë runs"] {
        assert!(!produces(&m, bad), "{bad:?}");
    }
    // "café" is 4 code points in 5 bytes: a byte count would refuse it.
    let m = matcher(&one_field(serde_json::json!({"maxLength": 4})), doc);
    assert!(produces(&m, "café") && !produces(&m, "Call Al"));
}

#[test]
fn grounded_const_and_enum_are_enforced() {
    let doc = "Severity: high, not medium or low.";
    let m = matcher(
        &one_field(serde_json::json!({"enum": ["low", "high", "critical"]})),
        doc,
    );
    assert!(produces(&m, "high") && produces(&m, "low"));
    assert!(!produces(&m, "medium") && !produces(&m, "critical"));
    let m = matcher(&one_field(serde_json::json!({"const": "high"})), doc);
    assert!(produces(&m, "high") && !produces(&m, "low"));
}

#[test]
fn all_keywords_of_a_field_hold_at_once() {
    // Pattern and format neither containing the other: the schema compiler refuses this
    // pair for a plain string; the product with the document needs no such shortcut.
    let doc = "Dates: 2026-03-14, 2027-03-14 and 2026-13-01.";
    let m = matcher(
        &one_field(serde_json::json!({"format": "date", "pattern": "^2026"})),
        doc,
    );
    assert!(produces(&m, "2026-03-14"));
    assert!(!produces(&m, "2027-03-14") && !produces(&m, "2026-13-01"));
}

#[test]
fn an_unsatisfiable_required_field_is_an_error_naming_it() {
    let schema = one_field(serde_json::json!({"format": "date"}));
    let p = Prepared::new(&Constraint::Schema(schema), &ExtractConfig::default()).unwrap();
    let err = p
        .grammar_for("See you next Tuesday.")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("/properties/v") && err.contains("format"),
        "{err}"
    );
    // Optional: the object without it is still there.
    let schema = serde_json::json!({"type": "object", "properties": {
        "v": {"type": "string", "format": "date", "x-grounded": true}}});
    let p = Prepared::new(&Constraint::Schema(schema), &ExtractConfig::default()).unwrap();
    assert!(p.grammar_for("See you next Tuesday.").is_ok());
}

#[test]
fn keywords_a_quote_cannot_enforce_are_refused_by_pointer() {
    let err = mark_grounded(&one_field(serde_json::json!({"not": {"const": "x"}})), &[])
        .unwrap_err()
        .to_string();
    assert!(err.contains("/properties/v/not"), "{err}");
    let err = mark_grounded(&one_field(serde_json::json!({"pattern": "(?<=a)b"})), &[])
        .unwrap_err()
        .to_string();
    assert!(err.contains("/properties/v/pattern"), "{err}");
    let err = mark_grounded(&one_field(serde_json::json!({"format": "colour"})), &[])
        .unwrap_err()
        .to_string();
    assert!(err.contains("/properties/v/format"), "{err}");
    // Annotations are fine.
    let m = mark_grounded(
        &one_field(serde_json::json!({"description": "d", "examples": ["x"], "x-note": 1})),
        &[],
    )
    .unwrap();
    assert!(m.fields[0].is_plain());
}

#[test]
fn a_product_over_budget_is_an_error_naming_the_field() {
    // Single-letter words in a non-repeating order: almost every span of up to 2000
    // characters is distinct, far more (span, length) pairs than 64 per character.
    let mut x: u32 = 12345;
    let doc: String = (0..1500)
        .map(|_| {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
            format!("{} ", char::from(b'a' + ((x >> 16) % 26) as u8))
        })
        .collect();
    let schema = one_field(serde_json::json!({"maxLength": 2000}));
    let p = Prepared::new(&Constraint::Schema(schema), &ExtractConfig::default()).unwrap();
    let err = p.grammar_for(&doc).unwrap_err().to_string();
    assert!(
        err.contains("/properties/v") && err.contains("maxLength"),
        "{err}"
    );
}

#[test]
fn no_allowed_prefix_is_a_dead_end() {
    // The span "x a " (trailing space at the end of the document) can be neither ended
    // nor extended: the grammar must not let the quote walk into it.
    let m = matcher(&one_field(serde_json::json!({})), "x a ");
    let mut m = Matcher::new(m.compiled().clone()).unwrap();
    assert!(m.consume_bytes(b"{\"v\":\"x a").is_ok());
    assert!(m.consume_bytes(b" ").is_err());
    // Same for a field whose pattern only a longer quote could finish.
    let m = matcher(
        &one_field(serde_json::json!({"pattern": "^[a-z]+ [0-9]$"})),
        "ab cd 7",
    );
    assert!(produces(&m, "cd 7"));
    let mut m = Matcher::new(m.compiled().clone()).unwrap();
    assert!(
        m.consume_bytes(b"{\"v\":\"a").is_err(),
        "\"ab 7\" is no span"
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    /// The grammar's quotes are exactly the whole-word spans the field accepts.
    #[test]
    fn grounded_grammar_is_spans_intersected_with_the_field(
        doc in "[ab1 :-]{1,10}",
        which in 0usize..4,
    ) {
        let field = [
            serde_json::json!({"pattern": "^[a-z]"}),
            serde_json::json!({"maxLength": 3, "minLength": 2}),
            serde_json::json!({"enum": ["a", "b 1", "1:"]}),
            serde_json::json!({"pattern": "1$", "maxLength": 4}),
        ][which].clone();
        let schema = one_field(field);
        let marked = mark_grounded(&schema, &[]).unwrap();
        let f = &marked.fields[0];
        let want: Vec<String> = spans(&doc).into_iter().filter(|s| f.accepts(s)).collect();
        let p = Prepared::new(&Constraint::Schema(schema), &ExtractConfig::default()).unwrap();
        match p.grammar_for(&doc) {
            Err(_) => prop_assert!(want.is_empty()),
            Ok(g) => {
                let vocab = Arc::new(SyntheticVocab::byte_level());
                let cg = CompiledGrammar::new(g.unwrap(), vocab, Limits::default()).unwrap();
                let m = Matcher::new(Arc::new(cg)).unwrap();
                for s in substrings(&doc) {
                    prop_assert_eq!(produces(&m, &s), want.contains(&s), "{:?}", s);
                }
            }
        }
    }
}
