//! Building in-lexeme mask entries ([`MaskEntry`]): the trie walk that stays inside the current
//! lexeme ([`LexemeWalk`]: DFA steps only, recording the nodes where the lexeme can end), the
//! lookups in the shared and local entry caches, and the two shortcuts for free-text lexemes.
//!
//! # Vocabulary slices
//! The costly cold masks are the first ones inside a free-text lexeme (a JSON string): the
//! entry walk visits the whole trie. When the lexer state loops on at least
//! `explore::MIN_SLICE_ASCII` ASCII bytes (and, checked by exploration, on every well-formed UTF-8
//! character), the entry is built from a [`TokenSlice`] instead: the tokens made only of such
//! characters are added as one bitset, and only the frontier subtrees (tokens reaching a quote,
//! a backslash, a control byte…) are walked with the DFA. The slice costs one pass over the
//! trie without DFA steps and is shared by every state with the same class.
//!
//! # Detours
//! A state that behaves like another except on a few first bytes (see `explore::Detour`)
//! reuses that state's entry and walks only the subtrees of the differing bytes.
//!
//! # Key sets
//! Right after a key's opening quote, an object's key set (the names not yet written, plus
//! any other name: [`KeySet`](crate::lexer::KeySet)) allows nearly every token, and each
//! position of the object has its own set. Their entries there are derived from one entry of
//! the automaton's full set (every name allowed), built once: the tokens that complete a name
//! the set does not allow are removed (a few trie lookups per name), instead of a walk of
//! most of the vocabulary per position.
//!
//! May use `lexer`, `parser`, `toktrie` and this module's `recognizer`, `masks`, `explore`.

use std::sync::Arc;

use regex_automata::hybrid::dfa::Cache;
use regex_automata::hybrid::LazyStateID;

use super::explore::{class_step, detour_of, equivalent, read_class, step, Chain, ClassStep, Slot};
use super::masks::MaskEntry;
use super::recognizer::{slot_mut, Core, Frame, NO_SET};
use super::MatcherError;
use crate::grammar::LexemeId;
use crate::lexer::{LexDfa, LexerError};
use crate::toktrie::{Recognizer, TokTrie, TokenSet, TokenSlice};
use crate::util::FxHashMap;

/// The recognizer for a walk inside one lexeme: DFA steps only, recording boundary nodes.
pub(super) struct LexemeWalk<'a> {
    pub(super) dfa: &'a LexDfa,
    pub(super) cache: &'a mut Cache,
    pub(super) live: &'a mut FxHashMap<LazyStateID, bool>,
    pub(super) states: Vec<LazyStateID>,
    pub(super) at_start: bool,
    pub(super) groups: Vec<(Vec<LexemeId>, Vec<u32>)>,
    /// Per DFA state: the index of its group, or `usize::MAX` if no lexeme ends there.
    pub(super) memo: FxHashMap<LazyStateID, usize>,
    pub(super) scratch: Vec<LexemeId>,
    /// Lexemes ending at the top state if some first byte closes it (depth-1 boundaries).
    pub(super) first: Option<Vec<LexemeId>>,
    /// Root children whose byte extends the current lexeme.
    pub(super) live_first: Vec<u32>,
    /// Whether `states[0]` sits at the trie root (false while walking a slice's frontier
    /// subtree under a deeper node: no first-byte boundary there).
    pub(super) root: bool,
}

impl<'a> LexemeWalk<'a> {
    /// A walk from `state` at the trie root, in `slot`'s DFA and cache.
    fn new(slot: &'a mut Slot, cache: &'a mut Cache, state: LazyStateID, at_start: bool) -> Self {
        Self {
            dfa: &slot.dfa,
            cache,
            live: &mut slot.live,
            states: vec![state],
            at_start,
            groups: Vec::new(),
            memo: FxHashMap::default(),
            scratch: Vec::new(),
            first: None,
            live_first: Vec::new(),
            root: true,
        }
    }
}

