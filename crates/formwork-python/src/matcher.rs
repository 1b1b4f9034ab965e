//! `formwork.Matcher`: one sequence's position in a grammar, and the mask of what may come next.
//!
//! A thin layer over the engine's [`Matcher`] with the semantics Python callers of llguidance and
//! xgrammar expect: a refused token is `False` and leaves the state as it was (the engine makes
//! refusals sticky, so the consumed prefix is replayed after a refusal: O(output) then, nothing
//! on the accepted path); EOS is allowed exactly when the output is accepted and consuming it
//! terminates the matcher; a terminated matcher's row allows only the EOS ids (a batch keeps
//! sampling finished sequences, and an all-zero row would make their logits all `-inf`).
//! Budget errors stay errors (`MatcherError`) until `reset()`.
//!
//! The state sits behind a mutex so the batch calls ([`crate::batch`]) can fill many matchers'
//! rows on several threads without the GIL; every long call here runs without the GIL too.
//! `fork()` replays the consumed tokens on a new matcher of the same compiled grammar
//! (O(output), sharing the grammar's mask caches).

use std::sync::{Arc, Mutex, MutexGuard};

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use formwork_core::matcher::{CompiledGrammar, Matcher, MatcherError as CoreMatcherError};
use formwork_core::toktrie::{TokenId, TokenSet};

use crate::bitmask::{BitmaskTarget, Rows};
use crate::errors::matcher_error;
use crate::grammar::PyGrammar;
use crate::tokenizer::PyTokenizer;

/// One sequence's matcher state, usable without the GIL.
#[derive(Debug)]
pub(crate) struct State {
    matcher: Matcher,
    /// The last mask computed (universe: the vocabulary width).
    mask: TokenSet,
    /// The token ids consumed so far (EOS included), for replay after a refusal and `fork`.
    tokens: Vec<u32>,
    /// Why the last refused token was refused.
    refusal: Option<String>,
}

/// Errors that mean "this token does not continue the output": `False`, not an exception.
fn is_refusal(e: &CoreMatcherError) -> bool {
    matches!(
        e,
        CoreMatcherError::TokenRejected { .. }
            | CoreMatcherError::EosNotAccepted { .. }
            | CoreMatcherError::TokenOutOfRange { .. }
            | CoreMatcherError::Stopped
    )
}

impl State {
    fn new(compiled: Arc<CompiledGrammar>) -> Result<Self, CoreMatcherError> {
        let len = compiled.trie().vocab_len();
        Ok(Self {
            matcher: Matcher::new(compiled)?,
            mask: TokenSet::new(len),
            tokens: Vec::new(),
            refusal: None,
        })
    }

    /// Computes the mask of the current position into `self.mask`.
    pub(crate) fn compute(&mut self) -> Result<&TokenSet, CoreMatcherError> {
        if self.matcher.is_stopped() {
            self.mask.clear();
            let cg = self.matcher.compiled().clone();
            for &t in cg.trie().eos_tokens() {
                self.mask.insert(t);
            }
        } else {
            self.matcher.compute_mask(&mut self.mask)?;
        }
        Ok(&self.mask)
    }

    /// Computes the mask and writes it into `row` of `rows`.
    pub(crate) fn fill(&mut self, rows: &Rows, row: usize) -> Result<(), CoreMatcherError> {
        let mask = self.compute()?;
        rows.write(row, mask);
        Ok(())
    }

