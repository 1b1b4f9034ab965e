//! Length bounds a string regex cannot carry itself: the JSON strings *outside* `minLength` /
//! `maxLength`, as a regex to except from a pattern's lexeme, and the exact question whether
//! a pattern has any string within the bounds.
//!
//! A pattern such as `^([a-z0-9-]+):([a-z0-9.-]+):([a-z0-9-]+)?:([a-z0-9-]+)$` with
//! `maxLength: 146` has no compact regex for "matches and has at most 146 code points" (one
//! alternative per split of the length over the four parts). Its lexeme is instead the
//! pattern's regex *except* [`outside_lengths`]: the lexer builds both into one automaton, so
//! its lazy DFA is the product of the pattern's automaton with a code-point counter, built
//! only where a text goes; liveness is exact because the lexer searches that product for a
//! reported match (`LexerSpec::prefix_safe` is false for a non-literal exception). The
//! counter is the costly part: about 12 NFA states per counted code point, so the count is
//! capped by [`MAX_COUNTED_LENGTH`](super::MAX_COUNTED_LENGTH) like every counted repetition in a string regex.
//!
//! [`length_product`] decides, on the pattern's dense DFA walked with a code-point count,
//! whether the exception leaves anything: an empty lexeme must become the compiler's `false`,
//! not a value the matcher could start but never finish; the same walk sizes the product, and
//! one the lexer's cache could not hold ([`MAX_PRODUCT_STATES`]) is refused as `TooLarge`.
//! Costs: O(DFA states × bound) pairs, at most [`MAX_LENGTH_PAIRS`], each a pass over the
//! DFA's byte classes.

use std::collections::{HashSet, VecDeque};

use regex_automata::dfa::{dense, Automaton, StartKind};
use regex_automata::nfa::thompson;
use regex_automata::util::start;
use regex_automata::{Anchored, MatchKind};
use regex_syntax::hir::Hir;

use crate::grammar::regex::RegexError;

/// Most (DFA state, code-point count) pairs [`length_product`] visits; past it the answer is
/// unknown and the caller refuses with `TooLarge`. 200,000 pairs is a 1,000-state DFA (a
/// `format: uri`) under a `maxLength` of 200; a walk that finds a string stops at the first.
pub const MAX_LENGTH_PAIRS: usize = 200_000;

/// Most lexer states a pattern with length bounds may need ([`LengthProduct::lexer_states`]):
/// past it the lexer's lazy DFA for the string could fill its cache (4 MiB by default, about
/// 350 bytes per state measured on these automata) while a value is written — a budget error
/// in the middle of generation — so the schema is refused up front instead. 8,000 states is
/// about 2.8 MB. Measured (a matcher computing a mask before every byte of a long value):
/// `^[a-z]+:[a-z]+:[a-z]+$` with `maxLength` 900 (14,400 estimated) filled the cache at
/// byte 744; with 400 (6,400) it did not. MaskBench's `^([a-z0-9-]+):...` with 146 is 2,600.
pub const MAX_PRODUCT_STATES: usize = 8_000;

/// Lazy-DFA states of the counter alone per counted code point, once the pattern has died:
/// the lexer's liveness search walks them (the exception keeps a text alive that only it
/// can continue). One per code point plus UTF-8 continuations (3) and escapes (`\`, `\u` and
/// up to three hex digits: 5).
const COUNTER_STATES_PER_CODE_POINT: usize = 9;

/// One JSON-encoded code point of a string's content, for counting only: the text is already
/// a match of the pattern's lexeme, so this need not validate escapes, only delimit them
/// (`\uXXXX`, or a backslash and one character, or one raw character).
const COUNTED_CHAR: &str = r#"(?:[^"\\]|\\(?:u[0-9A-Fa-f]{4}|[^u]))"#;

/// The JSON string literals (quotes included) whose decoded value has fewer than `min_len` or
/// more than `max_len` code points; `None` when no length is outside (`min_len` 0, no
/// maximum). Only called for bounds the pattern does not imply, so each side is needed.
///
/// # Errors
/// [`RegexError::TooLarge`] when a counted repetition would pass `limit` (the caller's
/// [`MAX_COUNTED_LENGTH`](super::MAX_COUNTED_LENGTH)).
pub(super) fn outside_lengths(
    min_len: u64,
    max_len: Option<u64>,
    limit: u64,
) -> Result<Option<String>, RegexError> {
    let too_large = |what: &str, given: u64| RegexError::TooLarge {
        what: what.into(),
        limit,
        given,
    };
    let mut sides = Vec::new();
    if min_len > 0 {
        if min_len > limit {
            return Err(too_large("minLength with a pattern", min_len));
        }
        sides.push(format!("{COUNTED_CHAR}{{0,{}}}", min_len - 1));
    }
    if let Some(m) = max_len {
        if m >= limit {
            return Err(too_large("maxLength with a pattern", m));
        }
        sides.push(format!("{COUNTED_CHAR}{{{},}}", m + 1));
    }
    Ok(match sides.len() {
        0 => None,
        _ => Some(format!("\"(?:{})\"", sides.join("|"))),
    })
}

/// The product of a pattern's automaton with a code-point counter, as far as
/// [`length_product`] explored it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct LengthProduct {
    /// Whether some string of the pattern has a length within the bounds.
    pub nonempty: bool,
    /// The reachable (DFA state, code-point count) pairs: about the lazy-DFA states the lexer
    /// may build for the lexeme while the pattern is alive.
    pub states: usize,
    /// The largest count the counter tracks (`maxLength`, else `minLength`).
    pub counted: u64,
}

