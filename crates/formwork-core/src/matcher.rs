//! The matcher: grammar × vocabulary → token masks, token by token.
//!
//! Owns: [`CompiledGrammar`] (immutable, `Send + Sync`, built once per grammar × vocabulary and
//! shared in an `Arc`), [`Matcher`] (cheap per-sequence state: the Earley chart, the lexer
//! state stack, the lazy-DFA caches), [`Limits`] and [`MatcherError`]. Does not own sampling:
//! any sampler can apply the [`TokenSet`] filled by [`Matcher::compute_mask`].
//!
//! # Lexing policy
//! Greedy maximal munch among the lexemes the parser allows (see `grammar`): while the next
//! byte extends some allowed lexeme, it does; otherwise the current text must be a complete
//! match of at least one allowed lexeme, the parser scans all of them, and the byte starts the
//! next lexeme under the new allowed set. "Viable" in this module means viable at lexeme level:
//! the lexemes so far are a prefix of a sentence and the current partial lexeme can still grow
//! into an allowed lexeme. (A grammar where greedy lexing can never split two lexemes, e.g.
//! `/a+/ /a/`, has viable prefixes without completions; that is a property of the grammar.)
//!
//! # State
//! One [`Frame`] per consumed byte: the lexeme set, the lazy-DFA state, the length of the
//! current lexeme and the number of parser rows. Pushing a byte inside a lexeme is one DFA
//! transition; at a lexeme boundary it is one Earley row. Popping a byte truncates both stacks,
//! so walking the token trie never recomputes rows, and `rollback` is O(bytes rolled back).
//!
//! # Costs
//! `compute_mask` walks the token trie from the current state, pruning at the first rejected
//! byte: O(visited trie nodes) DFA steps plus one Earley row per lexeme boundary crossed.
//! Work is bounded by [`Limits::step_fuel`] and wall time by [`Limits::step_time`].
//!
//! What a typical mask cost before the whole-mask cache (profiled on `benches/mask.rs`, JSON
//! grammar, 150 MaskBench documents, Gemma 3 vocabulary, load ~7): 88% of masks are inside a
//! string (255k of 262k tokens allowed) and took 6.6 µs at the median, against 1.4 µs for
//! llguidance. The in-lexeme part was already one cached 32 KiB bitset copy; the rest was the
//! parser-dependent boundary walk redone on every mask: one Earley row for the closing quote,
//! then the subtrees of every token that closes the string and goes on (`",`, `"}`, `":"`…),
//! each boundary byte a trial push. Locks, hashing and allocation were not significant.
//!
//! # Whole-mask cache
//! The boundary walk depends on the parser only through the future of the row the current
//! lexeme started after, and that future is identified exactly by the row's *signature*
//! ([`RowSigs`]: its items with origin rows replaced by their signatures, interned). So the
//! whole mask, and whether EOS is allowed, is cached per (lexeme set, canonical DFA state, at
//! lexeme start, row signature) as a `MaskResult`: the entry's in-lexeme bitset plus a list of
//! the tokens beyond it, or the whole bitset when that list would be long. A hit is one bitset
//! copy plus those inserts: JSON rows repeat per nesting path (the k-th member of an object has
//! the same signature for every k), so nearly all masks of a document hit entries stored by
//! earlier documents. Measured in the same bench run (load ~7, formwork / llguidance, µs):
//! SmolLM2 p50 0.2 / 0.5, p99 16 / 88; Gemma 3 p50 1.1 / 1.4, p99 48 / 116.
//!
//! # Vocabulary slices
//! The costly cold masks are the first ones inside a free-text lexeme (a JSON string): the
//! entry walk visits the whole trie, ~15–19 ms at 262k tokens (load ~8), once per lexeme set
//! containing the lexeme. When the lexer state loops on at least 64 ASCII bytes (and, checked
//! by exploration, on every well-formed UTF-8 character), the entry is built from a
//! [`TokenSlice`] instead: the tokens made only of such characters are added as one bitset,
//! and only the frontier subtrees (tokens reaching a quote, a backslash, a control byte…) are
//! walked with the DFA. The slice costs one pass over the trie without DFA steps and is shared
//! by every state with the same class. Measured (load ~10): the first in-string mask at 262k
//! tokens went from 17.9 ms to 9.4 ms including that pass; later in-string entries of other
//! lexeme sets reuse the slice.
//!
//! # Mask cache
//! The part of a mask that stays inside the current lexeme depends only on the lexer state, so
//! it is computed once per (lexeme set, DFA state, at lexeme start) and shared by all matchers
//! of a compiled grammar (`MaskEntry`): the tokens that stay inside the lexeme as a bitset, the
//! trie nodes where the lexeme can end (grouped by the lexemes that end there and sorted by
//! byte), and whether the very next byte may close it. A mask is then one bitset union plus a
//! walk of the boundary subtrees from the parser state after the boundary; a boundary at the
//! first byte reuses the cached entry of the next lexeme's start. Lazy-DFA state ids are
//! private to each matcher's cache, so shared entries are keyed by a canonical state obtained by
//! replaying the current lexeme in one shared cache per lexeme set (once per new state per
//! matcher). Measured (JSON grammar, 150 MaskBench documents, Gemma 3 vocabulary): p50
//! 8.7 µs, p99 168 µs per mask; cold entries cost one trie walk (up to ~40 ms at 262k tokens).

use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use regex_automata::hybrid::dfa::Cache;
use regex_automata::hybrid::LazyStateID;

use crate::grammar::{Grammar, LexemeId};
use crate::lexer::{LexDfa, LexemeSetId, LexemeSets, LexerError, LexerLimits, LexerSpec};
use crate::parser::{Chart, FxHashMap, ParserError, ParserSpec, RowSig, RowSigs};
use crate::toktrie::{
    Recognizer, SliceClass, TokEnv, TokTrie, TokenId, TokenSet, TokenSlice, Vocab,
};

/// An error from the matcher. Errors from consuming and from budgets are sticky: once one is
/// returned, every later call returns it again until [`Matcher::reset`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MatcherError {
    /// The lexer could not be built or ran out of budget.
    #[error(transparent)]
    Lexer(#[from] LexerError),
    /// The parser could not be built or ran out of budget.
    #[error(transparent)]
    Parser(#[from] ParserError),
    /// A token does not continue the output as the grammar allows.
    #[error("token {token} rejected at output byte {offset}")]
    TokenRejected {
        /// The token id.
        token: u32,
        /// Byte offset in the output where the first rejected byte would have gone.
        offset: usize,
    },
    /// Bytes fed with `consume_bytes` do not continue the output as the grammar allows.
    #[error("byte {byte:#04x} rejected at output byte {offset}")]
    ByteRejected {
        /// The rejected byte.
        byte: u8,
        /// Its offset in the output.
        offset: usize,
    },
    /// An EOS token was consumed although the grammar does not accept the output yet.
    #[error("end of sequence at output byte {offset}, but the grammar does not accept there")]
    EosNotAccepted {
        /// Output length in bytes.
        offset: usize,
    },
    /// A token id outside the vocabulary.
    #[error("token {token} outside the vocabulary of {vocab_len}")]
    TokenOutOfRange {
        /// The token id.
        token: u32,
        /// The vocabulary size.
        vocab_len: usize,
    },
    /// Input after an EOS token.
    #[error("the matcher has stopped (EOS consumed)")]
    Stopped,
    /// `rollback` asked for more tokens than were consumed (not sticky).
    #[error("cannot roll back {requested} tokens: only {available} consumed")]
    RollbackTooFar {
        /// Tokens asked for.
        requested: usize,
        /// Tokens consumed.
        available: usize,
    },
    /// A counted budget ran out.
    #[error("limit exceeded: {what}: limit {limit}, needed {given}")]
    LimitExceeded {
        /// What was counted.
        what: &'static str,
        /// The limit.
        limit: usize,
        /// How many were needed.
        given: usize,
    },
    /// One step took longer than [`Limits::step_time`].
    #[error("step took longer than the time limit of {limit:?}")]
    TimeExceeded {
        /// The limit.
        limit: Duration,
    },
}

/// Budgets: a pathological grammar yields an error, never a hang or unbounded memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Lexer budgets (DFA cache bytes, NFA bytes, lexeme sets); see [`LexerLimits`].
    pub lexer: LexerLimits,
    /// Earley items in one row. Default 200,000 (a JSON schema row has tens to thousands).
    pub max_items_per_row: usize,
    /// Work units (trie nodes visited + Earley items created) per call of `compute_mask`,
    /// `consume_*` or `compute_forced_*`. Default 50,000,000, about 0.5 s on a slow core:
    /// a full walk of a 262k vocabulary costs ~1M.
    pub step_fuel: u64,
    /// Wall-time bound per call, checked every 65,536 work units. Default 5 s.
    pub step_time: Option<Duration>,
    /// Longest forced byte string computed at once. Default 4,096 bytes.
    pub max_forced_bytes: usize,
    /// Largest grammar accepted, in symbols ([`Grammar::size`]). Default 1,000,000.
    pub max_grammar_size: usize,
    /// Bytes of cached masks per compiled grammar, for each of its two caches: in-lexeme
    /// entries (one bit per token plus the lexeme-boundary nodes) and whole masks (a list of
    /// tokens beyond an entry, or one bit per token); a sixteenth more holds parser row
    /// signatures. Default 32 MiB, about 1,000 bitsets at 262k tokens; when a cache is full it
    /// is emptied (signatures are kept; when their share is full, masks at new rows are walked
    /// instead of cached). 0 disables caching (every mask walks the trie).
    pub mask_cache_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            lexer: LexerLimits::default(),
            max_items_per_row: 200_000,
            step_fuel: 50_000_000,
            step_time: Some(Duration::from_secs(5)),
            max_forced_bytes: 4096,
            max_grammar_size: 1_000_000,
            mask_cache_bytes: 32 << 20,
        }
    }
}

