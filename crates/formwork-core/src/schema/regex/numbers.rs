//! Numbers: exact regexes for JSON number literals inside a range and/or a `multipleOf`.
//!
//! Everything works on decimal digit strings ([`Decimal`]), never on floating point, so a bound
//! like `0.1` is exactly one tenth. The constructions are digit-level automata written out as
//! regexes: a range splits into "integer part equal to the bound's, then compare the fraction
//! digit by digit" and "integer part strictly between the bounds, any fraction"
//! (the classic range-to-regex split, linear in the number of digits of the bounds).
//!
//! # Accepted forms
//! - Integers (`integer_only`): canonical JSON integers: no leading zeros, no fraction, no
//!   exponent; `-0` is accepted where 0 is in range. (`1.0` is a valid JSON Schema integer from
//!   draft 6 on, but it is never needed to express a value, so it is not generated.)
//! - Numbers without bounds, or whose bounds are only zero (`minimum: 0`, `exclusiveMinimum: 0`,
//!   ...): the full JSON number grammar, exponents included, since the sign of `m·10^e` is the
//!   sign of `m`.
//! - Numbers with any other bound: plain decimals `-?(0|[1-9][0-9]*)(\.[0-9]+)?` only. The
//!   bound stays exact, but `1e2` is not accepted even where `100` is.
//!
//! # Finite doubles
//! Every regex here accepts only numbers below `10^308` in magnitude, which serde_json (without
//! `arbitrary_precision`), JavaScript and Python read as finite doubles (RFC 8259 §6): at most
//! [`MAX_INTEGER_DIGITS`] (308) integer digits; an exponent without `-` (`+` and leading zeros
//! allowed: `1e0005`) only after at most [`MAX_EXPONENT_INTEGER_DIGITS`] (16) of them, and at
//! most 308 minus their count (`1e307`, `12e306`; not `1e308`). Negative exponents and
//! fractions are not limited (an underflow reads as 0, not an error). Issue 19: a 400-digit integer written
//! under `{"type": "integer"}` was valid JSON that serde_json refused as out of range. So:
//! - bounds beyond `±10^308`, or absent, count as `±10^308` exclusive (`clamp`): the range
//!   constructions then cap the integer part by themselves; [`beyond_finite_range`] names a
//!   bound that leaves nothing (`minimum: 1e308`), for the compiler to refuse it;
//! - the exponent forms couple the exponent's budget to the integer digits, one tail per count
//!   up to 16 (coupling all 308 counts made a 29 kB regex that took 4 ms to parse in every
//!   grammar); the generic number is then 1,148 Thompson NFA states (22 before the cap), the
//!   generic integer 1,240 (12 before): a 308-digit counter is a state or more per digit;
//! - `multipleOf` suffix forms cap their free digits (`[1-9][0-9]{0,n}`); a remainder automaton
//!   (divisors with other prime factors on a range open on one side: `multipleOf: 3`) has no
//!   compact capped regex (the product with a digit counter does not share its tails), so
//!   [`multiple_of`] refuses it and [`multiple_of_uncapped`] returns it flagged, for the
//!   compiler to drop the texts of [`BEYOND_308_DIGITS`] with an exception lexeme.
//!   [`multiple_of_automaton`] (not used by the compiler) is uncapped.

use std::cmp::Ordering;
use std::str::FromStr;

use super::pieces::{alt, cat, finish, NOTHING};
use crate::grammar::regex::RegexError;

/// The most multiples [`multiple_of`] enumerates one by one for a bounded range with a general
/// divisor (e.g. `multipleOf: 0.05` on `[0, 100]` is 2001 multiples). Beyond it: `TooLarge`.
pub const MAX_ENUMERATED_MULTIPLES: u64 = 4096;

/// The largest divisor (its part not made of 2s and 5s) for which [`multiple_of`] tries the
/// remainder automaton as a regex.
const MAX_MODULUS: u64 = 64;

/// The largest remainder-automaton regex, in bytes. Measured: divisibility by 3 is 282 bytes,
/// by 7 about 50 kB, by 11 over 1 MB (state elimination on a complete 11-state automaton).
const MAX_MODULUS_REGEX: usize = 64 * 1024;

/// The largest decimal exponent accepted in a bound or divisor (`1e4096`); beyond it the digit
/// strings themselves become the problem. Larger exponents are `TooLarge`.
const MAX_EXPONENT: i64 = 4096;

/// The most digits of an emitted number's integer part (the module doc's "Finite doubles").
pub const MAX_INTEGER_DIGITS: usize = 308;

/// The most integer digits before a positive exponent (`1.5e300`, `12e5`: one or a few in
/// practice). Each count up to it has its own exponent tail (the exponent's budget is 308 minus
/// the count), so it sets the number regex's size: 16 keeps it about 2 kB (coupling every count
/// up to 308 was 29 kB, 4 ms to parse per grammar, 9,763 NFA states).
pub const MAX_EXPONENT_INTEGER_DIGITS: usize = 16;

/// An exact decimal number: sign, integer digits and fraction digits.
///
/// Canonical: the integer digits have no leading zeros (zero is `"0"`), the fraction digits have
/// no trailing zeros, and zero is never negative. Parse one from a JSON number's text with
/// [`str::parse`], or convert from `f64`/`i128`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decimal {
    negative: bool,
    int: String,
    frac: String,
}

impl Decimal {
    /// Zero.
    pub fn zero() -> Self {
        Decimal {
            negative: false,
            int: "0".into(),
            frac: String::new(),
        }
    }

    /// The exact decimal value of the shortest representation that round-trips `x`
    /// (so `0.1f64` is exactly `0.1`, as a schema author wrote it).
    pub fn from_f64(x: f64) -> Result<Self, RegexError> {
        if !x.is_finite() {
            return Err(RegexError::invalid(
                format!("non-finite number {x}"),
                &x.to_string(),
                0,
            ));
        }
        format!("{x:e}").parse()
    }

    /// Whether the value is zero.
    pub fn is_zero(&self) -> bool {
        self.int == "0" && self.frac.is_empty()
    }

    /// Whether the value is strictly negative.
    pub fn is_negative(&self) -> bool {
        self.negative
    }

    fn abs(&self) -> Decimal {
        Decimal {
            negative: false,
            ..self.clone()
        }
    }

    fn from_parts(negative: bool, int: &str, frac: &str) -> Decimal {
        let int = int.trim_start_matches('0');
        let frac = frac.trim_end_matches('0');
        let int = if int.is_empty() { "0" } else { int };
        let negative = negative && !(int == "0" && frac.is_empty());
        Decimal {
            negative,
            int: int.into(),
            frac: frac.into(),
        }
    }

    /// `self · 10^shift`, exact.
    fn shift(&self, shift: i64) -> Decimal {
        let digits = format!("{}{}", self.int, self.frac);
        let point = self.int.len() as i64 + shift;
        let (int, frac) = if point <= 0 {
            (
                String::new(),
                "0".repeat((-point) as usize) + digits.as_str(),
            )
        } else if point as usize >= digits.len() {
            (
                digits.clone() + &"0".repeat(point as usize - digits.len()),
                String::new(),
            )
        } else {
            let (a, b) = digits.split_at(point as usize);
            (a.to_string(), b.to_string())
        };
        Decimal::from_parts(self.negative, &int, &frac)
    }

    /// Compares absolute values.
    fn cmp_abs(&self, other: &Decimal) -> Ordering {
        cmp_uint(&self.int, &other.int).then_with(|| self.frac.cmp(&other.frac))
    }

    /// The value as `m · 10^e` with `m` a canonical positive integer not divisible by 10.
    fn mantissa_exp(&self) -> (String, i64) {
        let digits = format!("{}{}", self.int, self.frac);
        let digits = digits.trim_start_matches('0');
        let e = -(self.frac.len() as i64);
        let trimmed = digits.trim_end_matches('0');
        let zeros = (digits.len() - trimmed.len()) as i64;
        (trimmed.to_string(), e + zeros)
    }

    /// The value times `10^scale` as an `i128`, if it is an integer that fits.
    fn scaled_i128(&self, scale: usize) -> Option<i128> {
        if self.frac.len() > scale {
            return None;
        }
        let s = format!(
            "{}{}{}",
            self.int,
            self.frac,
            "0".repeat(scale - self.frac.len())
        );
        let v: i128 = s.parse().ok()?;
        Some(if self.negative { -v } else { v })
    }
}

impl FromStr for Decimal {
    type Err = RegexError;

    /// Parses a JSON-number-like text: `-?digits(.digits)?([eE][+-]?digits)?` (a leading `+` and
    /// leading zeros are tolerated).
    fn from_str(s: &str) -> Result<Self, RegexError> {
        let bad =
            |offset: usize| RegexError::invalid(format!("not a decimal number: {s:?}"), s, offset);
        let b = s.as_bytes();
        let mut i = 0;
        let mut negative = false;
        if i < b.len() && (b[i] == b'-' || b[i] == b'+') {
            negative = b[i] == b'-';
            i += 1;
        }
        let start = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        let int = &s[start..i];
        let mut frac = "";
        if i < b.len() && b[i] == b'.' {
            i += 1;
            let fs = i;
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
            }
            frac = &s[fs..i];
        }
        if int.is_empty() && frac.is_empty() {
            return Err(bad(start));
        }
        let mut exp: i64 = 0;
        if i < b.len() && (b[i] == b'e' || b[i] == b'E') {
            i += 1;
            let es = i;
            if i < b.len() && (b[i] == b'-' || b[i] == b'+') {
                i += 1;
            }
            let ds = i;
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
            }
            if ds == i {
                return Err(bad(i));
            }
            exp = s[es..i].parse().map_err(|_| RegexError::TooLarge {
                what: "decimal exponent".into(),
                limit: MAX_EXPONENT as u64,
                given: u64::MAX,
            })?;
        }
        if i != b.len() {
            return Err(bad(i));
        }
        let d = Decimal::from_parts(negative, int, frac);
        if d.is_zero() {
            return Ok(d);
        }
        if exp.abs() > MAX_EXPONENT {
            return Err(RegexError::TooLarge {
                what: "decimal exponent".into(),
                limit: MAX_EXPONENT as u64,
                given: exp.unsigned_abs(),
            });
        }
        Ok(d.shift(exp))
    }
}

impl TryFrom<&serde_json::Number> for Decimal {
    type Error = RegexError;

    /// The exact value of a JSON number as serde_json holds it (integers exactly, floats as
    /// their shortest round-trip text).
    fn try_from(n: &serde_json::Number) -> Result<Self, RegexError> {
        n.to_string().parse()
    }
}

impl From<i128> for Decimal {
    fn from(v: i128) -> Self {
        Decimal::from_parts(v < 0, &v.unsigned_abs().to_string(), "")
    }
}

impl std::fmt::Display for Decimal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.negative {
            write!(f, "-")?;
        }
        write!(f, "{}", self.int)?;
        if !self.frac.is_empty() {
            write!(f, ".{}", self.frac)?;
        }
        Ok(())
    }
}

