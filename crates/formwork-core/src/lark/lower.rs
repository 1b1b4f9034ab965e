//! Definitions → grammar IR: names resolved, terminals turned into lexemes, rules into rules,
//! `%ignore` woven between symbols, `%json` schemas compiled and imported.
//!
//! Owns what the names mean: the `%import common` terminals (renamed `common.NAME` inside, so
//! a user's own `INT` never changes what `NUMBER` means), duplicate and undefined names,
//! terminals that use rules or themselves, and where `start` is. Every user terminal is
//! turned into its regex even when unused, so its mistakes are reported.
//!
//! # Lowering
//! - A terminal used in a rule is one lexeme (its whole regex); a string or regex literal
//!   written in a rule is a lexeme of its own. A terminal that also matches the empty string
//!   becomes a rule `"" | lexeme-without-the-empty-string`.
//! - `x?` and `[x]` are a rule with an empty alternative; `x*`, `x+`, `x ~ n..m`, `x{n,m}`
//!   use [`GrammarBuilder::repeat`] (O(log m) rules).
//! - `%ignore`: the union of the ignored terminals is one lexeme `I`, and a rule
//!   `ignore ::= "" | ignore I` goes between every two symbols of every alternative, between
//!   repeated items, and around `start` (through a wrapper rule); never inside a terminal or a
//!   `%json` value. So ignored text may appear exactly at the boundaries of the terminals.
//! - `%json {schema}` compiles the schema with the caller's [`CompileOptions`] and imports its
//!   rules under the prefix `jsonN/`.
//!
//! Costs: linear in the grammar text plus one regex parse per regex literal and one schema
//! compile per `%json`.

use std::collections::HashMap;
use std::sync::Arc;

use regex_syntax::hir::{Hir, Repetition};
use serde_json::Value;

use super::common::COMMON;
use super::error::LarkError;
use super::priority::compete;
use super::syntax::{self, Alts, Atom, Def, File, Item, Op};
use super::terminal::{char_range, literal_hir, printable, regex_hir};
use super::CompiledLark;
use crate::grammar::gbnf::Location;
use crate::grammar::regex::without_empty;
use crate::grammar::{self, Grammar, GrammarBuilder, GrammarError, LexemeId, RuleId, Symbol};
use crate::schema::{CompileOptions, SchemaError};

/// The prefix of the `common` terminals inside (a dot never occurs in a user's name).
const COMMON_PREFIX: &str = "common.";

/// Lowers a parsed file of `text` into a grammar.
pub(super) fn lower(
    text: &str,
    file: File,
    opts: &CompileOptions,
) -> Result<CompiledLark, LarkError> {
    let loc = |at| Location::from_offset(text, at);
    let defs = definitions(text, file.defs, &file.imports)?;
    let mut by_name: HashMap<&str, usize> = HashMap::new();
    for (i, d) in defs.iter().enumerate() {
        if let Some(&first) = by_name.get(d.name.as_str()) {
            return Err(LarkError::Duplicate {
                name: d.name.clone(),
                first_line: loc(defs[first].at).line,
                at: loc(d.at),
            });
        }
        by_name.insert(&d.name, i);
    }
    let start_at = match by_name.get("start") {
        Some(&i) => defs[i].at,
        None => return Err(LarkError::MissingStart),
    };
    let mut low = Lowerer {
        text,
        opts,
        defs: &defs,
        by_name,
        hirs: vec![None; defs.len()],
        visiting: vec![false; defs.len()],
        symbols: HashMap::new(),
        placed: Vec::new(),
        b: GrammarBuilder::new(),
        ignore: None,
        json_count: 0,
        warnings: Vec::new(),
    };
    // User rules first, in text order: their ids follow the text and generated rule names
    // never take a user's name.
    for d in defs.iter().filter(|d| !d.terminal) {
        low.b.rule_ref(&d.name);
    }
    for (i, d) in defs.iter().enumerate() {
        if d.terminal && !d.name.starts_with(COMMON_PREFIX) {
            low.terminal_hir(i, d.at)?;
        }
    }
    low.weave_ignores(text, &file.ignores)?;
    for d in defs.iter().filter(|d| !d.terminal) {
        let alts = d
            .body
            .iter()
            .map(|seq| low.sequence(&d.name, seq))
            .collect::<Result<Vec<_>, _>>()?;
        low.b.define(&d.name, alts);
    }
    let start = low.b.rule_ref("start");
    let top = match low.ignore {
        Some(ign) => {
            let top = low.b.declare("start");
            let (i, s) = (Symbol::Rule(ign), Symbol::Rule(start));
            low.b.define_declared(top, vec![vec![i, s, i]]);
            top
        }
        None => start,
    };
    let (warnings, mut placed) = (low.warnings, low.placed);
    placed.sort_unstable_by_key(|&(i, _)| i);
    let grammar = match low.b.build(top) {
        Ok(grammar) => grammar,
        Err(GrammarError::EmptyLanguage { .. }) => {
            return Err(LarkError::EmptyLanguage { at: loc(start_at) })
        }
        Err(e) => return Err(e.into()),
    };
    check_priorities(text, &defs, &placed, &grammar)?;
    Ok(CompiledLark { grammar, warnings })
}

