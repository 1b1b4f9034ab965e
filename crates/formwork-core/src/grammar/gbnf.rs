//! Reads llama.cpp's GBNF grammar text into the grammar IR.
//!
//! This module owns the GBNF *text format*: tokenizing and parsing the text, reporting mistakes
//! with `line:column` and a caret under the offending character, and lowering the parsed rules
//! onto [`GrammarBuilder`]. It does not lex or parse model output; that is the lexer's and the
//! parser's job once the [`Grammar`] is built.
//!
//! # Syntax (matching llama.cpp's `grammars/README.md`)
//! - `name ::= alternatives`, names made of `[A-Za-z0-9_-]`; the start rule is `root`.
//! - `#` starts a comment that runs to the end of the line.
//! - Alternation `|`, grouping `( )`, postfix `*` `+` `?` `{m}` `{m,}` `{m,n}` (applied to the
//!   item just before them; they stack, so `x*?` is `(x*)?`).
//! - String literals `"..."` and character classes `[...]` / `[^...]` with ranges `a-z`; both
//!   take the escapes `\n \t \r \\ \" \[ \] \xHH \uHHHH \UHHHHHHHH`, and classes also `\-` and
//!   `\^`. `.` is any character. An empty class `[]` matches nothing, `[^]` matches anything.
//! - A rule continues on the next line when the line break is inside `( )`, right after `::=`
//!   or `|`, or (an extension over llama.cpp, which rejects such text) when the next non-blank
//!   line starts with `|`, or is indented and does not itself start with `name ::=`.
//! - Token references (`<[1234]>`, `<think>`, `!<...>`) from newer llama.cpp are refused with a
//!   [`GbnfError::TokenReference`] error: formwork grammars are over text, not token ids.
//!
//! Undefined rules, a missing `root`, duplicate definitions, unterminated literals and bad
//! escapes or repetition bounds are errors naming the rule and the position. Unreachable rules
//! are accepted silently, as in llama.cpp. Counted repetition uses
//! [`GrammarBuilder::repeat`], so `x{1000000}` costs O(log n) rules, never n copies.
//!
//! # Lexeme mapping: why (almost) everything is one character
//! formwork's lexer is greedy: a lexeme ends only when the next byte cannot extend any lexeme
//! the parser allows there. GBNF has no lexer at all; its terminals are single characters. If
//! a GBNF literal such as `"ab"` became one lexeme, greedy lexing could change the language:
//! with `root ::= "ab" "cd" | "abc"`, the lexer would read `abc` as one lexeme and then fail on
//! `d`, although `abcd` is in the language. So every character class, `.` and every character
//! of a literal becomes a **one-character lexeme**. A one-character lexeme is complete after
//! one character and can never be extended, so greedy lexing cannot over-munch.
//!
//! Larger lexemes are used only where that is provably exact: when the set of all lexemes
//! reachable from `root` stays *prefix-free* (no string of one lexeme is a proper prefix of a
//! string of any lexeme). Then, at any position, a lexeme that has completely matched can never
//! be extended by any lexeme, so greedy lexing ends it exactly where every parse must, and the
//! Earley parser sees every lexeme that matches there. Two kinds of larger lexemes:
//! - **Whole literals**: a literal stays one lexeme unless its first character is matched by a
//!   one-character lexeme (a class, `.`, a one-character literal, or a character of a literal
//!   that was split) or it is a proper prefix of another whole literal or has one as its
//!   proper prefix; iterated to a fixpoint.
//! - **Collapsed rules**: a *regular* rule (no recursion, only terminals and other regular
//!   rules, small counted repetitions) used by a non-regular rule becomes one lexeme for its
//!   whole language (minus the empty string; a nullable rule keeps an empty alternative). The
//!   prefix-freeness of each such lexeme against the union of all others is decided exactly
//!   on DFAs (regex-automata, all-matches semantics): a product walk looks for a full match of
//!   one that a live state of the other can extend. Rules that fail are lowered character by
//!   character and the choice is repeated.
//!
//! For json.gbnf this turns `string` into one lexeme and keeps `true`/`false`/`null` whole,
//! while `number` and `ws` (which are not prefix-free: `1` extends to `12`) stay per character;
//! this made masks with a 49k vocabulary ~100x faster than all-character lexemes. A grammar
//! where nothing passes is still exact, at the cost of one Earley step per character.
//!
//! # Costs
//! Parsing is linear in the text; lowering is linear in the grammar plus O(n log n) for the
//! literal analysis over the n distinct literals, plus, per round of the rule analysis, one
//! DFA per collapsed rule and one for the union of all lexemes (each capped at
//! [`DFA_LIMIT`] bytes and [`MAX_CHECK_STATES`] states; hitting a cap keeps the rule per
//! character, never an error). Nesting of `( )` is limited to
//! [`MAX_NESTING`] levels so that hostile input cannot overflow the stack.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt::Write as _;

use regex_automata::dfa::{dense, Automaton, StartKind};
use regex_automata::util::primitives::StateID;
use regex_automata::util::start;
use regex_automata::{Anchored, MatchKind};

pub use super::location::Location;
use super::{Grammar, GrammarBuilder, GrammarError, RuleId, Symbol};

/// How deeply `( )` groups may nest before [`GbnfError::TooDeep`]; keeps recursion bounded.
pub const MAX_NESTING: usize = 128;

/// The largest Unicode code point.
const MAX_CODE_POINT: u32 = 0x10_FFFF;

