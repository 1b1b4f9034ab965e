//! The mask caches shared by every matcher of a compiled grammar, and the one eviction rule
//! they all follow ([`BoundedMap`]: a byte budget, emptied when full).
//!
//! Owns [`SharedMasks`] (in-lexeme entries, whole masks, canonical lexer states, row
//! signatures), [`MaskEntry`] and [`MaskResult`]. May use `lexer`, `parser` (row signatures)
//! and `toktrie` (token sets); builds nothing itself: entries are computed by `entries`, whole
//! masks by `core`.
//!
//! # Whole-mask cache
//! The boundary walk depends on the parser only through the future of the row the current
//! lexeme started after, and that future is identified exactly by the row's *signature*
//! ([`RowSigs`]: its items with origin rows replaced by their signatures, interned). So the
//! whole mask, and whether EOS is allowed, is cached per (lexeme set, canonical DFA state, at
//! lexeme start, row signature) as a [`MaskResult`]: the entry's in-lexeme bitset plus a list
//! of the tokens beyond it, or the whole bitset when that list would be long. A hit is one
//! bitset copy plus those inserts: JSON rows repeat per nesting path (the k-th member of an
//! object has the same signature for every k), so nearly all masks of a document hit entries
//! stored by earlier documents.
//!
//! # In-lexeme entries
//! The part of a mask that stays inside the current lexeme depends only on the lexer state, so
//! it is computed once per (lexeme set, DFA state, at lexeme start) ([`MaskEntry`]): the tokens
//! that stay inside the lexeme as a bitset, the trie nodes where the lexeme can end (grouped
//! by the lexemes that end there), and the first-byte boundary. Lazy-DFA state ids are private
//! to each matcher's cache, so shared entries are keyed by a canonical state obtained by
//! replaying the current lexeme in one shared cache per automaton (once per new state per
//! matcher); a state that has no canonical twin uses the matcher's own [`BoundedMap`].

use std::hash::Hash;
use std::sync::{Arc, Mutex, RwLock};

use regex_automata::hybrid::dfa::Cache;
use regex_automata::hybrid::LazyStateID;

use super::warm::WarmPool;
use super::Limits;
use crate::grammar::LexemeId;
use crate::lexer::LexemeSetId;
use crate::parser::{RowSig, RowSigs};
use crate::toktrie::{TokenId, TokenSet};
use crate::util::FxHashMap;

/// A map with a byte budget: inserting past the budget first empties it. Emptying (rather
/// than evicting one by one) keeps a hit a plain hash lookup; cached masks are rebuilt on
/// demand, and a grammar whose masks outgrow the budget was thrashing anyway.
#[derive(Debug)]
pub(super) struct BoundedMap<K, V> {
    map: FxHashMap<K, V>,
    bytes: usize,
    budget: usize,
}

impl<K: Hash + Eq, V> BoundedMap<K, V> {
    pub(super) fn new(budget: usize) -> Self {
        Self {
            map: FxHashMap::default(),
            bytes: 0,
            budget,
        }
    }

    pub(super) fn get(&self, key: &K) -> Option<&V> {
        self.map.get(key)
    }

    /// Stores `value`, accounted as `size` bytes.
    pub(super) fn insert(&mut self, key: K, value: V, size: usize) {
        if self.bytes + size > self.budget {
            self.map.clear();
            self.bytes = 0;
        }
        self.bytes += size;
        self.map.insert(key, value);
    }

    pub(super) fn len(&self) -> usize {
        self.map.len()
    }
}

/// Key of an in-lexeme entry: lexeme set, DFA state (canonical in the shared map, the
/// matcher's own in its local one), at lexeme start.
pub(super) type EntryKey = (LexemeSetId, LazyStateID, bool);

/// Key of a whole cached mask: an [`EntryKey`] with the canonical state, plus the signature of
/// the parser row the current lexeme started after.
pub(super) type ResultKey = (LexemeSetId, LazyStateID, bool, RowSig);

/// The caches shared by every matcher of a compiled grammar (see the module docs).
#[derive(Debug)]
pub(super) struct SharedMasks {
    /// One lazy-DFA cache per automaton (see [`LexDfa::automaton`](crate::lexer::LexDfa)),
    /// in which canonical states are replayed; sets sharing an automaton share its states.
    pub(super) canon: Mutex<FxHashMap<u32, Cache>>,
    pub(super) entries: RwLock<BoundedMap<EntryKey, Arc<MaskEntry>>>,
    /// Signatures of Earley rows, the parser half of a [`ResultKey`].
    pub(super) sigs: RowSigs,
    pub(super) results: RwLock<BoundedMap<ResultKey, Arc<MaskResult>>>,
    /// How many entries were built through a detour (a diagnostic).
    pub(super) detours: std::sync::atomic::AtomicUsize,
    /// Lexer caches left by dropped matchers, for the next ones.
    pub(super) warm: WarmPool,
}

