//! The lexer: lexemes compiled to lazy DFAs (`regex_automata::hybrid`), stepped byte by byte.
//!
//! Owns: checking each lexeme's parsed regex (the grammar's HIRs, shared, never reparsed:
//! [`LexerSpec`]), and one multi-pattern
//! anchored lazy DFA per distinct *set of allowed lexemes* the parser asks for
//! ([`LexemeSets`], built on first use and cached behind a lock in the compiled grammar).
//!
//! # Exceptions
//! A set with a [`LexemeKind::Except`](crate::grammar::LexemeKind::Except) lexeme also builds
//! the excepted lexemes into its automaton, as patterns that are never reported themselves
//! (unless the set allows them) but drop the excepting lexeme's match where they match. The
//! automaton depends only on those patterns, not on which of them the set allows, so sets
//! that differ only there share one automaton: the key sets at each position of an object
//! (the names not yet written, plus "any other name") are built once per object, not once per
//! position.
//! Liveness relies on a precondition of exceptions (a proper prefix of an excepted text is a
//! proper prefix of a text the excepting lexeme still matches), which holds for a quoted
//! unbounded repetition excepting literals; a set with any other exception (a regex: "a key
//! no pattern matches") searches the automaton for a reported match instead.
//! Does not own the greedy lexing policy (the matcher applies it) nor the per-sequence DFA
//! caches (each matcher owns its `hybrid::dfa::Cache`s).
//!
//! # Semantics
//! A lexeme never matches the empty string here: the parser turns a lexeme whose regex accepts
//! `""` into an optional symbol instead (`L? `, with the DFA only reporting non-empty matches
//! because the matcher never asks for a match before the first byte). This makes greedy maximal
//! munch well defined: every lexeme consumes at least one byte.
//!
//! # Invariants
//! Lexeme regexes carry no look-around (`^`, `$`, `\b`): a lexeme is matched as a whole, so
//! anchors are meaningless and are rejected with [`LexerError::Unsupported`]. The DFA caches are
//! never cleared (`minimum_cache_clear_count(Some(0))`), so lazy state ids stay valid for the
//! life of a matcher; a full cache is the error [`LexerError::CacheExhausted`], not a silent
//! slowdown.
//!
//! # Costs
//! A transition already computed is one table lookup; a new one runs a step of the subset
//! construction (O(NFA states)). Building a set's DFA compiles its lexemes' NFA, O(HIR size).
//! regex-automata reports matches one byte late, so "does a lexeme end exactly here" is asked
//! with `next_eoi_state` ([`LexDfa::matches`]).
//!
//! May use: `grammar`.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use regex_automata::hybrid::dfa::{Cache, DFA};
use regex_automata::hybrid::LazyStateID;
use regex_automata::nfa::thompson;
use regex_automata::util::start;
use regex_automata::{Anchored, MatchKind};
use regex_syntax::hir::{Hir, HirKind};

use crate::grammar::{Grammar, LexemeId};

/// An error compiling or running the lexer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LexerError {
    /// A lexeme's regex does not parse.
    #[error("invalid regex for lexeme `{name}`: {message}")]
    InvalidRegex {
        /// The lexeme's name.
        name: String,
        /// What regex-syntax said.
        message: String,
    },
    /// A lexeme uses a regex feature lexemes do not support.
    #[error("unsupported {what} in lexeme `{name}`")]
    Unsupported {
        /// The lexeme's name.
        name: String,
        /// The feature, e.g. "look-around assertion".
        what: &'static str,
    },
    /// The automaton for a set of lexemes could not be built (NFA too large, cache limit below
    /// the automaton's minimum).
    #[error("cannot build the lexer for {lexemes} lexemes: {message}")]
    Build {
        /// How many lexemes the set had.
        lexemes: usize,
        /// What regex-automata said.
        message: String,
    },
    /// A lazy DFA's cache filled up: the grammar needs more lexer states than the budget.
    #[error("lexer state budget exceeded: cache limit of {limit} bytes is full")]
    CacheExhausted {
        /// The configured cache capacity, bytes.
        limit: usize,
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
}

