//! A position in grammar or regex text ([`Location`]): `line:column` and the offending line,
//! rendered with a caret under the column as regex-syntax renders its errors.
//!
//! Owns turning a byte offset into that position; shared by the GBNF reader ([`GbnfError`])
//! and the regex constraint ([`RegexError`]), which is why it sits below both.
//!
//! [`GbnfError`]: super::gbnf::GbnfError
//! [`RegexError`]: super::regex::RegexError

use std::fmt::{self, Write as _};

/// A position in grammar text, with the text of its line for rendering.
///
/// Displays as `line:column`, then the offending line indented by four spaces and a caret
/// under the column, like regex-syntax's errors.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Location {
    /// 1-based line number.
    pub line: usize,
    /// 1-based column, counted in characters (Unicode scalar values).
    pub column: usize,
    /// The text of the line, without its line terminator.
    pub line_text: String,
}

impl Location {
    /// The location of byte `offset` in `text` (clamped to the text, rounded down to a
    /// character boundary).
    pub fn from_offset(text: &str, offset: usize) -> Self {
        let mut offset = offset.min(text.len());
        while !text.is_char_boundary(offset) {
            offset -= 1;
        }
        let before = &text[..offset];
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let line = before.matches('\n').count() + 1;
        let column = text[line_start..offset].chars().count() + 1;
        let line_end = text[offset..].find('\n').map_or(text.len(), |i| offset + i);
        let line_text = text[line_start..line_end]
            .trim_end_matches('\r')
            .to_string();
        // An offset on a trimmed `\r` points at the end of the line.
        let column = column.min(line_text.chars().count() + 1);
        Location {
            line,
            column,
            line_text,
        }
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}\n    {}\n    ",
            self.line, self.column, self.line_text
        )?;
        // Keep tabs so the caret lines up in a terminal.
        for c in self.line_text.chars().take(self.column.saturating_sub(1)) {
            f.write_char(if c == '\t' { '\t' } else { ' ' })?;
        }
        f.write_char('^')
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn location_counts_lines_and_chars() {
        let text = "ab\nçd\tx\n";
        let l = Location::from_offset(text, 6); // the tab: 'ç' is 2 bytes
        assert_eq!((l.line, l.column, l.line_text.as_str()), (2, 3, "çd\tx"));
        let end = Location::from_offset(text, text.len());
        assert_eq!((end.line, end.column, end.line_text.as_str()), (3, 1, ""));
        // An offset inside a multi-byte character rounds down instead of panicking.
        assert_eq!(Location::from_offset(text, 4).column, 1);
    }

    #[test]
    fn caret_keeps_tabs_aligned() {
        let l = Location::from_offset("\tx ::= y", 5);
        assert_eq!(l.to_string(), "1:6\n    \tx ::= y\n    \t    ^");
    }
}
