//! Permutation states: what the parser carries with each item of a
//! [`Permutation`](crate::grammar::Permutation)'s rules.
//!
//! Owns the state of one object being written (the set of listed members written and the
//! member count), interned per grammar as a small integer (the item's `param`), and the side
//! conditions read from it: which member may come next and whether the object may end. The
//! grammar module's doc of `Permutation` states the conditions; this module computes them.
//!
//! # Invariants
//! - State 0 is the empty set with count 0, the state every permutation starts from, so an
//!   item outside any permutation (param 0) and one at the start of a permutation agree.
//! - A state is only ever interned after [`PermInfo::step_ok`] said the step to it is
//!   viable, so every interned state can still end: a row never holds a dead end.
//! - Ids never change once given (the table only grows), so signatures of rows that mention
//!   them stay valid for the grammar's lifetime.
//!
//! Costs: a step's check is O(1) after a state's two popcounts; interning a new state is one
//! hash of its bit words under a write lock (once per new state per grammar: charts memoize
//! their transitions).
//!
//! Uses `grammar` (the permutations), `util` (the hasher) and this module's `error`.

use std::sync::{Arc, RwLock};

use crate::grammar::{PermMember, Permutation};

use super::error::ParserError;
use crate::util::FxHashMap;

/// The most distinct states one grammar interns before [`ParamTable::step`] reports a limit:
/// each is a set of written members and a count (tens of bytes), so about 100 MB at most.
const MAX_STATES: usize = 1 << 21;

/// A [`Permutation`] compiled for the parser: its member kinds and bounds as bit words.
#[derive(Clone, Debug)]
pub(super) struct PermInfo {
    /// The required members, as bits.
    required: Box<[u64]>,
    n_required: u32,
    /// How many listed members have an alternative (can be written).
    listed: u32,
    min: u64,
    max: Option<u64>,
    /// Counts saturate here: above it, the count decides nothing (`max`, or `min` without a
    /// maximum).
    sat: u64,
    /// Whether a repeated member exists (so any count up to `max` can be reached).
    has_repeated: bool,
}

/// One state: the listed members written (bit words, trailing zero words trimmed) and the
/// members written, saturated at [`PermInfo::sat`]. The words are shared, so handing a state
/// to a prediction ([`ParamTable::options`]) copies no set.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct State {
    bits: Arc<[u64]>,
    count: u64,
}

impl State {
    fn has(&self, i: u32) -> bool {
        self.bits
            .get(i as usize / 64)
            .is_some_and(|w| w & (1 << (i % 64)) != 0)
    }
}

impl PermInfo {
    /// The parser's form of `p`, whose rule kept the alternatives of `kept` (the others
    /// derive no finite string: their members cannot be written).
    pub(super) fn new(p: &Permutation, kept: impl IntoIterator<Item = PermMember>) -> Self {
        let mut required = vec![0u64; (p.listed as usize).div_ceil(64)];
        for &r in &p.required {
            required[r as usize / 64] |= 1 << (r % 64);
        }
        let (mut listed, mut has_repeated) = (0, false);
        for m in kept {
            match m {
                PermMember::Listed(_) => listed += 1,
                PermMember::Repeated => has_repeated = true,
                PermMember::End => {}
            }
        }
        PermInfo {
            required: required.into(),
            n_required: p.required.len() as u32,
            listed,
            min: p.min,
            max: p.max,
            sat: p.max.unwrap_or(p.min),
            has_repeated,
        }
    }

    /// (required members written, listed members written) in `s`.
    fn written(&self, s: &State) -> (u32, u32) {
        let mut req = 0;
        let mut all = 0;
        for (i, w) in s.bits.iter().enumerate() {
            all += w.count_ones();
            req += (w & self.required.get(i).copied().unwrap_or(0)).count_ones();
        }
        (req, all)
    }

    fn is_required(&self, i: u32) -> bool {
        self.required[i as usize / 64] & (1 << (i % 64)) != 0
    }

    /// Whether the state `(required written, listed written, count)` can still end.
    fn viable(&self, req: u32, listed: u32, count: u64) -> bool {
        let need = u64::from(self.n_required - req);
        let lo = (count + need).max(self.min);
        if self.max.is_some_and(|m| lo > m) {
            return false;
        }
        self.has_repeated || count + u64::from(self.listed - listed) >= lo
    }
}

/// The interned states of one grammar's permutations, shared by its charts.
#[derive(Debug)]
pub(super) struct ParamTable {
    inner: RwLock<Inner>,
}

#[derive(Debug)]
struct Inner {
    ids: FxHashMap<State, u32>,
    states: Vec<State>,
}

impl Default for ParamTable {
    fn default() -> Self {
        let empty = State {
            bits: Arc::from([]),
            count: 0,
        };
        let mut ids = FxHashMap::default();
        ids.insert(empty.clone(), 0);
        ParamTable {
            inner: RwLock::new(Inner {
                ids,
                states: vec![empty],
            }),
        }
    }
}

/// What may follow a state: used while predicting a permutation's rule.
pub(super) struct Options {
    req: u32,
    listed: u32,
    state: State,
}

