//! The plain-regex constraint: a [`Grammar`] whose language is exactly one regex.
//!
//! This module owns turning a user's regex (regex-syntax syntax, as in the `regex` crate) into
//! a one-lexeme grammar. The constraint is always anchored at both ends: the whole output must
//! match. Leading `^`/`\A` and trailing `$`/`\z` (at the top level, or at the ends of each
//! top-level alternative) are therefore redundant and dropped; any other look-around
//! assertion (`\b`, a `^` in the middle) has no meaning for a whole-output constraint and is
//! refused with its position rather than silently reinterpreted.
//!
//! Lexemes must not match the empty string (a greedy lexer cannot end an empty lexeme), so a
//! regex that matches the empty string becomes `root ::= "" | /r'/` where `r'` is a rewriting
//! of the regex that matches the same strings minus the empty one (rules in
//! `without_empty`).
//!
//! Costs: one regex parse and translation, plus a rewrite that is at most quadratic in the
//! length of a concatenation of nullable parts.

use regex_syntax::ast::{self, AssertionKind, Ast};
use regex_syntax::hir::{Hir, HirKind, Repetition};

use super::location::Location;
use super::{Grammar, GrammarBuilder, GrammarError, Symbol};

/// Why a regex could not be built: for a regex constraint ([`grammar_from_regex`]) or for the
/// lexeme of a JSON Schema keyword (the building blocks in
/// [`schema::regex`](crate::schema::regex), which re-exports this type).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RegexError {
    /// The regex, or the text a regex is built from (a `pattern`, a number), is malformed.
    #[error("invalid regex: {message} at {at}")]
    Invalid {
        /// What is wrong (for a regex constraint, what regex-syntax said).
        message: String,
        /// Where, in that text.
        at: Location,
    },
    /// The input is valid but uses something that cannot be turned into an exact regex.
    #[error("unsupported {feature}: {detail}")]
    Unsupported {
        /// The construct, e.g. `lookahead`, `format "idn-hostname"`.
        feature: String,
        /// Why, and what would work instead.
        detail: String,
    },
    /// A look-around assertion in a regex constraint other than a leading `^` or a trailing
    /// `$`: the constraint matches the whole output, so it has no meaning there.
    #[error("unsupported in a regex constraint: look-around assertion `{assertion}` at {at}")]
    LookAround {
        /// The assertion as written.
        assertion: String,
        /// Where, in the regex text.
        at: Location,
    },
    /// An exact regex exists but is bigger than a documented limit.
    #[error("{what} too large: {given} exceeds the limit {limit}")]
    TooLarge {
        /// What was too large, e.g. `maxLength`, `multipleOf enumeration`.
        what: String,
        /// The limit.
        limit: u64,
        /// The value given.
        given: u64,
    },
    /// The regex matches no string at all (e.g. an empty class), so nothing could be generated.
    #[error("regex matches no string at all")]
    MatchesNothing,
    /// The grammar IR rejected the result (an internal inconsistency).
    #[error(transparent)]
    Grammar(#[from] GrammarError),
}

impl RegexError {
    /// [`RegexError::Unsupported`].
    pub(crate) fn unsupported(feature: impl Into<String>, detail: impl Into<String>) -> Self {
        RegexError::Unsupported {
            feature: feature.into(),
            detail: detail.into(),
        }
    }

    /// [`RegexError::Invalid`] at byte `offset` of `text`.
    pub(crate) fn invalid(message: impl Into<String>, text: &str, offset: usize) -> Self {
        RegexError::Invalid {
            message: message.into(),
            at: Location::from_offset(text, offset),
        }
    }
}

