//! `formwork.Tokenizer`: a model's vocabulary as the engine sees it, with its token trie and
//! the grammars compiled for it.
//!
//! Built from a GGUF file (the tokenizer formwork-model rebuilds from its metadata, the same as
//! the CLI's), a `tokenizer.json` file, or a live `tokenizers` / transformers tokenizer (through
//! its JSON). Building the trie costs ~20-100 ms (49k-262k tokens), once per tokenizer. Owns the
//! per-tokenizer [`GrammarCache`]: grammars are compiled for this vocabulary on first use and
//! kept by content (kind, text, options), so matchers of the same grammar share one compiled
//! automaton and its mask caches.

use std::path::PathBuf;
use std::sync::Arc;

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use formwork_core::matcher::{CompiledGrammar, Limits};
use formwork_core::toktrie::{TokEnv, TokenId, Vocab};
use formwork_core::GrammarCache;
use formwork_model::fetch::LocatedModel;
use formwork_model::GgufTokenizer;

use crate::errors::{core_error, model_error, TokenizerError};
use crate::grammar::PyGrammar;
use crate::vocab::ModelVocab;

/// Grammars kept per tokenizer by default: a server sees a few hundred distinct schemas at most
/// at once, and each compiled grammar's mask caches are bounded by `Limits::mask_cache_bytes`.
const DEFAULT_CACHE: usize = 256;

/// A tokenizer: token ids and their bytes, EOS ids, the model's vocabulary width, and the
/// grammars compiled for it.
#[pyclass(name = "Tokenizer", module = "formwork", frozen)]
pub(crate) struct PyTokenizer {
    vocab: Arc<ModelVocab>,
    cache: GrammarCache,
}

impl PyTokenizer {
    fn build(
        py: Python<'_>,
        tok: GgufTokenizer,
        vocab_size: Option<usize>,
        eos_token_ids: Option<Vec<u32>>,
        cache_size: usize,
    ) -> PyResult<Self> {
        let vocab =
            ModelVocab::new(tok, vocab_size, eos_token_ids).map_err(TokenizerError::new_err)?;
        if vocab.eos_tokens().is_empty() {
            return Err(TokenizerError::new_err(
                "the tokenizer names no end-of-sequence token: pass eos_token_ids=[...]",
            ));
        }
        let vocab = Arc::new(vocab);
        let shared: Arc<dyn Vocab> = vocab.clone();
        let env = py.detach(|| TokEnv::new(shared));
        Ok(Self {
            vocab,
            cache: GrammarCache::new(env, Limits::default(), cache_size),
        })
    }

    /// The grammar compiled for this vocabulary (from the cache, or compiled now without the
    /// GIL).
    pub(crate) fn compiled(&self, py: Python<'_>, g: &PyGrammar) -> PyResult<Arc<CompiledGrammar>> {
        let key = g.key();
        let grammar = g.grammar();
        py.detach(|| {
            self.cache
                .get_or_compile::<formwork_core::Error>(key.as_bytes(), || Ok((*grammar).clone()))
        })
        .map_err(|e| core_error(py, &e))
    }
}

/// The JSON text of a `tokenizers.Tokenizer` or a transformers tokenizer.
fn hf_json(tok: &Bound<'_, PyAny>) -> PyResult<String> {
    if let Ok(backend) = tok.getattr("backend_tokenizer") {
        return backend.call_method0("to_str")?.extract();
    }
    if tok.hasattr("to_str")? {
        return tok.call_method0("to_str")?.extract();
    }
    Err(PyTypeError::new_err(
        "from_huggingface needs a tokenizers.Tokenizer or a fast transformers tokenizer \
         (one with backend_tokenizer)",
    ))
}

/// A transformers tokenizer's EOS ids: `eos_token_id` (an int or a list), when it has one.
fn hf_eos(tok: &Bound<'_, PyAny>) -> PyResult<Option<Vec<u32>>> {
    let Ok(eos) = tok.getattr("eos_token_id") else {
        return Ok(None);
    };
    if eos.is_none() {
        return Ok(None);
    }
    if let Ok(id) = eos.extract::<u32>() {
        return Ok(Some(vec![id]));
    }
    Ok(Some(eos.extract::<Vec<u32>>()?))
}

#[pymethods]
impl PyTokenizer {
    /// The tokenizer of a GGUF model file (rebuilt from its `tokenizer.ggml.*` metadata, as the
    /// `formwork` CLI does). EOS: the file's, plus whichever common end-of-turn tokens the
    /// vocabulary has (`<|im_end|>`, `<|endoftext|>`, `<end_of_turn>`, `<|eot_id|>`), unless
    /// `eos_token_ids` is given. `vocab_size`: the model's logits width if wider than the
    /// tokenizer (padding ids are never allowed).
    #[staticmethod]
    #[pyo3(signature = (path, *, vocab_size=None, eos_token_ids=None, cache_size=DEFAULT_CACHE))]
    fn from_gguf(
        py: Python<'_>,
        path: PathBuf,
        vocab_size: Option<usize>,
        eos_token_ids: Option<Vec<u32>>,
        cache_size: usize,
    ) -> PyResult<Self> {
        let located = LocatedModel {
            path,
            entry: None,
            tokenizer_json: None,
        };
        let tok = py
            .detach(|| GgufTokenizer::load(&located))
            .map_err(|e| model_error(&e))?;
        Self::build(py, tok, vocab_size, eos_token_ids, cache_size)
    }