/// Lexer budgets (a part of the matcher's `Limits`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LexerLimits {
    /// Bytes of lazy-DFA cache per lexeme set per matcher. Default 4 MiB: enough for tens of
    /// thousands of states of JSON-like lexemes; a full cache is an error.
    pub cache_bytes: usize,
    /// Bytes of NFA per lexeme set. Default 16 MiB (about 10× a `\w+`-heavy schema's need).
    pub nfa_bytes: usize,
    /// Distinct lexeme sets (hence DFAs) per compiled grammar. Default 20,000.
    pub max_sets: usize,
}

impl Default for LexerLimits {
    fn default() -> Self {
        Self {
            cache_bytes: 4 << 20,
            nfa_bytes: 16 << 20,
            max_sets: 20_000,
        }
    }
}

thread_local! {
    /// One Thompson compiler per thread, reused by every [`LexerSpec::build_dfa`]. A new
    /// compiler allocates and fills its UTF-8 state cache (10,000 entries, ~330 KB) on its first
    /// Unicode class, and dropping them again was ~40% of building a lexeme set's automaton (the
    /// MaskBench sample's cold masks); a reused one only bumps their version. Each build clears the
    /// compiler's builder first and sets every option it uses, so no state crosses builds.
    static NFA_COMPILER: RefCell<thompson::Compiler> = RefCell::new(thompson::Compiler::new());
}

/// The lexemes of one grammar: the grammar's parsed regexes, checked.
#[derive(Debug)]
pub struct LexerSpec {
    hirs: Arc<[Arc<Hir>]>,
    /// Whether the lexeme's regex matches `""`.
    nullable: Vec<bool>,
    /// Whether the lexeme matches some non-empty string.
    nonempty: Vec<bool>,
    /// The lexemes each lexeme excepts ([`Lexeme::except`](crate::grammar::Lexeme::except)).
    except: Vec<Vec<LexemeId>>,
    /// Per lexeme: whether its exceptions keep the precondition liveness relies on without a
    /// search (see [`LexerSpec::prefix_safe`]); `true` for lexemes without exceptions.
    prefix_safe: Vec<bool>,
}

impl LexerSpec {
    /// Checks every lexeme of `grammar` (the regexes were parsed when the grammar was built).
    pub fn new(grammar: &Grammar) -> Result<Self, LexerError> {
        let hirs = grammar.lexeme_hirs().clone();
        let mut nullable = Vec::with_capacity(hirs.len());
        let mut nonempty = Vec::with_capacity(hirs.len());
        for (lx, hir) in grammar.lexemes().iter().zip(hirs.iter()) {
            let props = hir.properties();
            if !props.look_set().is_empty() {
                return Err(LexerError::Unsupported {
                    name: lx.name.clone(),
                    what: "look-around assertion",
                });
            }
            nullable.push(props.minimum_len() == Some(0));
            nonempty.push(props.minimum_len().is_some() && props.maximum_len() != Some(0));
        }
        let except: Vec<Vec<LexemeId>> = grammar
            .lexemes()
            .iter()
            .map(|l| l.except().to_vec())
            .collect();
        let prefix_safe = except
            .iter()
            .enumerate()
            .map(|(i, ex)| Self::prefix_safe(&hirs, &hirs[i], ex))
            .collect();
        Ok(Self {
            hirs,
            nullable,
            nonempty,
            except,
            prefix_safe,
        })
    }

    /// Whether a lexeme (regex `base`) excepting `except` keeps every proper prefix of an
    /// excepted text live on its own: `base` is a quoted unbounded repetition (`"X*"`, every
    /// proper prefix has infinitely many completions) and the excepted lexemes are literals
    /// (finitely many texts). Otherwise (a regex excepted, as for the keys of an object with
    /// `patternProperties`: "a key no pattern matches") a text may have only excepted
    /// completions, and liveness searches for a reported match ([`LexDfa::is_live`]).
    fn prefix_safe(hirs: &[Arc<Hir>], base: &Hir, except: &[LexemeId]) -> bool {
        except.is_empty()
            || (is_quoted_star(base)
                && except
                    .iter()
                    .all(|e| matches!(hirs[e.as_usize()].kind(), HirKind::Literal(_))))
    }

    /// Number of lexemes.
    pub fn len(&self) -> usize {
        self.hirs.len()
    }

