//! [`TokenSet`]: a caller-owned bitset over token ids, the mask the matcher fills.
//!
//! One bit per token id, packed in `u64` words. Clearing and copying cost O(vocab / 64) word
//! operations (4,096 words for a 262k vocabulary); setting and testing a bit is O(1).

use super::TokenId;

/// A set of token ids (a logit mask): bit `i` set means token `i` is allowed.
#[derive(Clone, PartialEq, Eq)]
pub struct TokenSet {
    words: Vec<u64>,
    len: usize,
}

impl TokenSet {
    /// An empty set over ids `0..len`.
    pub fn new(len: usize) -> Self {
        Self {
            words: vec![0; len.div_ceil(64)],
            len,
        }
    }

    /// A full set over ids `0..len`.
    pub fn full(len: usize) -> Self {
        let mut s = Self::new(len);
        s.set_all();
        s
    }

    /// The number of ids the set ranges over (not the number of members).
    pub fn universe_len(&self) -> usize {
        self.len
    }

    /// Removes every member.
    pub fn clear(&mut self) {
        self.words.fill(0);
    }

    /// Adds every id in `0..universe_len()`.
    pub fn set_all(&mut self) {
        self.words.fill(!0);
        let rem = self.len % 64;
        if rem != 0 {
            if let Some(last) = self.words.last_mut() {
                *last = (1u64 << rem) - 1;
            }
        }
    }

    /// Adds `id`.
    ///
    /// # Panics
    /// If `id` is outside the universe.
    #[inline]
    pub fn insert(&mut self, id: TokenId) {
        let i = id.as_usize();
        assert!(i < self.len, "token {i} outside a set of {}", self.len);
        self.words[i / 64] |= 1 << (i % 64);
    }

    /// Adds the id `i` without the range assertion (callers index from a trie built for this
    /// universe).
    #[inline]
    pub(crate) fn insert_raw(&mut self, i: u32) {
        let i = i as usize;
        self.words[i / 64] |= 1 << (i % 64);
    }

    /// Removes `id`.
    pub fn remove(&mut self, id: TokenId) {
        let i = id.as_usize();
        if i < self.len {
            self.words[i / 64] &= !(1 << (i % 64));
        }
    }

    /// Whether `id` is a member (ids outside the universe are not).
    #[inline]
    pub fn contains(&self, id: TokenId) -> bool {
        let i = id.as_usize();
        i < self.len && self.words[i / 64] & (1 << (i % 64)) != 0
    }

    /// The number of members.
    pub fn count(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// Whether there are no members.
    pub fn is_empty(&self) -> bool {
        self.words.iter().all(|&w| w == 0)
    }

    /// Adds every member of `other` (same universe).
    ///
    /// # Panics
    /// If the universes differ.
    pub fn union_with(&mut self, other: &TokenSet) {
        assert_eq!(self.len, other.len, "token sets over different universes");
        for (a, b) in self.words.iter_mut().zip(&other.words) {
            *a |= *b;
        }
    }

    /// Makes this set equal to `other` (same universe): one copy of the words, cheaper than
    /// [`clear`](Self::clear) followed by [`union_with`](Self::union_with).
    ///
    /// # Panics
    /// If the universes differ.
    pub fn copy_from(&mut self, other: &TokenSet) {
        assert_eq!(self.len, other.len, "token sets over different universes");
        self.words.copy_from_slice(&other.words);
    }

    /// The members in increasing order.
    pub fn iter(&self) -> impl Iterator<Item = TokenId> + '_ {
        self.words.iter().enumerate().flat_map(|(wi, &w)| {
            let mut w = w;
            std::iter::from_fn(move || {
                if w == 0 {
                    return None;
                }
                let b = w.trailing_zeros();
                w &= w - 1;
                Some(TokenId(wi as u32 * 64 + b))
            })
        })
    }

    /// The raw words, bit `i % 64` of word `i / 64` for token `i` (for samplers that apply the
    /// mask to a logits buffer).
    pub fn as_words(&self) -> &[u64] {
        &self.words
    }
}

/// Prints the size and the first members, e.g. `TokenSet(3/49152: [1, 7, 9])`.
impl std::fmt::Debug for TokenSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let first: Vec<u32> = self.iter().take(16).map(|t| t.0).collect();
        write!(f, "TokenSet({}/{}: {:?}", self.count(), self.len, first)?;
        if self.count() > 16 {
            write!(f, "…")?;
        }
        write!(f, ")")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_all_respects_universe() {
        let mut s = TokenSet::new(70);
        s.set_all();
        assert_eq!(s.count(), 70);
        assert!(s.contains(TokenId(69)));
        assert!(!s.contains(TokenId(70)));
        s.remove(TokenId(3));
        assert_eq!(s.count(), 69);
        assert_eq!(s.iter().next(), Some(TokenId(0)));
        assert_eq!(s.iter().nth(3), Some(TokenId(4)));
    }

    #[test]
    fn union_and_iter() {
        let mut a = TokenSet::new(200);
        let mut b = TokenSet::new(200);
        a.insert(TokenId(1));
        b.insert(TokenId(130));
        a.union_with(&b);
        assert_eq!(a.iter().collect::<Vec<_>>(), vec![TokenId(1), TokenId(130)]);
        let mut c = TokenSet::full(200);
        c.copy_from(&b);
        assert_eq!(c.iter().collect::<Vec<_>>(), vec![TokenId(130)]);
        a.clear();
        assert!(a.is_empty());
    }
}
