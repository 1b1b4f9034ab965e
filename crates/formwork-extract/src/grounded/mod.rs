//! Grounded fields: string values that must be verbatim substrings of the input document,
//! and numbers that must be numbers the document states.
//!
//! Owns two steps. [`mark_grounded`] rewrites a schema before it is compiled: every string
//! schema marked `"x-grounded": true` (or named by a `--grounded` JSON pointer; a marked array
//! grounds its items) becomes a `const` placeholder whose lexeme is easy to find in the compiled
//! grammar, and its own string keywords (`pattern`, `format`, `minLength`, `maxLength`, `const`,
//! `enum`) are kept aside as a [`GroundedField`]. [`GroundedDoc::add_field`] then builds, for
//! one document, the grammar of the quotes that field may take, which
//! [`compose`](super::compose) puts where the placeholder lexemes were.
//!
//! # Whole-word spans, as rules, not a regex
//! A grounded value is a **whole-word span** of the document ([`SpanAutomaton`]): it starts
//! and ends at word boundaries, so `"Boo"` cannot be cut out of "Book a table". The set of
//! substrings of an n-character document has no small regex (an alternation of suffixes is
//! O(n²)), but its minimal DFA, the suffix automaton, has at most 2n states and 3n transitions;
//! the span automaton is its word-aligned counterpart, built by subset construction over
//! positions under a linear work budget (over it, e.g. a long and highly repetitive document,
//! grounding falls back to any non-empty substring through [`SuffixAutomaton`], and
//! [`GroundedDoc::whole_words`] says so, for the record to report). Each state becomes one
//! right-recursive rule `S_q ::= "" (if accepting) | c S_δ(q,c) | ...` over one-character
//! lexemes (JSON-escaped, so a quote in the document is `\"` in the output). The automaton is
//! deterministic, so the Earley parser carries one item per open level: cost O(quote length)
//! items per character, and the grammar is O(document length).
//!
//! # A grounded value also satisfies its field's schema
//! Replacing the field by a placeholder must not drop its own constraints. Each of `pattern`
//! (search semantics), `format` and `const`/`enum` is a regular language over the *decoded*
//! value, which is the raw document text of the span (escaping happens only in the emitted
//! lexemes), so each becomes a full-match DFA over UTF-8 bytes, built once per run; lengths
//! are counted in code points, which are the span automaton's characters. The field's rules are
//! the product of the document's automaton with those DFAs and a length counter, explored from
//! the start and trimmed to the states that can still reach acceptance (so no prefix the
//! grammar allows is a dead end). The intersection is exact. Costs: the product is explored
//! under a budget of 64 states per document character + 4096, and over it the field is an
//! error naming its pointer ([`ExtractError::Grounded`]); a DFA over 4 MiB is an error too.
//! Other assertion keywords on a grounded string (`not`, `anyOf`, `$ref`, ...) are refused
//! by name rather than dropped.
//!
//! # Grounded numbers
//! A grounded `number` or `integer` schema takes only a number the document states: digits
//! as written (`12`, `1,200` → 1200, `3.5`, `-4` where the minus sign starts the word) or a
//! number word (`zero` to `nineteen`, the tens, and compounds such as `twenty-five`, in any
//! letter case). The candidates are found once per document ([`document_numbers`]), kept when
//! they satisfy the field's own keywords (`type` integer, `minimum`, `maximum`, the exclusive
//! bounds, `multipleOf`, `const`, `enum`; others are refused by name), and the field's grammar
//! is the alternation of their JSON texts. A document with no candidate for the field gives a
//! rule with an empty language, as for a string no quote satisfies: an optional field is left
//! out, a required one is an error naming the field ([`ExtractError::Grounded`]). Dates and
//! enums are grounded as strings: a quote that must also satisfy `format: date` or the `enum`.
//! The schema compiler never sees the document, so it refuses an `x-grounded: true` it is
//! given (`formwork compile`, a server `response_format`) rather than read it as an unknown
//! `x-` annotation and emit ungrounded values; [`mark_grounded`] removes every marker it
//! handles before compiling. Grounding happens only here.
//!
//! Does not own validation: a grounded value is checked by [`is_grounded`] (a verbatim
//! substring) after generation (constrained output always passes; the baselines may not).
//!
//! Files: `numbers` → `span` → `field` → `mark` → `document` → `check`.
//!
//! Each file uses only those before it; the public items are re-exported here:
//! - `numbers`: the numbers a document states ([`document_numbers`]);
//! - `span`: the quote automata ([`SpanAutomaton`], [`SuffixAutomaton`]);
//! - `field`: one field's own constraints ([`GroundedField`]);
//! - `mark`: schema marking ([`mark_grounded`], [`MarkedSchema`], placeholders);
//! - `document`: one document's rules, the per-field product ([`GroundedDoc`], [`FieldRule`]);
//! - `check`: the post-checks ([`is_grounded`], [`grounded_values`]).
//!
//! May use: nothing else in the crate.

mod check;
mod document;
mod field;
mod mark;
mod numbers;
mod span;

pub use check::{grounded_values, is_grounded};
pub use document::{FieldRule, GroundedDoc};
pub use field::GroundedField;
pub use mark::{mark_grounded, placeholder, placeholder_index, MarkedSchema, PLACEHOLDER_PREFIX};
pub use numbers::document_numbers;
pub use span::{SpanAutomaton, SuffixAutomaton};

#[cfg(test)]
mod tests;
