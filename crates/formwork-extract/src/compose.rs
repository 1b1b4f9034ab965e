//! Grammar composition for extraction: one compiled grammar copied into a larger one.
//!
//! Owns the constructions the extraction CLI adds around a compiled schema: the refusal branch
//! (`{"refusal": "<reason>"}` as an alternative at the top), tool calls (`{"name": <const>,
//! "arguments": <that tool's parameters>}`, one alternative per tool, plus free text for
//! `--tool-choice auto`), and grounded fields (placeholder lexemes replaced by the rules of the
//! document's quotes that satisfy each field's own keywords, see [`grounded`](super::grounded)).
//! Works on the public grammar IR only: [`import`] copies rules and lexemes into a
//! [`GrammarBuilder`] under a name prefix, mapping chosen lexemes to other symbols (the
//! engine's, re-exported). Cost: linear in the size of the imported grammars.
//!
//! Output is compact JSON (no whitespace), matching the schema compiler's default.
//!
//! May use: nothing else in the crate.

use formwork_core::grammar::{GrammarBuilder, RuleId, Symbol};

/// The regex of a JSON string (RFC 8259: no raw control characters, standard escapes).
pub const JSON_STRING: &str = r#""(?:[^"\\\x00-\x1F]|\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4}))*""#;

/// The regex of a plain-text answer under `--tool-choice auto`: anything not starting with `{`
/// (which begins a call) or whitespace (so the choice is made by the first byte).
pub const PLAIN_TEXT: &str = r"[^{\s][\s\S]*";

/// Copies a grammar into a builder under a name prefix (the engine's own composition).
pub use formwork_core::grammar::import;

/// The rule of `{"refusal":"<reason>"}` (a JSON string reason, compact).
pub fn refusal_rule(b: &mut GrammarBuilder) -> RuleId {
    let open = b.literal("{\"refusal\":");
    let reason = b.lexeme("string", JSON_STRING);
    let close = b.literal("}");
    b.fresh_rule(
        "refusal",
        vec![vec![
            Symbol::Lexeme(open),
            Symbol::Lexeme(reason),
            Symbol::Lexeme(close),
        ]],
    )
}

/// The reason of a refusal object `{"refusal": "<reason>"}` (that key alone, a string), the
/// shape [`refusal_rule`] generates; `None` for any other value.
pub fn refusal_reason(v: &serde_json::Value) -> Option<&str> {
    let m = v.as_object().filter(|m| m.len() == 1)?;
    m.get("refusal")?.as_str()
}

/// The rule of one tool call: `{"name":"<name>","arguments":<args>}` where `args` is the
/// start rule of the (already imported) parameters grammar.
pub fn call_rule(b: &mut GrammarBuilder, name: &str, args: RuleId) -> RuleId {
    let quoted = serde_json::to_string(name).unwrap_or_else(|_| format!("\"{name}\""));
    let head = b.literal(&format!("{{\"name\":{quoted},\"arguments\":"));
    let close = b.literal("}");
    b.fresh_rule(
        "call",
        vec![vec![
            Symbol::Lexeme(head),
            Symbol::Rule(args),
            Symbol::Lexeme(close),
        ]],
    )
}

/// The rule of a plain-text answer (see [`PLAIN_TEXT`]).
pub fn text_rule(b: &mut GrammarBuilder) -> RuleId {
    let t = b.lexeme("text", PLAIN_TEXT);
    b.fresh_rule("text", vec![vec![Symbol::Lexeme(t)]])
}

#[cfg(test)]
mod tests {
    use super::*;
    use formwork_core::grammar::Grammar;

    fn tiny(word: &str) -> Grammar {
        let mut b = GrammarBuilder::new();
        let w = b.literal(word);
        let inner = b.define("inner", vec![vec![Symbol::Lexeme(w)]]);
        let s = b.define("start", vec![vec![Symbol::Rule(inner)], vec![]]);
        b.build(s).unwrap()
    }

    #[test]
    fn import_keeps_structure_and_prefixes_names() {
        let g = tiny("yes");
        let mut b = GrammarBuilder::new();
        let a = import(&mut b, &g, "a/", |_, _| None);
        let c = import(&mut b, &g, "c/", |_, _| None);
        let top = b.define("top", vec![vec![Symbol::Rule(a), Symbol::Rule(c)]]);
        let out = b.build(top).unwrap();
        let text = out.to_string();
        assert!(text.contains("a/start ::= a/inner | \"\""), "{text}");
        assert!(text.contains("c/inner ::= /yes/"), "{text}");
        // The shared lexeme is not duplicated.
        assert_eq!(out.lexemes().len(), 1);
    }

    #[test]
    fn import_maps_lexemes_to_rules() {
        let g = tiny("PLACEHOLDER");
        let mut b = GrammarBuilder::new();
        let other = b.literal("other");
        let repl = b.define("repl", vec![vec![Symbol::Lexeme(other)]]);
        let s = import(&mut b, &g, "", |_, id| {
            (g.lexeme(id).regex() == "PLACEHOLDER").then_some(Symbol::Rule(repl))
        });
        let out = b.build(s).unwrap();
        assert!(!out.to_string().contains("PLACEHOLDER"), "{out}");
        assert!(out.to_string().contains("inner ::= repl"), "{out}");
    }

    #[test]
    fn fixed_regexes_parse() {
        for re in [JSON_STRING, PLAIN_TEXT] {
            regex_syntax::Parser::new().parse(re).unwrap();
        }
        let r = regex_automata::meta::Regex::new(&format!("^(?:{JSON_STRING})$")).unwrap();
        assert!(r.is_match(r#""a \"b\" \u00e9""#));
        assert!(!r.is_match("\"a\nb\""));
    }
}