impl Recognizer for LexemeWalk<'_> {
    type Error = LexerError;

    fn try_push_byte(&mut self, byte: u8) -> Result<bool, LexerError> {
        let s = *self.states.last().expect("walk starts with a state");
        match step(self.dfa, self.cache, self.live, s, byte)? {
            Some(n) => {
                self.states.push(n);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    #[inline]
    fn try_push_node(&mut self, byte: u8, node: usize) -> Result<bool, LexerError> {
        let s = *self.states.last().expect("walk starts with a state");
        if let Some(n) = step(self.dfa, self.cache, self.live, s, byte)? {
            if self.states.len() == 1 && self.root {
                self.live_first.push(node as u32);
            }
            self.states.push(n);
            return Ok(true);
        }
        if self.states.len() == 1 && self.root {
            if self.at_start {
                return Ok(false);
            }
            if self.first.is_none() {
                self.scratch.clear();
                self.dfa.matches(self.cache, s, &mut self.scratch)?;
                self.scratch.sort_unstable();
                self.first = Some(self.scratch.clone());
            }
            return Ok(false);
        }
        let g = match self.memo.get(&s) {
            Some(&g) => g,
            None => {
                self.scratch.clear();
                self.dfa.matches(self.cache, s, &mut self.scratch)?;
                self.scratch.sort_unstable();
                let g = if self.scratch.is_empty() {
                    usize::MAX
                } else if let Some(i) = self.groups.iter().position(|(m, _)| *m == self.scratch) {
                    i
                } else {
                    self.groups.push((self.scratch.clone(), Vec::new()));
                    self.groups.len() - 1
                };
                self.memo.insert(s, g);
                g
            }
        };
        if g != usize::MAX {
            self.groups[g].1.push(node as u32);
        }
        Ok(false)
    }

    fn pop_bytes(&mut self, n: usize) {
        let keep = self.states.len() - n;
        self.states.truncate(keep);
    }
}

/// Most trie nodes [`detour_splits`] descends through before it walks the rest of a subtree.
const MAX_DETOUR_DESCENT: usize = 4096;

/// Where a state and its [`Detour`](super::explore::Detour)'s target part ways in the trie,
/// below the detour's `except` bytes: the nodes whose subtrees must be walked from the state
/// (each with the state at its parent), and the number of nodes descended through.
///
/// The detour says that after any first byte not in `except` both states accept the same
/// continuations. Under an `except` byte they may still meet again: a key prefix (`"book`)
/// differs from the free-text loop only while the text spells a listed name, so below it
/// most children lead both states to one state. The descent follows the trie from the
/// `except` bytes, stepping both states: where they reach the same state (or, inside a
/// multi-byte character, states proven [`equivalent`]), or both reject with the same
/// lexemes ending, the subtree is the target's, token for token and boundary for boundary;
/// where both stay live in different states it goes one level deeper; anywhere else (one
/// side rejects, or the budget of [`MAX_DETOUR_DESCENT`] nodes is spent) the subtree is a
/// split, walked afresh. So a key set's entry costs the nodes along its names' paths, not
/// the subtrees of their first letters.
fn detour_splits(
    slot: &mut Slot,
    cache: &mut Cache,
    trie: &TokTrie,
    d: &super::explore::Detour,
    state: LazyStateID,
) -> Result<(Vec<(usize, LazyStateID)>, usize), LexerError> {
    let mut descent = Descent::default();
    for &b in &d.except {
        if let Some(n) = trie.child(0, b) {
            descent.compare(slot, cache, trie, n, state, d.target)?;
        }
    }
    while let Some((node, s, t)) = descent.stack.pop() {
        for n in trie.children(node) {
            descent.compare(slot, cache, trie, n, s, t)?;
        }
    }
    Ok((descent.splits, descent.descended))
}

/// The work list of [`detour_splits`].
#[derive(Default)]
struct Descent {
    /// Nodes to walk afresh, with the state at their parent.
    splits: Vec<(usize, LazyStateID)>,
    /// Nodes whose children are still to compare, with both sides' states there.
    stack: Vec<(usize, LazyStateID, LazyStateID)>,
    descended: usize,
    mine: Vec<LexemeId>,
    theirs: Vec<LexemeId>,
}

impl Descent {
    /// Compares node `n`, whose parent the state reaches in `s` and the target in `t`.
    fn compare(
        &mut self,
        slot: &mut Slot,
        cache: &mut Cache,
        trie: &TokTrie,
        n: usize,
        s: LazyStateID,
        t: LazyStateID,
    ) -> Result<(), LexerError> {
        let b = trie.node_byte(n);
        let next_s = step(&slot.dfa, cache, &mut slot.live, s, b)?;
        let next_t = step(&slot.dfa, cache, &mut slot.live, t, b)?;
        let same = match (next_s, next_t) {
            (Some(x), Some(y)) if x == y => true,
            (Some(x), Some(y)) if b >= 0x80 && equivalent(slot, cache, x, y)? => true,
            (Some(x), Some(y)) if self.descended < MAX_DETOUR_DESCENT => {
                self.descended += 1;
                self.stack.push((n, x, y));
                true
            }
            // Both reject the byte: the same boundary (or none) when the same lexemes end.
            (None, None) => {
                self.mine.clear();
                self.theirs.clear();
                slot.dfa.matches(cache, s, &mut self.mine)?;
                slot.dfa.matches(cache, t, &mut self.theirs)?;
                self.mine.sort_unstable();
                self.theirs.sort_unstable();
                self.mine == self.theirs
            }
            _ => false,
        };
        if !same {
            self.splits.push((n, s));
        }
        Ok(())
    }
}

/// How many key sets of one automaton build their own entry at a key's start (per matcher)
/// before the full set's entry is built and the others derived from it
/// ([`Core::key_set_entry`]). Both kinds of entry are built through a detour (the generic
/// string state's entry, with the trie paths of the names descended: [`detour_splits`]), the
/// full set's over every name of the object; deriving costs a copy of the full set's entry
/// and a lookup per forbidden name. (Before the full set's entry had a detour it was a walk of
/// nearly the whole vocabulary, about 10 ms on 262k tokens, which is why the first positions
/// of an object build their own.)
fn key_set_own_walks() -> u32 {
    if cfg!(test) {
        // Unit tests derive every key set's entry, so that small grammars exercise it.
        0
    } else {
        4
    }
}

impl Core {
    /// The canonical state of the top frame (see [`SharedMasks`]), or `None` if the shared
    /// cache cannot hold it (then the matcher-local cache is used).
    pub(super) fn canonical(&mut self, top: Frame) -> Option<LazyStateID> {
        let Some(Some(slot)) = self.slots.get(top.set as usize) else {
            return None;
        };
        // States are the automaton's: sets sharing one (an object's key sets) share its
        // canonical cache and these memos, so a state is replayed once, not once per set.
        let auto = slot.dfa.automaton();
        if let Some(&c) = self.canon_memo.get(&(auto, top.state)) {
            return Some(c);
        }
        let lexeme = &self.bytes[self.bytes.len() - top.lex_len as usize..];
        let mut canon = self
            .cg
            .shared
            .canon
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let cache = canon.entry(auto).or_insert_with(|| slot.dfa.create_cache());
        let mut s = slot.dfa.start(cache).ok()?;
        for &b in lexeme {
            s = slot.dfa.next(cache, s, b).ok()?;
        }
        drop(canon);
        self.canon_memo.insert((auto, top.state), s);
        Some(s)
    }

    pub(super) fn shared_entry(
        &mut self,
        top: Frame,
        canon: LazyStateID,
    ) -> Result<Arc<MaskEntry>, MatcherError> {
        let key = (top.set, canon, top.lex_len == 0);
        let cg = self.cg.clone();
        {
            let shared = cg.shared.entries.read().unwrap_or_else(|e| e.into_inner());
            if let Some(e) = shared.get(&key) {
                return Ok(e.clone());
            }
        }
        let e = Arc::new(self.build_entry(top)?);
        let size = e.bytes();
        let mut shared = cg.shared.entries.write().unwrap_or_else(|e| e.into_inner());
        shared.insert(key, e.clone(), size);
        Ok(e)
    }

    pub(super) fn local_entry(&mut self, top: Frame) -> Result<Arc<MaskEntry>, MatcherError> {
        let key = (top.set, top.state, top.lex_len == 0);
        if let Some(e) = self.local_entries.get(&key) {
            return Ok(e.clone());
        }
        let e = Arc::new(self.build_entry(top)?);
        let size = e.bytes();
        self.local_entries.insert(key, e.clone(), size);
        Ok(e)
    }

    /// Closes the current lexeme as `matched` and walks the `children` subtrees from the start
    /// of the next lexeme. The caller restores the stacks.
    pub(super) fn expand_group(
        &mut self,
        trie: &TokTrie,
        matched: &[LexemeId],
        children: &[u32],
        mask: &mut TokenSet,
    ) -> Result<(), MatcherError> {
        if !self.start_next_lexeme(matched)? {
            return Ok(());
        }
        // Children are sorted by byte: one trial push per distinct byte rejects whole runs.
        let mut i = 0;
        while i < children.len() {
            let b = trie.node_byte(children[i] as usize);
            let mut j = i + 1;
            while j < children.len() && trie.node_byte(children[j] as usize) == b {
                j += 1;
            }
            if self.push_byte(b)? {
                self.pop(1);
                for &c in &children[i..j] {
                    trie.add_allowed_subtree(self, mask, c as usize)?;
                }
            }
            i = j;
        }
        Ok(())
    }

    /// The vocabulary slice that describes `top`'s DFA state, if it has one worth using, with
    /// the chain of states its characters lead through (see [`TokTrie::slice`]; slices are
    /// computed once per vocabulary and shared through the [`TokEnv`]).
    ///
    /// The class is read off the state: the ASCII bytes that all lead to one live state (at
    /// least [`MIN_SLICE_ASCII`] of them), with every well-formed multi-byte character when
    /// those lead there too. The chain then follows the class: `s_0` is the state, and every
    /// character of the class must step `s_d` to one `s_{d+1}` ([`class_step`]). A free-text
    /// state (`[^"\\]*`) loops (`s_1 = s_0`); a counted repetition (a JSON string with
    /// `maxLength`) advances one state per character, up to the slice's longest path or to the
    /// bound, where every character is rejected (a dead end: only tokens of at most that many
    /// characters are in). Any other shape (characters leading to different states) has no
    /// slice, and the whole trie is walked.
    ///
    /// Exactness: then a token of the slice with `c` characters is allowed exactly when the
    /// chain has `c` steps (every state on its path is live), and every other token leaves the
    /// class at a frontier node, whose subtree is walked from the state after the characters
    /// on the path to it.
    pub(super) fn slice_for(
        &mut self,
        top: Frame,
    ) -> Result<Option<(Arc<TokenSlice>, Chain)>, MatcherError> {
        if top.lex_len == 0 || top.set == NO_SET {
            return Ok(None);
        }
        let Some((slot, cache)) = slot_mut(&mut self.slots, &mut self.caches, top.set) else {
            return Ok(None);
        };
        let s = top.state;
        let class = match slot.chain_class.get(&s) {
            Some(&class) => class,
            None => match read_class(slot, cache, s)? {
                Some(class) => class,
                None => return Ok(None),
            },
        };
        let cg = self.cg.clone();
        let Some((slice, fresh)) = cg.env.slice(class) else {
            return Ok(None);
        };
        let mut chain = Chain {
            states: vec![s],
            dead_end: false,
        };
        let mut last = s;
        while chain.states.len() <= slice.max_chars as usize {
            let st = match slot.class_steps.get(&(last, class)) {
                Some(&st) => st,
                None => {
                    let st = class_step(&slot.dfa, cache, &mut slot.live, last, class)?;
                    slot.class_steps.insert((last, class), st);
                    st
                }
            };
            match st {
                // A loop: every deeper character leads back here.
                ClassStep::To(n) if n == last => break,
                ClassStep::To(n) => {
                    chain.states.push(n);
                    slot.chain_class.insert(n, class);
                    last = n;
                }
                ClassStep::Dead => {
                    // A lexeme ending here would put lexeme boundaries inside the slice (every
                    // character would start the next lexeme): walk instead.
                    if slot.ends_lexeme(cache, last)? {
                        return Ok(None);
                    }
                    chain.dead_end = true;
                    break;
                }
                ClassStep::Mixed => return Ok(None),
            }
        }
        if fresh {
            // One pass over the trie without recognizer calls: a fraction of a walk.
            self.tick(cg.env.trie().nodes_len() as u64 / 4)?;
        }
        self.tick(chain.states.len() as u64)?;
        Ok(Some((slice, chain)))
    }

    /// The mask entry of `top` built from its [`Detour`]'s target entry, or `None` when the
    /// state has no detour. The target's entry comes from the caches (built once, through a
    /// slice when the target is a free-text loop); then the tokens under the `except` bytes
    /// are taken out and those subtrees walked from this state.
    pub(super) fn detour_entry(&mut self, top: Frame) -> Result<Option<MaskEntry>, MatcherError> {
        if self.in_detour || top.lex_len == 0 || top.set == NO_SET {
            return Ok(None);
        }
        let Some((slot, cache)) = slot_mut(&mut self.slots, &mut self.caches, top.set) else {
            return Ok(None);
        };
        let Some(d) = detour_of(slot, cache, top.state)? else {
            return Ok(None);
        };
        let saved = self.save();
        self.in_detour = true;
        let target = (|| {
            if !self.push_byte(d.via)? {
                return Ok(None);
            }
            let t = self.top();
            // `top` may be a key set's full set standing in for the set the matcher is in
            // (see `key_set_entry`): the two share one automaton and lazy-DFA cache, so the
            // state the byte led to is the full set's state too.
            let auto = |set: u32| {
                self.slots
                    .get(set as usize)
                    .and_then(|s| s.as_ref().map(|s| s.auto))
            };
            if t.state != d.target || auto(t.set).is_none() || auto(t.set) != auto(top.set) {
                return Ok(None);
            }
            let t = Frame { set: top.set, ..t };
            match self.canonical(t) {
                Some(canon) => self.shared_entry(t, canon),
                None => self.local_entry(t),
            }
            .map(Some)
        })();
        self.in_detour = false;
        self.restore(saved);
        let Some(target) = target? else {
            return Ok(None);
        };
        if target.first.is_some() {
            return Ok(None);
        }
        let cg = self.cg.clone();
        let trie = cg.env.trie();
        let Some((slot, cache)) = slot_mut(&mut self.slots, &mut self.caches, top.set) else {
            return Ok(None);
        };
        let (splits, descended) = detour_splits(slot, cache, trie, &d, top.state)?;
        let mut inner = target.inner.clone();
        let mut cut: Vec<std::ops::Range<usize>> = Vec::with_capacity(splits.len());
        for &(n, _) in &splits {
            trie.remove_subtree_tokens(n, &mut inner);
            cut.push(trie.subtree(n));
        }
        // Split subtrees are disjoint (the descent stops at each), so sorted by start a node
        // is in one exactly when it is in the last range starting at or before it.
        cut.sort_unstable_by_key(|r| r.start);
        let outside = |n: u32| {
            let n = n as usize;
            let i = cut.partition_point(|r| r.start <= n);
            i == 0 || !cut[i - 1].contains(&n)
        };
        let mut groups: Vec<(Vec<LexemeId>, Vec<u32>)> = target
            .groups
            .iter()
            .map(|(m, ch)| {
                (
                    m.clone(),
                    ch.iter().copied().filter(|&n| outside(n)).collect(),
                )
            })
            .collect();
        let mut walk = LexemeWalk::new(slot, cache, top.state, false);
        let mut visited = descended;
        for &(n, parent) in &splits {
            walk.root = trie.node_depth(n) == 1;
            walk.states.clear();
            walk.states.push(parent);
            visited += trie.add_allowed_subtree(&mut walk, &mut inner, n)?;
        }
        if walk.first.as_ref().is_some_and(|m| !m.is_empty()) {
            // The state ends a lexeme after all (detours exclude such states).
            return Ok(None);
        }
        for (m, ch) in walk.groups {
            match groups.iter_mut().find(|(g, _)| *g == m) {
                Some((_, g)) => g.extend(ch),
                None => groups.push((m, ch)),
            }
        }
        groups.retain(|(_, ch)| !ch.is_empty());
        for (_, children) in &mut groups {
            children.sort_unstable_by_key(|&c| (trie.node_byte(c as usize), c));
        }
        self.tick(visited as u64 + d.except.len() as u64)?;
        cg.shared
            .detours
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(Some(MaskEntry {
            inner,
            groups,
            first: None,
        }))
    }

    /// The mask entry of `top` in a key set ([`KeySet`](crate::lexer::KeySet)) derived from
    /// the entry of the same state in the set's full set (cached, so shared by every position
    /// of the object): the tokens that complete a forbidden name are taken out, and each
    /// boundary group keeps only the lexemes this set has (the parser would refuse the others
    /// anyway). `None` (build the set's own entry instead) when the set is not a key set, at
    /// the lexeme's start, for the first positions right after a key's opening quote (see
    /// [`key_set_own_walks`]), or when a state on a forbidden name's path is dead for this set
    /// before the name is complete (the argument of [`KeySet`](crate::lexer::KeySet) does not
    /// hold there).
    ///
    /// Costs O(forbidden names × name length) DFA steps and trie lookups, plus a copy of the
    /// full set's entry, where a walk visits most of the trie (a key can be any string).
    fn key_set_entry(&mut self, top: Frame) -> Result<Option<MaskEntry>, MatcherError> {
        // Right after the key's first byte (its opening quote) a key set's own entry needs a
        // walk of most of the vocabulary, and every position of the object is in that one
        // state, so the full set's entry is built once and derived from many times (after a
        // few positions built their own, see `key_set_own_walks`). Deeper in a key, every
        // position that writes the same prefix is in the same state too: each set's own entry
        // there is a detour (the string loop's entry, the names' paths descended), built once
        // per set, where the full set's is built once per object and derived from.
        if top.lex_len == 0 || top.set == NO_SET {
            return Ok(None);
        }
        let Some(Some(slot)) = self.slots.get(top.set as usize) else {
            return Ok(None);
        };
        let Some(ks) = slot.dfa.key_set().cloned() else {
            return Ok(None);
        };
        let own = slot.dfa.clone();
        let auto = slot.auto;
        let walks = self.key_set_walks.entry(auto).or_insert(0);
        if top.lex_len == 1 && *walks < key_set_own_walks() {
            *walks += 1;
            return Ok(None);
        }
        let Ok(full_id) = self.intern_set(&ks.full) else {
            // Out of lexeme sets (or lexer state): walk, as without the full set.
            return Ok(None);
        };
        if self.slots[full_id as usize].as_ref().map(|s| s.auto) != Some(auto) {
            return Ok(None);
        }
        // The same automaton and lazy-DFA cache: `top.state` is the full set's state too.
        let full_top = Frame {
            set: full_id,
            ..top
        };
        let full = match self.canonical(full_top) {
            Some(canon) => self.shared_entry(full_top, canon)?,
            None => self.local_entry(full_top)?,
        };
        if full.first.is_some() {
            return Ok(None);
        }
        let cg = self.cg.clone();
        let trie = cg.env.trie();
        let text = self.bytes[self.bytes.len() - top.lex_len as usize..].to_vec();
        let mut inner = full.inner.clone();
        let mut cut: Vec<std::ops::Range<usize>> = Vec::new();
        let Some((slot, cache)) = slot_mut(&mut self.slots, &mut self.caches, top.set) else {
            return Ok(None);
        };
        let mut steps = 0;
        for (_, name) in &ks.forbidden {
            let Some(suffix) = name.strip_prefix(text.as_slice()) else {
                continue;
            };
            let mut s = top.state;
            let mut node = 0;
            for i in 0..suffix.len() {
                let Some(n) = trie.child(node, suffix[i]) else {
                    // No token spells this far: none completes the name from here.
                    break;
                };
                node = n;
                steps += 1;
                match step(&slot.dfa, cache, &mut slot.live, s, suffix[i])? {
                    Some(n) => s = n,
                    None if i + 1 == suffix.len() => {
                        trie.remove_subtree_tokens(node, &mut inner);
                        cut.push(trie.subtree(node));
                    }
                    None => return Ok(None),
                }
            }
        }
        let lexemes = own.lexemes();
        let mut groups: Vec<(Vec<LexemeId>, Vec<u32>)> = Vec::with_capacity(full.groups.len());
        for (matched, nodes) in &full.groups {
            let kept: Vec<LexemeId> = matched
                .iter()
                .copied()
                .filter(|l| lexemes.binary_search(l).is_ok())
                .collect();
            if kept.is_empty() {
                continue;
            }
            let nodes: Vec<u32> = nodes
                .iter()
                .copied()
                .filter(|&n| !cut.iter().any(|r| r.contains(&(n as usize))))
                .collect();
            match groups.iter_mut().find(|(m, _)| *m == kept) {
                Some((_, g)) => {
                    g.extend(nodes);
                    g.sort_unstable_by_key(|&c| (trie.node_byte(c as usize), c));
                }
                None => groups.push((kept, nodes)),
            }
        }
        groups.retain(|(_, nodes)| !nodes.is_empty());
        self.tick(steps + ks.forbidden.len() as u64)?;
        Ok(Some(MaskEntry {
            inner,
            groups,
            first: None,
        }))
    }

    pub(super) fn build_entry(&mut self, top: Frame) -> Result<MaskEntry, MatcherError> {
        if let Some(e) = self.key_set_entry(top)? {
            return Ok(e);
        }
        if let Some(e) = self.detour_entry(top)? {
            return Ok(e);
        }
        let cg = self.cg.clone();
        let slice = self.slice_for(top)?;
        let Some((slot, cache)) = slot_mut(&mut self.slots, &mut self.caches, top.set) else {
            return Ok(MaskEntry {
                inner: TokenSet::new(cg.env.trie().vocab_len()),
                groups: Vec::new(),
                first: None,
            });
        };
        let mut inner = TokenSet::new(cg.env.trie().vocab_len());
        let mut walk = LexemeWalk::new(slot, cache, top.state, top.lex_len == 0);
        let visited = match slice {
            Some((slice, chain)) => {
                // The class's characters lead along the chain: the slice's tokens short enough
                // for it are in, and only the frontier subtrees need the DFA.
                let k = chain.chars();
                slice.tokens_upto(k, &mut inner);
                if k > 0 {
                    walk.live_first.extend_from_slice(&slice.root_children);
                }
                let trie = cg.env.trie();
                let mut visited = slice.frontier.len();
                for (&f, &d) in slice.frontier.iter().zip(&slice.frontier_chars) {
                    if d > k {
                        continue;
                    }
                    walk.root = trie.node_depth(f as usize) == 1;
                    walk.states.clear();
                    walk.states.push(chain.at(d));
                    visited += trie.add_allowed_subtree(&mut walk, &mut inner, f as usize)?;
                }
                visited
            }
            None => cg.env.trie().add_allowed(&mut walk, &mut inner)?,
        };
        let mut groups = walk.groups;
        for (_, children) in &mut groups {
            children.sort_unstable_by_key(|&c| (cg.env.trie().node_byte(c as usize), c));
        }
        let first = walk
            .first
            .filter(|m| !m.is_empty())
            .map(|m| (m, walk.live_first));
        self.tick(visited as u64)?;
        Ok(MaskEntry {
            inner,
            groups,
            first,
        })
    }
}
