//! ECMA-262 patterns (JSON Schema's `pattern` dialect) → `regex-syntax` syntax.
//!
//! JSON Schema says patterns are ECMA-262 regexes with Unicode semantics; this module translates
//! one into an equivalent `regex-syntax` regex over code points, keeping ECMA's meaning where
//! the two dialects differ:
//! - `\d`, `\w` are ASCII-only (`[0-9]`, `[A-Za-z0-9_]`); `\s` is ECMA's whitespace set
//!   (`WhiteSpace` + `LineTerminator`), not Unicode's `White_Space`;
//! - `.` excludes the four line terminators (`\n`, `\r`, U+2028, U+2029);
//! - `$` only matches at the very end (no multi-line flag, no "before a final newline");
//! - `[^]` is any code point and `[]` is nothing; `\cX`, `\0`, `\uXXXX` (including surrogate
//!   pairs), `\u{...}`, `\xHH`, `\p{...}`/`\P{...}` are understood;
//! - groups become non-capturing (names are dropped), lazy quantifiers become greedy (same
//!   language), and Annex B leniency is kept: a `{` that does not start a quantifier and a lone
//!   `]` or `}` are literals, `\` before any ASCII punctuation is that character.
//!
//! Refused with [`RegexError::Unsupported`] and the construct's name: lookahead, lookbehind,
//! backreferences (numbered and named), word boundaries (`\b`, `\B`), lone surrogates and inline
//! modifiers. Malformed patterns are [`RegexError::Invalid`] with the byte offset.
//! Cost: one pass over the pattern plus one `regex-syntax` parse of the result.

use super::pieces::NOTHING;
use crate::grammar::regex::RegexError;

/// ECMA `\s`: WhiteSpace (tab, VT, FF, space, NBSP, ZWNBSP, Zs) and LineTerminator.
const SPACE: &str =
    r"\t\n\x0B\x0C\r \xA0\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000}\x{FEFF}";
const DIGIT: &str = "0-9";
const WORD: &str = "A-Za-z0-9_";

/// Translates an ECMA-262 pattern (as JSON Schema's `pattern` uses it) into `regex-syntax`
/// syntax with the same language. Anchors (`^`, `$`) are kept: search semantics are the
/// caller's business (see [`json_string`](super::json_string)).
///
/// ```
/// use formwork_core::schema::regex::ecma_to_regex;
/// assert_eq!(ecma_to_regex(r"^\d+$")?, "^(?:[0-9])+$");
/// assert!(ecma_to_regex(r"(?=a)b").is_err());
/// # Ok::<(), formwork_core::schema::regex::RegexError>(())
/// ```
pub fn ecma_to_regex(pattern: &str) -> Result<String, RegexError> {
    let mut p = Parser {
        pattern,
        chars: pattern.char_indices().collect(),
        pos: 0,
        len: pattern.len(),
        out: String::new(),
        pending_sets: Vec::new(),
    };
    p.disjunction()?;
    if let Some(&(off, c)) = p.chars.get(p.pos) {
        return Err(RegexError::invalid(
            format!("unmatched `{c}`"),
            pattern,
            off,
        ));
    }
    regex_syntax::ParserBuilder::new()
        .nest_limit(250)
        .build()
        .parse(&p.out)
        .map_err(|e| {
            RegexError::invalid(
                format!("pattern {pattern:?} does not translate: {e}"),
                pattern,
                0,
            )
        })?;
    Ok(p.out)
}

struct Parser<'a> {
    /// The pattern, for the location of an error.
    pattern: &'a str,
    chars: Vec<(usize, char)>,
    pos: usize,
    len: usize,
    out: String,
    /// Sets (`\d`, `\p{L}`) met inside the class being parsed.
    pending_sets: Vec<String>,
}

/// One element of a character class.
enum ClassItem {
    Char(char),
    /// A nested class in `regex-syntax` syntax (`[0-9]`, `[^0-9]`, `\p{L}`).
    Set(String),
}

