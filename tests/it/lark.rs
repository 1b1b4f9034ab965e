//! The Lark front end: the corpus in `tests/data/lark/` (OpenAI's documented custom-tool
//! grammars, llguidance-style grammars, our own), the meaning of each construct, and the
//! errors, pinned with their `line:column` and caret.
//!
//! Acceptance is checked twice: with the real [`Matcher`] (byte-level vocabulary) and with
//! the reference of `engine_reference` (a textbook Earley recognizer with the greedy lexing
//! policy written out, lexemes matched by DFAs built from their regex text), which is the
//! semantics Lark grammars have here by definition. The expected answers in `cases.json` are
//! written by hand from the grammars, so they also check the lowering itself.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use formwork::grammar::Grammar;
use formwork::lark::{self, LarkError};
use formwork::matcher::{CompiledGrammar, Matcher};
use formwork::schema::{CompileOptions, Whitespace};
use formwork::toktrie::{SyntheticVocab, TokenId, TokenSet};
use proptest::prelude::*;
use rand::{Rng, SeedableRng};

use crate::engine_reference::{DfaLexemes, Reference};
use crate::schema_support::test_limits;

fn corpus_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/lark")
}

#[derive(serde::Deserialize)]
struct Cases {
    valid: Vec<String>,
    invalid: Vec<String>,
}

/// Every grammar of the corpus with its cases, by file name.
fn corpus() -> BTreeMap<String, (String, Cases)> {
    let dir = corpus_dir();
    let cases: BTreeMap<String, Cases> =
        serde_json::from_str(&std::fs::read_to_string(dir.join("cases.json")).unwrap()).unwrap();
    let mut out = BTreeMap::new();
    let mut files = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "lark") {
            files.push(path.file_name().unwrap().to_string_lossy().into_owned());
        }
    }
    files.sort();
    let named: Vec<&String> = cases.keys().collect();
    assert_eq!(
        files.iter().collect::<Vec<_>>(),
        named,
        "each grammar has its cases"
    );
    for (name, c) in cases {
        let text = std::fs::read_to_string(dir.join(&name)).unwrap();
        out.insert(name, (text, c));
    }
    out
}

fn parse(text: &str) -> Grammar {
    lark::parse(text).unwrap_or_else(|e| panic!("{text}\n{e}"))
}

fn compile(g: &Grammar) -> Arc<CompiledGrammar> {
    let vocab = Arc::new(SyntheticVocab::byte_level());
    Arc::new(CompiledGrammar::new(g.clone(), vocab, test_limits()).expect("compiles"))
}

fn matcher_accepts(cg: &Arc<CompiledGrammar>, s: &str) -> bool {
    let mut m = Matcher::new(cg.clone()).expect("matcher");
    m.consume_bytes(s.as_bytes()).is_ok() && m.is_accepting()
}

/// A grammar ready to be asked: the compiled grammar and the reference, which must agree.
struct Checked {
    g: Grammar,
    cg: Arc<CompiledGrammar>,
    lexemes: DfaLexemes,
}

impl Checked {
    fn new(text: &str) -> Self {
        let g = parse(text);
        Checked {
            cg: compile(&g),
            lexemes: DfaLexemes::new(&g),
            g,
        }
    }

    fn accepts(&self, s: &str) -> bool {
        let want = Reference::with_lexemes(&self.g, &self.lexemes).accepted(s.as_bytes());
        assert_eq!(
            matcher_accepts(&self.cg, s),
            want,
            "matcher and reference disagree on {s:?}"
        );
        want
    }

    fn check(&self, name: &str, valid: &[&str], invalid: &[&str]) {
        for s in valid {
            assert!(self.accepts(s), "{name} should accept {s:?}");
        }
        for s in invalid {
            assert!(!self.accepts(s), "{name} should reject {s:?}");
        }
    }
}

#[test]
fn corpus_grammars_compile_and_decide_their_cases() {
    for (name, (text, cases)) in corpus() {
        let g = Checked::new(&text);
        let valid: Vec<&str> = cases.valid.iter().map(String::as_str).collect();
        let invalid: Vec<&str> = cases.invalid.iter().map(String::as_str).collect();
        g.check(&name, &valid, &invalid);
    }
}

