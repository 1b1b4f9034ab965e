//! Strings: JSON string literals (quotes included) whose *decoded* value matches a regex and has
//! a length, in code points, within bounds.
//!
//! The constraint is stated on the decoded value (`minLength`, `pattern`, `format`), but the
//! lexeme is the JSON text. This module builds the decoded-value regex as a `regex-syntax` HIR,
//! narrows its lengths exactly where needed, then maps every class and literal to the JSON forms
//! of its characters:
//! - `"` → `\"`, `\` → `\\`, `/` → `/` or `\/`;
//! - control characters U+0000–U+001F → `\u00XX` (hex digits in either case), and additionally
//!   the short escapes `\b \f \n \r \t` for the five that have one;
//! - every other code point → its raw UTF-8 (`\uXXXX` for non-control characters is *not*
//!   accepted: it is never needed, and it would double the size of every class).
//!
//! One decoded code point is always one escape or one raw character, so lengths carry over
//! exactly. Costs: linear in the HIR; limits: [`MAX_COUNTED_LENGTH`] on counted repetitions and
//! [`MAX_EXPANDED_SIZE`] on the fully expanded size, both reported as `TooLarge`.

use regex_syntax::hir::{Class, ClassUnicode, ClassUnicodeRange, Hir, HirKind, Repetition};

use super::ecma::ecma_to_regex;
use super::lengths;
use super::numbers::same_len_range;
use super::pieces::{finish, NOTHING};
use crate::grammar::regex::RegexError;

/// The largest count a string regex may carry in one counted repetition (`{m,n}`), e.g. from
/// `maxLength`. Cost is linear in the count: one JSON-encoded character is about 18 Thompson NFA
/// states, so `"(?:CHAR){0,1024}"` is ~18k states (~28 ms to build a `hybrid::dfa::DFA`, debug
/// test build, loaded 2-core machine) and `{0,4096}` ~74k states (~125 ms); `{0,16384}` exceeds
/// regex-automata's default NFA size limit. A larger `maxLength` is better enforced by the
/// grammar's counted repetition over a one-character lexeme ([`json_char`]); here it is
/// `TooLarge`.
pub const MAX_COUNTED_LENGTH: u64 = 4096;

/// The largest cost a string regex may expand to when every counted repetition is unrolled
/// (guards against `(a{1000}){1000}`-style bombs in `pattern`, and against the quadratic length
/// splits of [`json_string`]). Cost approximates the encoded NFA size: one unit per literal
/// byte or plain printable-ASCII class, 14 per other class (a JSON-encoded "any character"), so
/// the limit admits exactly `MAX_COUNTED_LENGTH` arbitrary characters.
/// Regression (found by `arbitrary_patterns_end_in_a_result`): pattern `<` with `maxLength` 82
/// split into 6,642 characters, past regex-automata's default NFA size limit.
pub const MAX_EXPANDED_SIZE: u64 = 14 * MAX_COUNTED_LENGTH;

/// A string lexeme: a regex, and the texts to drop from it for lengths it does not carry.
///
/// `outside_lengths` is `None` when `regex` is exact on its own (the pattern implies the
/// length bounds, or they were narrowed into it). Otherwise it is the regex of the JSON strings
/// whose length is outside the bounds, and the lexeme is `regex` except those texts
/// ([`LexemeKind::Except`](crate::grammar::LexemeKind::Except)): the lexer's automaton is then
/// the product of the pattern with a code-point counter, exact, liveness included.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StringLexeme {
    /// The JSON string literal regex (quotes included).
    pub regex: String,
    /// The strings of wrong length to except from `regex`, if any.
    pub outside_lengths: Option<String>,
}

impl StringLexeme {
    fn plain(regex: String) -> Self {
        Self {
            regex,
            outside_lengths: None,
        }
    }

    /// The regex alone, for callers that cannot carry an exception (a property-name lexeme
    /// that is itself excepted from another).
    ///
    /// # Errors
    /// [`RegexError::Unsupported`] when the length bounds need the exception.
    pub fn into_plain(self) -> Result<String, RegexError> {
        match self.outside_lengths {
            None => Ok(self.regex),
            Some(_) => Err(RegexError::unsupported(
                "pattern with minLength/maxLength",
                "the length bounds are not implied by the pattern and cannot be narrowed into \
                 its regex; they need the lexeme's length exception, which this position \
                 (a property name) cannot carry",
            )),
        }
    }
}

/// A JSON string literal (with its quotes) whose decoded value has between `min_len` and
/// `max_len` code points and, if given, matches the ECMA-262 `pattern` with JSON Schema's search
/// semantics (it matches anywhere unless anchored with `^`/`$`), as one regex.
///
/// When the pattern's own lengths do not already imply the bounds, they are intersected exactly
/// for patterns of the shape "fixed-length parts around one repetition" (`^[a-z]+$`,
/// `^[A-Z]{2}-[0-9]+$`, an unanchored end after a fixed prefix, ...); other combinations need
/// [`json_string_exact`]'s exception and are [`RegexError::Unsupported`] here.
///
/// ```
/// use formwork_core::schema::regex::json_string;
/// let re = json_string(Some("^[a-z]+$"), 0, Some(3))?;
/// let r = regex_automata::meta::Regex::new(&format!("^(?:{re})$")).unwrap();
/// assert!(r.is_match(r#""abc""#) && !r.is_match(r#""abcd""#) && !r.is_match(r#""""#));
/// # Ok::<(), formwork_core::schema::regex::RegexError>(())
/// ```
pub fn json_string(
    pattern: Option<&str>,
    min_len: u64,
    max_len: Option<u64>,
) -> Result<String, RegexError> {
    json_string_exact(pattern, min_len, max_len)?.into_plain()
}

