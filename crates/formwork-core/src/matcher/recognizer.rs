//! The byte-level recognizer ([`Core`]): lexer frames over an Earley chart, one frame per
//! consumed byte, and the mask computation on top of it (the whole-mask cache, then the
//! in-lexeme entry plus the boundary walks).
//!
//! Owns pushing and popping bytes (one DFA transition inside a lexeme, one Earley row at a
//! lexeme boundary), closing lexemes, acceptance, and the work budget of one call. May use
//! `lexer`, `parser`, `toktrie`, and this module's `explore`, `warm` and `masks`; mask entries
//! are built by `entries` (a second `impl Core`).

use std::sync::Arc;
use std::time::Instant;

use regex_automata::hybrid::dfa::Cache;
use regex_automata::hybrid::LazyStateID;

use super::explore::{step, Slot};
use super::masks::{BoundedMap, EntryKey, MaskEntry, MaskResult};
use super::warm::WarmLexer;
use super::{CompiledGrammar, MatcherError};
use crate::grammar::LexemeId;
use crate::lexer::LexemeSetId;
use crate::parser::Chart;
use crate::toktrie::{Recognizer, TokenSet};
use crate::util::FxHashMap;

/// Lexeme set id meaning "no lexeme may follow" (the parser row expects nothing).
pub(super) const NO_SET: LexemeSetId = LexemeSetId::MAX;

/// The lexer and parser state after one consumed byte.
#[derive(Clone, Copy, Debug)]
pub(super) struct Frame {
    pub(super) set: LexemeSetId,
    pub(super) state: LazyStateID,
    /// Bytes of the current lexeme (0 only in the initial frame).
    pub(super) lex_len: u32,
    /// Parser rows in the chart for this frame.
    pub(super) rows: u32,
}

/// The slot of `set` and the matcher's cache of its automaton (a function of the two fields,
/// so the rest of the matcher stays free to borrow).
pub(super) fn slot_mut<'a>(
    slots: &'a mut [Option<Slot>],
    caches: &'a mut [Option<Cache>],
    set: LexemeSetId,
) -> Option<(&'a mut Slot, &'a mut Cache)> {
    let slot = slots.get_mut(set as usize)?.as_mut()?;
    let cache = caches[slot.auto].as_mut()?;
    Some((slot, cache))
}

/// The byte-level recognizer: lexer frames over an Earley chart. Implements [`Recognizer`]
/// for the trie walk.
#[derive(Debug)]
pub(super) struct Core {
    pub(super) cg: Arc<CompiledGrammar>,
    pub(super) chart: Chart,
    /// Lexeme set allowed after each parser row.
    pub(super) row_sets: Vec<LexemeSetId>,
    pub(super) slots: Vec<Option<Slot>>,
    /// This matcher's lazy-DFA caches by automaton number
    /// ([`LexDfa::automaton`](crate::lexer::LexDfa::automaton)), for the automata its slots
    /// use.
    pub(super) caches: Vec<Option<Cache>>,
    pub(super) local_ids: FxHashMap<Vec<LexemeId>, LexemeSetId>,
    pub(super) stack: Vec<Frame>,
    /// The byte consumed by each frame after the first.
    pub(super) bytes: Vec<u8>,
    pub(super) scratch: Vec<LexemeId>,
    pub(super) fuel: u64,
    pub(super) ops: u64,
    pub(super) deadline: Option<Instant>,
    /// In-lexeme entries of states without a canonical twin (see `masks`).
    pub(super) local_entries: BoundedMap<EntryKey, Arc<MaskEntry>>,
    /// (Automaton, local lazy state) → canonical state in the shared cache (see
    /// [`SharedMasks`]).
    pub(super) canon_memo: FxHashMap<(u32, LazyStateID), LazyStateID>,
    /// Scratch mask for the tokens after a first-byte boundary.
    pub(super) next_mask: Option<TokenSet>,
    /// Set while a [`Detour`]'s target entry is being built (detours do not nest).
    pub(super) in_detour: bool,
    /// Per automaton: how many of its key sets built their own entry at a key's start (see
    /// `entries::key_set_own_walks`).
    pub(super) key_set_walks: FxHashMap<usize, u32>,
}

impl Drop for Core {
    fn drop(&mut self) {
        if self.cg.limits.mask_cache_bytes == 0 {
            // Caches off: every matcher starts cold too (the tests' plain walks).
            return;
        }
        self.cg.shared.warm.offer(WarmLexer {
            slots: std::mem::take(&mut self.slots),
            caches: std::mem::take(&mut self.caches),
            local_ids: std::mem::take(&mut self.local_ids),
            canon_memo: std::mem::take(&mut self.canon_memo),
            key_set_walks: std::mem::take(&mut self.key_set_walks),
        });
    }
}

