//! The grammar IR: rules over symbols, with lexemes (regexes) as terminals.
//!
//! This module owns the *shape* of a grammar and nothing else: it does not lex, parse or know
//! about tokens. Everything that produces a constraint (the JSON Schema compiler, the GBNF
//! reader, the plain-regex constraint) targets this IR through [`GrammarBuilder`]; everything
//! that consumes one (the lexer, the parser, the matcher) reads a finished [`Grammar`].
//!
//! # Glossary
//! - A **lexeme** is a terminal, defined by a regex in `regex-syntax` syntax over UTF-8 text.
//!   Lexing is *greedy* (maximal munch among the lexemes the parser allows next): a lexeme ends
//!   when the next byte cannot extend any allowed lexeme, or at the end of input.
//! - A **rule** is a nonterminal: a name and a list of **alternatives**, each a sequence of
//!   **symbols**. A symbol is a lexeme or a rule. Rules may be empty, ambiguous and
//!   left-recursive; the parser is general (Earley).
//! - **Counted repetition** (`x{m,n}`) is built by [`GrammarBuilder::repeat`] with
//!   O(log n) rules, so a large `maxItems` stays cheap.
//!
//! # Invariants of a built [`Grammar`]
//! Every [`RuleId`] and [`LexemeId`] it mentions exists, every rule has at least one
//! alternative (an alternative may be empty), and every lexeme's regex parses. The parsed
//! regexes ([`Grammar::lexeme_hirs`]) are kept, so the lexer never parses a regex again: for
//! schemas whose key lexemes are hundreds of kilobytes of regex, the parse was a large part
//! of their time to first mask.
//! Costs: building is linear in the size of the grammar plus one regex parse per lexeme given
//! as text ([`GrammarBuilder::lexeme_hir`] takes an already built one).
//!
//! # Submodules
//! This file holds the IR and its builder, which every submodule uses. Then `location`
//! (positions in grammar text, for errors), `fixpoint` (the least fixpoint over rules behind
//! productive and nullable rules), `regex` (the plain-regex constraint and the one
//! [`RegexError`](regex::RegexError)) and `gbnf` (the GBNF reader, which collapses regular
//! rules with `regex`'s rewriting).
//!
//! Files: `location` → `fixpoint` → `regex` → `gbnf`.
//!
//! May use: nothing else in the crate.

mod fixpoint;
pub mod gbnf;
mod location;
pub mod regex;

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use regex_syntax::hir::Hir;

pub(crate) use fixpoint::{least_fixpoint, Need};

/// Identifies a lexeme inside one [`Grammar`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LexemeId(pub u32);

/// Identifies a rule (nonterminal) inside one [`Grammar`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RuleId(pub u32);

impl LexemeId {
    /// The id as an index into [`Grammar::lexemes`].
    pub fn as_usize(self) -> usize {
        self.0 as usize
    }
}

impl RuleId {
    /// The id as an index into [`Grammar::rules`].
    pub fn as_usize(self) -> usize {
        self.0 as usize
    }
}

/// One element of an alternative: a terminal or a nonterminal.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Symbol {
    /// A terminal.
    Lexeme(LexemeId),
    /// A nonterminal.
    Rule(RuleId),
}

/// How a lexeme matches.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LexemeKind {
    /// A regex in `regex-syntax` syntax, matched against the whole lexeme (anchored at both
    /// ends; do not add `^`/`$`). Unicode classes match UTF-8 encoded code points.
    Regex(String),
    /// What `regex` matches, except the texts that any lexeme of `except` matches: "a key that
    /// is none of the listed names" as a small string regex and the names' own lexemes,
    /// instead of one regex for the complement that grows with every name.
    ///
    /// The lexer builds the excepted lexemes into the same automaton and drops this lexeme's
    /// match where one of them matches too. When `regex` is a quoted unbounded repetition and
    /// the excepted lexemes are literals (the schema compiler's keys: every quoted string but
    /// finitely many names), a proper prefix of an excepted text is still a proper prefix of
    /// some text this lexeme matches, and the lexer relies on that for liveness. Any other
    /// exception (a regex of keys, the strings of the wrong length for a `pattern` with
    /// `maxLength`) is exact too: the lexer then searches its automaton for a reachable match
    /// of this lexeme to decide liveness.
    Except {
        /// The regex before the exception.
        regex: String,
        /// The excepted lexemes (plain [`LexemeKind::Regex`] lexemes of the same grammar).
        except: Vec<LexemeId>,
    },
}

/// A terminal of the grammar.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lexeme {
    /// A human-readable name, for dumps and errors (e.g. `"string"`, `"\"name\""`).
    pub name: String,
    /// What the lexeme matches.
    pub kind: LexemeKind,
}

impl Lexeme {
    /// The regex source of this lexeme; for [`LexemeKind::Except`], the regex before the
    /// exception (see [`except`](Self::except)).
    pub fn regex(&self) -> &str {
        match &self.kind {
            LexemeKind::Regex(r) | LexemeKind::Except { regex: r, .. } => r,
        }
    }

    /// The lexemes whose texts this lexeme does not match although its regex does (empty but
    /// for [`LexemeKind::Except`]).
    pub fn except(&self) -> &[LexemeId] {
        match &self.kind {
            LexemeKind::Regex(_) => &[],
            LexemeKind::Except { except, .. } => except,
        }
    }
}