/// Refuses every terminal priority that could decide between two lexemes (see `priority`):
/// `placed` holds, for each terminal that became a lexeme, its definition and that lexeme.
fn check_priorities(
    text: &str,
    defs: &[Def],
    placed: &[(usize, LexemeId)],
    g: &Grammar,
) -> Result<(), LarkError> {
    let priority = |i: usize| defs[i].priority.map_or(0, |(p, _)| p);
    for &(i, l) in placed {
        let Some((p, dot)) = defs[i].priority.filter(|&(p, _)| p != 0) else {
            continue;
        };
        let refuse = |why: String| LarkError::Priority {
            name: shown(&defs[i].name).to_string(),
            why,
            at: Location::from_offset(text, dot),
        };
        if let Some(&(j, _)) = placed.iter().find(|&&(j, m)| m == l && priority(j) != p) {
            return Err(refuse(format!(
                "`{}` matches the same texts with priority {}",
                shown(&defs[j].name),
                priority(j)
            )));
        }
        for m in 0..g.lexemes().len() {
            let m = LexemeId(m as u32);
            // Lexemes no terminal placed (literals, %json's) have Lark's default priority, 0.
            let mut priorities = placed
                .iter()
                .filter(|&&(_, n)| n == m)
                .map(|&(j, _)| priority(j));
            let same = match priorities.next() {
                None => p == 0,
                Some(q) => q == p && priorities.all(|r| r == p),
            };
            if m == l || same {
                continue;
            }
            let hirs = g.lexeme_hirs();
            if compete(&hirs[l.as_usize()], &hirs[m.as_usize()]) {
                return Err(refuse(format!(
                    "it competes with {} (a text of one is a prefix of a text of the other), and formwork's lexer follows both, longest match first",
                    shown(&g.lexeme(m).name)
                )));
            }
        }
    }
    Ok(())
}

/// The user's definitions and imports in text order, then the `common` terminals (renamed
/// under [`COMMON_PREFIX`], located at the first import) if anything is imported.
fn definitions(
    text: &str,
    user: Vec<Def>,
    imports: &[syntax::Import],
) -> Result<Vec<Def>, LarkError> {
    let Some(first) = imports.first() else {
        return Ok(user);
    };
    let common = syntax::parse_file(COMMON).map_err(|e| LarkError::Unsupported {
        what: format!("the built-in common terminals do not parse ({e})"),
        at: Location::from_offset(text, first.at),
    })?;
    let mut defs = user;
    for imp in imports {
        if !common.defs.iter().any(|d| d.name == imp.name) {
            return Err(LarkError::UnknownCommon {
                name: imp.name.clone(),
                at: Location::from_offset(text, imp.at),
            });
        }
        let Some(terminal) = syntax::is_terminal_name(&imp.alias) else {
            return Err(LarkError::MixedCaseName {
                name: imp.alias.clone(),
                at: Location::from_offset(text, imp.at),
            });
        };
        let item = Item {
            atom: Atom::Name(format!("{COMMON_PREFIX}{}", imp.name)),
            op: None,
            at: imp.at,
            op_at: imp.at,
        };
        defs.push(Def {
            name: imp.alias.clone(),
            at: imp.at,
            terminal,
            priority: None,
            body: vec![vec![item]],
        });
    }
    defs.sort_by_key(|d| d.at);
    for mut d in common.defs {
        d.name = format!("{COMMON_PREFIX}{}", d.name);
        d.at = first.at;
        relocate(&mut d.body, first.at);
        defs.push(d);
    }
    Ok(defs)
}