    /// The tokenizer of a Hugging Face `tokenizer.json` file. A `tokenizer.json` names no EOS:
    /// the common end tokens it has are taken (`<|im_end|>`, `<|endoftext|>`, `<end_of_turn>`,
    /// `<|eot_id|>`) unless `eos_token_ids` is given; none at all is an error.
    #[staticmethod]
    #[pyo3(signature = (path, *, vocab_size=None, eos_token_ids=None, cache_size=DEFAULT_CACHE))]
    fn from_tokenizer_json(
        py: Python<'_>,
        path: PathBuf,
        vocab_size: Option<usize>,
        eos_token_ids: Option<Vec<u32>>,
        cache_size: usize,
    ) -> PyResult<Self> {
        let text = std::fs::read_to_string(&path)
            .map_err(|e| TokenizerError::new_err(format!("cannot read {}: {e}", path.display())))?;
        let source = path.display().to_string();
        let tok = py
            .detach(|| GgufTokenizer::from_tokenizer_json_text(&text, &source))
            .map_err(|e| model_error(&e))?;
        Self::build(py, tok, vocab_size, eos_token_ids, cache_size)
    }

    /// The tokenizer of a live `tokenizers.Tokenizer` or fast transformers tokenizer (read
    /// through its JSON). EOS: `eos_token_ids`, else the transformers tokenizer's
    /// `eos_token_id`, else the common end tokens. Pass the model's `vocab_size`
    /// (`model.config.vocab_size`) when it is wider than the tokenizer.
    #[staticmethod]
    #[pyo3(signature = (tok, *, vocab_size=None, eos_token_ids=None, cache_size=DEFAULT_CACHE))]
    fn from_huggingface(
        py: Python<'_>,
        tok: &Bound<'_, PyAny>,
        vocab_size: Option<usize>,
        eos_token_ids: Option<Vec<u32>>,
        cache_size: usize,
    ) -> PyResult<Self> {
        let text = hf_json(tok)?;
        let eos = match eos_token_ids {
            Some(ids) => Some(ids),
            None => hf_eos(tok)?,
        };
        let source = tok.get_type().name()?.to_string();
        let parsed = py
            .detach(|| GgufTokenizer::from_tokenizer_json_text(&text, &source))
            .map_err(|e| model_error(&e))?;
        Self::build(py, parsed, vocab_size, eos, cache_size)
    }

    /// Bits per bitmask row: the model's vocabulary width (ids past the tokenizer's are padding,
    /// never allowed).
    #[getter]
    fn vocab_size(&self) -> usize {
        self.vocab.vocab_len()
    }

    /// The token ids the tokenizer defines (at most `vocab_size`).
    #[getter]
    fn tokenizer_size(&self) -> usize {
        self.vocab.tokenizer_len()
    }

    /// End-of-sequence ids: allowed exactly when the grammar accepts; consuming one terminates
    /// the matcher.
    #[getter]
    fn eos_token_ids(&self) -> Vec<u32> {
        self.vocab.eos_tokens().iter().map(|t| t.0).collect()
    }

    /// Words (int32) per bitmask row: `ceil(vocab_size / 32)`.
    #[getter]
    fn bitmask_words(&self) -> usize {
        self.vocab.vocab_len().div_ceil(32)
    }

    /// The exact bytes of a token as it appears in generated text (special tokens: their text;
    /// padding ids: empty).
    fn token_bytes<'py>(&self, py: Python<'py>, id: u32) -> Bound<'py, PyBytes> {
        PyBytes::new(py, self.vocab.token_bytes(TokenId(id)))
    }

    /// Whether a token is special (control, padding): never allowed by a grammar.
    fn is_special(&self, id: u32) -> bool {
        self.vocab.is_special(TokenId(id))
    }

    /// The canonical token ids of generated text (no special tokens parsed, nothing added):
    /// what the model would produce for it, and what fast-forwarding uses.
    fn encode(&self, py: Python<'_>, text: &str) -> Vec<u32> {
        py.detach(|| self.vocab.tokenize(text.as_bytes()))
            .into_iter()
            .map(|t| t.0)
            .collect()
    }

    /// The concatenated bytes of `ids` (special tokens as their text).
    fn decode_bytes<'py>(&self, py: Python<'py>, ids: Vec<u32>) -> Bound<'py, PyBytes> {
        let ids: Vec<TokenId> = ids.into_iter().map(TokenId).collect();
        PyBytes::new(py, &self.vocab.inner().decode_bytes(&ids))
    }

    /// The tokenizer as Hugging Face `tokenizer.json` text (for a GGUF file: the pipeline
    /// formwork rebuilds from its metadata), so peers and `tokenizers` can load the very same
    /// tokenizer.
    fn to_json(&self) -> PyResult<String> {
        self.vocab
            .inner()
            .inner()
            .to_string(false)
            .map_err(|e| TokenizerError::new_err(format!("serializing the tokenizer: {e}")))
    }

    /// Grammars compiled for this tokenizer and kept.
    #[getter]
    fn cached_grammars(&self) -> usize {
        self.cache.len()
    }

    /// Compiles a grammar for this tokenizer now (otherwise the first `Matcher` does), without
    /// the GIL; a grammar already compiled is taken from the cache.
    fn compile(&self, py: Python<'_>, grammar: &PyGrammar) -> PyResult<()> {
        self.compiled(py, grammar).map(|_| ())
    }

    fn __repr__(&self) -> String {
        format!(
            "Tokenizer(vocab_size={}, tokenizer_size={}, eos_token_ids={:?})",
            self.vocab.vocab_len(),
            self.vocab.tokenizer_len(),
            self.eos_token_ids()
        )
    }
}