/// A nonterminal: a name and its alternatives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    /// The rule's name, unique within the grammar.
    pub name: String,
    /// Each alternative is a sequence of symbols; an empty sequence derives the empty string.
    pub alternatives: Vec<Vec<Symbol>>,
    /// When set, the rule is one step of a [`Permutation`]: its alternatives are read with the
    /// permutation's side conditions (see there), not as a plain choice.
    pub perm: Option<Arc<Permutation>>,
}

/// Members written in any order, each listed member at most once, the required ones all
/// present, the count within bounds: a JSON object's properties, exactly, for any number of
/// them. A context-free grammar can only say this with one rule per subset of the members
/// already written; here the grammar has two rules (built by
/// [`GrammarBuilder::permutation`]) and the parser carries the written set and the count with
/// each item of them, checking the conditions as it predicts.
///
/// Both rules (the head, before the first member, and the tail, after each one) share one
/// `Permutation` and have one alternative per entry of [`members`](Self::members), in that
/// order. A member's alternative ends by calling the tail, which continues from the state
/// with that member written; an [`PermMember::End`] alternative is empty and may be taken
/// only where the state is complete.
///
/// The parser's side conditions, for a state (written set `s`, count `c`):
/// - a member's alternative is predicted only when writing it leads to a *viable* state, so a
///   listed member is never written twice and no prefix is accepted that cannot end:
///   viable means the required members not in `s` still fit under `max` and `min` can still
///   be reached;
/// - the end is taken only when every required member is in `s` and `min <= c`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Permutation {
    /// One per alternative of each of the two rules, in order.
    pub members: Vec<PermMember>,
    /// How many listed members there are (ids `0..listed`).
    pub listed: u32,
    /// The listed members that must be written before the end, sorted.
    pub required: Vec<u32>,
    /// The fewest members (listed or repeated) to write.
    pub min: u64,
    /// The most members to write (`None`: no bound).
    pub max: Option<u64>,
}

/// What an alternative of a [`Permutation`]'s rules writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PermMember {
    /// Listed member `i` (written at most once).
    Listed(u32),
    /// A member that may be written any number of times (an additional property, whose keys
    /// never equal a listed member's).
    Repeated,
    /// The end (an empty alternative).
    End,
}

/// A finished grammar: immutable, checked, ready for the lexer and parser.
#[derive(Clone, PartialEq, Eq)]
pub struct Grammar {
    lexemes: Vec<Lexeme>,
    /// Each lexeme's regex, parsed (shared with the lexer, hence the `Arc`).
    hirs: Arc<[Arc<Hir>]>,
    rules: Vec<Rule>,
    start: RuleId,
    /// [`size`](Self::size), counted once when built (grammars are immutable).
    size: usize,
}

impl Grammar {
    /// All lexemes, indexed by [`LexemeId`].
    pub fn lexemes(&self) -> &[Lexeme] {
        &self.lexemes
    }

    /// All rules, indexed by [`RuleId`].
    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// The start rule: the grammar accepts exactly what this rule derives.
    pub fn start(&self) -> RuleId {
        self.start
    }

    /// The lexeme with this id.
    ///
    /// # Panics
    /// If `id` is not from this grammar.
    pub fn lexeme(&self, id: LexemeId) -> &Lexeme {
        &self.lexemes[id.as_usize()]
    }

    /// The parsed regex of every lexeme, indexed by [`LexemeId`] (regex-syntax's default
    /// parser configuration, the one [`Lexeme::regex`] is written for).
    pub fn lexeme_hirs(&self) -> &Arc<[Arc<Hir>]> {
        &self.hirs
    }

    /// The rule with this id.
    ///
    /// # Panics
    /// If `id` is not from this grammar.
    pub fn rule(&self, id: RuleId) -> &Rule {
        &self.rules[id.as_usize()]
    }

    /// Number of symbols over all alternatives: the size measure used by limits.
    pub fn size(&self) -> usize {
        self.size
    }

    fn count_size(rules: &[Rule]) -> usize {
        rules
            .iter()
            .map(|r| r.alternatives.iter().map(|a| a.len() + 1).sum::<usize>())
            .sum()
    }

    fn fmt_symbol(&self, f: &mut fmt::Formatter<'_>, s: Symbol) -> fmt::Result {
        match s {
            Symbol::Lexeme(l) => {
                let lx = self.lexeme(l);
                write!(f, "/{}/", lx.regex())?;
                for &e in lx.except() {
                    write!(f, "-/{}/", self.lexeme(e).regex())?;
                }
                Ok(())
            }
            Symbol::Rule(r) => write!(f, "{}", self.rule(r).name),
        }
    }
}

/// Prints the grammar in a GBNF-like text form, start rule first, lexemes as `/regex/`.
impl fmt::Display for Grammar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let order = std::iter::once(self.start).chain(
            (0..self.rules.len() as u32)
                .map(RuleId)
                .filter(|&r| r != self.start),
        );
        for id in order {
            let rule = self.rule(id);
            write!(f, "{} ::=", rule.name)?;
            for (i, alt) in rule.alternatives.iter().enumerate() {
                if i > 0 {
                    write!(f, " |")?;
                }
                if alt.is_empty() {
                    write!(f, " \"\"")?;
                }
                for &s in alt {
                    write!(f, " ")?;
                    self.fmt_symbol(f, s)?;
                }
            }
            if let Some(p) = &rule.perm {
                write!(
                    f,
                    "  # any order: each listed member once, required {:?}, count {}..",
                    p.required, p.min
                )?;
                if let Some(m) = p.max {
                    write!(f, "={m}")?;
                }
            }
            writeln!(f)?;
        }
        Ok(())
    }
}