/// An error reading GBNF text. Every variant with a position carries a [`Location`] whose
/// `Display` shows the offending line with a caret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GbnfError {
    /// The text holds no rule at all (empty, or only comments and blank lines).
    #[error("grammar is empty: it defines no rules")]
    Empty,
    /// There is no rule called `root`, the start rule.
    #[error("grammar has no `root` rule (the start rule)")]
    MissingRoot,
    /// A rule definition does not start with a name.
    #[error("expected a rule name at {at}")]
    ExpectedName {
        /// Where the name should be.
        at: Location,
    },
    /// A rule name is not followed by `::=`.
    #[error("expected `::=` after rule name `{name}` at {at}")]
    ExpectedDefinedAs {
        /// The rule being defined.
        name: String,
        /// Where `::=` should be.
        at: Location,
    },
    /// A string literal runs to the end of the text.
    #[error("unterminated string literal at {at}")]
    UnterminatedString {
        /// The opening quote.
        at: Location,
    },
    /// A character class runs to the end of the text.
    #[error("unterminated character class at {at}")]
    UnterminatedClass {
        /// The opening bracket.
        at: Location,
    },
    /// A group runs to the end of the text.
    #[error("unclosed `(` at {at}")]
    UnclosedGroup {
        /// The opening parenthesis.
        at: Location,
    },
    /// A character that cannot start or continue anything here.
    #[error("unexpected character `{}` at {at}", .ch.escape_debug())]
    UnexpectedChar {
        /// The character.
        ch: char,
        /// Where it is.
        at: Location,
    },
    /// An unknown escape, or a hex escape with too few hex digits.
    #[error("invalid escape sequence `{escape}` at {at}")]
    BadEscape {
        /// The escape as written (up to and including the first bad character).
        escape: String,
        /// The backslash.
        at: Location,
    },
    /// A hex escape names a value that is not a Unicode scalar value (above U+10FFFF, or a
    /// surrogate in a string literal).
    #[error("invalid code point U+{code:04X}: not a unicode scalar value at {at}")]
    InvalidCodePoint {
        /// The value.
        code: u32,
        /// The backslash of the escape.
        at: Location,
    },
    /// A class range whose start is after its end, like `[z-a]`.
    #[error("invalid class range: U+{start:04X} is after U+{end:04X} at {at}")]
    BadClassRange {
        /// The range's first code point.
        start: u32,
        /// The range's last code point.
        end: u32,
        /// The start of the range.
        at: Location,
    },
    /// A postfix operator with no item before it.
    #[error("`{op}` has nothing to repeat at {at}")]
    NothingToRepeat {
        /// The operator: `*`, `+`, `?` or `{`.
        op: char,
        /// The operator.
        at: Location,
    },
    /// A `{` not followed by `m}`, `m,}` or `m,n}`.
    #[error("malformed repetition: expected `{{m}}`, `{{m,}}` or `{{m,n}}` at {at}")]
    MalformedRepetition {
        /// The first character that does not fit.
        at: Location,
    },
    /// A repetition count larger than `u32::MAX`.
    #[error("repetition count too large (the limit is {}) at {at}", u32::MAX)]
    RepetitionTooLarge {
        /// The count.
        at: Location,
    },
    /// `{m,n}` with `m > n`.
    #[error("invalid repetition bounds {{{min},{max}}}: the minimum exceeds the maximum at {at}")]
    RepetitionBounds {
        /// The minimum.
        min: u32,
        /// The maximum.
        max: u32,
        /// The `{`.
        at: Location,
    },
    /// A token reference (`<[id]>`, `<name>`, `!<...>`), which formwork does not support.
    #[error("token references (`<...>`) are not supported: grammars are over text at {at}")]
    TokenReference {
        /// The `<` (or `!`).
        at: Location,
    },
    /// Groups nested deeper than [`MAX_NESTING`].
    #[error("groups nested deeper than {limit} levels at {at}")]
    TooDeep {
        /// The limit.
        limit: usize,
        /// The `(` that went too deep.
        at: Location,
    },
    /// A rule is referenced but never defined.
    #[error("rule `{name}` is used but never defined at {at}")]
    UndefinedRule {
        /// The rule's name.
        name: String,
        /// Its first use.
        at: Location,
    },
    /// A rule is defined twice.
    #[error("rule `{name}` is defined twice (first on line {first_line}) at {at}")]
    DuplicateRule {
        /// The rule's name.
        name: String,
        /// The line of the first definition.
        first_line: usize,
        /// The second definition.
        at: Location,
    },
    /// `root` derives no finite string (e.g. `root ::= "a" root`), so nothing is accepted.
    #[error("rule `root` derives no finite string at {at}")]
    EmptyLanguage {
        /// The definition of `root`.
        at: Location,
    },
    /// The grammar IR rejected the lowered grammar (an internal inconsistency).
    #[error(transparent)]
    Grammar(#[from] GrammarError),
}

impl GbnfError {
    /// The position of the error in the text, if it has one.
    pub fn location(&self) -> Option<&Location> {
        use GbnfError::*;
        match self {
            Empty | MissingRoot | Grammar(_) => None,
            ExpectedName { at }
            | ExpectedDefinedAs { at, .. }
            | UnterminatedString { at }
            | UnterminatedClass { at }
            | UnclosedGroup { at }
            | UnexpectedChar { at, .. }
            | BadEscape { at, .. }
            | InvalidCodePoint { at, .. }
            | BadClassRange { at, .. }
            | NothingToRepeat { at, .. }
            | MalformedRepetition { at }
            | RepetitionTooLarge { at }
            | RepetitionBounds { at, .. }
            | TokenReference { at }
            | TooDeep { at, .. }
            | UndefinedRule { at, .. }
            | DuplicateRule { at, .. }
            | EmptyLanguage { at } => Some(at),
        }
    }
}

/// Parses GBNF text into a [`Grammar`] whose start rule is `root`.
///
/// # Example
/// ```
/// let g = formwork_core::grammar::gbnf::parse(r#"root ::= "yes" | "no""#)?;
/// assert_eq!(g.rule(g.start()).name, "root");
/// # Ok::<(), formwork_core::grammar::gbnf::GbnfError>(())
/// ```
pub fn parse(text: &str) -> Result<Grammar, GbnfError> {
    let mut reader = Reader {
        text,
        pos: 0,
        refs: Vec::new(),
    };
    let defs = reader.parse_file()?;
    if defs.is_empty() {
        return Err(GbnfError::Empty);
    }
    let loc = |offset| Location::from_offset(text, offset);

    let mut first_def: HashMap<&str, usize> = HashMap::new();
    for def in &defs {
        if let Some(&first) = first_def.get(def.name.as_str()) {
            return Err(GbnfError::DuplicateRule {
                name: def.name.clone(),
                first_line: loc(first).line,
                at: loc(def.at),
            });
        }
        first_def.insert(&def.name, def.at);
    }
    for (name, at) in &reader.refs {
        if !first_def.contains_key(name.as_str()) {
            return Err(GbnfError::UndefinedRule {
                name: name.clone(),
                at: loc(*at),
            });
        }
    }
    let Some(&root_at) = first_def.get("root") else {
        return Err(GbnfError::MissingRoot);
    };

    let (collapsed, whole) = plan_lexemes(&defs);
    let mut lower = Lowerer::new(&defs, whole);
    for def in &defs {
        let alts = match collapsed.get(&def.name) {
            Some((regex, nullable)) => {
                let lexeme = Symbol::Lexeme(lower.b.lexeme(&def.name, regex));
                let mut alts = vec![vec![lexeme]];
                if *nullable {
                    alts.insert(0, Vec::new());
                }
                alts
            }
            None => def
                .alts
                .iter()
                .map(|seq| lower.sequence(&def.name, seq))
                .collect(),
        };
        lower.b.define(&def.name, alts);
    }
    let root = lower.b.rule_ref("root");
    match lower.b.build(root) {
        Ok(g) => Ok(g),
        Err(GrammarError::EmptyLanguage { .. }) => {
            Err(GbnfError::EmptyLanguage { at: loc(root_at) })
        }
        Err(e) => Err(e.into()),
    }
}

