//! The per-sequence Earley chart ([`Chart`]): a stack of rows over a [`ParserSpec`], with
//! Leo's deterministic reductions, permutation states, and the row signatures a mask cache is
//! keyed by (interned in a [`RowSigs`]).
//!
//! Owns scanning, closing a row (prediction and completion), truncating, the lexemes allowed
//! next, acceptance and a row's signature. Costs are in the module doc.

use std::collections::HashSet;
use std::hash::BuildHasherDefault;

use super::error::ParserError;
use super::sigs::{RowSig, RowSigs, SIG_NONE, SIG_SELF, SIG_UNKNOWN};
use super::spec::{PSym, ParserSpec};
use crate::grammar::{LexemeId, PermMember};
use crate::util::{FxHashMap, FxHashSet, FxHasher};

/// An Earley item: a dot position in the flat layout, the row where the rule started, and,
/// for an item of a permutation rule, the permutation's state (0 otherwise; see `perm`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Item {
    pub(super) dot: u32,
    pub(super) origin: u32,
    pub(super) param: u32,
}

impl Item {
    /// The item with its dot moved over one symbol.
    #[inline]
    pub(super) fn advance(self) -> Item {
        Item {
            dot: self.dot + 1,
            ..self
        }
    }
}

/// A memoized deterministic reduction path (see the module doc): completing `rule` with
/// origin at this memo's row completes up to the item `(dot, origin)`; `dot` is [`LEO_NONE`]
/// when the path is not deterministic, [`LEO_PENDING`] while it is being walked.
#[derive(Clone, Copy, Debug)]
pub(super) struct LeoMemo {
    pub(super) rule: u32,
    pub(super) dot: u32,
    pub(super) origin: u32,
}

/// [`LeoMemo::dot`] of a rule whose completion is not a deterministic reduction.
pub(super) const LEO_NONE: u32 = u32::MAX;
/// [`LeoMemo::dot`] of a memo on the path being walked (a unit cycle if met again).
pub(super) const LEO_PENDING: u32 = u32::MAX - 1;

/// The per-sequence Earley chart: a stack of rows.
#[derive(Clone)]
pub struct Chart {
    pub(super) items: Vec<Item>,
    pub(super) row_start: Vec<u32>,
    /// Per row, its interned signature (see [`RowSigs`]), `SIG_UNKNOWN` until asked for.
    pub(super) sigs: Vec<u32>,
    /// Per row, the reduction paths of the rules completed into it (few per row: searched
    /// linearly). Entry `k` is cleared when row `k` is built, so none outlives its row; the
    /// vector keeps the entries of popped rows for their allocations.
    pub(super) leo: Vec<Vec<LeoMemo>>,
    /// The rows of the reduction path being walked (scratch).
    pub(super) leo_path: Vec<(u32, u32)>,
    /// Whether completions take deterministic reduction paths (off only to test against the
    /// plain algorithm).
    pub(super) leo_enabled: bool,
    pub(super) seen: FxHashSet<u64>,
    /// Items with a non-zero param already in the row being built.
    pub(super) seen_param: HashSet<(u64, u32), BuildHasherDefault<FxHasher>>,
    /// (permutation rule, param) pairs predicted in the row being built.
    pub(super) predicted_perm: HashSet<(u32, u32), BuildHasherDefault<FxHasher>>,
    /// Memoized permutation steps: (state, alternative) → the state after it.
    pub(super) steps: FxHashMap<(u32, u32), u32>,
    /// Alternatives to predict (scratch).
    pub(super) perm_scratch: Vec<u32>,
    pub(super) predicted: Vec<u32>,
    pub(super) stamp: u32,
    pub(super) max_items_per_row: usize,
}

impl std::fmt::Debug for Chart {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Chart")
            .field("rows", &self.rows_len())
            .field("items", &self.items.len())
            .finish()
    }
}

impl Chart {
    /// A chart holding row 0 (the closure of the start rule).
    pub fn new(spec: &ParserSpec, max_items_per_row: usize) -> Result<Self, ParserError> {
        let mut c = Self {
            items: Vec::new(),
            row_start: vec![0],
            sigs: vec![SIG_UNKNOWN],
            leo: Vec::new(),
            leo_path: Vec::new(),
            leo_enabled: true,
            seen: FxHashSet::default(),
            seen_param: HashSet::default(),
            predicted_perm: HashSet::default(),
            steps: FxHashMap::default(),
            perm_scratch: Vec::new(),
            predicted: vec![0; spec.rules_len()],
            stamp: 0,
            max_items_per_row,
        };
        c.begin_row();
        for &d in spec.alts(spec.start) {
            c.add(Item {
                dot: d,
                origin: 0,
                param: 0,
            })?;
        }
        c.close(spec)?;
        c.row_start.push(c.items.len() as u32);
        Ok(c)
    }

