//! Questions about one lexer state, answered by stepping its lazy DFA: which bytes keep it live
//! ([`step`]), whether it loops on a class of characters (a vocabulary slice, [`read_class`],
//! [`class_step`]), whether it behaves like another state but for a few first bytes
//! ([`Detour`]), and whether two states accept the same continuations ([`equivalent`]).
//!
//! Owns [`Slot`] (a lexeme set's DFA with this matcher's cache and the memo tables of these
//! answers). Every answer is exact or "not proven" (then the caller walks the trie as usual):
//! the explorations are bounded ([`MAX_DETOUR_BYTES`], [`MAX_EQUIV_PAIRS`], 64 UTF-8 pairs).
//! May use `lexer` and `toktrie` (slice classes) only.

use std::sync::Arc;

use regex_automata::hybrid::dfa::Cache;
use regex_automata::hybrid::LazyStateID;

use crate::grammar::LexemeId;
use crate::lexer::{LexDfa, LexerError};
use crate::toktrie::SliceClass;
use crate::util::FxHashMap;

/// Fewest one-byte self-loops for a lexer state to be walked through a vocabulary slice: below
/// this, a slice would hold few tokens and computing it (one pass over the trie) would not pay.
pub(super) const MIN_SLICE_ASCII: u32 = 64;

/// A lexeme set's DFA with this matcher's memos for it. The lazy-DFA cache is the matcher's
/// cache of the set's automaton (`auto`), shared by the sets with the same automaton (see
/// `lexer`: an object's key sets), so their states are determinized once per matcher.
#[derive(Debug)]
pub(super) struct Slot {
    pub(super) dfa: Arc<LexDfa>,
    /// The number of the set's automaton: its cache's index in the matcher's caches.
    pub(super) auto: usize,
    pub(super) start: LazyStateID,
    /// Liveness of the states that need asking (see [`LexDfa::is_live`]).
    pub(super) live: FxHashMap<LazyStateID, bool>,
    /// How states step on the characters of a slice class ([`class_step`]), memoized: a chain
    /// of states (a counted repetition) is verified one new state per mask.
    pub(super) class_steps: FxHashMap<(LazyStateID, SliceClass), ClassStep>,
    /// The class of each state met on a chain (so the next mask, one character further along
    /// a counted repetition, starts from a known class instead of re-reading it).
    pub(super) chain_class: FxHashMap<LazyStateID, SliceClass>,
    /// Each state's [`Detour`] (or `None`: it has none), memoized.
    pub(super) detours: FxHashMap<LazyStateID, Option<Detour>>,
    /// Pairs of states proven (or refuted) to accept the same continuations ([`equivalent`]).
    pub(super) equiv: FxHashMap<(LazyStateID, LazyStateID), bool>,
    pub(super) scratch: Vec<LexemeId>,
}

impl Slot {
    /// Whether some lexeme matches exactly the text that led to `s`.
    pub(super) fn ends_lexeme(
        &mut self,
        cache: &mut Cache,
        s: LazyStateID,
    ) -> Result<bool, LexerError> {
        self.scratch.clear();
        self.dfa.matches(cache, s, &mut self.scratch)?;
        Ok(!self.scratch.is_empty())
    }
}

/// How a lexer state steps on every character of a [`SliceClass`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ClassStep {
    /// Every character of the class leads to this one live state (through live states inside
    /// multi-byte characters, with malformed continuations rejected).
    To(LazyStateID),
    /// Every character of the class is rejected at its first byte.
    Dead,
    /// Neither: a slice does not describe this state.
    Mixed,
}