/// Points every position in `alts` at `at` and renames every name into `common`.
fn relocate(alts: &mut Alts, at: usize) {
    for item in alts.iter_mut().flatten() {
        item.at = at;
        item.op_at = at;
        match &mut item.atom {
            Atom::Name(n) => *n = format!("{COMMON_PREFIX}{n}"),
            Atom::Regex { body_at, .. } => *body_at = at,
            Atom::Group(inner) | Atom::Maybe(inner) => relocate(inner, at),
            Atom::Literal { .. } | Atom::CharRange(..) | Atom::Json(_) => {}
        }
    }
}

struct Lowerer<'a> {
    text: &'a str,
    opts: &'a CompileOptions,
    defs: &'a [Def],
    by_name: HashMap<&'a str, usize>,
    /// Each terminal's regex, once converted.
    hirs: Vec<Option<Arc<Hir>>>,
    /// Terminals being converted (a second visit is a cycle).
    visiting: Vec<bool>,
    /// Each terminal's symbol in rules, once made (`None`: it matches only `""`).
    symbols: HashMap<usize, Option<Symbol>>,
    /// Each terminal that became a lexeme (in a rule, or named by `%ignore`), with the lexeme.
    placed: Vec<(usize, LexemeId)>,
    b: GrammarBuilder,
    /// The `ignore*` rule woven between symbols, if anything is ignored.
    ignore: Option<RuleId>,
    json_count: usize,
    warnings: Vec<SchemaError>,
}

impl<'a> Lowerer<'a> {
    fn loc(&self, at: usize) -> Location {
        Location::from_offset(self.text, at)
    }

    /// The definition called `name`, used at `at`.
    fn lookup(&self, name: &str, at: usize) -> Result<usize, LarkError> {
        self.by_name
            .get(name)
            .copied()
            .ok_or_else(|| LarkError::Undefined {
                name: name.to_string(),
                at: self.loc(at),
            })
    }

    /// The regex of terminal `i`, referenced at `at`.
    fn terminal_hir(&mut self, i: usize, at: usize) -> Result<Arc<Hir>, LarkError> {
        if let Some(h) = &self.hirs[i] {
            return Ok(h.clone());
        }
        let defs = self.defs;
        if self.visiting[i] {
            return Err(LarkError::RecursiveTerminal {
                name: defs[i].name.clone(),
                at: self.loc(at),
            });
        }
        self.visiting[i] = true;
        let hir = Arc::new(self.alts_hir(&defs[i].body, &defs[i].name)?);
        self.visiting[i] = false;
        self.hirs[i] = Some(hir.clone());
        Ok(hir)
    }

    /// `alts` read as the expansion of terminal `owner`.
    fn alts_hir(&mut self, alts: &Alts, owner: &str) -> Result<Hir, LarkError> {
        let mut branches = Vec::with_capacity(alts.len());
        for seq in alts {
            let mut parts = Vec::with_capacity(seq.len());
            for item in seq {
                let sub = self.atom_hir(item, owner)?;
                parts.push(match item.op {
                    None => sub,
                    Some(op) => {
                        let (min, max) = match op {
                            Op::Optional => (0, Some(1)),
                            Op::Repeat(min, max) => (min, max),
                        };
                        Hir::repetition(Repetition {
                            min,
                            max,
                            greedy: true,
                            sub: Box::new(sub),
                        })
                    }
                });
            }
            branches.push(Hir::concat(parts));
        }
        Ok(Hir::alternation(branches))
    }

    fn atom_hir(&mut self, item: &Item, owner: &str) -> Result<Hir, LarkError> {
        Ok(match &item.atom {
            Atom::Literal { text, ci } => literal_hir(text, *ci),
            Atom::CharRange(lo, hi) => char_range(*lo, *hi),
            Atom::Regex {
                body,
                body_at,
                flags,
            } => regex_hir(self.text, body, *body_at, flags)?,
            Atom::Name(name) => {
                let j = self.lookup(name, item.at)?;
                if !self.defs[j].terminal {
                    return Err(LarkError::TerminalUsesRule {
                        terminal: shown(owner).to_string(),
                        rule: name.clone(),
                        at: self.loc(item.at),
                    });
                }
                (*self.terminal_hir(j, item.at)?).clone()
            }
            Atom::Group(alts) => self.alts_hir(alts, owner)?,
            Atom::Maybe(alts) => Hir::repetition(Repetition {
                min: 0,
                max: Some(1),
                greedy: true,
                sub: Box::new(self.alts_hir(alts, owner)?),
            }),
            Atom::Json(_) => {
                return Err(LarkError::Unsupported {
                    what: "`%json` inside a terminal: a schema is not a regular language".into(),
                    at: self.loc(item.at),
                })
            }
        })
    }

