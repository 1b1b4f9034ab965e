//! The compiler's view of the regex building blocks: lexeme regexes for strings, numbers and
//! object keys, and value tests for `enum` filtering and property-name matching.
//!
//! Owns the adaptation between the IR ([`StringSchema`], [`NumberSchema`]) and regex strings,
//! plus the one construction the regex module does not provide: a JSON string whose decoded
//! value is *not* in a finite set ([`string_except`]), used for `additionalProperties` keys and
//! `not: {enum: [...]}`. Regexes are in `regex-syntax` syntax and implicitly anchored (they are
//! whole lexemes); [`string_except`] returns an HIR instead, built without a parse (its
//! regexes are the largest a schema has). Costs: [`string_except`] is linear in the total
//! length of the excluded names; value tests compile one regex per call.

use std::collections::BTreeMap;
use std::sync::Arc;

use regex_automata::dfa::{dense, Automaton, StartKind};
use regex_automata::util::start;
use regex_automata::Anchored;
use regex_syntax::hir::{Class, ClassUnicode, ClassUnicodeRange, Hir, Repetition};

use super::error::SchemaError;
use super::ir::{Bound, NumberSchema, StringSchema};
use super::regex::{self, RegexError};

/// One JSON-encoded string unit that is not an escape.
const RAW: &str = r#"[^"\\\x00-\x1F]"#;
/// One escape sequence.
const ESC: &str = r#"\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4})"#;

/// The generic JSON string (with quotes).
pub fn any_string() -> String {
    format!(r#""(?:{RAW}|{ESC})*""#)
}

/// Every JSON string as the string encoder spells the strings of a pattern (`regex::json_string`:
/// `\"`, `\\`, `/` or `\/`, control characters escaped, every other character raw): the
/// keys of an object with `patternProperties`, so that a name's spellings are all inside a
/// pattern's key lexeme when the name matches the pattern, and all outside when it does not.
pub fn json_key_space() -> String {
    super::regex::json_string(None, 0, None).expect("the unconstrained string encodes")
}

/// The generic JSON number, restricted to the texts JSON parsers read as finite doubles: at
/// most 308 integer digits, and a positive exponent at most 308 minus their count
/// (`regex::number_range`'s module doc, "Finite doubles"; issue 19: a 400-digit integer a
/// model wrote was valid JSON that serde_json refused as "number out of range"). Built once.
pub fn any_number() -> &'static str {
    static ANY: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        regex::number_range(None, None, false).expect("the unbounded number regex builds")
    });
    &ANY
}

/// [`any_number`] parsed, for [`GrammarBuilder::lexeme_parsed`](crate::grammar::GrammarBuilder::lexeme_parsed):
/// every grammar has the generic number lexeme, and parsing its 1.6 kB took 0.28 ms, a deep
/// clone of the parse 35 us and printing it back 12 us (measured); an `Arc` is shared instead.
pub fn any_number_hir() -> Arc<Hir> {
    static ANY: std::sync::LazyLock<Arc<Hir>> = std::sync::LazyLock::new(|| {
        Arc::new(
            regex_syntax::Parser::new()
                .parse(any_number())
                .expect("the unbounded number regex parses"),
        )
    });
    ANY.clone()
}

/// The generic JSON integer (canonical form), at most 308 digits (see [`any_number`]).
pub const ANY_INTEGER: &str = r"-?(?:0|[1-9][0-9]{0,307})";

/// Why a regex could not be built; becomes a [`SchemaError`] once the pointer is known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegexFail {
    /// A construct that cannot be made exact.
    Unsupported {
        /// The keyword the failure is charged to.
        keyword: String,
        /// Why.
        detail: String,
    },
    /// Bad input (e.g. a pattern that does not parse).
    Invalid {
        /// The keyword.
        keyword: String,
        /// What is wrong.
        message: String,
    },
    /// A budget.
    TooLarge {
        /// What.
        what: String,
        /// Limit.
        limit: u64,
        /// Given.
        given: u64,
    },
}

impl RegexFail {
    fn unsupported(keyword: &str, detail: impl Into<String>) -> Self {
        RegexFail::Unsupported {
            keyword: keyword.to_string(),
            detail: detail.into(),
        }
    }

    /// The error at a schema location.
    pub fn at(self, ptr: &str) -> SchemaError {
        match self {
            RegexFail::Unsupported { keyword, detail } => {
                SchemaError::unsupported(&keyword, ptr, detail)
            }
            RegexFail::Invalid { keyword, message } => {
                SchemaError::invalid(ptr, format!("`{keyword}`: {message}"))
            }
            RegexFail::TooLarge { what, limit, given } => SchemaError::LimitExceeded {
                what,
                limit: limit as usize,
                given: given as usize,
            },
        }
    }
}

