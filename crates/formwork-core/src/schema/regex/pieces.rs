//! The pieces every regex builder here uses: [`NOTHING`] (the empty language), alternation
//! and concatenation over `Option` (`None` is the empty language), and [`finish`], the parse
//! check every returned regex passes.

use crate::grammar::regex::RegexError;

/// A regex that matches nothing: what an empty range (e.g. `minimum > maximum`) compiles to.
///
/// The compiler may compare a result with this constant to turn the schema into `false`.
pub const NOTHING: &str = r"[^\x00-\x{10FFFF}]";

/// Checks that `re` parses with `regex-syntax`'s default configuration (what the lexer uses),
/// so no caller ever receives a regex it cannot compile. Deep nesting (from bounds with very
/// many digits) is reported as `TooLarge`; the limit keeps a margin of [`NEST_MARGIN`] below
/// regex-syntax's default so a caller may still wrap the regex in a few groups.
pub(super) fn finish(re: String) -> Result<String, RegexError> {
    let parsed = regex_syntax::ParserBuilder::new()
        .nest_limit(250 - NEST_MARGIN)
        .build()
        .parse(&re);
    match parsed {
        Ok(_) => Ok(re),
        Err(regex_syntax::Error::Parse(e))
            if matches!(e.kind(), regex_syntax::ast::ErrorKind::NestLimitExceeded(_)) =>
        {
            Err(RegexError::TooLarge {
                what: "regex nesting depth".into(),
                limit: u64::from(250 - NEST_MARGIN),
                given: u64::MAX,
            })
        }
        Err(e) => Err(RegexError::invalid(
            format!("internal: built an invalid regex: {e}"),
            &re,
            0,
        )),
    }
}

/// Group nesting levels left free for callers that wrap a returned regex.
const NEST_MARGIN: u32 = 10;

/// Alternation of regex pieces; `None` is the empty language, `""` the empty string.
///
/// Returns `None` when every piece is `None`. Pieces are grouped so the result can be
/// concatenated safely.
pub(super) fn alt<I: IntoIterator<Item = Option<String>>>(pieces: I) -> Option<String> {
    let mut parts: Vec<String> = Vec::new();
    let mut has_empty = false;
    for p in pieces.into_iter().flatten() {
        if p.is_empty() {
            has_empty = true;
        } else if !parts.contains(&p) {
            parts.push(p);
        }
    }
    match (parts.len(), has_empty) {
        (0, false) => None,
        (0, true) => Some(String::new()),
        (1, false) => Some(parts.pop().unwrap_or_default()),
        (_, false) => Some(format!("(?:{})", parts.join("|"))),
        (_, true) => Some(format!("(?:{})?", parts.join("|"))),
    }
}

/// Concatenation where `None` (empty language) absorbs.
pub(super) fn cat(a: Option<String>, b: Option<String>) -> Option<String> {
    Some(a? + &b?)
}

#[cfg(test)]
mod tests {
    use super::super::testutil::full;
    use super::*;

    #[test]
    fn nothing_matches_nothing() {
        let r = full(NOTHING);
        for s in ["", "a", "0", "\u{10FFFF}"] {
            assert!(!r.is_match(s));
        }
    }

    #[test]
    fn alt_handles_empty_and_none() {
        assert_eq!(alt([None, None]), None);
        assert_eq!(alt([Some(String::new())]), Some(String::new()));
        assert_eq!(
            alt([Some("a".into()), Some(String::new())]),
            Some("(?:a)?".into())
        );
        assert_eq!(cat(Some("a".into()), None), None);
    }
}