impl Parser<'_> {
    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).map(|&(_, c)| c)
    }

    fn peek_at(&self, k: usize) -> Option<char> {
        self.chars.get(self.pos + k).map(|&(_, c)| c)
    }

    fn offset(&self) -> usize {
        self.chars.get(self.pos).map_or(self.len, |&(o, _)| o)
    }

    fn eat(&mut self, c: char) -> bool {
        if self.peek() == Some(c) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn err(&self, msg: impl Into<String>) -> RegexError {
        self.err_at(msg, self.offset())
    }

    /// [`RegexError::Invalid`] at byte `offset` of the pattern.
    fn err_at(&self, msg: impl Into<String>, offset: usize) -> RegexError {
        RegexError::invalid(msg, self.pattern, offset)
    }

    fn unsupported(&self, feature: &str) -> RegexError {
        RegexError::unsupported(
            feature,
            format!(
                "pattern construct at offset {} cannot be matched by a finite automaton here",
                self.offset()
            ),
        )
    }

    fn disjunction(&mut self) -> Result<(), RegexError> {
        self.alternative()?;
        while self.eat('|') {
            self.out.push('|');
            self.alternative()?;
        }
        Ok(())
    }

    fn alternative(&mut self) -> Result<(), RegexError> {
        while let Some(c) = self.peek() {
            match c {
                '|' | ')' => break,
                '^' | '$' => {
                    self.pos += 1;
                    self.out.push(c);
                    if matches!(self.peek(), Some('*' | '+' | '?')) || self.quantifier_ahead() {
                        return Err(self.err("nothing to repeat after an anchor"));
                    }
                }
                _ => {
                    let atom_start = self.out.len();
                    self.atom()?;
                    self.quantifier(atom_start)?;
                }
            }
        }
        Ok(())
    }

    /// Whether a `{n}`, `{n,}` or `{n,m}` quantifier starts here.
    fn quantifier_ahead(&self) -> bool {
        self.parse_braces().is_some()
    }

    /// Parses `{n}`, `{n,}`, `{n,m}` at the current position without consuming it.
    fn parse_braces(&self) -> Option<(u32, Option<u32>, usize)> {
        if self.peek() != Some('{') {
            return None;
        }
        let mut k = 1;
        let num = |k: &mut usize| -> Option<Option<u32>> {
            let mut s = String::new();
            while let Some(c) = self.peek_at(*k).filter(char::is_ascii_digit) {
                s.push(c);
                *k += 1;
            }
            if s.is_empty() {
                Some(None)
            } else {
                // Counts beyond u32 saturate: they are refused later as too large.
                Some(Some(s.parse().unwrap_or(u32::MAX)))
            }
        };
        let min = num(&mut k)??;
        let max = if self.peek_at(k) == Some(',') {
            k += 1;
            num(&mut k)?
        } else {
            Some(min)
        };
        if self.peek_at(k) != Some('}') {
            return None;
        }
        Some((min, max, k + 1))
    }

    fn quantifier(&mut self, atom_start: usize) -> Result<(), RegexError> {
        let q = match self.peek() {
            Some(c @ ('*' | '+' | '?')) => {
                self.pos += 1;
                c.to_string()
            }
            Some('{') => match self.parse_braces() {
                Some((min, max, width)) => {
                    if max.is_some_and(|m| m < min) {
                        return Err(self.err("numbers out of order in {} quantifier"));
                    }
                    self.pos += width;
                    match max {
                        Some(m) if m == min => format!("{{{min}}}"),
                        Some(m) => format!("{{{min},{m}}}"),
                        None => format!("{{{min},}}"),
                    }
                }
                None => return Ok(()),
            },
            _ => return Ok(()),
        };
        // Lazy and greedy quantifiers accept the same language.
        self.eat('?');
        if matches!(self.peek(), Some('*' | '+' | '?')) {
            return Err(self.err("nothing to repeat"));
        }
        let atom = self.out.split_off(atom_start);
        self.out.push_str(&format!("(?:{atom}){q}"));
        Ok(())
    }

    fn atom(&mut self) -> Result<(), RegexError> {
        let Some(c) = self.peek() else {
            return Ok(());
        };
        match c {
            '.' => {
                self.pos += 1;
                self.out.push_str(r"[^\n\r\x{2028}\x{2029}]");
            }
            '(' => self.group()?,
            '[' => {
                self.pos += 1;
                let class = self.class()?;
                self.out.push_str(&class);
            }
            '\\' => {
                self.pos += 1;
                match self.escape(false)? {
                    ClassItem::Char(c) => self.push_literal(c),
                    ClassItem::Set(s) => self.out.push_str(&s),
                }
            }
            '*' | '+' | '?' => return Err(self.err("nothing to repeat")),
            '{' if self.quantifier_ahead() => return Err(self.err("nothing to repeat")),
            _ => {
                self.pos += 1;
                self.push_literal(c);
            }
        }
        Ok(())
    }

    fn push_literal(&mut self, c: char) {
        self.out
            .push_str(&regex_syntax::escape(c.encode_utf8(&mut [0; 4])));
    }

    fn group(&mut self) -> Result<(), RegexError> {
        let open = self.offset();
        self.pos += 1;
        if self.eat('?') {
            match (self.peek(), self.peek_at(1)) {
                (Some(':'), _) => self.pos += 1,
                (Some('='), _) | (Some('!'), _) => return Err(self.unsupported("lookahead")),
                (Some('<'), Some('=')) | (Some('<'), Some('!')) => {
                    return Err(self.unsupported("lookbehind"))
                }
                (Some('<'), _) => {
                    self.pos += 1;
                    let mut name = String::new();
                    while let Some(c) = self.peek() {
                        self.pos += 1;
                        if c == '>' {
                            break;
                        }
                        name.push(c);
                    }
                    let ok = name.chars().enumerate().all(|(i, c)| {
                        c == '_' || c == '$' || c.is_alphabetic() || (i > 0 && c.is_alphanumeric())
                    });
                    if name.is_empty() || !ok {
                        return Err(self.err_at("invalid capture group name", open));
                    }
                }
                _ => return Err(self.unsupported("inline modifiers")),
            }
        }
        self.out.push_str("(?:");
        self.disjunction()?;
        if !self.eat(')') {
            return Err(self.err_at("unclosed group", open));
        }
        self.out.push(')');
        Ok(())
    }

    fn hex(&mut self, n: usize) -> Option<u32> {
        let mut v = 0u32;
        for k in 0..n {
            v = v * 16 + self.peek_at(k)?.to_digit(16)?;
        }
        self.pos += n;
        Some(v)
    }

    /// Parses an escape after `\`. In a class, `\b` is backspace and `\-` is allowed.
    fn escape(&mut self, in_class: bool) -> Result<ClassItem, RegexError> {
        let start = self.offset();
        let Some(c) = self.peek() else {
            return Err(self.err("pattern ends with a lone backslash"));
        };
        self.pos += 1;
        let set = |s: &str, neg: bool| {
            ClassItem::Set(if neg {
                format!("[^{s}]")
            } else {
                format!("[{s}]")
            })
        };
        let item = match c {
            'd' | 'D' => set(DIGIT, c == 'D'),
            'w' | 'W' => set(WORD, c == 'W'),
            's' | 'S' => set(SPACE, c == 'S'),
            'b' if in_class => ClassItem::Char('\u{8}'),
            'b' | 'B' => {
                self.pos -= 1;
                return Err(self.unsupported("word boundary"));
            }
            '1'..='9' => {
                self.pos -= 1;
                return Err(self.unsupported("backreference"));
            }
            'k' if self.peek() == Some('<') => {
                self.pos -= 1;
                return Err(self.unsupported("named backreference"));
            }
            '0' => {
                if self.peek().is_some_and(|d| d.is_ascii_digit()) {
                    return Err(self.err_at("octal escapes are not allowed", start));
                }
                ClassItem::Char('\0')
            }
            't' => ClassItem::Char('\t'),
            'n' => ClassItem::Char('\n'),
            'v' => ClassItem::Char('\u{B}'),
            'f' => ClassItem::Char('\u{C}'),
            'r' => ClassItem::Char('\r'),
            'c' => match self.peek() {
                Some(l) if l.is_ascii_alphabetic() => {
                    self.pos += 1;
                    ClassItem::Char(char::from(l as u8 % 32))
                }
                _ => return Err(self.err_at("invalid \\c escape", start)),
            },
            'x' => match self.hex(2) {
                Some(v) => ClassItem::Char(char::from(v as u8)),
                None => return Err(self.err_at("invalid \\x escape", start)),
            },
            'u' => ClassItem::Char(self.unicode_escape(start)?),
            'p' | 'P' => {
                if !self.eat('{') {
                    return Err(self.err_at("invalid unicode property escape", start));
                }
                let mut name = String::new();
                loop {
                    match self.peek() {
                        Some('}') => {
                            self.pos += 1;
                            break;
                        }
                        Some(ch) if ch.is_ascii_alphanumeric() || ch == '_' || ch == '=' => {
                            self.pos += 1;
                            name.push(ch);
                        }
                        _ => return Err(self.err_at("invalid unicode property escape", start)),
                    }
                }
                let re = format!(r"\{c}{{{name}}}");
                if regex_syntax::Parser::new().parse(&re).is_err() {
                    return Err(RegexError::unsupported(
                        "unicode property",
                        format!("property `{name}` at offset {start} is not known to regex-syntax"),
                    ));
                }
                ClassItem::Set(re)
            }
            '-' => ClassItem::Char('-'),
            c if c.is_ascii_punctuation() => ClassItem::Char(c),
            c => return Err(self.err_at(format!("invalid escape `\\{c}`"), start)),
        };
        Ok(item)
    }

    /// `\uXXXX` (pairing surrogates) or `\u{X...}`, after the `u`.
    fn unicode_escape(&mut self, start: usize) -> Result<char, RegexError> {
        let pattern = self.pattern;
        let bad = || RegexError::invalid("invalid \\u escape", pattern, start);
        let v = if self.eat('{') {
            let mut v: u32 = 0;
            let mut n = 0;
            while let Some(d) = self.peek().and_then(|c| c.to_digit(16)) {
                self.pos += 1;
                v = v.saturating_mul(16).saturating_add(d);
                n += 1;
            }
            if n == 0 || !self.eat('}') {
                return Err(bad());
            }
            v
        } else {
            self.hex(4).ok_or_else(bad)?
        };
        if (0xD800..0xDC00).contains(&v) {
            // A high surrogate must pair with an escaped low surrogate.
            if self.peek() == Some('\\') && self.peek_at(1) == Some('u') {
                let save = self.pos;
                self.pos += 2;
                if let Some(lo) = self.hex(4).filter(|lo| (0xDC00..0xE000).contains(lo)) {
                    let cp = 0x10000 + ((v - 0xD800) << 10) + (lo - 0xDC00);
                    return char::from_u32(cp).ok_or_else(bad);
                }
                self.pos = save;
            }
            return Err(RegexError::unsupported(
                "lone surrogate",
                format!("escape at offset {start} is an unpaired UTF-16 surrogate, which no UTF-8 string contains"),
            ));
        }
        if (0xDC00..0xE000).contains(&v) {
            return Err(RegexError::unsupported(
                "lone surrogate",
                format!("escape at offset {start} is an unpaired UTF-16 surrogate, which no UTF-8 string contains"),
            ));
        }
        char::from_u32(v).ok_or_else(bad)
    }

    /// A class after `[`; returns it in `regex-syntax` syntax.
    fn class(&mut self) -> Result<String, RegexError> {
        let open = self.offset().saturating_sub(1);
        self.pending_sets.clear();
        let negated = self.eat('^');
        let mut items: Vec<ClassItem> = Vec::new();
        let mut ranges: Vec<(char, char)> = Vec::new();
        loop {
            let Some(c) = self.peek() else {
                return Err(self.err_at("unclosed character class", open));
            };
            if c == ']' {
                self.pos += 1;
                break;
            }
            let first = self.class_atom()?;
            // A range `a-b`, unless the `-` is last or an endpoint is a set (Annex B: literal).
            if self.peek() == Some('-') && self.peek_at(1).is_some_and(|c| c != ']') {
                let save = self.pos;
                self.pos += 1;
                let second = self.class_atom()?;
                match (&first, &second) {
                    (ClassItem::Char(a), ClassItem::Char(b)) => {
                        if a > b {
                            return Err(self.err_at("range out of order in character class", open));
                        }
                        ranges.push((*a, *b));
                        continue;
                    }
                    _ => {
                        self.pos = save;
                    }
                }
            }
            items.push(first);
        }
        // Sets were collected by `class_atom` (a union does not care about order).
        ranges.extend(items.into_iter().filter_map(|it| match it {
            ClassItem::Char(c) => Some((c, c)),
            ClassItem::Set(_) => None,
        }));
        let mut body = String::new();
        for (a, b) in &ranges {
            body.push_str(&class_char(*a));
            if a != b {
                body.push('-');
                body.push_str(&class_char(*b));
            }
        }
        for s in self.pending_sets.drain(..) {
            body.push_str(&s);
        }
        Ok(match (negated, body.is_empty()) {
            (false, true) => NOTHING.to_string(),
            (true, true) => r"[\x{0}-\x{10FFFF}]".to_string(),
            (false, false) => format!("[{body}]"),
            (true, false) => format!("[^{body}]"),
        })
    }

    fn class_atom(&mut self) -> Result<ClassItem, RegexError> {
        let Some(c) = self.peek() else {
            return Err(self.err("unclosed character class"));
        };
        self.pos += 1;
        if c == '\\' {
            let item = self.escape(true)?;
            if let ClassItem::Set(s) = &item {
                self.pending_sets.push(s.clone());
            }
            return Ok(item);
        }
        Ok(ClassItem::Char(c))
    }
}

