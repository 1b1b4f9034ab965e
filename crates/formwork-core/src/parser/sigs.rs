//! Row signatures ([`RowSigs`]): the interned identity of an Earley row's future, what the
//! matcher's whole-mask cache is keyed by.
//!
//! Owns the table and its byte budget; a chart computes a row's key and asks for its id
//! ([`Chart::last_row_signature`](super::Chart::last_row_signature)). Costs: one hash of the
//! key under a read lock, a write lock once per new signature.

use std::hash::BuildHasherDefault;

use crate::util::FxHasher;

/// Row signature not computed yet.
pub(super) const SIG_UNKNOWN: u32 = u32::MAX;
/// Row signature not available (the table was full).
pub(super) const SIG_NONE: u32 = u32::MAX - 1;
/// In a signature key, the origin of an item predicted in the row itself.
pub(super) const SIG_SELF: u32 = u32::MAX;

/// The interned signature of an Earley row (see [`RowSigs`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RowSig(pub u32);

/// Interned row signatures, shared by every chart of one grammar (thread-safe).
///
/// A row's signature is its set of items `(dot, origin)` with each origin row replaced by that
/// row's own signature (items predicted in the row itself get a marker). Two rows with the
/// same signature accept the same lexeme sequences and build rows with equal signatures: a
/// scan reads only the row's items, and a completion reads only the items of the origin rows,
/// which are equal up to signatures again. So anything computed from the future of a row (the
/// tokens allowed after a lexeme boundary) can be cached by signature instead of by the whole
/// chart, which differs at every position. The table only grows; when it reaches its byte
/// budget it stops signing new rows (callers then skip the cache), so ids stay valid forever.
#[derive(Debug)]
pub struct RowSigs {
    pub(super) table: std::sync::RwLock<SigTable>,
    pub(super) limit: usize,
}

#[derive(Debug, Default)]
pub(super) struct SigTable {
    pub(super) ids: std::collections::HashMap<Box<[u64]>, u32, BuildHasherDefault<FxHasher>>,
    pub(super) bytes: usize,
}

impl RowSigs {
    /// An empty table holding at most about `limit_bytes` of keys.
    pub fn new(limit_bytes: usize) -> Self {
        Self {
            table: std::sync::RwLock::default(),
            limit: limit_bytes,
        }
    }

    /// How many signatures have been interned.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        let t = self.table.read().unwrap_or_else(|e| e.into_inner());
        t.ids.len()
    }

    pub(super) fn intern(&self, key: &[u64]) -> Option<RowSig> {
        {
            let t = self.table.read().unwrap_or_else(|e| e.into_inner());
            if let Some(&id) = t.ids.get(key) {
                return Some(RowSig(id));
            }
        }
        let mut t = self.table.write().unwrap_or_else(|e| e.into_inner());
        if let Some(&id) = t.ids.get(key) {
            return Some(RowSig(id));
        }
        let size = key.len() * 8 + 48;
        if t.bytes + size > self.limit || t.ids.len() >= SIG_NONE as usize {
            return None;
        }
        t.bytes += size;
        let id = t.ids.len() as u32;
        t.ids.insert(key.into(), id);
        Some(RowSig(id))
    }
}
