//! The `format` keyword: regexes over the decoded string value, per the RFCs JSON Schema cites.
//!
//! [`format_decoded`] returns the regex over the decoded value, [`format()`] the finished JSON
//! string lexeme. Every regex here *never accepts an invalid value*; a few are deliberately
//! narrower than the format where exactness would need a huge regex or data tables, and say so:
//!
//! | format | grammar | narrower than the spec in |
//! |---|---|---|
//! | `date`, `date-time`, `time` | RFC 3339 (leap years exact) | leap seconds (`:60`) only in UTC (`Z`, `±00:00`) |
//! | `duration` | RFC 3339 Appendix A | upper-case designators only |
//! | `hostname`, `idn-hostname` | RFC 1123 LDH labels ≤ 63, total ≤ 253 | `xn--`/`--` A-labels refused; total length via label shapes (≤ 3×63, ≤ 4×62, ..., ≤ 127×1); no U-labels |
//! | `email`, `idn-email` | RFC 5321 / 6531 mailbox, local part ≤ 64 (RFC 5321 4.5.3.1.1) | local part via atom shapes (≤ 1×64, ≤ 2×31, ..., ≤ 32×1), quoted ≤ 62 plain or ≤ 31 units with escapes; domain as `hostname` (ASCII only for `idn-email`); address literals `[ipv4]`, `[IPv6:...]` |
//! | `ipv4`, `ipv6`, `uuid`, `uri`, `uri-reference`, `iri`, `iri-reference`, `uri-template`, `json-pointer`, `relative-json-pointer` | RFC 2673, 4291, 4122, 3986, 3987, 6570, 6901, draft | exact |
//!
//! `regex` (the language of ECMA-262 regexes is not regular) and unknown formats are
//! [`RegexError::Unsupported`].

use std::collections::HashSet;

use regex_automata::dfa::{dense, Automaton, StartKind};
use regex_automata::util::start;
use regex_automata::Anchored;
use regex_syntax::hir::{Class, Hir, HirKind, Repetition};

use super::ecma::ecma_to_regex;
use super::strings::{
    json_string_decoded, json_string_decoded_exact, json_string_exact, search_regex, StringLexeme,
};
use crate::grammar::regex::RegexError;

/// The JSON string lexeme (quotes included) for a string with this `format`.
///
/// ```
/// use formwork_core::schema::regex::format;
/// let re = format("date")?;
/// let r = regex_automata::meta::Regex::new(&format!("^(?:{re})$")).unwrap();
/// assert!(r.is_match(r#""2024-02-29""#) && !r.is_match(r#""2023-02-29""#));
/// assert!(format("no-such-format").is_err());
/// # Ok::<(), formwork_core::schema::regex::RegexError>(())
/// ```
pub fn format(name: &str) -> Result<String, RegexError> {
    json_string_decoded(&format_decoded(name)?, 0, None)
}

/// Whether `name` is a format this module knows, whether or not it has a regex for it: the
/// compiler can tell an unknown format (which JSON Schema treats as an annotation) from a
/// known one that is refused ([`format()`] errs on both).
pub fn is_known_format(name: &str) -> bool {
    KNOWN_FORMATS.contains(&name)
}

/// Every format of JSON Schema 2020-12's format vocabulary.
const KNOWN_FORMATS: &[&str] = &[
    "date",
    "time",
    "date-time",
    "duration",
    "email",
    "idn-email",
    "hostname",
    "idn-hostname",
    "ipv4",
    "ipv6",
    "uuid",
    "uri",
    "uri-reference",
    "iri",
    "iri-reference",
    "uri-template",
    "json-pointer",
    "relative-json-pointer",
    "regex",
];

