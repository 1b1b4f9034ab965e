//! Compiling a grammar for the Earley parser ([`ParserSpec`]): every alternative laid out in
//! one flat symbol array, each followed by the end of its rule; unproductive alternatives
//! dropped; nullable rules found; lexemes that match `""` wrapped in `L? ::= L | ""`; the
//! synthetic start rule added; permutation rules compiled (`perm`).
//!
//! Owns the compiled form and its symbol encoding ([`PSym`]); reading it is the chart's job.
//! Costs: O(grammar symbols), the fixpoints included (see the module doc).

use std::collections::HashSet;
use std::sync::Arc;

use super::error::ParserError;
use super::perm::{ParamTable, PermInfo};
use crate::grammar::{self, Grammar, Need, PermMember, Permutation, Symbol};

pub(super) const TAG_SHIFT: u32 = 30;
pub(super) const TAG_LEXEME: u32 = 0;
pub(super) const TAG_RULE: u32 = 1;
pub(super) const TAG_END: u32 = 2;
pub(super) const VALUE_MASK: u32 = (1 << TAG_SHIFT) - 1;

/// A symbol of the flat layout: a lexeme, a rule, or the end of an alternative of a rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum PSym {
    Lexeme(u32),
    Rule(u32),
    End(u32),
}

#[inline]
pub(super) fn decode(v: u32) -> PSym {
    let x = v & VALUE_MASK;
    match v >> TAG_SHIFT {
        TAG_LEXEME => PSym::Lexeme(x),
        TAG_RULE => PSym::Rule(x),
        _ => PSym::End(x),
    }
}

pub(super) fn encode(s: PSym) -> u32 {
    match s {
        PSym::Lexeme(x) => (TAG_LEXEME << TAG_SHIFT) | x,
        PSym::Rule(x) => (TAG_RULE << TAG_SHIFT) | x,
        PSym::End(x) => (TAG_END << TAG_SHIFT) | x,
    }
}

/// A grammar compiled for the Earley parser. Immutable; shared by all charts.
#[derive(Clone)]
pub struct ParserSpec {
    /// All alternatives, each followed by `End(rule)`.
    pub(super) syms: Vec<u32>,
    /// The dots of the first symbol of each alternative, rule by rule.
    pub(super) alt_dots: Vec<u32>,
    /// Rule `r`'s alternatives are `alt_dots[rule_alts[r]..rule_alts[r + 1]]`.
    pub(super) rule_alts: Vec<u32>,
    pub(super) nullable: Vec<bool>,
    pub(super) start: u32,
    /// The dot of `End(start')` in the synthetic start alternative.
    pub(super) accept_dot: u32,
    pub(super) lexemes_len: usize,
    /// Per rule, its index in `perms` or [`NO_PERM`]; empty when the grammar has no
    /// permutation rules (the common case pays nothing).
    pub(super) perm_of: Vec<u32>,
    /// The permutation rules, compiled.
    pub(super) perms: Vec<PermInfo>,
    /// Per alternative (parallel to `alt_dots`), what it writes, for alternatives of
    /// permutation rules; empty when `perm_of` is.
    pub(super) alt_member: Vec<PermMember>,
    /// The permutation states met so far, shared by every chart of this grammar.
    pub(super) params: Arc<ParamTable>,
}

/// [`ParserSpec::perm_of`] of a rule that is not a permutation rule.
pub(super) const NO_PERM: u32 = u32::MAX;

impl std::fmt::Debug for ParserSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ParserSpec")
            .field("rules", &self.rules_len())
            .field("symbols", &self.syms.len())
            .field("lexemes", &self.lexemes_len)
            .finish()
    }
}