/// One end of a range: a value and whether the value itself is excluded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bound {
    /// The bound's value.
    pub value: Decimal,
    /// `true` for `exclusiveMinimum`/`exclusiveMaximum` (the value itself is out of range).
    pub exclusive: bool,
}

impl Bound {
    /// An inclusive bound (`minimum`, `maximum`).
    pub fn inclusive(value: Decimal) -> Self {
        Bound {
            value,
            exclusive: false,
        }
    }

    /// An exclusive bound (`exclusiveMinimum`, `exclusiveMaximum`).
    pub fn exclusive(value: Decimal) -> Self {
        Bound {
            value,
            exclusive: true,
        }
    }
}

/// A JSON integer literal (canonical, `-0` allowed where 0 is in range) with optional inclusive
/// bounds.
///
/// ```
/// use formwork_core::schema::regex::integer_range;
/// let re = integer_range(Some(-5), Some(120))?;
/// let r = regex_automata::meta::Regex::new(&format!("^(?:{re})$")).unwrap();
/// assert!(r.is_match("-5") && r.is_match("120") && !r.is_match("121") && !r.is_match("007"));
/// # Ok::<(), formwork_core::schema::regex::RegexError>(())
/// ```
pub fn integer_range(min: Option<i128>, max: Option<i128>) -> Result<String, RegexError> {
    number_range(
        min.map(|v| Bound::inclusive(v.into())),
        max.map(|v| Bound::inclusive(v.into())),
        true,
    )
}

/// A JSON number literal inside a range, exactly (a digit-level automaton, not "any number").
///
/// With `integer_only`, only canonical integer literals (the JSON Schema `integer` type as
/// formwork generates it). Exponent forms are accepted only when every bound is absent or zero;
/// otherwise only plain decimals (see the module doc). An empty range returns [`NOTHING`].
pub fn number_range(
    min: Option<Bound>,
    max: Option<Bound>,
    integer_only: bool,
) -> Result<String, RegexError> {
    number_range_unchecked(min, max, integer_only).and_then(finish)
}

fn number_range_unchecked(
    min: Option<Bound>,
    max: Option<Bound>,
    integer_only: bool,
) -> Result<String, RegexError> {
    let sign_only = min.as_ref().is_none_or(|b| b.value.is_zero())
        && max.as_ref().is_none_or(|b| b.value.is_zero());
    if sign_only && !integer_only {
        return Ok(signed_exponent_forms(min.as_ref(), max.as_ref()));
    }
    let mode = if integer_only {
        FracMode::IntegerOnly
    } else {
        FracMode::Fraction { significant: None }
    };
    Ok(ranged(min.as_ref(), max.as_ref(), mode).unwrap_or_else(|| NOTHING.to_string()))
}

/// A number that is a multiple of `k` (`multipleOf`) inside an optional range.
///
/// Exact constructions, tried in order:
/// 1. `k = 10^e` with any range: `e ≤ 0` limits the significant fraction digits (`0.01`: at most
///    two, then only zeros), `e > 0` demands trailing zeros.
/// 2. A bounded range with at most [`MAX_ENUMERATED_MULTIPLES`] multiples: they are listed.
/// 3. Bounds that are absent or zero (or a lower bound in `(0, k]`, which only excludes zero and
///    the negatives; or one bound beyond zero with the other side unbounded, whose finite
///    stretch is enumerated): for `k = m·10^e` with `m` a product of 2s and 5s (`2`, `25`, `0.5`,
///    `0.25`, ...) the last digits decide divisibility, and at most 308 integer digits are
///    written (module doc, "Finite doubles").
///
/// Anything else is [`RegexError::Unsupported`] (or `TooLarge` when only the enumeration limit
/// stood in the way): in particular a divisor with another prime factor (`3`, `7`, `0.3`) on
/// a range open on one side, whose remainder automaton cannot be capped at 308 digits in a
/// regex of reasonable size. Accepted forms follow [`number_range`], except that multiples
/// never use exponents and, with `integer_only` or an integer `k`, are canonical integers.
pub fn multiple_of(
    k: &Decimal,
    min: Option<Bound>,
    max: Option<Bound>,
    integer_only: bool,
) -> Result<String, RegexError> {
    multiple_of_unchecked(k, min, max, integer_only, false).and_then(|(re, _)| finish(re))
}

/// What a regex of [`multiple_of_uncapped`] that is not capped at 308 integer digits must be
/// used with: the texts it has beyond the cap, to drop (as a
/// [`LexemeKind::Except`](crate::grammar::LexemeKind::Except) lexeme's exception).
pub const BEYOND_308_DIGITS: &str = r"-?[1-9][0-9]{308,}(?:\.[0-9]*)?";

/// [`multiple_of`], except that a divisor with a prime factor other than 2 and 5 on a range
/// open on one side gets the remainder automaton of its divisor (for an integer `k = m·10^e`
/// up to `MAX_MODULUS`, written out as a regex if it stays under `MAX_MODULUS_REGEX` bytes:
/// 3, 6, 7 do; 11, 13 do not), whose digits no regex of reasonable size caps at 308. The
/// `bool` says so: the regex is then exact only once the texts of [`BEYOND_308_DIGITS`] are
/// dropped from it (the compiler makes the lexeme an exception of that regex).
pub fn multiple_of_uncapped(
    k: &Decimal,
    min: Option<Bound>,
    max: Option<Bound>,
    integer_only: bool,
) -> Result<(String, bool), RegexError> {
    let (re, uncapped) = multiple_of_unchecked(k, min, max, integer_only, true)?;
    Ok((finish(re)?, uncapped))
}

/// The regex, and whether it needs [`BEYOND_308_DIGITS`] dropped (only with `remainder`).
fn multiple_of_unchecked(
    k: &Decimal,
    min: Option<Bound>,
    max: Option<Bound>,
    integer_only: bool,
    remainder: bool,
) -> Result<(String, bool), RegexError> {
    if k.is_negative() || k.is_zero() {
        return Err(RegexError::invalid(
            format!("multipleOf must be positive, got {k}"),
            &k.to_string(),
            0,
        ));
    }
    let (m, e) = k.mantissa_exp();
    let (min, max) = (min.as_ref(), max.as_ref());
    if m == "1" {
        if e <= 0 {
            let mode = if integer_only || e == 0 {
                FracMode::IntegerOnly
            } else {
                FracMode::Fraction {
                    significant: Some((-e) as usize),
                }
            };
            return Ok((
                ranged(min, max, mode).unwrap_or_else(|| NOTHING.to_string()),
                false,
            ));
        }
        return Ok((power_of_ten_multiples(min, max, e as usize), false));
    }
    let enumerated = enumerate_multiples(k, min, max, integer_only);
    if let Some(Ok(re)) = enumerated {
        return Ok((re, false));
    }
    // Whether the divisor's multiples are decided by their last digits (else, if at all, by a
    // remainder automaton, uncapped).
    let two_five = {
        let mut v: u64 = m.parse().unwrap_or(0);
        while v > 1 && v % 2 == 0 {
            v /= 2;
        }
        while v > 1 && v % 5 == 0 {
            v /= 5;
        }
        v == 1
    };
    // A lower bound in (0, k] admits exactly the positive multiples (and symmetrically for
    // an upper bound in [-k, 0)): treat it as `exclusiveMinimum: 0`.
    let within_k = |b: &Bound| b.value.abs().cmp_abs(k) != Ordering::Greater && !b.value.is_zero();
    let zero_exclusive = Bound::exclusive(Decimal::zero());
    let min = match min {
        Some(b) if !b.value.is_negative() && within_k(b) => Some(&zero_exclusive),
        other => other,
    };
    let max = match max {
        Some(b) if b.value.is_negative() && within_k(b) => Some(&zero_exclusive),
        other => other,
    };
    let sign_only = min.is_none_or(|b| b.value.is_zero()) && max.is_none_or(|b| b.value.is_zero());
    if sign_only {
        if let Some(re) = two_five_multiples(&m, e, min, max, integer_only, remainder) {
            return Ok((re, !two_five));
        }
    }
    // One side unbounded and the other bound beyond zero (`maximum: 80`): the unbounded side
    // is sign-only, the stretch between zero and the bound is enumerated.
    let beyond_zero =
        |b: &Bound, positive: bool| b.value.is_negative() != positive && !b.value.is_zero();
    let split = match (min, max) {
        (None, Some(h)) if beyond_zero(h, true) => Some((
            None,
            Some(&zero_exclusive),
            Some(Bound::inclusive(Decimal::zero())),
            Some(h.clone()),
        )),
        (Some(l), None) if beyond_zero(l, false) => Some((
            Some(&zero_exclusive),
            None,
            Some(l.clone()),
            Some(Bound::inclusive(Decimal::zero())),
        )),
        _ => None,
    };
    if let Some((open_min, open_max, fin_min, fin_max)) = split {
        let open = two_five_multiples(&m, e, open_min, open_max, integer_only, remainder);
        let finite = enumerate_multiples(k, fin_min.as_ref(), fin_max.as_ref(), integer_only);
        if let (Some(open), Some(Ok(finite))) = (open, finite) {
            let pieces = [open, finite]
                .into_iter()
                .filter(|p| p != NOTHING)
                .map(Some);
            return Ok((
                alt(pieces).unwrap_or_else(|| NOTHING.to_string()),
                !two_five,
            ));
        }
    }
    match enumerated {
        Some(Err(e)) => Err(e),
        _ if !two_five && (min.is_none() || max.is_none()) => Err(RegexError::unsupported(
            "multipleOf",
            format!(
                "multipleOf {k} on a range open on one side: its multiples are decided by a \
                 remainder automaton, whose regex cannot also cap them at {MAX_INTEGER_DIGITS} \
                 integer digits (numbers stay finite doubles; the compiler uses \
                 multiple_of_uncapped and drops the longer texts); bound the range to at most \
                 {MAX_ENUMERATED_MULTIPLES} multiples, or use a divisor made of 2s and 5s"
            ),
        )),
        _ => Err(RegexError::unsupported(
            "multipleOf",
            format!(
                "multipleOf {k} with this range has no exact regex here (supported: powers of ten \
                 with any range, a range with at most {MAX_ENUMERATED_MULTIPLES} multiples, or \
                 sign-only bounds with divisors m·10^e, m made of 2s and 5s)"
            ),
        )),
    }
}