/// The JSON string lexeme for `format` together with a `pattern` and length bounds.
///
/// A format and a pattern are two regular languages. The intersection is built exactly when the
/// pattern is an anchored set of prefixes (`^https://`, `^(https?|ftp)://`) or of suffixes
/// (`\.ya?ml$`): each prefix followed by the format's derivative by it, or the reverse. Otherwise it is exact when one contains the other
/// (`format: date` with `pattern: ^[0-9]{4}(-[0-9]{2})?(-[0-9]{2})?$`, or `format: uri` with
/// `pattern: ^https://[a-z.]+/$`), decided by walking the product of their DFAs. Otherwise,
/// or when the DFAs are too big to decide (`MAX_INCLUSION_PAIRS`), it is `Unsupported`.
/// Length bounds the regex cannot carry are `Unsupported` too; [`json_string_format_exact`]
/// enforces them as the lexeme's exception.
pub fn json_string_format(
    format: &str,
    pattern: Option<&str>,
    min_len: u64,
    max_len: Option<u64>,
) -> Result<String, RegexError> {
    json_string_format_exact(format, pattern, min_len, max_len)?.into_plain()
}

/// [`json_string_format`] with the length bounds exact for every format and pattern it
/// accepts: narrowed into the regex, or as the exception of
/// [`json_string_exact`](super::json_string_exact).
pub fn json_string_format_exact(
    format: &str,
    pattern: Option<&str>,
    min_len: u64,
    max_len: Option<u64>,
) -> Result<StringLexeme, RegexError> {
    let f = format_decoded(format)?;
    let Some(p) = pattern else {
        return json_string_decoded_exact(&f, min_len, max_len);
    };
    if let Some(both) = prefix_intersection(&f, p) {
        return json_string_decoded_exact(&both, min_len, max_len);
    }
    let p_full = search_regex(p)?;
    let refused = |why: &str| {
        RegexError::unsupported(
            "pattern with format",
            format!("format {format:?} and pattern {p:?}: {why}"),
        )
    };
    let (Some(fa), Some(pa)) = (dfa_of(&f), dfa_of(&p_full)) else {
        return Err(refused("the languages are too big to compare"));
    };
    match (included(&fa, &pa), included(&pa, &fa)) {
        (Some(true), _) => json_string_decoded_exact(&f, min_len, max_len),
        (_, Some(true)) => json_string_exact(Some(p), min_len, max_len),
        (Some(false), Some(false)) => Err(refused("neither language contains the other")),
        _ => Err(refused("the languages are too big to compare")),
    }
}

/// `format ∩ pattern` when the pattern is `^` followed by a finite set of prefixes and nothing
/// anchors its end (`^https://`, `^(https?|ftp)://`, `^mailto:`): the union over each prefix
/// `w` of `w` followed by the derivative of the format by `w`; symmetrically for a finite set
/// of suffixes anchored only at the end (`\.ya?ml$`), through the reversed format. `None` when
/// the pattern has another shape.
fn prefix_intersection(format_re: &str, pattern: &str) -> Option<String> {
    let parse = |re: &str| regex_syntax::Parser::new().parse(re).ok();
    let f = parse(format_re)?;
    let p = parse(&ecma_to_regex(pattern).ok()?)?;
    let reversed_f = reverse(&f);
    let mut alts = Vec::new();
    for (start, body, end) in anchored_branches(&p)? {
        let words = finite_strings(&body, 64)?;
        match (start, end) {
            // `^w`: w, then what the format allows after w.
            (true, false) => {
                for w in words {
                    let d = w.chars().fold(f.clone(), |d, c| derivative(&d, c));
                    if !is_empty_language(&d) {
                        alts.push(Hir::concat(vec![Hir::literal(w.as_bytes()), d]));
                    }
                }
            }
            // `w$`: what the format allows before w (a derivative of the reversed format).
            (false, true) => {
                for w in words {
                    let d = w
                        .chars()
                        .rev()
                        .fold(reversed_f.clone(), |d, c| derivative(&d, c));
                    if !is_empty_language(&d) {
                        alts.push(Hir::concat(vec![reverse(&d), Hir::literal(w.as_bytes())]));
                    }
                }
            }
            _ => return None,
        }
    }
    Some(Hir::alternation(alts).to_string())
}

