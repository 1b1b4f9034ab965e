//! The top-level error: one variant per pipeline stage, each wrapping that stage's own error.

/// Any error formwork's library can return.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Building a grammar failed.
    #[error(transparent)]
    Grammar(#[from] crate::grammar::GrammarError),
    /// Extraction inputs (schema markers, tools, files) are unusable.
    #[error(transparent)]
    Extract(#[from] crate::extract::ExtractError),
    /// Compiling a JSON Schema failed.
    #[error(transparent)]
    Schema(#[from] crate::schema::SchemaError),
    /// Reading GBNF grammar text failed.
    #[error(transparent)]
    Gbnf(#[from] crate::grammar::gbnf::GbnfError),
    /// Turning a regex into a grammar failed.
    #[error(transparent)]
    Regex(#[from] crate::grammar::regex::RegexError),
    /// Reading a Lark grammar failed.
    #[error(transparent)]
    Lark(#[from] crate::lark::LarkError),
    /// Compiling a grammar for a vocabulary, or matching tokens against it, failed.
    #[error(transparent)]
    Matcher(#[from] crate::matcher::MatcherError),
    /// Running an eval (suite, configuration, results file) failed.
    #[error(transparent)]
    Eval(#[from] crate::eval::error::EvalError),
    /// Finding, fetching or loading a model failed.
    #[error(transparent)]
    Model(#[from] crate::model::ModelError),
    /// Sampling failed (bad parameters, or every token masked out).
    #[error(transparent)]
    Sampler(#[from] crate::sampler::SamplerError),
}