    /// Consumes `ids` in order; all of them, or none (`Ok(false)`, state unchanged).
    pub(crate) fn consume(&mut self, ids: &[u32]) -> Result<bool, CoreMatcherError> {
        let before = self.tokens.len();
        for &t in ids {
            match self.matcher.consume_token(TokenId(t)) {
                Ok(()) => self.tokens.push(t),
                Err(e) if is_refusal(&e) => {
                    self.refusal = Some(e.to_string());
                    self.replay(before)?;
                    return Ok(false);
                }
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }

    /// Back to the start, then the first `keep` consumed tokens again.
    fn replay(&mut self, keep: usize) -> Result<(), CoreMatcherError> {
        self.matcher.reset();
        self.tokens.truncate(keep);
        for &t in &self.tokens {
            self.matcher.consume_token(TokenId(t))?;
        }
        Ok(())
    }

    /// How many of `ids` would be consumed, in order, without consuming any.
    pub(crate) fn validate(&mut self, ids: &[u32]) -> Result<usize, CoreMatcherError> {
        let mut n = 0;
        for &t in ids {
            if !self.matcher.is_token_allowed(TokenId(t))? {
                break;
            }
            self.matcher.consume_token(TokenId(t))?;
            n += 1;
        }
        self.matcher.rollback(n)?;
        Ok(n)
    }

    /// Undoes the last `n` consumed tokens.
    pub(crate) fn rollback(&mut self, n: usize) -> Result<(), CoreMatcherError> {
        self.matcher.rollback(n)?;
        self.tokens.truncate(self.tokens.len() - n);
        Ok(())
    }

    /// The rows of a draft: the mask before each of `drafts` and after the last, consuming each
    /// draft token in turn, then rolling all of them back. Rows after a refused draft token
    /// allow every token (that draft position is rejected by the verifier anyway, as in vLLM).
    pub(crate) fn fill_draft(
        &mut self,
        rows: &Rows,
        first: usize,
        drafts: &[u32],
    ) -> Result<(), CoreMatcherError> {
        let vocab_len = self.mask.universe_len();
        let mut consumed = 0;
        let mut result = Ok(());
        for i in 0..=drafts.len() {
            if let Err(e) = self.fill(rows, first + i) {
                result = Err(e);
                break;
            }
            let Some(&d) = drafts.get(i) else { break };
            if !self.mask.contains(TokenId(d)) {
                for r in first + i + 1..=first + drafts.len() {
                    rows.write_all(r, vocab_len);
                }
                break;
            }
            if let Err(e) = self.matcher.consume_token(TokenId(d)) {
                result = Err(e);
                break;
            }
            consumed += 1;
        }
        result?;
        self.matcher.rollback(consumed)
    }
}

/// A matcher: the position of one sequence in a grammar compiled for a tokenizer.
#[pyclass(name = "Matcher", module = "formwork", frozen)]
pub(crate) struct PyMatcher {
    compiled: Arc<CompiledGrammar>,
    state: Mutex<State>,
}

impl PyMatcher {
    /// The state, locked (poisoning cannot leave it half-updated: every update is a single
    /// engine call or a replay).
    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Bits per row.
    pub(crate) fn vocab_len(&self) -> usize {
        self.compiled.trie().vocab_len()
    }

    fn from_compiled(compiled: Arc<CompiledGrammar>) -> PyResult<Self> {
        let state = State::new(compiled.clone()).map_err(|e| matcher_error(&e))?;
        Ok(Self {
            compiled,
            state: Mutex::new(state),
        })
    }
}

#[pymethods]
impl PyMatcher {
    /// A matcher at the start of the output. The grammar is compiled for the tokenizer on first
    /// use (without the GIL) and cached by the tokenizer.
    #[new]
    fn new(py: Python<'_>, tokenizer: &PyTokenizer, grammar: &PyGrammar) -> PyResult<Self> {
        let compiled = tokenizer.compiled(py, grammar)?;
        Self::from_compiled(compiled)
    }

    /// Consumes the tokens in order. `False` (state unchanged, `last_refusal` says why) if any
    /// is refused: not allowed by the grammar, EOS before the output is accepted, an id
    /// outside the vocabulary, anything after EOS.
    fn consume_tokens(&self, py: Python<'_>, ids: Vec<u32>) -> PyResult<bool> {
        py.detach(|| self.lock().consume(&ids))
            .map_err(|e| matcher_error(&e))
    }

    /// Consumes one token (see `consume_tokens`).
    fn consume_token(&self, py: Python<'_>, id: u32) -> PyResult<bool> {
        self.consume_tokens(py, vec![id])
    }

    /// How many of `ids`, in order, would be consumed; the state does not move.
    fn validate_tokens(&self, py: Python<'_>, ids: Vec<u32>) -> PyResult<usize> {
        py.detach(|| self.lock().validate(&ids))
            .map_err(|e| matcher_error(&e))
    }

    /// Undoes the last `n` consumed tokens (an EOS included). `ValueError` if fewer were
    /// consumed.
    fn rollback(&self, py: Python<'_>, n: usize) -> PyResult<()> {
        py.detach(|| self.lock().rollback(n)).map_err(|e| match e {
            CoreMatcherError::RollbackTooFar { .. } => PyValueError::new_err(e.to_string()),
            e => matcher_error(&e),
        })
    }

    /// Back to the start of the output (clears a budget error).
    fn reset(&self) {
        let mut st = self.lock();
        st.matcher.reset();
        st.tokens.clear();
        st.refusal = None;
    }

    /// A new matcher at the same position (the consumed tokens replayed on the same compiled
    /// grammar, O(output)).
    fn fork(&self, py: Python<'_>) -> PyResult<Self> {
        let tokens = self.lock().tokens.clone();
        let copy = Self::from_compiled(self.compiled.clone())?;
        let ok = py
            .detach(|| copy.lock().consume(&tokens))
            .map_err(|e| matcher_error(&e))?;
        debug_assert!(ok, "a consumed prefix replays");
        Ok(copy)
    }

    /// Whether the output so far is complete (EOS would be allowed); true after EOS.
    fn is_accepting(&self) -> bool {
        self.lock().matcher.is_accepting()
    }

    /// Whether an EOS token has been consumed.
    fn is_terminated(&self) -> bool {
        self.lock().matcher.is_stopped()
    }

    /// The tokens the grammar forces next whatever is sampled, in the vocabulary's canonical
    /// tokenization (trailing tokens that a longer token could merge with are left out), for
    /// fast-forwarding. Not consumed.
    fn forced_tokens(&self, py: Python<'_>) -> PyResult<Vec<u32>> {
        py.detach(|| self.lock().matcher.compute_forced_tokens())
            .map(|ts| ts.into_iter().map(|t| t.0).collect())
            .map_err(|e| matcher_error(&e))
    }

    /// The bytes the grammar forces next.
    fn forced_bytes(&self, py: Python<'_>) -> PyResult<Vec<u8>> {
        py.detach(|| self.lock().matcher.compute_forced_bytes())
            .map_err(|e| matcher_error(&e))
    }

    /// Writes the mask of the next token into row `row` of `bitmask` (int32 words, token i =
    /// bit i % 32 of word i // 32, 1 = allowed): a writable numpy int32 array, bytearray,
    /// array.array('i') or CPU int32 torch tensor. Computed without the GIL.
    #[pyo3(signature = (bitmask, row=0))]
    fn fill_bitmask(&self, py: Python<'_>, bitmask: &Bound<'_, PyAny>, row: usize) -> PyResult<()> {
        let target = BitmaskTarget::of(bitmask, self.vocab_len())?;
        let rows = target.rows();
        rows.check(row)?;
        py.detach(|| self.lock().fill(&rows, row))
            .map_err(|e| matcher_error(&e))
    }

    /// `fill_bitmask` into raw memory: `size_bytes` bytes at address `ptr` (e.g. a tensor's
    /// `data_ptr()`), rows of `words_per_row` int32 words (default `ceil(vocab_size / 32)`).
    /// The memory must stay valid for the call.
    #[pyo3(signature = (ptr, size_bytes, row=0, words_per_row=None))]
    fn fill_bitmask_ptr(
        &self,
        py: Python<'_>,
        ptr: usize,
        size_bytes: usize,
        row: usize,
        words_per_row: Option<usize>,
    ) -> PyResult<()> {
        // SAFETY: the documented contract of this method: the caller's memory.
        let target =
            unsafe { BitmaskTarget::raw(ptr, size_bytes, words_per_row, self.vocab_len())? };
        let rows = target.rows();
        rows.check(row)?;
        py.detach(|| self.lock().fill(&rows, row))
            .map_err(|e| matcher_error(&e))
    }

    /// The ids allowed next, in increasing order (the mask as a list; for tests and debugging).
    fn allowed_tokens(&self, py: Python<'_>) -> PyResult<Vec<u32>> {
        py.detach(|| {
            let mut st = self.lock();
            st.compute().map(|m| m.iter().map(|t| t.0).collect())
        })
        .map_err(|e| matcher_error(&e))
    }

    /// The tokens consumed so far.
    #[getter]
    fn consumed_tokens(&self) -> Vec<u32> {
        self.lock().tokens.clone()
    }

    /// The output bytes consumed so far.
    #[getter]
    fn output(&self) -> Vec<u8> {
        self.lock().matcher.output().to_vec()
    }

    /// Why the last refused token was refused (`None` if none was).
    #[getter]
    fn last_refusal(&self) -> Option<String> {
        self.lock().refusal.clone()
    }

    /// Bits per bitmask row (the tokenizer's `vocab_size`).
    #[getter]
    fn vocab_size(&self) -> usize {
        self.vocab_len()
    }

    fn __repr__(&self) -> String {
        let st = self.lock();
        format!(
            "Matcher(consumed={}, terminated={})",
            st.tokens.len(),
            st.matcher.is_stopped()
        )
    }
}