/// The regex of the reversed strings (by code point).
fn reverse(h: &Hir) -> Hir {
    match h.kind() {
        HirKind::Literal(lit) => match std::str::from_utf8(&lit.0) {
            Ok(s) => Hir::literal(s.chars().rev().collect::<String>().as_bytes()),
            Err(_) => Hir::fail(),
        },
        HirKind::Capture(c) => reverse(&c.sub),
        HirKind::Repetition(r) => Hir::repetition(Repetition {
            sub: Box::new(reverse(&r.sub)),
            ..r.clone()
        }),
        HirKind::Concat(items) => Hir::concat(items.iter().rev().map(reverse).collect()),
        HirKind::Alternation(items) => Hir::alternation(items.iter().map(reverse).collect()),
        HirKind::Empty | HirKind::Class(_) | HirKind::Look(_) => h.clone(),
    }
}

/// The pattern's top-level branches with their anchors, via the string module's rules.
fn anchored_branches(p: &Hir) -> Option<Vec<(bool, Hir, bool)>> {
    super::strings::branches(p).ok()
}

fn is_empty_language(h: &Hir) -> bool {
    h.properties().minimum_len().is_none()
}

/// Concatenation that is empty as soon as one part is.
fn concat(parts: Vec<Hir>) -> Hir {
    if parts.iter().any(is_empty_language) {
        Hir::fail()
    } else {
        Hir::concat(parts)
    }
}

/// The Brzozowski derivative of `h` by `c`: the strings `s` with `c·s` in `h`.
fn derivative(h: &Hir, c: char) -> Hir {
    match h.kind() {
        HirKind::Empty | HirKind::Look(_) => Hir::fail(),
        HirKind::Literal(lit) => match std::str::from_utf8(&lit.0) {
            Ok(s) if s.starts_with(c) => Hir::literal(&s.as_bytes()[c.len_utf8()..]),
            _ => Hir::fail(),
        },
        HirKind::Class(Class::Unicode(cls)) => {
            if cls.ranges().iter().any(|r| r.start() <= c && c <= r.end()) {
                Hir::empty()
            } else {
                Hir::fail()
            }
        }
        HirKind::Class(Class::Bytes(_)) => Hir::fail(),
        HirKind::Capture(cap) => derivative(&cap.sub, c),
        HirKind::Repetition(r) => {
            if r.max == Some(0) {
                return Hir::fail();
            }
            // For a nullable `X`, `X{m,n}` and `X{0,n}` are the same language, so `m - 1`
            // (saturating) is right either way.
            let rest = Hir::repetition(Repetition {
                min: r.min.saturating_sub(1),
                max: r.max.map(|m| m - 1),
                greedy: true,
                sub: r.sub.clone(),
            });
            concat(vec![derivative(&r.sub, c), rest])
        }
        HirKind::Concat(items) => {
            let Some((first, rest)) = items.split_first() else {
                return Hir::fail();
            };
            let rest = Hir::concat(rest.to_vec());
            let mut alts = vec![concat(vec![derivative(first, c), rest.clone()])];
            if first.properties().minimum_len() == Some(0) {
                alts.push(derivative(&rest, c));
            }
            Hir::alternation(alts.into_iter().filter(|a| !is_empty_language(a)).collect())
        }
        HirKind::Alternation(items) => Hir::alternation(
            items
                .iter()
                .map(|x| derivative(x, c))
                .filter(|a| !is_empty_language(a))
                .collect(),
        ),
    }
}