/// The full JSON number grammar restricted by bounds that are absent or zero, and to finite
/// doubles (the module doc's "Finite doubles": at most [`MAX_INTEGER_DIGITS`] integer digits,
/// and a positive exponent at most [`MAX_INTEGER_DIGITS`] minus their count).
fn signed_exponent_forms(min: Option<&Bound>, max: Option<&Bound>) -> String {
    const FRAC: &str = r"(?:\.[0-9]+)?";
    const NEGATIVE_EXPONENT: &str = r"(?:[eE]-[0-9]+)?";
    let most = MAX_INTEGER_DIGITS - 1;
    // No exponent, or a negative one: any integer part up to 308 digits.
    let plain = format!(r"(?:[1-9][0-9]{{0,{most}}}{FRAC}|0\.0*[1-9][0-9]*){NEGATIVE_EXPONENT}");
    // An exponent without `-`: at most 16 integer digits, each count with its own budget.
    let exponent = (1..=MAX_EXPONENT_INTEGER_DIGITS)
        .map(|j| {
            let digits = match j {
                1 => String::new(),
                2 => "[0-9]".to_string(),
                _ => format!("[0-9]{{{}}}", j - 1),
            };
            Some(format!("[1-9]{digits}{FRAC}{}", positive_exponent(j)))
        })
        .chain([Some(format!(r"0\.0*[1-9][0-9]*{}", positive_exponent(1)))]);
    let nonzero = alt([Some(plain)].into_iter().chain(exponent)).unwrap_or_default();
    let zero = format!(r"0(?:\.0+)?(?:[eE]-[0-9]+|{})?", positive_exponent(1));
    let zero_ok = !min.is_some_and(|b| b.exclusive) && !max.is_some_and(|b| b.exclusive);
    // One copy of the nonzero forms under whichever signs are allowed.
    let sign = match (max.is_none(), min.is_none()) {
        (true, true) => Some("-?"),
        (true, false) => Some(""),
        (false, true) => Some("-"),
        (false, false) => None,
    };
    alt([
        sign.map(|s| format!("{s}{}", group(&nonzero))),
        zero_ok.then(|| format!("-?{zero}")),
    ])
    .unwrap_or_else(|| NOTHING.to_string())
}

/// `10^308`: every number this module emits is below it in magnitude.
fn magnitude_limit() -> Decimal {
    Decimal {
        negative: false,
        int: format!("1{}", "0".repeat(MAX_INTEGER_DIGITS)),
        frac: String::new(),
    }
}

/// Compares two decimals by value.
fn cmp_value(a: &Decimal, b: &Decimal) -> Ordering {
    match (a.negative, b.negative) {
        (false, true) => Ordering::Greater,
        (true, false) => Ordering::Less,
        (false, false) => a.cmp_abs(b),
        (true, true) => b.cmp_abs(a),
    }
}

/// `[min, max]` intersected with the finite range `(-10^308, 10^308)`: the bounds every
/// plain-decimal construction starts from, so that none writes more than
/// [`MAX_INTEGER_DIGITS`] integer digits.
fn clamp(min: Option<&Bound>, max: Option<&Bound>) -> (Bound, Bound) {
    let limit = magnitude_limit();
    let below = Decimal {
        negative: true,
        ..limit.clone()
    };
    let lo = match min {
        Some(b) if cmp_value(&b.value, &below) == Ordering::Greater => b.clone(),
        _ => Bound::exclusive(below),
    };
    let hi = match max {
        Some(b) if cmp_value(&b.value, &limit) == Ordering::Less => b.clone(),
        _ => Bound::exclusive(limit),
    };
    (lo, hi)
}

/// The bound keyword (`minimum`, `exclusiveMinimum`, `maximum`, `exclusiveMaximum`) that
/// leaves no number below `10^308` in magnitude (`minimum: 1e308`), if one does: such a
/// range has only numbers formwork does not emit (module doc, "Finite doubles"), which the
/// compiler reports as an error at the keyword rather than as an empty range.
pub fn beyond_finite_range(min: Option<&Bound>, max: Option<&Bound>) -> Option<&'static str> {
    let limit = magnitude_limit();
    if min.is_some_and(|b| cmp_value(&b.value, &limit) != Ordering::Less) {
        return Some(if min.is_some_and(|b| b.exclusive) {
            "exclusiveMinimum"
        } else {
            "minimum"
        });
    }
    let below = Decimal {
        negative: true,
        ..limit
    };
    if max.is_some_and(|b| cmp_value(&b.value, &below) != Ordering::Greater) {
        return Some(if max.is_some_and(|b| b.exclusive) {
            "exclusiveMaximum"
        } else {
            "maximum"
        });
    }
    None
}

/// An exponent without `-` after an integer part of `digits` digits (`1 ≤ digits ≤ 308`): `+`
/// and leading zeros allowed, value at most `308 - digits`.
fn positive_exponent(digits: usize) -> String {
    let budget = MAX_INTEGER_DIGITS.saturating_sub(digits).to_string();
    let value = uint_range("0", Some(&budget)).unwrap_or_else(|| "0".to_string());
    format!(r"[eE]\+?0*{}", group(&value))
}

/// How the fraction after the integer part may look.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FracMode {
    /// No fraction at all.
    IntegerOnly,
    /// `\.[0-9]+` optional; with `significant: Some(s)`, digits after the `s`-th must be `0`.
    Fraction { significant: Option<usize> },
}

/// An absolute bound for the non-negative branch: value and strictness.
type AbsBound = (Decimal, bool);

/// Splits `[min, max]` into the non-negative branch (text without sign) and the negated
/// negative branch (text after `-`, value `-x`), each `None` when empty, else its bounds.
#[allow(clippy::type_complexity)]
fn split_sign(
    min: Option<&Bound>,
    max: Option<&Bound>,
) -> (
    Option<(Option<AbsBound>, Option<AbsBound>)>,
    Option<(Option<AbsBound>, Option<AbsBound>)>,
) {
    let empty_above_zero = |b: &Bound| b.value.is_negative() || (b.value.is_zero() && b.exclusive);
    // Non-negative branch: x in [min, max] ∩ [0, ∞).
    let pos = if max.is_some_and(empty_above_zero) {
        None
    } else {
        let lo = min
            .filter(|b| !b.value.is_negative() && (!b.value.is_zero() || b.exclusive))
            .map(|b| (b.value.abs(), b.exclusive));
        let hi = max.map(|b| (b.value.abs(), b.exclusive));
        Some((lo, hi))
    };
    // Negative branch as y = -x: y in [-max, -min] ∩ [0, ∞), which includes y = 0 ("-0").
    let empty_below_zero = |b: &Bound| {
        (!b.value.is_negative() && !b.value.is_zero()) || (b.value.is_zero() && b.exclusive)
    };
    let neg = if min.is_some_and(empty_below_zero) {
        None
    } else {
        let lo = max
            .filter(|b| b.value.is_negative() || (b.value.is_zero() && b.exclusive))
            .map(|b| (b.value.abs(), b.exclusive));
        let hi = min.map(|b| (b.value.abs(), b.exclusive));
        Some((lo, hi))
    };
    (pos, neg)
}

/// Signed numbers in `[min, max]` under `mode`, plain decimal forms; `None` if empty.
/// Bounds beyond `±10^308` (or absent) count as `±10^308` exclusive (`clamp`).
fn ranged(min: Option<&Bound>, max: Option<&Bound>, mode: FracMode) -> Option<String> {
    let (lo, hi) = clamp(min, max);
    let (pos, neg) = split_sign(Some(&lo), Some(&hi));
    alt([
        pos.and_then(|(lo, hi)| nonneg(lo.as_ref(), hi.as_ref(), mode)),
        neg.and_then(|(lo, hi)| cat(Some("-".into()), nonneg(lo.as_ref(), hi.as_ref(), mode))),
    ])
}

/// Unsigned decimal texts with value in the range (`lo` absent means 0 inclusive).
fn nonneg(lo: Option<&AbsBound>, hi: Option<&AbsBound>, mode: FracMode) -> Option<String> {
    let zero = Decimal::zero();
    let (lo_v, lo_strict) = lo.map(|(d, s)| (d, *s)).unwrap_or((&zero, false));
    let lo_frac = if lo_v.frac.is_empty() && !lo_strict {
        None
    } else {
        Some(FracBound::new(&lo_v.frac, lo_strict))
    };
    let li = lo_v.int.as_str();
    let fp = |l: Option<FracBound>, h: Option<FracBound>| frac_part(l, h, mode);
    match hi {
        Some((h, h_strict)) => {
            let hi_frac = Some(FracBound::new(&h.frac, *h_strict));
            let below_hi = dec(&h.int);
            match cmp_uint(li, &h.int) {
                Ordering::Greater => None,
                Ordering::Equal => cat(Some(li.into()), fp(lo_frac, hi_frac)),
                Ordering::Less => alt([
                    cat(Some(li.into()), fp(lo_frac, None)),
                    cat(uint_range(&inc(li), Some(&below_hi)), fp(None, None)),
                    cat(Some(h.int.clone()), fp(None, hi_frac)),
                ]),
            }
        }
        None => alt([
            cat(Some(li.into()), fp(lo_frac, None)),
            cat(uint_range(&inc(li), None), fp(None, None)),
        ]),
    }
}

/// A comparison of the remaining fraction digits against a bound's remaining digits.
#[derive(Clone, Debug, PartialEq, Eq)]
struct FracBound {
    /// The bound's fraction digits still to compare (values 0-9, no trailing zeros).
    rest: Vec<u8>,
    strict: bool,
}

impl FracBound {
    fn new(frac: &str, strict: bool) -> Self {
        FracBound {
            rest: frac.bytes().map(|b| b - b'0').collect(),
            strict,
        }
    }
}

/// The state of the fraction automaton: the bounds still undecided and the significant digits
/// still free.
#[derive(Clone, Debug, PartialEq, Eq)]
struct FracState {
    lo: Option<FracBound>,
    hi: Option<FracBound>,
    significant: Option<usize>,
}

impl FracState {
    /// Whether the fraction may end here (the rest is all zeros).
    fn accepts_end(&self) -> bool {
        let lo_ok = self
            .lo
            .as_ref()
            .is_none_or(|b| b.rest.is_empty() && !b.strict);
        let hi_ok = self
            .hi
            .as_ref()
            .is_none_or(|b| !(b.rest.is_empty() && b.strict));
        lo_ok && hi_ok
    }

    /// The state after digit `c`, or `None` if no continuation can satisfy the bounds.
    fn step(&self, c: u8) -> Option<FracState> {
        let significant = match self.significant {
            Some(0) if c != 0 => return None,
            Some(0) => Some(0),
            Some(k) => Some(k - 1),
            None => None,
        };
        let lo = match &self.lo {
            None => None,
            Some(b) => {
                let d = b.rest.first().copied().unwrap_or(0);
                match c.cmp(&d) {
                    Ordering::Greater => None,
                    Ordering::Less => return None,
                    Ordering::Equal => Some(FracBound {
                        rest: b.rest.get(1..).unwrap_or(&[]).to_vec(),
                        strict: b.strict,
                    }),
                }
            }
        };
        let hi = match &self.hi {
            None => None,
            Some(b) => {
                let d = b.rest.first().copied().unwrap_or(0);
                match c.cmp(&d) {
                    Ordering::Less => None,
                    Ordering::Greater => return None,
                    Ordering::Equal => Some(FracBound {
                        rest: b.rest.get(1..).unwrap_or(&[]).to_vec(),
                        strict: b.strict,
                    }),
                }
            }
        };
        Some(FracState {
            lo,
            hi,
            significant,
        })
    }