impl fmt::Debug for Grammar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// An error building a grammar: the grammar's author (a schema compiler, a GBNF file) made a
/// mistake that the IR can name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GrammarError {
    /// A rule was referenced (by [`GrammarBuilder::rule_ref`]) but never defined.
    #[error("rule `{name}` is used but never defined")]
    UndefinedRule {
        /// The rule's name.
        name: String,
    },
    /// A rule was defined twice.
    #[error("rule `{name}` is defined twice")]
    DuplicateRule {
        /// The rule's name.
        name: String,
    },
    /// A lexeme's regex does not parse.
    #[error("invalid regex for lexeme `{name}`: {message}")]
    InvalidRegex {
        /// The lexeme's name.
        name: String,
        /// What regex-syntax said.
        message: String,
    },
    /// The start rule derives no finite string, so nothing could ever be accepted.
    #[error("start rule `{name}` derives no finite string")]
    EmptyLanguage {
        /// The start rule's name.
        name: String,
    },
    /// A [`LexemeKind::Except`] lexeme excepts a lexeme that is not a plain regex lexeme of
    /// the grammar.
    #[error("lexeme `{name}` excepts {what}")]
    InvalidExcept {
        /// The excepting lexeme's name.
        name: String,
        /// What is wrong with the excepted lexeme.
        what: String,
    },
    /// A rule of a [`Permutation`] does not have its shape (one alternative per member, each
    /// member's ending in a rule of the same permutation, the end's empty).
    #[error("permutation rule `{name}`: {what}")]
    InvalidPermutation {
        /// The rule's name.
        name: String,
        /// What is wrong.
        what: String,
    },
    /// The grammar is larger than the configured limit.
    #[error("grammar too large: {given} symbols, limit {limit}")]
    TooLarge {
        /// The limit.
        limit: usize,
        /// The grammar's size.
        given: usize,
    },
}

/// Builds a [`Grammar`] incrementally.
///
/// Lexemes with the same regex are shared. Rules are declared by name (forward references are
/// fine: [`rule_ref`](Self::rule_ref) before [`define`](Self::define)), or created anonymously
/// with [`fresh_rule`](Self::fresh_rule).
///
/// # Example
/// ```
/// use formwork_core::grammar::{GrammarBuilder, Symbol};
/// let mut b = GrammarBuilder::new();
/// let digit = b.lexeme("digit", "[0-9]");
/// let list = b.rule_ref("list");
/// let comma = b.literal(",");
/// b.define("list", vec![vec![Symbol::Lexeme(digit)], vec![Symbol::Rule(list), Symbol::Lexeme(comma), Symbol::Lexeme(digit)]]);
/// let g = b.build(list)?;
/// assert_eq!(g.rules().len(), 1);
/// # Ok::<(), formwork_core::grammar::GrammarError>(())
/// ```
#[derive(Debug, Default)]
pub struct GrammarBuilder {
    lexemes: Vec<Lexeme>,
    /// The parsed regex of lexemes given by [`lexeme_hir`](Self::lexeme_hir).
    hirs: Vec<Option<Arc<Hir>>>,
    lexeme_by_regex: HashMap<String, LexemeId>,
    lexeme_by_except: HashMap<(String, Vec<LexemeId>), LexemeId>,
    rules: Vec<Option<Rule>>,
    /// Per rule, whether it was known to derive a finite string when it was defined (from
    /// the rules defined before it): sound, not complete. [`build`](Self::build)'s check
    /// starts from it, so a grammar defined bottom-up needs no sweep.
    known_productive: Vec<bool>,
    names: Vec<String>,
    rule_by_name: HashMap<String, RuleId>,
    defined_twice: Option<String>,
    repeat_cache: HashMap<(Symbol, u32), RuleId>,
    /// The size of the rules defined so far, as [`Grammar::size`] counts it, so an emitter can
    /// stop (and say where) as soon as a limit is passed rather than after building it all.
    size: usize,
}

/// The size of a rule's alternatives, as [`Grammar::size`] counts them.
fn alternatives_size(alternatives: &[Vec<Symbol>]) -> usize {
    alternatives.iter().map(|a| a.len() + 1).sum()
}

impl GrammarBuilder {
    /// An empty builder.
    pub fn new() -> Self {
        Self::default()
    }

    /// The size of the rules defined so far: what [`Grammar::size`] of the built grammar
    /// would be if nothing more were defined. O(1).
    pub fn size(&self) -> usize {
        self.size
    }

    /// A lexeme matching `regex` (regex-syntax syntax, implicitly anchored at both ends).
    /// Returns the existing id if a lexeme with the same regex exists. The regex is checked in
    /// [`build`](Self::build).
    pub fn lexeme(&mut self, name: &str, regex: &str) -> LexemeId {
        if let Some(&id) = self.lexeme_by_regex.get(regex) {
            return id;
        }
        let id = LexemeId(self.lexemes.len() as u32);
        self.lexemes.push(Lexeme {
            name: name.to_string(),
            kind: LexemeKind::Regex(regex.to_string()),
        });
        self.hirs.push(None);
        self.lexeme_by_regex.insert(regex.to_string(), id);
        id
    }