/// All strings of a finite regex, if there are at most `cap` (small classes and bounded
/// repetitions only).
fn finite_strings(h: &Hir, cap: usize) -> Option<Vec<String>> {
    let out = match h.kind() {
        HirKind::Empty => vec![String::new()],
        HirKind::Literal(lit) => vec![std::str::from_utf8(&lit.0).ok()?.to_string()],
        HirKind::Class(Class::Unicode(cls)) => {
            let mut v = Vec::new();
            for r in cls.ranges() {
                for c in r.start()..=r.end() {
                    v.push(c.to_string());
                    if v.len() > cap {
                        return None;
                    }
                }
            }
            v
        }
        HirKind::Capture(c) => finite_strings(&c.sub, cap)?,
        HirKind::Concat(items) => {
            let mut acc = vec![String::new()];
            for x in items {
                let xs = finite_strings(x, cap)?;
                acc = acc
                    .iter()
                    .flat_map(|a| xs.iter().map(move |b| format!("{a}{b}")))
                    .collect();
                if acc.len() > cap {
                    return None;
                }
            }
            acc
        }
        HirKind::Alternation(items) => {
            let mut acc = Vec::new();
            for x in items {
                acc.extend(finite_strings(x, cap)?);
                if acc.len() > cap {
                    return None;
                }
            }
            acc
        }
        HirKind::Repetition(r) => {
            let max = r.max?;
            if max > 8 {
                return None;
            }
            let xs = finite_strings(&r.sub, cap)?;
            let mut acc = Vec::new();
            let mut level = vec![String::new()];
            for k in 0..=max {
                if k >= r.min {
                    acc.extend(level.iter().cloned());
                }
                level = level
                    .iter()
                    .flat_map(|a| xs.iter().map(move |b| format!("{a}{b}")))
                    .collect();
                if acc.len() > cap || level.len() > cap {
                    return None;
                }
            }
            acc
        }
        _ => return None,
    };
    (out.len() <= cap).then_some(out)
}

/// The most (state, state) pairs the inclusion check visits before giving up.
const MAX_INCLUSION_PAIRS: usize = 200_000;

/// A full-match DFA for `re`, if it is small enough to build.
fn dfa_of(re: &str) -> Option<dense::DFA<Vec<u32>>> {
    dense::Builder::new()
        .configure(
            dense::DFA::config()
                .start_kind(StartKind::Anchored)
                .dfa_size_limit(Some(8 << 20))
                .determinize_size_limit(Some(8 << 20)),
        )
        .build(&format!("(?:{re})$"))
        .ok()
}

/// Whether every string `a` fully matches is fully matched by `b` (`None`: undecided within
/// [`MAX_INCLUSION_PAIRS`]).
fn included(a: &dense::DFA<Vec<u32>>, b: &dense::DFA<Vec<u32>>) -> Option<bool> {
    let cfg = start::Config::new().anchored(Anchored::Yes);
    let start = (a.start_state(&cfg).ok()?, b.start_state(&cfg).ok()?);
    let mut seen = HashSet::new();
    let mut stack = vec![start];
    while let Some((x, y)) = stack.pop() {
        if a.is_dead_state(x) || !seen.insert((x, y)) {
            continue;
        }
        if seen.len() > MAX_INCLUSION_PAIRS {
            return None;
        }
        if a.is_match_state(a.next_eoi_state(x)) && !b.is_match_state(b.next_eoi_state(y)) {
            return Some(false);
        }
        for byte in 0..=255u8 {
            stack.push((a.next_state(x, byte), b.next_state(y, byte)));
        }
    }
    Some(true)
}

/// The regex over the *decoded* string value for `format: name` (full match).
pub fn format_decoded(name: &str) -> Result<String, RegexError> {
    Ok(match name {
        "date" => date(),
        "time" => time(),
        "date-time" => format!("{}[Tt]{}", date(), time()),
        "duration" => duration(),
        "email" => email(false),
        "idn-email" => email(true),
        "hostname" | "idn-hostname" => hostname(),
        "ipv4" => ipv4(),
        "ipv6" => ipv6(),
        "uuid" => {
            let h = "[0-9a-fA-F]";
            format!("{h}{{8}}-{h}{{4}}-{h}{{4}}-{h}{{4}}-{h}{{12}}")
        }
        "uri" => Uri::new(false).uri(),
        "uri-reference" => Uri::new(false).reference(),
        "iri" => Uri::new(true).uri(),
        "iri-reference" => Uri::new(true).reference(),
        "uri-template" => uri_template(),
        "json-pointer" => json_pointer(),
        "relative-json-pointer" => format!("(?:0|[1-9][0-9]*)(?:#|{})", json_pointer()),
        "regex" => {
            return Err(RegexError::unsupported(
                "format \"regex\"",
                "the set of valid ECMA-262 regexes is not a regular language",
            ))
        }
        other => {
            return Err(RegexError::unsupported(
                format!("format {other:?}"),
                "unknown format",
            ))
        }
    })
}