/// How `s` steps on the characters of `class` (see [`ClassStep`]): one DFA step per ASCII byte
/// of the class, and with `class.utf8` an exploration of (UTF-8 automaton state, DFA state)
/// pairs over the multi-byte characters (at most 64 pairs, else `Mixed`).
pub(super) fn class_step(
    dfa: &LexDfa,
    cache: &mut Cache,
    live: &mut FxHashMap<LazyStateID, bool>,
    s: LazyStateID,
    class: SliceClass,
) -> Result<ClassStep, LexerError> {
    // `None`: no character seen yet; `Some(None)`: all rejected so far; `Some(Some(t))`: all
    // led to `t` so far.
    let mut target: Option<Option<LazyStateID>> = None;
    fn merge(target: &mut Option<Option<LazyStateID>>, n: Option<LazyStateID>) -> bool {
        match *target {
            None => {
                *target = Some(n);
                true
            }
            Some(t) => t == n,
        }
    }
    let mut by_class = [None; 256];
    for b in 0..0x80u8 {
        if class.ascii >> b & 1 == 1
            && !merge(
                &mut target,
                step_by_class(dfa, cache, live, &mut by_class, s, b)?,
            )
        {
            return Ok(ClassStep::Mixed);
        }
    }
    if class.utf8 {
        let mut seen: Vec<(u8, LazyStateID)> = vec![(0, s)];
        let mut k = 0;
        while k < seen.len() {
            let (a, d) = seen[k];
            k += 1;
            let mut by_class = [None; 256];
            for b in 0x80..=0xffu8 {
                let n = step_by_class(dfa, cache, live, &mut by_class, d, b)?;
                match (class.next(a, b), n) {
                    // A character completed: it must land where the others do.
                    (Some(0), n) => {
                        if !merge(&mut target, n) {
                            return Ok(ClassStep::Mixed);
                        }
                    }
                    // Inside a character: a lead byte rejected at once counts as a rejected
                    // character; a rejection later would leave a live prefix of a character
                    // whose completion is dead.
                    (Some(_), None) if a == 0 => {
                        if !merge(&mut target, None) {
                            return Ok(ClassStep::Mixed);
                        }
                    }
                    (Some(_), None) => return Ok(ClassStep::Mixed),
                    (Some(a2), Some(n)) => {
                        if target == Some(None) {
                            return Ok(ClassStep::Mixed);
                        }
                        if !seen.contains(&(a2, n)) {
                            if seen.len() >= 64 {
                                return Ok(ClassStep::Mixed);
                            }
                            seen.push((a2, n));
                        }
                    }
                    (None, None) => {}
                    // A byte outside the class at a boundary is frontier, walked as usual.
                    (None, Some(_)) if a == 0 => {}
                    // A malformed continuation the DFA takes: the slice would not list it.
                    (None, Some(_)) => return Ok(ClassStep::Mixed),
                }
            }
        }
    }
    Ok(match target {
        Some(Some(t)) => ClassStep::To(t),
        Some(None) => ClassStep::Dead,
        None => ClassStep::Mixed,
    })
}

/// The slice class read off state `s`: the largest group of ASCII bytes leading to one live
/// state (at least [`MIN_SLICE_ASCII`] of them, else `None`), with every well-formed multi-byte
/// character when those lead there too.
pub(super) fn read_class(
    slot: &mut Slot,
    cache: &mut Cache,
    s: LazyStateID,
) -> Result<Option<SliceClass>, LexerError> {
    let mut next = [None; 128];
    let mut by_class = [None; 256];
    for b in 0..0x80u8 {
        next[b as usize] = step_by_class(&slot.dfa, cache, &mut slot.live, &mut by_class, s, b)?;
    }
    let Some((count, target)) = most_common(&next) else {
        return Ok(None);
    };
    if count < MIN_SLICE_ASCII {
        return Ok(None);
    }
    let mut ascii = 0u128;
    for (b, n) in next.iter().enumerate() {
        if *n == Some(target) {
            ascii |= 1 << b;
        }
    }
    let utf8 = SliceClass { ascii, utf8: true };
    Ok(Some(
        match class_step(&slot.dfa, cache, &mut slot.live, s, utf8)? {
            ClassStep::To(t) if t == target => utf8,
            _ => SliceClass { ascii, utf8: false },
        },
    ))
}

/// The live state most of `next` lead to, with how many lead there; of states reached equally
/// often, the one reached first. One pass with a short list of the distinct states (a lexer
/// state's bytes lead to a handful of states), where counting each distinct state again was
/// quadratic in the bytes.
fn most_common(next: &[Option<LazyStateID>]) -> Option<(u32, LazyStateID)> {
    let mut seen: Vec<(LazyStateID, u32)> = Vec::new();
    for n in next.iter().flatten() {
        match seen.iter_mut().find(|(s, _)| s == n) {
            Some((_, c)) => *c += 1,
            None => seen.push((*n, 1)),
        }
    }
    let mut best: Option<(u32, LazyStateID)> = None;
    for &(n, count) in &seen {
        if best.is_none_or(|(c, _)| count > c) {
            best = Some((count, n));
        }
    }
    best
}