/// Like [`json_string`], for every pattern and length bounds: where the bounds cannot be
/// narrowed into the pattern's regex, the lexeme carries them as an exception
/// ([`StringLexeme::outside_lengths`]). A pattern with no string of the lengths is
/// [`NOTHING`].
///
/// # Errors
/// As [`json_string`] for the pattern itself; [`RegexError::TooLarge`] when a bound passes
/// [`MAX_COUNTED_LENGTH`] or the emptiness walk passes its budget.
///
/// ```
/// use formwork_core::schema::regex::json_string_exact;
/// let l = json_string_exact(Some("^[a-z]+(-[a-z]+)*$"), 0, Some(8))?;
/// let full = |re: &str| regex_automata::meta::Regex::new(&format!("^(?:{re})$")).unwrap();
/// let (re, outside) = (full(&l.regex), full(&l.outside_lengths.unwrap()));
/// let ok = |s: &str| re.is_match(s) && !outside.is_match(s);
/// assert!(ok(r#""ab-cd-ef""#) && !ok(r#""ab-cd-efg""#) && !ok(r#""ab-""#));
/// # Ok::<(), formwork_core::schema::regex::RegexError>(())
/// ```
pub fn json_string_exact(
    pattern: Option<&str>,
    min_len: u64,
    max_len: Option<u64>,
) -> Result<StringLexeme, RegexError> {
    let decoded = match pattern {
        None => Hir::repetition(Repetition {
            min: 0,
            max: None,
            greedy: true,
            sub: Box::new(any_char()),
        }),
        Some(p) => search_semantics(&parse(&ecma_to_regex(p)?)?)?,
    };
    encode_string(&decoded, min_len, max_len)
}

/// Like [`json_string`], but the decoded value must *fully* match `decoded`, a regex in
/// `regex-syntax` syntax (as [`format_decoded`](super::format_decoded) returns). A leading `^`
/// and trailing `$` are allowed and redundant.
pub fn json_string_decoded(
    decoded: &str,
    min_len: u64,
    max_len: Option<u64>,
) -> Result<String, RegexError> {
    json_string_decoded_exact(decoded, min_len, max_len)?.into_plain()
}

/// [`json_string_decoded`] with [`json_string_exact`]'s length exception where needed.
pub fn json_string_decoded_exact(
    decoded: &str,
    min_len: u64,
    max_len: Option<u64>,
) -> Result<StringLexeme, RegexError> {
    let hir = parse(decoded)?;
    let branches = branches(&hir)?;
    let full = Hir::alternation(branches.into_iter().map(|(_, body, _)| body).collect());
    encode_string(&full, min_len, max_len)
}

/// The decoded-value regex (full match, `regex-syntax` syntax) of the strings in which the
/// ECMA-262 `pattern` matches somewhere.
pub fn search_regex(pattern: &str) -> Result<String, RegexError> {
    Ok(search_semantics(&parse(&ecma_to_regex(pattern)?)?)?.to_string())
}

/// One JSON-encoded character of a string's content (no quotes): raw or escaped. For building
/// long strings with the grammar's counted repetition instead of one big regex.
pub fn json_char() -> String {
    encode_class(&any_class())
}

/// The JSON string literal of `key` (e.g. a property name), accepting every JSON encoding of it
/// (`\/` for `/`, either hex case in `\u001f`, ...) and nothing else.
pub fn property_name(key: &str) -> String {
    let mut out = String::from("\"");
    for c in key.chars() {
        out.push_str(&encode_class(&ClassUnicode::new([ClassUnicodeRange::new(
            c, c,
        )])));
    }
    out.push('"');
    out
}

fn parse(re: &str) -> Result<Hir, RegexError> {
    regex_syntax::ParserBuilder::new()
        .nest_limit(250)
        .build()
        .parse(re)
        .map_err(|e| RegexError::invalid(format!("regex does not parse: {e}"), re, 0))
}

fn any_class() -> ClassUnicode {
    ClassUnicode::new([ClassUnicodeRange::new('\0', char::MAX)])
}

fn any_char() -> Hir {
    Hir::class(Class::Unicode(any_class()))
}

fn any_string() -> Hir {
    Hir::repetition(Repetition {
        min: 0,
        max: None,
        greedy: true,
        sub: Box::new(any_char()),
    })
}