/// A set of code points: sorted, disjoint, non-adjacent ranges without surrogates.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct CharSet(Vec<(u32, u32)>);

impl CharSet {
    /// Normalizes `ranges` (any order, possibly overlapping, possibly with surrogates), and
    /// complements the result if `negated`.
    fn new(mut ranges: Vec<(u32, u32)>, negated: bool) -> Self {
        ranges.sort_unstable();
        let mut merged: Vec<(u32, u32)> = Vec::with_capacity(ranges.len());
        for (lo, hi) in ranges {
            // Surrogates never occur in UTF-8 text: cut them out of every range.
            for (lo, hi) in [(lo, hi.min(0xD7FF)), (lo.max(0xE000), hi)] {
                if lo > hi {
                    continue;
                }
                match merged.last_mut() {
                    Some(last) if lo <= last.1.saturating_add(1) => last.1 = last.1.max(hi),
                    _ => merged.push((lo, hi)),
                }
            }
        }
        merged.sort_unstable();
        let set = CharSet(merged);
        if negated {
            set.complement()
        } else {
            set
        }
    }

    fn complement(&self) -> Self {
        let mut out = Vec::new();
        let mut next = 0u32;
        for &(lo, hi) in &self.0 {
            if lo > next {
                out.push((next, lo - 1));
            }
            next = hi + 1;
        }
        if next <= MAX_CODE_POINT {
            out.push((next, MAX_CODE_POINT));
        }
        // Complementing can only re-introduce surrogates; normalize them away again.
        CharSet::new(out, false)
    }

    fn contains(&self, c: char) -> bool {
        let c = c as u32;
        self.0.iter().any(|&(lo, hi)| lo <= c && c <= hi)
    }

    fn is_everything(&self) -> bool {
        self.0 == [(0, 0xD7FF), (0xE000, MAX_CODE_POINT)]
    }

    /// The one character in the set, if it has exactly one.
    fn single(&self) -> Option<char> {
        match self.0.as_slice() {
            [(lo, hi)] if lo == hi => char::from_u32(*lo),
            _ => None,
        }
    }

    /// A regex-syntax class matching one character of the set (None if the set is empty).
    fn regex(&self) -> Option<String> {
        if self.0.is_empty() {
            return None;
        }
        if self.is_everything() {
            return Some(ANY_REGEX.to_string());
        }
        if let Some(c) = self.single() {
            return Some(regex_syntax::escape(c.encode_utf8(&mut [0; 4])));
        }
        let mut r = String::from("[");
        for &(lo, hi) in &self.0 {
            if lo == hi {
                let _ = write!(r, "\\x{{{lo:X}}}");
            } else {
                let _ = write!(r, "\\x{{{lo:X}}}-\\x{{{hi:X}}}");
            }
        }
        r.push(']');
        Some(r)
    }
}

/// Any one character, including a newline (GBNF's `.`).
const ANY_REGEX: &str = "(?s:.)";

/// One item of a sequence, as parsed.
#[derive(Debug)]
enum Item {
    /// A string literal (possibly empty).
    Literal(String),
    /// A character class or `.`, with its source text for naming the lexeme.
    Class(CharSet, String),
    /// A reference to a named rule.
    Ref(String),
    /// A parenthesized group of alternatives.
    Group(Vec<Vec<Item>>),
    /// An item under postfix operators, applied in order: `(min, max)`, `None` = unbounded.
    Repeat(Box<Item>, Vec<(u32, Option<u32>)>),
}

/// One `name ::= ...` definition.
#[derive(Debug)]
struct RuleDef {
    name: String,
    /// Byte offset of the name.
    at: usize,
    alts: Vec<Vec<Item>>,
}