impl SharedMasks {
    pub(super) fn new(limits: &Limits) -> Self {
        Self {
            canon: Mutex::default(),
            entries: RwLock::new(BoundedMap::new(limits.mask_cache_bytes)),
            // Keys are a few hundred bytes for JSON rows: a sixteenth of the mask budget holds
            // tens of thousands of distinct rows.
            sigs: RowSigs::new(limits.mask_cache_bytes / 16),
            results: RwLock::new(BoundedMap::new(limits.mask_cache_bytes)),
            detours: Default::default(),
            warm: WarmPool::default(),
        }
    }
}

/// A whole mask, cached per [`ResultKey`]: the lexer state fixes the in-lexeme part and the
/// boundary nodes ([`MaskEntry`]), the row signature fixes everything the parser decides after
/// a boundary (see [`RowSigs`]), so the mask and the EOS decision are functions of the key. A
/// hit is one bitset copy plus a few inserts, instead of re-walking the boundary subtrees and
/// the Earley rows behind them.
#[derive(Debug)]
pub(super) struct MaskResult {
    base: MaskBase,
    /// Tokens beyond `base` (sorted).
    extra: Vec<u32>,
    accepting: bool,
}

#[derive(Debug)]
enum MaskBase {
    /// The in-lexeme tokens of the entry the mask was computed from.
    Entry(Arc<MaskEntry>),
    /// The whole mask, when it has too many tokens beyond the in-lexeme ones to list them.
    Dense(TokenSet),
}

impl MaskResult {
    /// Splits `mask` (EOS not included) into `entry`'s in-lexeme tokens and the rest: listed
    /// when they are few (at most one per 256 ids: 4 bytes each, and as fast to set as the
    /// copy), else the mask is kept whole.
    pub(super) fn new(entry: Arc<MaskEntry>, mask: &TokenSet, accepting: bool) -> Self {
        let limit = mask.universe_len() / 256;
        let mut extra = Vec::new();
        for (i, (&m, &e)) in mask
            .as_words()
            .iter()
            .zip(entry.inner.as_words())
            .enumerate()
        {
            let mut w = m & !e;
            while w != 0 {
                extra.push(i as u32 * 64 + w.trailing_zeros());
                w &= w - 1;
            }
            if extra.len() > limit {
                return Self {
                    base: MaskBase::Dense(mask.clone()),
                    extra: Vec::new(),
                    accepting,
                };
            }
        }
        Self {
            base: MaskBase::Entry(entry),
            extra,
            accepting,
        }
    }

    pub(super) fn bytes(&self) -> usize {
        let base = match &self.base {
            MaskBase::Entry(_) => 0,
            MaskBase::Dense(s) => s.as_words().len() * 8,
        };
        64 + base + self.extra.len() * 4
    }

    /// Fills `mask` (previous contents discarded) with the cached mask, EOS included.
    pub(super) fn apply(&self, mask: &mut TokenSet, eos: &[TokenId]) {
        match &self.base {
            MaskBase::Entry(e) => mask.copy_from(&e.inner),
            MaskBase::Dense(s) => mask.copy_from(s),
        }
        for &t in &self.extra {
            mask.insert_raw(t);
        }
        if self.accepting {
            for &t in eos {
                mask.insert(t);
            }
        }
    }
}

/// What the trie walk finds from one lexer state without leaving the current lexeme: the
/// tokens that stay inside it, and the trie nodes where it can end and the next lexeme must
/// start, grouped by the lexemes that end there. Depends on the lexer state only, so it is
/// cached per (lexeme set, DFA state, at lexeme start); the parser-dependent part (what may
/// follow each boundary) is walked afresh on every mask.
///
/// Boundaries at the very first byte (the current text is a complete lexeme and the byte does
/// not extend it) are kept apart in `first`: all first bytes that do not extend the lexeme lead
/// to the same place, the start of the next lexeme, whose own (cached) entry gives the tokens;
/// only the tokens under `first`'s live root children (bytes that extend the current lexeme)
/// are removed from it. This keeps masks after `{`, `,`, `:` or a number cached instead of
/// walking the whole trie.
#[derive(Debug)]
pub(super) struct MaskEntry {
    pub(super) inner: TokenSet,
    pub(super) groups: Vec<(Vec<LexemeId>, Vec<u32>)>,
    pub(super) first: Option<(Vec<LexemeId>, Vec<u32>)>,
}

impl MaskEntry {
    pub(super) fn bytes(&self) -> usize {
        self.inner.as_words().len() * 8
            + self
                .groups
                .iter()
                .map(|(m, c)| 48 + m.len() * 4 + c.len() * 4)
                .sum::<usize>()
    }
}
