//! Case ranges: `FIRST..LAST`, the positions of cases within each group that `--cases` and
//! `--shots-from` name ([`CaseRange`]), and why a range cannot be read ([`CaseRangeError`]).
//!
//! Plain data below the eval errors and the suites, which both name a range. Does not own
//! selecting cases by a range (the runner's `select` and `fewshot` files).

/// Case positions `first..=last` within each group (SNIPS intent; the whole suite when cases
/// have no group), counted from 0 in suite order. Written `FIRST..LAST` with **both ends
/// included**, as the shell's `{40..59}` and the docs' "cases 40–59": `40..59` is 20 cases.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CaseRange {
    first: usize,
    last: usize,
}

/// A case range that cannot be read (see [`CaseRange`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CaseRangeError {
    /// Not two numbers around `..`.
    #[error("`{text}` is not a case range: write FIRST..LAST, both ends included (e.g. 40..59)")]
    Malformed {
        /// The text given.
        text: String,
    },
    /// The first position comes after the last, so the range holds no case.
    #[error("case range `{text}` is empty: its first case {first} comes after its last {last}")]
    Empty {
        /// The text given.
        text: String,
        /// The first position.
        first: usize,
        /// The last position.
        last: usize,
    },
}

impl CaseRange {
    /// The positions `first..=last`.
    ///
    /// # Errors
    /// [`CaseRangeError::Empty`] when `first > last`.
    pub fn new(first: usize, last: usize) -> Result<CaseRange, CaseRangeError> {
        if first > last {
            return Err(CaseRangeError::Empty {
                text: format!("{first}..{last}"),
                first,
                last,
            });
        }
        Ok(CaseRange { first, last })
    }

    /// The first position in the range.
    pub fn first(self) -> usize {
        self.first
    }

    /// The last position in the range (included).
    pub fn last(self) -> usize {
        self.last
    }

    /// Whether position `pos` is in the range.
    pub fn contains(self, pos: usize) -> bool {
        (self.first..=self.last).contains(&pos)
    }
}

impl std::str::FromStr for CaseRange {
    type Err = CaseRangeError;

    /// Reads `FIRST..LAST` (decimal, both ends included).
    fn from_str(text: &str) -> Result<CaseRange, CaseRangeError> {
        let malformed = || CaseRangeError::Malformed { text: text.into() };
        let (a, b) = text.split_once("..").ok_or_else(malformed)?;
        let number = |s: &str| -> Result<usize, CaseRangeError> {
            if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
                return Err(malformed());
            }
            s.parse().map_err(|_| malformed())
        };
        let (first, last) = (number(a)?, number(b)?);
        CaseRange::new(first, last).map_err(|_| CaseRangeError::Empty {
            text: text.into(),
            first,
            last,
        })
    }
}

impl std::fmt::Display for CaseRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}..{}", self.first, self.last)
    }
}