/// Splits a regex into `(anchored at start, body without anchors, anchored at end)` branches.
///
/// `^` and `$` are understood wherever nothing can precede (resp. follow) them inside their
/// branch, through groups and alternations (`(^$)|(^x$)`, `(?:^|\n)abc(?:$|\n)`); where
/// something must precede `^` (or follow `$`) the combination is dropped as unsatisfiable.
/// Anchors under repetition and other assertions are `Unsupported`.
pub(super) fn branches(h: &Hir) -> Result<Vec<(bool, Hir, bool)>, RegexError> {
    use regex_syntax::hir::Look;
    let unsupported = || {
        RegexError::unsupported(
            "anchor inside a pattern",
            "`^` and `$` are supported where nothing precedes (resp. follows) them in their \
             alternative, not under repetition; other assertions are not supported",
        )
    };
    if h.properties().look_set().is_empty() {
        return Ok(vec![(false, h.clone(), false)]);
    }
    match h.kind() {
        HirKind::Alternation(alts) => {
            let mut out = Vec::new();
            for a in alts {
                out.extend(branches(a)?);
            }
            Ok(out)
        }
        HirKind::Capture(c) => branches(&c.sub),
        HirKind::Look(Look::Start) => Ok(vec![(true, Hir::empty(), false)]),
        HirKind::Look(Look::End) => Ok(vec![(false, Hir::empty(), true)]),
        HirKind::Concat(items) => {
            // Partial branches: (anchored at start, parts so far, anchored at end).
            let mut partial: Vec<(bool, Vec<Hir>, bool)> = vec![(false, Vec::new(), false)];
            for item in items {
                let item_branches = branches(item)?;
                let mut next = Vec::new();
                for (s, parts, e) in &partial {
                    for (is, body, ie) in &item_branches {
                        let nullable = |h: &Hir| cp_len(h).0 == 0;
                        let mut p = parts.clone();
                        // Before `^` only the empty string can have matched: nullable parts
                        // shrink to it, others make this combination impossible (`/^a/`).
                        if *is && !p.is_empty() {
                            if !p.iter().all(nullable) {
                                continue;
                            }
                            p.clear();
                        }
                        // After `$` likewise for what follows.
                        let body_empty = matches!(body.kind(), HirKind::Empty);
                        if *e && !body_empty {
                            if !nullable(body) {
                                continue;
                            }
                        } else if !body_empty {
                            p.push(body.clone());
                        }
                        next.push((*s || *is, p, *e || *ie));
                    }
                }
                if next.len() > 64 {
                    return Err(unsupported());
                }
                partial = next;
            }
            Ok(partial
                .into_iter()
                .map(|(s, parts, e)| (s, Hir::concat(parts), e))
                .collect())
        }
        _ => Err(unsupported()),
    }
}

/// A regex whose full matches are the strings in which `h` matches somewhere (ECMA search).
fn search_semantics(h: &Hir) -> Result<Hir, RegexError> {
    let parts = branches(h)?
        .into_iter()
        .map(|(start, body, end)| {
            // A body that matches the empty string is found in every string (unless both ends
            // are anchored): the branch is "anything".
            if !(start && end) && body.properties().minimum_len() == Some(0) {
                return any_string();
            }
            let mut v = Vec::new();
            let mut body = body;
            if !start {
                v.push(any_string());
                body = trim_edge(&body, true);
            }
            if !end {
                body = trim_edge(&body, false);
            }
            v.push(body);
            if !end {
                v.push(any_string());
            }
            Hir::concat(v)
        })
        .collect();
    Ok(Hir::alternation(parts))
}

/// Shrinks a repetition at the front (or back) of `h` to its minimum count: next to the
/// `.*` padding of search semantics, `.*X{m,n}B` matches exactly the strings `.*X{m}B` does
/// (an occurrence of `X{k}B` ends with one of `X{m}B`). Keeps lengths small for `maxLength`.
fn trim_edge(h: &Hir, front: bool) -> Hir {
    match h.kind() {
        HirKind::Repetition(r) if r.min == 0 => Hir::empty(),
        HirKind::Repetition(r) => Hir::repetition(Repetition {
            min: r.min,
            max: Some(r.min),
            greedy: true,
            sub: r.sub.clone(),
        }),
        HirKind::Capture(c) => trim_edge(&c.sub, front),
        HirKind::Concat(items) => {
            let mut v = items.clone();
            while let Some(k) = if front {
                Some(0)
            } else {
                v.len().checked_sub(1)
            } {
                let t = trim_edge(&v[k], front);
                if matches!(t.kind(), HirKind::Empty) && v.len() > 1 {
                    v.remove(k);
                } else {
                    v[k] = t;
                    break;
                }
            }
            Hir::concat(v)
        }
        _ => h.clone(),
    }
}

/// Minimum and maximum length of `h`'s matches in code points (`None`: unbounded).
fn cp_len(h: &Hir) -> (u64, Option<u64>) {
    match h.kind() {
        HirKind::Empty | HirKind::Look(_) => (0, Some(0)),
        HirKind::Literal(lit) => {
            let n = std::str::from_utf8(&lit.0).map_or(lit.0.len(), |s| s.chars().count()) as u64;
            (n, Some(n))
        }
        HirKind::Class(_) => (1, Some(1)),
        HirKind::Repetition(r) => {
            let (a, b) = cp_len(&r.sub);
            let min = a.saturating_mul(u64::from(r.min));
            let max = match (b, r.max) {
                (Some(0), _) => Some(0),
                (Some(b), Some(m)) => Some(b.saturating_mul(u64::from(m))),
                _ => None,
            };
            (min, max)
        }
        HirKind::Capture(c) => cp_len(&c.sub),
        HirKind::Concat(items) => items.iter().fold((0, Some(0)), |(a, b), x| {
            let (xa, xb) = cp_len(x);
            (
                a.saturating_add(xa),
                b.zip(xb).map(|(p, q)| p.saturating_add(q)),
            )
        }),
        HirKind::Alternation(items) => {
            let ls: Vec<_> = items.iter().map(cp_len).collect();
            let min = ls.iter().map(|l| l.0).min().unwrap_or(0);
            let max = ls.iter().try_fold(0u64, |m, l| l.1.map(|x| m.max(x)));
            (min, max)
        }
    }
}