    /// A lexeme matching `hir` (implicitly anchored at both ends), for regexes built as a
    /// [`Hir`] rather than as text: the lexer uses `hir` itself, with no parse. Its regex text
    /// ([`Lexeme::regex`], for dumps and for sharing lexemes) is `hir`'s `Display`, which
    /// regex-syntax guarantees to parse back to the same language. Returns the existing id if
    /// a lexeme with that text exists.
    pub fn lexeme_hir(&mut self, name: &str, hir: Hir) -> LexemeId {
        let regex = hir.to_string();
        self.lexeme_parsed(name, &regex, Arc::new(hir))
    }

    /// A lexeme matching `regex`, whose parse (regex-syntax's default parser configuration)
    /// the caller already has: `hir` must be `regex` parsed, or match exactly the same texts.
    /// For a regex every grammar has (the generic number): the lexer shares `hir` with no
    /// parse, copy or print per grammar. Returns the existing id if a lexeme with that text
    /// exists.
    pub fn lexeme_parsed(&mut self, name: &str, regex: &str, hir: Arc<Hir>) -> LexemeId {
        if let Some(&id) = self.lexeme_by_regex.get(regex) {
            return id;
        }
        let id = LexemeId(self.lexemes.len() as u32);
        self.lexemes.push(Lexeme {
            name: name.to_string(),
            kind: LexemeKind::Regex(regex.to_string()),
        });
        self.hirs.push(Some(hir));
        self.lexeme_by_regex.insert(regex.to_string(), id);
        id
    }

    /// A lexeme matching what `regex` matches except the texts the `except` lexemes match
    /// ([`LexemeKind::Except`], whose doc states what the lexer relies on). Returns the
    /// existing id if one with the same regex and exceptions exists.
    pub fn lexeme_except(
        &mut self,
        name: &str,
        regex: &str,
        mut except: Vec<LexemeId>,
    ) -> LexemeId {
        except.sort_unstable();
        except.dedup();
        let key = (regex.to_string(), except);
        if let Some(&id) = self.lexeme_by_except.get(&key) {
            return id;
        }
        let id = LexemeId(self.lexemes.len() as u32);
        self.lexemes.push(Lexeme {
            name: name.to_string(),
            kind: LexemeKind::Except {
                regex: key.0.clone(),
                except: key.1.clone(),
            },
        });
        self.hirs.push(None);
        self.lexeme_by_except.insert(key, id);
        id
    }

    /// A lexeme matching exactly `text`, named by its JSON-quoted text. Its regex is `text`
    /// escaped (so it is shared with [`lexeme`](Self::lexeme)s of the same regex), and its
    /// [`Hir`] is built as a literal, not parsed (objects have hundreds of key literals).
    pub fn literal(&mut self, text: &str) -> LexemeId {
        let regex = regex_syntax::escape(text);
        if let Some(&id) = self.lexeme_by_regex.get(&regex) {
            return id;
        }
        let name = serde_json::to_string(text).unwrap_or_else(|_| text.to_string());
        let id = self.lexeme(&name, &regex);
        self.hirs[id.as_usize()] = Some(Arc::new(Hir::literal(text.as_bytes())));
        id
    }

    /// The id of the rule called `name`, creating a declaration if it does not exist yet.
    pub fn rule_ref(&mut self, name: &str) -> RuleId {
        if let Some(&id) = self.rule_by_name.get(name) {
            return id;
        }
        let id = RuleId(self.rules.len() as u32);
        self.rules.push(None);
        self.known_productive.push(false);
        self.names.push(name.to_string());
        self.rule_by_name.insert(name.to_string(), id);
        id
    }

    /// A new rule named `hint#N` (N its index), not found by name: defined with
    /// [`define_declared`](Self::define_declared) and referred to by id. For emitters that
    /// make many rules (a large object's tails run to hundreds of thousands), where a name
    /// lookup per rule would be a string hash and two copies.
    pub fn declare(&mut self, hint: &str) -> RuleId {
        use std::fmt::Write;
        let id = RuleId(self.rules.len() as u32);
        self.rules.push(None);
        self.known_productive.push(false);
        let mut name = String::with_capacity(hint.len() + 8);
        name.push_str(hint);
        // Writing an integer into a String cannot fail.
        let _ = write!(name, "#{}", id.0);
        self.names.push(name);
        id
    }

    /// Defines the rule `id` returned by [`declare`](Self::declare) (or by
    /// [`rule_ref`](Self::rule_ref)) with these alternatives.
    pub fn define_declared(&mut self, id: RuleId, alternatives: Vec<Vec<Symbol>>) {
        let slot = &mut self.rules[id.as_usize()];
        // The name moves into the rule; `names` keeps it only for rules still undefined (for
        // `build`'s error), so a second definition takes it back from the first.
        let name = match slot.take() {
            Some(first) => {
                if self.defined_twice.is_none() {
                    self.defined_twice = Some(first.name.clone());
                }
                self.size -= alternatives_size(&first.alternatives);
                first.name
            }
            None => std::mem::take(&mut self.names[id.as_usize()]),
        };
        self.size += alternatives_size(&alternatives);
        self.known_productive[id.as_usize()] = derives(&alternatives, &self.known_productive);
        self.rules[id.as_usize()] = Some(Rule {
            name,
            alternatives,
            perm: None,
        });
    }

