//! `LarkError`: everything that can go wrong reading a Lark grammar, each with the
//! `line:column` of the offending text (rendered with the line and a caret, like GBNF's
//! errors) where there is one.

use crate::grammar::gbnf::Location;
use crate::grammar::GrammarError;
use crate::schema::SchemaError;

/// An error reading a Lark grammar. Every variant with a position carries a [`Location`] whose
/// `Display` shows the offending line with a caret under the column.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LarkError {
    /// There is no rule called `start`, the start rule.
    #[error("grammar has no `start` rule (the start rule)")]
    MissingStart,
    /// Something else than what the grammar needs at this point.
    #[error("expected {expected} at {at}")]
    Expected {
        /// What was expected, e.g. "`:` after the name `value`".
        expected: String,
        /// Where it should be.
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
    /// A string literal runs to the end of its line.
    #[error("unterminated string literal at {at}")]
    UnterminatedString {
        /// The opening quote.
        at: Location,
    },
    /// A regex literal (`/.../`) runs to the end of its line.
    #[error("unterminated regex literal at {at}")]
    UnterminatedRegex {
        /// The opening slash.
        at: Location,
    },
    /// A `(` or `[` without its closing bracket.
    #[error("unclosed `{open}` at {at}")]
    Unclosed {
        /// The bracket: `(` or `[`.
        open: char,
        /// Where it opens.
        at: Location,
    },
    /// A `\` escape in a string literal that names no character (a bad `\x`, `\u`, `\U`).
    #[error("invalid escape sequence `{escape}` at {at}")]
    BadEscape {
        /// The escape as written.
        escape: String,
        /// The backslash.
        at: Location,
    },
    /// A name whose letters are neither all upper case (a terminal) nor all lower case (a
    /// rule).
    #[error("name `{name}` mixes upper and lower case: terminals are UPPERCASE, rules lowercase at {at}")]
    MixedCaseName {
        /// The name.
        name: String,
        /// Where it is.
        at: Location,
    },
    /// A Lark (or llguidance) feature formwork does not implement; never silently dropped.
    #[error("unsupported: {what} at {at}")]
    Unsupported {
        /// The feature, and why.
        what: String,
        /// Where it is.
        at: Location,
    },
    /// A regex literal that does not parse (message from regex-syntax).
    #[error("invalid regex: {message} at {at}")]
    InvalidRegex {
        /// What regex-syntax said.
        message: String,
        /// The offending place inside the regex.
        at: Location,
    },
    /// A character range `"a".."z"` whose ends are not single characters or are reversed.
    #[error("invalid character range: {what} at {at}")]
    InvalidRange {
        /// What is wrong.
        what: String,
        /// The range's first string.
        at: Location,
    },
    /// `~ n..m` (or `{n,m}`) with `n > m`, or a count above `u32::MAX`.
    #[error("invalid repetition: {what} at {at}")]
    InvalidRepetition {
        /// What is wrong.
        what: String,
        /// The operator.
        at: Location,
    },
    /// A terminal or `%ignore` that matches no string at all (an empty class, say).
    #[error("{what} matches no string at all at {at}")]
    MatchesNothing {
        /// The terminal's name or the literal as written (in backticks), or `%ignore`.
        what: String,
        /// Where it is defined or written.
        at: Location,
    },
    /// A name used but never defined (nor imported).
    #[error("`{name}` is used but never defined at {at}")]
    Undefined {
        /// The name.
        name: String,
        /// Its first use.
        at: Location,
    },
    /// A name defined twice (Lark's `%override` is not supported).
    #[error("`{name}` is defined twice (first on line {first_line}) at {at}")]
    Duplicate {
        /// The name.
        name: String,
        /// The line of the first definition (or `%import`).
        first_line: usize,
        /// The second definition.
        at: Location,
    },
    /// A name `%import common` does not provide.
    #[error("`common` has no terminal `{name}` at {at}")]
    UnknownCommon {
        /// The name asked for.
        name: String,
        /// The import.
        at: Location,
    },
    /// A terminal (or `%ignore`) that refers to a rule: terminals are regular expressions and
    /// may only use other terminals.
    #[error("terminal `{terminal}` uses rule `{rule}`: terminals may only use terminals at {at}")]
    TerminalUsesRule {
        /// The terminal (or `%ignore`).
        terminal: String,
        /// The rule.
        rule: String,
        /// The use.
        at: Location,
    },
    /// A terminal that refers to itself, directly or through other terminals.
    #[error("terminal `{name}` refers to itself: terminals cannot be recursive at {at}")]
    RecursiveTerminal {
        /// The terminal.
        name: String,
        /// The reference that closes the cycle.
        at: Location,
    },
    /// A terminal priority that decides between terminals, which formwork's lexer (longest
    /// match among the terminals the parser allows) cannot honour.
    #[error("terminal priority of `{name}` cannot be honoured: {why} at {at}")]
    Priority {
        /// The terminal.
        name: String,
        /// Which other terminal it competes with.
        why: String,
        /// The definition.
        at: Location,
    },
    /// The text after `%json` is not one JSON value.
    #[error("invalid JSON after %json: {message} at {at}")]
    Json {
        /// What serde_json said.
        message: String,
        /// Where.
        at: Location,
    },
    /// The schema after `%json` was refused by the schema compiler.
    #[error("%json schema refused: {source} at {at}")]
    Schema {
        /// The schema compiler's error (with its JSON pointer into the schema).
        source: Box<SchemaError>,
        /// The `%json`.
        at: Location,
    },
    /// Groups nested deeper than [`MAX_NESTING`](super::MAX_NESTING).
    #[error("groups nested deeper than {limit} levels at {at}")]
    TooDeep {
        /// The limit.
        limit: usize,
        /// The bracket that went too deep.
        at: Location,
    },
    /// `start` derives no finite string, so nothing could ever be accepted.
    #[error("rule `start` derives no finite string at {at}")]
    EmptyLanguage {
        /// The definition of `start`.
        at: Location,
    },
    /// The grammar IR rejected the lowered grammar (an internal inconsistency).
    #[error(transparent)]
    Grammar(#[from] GrammarError),
}

impl LarkError {
    /// The position of the error in the grammar text, if it has one.
    pub fn location(&self) -> Option<&Location> {
        use LarkError::*;
        match self {
            MissingStart | Grammar(_) => None,
            Expected { at, .. }
            | UnexpectedChar { at, .. }
            | UnterminatedString { at }
            | UnterminatedRegex { at }
            | Unclosed { at, .. }
            | BadEscape { at, .. }
            | MixedCaseName { at, .. }
            | Unsupported { at, .. }
            | InvalidRegex { at, .. }
            | InvalidRange { at, .. }
            | InvalidRepetition { at, .. }
            | MatchesNothing { at, .. }
            | Undefined { at, .. }
            | Duplicate { at, .. }
            | UnknownCommon { at, .. }
            | TerminalUsesRule { at, .. }
            | RecursiveTerminal { at, .. }
            | Priority { at, .. }
            | Json { at, .. }
            | Schema { at, .. }
            | TooDeep { at, .. }
            | EmptyLanguage { at } => Some(at),
        }
    }
}