/// `h` restricted to matches of `lo..=hi` code points, exactly; `None` when the shape of `h`
/// is not one this function can narrow.
fn limit_length(h: &Hir, lo: u64, hi: Option<u64>) -> Option<Hir> {
    if lengths_implied(h, lo, hi) {
        return Some(h.clone());
    }
    let (a, b) = cp_len(h);
    if hi.is_some_and(|m| a > m) || b.is_some_and(|bb| bb < lo) {
        return Some(Hir::fail());
    }
    match h.kind() {
        HirKind::Capture(c) => limit_length(&c.sub, lo, hi),
        HirKind::Alternation(alts) => Some(Hir::alternation(
            alts.iter()
                .map(|x| limit_length(x, lo, hi))
                .collect::<Option<Vec<_>>>()?,
        )),
        HirKind::Concat(items) => {
            let lens: Vec<_> = items.iter().map(cp_len).collect();
            let variable: Vec<usize> = (0..items.len())
                .filter(|&i| lens[i].1 != Some(lens[i].0))
                .collect();
            if let [i, _] = variable[..] {
                return split_concat(items, &lens, i, lo, hi?);
            }
            let [i] = variable[..] else {
                return None;
            };
            let fixed: u64 = lens.iter().map(|l| l.0).sum::<u64>() - lens[i].0;
            let sub_hi = match hi {
                Some(m) if m < fixed => return Some(Hir::fail()),
                Some(m) => Some(m - fixed),
                None => None,
            };
            let narrowed = limit_length(&items[i], lo.saturating_sub(fixed), sub_hi)?;
            let mut v = items.clone();
            v[i] = narrowed;
            Some(Hir::concat(v))
        }
        HirKind::Repetition(r) => {
            let (sa, sb) = cp_len(&r.sub);
            if sb != Some(sa) || sa == 0 {
                // `X?` of a variable-length `X`: the empty string or `X` narrowed.
                return match (r.min, r.max) {
                    (0, Some(1)) => Some(Hir::alternation(
                        [
                            (lo == 0).then(Hir::empty),
                            Some(limit_length(&r.sub, lo.max(1), hi)?),
                        ]
                        .into_iter()
                        .flatten()
                        .collect(),
                    )),
                    (1, Some(1)) => limit_length(&r.sub, lo, hi),
                    _ => None,
                };
            }
            let nlo = u64::from(r.min).max(lo.div_ceil(sa));
            let nhi = match (r.max, hi) {
                (Some(m), Some(h)) => Some(u64::from(m).min(h / sa)),
                (Some(m), None) => Some(u64::from(m)),
                (None, Some(h)) => Some(h / sa),
                (None, None) => None,
            };
            if nhi.is_some_and(|n| n < nlo) {
                return Some(Hir::fail());
            }
            // Counts past u32 are far beyond MAX_COUNTED_LENGTH: saturate, refused later.
            let clamp = |n: u64| u32::try_from(n).unwrap_or(u32::MAX);
            Some(Hir::repetition(Repetition {
                min: clamp(nlo),
                max: nhi.map(clamp),
                greedy: true,
                sub: r.sub.clone(),
            }))
        }
        _ => None,
    }
}

/// The longest `maxLength` for which a concatenation with two variable-length parts (like a
/// pattern padded on one side for search semantics) is split by the first part's length: one
/// alternative per length.
const MAX_SPLIT_LENGTH: u64 = 128;

/// `items` (two of them, `i` first, of variable length) restricted to `lo..=hi` code points, as
/// an alternation over the exact length of `items[i]`.
fn split_concat(
    items: &[Hir],
    lens: &[(u64, Option<u64>)],
    i: usize,
    lo: u64,
    hi: u64,
) -> Option<Hir> {
    if hi > MAX_SPLIT_LENGTH {
        return None;
    }
    let before: u64 = lens[..i].iter().map(|l| l.0).sum();
    let rest = Hir::concat(items[i + 1..].to_vec());
    let rest_min = cp_len(&rest).0;
    let top = lens[i]
        .1
        .unwrap_or(hi)
        .min(hi.saturating_sub(before + rest_min));
    let mut alts = Vec::new();
    for l in lens[i].0..=top {
        let left = limit_length(&items[i], l, Some(l))?;
        let used = before + l;
        let right = limit_length(&rest, lo.saturating_sub(used), Some(hi - used))?;
        if is_fail(&left) || is_fail(&right) {
            continue;
        }
        let mut v = items[..i].to_vec();
        v.push(left);
        v.push(right);
        alts.push(Hir::concat(v));
    }
    Some(Hir::alternation(alts))
}

/// Whether `h` is the empty class (matches nothing).
fn is_fail(h: &Hir) -> bool {
    matches!(h.kind(), HirKind::Class(Class::Unicode(c)) if c.ranges().is_empty())
}

/// Checks the size limits, returning the fully expanded size in character positions.
fn check_size(h: &Hir) -> Result<u64, RegexError> {
    Ok(match h.kind() {
        HirKind::Empty | HirKind::Look(_) => 0,
        HirKind::Literal(lit) => lit.0.len() as u64,
        // A plain ASCII class stays one class once encoded; anything else grows escapes and
        // multi-byte UTF-8 ranges (the JSON-encoded "any character" is the costly case).
        HirKind::Class(Class::Unicode(c))
            if c.ranges().iter().all(|r| {
                r.start() >= ' '
                    && r.end().is_ascii()
                    && !(r.start()..=r.end()).contains(&'"')
                    && !(r.start()..=r.end()).contains(&'\\')
            }) =>
        {
            1
        }
        HirKind::Class(_) => 14,
        HirKind::Repetition(r) => {
            let count = u64::from(r.max.unwrap_or(r.min).max(r.min));
            if count > MAX_COUNTED_LENGTH {
                return Err(RegexError::TooLarge {
                    what: "counted repetition in a string".into(),
                    limit: MAX_COUNTED_LENGTH,
                    given: count,
                });
            }
            check_size(&r.sub)?.saturating_mul(count.max(1))
        }
        HirKind::Capture(c) => check_size(&c.sub)?,
        HirKind::Concat(items) | HirKind::Alternation(items) => {
            let mut n = 0u64;
            for x in items {
                n = n.saturating_add(check_size(x)?);
            }
            n
        }
    })
    .and_then(|n| {
        if n > MAX_EXPANDED_SIZE {
            Err(RegexError::TooLarge {
                what: "expanded string regex".into(),
                limit: MAX_EXPANDED_SIZE,
                given: n,
            })
        } else {
            Ok(n)
        }
    })
}