/// Seeded walks under the mask of every corpus grammar: each follows one of the grammar's
/// valid strings up to a random point (its bytes must never be masked out), then picks
/// allowed bytes at random. Every prefix is viable to the reference, no walk reaches a dead
/// end, and every output the matcher lets finish is a sentence to the reference. Half the
/// walks follow their string to the end, so each grammar has finished walks.
#[test]
fn corpus_walks_stay_in_the_language() {
    for (name, (text, cases)) in corpus() {
        let g = Checked::new(&text);
        let reference = Reference::with_lexemes(&g.g, &g.lexemes);
        let vocab = g.cg.vocab().clone();
        let eos = vocab.eos_tokens()[0];
        let mut rng = rand::rngs::StdRng::seed_from_u64(42);
        let mut mask = TokenSet::new(vocab.vocab_len());
        let mut finished = 0;
        for walk in 0..16 {
            let target = cases.valid[walk % cases.valid.len()].as_bytes();
            let follow = if walk % 2 == 0 {
                target.len()
            } else {
                rng.random_range(0..=target.len())
            };
            let mut m = Matcher::new(g.cg.clone()).unwrap();
            for step in 0..300 {
                m.compute_mask(&mut mask).unwrap();
                let out = String::from_utf8_lossy(m.output()).into_owned();
                let allowed: Vec<_> = mask.iter().filter(|&t| t != eos).collect();
                assert!(
                    !allowed.is_empty() || mask.contains(eos),
                    "{name} walk {walk}: dead end after {out:?}"
                );
                let tok = if let Some(&byte) = target[..follow].get(step) {
                    let t = TokenId(u32::from(byte));
                    assert!(mask.contains(t), "{name}: {t:?} masked out after {out:?}");
                    t
                } else if mask.contains(eos)
                    && (allowed.is_empty() || step >= follow + 40 || rng.random_bool(0.3))
                {
                    eos
                } else {
                    allowed[rng.random_range(0..allowed.len())]
                };
                if tok == eos {
                    assert!(
                        reference.accepted(m.output()),
                        "{name} walk {walk}: {out:?} finished but the reference rejects it"
                    );
                    finished += 1;
                    break;
                }
                m.consume_token(tok).unwrap();
                assert!(
                    reference.viable(m.output()),
                    "{name} walk {walk}: the reference finds {:?} not viable",
                    String::from_utf8_lossy(m.output())
                );
            }
        }
        assert!(finished >= 8, "{name}: only {finished} walks finished");
    }
}

/// `%import common` terminals, each by the language Lark's common.lark gives it.
#[test]
fn common_terminals() {
    let cases: &[(&str, &[&str], &[&str])] = &[
        ("DIGIT", &["0", "9"], &["a", "10"]),
        ("HEXDIGIT", &["a", "F", "7"], &["g", "ff"]),
        ("INT", &["0", "0123"], &["", "-1", "1.0"]),
        ("SIGNED_INT", &["+1", "-0", "12"], &["+", "1-"]),
        ("DECIMAL", &["1.", "1.5", ".5"], &[".", "1"]),
        ("FLOAT", &["1e5", "1.5E-3", ".5", "2."], &["1", "e5", "1e"]),
        ("SIGNED_FLOAT", &["-1.5", "+.5e+2"], &["-1"]),
        ("NUMBER", &["1", "1.5", "1e9"], &["-1", "x"]),
        ("SIGNED_NUMBER", &["-1", "+1.5e3", "7"], &["--1", "+"]),
        (
            "ESCAPED_STRING",
            &["\"\"", "\"a\\\"b\"", "\"\\\\\"", "\"é\\n\""],
            &["\"a", "\"a\"b\"", "\"\\\"", "\"a\nb\"", "'a'"],
        ),
        ("LETTER", &["a", "Z"], &["1", "ab"]),
        ("WORD", &["abc", "Word"], &["a1", ""]),
        ("CNAME", &["_x1", "abc", "A_B"], &["1a", "a-b"]),
        ("WS_INLINE", &[" ", " \t "], &["\n", ""]),
        ("WS", &[" \n\t\r\u{c}"], &["", "x"]),
        ("CR", &["\r"], &["\n"]),
        ("LF", &["\n"], &["\r"]),
        ("NEWLINE", &["\n", "\r\n\n"], &["\r", ""]),
        ("SH_COMMENT", &["#", "# hi"], &["#a\nb"]),
        ("CPP_COMMENT", &["// x"], &["/ x"]),
        (
            "C_COMMENT",
            &["/**/", "/* a * b */", "/* a\n */", "/***/"],
            &["/* a */ b */", "/* a", "/*/"],
        ),
        ("SQL_COMMENT", &["-- x"], &["- x"]),
    ];
    for (name, valid, invalid) in cases {
        let text = format!("start: {name}\n%import common.{name}\n");
        Checked::new(&text).check(name, valid, invalid);
    }
}