/// A code point written safely inside a `regex-syntax` class.
fn class_char(c: char) -> String {
    if c.is_ascii_alphanumeric() {
        c.to_string()
    } else {
        format!(r"\x{{{:X}}}", c as u32)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::check;
    use super::*;
    use crate::grammar::gbnf::Location;
    use proptest::prelude::*;

    fn ok(p: &str) -> String {
        ecma_to_regex(p).unwrap_or_else(|e| panic!("{p}: {e}"))
    }

    fn unsupported(p: &str, feature: &str) {
        match ecma_to_regex(p) {
            Err(RegexError::Unsupported { feature: f, .. }) => assert_eq!(f, feature, "{p}"),
            other => panic!("{p}: expected unsupported {feature}, got {other:?}"),
        }
    }

    #[test]
    fn ecma_classes_keep_ecma_meaning() {
        check(&ok(r"\d"), &["0", "9"], &["\u{0660}", "a"]);
        check(&ok(r"\w"), &["a", "Z", "_", "5"], &["é", "-"]);
        check(
            &ok(r"\s"),
            &[" ", "\u{FEFF}", "\u{2029}", "\u{B}"],
            &["\u{85}", "a"],
        );
        check(&ok(r"\S"), &["a", "\u{85}"], &[" ", "\n"]);
        check(&ok("."), &["a", "😀", "\t"], &["\n", "\r", "\u{2028}"]);
        check(&ok("[^]"), &["\n", "a"], &["", "ab"]);
        check(&ok("[]"), &[], &["", "a", "]"]);
        check(&ok(r"[\d-z]"), &["1", "-", "z"], &["a", "y"]);
        check(&ok(r"[^\D]"), &["1"], &["a"]);
        check(&ok(r"[\b]"), &["\u{8}"], &["b"]);
        check(&ok(r"[a\-z]"), &["a", "-", "z"], &["b"]);
        check(&ok(r"[.$^{]+"), &[".$^{"], &["a"]);
        check(&ok(r"\p{Letter}+"), &["héllo"], &["1"]);
        check(&ok(r"\P{L}"), &["1"], &["a"]);
    }

    #[test]
    fn escapes_and_literals() {
        check(&ok(r"\cC\cc"), &["\u{3}\u{3}"], &["cCcc"]);
        check(&ok(r"\x41\u0042\u{43}\0"), &["ABC\0"], &["ABC"]);
        check(&ok(r"\uD83D\uDE00"), &["😀"], &["\u{FFFD}"]);
        check(&ok(r"\/\-\.\$"), &["/-.$"], &["a-.$"]);
        check(&ok(r"a{,5}"), &["a{,5}"], &["aaa"]);
        check(&ok(r"x{2}}"), &["xx}"], &["xx"]);
        check(&ok(r"a]"), &["a]"], &["a"]);
        check(&ok("é+"), &["éé"], &["e"]);
    }

    #[test]
    fn structure_is_kept() {
        check(
            &ok("^(?<year>[0-9]{4})-(?:0[1-9]|1[0-2])$"),
            &["2024-12"],
            &["2024-13"],
        );
        check(&ok("a+?b*?c??d{1,2}?"), &["abcdd", "ad"], &["bd"]);
        check(&ok("(a|b)(c)"), &["ac", "bc"], &["ab"]);
        check(&ok("^abc$"), &["abc"], &["abc\n"]);
    }

    #[test]
    fn unsupported_constructs_are_named() {
        unsupported("(?=a)a", "lookahead");
        unsupported("(?!a)b", "lookahead");
        unsupported("(?<=a)b", "lookbehind");
        unsupported("(?<!a)b", "lookbehind");
        unsupported(r"(a)\1", "backreference");
        unsupported(r"(?<n>a)\k<n>", "named backreference");
        unsupported(r"\bword\b", "word boundary");
        unsupported(r"\B", "word boundary");
        unsupported(r"\uD83D", "lone surrogate");
        unsupported("(?i:a)", "inline modifiers");
        unsupported(r"\p{NoSuchProperty}", "unicode property");
    }

    /// A random pattern over the subset where ECMA-262 and `regex-syntax` agree (literals,
    /// classes, `.`, groups, alternation, greedy quantifiers, anchors).
    fn common_pattern() -> impl Strategy<Value = String> {
        let atom = prop_oneof![
            Just("a".to_string()),
            Just("b".to_string()),
            Just(".".to_string()),
            Just("[ab]".to_string()),
            Just("[^a]".to_string()),
            Just("\\d".to_string()),
        ];
        let quantified = (
            atom,
            prop_oneof![Just(""), Just("*"), Just("+"), Just("?"), Just("{1,2}")],
        )
            .prop_map(|(a, q)| format!("{a}{q}"));
        let seq = proptest::collection::vec(quantified, 1..4).prop_map(|v| v.concat());
        let grouped = (seq.clone(), seq.clone(), any::<bool>()).prop_map(|(x, y, alt)| {
            if alt {
                format!("(?:{x}|{y})")
            } else {
                format!("({x}){y}")
            }
        });
        (prop_oneof![seq, grouped], any::<bool>(), any::<bool>()).prop_map(|(body, s, e)| {
            format!(
                "{}{body}{}",
                if s { "^" } else { "" },
                if e { "$" } else { "" }
            )
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        /// On the common subset the translation keeps the search semantics of the original.
        #[test]
        fn translation_keeps_meaning_on_the_common_subset(
            p in common_pattern(),
            inputs in proptest::collection::vec("[ab1\\n]{0,5}", 16),
        ) {
            let ours = regex_automata::meta::Regex::new(&ok(&p)).unwrap();
            // `.` differs only on \r and U+2028/2029, which the inputs avoid.
            let reference = regex_automata::meta::Regex::new(&p).unwrap();
            for s in &inputs {
                prop_assert_eq!(ours.is_match(s), reference.is_match(s), "{} on {:?}", p, s);
            }
        }
    }

    #[test]
    fn malformed_patterns_are_invalid_with_offsets() {
        for (p, off) in [
            ("(abc", 0),
            ("abc)", 3),
            ("[abc", 0),
            ("a**", 2),
            ("*a", 0),
            ("a{3,1}", 1),
            (r"\", 1),
            (r"\q", 1),
            ("[z-a]", 0),
            ("^*", 1),
        ] {
            match ecma_to_regex(p) {
                Err(RegexError::Invalid { at, .. }) => {
                    assert_eq!(at, Location::from_offset(p, off), "{p}")
                }
                other => panic!("{p}: expected invalid, got {other:?}"),
            }
        }
    }
}