    /// Whether lexeme `l`'s regex matches the empty string.
    pub fn is_nullable(&self, l: LexemeId) -> bool {
        self.nullable[l.as_usize()]
    }

    /// Whether lexeme `l` matches at least one non-empty string.
    pub fn is_nonempty(&self, l: LexemeId) -> bool {
        self.nonempty[l.as_usize()]
    }

    /// The patterns of `set`'s automaton: the set and the lexemes its members except, sorted.
    fn patterns(&self, set: &[LexemeId]) -> Vec<LexemeId> {
        let mut out = set.to_vec();
        for l in set {
            out.extend_from_slice(&self.except[l.as_usize()]);
        }
        out.sort_unstable();
        out.dedup();
        out
    }

    /// The automaton over `patterns` (pattern `i` is `patterns[i]`).
    fn build_dfa(&self, patterns: &[LexemeId], limits: &LexerLimits) -> Result<DFA, LexerError> {
        let hirs: Vec<&Hir> = patterns.iter().map(|l| &*self.hirs[l.as_usize()]).collect();
        let build_err = |message: String| LexerError::Build {
            lexemes: patterns.len(),
            message,
        };
        let config = thompson::Config::new()
            .nfa_size_limit(Some(limits.nfa_bytes))
            // Implicit: one capture per pattern. `None` also drops the per-pattern match
            // bookkeeping the lazy DFA reads, so it reported no matches.
            .which_captures(thompson::WhichCaptures::Implicit)
            .shrink(false);
        let nfa = NFA_COMPILER.with(|c| {
            c.borrow_mut()
                .configure(config)
                .build_many_from_hir(&hirs)
                .map_err(|e| build_err(e.to_string()))
        })?;
        DFA::builder()
            .configure(
                DFA::config()
                    .match_kind(MatchKind::All)
                    .cache_capacity(limits.cache_bytes)
                    .minimum_cache_clear_count(Some(0)),
            )
            .build_from_nfa(nfa)
            .map_err(|e| build_err(e.to_string()))
    }

    /// `set`'s view of the automaton over `patterns` (see [`Filter`]).
    fn view(
        &self,
        set: &[LexemeId],
        patterns: &[LexemeId],
        dfa: Arc<DFA>,
        cache_bytes: usize,
    ) -> LexDfa {
        let index = |l: &LexemeId| patterns.binary_search(l).expect("a pattern of the set") as u32;
        let filter = (patterns.len() > set.len()
            || set.iter().any(|l| !self.except[l.as_usize()].is_empty()))
        .then(|| Filter {
            allowed: patterns
                .iter()
                .map(|l| set.binary_search(l).is_ok())
                .collect(),
            excepted: patterns
                .iter()
                .map(|l| self.except[l.as_usize()].iter().map(index).collect())
                .collect(),
        });
        LexDfa {
            dfa,
            automaton: 0,
            patterns: patterns.to_vec(),
            set: set.to_vec(),
            search: set.iter().any(|l| !self.prefix_safe[l.as_usize()]),
            filter,
            key_set: self.key_set(set, patterns).map(Arc::new),
            cache_bytes,
        }
    }

    /// `set` as a [`KeySet`] over the automaton of `patterns`, if it is one.
    fn key_set(&self, set: &[LexemeId], patterns: &[LexemeId]) -> Option<KeySet> {
        let mut excepting = set.iter().filter(|l| !self.except[l.as_usize()].is_empty());
        let e = *excepting.next()?;
        if excepting.next().is_some() || !is_quoted_star(&self.hirs[e.as_usize()]) {
            return None;
        }
        if !self.prefix_safe[e.as_usize()] {
            return None;
        }
        let except = &self.except[e.as_usize()];
        let mut forbidden = Vec::new();
        for &p in patterns {
            if set.binary_search(&p).is_ok() {
                continue;
            }
            // Not in the set, so one of `E`'s exceptions (`patterns` is the set and those).
            debug_assert!(except.contains(&p));
            match self.hirs[p.as_usize()].kind() {
                HirKind::Literal(lit) => forbidden.push((p, lit.0.to_vec())),
                _ => return None,
            }
        }
        (!forbidden.is_empty()).then(|| KeySet {
            full: patterns.to_vec(),
            forbidden,
        })
    }
}

