//! The lexers dropped matchers leave to their grammar ([`WarmPool`]), so the next matcher
//! starts with its lazy-DFA states already determinized.
//!
//! Owns [`WarmLexer`] (what is kept), the pool and its bounds ([`MAX_WARM`] lexers,
//! [`WARM_BYTES`] of caches). Holds the matcher's data but builds none of it: the recognizer
//! (`recognizer`) hands its lexer half over when it is dropped and takes one when it starts.
//! Costs: one lock per matcher created and per matcher dropped.

use std::sync::Mutex;

use regex_automata::hybrid::dfa::Cache;
use regex_automata::hybrid::LazyStateID;

use super::explore::Slot;
use crate::grammar::LexemeId;
use crate::lexer::LexemeSetId;
use crate::util::FxHashMap;

/// The lexer half of a dropped matcher, kept by its grammar for the next one
/// ([`SharedMasks::warm`](super::masks::SharedMasks)): the lazy-DFA caches and everything
/// keyed by their state ids (the slots with their memos, canonical twins). A matcher starting
/// from them finds determinized the states earlier matchers of the grammar met (a lazy DFA
/// determinizes each state once per cache), instead of determinizing them again; nothing in it
/// depends on what the earlier matcher parsed. Its local entries are not kept (they are rare,
/// and up to `mask_cache_bytes` each), and the grammar keeps at most [`MAX_WARM`] lexers whose
/// caches hold at most [`WARM_BYTES`] together; none with `mask_cache_bytes` 0 (caches off).
/// The default is a cold lexer (nothing determinized yet).
#[derive(Debug, Default)]
pub(super) struct WarmLexer {
    pub(super) slots: Vec<Option<Slot>>,
    pub(super) caches: Vec<Option<Cache>>,
    pub(super) local_ids: FxHashMap<Vec<LexemeId>, LexemeSetId>,
    pub(super) canon_memo: FxHashMap<(u32, LazyStateID), LazyStateID>,
    pub(super) key_set_walks: FxHashMap<usize, u32>,
}

/// Most [`WarmLexer`]s a grammar keeps (one per matcher alive at once, up to this).
const MAX_WARM: usize = 4;

/// Most lazy-DFA cache bytes the [`WarmLexer`]s of one grammar hold together.
const WARM_BYTES: usize = 16 << 20;

/// The [`WarmLexer`]s of one grammar, each with its caches' memory
/// ([`Cache::memory_usage`]).
#[derive(Debug, Default)]
pub(super) struct WarmPool(Mutex<Vec<(WarmLexer, usize)>>);

impl WarmPool {
    /// The most recently kept lexer, or a cold one.
    pub(super) fn take(&self) -> WarmLexer {
        let mut pool = self.0.lock().unwrap_or_else(|e| e.into_inner());
        pool.pop().map(|(w, _)| w).unwrap_or_default()
    }

    /// Keeps `lexer` if the pool has room for it (fewer than [`MAX_WARM`], at most
    /// [`WARM_BYTES`] together); otherwise it is dropped.
    pub(super) fn offer(&self, lexer: WarmLexer) {
        let bytes = lexer.caches.iter().flatten().map(Cache::memory_usage).sum();
        let mut pool = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let held: usize = pool.iter().map(|(_, b)| b).sum();
        if pool.len() < MAX_WARM && held + bytes <= WARM_BYTES {
            pool.push((lexer, bytes));
        }
    }

    /// How many lexers are kept.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}