/// Whether `format` names a format this compiler can enforce.
pub fn format_known(format: &str) -> bool {
    regex::is_known_format(format)
}

fn fail(keyword: &str, e: RegexError) -> RegexFail {
    match e {
        RegexError::TooLarge { what, limit, given } => RegexFail::TooLarge { what, limit, given },
        RegexError::Invalid { message, .. } => RegexFail::Invalid {
            keyword: keyword.to_string(),
            message,
        },
        other => RegexFail::unsupported(keyword, other.to_string()),
    }
}

/// Whether the ECMA-262 `pattern` can be translated (no lookaround, no backreferences, valid
/// syntax): the check lowering does, to refuse the keyword at its own pointer.
pub fn check_pattern(pattern: &str) -> Result<(), RegexFail> {
    regex::ecma_to_regex(pattern)
        .map(|_| ())
        .map_err(|e| fail("pattern", e))
}

/// Whether the decoded string `s` matches the ECMA-262 `pattern` (unanchored, as JSON Schema
/// specifies).
pub fn pattern_matches(pattern: &str, s: &str) -> Result<bool, RegexFail> {
    let re = regex::ecma_to_regex(pattern).map_err(|e| fail("pattern", e))?;
    let r = regex_automata::meta::Regex::new(&re)
        .map_err(|e| RegexFail::unsupported("pattern", e.to_string()))?;
    Ok(r.is_match(s))
}

/// Most state pairs one product walk of [`pattern_is_universal`] / [`patterns_disjoint`]
/// visits; past it the relation counts as unknown (the caller then refuses by name).
const MAX_PRODUCT_PAIRS: usize = 20_000;

/// The anchored, full-match DFA of a decoded-value regex (`regex-syntax` syntax).
fn full_match_dfa(re: &str) -> Option<dense::DFA<Vec<u32>>> {
    dense::Builder::new()
        .configure(
            dense::Config::new()
                .start_kind(StartKind::Anchored)
                .dfa_size_limit(Some(4 << 20))
                .determinize_size_limit(Some(4 << 20)),
        )
        .build(&format!("^(?:{re})$"))
        .ok()
}

/// Walks the product of two full-match DFAs over every byte string and reports whether a pair
/// of states where `bad(a matches, b matches)` holds at the end of input is reachable; `None`
/// when a DFA cannot be built or the walk exceeds [`MAX_PRODUCT_PAIRS`]. Pairs whose `a` side
/// is dead are pruned (every `bad` here needs `a` to match), and so are pairs whose `b` side
/// is dead when `b_needed`.
fn product_reaches(
    a_re: &str,
    b_re: &str,
    b_needed: bool,
    bad: impl Fn(bool, bool) -> bool,
) -> Option<bool> {
    let a = full_match_dfa(a_re)?;
    let b = full_match_dfa(b_re)?;
    let cfg = start::Config::new().anchored(Anchored::Yes);
    let start = (a.start_state(&cfg).ok()?, b.start_state(&cfg).ok()?);
    let mut seen = std::collections::HashSet::from([start]);
    let mut stack = vec![start];
    while let Some((x, y)) = stack.pop() {
        let xm = a.is_match_state(a.next_eoi_state(x));
        let ym = b.is_match_state(b.next_eoi_state(y));
        if bad(xm, ym) {
            return Some(true);
        }
        for byte in 0..=255u8 {
            let nx = a.next_state(x, byte);
            let ny = b.next_state(y, byte);
            if a.is_dead_state(nx) || (b_needed && b.is_dead_state(ny)) {
                continue;
            }
            if seen.insert((nx, ny)) {
                if seen.len() > MAX_PRODUCT_PAIRS {
                    return None;
                }
                stack.push((nx, ny));
            }
        }
    }
    Some(false)
}

/// Whether the ECMA-262 `pattern` (search semantics) matches every string, decided exactly on
/// automata (`.*` and `^[a-z]*` do; `^.*$` does not: `.` excludes line terminators). `false`
/// when undecidable within the budget.
pub fn pattern_is_universal(pattern: &str) -> bool {
    let Ok(p) = regex::search_regex(pattern) else {
        return false;
    };
    product_reaches(r"(?s:.)*", &p, false, |any, m| any && !m) == Some(false)
}

/// Whether no string matches both ECMA-262 patterns (search semantics), decided exactly on
/// automata; `false` when undecidable within the budget.
pub fn patterns_disjoint(p: &str, q: &str) -> bool {
    let (Ok(p), Ok(q)) = (regex::search_regex(p), regex::search_regex(q)) else {
        return false;
    };
    product_reaches(&p, &q, true, |x, y| x && y) == Some(false)
}

