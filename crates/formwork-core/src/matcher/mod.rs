//! The matcher: grammar × vocabulary → token masks, token by token.
//!
//! Owns: [`CompiledGrammar`] (immutable, `Send + Sync`, built once per grammar × vocabulary and
//! shared in an `Arc`), [`Matcher`] (cheap per-sequence state: the Earley chart, the lexer
//! state stack, the lazy-DFA caches), [`Limits`] and [`MatcherError`]. Does not own sampling:
//! any sampler can apply the [`TokenSet`] filled by [`Matcher::compute_mask`]. Nothing after
//! it in the pipeline is used here.
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
//! One frame per consumed byte: the lexeme set, the lazy-DFA state, the length of the current
//! lexeme and the number of parser rows. Pushing a byte inside a lexeme is one DFA transition;
//! at a lexeme boundary it is one Earley row. Popping a byte truncates both stacks, so walking
//! the token trie never recomputes rows, and `rollback` is O(bytes rolled back).
//!
//! # Costs
//! `compute_mask` walks the token trie from the current state, pruning at the first rejected
//! byte: O(visited trie nodes) DFA steps plus one Earley row per lexeme boundary crossed.
//! Work is bounded by [`Limits::step_fuel`] and wall time by [`Limits::step_time`]. Most masks
//! are not walked at all: they hit a cache shared by every matcher of the compiled grammar
//! (see `masks`), and a walk that does happen starts from a cached in-lexeme entry (see
//! `entries`, with its two shortcuts for free-text lexemes). What each layer bought, measured,
//! is in `docs/measurements.md` ("Masks").
//!
//! # Submodules
//! `explore` (questions about one lexer state), `warm` (lexers kept from dropped matchers),
//! `masks` (the caches and their one eviction rule), `recognizer` (the byte-level recognizer
//! and the mask computation), `entries` (building in-lexeme entries: walks, slices, detours).
//!
//! Files: `explore` → `warm` → `masks` → `recognizer` → `entries`.
//!
//! May use: `util`, `grammar`, `lexer`, `parser`, `toktrie`.

use std::sync::Arc;
use std::time::Duration;

use crate::grammar::{Grammar, LexemeId};
use crate::lexer::{LexemeSets, LexerError, LexerLimits, LexerSpec};
use crate::parser::{Chart, ParserError, ParserSpec};
use crate::toktrie::{TokEnv, TokTrie, TokenId, TokenSet, Vocab};

mod entries;
mod explore;
mod masks;
mod recognizer;
#[cfg(test)]
mod tests;
mod warm;

use masks::SharedMasks;
use recognizer::{Core, NO_SET};

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
    /// Lexer budgets (DFA cache bytes, NFA bytes, lexeme sets); see `LexerLimits`.
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
        let entries = cg.shared.entries.read().map(|e| e.len()).unwrap_or(0);
        let results = cg.shared.results.read().map(|r| r.len()).unwrap_or(0);
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
        self.push_step(cg.env.vocab().token_bytes(token), |_, offset| {
            MatcherError::TokenRejected {
                token: token.0,
                offset,
            }
        })
    }

    /// Pushes `bytes` as one step (one mark for [`rollback`](Self::rollback)); on the first
    /// rejected byte, pops what this step pushed and fails with `rejected(byte, offset)`.
    fn push_step(
        &mut self,
        bytes: &[u8],
        rejected: impl Fn(u8, usize) -> MatcherError,
    ) -> Result<(), MatcherError> {
        let mark = self.core.stack.len();
        for &b in bytes {
            let e = match self.core.push_byte(b) {
                Ok(true) => continue,
                Ok(false) => rejected(b, self.core.bytes.len()),
                Err(e) => e,
            };
            self.core.pop(self.core.stack.len() - mark);
            return Err(self.fail(e));
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
        self.push_step(bytes, |byte, offset| MatcherError::ByteRejected {
            byte,
            offset,
        })
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