    /// The symbol that matches `hir` in a rule, named `name` (written at `at`): a lexeme, or a
    /// rule `"" | lexeme` if `hir` also matches the empty string; `None` if it matches only
    /// the empty string.
    fn leaf(&mut self, name: &str, hir: &Hir, at: usize) -> Result<Option<Symbol>, LarkError> {
        Ok(self.leaf_lexeme(name, hir, at)?.map(|(s, _)| s))
    }

    /// [`leaf`](Self::leaf), with the lexeme inside the symbol.
    fn leaf_lexeme(
        &mut self,
        name: &str,
        hir: &Hir,
        at: usize,
    ) -> Result<Option<(Symbol, LexemeId)>, LarkError> {
        match hir.properties().minimum_len() {
            None => Err(LarkError::MatchesNothing {
                what: format!("`{}`", shown(name)),
                at: self.loc(at),
            }),
            Some(0) => Ok(without_empty(hir).map(|ne| {
                let l = self.b.lexeme_hir(name, printable(&ne));
                let r = self
                    .b
                    .fresh_rule(name, vec![vec![], vec![Symbol::Lexeme(l)]]);
                (Symbol::Rule(r), l)
            })),
            Some(_) => {
                let l = self.b.lexeme_hir(name, printable(hir));
                Ok(Some((Symbol::Lexeme(l), l)))
            }
        }
    }

    /// Builds the `ignore*` rule from the `%ignore` statements (none: nothing is ignored).
    fn weave_ignores(&mut self, text: &str, ignores: &[syntax::Ignore]) -> Result<(), LarkError> {
        let Some(first) = ignores.first() else {
            return Ok(());
        };
        let mut union = Vec::with_capacity(ignores.len());
        for ig in ignores {
            union.push(self.alts_hir(&ig.body, "%ignore")?);
        }
        let union = Hir::alternation(union);
        if union.properties().minimum_len().is_none() {
            return Err(LarkError::MatchesNothing {
                what: "%ignore".into(),
                at: Location::from_offset(text, first.at),
            });
        }
        // Ignoring only the empty string ignores nothing.
        if let Some(ne) = without_empty(&union) {
            let l = self.b.lexeme_hir("%ignore", printable(&ne));
            let r = self.b.declare("ignore");
            self.b
                .define_declared(r, vec![vec![], vec![Symbol::Rule(r), Symbol::Lexeme(l)]]);
            self.ignore = Some(r);
            // A terminal named by `%ignore` competes as the ignored lexeme.
            for item in ignores.iter().flat_map(|ig| ig.body.iter().flatten()) {
                if let Atom::Name(n) = &item.atom {
                    if let Some(&i) = self.by_name.get(n.as_str()) {
                        self.placed.push((i, l));
                    }
                }
            }
        }
        Ok(())
    }

    /// The symbols of one alternative of `rule`, with `ignore*` between them.
    fn sequence(&mut self, rule: &str, items: &[Item]) -> Result<Vec<Symbol>, LarkError> {
        let mut out = Vec::with_capacity(items.len() * 2);
        for item in items {
            let chunk = self.item(rule, item)?;
            if chunk.is_empty() {
                continue;
            }
            if let (Some(ign), false) = (self.ignore, out.is_empty()) {
                out.push(Symbol::Rule(ign));
            }
            out.extend(chunk);
        }
        Ok(out)
    }

    fn item(&mut self, rule: &str, item: &Item) -> Result<Vec<Symbol>, LarkError> {
        let base = self.atom(rule, item)?;
        let Some(op) = item.op else {
            return Ok(base);
        };
        if base.is_empty() {
            return Ok(base);
        }
        Ok(vec![match op {
            Op::Optional => Symbol::Rule(self.b.fresh_rule(rule, vec![vec![], base])),
            Op::Repeat(min, max) => {
                let unit = self.unit(rule, base);
                self.repeat(rule, unit, min, max)
            }
        }])
    }

    /// One symbol for a sequence.
    fn unit(&mut self, rule: &str, mut seq: Vec<Symbol>) -> Symbol {
        match seq.len() {
            1 => seq.remove(0),
            _ => Symbol::Rule(self.b.fresh_rule(rule, vec![seq])),
        }
    }