impl Core {
    pub(super) fn new(cg: Arc<CompiledGrammar>) -> Result<Self, MatcherError> {
        let chart = Chart::new(&cg.parser, cg.limits.max_items_per_row)?;
        let budget = cg.limits.mask_cache_bytes;
        let warm = cg.shared.warm.take();
        let mut core = Self {
            cg,
            chart,
            row_sets: Vec::new(),
            slots: warm.slots,
            caches: warm.caches,
            local_ids: warm.local_ids,
            stack: Vec::new(),
            bytes: Vec::new(),
            scratch: Vec::new(),
            fuel: u64::MAX,
            ops: 0,
            deadline: None,
            local_entries: BoundedMap::new(budget),
            canon_memo: warm.canon_memo,
            next_mask: None,
            in_detour: false,
            key_set_walks: warm.key_set_walks,
        };
        let set = core.set_of_last_row()?;
        core.row_sets.push(set);
        let state = core.start_state(set)?;
        core.stack.push(Frame {
            set,
            state,
            lex_len: 0,
            rows: 1,
        });
        Ok(core)
    }

    pub(super) fn start_step(&mut self) {
        self.fuel = self.cg.limits.step_fuel;
        self.deadline = self.cg.limits.step_time.map(|t| Instant::now() + t);
    }

    #[inline]
    pub(super) fn tick(&mut self, n: u64) -> Result<(), MatcherError> {
        if self.fuel <= n {
            return Err(MatcherError::LimitExceeded {
                what: "step fuel",
                limit: self.cg.limits.step_fuel as usize,
                given: self.cg.limits.step_fuel as usize + 1,
            });
        }
        self.fuel -= n;
        self.ops += n;
        if self.ops >= 1 << 16 {
            self.ops = 0;
            if let (Some(d), Some(limit)) = (self.deadline, self.cg.limits.step_time) {
                if Instant::now() > d {
                    return Err(MatcherError::TimeExceeded { limit });
                }
            }
        }
        Ok(())
    }

    /// The interned lexeme set allowed after the chart's last row.
    pub(super) fn set_of_last_row(&mut self) -> Result<LexemeSetId, MatcherError> {
        self.scratch.clear();
        self.chart
            .allowed_lexemes(&self.cg.parser, &mut self.scratch);
        if self.scratch.is_empty() {
            return Ok(NO_SET);
        }
        if let Some(&id) = self.local_ids.get(self.scratch.as_slice()) {
            return Ok(id);
        }
        let set = std::mem::take(&mut self.scratch);
        let id = self.intern_set(&set);
        self.scratch = set;
        id
    }

    /// The id of the sorted, non-empty lexeme set `set`, interning it (in the compiled
    /// grammar) and giving it a slot (in this matcher) if needed.
    pub(super) fn intern_set(&mut self, set: &[LexemeId]) -> Result<LexemeSetId, MatcherError> {
        if let Some(&id) = self.local_ids.get(set) {
            return Ok(id);
        }
        let (id, dfa) = self.cg.sets.intern(set)?;
        if self.slots.len() <= id as usize {
            self.slots.resize_with(id as usize + 1, || None);
        }
        if self.slots[id as usize].is_none() {
            let auto = dfa.automaton() as usize;
            if self.caches.len() <= auto {
                self.caches.resize_with(auto + 1, || None);
            }
            let cache = self.caches[auto].get_or_insert_with(|| dfa.create_cache());
            let start = dfa.start(cache)?;
            self.slots[id as usize] = Some(Slot {
                dfa,
                auto,
                start,
                live: FxHashMap::default(),
                class_steps: FxHashMap::default(),
                chain_class: FxHashMap::default(),
                detours: FxHashMap::default(),
                equiv: FxHashMap::default(),
                scratch: Vec::new(),
            });
        }
        self.local_ids.insert(set.to_vec(), id);
        Ok(id)
    }

    pub(super) fn start_state(&self, set: LexemeSetId) -> Result<LazyStateID, MatcherError> {
        Ok(match self.slots.get(set as usize) {
            Some(Some(slot)) => slot.start,
            // NO_SET: any state will do, it is never stepped.
            _ => LazyStateID::default(),
        })
    }

    pub(super) fn top(&self) -> Frame {
        *self
            .stack
            .last()
            .expect("the initial frame is never popped")
    }