    /// Number of rows (1 + lexemes scanned).
    pub fn rows_len(&self) -> usize {
        self.row_start.len() - 1
    }

    /// Number of items in all rows.
    pub fn items_len(&self) -> usize {
        self.items.len()
    }

    /// Pops rows until `rows` remain (`rows >= 1`).
    pub fn truncate(&mut self, rows: usize) {
        if rows < self.rows_len() {
            self.row_start.truncate(rows + 1);
            self.items.truncate(self.row_start[rows] as usize);
            self.sigs.truncate(rows);
        }
    }

    pub(super) fn begin_row(&mut self) {
        let k = self.row_start.len() - 1;
        if self.leo.len() <= k {
            self.leo.resize_with(k + 1, Vec::new);
        } else {
            self.leo[k].clear();
        }
        self.seen.clear();
        if !self.seen_param.is_empty() {
            self.seen_param.clear();
        }
        if !self.predicted_perm.is_empty() {
            self.predicted_perm.clear();
        }
        self.stamp = self.stamp.wrapping_add(1);
        if self.stamp == 0 {
            self.predicted.fill(0);
            self.stamp = 1;
        }
    }

    #[inline]
    pub(super) fn add(&mut self, it: Item) -> Result<(), ParserError> {
        let key = ((it.dot as u64) << 32) | it.origin as u64;
        let new = if it.param == 0 {
            self.seen.insert(key)
        } else {
            self.seen_param.insert((key, it.param))
        };
        if new {
            let row_len = self.items.len() - *self.row_start.last().unwrap_or(&0) as usize;
            if row_len >= self.max_items_per_row {
                return Err(ParserError::LimitExceeded {
                    what: "earley items per row",
                    limit: self.max_items_per_row,
                    given: row_len + 1,
                });
            }
            self.items.push(it);
        }
        Ok(())
    }