/// Whether `h` is `"X*"`: a quote, an unbounded repetition of something that matches a
/// non-empty text, a quote (a JSON string of any length, as [`KeySet`] needs).
fn is_quoted_star(h: &Hir) -> bool {
    let quote = |h: &Hir| matches!(h.kind(), HirKind::Literal(l) if &*l.0 == b"\"");
    match h.kind() {
        HirKind::Concat(xs) if xs.len() == 3 => {
            quote(&xs[0])
                && quote(&xs[2])
                && matches!(xs[1].kind(), HirKind::Repetition(r)
                    if r.min == 0
                        && r.max.is_none()
                        && r.sub.properties().minimum_len().is_some()
                        && r.sub.properties().maximum_len() != Some(0))
        }
        _ => false,
    }
}

/// Which of an automaton's matches a set reports: the patterns the set allows, each unless a
/// pattern it excepts matches too.
#[derive(Debug)]
struct Filter {
    /// Per pattern: whether the set allows it.
    allowed: Vec<bool>,
    /// Per pattern: the patterns whose match drops its own.
    excepted: Vec<Vec<u32>>,
}

impl Filter {
    /// Whether pattern `p`, one of the patterns `matched` at a state, is reported there.
    fn reports(&self, p: usize, matched: &[usize]) -> bool {
        self.allowed[p]
            && !self.excepted[p]
                .iter()
                .any(|&q| matched.contains(&(q as usize)))
    }
}

/// The lazy DFA for one set of allowed lexemes. Its patterns are the set's lexemes and the
/// lexemes they except ([`LexemeKind::Except`](crate::grammar::LexemeKind::Except)); an
/// automaton is shared by the sets with the same patterns, and each set reports only its own
/// matches.
#[derive(Debug)]
pub struct LexDfa {
    dfa: Arc<DFA>,
    /// The automaton's number in its [`LexemeSets`] (sets with one number share `dfa`).
    automaton: u32,
    /// Pattern index → lexeme.
    patterns: Vec<LexemeId>,
    set: Vec<LexemeId>,
    /// `None` when every pattern is allowed and none excepts another.
    filter: Option<Filter>,
    /// Some lexeme of the set excepts lexemes that are not [prefix safe](LexerSpec::prefix_safe),
    /// so liveness is a search rather than the exceptions' precondition.
    search: bool,
    /// Set when the set is a key set ([`KeySet`]).
    key_set: Option<Arc<KeySet>>,
    cache_bytes: usize,
}

/// A set that allows one [`Except`](crate::grammar::LexemeKind::Except) lexeme `E` whose
/// regex is a quoted, unbounded repetition (`"X*"`: any key string), and only some of the
/// literal names `E` excepts: an object's key set at one position (the names not written
/// yet, plus any other name). Its automaton's *full* set (every pattern allowed) accepts
/// every text `E`'s regex or a name does; this set accepts the same but the `forbidden`
/// names. Since every proper prefix of an `"X*"` text has infinitely many completions, a
/// text is live for this set exactly when it is for the full set, except where it spells a
/// forbidden name; and a state reports what the full set reports there, restricted to this
/// set's lexemes. So the set's in-lexeme mask entries can be derived from the full set's
/// (shared by every position of the object) by removing the tokens that complete a
/// forbidden name (the matcher checks the liveness along each such path, and walks instead
/// where the argument would not hold).
#[derive(Debug)]
pub struct KeySet {
    /// Every pattern of the automaton, sorted: the full set.
    pub full: Vec<LexemeId>,
    /// The excepted names this set does not allow, with their literal text.
    pub forbidden: Vec<(LexemeId, Vec<u8>)>,
}

impl LexDfa {
    /// The number of this set's automaton within its [`LexemeSets`]: sets with the same
    /// number share one automaton, so one lazy-DFA cache serves them all.
    pub fn automaton(&self) -> u32 {
        self.automaton
    }

    /// The lexemes of this set.
    pub fn lexemes(&self) -> &[LexemeId] {
        &self.set
    }

    /// This set as a [`KeySet`], if it is one.
    pub fn key_set(&self) -> Option<&Arc<KeySet>> {
        self.key_set.as_ref()
    }