impl ParserSpec {
    /// Compiles `grammar`. `lexeme_nullable[l]` says whether lexeme `l` matches `""`, and
    /// `lexeme_nonempty[l]` whether it matches some non-empty string (from the lexer).
    pub fn new(
        grammar: &Grammar,
        lexeme_nullable: &[bool],
        lexeme_nonempty: &[bool],
    ) -> Result<Self, ParserError> {
        let n_rules = grammar.rules().len();
        let n_lex = grammar.lexemes().len();
        // Rules: originals, then one wrapper per nullable lexeme, then start'. Alternatives
        // are laid out flat (`Flat`), not as a vector per alternative: grammars reach 500,000
        // symbols, and allocating (and freeing) each alternative was most of this function.
        let mut wrapper = vec![u32::MAX; n_lex];
        let mut rules_len = n_rules as u32;
        for (l, &nullable) in lexeme_nullable.iter().enumerate() {
            if nullable {
                wrapper[l] = rules_len;
                rules_len += 1;
            }
        }
        let start = rules_len;
        let has_perms = grammar.rules().iter().any(|r| r.perm.is_some());
        // Per flat alternative, what it writes (permutation rules only).
        let mut flat_member: Vec<PermMember> = Vec::new();
        let mut flat = Flat::default();
        for r in grammar.rules() {
            if has_perms {
                match &r.perm {
                    Some(p) => flat_member.extend_from_slice(&p.members),
                    None => flat_member.extend((0..r.alternatives.len()).map(|_| PermMember::End)),
                }
            }
            for alt in &r.alternatives {
                flat.syms.extend(alt.iter().map(|s| {
                    encode(match *s {
                        Symbol::Lexeme(l) if wrapper[l.as_usize()] != u32::MAX => {
                            PSym::Rule(wrapper[l.as_usize()])
                        }
                        Symbol::Lexeme(l) => PSym::Lexeme(l.0),
                        Symbol::Rule(r) => PSym::Rule(r.0),
                    })
                }));
                flat.end_alt();
            }
            flat.end_rule();
        }
        for (l, &w) in wrapper.iter().enumerate() {
            if w != u32::MAX {
                flat.end_alt();
                if lexeme_nonempty[l] {
                    flat.syms.push(encode(PSym::Lexeme(l as u32)));
                    flat.end_alt();
                }
                flat.end_rule();
            }
        }
        flat.syms.push(encode(PSym::Rule(grammar.start().0)));
        flat.end_alt();
        flat.end_rule();
        let n_all = flat.rules_len();

        // Productive rules (lexemes productive iff they match a non-empty string).
        let base = |s| match s {
            PSym::Lexeme(l) => Some(lexeme_nonempty[l as usize]),
            PSym::Rule(_) => None,
            PSym::End(_) => Some(true),
        };
        if has_perms {
            flat_member.resize(flat.alts_len(), PermMember::End);
        }
        let productive = if has_perms {
            perm_productive(grammar, &flat, &flat_member, base)
        } else {
            least_fixpoint(&flat, &vec![true; flat.alts_len()], base)
        };
        if !productive[start as usize] {
            return Err(ParserError::EmptyLanguage {
                rule: grammar.rule(grammar.start()).name.clone(),
            });
        }
        let kept: Vec<bool> = (0..flat.alts_len())
            .map(|a| {
                flat.alt(a).iter().all(|&s| match decode(s) {
                    PSym::Lexeme(l) => lexeme_nonempty[l as usize],
                    PSym::Rule(r) => productive[r as usize],
                    PSym::End(_) => true,
                })
            })
            .collect();
        let (perm_of, perms, alt_member) = if has_perms {
            compile_perms(grammar, &flat, &kept, &flat_member)
        } else {
            (Vec::new(), Vec::new(), Vec::new())
        };
        // Nullable rules. A permutation rule's end is taken only in a complete state, so its
        // rule counts as nullable (for the rules calling it) only if its start state is; the
        // parser reads its ends from the states themselves.
        let mut null_alive = std::borrow::Cow::Borrowed(&kept);
        if has_perms {
            for (_, _, end) in waiting_ends(grammar, &flat, &flat_member) {
                null_alive.to_mut()[end] = false;
            }
        }
        let nullable = least_fixpoint(&flat, &null_alive, |s| match s {
            PSym::Rule(_) => None,
            _ => Some(false),
        });
        // The start rule's one alternative is the last: its `End` is the last symbol.
        let (syms, alt_dots, rule_alts) = if kept.iter().all(|&k| k) {
            // The flat layout already is the parser's (the common case: no copy).
            let mut alt_dots = flat.alt_start;
            alt_dots.pop();
            (flat.syms, alt_dots, flat.rule_start)
        } else {
            let mut syms = Vec::with_capacity(flat.syms.len());
            let mut alt_dots = Vec::with_capacity(flat.alts_len());
            let mut rule_alts = Vec::with_capacity(n_all + 1);
            rule_alts.push(0);
            for r in 0..n_all {
                for a in flat.alts(r).filter(|&a| kept[a]) {
                    alt_dots.push(syms.len() as u32);
                    syms.extend_from_slice(flat.alt_with_end(a));
                }
                rule_alts.push(alt_dots.len() as u32);
            }
            (syms, alt_dots, rule_alts)
        };
        let accept_dot = syms.len() as u32 - 1;
        Ok(Self {
            syms,
            alt_dots,
            rule_alts,
            nullable,
            start,
            accept_dot,
            lexemes_len: n_lex,
            perm_of,
            perms,
            alt_member,
            params: Arc::default(),
        })
    }