    /// The head rule of a [`Permutation`] of `members` (each an alternative's symbols and
    /// `Some(i)` for listed member `i`, `None` for a repeated one), written with `separator`
    /// between members. Defines two rules: the head (no separator before the first member)
    /// and the tail (the separator, then a member), each with an end alternative.
    pub fn permutation(
        &mut self,
        hint: &str,
        separator: Symbol,
        members: &[(Vec<Symbol>, Option<u32>)],
        required: Vec<u32>,
        min: u64,
        max: Option<u64>,
    ) -> RuleId {
        let head = self.declare(hint);
        let tail = self.declare(hint);
        let mut kinds: Vec<PermMember> = members
            .iter()
            .map(|(_, m)| m.map_or(PermMember::Repeated, PermMember::Listed))
            .collect();
        kinds.push(PermMember::End);
        let listed = members
            .iter()
            .filter_map(|(_, m)| *m)
            .max()
            .map_or(0, |m| m + 1);
        let perm = Arc::new(Permutation {
            members: kinds,
            listed,
            required,
            min,
            max,
        });
        for (id, sep) in [(head, None), (tail, Some(separator))] {
            let mut alts: Vec<Vec<Symbol>> = members
                .iter()
                .map(|(syms, _)| {
                    let mut alt = Vec::with_capacity(syms.len() + 2);
                    alt.extend(sep);
                    alt.extend_from_slice(syms);
                    alt.push(Symbol::Rule(tail));
                    alt
                })
                .collect();
            alts.push(Vec::new());
            self.define_declared(id, alts);
            self.set_permutation(id, perm.clone());
        }
        head
    }

    /// Makes the defined rule `id` a step of `perm` (for copying a built grammar's rules;
    /// [`permutation`](Self::permutation) builds new ones). Checked by [`build`](Self::build).
    pub fn set_permutation(&mut self, id: RuleId, perm: Arc<Permutation>) {
        if let Some(r) = self.rules[id.as_usize()].as_mut() {
            r.perm = Some(perm);
        }
    }

    /// Whether a rule called `name` has been defined (not just referenced).
    pub fn is_defined(&self, name: &str) -> bool {
        self.rule_by_name
            .get(name)
            .is_some_and(|id| self.rules[id.as_usize()].is_some())
    }

    /// Defines the rule called `name` with these alternatives; returns its id. Defining the same
    /// name twice is reported by [`build`](Self::build).
    pub fn define(&mut self, name: &str, alternatives: Vec<Vec<Symbol>>) -> RuleId {
        let id = self.rule_ref(name);
        let slot = &mut self.rules[id.as_usize()];
        if let Some(first) = slot {
            if self.defined_twice.is_none() {
                self.defined_twice = Some(name.to_string());
            }
            self.size -= alternatives_size(&first.alternatives);
        }
        self.size += alternatives_size(&alternatives);
        self.known_productive[id.as_usize()] = derives(&alternatives, &self.known_productive);
        self.rules[id.as_usize()] = Some(Rule {
            name: name.to_string(),
            alternatives,
            perm: None,
        });
        id
    }

    /// A new rule with a unique name derived from `hint`, defined with these alternatives.
    pub fn fresh_rule(&mut self, hint: &str, alternatives: Vec<Vec<Symbol>>) -> RuleId {
        let mut name = hint.to_string();
        let mut n = self.rules.len();
        while self.rule_by_name.contains_key(&name) {
            name = format!("{hint}_{n}");
            n += 1;
        }
        self.define(&name, alternatives)
    }

    /// A rule deriving one of `symbols` (an alternative of one symbol each).
    pub fn choice(&mut self, hint: &str, symbols: &[Symbol]) -> RuleId {
        let alts = symbols.iter().map(|&s| vec![s]).collect();
        self.fresh_rule(hint, alts)
    }

    /// A rule deriving `x` repeated between `min` and `max` times (`None`: unbounded), using
    /// O(log max) rules instead of `max` copies.
    pub fn repeat(&mut self, x: Symbol, min: u32, max: Option<u32>) -> RuleId {
        // x{min,max} = x^min x{0,max-min}; x^k and x{0,k} by binary decomposition.
        let head = self.power(x, min);
        let tail = match max {
            None => {
                let star = self.fresh_rule("star", vec![vec![]]);
                self.rules[star.as_usize()]
                    .as_mut()
                    .expect("just defined")
                    .alternatives
                    .push(vec![Symbol::Rule(star), x]);
                self.size += 3;
                Some(star)
            }
            Some(max) if max <= min => None,
            Some(max) => Some(self.up_to(x, max - min)),
        };
        let mut alt = Vec::new();
        alt.extend(head.map(Symbol::Rule));
        alt.extend(tail.map(Symbol::Rule));
        self.fresh_rule("repeat", vec![alt])
    }

    /// `x` exactly `k` times (`None` for k = 0).
    fn power(&mut self, x: Symbol, k: u32) -> Option<RuleId> {
        if k == 0 {
            return None;
        }
        if let Some(&r) = self.repeat_cache.get(&(x, k)) {
            return Some(r);
        }
        let rule = if k == 1 {
            self.fresh_rule("pow", vec![vec![x]])
        } else {
            let half = self.power(x, k / 2).expect("k >= 2");
            let mut alt = vec![Symbol::Rule(half), Symbol::Rule(half)];
            if k % 2 == 1 {
                alt.push(x);
            }
            self.fresh_rule("pow", vec![alt])
        };
        self.repeat_cache.insert((x, k), rule);
        Some(rule)
    }