fn date() -> String {
    let y = "[0-9]{4}";
    let leap = "(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:[02468][048]|[13579][26])00)";
    let md = "(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])\
              |(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)\
              |02-(?:0[1-9]|1[0-9]|2[0-8]))";
    format!("(?:{y}-{md}|{leap}-02-29)")
}

fn time() -> String {
    let frac = r"(?:\.[0-9]+)?";
    let offset = "(?:[Zz]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])";
    format!(
        "(?:(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]{frac}{offset}|23:59:60{frac}(?:[Zz]|[+-]00:00))"
    )
}

fn duration() -> String {
    let n = "[0-9]+";
    let time = format!("T(?:{n}H(?:{n}M(?:{n}S)?)?|{n}M(?:{n}S)?|{n}S)");
    let date = format!("(?:{n}D|{n}M(?:{n}D)?|{n}Y(?:{n}M(?:{n}D)?)?)");
    format!("P(?:{date}(?:{time})?|{time}|{n}W)")
}

/// One LDH label of 1..=`m` characters that does not start or end with `-` and has no `--` in
/// positions 3-4 (reserved for A-labels, which are refused rather than Punycode-checked).
fn label(m: usize) -> String {
    let a = "[A-Za-z0-9]";
    let mid = "[A-Za-z0-9-]";
    match m {
        0 | 1 => a.to_string(),
        2 => format!("{a}{a}?"),
        3 => format!("{a}(?:{mid}?{a})?"),
        4 => format!("{a}(?:(?:{mid}{mid}?)?{a})?"),
        _ => format!(
            "{a}(?:(?:{mid}(?:{mid}|(?:{a}{mid}|-{a}){mid}{{0,{}}})?)?{a})?",
            m - 5
        ),
    }
}

/// `(atoms, max atom length)` shapes whose longest dot-string local part is ≤ 64 characters.
const LOCAL_SHAPES: &[(usize, usize)] = &[
    (1, 64),
    (2, 31),
    (3, 20),
    (4, 15),
    (6, 9),
    (8, 7),
    (13, 4),
    (16, 3),
    (21, 2),
    (32, 1),
];

/// `(labels, max label length)` shapes whose longest name is ≤ 253 characters.
const HOST_SHAPES: &[(usize, usize)] = &[
    (3, 63),
    (4, 62),
    (5, 49),
    (8, 30),
    (16, 14),
    (32, 6),
    (63, 3),
    (127, 1),
];

fn hostname() -> String {
    let shapes: Vec<String> = HOST_SHAPES
        .iter()
        .map(|&(n, m)| {
            let l = label(m);
            format!(r"{l}(?:\.{l}){{0,{}}}", n - 1)
        })
        .collect();
    format!("(?:{})", shapes.join("|"))
}

fn ipv4() -> String {
    let octet = "(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])";
    format!(r"{octet}(?:\.{octet}){{3}}")
}

