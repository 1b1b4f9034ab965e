//! The terminals `%import common.NAME` provides: Lark's `common.lark`, written out again as
//! Lark text that formwork's reader and lexer take exactly.
//!
//! Lark's own file writes `ESCAPED_STRING` and `C_COMMENT` with lazy quantifiers and a
//! look-behind (`/.*?/`, `(?<!\\)`), which a longest-match lexer cannot run; here they are the
//! regular languages those patterns match under Lark's first-match semantics: a string is
//! `"`, then characters other than `"`, `\` and a line break or a `\` escaping any character but
//! a line break, then `"` (the first `"` not escaped ends it); a C comment is `/*`, text
//! without `*/`, then `*/`. Everything else is Lark's definition.

/// The definitions, one per line.
pub(super) const COMMON: &str = r#"
DIGIT: "0".."9"
HEXDIGIT: "a".."f" | "A".."F" | DIGIT
INT: DIGIT+
SIGNED_INT: ["+" | "-"] INT
DECIMAL: INT "." INT? | "." INT
_EXP: ("e" | "E") SIGNED_INT
FLOAT: INT _EXP | DECIMAL _EXP?
SIGNED_FLOAT: ["+" | "-"] FLOAT
NUMBER: FLOAT | INT
SIGNED_NUMBER: ["+" | "-"] NUMBER
ESCAPED_STRING: /"(?:[^"\\\n]|\\[^\n])*"/
LCASE_LETTER: "a".."z"
UCASE_LETTER: "A".."Z"
LETTER: UCASE_LETTER | LCASE_LETTER
WORD: LETTER+
CNAME: ("_" | LETTER) ("_" | LETTER | DIGIT)*
WS_INLINE: (" " | /\t/)+
WS: /[ \t\f\r\n]/+
CR: /\r/
LF: /\n/
NEWLINE: (CR? LF)+
SH_COMMENT: /#[^\n]*/
CPP_COMMENT: /\/\/[^\n]*/
C_COMMENT: /\/\*[^*]*\*+(?:[^\/*][^*]*\*+)*\//
SQL_COMMENT: /--[^\n]*/
"#;