impl LengthProduct {
    /// An upper estimate of the lexer states the lexeme may build: the product, and the
    /// counter's own states where only it is alive (see [`MAX_PRODUCT_STATES`]).
    pub fn lexer_states(&self) -> usize {
        let counted = usize::try_from(self.counted).unwrap_or(usize::MAX);
        self.states
            .saturating_add(COUNTER_STATES_PER_CODE_POINT.saturating_mul(counted.saturating_add(1)))
    }
}

/// Walks every (DFA state, code-point count) pair of `decoded` (a regex over the decoded
/// value, full match) reachable within `max_len` code points (counts past `min_len` merged
/// when there is no maximum); `None` when its DFA cannot be built or the walk passes
/// [`MAX_LENGTH_PAIRS`].
pub(super) fn length_product(
    decoded: &Hir,
    min_len: u64,
    max_len: Option<u64>,
) -> Option<LengthProduct> {
    let nfa = thompson::Compiler::new()
        .configure(thompson::Config::new().nfa_size_limit(Some(16 << 20)))
        .build_from_hir(decoded)
        .ok()?;
    // `All`: a leftmost-first DFA drops the lower-priority threads after a match (`a|ab`
    // would never see `ab` end), but this walk asks about every length.
    let dfa = dense::Builder::new()
        .configure(
            dense::Config::new()
                .start_kind(StartKind::Anchored)
                .match_kind(MatchKind::All)
                .dfa_size_limit(Some(8 << 20))
                .determinize_size_limit(Some(8 << 20)),
        )
        .build_from_nfa(&nfa)
        .ok()?;
    // One byte per (byte class, starts a code point): the count needs the second half.
    let starts_code_point = |b: u8| !(0x80..=0xBF).contains(&b);
    let mut reps: Vec<u8> = Vec::new();
    let mut kinds = HashSet::new();
    for b in 0..=255u8 {
        if kinds.insert((dfa.byte_classes().get(b), starts_code_point(b))) {
            reps.push(b);
        }
    }
    // Counts at or past `min_len` behave alike when there is no maximum.
    let cap = max_len.unwrap_or(min_len);
    let first = (
        dfa.start_state(&start::Config::new().anchored(Anchored::Yes))
            .ok()?,
        0u64,
    );
    let mut nonempty = false;
    let mut seen = HashSet::from([first]);
    let mut todo = VecDeque::from([first]);
    while let Some((s, n)) = todo.pop_front() {
        nonempty |= n >= min_len && dfa.is_match_state(dfa.next_eoi_state(s));
        for &b in &reps {
            let next = dfa.next_state(s, b);
            if dfa.is_dead_state(next) || dfa.is_quit_state(next) {
                continue;
            }
            let count = n + u64::from(starts_code_point(b));
            let count = match max_len {
                Some(m) if count > m => continue,
                Some(_) => count,
                None => count.min(cap),
            };
            if seen.insert((next, count)) {
                if seen.len() > MAX_LENGTH_PAIRS {
                    return None;
                }
                todo.push_back((next, count));
            }
        }
    }
    Some(LengthProduct {
        nonempty,
        states: seen.len(),
        counted: cap,
    })
}

#[cfg(test)]
mod tests {
    use super::super::testutil::check;
    use super::*;
    const LIMIT: u64 = super::super::MAX_COUNTED_LENGTH;

    fn hir(re: &str) -> Hir {
        regex_syntax::Parser::new().parse(re).unwrap()
    }

    fn nonempty(h: &Hir, min_len: u64, max_len: Option<u64>) -> Option<bool> {
        length_product(h, min_len, max_len).map(|p| p.nonempty)
    }

    #[test]
    fn outside_lengths_counts_escapes_as_one_code_point() {
        let re = outside_lengths(2, Some(3), LIMIT).unwrap().unwrap();
        check(
            &re,
            &[
                r#""""#,
                r#""a""#,
                r#""\n""#,
                r#""abcd""#,
                r#""\u00e9\n\"x""#,
                "\"é😀ab\"",
            ],
            &[r#""ab""#, r#""\n\t""#, r#""\u00e9\\\"""#, "\"é😀\""],
        );
        assert_eq!(outside_lengths(0, None, LIMIT).unwrap(), None);
        check(
            &outside_lengths(0, Some(0), LIMIT).unwrap().unwrap(),
            &[r#""a""#],
            &[r#""""#],
        );
        assert!(matches!(
            outside_lengths(0, Some(LIMIT), LIMIT),
            Err(RegexError::TooLarge { .. })
        ));
        assert!(outside_lengths(0, Some(LIMIT - 1), LIMIT).is_ok());
    }

    #[test]
    fn length_walk_is_exact() {
        let h = hir("(?:a|bc)*:(?:de)+");
        // Shortest ":de" (3), then every length from 5 on ("a:de", "a:dede", ...).
        assert_eq!(nonempty(&h, 0, Some(2)), Some(false));
        assert_eq!(nonempty(&h, 3, Some(3)), Some(true));
        assert_eq!(nonempty(&h, 100, None), Some(true));
        // Only even lengths: "", "é é" counts code points, not bytes.
        let even = hir("(?:éé)*");
        assert_eq!(nonempty(&even, 3, Some(3)), Some(false));
        assert_eq!(nonempty(&even, 3, Some(4)), Some(true));
        // Leftmost-first would stop at "a"; every length counts.
        assert_eq!(nonempty(&hir("a|abc"), 2, Some(3)), Some(true));
    }
}