/// The JSON string lexeme for decoded values fully matching `h` with lengths in bounds: the
/// bounds narrowed into the regex where [`limit_length`] can and the result stays within the
/// size limits, else `h` with the lengths outside the bounds as the exception.
fn encode_string(h: &Hir, min_len: u64, max_len: Option<u64>) -> Result<StringLexeme, RegexError> {
    if max_len.is_some_and(|m| m < min_len) {
        return Ok(StringLexeme::plain(NOTHING.to_string()));
    }
    if let Some(limited) = limit_length(h, min_len, max_len) {
        if limited.properties().minimum_len().is_none() {
            // Nothing matches (`/^a/`, or lengths outside the pattern's): one canonical form.
            return Ok(StringLexeme::plain(NOTHING.to_string()));
        }
        match check_size(&limited) {
            Ok(_) => return Ok(StringLexeme::plain(encode_literal(&limited)?)),
            // Narrowing split the lengths into too many alternatives: the exception is
            // linear in the bound instead.
            Err(RegexError::TooLarge { .. }) if !lengths_implied(h, min_len, max_len) => {}
            Err(e) => return Err(e),
        }
    }
    check_size(h)?;
    let product = lengths::length_product(h, min_len, max_len).ok_or(RegexError::TooLarge {
        what: "pattern × length walk (state, code point count) pairs".into(),
        limit: lengths::MAX_LENGTH_PAIRS as u64,
        given: lengths::MAX_LENGTH_PAIRS as u64 + 1,
    })?;
    if !product.nonempty {
        return Ok(StringLexeme::plain(NOTHING.to_string()));
    }
    if product.lexer_states() > lengths::MAX_PRODUCT_STATES {
        return Err(RegexError::TooLarge {
            what: "pattern × length product (lexer states)".into(),
            limit: lengths::MAX_PRODUCT_STATES as u64,
            given: product.lexer_states() as u64,
        });
    }
    let (lo, hi) = cp_len(h);
    let min_needed = if lo >= min_len { 0 } else { min_len };
    let max_needed = max_len.filter(|&m| hi.is_none_or(|b| b > m));
    Ok(StringLexeme {
        regex: encode_literal(h)?,
        outside_lengths: lengths::outside_lengths(min_needed, max_needed, MAX_COUNTED_LENGTH)?,
    })
}

/// Whether every match of `h` already has between `min_len` and `max_len` code points.
fn lengths_implied(h: &Hir, min_len: u64, max_len: Option<u64>) -> bool {
    let (a, b) = cp_len(h);
    a >= min_len
        && match (max_len, b) {
            (None, _) => true,
            (Some(m), Some(bb)) => bb <= m,
            (Some(_), None) => false,
        }
}

/// `h` as a JSON string literal regex, quotes included.
fn encode_literal(h: &Hir) -> Result<String, RegexError> {
    let mut out = String::from("\"");
    encode(h, &mut out)?;
    out.push('"');
    finish(out)
}

fn encode(h: &Hir, out: &mut String) -> Result<(), RegexError> {
    match h.kind() {
        HirKind::Empty => {}
        HirKind::Literal(lit) => {
            let s = std::str::from_utf8(&lit.0).map_err(|_| {
                RegexError::unsupported("byte-oriented regex", "literal is not valid UTF-8")
            })?;
            for c in s.chars() {
                out.push_str(&encode_class(&ClassUnicode::new([ClassUnicodeRange::new(
                    c, c,
                )])));
            }
        }
        HirKind::Class(Class::Unicode(cls)) => out.push_str(&encode_class(cls)),
        HirKind::Class(Class::Bytes(b)) => {
            let cls = b.to_unicode_class().ok_or_else(|| {
                RegexError::unsupported("byte-oriented regex", "class matches non-ASCII bytes")
            })?;
            out.push_str(&encode_class(&cls));
        }
        HirKind::Look(_) => {
            return Err(RegexError::unsupported(
                "assertion in a string regex",
                "anchors and word boundaries cannot be mapped onto the JSON encoding",
            ))
        }
        HirKind::Repetition(r) => {
            out.push_str("(?:");
            encode(&r.sub, out)?;
            out.push(')');
            match (r.min, r.max) {
                (0, None) => out.push('*'),
                (1, None) => out.push('+'),
                (0, Some(1)) => out.push('?'),
                (m, None) => out.push_str(&format!("{{{m},}}")),
                (m, Some(n)) if m == n => out.push_str(&format!("{{{m}}}")),
                (m, Some(n)) => out.push_str(&format!("{{{m},{n}}}")),
            }
        }
        HirKind::Capture(c) => {
            out.push_str("(?:");
            encode(&c.sub, out)?;
            out.push(')');
        }
        HirKind::Concat(items) => {
            for x in items {
                encode(x, out)?;
            }
        }
        HirKind::Alternation(items) => {
            out.push_str("(?:");
            for (i, x) in items.iter().enumerate() {
                if i > 0 {
                    out.push('|');
                }
                encode(x, out)?;
            }
            out.push(')');
        }
    }
    Ok(())
}