    /// The equivalence class of `byte`: bytes of one class lead every state to the same state
    /// (classes are intervals of bytes, numbered in byte order).
    #[inline]
    pub fn byte_class(&self, byte: u8) -> u8 {
        self.dfa.byte_classes().get(byte)
    }

    /// A fresh cache for this DFA (one per matcher).
    pub fn create_cache(&self) -> Cache {
        self.dfa.create_cache()
    }

    fn exhausted(&self) -> LexerError {
        LexerError::CacheExhausted {
            limit: self.cache_bytes,
        }
    }

    /// The anchored start state (no byte consumed).
    pub fn start(&self, cache: &mut Cache) -> Result<LazyStateID, LexerError> {
        self.dfa
            .start_state(cache, &start::Config::new().anchored(Anchored::Yes))
            .map_err(|_| self.exhausted())
    }

    /// The state after `byte`. A dead state means no lexeme of the set can continue, but a
    /// live-looking one may not extend any lexeme either: matches are reported one byte late,
    /// so a match state can carry only the news that the text *before* `byte` matched. Use
    /// [`is_live`](Self::is_live) on match states.
    #[inline]
    pub fn next(
        &self,
        cache: &mut Cache,
        state: LazyStateID,
        byte: u8,
    ) -> Result<LazyStateID, LexerError> {
        self.dfa
            .next_state(cache, state, byte)
            .map_err(|_| self.exhausted())
    }

    /// Whether the text that led to `state` (not dead) is a prefix of some lexeme's match.
    /// Only states for which [`needs_liveness`](Self::needs_liveness) holds need asking (any
    /// other non-dead state is live); costs one transition per byte class, so callers memoize
    /// it per state.
    pub fn is_live(&self, cache: &mut Cache, state: LazyStateID) -> Result<bool, LexerError> {
        if state.is_dead() {
            return Ok(false);
        }
        if self.filter.is_none() && !state.is_match() {
            return Ok(true);
        }
        let eoi = self.eoi(cache, state)?;
        if eoi.is_match() {
            if self.reports_match(cache, eoi) {
                return Ok(true);
            }
            if self.filter.is_some() {
                // The text matches only lexemes this set does not report: live only if it
                // grows into one it does.
                return self.grows_into_match(cache, state);
            }
        }
        if self.search {
            // An excepted regex may cover every completion of this text.
            return self.grows_into_match(cache, state);
        }
        if !state.is_match() {
            // Not a match, so (without a filter: never dead; with one: by the precondition of
            // exceptions) a proper prefix of a match this set reports.
            return Ok(true);
        }
        for unit in self.dfa.byte_classes().representatives(..) {
            if let Some(b) = unit.as_u8() {
                if !self.next(cache, state, b)?.is_dead() {
                    return Ok(true);
                }
            }
        }
        Ok(false)
    }

    /// Whether [`is_live`](Self::is_live) must be asked about the non-dead `state`: match
    /// states, and with exceptions every state (a text only an excepted lexeme matches may end
    /// there).
    #[inline]
    pub fn needs_liveness(&self, state: LazyStateID) -> bool {
        state.is_match() || self.filter.is_some()
    }

    /// Whether some non-empty continuation of the text that led to `state` is a match this set
    /// reports: a breadth-first search of the states reachable from `state` (nearest first,
    /// so a key's closing quote is found one byte away), which for exceptions of finitely
    /// many names ends within a byte or two of it.
    fn grows_into_match(&self, cache: &mut Cache, state: LazyStateID) -> Result<bool, LexerError> {
        let mut seen = std::collections::HashSet::from([state]);
        let mut todo = std::collections::VecDeque::from([state]);
        while let Some(s) = todo.pop_front() {
            for unit in self.dfa.byte_classes().representatives(..) {
                let Some(b) = unit.as_u8() else { continue };
                let n = self.next(cache, s, b)?;
                if n.is_dead() || !seen.insert(n) {
                    continue;
                }
                let eoi = self.eoi(cache, n)?;
                if eoi.is_match() && self.reports_match(cache, eoi) {
                    return Ok(true);
                }
                todo.push_back(n);
            }
        }
        Ok(false)
    }