    /// Predicts and completes the row being built (`items[row_start.last()..]`).
    pub(super) fn close(&mut self, spec: &ParserSpec) -> Result<(), ParserError> {
        let row = (self.row_start.len() - 1) as u32;
        let mut i = self.row_start[row as usize] as usize;
        while i < self.items.len() {
            let it = self.items[i];
            i += 1;
            match spec.sym(it.dot) {
                PSym::Lexeme(_) => {}
                PSym::Rule(r) if spec.perm(r).is_some() => self.predict_perm(spec, it, r, row)?,
                PSym::Rule(r) => {
                    if self.predicted[r as usize] != self.stamp {
                        self.predicted[r as usize] = self.stamp;
                        for &d in spec.alts(r) {
                            self.add(Item {
                                dot: d,
                                origin: row,
                                param: 0,
                            })?;
                        }
                    }
                    if spec.nullable[r as usize] {
                        self.add(it.advance())?;
                    }
                }
                PSym::End(r) => {
                    if it.origin == row {
                        // Empty derivation: handled when the rule was predicted (nullable).
                        continue;
                    }
                    let is_perm = spec.perm(r).is_some();
                    if self.leo_enabled && !is_perm {
                        if let Some(top) = self.leo_top(spec, it.origin, r) {
                            self.add(top)?;
                            continue;
                        }
                    }
                    let lo = self.row_start[it.origin as usize] as usize;
                    let hi = self.row_start[it.origin as usize + 1] as usize;
                    for j in lo..hi {
                        let p = self.items[j];
                        if spec.sym(p.dot) == PSym::Rule(r)
                            && (!is_perm || self.passed_param(spec, p)? == it.param)
                        {
                            self.add(p.advance())?;
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// The state a call of a permutation rule at `it` (whose dot is at that rule) starts from:
    /// the state after `it`'s member when `it` is an alternative of a permutation rule ending
    /// in the call (the tail, after a member), the start state otherwise (the head).
    pub(super) fn passed_param(&mut self, spec: &ParserSpec, it: Item) -> Result<u32, ParserError> {
        let PSym::End(own) = spec.sym(it.dot + 1) else {
            return Ok(0);
        };
        let Some(info) = spec.perm(own) else {
            return Ok(0);
        };
        let alt = spec.alt_of(it.dot) as u32;
        if let Some(&p) = self.steps.get(&(it.param, alt)) {
            return Ok(p);
        }
        let p = spec
            .params
            .step(&spec.perms[info], it.param, spec.alt_member[alt as usize])?;
        self.steps.insert((it.param, alt), p);
        Ok(p)
    }

    /// Predicts the permutation rule `r` at `it`: the alternatives whose member may follow
    /// the state the call starts from, and, when that state may end, `it` moved over the call
    /// (the end alternative is empty; Aycock–Horspool, as for other nullable rules).
    pub(super) fn predict_perm(
        &mut self,
        spec: &ParserSpec,
        it: Item,
        r: u32,
        row: u32,
    ) -> Result<(), ParserError> {
        let param = self.passed_param(spec, it)?;
        let info = &spec.perms[spec.perm(r).unwrap_or(0)];
        let opts = spec.params.options(info, param);
        if self.predicted_perm.insert((r, param)) {
            let mut todo = std::mem::take(&mut self.perm_scratch);
            todo.clear();
            let lo = spec.rule_alts[r as usize] as usize;
            for (k, &d) in spec.alts(r).iter().enumerate() {
                if opts.allows(info, spec.alt_member[lo + k]) {
                    todo.push(d);
                }
            }
            for &d in &todo {
                self.add(Item {
                    dot: d,
                    origin: row,
                    param,
                })?;
            }
            self.perm_scratch = todo;
        }
        if opts.allows(info, PermMember::End) {
            self.add(it.advance())?;
        }
        Ok(())
    }

    /// The memo of `rule` in row `j`, as an index into `leo[j]`.
    pub(super) fn leo_find(&self, j: u32, rule: u32) -> Option<usize> {
        self.leo[j as usize].iter().position(|m| m.rule == rule)
    }

    /// The topmost item of the deterministic reduction path of `rule` completed with origin
    /// `j` (a row before the one being built), or `None` if that completion is not a
    /// deterministic reduction. Walks the path up to the first memoized row, then memoizes
    /// the answer in every row on the way.
    pub(super) fn leo_top(&mut self, spec: &ParserSpec, j: u32, rule: u32) -> Option<Item> {
        let mut path = std::mem::take(&mut self.leo_path);
        path.clear();
        let (mut j, mut rule) = (j, rule);
        // The completed item of the last deterministic step.
        let mut last: Option<Item> = None;
        let top = loop {
            if let Some(m) = self.leo_find(j, rule).map(|x| self.leo[j as usize][x]) {
                match m.dot {
                    LEO_NONE => break last,
                    // A cycle of unit rules inside one row: complete it the plain way.
                    LEO_PENDING => break None,
                    dot => {
                        break Some(Item {
                            dot,
                            origin: m.origin,
                            param: 0,
                        })
                    }
                }
            }
            let lo = self.row_start[j as usize] as usize;
            let hi = self.row_start[j as usize + 1] as usize;
            let mut waiting = self.items[lo..hi]
                .iter()
                .filter(|p| spec.sym(p.dot) == PSym::Rule(rule));
            // A permutation rule's completion matches states: never deterministic here.
            let step = match (waiting.next(), waiting.next()) {
                (Some(&p), None) => match spec.sym(p.dot + 1) {
                    PSym::End(b) if spec.perm(b).is_none() => Some((p, b)),
                    _ => None,
                },
                _ => None,
            };
            let Some((p, b)) = step else {
                self.leo[j as usize].push(LeoMemo {
                    rule,
                    dot: LEO_NONE,
                    origin: 0,
                });
                break last;
            };
            self.leo[j as usize].push(LeoMemo {
                rule,
                dot: LEO_PENDING,
                origin: 0,
            });
            path.push((j, rule));
            last = Some(p.advance());
            (j, rule) = (p.origin, b);
        };
        for &(pj, pr) in &path {
            let x = self.leo_find(pj, pr).unwrap_or(0);
            let m = &mut self.leo[pj as usize][x];
            match top {
                Some(t) => (m.dot, m.origin) = (t.dot, t.origin),
                None => m.dot = LEO_NONE,
            }
        }
        self.leo_path = path;
        top
    }

    pub(super) fn last_row(&self) -> std::ops::Range<usize> {
        let k = self.rows_len();
        self.row_start[k - 1] as usize..self.row_start[k] as usize
    }

    /// Scans the lexemes `matched` (each a lexeme that ends here) into a new row. Returns
    /// `Ok(false)` and pushes nothing if no item of the last row expects any of them.
    pub fn scan(&mut self, spec: &ParserSpec, matched: &[LexemeId]) -> Result<bool, ParserError> {
        let prev = self.last_row();
        self.begin_row();
        for j in prev {
            let it = self.items[j];
            if let PSym::Lexeme(l) = spec.sym(it.dot) {
                if matched.iter().any(|m| m.0 == l) {
                    self.add(it.advance())?;
                }
            }
        }
        let start = *self.row_start.last().unwrap_or(&0) as usize;
        if self.items.len() == start {
            return Ok(false);
        }
        if let Err(e) = self.close(spec) {
            self.items.truncate(start);
            return Err(e);
        }
        self.row_start.push(self.items.len() as u32);
        self.sigs.push(SIG_UNKNOWN);
        Ok(true)
    }

    /// Whether the input scanned so far is a sentence of the grammar.
    pub fn is_accepting(&self, spec: &ParserSpec) -> bool {
        self.items[self.last_row()]
            .iter()
            .any(|it| it.dot == spec.accept_dot && it.origin == 0)
    }

    /// Appends to `out` the lexemes some item of the last row expects next, sorted and
    /// deduplicated.
    pub fn allowed_lexemes(&self, spec: &ParserSpec, out: &mut Vec<LexemeId>) {
        let from = out.len();
        for it in &self.items[self.last_row()] {
            if let PSym::Lexeme(l) = spec.sym(it.dot) {
                out.push(LexemeId(l));
            }
        }
        out[from..].sort_unstable();
        let mut w = from;
        for r in from..out.len() {
            if w == from || out[w - 1] != out[r] {
                out[w] = out[r];
                w += 1;
            }
        }
        out.truncate(w);
    }

    /// The signature of the last row: equal signatures (from one [`RowSigs`]) mean equal
    /// futures, i.e. the same lexeme sequences are accepted from here, with the same rows.
    /// `None` when the table is full. A chart must always be asked with the same table (the
    /// ids are memoized in the chart). Memoized per row: O(1) when asked again, otherwise
    /// O(items · log items) per row not yet signed (the last row and the origin rows it
    /// refers to).
    pub fn last_row_signature(&mut self, table: &RowSigs) -> Option<RowSig> {
        let last = self.rows_len() - 1;
        match self.sigs[last] {
            // The common case on the mask path: no allocation.
            SIG_UNKNOWN => {}
            SIG_NONE => return None,
            s => return Some(RowSig(s)),
        }
        let mut todo = vec![last];
        let mut key = Vec::new();
        while let Some(&r) = todo.last() {
            if self.sigs[r] != SIG_UNKNOWN {
                todo.pop();
                continue;
            }
            let range = self.row_start[r] as usize..self.row_start[r + 1] as usize;
            let before = todo.len();
            let mut unsigned = false;
            for it in &self.items[range.clone()] {
                let o = it.origin as usize;
                if o != r {
                    match self.sigs[o] {
                        SIG_UNKNOWN => todo.push(o),
                        SIG_NONE => unsigned = true,
                        _ => {}
                    }
                }
            }
            if todo.len() > before {
                continue;
            }
            todo.pop();
            if unsigned {
                self.sigs[r] = SIG_NONE;
                continue;
            }
            key.clear();
            let mut params = false;
            key.extend(self.items[range.clone()].iter().map(|it| {
                let o = if it.origin as usize == r {
                    SIG_SELF
                } else {
                    self.sigs[it.origin as usize]
                };
                params |= it.param != 0;
                ((it.dot as u64) << 32) | o as u64
            }));
            if params {
                // Items of permutation rules: the state too. Sorted as triples, then written
                // with the top bit (free: dots are below 2^30) marking a state word after.
                let mut triples: Vec<(u64, u32)> = key
                    .iter()
                    .zip(&self.items[range])
                    .map(|(&k, it)| (k, it.param))
                    .collect();
                triples.sort_unstable();
                key.clear();
                for (k, p) in triples {
                    if p == 0 {
                        key.push(k);
                    } else {
                        key.push(k | 1 << 63);
                        key.push(p as u64);
                    }
                }
            } else {
                key.sort_unstable();
            }
            self.sigs[r] = table.intern(&key).map_or(SIG_NONE, |s| s.0);
        }
        match self.sigs[last] {
            SIG_NONE => None,
            s => Some(RowSig(s)),
        }
    }
}
