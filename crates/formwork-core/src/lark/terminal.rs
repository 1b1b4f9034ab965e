//! The leaves of terminals (string literals, character ranges `"a".."z"`, regex literals)
//! → regexes, as [`Hir`]s.
//!
//! Owns the regex dialect: a Lark regex literal `/body/flags` is read with regex-syntax (the
//! `regex` crate's syntax, which llguidance also uses; Python's `re`, Lark's own, differs in
//! corners such as possessive quantifiers, which are then a syntax error with its position).
//! Flags `i`, `s`, `m`, `x` map to the same regex-syntax flags and `u` is the default. Refused,
//! with the position in the grammar text: look-around assertions and anchors (`^`, `$`, `\b`:
//! a terminal is matched as a whole, so they could only be misread) and lazy quantifiers
//! (`*?`, `(?U)`: a lexeme is a set of strings matched longest-first, so "as few as possible"
//! cannot be honoured).
//!
//! Combining leaves into a terminal's regex (sequences, alternatives, operators, other
//! terminals) is `lower`'s, which knows the definitions. Costs: one regex parse per regex
//! literal.

use regex_syntax::ast::{self, Ast};
use regex_syntax::hir::{self, Capture, Class, ClassUnicode, ClassUnicodeRange, Hir, HirKind};

use super::error::LarkError;
use crate::grammar::gbnf::Location;

/// `h` with a group around every repetition that is itself repeated, so its `Display` (a
/// lexeme's regex text, which names it and decides which lexemes are shared) parses back to
/// the same language: regex-syntax prints `(?:[0-9]+)?` as `[0-9]+?`, a lazy `+`. The group is
/// a capture because the HIR has no other group; the lexer ignores captures.
pub(super) fn printable(h: &Hir) -> Hir {
    match h.kind() {
        HirKind::Repetition(r) => {
            let sub = printable(&r.sub);
            let sub = match sub.kind() {
                HirKind::Repetition(_) => Hir::capture(Capture {
                    index: 1,
                    name: None,
                    sub: Box::new(sub),
                }),
                _ => sub,
            };
            Hir::repetition(hir::Repetition {
                min: r.min,
                max: r.max,
                greedy: r.greedy,
                sub: Box::new(sub),
            })
        }
        HirKind::Concat(xs) => Hir::concat(xs.iter().map(printable).collect()),
        HirKind::Alternation(xs) => Hir::alternation(xs.iter().map(printable).collect()),
        HirKind::Capture(c) => Hir::capture(Capture {
            index: c.index,
            name: c.name.clone(),
            sub: Box::new(printable(&c.sub)),
        }),
        HirKind::Empty | HirKind::Literal(_) | HirKind::Class(_) | HirKind::Look(_) => h.clone(),
    }
}

/// The regex of a string literal, case-insensitive if `ci` (simple case folding, as
/// regex-syntax's `(?i)`).
pub(super) fn literal_hir(s: &str, ci: bool) -> Hir {
    if !ci {
        return Hir::literal(s.as_bytes());
    }
    let parts = s
        .chars()
        .map(|c| {
            let mut class = ClassUnicode::new([ClassUnicodeRange::new(c, c)]);
            // Folding fails only without the Unicode case tables, which this crate enables.
            if class.try_case_fold_simple().is_err() {
                return Hir::literal(c.encode_utf8(&mut [0; 4]).as_bytes());
            }
            Hir::class(Class::Unicode(class))
        })
        .collect();
    Hir::concat(parts)
}

/// One character from `lo` to `hi` (`"a".."z"`).
pub(super) fn char_range(lo: char, hi: char) -> Hir {
    Hir::class(Class::Unicode(ClassUnicode::new([ClassUnicodeRange::new(
        lo, hi,
    )])))
}

/// The regex of `/body/flags`, `body` starting at byte `body_at` of `text`.
pub(super) fn regex_hir(
    text: &str,
    body: &str,
    body_at: usize,
    flags: &str,
) -> Result<Hir, LarkError> {
    let at = |offset: usize| Location::from_offset(text, body_at + offset);
    let ast = ast::parse::ParserBuilder::new()
        .ignore_whitespace(flags.contains('x'))
        .build()
        .parse(body)
        .map_err(|e| LarkError::InvalidRegex {
            message: e.kind().to_string(),
            at: at(e.span().start.offset),
        })?;
    if let Some((what, span)) = refused(&ast) {
        return Err(LarkError::Unsupported {
            what: format!(
                "{what} `{}` in a regex: a terminal is matched whole and longest-first",
                &body[span.start.offset..span.end.offset]
            ),
            at: at(span.start.offset),
        });
    }
    hir::translate::TranslatorBuilder::new()
        .case_insensitive(flags.contains('i'))
        .dot_matches_new_line(flags.contains('s'))
        .multi_line(flags.contains('m'))
        .build()
        .translate(body, &ast)
        .map_err(|e| LarkError::InvalidRegex {
            message: e.kind().to_string(),
            at: at(e.span().start.offset),
        })
}

/// The first construct of `ast` that a terminal cannot honour: a look-around assertion or
/// anchor, a lazy quantifier, or the `U` (swap greed) flag.
fn refused(ast: &Ast) -> Option<(&'static str, ast::Span)> {
    match ast {
        Ast::Assertion(a) => Some(("anchor or boundary assertion", a.span)),
        Ast::Repetition(r) if !r.greedy => Some(("lazy quantifier", r.span)),
        Ast::Repetition(r) => refused(&r.ast),
        Ast::Group(g) => {
            if let ast::GroupKind::NonCapturing(flags) = &g.kind {
                if swaps_greed(flags) {
                    return Some(("swap-greed flag", g.span));
                }
            }
            refused(&g.ast)
        }
        Ast::Flags(f) if swaps_greed(&f.flags) => Some(("swap-greed flag", f.span)),
        Ast::Alternation(a) => a.asts.iter().find_map(refused),
        Ast::Concat(c) => c.asts.iter().find_map(refused),
        _ => None,
    }
}

fn swaps_greed(flags: &ast::Flags) -> bool {
    flags.flag_state(ast::Flag::SwapGreed) == Some(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// regex-syntax prints a repeated repetition without a group (`(?:a+)?` as `a+?`, a lazy
    /// quantifier): lexeme texts must parse back to what the lexer runs.
    #[test]
    fn printable_regexes_parse_back_to_the_same_language() {
        for re in [
            "(?:[0-9]+)?",
            "(?:a*)+b",
            "x(?:(?:ab){2})*",
            "(?:(?:a|b)+){3}",
        ] {
            let hir = regex_syntax::parse(re).unwrap();
            let text = printable(&hir).to_string();
            let back = regex_syntax::parse(&text).unwrap();
            let matcher = |h: &Hir| {
                regex_automata::meta::Regex::builder()
                    .build_from_hir(h)
                    .unwrap()
            };
            let (a, b) = (matcher(&hir), matcher(&back));
            for s in [
                "",
                "1",
                "12",
                "b",
                "aab",
                "x",
                "xab",
                "xabab",
                "xababab",
                "xabababab",
                "aaa",
                "ab",
                "abab",
            ] {
                let whole = |m: &regex_automata::meta::Regex| {
                    m.find(s)
                        .is_some_and(|f| f.start() == 0 && f.end() == s.len())
                };
                assert_eq!(whole(&a), whole(&b), "{re} printed {text}, on {s:?}");
            }
        }
    }
}
