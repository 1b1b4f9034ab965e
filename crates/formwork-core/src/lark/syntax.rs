//! The Lark text format: text → definitions with byte offsets, nothing lowered yet.
//!
//! Owns tokenizing and parsing the text (statements, expansions, literals, regex literals,
//! `%json` bodies) and the syntax errors, each at the offending `line:column`. Knows nothing
//! of what a name means beyond its case (UPPERCASE: terminal, lowercase: rule); resolving
//! names, terminals' regexes and the grammar IR are `lower`'s and `terminal`'s.
//!
//! Statements end at a line break, except that a line whose first non-blank character is `|`
//! continues the definition before it, and line breaks inside `( )` and `[ ]` are blanks.
//! Comments run from `//` (Lark) or `#` (llguidance) to the end of the line.

use serde_json::Value;

use super::error::LarkError;
use super::MAX_NESTING;
use crate::grammar::gbnf::Location;

/// A parsed grammar file, in text order.
#[derive(Debug, Default)]
pub(super) struct File {
    pub defs: Vec<Def>,
    pub ignores: Vec<Ignore>,
    pub imports: Vec<Import>,
}

/// `name: expansions` (a rule) or `NAME: expansions` (a terminal).
#[derive(Debug, Clone)]
pub(super) struct Def {
    pub name: String,
    /// Byte offset of the name.
    pub at: usize,
    pub terminal: bool,
    /// `.N` after the name, with the offset of the `.`.
    pub priority: Option<(i64, usize)>,
    pub body: Alts,
}

/// `%ignore expansions`.
#[derive(Debug)]
pub(super) struct Ignore {
    pub body: Alts,
    /// Byte offset of the `%`.
    pub at: usize,
}

/// One name from `%import common...`.
#[derive(Debug)]
pub(super) struct Import {
    /// The name in `common`.
    pub name: String,
    /// The name it gets here (`-> ALIAS`, else the same).
    pub alias: String,
    /// Byte offset of the name.
    pub at: usize,
}

/// Alternatives, each a sequence of items.
pub(super) type Alts = Vec<Vec<Item>>;

/// An atom with at most one postfix operator.
#[derive(Debug, Clone)]
pub(super) struct Item {
    pub atom: Atom,
    pub op: Option<Op>,
    /// Byte offset of the atom.
    pub at: usize,
    /// Byte offset of the operator (equal to `at` without one).
    pub op_at: usize,
}

/// A postfix operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Op {
    /// `?`
    Optional,
    /// `*`, `+`, `~ n`, `~ n..m`, `{n}`, `{n,}`, `{n,m}`, `{,m}`: between `min` and `max`
    /// (`None`: unbounded) times.
    Repeat(u32, Option<u32>),
}

/// The smallest units of an expansion.
#[derive(Debug, Clone)]
pub(super) enum Atom {
    /// `"..."` or `"..."i` (case-insensitive).
    Literal { text: String, ci: bool },
    /// `"a".."z"`.
    CharRange(char, char),
    /// `/body/flags`; `body_at` is the byte offset of the body's first byte.
    Regex {
        body: String,
        body_at: usize,
        flags: String,
    },
    /// A rule or terminal name.
    Name(String),
    /// `( ... )`
    Group(Alts),
    /// `[ ... ]`
    Maybe(Alts),
    /// `%json { ... }`
    Json(Value),
}

/// Parses the whole text.
pub(super) fn parse_file(text: &str) -> Result<File, LarkError> {
    let mut r = Reader { text, pos: 0 };
    let mut file = File::default();
    loop {
        r.skip_space(true);
        let Some(c) = r.peek() else {
            return Ok(file);
        };
        if c == '%' {
            r.directive(&mut file)?;
        } else {
            file.defs.push(r.definition()?);
        }
        r.end_of_statement()?;
    }
}

fn is_name_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_'
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Whether a name is a terminal's (`Some(true)`), a rule's (`Some(false)`), or mixes cases
/// (`None`). Names without letters (`_1`) are rules, as Lark reads them.
pub(super) fn is_terminal_name(name: &str) -> Option<bool> {
    let upper = name.chars().any(|c| c.is_ascii_uppercase());
    let lower = name.chars().any(|c| c.is_ascii_lowercase());
    match (upper, lower) {
        (true, true) => None,
        (true, false) => Some(true),
        _ => Some(false),
    }
}