    /// Digits 0-9 grouped by the state they lead to, in digit order of first appearance.
    fn transitions(&self) -> Vec<(Vec<u8>, FracState)> {
        let mut groups: Vec<(Vec<u8>, FracState)> = Vec::new();
        for c in 0..10u8 {
            if let Some(next) = self.step(c) {
                match groups.iter_mut().find(|(_, s)| *s == next) {
                    Some((digits, _)) => digits.push(c),
                    None => groups.push((vec![c], next)),
                }
            }
        }
        groups
    }
}

/// The fraction part for an integer part equal to the bounds' integer parts.
fn frac_part(lo: Option<FracBound>, hi: Option<FracBound>, mode: FracMode) -> Option<String> {
    let significant = match mode {
        FracMode::IntegerOnly => None,
        FracMode::Fraction { significant } => significant,
    };
    let st = FracState {
        lo,
        hi,
        significant,
    };
    let end = st.accepts_end().then(String::new);
    match mode {
        FracMode::IntegerOnly => end,
        FracMode::Fraction { .. } => alt([end, cat(Some(r"\.".into()), frac_first(&st))]),
    }
}

/// At least one more fraction digit, then whatever `frac_rest` allows.
fn frac_first(st: &FracState) -> Option<String> {
    alt(st
        .transitions()
        .into_iter()
        .map(|(digits, next)| cat(Some(digit_class(&digits)), frac_rest(&next))))
}

/// Zero or more fraction digits from state `st` to an accepting end.
fn frac_rest(st: &FracState) -> Option<String> {
    let mut loop_class = None;
    let mut others = Vec::new();
    for (digits, next) in st.transitions() {
        if next == *st {
            loop_class = Some(digit_class(&digits));
        } else {
            others.push(cat(Some(digit_class(&digits)), frac_rest(&next)));
        }
    }
    others.push(st.accepts_end().then(String::new));
    let rest = alt(others)?;
    Some(match loop_class {
        Some(c) => format!("{c}*{rest}"),
        None => rest,
    })
}

/// A character class for decimal digit values.
fn digit_class(digits: &[u8]) -> String {
    let mut set = [false; 16];
    for &d in digits {
        set[d as usize] = true;
    }
    class_of(&set[..10], 10)
}

/// A class over digit values `0..base` (base 10 or 16; hex letters in both cases).
fn class_of(set: &[bool], base: u8) -> String {
    let mut ranges: Vec<(u8, u8)> = Vec::new();
    for d in 0..base {
        if set[d as usize] {
            match ranges.last_mut() {
                Some((_, hi)) if *hi + 1 == d => *hi = d,
                _ => ranges.push((d, d)),
            }
        }
    }
    if ranges.len() == 1 && ranges[0].0 == ranges[0].1 && (base == 10 || ranges[0].0 < 10) {
        return char::from(b'0' + ranges[0].0).to_string();
    }
    let mut out = String::from("[");
    let push_range = |out: &mut String, a: u8, b: u8, f: &dyn Fn(u8) -> char| {
        out.push(f(a));
        if b > a {
            if b > a + 1 {
                out.push('-');
            }
            out.push(f(b));
        }
    };
    for &(a, b) in &ranges {
        let dig = |d: u8| char::from(b'0' + d);
        let low = |d: u8| char::from(b'a' + d - 10);
        let up = |d: u8| char::from(b'A' + d - 10);
        if a < 10 {
            push_range(&mut out, a, b.min(9), &dig);
        }
        if b >= 10 {
            let a2 = a.max(10);
            push_range(&mut out, a2, b, &low);
            push_range(&mut out, a2, b, &up);
        }
    }
    out.push(']');
    out
}

/// Compares canonical unsigned integer digit strings.
fn cmp_uint(a: &str, b: &str) -> Ordering {
    a.len().cmp(&b.len()).then_with(|| a.cmp(b))
}

/// `a + 1` for a canonical digit string.
fn inc(a: &str) -> String {
    let mut d: Vec<u8> = a.bytes().collect();
    let mut i = d.len();
    loop {
        if i == 0 {
            d.insert(0, b'1');
            break;
        }
        i -= 1;
        if d[i] == b'9' {
            d[i] = b'0';
        } else {
            d[i] += 1;
            break;
        }
    }
    String::from_utf8(d).unwrap_or_default()
}

/// `a - 1` for a canonical digit string (`"0"` stays `"0"`: callers only use it when `a > 0`).
fn dec(a: &str) -> String {
    if a == "0" {
        return "0".into();
    }
    let mut d: Vec<u8> = a.bytes().collect();
    let mut i = d.len();
    while i > 0 {
        i -= 1;
        if d[i] == b'0' {
            d[i] = b'9';
        } else {
            d[i] -= 1;
            break;
        }
    }
    let s = String::from_utf8(d).unwrap_or_default();
    let t = s.trim_start_matches('0');
    if t.is_empty() {
        "0".into()
    } else {
        t.into()
    }
}

/// Canonical unsigned integers in `[lo, hi]` (`hi` absent: unbounded); `None` if empty.
fn uint_range(lo: &str, hi: Option<&str>) -> Option<String> {
    let digits = |s: &str| -> Vec<u8> { s.bytes().map(|b| b - b'0').collect() };
    let nines = |n: usize| vec![9u8; n];
    let (lo_len, lo_d) = (lo.len(), digits(lo));
    // No upper bound: at most 308 digits (the module doc's "Finite doubles").
    let all_nines = "9".repeat(MAX_INTEGER_DIGITS);
    let h = hi.unwrap_or(&all_nines);
    if cmp_uint(lo, h) == Ordering::Greater {
        return None;
    }
    let hi_d = digits(h);
    if h.len() == lo_len {
        return Some(same_len_range(&lo_d, &hi_d, 10));
    }
    // Lengths strictly between the two bounds' lengths are complete: one counted piece; so
    // is the upper bound's length when the bound is all nines (`{1,307}`, not `{1,306}` and
    // a `[1-9][0-9]{307}` beside it, half the NFA states).
    let top_complete = hi_d.iter().all(|&d| d == 9);
    let top = if top_complete {
        h.len() - 1
    } else {
        h.len() - 2
    };
    let middle = (top >= lo_len).then(|| {
        let (a, b) = (lo_len, top);
        if a == b {
            format!("[1-9][0-9]{{{a}}}")
        } else {
            format!("[1-9][0-9]{{{a},{b}}}")
        }
    });
    let mut bottom = vec![0u8; h.len()];
    bottom[0] = 1;
    alt([
        Some(same_len_range(&lo_d, &nines(lo_len), 10)),
        middle,
        (!top_complete).then(|| same_len_range(&bottom, &hi_d, 10)),
    ])
}

/// Digit strings of one length, in base 10 or 16, lexicographically in `[lo, hi]` (`lo ≤ hi`).
pub(super) fn same_len_range(lo: &[u8], hi: &[u8], base: u8) -> String {
    let Some((&l0, lo_rest)) = lo.split_first() else {
        return String::new();
    };
    let (&h0, hi_rest) = hi.split_first().unwrap_or((&l0, lo_rest));
    let one = |d: u8| {
        let mut set = [false; 16];
        set[d as usize] = true;
        class_of(&set[..base as usize], base)
    };
    if l0 == h0 {
        return one(l0) + &same_len_range(lo_rest, hi_rest, base);
    }
    let n = lo_rest.len();
    let any = |n: usize| {
        let all = class_of(&[true; 16][..base as usize], base);
        match n {
            0 => String::new(),
            1 => all,
            _ => format!("{all}{{{n}}}"),
        }
    };
    let lo_min = lo_rest.iter().all(|&d| d == 0);
    let hi_max = hi_rest.iter().all(|&d| d == base - 1);
    let mut alts = Vec::new();
    let mid_lo = if lo_min {
        l0
    } else {
        let top = vec![base - 1; n];
        alts.push(Some(one(l0) + &same_len_range(lo_rest, &top, base)));
        l0 + 1
    };
    let mid_hi = if hi_max { h0 } else { h0 - 1 };
    if mid_lo <= mid_hi {
        let mut set = [false; 16];
        for d in mid_lo..=mid_hi {
            set[d as usize] = true;
        }
        alts.push(Some(class_of(&set[..base as usize], base) + &any(n)));
    }
    if !hi_max {
        let bottom = vec![0; n];
        alts.push(Some(one(h0) + &same_len_range(&bottom, hi_rest, base)));
    }
    alt(alts).unwrap_or_default()
}

/// Multiples of `10^e` (`e ≥ 1`) in the range: canonical integers ending in `e` zeros, or zero.
fn power_of_ten_multiples(min: Option<&Bound>, max: Option<&Bound>, e: usize) -> String {
    let shift = |b: &Bound| Bound {
        value: b.value.shift(-(e as i64)),
        exclusive: b.exclusive,
    };
    // Clamped first: `e` trailing zeros leave `308 - e` digits before them.
    let (lo, hi) = clamp(min, max);
    let (qmin, qmax) = (Some(shift(&lo)), Some(shift(&hi)));
    let (pos, neg) = split_sign(qmin.as_ref(), qmax.as_ref());
    let zeros = "0".repeat(e);
    let positive_only = |lo: Option<AbsBound>| -> Option<AbsBound> {
        match lo {
            Some((v, s)) if !v.is_zero() => Some((v, s)),
            _ => Some((Decimal::zero(), true)),
        }
    };
    let zero_in = pos.as_ref().is_some_and(|(lo, _)| lo.is_none())
        || neg.as_ref().is_some_and(|(lo, _)| lo.is_none());
    let branch = |b: Option<(Option<AbsBound>, Option<AbsBound>)>| {
        b.and_then(|(lo, hi)| {
            let lo = positive_only(lo);
            cat(
                nonneg(lo.as_ref(), hi.as_ref(), FracMode::IntegerOnly),
                Some(zeros.clone()),
            )
        })
    };
    alt([
        branch(pos),
        cat(Some("-".into()), branch(neg)),
        zero_in.then(|| "-?0".to_string()),
    ])
    .unwrap_or_else(|| NOTHING.to_string())
}