/// A grammar compiled against a vocabulary: immutable, `Send + Sync`, shared by every
/// [`Matcher`] through an `Arc`.
pub struct CompiledGrammar {
    grammar: Grammar,
    env: TokEnv,
    sets: LexemeSets,
    parser: ParserSpec,
    limits: Limits,
    shared: SharedMasks,
}

/// In-lexeme mask entries shared by every matcher of a compiled grammar.
///
/// Lazy-DFA state ids are private to each matcher's cache, so entries are keyed by a
/// *canonical* state: the state reached by replaying the current lexeme's bytes in one shared
/// cache per lexeme set (done once per new local state per matcher, under a lock).
#[derive(Debug)]
struct SharedMasks {
    canon: Mutex<FxHashMap<LexemeSetId, Cache>>,
    entries: RwLock<SharedEntries>,
    /// Signatures of Earley rows, the parser half of a [`MaskResult`]'s key.
    sigs: RowSigs,
    results: RwLock<SharedResults>,
    /// How many entries were built through a [`Detour`] (a diagnostic).
    detours: std::sync::atomic::AtomicUsize,
}

/// Fewest one-byte self-loops for a lexer state to be walked through a vocabulary slice: below
/// this, a slice would hold few tokens and computing it (one pass over the trie) would not pay.
const MIN_SLICE_ASCII: u32 = 64;

impl SharedMasks {
    fn new(limits: &Limits) -> Self {
        Self {
            canon: Mutex::default(),
            entries: RwLock::default(),
            // Keys are a few hundred bytes for JSON rows: a sixteenth of the mask budget holds
            // tens of thousands of distinct rows.
            sigs: RowSigs::new(limits.mask_cache_bytes / 16),
            results: RwLock::default(),
            detours: Default::default(),
        }
    }
}

/// Key of a whole cached mask: lexeme set, canonical DFA state, at lexeme start, signature of
/// the parser row the current lexeme started after.
type ResultKey = (LexemeSetId, LazyStateID, bool, RowSig);

#[derive(Debug, Default)]
struct SharedResults {
    map: FxHashMap<ResultKey, Arc<MaskResult>>,
    bytes: usize,
}

/// A whole mask, cached per [`ResultKey`]: the lexer state fixes the in-lexeme part and the
/// boundary nodes ([`MaskEntry`]), the row signature fixes everything the parser decides after
/// a boundary (see [`RowSigs`]), so the mask and the EOS decision are functions of the key. A
/// hit is one bitset copy plus a few inserts, instead of re-walking the boundary subtrees and
/// the Earley rows behind them.
#[derive(Debug)]
struct MaskResult {
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
    fn new(entry: Arc<MaskEntry>, mask: &TokenSet, accepting: bool) -> Self {
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

    fn bytes(&self) -> usize {
        let base = match &self.base {
            MaskBase::Entry(_) => 0,
            MaskBase::Dense(s) => s.as_words().len() * 8,
        };
        64 + base + self.extra.len() * 4
    }

    /// Fills `mask` (previous contents discarded) with the cached mask, EOS included.
    fn apply(&self, mask: &mut TokenSet, eos: &[TokenId]) {
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

#[derive(Debug, Default)]
struct SharedEntries {
    map: FxHashMap<(LexemeSetId, LazyStateID, bool), Arc<MaskEntry>>,
    bytes: usize,
}

impl std::fmt::Debug for CompiledGrammar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompiledGrammar")
            .field("lexemes", &self.grammar.lexemes().len())
            .field("rules", &self.grammar.rules().len())
            .field("trie", self.env.trie())
            .field("lexeme_sets", &self.sets.len())
            .field("limits", &self.limits)
            .finish()
    }
}

impl CompiledGrammar {
    /// Compiles `grammar` for `vocab`: parses the lexemes, lays out the rules for Earley and
    /// builds the token trie (O(vocabulary bytes · log vocabulary); ~100 ms for 262k tokens).
    /// A convenience for [`with_env`](Self::with_env) with a fresh [`TokEnv`]: to compile
    /// several grammars for one vocabulary, build the `TokEnv` once instead.
    ///
    /// # Example
    /// ```
    /// use std::sync::Arc;
    /// use formwork_core::grammar::{GrammarBuilder, Symbol};
    /// use formwork_core::matcher::{CompiledGrammar, Limits, Matcher};
    /// use formwork_core::toktrie::{SyntheticVocab, TokenSet, Vocab};
    ///
    /// let mut b = GrammarBuilder::new();
    /// let yes = b.literal("yes");
    /// let no = b.literal("no");
    /// let start = b.choice("answer", &[Symbol::Lexeme(yes), Symbol::Lexeme(no)]);
    /// let vocab = Arc::new(SyntheticVocab::byte_level());
    /// let cg = Arc::new(CompiledGrammar::new(b.build(start)?, vocab.clone(), Limits::default())?);
    /// let mut m = Matcher::new(cg)?;
    /// let mut mask = TokenSet::new(vocab.vocab_len());
    /// m.compute_mask(&mut mask)?;
    /// assert_eq!(mask.count(), 2); // "y" and "n"
    /// m.consume_bytes(b"no")?;
    /// assert!(m.is_accepting());
    /// # Ok::<(), formwork_core::Error>(())
    /// ```
    pub fn new(
        grammar: Grammar,
        vocab: Arc<dyn Vocab>,
        limits: Limits,
    ) -> Result<Self, MatcherError> {
        Self::with_env(grammar, &TokEnv::new(vocab), limits)
    }

    /// Compiles `grammar` for the vocabulary of `env`, sharing its token trie (built once per
    /// vocabulary): the cost is the grammar's alone, O(grammar symbols) plus the first lexer.
    /// See [`TokEnv`] for an example.
    pub fn with_env(grammar: Grammar, env: &TokEnv, limits: Limits) -> Result<Self, MatcherError> {
        if grammar.size() > limits.max_grammar_size {
            return Err(MatcherError::LimitExceeded {
                what: "grammar symbols",
                limit: limits.max_grammar_size,
                given: grammar.size(),
            });
        }
        let spec = LexerSpec::new(&grammar)?;
        let n = spec.len();
        let nullable: Vec<bool> = (0..n as u32)
            .map(|l| spec.is_nullable(LexemeId(l)))
            .collect();
        let nonempty: Vec<bool> = (0..n as u32)
            .map(|l| spec.is_nonempty(LexemeId(l)))
            .collect();
        let parser = ParserSpec::new(&grammar, &nullable, &nonempty)?;
        let cg = Self {
            grammar,
            env: env.clone(),
            sets: LexemeSets::new(spec, limits.lexer),
            parser,
            limits,
            shared: SharedMasks::new(&limits),
        };
        // Build the first lexer now, so a grammar whose lexemes cannot be compiled fails here.
        let chart = Chart::new(&cg.parser, limits.max_items_per_row)?;
        let mut allowed = Vec::new();
        chart.allowed_lexemes(&cg.parser, &mut allowed);
        if !allowed.is_empty() {
            cg.sets.intern(&allowed)?;
        }
        Ok(cg)
    }

    /// The grammar.
    pub fn grammar(&self) -> &Grammar {
        &self.grammar
    }

    /// The vocabulary.
    pub fn vocab(&self) -> &Arc<dyn Vocab> {
        self.env.vocab()
    }

    /// The token trie.
    pub fn trie(&self) -> &TokTrie {
        self.env.trie()
    }

    /// The vocabulary and its trie, to compile further grammars without rebuilding the trie.
    pub fn tok_env(&self) -> &TokEnv {
        &self.env
    }

