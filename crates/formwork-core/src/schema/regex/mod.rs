//! Regex building blocks for the JSON Schema compiler: each function returns one lexeme's regex.
//!
//! Every function here returns a regex string in `regex-syntax` syntax that must match a *whole*
//! lexeme (anchoring is implicit: no `^`/`$`), ready for
//! [`GrammarBuilder::lexeme`](crate::grammar::GrammarBuilder::lexeme). The regexes describe the
//! JSON *text* of a value, so a string regex includes its quotes and escapes.
//!
//! This module owns:
//! - numbers ([`integer_range`], [`number_range`], [`multiple_of`]): exact digit-level
//!   constructions over decimal strings ([`Decimal`], [`Bound`]), no floating point; for
//!   integer divisors whose regex explodes, [`multiple_of_automaton`] gives the digit automaton
//!   to emit as grammar rules;
//! - strings ([`json_string`], [`json_string_decoded`], [`property_name`], [`json_char`]): the
//!   map from a regex over the *decoded* value to a regex over its JSON encoding, with
//!   `minLength`/`maxLength` in code points; where the bounds cannot be narrowed into a
//!   pattern's regex, [`json_string_exact`] returns them as the lexeme's exception (the strings
//!   of other lengths, `lengths`), sized against [`MAX_PRODUCT_STATES`];
//! - formats ([`format()`], [`format_decoded`], [`is_known_format`], and
//!   [`json_string_format`] for a format with a pattern and length bounds);
//! - ECMA-262 patterns ([`ecma_to_regex`]): JSON Schema's `pattern` dialect translated to
//!   `regex-syntax` syntax.
//!
//! It does not own schema traversal, `$ref`s or the grammar: the compiler in `schema` calls in
//! here with already-extracted keyword values. Every part returns the same
//! error ([`RegexError`], the grammar's own); the pieces every builder uses ([`NOTHING`],
//! alternation, concatenation, the final parse check) are in `pieces`.
//!
//! Files: `pieces` → `ecma` → `numbers` → `lengths` → `strings` → `formats`.
//!
//! # Usage pattern (for the compiler)
//! ```
//! use formwork_core::schema::regex::{self as rx, Bound, Decimal};
//! // {"type": "integer", "minimum": 1, "maximum": 12}
//! let month = rx::integer_range(Some(1), Some(12))?;
//! // {"type": "number", "exclusiveMinimum": 0, "multipleOf": 0.01}
//! let price = rx::multiple_of(&"0.01".parse()?, Some(Bound::exclusive(Decimal::zero())), None, false)?;
//! // {"type": "string", "pattern": "^[a-z]+$", "maxLength": 8}
//! let slug = rx::json_string(Some("^[a-z]+$"), 0, Some(8))?;
//! // {"type": "string", "format": "date"} and a property name
//! let date = rx::format("date")?;
//! let key = rx::property_name("created_at");
//! assert!(month != rx::NOTHING && price.contains("0-9") && slug.starts_with('"'));
//! # let _ = (date, key);
//! # Ok::<(), rx::RegexError>(())
//! ```
//! An empty language (`minimum > maximum`, an unsatisfiable pattern) is returned as
//! [`NOTHING`], so the compiler can turn the subschema into `false`.
//!
//! # Invariants
//! A returned regex parses with `regex-syntax`'s default configuration (with a margin of
//! nesting depth for wrapping) and never accepts a value the keyword rejects. Where an exact
//! construction is impossible or too big, the function returns an error instead of a looser
//! regex: [`RegexError::Unsupported`] (naming the construct), [`RegexError::Invalid`] (bad
//! input) or [`RegexError::TooLarge`] (a documented limit). Documented narrowings (valid values
//! that are not generated): bounded numbers use plain decimals only (no exponent); integers are
//! canonical (no `1.0`); strings never use `\uXXXX` for non-control characters; some formats
//! (see the table in `formats`) refuse rare valid forms such as non-UTC leap seconds.
//!
//! # Costs
//! Numbers are linear in the digits of the bounds; a `multipleOf` enumeration is capped by
//! [`MAX_ENUMERATED_MULTIPLES`], a remainder automaton by its regex size (divisibility by 7 is
//! ~50 kB, ~13k NFA states). Strings are linear in the pattern plus the counted repetitions,
//! capped by [`MAX_COUNTED_LENGTH`] / [`MAX_EXPANDED_SIZE`] (4,096 characters ≈ 74k NFA states,
//! ~125 ms to build a lazy DFA on this machine): a larger `maxLength` is `TooLarge`, and is
//! better enforced with the grammar's counted repetition over [`json_char`].

pub use crate::grammar::regex::RegexError;

mod ecma;
mod formats;
mod lengths;
mod numbers;
mod pieces;
mod strings;

pub use ecma::ecma_to_regex;
pub use formats::{
    format, format_decoded, is_known_format, json_string_format, json_string_format_exact,
};
pub use lengths::{MAX_LENGTH_PAIRS, MAX_PRODUCT_STATES};
pub use numbers::{
    beyond_finite_range, integer_range, multiple_of, multiple_of_automaton, multiple_of_uncapped,
    number_range, Bound, Decimal, NumberAutomaton, BEYOND_308_DIGITS, MAX_AUTOMATON_STATES,
    MAX_ENUMERATED_MULTIPLES, MAX_INTEGER_DIGITS,
};
pub use pieces::NOTHING;
pub use strings::{
    json_char, json_string, json_string_decoded, json_string_decoded_exact, json_string_exact,
    property_name, search_regex, StringLexeme, MAX_COUNTED_LENGTH, MAX_EXPANDED_SIZE,
};

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