    /// The index of rule `r`'s permutation in `perms`, if it is a permutation rule.
    #[inline]
    pub(super) fn perm(&self, r: u32) -> Option<usize> {
        match self.perm_of.get(r as usize) {
            Some(&p) if p != NO_PERM => Some(p as usize),
            _ => None,
        }
    }

    /// The index (into `alt_dots`) of the alternative holding `dot`.
    pub(super) fn alt_of(&self, dot: u32) -> usize {
        self.alt_dots.partition_point(|&d| d <= dot) - 1
    }

    #[inline]
    pub(super) fn sym(&self, dot: u32) -> PSym {
        decode(self.syms[dot as usize])
    }

    /// Number of rules, including the synthetic ones.
    pub fn rules_len(&self) -> usize {
        self.rule_alts.len() - 1
    }

    /// The dots of the first symbols of rule `r`'s alternatives.
    #[inline]
    pub(super) fn alts(&self, r: u32) -> &[u32] {
        let r = r as usize;
        &self.alt_dots[self.rule_alts[r] as usize..self.rule_alts[r + 1] as usize]
    }
}

/// The permutation tables of [`ParserSpec`]: per rule its permutation's index, the compiled
/// permutations, and per kept alternative what it writes. Members whose alternative was
/// dropped (they derive no finite string) cannot be written, and the side conditions count
/// only the others (a productive permutation has every required member).
pub(super) type PermTables = (Vec<u32>, Vec<PermInfo>, Vec<PermMember>);

pub(super) fn compile_perms(
    grammar: &Grammar,
    flat: &Flat,
    kept: &[bool],
    flat_member: &[PermMember],
) -> PermTables {
    let mut perm_of = vec![NO_PERM; flat.rules_len()];
    let mut perms = Vec::new();
    for (r, rule) in grammar.rules().iter().enumerate() {
        let Some(p) = &rule.perm else { continue };
        let kept_members = flat.alts(r).filter(|&a| kept[a]).map(|a| flat_member[a]);
        perm_of[r] = perms.len() as u32;
        perms.push(PermInfo::new(p, kept_members));
    }
    let alt_member = (0..flat.alts_len())
        .filter(|&a| kept[a])
        .map(|a| flat_member[a])
        .collect();
    (perm_of, perms, alt_member)
}

/// The permutation rules whose end waits for members (required ones, or `min` of them), each
/// with its permutation and its end's alternative.
pub(super) fn waiting_ends<'g>(
    grammar: &'g Grammar,
    flat: &Flat,
    flat_member: &[PermMember],
) -> Vec<(usize, &'g Permutation, usize)> {
    let mut out = Vec::new();
    for (r, rule) in grammar.rules().iter().enumerate() {
        let Some(p) = &rule.perm else { continue };
        if p.required.is_empty() && p.min == 0 {
            continue;
        }
        out.extend(
            flat.alts(r)
                .filter(|&a| flat_member[a] == PermMember::End)
                .map(|a| (r, &**p, a)),
        );
    }
    out
}