    /// `x` between 0 and `k` times, k >= 1: x{0,k} = x{0,k/2} x{0,k-k/2}. Ambiguous, which an
    /// Earley parser takes in its stride (items are deduplicated, not derivations).
    fn up_to(&mut self, x: Symbol, k: u32) -> RuleId {
        // Cache key uses u32::MAX - k to keep "up to" apart from "power".
        if let Some(&r) = self.repeat_cache.get(&(x, u32::MAX - k)) {
            return r;
        }
        let rule = if k == 1 {
            self.fresh_rule("opt", vec![vec![], vec![x]])
        } else {
            let a = self.up_to(x, k / 2);
            let b = self.up_to(x, k - k / 2);
            self.fresh_rule("upto", vec![vec![Symbol::Rule(a), Symbol::Rule(b)]])
        };
        self.repeat_cache.insert((x, u32::MAX - k), rule);
        rule
    }

    /// Checks and freezes the grammar with `start` as its start rule.
    pub fn build(self, start: RuleId) -> Result<Grammar, GrammarError> {
        if let Some(name) = self.defined_twice {
            return Err(GrammarError::DuplicateRule { name });
        }
        let mut rules = Vec::with_capacity(self.rules.len());
        for (i, r) in self.rules.into_iter().enumerate() {
            match r {
                Some(r) => rules.push(r),
                None => {
                    return Err(GrammarError::UndefinedRule {
                        name: self.names[i].clone(),
                    })
                }
            }
        }
        let mut hirs = Vec::with_capacity(self.lexemes.len());
        for (lx, hir) in self.lexemes.iter().zip(self.hirs) {
            match hir {
                Some(h) => hirs.push(h),
                None => match regex_syntax::Parser::new().parse(lx.regex()) {
                    Ok(h) => hirs.push(Arc::new(h)),
                    Err(e) => {
                        return Err(GrammarError::InvalidRegex {
                            name: lx.name.clone(),
                            message: e.to_string(),
                        })
                    }
                },
            }
        }
        for lx in &self.lexemes {
            for &e in lx.except() {
                let what = match self.lexemes.get(e.as_usize()).map(|x| &x.kind) {
                    Some(LexemeKind::Regex(_)) => continue,
                    Some(_) => {
                        format!("`{}`, itself an exception", self.lexemes[e.as_usize()].name)
                    }
                    None => format!("lexeme {}, which does not exist", e.0),
                };
                return Err(GrammarError::InvalidExcept {
                    name: lx.name.clone(),
                    what,
                });
            }
        }
        for r in &rules {
            if let Some(p) = &r.perm {
                check_permutation(&rules, r, p).map_err(|what| {
                    GrammarError::InvalidPermutation {
                        name: r.name.clone(),
                        what,
                    }
                })?;
            }
        }
        let size = Grammar::count_size(&rules);
        debug_assert_eq!(size, self.size, "the builder's running size");
        let g = Grammar {
            lexemes: self.lexemes,
            hirs: hirs.into(),
            size,
            rules,
            start,
        };
        // Rules known productive as they were defined need no fixpoint (the common case).
        let goal = start.as_usize();
        if !self.known_productive[goal] && !productive(&g)[goal] {
            return Err(GrammarError::EmptyLanguage {
                name: g.rule(start).name.clone(),
            });
        }
        Ok(g)
    }
}

/// Copies `g` into `b` with every rule name prefixed by `prefix`; returns the copied start rule.
/// `map` may replace a lexeme of `g` by any symbol of `b` (return `None` to copy it as is).
/// Lexemes keep their parsed regexes (no reparse); permutation rules stay permutations. For
/// composing grammars: a schema inside a Lark grammar, a tool's arguments inside a call.
/// Cost: linear in the size of `g`.
pub fn import(
    b: &mut GrammarBuilder,
    g: &Grammar,
    prefix: &str,
    mut map: impl FnMut(&mut GrammarBuilder, LexemeId) -> Option<Symbol>,
) -> RuleId {
    let mut lexemes: HashMap<LexemeId, Symbol> = HashMap::default();
    // Excepting lexemes last, so the lexemes they except have their new ids.
    let (plain, excepting): (Vec<_>, Vec<_>) =
        (0..g.lexemes().len()).partition(|&i| g.lexemes()[i].except().is_empty());
    let plain_lexeme = |b: &mut GrammarBuilder, id: LexemeId| {
        let lx = g.lexeme(id);
        b.lexeme_parsed(&lx.name, lx.regex(), g.hirs[id.as_usize()].clone())
    };
    for i in plain.into_iter().chain(excepting) {
        let (id, lx) = (LexemeId(i as u32), &g.lexemes()[i]);
        let sym = match map(b, id) {
            Some(s) => s,
            None if lx.except().is_empty() => Symbol::Lexeme(plain_lexeme(b, id)),
            None => {
                let except = lx.except().iter().map(|&e| plain_lexeme(b, e)).collect();
                Symbol::Lexeme(b.lexeme_except(&lx.name, lx.regex(), except))
            }
        };
        lexemes.insert(id, sym);
    }
    let ids: Vec<RuleId> = g
        .rules()
        .iter()
        .map(|r| b.rule_ref(&format!("{prefix}{}", r.name)))
        .collect();
    for r in g.rules() {
        let alts = r
            .alternatives
            .iter()
            .map(|alt| {
                alt.iter()
                    .map(|s| match *s {
                        Symbol::Lexeme(l) => lexemes[&l],
                        Symbol::Rule(r) => Symbol::Rule(ids[r.as_usize()]),
                    })
                    .collect()
            })
            .collect();
        let id = b.define(&format!("{prefix}{}", r.name), alts);
        if let Some(p) = &r.perm {
            b.set_permutation(id, p.clone());
        }
    }
    ids[g.start().as_usize()]
}