/// Most first bytes on which a [`Detour`] may differ from its target; beyond this the whole
/// trie is walked. Each such byte costs the descent along the trie paths where the two states
/// stay apart (a listed name's letters), not a walk of its subtree, so an object's full key
/// set (every name's first letter, upper and lower case) fits.
pub(super) const MAX_DETOUR_BYTES: usize = 128;

/// Most state pairs [`equivalent`] explores before giving up (answering "not proven").
pub(super) const MAX_EQUIV_PAIRS: usize = 8;

/// A state that behaves like another one except on a few first bytes: a key prefix shared
/// by listed names and the additional-key string (`"useArrow`: `K` continues a name, every
/// other character leaves for the string's free-text loop), an enum member that is also a
/// prefix of free text. For every first byte not in `except`, the state after it accepts the
/// same continuations as the state after it from `target`, so the tokens starting with such
/// bytes are allowed exactly when they are allowed from `target`, with the same lexeme
/// boundaries: the mask entry is `target`'s (shared by every such state) with the subtrees
/// of the `except` bytes walked afresh.
#[derive(Clone, Debug)]
pub(super) struct Detour {
    pub(super) target: LazyStateID,
    /// An ASCII byte leading from the state to `target`.
    pub(super) via: u8,
    /// The first bytes on which the state and `target` differ, sorted.
    pub(super) except: Vec<u8>,
}

/// The [`Detour`] of `s`, if it has one: `target` is the state most ASCII bytes lead to (at
/// least [`MIN_SLICE_ASCII`] of them, and not `s` itself: a loop is a slice's job), neither
/// state ends a lexeme, and at most [`MAX_DETOUR_BYTES`] first bytes lead the two states to
/// places not proven [`equivalent`]. Memoized per state.
pub(super) fn detour_of(
    slot: &mut Slot,
    cache: &mut Cache,
    s: LazyStateID,
) -> Result<Option<Detour>, LexerError> {
    if let Some(d) = slot.detours.get(&s) {
        return Ok(d.clone());
    }
    let d = find_detour(slot, cache, s)?;
    slot.detours.insert(s, d.clone());
    Ok(d)
}

pub(super) fn find_detour(
    slot: &mut Slot,
    cache: &mut Cache,
    s: LazyStateID,
) -> Result<Option<Detour>, LexerError> {
    if slot.ends_lexeme(cache, s)? {
        return Ok(None);
    }
    let mut next = [None; 256];
    let mut by_class = [None; 256];
    for b in 0..=255u8 {
        next[b as usize] = step_by_class(&slot.dfa, cache, &mut slot.live, &mut by_class, s, b)?;
    }
    let Some((count, target)) = most_common(&next[..0x80]) else {
        return Ok(None);
    };
    if count < MIN_SLICE_ASCII || target == s || slot.ends_lexeme(cache, target)? {
        return Ok(None);
    }
    let mut except = Vec::new();
    let mut target_by_class = [None; 256];
    for b in 0..=255u8 {
        let t = step_by_class(
            &slot.dfa,
            cache,
            &mut slot.live,
            &mut target_by_class,
            target,
            b,
        )?;
        let same = match (next[b as usize], t) {
            (None, None) => true,
            (Some(x), Some(y)) if x == y => true,
            // Inside a multi-byte character the two sides may sit in different states that
            // meet again once it is complete (memoized per pair).
            (Some(x), Some(y)) if b >= 0x80 => equivalent(slot, cache, x, y)?,
            _ => false,
        };
        if !same {
            except.push(b);
            if except.len() > MAX_DETOUR_BYTES {
                return Ok(None);
            }
        }
    }
    let via = (0..0x80u8)
        .find(|&b| next[b as usize] == Some(target))
        .expect("the target is reached by some ASCII byte");
    Ok(Some(Detour {
        target,
        via,
        except,
    }))
}