    /// Appends to `out` the lexemes that match exactly the bytes consumed to reach `state`.
    pub fn matches(
        &self,
        cache: &mut Cache,
        state: LazyStateID,
        out: &mut Vec<LexemeId>,
    ) -> Result<(), LexerError> {
        let eoi = self.eoi(cache, state)?;
        if !eoi.is_match() {
            return Ok(());
        }
        let Some(filter) = &self.filter else {
            // Every pattern is reported: no list of the matched ones needed.
            for i in 0..self.dfa.match_len(cache, eoi) {
                out.push(self.patterns[self.dfa.match_pattern(cache, eoi, i).as_usize()]);
            }
            return Ok(());
        };
        let matched = self.matched_patterns(cache, eoi);
        out.extend(
            matched
                .iter()
                .filter(|&&p| filter.reports(p, &matched))
                .map(|&p| self.patterns[p]),
        );
        Ok(())
    }

    /// The state after the end of input from `state`: a match state iff the text that led to
    /// `state` matches a pattern.
    fn eoi(&self, cache: &mut Cache, state: LazyStateID) -> Result<LazyStateID, LexerError> {
        self.dfa
            .next_eoi_state(cache, state)
            .map_err(|_| self.exhausted())
    }

    /// The patterns the match state `eoi` reports, unfiltered.
    fn matched_patterns(&self, cache: &mut Cache, eoi: LazyStateID) -> Vec<usize> {
        (0..self.dfa.match_len(cache, eoi))
            .map(|i| self.dfa.match_pattern(cache, eoi, i).as_usize())
            .collect()
    }

    /// Whether the match state `eoi` reports a match of this set (always, without a filter).
    fn reports_match(&self, cache: &mut Cache, eoi: LazyStateID) -> bool {
        let Some(filter) = &self.filter else {
            return true;
        };
        let matched = self.matched_patterns(cache, eoi);
        matched.iter().any(|&p| filter.reports(p, &matched))
    }
}

/// Identifies an interned set of allowed lexemes within one compiled grammar.
pub type LexemeSetId = u32;

/// The interned lexeme sets of one compiled grammar and their DFAs, built on first use.
/// Shared by every matcher of the grammar; lookups take a read lock.
#[derive(Debug)]
pub struct LexemeSets {
    spec: LexerSpec,
    limits: LexerLimits,
    table: RwLock<SetTable>,
}

#[derive(Debug, Default)]
struct SetTable {
    ids: HashMap<Vec<LexemeId>, LexemeSetId>,
    dfas: Vec<Arc<LexDfa>>,
    /// Automata by their patterns, shared by the sets with the same patterns.
    automata: HashMap<Vec<LexemeId>, (Arc<DFA>, u32)>,
}

impl LexemeSets {
    /// An empty table over `spec`'s lexemes.
    pub fn new(spec: LexerSpec, limits: LexerLimits) -> Self {
        Self {
            spec,
            limits,
            table: RwLock::default(),
        }
    }

    /// The id and DFA of the sorted, deduplicated set `set`, building the DFA if needed.
    pub fn intern(&self, set: &[LexemeId]) -> Result<(LexemeSetId, Arc<LexDfa>), LexerError> {
        {
            let t = self.table.read().unwrap_or_else(|e| e.into_inner());
            if let Some(&id) = t.ids.get(set) {
                return Ok((id, t.dfas[id as usize].clone()));
            }
        }
        let mut t = self.table.write().unwrap_or_else(|e| e.into_inner());
        if let Some(&id) = t.ids.get(set) {
            return Ok((id, t.dfas[id as usize].clone()));
        }
        if t.dfas.len() >= self.limits.max_sets {
            return Err(LexerError::LimitExceeded {
                what: "lexeme sets",
                limit: self.limits.max_sets,
                given: t.dfas.len() + 1,
            });
        }
        let patterns = self.spec.patterns(set);
        let (automaton, number) = match t.automata.get(&patterns) {
            Some(a) => a.clone(),
            None => {
                let a = Arc::new(self.spec.build_dfa(&patterns, &self.limits)?);
                let number = t.automata.len() as u32;
                t.automata.insert(patterns.clone(), (a.clone(), number));
                (a, number)
            }
        };
        let mut dfa = self
            .spec
            .view(set, &patterns, automaton, self.limits.cache_bytes);
        dfa.automaton = number;
        let dfa = Arc::new(dfa);
        let id = t.dfas.len() as LexemeSetId;
        t.dfas.push(dfa.clone());
        t.ids.insert(set.to_vec(), id);
        Ok((id, dfa))
    }