/// Lists the multiples of `k` in a bounded range, if both bounds exist, the arithmetic fits in
/// `i128` and the count is small; `Some(Err(TooLarge))` when only the count is too big.
fn enumerate_multiples(
    k: &Decimal,
    min: Option<&Bound>,
    max: Option<&Bound>,
    integer_only: bool,
) -> Option<Result<String, RegexError>> {
    let (min, max) = (min?, max?);
    let scale = k
        .frac
        .len()
        .max(min.value.frac.len())
        .max(max.value.frac.len());
    if scale > 30 {
        return None;
    }
    let kk = k.scaled_i128(scale)?;
    let a = min.value.scaled_i128(scale)?;
    let b = max.value.scaled_i128(scale)?;
    let mut qlo = a.div_euclid(kk) + i128::from(a.rem_euclid(kk) != 0);
    if min.exclusive && qlo.checked_mul(kk)? == a {
        qlo += 1;
    }
    let mut qhi = b.div_euclid(kk);
    if max.exclusive && qhi.checked_mul(kk)? == b {
        qhi -= 1;
    }
    if qhi < qlo {
        return Some(Ok(NOTHING.to_string()));
    }
    let count = qhi.checked_sub(qlo)?.checked_add(1)?;
    if count > MAX_ENUMERATED_MULTIPLES as i128 {
        return Some(Err(RegexError::TooLarge {
            what: "multipleOf enumeration".into(),
            limit: MAX_ENUMERATED_MULTIPLES,
            given: u64::try_from(count).unwrap_or(u64::MAX),
        }));
    }
    let unit = 10i128.checked_pow(scale as u32)?;
    let integer_forms = integer_only || k.frac.is_empty();
    let mut alts = Vec::new();
    for q in qlo..=qhi {
        let v = q.checked_mul(kk)?;
        let (ip, fp) = (
            v.unsigned_abs() / unit as u128,
            v.unsigned_abs() % unit as u128,
        );
        let frac = format!("{fp:0width$}", width = scale);
        let frac = frac.trim_end_matches('0');
        let sign = if v < 0 {
            "-"
        } else if v == 0 {
            "-?"
        } else {
            ""
        };
        if integer_forms {
            if frac.is_empty() {
                alts.push(Some(format!("{sign}{ip}")));
            }
        } else if frac.is_empty() {
            alts.push(Some(format!(r"{sign}{ip}(?:\.0+)?")));
        } else {
            alts.push(Some(format!(r"{sign}{ip}\.{frac}0*")));
        }
    }
    Some(Ok(alt(alts).unwrap_or_else(|| NOTHING.to_string())))
}

/// Greatest common divisor.
fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// Multiples of `m·10^e` with `m = 2^a·5^b` and bounds that are absent or zero, decided by the
/// last digits; `None` when the divisor has other factors or too many admissible suffixes.
fn two_five_multiples(
    m: &str,
    e: i64,
    min: Option<&Bound>,
    max: Option<&Bound>,
    integer_only: bool,
    remainder: bool,
) -> Option<String> {
    let mut mv: u64 = m.parse().ok()?;
    let m_orig = mv;
    let (mut a, mut b) = (0u32, 0u32);
    while mv % 2 == 0 {
        mv /= 2;
        a += 1;
    }
    while mv % 5 == 0 {
        mv /= 5;
        b += 1;
    }
    let t = a.max(b) as usize;
    let pow_t = 10u64.checked_pow(t as u32);
    let suffix_ok = mv == 1 && pow_t.is_some_and(|p| p / m_orig <= MAX_ENUMERATED_MULTIPLES);
    let pow_t = pow_t.unwrap_or(0);
    // Unsigned nonzero magnitudes that are multiples of k, as text.
    let magnitude = if !suffix_ok {
        // Other prime factors: the remainder automaton, if its regex stays small. Its digits
        // are not capped at 308 (module doc, "Finite doubles"): that is its product with a
        // digit counter, which has no compact regex (the tails do not share), so only
        // `multiple_of_uncapped` builds it, for a caller that drops the longer texts.
        if !remainder || e < 0 || m_orig > MAX_MODULUS {
            return None;
        }
        let re = DigitDfa::multiples(m_orig, false)
            .to_regex(MAX_MODULUS_REGEX)
            .ok()??;
        format!("{}{}", group(&re), "0".repeat(e as usize))
    } else if e >= 0 {
        // y · 10^e with y a multiple of m, y > 0: y small (< 10^t) or `[1-9][0-9]{0,n}` +
        // suffix, at most 308 digits in all.
        let e = e as usize;
        let zeros = "0".repeat(e);
        let small = (1..pow_t)
            .filter(|y| y % m_orig == 0 && y.to_string().len() + e <= MAX_INTEGER_DIGITS)
            .map(|y| Some(y.to_string()));
        let suffixes = (0..pow_t)
            .filter(|y| y % m_orig == 0)
            .map(|y| Some(format!("{y:0width$}", width = t)));
        let large = (t + e < MAX_INTEGER_DIGITS)
            .then(|| {
                let free = MAX_INTEGER_DIGITS - 1 - t - e;
                cat(Some(format!("[1-9][0-9]{{0,{free}}}")), alt(suffixes))
            })
            .flatten();
        cat(alt(small.chain([large])), Some(zeros))?
    } else {
        // x = N / 10^s with N a multiple of m: the last w = max(t, s) digits of N decide. They
        // are the last w - s digits of the integer part (zero-padded) and the s first
        // fraction digits; later fraction digits must be zeros.
        let s = (-e) as usize;
        let w = t.max(s);
        let pow_w = 10u64.checked_pow(w as u32)?;
        if pow_w / m_orig > MAX_ENUMERATED_MULTIPLES {
            return None;
        }
        let mut groups: Vec<(String, Vec<String>)> = Vec::new();
        for n in (0..pow_w).filter(|n| n % m_orig == 0) {
            let digits = format!("{n:0w$}");
            let (u, v) = digits.split_at(w - s);
            match groups.iter_mut().find(|(g, _)| g == u) {
                Some((_, vs)) => vs.push(v.to_string()),
                None => groups.push((u.to_string(), vec![v.to_string()])),
            }
        }
        let all_zero = |x: &str| x.bytes().all(|b| b == b'0');
        let frac_of = |v: &str| {
            let f = v.trim_end_matches('0');
            if f.is_empty() {
                r"(?:\.0+)?".to_string()
            } else {
                format!(r"\.{f}0*")
            }
        };
        let mut alts = Vec::new();
        for (u, vs) in &groups {
            let fracs = alt(vs.iter().map(|v| Some(frac_of(v))));
            let nonzero_fracs = alt(vs.iter().filter(|v| !all_zero(v)).map(|v| Some(frac_of(v))));
            // At most 308 integer digits: the leading digit, the free ones, then `u`.
            if let Some(free) = (MAX_INTEGER_DIGITS - 1).checked_sub(u.len()) {
                alts.push(cat(
                    Some(format!("[1-9][0-9]{{0,{free}}}{u}")),
                    fracs.clone(),
                ));
            }
            let small = u.trim_start_matches('0');
            if small.is_empty() {
                // Integer part 0: the value is zero unless the fraction is not.
                alts.push(cat(Some("0".into()), nonzero_fracs));
            } else {
                alts.push(cat(Some(small.to_string()), fracs));
            }
        }
        let re = alt(alts)?;
        if integer_only {
            // Integer multiples of m/10^s are the multiples of m / gcd(m, 10^s).
            let g = gcd(m_orig, 10u64.checked_pow(s as u32)?);
            return two_five_multiples(&(m_orig / g).to_string(), 0, min, max, true, remainder);
        }
        re
    };
    let zero = if integer_only || e >= 0 {
        "0".to_string()
    } else {
        r"0(?:\.0+)?".to_string()
    };
    let zero_ok = !min.is_some_and(|b| b.exclusive) && !max.is_some_and(|b| b.exclusive);
    let pos_ok = max.is_none();
    let neg_ok = min.is_none();
    // Share one copy of the (possibly large) magnitude between the two signs.
    let signed = match (pos_ok, neg_ok) {
        (true, true) => Some(format!("-?{}", group(&magnitude))),
        (true, false) => Some(magnitude),
        (false, true) => Some(format!("-{}", group(&magnitude))),
        (false, false) => None,
    };
    alt([signed, zero_ok.then(|| format!("-?{zero}"))]).or_else(|| Some(NOTHING.to_string()))
}

/// A deterministic automaton over the characters of a JSON number's text: what [`multiple_of`]
/// describes when its regex would be too large (divisibility by 11 is over 1 MB as a regex but
/// 11 states here).
///
/// The compiler can emit it as right-linear grammar rules: one rule per state, whose
/// alternatives are `edge lexeme, rule of the target` for each edge plus the empty alternative
/// when the state accepts. Each edge is a one-character lexeme (`[0-9]`-style class or `-`), so
/// nothing may be inserted between them (no whitespace). States are dense indices.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NumberAutomaton {
    /// The start state.
    pub start: usize,
    /// For each state, its edges: (regex of one character, target state).
    pub edges: Vec<Vec<(String, usize)>>,
    /// For each state, whether the number may end there.
    pub accepting: Vec<bool>,
}

/// The most states [`multiple_of_automaton`] builds (two per remainder plus three).
pub const MAX_AUTOMATON_STATES: u64 = 2 * 1024 + 3;

/// Canonical integers that are multiples of the integer `k`, with bounds that are absent or
/// zero (a lower bound in `(0, k]` counts as `exclusiveMinimum: 0`, an upper bound in `[-k, 0)`
/// as `exclusiveMaximum: 0`), as a [`NumberAutomaton`] with `2k + 3` states.
///
/// For the divisors [`multiple_of`] refuses because their remainder regex explodes. A
/// non-integer `k` or any other bound is `Unsupported`; `k` above 1,024 is `TooLarge`. Forms
/// follow [`multiple_of`]: canonical integers, `-0` where zero is allowed.
///
/// ```
/// use formwork_core::schema::regex::{multiple_of_automaton, Bound, Decimal};
/// let a = multiple_of_automaton(&"11".parse()?, Some(Bound::inclusive(Decimal::zero())), None)?;
/// assert_eq!(a.edges.len(), 25);
/// # Ok::<(), formwork_core::schema::regex::RegexError>(())
/// ```
pub fn multiple_of_automaton(
    k: &Decimal,
    min: Option<Bound>,
    max: Option<Bound>,
) -> Result<NumberAutomaton, RegexError> {
    let unsupported = |detail: &str| RegexError::unsupported("multipleOf", detail.to_string());
    if k.is_negative() || k.is_zero() || !k.frac.is_empty() {
        return Err(unsupported(
            "the automaton form needs a positive integer divisor",
        ));
    }
    let kv: u64 = k.int.parse().map_err(|_| RegexError::TooLarge {
        what: "multipleOf automaton divisor".into(),
        limit: (MAX_AUTOMATON_STATES - 3) / 2,
        given: u64::MAX,
    })?;
    if kv > (MAX_AUTOMATON_STATES - 3) / 2 {
        return Err(RegexError::TooLarge {
            what: "multipleOf automaton divisor".into(),
            limit: (MAX_AUTOMATON_STATES - 3) / 2,
            given: kv,
        });
    }
    let within_k = |b: &Bound| b.value.cmp_abs(k) != Ordering::Greater && !b.value.is_zero();
    let min = match min {
        Some(b) if !b.value.is_negative() && within_k(&b) => {
            Some(Bound::exclusive(Decimal::zero()))
        }
        other => other,
    };
    let max = match max {
        Some(b) if b.value.is_negative() && within_k(&b) => Some(Bound::exclusive(Decimal::zero())),
        other => other,
    };
    if !min.as_ref().is_none_or(|b| b.value.is_zero())
        || !max.as_ref().is_none_or(|b| b.value.is_zero())
    {
        return Err(unsupported(
            "the automaton form supports only bounds at zero (or within one divisor of it)",
        ));
    }
    let zero_ok =
        !min.as_ref().is_some_and(|b| b.exclusive) && !max.as_ref().is_some_and(|b| b.exclusive);
    let pos_ok = max.is_none();
    let neg_ok = min.is_none();
    // States: 0 start, 1 after `-`, 2 zero, 3 + r positive remainder r, 3 + k + r negative.
    let k = kv as usize;
    let n = 3 + 2 * k;
    let mut edges: Vec<Vec<(String, usize)>> = vec![Vec::new(); n];
    let mut accepting = vec![false; n];
    accepting[2] = zero_ok;
    accepting[3] = pos_ok;
    accepting[3 + k] = neg_ok;
    let mut add = |from: usize, digits: &[(u8, usize)]| {
        let mut groups: Vec<(Vec<u8>, usize)> = Vec::new();
        for &(d, to) in digits {
            match groups.iter_mut().find(|(_, t)| *t == to) {
                Some((ds, _)) => ds.push(d),
                None => groups.push((vec![d], to)),
            }
        }
        edges[from] = groups
            .into_iter()
            .map(|(ds, t)| (digit_class(&ds), t))
            .collect();
    };
    let first = |base: usize| -> Vec<(u8, usize)> {
        (1..10u8).map(|d| (d, base + usize::from(d) % k)).collect()
    };
    let mut start: Vec<(u8, usize)> = Vec::new();
    if zero_ok {
        start.push((0, 2));
    }
    if pos_ok {
        start.extend(first(3));
    }
    add(0, &start);
    let mut after_minus: Vec<(u8, usize)> = Vec::new();
    if zero_ok {
        after_minus.push((0, 2));
    }
    if neg_ok {
        after_minus.extend(first(3 + k));
    }
    add(1, &after_minus);
    for base in [3, 3 + k] {
        for r in 0..k {
            let next: Vec<(u8, usize)> = (0..10u8)
                .map(|d| (d, base + (r * 10 + usize::from(d)) % k))
                .collect();
            add(base + r, &next);
        }
    }
    if neg_ok || zero_ok {
        edges[0].push(("-".to_string(), 1));
    }
    Ok(NumberAutomaton {
        start: 0,
        edges,
        accepting,
    })
}