fn ipv6() -> String {
    let h = "[0-9A-Fa-f]{1,4}";
    let ls32 = format!("(?:{h}:{h}|{})", ipv4());
    let rep = |n: usize| -> String {
        if n == 0 {
            String::new()
        } else {
            format!("(?:{h}:){{{n}}}")
        }
    };
    // `[ *k( h16 ":" ) h16 ]` before "::".
    let head = |k: usize| -> String {
        if k == 0 {
            format!("(?:{h})?")
        } else {
            format!("(?:(?:{h}:){{0,{k}}}{h})?")
        }
    };
    let alts = [
        format!("{}{ls32}", rep(6)),
        format!("::{}{ls32}", rep(5)),
        format!("{}::{}{ls32}", head(0), rep(4)),
        format!("{}::{}{ls32}", head(1), rep(3)),
        format!("{}::{}{ls32}", head(2), rep(2)),
        format!("{}::{}{ls32}", head(3), rep(1)),
        format!("{}::{ls32}", head(4)),
        format!("{}::{h}", head(5)),
        format!("{}::", head(6)),
    ];
    format!("(?:{})", alts.join("|"))
}

fn email(idn: bool) -> String {
    let atext = if idn {
        r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~\-\x{80}-\x{10FFFF}]"
    } else {
        r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~\-]"
    };
    let qtext = if idn {
        r#"[\x20\x21\x23-\x5B\x5D-\x7E\x{80}-\x{10FFFF}]"#
    } else {
        r#"[\x20\x21\x23-\x5B\x5D-\x7E]"#
    };
    // RFC 5321 4.5.3.1.1: a local part has at most 64 octets. A dot-string is written as a
    // union of shapes (atoms, longest atom) that all fit; a quoted string either has no
    // quoted-pairs (62 characters) or at most 31 units.
    let dot_string: Vec<String> = LOCAL_SHAPES
        .iter()
        .map(|&(n, m)| {
            let atom = format!("{atext}{{1,{m}}}");
            if n == 1 {
                atom
            } else {
                format!(r"{atom}(?:\.{atom}){{0,{}}}", n - 1)
            }
        })
        .collect();
    let quoted = format!(r#""{qtext}{{0,62}}"|"(?:{qtext}|\\[\x20-\x7E]){{0,31}}""#);
    let local = format!("(?:{}|{quoted})", dot_string.join("|"));
    let domain = format!(r"(?:{}|\[{}\]|\[IPv6:{}\])", hostname(), ipv4(), ipv6());
    format!("{local}@{domain}")
}

/// RFC 3986 (URI) or RFC 3987 (IRI) grammar pieces.
struct Uri {
    /// Characters of `unreserved` (or `iunreserved`), class body.
    unreserved: String,
    /// Extra characters allowed in queries (IRI `iprivate`), class body.
    private: &'static str,
}

const SUB_DELIMS: &str = r"!$&'()*+,;=";
const UCSCHAR: &str = r"\x{A0}-\x{D7FF}\x{F900}-\x{FDCF}\x{FDF0}-\x{FFEF}\x{10000}-\x{1FFFD}\x{20000}-\x{2FFFD}\x{30000}-\x{3FFFD}\x{40000}-\x{4FFFD}\x{50000}-\x{5FFFD}\x{60000}-\x{6FFFD}\x{70000}-\x{7FFFD}\x{80000}-\x{8FFFD}\x{90000}-\x{9FFFD}\x{A0000}-\x{AFFFD}\x{B0000}-\x{BFFFD}\x{C0000}-\x{CFFFD}\x{D0000}-\x{DFFFD}\x{E1000}-\x{EFFFD}";
const IPRIVATE: &str = r"\x{E000}-\x{F8FF}\x{F0000}-\x{FFFFD}\x{100000}-\x{10FFFD}";
const PCT: &str = "%[0-9A-Fa-f]{2}";

impl Uri {
    fn new(iri: bool) -> Self {
        let mut unreserved = String::from(r"A-Za-z0-9\-._~");
        if iri {
            unreserved.push_str(UCSCHAR);
        }
        Uri {
            unreserved,
            private: if iri { IPRIVATE } else { "" },
        }
    }

    /// `(?:[<unreserved><sub-delims><extra>]|pct)`
    fn chars(&self, extra: &str) -> String {
        format!(
            r"(?:[{}{}{}]|{PCT})",
            self.unreserved,
            regex_syntax::escape(SUB_DELIMS),
            extra
        )
    }