/// Whether the decoded string `s` is valid under `format`.
pub fn format_matches(format: &str, s: &str) -> Result<bool, RegexFail> {
    let re = regex::format_decoded(format).map_err(|e| fail("format", e))?;
    let r = regex_automata::meta::Regex::new(&format!("^(?:{re})$"))
        .map_err(|e| RegexFail::unsupported("format", e.to_string()))?;
    Ok(r.is_match(s))
}

/// The lexeme regex of a JSON string satisfying `s`, as one regex (for a position that cannot
/// carry a length exception, such as a property name; see [`string_lexeme_exact`]).
pub fn string_lexeme(s: &StringSchema) -> Result<String, RegexFail> {
    let kw = string_keyword(s);
    string_lexeme_exact(s)?
        .into_plain()
        .map_err(|e| fail(kw, e))
}

/// The lexeme of a JSON string satisfying `s`: a regex, and where the length bounds cannot be
/// narrowed into it, the strings of other lengths to except from it.
pub fn string_lexeme_exact(s: &StringSchema) -> Result<regex::StringLexeme, RegexFail> {
    if !s.exclude.is_empty() {
        if s.min_len > 0 || s.max_len.is_some() || s.pattern.is_some() || s.format.is_some() {
            return Err(RegexFail::unsupported(
                "not",
                "excluded string values combined with other string constraints",
            ));
        }
        return Ok(regex::StringLexeme {
            regex: string_except(&s.exclude).to_string(),
            outside_lengths: None,
        });
    }
    let kw = string_keyword(s);
    match (&s.pattern, &s.format) {
        (p, Some(f)) => regex::json_string_format_exact(f, p.as_deref(), s.min_len, s.max_len),
        (p, None) => regex::json_string_exact(p.as_deref(), s.min_len, s.max_len),
    }
    .map_err(|e| fail(kw, e))
}

/// The keyword a string lexeme's error names: the format, else the pattern, else the length.
fn string_keyword(s: &StringSchema) -> &'static str {
    match (&s.pattern, &s.format) {
        (_, Some(_)) => "format",
        (Some(_), None) => "pattern",
        (None, None) if s.max_len.is_some() => "maxLength",
        (None, None) => "minLength",
    }
}

fn bound(b: &Option<Bound>, keyword: &str) -> Result<Option<regex::Bound>, RegexFail> {
    match b {
        None => Ok(None),
        Some(b) => {
            let d = regex::Decimal::from_f64(b.value).map_err(|e| fail(keyword, e))?;
            Ok(Some(regex::Bound {
                value: d,
                exclusive: b.exclusive,
            }))
        }
    }
}

/// The lexeme of a JSON number: its regex, and whether the texts of
/// [`regex::BEYOND_308_DIGITS`] must be dropped from it (a remainder automaton's multiples,
/// [`regex::multiple_of_uncapped`]), which the compiler does with an exception lexeme.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NumberLexeme {
    /// The regex.
    pub regex: String,
    /// Whether its integer part may pass 308 digits (then it needs the exception).
    pub uncapped: bool,
}

/// The lexeme of a JSON number satisfying `n`.
pub fn number_lexeme(n: &NumberSchema) -> Result<NumberLexeme, RegexFail> {
    let capped = |regex: String| NumberLexeme {
        regex,
        uncapped: false,
    };
    if n.min.is_none() && n.max.is_none() && n.multiple_of.is_none() {
        return Ok(capped(
            if n.integer { ANY_INTEGER } else { any_number() }.to_string(),
        ));
    }
    let min = bound(&n.min, "minimum")?;
    let max = bound(&n.max, "maximum")?;
    // Fail closed, naming the keyword: a range with only numbers of magnitude 1e308 or more
    // has nothing formwork emits (they are not all finite doubles), which is not "no number
    // satisfies the schema".
    if let Some(keyword) = regex::beyond_finite_range(min.as_ref(), max.as_ref()) {
        return Err(RegexFail::unsupported(
            keyword,
            "the range holds only numbers of magnitude 1e308 or more; formwork emits numbers \
             below 1e308 (at most 308 integer digits), which every JSON parser reads as finite \
             doubles",
        ));
    }
    match n.multiple_of {
        Some(m) => {
            let k = regex::Decimal::from_f64(m).map_err(|e| fail("multipleOf", e))?;
            let (re, uncapped) = regex::multiple_of_uncapped(&k, min, max, n.integer)
                .map_err(|e| fail("multipleOf", e))?;
            // A `number` multiple of an integer step is integer-valued, but may be written
            // `6000.0` (MaskBench Github_ultra---o46322: `multipleOf: 1` on a `number`);
            // the digit automata spell only the integer form, so allow `.0…` after it.
            let regex = if !n.integer && m.fract() == 0.0 {
                format!("(?:{re})(?:\\.0+)?")
            } else {
                re
            };
            Ok(NumberLexeme { regex, uncapped })
        }
        None => regex::number_range(min, max, n.integer)
            .map(capped)
            .map_err(|e| fail("minimum", e)),
    }
}

