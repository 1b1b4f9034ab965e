//! JSON Schema → grammar.
pub mod regex;