    fn authority(&self) -> String {
        let userinfo = format!("{}*", self.chars(":"));
        let future = format!(
            r"[vV][0-9A-Fa-f]+\.[{}{}:]+",
            r"A-Za-z0-9\-._~",
            regex_syntax::escape(SUB_DELIMS)
        );
        let ip_literal = format!(r"\[(?:{}|{future})\]", ipv6());
        // IPv4address is also a reg-name, so the reg-name alternative covers it.
        let host = format!("(?:{ip_literal}|{}*)", self.chars(""));
        format!("(?:{userinfo}@)?{host}(?::[0-9]*)?")
    }

    fn pchar(&self) -> String {
        self.chars(":@")
    }

    fn tail(&self) -> String {
        let q = format!(r"(?:{}|[/?{}])*", self.pchar(), self.private);
        let f = format!(r"(?:{}|[/?])*", self.pchar());
        format!(r"(?:\?{q})?(?:#{f})?")
    }

    fn paths(&self) -> (String, String, String) {
        let seg = format!("{}*", self.pchar());
        let seg_nz = format!("{}+", self.pchar());
        let abempty = format!("(?:/{seg})*");
        let absolute = format!("/(?:{seg_nz}(?:/{seg})*)?");
        let rootless = format!("{seg_nz}(?:/{seg})*");
        (abempty, absolute, rootless)
    }

    fn uri(&self) -> String {
        let scheme = r"[A-Za-z][A-Za-z0-9+\-.]*";
        let (abempty, absolute, rootless) = self.paths();
        format!(
            "{scheme}:(?://{}{abempty}|{absolute}|{rootless}|){}",
            self.authority(),
            self.tail()
        )
    }

    fn reference(&self) -> String {
        let (abempty, absolute, _) = self.paths();
        let seg = format!("{}*", self.pchar());
        let seg_nz_nc = format!("{}+", self.chars("@"));
        let noscheme = format!("{seg_nz_nc}(?:/{seg})*");
        let relative = format!(
            "(?://{}{abempty}|{absolute}|{noscheme}|){}",
            self.authority(),
            self.tail()
        );
        format!("(?:{}|{relative})", self.uri())
    }
}

fn uri_template() -> String {
    let literal = format!(
        r"(?:[\x21\x23\x24\x26-\x3B\x3D\x3F-\x5B\x5D\x5F\x61-\x7A\x7E{UCSCHAR}{IPRIVATE}]|{PCT})"
    );
    let varchar = format!("(?:[A-Za-z0-9_]|{PCT})");
    let varname = format!(r"{varchar}(?:\.?{varchar})*");
    let varspec = format!("{varname}(?::[1-9][0-9]{{0,3}}|\\*)?");
    let expr = format!(r"\{{[+#./;?&=,!@|]?{varspec}(?:,{varspec})*\}}");
    format!("(?:{literal}|{expr})*")
}

