//! Lark grammars → the grammar IR: the syntax OpenAI's custom tools take
//! (`{"type": "grammar", "syntax": "lark", "definition": ...}`) and llguidance reads.
//!
//! Owns the Lark *text format* and its meaning as a constraint; does not own lexing or
//! parsing model output (the [`Grammar`] it builds goes to the lexer and parser like any
//! other). It is a layer above [`schema`](crate::schema) because `%json {schema}` inside a
//! grammar is compiled by the schema compiler.
//!
//! # What a Lark grammar means here
//! The language llguidance defines, which OpenAI documents for custom tools: terminals
//! (UPPERCASE names, string and regex literals) are *lexemes*, matched greedily (the longest
//! match among the terminals the parser allows next, see [`grammar`](crate::grammar)), and
//! rules (lowercase names) are an Earley grammar over them, starting at `start`. So
//! `start: A "a"` with `A: /a+/` accepts nothing: `A` takes every `a`. Lark's own lexers
//! differ from this in corner cases (its standard lexer orders terminals by priority and
//! length rather than by the parser's expectations).
//!
//! # Supported
//! Rules and terminals; `|`, `( )`, `[ ]` (optional), `?`, `*`, `+`, `~ n`, `~ n..m`,
//! `{n}`, `{n,}`, `{n,m}`, `{,m}`; string literals with Lark's escapes and the `i` flag;
//! `"a".."z"`; regex literals `/.../imsxu` (regex-syntax dialect, see `terminal`); terminal
//! priorities where they cannot decide anything (see `priority`);
//! `%import common.NAME [-> ALIAS]` and `%import common (A, B)` (see `common`); `%ignore`;
//! `%json {schema}` as an item of a rule; `-> alias`, the `_`/`?`/`!` name markers and rule
//! priorities, all of which shape Lark's parse tree, never the language, and are read and
//! left aside; `%llguidance {}` (empty options); comments `//` and `#`.
//!
//! # Refused, with the position (never dropped)
//! Terminal priorities (`TERM.2`) that would decide between competing terminals, which a
//! longest-match lexer cannot honour; lazy quantifiers and look-around in regexes;
//! templates; `%declare`, `%override`, `%extend`, imports other than `common`; llguidance's
//! special tokens (`<...>`), lexeme options (`name[lazy]`), `%regex`, `@grammar`, `&` and
//! `~` negation; `%json` inside a terminal; recursive terminals and terminals using rules.
//!
//! # Files, in dependency order
//! `error` (`LarkError`) → `syntax` (text → definitions) → `common` (the built-in
//! terminals, as Lark text) → `terminal` (literals and regex literals → regexes) → `priority`
//! (when a terminal priority cannot matter) → `lower` (definitions →
//! [`GrammarBuilder`](crate::grammar::GrammarBuilder), priorities checked on the result).
//!
//! Files: `error` → `syntax` → `common` → `terminal` → `priority` → `lower`.
//!
//! # Costs
//! Linear in the text, plus one regex parse per regex literal and one schema compile per
//! `%json`; counted repetition is O(log n) rules. Groups nest at most [`MAX_NESTING`] deep.
//!
//! May use: `grammar`, `schema`.

mod common;
mod error;
mod lower;
mod priority;
mod syntax;
mod terminal;

pub use error::LarkError;

use crate::grammar::Grammar;
use crate::schema::{CompileOptions, SchemaError};

/// How deeply `( )` and `[ ]` may nest before [`LarkError::TooDeep`]; keeps recursion
/// bounded on hostile input.
pub const MAX_NESTING: usize = 128;

/// A compiled Lark grammar.
#[derive(Debug, Clone)]
pub struct CompiledLark {
    /// The grammar: accepts exactly what the Lark grammar's `start` derives (see the module
    /// doc for what that means).
    pub grammar: Grammar,
    /// Keywords of `%json` schemas that were not enforced (only with
    /// [`CompileOptions::lenient`]).
    pub warnings: Vec<SchemaError>,
}

/// Parses a Lark grammar into a [`Grammar`], compiling `%json` schemas with the default
/// [`CompileOptions`] (compact JSON).
///
/// # Example
/// ```
/// let g = formwork_core::lark::parse(
///     r#"
/// start: "The answer is " NUMBER
/// %import common.NUMBER
/// "#,
/// )?;
/// assert_eq!(g.rule(g.start()).name, "start");
/// # Ok::<(), formwork_core::lark::LarkError>(())
/// ```
pub fn parse(text: &str) -> Result<Grammar, LarkError> {
    Ok(parse_with(text, &CompileOptions::default())?.grammar)
}

/// Parses a Lark grammar, compiling `%json` schemas with `json` (their whitespace, strictness,
/// limits).
///
/// # Example
/// ```
/// use formwork_core::schema::{CompileOptions, Whitespace};
/// let json = CompileOptions { whitespace: Whitespace::Flexible { max_run: 4 }, ..Default::default() };
/// let c = formwork_core::lark::parse_with(r#"start: "call " %json {"type": "integer"}"#, &json)?;
/// assert!(c.warnings.is_empty());
/// # Ok::<(), formwork_core::lark::LarkError>(())
/// ```
pub fn parse_with(text: &str, json: &CompileOptions) -> Result<CompiledLark, LarkError> {
    let file = syntax::parse_file(text)?;
    lower::lower(text, file, json)
}
