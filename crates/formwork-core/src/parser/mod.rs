//! The parser: Earley over lexemes, with rows kept in flat vectors so that scanning a lexeme
//! (push a row) and undoing it (truncate) are cheap.
//!
//! Owns: the compiled form of a grammar's rules ([`ParserSpec`]: alternatives laid out in one
//! flat symbol array, nullable rules, the synthetic start rule) and the per-sequence chart
//! ([`Chart`]). Does not own lexing: the matcher tells [`Chart::scan`] which lexemes matched,
//! and asks [`Chart::allowed_lexemes`] which may come next.
//!
//! # Compilation
//! - Alternatives that mention a symbol deriving no finite string are dropped, so every item
//!   in a row can still be completed: a non-empty row is a viable prefix at lexeme level.
//! - A lexeme whose regex accepts `""` is replaced by a synthetic rule `L? ::= L | ""` (the
//!   lexer only matches non-empty text; see the lexer's module doc).
//! - Nullable rules use the Aycock–Horspool trick: predicting a nullable rule also advances the
//!   predicting item over it, so completions inside one row need no second pass.
//!
//! # Right recursion (Joop Leo's optimization)
//! A right-recursive rule such as an object tail `tail → , member tail | ε` completes, at
//! every member, one item per enclosing level up to the object: O(members) items per row and
//! O(members²) per chart. So a completed item `A → α •` with origin `j` first looks for a
//! *deterministic reduction*: row `j` holds exactly one item waiting on `A`, `B → β • A`, and
//! `A` ends its alternative. Then completing `A` only completes `B` with the same origin, and
//! so on up: the chart adds just the topmost completed item of that path (which completes as
//! usual). The topmost item is memoized per (row, rule) in the origin row, so walking the
//! path costs O(1) amortized per member; a memo lives exactly as long as its row (cleared
//! when the row is rebuilt after a truncation). The skipped items are completed items, which
//! no scan or lexeme query reads; the accepting item `start' → S •` is never skipped, since
//! no item waits on `start'`. Rows stay functions of their origin rows' items, so row
//! signatures still mean equal futures.
//!
//! # Invariants
//! Row `k` holds the items `items[row_start[k]..row_start[k+1]]`, deduplicated on
//! `(dot, origin)`. Row 0 is the closure of the start rule. A pushed row is never empty.
//!
//! # Costs
//! Compiling is O(grammar symbols): productive and nullable rules are worklist fixpoints
//! over a flat layout of the alternatives (schemas reach 500,000 symbols, so this is part of
//! their time to first mask). A scan is O(items of the row × symbols) plus, per completed
//! item, a linear pass over its origin row (once more the first time a rule completes into a
//! row, to look for a deterministic reduction). Popping is O(1). Memory is one 8-byte item per
//! (row, item), plus a 12-byte memo per (row, rule completed into it).
//!
//! # Submodules
//! `error` ([`ParserError`]), `perm` (permutation states), `spec` (compiling a grammar:
//! [`ParserSpec`]), `sigs` (interned row signatures: [`RowSigs`]), `chart` (the per-sequence
//! [`Chart`]).
//!
//! Files: `error` → `perm` → `spec` → `sigs` → `chart`.
//!
//! May use: `util`, `grammar`.

mod chart;
mod error;
mod perm;
mod sigs;
mod spec;
#[cfg(test)]
mod tests;

pub use chart::Chart;
pub use error::ParserError;
pub use sigs::{RowSig, RowSigs};
pub use spec::ParserSpec;