/// Whether `x` and `y` accept the same continuations with the same lexemes ending at every
/// point: a bisimulation of at most [`MAX_EQUIV_PAIRS`] pairs (every pair ends the same
/// lexemes, and every byte takes both sides to a pair in the relation or both to rejection).
/// `false` means "not proven". Memoized per pair.
pub(super) fn equivalent(
    slot: &mut Slot,
    cache: &mut Cache,
    x: LazyStateID,
    y: LazyStateID,
) -> Result<bool, LexerError> {
    if let Some(&e) = slot.equiv.get(&(x, y)) {
        return Ok(e);
    }
    let mut seen = vec![(x, y)];
    let mut k = 0;
    let mut ok = true;
    let (mut mp, mut mq) = (Vec::new(), Vec::new());
    'pairs: while k < seen.len() {
        let (p, q) = seen[k];
        k += 1;
        mp.clear();
        mq.clear();
        slot.dfa.matches(cache, p, &mut mp)?;
        slot.dfa.matches(cache, q, &mut mq)?;
        mp.sort_unstable();
        mq.sort_unstable();
        if mp != mq {
            ok = false;
            break;
        }
        for b in 0..=255u8 {
            // Bytes of one class step alike: its first byte stands for it.
            if b > 0 && slot.dfa.byte_class(b) == slot.dfa.byte_class(b - 1) {
                continue;
            }
            let np = step(&slot.dfa, cache, &mut slot.live, p, b)?;
            let nq = step(&slot.dfa, cache, &mut slot.live, q, b)?;
            match (np, nq) {
                (None, None) => {}
                (Some(a), Some(c)) if a == c => {}
                (Some(a), Some(c)) => {
                    if !seen.contains(&(a, c)) {
                        if seen.len() >= MAX_EQUIV_PAIRS {
                            ok = false;
                            break 'pairs;
                        }
                        seen.push((a, c));
                    }
                }
                _ => {
                    ok = false;
                    break 'pairs;
                }
            }
        }
    }
    slot.equiv.insert((x, y), ok);
    Ok(ok)
}

/// The states a slice walk passes through: `states[d]` is the lexer state after `d`
/// characters of the slice's class (see [`Core::slice_for`]).
#[derive(Debug)]
pub(super) struct Chain {
    pub(super) states: Vec<LazyStateID>,
    /// Whether every character of the class is rejected after the last state (a counted
    /// repetition at its bound): tokens of more than `states.len() - 1` characters are out.
    pub(super) dead_end: bool,
}

impl Chain {
    /// Characters a token of the slice may have.
    pub(super) fn chars(&self) -> u32 {
        if self.dead_end {
            self.states.len() as u32 - 1
        } else {
            u32::MAX
        }
    }

    /// The state after `d` characters (the last one repeats: it loops, or the chain is as
    /// long as the slice's deepest path).
    pub(super) fn at(&self, d: u32) -> LazyStateID {
        self.states[(d as usize).min(self.states.len() - 1)]
    }
}

/// [`step`] through a memo per byte class (`by_class`, all `None` at first, for one `state`):
/// bytes of one class step alike, so a class costs one step.
#[inline]
fn step_by_class(
    dfa: &LexDfa,
    cache: &mut Cache,
    live: &mut FxHashMap<LazyStateID, bool>,
    by_class: &mut [Option<Option<LazyStateID>>; 256],
    state: LazyStateID,
    byte: u8,
) -> Result<Option<LazyStateID>, LexerError> {
    let c = dfa.byte_class(byte) as usize;
    if let Some(n) = by_class[c] {
        return Ok(n);
    }
    let n = step(dfa, cache, live, state, byte)?;
    by_class[c] = Some(n);
    Ok(n)
}

/// The state after `byte` if it is live (the text so far can still grow into a lexeme).
#[inline]
pub(super) fn step(
    dfa: &LexDfa,
    cache: &mut Cache,
    live: &mut FxHashMap<LazyStateID, bool>,
    state: LazyStateID,
    byte: u8,
) -> Result<Option<LazyStateID>, LexerError> {
    let n = dfa.next(cache, state, byte)?;
    if n.is_dead() {
        return Ok(None);
    }
    if !dfa.needs_liveness(n) {
        return Ok(Some(n));
    }
    let ok = match live.get(&n) {
        Some(&ok) => ok,
        None => {
            let ok = dfa.is_live(cache, n)?;
            live.insert(n, ok);
            ok
        }
    };
    Ok(ok.then_some(n))
}