/// Whether `rule`, a step of `perm`, has a permutation rule's shape (see [`Permutation`]).
fn check_permutation(rules: &[Rule], rule: &Rule, perm: &Arc<Permutation>) -> Result<(), String> {
    if rule.alternatives.len() != perm.members.len() {
        return Err(format!(
            "{} alternatives for {} members",
            rule.alternatives.len(),
            perm.members.len()
        ));
    }
    if perm.required.iter().any(|&r| r >= perm.listed) {
        return Err("a required member is not listed".into());
    }
    let mut seen = vec![false; perm.listed as usize];
    for (alt, m) in rule.alternatives.iter().zip(&perm.members) {
        match m {
            PermMember::End if alt.is_empty() => {}
            PermMember::End => return Err("the end alternative is not empty".into()),
            PermMember::Listed(i) if *i >= perm.listed || seen[*i as usize] => {
                return Err(format!("listed member {i} out of range or twice"))
            }
            PermMember::Listed(_) | PermMember::Repeated => {
                if let PermMember::Listed(i) = m {
                    seen[*i as usize] = true;
                }
                let same = match alt.last() {
                    Some(Symbol::Rule(t)) => rules[t.as_usize()]
                        .perm
                        .as_ref()
                        .is_some_and(|q| Arc::ptr_eq(q, perm) || **q == **perm),
                    _ => false,
                };
                if !same {
                    return Err(
                        "a member's alternative does not end in the permutation's tail".into(),
                    );
                }
            }
        }
    }
    Ok(())
}

/// For each rule, whether it derives at least one finite string (lexemes are assumed
/// non-empty languages): the least fixpoint ([`least_fixpoint`]).
pub fn productive(g: &Grammar) -> Vec<bool> {
    least_fixpoint(g.rules.len(), |r| {
        g.rules[r].alternatives.iter().map(|alt| {
            alt.iter().map(|s| match s {
                Symbol::Lexeme(_) => Need::Nothing,
                Symbol::Rule(q) => Need::Rule(q.0),
            })
        })
    })
}