/// The regex of one string unit (raw or escaped) that decodes to `c`.
fn unit_for(c: char) -> String {
    let mut alts = Vec::new();
    if c != '"' && c != '\\' && (c as u32) >= 0x20 {
        alts.push(regex_syntax::escape(&c.to_string()));
    }
    let short = match c {
        '"' => Some("\""),
        '\\' => Some("\\\\"),
        '/' => Some("/"),
        '\u{8}' => Some("b"),
        '\u{c}' => Some("f"),
        '\n' => Some("n"),
        '\r' => Some("r"),
        '\t' => Some("t"),
        _ => None,
    };
    if let Some(s) = short {
        alts.push(format!("\\\\{s}"));
    }
    let cp = c as u32;
    if cp <= 0xFFFF {
        alts.push(format!("\\\\u{}", hex_ci(&format!("{cp:04x}"))));
    }
    format!("(?:{})", alts.join("|"))
}

/// A case-insensitive regex for a hex string.
fn hex_ci(h: &str) -> String {
    h.chars()
        .map(|d| {
            if d.is_ascii_alphabetic() {
                format!("[{}{}]", d.to_ascii_lowercase(), d.to_ascii_uppercase())
            } else {
                d.to_string()
            }
        })
        .collect()
}

/// The regex of one string unit that decodes to a character *not* in `set`.
fn unit_not_in(set: &[char]) -> String {
    let mut alts = Vec::new();
    // Raw characters.
    let mut class = String::from(r#"[^"\\\x00-\x1F"#);
    for &c in set {
        class.push_str(&regex_syntax::escape(&c.to_string()));
    }
    class.push(']');
    alts.push(class);
    // Short escapes.
    let shorts: Vec<&str> = [
        ('"', "\""),
        ('\\', "\\\\"),
        ('/', "/"),
        ('\u{8}', "b"),
        ('\u{c}', "f"),
        ('\n', "n"),
        ('\r', "r"),
        ('\t', "t"),
    ]
    .iter()
    .filter(|(c, _)| !set.contains(c))
    .map(|(_, s)| *s)
    .collect();
    if !shorts.is_empty() {
        alts.push(format!("\\\\(?:{})", shorts.join("|")));
    }
    // \u escapes of other code units.
    let excluded: Vec<[u8; 4]> = set
        .iter()
        .filter(|c| (**c as u32) <= 0xFFFF)
        .map(|c| {
            let h = format!("{:04x}", *c as u32);
            let b = h.as_bytes();
            [b[0], b[1], b[2], b[3]]
        })
        .collect();
    alts.push(format!("\\\\u{}", hex_except(&excluded, 0)));
    format!("(?:{})", alts.join("|"))
}

/// Four-hex-digit strings (case-insensitive) whose value is not in `excluded`, from `depth`.
fn hex_except(excluded: &[[u8; 4]], depth: usize) -> String {
    let rest = 4 - depth;
    if excluded.is_empty() {
        return format!("[0-9a-fA-F]{{{rest}}}");
    }
    if rest == 0 {
        // Every excluded value agrees on all digits: this exact value is excluded.
        return "[^\\x00-\\x{10FFFF}]".to_string();
    }
    let mut by_digit: BTreeMap<u8, Vec<[u8; 4]>> = BTreeMap::new();
    for e in excluded {
        by_digit.entry(e[depth]).or_default().push(*e);
    }
    let mut alts = Vec::new();
    let mut class = String::new();
    for d in "0123456789abcdef".bytes() {
        if !by_digit.contains_key(&d) {
            class.push(d as char);
            if d.is_ascii_alphabetic() {
                class.push(d.to_ascii_uppercase() as char);
            }
        }
    }
    if !class.is_empty() {
        if rest > 1 {
            alts.push(format!("[{class}][0-9a-fA-F]{{{}}}", rest - 1));
        } else {
            alts.push(format!("[{class}]"));
        }
    }
    for (d, sub) in by_digit {
        if rest > 1 {
            alts.push(format!(
                "{}{}",
                hex_ci(&(d as char).to_string()),
                hex_except(&sub, depth + 1)
            ));
        }
    }
    if alts.is_empty() {
        return "[^\\x00-\\x{10FFFF}]".to_string();
    }
    format!("(?:{})", alts.join("|"))
}

#[derive(Default)]
struct Trie {
    end: bool,
    children: BTreeMap<char, Trie>,
}

/// A JSON string (with quotes) whose decoded value is none of `names`.
///
/// When every name is printable ASCII (what real schemas list; see [`string_except_ascii`])
/// the key is spelled canonically: printable ASCII raw (`\"` and `\\` for the two that need
/// it), never as a `\u` escape or `\/`, the spelling every JSON serializer writes. Listed
/// keys are literals with that same spelling, so a name can never slip in as an additional
/// key. Otherwise exact at the decoded level for code points in the BMP, whatever escapes the
/// text uses; a name containing a character outside the BMP is excluded only in its raw
/// spelling.
pub fn string_except(names: &[String]) -> Hir {
    if names.iter().all(|n| is_printable_ascii(n)) {
        return string_except_ascii(names);
    }
    regex_syntax::parse(&string_except_escaped(names))
        .expect("string_except_escaped builds a valid regex")
}

/// Whether every byte of `name` is printable ASCII (U+0020..U+007E).
pub fn is_printable_ascii(name: &str) -> bool {
    name.bytes().all(|b| (0x20..=0x7e).contains(&b))
}

/// Escapes of code units outside printable ASCII (case-insensitive hex), the only `\u`
/// escapes of a canonically spelled key.
const HEX_NP: &str =
    "(?:[1-9a-fA-F][0-9a-fA-F]{3}|0[1-9a-fA-F][0-9a-fA-F]{2}|00[0189a-fA-F][0-9a-fA-F]|007[fF])";

/// The characters of a canonically spelled key after its opening quote, closing quote
/// included: printable ASCII raw (`\"` and `\\` for the two that need it), any other
/// character raw or escaped (`\b \f \n \r \t`, `\u` of a code unit outside U+0020..U+007E).
fn canonical_key_rest() -> String {
    format!(r#"(?:[^"\\\x00-\x1F]|\\(?:["\\bfnrt]|u{HEX_NP}))*""#)
}

/// A JSON string spelled canonically (see [`string_except`]): the spelling of every key
/// lexeme, so a listed name's text is exactly its key literal and "a key that is none of the
/// names" is this regex except those literals.
pub fn canonical_key() -> String {
    format!("\"{}", canonical_key_rest())
}

/// Printable ASCII as a set of bytes, for classes.
#[cfg(test)]
fn printable_class(bytes: &[u8]) -> String {
    // Ranges of consecutive bytes, each end spelled as `\xHH` unless alphanumeric.
    let spell = |b: u8| {
        if b.is_ascii_alphanumeric() {
            (b as char).to_string()
        } else {
            format!("\\x{b:02X}")
        }
    };
    let mut out = String::from("[");
    let mut i = 0;
    while i < bytes.len() {
        let mut j = i;
        while j + 1 < bytes.len() && bytes[j + 1] == bytes[j] + 1 {
            j += 1;
        }
        out.push_str(&spell(bytes[i]));
        if j > i {
            if j > i + 1 {
                out.push('-');
            }
            out.push_str(&spell(bytes[j]));
        }
        i = j + 1;
    }
    out.push(']');
    out
}

/// The one spelling of a printable ASCII byte inside a key.
#[cfg(test)]
fn ascii_unit(b: u8) -> String {
    match b {
        b'"' => "\\\\\"".to_string(),
        b'\\' => "\\\\\\\\".to_string(),
        _ => regex_syntax::escape(&(b as char).to_string()),
    }
}

#[derive(Default)]
struct ByteTrie {
    end: bool,
    children: BTreeMap<u8, ByteTrie>,
}

/// The literal of the one spelling of a printable ASCII byte inside a key: raw, except `\"`
/// and `\\`.
fn ascii_unit_hir(b: u8) -> Hir {
    match b {
        b'"' => Hir::literal(&b"\\\""[..]),
        b'\\' => Hir::literal(&b"\\\\"[..]),
        _ => Hir::literal(vec![b]),
    }
}

/// Printable ASCII bytes as a class.
fn printable_class_hir(bytes: &[u8]) -> Hir {
    let ranges = bytes
        .iter()
        .map(|&b| ClassUnicodeRange::new(b as char, b as char));
    Hir::class(Class::Unicode(ClassUnicode::new(ranges)))
}

/// A regex fragment of `string_except_ascii` that has no trie in it (a few dozen bytes),
/// parsed.
fn fixed(re: &str) -> Hir {
    regex_syntax::parse(re).expect("a fixed fragment of string_except_ascii parses")
}

/// [`string_except`] for printable-ASCII names, O(total name length) in size with a small
/// constant (one class and one literal per trie node), built as an HIR: real schemas list
/// hundreds of properties, whose key regex as text ran to hundreds of kilobytes and whose
/// parse dominated their time to first mask.
///
/// Strings accepted: printable ASCII spelled raw (or `\"`, `\\`), any other character raw or
/// escaped (`\b \f \n \r \t`, `\u` of a code unit outside U+0020..U+007E). Such a string
/// either stays inside the trie of names to its closing quote (accepted at a node that ends no
/// name), or leaves it by a printable byte no name continues with at that node, or by a
/// non-printable unit (which no name contains, so it leaves from any node):
/// `"` (?: (G | P OUT) REST | E ), with G, P, E tries over the names and REST the shared
/// tail.
pub fn string_except_ascii(names: &[String]) -> Hir {
    let mut root = ByteTrie::default();
    // The bytes some name contains: only they can continue a walk, so every other unit leaves
    // the trie from any node and is spelled once, in OUT, instead of at every node.
    let mut alpha = [false; 128];
    for n in names {
        let mut t = &mut root;
        for b in n.bytes() {
            alpha[b as usize] = true;
            t = t.children.entry(b).or_default();
        }
        t.end = true;
    }
    let mut out = vec![
        fixed("[^\\x00-\\x7E]"),
        fixed(&format!("\\\\(?:[bfnrt]|u{HEX_NP})")),
    ];
    let foreign: Vec<u8> = (0x20..=0x7eu8)
        .filter(|b| *b != b'"' && *b != b'\\' && !alpha[*b as usize])
        .collect();
    if !foreign.is_empty() {
        out.push(printable_class_hir(&foreign));
    }
    for q in [b'"', b'\\'] {
        if !alpha[q as usize] {
            out.push(ascii_unit_hir(q));
        }
    }
    let out = Hir::alternation(out);
    let rest = fixed(&canonical_key_rest());
    // G: walk, then a name byte that continues no name at that node.
    fn leave(t: &ByteTrie, alpha: &[bool; 128]) -> Option<Hir> {
        let mut alts = Vec::new();
        let other: Vec<u8> = (0x20..=0x7eu8)
            .filter(|b| {
                alpha[*b as usize] && *b != b'"' && *b != b'\\' && !t.children.contains_key(b)
            })
            .collect();
        if !other.is_empty() {
            alts.push(printable_class_hir(&other));
        }
        for q in [b'"', b'\\'] {
            if alpha[q as usize] && !t.children.contains_key(&q) {
                alts.push(ascii_unit_hir(q));
            }
        }
        for (b, child) in &t.children {
            if let Some(l) = leave(child, alpha) {
                alts.push(Hir::concat(vec![ascii_unit_hir(*b), l]));
            }
        }
        (!alts.is_empty()).then(|| Hir::alternation(alts))
    }
    // P: any walk (a prefix of some name, possibly empty).
    fn prefix(t: &ByteTrie) -> Hir {
        if t.children.is_empty() {
            return Hir::empty();
        }
        let alts: Vec<Hir> = t
            .children
            .iter()
            .map(|(b, child)| Hir::concat(vec![ascii_unit_hir(*b), prefix(child)]))
            .collect();
        Hir::repetition(Repetition {
            min: 0,
            max: Some(1),
            greedy: true,
            sub: Box::new(Hir::alternation(alts)),
        })
    }
    // E: walk, then the closing quote at a node that ends no name.
    fn end(t: &ByteTrie) -> Option<Hir> {
        let mut alts = Vec::new();
        if !t.end {
            alts.push(Hir::literal(&b"\""[..]));
        }
        for (b, child) in &t.children {
            if let Some(e) = end(child) {
                alts.push(Hir::concat(vec![ascii_unit_hir(*b), e]));
            }
        }
        (!alts.is_empty()).then(|| Hir::alternation(alts))
    }
    let walk_out = Hir::concat(vec![prefix(&root), out]);
    let mut top = match leave(&root, &alpha) {
        Some(l) => Hir::concat(vec![Hir::alternation(vec![l, walk_out]), rest]),
        None => Hir::concat(vec![walk_out, rest]),
    };
    if let Some(e) = end(&root) {
        top = Hir::alternation(vec![top, e]);
    }
    Hir::concat(vec![Hir::literal(&b"\""[..]), top])
}

/// [`string_except`] aware of every escape spelling (the general case).
fn string_except_escaped(names: &[String]) -> String {
    let mut root = Trie::default();
    for n in names {
        let mut t = &mut root;
        for c in n.chars() {
            t = t.children.entry(c).or_default();
        }
        t.end = true;
    }
    let any_rest = format!(r#"(?:{RAW}|{ESC})*""#);
    fn go(t: &Trie, any_rest: &str) -> String {
        let mut alts = Vec::new();
        if !t.end {
            alts.push("\"".to_string());
        }
        let set: Vec<char> = t.children.keys().copied().collect();
        alts.push(format!("{}{}", unit_not_in(&set), any_rest));
        for (c, child) in &t.children {
            alts.push(format!("{}{}", unit_for(*c), go(child, any_rest)));
        }
        format!("(?:{})", alts.join("|"))
    }
    format!("\"{}", go(&root, &any_rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The text form `string_except_ascii` had before it built an HIR (the parse of this text
    /// dominated TTFM), kept as the reference its language must equal.
    fn reference_except_ascii(names: &[String]) -> String {
        let mut root = ByteTrie::default();
        // The bytes some name contains: only they can continue a walk, so every other unit leaves
        // the trie from any node and is spelled once, in OUT, instead of at every node.
        let mut alpha = [false; 128];
        for n in names {
            let mut t = &mut root;
            for b in n.bytes() {
                alpha[b as usize] = true;
                t = t.children.entry(b).or_default();
            }
            t.end = true;
        }
        // Escapes of code units outside printable ASCII (case-insensitive hex).
        const HEX_NP: &str =
            "(?:[1-9a-fA-F][0-9a-fA-F]{3}|0[1-9a-fA-F][0-9a-fA-F]{2}|00[0189a-fA-F][0-9a-fA-F]|007[fF])";
        let mut out = vec![
            "[^\\x00-\\x7E]".to_string(),
            format!("\\\\(?:[bfnrt]|u{HEX_NP})"),
        ];
        let foreign: Vec<u8> = (0x20..=0x7eu8)
            .filter(|b| *b != b'"' && *b != b'\\' && !alpha[*b as usize])
            .collect();
        if !foreign.is_empty() {
            out.push(printable_class(&foreign));
        }
        for q in [b'"', b'\\'] {
            if !alpha[q as usize] {
                out.push(ascii_unit(q));
            }
        }
        let out = format!("(?:{})", out.join("|"));
        let rest = format!(r#"(?:[^"\\\x00-\x1F]|\\(?:["\\bfnrt]|u{HEX_NP}))*""#);
        // G: walk, then a name byte that continues no name at that node.
        fn leave(t: &ByteTrie, alpha: &[bool; 128]) -> Option<String> {
            let mut alts = Vec::new();
            let other: Vec<u8> = (0x20..=0x7eu8)
                .filter(|b| {
                    alpha[*b as usize] && *b != b'"' && *b != b'\\' && !t.children.contains_key(b)
                })
                .collect();
            if !other.is_empty() {
                alts.push(printable_class(&other));
            }
            for q in [b'"', b'\\'] {
                if alpha[q as usize] && !t.children.contains_key(&q) {
                    alts.push(ascii_unit(q));
                }
            }
            for (b, child) in &t.children {
                if let Some(l) = leave(child, alpha) {
                    alts.push(format!("{}{l}", ascii_unit(*b)));
                }
            }
            match alts.len() {
                0 => None,
                1 if !alts[0].contains('|') => alts.pop(),
                _ => Some(format!("(?:{})", alts.join("|"))),
            }
        }
        // P: any walk (a prefix of some name, possibly empty).
        fn prefix(t: &ByteTrie) -> String {
            if t.children.is_empty() {
                return String::new();
            }
            let alts: Vec<String> = t
                .children
                .iter()
                .map(|(b, child)| format!("{}{}", ascii_unit(*b), prefix(child)))
                .collect();
            format!("(?:{})?", alts.join("|"))
        }
        // E: walk, then the closing quote at a node that ends no name.
        fn end(t: &ByteTrie) -> Option<String> {
            let mut alts = Vec::new();
            if !t.end {
                alts.push("\"".to_string());
            }
            for (b, child) in &t.children {
                if let Some(e) = end(child) {
                    alts.push(format!("{}{}", ascii_unit(*b), e));
                }
            }
            match alts.len() {
                0 => None,
                1 => alts.pop(),
                _ => Some(format!("(?:{})", alts.join("|"))),
            }
        }
        let walk_out = format!("{}{out}", prefix(&root));
        let mut top = match leave(&root, &alpha) {
            Some(l) => format!("(?:{l}|{walk_out}){rest}"),
            None => format!("{walk_out}{rest}"),
        };
        if let Some(e) = end(&root) {
            top = format!("{top}|{e}");
        }
        format!("\"(?:{top})")
    }

    fn full(re: &str) -> regex_automata::meta::Regex {
        regex_automata::meta::Regex::new(&format!("^(?:{re})$")).unwrap()
    }

    /// Canonical key spelling (the printable-ASCII form of `string_except`): checked against
    /// decoding on every string of up to three characters over an alphabet with a name
    /// character, a character no name has, the two that need escapes, a control and a
    /// non-ASCII character, each in every spelling.
    #[test]
    fn string_except_ascii_is_exact_on_canonical_spellings() {
        // With and without the two escaped bytes among the names' bytes.
        // And without names (an object with no listed properties).
        for names in [
            &["a", "ab", "x\"y", "\\", "b/"][..],
            &["ab", "b", "a~"][..],
            &[][..],
        ] {
            let names: Vec<String> = names.iter().map(|s| s.to_string()).collect();
            check_ascii_except(&names);
        }
    }

    fn check_ascii_except(names: &[String]) {
        let hir = string_except(names);
        assert_eq!(hir, string_except_ascii(names));
        let r = full(&hir.to_string());
        let reference = full(&reference_except_ascii(names));
        // (spelling, decoded, canonical)
        let units: &[(&str, &str, bool)] = &[
            ("a", "a", true),
            ("\\u0061", "a", false),
            ("b", "b", true),
            ("x", "x", true),
            ("y", "y", true),
            ("c", "c", true),
            ("~", "~", true),
            ("/", "/", true),
            ("\\/", "/", false),
            ("\\\"", "\"", true),
            ("\\u0022", "\"", false),
            ("\\\\", "\\", true),
            ("\\n", "\n", true),
            ("\\u000A", "\n", true),
            ("é", "é", true),
            ("\\u00e9", "é", true),
            ("\\u00E9", "é", true),
        ];
        let mut seqs: Vec<Vec<usize>> = vec![vec![]];
        for len in 1..=3 {
            let mut next = Vec::new();
            for s in seqs.iter().filter(|s| s.len() == len - 1) {
                for u in 0..units.len() {
                    let mut t = s.clone();
                    t.push(u);
                    next.push(t);
                }
            }
            seqs.extend(next);
        }
        for s in &seqs {
            let text: String = s.iter().map(|&u| units[u].0).collect();
            let decoded: String = s.iter().map(|&u| units[u].1).collect();
            let canonical = s.iter().all(|&u| units[u].2);
            let want = canonical && !names.contains(&decoded);
            let quoted = format!("\"{text}\"");
            assert_eq!(r.is_match(&quoted), want, "{quoted}");
            assert_eq!(reference.is_match(&quoted), want, "{quoted}");
        }
        assert!(!r.is_match("\"a"));
    }

    #[test]
    fn string_except_excludes_exactly_the_names() {
        let names = vec!["a".to_string(), "ab".to_string(), "x\"y".to_string()];
        let r = full(&string_except_escaped(&names));
        for yes in [
            r#""""#,
            r#""b""#,
            r#""abc""#,
            r#""aa""#,
            r#""x\"""#,
            r#""\u0062""#,
            r#""A""#,
        ] {
            assert!(r.is_match(yes), "{yes}");
        }
        for no in [
            r#""a""#,
            r#""ab""#,
            r#""\u0061""#,
            r#""\u0061\u0062""#,
            r#""x\"y""#,
            r#""x\u0022y""#,
            r#""a"#,
        ] {
            assert!(!r.is_match(no), "{no}");
        }
    }

    #[test]
    fn string_lengths_count_code_points() {
        let s = StringSchema {
            min_len: 1,
            max_len: Some(2),
            ..Default::default()
        };
        let r = full(&string_lexeme(&s).unwrap());
        assert!(r.is_match(r#""é""#));
        assert!(r.is_match(r#""\n\"""#));
        assert!(!r.is_match(r#""""#));
        assert!(!r.is_match(r#""abc""#));
    }

    #[test]
    fn universal_patterns_are_recognized_exactly() {
        for p in [
            ".*",
            "",
            "^[a-z]*",
            "x*",
            "(?:)",
            "[\\s\\S]*",
            "^(a|[^a])*$",
        ] {
            assert!(pattern_is_universal(p), "{p}");
        }
        // `.` excludes line terminators, so an anchored `.*` misses "a\nb".
        for p in ["^.*$", "^[a-z_]+$", "a", "^[a-z]*$", "[A-Z]{1,3}"] {
            assert!(!pattern_is_universal(p), "{p}");
        }
    }

    #[test]
    fn pattern_disjointness_is_exact() {
        assert!(patterns_disjoint("^a", "^b"));
        assert!(patterns_disjoint("^[0-9]+$", "^[a-z]+$"));
        assert!(!patterns_disjoint("^a", "b$"), "\"ab\" matches both");
        assert!(!patterns_disjoint("^[a-z]+$", "^x"));
        assert!(!patterns_disjoint(".*", "^q$"));
    }

    #[test]
    fn patterns_are_unanchored_and_refuse_lookaround() {
        assert!(pattern_matches("b", "abc").unwrap());
        assert!(!pattern_matches("^b", "abc").unwrap());
        assert!(pattern_matches(r"^\d+$", "123").unwrap());
        assert!(pattern_matches("(?=a)", "a").is_err());
    }
}