/// A grammar accepting exactly the strings that `re` matches in full.
///
/// # Example
/// ```
/// let g = formwork_core::grammar::regex::grammar_from_regex(r"^[a-z]+@[a-z]+\.com$")?;
/// assert_eq!(g.lexemes().len(), 1);
/// assert!(!g.lexemes()[0].regex().contains('^'));
/// # Ok::<(), formwork_core::grammar::regex::RegexError>(())
/// ```
pub fn grammar_from_regex(re: &str) -> Result<Grammar, RegexError> {
    let invalid =
        |message: String, span: &ast::Span| RegexError::invalid(message, re, span.start.offset);
    let mut ast = ast::parse::Parser::new()
        .parse(re)
        .map_err(|e| invalid(e.kind().to_string(), e.span()))?;
    strip_outer_anchors(&mut ast);
    if let Some(a) = find_assertion(&ast) {
        return Err(RegexError::LookAround {
            assertion: re[a.span.start.offset..a.span.end.offset].to_string(),
            at: Location::from_offset(re, a.span.start.offset),
        });
    }
    let hir = regex_syntax::hir::translate::Translator::new()
        .translate(re, &ast)
        .map_err(|e| invalid(e.kind().to_string(), e.span()))?;
    if hir.properties().minimum_len().is_none() {
        return Err(RegexError::MatchesNothing);
    }
    let mut b = GrammarBuilder::new();
    let mut alternatives = Vec::new();
    if nullable(&hir) {
        alternatives.push(Vec::new());
    }
    if let Some(nonempty) = without_empty(&hir) {
        let lexeme = b.lexeme("regex", &nonempty.to_string());
        alternatives.push(vec![Symbol::Lexeme(lexeme)]);
    }
    let root = b.define("root", alternatives);
    Ok(b.build(root)?)
}

fn is_start_anchor(ast: &Ast) -> bool {
    matches!(ast, Ast::Assertion(a) if matches!(a.kind, AssertionKind::StartLine | AssertionKind::StartText))
}

fn is_end_anchor(ast: &Ast) -> bool {
    matches!(ast, Ast::Assertion(a) if matches!(a.kind, AssertionKind::EndLine | AssertionKind::EndText))
}

/// Replaces `^`/`\A` at the start and `$`/`\z` at the end of the regex (or of each top-level
/// alternative) by the empty regex: the constraint is anchored anyway.
fn strip_outer_anchors(ast: &mut Ast) {
    match ast {
        Ast::Alternation(alt) => alt.asts.iter_mut().for_each(strip_branch_anchors),
        _ => strip_branch_anchors(ast),
    }
}

fn strip_branch_anchors(ast: &mut Ast) {
    let empty = |a: &Ast| Ast::empty(*a.span());
    match ast {
        Ast::Concat(c) => {
            // Flags like `(?i)` may come before the `^`.
            if let Some(first) = c.asts.iter_mut().find(|a| !matches!(a, Ast::Flags(_))) {
                if is_start_anchor(first) {
                    *first = empty(first);
                }
            }
            if let Some(last) = c.asts.last_mut() {
                if is_end_anchor(last) {
                    *last = empty(last);
                }
            }
        }
        a if is_start_anchor(a) || is_end_anchor(a) => *a = empty(a),
        _ => {}
    }
}

/// The first look-around assertion left in `ast`, if any.
fn find_assertion(ast: &Ast) -> Option<&ast::Assertion> {
    match ast {
        Ast::Assertion(a) => Some(a),
        Ast::Repetition(r) => find_assertion(&r.ast),
        Ast::Group(g) => find_assertion(&g.ast),
        Ast::Alternation(a) => a.asts.iter().find_map(find_assertion),
        Ast::Concat(c) => c.asts.iter().find_map(find_assertion),
        _ => None,
    }
}

fn nullable(h: &Hir) -> bool {
    h.properties().minimum_len() == Some(0)
}

/// A regex for the strings of `h` except the empty string; `None` if there are none.
///
/// - a non-nullable regex is its own answer;
/// - `(a|b) \ ε = (a \ ε) | (b \ ε)`;
/// - for nullable `x`: `x rest \ ε = (x \ ε) rest | (rest \ ε)`;
/// - `x{m,n} \ ε = (x \ ε){1,n}` if `x` is nullable, else `x{max(m,1),n}`.
pub(crate) fn without_empty(h: &Hir) -> Option<Hir> {
    if !nullable(h) {
        return Some(h.clone());
    }
    match h.kind() {
        HirKind::Empty | HirKind::Look(_) => None,
        HirKind::Literal(_) | HirKind::Class(_) => Some(h.clone()),
        HirKind::Capture(c) => without_empty(&c.sub),
        HirKind::Repetition(r) => {
            if r.max == Some(0) {
                return None;
            }
            let sub = if nullable(&r.sub) {
                Box::new(without_empty(&r.sub)?)
            } else {
                r.sub.clone()
            };
            Some(Hir::repetition(Repetition {
                min: 1,
                max: r.max,
                greedy: r.greedy,
                sub,
            }))
        }
        HirKind::Concat(xs) => concat_without_empty(xs),
        HirKind::Alternation(xs) => {
            let alts: Vec<Hir> = xs.iter().filter_map(without_empty).collect();
            (!alts.is_empty()).then(|| Hir::alternation(alts))
        }
    }
}

