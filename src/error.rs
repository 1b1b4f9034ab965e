//! The top-level error: one variant per pipeline stage, each wrapping that stage's own error.

/// Any error formwork's library can return.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Building a grammar failed.
    #[error(transparent)]
    Grammar(#[from] crate::grammar::GrammarError),
    /// Loading or running a model failed.
    #[error(transparent)]
    Model(#[from] crate::model::ModelError),
    /// Sampling failed (bad parameters, or every token masked out).
    #[error(transparent)]
    Sampler(#[from] crate::sampler::SamplerError),
}