/// `%ignore` text goes exactly between terminals (and around the whole), never inside one,
/// also between repetitions and around optional and `%json` parts.
#[test]
fn ignore_goes_between_terminals_only() {
    let g = Checked::new(
        "start: \"let\" NAME \"=\" VALUE (\",\" VALUE)* [\"!\"] ITEM~2\nNAME: /[a-z]+/\nVALUE: /[0-9]+/\nITEM: \"x\"\n%ignore \" \"\n%ignore /#[^\\n]*\\n/",
    );
    g.check(
        "ignore",
        &[
            "let a=1xx",
            "  let  a = 1 , 22 ,3 ! x x  ",
            "let a = 1 # comment\n, 2 #\n#\nxx",
        ],
        &["le t a=1xx", "let a=1 2xx", "let ab=1xx x", "let a=1xxx"],
    );
    // A terminal that spells the ignored text itself is still one terminal.
    let g = Checked::new("start: A B\nA: \"a b\"\nB: \"c\"\n%ignore \" \"");
    g.check("spaced", &["a b c", " a bc"], &["a  b c", "ab c"]);
    // Between a %json value and the text around it, not inside the value.
    let g = Checked::new("start: \"n=\" %json {\"type\": \"array\"} \";\"\n%ignore \" \"");
    g.check("json", &["n= [] ;", "n=[1,2];"], &["n=[1, 2];"]);
}

/// Terminals are lexed greedily, as llguidance and OpenAI document: a terminal takes all it
/// can, even when a shorter match would let the rest parse.
#[test]
fn terminals_are_greedy() {
    let g = Checked::new("start: A \"a\"\nA: /a+/");
    g.check("greedy", &[], &["aa", "aaa", "a"]);
    // As rules, the same shape splits where it must.
    let g = Checked::new("start: a \"b\"\na: \"a\"+");
    g.check("rules", &["ab", "aaab"], &["b", "aa"]);
}