/// The JSON encodings of the code points in `cls`, as one self-delimiting regex atom.
fn encode_class(cls: &ClassUnicode) -> String {
    let mut specials = ClassUnicode::new([
        ClassUnicodeRange::new('\0', '\u{1F}'),
        ClassUnicodeRange::new('"', '"'),
        ClassUnicodeRange::new('\\', '\\'),
    ]);
    let mut raw = cls.clone();
    raw.difference(&specials);
    specials.intersect(cls);
    let has = |c: char| cls.ranges().iter().any(|r| r.start() <= c && c <= r.end());
    let mut pieces: Vec<String> = Vec::new();
    // Raw characters.
    let rr = raw.ranges();
    if rr.len() == 1 && rr[0].start() == rr[0].end() {
        pieces.push(regex_syntax::escape(rr[0].start().encode_utf8(&mut [0; 4])));
    } else if !rr.is_empty() {
        let mut s = String::from("[");
        for r in rr {
            s.push_str(&format!(r"\x{{{:X}}}", r.start() as u32));
            if r.end() != r.start() {
                s.push_str(&format!(r"-\x{{{:X}}}", r.end() as u32));
            }
        }
        s.push(']');
        pieces.push(s);
    }
    // Two-character escapes.
    let short: String = [
        ('"', '"'),
        ('\\', '\\'),
        ('/', '/'),
        ('\u{8}', 'b'),
        ('\u{C}', 'f'),
        ('\n', 'n'),
        ('\r', 'r'),
        ('\t', 't'),
    ]
    .iter()
    .filter(|(c, _)| has(*c))
    .map(|(_, e)| *e)
    .collect();
    match short.len() {
        0 => {}
        1 => pieces.push(format!(r"\\{}", regex_syntax::escape(&short))),
        _ => {
            let class: String = short
                .chars()
                .map(|e| match e {
                    '\\' => r"\\".to_string(),
                    c => c.to_string(),
                })
                .collect();
            pieces.push(format!(r"\\[{class}]"));
        }
    }
    // `\u00XX` for control characters.
    let mut hex_alts: Vec<String> = Vec::new();
    for r in specials.ranges() {
        let (a, b) = (r.start() as u32, r.end() as u32);
        if a > 0x1F {
            continue;
        }
        let b = b.min(0x1F);
        let digits = |v: u32| vec![(v >> 4) as u8, (v & 15) as u8];
        hex_alts.push(same_len_range(&digits(a), &digits(b), 16));
    }
    match hex_alts.len() {
        0 => {}
        1 => pieces.push(format!(r"\\u00{}", hex_alts[0])),
        _ => pieces.push(format!(r"\\u00(?:{})", hex_alts.join("|"))),
    }
    match pieces.len() {
        0 => NOTHING.to_string(),
        1 => pieces.pop().unwrap_or_default(),
        _ => format!("(?:{})", pieces.join("|")),
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{check, full};
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn plain_strings_with_lengths() {
        let re = json_string(None, 0, None).unwrap();
        check(
            &re,
            &[
                r#""""#,
                r#""abc""#,
                r#""a\"b""#,
                r#""\\""#,
                r#""\/""#,
                r#""\u001F\u001f\n""#,
                "\"é😀\"",
            ],
            &[
                r#"""#,
                r#""a"b""#,
                "\"a\nb\"",
                r#""\x""#,
                r#""\u0041""#,
                r#""\""#,
                r#""\u002""#,
            ],
        );
        let re = json_string(None, 2, Some(3)).unwrap();
        check(
            &re,
            &[r#""ab""#, r#""\n\t""#, r#""😀é\"""#, r#""\u0000bc""#],
            &[r#""a""#, r#""abcd""#, r#""\n""#, r#""""#],
        );
        assert_eq!(json_string(None, 3, Some(2)).unwrap(), NOTHING);
    }

    #[test]
    fn patterns_have_search_semantics() {
        let re = json_string(Some("b"), 0, None).unwrap();
        check(
            &re,
            &[r#""b""#, r#""abc""#, r#""\"b\"""#],
            &[r#""ac""#, r#""""#],
        );
        let re = json_string(Some("^a"), 0, None).unwrap();
        check(&re, &[r#""a""#, r#""ab""#], &[r#""ba""#]);
        let re = json_string(Some("(^$)|(^[ab]+$)"), 0, None).unwrap();
        check(&re, &[r#""""#, r#""ab""#], &[r#""abc""#, r#""c""#]);
        let re = json_string(Some(r"(?:^|\n)ab(?:$|\n)"), 0, None).unwrap();
        check(
            &re,
            &[r#""ab""#, r#""x\nab""#, r#""ab\ny""#],
            &[r#""xab""#, r#""abx""#],
        );
        // Unsatisfiable anchors: nothing matches (`a^b`), or only the empty string can sit
        // between them (`^$[a-z]*$`).
        let re = json_string(Some("a^b|c"), 0, None).unwrap();
        check(&re, &[r#""c""#, r#""acb""#], &[r#""ab""#, r#""""#]);
        let re = json_string(Some("^$[a-z]*$"), 0, None).unwrap();
        check(&re, &[r#""""#], &[r#""a""#]);
        assert_eq!(json_string(Some("/^a/"), 0, None).unwrap(), NOTHING);
        assert_eq!(json_string(Some("^ab$"), 3, None).unwrap(), NOTHING);
        assert!(json_string(Some("(?:^a)*"), 0, None).is_err());
        let re = json_string(Some("z$|^x"), 0, None).unwrap();
        check(&re, &[r#""az""#, r#""xa""#], &[r#""za""#, r#""ax""#]);
        let re = json_string(Some(r#"^[^"]*$"#), 0, None).unwrap();
        check(&re, &[r#""abc""#, r#""\\""#], &[r#""a\"b""#]);
        let re = json_string(Some(r"^\s$"), 0, None).unwrap();
        check(
            &re,
            &[r#""\n""#, r#""\t""#, r#""\u000b""#, "\" \"", "\"\u{a0}\""],
            &[r#""a""#],
        );
        let re = json_string(Some(r"^[/]$"), 0, None).unwrap();
        check(&re, &[r#""/""#, r#""\/""#], &[r#""\\""#]);
    }

    #[test]
    fn pattern_lengths_are_intersected() {
        let re = json_string(Some("^[a-z]+$"), 2, Some(4)).unwrap();
        check(&re, &[r#""ab""#, r#""abcd""#], &[r#""a""#, r#""abcde""#]);
        let re = json_string(Some("^[A-Z]{2}-[0-9]*$"), 0, Some(5)).unwrap();
        check(&re, &[r#""AB-""#, r#""AB-12""#], &[r#""AB-123""#]);
        let re = json_string(Some("^x"), 0, Some(2)).unwrap();
        check(&re, &[r#""x""#, r#""xy""#], &[r#""xyz""#, r#""y""#]);
        // Implied by the pattern: no intersection needed, and the pattern's language is kept.
        let re = json_string(Some("^[a-z]{2}$"), 1, Some(10)).unwrap();
        check(
            &re,
            &[r#""ab""#, r#""zz""#],
            &[r#""a""#, r#""abc""#, r#""AB""#],
        );
        // Search padding on both sides of a fixed body, small maxLength: split by length.
        let re = json_string(Some("[a-z]{3}"), 3, Some(3)).unwrap();
        check(&re, &[r#""abc""#], &[r#""ab1""#, r#""abcd""#]);
        let re = json_string(Some("ab"), 0, Some(4)).unwrap();
        check(
            &re,
            &[r#""ab""#, r#""xabx""#, r#""abxx""#],
            &[r#""xxabx""#, r#""axb""#],
        );
        let re = json_string(Some("^a+b*$"), 2, Some(3)).unwrap();
        check(
            &re,
            &[r#""ab""#, r#""aa""#, r#""abb""#],
            &[r#""a""#, r#""abbb""#, r#""b""#],
        );
        // Edge repetitions shrink under search semantics; `X?` of a variable `X` narrows.
        let re = json_string(Some("[0-9a-f]+"), 4, Some(4)).unwrap();
        check(
            &re,
            &[r#""00ff""#, r#""zzz0""#],
            &[r#""zzzz""#, r#""00fff""#],
        );
        let re = json_string(Some("^([A-Z]+)?$"), 0, Some(3)).unwrap();
        check(&re, &[r#""""#, r#""ABC""#], &[r#""ABCD""#, r#""a""#]);
        // Three variable parts: refused as one regex, exact with the exception.
        let three = "^[a-z]+:[a-z]+:[a-z]+$";
        assert!(matches!(
            json_string(Some(three), 0, Some(200)),
            Err(RegexError::Unsupported { .. })
        ));
        let l = json_string_exact(Some(three), 0, Some(200)).unwrap();
        assert!(l.outside_lengths.is_some());
    }

    /// Whether the exact lexeme `l` accepts the JSON text `text`.
    fn exact_accepts(l: &StringLexeme, text: &str) -> bool {
        full(&l.regex).is_match(text)
            && !l
                .outside_lengths
                .as_ref()
                .is_some_and(|o| full(o).is_match(text))
    }

    #[test]
    fn exact_lengths_need_no_pattern_shape() {
        // Issue 44: several variable parts (MaskBench's `^([a-z0-9-]+):...` with maxLength).
        let l = json_string_exact(Some("^([a-z]+):([a-z.]+)?:([a-z]+)$"), 5, Some(8)).unwrap();
        assert!(l.outside_lengths.is_some());
        for (text, want) in [
            (r#""a::b""#, false),
            (r#""ab::cd""#, true),
            (r#""ab:.:cd""#, true),
            (r#""a:b.c:de""#, true),
            (r#""a:b.cd:ef""#, false),
            (r#""a:bc:""#, false),
        ] {
            assert_eq!(exact_accepts(&l, text), want, "{text}");
        }
        // Only the shortest string is in range: still a lexeme, and exactly that string.
        let l = json_string_exact(Some("^(ab)+(cd)+(ef)+$"), 6, Some(7)).unwrap();
        assert!(exact_accepts(&l, r#""abcdef""#));
        assert!(!exact_accepts(&l, r#""ababcdef""#));
        // Lengths no string of the pattern has: nothing, as one canonical form.
        let l = json_string_exact(Some("^(ab|cd)+(ef)+$"), 5, Some(5)).unwrap();
        assert_eq!(l.regex, NOTHING);
        // A product the lexer's cache could not hold: refused up front, by its size.
        assert!(matches!(
            json_string_exact(Some("^[a-z]+:[a-z]+:[a-z]+$"), 0, Some(900)),
            Err(RegexError::TooLarge { what, .. }) if what.contains("product")
        ));
        let maskbench = "^([a-z0-9-]+):([a-z0-9\\.-]+):([a-z0-9-]+)?:([a-z0-9-]+)$";
        assert!(json_string_exact(Some(maskbench), 0, Some(146)).is_ok());
        // Past the counted limit: the size error, not a silent cut.
        assert!(matches!(
            json_string_exact(Some("^[a-z]+:[a-z]+$"), 0, Some(MAX_COUNTED_LENGTH)),
            Err(RegexError::TooLarge { .. })
        ));
    }

    #[test]
    fn size_limits_are_errors_not_explosions() {
        // Issue 4: 10^6 maxLength must end in a clear error.
        assert!(matches!(
            json_string(None, 0, Some(1_000_000)),
            Err(RegexError::TooLarge { .. })
        ));
        assert!(matches!(
            json_string(Some("^(a{1000}){1000}$"), 0, None),
            Err(RegexError::TooLarge { .. })
        ));
        // A huge maxLength implied by the pattern is fine, and the pattern's language is kept.
        let re = json_string(Some("^[a-z]{1,5}$"), 0, Some(1_000_000)).unwrap();
        check(
            &re,
            &[r#""a""#, r#""abcde""#],
            &[r#""""#, r#""abcdef""#, r#""a1""#],
        );
    }

    #[test]
    fn regex_bombs_are_refused() {
        for p in [
            "(a{1000}){1000}",
            "((a|b){100}){100}",
            "a{4294967295}",
            "a{99999999999}",
            "(((a*)*)*)*",
        ] {
            match json_string(Some(p), 0, None) {
                Ok(re) => {
                    full(&re);
                }
                Err(RegexError::TooLarge { .. } | RegexError::Invalid { .. }) => {}
                Err(e) => panic!("{p}: unexpected {e}"),
            }
        }
        assert!(matches!(
            json_string(Some("^(a{1000}){1000}$"), 0, None),
            Err(RegexError::TooLarge { .. })
        ));
    }

    #[test]
    fn property_names_accept_every_encoding() {
        check(
            &property_name("a/\"b\n"),
            &[r#""a/\"b\n""#, r#""a\/\"b\u000A""#, r#""a/\"b\u000a""#],
            &[r#""a/"b\n""#, r#""a/\"b""#],
        );
        check(&property_name("a.b*"), &[r#""a.b*""#], &[r#""axb*""#]);
    }

    #[test]
    fn decoded_regex_is_full_match() {
        let re = json_string_decoded("^[0-9]{3}$", 0, None).unwrap();
        check(&re, &[r#""123""#], &[r#""1234""#, r#""a123""#]);
    }

    /// Serializes like serde_json (raw UTF-8, `\n`-style short escapes, `\u00XX` otherwise).
    fn encode_json(s: &str) -> String {
        serde_json::to_string(s).unwrap()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn lengths_count_code_points(s in "\\PC{0,8}|[\\x00-\\x1f\"\\\\/]{0,8}", lo in 0u64..6, span in 0u64..6) {
            let hi = lo + span;
            let r = full(&json_string(None, lo, Some(hi)).unwrap());
            let n = s.chars().count() as u64;
            prop_assert_eq!(r.is_match(&encode_json(&s)), lo <= n && n <= hi);
        }

        /// Issue 4's fuzz requirement at this level: arbitrary patterns and lengths end in a
        /// regex that compiles or a typed error, never a panic or an explosion.
        #[test]
        fn arbitrary_patterns_end_in_a_result(
            p in "[-a-c0-9\\\\()\\[\\]{}|*+?.^$,:=!<>/dDwWsSbBkpPux]{0,24}",
            lo in 0u64..20,
            hi in proptest::option::of(0u64..300),
        ) {
            if let Ok(re) = json_string(Some(&p), lo, hi) {
                prop_assert!(regex_automata::meta::Regex::new(&re).is_ok(), "{} -> {}", p, re);
            }
        }

        /// Issue 44: the exact lexeme (regex minus the lengths outside) accepts exactly the
        /// values the pattern matches (searched, as the regex crate does) with `lo..=hi` code
        /// points, escapes counting one. The patterns have three variable-length parts, so
        /// the bounds are the exception's, and the bounds sit next to the value's length.
        #[test]
        fn exact_lengths_agree_with_search_and_count(
            s in "[ab:\n\"é]{0,9}",
            p in proptest::sample::select(vec![
                "^[ab]*:[^:]*:?[^b]*$", "^(a|é)*(b|\n)*(:|\")*$", "^(a+):(b*):?(a|b)*$",
                "b*:a*:",
            ]),
            lo_off in 0u64..3,
            hi_off in proptest::option::of(0u64..3),
        ) {
            let n = s.chars().count() as u64;
            let lo = (n + 1).saturating_sub(lo_off);
            let hi = hi_off.map(|d| (n + d).saturating_sub(1).max(lo));
            let l = json_string_exact(Some(p), lo, hi).unwrap();
            let want = regex_automata::meta::Regex::new(p).unwrap().is_match(&s)
                && lo <= n
                && hi.is_none_or(|h| n <= h);
            prop_assert_eq!(exact_accepts(&l, &encode_json(&s)), want, "{} {:?}", p, l);
        }

        #[test]
        fn pattern_matches_decoded_value(s in "[a-c\"\\\\\n/é]{0,6}") {
            // `pattern: "b[^a]"` matches anywhere in the decoded value.
            let r = full(&json_string(Some("b[^a]"), 0, None).unwrap());
            let want = regex_automata::meta::Regex::new("b[^a]").unwrap().is_match(&s);
            prop_assert_eq!(r.is_match(&encode_json(&s)), want);
        }
    }
}
