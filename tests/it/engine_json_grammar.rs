//! A JSON grammar built with the `GrammarBuilder` (objects, arrays, strings with escapes,
//! numbers, literals, optional whitespace), and the same grammar in llguidance's Lark syntax.
//! Shared by the JSON tests and by `benches/mask.rs` (included there with `#[path]`).

use formwork::grammar::{Grammar, GrammarBuilder, Symbol};

/// JSON string lexeme: quotes around unescaped characters (no control characters) or escapes.
pub const STRING_RE: &str = r#""(?:[^"\\\x00-\x1F]|\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4}))*""#;
/// JSON number lexeme.
pub const NUMBER_RE: &str = r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?";
/// Whitespace lexeme.
pub const WS_RE: &str = r"[ \t\n\r]+";

/// The JSON grammar: `json ::= ws? value ws?`.
pub fn json_grammar() -> Grammar {
    let mut b = GrammarBuilder::new();
    let string = Symbol::Lexeme(b.lexeme("string", STRING_RE));
    let number = Symbol::Lexeme(b.lexeme("number", NUMBER_RE));
    let ws = Symbol::Lexeme(b.lexeme("ws", WS_RE));
    let mut lit = |s: &str| Symbol::Lexeme(b.literal(s));
    let (lbrace, rbrace, lbrack, rbrack) = (lit("{"), lit("}"), lit("["), lit("]"));
    let (comma, colon) = (lit(","), lit(":"));
    let (t, f, n) = (lit("true"), lit("false"), lit("null"));
    let o = Symbol::Rule(b.define("ws?", vec![vec![], vec![ws]]));
    let value = Symbol::Rule(b.rule_ref("value"));
    let object = Symbol::Rule(b.rule_ref("object"));
    let array = Symbol::Rule(b.rule_ref("array"));
    let members = Symbol::Rule(b.rule_ref("members"));
    let elements = Symbol::Rule(b.rule_ref("elements"));
    let pair = Symbol::Rule(b.define("pair", vec![vec![string, o, colon, o, value]]));
    b.define(
        "value",
        vec![
            vec![object],
            vec![array],
            vec![string],
            vec![number],
            vec![t],
            vec![f],
            vec![n],
        ],
    );
    b.define(
        "object",
        vec![vec![lbrace, o, rbrace], vec![lbrace, o, members, o, rbrace]],
    );
    b.define(
        "members",
        vec![vec![pair], vec![members, o, comma, o, pair]],
    );
    b.define(
        "array",
        vec![
            vec![lbrack, o, rbrack],
            vec![lbrack, o, elements, o, rbrack],
        ],
    );
    b.define(
        "elements",
        vec![vec![value], vec![elements, o, comma, o, value]],
    );
    let json = b.define("json", vec![vec![o, value, o]]);
    b.build(json).expect("the JSON grammar is well formed")
}

/// The same grammar in Lark syntax, for llguidance (benches only).
#[allow(dead_code)]
pub fn json_lark() -> String {
    format!(
        r#"start: WS? value WS?
value: object | array | STRING | NUMBER | "true" | "false" | "null"
object: "{{" WS? "}}" | "{{" WS? members WS? "}}"
members: pair | members WS? "," WS? pair
pair: STRING WS? ":" WS? value
array: "[" WS? "]" | "[" WS? elements WS? "]"
elements: value | elements WS? "," WS? value
STRING: /{}/
NUMBER: /{NUMBER_RE}/
WS: /{WS_RE}/
"#,
        // Lark delimits regexes with `/`.
        STRING_RE.replace('/', r"\/")
    )
}

/// A synthetic vocabulary of `n` JSON-flavoured tokens (plus the 256 single bytes and one
/// EOS), deterministic for a `seed`: structural fragments, keywords, escapes, and random
/// word-like strings with and without a leading space.
#[allow(dead_code)]
pub fn json_like_vocab(n: usize, seed: u64) -> formwork::toktrie::SyntheticVocab {
    use rand::{Rng, SeedableRng};
    let base: &[&str] = &[
        "{\"",
        "\"}",
        "\":",
        "\":\"",
        "\",\"",
        "\",",
        "\"]",
        "[\"",
        "[{",
        "}]",
        "},",
        "},{\"",
        "\": ",
        ", \"",
        "true",
        "false",
        "null",
        "tr",
        "ue",
        "fal",
        "se",
        "nu",
        "ll",
        " \"",
        "\\n",
        "\\\"",
        "\\u",
        "\\\\",
        "00",
        ".5",
        "e+",
        "-1",
        "  ",
        "\n",
        "\n  ",
        "{}",
        "[]",
        "\"\"",
        "0.",
        "12",
        "name",
        "id",
        "type",
        "value",
        "\"name\":",
        " the",
        " of",
    ];
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut seen = std::collections::HashSet::new();
    let mut toks: Vec<Vec<u8>> = Vec::new();
    for s in base {
        if seen.insert(s.as_bytes().to_vec()) {
            toks.push(s.as_bytes().to_vec());
        }
    }
    const CHARS: &[u8] =
        b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.:,\"{}[] ";
    let mut attempts = 0;
    while toks.len() < n && attempts < n * 20 {
        attempts += 1;
        let len = rng.random_range(2..=9);
        let mut t = Vec::with_capacity(len);
        if rng.random_bool(0.4) {
            t.push(b' ');
        }
        let letters_only = rng.random_bool(0.7);
        while t.len() < len {
            let c = if letters_only {
                b'a' + rng.random_range(0..26u8)
            } else {
                CHARS[rng.random_range(0..CHARS.len())]
            };
            t.push(c);
        }
        if seen.insert(t.clone()) {
            toks.push(t);
        }
    }
    formwork::toktrie::SyntheticVocab::new(toks).with_eos("<|eos|>")
}