#[test]
fn literals_ranges_and_repetition() {
    let cases: &[(&str, &[&str], &[&str])] = &[
        (
            r#"start: "a\tb\\c\"d\x41\u00e9\U0001F600" "\d""#,
            &["a\tb\\c\"dAé😀\\d"],
            &["a\tb\\c\"dAé😀d"],
        ),
        (
            r#"start: "Yes"i | "no""#,
            &["yes", "YES", "yEs", "no"],
            &["NO"],
        ),
        (
            r#"start: ("a".."c")+ "x".."z""#,
            &["abcx", "cz"],
            &["dx", "a"],
        ),
        (r#"start: "a"~3"#, &["aaa"], &["aa", "aaaa"]),
        (r#"start: "a" ~ 2..3"#, &["aa", "aaa"], &["a", "aaaa"]),
        (
            r#"start: "a"{2,} "b"{,1} "c"{1}"#,
            &["aac", "aaabc"],
            &["ac", "aabbc"],
        ),
        (
            r#"start: ["a"] "b"? ("c" | "d")*"#,
            &["", "ab", "cdc", "bd"],
            &["ba"],
        ),
        (
            r#"START_: "s"{2} "t"~0..1
start: START_"#,
            &["ss", "sst"],
            &["s", "sstt"],
        ),
        (r#"start: /[a-c]+/i "!""#, &["aBc!", "C!"], &["d!"]),
        (r#"start: /a.b/s"#, &["a\nb", "axb"], &["ab"]),
        (r#"start: /a # letter a/x"#, &["a"], &["a ", "a # letter a"]),
        (
            r#"start: A
A: "x" B?
B: "y""#,
            &["x", "xy"],
            &["y"],
        ),
        // An empty literal and a terminal of the empty string derive nothing but "".
        (
            r#"start: "" E "a"
E: """#,
            &["a"],
            &[""],
        ),
        // A terminal that also matches "" is optional where it is used.
        (
            r#"start: "<" N ">"
N: /[0-9]*/"#,
            &["<>", "<12>"],
            &["<x>"],
        ),
    ];
    for (text, valid, invalid) in cases {
        Checked::new(text).check(text, valid, invalid);
    }
}

/// Parse-tree shaping (aliases, `_`/`?`/`!` markers, rule priorities, `%llguidance {}`) is
/// read and has no effect on the language.
#[test]
fn tree_shaping_does_not_change_the_language() {
    let plain = parse("start: a b\na: \"x\" | \"y\"\nb: \"z\"");
    let shaped =
        parse("%llguidance {}\n?start: _a b -> top\n_a.2: \"x\" -> ex\n  | \"y\"\n!b: \"z\"");
    let cg_plain = compile(&plain);
    let cg_shaped = compile(&shaped);
    for s in ["xz", "yz", "x", "z", "xzz", ""] {
        assert_eq!(
            matcher_accepts(&cg_plain, s),
            matcher_accepts(&cg_shaped, s),
            "{s:?}"
        );
    }
}

/// A terminal priority is accepted where no terminal of another priority competes with it
/// (then it cannot decide anything, in Lark's lexers or formwork's).
#[test]
fn priorities_that_cannot_matter_are_accepted() {
    let g = Checked::new("start: (A | B \",\")+\nA.2: /[0-9]+/\nB.-3: /[a-z]+/\nC.9: \"x\"");
    g.check("priorities", &["1", "ab,12"], &["1,", "x"]);
    let g = Checked::new("start: A B\nA.1: \"a\"\nB.1: \"ab\"");
    g.check("equal priorities", &["aab"], &["ab"]);
}

/// Formatting (line breaks before `|`, comments of both kinds, blank lines, indentation,
/// line breaks inside brackets) does not change the grammar.
#[test]
fn formatting_does_not_change_the_grammar() {
    let compact = "start: item (\",\" item)*\nitem: WORD | \"<\" item \">\"\nWORD: /[a-z]+/";
    let spread = "// a list\n\nstart: item ( // first\n      \",\"\n      item)*   # more\n\nitem:\n    | WORD\n    | \"<\" item \">\"\n\n  WORD: /[a-z]+/\n";
    assert_eq!(parse(compact), parse(spread));
}

/// `%json` schemas compile with the options given; the default is compact JSON.
#[test]
fn json_uses_the_given_compile_options() {
    let text = r#"start: "x=" %json {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"], "additionalProperties": false}"#;
    let compact = compile(&parse(text));
    assert!(matcher_accepts(&compact, "x={\"a\":1}"));
    assert!(!matcher_accepts(&compact, "x={ \"a\": 1 }"));
    let opts = CompileOptions {
        whitespace: Whitespace::Flexible { max_run: 2 },
        ..Default::default()
    };
    let flexible = compile(&lark::parse_with(text, &opts).unwrap().grammar);
    assert!(matcher_accepts(&flexible, "x={ \"a\": 1 }"));
    // A schema the compiler refuses is an error at the `%json`, with the schema's pointer.
    let e = lark::parse("start: \"a\"\n  | %json {\"$ref\": \"https://example.com/a.json\"}")
        .unwrap_err();
    assert!(matches!(e, LarkError::Schema { .. }), "{e}");
    let at = e.location().unwrap();
    assert_eq!((at.line, at.column), (2, 5), "{e}");
}

/// Error messages are pinned, caret and all.
#[test]
fn error_messages() {
    let cases: &[(&str, &str)] = &[
        ("", "grammar has no `start` rule (the start rule)"),
        ("expr: \"1\"", "grammar has no `start` rule (the start rule)"),
        (
            "start: value\nvalue: \"a\" ws2\n",
            "`ws2` is used but never defined at 2:12\n    value: \"a\" ws2\n               ^",
        ),
        (
            "start: \"abc",
            "unterminated string literal at 1:8\n    start: \"abc\n           ^",
        ),
        (
            "start: /ab",
            "unterminated regex literal at 1:8\n    start: /ab\n           ^",
        ),
        (
            "start: \"a\\x4g\"",
            "invalid escape sequence `\\x4g` at 1:10\n    start: \"a\\x4g\"\n             ^",
        ),
        (
            "start: \"a\" ~ 3..1",
            "invalid repetition: the minimum 3 exceeds the maximum 1 at 1:12\n    start: \"a\" ~ 3..1\n               ^",
        ),
        (
            "start = \"a\"",
            "expected `:` after the name `start` at 1:7\n    start = \"a\"\n          ^",
        ),
        (
            "start: a\na: \"x\"\na: \"y\"",
            "`a` is defined twice (first on line 2) at 3:1\n    a: \"y\"\n    ^",
        ),
        (
            "start: (\"a\" | \"b\"",
            "unclosed `(` at 1:8\n    start: (\"a\" | \"b\"\n           ^",
        ),
        (
            "start: \"a\")",
            "unexpected character `)` at 1:11\n    start: \"a\")\n              ^",
        ),
        (
            "start: \"a\"**",
            "unexpected character `*` at 1:12\n    start: \"a\"**\n               ^",
        ),
        (
            "start: \"z\"..\"a\"",
            "invalid character range: `z` comes after `a` at 1:8\n    start: \"z\"..\"a\"\n           ^",
        ),
        (
            "start: \"ab\"..\"z\"",
            "invalid character range: both ends must be one character at 1:8\n    start: \"ab\"..\"z\"\n           ^",
        ),
        (
            "start: Word",
            "name `Word` mixes upper and lower case: terminals are UPPERCASE, rules lowercase at 1:8\n    start: Word\n           ^",
        ),
        (
            "start: A\nA: \"x\" a\na: \"y\"",
            "terminal `A` uses rule `a`: terminals may only use terminals at 2:8\n    A: \"x\" a\n           ^",
        ),
        (
            "start: A\nA: \"x\" B\nB: A",
            "terminal `A` refers to itself: terminals cannot be recursive at 3:4\n    B: A\n       ^",
        ),
        (
            "start: A B \"b\"\nA.2: /[a-z]+/\nB: \"if\"",
            "terminal priority of `A` cannot be honoured: it competes with B (a text of one is a prefix of a text of the other), and formwork's lexer follows both, longest match first at 2:2\n    A.2: /[a-z]+/\n     ^",
        ),
        (
            "start: A \"b\"\nA.-1: /[a-z]+/",
            "terminal priority of `A` cannot be honoured: it competes with \"b\" (a text of one is a prefix of a text of the other), and formwork's lexer follows both, longest match first at 2:2\n    A.-1: /[a-z]+/\n     ^",
        ),
        (
            "start: A\nA.1: \"x\"\nB.2: \"x\"\n%ignore B",
            "terminal priority of `A` cannot be honoured: `B` matches the same texts with priority 2 at 2:2\n    A.1: \"x\"\n     ^",
        ),
        (
            "start: /a(?=b)/",
            "invalid regex: look-around, including look-ahead and look-behind, is not supported at 1:10\n    start: /a(?=b)/\n             ^",
        ),
        (
            "start: /^ab$/",
            "unsupported: anchor or boundary assertion `^` in a regex: a terminal is matched whole and longest-first at 1:9\n    start: /^ab$/\n            ^",
        ),
        (
            "start: /a\\b/",
            "unsupported: anchor or boundary assertion `\\b` in a regex: a terminal is matched whole and longest-first at 1:10\n    start: /a\\b/\n             ^",
        ),
        (
            "start: /a+?b/",
            "unsupported: lazy quantifier `a+?` in a regex: a terminal is matched whole and longest-first at 1:9\n    start: /a+?b/\n            ^",
        ),
        (
            "start: /a(b/",
            "invalid regex: unclosed group at 1:10\n    start: /a(b/\n             ^",
        ),
        (
            "start: /[^\\s\\S]/",
            "`/[^\\s\\S]/` matches no string at all at 1:8\n    start: /[^\\s\\S]/\n           ^",
        ),
        (
            "start: NUMBER\n%import common.NUMBR -> NUMBER",
            "`common` has no terminal `NUMBR` at 2:16\n    %import common.NUMBR -> NUMBER\n                   ^",
        ),
        (
            "%import python.NAME\nstart: NAME",
            "unsupported: `%import python.NAME`: only the built-in `common` terminals can be imported at 1:9\n    %import python.NAME\n            ^",
        ),
        (
            "start: x\n%declare x",
            "unsupported: directive `%declare` (supported: %import common, %ignore, %json) at 2:1\n    %declare x\n    ^",
        ),
        (
            "start: <|eot|>",
            "unsupported: special tokens (`<...>`): formwork grammars are over text at 1:8\n    start: <|eot|>\n           ^",
        ),
        (
            "start{x}: x",
            "unsupported: templates (`name{params}`) at 1:6\n    start{x}: x\n         ^",
        ),
        (
            "start[lazy]: /.*/",
            "unsupported: llguidance lexeme options (`name[...]`): capture, lazy, stop, max_tokens and temperature change decoding, not the language at 1:6\n    start[lazy]: /.*/\n         ^",
        ),
        (
            "start: A\nA: %json {}",
            "unsupported: `%json` inside a terminal: a schema is not a regular language at 2:4\n    A: %json {}\n       ^",
        ),
        (
            "start: %json {\"type\": [1,}",
            "invalid JSON after %json: expected value at 1:26\n    start: %json {\"type\": [1,}\n                             ^",
        ),
        (
            "start: \"a\" start",
            "rule `start` derives no finite string at 1:1\n    start: \"a\" start\n    ^",
        ),
        (
            "start: \"a\"\n%ignore /[^\\s\\S]/",
            "%ignore matches no string at all at 2:1\n    %ignore /[^\\s\\S]/\n    ^",
        ),
        (
            "\tstart: \"a\" | ]",
            "unexpected character `]` at 1:15\n    \tstart: \"a\" | ]\n    \t             ^",
        ),
    ];
    for (text, want) in cases {
        let e = lark::parse(text).expect_err(text);
        assert_eq!(e.to_string(), *want, "for {text:?}");
    }
}

#[test]
fn deep_nesting_is_an_error_not_a_stack_overflow() {
    let text = format!("start: {}\"a\"{}", "(".repeat(100_000), ")".repeat(100_000));
    assert!(matches!(lark::parse(&text), Err(LarkError::TooDeep { .. })));
    let text = format!("start: {}\"a\"{}", "[".repeat(120), "]".repeat(120));
    parse(&text);
}

/// A million-fold repetition is O(log n) rules, not a million copies, with or without
/// `%ignore` between the repetitions.
#[test]
fn counted_repetition_stays_small() {
    let g = parse("start: \"ab\" ~ 1000000..2000000");
    assert!(g.size() < 400, "{}", g.size());
    let g = parse("start: \"ab\"{1000000}\n%ignore \" \"");
    assert!(g.size() < 400, "{}", g.size());
}

/// Mutated corpus grammars: a few random edits of real grammar text.
fn mutated_grammar() -> impl Strategy<Value = String> {
    let texts: Vec<String> = corpus().into_values().map(|(t, _)| t).collect();
    let edit = (
        any::<prop::sample::Index>(),
        0u8..3,
        "[\\[\\]()\"\\\\|*+?{},0-9a-zA-Z:=#/<.~%\n _-]",
    );
    (
        prop::sample::select(texts),
        prop::collection::vec(edit, 1..6),
    )
        .prop_map(|(text, edits)| {
            let mut chars: Vec<char> = text.chars().collect();
            for (at, kind, s) in edits {
                let i = at.index(chars.len() + 1);
                let c = s.chars().next().unwrap_or(' ');
                match kind {
                    0 if i < chars.len() => {
                        chars.remove(i);
                    }
                    1 => chars.insert(i, c),
                    _ if i < chars.len() => chars[i] = c,
                    _ => {}
                }
            }
            chars.into_iter().collect()
        })
}

fn check_no_panic(text: &str) -> Result<(), TestCaseError> {
    match lark::parse(text) {
        Ok(g) => prop_assert!(!g.rules().is_empty()),
        Err(e) => {
            prop_assert!(!e.to_string().is_empty());
            if let Some(at) = e.location() {
                prop_assert!(at.line >= 1 && at.line <= text.split('\n').count());
                prop_assert!(at.column >= 1 && at.column <= at.line_text.chars().count() + 1);
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// The reader never panics on Lark-like noise, and error locations point into the text.
    #[test]
    fn no_panic_on_lark_like_text(text in "([a-zA-Z_]{1,3} ?: ?|[\\[\\]()\"\\\\|*+?{},0-9a-z:=#/<.~%\n \t-]){0,40}") {
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
