//! The top-level error: one variant per pipeline stage, each wrapping that stage's own error.

/// Any error formwork's library can return.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Building a grammar failed.
    #[error(transparent)]
    Grammar(#[from] crate::grammar::GrammarError),
    /// Compiling a JSON Schema failed.
    #[error(transparent)]
    Schema(#[from] crate::schema::SchemaError),
}