/// `without_empty` of the concatenation of `xs`, all of which are nullable.
fn concat_without_empty(xs: &[Hir]) -> Option<Hir> {
    let (first, rest) = xs.split_first()?;
    let mut alts = Vec::new();
    if let Some(f) = without_empty(first) {
        alts.push(Hir::concat(
            std::iter::once(f).chain(rest.iter().cloned()).collect(),
        ));
    }
    alts.extend(concat_without_empty(rest));
    (!alts.is_empty()).then(|| Hir::alternation(alts))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use regex_automata::meta::Regex;

    fn lexeme_regex(re: &str) -> String {
        grammar_from_regex(re).unwrap().lexemes()[0]
            .regex()
            .to_string()
    }

    #[test]
    fn anchors_at_the_ends_are_dropped() {
        // regex-syntax prints a literal as a non-capturing group.
        assert_eq!(lexeme_regex("^abc$"), "(?:abc)");
        assert_eq!(lexeme_regex(r"\Aabc\z"), "(?:abc)");
        assert!(!lexeme_regex("(?i)^ab$").contains('^'));
        let g = grammar_from_regex("^a$|^b$").unwrap();
        assert_eq!(g.lexemes().len(), 1);
    }

    #[test]
    fn inner_assertions_are_refused_with_position() {
        let e = grammar_from_regex(r"ab\bc").unwrap_err();
        assert_eq!(
            e.to_string(),
            "unsupported in a regex constraint: look-around assertion `\\b` at 1:3\n    ab\\bc\n      ^"
        );
    }

    #[test]
    fn invalid_regex_has_position() {
        let e = grammar_from_regex("ab(c").unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid regex: unclosed group at 1:3\n    ab(c\n      ^"
        );
        let e = grammar_from_regex(r"a{3,1}").unwrap_err();
        assert!(
            matches!(e, RegexError::Invalid { ref at, .. } if at.column == 2),
            "{e}"
        );
    }

    #[test]
    fn nullable_regex_gets_an_empty_alternative() {
        let g = grammar_from_regex("a*").unwrap();
        let root = g.rule(g.start());
        assert_eq!(root.alternatives.len(), 2);
        assert!(root.alternatives[0].is_empty());
        assert_eq!(g.lexemes()[0].regex(), "a+");
        let g = grammar_from_regex("").unwrap();
        assert!(g.lexemes().is_empty());
        assert_eq!(g.rule(g.start()).alternatives, vec![Vec::new()]);
    }

    #[test]
    fn matches_nothing_is_an_error() {
        assert_eq!(
            grammar_from_regex(r"a[^\s\S]").unwrap_err(),
            RegexError::MatchesNothing
        );
    }

    fn full_match(re: &str, s: &str) -> bool {
        Regex::new(&format!("^(?:{re})$")).unwrap().is_match(s)
    }

    proptest! {
        /// `without_empty` removes exactly the empty string: checked against regex-automata
        /// on random short strings over the regexes' alphabet.
        #[test]
        fn without_empty_is_exact(
            re in prop::sample::select(vec![
                "a*", "(a|b)*c?", "a?b?", "(a?b?)*", "(ab|)*(c|)", "a{0,3}b*", "((a*)|b){2,4}",
                "(|a)(|b)(|c)", "(a*b*){0,2}", "x|a*",
            ]),
            s in "[abcx]{0,6}",
        ) {
            let hir = regex_syntax::parse(re).unwrap();
            let ne = without_empty(&hir).unwrap().to_string();
            prop_assert_eq!(full_match(&ne, &s), !s.is_empty() && full_match(re, &s), "{} -> {}", re, ne);
            prop_assert!(!full_match(&ne, ""));
        }
    }
}
