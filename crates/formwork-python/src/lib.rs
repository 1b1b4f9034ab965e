//! formwork-python: the native module `formwork._lib` of the Python package `formwork`.
//!
//! A thin layer over `formwork-core` (grammars, matchers, masks) and `formwork-model` (the GGUF
//! and `tokenizer.json` tokenizers): no engine logic lives here. The pure-Python part of the
//! package (`python/formwork/`: re-exports and the transformers / vLLM / SGLang adapters) sits
//! beside this crate; `pyproject.toml` builds both with maturin.
//!
//! Files, lower first: `errors` (exception types) → `vocab` (a tokenizer widened to the
//! model's vocabulary, with the caller's EOS ids) → `tokenizer` (`Tokenizer`, its trie and
//! grammar cache) → `grammar` (`Grammar`: schema, regex, GBNF, choice → grammar IR) →
//! `bitmask` (rows of int32 words in caller memory) → `matcher` (`Matcher`) → `batch`
//! (`fill_bitmasks`, `fill_draft_bitmasks`).
//!
//! The GIL is released for every compile and every mask; the batch calls spread their matchers
//! over rayon's threads.

use pyo3::prelude::*;

mod batch;
mod bitmask;
mod errors;
mod grammar;
mod matcher;
mod tokenizer;
mod vocab;

/// The native module: `Tokenizer`, `Grammar`, `Matcher`, the batch fills and the exceptions.
#[pymodule]
fn _lib(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<tokenizer::PyTokenizer>()?;
    m.add_class::<grammar::PyGrammar>()?;
    m.add_class::<matcher::PyMatcher>()?;
    m.add_function(wrap_pyfunction!(batch::fill_bitmasks, m)?)?;
    m.add_function(wrap_pyfunction!(batch::fill_draft_bitmasks, m)?)?;
    m.add("FormworkError", py.get_type::<errors::FormworkError>())?;
    m.add("SchemaError", py.get_type::<errors::SchemaError>())?;
    m.add("GrammarError", py.get_type::<errors::GrammarError>())?;
    m.add("TokenizerError", py.get_type::<errors::TokenizerError>())?;
    m.add("MatcherError", py.get_type::<errors::MatcherError>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
