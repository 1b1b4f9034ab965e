//! The top-level error: one variant per library crate, each wrapping that crate's own error.
//! The engine's stage errors are not listed again here: they arrive inside
//! [`formwork_core::Error`] (as `formwork-extract` wraps them too), and each converts with `?`.
//!
//! May use: nothing else in the crate.

/// Any error formwork's library can return.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The engine failed: compiling a JSON Schema (with its JSON pointer), building or reading
    /// a grammar (GBNF, regex), matching tokens against it, sampling, or decoding; the stage's
    /// own error inside.
    #[error(transparent)]
    Engine(#[from] formwork_core::Error),
    /// Extraction inputs (schema markers, tools, files) are unusable.
    #[error(transparent)]
    Extract(#[from] crate::extract::ExtractError),
    /// Running an eval (suite, configuration, results file) failed.
    #[error(transparent)]
    Eval(#[from] crate::eval::error::EvalError),
    /// Finding, fetching or loading a model failed.
    #[error(transparent)]
    Model(#[from] crate::model::ModelError),
}

/// Each engine stage's error is an [`Error::Engine`].
macro_rules! from_engine {
    ($($stage:ty),*) => {$(
        impl From<$stage> for Error {
            fn from(e: $stage) -> Self {
                Error::Engine(e.into())
            }
        }
    )*};
}
from_engine!(
    crate::schema::SchemaError,
    crate::grammar::GrammarError,
    crate::grammar::gbnf::GbnfError,
    crate::grammar::regex::RegexError,
    crate::lark::LarkError,
    crate::matcher::MatcherError,
    crate::sampler::SamplerError,
    crate::generate::GenerateError
);

#[cfg(test)]
mod tests {
    use super::*;

    /// Every stage converts with `?`, and the message is the stage's own (issue 40: the root
    /// error had relisted core's stages and missed `Generate`).
    #[test]
    fn stage_errors_convert_and_keep_their_message() {
        fn compile() -> Result<(), Error> {
            let schema = serde_json::json!({"type": "object", "not": {}});
            crate::schema::compile(&schema, &crate::schema::CompileOptions::default())?;
            Ok(())
        }
        let e = compile().unwrap_err();
        let stage = crate::schema::compile(
            &serde_json::json!({"type": "object", "not": {}}),
            &crate::schema::CompileOptions::default(),
        )
        .unwrap_err();
        assert!(matches!(e, Error::Engine(formwork_core::Error::Schema(_))));
        assert_eq!(e.to_string(), stage.to_string());
    }
}