    /// Scans the lexemes that end at the top frame into a new parser row. Returns false (and
    /// changes nothing) if no allowed lexeme ends here.
    pub(super) fn close_lexeme(&mut self) -> Result<bool, MatcherError> {
        let top = self.top();
        if top.lex_len == 0 || top.set == NO_SET {
            return Ok(false);
        }
        self.scratch.clear();
        let Some((slot, cache)) = slot_mut(&mut self.slots, &mut self.caches, top.set) else {
            return Ok(false);
        };
        slot.dfa.matches(cache, top.state, &mut self.scratch)?;
        if self.scratch.is_empty() {
            return Ok(false);
        }
        let before = self.chart.items_len();
        if !self.chart.scan(&self.cg.parser, &self.scratch)? {
            return Ok(false);
        }
        self.tick((self.chart.items_len() - before) as u64)?;
        Ok(true)
    }

    pub(super) fn pop_row(&mut self) {
        let rows = self.chart.rows_len() - 1;
        self.chart.truncate(rows);
        self.row_sets.truncate(rows);
    }

    /// Whether the bytes so far form a sentence of the grammar.
    pub(super) fn is_accepting(&mut self) -> Result<bool, MatcherError> {
        let top = self.top();
        if top.lex_len == 0 {
            return Ok(self.chart.is_accepting(&self.cg.parser));
        }
        if !self.close_lexeme()? {
            return Ok(false);
        }
        let acc = self.chart.is_accepting(&self.cg.parser);
        let rows = self.chart.rows_len() - 1;
        self.chart.truncate(rows);
        Ok(acc)
    }

    pub(super) fn push_byte(&mut self, byte: u8) -> Result<bool, MatcherError> {
        self.tick(1)?;
        let top = self.top();
        if top.set == NO_SET {
            return Ok(false);
        }
        let Some((slot, cache)) = slot_mut(&mut self.slots, &mut self.caches, top.set) else {
            return Ok(false);
        };
        if let Some(next) = step(&slot.dfa, cache, &mut slot.live, top.state, byte)? {
            self.stack.push(Frame {
                lex_len: top.lex_len + 1,
                state: next,
                ..top
            });
            self.bytes.push(byte);
            return Ok(true);
        }
        // The byte cannot extend the current lexeme: close it and start the next one.
        if !self.close_lexeme()? {
            return Ok(false);
        }
        let set = match self.set_of_last_row() {
            Ok(s) => s,
            Err(e) => {
                self.pop_row();
                return Err(e);
            }
        };
        self.row_sets.push(set);
        let Some((slot, cache)) = slot_mut(&mut self.slots, &mut self.caches, set) else {
            self.pop_row();
            return Ok(false);
        };
        let next = match step(&slot.dfa, cache, &mut slot.live, slot.start, byte) {
            Ok(Some(s)) => s,
            Ok(None) => {
                self.pop_row();
                return Ok(false);
            }
            Err(e) => {
                self.pop_row();
                return Err(e.into());
            }
        };
        self.stack.push(Frame {
            set,
            state: next,
            lex_len: 1,
            rows: self.chart.rows_len() as u32,
        });
        self.bytes.push(byte);
        Ok(true)
    }

    /// Fills `mask` (EOS included) from the whole-mask cache ([`MaskResult`]), computing and
    /// storing the entry on a miss. Returns false, with `mask` untouched, where the cache does
    /// not apply (no lexeme may follow, no canonical state, the signature table is full).
    pub(super) fn compute_cached(&mut self, mask: &mut TokenSet) -> Result<bool, MatcherError> {
        let top = self.top();
        if top.set == NO_SET {
            return Ok(false);
        }
        let Some(canon) = self.canonical(top) else {
            return Ok(false);
        };
        let cg = self.cg.clone();
        let Some(sig) = self.chart.last_row_signature(&cg.shared.sigs) else {
            return Ok(false);
        };
        let key = (top.set, canon, top.lex_len == 0, sig);
        let hit = {
            let results = cg.shared.results.read().unwrap_or_else(|e| e.into_inner());
            results.get(&key).cloned()
        };
        if let Some(res) = hit {
            res.apply(mask, cg.env.trie().eos_tokens());
            return Ok(true);
        }
        let entry = self.shared_entry(top, canon)?;
        self.add_allowed(mask, true)?;
        let accepting = self.is_accepting()?;
        let res = Arc::new(MaskResult::new(entry, mask, accepting));
        if accepting {
            for &t in cg.env.trie().eos_tokens() {
                mask.insert(t);
            }
        }
        let size = res.bytes();
        let mut results = cg.shared.results.write().unwrap_or_else(|e| e.into_inner());
        results.insert(key, res, size);
        Ok(true)
    }