impl Options {
    /// Whether the alternative writing `m` may be predicted (for [`PermMember::End`]:
    /// whether the state is complete).
    pub(super) fn allows(&self, info: &PermInfo, m: PermMember) -> bool {
        match m {
            PermMember::End => self.req == info.n_required && self.state.count >= info.min,
            PermMember::Listed(i) if self.state.has(i) => false,
            PermMember::Listed(_) | PermMember::Repeated => {
                let count = self.state.count + 1;
                if info.max.is_some_and(|m| count > m) {
                    return false;
                }
                let (req, listed) = match m {
                    PermMember::Listed(i) => {
                        (self.req + u32::from(info.is_required(i)), self.listed + 1)
                    }
                    _ => (self.req, self.listed),
                };
                info.viable(req, listed, count.min(info.sat))
            }
        }
    }
}

impl ParamTable {
    /// What may follow state `p` of a permutation compiled as `info`.
    pub(super) fn options(&self, info: &PermInfo, p: u32) -> Options {
        let t = self.inner.read().unwrap_or_else(|e| e.into_inner());
        let state = t.states[p as usize].clone();
        let (req, listed) = info.written(&state);
        Options { req, listed, state }
    }

    /// The state after writing `m` (not [`PermMember::End`]) in state `p`: a step
    /// [`Options::allows`] (the parser only steps along predicted alternatives).
    pub(super) fn step(&self, info: &PermInfo, p: u32, m: PermMember) -> Result<u32, ParserError> {
        let next = {
            let t = self.inner.read().unwrap_or_else(|e| e.into_inner());
            let s = &t.states[p as usize];
            let mut bits = s.bits.to_vec();
            if let PermMember::Listed(i) = m {
                let w = i as usize / 64;
                if bits.len() <= w {
                    bits.resize(w + 1, 0);
                }
                bits[w] |= 1 << (i % 64);
            }
            let next = State {
                bits: bits.into(),
                count: (s.count + 1).min(info.sat),
            };
            if let Some(&id) = t.ids.get(&next) {
                return Ok(id);
            }
            next
        };
        let mut t = self.inner.write().unwrap_or_else(|e| e.into_inner());
        if let Some(&id) = t.ids.get(&next) {
            return Ok(id);
        }
        if t.states.len() >= MAX_STATES {
            return Err(ParserError::LimitExceeded {
                what: "permutation states (objects written in any order) per grammar",
                limit: MAX_STATES,
                given: t.states.len() + 1,
            });
        }
        let id = t.states.len() as u32;
        t.states.push(next.clone());
        t.ids.insert(next, id);
        Ok(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn perm(listed: u32, required: &[u32], min: u64, max: Option<u64>) -> Permutation {
        let mut members: Vec<PermMember> = (0..listed).map(PermMember::Listed).collect();
        members.push(PermMember::End);
        Permutation {
            members,
            listed,
            required: required.to_vec(),
            min,
            max,
        }
    }

    /// Every order of three listed members, one required, at most two written: a member is
    /// never written twice, the end comes only after the required one, and a third member
    /// is refused (count) as is an optional second one that would leave no room for the
    /// required member.
    #[test]
    fn steps_follow_the_side_conditions() {
        let p = perm(3, &[2], 0, Some(2));
        let info = PermInfo::new(&p, p.members.clone());
        let t = ParamTable::default();
        let o = t.options(&info, 0);
        assert!(!o.allows(&info, PermMember::End));
        assert!(o.allows(&info, PermMember::Listed(0)));
        assert!(o.allows(&info, PermMember::Listed(2)));
        let a = t.step(&info, 0, PermMember::Listed(0)).unwrap();
        let o = t.options(&info, a);
        assert!(!o.allows(&info, PermMember::Listed(0)), "written twice");
        assert!(
            !o.allows(&info, PermMember::Listed(1)),
            "no room for the required one"
        );
        assert!(o.allows(&info, PermMember::Listed(2)));
        assert!(!o.allows(&info, PermMember::End));
        let b = t.step(&info, a, PermMember::Listed(2)).unwrap();
        let o = t.options(&info, b);
        assert!(o.allows(&info, PermMember::End));
        assert!(!o.allows(&info, PermMember::Listed(1)), "maxProperties");
        // The same state reached in the other order is the same id.
        let c = t.step(&info, 0, PermMember::Listed(2)).unwrap();
        assert_eq!(t.step(&info, c, PermMember::Listed(0)).unwrap(), b);
    }

    /// `minProperties` with repeated members: the end waits for the count, which saturates
    /// at `min` without a maximum (so the states stay finite), and members past 64 work.
    #[test]
    fn counts_saturate_and_wide_sets_work() {
        let p = perm(70, &[69], 3, None);
        let mut kept = p.members.clone();
        kept.push(PermMember::Repeated);
        let info = PermInfo::new(&p, kept);
        let t = ParamTable::default();
        let mut s = 0;
        for i in [69, 1, 65] {
            assert!(!t.options(&info, s).allows(&info, PermMember::End));
            s = t.step(&info, s, PermMember::Listed(i)).unwrap();
        }
        let o = t.options(&info, s);
        assert!(o.allows(&info, PermMember::End));
        assert!(!o.allows(&info, PermMember::Listed(65)));
        let r1 = t.step(&info, s, PermMember::Repeated).unwrap();
        let r2 = t.step(&info, r1, PermMember::Repeated).unwrap();
        assert_eq!(r1, s, "count saturated at min: the same state");
        assert_eq!(r2, s);
    }
}
