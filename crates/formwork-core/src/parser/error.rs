//! The parser's error ([`ParserError`]): a grammar that derives nothing, or a budget spent.

/// An error compiling a grammar for the parser or running it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ParserError {
    /// The start rule derives no string (after lexemes that match nothing are removed).
    #[error("start rule `{rule}` derives no finite string")]
    EmptyLanguage {
        /// The start rule's name.
        rule: String,
    },
    /// A counted budget ran out.
    #[error("limit exceeded: {what}: limit {limit}, needed {given}")]
    LimitExceeded {
        /// What was counted.
        what: &'static str,
        /// The limit.
        limit: usize,
        /// How many were needed.
        given: usize,
    },
}