/// The recursive-descent reader over the text.
struct Reader<'a> {
    text: &'a str,
    /// Current byte offset.
    pos: usize,
    /// Every rule reference, with its byte offset, in text order.
    refs: Vec<(String, usize)>,
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '-' || c == '_'
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

    /// Skips spaces, tabs and comments; also line breaks if `newlines`.
    fn skip_space(&mut self, newlines: bool) {
        while let Some(c) = self.peek() {
            match c {
                ' ' | '\t' => self.bump(),
                '\n' | '\r' if newlines => self.bump(),
                '#' => {
                    let end = self
                        .rest()
                        .find(['\n', '\r'])
                        .map_or(self.text.len(), |i| self.pos + i);
                    self.pos = end;
                }
                _ => break,
            }
        }
    }

    /// Skips space after an item of a top-level sequence: stops at a line break unless the
    /// next non-blank line continues the rule (starts with `|`, or is indented and does not
    /// start a new rule).
    fn skip_top_space(&mut self) {
        self.skip_space(false);
        if !matches!(self.peek(), Some('\n' | '\r')) {
            return;
        }
        let save = self.pos;
        self.skip_space(true);
        let line_start = self.text[..self.pos]
            .rfind(['\n', '\r'])
            .map_or(0, |i| i + 1);
        let continues = match self.peek() {
            None => false,
            Some('|') => true,
            Some(_) => self.pos > line_start && !self.at_rule_start(),
        };
        if !continues {
            self.pos = save;
        }
    }

    /// Whether the text at the current position reads `name ::=`.
    fn at_rule_start(&self) -> bool {
        let rest = self.rest();
        let name_len = rest.find(|c: char| !is_name_char(c)).unwrap_or(rest.len());
        name_len > 0
            && rest[name_len..]
                .trim_start_matches([' ', '\t'])
                .starts_with("::=")
    }

    /// Skips space after an item, by the rules of the current nesting.
    fn skip_after_item(&mut self, nested: bool) {
        if nested {
            self.skip_space(true);
        } else {
            self.skip_top_space();
        }
    }

    fn parse_file(&mut self) -> Result<Vec<RuleDef>, GbnfError> {
        let mut defs = Vec::new();
        loop {
            self.skip_space(true);
            if self.peek().is_none() {
                return Ok(defs);
            }
            defs.push(self.parse_rule()?);
        }
    }

    fn parse_name(&mut self) -> Option<String> {
        let rest = self.rest();
        let len = rest.find(|c: char| !is_name_char(c)).unwrap_or(rest.len());
        if len == 0 {
            return None;
        }
        let name = rest[..len].to_string();
        self.pos += len;
        Some(name)
    }

    fn parse_rule(&mut self) -> Result<RuleDef, GbnfError> {
        let at = self.pos;
        let Some(name) = self.parse_name() else {
            return Err(GbnfError::ExpectedName { at: self.loc(at) });
        };
        self.skip_space(false);
        if !self.rest().starts_with("::=") {
            return Err(GbnfError::ExpectedDefinedAs {
                name,
                at: self.loc(self.pos),
            });
        }
        self.pos += 3;
        self.skip_space(true);
        let alts = self.parse_alternatives(false, 0)?;
        match self.peek() {
            None | Some('\n' | '\r') => Ok(RuleDef { name, at, alts }),
            Some(ch) => Err(self.unexpected(ch)),
        }
    }

    fn unexpected(&self, ch: char) -> GbnfError {
        if ch == '<' || (ch == '!' && self.peek2() == Some('<')) {
            return GbnfError::TokenReference {
                at: self.loc(self.pos),
            };
        }
        GbnfError::UnexpectedChar {
            ch,
            at: self.loc(self.pos),
        }
    }

    fn parse_alternatives(
        &mut self,
        nested: bool,
        depth: usize,
    ) -> Result<Vec<Vec<Item>>, GbnfError> {
        let mut alts = vec![self.parse_sequence(nested, depth)?];
        while self.peek() == Some('|') {
            self.bump();
            self.skip_space(true);
            alts.push(self.parse_sequence(nested, depth)?);
        }
        Ok(alts)
    }

    fn parse_sequence(&mut self, nested: bool, depth: usize) -> Result<Vec<Item>, GbnfError> {
        let mut items: Vec<Item> = Vec::new();
        while let Some(c) = self.peek() {
            let start = self.pos;
            match c {
                '"' => items.push(Item::Literal(self.parse_literal()?)),
                '[' => {
                    let set = self.parse_class()?;
                    let src = self.text[start..self.pos].to_string();
                    items.push(Item::Class(set, src));
                }
                '.' => {
                    self.bump();
                    items.push(Item::Class(CharSet::new(Vec::new(), true), ".".to_string()));
                }
                '(' => {
                    if depth >= MAX_NESTING {
                        return Err(GbnfError::TooDeep {
                            limit: MAX_NESTING,
                            at: self.loc(start),
                        });
                    }
                    self.bump();
                    self.skip_space(true);
                    let alts = self.parse_alternatives(true, depth + 1)?;
                    match self.peek() {
                        Some(')') => self.bump(),
                        None => {
                            return Err(GbnfError::UnclosedGroup {
                                at: self.loc(start),
                            })
                        }
                        Some(ch) => return Err(self.unexpected(ch)),
                    }
                    items.push(Item::Group(alts));
                }
                '*' | '+' | '?' | '{' => {
                    let bounds = if c == '{' {
                        self.parse_braces(nested)?
                    } else {
                        self.bump();
                        match c {
                            '*' => (0, None),
                            '+' => (1, None),
                            _ => (0, Some(1)),
                        }
                    };
                    let Some(last) = items.pop() else {
                        return Err(GbnfError::NothingToRepeat {
                            op: c,
                            at: self.loc(start),
                        });
                    };
                    items.push(match last {
                        Item::Repeat(inner, mut ops) => {
                            ops.push(bounds);
                            Item::Repeat(inner, ops)
                        }
                        other => Item::Repeat(Box::new(other), vec![bounds]),
                    });
                }
                c if is_name_char(c) => {
                    let name = self.parse_name().unwrap_or_default();
                    self.refs.push((name.clone(), start));
                    items.push(Item::Ref(name));
                }
                _ => break,
            }
            self.skip_after_item(nested);
        }
        Ok(items)
    }

    fn parse_literal(&mut self) -> Result<String, GbnfError> {
        let start = self.pos;
        self.bump();
        let mut s = String::new();
        loop {
            match self.peek() {
                None => {
                    return Err(GbnfError::UnterminatedString {
                        at: self.loc(start),
                    })
                }
                Some('"') => {
                    self.bump();
                    return Ok(s);
                }
                Some('\\') => {
                    let esc = self.pos;
                    let code = self.parse_escape(false)?;
                    match char::from_u32(code) {
                        Some(c) => s.push(c),
                        None => {
                            return Err(GbnfError::InvalidCodePoint {
                                code,
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

    fn parse_class(&mut self) -> Result<CharSet, GbnfError> {
        let start = self.pos;
        self.bump();
        let negated = self.peek() == Some('^');
        if negated {
            self.bump();
        }
        let mut ranges = Vec::new();
        loop {
            match self.peek() {
                None => {
                    return Err(GbnfError::UnterminatedClass {
                        at: self.loc(start),
                    })
                }
                Some(']') => {
                    self.bump();
                    return Ok(CharSet::new(ranges, negated));
                }
                Some(_) => {
                    let item = self.pos;
                    let lo = self.parse_class_char(start)?;
                    // As in llama.cpp, a `-` right before `]` is a literal dash.
                    let hi = if self.peek() == Some('-') && self.peek2() != Some(']') {
                        self.bump();
                        self.parse_class_char(start)?
                    } else {
                        lo
                    };
                    if lo > hi {
                        return Err(GbnfError::BadClassRange {
                            start: lo,
                            end: hi,
                            at: self.loc(item),
                        });
                    }
                    ranges.push((lo, hi));
                }
            }
        }
    }

    /// One (possibly escaped) character inside a class; `open` is the class's `[`.
    fn parse_class_char(&mut self, open: usize) -> Result<u32, GbnfError> {
        match self.peek() {
            None => Err(GbnfError::UnterminatedClass { at: self.loc(open) }),
            Some('\\') => {
                let esc = self.pos;
                let code = self.parse_escape(true)?;
                if code > MAX_CODE_POINT {
                    return Err(GbnfError::InvalidCodePoint {
                        code,
                        at: self.loc(esc),
                    });
                }
                Ok(code)
            }
            Some(c) => {
                self.bump();
                Ok(c as u32)
            }
        }
    }

    /// An escape sequence starting at the current `\`; returns the code point (unchecked).
    fn parse_escape(&mut self, in_class: bool) -> Result<u32, GbnfError> {
        let start = self.pos;
        self.bump();
        let bad = |r: &Self| {
            // Show the escape up to and including the first character that does not fit.
            let end = r.pos + r.peek().map_or(0, char::len_utf8);
            GbnfError::BadEscape {
                escape: r.text[start..end].to_string(),
                at: r.loc(start),
            }
        };
        let digits = match self.peek() {
            Some('x') => 2,
            Some('u') => 4,
            Some('U') => 8,
            Some(c) => {
                let code = match c {
                    'n' => '\n',
                    't' => '\t',
                    'r' => '\r',
                    '\\' | '"' | '[' | ']' => c,
                    '-' | '^' if in_class => c,
                    _ => return Err(bad(self)),
                };
                self.bump();
                return Ok(code as u32);
            }
            None => return Err(bad(self)),
        };
        self.bump();
        let mut code = 0u32;
        for _ in 0..digits {
            match self.peek().and_then(|c| c.to_digit(16)) {
                Some(d) => {
                    code = code << 4 | d;
                    self.bump();
                }
                None => return Err(bad(self)),
            }
        }
        Ok(code)
    }

    /// `{m}`, `{m,}` or `{m,n}` starting at the current `{`.
    fn parse_braces(&mut self, nested: bool) -> Result<(u32, Option<u32>), GbnfError> {
        let open = self.pos;
        self.bump();
        self.skip_space(nested);
        let min = self.parse_count()?;
        self.skip_space(nested);
        let max = match self.peek() {
            Some('}') => Some(min),
            Some(',') => {
                self.bump();
                self.skip_space(nested);
                let max = if self.peek().is_some_and(|c| c.is_ascii_digit()) {
                    let max = self.parse_count()?;
                    self.skip_space(nested);
                    Some(max)
                } else {
                    None
                };
                if self.peek() != Some('}') {
                    return Err(GbnfError::MalformedRepetition {
                        at: self.loc(self.pos),
                    });
                }
                max
            }
            _ => {
                return Err(GbnfError::MalformedRepetition {
                    at: self.loc(self.pos),
                })
            }
        };
        self.bump();
        if let Some(max) = max {
            if max < min {
                return Err(GbnfError::RepetitionBounds {
                    min,
                    max,
                    at: self.loc(open),
                });
            }
        }
        Ok((min, max))
    }

    fn parse_count(&mut self) -> Result<u32, GbnfError> {
        let start = self.pos;
        let rest = self.rest();
        let len = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if len == 0 {
            return Err(GbnfError::MalformedRepetition {
                at: self.loc(start),
            });
        }
        let n = rest[..len]
            .parse::<u32>()
            .map_err(|_| GbnfError::RepetitionTooLarge {
                at: self.loc(start),
            })?;
        self.pos += len;
        Ok(n)
    }
}

/// Lowers parsed rules onto a [`GrammarBuilder`], choosing the lexemes (see the module doc).
struct Lowerer {
    b: GrammarBuilder,
    /// Multi-character literals proven safe to keep as one lexeme.
    whole: HashSet<String>,
    /// Names users gave their rules: generated names must avoid them.
    user_names: HashSet<String>,
    /// The rule that derives nothing, for empty classes; created on first use.
    never: Option<RuleId>,
}

impl Lowerer {
    fn new(defs: &[RuleDef], whole: HashSet<String>) -> Self {
        let mut b = GrammarBuilder::new();
        // Declare every user rule first, in text order: their ids follow the text and
        // generated rule names (`fresh_rule`) can never take a user's name.
        for def in defs {
            b.rule_ref(&def.name);
        }
        Lowerer {
            b,
            whole,
            user_names: defs.iter().map(|d| d.name.clone()).collect(),
            never: None,
        }
    }

    fn sequence(&mut self, rule: &str, items: &[Item]) -> Vec<Symbol> {
        let mut out = Vec::with_capacity(items.len());
        for item in items {
            self.item(rule, item, &mut out);
        }
        out
    }

    fn item(&mut self, rule: &str, item: &Item, out: &mut Vec<Symbol>) {
        match item {
            Item::Literal(s) if self.whole.contains(s) => {
                out.push(Symbol::Lexeme(self.b.literal(s)))
            }
            Item::Literal(s) => {
                for c in s.chars() {
                    out.push(Symbol::Lexeme(self.b.literal(c.encode_utf8(&mut [0; 4]))));
                }
            }
            Item::Class(set, src) => match set.regex() {
                Some(re) => out.push(Symbol::Lexeme(self.b.lexeme(src, &re))),
                None => out.push(self.never()),
            },
            Item::Ref(name) => out.push(Symbol::Rule(self.b.rule_ref(name))),
            Item::Group(alts) => {
                let mut lowered: Vec<Vec<Symbol>> =
                    alts.iter().map(|seq| self.sequence(rule, seq)).collect();
                if lowered.len() == 1 {
                    // A group of one alternative is just its sequence, spliced in.
                    out.append(&mut lowered[0]);
                } else {
                    out.push(Symbol::Rule(self.b.fresh_rule(rule, lowered)));
                }
            }
            Item::Repeat(inner, ops) => {
                let mut seq = Vec::new();
                self.item(rule, inner, &mut seq);
                let mut sym = match seq.as_slice() {
                    [one] => *one,
                    _ => Symbol::Rule(self.b.fresh_rule(rule, vec![seq])),
                };
                for &(min, max) in ops {
                    sym = Symbol::Rule(self.b.repeat(sym, min, max));
                }
                out.push(sym);
            }
        }
    }

    /// A rule that derives no string at all (`never ::= never`), shared by all empty classes.
    fn never(&mut self) -> Symbol {
        if let Some(r) = self.never {
            return Symbol::Rule(r);
        }
        let mut name = "never".to_string();
        let mut n = 0;
        while self.user_names.contains(&name) || self.b.is_defined(&name) {
            n += 1;
            name = format!("never_{n}");
        }
        let id = self.b.rule_ref(&name);
        self.b.define(&name, vec![vec![Symbol::Rule(id)]]);
        self.never = Some(id);
        Symbol::Rule(id)
    }
}

/// Rules collapsed into one lexeme: name → (regex of the rule's language minus the empty
/// string, whether the rule also derives the empty string).
type Collapsed = HashMap<String, (String, bool)>;

/// Longest regex built for a regular rule; larger rules stay rules.
const MAX_RULE_REGEX: usize = 8192;
/// Largest repetition count inlined into a rule's regex (the NFA grows with the count).
const MAX_INLINE_REPEAT: u32 = 64;
/// Size limit for each DFA built by the prefix-freeness check, in bytes (4 MiB).
pub const DFA_LIMIT: usize = 4 << 20;
/// Most DFA states (or state pairs) the prefix-freeness check explores before giving up
/// (100,000).
pub const MAX_CHECK_STATES: usize = 100_000;

/// Chooses the lexemes (see the module doc): which regular rules become one lexeme, and which
/// multi-character literals stay whole. Returns both.
///
/// Candidates are the regular (non-recursive, all-terminal) rules used by a non-regular rule,
/// plus `root` if it is regular. A candidate survives only if the union of every lexeme
/// reachable from `root` stays prefix-free with it; rejected candidates are lowered character
/// by character, and the choice is repeated until no candidate conflicts.
fn plan_lexemes(defs: &[RuleDef]) -> (Collapsed, HashSet<String>) {
    let by_name: HashMap<&str, &RuleDef> = defs.iter().map(|d| (d.name.as_str(), d)).collect();
    let mut memo: HashMap<String, Option<String>> = HashMap::new();
    for def in defs {
        rule_regex(&def.name, &by_name, &mut memo, &mut HashSet::new());
    }
    let regular = |name: &str| memo.get(name).is_some_and(Option::is_some);
    let mut candidates: BTreeSet<&str> = BTreeSet::new();
    if regular("root") {
        candidates.insert("root");
    }
    for def in defs.iter().filter(|d| !regular(&d.name)) {
        let mut refs = Vec::new();
        for seq in &def.alts {
            collect_refs(seq, &mut refs);
        }
        candidates.extend(refs.into_iter().filter(|r| regular(r)));
    }
    let mut collapsed: Collapsed = HashMap::new();
    for name in candidates {
        let Some(Some(re)) = memo.get(name) else {
            continue;
        };
        let Ok(hir) = regex_syntax::parse(re) else {
            continue;
        };
        let Some(min_len) = hir.properties().minimum_len() else {
            continue; // matches nothing: leave it to the `never` rule
        };
        if let Some(nonempty) = super::regex::without_empty(&hir) {
            collapsed.insert(name.to_string(), (nonempty.to_string(), min_len == 0));
        }
    }
    loop {
        let reachable = reachable_rules(&by_name, &collapsed);
        let mut literals = BTreeSet::new();
        let mut sets = Vec::new();
        for def in defs {
            if reachable.contains(def.name.as_str()) && !collapsed.contains_key(&def.name) {
                for seq in &def.alts {
                    collect_terminals(seq, &mut literals, &mut sets);
                }
            }
        }
        let whole = whole_literals(literals.clone(), &sets);
        let live: Vec<&String> = collapsed
            .keys()
            .filter(|n| reachable.contains(n.as_str()))
            .collect();
        if live.is_empty() {
            return (collapsed, whole);
        }
        // Every lexeme that may ever be allowed: collapsed rules, classes, literals.
        let mut patterns: BTreeSet<String> = live.iter().map(|n| collapsed[*n].0.clone()).collect();
        patterns.extend(sets.iter().filter_map(CharSet::regex));
        for lit in &literals {
            if whole.contains(lit) {
                patterns.insert(regex_syntax::escape(lit));
            } else {
                let mut buf = [0; 4];
                patterns.extend(
                    lit.chars()
                        .map(|c| regex_syntax::escape(c.encode_utf8(&mut buf))),
                );
            }
        }
        let patterns: Vec<String> = patterns.into_iter().collect();
        let union = build_dfa(&patterns).and_then(Analyzed::new);
        let bad: Vec<String> = live
            .iter()
            .filter(|n| {
                let Some(u) = &union else {
                    return true;
                };
                build_dfa(std::slice::from_ref(&collapsed[**n].0))
                    .and_then(Analyzed::new)
                    .is_none_or(|a| prefix_conflict(&a, u))
            })
            .map(|n| n.to_string())
            .collect();
        if bad.is_empty() {
            return (collapsed, whole);
        }
        for name in bad {
            collapsed.remove(&name);
        }
    }
}

/// The regex of rule `name`'s language if the rule is regular (no recursion, small), memoized.
fn rule_regex(
    name: &str,
    by_name: &HashMap<&str, &RuleDef>,
    memo: &mut HashMap<String, Option<String>>,
    visiting: &mut HashSet<String>,
) -> Option<String> {
    if let Some(r) = memo.get(name) {
        return r.clone();
    }
    if !visiting.insert(name.to_string()) {
        return None; // recursive
    }
    let re = by_name
        .get(name)
        .and_then(|def| alts_regex(&def.alts, by_name, memo, visiting));
    visiting.remove(name);
    memo.insert(name.to_string(), re.clone());
    re
}

fn alts_regex(
    alts: &[Vec<Item>],
    by_name: &HashMap<&str, &RuleDef>,
    memo: &mut HashMap<String, Option<String>>,
    visiting: &mut HashSet<String>,
) -> Option<String> {
    let mut out = String::from("(?:");
    for (i, seq) in alts.iter().enumerate() {
        if i > 0 {
            out.push('|');
        }
        for item in seq {
            out.push_str(&item_regex(item, by_name, memo, visiting)?);
            if out.len() > MAX_RULE_REGEX {
                return None;
            }
        }
    }
    out.push(')');
    Some(out)
}

fn item_regex(
    item: &Item,
    by_name: &HashMap<&str, &RuleDef>,
    memo: &mut HashMap<String, Option<String>>,
    visiting: &mut HashSet<String>,
) -> Option<String> {
    Some(match item {
        Item::Literal(s) => format!("(?:{})", regex_syntax::escape(s)),
        Item::Class(set, _) => set.regex()?,
        Item::Ref(name) => rule_regex(name, by_name, memo, visiting)?,
        Item::Group(alts) => alts_regex(alts, by_name, memo, visiting)?,
        Item::Repeat(inner, ops) => {
            let mut re = item_regex(inner, by_name, memo, visiting)?;
            for &(min, max) in ops {
                if min > MAX_INLINE_REPEAT || max.is_some_and(|m| m > MAX_INLINE_REPEAT) {
                    return None;
                }
                re = match max {
                    Some(max) => format!("(?:{re}){{{min},{max}}}"),
                    None => format!("(?:{re}){{{min},}}"),
                };
                if re.len() > MAX_RULE_REGEX {
                    return None;
                }
            }
            re
        }
    })
}

fn collect_refs<'a>(items: &'a [Item], out: &mut Vec<&'a str>) {
    for item in items {
        match item {
            Item::Ref(name) => out.push(name),
            Item::Group(alts) => alts.iter().for_each(|seq| collect_refs(seq, out)),
            Item::Repeat(inner, _) => collect_refs(std::slice::from_ref(&**inner), out),
            Item::Literal(_) | Item::Class(..) => {}
        }
    }
}

/// Rules reachable from `root`, not looking inside collapsed rules.
fn reachable_rules<'a>(
    by_name: &HashMap<&str, &'a RuleDef>,
    collapsed: &Collapsed,
) -> HashSet<&'a str> {
    let mut seen: HashSet<&'a str> = HashSet::new();
    let mut stack: Vec<&'a RuleDef> = by_name.get("root").copied().into_iter().collect();
    while let Some(def) = stack.pop() {
        if !seen.insert(def.name.as_str()) || collapsed.contains_key(&def.name) {
            continue;
        }
        let mut refs = Vec::new();
        for seq in &def.alts {
            collect_refs(seq, &mut refs);
        }
        stack.extend(refs.into_iter().filter_map(|r| by_name.get(r).copied()));
    }
    seen
}

/// An anchored DFA accepting every string that fully matches one of `patterns` (all matches
/// kept, so no alternative is pruned after a shorter match).
fn build_dfa(patterns: &[String]) -> Option<dense::DFA<Vec<u32>>> {
    dense::Builder::new()
        .configure(
            dense::DFA::config()
                .match_kind(MatchKind::All)
                .start_kind(StartKind::Anchored)
                .dfa_size_limit(Some(DFA_LIMIT))
                .determinize_size_limit(Some(DFA_LIMIT)),
        )
        .build_many(patterns)
        .ok()
}

/// A DFA with its start state and the set of *live* states: those from which some accepting
/// state is reachable (a state reached only to report a delayed match is not live).
struct Analyzed {
    dfa: dense::DFA<Vec<u32>>,
    start: StateID,
    live: HashSet<StateID>,
}

impl Analyzed {
    fn new(dfa: dense::DFA<Vec<u32>>) -> Option<Self> {
        let start = dfa
            .start_state(&start::Config::new().anchored(Anchored::Yes))
            .ok()?;
        let mut seen = HashSet::from([start]);
        let mut stack = vec![start];
        let mut rev: HashMap<StateID, Vec<StateID>> = HashMap::new();
        let mut live = HashSet::new();
        while let Some(s) = stack.pop() {
            if accepting(&dfa, s) {
                live.insert(s);
            }
            for b in 0..=255u8 {
                let t = dfa.next_state(s, b);
                if dfa.is_dead_state(t) || dfa.is_quit_state(t) {
                    continue;
                }
                rev.entry(t).or_default().push(s);
                if seen.insert(t) {
                    if seen.len() > MAX_CHECK_STATES {
                        return None;
                    }
                    stack.push(t);
                }
            }
        }
        let mut stack: Vec<StateID> = live.iter().copied().collect();
        while let Some(s) = stack.pop() {
            for &p in rev.get(&s).map_or(&[][..], Vec::as_slice) {
                if live.insert(p) {
                    stack.push(p);
                }
            }
        }
        Some(Analyzed { dfa, start, live })
    }

    /// Whether some byte leads from `s` to a live state: the text so far can be extended.
    fn extends(&self, s: StateID) -> bool {
        (0..=255u8).any(|b| self.live.contains(&self.dfa.next_state(s, b)))
    }
}

/// Whether the text read so far fully matches (the DFA reports matches one step late).
fn accepting(dfa: &dense::DFA<Vec<u32>>, s: StateID) -> bool {
    dfa.is_match_state(dfa.next_eoi_state(s))
}

/// Whether a string of `a` is a proper prefix of a string of `u`, or the other way round
/// (`true` also when the check runs out of budget: conflicts are the safe answer).
fn prefix_conflict(a: &Analyzed, u: &Analyzed) -> bool {
    let start = (a.start, u.start);
    if !a.live.contains(&start.0) || !u.live.contains(&start.1) {
        return false;
    }
    let mut seen = HashSet::from([start]);
    let mut stack = vec![start];
    while let Some((x, y)) = stack.pop() {
        if (accepting(&a.dfa, x) && u.extends(y)) || (accepting(&u.dfa, y) && a.extends(x)) {
            return true;
        }
        for b in 0..=255u8 {
            let next = (a.dfa.next_state(x, b), u.dfa.next_state(y, b));
            if a.live.contains(&next.0) && u.live.contains(&next.1) && seen.insert(next) {
                if seen.len() > MAX_CHECK_STATES {
                    return true;
                }
                stack.push(next);
            }
        }
    }
    false
}

/// Collects the distinct literals and the character sets of classes in `items`.
fn collect_terminals(items: &[Item], literals: &mut BTreeSet<String>, sets: &mut Vec<CharSet>) {
    for item in items {
        match item {
            Item::Literal(s) => {
                literals.insert(s.clone());
            }
            Item::Class(set, _) => sets.push(set.clone()),
            Item::Ref(_) => {}
            Item::Group(alts) => {
                for seq in alts {
                    collect_terminals(seq, literals, sets);
                }
            }
            Item::Repeat(inner, _) => {
                collect_terminals(std::slice::from_ref(&**inner), literals, sets)
            }
        }
    }
}

/// The multi-character literals that may stay single lexemes: the fixpoint described in the
/// module doc. `literals` holds every literal of the grammar, `sets` every class.
fn whole_literals(literals: BTreeSet<String>, sets: &[CharSet]) -> HashSet<String> {
    let mut single: HashSet<char> = HashSet::new();
    let mut whole: BTreeSet<String> = BTreeSet::new();
    for lit in literals {
        let mut chars = lit.chars();
        match (chars.next(), chars.next()) {
            (Some(c), None) => {
                single.insert(c);
            }
            (Some(_), Some(_)) => {
                whole.insert(lit);
            }
            (None, _) => {}
        }
    }
    loop {
        let mut split = Vec::new();
        for lit in &whole {
            let first = lit.chars().next().unwrap_or_default();
            let by_char = single.contains(&first) || sets.iter().any(|s| s.contains(first));
            // In sorted order, a literal that `lit` is a proper prefix of comes right after it.
            let extended = whole
                .range::<String, _>((std::ops::Bound::Excluded(lit), std::ops::Bound::Unbounded))
                .next()
                .is_some_and(|next| next.starts_with(lit.as_str()));
            let has_prefix = lit
                .char_indices()
                .skip(2)
                .any(|(i, _)| whole.contains(&lit[..i]));
            if by_char || extended || has_prefix {
                split.push(lit.clone());
            }
        }
        if split.is_empty() {
            return whole.into_iter().collect();
        }
        for lit in split {
            whole.remove(&lit);
            single.extend(lit.chars());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grammar::LexemeId;

    fn regexes(g: &Grammar) -> Vec<&str> {
        g.lexemes().iter().map(|l| l.regex()).collect()
    }

    fn err(text: &str) -> GbnfError {
        parse(text).expect_err(text)
    }

    /// Found by `cargo fuzz run gbnf`: a class range starting at the `\n` of a `\r\n` line
    /// ending (`[\r\n-\t]`) gave a column past the end of the displayed line.
    #[test]
    fn column_at_a_line_terminator_stays_on_the_line() {
        let text = "uu::=[\u{1}yyz#\u{0}99\r\n-\t\u{6}\u{0}:=\n[";
        let e = parse(text).unwrap_err();
        let at = e.location().unwrap();
        assert!(matches!(e, GbnfError::BadClassRange { .. }), "{e}");
        assert_eq!((at.line, at.column), (1, at.line_text.chars().count() + 1));
    }

    #[test]
    fn charset_normalizes_and_complements() {
        let s = CharSet::new(
            vec![(b'c' as u32, b'e' as u32), (b'a' as u32, b'c' as u32)],
            false,
        );
        assert_eq!(s.0, vec![(97, 101)]);
        let n = CharSet::new(vec![(0, 0x60)], true);
        assert_eq!(n.0, vec![(0x61, 0xD7FF), (0xE000, MAX_CODE_POINT)]);
        assert!(CharSet::new(vec![], true).is_everything());
        assert!(CharSet::new(vec![(0xD800, 0xDFFF)], false).0.is_empty());
        assert_eq!(CharSet::new(vec![(0, MAX_CODE_POINT)], true).regex(), None);
    }

    #[test]
    fn literals_become_one_char_lexemes_when_a_class_overlaps() {
        let g = parse("root ::= \"ab\" [a-z] root?").unwrap();
        assert_eq!(regexes(&g), vec!["a", "b", "[\\x{61}-\\x{7A}]"]);
    }

    #[test]
    fn literals_stay_whole_when_prefix_free() {
        let g = parse("root ::= (\"true\" | \"false\") [0-9] root?").unwrap();
        assert!(regexes(&g).contains(&"true"));
        assert!(regexes(&g).contains(&"false"));
    }

    /// The module doc's example: keeping `"ab"` and `"abc"` whole would let greedy lexing
    /// reject `abcd`, so both must be split.
    #[test]
    fn literal_prefix_of_another_literal_is_split() {
        let g = parse("root ::= \"ab\" \"cd\" | \"abc\"").unwrap();
        let r = regexes(&g);
        assert!(!r.contains(&"ab") && !r.contains(&"abc"), "{r:?}");
        // "cd" starts with 'c', a character of the split "abc": split too.
        assert!(!r.contains(&"cd"), "{r:?}");
        assert!(r.iter().all(|re| re.chars().count() == 1), "{r:?}");
    }

    #[test]
    fn any_char_splits_every_literal() {
        let g = parse("root ::= \"xy\" . root?").unwrap();
        assert_eq!(regexes(&g), vec!["x", "y", ANY_REGEX]);
    }

    #[test]
    fn class_regexes_escape_everything() {
        let g = parse(r#"root ::= [\]\-^] [^"\\] [\x00-\x1F] [^] root?"#).unwrap();
        for re in regexes(&g) {
            regex_syntax::Parser::new().parse(re).unwrap();
        }
        assert_eq!(regexes(&g)[3], ANY_REGEX);
    }

    #[test]
    fn empty_class_derives_nothing_but_the_grammar_builds() {
        let g = parse("root ::= [] | \"a\"").unwrap();
        assert!(g.rules().iter().any(|r| r.name == "never"));
        assert!(matches!(
            err("root ::= []"),
            GbnfError::EmptyLanguage { .. }
        ));
    }

    #[test]
    fn generated_names_avoid_user_names() {
        let g = parse("root ::= (\"a\" | \"b\") root_2 never\nroot_2 ::= \"c\"\nnever ::= \"d\"")
            .unwrap();
        let names: HashSet<&str> = g.rules().iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names.len(), g.rules().len());
    }

    #[test]
    fn prefix_free_regular_rules_become_one_lexeme() {
        let g = parse(
            "root ::= \"[\" (s (\",\" s)*)? \"]\" | \"<\" root \">\"\ns ::= \"\\\"\" c* \"\\\"\"\nc ::= [a-z] | \"\\\\\\\"\"",
        )
        .unwrap();
        let s = g.rules().iter().find(|r| r.name == "s").unwrap();
        assert_eq!(s.alternatives.len(), 1);
        let [Symbol::Lexeme(l)] = s.alternatives[0][..] else {
            panic!("{g}");
        };
        assert_eq!(g.lexeme(l).name, "s");
    }

    #[test]
    fn regular_rules_that_are_not_prefix_free_stay_rules() {
        // `n` matches `1` and `12`: one lexeme would let greedy lexing swallow digits that
        // the next `n` needs.
        let g = parse("root ::= n \"+\" root | n n\nn ::= [0-9]+").unwrap();
        assert!(g.lexemes().iter().all(|l| l.name != "n"), "{g}");
        // `w` is nullable and prefix-free: a lexeme plus an empty alternative.
        let g = parse("root ::= \"(\" w root \")\" | \"x\"\nw ::= (\"ab\" \"!\")?").unwrap();
        let w = g.rules().iter().find(|r| r.name == "w").unwrap();
        assert_eq!(w.alternatives.len(), 2, "{g}");
        assert!(w.alternatives[0].is_empty());
    }

    #[test]
    fn repetition_uses_the_builder() {
        let g = parse("root ::= \"a\"{1000000}").unwrap();
        assert!(g.rules().len() < 60, "{}", g.rules().len());
        assert_eq!(g.lexemes().len(), 1);
        assert_eq!(g.lexeme(LexemeId(0)).regex(), "a");
    }

    #[test]
    fn continuation_lines() {
        let a = parse("root ::= \"a\" b\n  | \"c\"\n\nb ::= \"b\"\n").unwrap();
        let b = parse("root ::= \"a\" b | \"c\"\nb ::= \"b\"").unwrap();
        assert_eq!(a, b);
        let c = parse("root ::=\n    \"a\"\n    b\n| \"c\"\n  b ::= \"b\"").unwrap();
        assert_eq!(a, c);
    }

    #[test]
    fn error_positions_and_rule_names() {
        match err("root ::= a\n\na ::= b c\nb ::= \"x\"") {
            GbnfError::UndefinedRule { name, at } => {
                assert_eq!((name.as_str(), at.line, at.column), ("c", 3, 9));
            }
            e => panic!("{e}"),
        }
        match err("root ::= \"a\"\nroot ::= \"b\"") {
            GbnfError::DuplicateRule {
                name,
                first_line,
                at,
            } => assert_eq!((name.as_str(), first_line, at.line), ("root", 1, 2)),
            e => panic!("{e}"),
        }
    }
}