    /// The DFA of an interned set.
    ///
    /// # Panics
    /// If `id` was not returned by [`intern`](Self::intern) on this table.
    pub fn get(&self, id: LexemeSetId) -> Arc<LexDfa> {
        let t = self.table.read().unwrap_or_else(|e| e.into_inner());
        t.dfas[id as usize].clone()
    }

    /// How many automata the sets interned so far share.
    #[cfg(test)]
    pub(crate) fn automata_len(&self) -> usize {
        self.table
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .automata
            .len()
    }

    /// How many sets have been interned so far.
    pub fn len(&self) -> usize {
        self.table
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .dfas
            .len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grammar::{GrammarBuilder, Symbol};

    fn spec(regexes: &[&str]) -> LexerSpec {
        let mut b = GrammarBuilder::new();
        let ids: Vec<Symbol> = regexes
            .iter()
            .map(|r| Symbol::Lexeme(b.lexeme(r, r)))
            .collect();
        let s = b.choice("s", &ids);
        LexerSpec::new(&b.build(s).unwrap()).unwrap()
    }

    fn run(dfa: &LexDfa, cache: &mut Cache, text: &[u8]) -> Option<Vec<u32>> {
        let mut s = dfa.start(cache).unwrap();
        for &b in text {
            s = dfa.next(cache, s, b).unwrap();
            if !dfa.is_live(cache, s).unwrap() {
                return None;
            }
        }
        let mut out = vec![];
        dfa.matches(cache, s, &mut out).unwrap();
        Some(out.iter().map(|l| l.0).collect())
    }

    #[test]
    fn multi_pattern_matches_report_all() {
        let sp = spec(&["[a-z]+", "abc", "[0-9]+"]);
        let sets = LexemeSets::new(sp, LexerLimits::default());
        let (_, dfa) = sets
            .intern(&[LexemeId(0), LexemeId(1), LexemeId(2)])
            .unwrap();
        let mut c = dfa.create_cache();
        let mut m = run(&dfa, &mut c, b"abc").unwrap();
        m.sort();
        assert_eq!(m, vec![0, 1]);
        assert_eq!(run(&dfa, &mut c, b"ab").unwrap(), vec![0]);
        assert_eq!(run(&dfa, &mut c, b"12").unwrap(), vec![2]);
        assert_eq!(run(&dfa, &mut c, b"1a"), None);
        // Subsets get their own DFA.
        let (id2, dfa2) = sets.intern(&[LexemeId(2)]).unwrap();
        assert_eq!(id2, 1);
        let mut c2 = dfa2.create_cache();
        assert_eq!(run(&dfa2, &mut c2, b"a"), None);
    }

    #[test]
    fn an_excepting_lexeme_drops_its_match_where_an_excepted_one_matches() {
        let mut b = GrammarBuilder::new();
        let a = b.literal("\"a\"");
        let ab = b.literal("\"ab\"");
        let key = b.lexeme_except("key", r#""[a-z]*""#, vec![a, ab]);
        let s = b.choice(
            "s",
            &[Symbol::Lexeme(a), Symbol::Lexeme(ab), Symbol::Lexeme(key)],
        );
        let sets = LexemeSets::new(
            LexerSpec::new(&b.build(s).unwrap()).unwrap(),
            LexerLimits::default(),
        );
        let names = |ls: Vec<u32>| -> Vec<LexemeId> { ls.into_iter().map(LexemeId).collect() };
        // `"a"` allowed beside the key; `"ab"` only excepted.
        let (_, with_a) = sets.intern(&[a, key]).unwrap();
        let mut c = with_a.create_cache();
        let mut run_names = |text: &[u8]| run(&with_a, &mut c, text).map(names);
        assert_eq!(run_names(b"\"a\""), Some(vec![a]));
        assert_eq!(run_names(b"\"abc\""), Some(vec![key]));
        assert_eq!(run_names(b"\"\""), Some(vec![key]));
        // Excepted and not allowed: no lexeme of the set matches, and the complete text is no
        // viable prefix, but its proper prefixes are (`"ab` continues to `"abc"`).
        assert_eq!(run_names(b"\"ab\""), None);
        assert_eq!(run_names(b"\"ab"), Some(vec![]));
        // The sets of one object's positions share one automaton.
        let (_, with_ab) = sets.intern(&[ab, key]).unwrap();
        let (_, key_only) = sets.intern(&[key]).unwrap();
        assert!(Arc::ptr_eq(&with_a.dfa, &with_ab.dfa) && Arc::ptr_eq(&with_a.dfa, &key_only.dfa));
        assert_eq!(sets.automata_len(), 1);
        let mut c = key_only.create_cache();
        assert_eq!(run(&key_only, &mut c, b"\"a\""), None);
        assert_eq!(run(&key_only, &mut c, b"\"b\"").map(names), Some(vec![key]));
        assert_eq!(key_only.lexemes(), &[key]);
    }

    #[test]
    fn an_excepted_regex_makes_its_prefixes_dead_ends() {
        let mut b = GrammarBuilder::new();
        let x = b.lexeme("x key", r#""x[a-z]*""#);
        let key = b.lexeme_except("key", r#""[a-z]*""#, vec![x]);
        let s = b.choice("s", &[Symbol::Lexeme(x), Symbol::Lexeme(key)]);
        let sets = LexemeSets::new(
            LexerSpec::new(&b.build(s).unwrap()).unwrap(),
            LexerLimits::default(),
        );
        let (_, key_only) = sets.intern(&[key]).unwrap();
        assert!(key_only.key_set().is_none());
        let mut c = key_only.create_cache();
        // Every completion of `"x` is an excepted text: a dead end, not a live prefix.
        assert_eq!(run(&key_only, &mut c, b"\"x"), None);
        assert_eq!(run(&key_only, &mut c, b"\"ax"), Some(vec![]));
        assert_eq!(run(&key_only, &mut c, b"\"ax\""), Some(vec![key.0]));
        assert_eq!(run(&key_only, &mut c, b"\"\""), Some(vec![key.0]));
        // With the excepted lexeme allowed too, `"x` grows into its match.
        let (_, both) = sets.intern(&[x, key]).unwrap();
        let mut c = both.create_cache();
        assert_eq!(run(&both, &mut c, b"\"xy\""), Some(vec![x.0]));
    }

    #[test]
    fn an_exception_of_an_exception_is_an_error() {
        let mut b = GrammarBuilder::new();
        let a = b.literal("a");
        let inner = b.lexeme_except("inner", "[a-z]", vec![a]);
        let outer = b.lexeme_except("outer", "[a-z]+", vec![inner]);
        let s = b.define("s", vec![vec![Symbol::Lexeme(outer)]]);
        assert!(matches!(
            b.build(s),
            Err(crate::grammar::GrammarError::InvalidExcept { .. })
        ));
    }

    #[test]
    fn look_around_is_unsupported() {
        let mut b = GrammarBuilder::new();
        let l = b.lexeme("anchored", "^a");
        let s = b.define("s", vec![vec![Symbol::Lexeme(l)]]);
        let err = LexerSpec::new(&b.build(s).unwrap()).unwrap_err();
        assert!(matches!(err, LexerError::Unsupported { .. }));
    }

    #[test]
    fn tiny_cache_is_an_error_not_a_panic() {
        let sp = spec(&["[a-z]{1,50}x"]);
        let limits = LexerLimits {
            cache_bytes: 1,
            ..LexerLimits::default()
        };
        let sets = LexemeSets::new(sp, limits);
        assert!(matches!(
            sets.intern(&[LexemeId(0)]),
            Err(LexerError::Build { .. })
        ));
    }

    #[test]
    fn nullable_flags() {
        let sp = spec(&["a*", "b", "(?:)"]);
        assert!(sp.is_nullable(LexemeId(0)));
        assert!(!sp.is_nullable(LexemeId(1)));
        assert!(sp.is_nonempty(LexemeId(0)));
        assert!(!sp.is_nonempty(LexemeId(2)));
    }
}