/// The productive rules of a grammar with permutation rules. A permutation's end is not a
/// plain empty alternative: it may be taken only once the required members (and `min`
/// members) are written, so a permutation rule derives a finite string only if enough of
/// its members do ("an object that must contain itself" derives none). Its end counts as
/// an alternative from the first round where that holds; rounds repeat until none is added
/// (one per level of nested conditional permutations).
pub(super) fn perm_productive(
    grammar: &Grammar,
    flat: &Flat,
    flat_member: &[PermMember],
    base: impl Fn(PSym) -> Option<bool> + Copy,
) -> Vec<bool> {
    let mut alive = vec![true; flat.alts_len()];
    let mut waiting = waiting_ends(grammar, flat, flat_member);
    for &(_, _, end) in &waiting {
        alive[end] = false;
    }
    loop {
        let productive = least_fixpoint(flat, &alive, base);
        let mut changed = false;
        waiting.retain(|&(r, p, end)| {
            // A member is writable when its symbols before the call of the tail are.
            let writable = |a: usize| {
                let syms = flat.alt(a);
                syms[..syms.len().saturating_sub(1)]
                    .iter()
                    .all(|&s| match decode(s) {
                        PSym::Rule(q) => productive[q as usize],
                        other => base(other) == Some(true),
                    })
            };
            let mut listed = HashSet::new();
            let mut repeated = false;
            for a in flat.alts(r).filter(|&a| writable(a)) {
                match flat_member[a] {
                    PermMember::Listed(i) => {
                        listed.insert(i);
                    }
                    PermMember::Repeated => repeated = true,
                    PermMember::End => {}
                }
            }
            let lo = (p.required.len() as u64).max(p.min);
            let ends = p.required.iter().all(|i| listed.contains(i))
                && p.max.is_none_or(|m| lo <= m)
                && (repeated || listed.len() as u64 >= lo);
            if ends {
                alive[end] = true;
                changed = true;
            }
            !ends
        });
        if !changed {
            return productive;
        }
    }
}

/// Rules laid out flat while compiling, as the parser lays them out: rule `r`'s
/// alternatives are `rule_start[r]..rule_start[r + 1]`, alternative `a`'s symbols (encoded)
/// `syms[alt_start[a]..alt_start[a + 1] - 1]`, followed by `End(r)`.
#[derive(Debug)]
pub(super) struct Flat {
    pub(super) syms: Vec<u32>,
    pub(super) alt_start: Vec<u32>,
    pub(super) rule_start: Vec<u32>,
}

impl Default for Flat {
    fn default() -> Self {
        Self {
            syms: Vec::new(),
            alt_start: vec![0],
            rule_start: vec![0],
        }
    }
}

impl Flat {
    /// Ends the alternative whose symbols were pushed since the last one ended.
    pub(super) fn end_alt(&mut self) {
        self.syms.push(encode(PSym::End(self.rules_len() as u32)));
        self.alt_start.push(self.syms.len() as u32);
    }

    /// Ends the rule whose alternatives were ended since the last one ended.
    pub(super) fn end_rule(&mut self) {
        self.rule_start.push(self.alts_len() as u32);
    }

    pub(super) fn rules_len(&self) -> usize {
        self.rule_start.len() - 1
    }

    pub(super) fn alts_len(&self) -> usize {
        self.alt_start.len() - 1
    }

    pub(super) fn alts(&self, r: usize) -> std::ops::Range<usize> {
        self.rule_start[r] as usize..self.rule_start[r + 1] as usize
    }

    /// Alternative `a`'s symbols, encoded, without its `End`.
    pub(super) fn alt(&self, a: usize) -> &[u32] {
        &self.syms[self.alt_start[a] as usize..self.alt_start[a + 1] as usize - 1]
    }

    /// Alternative `a`'s symbols, encoded, with its `End`.
    pub(super) fn alt_with_end(&self, a: usize) -> &[u32] {
        &self.syms[self.alt_start[a] as usize..self.alt_start[a + 1] as usize]
    }
}

/// The least set of rules such that a rule is in it when one of its alternatives `a` with
/// `alive[a]` has every symbol satisfied: `base(s)` says whether a non-rule symbol is
/// (`Some`), and a rule symbol (`None`) is satisfied when its rule is in the set. For
/// productive and nullable rules: the grammar's [`least_fixpoint`] over the flat layout.
pub(super) fn least_fixpoint(
    flat: &Flat,
    alive: &[bool],
    base: impl Fn(PSym) -> Option<bool>,
) -> Vec<bool> {
    grammar::least_fixpoint(flat.rules_len(), |r| {
        flat.alts(r).map(|a| {
            let syms = if alive[a] { flat.alt(a) } else { &[] };
            (!alive[a])
                .then_some(Need::Never)
                .into_iter()
                .chain(syms.iter().map(|&v| {
                    let s = decode(v);
                    match (base(s), s) {
                        (Some(true), _) => Need::Nothing,
                        (None, PSym::Rule(q)) => Need::Rule(q),
                        _ => Need::Never,
                    }
                }))
        })
    })
}
