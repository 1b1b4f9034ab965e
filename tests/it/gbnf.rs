//! GBNF reader, shipped `grammars/*.gbnf` and the plain-regex constraint.
//!
//! Acceptance is checked twice: with the real [`Matcher`] (greedy lexer + Earley, byte-level
//! vocabulary) and with `reference::accepts`, a slow, independent Earley recognizer over
//! characters that tries every split of the input into lexemes (no greedy lexing), i.e. the
//! GBNF semantics by definition. Agreement of the two also checks the lexeme mapping: a
//! literal wrongly kept whole would make the greedy matcher reject what the reference accepts.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;

use crate::schema_support::test_limits;
use formwork::grammar::gbnf::{self, GbnfError};
use formwork::grammar::regex::grammar_from_regex;
use formwork::grammar::Grammar;
use formwork::matcher::{CompiledGrammar, Matcher};
use formwork::toktrie::{SyntheticVocab, TokenSet};
use proptest::prelude::*;
use rand::{Rng, SeedableRng};

fn grammars_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("grammars")
}

fn load(name: &str) -> Grammar {
    let path = grammars_dir().join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    gbnf::parse(&text).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// A slow reference recognizer: Earley over character positions, scanning a lexeme at `i` by
/// trying every end `j` that its length bounds allow.
mod reference {
    use std::collections::HashSet;

    use formwork::grammar::{Grammar, Symbol};
    use regex_automata::meta::Regex;

    type Item = (usize, usize, usize, usize); // rule, alternative, dot, origin

    pub fn accepts(g: &Grammar, input: &str) -> bool {
        let lexemes: Vec<(Regex, usize, Option<usize>)> = g
            .lexemes()
            .iter()
            .map(|l| {
                let hir = regex_syntax::parse(l.regex()).expect("lexeme regex");
                let props = hir.properties();
                let re = Regex::new(&format!("^(?:{})$", l.regex())).expect("lexeme regex");
                (
                    re,
                    props.minimum_len().unwrap_or(usize::MAX),
                    props.maximum_len(),
                )
            })
            .collect();
        let bounds: Vec<usize> = input
            .char_indices()
            .map(|(i, _)| i)
            .chain([input.len()])
            .collect();
        let n = bounds.len();
        let mut chart: Vec<Vec<Item>> = vec![Vec::new(); n];
        let mut seen: Vec<HashSet<Item>> = vec![HashSet::new(); n];
        let start = g.start().as_usize();
        for a in 0..g.rules()[start].alternatives.len() {
            let it = (start, a, 0, 0);
            if seen[0].insert(it) {
                chart[0].push(it);
            }
        }
        for i in 0..n {
            // Passes until nothing new appears at `i`: completions of empty rules can
            // enable items predicted after them.
            loop {
                let mut changed = false;
                let mut k = 0;
                while k < chart[i].len() {
                    let (r, a, d, o) = chart[i][k];
                    k += 1;
                    let alt = &g.rules()[r].alternatives[a];
                    let mut add = |chart: &mut Vec<Vec<Item>>, at: usize, it: Item| {
                        if seen[at].insert(it) {
                            chart[at].push(it);
                            at == i
                        } else {
                            false
                        }
                    };
                    if d < alt.len() {
                        match alt[d] {
                            Symbol::Rule(b) => {
                                let b = b.as_usize();
                                for a2 in 0..g.rules()[b].alternatives.len() {
                                    changed |= add(&mut chart, i, (b, a2, 0, i));
                                }
                            }
                            Symbol::Lexeme(l) => {
                                let (re, min, max) = &lexemes[l.as_usize()];
                                for j in i + 1..n {
                                    let len = bounds[j] - bounds[i];
                                    if len < *min {
                                        continue;
                                    }
                                    if max.is_some_and(|m| len > m) {
                                        break;
                                    }
                                    if re.is_match(&input[bounds[i]..bounds[j]]) {
                                        add(&mut chart, j, (r, a, d + 1, o));
                                    }
                                }
                            }
                        }
                    } else {
                        let mut w = 0;
                        while w < chart[o].len() {
                            let (r2, a2, d2, o2) = chart[o][w];
                            w += 1;
                            let alt2 = &g.rules()[r2].alternatives[a2];
                            if alt2.get(d2)
                                == Some(&Symbol::Rule(formwork::grammar::RuleId(r as u32)))
                            {
                                changed |= add(&mut chart, i, (r2, a2, d2 + 1, o2));
                            }
                        }
                    }
                }
                if !changed {
                    break;
                }
            }
        }
        chart[n - 1]
            .iter()
            .any(|&(r, a, d, o)| r == start && o == 0 && d == g.rules()[r].alternatives[a].len())
    }
}

/// `g` compiled for the byte-level vocabulary (256 bytes + EOS).
fn compile(g: &Grammar) -> Arc<CompiledGrammar> {
    let vocab = Arc::new(SyntheticVocab::byte_level());
    Arc::new(CompiledGrammar::new(g.clone(), vocab, test_limits()).expect("compiles"))
}

/// Whether the real matcher accepts `s` as a complete output.
fn matcher_accepts(cg: &Arc<CompiledGrammar>, s: &str) -> bool {
    let mut m = Matcher::new(cg.clone()).expect("matcher");
    m.consume_bytes(s.as_bytes()).is_ok() && m.is_accepting()
}

/// Whether `s` is accepted, asserting that the matcher and the reference agree.
fn accepts(g: &Grammar, s: &str) -> bool {
    accepts_with(g, &compile(g), s)
}

fn accepts_with(g: &Grammar, cg: &Arc<CompiledGrammar>, s: &str) -> bool {
    let want = reference::accepts(g, s);
    assert_eq!(
        matcher_accepts(cg, s),
        want,
        "matcher and reference disagree on {s:?}"
    );
    want
}

fn check(g: &Grammar, valid: &[&str], invalid: &[&str]) {
    let cg = compile(g);
    for s in valid {
        assert!(accepts_with(g, &cg, s), "should accept {s:?}");
    }
    for s in invalid {
        assert!(!accepts_with(g, &cg, s), "should reject {s:?}");
    }
}

#[test]
fn every_shipped_grammar_parses_and_has_a_header() {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(grammars_dir()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "gbnf") {
            let text = std::fs::read_to_string(&path).unwrap();
            assert!(
                text.starts_with("# "),
                "{} needs a comment header",
                path.display()
            );
            gbnf::parse(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            names.push(path.file_name().unwrap().to_string_lossy().into_owned());
        }
    }
    names.sort();
    assert_eq!(
        names,
        ["arithmetic.gbnf", "c_like.gbnf", "json.gbnf", "list.gbnf"]
    );
}

#[test]
fn json_gbnf_accepts_and_rejects() {
    let g = load("json.gbnf");
    // The lexeme plan (module doc of `gbnf`): strings are one lexeme, keywords whole, numbers
    // and whitespace per character.
    let names: HashSet<&str> = g.lexemes().iter().map(|l| l.name.as_str()).collect();
    assert!(
        names.contains("string") && !names.contains("number"),
        "{names:?}"
    );
    let regexes: HashSet<&str> = g.lexemes().iter().map(|l| l.regex()).collect();
    assert!(
        regexes.contains("true") && regexes.contains("null"),
        "{regexes:?}"
    );
    check(
        &g,
        &[
            "{}",
            "[]",
            " 0 ",
            "-0.0E+10",
            "\"\"",
            "{\"a\": [1, 2.5e-3, true, false, null, \"x\\u00e9\\n\\/\"]}",
            "[\n  {\"k\" :{}} ,\t[ ]\r\n]",
            "\"é ☃ \u{7f}\"",
        ],
        &[
            "",
            "{,}",
            "[1,]",
            "01",
            "1.",
            "+1",
            ".5",
            "\"\\x\"",
            "\"\\u12g4\"",
            "{\"a\" 1}",
            "{a: 1}",
            "tru",
            "\"a",
            "\"tab\there\"",
            "[1] [2]",
        ],
    );
}

fn json_value() -> impl Strategy<Value = serde_json::Value> {
    use serde_json::Value;
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        (-1e300f64..1e300).prop_map(Value::from),
        "\\PC{0,6}|[\"\\\\\u{0}-\u{1f}]{0,3}".prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec(("[a-z\"\\\\]{0,4}", inner), 0..4)
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// json.gbnf accepts whatever serde_json prints, compact and pretty.
    #[test]
    fn json_gbnf_accepts_serde_json_output(v in json_value()) {
        let g = load("json.gbnf");
        let cg = compile(&g);
        let compact = serde_json::to_string(&v).unwrap();
        let pretty = serde_json::to_string_pretty(&v).unwrap();
        prop_assert!(accepts_with(&g, &cg, &compact), "{}", compact);
        prop_assert!(accepts_with(&g, &cg, &pretty), "{}", pretty);
    }
}

/// Seeded random walks under the mask of json.gbnf: every output the matcher lets finish
/// is JSON to serde_json.
#[test]
fn json_gbnf_random_walks_produce_json() {
    let g = load("json.gbnf");
    let cg = compile(&g);
    let vocab = cg.vocab().clone();
    let eos = vocab.eos_tokens()[0];
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mut mask = TokenSet::new(vocab.vocab_len());
    let mut finished = 0;
    for walk in 0..40 {
        let mut m = Matcher::new(cg.clone()).unwrap();
        for step in 0..120 {
            m.compute_mask(&mut mask).unwrap();
            let allowed: Vec<_> = mask.iter().collect();
            assert!(
                !allowed.is_empty(),
                "walk {walk}: dead end after {:?}",
                m.output()
            );
            // Stop as soon as stopping is allowed once the output has some length.
            let tok = if mask.contains(eos) && (step > 40 || rng.random_bool(0.3)) {
                eos
            } else {
                allowed[rng.random_range(0..allowed.len())]
            };
            if tok == eos {
                let out = String::from_utf8(m.output().to_vec()).unwrap();
                // `IgnoredAny` checks the syntax only: RFC 8259 allows numbers like
                // `3E38281` that do not fit an f64, which `Value` would refuse.
                serde_json::from_str::<serde::de::IgnoredAny>(&out)
                    .unwrap_or_else(|e| panic!("walk {walk}: {out:?}: {e}"));
                assert!(reference::accepts(&g, &out), "{out:?}");
                finished += 1;
                break;
            }
            m.consume_token(tok).unwrap();
        }
    }
    assert!(finished >= 10, "only {finished} walks finished");
}

#[test]
fn list_gbnf_accepts_and_rejects() {
    let g = load("list.gbnf");
    check(
        &g,
        &[
            "- a\n",
            "- buy milk\n  - oat, not cow\n* call Bob\n",
            "* x\n  * y\n  - z\n",
        ],
        &[
            "",
            "- \n",
            "-a\n",
            "- a",
            "  - a\n",
            "- a\n    - b\n",
            "+ a\n",
        ],
    );
}

#[test]
fn arithmetic_gbnf_accepts_and_rejects() {
    let g = load("arithmetic.gbnf");
    check(
        &g,
        &[
            "1",
            "2 * (3.5 - -1) / 4",
            " 7 ",
            "((1))",
            "1+2*3-4/5",
            "--1",
        ],
        &["", "1 +", "()", "1..2", "* 2", "1 2", "1.", "(1"],
    );
}

#[test]
fn c_like_gbnf_accepts_and_rejects() {
    let g = load("c_like.gbnf");
    let program = r#"int x = 1;
// a comment
int main(int argc, char c) {
  int y = x * (2 + 3) % 4;
  if (y > 3) { y = y - 1; } else return 0;
  if (!y && x <= 2) y = f(y, 1); else { }
  while (y != 0) y = y - 1;
  print("hi\n", 'c');
  return y;
}
void f() {}
"#;
    check(
        &g,
        &[
            program,
            "",
            "int x;",
            "float f(float a) { return a * 2.5; }",
        ],
        &[
            "int x = ;",
            "int main() { return 0 }",
            "int 1x;",
            "x = 1;",
            "int f() { int y = 1 }",
            "int f() { if x { } }",
            "int f() { return \"unterminated; }",
            "int f() { y = 1 + ; }",
        ],
    );
}

/// Counted repetition, stacked postfix operators and groups, by language.
#[test]
fn repetition_bounds() {
    let cases: &[(&str, &[&str], &[&str])] = &[
        (
            r#"root ::= "ab"{2,3}"#,
            &["abab", "ababab"],
            &["ab", "abababab", ""],
        ),
        (r#"root ::= [0-9]{3}"#, &["123"], &["12", "1234"]),
        (r#"root ::= "a"{2,}"#, &["aa", "aaaaaaa"], &["a", ""]),
        (r#"root ::= "a"{0}"#, &[""], &["a"]),
        (r#"root ::= "a"{ 1 , 2 }"#, &["a", "aa"], &["aaa"]),
        (r#"root ::= "a"{2}{3}"#, &["aaaaaa"], &["aaaa", "aaaaaaaaa"]),
        (
            r#"root ::= ("x" | "yz")+ "!""#,
            &["x!", "yzxyz!"],
            &["!", "y!"],
        ),
        (r#"root ::= "a"*?"#, &["", "aaa"], &["b"]),
        (
            r#"root ::= ("a"? "b"?){2}"#,
            &["", "ab", "abab", "ba", "bb"],
            &["abb a", "aaa"],
        ),
        (
            r#"root ::= [^a-c] . "\n""#,
            &["d\n\n", "z☃\n"],
            &["a \n", "dd"],
        ),
    ];
    for (text, valid, invalid) in cases {
        let g = gbnf::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
        for s in *valid {
            assert!(accepts(&g, s), "{text} should accept {s:?}");
        }
        for s in *invalid {
            assert!(!accepts(&g, s), "{text} should reject {s:?}");
        }
    }
    // A million-fold repetition is O(log n) rules, not a million copies.
    let g = gbnf::parse(r#"root ::= "ab"{1000000,2000000}"#).unwrap();
    assert!(g.size() < 400, "{}", g.size());
}

#[test]
fn escapes_in_literals_and_classes() {
    let g =
        gbnf::parse(r#"root ::= "\x41\u00e9\U0001F600\t\r\n\\\"\[\]" [\x30-\x39\-\^\]]"#).unwrap();
    assert!(accepts(&g, "Aé😀\t\r\n\\\"[]7"));
    assert!(accepts(&g, "Aé😀\t\r\n\\\"[]-"));
    assert!(accepts(&g, "Aé😀\t\r\n\\\"[]^"));
    assert!(!accepts(&g, "Aé😀\t\r\n\\\"[]a"));
}

/// Error messages are pinned, caret and all.
#[test]
fn error_messages() {
    let cases: &[(&str, &str)] = &[
        (
            "root ::= value\nvalue ::= \"a\" ws2\n",
            "rule `ws2` is used but never defined at 2:15\n    value ::= \"a\" ws2\n                  ^",
        ),
        (
            "root ::= \"abc",
            "unterminated string literal at 1:10\n    root ::= \"abc\n             ^",
        ),
        (
            "root ::= \"a\\qb\"",
            "invalid escape sequence `\\q` at 1:12\n    root ::= \"a\\qb\"\n               ^",
        ),
        (
            "root ::= \"\\x4g\"",
            "invalid escape sequence `\\x4g` at 1:11\n    root ::= \"\\x4g\"\n              ^",
        ),
        (
            "root ::= \"a\"{3,1}",
            "invalid repetition bounds {3,1}: the minimum exceeds the maximum at 1:13\n    root ::= \"a\"{3,1}\n                ^",
        ),
        (
            "root = \"a\"",
            "expected `::=` after rule name `root` at 1:6\n    root = \"a\"\n         ^",
        ),
        ("", "grammar is empty: it defines no rules"),
        ("# only a comment\n\n   \n", "grammar is empty: it defines no rules"),
        ("expr ::= \"1\"", "grammar has no `root` rule (the start rule)"),
        (
            "root ::= a\na ::= \"x\"\na ::= \"y\"",
            "rule `a` is defined twice (first on line 2) at 3:1\n    a ::= \"y\"\n    ^",
        ),
        (
            "root ::= (\"a\" | \"b\"",
            "unclosed `(` at 1:10\n    root ::= (\"a\" | \"b\"\n             ^",
        ),
        (
            "root ::= [a-z",
            "unterminated character class at 1:10\n    root ::= [a-z\n             ^",
        ),
        (
            "root ::= \"a\")",
            "unexpected character `)` at 1:13\n    root ::= \"a\")\n                ^",
        ),
        (
            "root ::= [z-a]",
            "invalid class range: U+007A is after U+0061 at 1:11\n    root ::= [z-a]\n              ^",
        ),
        (
            "root ::= *\"a\"",
            "`*` has nothing to repeat at 1:10\n    root ::= *\"a\"\n             ^",
        ),
        (
            "root ::= \"a\"{x}",
            "malformed repetition: expected `{m}`, `{m,}` or `{m,n}` at 1:14\n    root ::= \"a\"{x}\n                 ^",
        ),
        (
            "root ::= \"a\"{99999999999}",
            "repetition count too large (the limit is 4294967295) at 1:14\n    root ::= \"a\"{99999999999}\n                 ^",
        ),
        (
            "root ::= <think> \"a\"",
            "token references (`<...>`) are not supported: grammars are over text at 1:10\n    root ::= <think> \"a\"\n             ^",
        ),
        (
            "root ::= \"\\U00110000\"",
            "invalid code point U+110000: not a unicode scalar value at 1:11\n    root ::= \"\\U00110000\"\n              ^",
        ),
        (
            "root ::= \"a\" root",
            "rule `root` derives no finite string at 1:1\n    root ::= \"a\" root\n    ^",
        ),
        (
            "root ::= x\n::= \"a\"",
            "expected a rule name at 2:1\n    ::= \"a\"\n    ^",
        ),
        (
            "\troot ::= \"a\" | ]",
            "unexpected character `]` at 1:17\n    \troot ::= \"a\" | ]\n    \t               ^",
        ),
    ];
    for (text, want) in cases {
        let e = gbnf::parse(text).expect_err(text);
        assert_eq!(e.to_string(), *want, "for {text:?}");
    }
}

#[test]
fn deep_nesting_is_an_error_not_a_stack_overflow() {
    let text = format!(
        "root ::= {}\"a\"{}",
        "(".repeat(100_000),
        ")".repeat(100_000)
    );
    assert!(matches!(gbnf::parse(&text), Err(GbnfError::TooDeep { .. })));
    let text = format!("root ::= \"a\"{}", "*".repeat(100_000));
    gbnf::parse(&text).unwrap();
}

/// Formatting (whitespace, comments, line breaks, continuation lines) does not change the
/// grammar, and `Display` prints rules with `root` first.
#[test]
fn formatting_does_not_change_the_grammar() {
    let compact = "root ::= item (\",\" item)*\nitem ::= [a-z]+ | \"<\" item \">\"";
    let spread = "# a list of items\n\nroot ::=\n    item # first\n    (\n      \",\"\n      item\n    )*\n\nitem ::= [a-z]+\n       | \"<\" item \">\"   # nested\n";
    let a = gbnf::parse(compact).unwrap();
    let b = gbnf::parse(spread).unwrap();
    assert_eq!(a, b);
    let shown = a.to_string();
    assert!(shown.starts_with("root ::= item "), "{shown}");
    assert!(shown.contains("\nitem ::= "), "{shown}");
    assert_eq!(shown.lines().count(), a.rules().len());
}

#[test]
fn plain_regex_constraint() {
    let g = grammar_from_regex(r"^\d{3}-[A-Z]{2}(x|y)*$").unwrap();
    check(
        &g,
        &["123-ABxyx", "000-ZZ"],
        &["123-AB-", "12-AB", "", "123-ABz"],
    );
    let g = grammar_from_regex("(ab)*").unwrap();
    check(&g, &["", "ab", "abab"], &["a", "aba"]);
    let e = grammar_from_regex("a(b").unwrap_err();
    assert_eq!(
        e.to_string(),
        "invalid regex: unclosed group at 1:2\n    a(b\n     ^"
    );
}

/// Mutated shipped grammars: a few random edits of real grammar text.
fn mutated_grammar() -> impl Strategy<Value = String> {
    let texts: Vec<String> = ["json.gbnf", "list.gbnf", "arithmetic.gbnf", "c_like.gbnf"]
        .iter()
        .map(|n| std::fs::read_to_string(grammars_dir().join(n)).unwrap())
        .collect();
    let edit = (
        any::<prop::sample::Index>(),
        0u8..3,
        "[\\[\\]()\"\\\\|*+?{},0-9a-z:=#<.^\n -]",
    );
    (
        prop::sample::select(texts),
        prop::collection::vec(edit, 1..6),
    )
        .prop_map(|(text, edits)| {
            let mut chars: Vec<char> = text.chars().collect();
            for (at, kind, s) in edits {
                let i = at.index(chars.len() + 1);
                match kind {
                    0 if i < chars.len() => {
                        chars.remove(i);
                    }
                    1 => chars.insert(i, s.chars().next().unwrap_or(' ')),
                    _ if i < chars.len() => chars[i] = s.chars().next().unwrap_or(' '),
                    _ => {}
                }
            }
            chars.into_iter().collect()
        })
}

fn check_no_panic(text: &str) -> Result<(), TestCaseError> {
    match gbnf::parse(text) {
        Ok(g) => prop_assert!(!g.rules().is_empty()),
        Err(e) => {
            let shown = e.to_string();
            prop_assert!(!shown.is_empty());
            if let Some(at) = e.location() {
                prop_assert!(at.line >= 1 && at.line <= text.split('\n').count());
                prop_assert!(at.column >= 1 && at.column <= at.line_text.chars().count() + 1);
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// The reader never panics on GBNF-like noise, and error locations point into the text.
    #[test]
    fn no_panic_on_gbnf_like_text(text in "([a-z]{1,3} ?::= ?|[\\[\\]()\"\\\\|*+?{},0-9a-z:=#<.^\n \t-]){0,40}") {
        check_no_panic(&text)?;
    }

    #[test]
    fn no_panic_on_any_text(text in any::<String>()) {
        check_no_panic(&text)?;
    }

    #[test]
    fn no_panic_on_mutated_grammars(text in mutated_grammar()) {
        check_no_panic(&text)?;
    }
}

/// The literals kept whole by the prefix-free analysis never change the language: the same
/// grammar with every literal forced apart (by a reachable class of their first characters)
/// accepts the same strings.
#[test]
fn whole_literals_do_not_change_the_language() {
    let text = r#"root ::= ("if" | "then" | "else" | "end") (" " root)?"#;
    let g = gbnf::parse(text).unwrap();
    let whole: HashSet<&str> = g.lexemes().iter().map(|l| l.regex()).collect();
    assert!(
        whole.contains("then") && whole.contains("else"),
        "{whole:?}"
    );
    for s in [
        "if",
        "then else end",
        "if if",
        "ifthen",
        "the",
        "if ",
        "end end end",
    ] {
        // `[a-z] []` never matches but is reachable, so it forces every literal apart.
        let split = format!("{text} | [a-z] []");
        let g2 = gbnf::parse(&split).unwrap();
        assert!(g2.lexemes().iter().all(|l| l.regex() != "then"));
        assert_eq!(accepts(&g, s), accepts(&g2, s), "{s:?}");
    }
}

/// Left recursion, ambiguity, empty rules and unreachable rules are all accepted: the parser
/// is general (Earley), and unreachable rules are not an error (as in llama.cpp).
#[test]
fn left_recursion_ambiguity_and_unreachable_rules() {
    let g = gbnf::parse(
        "root ::= sum\nsum ::= sum \"+\" sum | sum \"-\" num | num | empty\nnum ::= [0-9]+\nempty ::= \"\"\nunreachable ::= \"zzz\" unreachable",
    )
    .unwrap();
    assert!(g.rules().iter().any(|r| r.name == "unreachable"));
    check(
        &g,
        &["", "1", "1+2-3", "12+34+56", "+", "1+"],
        &["1--2", "a", "1 + 2"],
    );
}