struct Reader<'a> {
    text: &'a str,
    /// Current byte offset.
    pos: usize,
}

impl Reader<'_> {
    fn loc(&self, offset: usize) -> Location {
        Location::from_offset(self.text, offset)
    }

    fn rest(&self) -> &str {
        &self.text[self.pos..]
    }

    fn peek(&self) -> Option<char> {
        self.rest().chars().next()
    }

    fn peek2(&self) -> Option<char> {
        self.rest().chars().nth(1)
    }

    fn bump(&mut self) {
        if let Some(c) = self.peek() {
            self.pos += c.len_utf8();
        }
    }

    fn unexpected(&self) -> LarkError {
        match self.peek() {
            Some(ch) => LarkError::UnexpectedChar {
                ch,
                at: self.loc(self.pos),
            },
            None => LarkError::Expected {
                expected: "more text".into(),
                at: self.loc(self.pos),
            },
        }
    }

    fn expected(&self, what: impl Into<String>) -> LarkError {
        LarkError::Expected {
            expected: what.into(),
            at: self.loc(self.pos),
        }
    }

    fn unsupported(&self, what: impl Into<String>, at: usize) -> LarkError {
        LarkError::Unsupported {
            what: what.into(),
            at: self.loc(at),
        }
    }

    /// Skips spaces, tabs and comments; also line breaks if `newlines`.
    fn skip_space(&mut self, newlines: bool) {
        while let Some(c) = self.peek() {
            match c {
                ' ' | '\t' | '\u{c}' => self.bump(),
                '\n' | '\r' if newlines => self.bump(),
                '#' => self.skip_line(),
                '/' if self.peek2() == Some('/') => self.skip_line(),
                _ => break,
            }
        }
    }

    /// Moves to the end of the line (before its line break).
    fn skip_line(&mut self) {
        self.pos = self
            .rest()
            .find(['\n', '\r'])
            .map_or(self.text.len(), |i| self.pos + i);
    }

    /// At a line break: whether the next non-blank line starts with `|` (then moves there).
    fn continues_with_bar(&mut self) -> bool {
        let save = self.pos;
        self.skip_space(true);
        if self.peek() == Some('|') {
            return true;
        }
        self.pos = save;
        false
    }

    /// After a statement: only blanks and a comment may remain on the line.
    fn end_of_statement(&mut self) -> Result<(), LarkError> {
        self.skip_space(false);
        match self.peek() {
            None | Some('\n' | '\r') => Ok(()),
            Some(_) => Err(self.unexpected()),
        }
    }

    fn name(&mut self) -> Option<String> {
        if !self.peek().is_some_and(is_name_start) {
            return None;
        }
        let rest = self.rest();
        // llguidance also allows `-` inside names; never the `-` of `->`.
        let mut len = 0;
        for (i, c) in rest.char_indices() {
            let dash = c == '-' && rest[i + 1..].starts_with(|d: char| is_name_char(d));
            if is_name_char(c) || (dash && i > 0) {
                len = i + 1;
            } else {
                break;
            }
        }
        let name = rest[..len].to_string();
        self.pos += len;
        Some(name)
    }

    /// `[!?]name[.priority]: expansions`
    fn definition(&mut self) -> Result<Def, LarkError> {
        let marker = self.pos;
        if matches!(self.peek(), Some('!' | '?')) {
            self.bump();
        }
        let at = self.pos;
        let Some(name) = self.name() else {
            return Err(if self.pos == marker {
                self.unexpected()
            } else {
                self.expected("a rule name")
            });
        };
        let Some(terminal) = is_terminal_name(&name) else {
            return Err(LarkError::MixedCaseName {
                name,
                at: self.loc(at),
            });
        };
        if terminal && marker != at {
            return Err(self.unsupported(
                format!("`{}` before a terminal name", &self.text[marker..at]),
                marker,
            ));
        }
        self.skip_space(false);
        let mut priority = None;
        if self.peek() == Some('.') {
            let dot = self.pos;
            self.bump();
            priority = Some((self.signed_int()?, dot));
            self.skip_space(false);
        }
        match self.peek() {
            Some('{') => {
                return Err(self.unsupported("templates (`name{params}`)", self.pos));
            }
            Some('[') => {
                return Err(self.unsupported(
                    "llguidance lexeme options (`name[...]`): capture, lazy, stop, max_tokens and temperature change decoding, not the language",
                    self.pos,
                ));
            }
            Some(':') => self.bump(),
            _ => return Err(self.expected(format!("`:` after the name `{name}`"))),
        }
        self.skip_space(false);
        // A leading `|`, on this line or the next (`a:\n  | b\n  | c`), starts no empty
        // alternative.
        if matches!(self.peek(), Some('\n' | '\r')) {
            self.continues_with_bar();
        }
        if self.peek() == Some('|') {
            self.bump();
            self.skip_space(false);
        }
        let body = self.alternatives(false, 0)?;
        Ok(Def {
            name,
            at,
            terminal,
            priority,
            body,
        })
    }

    fn signed_int(&mut self) -> Result<i64, LarkError> {
        let start = self.pos;
        if matches!(self.peek(), Some('-' | '+')) {
            self.bump();
        }
        let digits = self.rest().find(|c: char| !c.is_ascii_digit());
        let len = digits.unwrap_or(self.rest().len());
        if len == 0 {
            return Err(self.expected("a number (the priority)"));
        }
        self.pos += len;
        self.text[start..self.pos]
            .parse()
            .map_err(|_| self.expected("a priority that fits in 64 bits"))
    }

    fn count(&mut self) -> Result<u32, LarkError> {
        let start = self.pos;
        let len = self
            .rest()
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(self.rest().len());
        if len == 0 {
            return Err(self.expected("a repetition count"));
        }
        self.pos += len;
        self.text[start..self.pos]
            .parse()
            .map_err(|_| LarkError::InvalidRepetition {
                what: format!("count above {}", u32::MAX),
                at: self.loc(start),
            })
    }

    fn directive(&mut self, file: &mut File) -> Result<(), LarkError> {
        let at = self.pos;
        self.bump();
        let word = self.name().unwrap_or_default();
        self.skip_space(false);
        match word.as_str() {
            "ignore" => {
                let body = self.alternatives(false, 0)?;
                if body.iter().all(Vec::is_empty) {
                    return Err(self.expected("what to ignore"));
                }
                file.ignores.push(Ignore { body, at });
            }
            "import" => self.import(file)?,
            "llguidance" => {
                let json_at = self.pos;
                let v = self.json()?;
                if v.as_object().is_none_or(|o| !o.is_empty()) {
                    return Err(self.unsupported(
                        "llguidance options (only `%llguidance {}` is accepted)",
                        json_at,
                    ));
                }
            }
            "json" => {
                return Err(self.unsupported("`%json` outside a definition", at));
            }
            "" => return Err(self.expected("a directive name after `%`")),
            _ => {
                return Err(self.unsupported(
                    format!("directive `%{word}` (supported: %import common, %ignore, %json)"),
                    at,
                ));
            }
        }
        Ok(())
    }

    /// `%import common.NAME [-> ALIAS]` or `%import common (NAME, ...)`.
    fn import(&mut self, file: &mut File) -> Result<(), LarkError> {
        let start = self.pos;
        let module = self.name().unwrap_or_default();
        if module != "common" {
            let end = self
                .rest()
                .find(|c: char| c.is_whitespace() || c == '(')
                .map_or(self.text.len(), |i| self.pos + i);
            let path = &self.text[start..end.max(start)];
            return Err(self.unsupported(
                format!("`%import {path}`: only the built-in `common` terminals can be imported"),
                start,
            ));
        }
        if self.peek() == Some('.') {
            self.bump();
            let at = self.pos;
            let name = self
                .name()
                .ok_or_else(|| self.expected("a name after `common.`"))?;
            self.skip_space(false);
            let mut alias = name.clone();
            if self.rest().starts_with("->") {
                self.pos += 2;
                self.skip_space(false);
                alias = self
                    .name()
                    .ok_or_else(|| self.expected("a name after `->`"))?;
            }
            file.imports.push(Import { name, alias, at });
            return Ok(());
        }
        self.skip_space(false);
        if self.peek() != Some('(') {
            return Err(self.expected("`.NAME` or `(NAME, ...)` after `%import common`"));
        }
        self.bump();
        loop {
            self.skip_space(true);
            let at = self.pos;
            let name = self.name().ok_or_else(|| self.expected("a name"))?;
            file.imports.push(Import {
                alias: name.clone(),
                name,
                at,
            });
            self.skip_space(true);
            match self.peek() {
                Some(',') => self.bump(),
                Some(')') => {
                    self.bump();
                    return Ok(());
                }
                _ => return Err(self.expected("`,` or `)`")),
            }
        }
    }

    /// Alternatives up to a closing bracket (`nested`) or the end of the statement.
    fn alternatives(&mut self, nested: bool, depth: usize) -> Result<Alts, LarkError> {
        let mut alts = vec![self.sequence(nested, depth)?];
        loop {
            if self.peek() != Some('|') {
                let at_break = matches!(self.peek(), Some('\n' | '\r'));
                if nested || !at_break || !self.continues_with_bar() {
                    return Ok(alts);
                }
            }
            self.bump();
            self.skip_space(nested);
            alts.push(self.sequence(nested, depth)?);
        }
    }

    fn sequence(&mut self, nested: bool, depth: usize) -> Result<Vec<Item>, LarkError> {
        let mut items = Vec::new();
        loop {
            self.skip_space(nested);
            let at = self.pos;
            let Some(c) = self.peek() else {
                return Ok(items);
            };
            let atom = match c {
                '"' => self.literal_or_range()?,
                '/' => self.regex()?,
                '(' | '[' => {
                    if depth >= MAX_NESTING {
                        return Err(LarkError::TooDeep {
                            limit: MAX_NESTING,
                            at: self.loc(at),
                        });
                    }
                    self.bump();
                    let alts = self.alternatives(true, depth + 1)?;
                    let close = if c == '(' { ')' } else { ']' };
                    if self.peek() != Some(close) {
                        return Err(match self.peek() {
                            None => LarkError::Unclosed {
                                open: c,
                                at: self.loc(at),
                            },
                            Some(_) => self.unexpected(),
                        });
                    }
                    self.bump();
                    if c == '(' {
                        Atom::Group(alts)
                    } else {
                        Atom::Maybe(alts)
                    }
                }
                '%' => {
                    self.bump();
                    let word = self.name().unwrap_or_default();
                    if word != "json" {
                        return Err(self.unsupported(
                            format!("`%{word}` inside an expansion (only `%json` is)"),
                            at,
                        ));
                    }
                    self.skip_space(true);
                    Atom::Json(self.json()?)
                }
                '-' if self.peek2() == Some('>') => {
                    // `-> alias` names the alternative's tree node: no effect on the language.
                    self.pos += 2;
                    self.skip_space(false);
                    self.name()
                        .ok_or_else(|| self.expected("a name after `->`"))?;
                    self.skip_space(nested);
                    return Ok(items);
                }
                '<' => {
                    return Err(self.unsupported(
                        "special tokens (`<...>`): formwork grammars are over text",
                        at,
                    ))
                }
                '@' => {
                    return Err(self.unsupported("grammar references (`@name`): use `%json`", at))
                }
                '~' => return Err(self.unsupported("llguidance's negation `~`", at)),
                '&' => return Err(self.unsupported("llguidance's intersection `&`", at)),
                c if is_name_start(c) => {
                    let name = self.name().unwrap_or_default();
                    if is_terminal_name(&name).is_none() {
                        return Err(LarkError::MixedCaseName {
                            name,
                            at: self.loc(at),
                        });
                    }
                    Atom::Name(name)
                }
                _ => return Ok(items),
            };
            let (op, op_at) = self.postfix()?;
            items.push(Item {
                atom,
                op,
                at,
                op_at: op_at.unwrap_or(at),
            });
        }
    }

    /// An optional postfix operator after an atom.
    fn postfix(&mut self) -> Result<(Option<Op>, Option<usize>), LarkError> {
        let save = self.pos;
        self.skip_space(false);
        let at = self.pos;
        let op = match self.peek() {
            Some('?') => {
                self.bump();
                Op::Optional
            }
            Some('*') => {
                self.bump();
                Op::Repeat(0, None)
            }
            Some('+') => {
                self.bump();
                Op::Repeat(1, None)
            }
            Some('~') => {
                self.bump();
                self.skip_space(false);
                let min = self.count()?;
                self.skip_space(false);
                let max = if self.rest().starts_with("..") {
                    self.pos += 2;
                    self.skip_space(false);
                    self.count()?
                } else {
                    min
                };
                self.bounds(min, Some(max), at)?
            }
            Some('{') => {
                self.bump();
                self.skip_space(false);
                let min = if self.peek() == Some(',') {
                    0
                } else {
                    self.count()?
                };
                self.skip_space(false);
                let max = match self.peek() {
                    Some('}') => Some(min),
                    Some(',') => {
                        self.bump();
                        self.skip_space(false);
                        if self.peek() == Some('}') {
                            None
                        } else {
                            let m = self.count()?;
                            self.skip_space(false);
                            Some(m)
                        }
                    }
                    _ => return Err(self.expected("`,` or `}`")),
                };
                if self.peek() != Some('}') {
                    return Err(self.expected("`}`"));
                }
                self.bump();
                self.bounds(min, max, at)?
            }
            _ => {
                self.pos = save;
                return Ok((None, None));
            }
        };
        // Lark takes one operator per atom: `"a"**` is a mistake, not `("a"*)*`.
        let after = self.pos;
        self.skip_space(false);
        if matches!(self.peek(), Some('?' | '*' | '+' | '~' | '{')) {
            return Err(self.unexpected());
        }
        self.pos = after;
        Ok((Some(op), Some(at)))
    }

    fn bounds(&self, min: u32, max: Option<u32>, at: usize) -> Result<Op, LarkError> {
        match max {
            Some(max) if max < min => Err(LarkError::InvalidRepetition {
                what: format!("the minimum {min} exceeds the maximum {max}"),
                at: self.loc(at),
            }),
            _ => Ok(Op::Repeat(min, max)),
        }
    }

    /// `"..."`, `"..."i` or `"a".."z"`.
    fn literal_or_range(&mut self) -> Result<Atom, LarkError> {
        let at = self.pos;
        let text = self.string()?;
        let ci = self.peek() == Some('i') && !self.peek2().is_some_and(is_name_char);
        if ci {
            self.bump();
        }
        let save = self.pos;
        self.skip_space(false);
        if !self.rest().starts_with("..") || ci {
            self.pos = save;
            return Ok(Atom::Literal { text, ci });
        }
        self.pos += 2;
        self.skip_space(false);
        if self.peek() != Some('"') {
            return Err(self.expected("a string after `..`"));
        }
        let hi = self.string()?;
        let one = |s: &str| {
            let mut cs = s.chars();
            match (cs.next(), cs.next()) {
                (Some(c), None) => Some(c),
                _ => None,
            }
        };
        let range_err = |what: String| LarkError::InvalidRange {
            what,
            at: self.loc(at),
        };
        match (one(&text), one(&hi)) {
            (Some(lo), Some(hi)) if lo <= hi => Ok(Atom::CharRange(lo, hi)),
            (Some(lo), Some(hi)) => Err(range_err(format!(
                "`{}` comes after `{}`",
                lo.escape_debug(),
                hi.escape_debug()
            ))),
            _ => Err(range_err("both ends must be one character".into())),
        }
    }

    /// A `"..."` string with Lark's escapes: `\n \t \r \f \xHH \uHHHH \UHHHHHHHH`, `\\` and
    /// `\"`; a backslash before any other character stays a backslash (as in Lark, which
    /// evaluates the literal as a Python string).
    fn string(&mut self) -> Result<String, LarkError> {
        let open = self.pos;
        self.bump();
        let mut s = String::new();
        loop {
            match self.peek() {
                None | Some('\n' | '\r') => {
                    return Err(LarkError::UnterminatedString { at: self.loc(open) })
                }
                Some('"') => {
                    self.bump();
                    return Ok(s);
                }
                Some('\\') => {
                    let esc = self.pos;
                    self.bump();
                    let digits = match self.peek() {
                        Some('x') => 2,
                        Some('u') => 4,
                        Some('U') => 8,
                        Some(c) => {
                            match c {
                                'n' => s.push('\n'),
                                't' => s.push('\t'),
                                'r' => s.push('\r'),
                                'f' => s.push('\u{c}'),
                                '\\' | '"' => s.push(c),
                                '\n' | '\r' => {
                                    return Err(LarkError::UnterminatedString {
                                        at: self.loc(open),
                                    })
                                }
                                _ => {
                                    s.push('\\');
                                    s.push(c);
                                }
                            }
                            self.bump();
                            continue;
                        }
                        None => return Err(LarkError::UnterminatedString { at: self.loc(open) }),
                    };
                    self.bump();
                    let mut code = 0u32;
                    for _ in 0..digits {
                        match self.peek().and_then(|c| c.to_digit(16)) {
                            Some(d) => {
                                code = code << 4 | d;
                                self.bump();
                            }
                            None => {
                                let end = self.pos + self.peek().map_or(0, char::len_utf8);
                                return Err(LarkError::BadEscape {
                                    escape: self.text[esc..end].to_string(),
                                    at: self.loc(esc),
                                });
                            }
                        }
                    }
                    match char::from_u32(code) {
                        Some(c) => s.push(c),
                        None => {
                            return Err(LarkError::BadEscape {
                                escape: self.text[esc..self.pos].to_string(),
                                at: self.loc(esc),
                            })
                        }
                    }
                }
                Some(c) => {
                    self.bump();
                    s.push(c);
                }
            }
        }
    }

    /// `/body/flags`: the body up to the first `/` not escaped by `\`, on one line; flags
    /// from `imslux`.
    fn regex(&mut self) -> Result<Atom, LarkError> {
        let open = self.pos;
        self.bump();
        let body_at = self.pos;
        loop {
            match self.peek() {
                None | Some('\n' | '\r') => {
                    return Err(LarkError::UnterminatedRegex { at: self.loc(open) })
                }
                Some('/') => break,
                Some('\\') => {
                    self.bump();
                    if matches!(self.peek(), None | Some('\n' | '\r')) {
                        return Err(LarkError::UnterminatedRegex { at: self.loc(open) });
                    }
                    self.bump();
                }
                Some(_) => self.bump(),
            }
        }
        let body = self.text[body_at..self.pos].to_string();
        self.bump();
        let flags_at = self.pos;
        while self.peek().is_some_and(|c| "imslux".contains(c)) {
            self.bump();
        }
        Ok(Atom::Regex {
            body,
            body_at,
            flags: self.text[flags_at..self.pos].to_string(),
        })
    }

    /// One JSON value starting here (after blanks and line breaks).
    fn json(&mut self) -> Result<Value, LarkError> {
        self.skip_space(true);
        let start = self.pos;
        if self.peek() != Some('{') {
            return Err(self.expected("a JSON object"));
        }
        let mut stream = serde_json::Deserializer::from_str(self.rest()).into_iter::<Value>();
        match stream.next() {
            Some(Ok(v)) => {
                self.pos = start + stream.byte_offset();
                Ok(v)
            }
            Some(Err(e)) => {
                // serde_json counts lines and columns (bytes) from `start`.
                let rest = self.rest();
                let line_start: usize = rest
                    .split_inclusive('\n')
                    .take(e.line().saturating_sub(1))
                    .map(str::len)
                    .sum();
                let offset = start + line_start + e.column().saturating_sub(1);
                let message = e.to_string();
                let message = message
                    .rsplit_once(" at line ")
                    .map_or(message.as_str(), |(m, _)| m)
                    .to_string();
                Err(LarkError::Json {
                    message,
                    at: self.loc(offset),
                })
            }
            None => Err(self.expected("a JSON object")),
        }
    }
}