/// A small DFA over decimal digits, rendered to a regex by state elimination.
struct DigitDfa {
    /// `edges[s]`: (digit set, target) pairs.
    edges: Vec<Vec<(Vec<u8>, usize)>>,
    start: usize,
    accepting: Vec<bool>,
}

impl DigitDfa {
    /// Canonical non-negative integers (no sign) that are multiples of `k` (`0` included only
    /// with `include_zero`).
    fn multiples(k: u64, include_zero: bool) -> DigitDfa {
        // States: 0 = start, 1 = "0" seen, 2 + r = value ≡ r (mod k).
        let n = k as usize + 2;
        let mut edges = vec![Vec::new(); n];
        let mut add = |from: usize, d: u8, to: usize| {
            let list: &mut Vec<(Vec<u8>, usize)> = &mut edges[from];
            match list.iter_mut().find(|(_, t)| *t == to) {
                Some((ds, _)) => ds.push(d),
                None => list.push((vec![d], to)),
            }
        };
        add(0, 0, 1);
        for d in 1..10u8 {
            add(0, d, 2 + (u64::from(d) % k) as usize);
        }
        for r in 0..k {
            for d in 0..10u8 {
                add(
                    2 + r as usize,
                    d,
                    2 + ((r * 10 + u64::from(d)) % k) as usize,
                );
            }
        }
        let mut accepting = vec![false; n];
        accepting[1] = include_zero;
        accepting[2] = true;
        DigitDfa {
            edges,
            start: 0,
            accepting,
        }
    }

    /// The regex by state elimination; `Err(TooLarge)` when it grows past `limit` bytes.
    fn to_regex(&self, limit: usize) -> Result<Option<String>, RegexError> {
        let n = self.edges.len();
        // Matrix over states 0..n plus a final state n.
        let fin = n;
        let mut m: Vec<Vec<Option<String>>> = vec![vec![None; n + 1]; n + 1];
        for (s, list) in self.edges.iter().enumerate() {
            for (ds, t) in list {
                m[s][*t] = alt([m[s][*t].take(), Some(digit_class(ds))]);
            }
            if self.accepting[s] {
                m[s][fin] = alt([m[s][fin].take(), Some(String::new())]);
            }
        }
        let mut alive: Vec<usize> = (0..n).filter(|&s| s != self.start).collect();
        let too_large = |given: usize| RegexError::TooLarge {
            what: "multipleOf automaton as a regex".into(),
            limit: limit as u64,
            given: given as u64,
        };
        while !alive.is_empty() {
            // Eliminate the state with the fewest in × out edges first.
            let cost = |q: usize, m: &Vec<Vec<Option<String>>>| {
                let ins = (0..=n).filter(|&i| i != q && m[i][q].is_some()).count();
                let outs = (0..=n).filter(|&j| j != q && m[q][j].is_some()).count();
                ins * outs
            };
            let (pos, &q) = alive
                .iter()
                .enumerate()
                .min_by_key(|(_, &q)| cost(q, &m))
                .ok_or_else(|| too_large(0))?;
            alive.swap_remove(pos);
            let self_loop = m[q][q].take().map(|r| format!("(?:{r})*"));
            let ins: Vec<usize> = (0..=n).filter(|&i| i != q && m[i][q].is_some()).collect();
            let outs: Vec<usize> = (0..=n).filter(|&j| j != q && m[q][j].is_some()).collect();
            for &i in &ins {
                for &j in &outs {
                    let via = format!(
                        "{}{}{}",
                        group(m[i][q].as_deref().unwrap_or_default()),
                        self_loop.as_deref().unwrap_or_default(),
                        group(m[q][j].as_deref().unwrap_or_default())
                    );
                    m[i][j] = alt([m[i][j].take(), Some(via)]);
                    let size = m[i][j].as_ref().map_or(0, String::len);
                    if size > limit {
                        return Err(too_large(size));
                    }
                }
            }
            for row in m.iter_mut() {
                row[q] = None;
            }
            m[q].iter_mut().for_each(|cell| *cell = None);
        }
        let start_loop = m[self.start][self.start].take();
        Ok(m[self.start][fin].take().map(|r| match start_loop {
            Some(l) => format!("(?:{l})*{}", group(&r)),
            None => r,
        }))
    }
}

/// Wraps an alternation-bearing piece so it concatenates safely.
fn group(r: &str) -> String {
    if r.contains('|') && !(r.starts_with("(?:") && r.ends_with(')') && balanced_single(r)) {
        format!("(?:{r})")
    } else {
        r.to_string()
    }
}

