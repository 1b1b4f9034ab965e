//! The per-sequence half of the model state: each sequence's keys and values for every
//! layer ([`SeqCache`]: shared read-only segments, then its own copy-on-write positions) and
//! the view attention reads them through ([`SeqView`]). Does *not* own the weights, rotary
//! tables or scratch buffers (`native`'s `Native`, shared by every sequence).

use std::sync::Arc;

/// Per-layer key/value cache, `[pos][kv_head][head_dim]`.
#[derive(Clone, Debug, Default)]
pub(super) struct KvCache {
    pub(super) k: Vec<f32>,
    pub(super) v: Vec<f32>,
}

/// One sequence's keys and values for every layer, and how many positions they hold: the
/// per-sequence half of the model state (the weights, rotary tables and scratch buffers are
/// `native::Native`'s, shared by every sequence).
///
/// Positions live in read-only segments shared with other sequences (`shared`, in position
/// order: what [`fork`](Self::fork) took from the sequence it was forked from) followed by
/// the sequence's own positions (`own`). `own` is copy-on-write: a fork shares it instead of
/// copying it, and the first append or truncation of a sequence whose `own` a fork still
/// holds copies it first. So forking N sequences off a prefilled prefix costs N reference
/// counts, not N copies of the prefix, and attention can read the prefix's keys once for all
/// of them (see `attention::attention`).
///
/// Invariants: the shared views hold `shared_len()` positions together, never an empty view;
/// every layer of `own` holds exactly `len - shared_len()` positions. Memory: `2 · layers ·
/// kv_dim · 4` bytes per own position, grown by doubling; a shared segment is freed with the
/// last sequence holding it.
#[derive(Debug)]
pub(crate) struct SeqCache {
    /// Shared segments: each (storage, positions of it in use), read-only.
    pub(super) shared: Vec<(Arc<Vec<KvCache>>, usize)>,
    /// This sequence's own positions, one `KvCache` per layer.
    pub(super) own: Arc<Vec<KvCache>>,
    pub(super) len: usize,
}

impl SeqCache {
    /// An empty cache for a model of `n_layers` layers.
    pub fn new(n_layers: usize) -> Self {
        Self {
            shared: Vec::new(),
            own: Arc::new(vec![KvCache::default(); n_layers]),
            len: 0,
        }
    }

    /// Positions held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Positions held in shared segments (they come first).
    fn shared_len(&self) -> usize {
        self.shared.iter().map(|(_, n)| n).sum()
    }

    /// Own positions writable in place, copying them first if a fork still shares them.
    pub(super) fn own_mut(&mut self) -> &mut Vec<KvCache> {
        Arc::make_mut(&mut self.own)
    }

    /// Drops positions from `len` on (no-op if it holds fewer); keeps the allocation of the
    /// own positions unless a fork shares them (then only the positions kept are copied).
    pub fn truncate(&mut self, len: usize, kv_dim: usize) {
        if len >= self.len {
            return;
        }
        let shared = self.shared_len();
        let keep_own = len.saturating_sub(shared) * kv_dim;
        match Arc::get_mut(&mut self.own) {
            Some(own) => own.iter_mut().for_each(|c| {
                c.k.truncate(keep_own);
                c.v.truncate(keep_own);
            }),
            None => {
                let own = self.own.iter().map(|c| KvCache {
                    k: c.k[..keep_own].to_vec(),
                    v: c.v[..keep_own].to_vec(),
                });
                self.own = Arc::new(own.collect());
            }
        }
        if len < shared {
            let mut at = 0;
            self.shared.retain_mut(|(_, n)| {
                *n = (*n).min(len - at.min(len));
                at += *n;
                *n > 0
            });
        }
        self.len = len;
    }

    /// A new cache holding the first `len` positions (at most [`len`](Self::len)), sharing
    /// them instead of copying: `O(segments)`, no arithmetic, no copy. The positions are the
    /// same bits, so feeding the fork the same tokens gives the same bits as feeding the
    /// original. Appending to or truncating this cache later copies its own positions first
    /// while the fork holds them (copy-on-write).
    pub fn fork(&self, len: usize) -> Self {
        let len = len.min(self.len);
        let n_layers = self.own.len();
        let mut shared = Vec::new();
        let mut at = 0;
        for (seg, n) in &self.shared {
            if at >= len {
                break;
            }
            let take = (*n).min(len - at);
            shared.push((Arc::clone(seg), take));
            at += take;
        }
        if len > at {
            shared.push((Arc::clone(&self.own), len - at));
        }
        Self {
            shared,
            own: Arc::new(vec![KvCache::default(); n_layers]),
            len,
        }
    }

    /// Bytes allocated for this cache's own keys and values (capacity, not just the positions
    /// held; positions shared through [`fork`](Self::fork) are not counted).
    pub fn allocated_bytes(&self) -> usize {
        self.own
            .iter()
            .map(|c| (c.k.capacity() + c.v.capacity()) * std::mem::size_of::<f32>())
            .sum()
    }

    /// Layer `l` as attention reads it: the shared views, then the own positions — all
    /// of them, including those appended in the current pass before `len` counts them.
    pub(super) fn view(&self, l: usize, kv_dim: usize) -> SeqView<'_> {
        let mut segs = Vec::with_capacity(self.shared.len() + 1);
        let mut start = 0;
        for (seg, n) in &self.shared {
            segs.push(Seg {
                k: &seg[l].k,
                v: &seg[l].v,
                start,
                len: *n,
            });
            start += n;
        }
        let own = &self.own[l];
        segs.push(Seg {
            k: &own.k,
            v: &own.v,
            start,
            len: own.k.len() / kv_dim,
        });
        SeqView {
            segs,
            first: self
                .shared
                .first()
                .map(|(seg, _)| Arc::as_ptr(seg) as usize),
        }
    }
}

/// Consecutive positions `start..start + len` of one layer of a sequence, stored from
/// position 0 of `k` and `v` (`[pos][kv_head][head_dim]`).
#[derive(Clone, Copy, Debug)]
pub(super) struct Seg<'a> {
    pub(super) k: &'a [f32],
    pub(super) v: &'a [f32],
    pub(super) start: usize,
    pub(super) len: usize,
}

/// One sequence's layer as `attention::attention` reads it: its segments in position order, and the
/// identity of its first shared segment's storage (sequences with the same one read those
/// keys together).
#[derive(Debug)]
pub(super) struct SeqView<'a> {
    pub(super) segs: Vec<Seg<'a>>,
    pub(super) first: Option<usize>,
}