fn json_pointer() -> String {
    "(?:/(?:[^~/]|~[01])*)*".to_string()
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{check, full};
    use super::*;

    #[test]
    fn every_known_format_compiles() {
        for name in KNOWN_FORMATS.iter().filter(|n| **n != "regex") {
            full(&format(name).unwrap_or_else(|e| panic!("{name}: {e}")));
        }
        assert!(is_known_format("regex") && !is_known_format("int32"));
        assert!(matches!(
            format("regex"),
            Err(RegexError::Unsupported { .. })
        ));
        assert!(matches!(
            format("color"),
            Err(RegexError::Unsupported { .. })
        ));
    }

    #[test]
    fn format_with_pattern_when_one_contains_the_other() {
        // MaskBench: a date pattern looser than the format, and URIs narrowed by a pattern.
        let re = json_string_format(
            "date",
            Some("^([0-9]{4})(-([0-9]{2}))?(-([0-9]{2}))?$"),
            0,
            None,
        )
        .unwrap();
        check(&re, &[r#""2024-02-29""#], &[r#""2024""#, r#""2023-02-29""#]);
        let re = json_string_format(
            "uri",
            Some("^http://[a-z][a-z0-9-]{3,30}\\.herokuapp\\.com/$"),
            0,
            None,
        )
        .unwrap();
        check(
            &re,
            &[r#""http://abcd.herokuapp.com/""#],
            &[r#""http://ab.herokuapp.com/""#],
        );
        // An anchored prefix: the format's derivative after it.
        let re = json_string_format("uri", Some("^(https?|ftp)://"), 0, None).unwrap();
        check(
            &re,
            &[
                r#""https://example.com/a?b#c""#,
                r#""ftp://x""#,
                r#""http://""#,
            ],
            &[
                r#""mailto:a@b""#,
                r#""https://exa mple.com""#,
                r#""https:/x""#,
            ],
        );
        let re = json_string_format("email", Some("^admin@"), 0, None).unwrap();
        check(
            &re,
            &[r#""admin@example.com""#],
            &[r#""root@example.com""#, r#""admin@""#],
        );
        // An anchored suffix (MaskBench: uri-reference ending in .yaml/.yml).
        let re = json_string_format("uri-reference", Some("\\.ya?ml$"), 0, None).unwrap();
        check(
            &re,
            &[r#""a/b.yaml""#, r#""https://x.org/c.yml""#, r#"".yml""#],
            &[r#""a.json""#, r#""a b.yaml""#, r#""a.yaml?x""#],
        );
        assert!(matches!(
            json_string_format("uri", Some("^https://.+\\.com"), 0, None),
            Err(RegexError::Unsupported { .. })
        ));
        let re = json_string_format("date", None, 0, Some(20)).unwrap();
        check(&re, &[r#""2024-01-01""#], &[r#""2024-1-1""#]);
    }

    #[test]
    fn hand_written_values() {
        let f = |n: &str| format_decoded(n).unwrap();
        check(
            &f("date"),
            &["2000-02-29", "1900-02-28", "2023-12-31", "0400-02-29"],
            &["1900-02-29", "2023-04-31", "2023-13-01", "2023-1-01"],
        );
        check(
            &f("hostname"),
            &[
                "a",
                "a-b.c0",
                "xn-a.com",
                "a--b.com",
                &format!("{}.com", "a".repeat(63)),
            ],
            &[
                "-a",
                "a-",
                "a..b",
                "ab--c",
                &format!("{}.com", "a".repeat(64)),
                "a_b",
            ],
        );
        check(
            &f("ipv6"),
            &[
                "::",
                "::1",
                "1::",
                "1:2:3:4:5:6:7:8",
                "::ffff:1.2.3.4",
                "fe80::1:2",
            ],
            &[
                "1:2:3:4:5:6:7:8:9",
                ":::",
                "1::2::3",
                "::ffff:01.2.3.4",
                "12345::",
            ],
        );
        let local64 = format!("{}@example.com", "a".repeat(64));
        let local65 = format!("{}@example.com", "a".repeat(65));
        check(
            &f("email"),
            &[
                "a@b",
                "john.doe@example.com",
                "\"a b\"@x.org",
                &local64,
                "x@[1.2.3.4]",
            ],
            &["a..b@c", ".a@b", "a@b.", &local65, "a b@c", "@b"],
        );
        // Bounded lengths make a generous maxLength implied (MaskBench: email, maxLength 1024):
        // the bound adds nothing, and the format's language is kept.
        let re = json_string_decoded(&f("email"), 0, Some(1024)).unwrap();
        let quoted = |s: &str| format!("\"{s}\"");
        check(
            &re,
            &[&quoted("john.doe@example.com"), &quoted(&local64)],
            &[&quoted("a..b@c"), &quoted(&local65), "\"\""],
        );
        check(
            &f("duration"),
            &["P1D", "PT1S", "P1Y2M3DT4H5M6S", "P2W"],
            &["P", "PT", "P1Y2D", "P1W2D", "PT1H2S"],
        );
    }
}
