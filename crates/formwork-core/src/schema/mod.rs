//! JSON Schema → grammar: the compiler that turns a schema into the [`grammar`](crate::grammar)
//! IR so the matcher allows exactly the schema's instances.
//!
//! Pipeline, in module order: `resolve` (load, draft detection, `$id`/`$anchor` index, local
//! `$ref` → JSON pointer) → `lower` (keywords → normalized IR in `ir`, with the set algebra
//! over the IR for `allOf`/`not`/`if`/`oneOf`; finite `enum`/`const` nodes under combinators
//! are filtered by the direct validator in `validate`) → `emit` (IR → rules; objects in
//! schema order with exact comma placement) → [`compile`] (checks, under the `options`).
//! Lexeme regexes come from `regexes`, which adapts the building blocks in `regex`.
//!
//! Files: `pointer` → `error` → `registry` → `resolve` → `options` → `ir` → `regex` →
//! `regexes` → `validate` → `lower` → `emit` → `compile` → `explain` (the per-keyword report of
//! a compile) → `reference`.
//!
//! Never silently drops a keyword: anything not enforced exactly is a
//! [`SchemaError::Unsupported`] naming the keyword and its JSON pointer, or, with
//! [`CompileOptions::lenient`], a warning in [`CompiledSchema::warnings`]. Annotations
//! (`title`, `description`, `default`, `examples`, ...) and unknown keywords (`x-...`) are
//! ignored, as the specification says.
//!
//! May use: `grammar`.

mod compile;
mod emit;
mod error;
mod explain;
pub mod ir;
mod lower;
mod options;
pub mod pointer;
pub mod reference;
pub mod regex;
pub(crate) mod regexes;
mod registry;
pub mod resolve;
mod validate;

pub use compile::{compile, CompiledSchema};
pub use error::SchemaError;
pub use explain::{explain, Explanation, KeywordReport, Outcome};
pub use options::{CompileOptions, PropertyOrder, Whitespace};
pub use registry::SchemaRegistry;
pub use resolve::Draft;