/// Whether `r` is one `(?:...)` group spanning the whole string.
fn balanced_single(r: &str) -> bool {
    let mut depth = 0i32;
    let mut escaped = false;
    let mut in_class = false;
    for (i, c) in r.char_indices() {
        if escaped {
            escaped = false;
            continue;
        }
        match c {
            '\\' => escaped = true,
            '[' => in_class = true,
            ']' => in_class = false,
            '(' if !in_class => depth += 1,
            ')' if !in_class => {
                depth -= 1;
                if depth == 0 && i + 1 != r.len() {
                    return false;
                }
            }
            _ => {}
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{check, full};
    use super::*;
    use proptest::prelude::*;

    pub(super) fn d(s: &str) -> Decimal {
        s.parse().unwrap()
    }

    pub(super) fn incl(s: &str) -> Option<Bound> {
        Some(Bound::inclusive(d(s)))
    }

    pub(super) fn excl(s: &str) -> Option<Bound> {
        Some(Bound::exclusive(d(s)))
    }

    #[test]
    fn decimal_parsing_is_exact_and_canonical() {
        assert_eq!(d("1.50").to_string(), "1.5");
        assert_eq!(d("-0.0").to_string(), "0");
        assert_eq!(d("1e3").to_string(), "1000");
        assert_eq!(d("12.5e-3").to_string(), "0.0125");
        assert_eq!(d("007").to_string(), "7");
        assert_eq!(Decimal::from_f64(0.1).unwrap().to_string(), "0.1");
        assert_eq!(
            Decimal::from_f64(-2.5e-7).unwrap().to_string(),
            "-0.00000025"
        );
        assert!(Decimal::from_f64(f64::NAN).is_err());
        assert!("1e99999".parse::<Decimal>().is_err());
        assert!("abc".parse::<Decimal>().is_err());
        let json: serde_json::Value =
            serde_json::from_str("[1e300, 0.1, -7, 18446744073709551615]").unwrap();
        let texts: Vec<String> = json
            .as_array()
            .unwrap()
            .iter()
            .map(|v| {
                Decimal::try_from(v.as_number().unwrap())
                    .unwrap()
                    .to_string()
            })
            .collect();
        assert_eq!(texts[0].len(), 301);
        assert_eq!(&texts[1..], ["0.1", "-7", "18446744073709551615"]);
        assert_eq!(d("1.25").mantissa_exp(), ("125".into(), -2));
        assert_eq!(d("500").mantissa_exp(), ("5".into(), 2));
    }

    #[test]
    fn integer_ranges_hand_written() {
        let re = integer_range(Some(-5), Some(120)).unwrap();
        check(
            &re,
            &["-5", "-0", "0", "9", "10", "99", "100", "120", "-1"],
            &["-6", "121", "007", "00", "+5", "1.0", "1e2", ""],
        );
        let re = integer_range(Some(10), None).unwrap();
        check(
            &re,
            &["10", "11", "99", "100", "123456789"],
            &["9", "0", "-0", "-10"],
        );
        let re = integer_range(None, Some(-3)).unwrap();
        check(&re, &["-3", "-4", "-100"], &["-2", "0", "-0", "3"]);
        let re = integer_range(None, None).unwrap();
        check(&re, &["0", "-0", "17", "-17"], &["01", "", "-"]);
        assert_eq!(integer_range(Some(5), Some(4)).unwrap(), NOTHING);
        let re = integer_range(Some(i128::MIN), Some(i128::MAX)).unwrap();
        check(
            &re,
            &[
                "170141183460469231731687303715884105727",
                "-170141183460469231731687303715884105728",
            ],
            &["170141183460469231731687303715884105728"],
        );
    }

    #[test]
    fn decimal_ranges_hand_written() {
        let re = number_range(incl("0.5"), excl("2.25"), false).unwrap();
        check(
            &re,
            &[
                "0.5", "0.50", "0.51", "1", "1.0", "2", "2.2", "2.24999", "0.9",
            ],
            &[
                "0.49", "0.4999", "2.25", "2.250", "2.3", "3", "0", "-1", "1e0", "0.5e0",
            ],
        );
        let re = number_range(excl("-1"), incl("0"), false).unwrap();
        check(
            &re,
            &["-0.5", "0", "-0", "-0.999", "0.000"],
            &["-1", "-1.0", "0.001", "1", "-1.5"],
        );
        let re = number_range(excl("0"), None, false).unwrap();
        check(
            &re,
            &["0.001", "1", "1e5", "1E-5", "0.1e-3", "12.5"],
            &["0", "-0", "0.000", "0e5", "-1", "-0.1"],
        );
        let re = number_range(incl("0"), None, false).unwrap();
        check(
            &re,
            &["0", "-0", "-0.0e3", "5e10"],
            &["-1", "-0.1", "-1e-9"],
        );
        let re = number_range(excl("1"), excl("2"), true).unwrap();
        assert_eq!(re, NOTHING);
        let re = number_range(incl("1.5"), incl("4.5"), true).unwrap();
        check(&re, &["2", "3", "4"], &["1", "5", "2.0", "1.5"]);
        assert_eq!(number_range(incl("3"), excl("3"), false).unwrap(), NOTHING);
        // Found by `arbitrary_bounds_end_in_a_result`: 81 fraction digits nest past
        // regex-syntax's limit; that must be a TooLarge error, not an unparsable regex.
        assert!(matches!(
            number_range(incl("-0.1"), incl("0.1e-80"), false),
            Err(RegexError::TooLarge { .. })
        ));
        let re = number_range(incl("3"), incl("3"), false).unwrap();
        check(&re, &["3", "3.0", "3.000"], &["3.01", "2.99"]);
    }

    #[test]
    fn multiples_hand_written() {
        let re = multiple_of(&d("0.01"), incl("0"), incl("10"), false).unwrap();
        check(
            &re,
            &["0", "0.01", "9.99", "10", "10.00", "3.1", "3.10"],
            &["0.001", "10.01", "-0.01", "3.141", "11"],
        );
        let re = multiple_of(&d("100"), incl("-250"), None, true).unwrap();
        check(
            &re,
            &["-200", "-100", "0", "-0", "100", "1000", "123400"],
            &["-300", "50", "150", "00", "10"],
        );
        let re = multiple_of(&d("0.5"), incl("0"), incl("3"), false).unwrap();
        check(
            &re,
            &["0", "0.5", "1", "1.5", "3", "2.50", "-0"],
            &["0.25", "3.5", "-0.5", "1.2"],
        );
        let re = multiple_of(&d("5"), incl("0"), None, true).unwrap();
        check(&re, &["0", "5", "10", "1235"], &["-5", "1", "12", "05"]);
        let re = multiple_of(&d("0.25"), None, None, false).unwrap();
        check(
            &re,
            &["0", "0.25", "-1.75", "3", "12.5", "12.50"],
            &["0.2", "1.1", "0.125"],
        );
        // Divisors with other prime factors on open ranges: a remainder automaton, which
        // cannot be capped at 308 digits (module doc, "Finite doubles"): only uncapped, for a
        // caller that drops the longer texts. Bounded, they are enumerated.
        let uncapped = |k: &str, min: Option<Bound>, max: Option<Bound>| {
            assert!(multiple_of(&d(k), min.clone(), max.clone(), true).is_err());
            let (re, uncapped) = multiple_of_uncapped(&d(k), min, max, true).unwrap();
            assert!(uncapped, "{k}");
            re
        };
        let re = uncapped("3", None, None);
        check(
            &re,
            &["0", "-0", "3", "-9", "12", "1002"],
            &["1", "-10", "03", "1001"],
        );
        let re = uncapped("7", incl("2"), None);
        check(&re, &["7", "14", "700", "1001"], &["0", "-7", "8", "1000"]);
        let re = multiple_of(&d("7"), incl("2"), incl("1001"), true).unwrap();
        check(&re, &["7", "14", "700", "1001"], &["0", "-7", "8", "1000"]);
        let re = uncapped("30", None, incl("-5"));
        check(&re, &["-30", "-60", "-1230"], &["0", "30", "-20", "-31"]);
        assert_eq!(
            multiple_of_uncapped(&d("4"), None, None, true).map(|(_, u)| u),
            Ok(false)
        );
        let re = multiple_of(&d("2.5"), incl("2"), None, false).unwrap();
        check(
            &re,
            &["2.5", "5", "7.5", "10", "12.50", "102.5", "1000"],
            &["0", "2", "1.25", "12.6", "-2.5", "3.5"],
        );
        let re = multiple_of(&d("2.5"), incl("15"), incl("30"), true).unwrap();
        check(&re, &["15", "20", "30"], &["17.5", "16", "35"]);
        let re = multiple_of(&d("2.5"), None, None, true).unwrap();
        check(&re, &["0", "5", "-15"], &["2.5", "7"]);
        // One side unbounded, the other beyond zero (MaskBench: multipleOf 5, maximum 80).
        let re = multiple_of(&d("5"), None, incl("80"), true).unwrap();
        check(
            &re,
            &["80", "0", "-0", "5", "-5", "-1000"],
            &["85", "81", "3", "-3"],
        );
        let re = multiple_of(&d("4"), excl("-9"), None, true).unwrap();
        check(&re, &["-8", "0", "4", "300"], &["-12", "-9", "1"]);
        let re = multiple_of(&d("1"), excl("2"), None, false).unwrap();
        check(&re, &["3", "100"], &["2", "2.5"]);
        assert!(matches!(
            multiple_of(&d("11"), incl("0"), None, true),
            Err(RegexError::Unsupported { .. })
        ));
        assert!(matches!(
            multiple_of(&d("11"), incl("0"), incl("1000000"), true),
            Err(RegexError::TooLarge { .. })
        ));
        assert!(multiple_of(&d("0"), None, None, true).is_err());
    }

    /// Compares a value given as text with a bound, exactly (test-only reference).
    fn in_range(x: &Decimal, min: &Option<Bound>, max: &Option<Bound>) -> bool {
        let cmp = |a: &Decimal, b: &Decimal| -> Ordering {
            match (a.negative, b.negative) {
                (false, true) => Ordering::Greater,
                (true, false) => Ordering::Less,
                (false, false) => a.cmp_abs(b),
                (true, true) => b.cmp_abs(a),
            }
        };
        let lo_ok = min.as_ref().is_none_or(|b| match cmp(x, &b.value) {
            Ordering::Greater => true,
            Ordering::Equal => !b.exclusive,
            Ordering::Less => false,
        });
        let hi_ok = max.as_ref().is_none_or(|b| match cmp(x, &b.value) {
            Ordering::Less => true,
            Ordering::Equal => !b.exclusive,
            Ordering::Greater => false,
        });
        lo_ok && hi_ok
    }

    fn decimal_text() -> impl Strategy<Value = String> {
        (
            any::<bool>(),
            0u32..3000,
            proptest::option::of(0u32..1000),
            0usize..4,
        )
            .prop_map(|(neg, i, f, scale)| {
                let mut s = String::new();
                if neg {
                    s.push('-');
                }
                s.push_str(&i.to_string());
                if let Some(f) = f {
                    let frac = format!("{:04}", f);
                    s.push('.');
                    s.push_str(&frac[..scale.max(1)]);
                }
                s
            })
    }

    fn bound() -> impl Strategy<Value = Option<Bound>> {
        proptest::option::of((decimal_text(), any::<bool>()).prop_map(|(t, ex)| Bound {
            value: t.parse().unwrap(),
            exclusive: ex,
        }))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn number_range_agrees_with_comparison(
            min in bound(),
            max in bound(),
            probes in proptest::collection::vec(decimal_text(), 40),
        ) {
            let re = number_range(min.clone(), max.clone(), false).unwrap();
            let r = full(&re);
            for p in &probes {
                let v: Decimal = p.parse().unwrap();
                prop_assert_eq!(r.is_match(p), in_range(&v, &min, &max), "{} in {:?}..{:?}: {}", p, min, max, re);
            }
        }

        /// Arbitrary bound texts (exponents, huge or tiny magnitudes) end in a compiling regex or
        /// a typed error, never a panic.
        #[test]
        fn arbitrary_bounds_end_in_a_result(
            a in "-?[0-9]{1,30}(\\.[0-9]{1,30})?([eE][-+]?[0-9]{1,3})?",
            b in "-?[0-9]{1,30}(\\.[0-9]{1,30})?([eE][-+]?[0-9]{1,3})?",
            ex in any::<(bool, bool)>(),
            k in "[0-9]{1,3}(\\.[0-9]{1,3})?",
        ) {
            let (Ok(a), Ok(b), Ok(k)) = (a.parse::<Decimal>(), b.parse::<Decimal>(), k.parse::<Decimal>()) else {
                return Ok(());
            };
            let lo = Some(Bound { value: a, exclusive: ex.0 });
            let hi = Some(Bound { value: b, exclusive: ex.1 });
            for integer_only in [false, true] {
                if let Ok(re) = number_range(lo.clone(), hi.clone(), integer_only) {
                    full(&re);
                }
                if let Ok(re) = multiple_of(&k, lo.clone(), None, integer_only) {
                    full(&re);
                }
            }
        }

        #[test]
        fn integer_range_agrees_with_comparison(
            lo in proptest::option::of(-5000i128..5000),
            hi in proptest::option::of(-5000i128..5000),
            probes in proptest::collection::vec(-6000i128..6000, 40),
        ) {
            let r = full(&integer_range(lo, hi).unwrap());
            for p in probes {
                let want = lo.is_none_or(|l| p >= l) && hi.is_none_or(|h| p <= h);
                prop_assert_eq!(r.is_match(&p.to_string()), want);
            }
        }

        #[test]
        fn multiple_of_agrees_with_arithmetic(
            k in prop_oneof![Just("0.1"), Just("0.01"), Just("0.5"), Just("0.25"), Just("3"), Just("10"), Just("1"), Just("0.3"), Just("2.5"), Just("1.25"), Just("6")],
            min in bound(),
            max in bound(),
            probes in proptest::collection::vec(decimal_text(), 40),
        ) {
            let kd = d(k);
            let Ok(re) = multiple_of(&kd, min.clone(), max.clone(), false) else {
                return Ok(());
            };
            let r = full(&re);
            let kk = kd.scaled_i128(6).unwrap();
            for p in &probes {
                let v: Decimal = p.parse().unwrap();
                let vv = v.scaled_i128(6).unwrap();
                let want = vv % kk == 0 && in_range(&v, &min, &max);
                // Accepting is exact; a valid value may only be missed in its non-canonical
                // integer form (`3.0` for an integer multiple), which is documented.
                if r.is_match(p) {
                    prop_assert!(want, "{} accepted by multipleOf {} in {:?}..{:?}", p, k, min, max);
                } else if want {
                    prop_assert!(kd.frac.is_empty() && p.contains('.'), "{} rejected by multipleOf {}: {}", p, k, re);
                }
            }
        }
    }
}

#[cfg(test)]
mod dfa_tests {
    use super::super::testutil::full;
    use super::*;

    /// Runs a [`NumberAutomaton`] on a text (edge classes are single characters or digit
    /// classes, checked with a compiled regex each).
    fn run(a: &NumberAutomaton, text: &str) -> bool {
        thread_local! {
            static CACHE: std::cell::RefCell<std::collections::HashMap<String, regex_automata::meta::Regex>> =
                Default::default();
        }
        let mut state = a.start;
        for c in text.chars() {
            let s = c.to_string();
            let next = a.edges[state].iter().find(|(class, _)| {
                CACHE.with(|cache| {
                    cache
                        .borrow_mut()
                        .entry(class.clone())
                        .or_insert_with(|| full(class))
                        .is_match(&s)
                })
            });
            match next {
                Some((_, t)) => state = *t,
                None => return false,
            }
        }
        a.accepting[state]
    }

    #[test]
    fn number_automaton_is_exact() {
        let k: Decimal = "11".parse().unwrap();
        let a = multiple_of_automaton(&k, None, None).unwrap();
        for v in -400i64..400 {
            assert_eq!(run(&a, &v.to_string()), v % 11 == 0, "{v}");
        }
        assert!(run(&a, "-0") && !run(&a, "011") && !run(&a, "-") && !run(&a, ""));
        let a =
            multiple_of_automaton(&k, Some(Bound::inclusive("5".parse().unwrap())), None).unwrap();
        for v in -100i64..400 {
            assert_eq!(run(&a, &v.to_string()), v > 0 && v % 11 == 0, "{v}");
        }
        assert!(!run(&a, "-0") && !run(&a, "0"));
        let a = multiple_of_automaton(&k, None, Some(Bound::inclusive(Decimal::zero()))).unwrap();
        assert!(run(&a, "-22") && run(&a, "0") && !run(&a, "22"));
        assert!(multiple_of_automaton(&"1.5".parse().unwrap(), None, None).is_err());
        assert!(
            multiple_of_automaton(&k, Some(Bound::inclusive("100".parse().unwrap())), None)
                .is_err()
        );
        assert!(matches!(
            multiple_of_automaton(&"5000".parse().unwrap(), None, None),
            Err(RegexError::TooLarge { .. })
        ));
    }

    #[test]
    fn remainder_automaton_regex_is_exact() {
        for k in [2u64, 3, 6, 7] {
            let re = DigitDfa::multiples(k, true)
                .to_regex(1 << 20)
                .unwrap()
                .unwrap();
            let rx = full(&re);
            for v in 0..1500u64 {
                assert_eq!(rx.is_match(&v.to_string()), v % k == 0, "{k} {v}");
            }
            assert!(!rx.is_match("03") && !rx.is_match("00"));
        }
        assert!(matches!(
            DigitDfa::multiples(11, true).to_regex(MAX_MODULUS_REGEX),
            Err(RegexError::TooLarge { .. })
        ));
    }
}

/// The finite-double cap (module doc, "Finite doubles"; issue 19).
#[cfg(test)]
mod finite_tests {
    use super::super::testutil::{check, full};
    use super::tests::{d, excl, incl};
    use super::*;
    use proptest::prelude::*;
    use regex_automata::meta::Regex;

    /// The rule of the module doc's "Finite doubles" on a JSON number's text: at most 308
    /// integer digits; an exponent without `-` after at most 16 of them and at most 308 minus
    /// their count (leading zeros and `+` allowed); any negative exponent.
    fn finite_rule(text: &str) -> bool {
        let t = text.strip_prefix('-').unwrap_or(text);
        let (mantissa, exp) = match t.find(['e', 'E']) {
            Some(i) => (&t[..i], Some(&t[i + 1..])),
            None => (t, None),
        };
        let digits = mantissa.split('.').next().unwrap_or("").len();
        match exp {
            _ if digits > MAX_INTEGER_DIGITS => false,
            Some(x) if !x.starts_with('-') && digits > MAX_EXPONENT_INTEGER_DIGITS => false,
            Some(x) if !x.starts_with('-') => {
                let x = x.trim_start_matches('+').trim_start_matches('0');
                x.len() <= 3 && x.parse::<usize>().unwrap_or(0) + digits <= MAX_INTEGER_DIGITS
            }
            _ => true,
        }
    }

    /// Whether serde_json (without `arbitrary_precision`, as formwork's extraction reads
    /// output) reads `text` as a finite number.
    fn serde_finite(text: &str) -> bool {
        serde_json::from_str::<serde_json::Value>(text)
            .ok()
            .and_then(|v| v.as_f64())
            .is_some_and(f64::is_finite)
    }

    /// Issue 19: `{"type": "integer"}` let a model write a 400-digit integer, valid JSON that
    /// serde_json refuses ("number out of range"), and `1e999` was grammatical too. Unbounded
    /// numbers now stop at 308 integer digits and couple a positive exponent to them.
    #[test]
    fn unbounded_numbers_stay_finite_doubles() {
        let digits = |n: usize| format!("9{}", "0".repeat(n - 1));
        let (d308, d309, d400) = (digits(308), digits(309), digits(400));
        let long_fraction = format!("1.{}1", "0".repeat(500));
        let integers = number_range(None, None, true).unwrap();
        check(
            &integers,
            &["0", "-0", "7", &d308, &format!("-{d308}")],
            &[&d309, &d400, &format!("-{d309}"), "1e5"],
        );
        let numbers = number_range(None, None, false).unwrap();
        // The cost of the cap, measured: NFA states of the lexemes every JSON value offers.
        let states = |re: &str| {
            regex_automata::nfa::thompson::NFA::new(re)
                .unwrap()
                .states()
                .len()
        };
        let (n_states, i_states) = (states(&numbers), states(&integers));
        eprintln!("NFA states: number {n_states}, integer {i_states}");
        assert!(
            n_states < 1_500 && i_states < 1_500,
            "{n_states} {i_states}"
        );
        assert!(numbers.len() < 4_000, "{} bytes", numbers.len());
        let yes = [
            "0",
            "-0",
            "1.5",
            &d308,
            &long_fraction,
            "1e307",
            "1E+307",
            "1e0000307",
            "9.99e307",
            "12e306",
            "0.5e307",
            "0e307",
            "-1e307",
            "1e-400",
            "1e-99999999999999999999",
            "0.0001e-5",
            &format!("{d308}e-0"),
            &format!("{d308}e-5"),
            &format!("{d308}.5"),
            "1234567890123456e292",
            "1.5e+00300",
        ];
        let no = [
            &d309,
            &d400,
            "1e308",
            "1e400",
            "1e999",
            "10e307",
            "1e0308",
            "0e308",
            "-1e308",
            "1E+400",
            &format!("{d308}e1"),
            &format!("{d309}e-5"),
            &format!("{d309}.0"),
            &format!("{d308}e0"),
            "1234567890123456e293",
            "12345678901234567e0",
        ];
        check(&numbers, &yes, &no);
        for t in yes {
            assert!(serde_finite(t), "{t}");
        }
        for t in [&d309, &d400, "1e400", "1e999", "-1e400"] {
            assert!(!serde_finite(t), "{t} should overflow");
        }
        // Ranges open on one side, sign-only and multiples are capped the same way.
        let capped = [
            number_range(incl("5"), None, true).unwrap(),
            number_range(None, excl("-2.5"), false).unwrap(),
            number_range(excl("0"), None, false).unwrap(),
            multiple_of(&d("2"), None, None, true).unwrap(),
            multiple_of(&d("0.25"), incl("0"), None, false).unwrap(),
            multiple_of(&d("100"), None, None, true).unwrap(),
            multiple_of(&d("0.01"), None, None, false).unwrap(),
        ];
        for re in &capped {
            let r = full(re);
            for t in [d309.as_str(), d400.as_str(), "1e400"] {
                for t in [t.to_string(), format!("-{t}")] {
                    assert!(!r.is_match(&t), "{t} should not match {re}");
                }
            }
            assert!(r.is_match(&format!("-{d308}")) || r.is_match(&d308), "{re}");
        }
    }

    /// A bound only numbers of magnitude 1e308 and more satisfy is reported, not compiled to
    /// an empty range; one just below keeps a non-empty range.
    #[test]
    fn bounds_beyond_the_finite_range_are_named() {
        let big = Bound::inclusive(magnitude_limit());
        let neg = Bound::exclusive(Decimal {
            negative: true,
            ..magnitude_limit()
        });
        assert_eq!(beyond_finite_range(Some(&big), None), Some("minimum"));
        assert_eq!(
            beyond_finite_range(None, Some(&neg)),
            Some("exclusiveMaximum")
        );
        let just_below = Bound::inclusive(d(&"9".repeat(308)));
        assert_eq!(beyond_finite_range(Some(&just_below), None), None);
        let re = number_range(Some(just_below), None, true).unwrap();
        check(
            &re,
            &[&"9".repeat(308)],
            &[&format!("1{}", "0".repeat(308))],
        );
        // `maximum: 1.7976931348623157e308` (f64::MAX) is clamped, not refused.
        let max = Bound::inclusive(Decimal::from_f64(f64::MAX).unwrap());
        assert_eq!(beyond_finite_range(None, Some(&max)), None);
        let re = number_range(Some(Bound::inclusive(Decimal::zero())), Some(max), false).unwrap();
        check(
            &re,
            &["0", &"9".repeat(308)],
            &[&format!("1{}", "0".repeat(308))],
        );
        // A divisor whose multiples need a remainder automaton is refused on an open range.
        let e = multiple_of(&d("3"), incl("0"), None, true).unwrap_err();
        assert!(e.to_string().contains("308 integer digits"), "{e}");
    }

    fn number_text() -> impl Strategy<Value = String> {
        let int = prop_oneof![
            Just("0".to_string()),
            (1u8..10, 0usize..320, 0u8..10).prop_map(|(first, len, fill)| {
                format!("{first}{}", fill.to_string().repeat(len))
            }),
        ];
        let frac = proptest::option::of(prop_oneof![
            Just("0".to_string()),
            Just("25".to_string()),
            Just("0".repeat(400)),
        ]);
        let exp = proptest::option::of((
            prop_oneof![Just(""), Just("+"), Just("-")],
            0usize..4,
            prop_oneof![0u64..400, Just(99_999_999_999_999_999)],
        ));
        (any::<bool>(), int, frac, exp).prop_map(|(neg, int, frac, exp)| {
            let mut t = if neg { format!("-{int}") } else { int };
            if let Some(f) = frac {
                t = format!("{t}.{f}");
            }
            if let Some((sign, zeros, x)) = exp {
                t = format!("{t}e{sign}{}{x}", "0".repeat(zeros));
            }
            t
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// The unbounded number regexes accept exactly the texts of the finite rule, and each
        /// parses with serde_json to a finite value.
        #[test]
        fn unbounded_numbers_accept_exactly_the_finite_rule(t in number_text()) {
            thread_local! {
                static RES: (Regex, Regex) = (
                    full(&number_range(None, None, false).unwrap()),
                    full(&number_range(None, None, true).unwrap()),
                );
            }
            let (number, integer) = RES.with(|(n, i)| (n.is_match(&t), i.is_match(&t)));
            prop_assert_eq!(number, finite_rule(&t), "{}", t);
            let plain = !t.contains(['.', 'e', 'E']);
            prop_assert_eq!(integer, plain && finite_rule(&t), "{}", t);
            if number {
                prop_assert!(serde_finite(&t), "{} is accepted but not a finite double", t);
            }
        }
    }
}