    /// `x` repeated `min..=max` times, with `ignore*` between the repetitions.
    fn repeat(&mut self, rule: &str, x: Symbol, min: u32, max: Option<u32>) -> Symbol {
        let Some(ign) = self.ignore else {
            return Symbol::Rule(self.b.repeat(x, min, max));
        };
        if max == Some(0) {
            return Symbol::Rule(self.b.fresh_rule(rule, vec![vec![]]));
        }
        // x{min,max} = x (ignore x){min-1,max-1}, or also "" when min = 0.
        let spaced = Symbol::Rule(self.b.fresh_rule(rule, vec![vec![Symbol::Rule(ign), x]]));
        let tail = self
            .b
            .repeat(spaced, min.saturating_sub(1), max.map(|m| m - 1));
        let body = vec![x, Symbol::Rule(tail)];
        let alts = if min == 0 {
            vec![vec![], body]
        } else {
            vec![body]
        };
        Symbol::Rule(self.b.fresh_rule(rule, alts))
    }

    fn atom(&mut self, rule: &str, item: &Item) -> Result<Vec<Symbol>, LarkError> {
        let at = item.at;
        let sym = match &item.atom {
            Atom::Literal { text, ci: false } if text.is_empty() => None,
            Atom::Literal { text, ci: false } => Some(Symbol::Lexeme(self.b.literal(text))),
            Atom::Literal { text, ci: true } => {
                let name = format!("{}i", serde_json::Value::from(text.as_str()));
                self.leaf(&name, &literal_hir(text, true), at)?
            }
            Atom::CharRange(lo, hi) => {
                let name = format!("{:?}..{:?}", lo.to_string(), hi.to_string());
                self.leaf(&name, &char_range(*lo, *hi), at)?
            }
            Atom::Regex {
                body,
                body_at,
                flags,
            } => {
                let hir = regex_hir(self.text, body, *body_at, flags)?;
                self.leaf(&format!("/{body}/{flags}"), &hir, at)?
            }
            Atom::Name(name) => {
                let i = self.lookup(name, at)?;
                if self.defs[i].terminal {
                    self.terminal_symbol(i, at)?
                } else {
                    Some(Symbol::Rule(self.b.rule_ref(name)))
                }
            }
            Atom::Group(alts) => {
                let mut lowered = self.alternatives(rule, alts)?;
                if lowered.len() == 1 {
                    return Ok(lowered.remove(0));
                }
                Some(Symbol::Rule(self.b.fresh_rule(rule, lowered)))
            }
            Atom::Maybe(alts) => {
                let mut lowered = vec![Vec::new()];
                lowered.extend(self.alternatives(rule, alts)?);
                Some(Symbol::Rule(self.b.fresh_rule(rule, lowered)))
            }
            Atom::Json(schema) => Some(self.json(schema, at)?),
        };
        Ok(sym.into_iter().collect())
    }

    fn alternatives(&mut self, rule: &str, alts: &Alts) -> Result<Vec<Vec<Symbol>>, LarkError> {
        alts.iter().map(|seq| self.sequence(rule, seq)).collect()
    }

    /// The symbol of terminal `i` in rules (one lexeme per terminal).
    fn terminal_symbol(&mut self, i: usize, at: usize) -> Result<Option<Symbol>, LarkError> {
        if let Some(s) = self.symbols.get(&i) {
            return Ok(*s);
        }
        let hir = self.terminal_hir(i, at)?;
        let defs = self.defs;
        let name = shown(&defs[i].name);
        let made = self.leaf_lexeme(name, &hir, defs[i].at)?;
        self.placed.extend(made.map(|(_, l)| (i, l)));
        let sym = made.map(|(s, _)| s);
        self.symbols.insert(i, sym);
        Ok(sym)
    }

    /// `%json {schema}` at `at`: the schema compiled and imported.
    fn json(&mut self, schema: &Value, at: usize) -> Result<Symbol, LarkError> {
        let compiled =
            crate::schema::compile(schema, self.opts).map_err(|e| LarkError::Schema {
                source: Box::new(e),
                at: self.loc(at),
            })?;
        self.warnings.extend(compiled.warnings);
        self.json_count += 1;
        let prefix = format!("json{}/", self.json_count);
        let start = grammar::import(&mut self.b, &compiled.grammar, &prefix, |_, _| None);
        Ok(Symbol::Rule(start))
    }
}

/// A name as the user wrote it (the `common` terminals without their inner prefix).
fn shown(name: &str) -> &str {
    name.strip_prefix(COMMON_PREFIX).unwrap_or(name)
}