/// Whether one of `alternatives` derives a finite string when the rules in `productive` do.
fn derives(alternatives: &[Vec<Symbol>], productive: &[bool]) -> bool {
    alternatives.iter().any(|alt| {
        alt.iter().all(|s| match s {
            Symbol::Lexeme(_) => true,
            Symbol::Rule(r) => productive[r.as_usize()],
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The builder's running size (which the schema compiler checks as it emits, to stop at
    /// the node that passes the limit, issue 20) is the built grammar's size through every way
    /// of defining a rule: by name, declared then defined, fresh, repeats (whose unbounded
    /// form adds an alternative after defining its rule).
    #[test]
    fn running_size_is_the_built_size() {
        let mut b = GrammarBuilder::new();
        let d = Symbol::Lexeme(b.lexeme("digit", "[0-9]"));
        assert_eq!(b.size(), 0);
        let a = b.define("a", vec![vec![d, d], vec![]]);
        assert_eq!(b.size(), 4);
        let t = b.declare("t");
        b.define_declared(t, vec![vec![Symbol::Rule(a), d]]);
        let star = b.repeat(d, 0, None);
        let upto = b.repeat(d, 3, Some(1000));
        let top = b.fresh_rule(
            "top",
            vec![
                vec![Symbol::Rule(t)],
                vec![Symbol::Rule(star)],
                vec![Symbol::Rule(upto)],
            ],
        );
        let running = b.size();
        let g = b.build(top).unwrap();
        assert_eq!(running, g.size());
        assert!(g.size() > 4);
    }

    /// Random grammars over rules only (lexemes always derive): [`productive`] is the least
    /// fixpoint (checked by its defining property), and what the builder knows as rules are
    /// defined (a sound subset) never contradicts it.
    #[test]
    fn productive_is_the_least_fixpoint() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut next = |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        for _ in 0..500 {
            let n = 1 + next(10) as u32;
            let rules: Vec<Rule> = (0..n)
                .map(|i| Rule {
                    name: format!("r{i}"),
                    alternatives: (0..next(4))
                        .map(|_| {
                            (0..next(4))
                                .map(|_| match next(4) {
                                    0 => Symbol::Lexeme(LexemeId(0)),
                                    _ => Symbol::Rule(RuleId(next(n as u64) as u32)),
                                })
                                .collect()
                        })
                        .collect(),
                    perm: None,
                })
                .collect();
            let g = Grammar {
                lexemes: Vec::new(),
                hirs: Arc::from(Vec::new()),
                size: Grammar::count_size(&rules),
                rules,
                start: RuleId(next(n as u64) as u32),
            };
            let prod = productive(&g);
            // A fixpoint: exactly the rules with an alternative over productive symbols.
            for (i, r) in g.rules.iter().enumerate() {
                assert_eq!(prod[i], derives(&r.alternatives, &prod), "rule {i}");
            }
            // The least one: every productive rule has a derivation tree of finite depth,
            // found by rounds that each add the rules derivable from the previous rounds'.
            let mut known = vec![false; n as usize];
            for _ in 0..n {
                let now: Vec<bool> = g
                    .rules
                    .iter()
                    .map(|r| {
                        r.alternatives.iter().any(|alt| {
                            alt.iter().all(|s| match s {
                                Symbol::Lexeme(_) => true,
                                Symbol::Rule(q) => known[q.as_usize()],
                            })
                        })
                    })
                    .collect();
                known = now;
            }
            assert_eq!(prod, known);
            // A sound subset (here: what one sweep finds, as the builder's running check
            // does) holds only productive rules.
            let mut one = vec![false; n as usize];
            for (i, r) in g.rules.iter().enumerate() {
                one[i] = derives(&r.alternatives, &one);
            }
            assert!(one.iter().zip(&prod).all(|(&o, &p)| !o || p));
        }
    }

    #[test]
    fn literals_are_built_as_the_parser_would_parse_them() {
        for text in ["", "a", "\"name\"", "a.b*c", "é\u{0}\\n", "日本", "(["] {
            let mut b = GrammarBuilder::new();
            let l = b.literal(text);
            let s = b.define("start", vec![vec![Symbol::Lexeme(l)]]);
            let g = b.build(s).unwrap();
            let parsed = regex_syntax::Parser::new()
                .parse(g.lexeme(l).regex())
                .unwrap();
            assert_eq!(*g.lexeme_hirs()[l.as_usize()], parsed, "{text:?}");
        }
    }

    #[test]
    fn build_checks_the_start_rule_whatever_the_definition_order() {
        // Top-down (each rule used before it is defined), so nothing is known productive at
        // definition time, and build's sweep has to settle the chain.
        let mut b = GrammarBuilder::new();
        let x = b.literal("x");
        let ids: Vec<RuleId> = (0..5).map(|i| b.rule_ref(&format!("r{i}"))).collect();
        for i in 0..5 {
            let body = match ids.get(i + 1) {
                Some(&next) => vec![Symbol::Lexeme(x), Symbol::Rule(next)],
                None => vec![Symbol::Lexeme(x)],
            };
            b.define(&format!("r{i}"), vec![vec![Symbol::Rule(ids[i])], body]);
        }
        assert!(b.build(ids[0]).is_ok());
        // The same chain whose last rule only loops: no finite string.
        let mut b = GrammarBuilder::new();
        let x = b.literal("x");
        let ids: Vec<RuleId> = (0..5).map(|i| b.rule_ref(&format!("r{i}"))).collect();
        for i in 0..5 {
            let next = ids[(i + 1).min(4)];
            b.define(
                &format!("r{i}"),
                vec![vec![Symbol::Lexeme(x), Symbol::Rule(next)]],
            );
        }
        assert!(matches!(
            b.build(ids[0]),
            Err(GrammarError::EmptyLanguage { ref name }) if name == "r0"
        ));
    }

    #[test]
    fn lexemes_are_shared_by_regex() {
        let mut b = GrammarBuilder::new();
        let a = b.literal("a");
        let a2 = b.lexeme("other name", "a");
        assert_eq!(a, a2);
    }

    #[test]
    fn undefined_rule_is_named() {
        let mut b = GrammarBuilder::new();
        let x = b.rule_ref("missing");
        let s = b.define("start", vec![vec![Symbol::Rule(x)]]);
        let err = b.build(s).unwrap_err();
        assert_eq!(err.to_string(), "rule `missing` is used but never defined");
    }

    #[test]
    fn invalid_regex_is_named() {
        let mut b = GrammarBuilder::new();
        let l = b.lexeme("bad", "(a");
        let s = b.define("start", vec![vec![Symbol::Lexeme(l)]]);
        let err = b.build(s).unwrap_err();
        assert!(matches!(err, GrammarError::InvalidRegex { ref name, .. } if name == "bad"));
    }

    #[test]
    fn empty_language_is_an_error() {
        let mut b = GrammarBuilder::new();
        let s = b.rule_ref("s");
        let a = b.literal("a");
        b.define("s", vec![vec![Symbol::Lexeme(a), Symbol::Rule(s)]]);
        assert!(matches!(
            b.build(s),
            Err(GrammarError::EmptyLanguage { .. })
        ));
    }

    /// Expands a grammar without recursion into all the lexeme sequences it derives.
    fn lengths(g: &Grammar, r: RuleId) -> Vec<usize> {
        let mut out = Vec::new();
        for alt in &g.rule(r).alternatives {
            let mut acc = vec![0usize];
            for &s in alt {
                let sub = match s {
                    Symbol::Lexeme(_) => vec![1],
                    Symbol::Rule(r) => lengths(g, r),
                };
                acc = acc
                    .iter()
                    .flat_map(|a| sub.iter().map(move |b| a + b))
                    .collect();
            }
            out.extend(acc);
        }
        out.sort();
        out.dedup();
        out
    }

    #[test]
    fn repeat_derives_exactly_the_counted_range() {
        for (min, max) in [(0, 1), (0, 5), (2, 2), (3, 10), (1, 17), (0, 0), (5, 3)] {
            let mut b = GrammarBuilder::new();
            let a = b.literal("a");
            let r = b.repeat(Symbol::Lexeme(a), min, Some(max));
            let g = b.build(r).unwrap();
            let want: Vec<usize> = (min..=max.max(min)).map(|x| x as usize).collect();
            assert_eq!(lengths(&g, r), want, "x{{{min},{max}}}");
            assert!(g.rules().len() < 40, "{min},{max}: {}", g.rules().len());
        }
    }

    #[test]
    fn repeat_large_bound_stays_small() {
        let mut b = GrammarBuilder::new();
        let a = b.literal("a");
        let r = b.repeat(Symbol::Lexeme(a), 3, Some(1_000_000));
        let g = b.build(r).unwrap();
        assert!(g.rules().len() < 100, "{}", g.rules().len());
    }
}
