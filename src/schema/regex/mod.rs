//! Regex building blocks for the JSON Schema compiler: each function returns one lexeme's regex.
//!
//! Every function here returns a regex string in `regex-syntax` syntax that must match a *whole*
//! lexeme (anchoring is implicit: no `^`/`$`), ready for
//! [`GrammarBuilder::lexeme`](crate::grammar::GrammarBuilder::lexeme). The regexes describe the
//! JSON *text* of a value, so a string regex includes its quotes and escapes.
//!
//! This module owns:
//! - numbers ([`integer_range`], [`number_range`], [`multiple_of`]): exact digit-level
//!   constructions over decimal strings, no floating point;
//! - strings ([`json_string`], [`property_name`]): the map from a regex over the *decoded* value
//!   to a regex over its JSON encoding, with `minLength`/`maxLength` in code points;
//! - formats ([`format()`]): the `format` keyword as a regex over the decoded value;
//! - ECMA-262 patterns ([`ecma_to_regex`]): JSON Schema's `pattern` dialect translated to
//!   `regex-syntax` syntax.
//!
//! It does not own schema traversal, `$ref`s or the grammar: the compiler in `schema` calls in
//! here with already-extracted keyword values.
//!
//! # Invariants
//! A returned regex parses with `regex-syntax` (Unicode and UTF-8 mode, the defaults) and
//! describes exactly the documented language, or, where an exact construction is impossible or too
//! big, the function returns an error instead of a looser regex: [`RegexError::Unsupported`]
//! (naming the construct), [`RegexError::Invalid`] (bad input) or [`RegexError::TooLarge`]
//! (a documented limit). The one documented narrowing is in the numbers: a bounded number only
//! admits plain decimal forms (no exponent), see [`number_range`].
//!
//! # Costs
//! All constructions are linear in the size of their inputs (digits of a bound, size of a
//! pattern), except [`multiple_of`]'s enumeration, capped by [`MAX_ENUMERATED_MULTIPLES`], and
//! counted string lengths, capped by [`MAX_COUNTED_LENGTH`].

mod ecma;
mod formats;
mod numbers;
mod strings;

pub use ecma::ecma_to_regex;
pub use formats::{format, format_decoded};
pub use numbers::{
    integer_range, multiple_of, number_range, Bound, Decimal, MAX_ENUMERATED_MULTIPLES,
};
pub use strings::{
    json_char, json_string, json_string_decoded, property_name, MAX_COUNTED_LENGTH,
    MAX_EXPANDED_SIZE,
};

/// A regex that matches nothing: what an empty range (e.g. `minimum > maximum`) compiles to.
///
/// The compiler may compare a result with this constant to turn the schema into `false`.
pub const NOTHING: &str = r"[^\x00-\x{10FFFF}]";

/// Why a regex could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RegexError {
    /// The input is valid but uses something that cannot be turned into an exact regex.
    #[error("unsupported {feature}: {detail}")]
    Unsupported {
        /// The construct, e.g. `lookahead`, `format "idn-hostname"`.
        feature: String,
        /// Why, and what would work instead.
        detail: String,
    },
    /// The input is malformed (a pattern that does not parse, a non-finite bound, ...).
    #[error("invalid input at offset {offset}: {message}")]
    Invalid {
        /// What is wrong.
        message: String,
        /// Byte offset into the input where the problem was found (0 when not applicable).
        offset: usize,
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
}

impl RegexError {
    fn unsupported(feature: impl Into<String>, detail: impl Into<String>) -> Self {
        RegexError::Unsupported {
            feature: feature.into(),
            detail: detail.into(),
        }
    }

    fn invalid(message: impl Into<String>, offset: usize) -> Self {
        RegexError::Invalid {
            message: message.into(),
            offset,
        }
    }
}

/// Alternation of regex pieces; `None` is the empty language, `""` the empty string.
///
/// Returns `None` when every piece is `None`. Pieces are grouped so the result can be
/// concatenated safely.
fn alt<I: IntoIterator<Item = Option<String>>>(pieces: I) -> Option<String> {
    let mut parts: Vec<String> = Vec::new();
    let mut has_empty = false;
    for p in pieces.into_iter().flatten() {
        if p.is_empty() {
            has_empty = true;
        } else if !parts.contains(&p) {
            parts.push(p);
        }
    }
    match (parts.len(), has_empty) {
        (0, false) => None,
        (0, true) => Some(String::new()),
        (1, false) => Some(parts.pop().unwrap_or_default()),
        (_, false) => Some(format!("(?:{})", parts.join("|"))),
        (_, true) => Some(format!("(?:{})?", parts.join("|"))),
    }
}

/// Concatenation where `None` (empty language) absorbs.
fn cat(a: Option<String>, b: Option<String>) -> Option<String> {
    Some(a? + &b?)
}

#[cfg(test)]
pub(crate) mod testutil {
    //! Shared test helpers: compile a returned regex as an anchored full match.
    use regex_automata::meta::Regex;

    /// Compiles `re` anchored at both ends.
    pub fn full(re: &str) -> Regex {
        Regex::new(&format!("^(?:{re})$"))
            .unwrap_or_else(|e| panic!("regex does not compile: {e}\n{re}"))
    }

    /// Asserts `re` fully matches every string of `yes` and none of `no`.
    pub fn check(re: &str, yes: &[&str], no: &[&str]) {
        let r = full(re);
        for y in yes {
            assert!(r.is_match(y), "{y:?} should match {re}");
        }
        for n in no {
            assert!(!r.is_match(n), "{n:?} should not match {re}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testutil::full;
    use super::*;

    #[test]
    fn nothing_matches_nothing() {
        let r = full(NOTHING);
        for s in ["", "a", "0", "\u{10FFFF}"] {
            assert!(!r.is_match(s));
        }
    }

    #[test]
    fn alt_handles_empty_and_none() {
        assert_eq!(alt([None, None]), None);
        assert_eq!(alt([Some(String::new())]), Some(String::new()));
        assert_eq!(
            alt([Some("a".into()), Some(String::new())]),
            Some("(?:a)?".into())
        );
        assert_eq!(cat(Some("a".into()), None), None);
    }
}