    /// Adds the allowed tokens (not EOS) to `mask`, using the in-lexeme mask cache. With
    /// `fresh`, `mask`'s previous contents are discarded: the cached in-lexeme part is copied
    /// over them instead of clearing first and uniting (one pass over the bitset instead of
    /// two; at 262k tokens each pass is 32 KiB, a large share of a cached mask's cost).
    pub(super) fn add_allowed(
        &mut self,
        mask: &mut TokenSet,
        fresh: bool,
    ) -> Result<(), MatcherError> {
        let cg = self.cg.clone();
        if cg.limits.mask_cache_bytes == 0 {
            if fresh {
                mask.clear();
            }
            cg.env.trie().add_allowed(self, mask)?;
            return Ok(());
        }
        let top = self.top();
        if top.set == NO_SET {
            if fresh {
                mask.clear();
            }
            return Ok(());
        }
        let entry = match self.canonical(top) {
            Some(canon) => self.shared_entry(top, canon),
            None => self.local_entry(top),
        };
        let entry = match entry {
            Ok(e) => e,
            Err(e) => {
                if fresh {
                    mask.clear();
                }
                return Err(e);
            }
        };
        if fresh {
            mask.copy_from(&entry.inner);
        } else {
            mask.union_with(&entry.inner);
        }
        for (matched, children) in &entry.groups {
            let saved = self.save();
            let r = self.expand_group(cg.env.trie(), matched, children, mask);
            self.restore(saved);
            r?;
        }
        if let Some((matched, live_first)) = &entry.first {
            let mut next = self
                .next_mask
                .take()
                .unwrap_or_else(|| TokenSet::new(cg.env.trie().vocab_len()));
            let saved = self.save();
            let r = self.next_lexeme_mask(matched, &mut next);
            self.restore(saved);
            if r.is_ok() {
                for &n in live_first {
                    cg.env.trie().remove_subtree_tokens(n as usize, &mut next);
                }
                mask.union_with(&next);
            }
            self.next_mask = Some(next);
            r?;
        }
        Ok(())
    }

    /// Fills `mask` (previous contents discarded) with the tokens allowed from the start of the
    /// lexeme after closing the current one as `matched` (a cached mask: the new frame is at a
    /// lexeme start, so it has no `first`). The caller restores the stacks.
    pub(super) fn next_lexeme_mask(
        &mut self,
        matched: &[LexemeId],
        mask: &mut TokenSet,
    ) -> Result<(), MatcherError> {
        if !self.start_next_lexeme(matched)? {
            mask.clear();
            return Ok(());
        }
        self.add_allowed(mask, true)
    }

    /// Closes the current lexeme as `matched` and pushes a frame at the start of the next one
    /// (with a placeholder byte). Returns false if the parser expects none of `matched` or
    /// nothing may follow. The caller restores the stacks ([`save`](Self::save)).
    pub(super) fn start_next_lexeme(&mut self, matched: &[LexemeId]) -> Result<bool, MatcherError> {
        let cg = self.cg.clone();
        let before = self.chart.items_len();
        if !self.chart.scan(&cg.parser, matched)? {
            return Ok(false);
        }
        self.tick((self.chart.items_len() - before) as u64)?;
        let set = self.set_of_last_row()?;
        self.row_sets.push(set);
        if set == NO_SET {
            return Ok(false);
        }
        let state = self.start_state(set)?;
        self.stack.push(Frame {
            set,
            state,
            lex_len: 0,
            rows: self.chart.rows_len() as u32,
        });
        self.bytes.push(0);
        Ok(true)
    }

    /// The stack and chart sizes, to undo a speculative lexeme boundary with
    /// [`restore`](Self::restore).
    pub(super) fn save(&self) -> (usize, usize) {
        (self.stack.len(), self.chart.rows_len())
    }

    pub(super) fn restore(&mut self, (stack_len, rows): (usize, usize)) {
        self.stack.truncate(stack_len);
        self.bytes.truncate(stack_len - 1);
        self.chart.truncate(rows);
        self.row_sets.truncate(rows);
    }

    pub(super) fn pop(&mut self, n: usize) {
        if n == 0 {
            return;
        }
        let keep = self.stack.len() - n;
        self.stack.truncate(keep);
        self.bytes.truncate(keep - 1);
        let rows = self.top().rows as usize;
        self.chart.truncate(rows);
        self.row_sets.truncate(rows);
    }
}

impl Recognizer for Core {
    type Error = MatcherError;

    #[inline]
    fn try_push_byte(&mut self, byte: u8) -> Result<bool, MatcherError> {
        self.push_byte(byte)
    }

    #[inline]
    fn pop_bytes(&mut self, n: usize) {
        self.pop(n)
    }
}