    /// The budgets.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// How many distinct lexeme sets (lazy DFAs) have been built so far.
    pub fn lexeme_sets_len(&self) -> usize {
        self.sets.len()
    }
}

/// Lexeme set id meaning "no lexeme may follow" (the parser row expects nothing).
const NO_SET: LexemeSetId = LexemeSetId::MAX;

/// The lexer and parser state after one consumed byte.
#[derive(Clone, Copy, Debug)]
struct Frame {
    set: LexemeSetId,
    state: LazyStateID,
    /// Bytes of the current lexeme (0 only in the initial frame).
    lex_len: u32,
    /// Parser rows in the chart for this frame.
    rows: u32,
}

/// A lexeme set's DFA with this matcher's cache for it.
#[derive(Debug)]
struct Slot {
    dfa: Arc<LexDfa>,
    cache: Cache,
    start: LazyStateID,
    /// Liveness of match states (see [`LexDfa::is_live`]).
    live: FxHashMap<LazyStateID, bool>,
    /// How states step on the characters of a slice class ([`class_step`]), memoized: a chain
    /// of states (a counted repetition) is verified one new state per mask.
    class_steps: FxHashMap<(LazyStateID, SliceClass), ClassStep>,
    /// The class of each state met on a chain (so the next mask, one character further along
    /// a counted repetition, starts from a known class instead of re-reading it).
    chain_class: FxHashMap<LazyStateID, SliceClass>,
    /// Each state's [`Detour`] (or `None`: it has none), memoized.
    detours: FxHashMap<LazyStateID, Option<Detour>>,
    /// Pairs of states proven (or refuted) to accept the same continuations ([`equivalent`]).
    equiv: FxHashMap<(LazyStateID, LazyStateID), bool>,
    scratch: Vec<LexemeId>,
}

impl Slot {
    /// Whether some lexeme matches exactly the text that led to `s`.
    fn ends_lexeme(&mut self, s: LazyStateID) -> Result<bool, LexerError> {
        self.scratch.clear();
        self.dfa.matches(&mut self.cache, s, &mut self.scratch)?;
        Ok(!self.scratch.is_empty())
    }
}

/// How a lexer state steps on every character of a [`SliceClass`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ClassStep {
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
fn class_step(
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
    for b in 0..0x80u8 {
        if class.ascii >> b & 1 == 1 && !merge(&mut target, step(dfa, cache, live, s, b)?) {
            return Ok(ClassStep::Mixed);
        }
    }
    if class.utf8 {
        let mut seen: Vec<(u8, LazyStateID)> = vec![(0, s)];
        let mut k = 0;
        while k < seen.len() {
            let (a, d) = seen[k];
            k += 1;
            for b in 0x80..=0xffu8 {
                let n = step(dfa, cache, live, d, b)?;
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
fn read_class(slot: &mut Slot, s: LazyStateID) -> Result<Option<SliceClass>, LexerError> {
    let mut next = [None; 128];
    for b in 0..0x80u8 {
        next[b as usize] = step(&slot.dfa, &mut slot.cache, &mut slot.live, s, b)?;
    }
    let mut best: Option<(u32, LazyStateID)> = None;
    for (i, n) in next.iter().enumerate() {
        let Some(n) = *n else { continue };
        if next[..i].contains(&Some(n)) {
            continue;
        }
        let count = next.iter().filter(|&&x| x == Some(n)).count() as u32;
        if best.is_none_or(|(c, _)| count > c) {
            best = Some((count, n));
        }
    }
    let Some((count, target)) = best else {
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
        match class_step(&slot.dfa, &mut slot.cache, &mut slot.live, s, utf8)? {
            ClassStep::To(t) if t == target => utf8,
            _ => SliceClass { ascii, utf8: false },
        },
    ))
}

/// Most first bytes a [`Detour`] may walk itself; beyond this the whole trie is walked.
const MAX_DETOUR_BYTES: usize = 24;

/// Most state pairs [`equivalent`] explores before giving up (answering "not proven").
const MAX_EQUIV_PAIRS: usize = 8;

/// A state that behaves like another one except on a few first bytes: a key prefix shared
/// by listed names and the additional-key string (`"useArrow`: `K` continues a name, every
/// other character leaves for the string's free-text loop), an enum member that is also a
/// prefix of free text. For every first byte not in `except`, the state after it accepts the
/// same continuations as the state after it from `target`, so the tokens starting with such
/// bytes are allowed exactly when they are allowed from `target`, with the same lexeme
/// boundaries: the mask entry is `target`'s (shared by every such state) with the subtrees
/// of the `except` bytes walked afresh.
#[derive(Clone, Debug)]
struct Detour {
    target: LazyStateID,
    /// An ASCII byte leading from the state to `target`.
    via: u8,
    /// The first bytes on which the state and `target` differ, sorted.
    except: Vec<u8>,
}

/// The [`Detour`] of `s`, if it has one: `target` is the state most ASCII bytes lead to (at
/// least [`MIN_SLICE_ASCII`] of them, and not `s` itself: a loop is a slice's job), neither
/// state ends a lexeme, and at most [`MAX_DETOUR_BYTES`] first bytes lead the two states to
/// places not proven [`equivalent`]. Memoized per state.
fn detour_of(slot: &mut Slot, s: LazyStateID) -> Result<Option<Detour>, LexerError> {
    if let Some(d) = slot.detours.get(&s) {
        return Ok(d.clone());
    }
    let d = find_detour(slot, s)?;
    slot.detours.insert(s, d.clone());
    Ok(d)
}

fn find_detour(slot: &mut Slot, s: LazyStateID) -> Result<Option<Detour>, LexerError> {
    if slot.ends_lexeme(s)? {
        return Ok(None);
    }
    let mut next = [None; 256];
    for b in 0..=255u8 {
        next[b as usize] = step(&slot.dfa, &mut slot.cache, &mut slot.live, s, b)?;
    }
    let mut best: Option<(u32, LazyStateID)> = None;
    for (i, n) in next[..0x80].iter().enumerate() {
        let Some(n) = *n else { continue };
        if next[..i].contains(&Some(n)) {
            continue;
        }
        let count = next[..0x80].iter().filter(|&&x| x == Some(n)).count() as u32;
        if best.is_none_or(|(c, _)| count > c) {
            best = Some((count, n));
        }
    }
    let Some((count, target)) = best else {
        return Ok(None);
    };
    if count < MIN_SLICE_ASCII || target == s || slot.ends_lexeme(target)? {
        return Ok(None);
    }
    let mut except = Vec::new();
    for b in 0..=255u8 {
        let t = step(&slot.dfa, &mut slot.cache, &mut slot.live, target, b)?;
        let same = match (next[b as usize], t) {
            (None, None) => true,
            (Some(x), Some(y)) if x == y => true,
            // Inside a multi-byte character the two sides may sit in different states that
            // meet again once it is complete.
            (Some(x), Some(y)) if b >= 0x80 => equivalent(slot, x, y)?,
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
fn equivalent(slot: &mut Slot, x: LazyStateID, y: LazyStateID) -> Result<bool, LexerError> {
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
        slot.dfa.matches(&mut slot.cache, p, &mut mp)?;
        slot.dfa.matches(&mut slot.cache, q, &mut mq)?;
        mp.sort_unstable();
        mq.sort_unstable();
        if mp != mq {
            ok = false;
            break;
        }
        for b in 0..=255u8 {
            let np = step(&slot.dfa, &mut slot.cache, &mut slot.live, p, b)?;
            let nq = step(&slot.dfa, &mut slot.cache, &mut slot.live, q, b)?;
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
struct Chain {
    states: Vec<LazyStateID>,
    /// Whether every character of the class is rejected after the last state (a counted
    /// repetition at its bound): tokens of more than `states.len() - 1` characters are out.
    dead_end: bool,
}

impl Chain {
    /// Characters a token of the slice may have.
    fn chars(&self) -> u32 {
        if self.dead_end {
            self.states.len() as u32 - 1
        } else {
            u32::MAX
        }
    }

    /// The state after `d` characters (the last one repeats: it loops, or the chain is as
    /// long as the slice's deepest path).
    fn at(&self, d: u32) -> LazyStateID {
        self.states[(d as usize).min(self.states.len() - 1)]
    }
}

/// The state after `byte` if it is live (the text so far can still grow into a lexeme).
#[inline]
fn step(
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
    if !n.is_match() {
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

/// The byte-level recognizer: lexer frames over an Earley chart. Implements [`Recognizer`]
/// for the trie walk.
#[derive(Debug)]
struct Core {
    cg: Arc<CompiledGrammar>,
    chart: Chart,
    /// Lexeme set allowed after each parser row.
    row_sets: Vec<LexemeSetId>,
    slots: Vec<Option<Slot>>,
    local_ids: FxHashMap<Vec<LexemeId>, LexemeSetId>,
    stack: Vec<Frame>,
    /// The byte consumed by each frame after the first.
    bytes: Vec<u8>,
    scratch: Vec<LexemeId>,
    fuel: u64,
    ops: u64,
    deadline: Option<Instant>,
    mask_cache: FxHashMap<(LexemeSetId, LazyStateID, bool), Arc<MaskEntry>>,
    mask_cache_bytes: usize,
    /// Local lazy state → canonical state in the shared cache (see [`SharedMasks`]).
    canon_memo: FxHashMap<(LexemeSetId, LazyStateID), LazyStateID>,
    /// Scratch mask for the tokens after a first-byte boundary.
    next_mask: Option<TokenSet>,
    /// Set while a [`Detour`]'s target entry is being built (detours do not nest).
    in_detour: bool,
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
struct MaskEntry {
    inner: TokenSet,
    groups: Vec<(Vec<LexemeId>, Vec<u32>)>,
    first: Option<(Vec<LexemeId>, Vec<u32>)>,
}

impl MaskEntry {
    fn bytes(&self) -> usize {
        self.inner.as_words().len() * 8
            + self
                .groups
                .iter()
                .map(|(m, c)| 48 + m.len() * 4 + c.len() * 4)
                .sum::<usize>()
    }
}

/// The recognizer for a walk inside one lexeme: DFA steps only, recording boundary nodes.
struct LexemeWalk<'a> {
    dfa: &'a LexDfa,
    cache: &'a mut Cache,
    live: &'a mut FxHashMap<LazyStateID, bool>,
    states: Vec<LazyStateID>,
    at_start: bool,
    groups: Vec<(Vec<LexemeId>, Vec<u32>)>,
    /// Per DFA state: the index of its group, or `usize::MAX` if no lexeme ends there.
    memo: FxHashMap<LazyStateID, usize>,
    scratch: Vec<LexemeId>,
    /// Lexemes ending at the top state if some first byte closes it (depth-1 boundaries).
    first: Option<Vec<LexemeId>>,
    /// Root children whose byte extends the current lexeme.
    live_first: Vec<u32>,
    /// Whether `states[0]` sits at the trie root (false while walking a slice's frontier
    /// subtree under a deeper node: no first-byte boundary there).
    root: bool,
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

impl Core {
    fn new(cg: Arc<CompiledGrammar>) -> Result<Self, MatcherError> {
        let chart = Chart::new(&cg.parser, cg.limits.max_items_per_row)?;
        let mut core = Self {
            cg,
            chart,
            row_sets: Vec::new(),
            slots: Vec::new(),
            local_ids: FxHashMap::default(),
            stack: Vec::new(),
            bytes: Vec::new(),
            scratch: Vec::new(),
            fuel: u64::MAX,
            ops: 0,
            deadline: None,
            mask_cache: FxHashMap::default(),
            mask_cache_bytes: 0,
            canon_memo: FxHashMap::default(),
            next_mask: None,
            in_detour: false,
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

    fn start_step(&mut self) {
        self.fuel = self.cg.limits.step_fuel;
        self.deadline = self.cg.limits.step_time.map(|t| Instant::now() + t);
    }

    #[inline]
    fn tick(&mut self, n: u64) -> Result<(), MatcherError> {
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
    fn set_of_last_row(&mut self) -> Result<LexemeSetId, MatcherError> {
        self.scratch.clear();
        self.chart
            .allowed_lexemes(&self.cg.parser, &mut self.scratch);
        if self.scratch.is_empty() {
            return Ok(NO_SET);
        }
        if let Some(&id) = self.local_ids.get(self.scratch.as_slice()) {
            return Ok(id);
        }
        let (id, dfa) = self.cg.sets.intern(&self.scratch)?;
        if self.slots.len() <= id as usize {
            self.slots.resize_with(id as usize + 1, || None);
        }
        if self.slots[id as usize].is_none() {
            let mut cache = dfa.create_cache();
            let start = dfa.start(&mut cache)?;
            self.slots[id as usize] = Some(Slot {
                dfa,
                cache,
                start,
                live: FxHashMap::default(),
                class_steps: FxHashMap::default(),
                chain_class: FxHashMap::default(),
                detours: FxHashMap::default(),
                equiv: FxHashMap::default(),
                scratch: Vec::new(),
            });
        }
        self.local_ids.insert(self.scratch.clone(), id);
        Ok(id)
    }

    fn start_state(&self, set: LexemeSetId) -> Result<LazyStateID, MatcherError> {
        Ok(match self.slots.get(set as usize) {
            Some(Some(slot)) => slot.start,
            // NO_SET: any state will do, it is never stepped.
            _ => LazyStateID::default(),
        })
    }

    fn top(&self) -> Frame {
        *self
            .stack
            .last()
            .expect("the initial frame is never popped")
    }

    /// Scans the lexemes that end at the top frame into a new parser row. Returns false (and
    /// changes nothing) if no allowed lexeme ends here.
    fn close_lexeme(&mut self) -> Result<bool, MatcherError> {
        let top = self.top();
        if top.lex_len == 0 || top.set == NO_SET {
            return Ok(false);
        }
        self.scratch.clear();
        let Some(Some(slot)) = self.slots.get_mut(top.set as usize) else {
            return Ok(false);
        };
        slot.dfa
            .matches(&mut slot.cache, top.state, &mut self.scratch)?;
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

    fn pop_row(&mut self) {
        let rows = self.chart.rows_len() - 1;
        self.chart.truncate(rows);
        self.row_sets.truncate(rows);
    }

    /// Whether the bytes so far form a sentence of the grammar.
    fn is_accepting(&mut self) -> Result<bool, MatcherError> {
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

    fn push_byte(&mut self, byte: u8) -> Result<bool, MatcherError> {
        self.tick(1)?;
        let top = self.top();
        if top.set == NO_SET {
            return Ok(false);
        }
        let Some(Some(slot)) = self.slots.get_mut(top.set as usize) else {
            return Ok(false);
        };
        if let Some(next) = step(&slot.dfa, &mut slot.cache, &mut slot.live, top.state, byte)? {
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
        let Some(Some(slot)) = self.slots.get_mut(set as usize) else {
            self.pop_row();
            return Ok(false);
        };
        let next = match step(&slot.dfa, &mut slot.cache, &mut slot.live, slot.start, byte) {
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
    fn compute_cached(&mut self, mask: &mut TokenSet) -> Result<bool, MatcherError> {
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
            results.map.get(&key).cloned()
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
        if results.bytes + size > cg.limits.mask_cache_bytes {
            results.map.clear();
            results.bytes = 0;
        }
        results.bytes += size;
        results.map.insert(key, res);
        Ok(true)
    }

    /// Adds the allowed tokens (not EOS) to `mask`, using the in-lexeme mask cache. With
    /// `fresh`, `mask`'s previous contents are discarded: the cached in-lexeme part is copied
    /// over them instead of clearing first and uniting (one pass over the bitset instead of
    /// two; at 262k tokens each pass is 32 KiB, a large share of a cached mask's cost).
    fn add_allowed(&mut self, mask: &mut TokenSet, fresh: bool) -> Result<(), MatcherError> {
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
    fn next_lexeme_mask(
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
    fn start_next_lexeme(&mut self, matched: &[LexemeId]) -> Result<bool, MatcherError> {
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
    fn save(&self) -> (usize, usize) {
        (self.stack.len(), self.chart.rows_len())
    }

    fn restore(&mut self, (stack_len, rows): (usize, usize)) {
        self.stack.truncate(stack_len);
        self.bytes.truncate(stack_len - 1);
        self.chart.truncate(rows);
        self.row_sets.truncate(rows);
    }

    /// The canonical state of the top frame (see [`SharedMasks`]), or `None` if the shared
    /// cache cannot hold it (then the matcher-local cache is used).
    fn canonical(&mut self, top: Frame) -> Option<LazyStateID> {
        if let Some(&c) = self.canon_memo.get(&(top.set, top.state)) {
            return Some(c);
        }
        let Some(Some(slot)) = self.slots.get(top.set as usize) else {
            return None;
        };
        let lexeme = &self.bytes[self.bytes.len() - top.lex_len as usize..];
        let mut canon = self
            .cg
            .shared
            .canon
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let cache = canon
            .entry(top.set)
            .or_insert_with(|| slot.dfa.create_cache());
        let mut s = slot.dfa.start(cache).ok()?;
        for &b in lexeme {
            s = slot.dfa.next(cache, s, b).ok()?;
        }
        drop(canon);
        self.canon_memo.insert((top.set, top.state), s);
        Some(s)
    }

    fn shared_entry(
        &mut self,
        top: Frame,
        canon: LazyStateID,
    ) -> Result<Arc<MaskEntry>, MatcherError> {
        let key = (top.set, canon, top.lex_len == 0);
        let cg = self.cg.clone();
        {
            let shared = cg.shared.entries.read().unwrap_or_else(|e| e.into_inner());
            if let Some(e) = shared.map.get(&key) {
                return Ok(e.clone());
            }
        }
        let e = Arc::new(self.build_entry(top)?);
        let size = e.bytes();
        let mut shared = cg.shared.entries.write().unwrap_or_else(|e| e.into_inner());
        if shared.bytes + size > cg.limits.mask_cache_bytes {
            shared.map.clear();
            shared.bytes = 0;
        }
        shared.bytes += size;
        shared.map.insert(key, e.clone());
        Ok(e)
    }

    fn local_entry(&mut self, top: Frame) -> Result<Arc<MaskEntry>, MatcherError> {
        let cg = self.cg.clone();
        let key = (top.set, top.state, top.lex_len == 0);
        Ok(match self.mask_cache.get(&key) {
            Some(e) => e.clone(),
            None => {
                let e = Arc::new(self.build_entry(top)?);
                let size = e.bytes();
                if self.mask_cache_bytes + size > cg.limits.mask_cache_bytes {
                    self.mask_cache.clear();
                    self.mask_cache_bytes = 0;
                }
                self.mask_cache_bytes += size;
                self.mask_cache.insert(key, e.clone());
                e
            }
        })
    }

    /// Closes the current lexeme as `matched` and walks the `children` subtrees from the start
    /// of the next lexeme. The caller restores the stacks.
    fn expand_group(
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
    fn slice_for(&mut self, top: Frame) -> Result<Option<(Arc<TokenSlice>, Chain)>, MatcherError> {
        if top.lex_len == 0 || top.set == NO_SET {
            return Ok(None);
        }
        let Some(Some(slot)) = self.slots.get_mut(top.set as usize) else {
            return Ok(None);
        };
        let s = top.state;
        let class = match slot.chain_class.get(&s) {
            Some(&class) => class,
            None => match read_class(slot, s)? {
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
                    let st = class_step(&slot.dfa, &mut slot.cache, &mut slot.live, last, class)?;
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
                    if slot.ends_lexeme(last)? {
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
    fn detour_entry(&mut self, top: Frame) -> Result<Option<MaskEntry>, MatcherError> {
        if self.in_detour || top.lex_len == 0 || top.set == NO_SET {
            return Ok(None);
        }
        let Some(Some(slot)) = self.slots.get_mut(top.set as usize) else {
            return Ok(None);
        };
        let Some(d) = detour_of(slot, top.state)? else {
            return Ok(None);
        };
        let saved = self.save();
        self.in_detour = true;
        let target = (|| {
            if !self.push_byte(d.via)? {
                return Ok(None);
            }
            let t = self.top();
            if t.state != d.target || t.set != top.set {
                return Ok(None);
            }
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
        let roots: Vec<usize> = d
            .except
            .iter()
            .filter_map(|&b| trie.node_of(&[b]))
            .collect();
        let mut inner = target.inner.clone();
        for &c in &roots {
            trie.remove_subtree_tokens(c, &mut inner);
        }
        let outside = |n: u32| {
            !roots
                .iter()
                .any(|&c| trie.subtree(c).contains(&(n as usize)))
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
        let Some(Some(slot)) = self.slots.get_mut(top.set as usize) else {
            return Ok(None);
        };
        let mut walk = LexemeWalk {
            dfa: &slot.dfa,
            cache: &mut slot.cache,
            live: &mut slot.live,
            states: vec![top.state],
            at_start: false,
            groups: Vec::new(),
            memo: FxHashMap::default(),
            scratch: Vec::new(),
            first: None,
            live_first: Vec::new(),
            root: true,
        };
        let mut visited = 0;
        for &c in &roots {
            visited += trie.add_allowed_subtree(&mut walk, &mut inner, c)?;
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

    fn build_entry(&mut self, top: Frame) -> Result<MaskEntry, MatcherError> {
        if let Some(e) = self.detour_entry(top)? {
            return Ok(e);
        }
        let cg = self.cg.clone();
        let slice = self.slice_for(top)?;
        let Some(Some(slot)) = self.slots.get_mut(top.set as usize) else {
            return Ok(MaskEntry {
                inner: TokenSet::new(cg.env.trie().vocab_len()),
                groups: Vec::new(),
                first: None,
            });
        };
        let mut inner = TokenSet::new(cg.env.trie().vocab_len());
        let mut walk = LexemeWalk {
            dfa: &slot.dfa,
            cache: &mut slot.cache,
            live: &mut slot.live,
            states: vec![top.state],
            at_start: top.lex_len == 0,
            groups: Vec::new(),
            memo: FxHashMap::default(),
            scratch: Vec::new(),
            first: None,
            live_first: Vec::new(),
            root: true,
        };
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

    fn pop(&mut self, n: usize) {
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

/// The per-sequence state of constrained decoding. Cheap to create from a shared
/// [`CompiledGrammar`]; owns its lazy-DFA caches and Earley chart.
///
/// # Decode loop
/// `compute_mask` → sample a token in the mask → `consume_token` → repeat until the sampled
/// token is EOS (allowed exactly when [`is_accepting`](Self::is_accepting)).
#[derive(Debug)]
pub struct Matcher {
    core: Core,
    /// Frames on the stack before each consumed token (or `consume_bytes` call).
    marks: Vec<usize>,
    /// Whether each consumed step was an EOS.
    eos_marks: Vec<bool>,
    stopped: bool,
    error: Option<MatcherError>,
}

impl Matcher {
    /// A matcher at the start of the output.
    pub fn new(cg: Arc<CompiledGrammar>) -> Result<Self, MatcherError> {
        Ok(Self {
            core: Core::new(cg)?,
            marks: Vec::new(),
            eos_marks: Vec::new(),
            stopped: false,
            error: None,
        })
    }

    /// The compiled grammar.
    pub fn compiled(&self) -> &Arc<CompiledGrammar> {
        &self.core.cg
    }

    fn check(&self) -> Result<(), MatcherError> {
        match &self.error {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    fn fail(&mut self, e: MatcherError) -> MatcherError {
        self.error = Some(e.clone());
        e
    }

    /// Fills `mask` (cleared first) with every token that keeps the output viable, plus the
    /// EOS ids when the output is accepted. After EOS the mask is empty.
    ///
    /// # Panics
    /// If `mask`'s universe is not the vocabulary size.
    pub fn compute_mask(&mut self, mask: &mut TokenSet) -> Result<(), MatcherError> {
        self.check()?;
        let cg = self.core.cg.clone();
        assert_eq!(
            mask.universe_len(),
            cg.env.trie().vocab_len(),
            "mask universe must be the vocabulary size"
        );
        if self.stopped {
            mask.clear();
            return Ok(());
        }
        self.core.start_step();
        if cg.limits.mask_cache_bytes > 0 {
            match self.core.compute_cached(mask) {
                Ok(true) => return Ok(()),
                Ok(false) => {}
                Err(e) => return Err(self.fail(e)),
            }
        }
        if let Err(e) = self.core.add_allowed(mask, true) {
            return Err(self.fail(e));
        }
        match self.core.is_accepting() {
            Ok(true) => {
                for &t in cg.env.trie().eos_tokens() {
                    mask.insert(t);
                }
            }
            Ok(false) => {}
            Err(e) => return Err(self.fail(e)),
        }
        Ok(())
    }

    /// A one-line description of the matcher's state, for profiling dumps (the per-schema
    /// mask bench's `--id` mode): lexeme set and its allowed lexemes' names, DFA state, length
    /// of the current lexeme, parser rows and items, and the sizes of the shared mask caches.
    /// Not a stable format.
    pub fn debug_state(&self) -> String {
        let core = &self.core;
        let top = core.top();
        let cg = &core.cg;
        let names: Vec<&str> = if top.set == NO_SET {
            Vec::new()
        } else {
            cg.sets
                .get(top.set)
                .lexemes()
                .iter()
                .map(|l| cg.grammar.lexemes()[l.as_usize()].name.as_str())
                .collect()
        };
        let shown = names.iter().take(4).copied().collect::<Vec<_>>().join(",");
        let more = names.len().saturating_sub(4);
        let entries = cg.shared.entries.read().map(|e| e.map.len()).unwrap_or(0);
        let results = cg.shared.results.read().map(|r| r.map.len()).unwrap_or(0);
        let detours = cg.shared.detours.load(std::sync::atomic::Ordering::Relaxed);
        format!(
            "set {} [{shown}{}] state {:?} lex_len {} rows {} items {} entries {entries} \
             (detours {detours}) results {results}",
            top.set,
            if more > 0 {
                format!(",+{more}")
            } else {
                String::new()
            },
            top.state,
            top.lex_len,
            core.chart.rows_len(),
            core.chart.items_len(),
        )
    }

    /// Whether `token` is in the mask [`compute_mask`](Self::compute_mask) would fill now,
    /// without computing the mask and without changing the state: the token's bytes are pushed
    /// and popped again, O(token bytes) DFA steps plus one Earley row per lexeme boundary. For
    /// the "check the sampled token first" trick (matching llama.cpp): sample unconstrained,
    /// and compute the whole mask only if the token is refused.
    ///
    /// `Ok(false)` leaves no error behind; ids outside the vocabulary, special tokens and
    /// anything after EOS are simply not allowed. Only a sticky error or a budget running out
    /// (which becomes sticky, as in every other step) is an `Err`.
    ///
    /// # Example
    /// ```
    /// use std::sync::Arc;
    /// use formwork_core::grammar::GrammarBuilder;
    /// use formwork_core::matcher::{CompiledGrammar, Limits, Matcher};
    /// use formwork_core::toktrie::{SyntheticVocab, TokenId};
    ///
    /// let mut b = GrammarBuilder::new();
    /// let digits = b.lexeme("digits", "[0-9]+");
    /// let start = b.define("n", vec![vec![formwork_core::grammar::Symbol::Lexeme(digits)]]);
    /// let vocab = Arc::new(SyntheticVocab::byte_level());
    /// let mut m = Matcher::new(Arc::new(CompiledGrammar::new(b.build(start)?, vocab, Limits::default())?))?;
    /// assert!(m.is_token_allowed(TokenId(b'7' as u32))?);
    /// assert!(!m.is_token_allowed(TokenId(b'x' as u32))?);
    /// assert!(!m.is_token_allowed(TokenId(256))?); // EOS: nothing consumed yet
    /// m.consume_bytes(b"7")?;
    /// assert!(m.is_token_allowed(TokenId(256))?);
    /// # Ok::<(), formwork_core::Error>(())
    /// ```
    pub fn is_token_allowed(&mut self, token: TokenId) -> Result<bool, MatcherError> {
        self.check()?;
        let cg = self.core.cg.clone();
        if self.stopped || token.as_usize() >= cg.env.trie().vocab_len() {
            return Ok(false);
        }
        self.core.start_step();
        if cg.env.trie().is_eos(token) {
            return self.core.is_accepting().map_err(|e| self.fail(e));
        }
        if !cg.env.trie().has_token(token) {
            return Ok(false);
        }
        let mark = self.core.stack.len();
        let mut r = Ok(true);
        for &b in cg.env.vocab().token_bytes(token) {
            match self.core.push_byte(b) {
                Ok(true) => {}
                other => {
                    r = other;
                    break;
                }
            }
        }
        self.core.pop(self.core.stack.len() - mark);
        r.map_err(|e| self.fail(e))
    }

    /// Consumes one token (an EOS id stops the matcher if the output is accepted).
    pub fn consume_token(&mut self, token: TokenId) -> Result<(), MatcherError> {
        self.check()?;
        let cg = self.core.cg.clone();
        if self.stopped {
            return Err(self.fail(MatcherError::Stopped));
        }
        if token.as_usize() >= cg.env.trie().vocab_len() {
            return Err(self.fail(MatcherError::TokenOutOfRange {
                token: token.0,
                vocab_len: cg.env.trie().vocab_len(),
            }));
        }
        self.core.start_step();
        if cg.env.trie().is_eos(token) {
            return match self.core.is_accepting() {
                Ok(true) => {
                    self.marks.push(self.core.stack.len());
                    self.eos_marks.push(true);
                    self.stopped = true;
                    Ok(())
                }
                Ok(false) => Err(self.fail(MatcherError::EosNotAccepted {
                    offset: self.core.bytes.len(),
                })),
                Err(e) => Err(self.fail(e)),
            };
        }
        if !cg.env.trie().has_token(token) {
            return Err(self.fail(MatcherError::TokenRejected {
                token: token.0,
                offset: self.core.bytes.len(),
            }));
        }
        let mark = self.core.stack.len();
        for &b in cg.env.vocab().token_bytes(token) {
            match self.core.push_byte(b) {
                Ok(true) => {}
                Ok(false) => {
                    let offset = self.core.bytes.len();
                    self.core.pop(self.core.stack.len() - mark);
                    return Err(self.fail(MatcherError::TokenRejected {
                        token: token.0,
                        offset,
                    }));
                }
                Err(e) => {
                    self.core.pop(self.core.stack.len() - mark);
                    return Err(self.fail(e));
                }
            }
        }
        self.marks.push(mark);
        self.eos_marks.push(false);
        Ok(())
    }

    /// Consumes tokens in order; stops at the first error.
    pub fn consume_tokens(&mut self, tokens: &[TokenId]) -> Result<(), MatcherError> {
        tokens.iter().try_for_each(|&t| self.consume_token(t))
    }

    /// Consumes raw bytes (for tests and for feeding known text). Counts as one step for
    /// [`rollback`](Self::rollback).
    pub fn consume_bytes(&mut self, bytes: &[u8]) -> Result<(), MatcherError> {
        self.check()?;
        if self.stopped {
            return Err(self.fail(MatcherError::Stopped));
        }
        self.core.start_step();
        let mark = self.core.stack.len();
        for &b in bytes {
            match self.core.push_byte(b) {
                Ok(true) => {}
                Ok(false) => {
                    let offset = self.core.bytes.len();
                    self.core.pop(self.core.stack.len() - mark);
                    return Err(self.fail(MatcherError::ByteRejected { byte: b, offset }));
                }
                Err(e) => {
                    self.core.pop(self.core.stack.len() - mark);
                    return Err(self.fail(e));
                }
            }
        }
        self.marks.push(mark);
        self.eos_marks.push(false);
        Ok(())
    }

    /// Whether the output so far is a sentence of the grammar (so EOS is allowed). Returns
    /// false in the error state.
    pub fn is_accepting(&mut self) -> bool {
        if self.error.is_some() {
            return false;
        }
        if self.stopped {
            return true;
        }
        self.core.start_step();
        match self.core.is_accepting() {
            Ok(a) => a,
            Err(e) => {
                self.fail(e);
                false
            }
        }
    }

    /// Whether an EOS token has been consumed.
    pub fn is_stopped(&self) -> bool {
        self.stopped
    }

    /// The sticky error, if any.
    pub fn error(&self) -> Option<&MatcherError> {
        self.error.as_ref()
    }

    /// The output bytes consumed so far.
    pub fn output(&self) -> &[u8] {
        &self.core.bytes
    }

    /// Number of steps (tokens, EOS, `consume_bytes` calls) that can be rolled back.
    pub fn steps_len(&self) -> usize {
        self.marks.len()
    }

    /// Undoes the last `n` steps (tokens, including an EOS, or `consume_bytes` calls), for
    /// speculative decoding. Does not clear a sticky error. O(bytes rolled back).
    pub fn rollback(&mut self, n: usize) -> Result<(), MatcherError> {
        self.check()?;
        if n > self.marks.len() {
            return Err(MatcherError::RollbackTooFar {
                requested: n,
                available: self.marks.len(),
            });
        }
        if n == 0 {
            return Ok(());
        }
        let keep = self.marks.len() - n;
        let mark = self.marks[keep];
        self.marks.truncate(keep);
        self.eos_marks.truncate(keep);
        self.stopped = false;
        self.core.pop(self.core.stack.len() - mark);
        Ok(())
    }

    /// Back to the start of the output; clears a sticky error. Keeps the DFA caches.
    pub fn reset(&mut self) {
        let len = self.core.stack.len();
        self.core.pop(len - 1);
        self.marks.clear();
        self.eos_marks.clear();
        self.stopped = false;
        self.error = None;
    }

    /// The bytes that must come next whatever is sampled (fast-forward): extended one byte at a
    /// time while exactly one byte keeps the output viable and the output is not accepted.
    /// Empty after EOS. Costs 256 byte trials per forced byte.
    pub fn compute_forced_bytes(&mut self) -> Result<Vec<u8>, MatcherError> {
        self.check()?;
        let mut out = Vec::new();
        if self.stopped {
            return Ok(out);
        }
        self.core.start_step();
        let r = self.forced_bytes_inner(&mut out);
        self.core.pop(out.len());
        match r {
            Ok(()) => Ok(out),
            Err(e) => Err(self.fail(e)),
        }
    }

    fn forced_bytes_inner(&mut self, out: &mut Vec<u8>) -> Result<(), MatcherError> {
        let max = self.core.cg.limits.max_forced_bytes;
        while out.len() < max {
            if self.core.is_accepting()? {
                return Ok(());
            }
            let mut only = None;
            for b in 0..=255u8 {
                if self.core.push_byte(b)? {
                    self.core.pop(1);
                    if only.is_some() {
                        return Ok(());
                    }
                    only = Some(b);
                }
            }
            match only {
                Some(b) => {
                    self.core.push_byte(b)?;
                    out.push(b);
                }
                None => return Ok(()),
            }
        }
        Ok(())
    }

    /// The forced bytes as tokens, tokenized canonically by the vocabulary, with trailing
    /// tokens backed off while a longer token could span the end of the forced bytes (so the
    /// model never sees a tokenization it would not produce itself).
    pub fn compute_forced_tokens(&mut self) -> Result<Vec<TokenId>, MatcherError> {
        let bytes = self.compute_forced_bytes()?;
        let cg = self.core.cg.clone();
        Ok(canonical_prefix(
            cg.env.vocab().as_ref(),
            cg.env.trie(),
            &bytes,
        ))
    }
}

/// `tokenize(bytes)` with trailing tokens dropped from the first token `i` whose bytes up to the
/// end of `bytes` are a proper prefix of some token: text after `bytes` could merge with them.
pub fn canonical_prefix(vocab: &dyn Vocab, trie: &TokTrie, bytes: &[u8]) -> Vec<TokenId> {
    let mut toks = vocab.tokenize(bytes);
    let mut offsets = Vec::with_capacity(toks.len());
    let mut off = 0;
    for &t in &toks {
        offsets.push(off);
        off += vocab.token_bytes(t).len();
    }
    let max = trie.max_token_len();
    let cut = (0..toks.len()).find(|&i| {
        let tail = &bytes[offsets[i].min(bytes.len())..];
        tail.len() < max && trie.has_extension(tail)
    });
    if let Some(i) = cut {
        toks.truncate(i);
    }
    toks
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grammar::{GrammarBuilder, Symbol};
    use crate::toktrie::SyntheticVocab;

    fn words_grammar() -> Grammar {
        // s ::= word ("," word)* ; word ::= /[a-z]+/
        let mut b = GrammarBuilder::new();
        let word = b.lexeme("word", "[a-z]+");
        let comma = b.literal(",");
        let s = b.rule_ref("s");
        b.define(
            "s",
            vec![
                vec![Symbol::Lexeme(word)],
                vec![Symbol::Rule(s), Symbol::Lexeme(comma), Symbol::Lexeme(word)],
            ],
        );
        b.build(s).unwrap()
    }

    fn matcher(g: Grammar, v: SyntheticVocab) -> Matcher {
        let cg = CompiledGrammar::new(g, Arc::new(v), Limits::default()).unwrap();
        Matcher::new(Arc::new(cg)).unwrap()
    }

    fn tok(v: &dyn Vocab, s: &str) -> TokenId {
        (0..v.vocab_len() as u32)
            .map(TokenId)
            .find(|&t| v.token_bytes(t) == s.as_bytes() && !v.is_special(t))
            .unwrap()
    }

    #[test]
    fn mask_follows_lexeme_boundaries() {
        let v = SyntheticVocab::new(vec![b"ab".to_vec(), b"b,c".to_vec(), b",,".to_vec()])
            .with_eos("</s>");
        let vv = v.clone();
        let mut m = matcher(words_grammar(), v);
        let mut mask = TokenSet::new(vv.vocab_len());
        m.compute_mask(&mut mask).unwrap();
        assert!(mask.contains(tok(&vv, "ab")));
        assert!(mask.contains(tok(&vv, "b,c")));
        assert!(!mask.contains(tok(&vv, ",")));
        assert!(!mask.contains(vv.eos_tokens()[0]));
        m.consume_token(tok(&vv, "ab")).unwrap();
        m.compute_mask(&mut mask).unwrap();
        assert!(mask.contains(tok(&vv, "b,c")));
        assert!(mask.contains(tok(&vv, ",")));
        assert!(!mask.contains(tok(&vv, ",,")));
        assert!(mask.contains(vv.eos_tokens()[0]));
        m.consume_token(tok(&vv, "b,c")).unwrap();
        assert!(m.is_accepting());
        assert_eq!(m.output(), b"abb,c");
        m.consume_token(vv.eos_tokens()[0]).unwrap();
        assert!(m.is_stopped());
        m.compute_mask(&mut mask).unwrap();
        assert!(mask.is_empty());
    }

    #[test]
    fn errors_are_sticky_until_reset() {
        let v = SyntheticVocab::byte_level();
        let mut m = matcher(words_grammar(), v);
        m.consume_bytes(b"ab").unwrap();
        let e = m.consume_bytes(b"!").unwrap_err();
        assert_eq!(
            e,
            MatcherError::ByteRejected {
                byte: b'!',
                offset: 2
            }
        );
        assert_eq!(m.consume_bytes(b"c"), Err(e.clone()));
        m.reset();
        m.consume_bytes(b"c").unwrap();
        assert_eq!(m.output(), b"c");
    }

    #[test]
    fn rollback_restores_state() {
        let v = SyntheticVocab::byte_level();
        let mut m = matcher(words_grammar(), v);
        let mut before = TokenSet::new(257);
        let mut after = TokenSet::new(257);
        m.consume_bytes(b"ab").unwrap();
        m.compute_mask(&mut before).unwrap();
        m.consume_token(TokenId(b',' as u32)).unwrap();
        m.consume_token(TokenId(b'x' as u32)).unwrap();
        m.rollback(2).unwrap();
        m.compute_mask(&mut after).unwrap();
        assert_eq!(before, after);
        assert_eq!(m.output(), b"ab");
        assert!(matches!(
            m.rollback(5),
            Err(MatcherError::RollbackTooFar { .. })
        ));
    }

    #[test]
    fn forced_bytes_of_a_literal() {
        let mut b = GrammarBuilder::new();
        let lit = b.literal("{\"name\":");
        let num = b.lexeme("num", "[0-9]+");
        let s = b.define("s", vec![vec![Symbol::Lexeme(lit), Symbol::Lexeme(num)]]);
        let v = SyntheticVocab::new(vec![
            b"{\"".to_vec(),
            b"name".to_vec(),
            b"\":".to_vec(),
            b"\":1".to_vec(),
        ]);
        let vv = v.clone();
        let mut m = matcher(b.build(s).unwrap(), v);
        assert_eq!(m.compute_forced_bytes().unwrap(), b"{\"name\":");
        // `":` could grow into `":1`, so it is backed off.
        let toks = m.compute_forced_tokens().unwrap();
        let text: Vec<&[u8]> = toks.iter().map(|&t| vv.token_bytes(t)).collect();
        assert_eq!(text, vec![&b"{\""[..], b"name"]);
    }

    #[test]
    fn grammars_compiled_from_one_env_share_its_trie() {
        let v = SyntheticVocab::new(vec![b"ab".to_vec(), b"b,c".to_vec()]).with_eos("</s>");
        let env = TokEnv::new(Arc::new(v.clone()));
        let a =
            Arc::new(CompiledGrammar::with_env(words_grammar(), &env, Limits::default()).unwrap());
        let b =
            Arc::new(CompiledGrammar::with_env(words_grammar(), &env, Limits::default()).unwrap());
        assert!(Arc::ptr_eq(a.tok_env().trie_arc(), b.tok_env().trie_arc()));
        assert!(Arc::ptr_eq(a.tok_env().trie_arc(), env.trie_arc()));
        // Same masks as a grammar compiled with its own trie.
        let own = Arc::new(
            CompiledGrammar::new(words_grammar(), Arc::new(v.clone()), Limits::default()).unwrap(),
        );
        let (mut x, mut y) = (TokenSet::new(v.vocab_len()), TokenSet::new(v.vocab_len()));
        let (mut ma, mut mo) = (Matcher::new(a).unwrap(), Matcher::new(own).unwrap());
        for step in [&b"ab"[..], b",", b"b"] {
            ma.compute_mask(&mut x).unwrap();
            mo.compute_mask(&mut y).unwrap();
            assert_eq!(x, y);
            ma.consume_bytes(step).unwrap();
            mo.consume_bytes(step).unwrap();
        }
    }

    /// Nested lists of words and strings: `value ::= word | str | "[" "]" | "[" items "]"`,
    /// `items ::= value | items "," value`. Boundaries inside tokens cross nesting levels,
    /// so cached masks depend on the parser rows, not only on the lexer state.
    fn lists_grammar() -> Grammar {
        lists_of([("word", "[a-z]+"), ("str", r#""[a-z,\[\]]*""#)])
    }

    /// `value ::= leaf | "[" "]" | "[" items "]"`, `items ::= value | items "," value`, with
    /// one alternative per `(name, regex)` leaf lexeme.
    fn lists_of(leaves: [(&str, &str); 2]) -> Grammar {
        let mut b = GrammarBuilder::new();
        let mut alts: Vec<Vec<Symbol>> = leaves
            .iter()
            .map(|&(name, re)| vec![Symbol::Lexeme(b.lexeme(name, re))])
            .collect();
        let open = Symbol::Lexeme(b.literal("["));
        let close = Symbol::Lexeme(b.literal("]"));
        let comma = Symbol::Lexeme(b.literal(","));
        let value = Symbol::Rule(b.rule_ref("value"));
        let items = Symbol::Rule(b.rule_ref("items"));
        b.define("items", vec![vec![value], vec![items, comma, value]]);
        alts.push(vec![open, close]);
        alts.push(vec![open, items, close]);
        let v = b.define("value", alts);
        b.build(v).unwrap()
    }

    /// Seeded xorshift, so the walks are the same on every run.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
    }

    /// Random tokens of 1–5 pieces drawn from `pieces`, plus each piece alone.
    fn random_vocab(rng: &mut Rng, pieces: &[&[u8]]) -> SyntheticVocab {
        let mut toks: Vec<Vec<u8>> = (0..400)
            .map(|_| {
                let len = 1 + rng.next() as usize % 5;
                (0..len)
                    .flat_map(|_| pieces[rng.next() as usize % pieces.len()].to_vec())
                    .collect()
            })
            .collect();
        toks.extend(pieces.iter().map(|p| p.to_vec()));
        SyntheticVocab::new(toks).with_eos("</s>")
    }

    /// Random walks by several matchers sharing one compiled grammar with the caches on (so
    /// later walks hit entries stored by earlier ones, at other positions and depths), each
    /// mask compared with a plain trie walk (caches off), and after rollbacks. Returns the
    /// cached compiled grammar for further checks.
    fn compare_cached_with_plain(
        g: fn() -> Grammar,
        v: &SyntheticVocab,
        rng: &mut Rng,
    ) -> Arc<CompiledGrammar> {
        let vocab: Arc<dyn Vocab> = Arc::new(v.clone());
        let cached = Arc::new(CompiledGrammar::new(g(), vocab.clone(), Limits::default()).unwrap());
        let plain_limits = Limits {
            mask_cache_bytes: 0,
            ..Limits::default()
        };
        let plain = Arc::new(CompiledGrammar::new(g(), vocab, plain_limits).unwrap());
        let (mut got, mut want) = (TokenSet::new(v.vocab_len()), TokenSet::new(v.vocab_len()));
        let mut steps = 0;
        for walk in 0..40 {
            let mut m = Matcher::new(cached.clone()).unwrap();
            let mut p = Matcher::new(plain.clone()).unwrap();
            let mut masks = Vec::new();
            for step in 0..30 {
                m.compute_mask(&mut got).unwrap();
                p.compute_mask(&mut want).unwrap();
                assert_eq!(
                    got,
                    want,
                    "walk {walk} step {step} after {:?}",
                    String::from_utf8_lossy(p.output())
                );
                masks.push(got.clone());
                let allowed: Vec<TokenId> = want.iter().collect();
                if allowed.is_empty() {
                    break;
                }
                // Prefer text over EOS so walks get deep.
                let t = allowed[rng.next() as usize % allowed.len()];
                if v.eos_tokens().contains(&t) && allowed.len() > 1 {
                    continue;
                }
                m.consume_token(t).unwrap();
                p.consume_token(t).unwrap();
                if m.is_stopped() {
                    break;
                }
            }
            // Roll back a few tokens: the masks there are cached hits and equal the old ones.
            let back = m.steps_len().min(1 + walk % 4);
            m.rollback(back).unwrap();
            m.compute_mask(&mut got).unwrap();
            assert_eq!(
                got,
                masks[m.steps_len()],
                "walk {walk} after rollback({back})"
            );
            steps += m.steps_len();
        }
        assert!(steps > 100, "walks too short to exercise the caches");
        cached
    }

    /// The whole-mask cache (`MaskResult`, keyed by lexer state and row signature) and the
    /// in-lexeme cache give the same masks as plain trie walks.
    #[test]
    fn cached_masks_equal_fresh_ones_over_random_walks() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let pieces: Vec<&[u8]> = vec![b"[", b"]", b",", b"a", b"b", b"\""];
        let v = random_vocab(&mut rng, &pieces);
        let cached = compare_cached_with_plain(lists_grammar, &v, &mut rng);
        assert!(!cached.shared.results.read().unwrap().map.is_empty());
        assert!(cached.shared.sigs.len() > 1);
    }

    /// Lists of free-text strings: `"[^"\\]*"` (any character but quote and backslash,
    /// Unicode) and `'[ -&(-~]*'` (printable ASCII but the quote), whose interior states loop
    /// on 94+ ASCII bytes and so are walked through vocabulary slices.
    fn text_grammar() -> Grammar {
        lists_of([("dq", r#""[^"\\]*""#), ("sq", r"'[ -&(-~]*'")])
    }

    /// Masks inside free-text lexemes built from vocabulary slices (the slice's tokens at once,
    /// then only the frontier subtrees walked) equal plain walks, with tokens holding whole,
    /// partial and malformed UTF-8, quotes and backslashes at every position.
    #[test]
    fn sliced_masks_equal_fresh_ones_over_random_walks() {
        let mut rng = Rng(0x2545_f491_4f6c_dd1d);
        let pieces: Vec<&[u8]> = vec![
            b"\"",
            b"'",
            b"[",
            b"]",
            b",",
            b"a",
            b" ",
            b"\\",
            b"\xc3\xa9",
            b"\xc3",
            b"\xa9",
            b"\xe2\x82\xac",
            b"\xe2\x82",
            b"\xed\xa0\x80",
            b"\xf0\x9f\x98\x80",
            b"\xff",
            b"\n",
        ];
        let v = random_vocab(&mut rng, &pieces);
        let cached = compare_cached_with_plain(text_grammar, &v, &mut rng);
        let slices = cached.env.slice_classes();
        assert!(slices.iter().any(|c| c.utf8), "{slices:?}");
        assert!(slices.iter().any(|c| !c.utf8), "{slices:?}");
    }

    /// Lists of strings with counted repetitions (a JSON string with `minLength` /
    /// `maxLength`): content states advance one state per character instead of looping, so
    /// slices are walked along a chain of states, up to a dead end at the bound. Bounds below
    /// and above the longest token exercise partial chains (only the slice's short tokens),
    /// dead ends, and chains as long as the slice's deepest path.
    fn counted_grammar() -> Grammar {
        lists_of([
            ("dq", r#""(?:[^"\\]|\\["\\n]){1,7}""#),
            ("sq", r"'[ -&(-~]{0,40}'"),
        ])
    }

    #[test]
    fn counted_string_masks_equal_fresh_ones_over_random_walks() {
        let mut rng = Rng(0x6a09_e667_f3bc_c908);
        let pieces: Vec<&[u8]> = vec![
            b"\"",
            b"'",
            b"[",
            b"]",
            b",",
            b"a",
            b"bc",
            b" ",
            b"\\",
            b"n",
            b"\xc3\xa9",
            b"\xc3",
            b"\xe2\x82\xac",
            b"\xf0\x9f\x98\x80",
            b"\xff",
            b"\n",
        ];
        let v = random_vocab(&mut rng, &pieces);
        let cached = compare_cached_with_plain(counted_grammar, &v, &mut rng);
        assert!(!cached.env.slice_classes().is_empty());
    }

    /// A name and a free string in one lexeme set, the shape of an object key where a listed
    /// name shares the quote with the additional-key string (which excludes the name, here
    /// every string starting with it, and is followed by something else): `"ab"` then `!`,
    /// any other string alone, or lists of them. Inside the name's prefix (`"a`) the state differs from the string's loop only on
    /// the byte continuing the name, so its entries are built through detours (the loop's
    /// entry, with that byte's subtree taken out and walked afresh).
    fn names_grammar() -> Grammar {
        let mut b = GrammarBuilder::new();
        let name = Symbol::Lexeme(b.lexeme("name", r#""ab""#));
        // Any string of [^"\\] not starting with "ab": after `"ab` only the name goes on.
        let other = r#""(?:[^a"\\][^"\\]*|a(?:[^b"\\][^"\\]*)?)?""#;
        let string = Symbol::Lexeme(b.lexeme("string", other));
        let bang = Symbol::Lexeme(b.literal("!"));
        let open = Symbol::Lexeme(b.literal("["));
        let close = Symbol::Lexeme(b.literal("]"));
        let comma = Symbol::Lexeme(b.literal(","));
        let value = Symbol::Rule(b.rule_ref("value"));
        let items = Symbol::Rule(b.rule_ref("items"));
        b.define("items", vec![vec![value], vec![items, comma, value]]);
        let v = b.define(
            "value",
            vec![
                vec![name, bang],
                vec![string],
                vec![open, close],
                vec![open, items, close],
            ],
        );
        b.build(v).unwrap()
    }

    #[test]
    fn name_prefix_masks_equal_fresh_ones_over_random_walks() {
        let mut rng = Rng(0x3c6e_f372_fe94_f82b);
        let pieces: Vec<&[u8]> = vec![
            b"\"",
            b"[",
            b"]",
            b",",
            b"a",
            b"ab",
            b"b",
            b"b\"",
            b"b\"]",
            b"ab\",",
            b"!",
            b"c",
            b"q",
            b" ",
            b"\\",
            b"n",
            b"\xc3\xa9",
            b"\xc3",
            b"\xe2\x82\xac",
            b"\xff",
        ];
        let v = random_vocab(&mut rng, &pieces);
        let cached = compare_cached_with_plain(names_grammar, &v, &mut rng);
        let detours = cached
            .shared
            .detours
            .load(std::sync::atomic::Ordering::Relaxed);
        assert!(detours > 0, "no entry was built through a detour");
    }

    #[test]
    fn nullable_lexeme_becomes_optional() {
        // s ::= "[" /[0-9]*/ "]"
        let mut b = GrammarBuilder::new();
        let open = b.literal("[");
        let digits = b.lexeme("digits", "[0-9]*");
        let close = b.literal("]");
        let s = b.define(
            "s",
            vec![vec![
                Symbol::Lexeme(open),
                Symbol::Lexeme(digits),
                Symbol::Lexeme(close),
            ]],
        );
        let mut m = matcher(b.build(s).unwrap(), SyntheticVocab::byte_level());
        m.consume_bytes(b"[]").unwrap();
        assert!(m.is_accepting());
        m.reset();
        m.consume_bytes(b"[12]").unwrap();
        assert!(m.is_accepting());
    }
}
