//! [`TokTrie`]: the byte trie over a vocabulary's token strings, and the walk that turns a
//! byte-level [`Recognizer`] into a token mask.
//!
//! Nodes live in one flat array in preorder; each node stores its byte, its depth and the size
//! of its subtree, so the walk is a single forward loop: when the recognizer rejects a node's
//! byte, the whole subtree is skipped with one addition (`i += subtree`). A token whose bytes
//! are a prefix of another's sits on an inner node. Costs: building sorts the tokens,
//! O(total bytes · log tokens); a walk is O(visited nodes) recognizer calls and never allocates.
//!
//! Excluded from the trie: special tokens (they never come out of text matching), tokens with
//! empty byte strings (they would let a model stall forever), and the EOS ids (kept apart so the
//! matcher can allow them exactly when the grammar accepts).

use std::collections::HashMap;

use super::{TokenId, TokenSet, Vocab};

const NO_TOKEN: u32 = u32::MAX;
const DUP_FLAG: u32 = 1 << 31;

#[derive(Clone, Copy, Debug)]
struct Node {
    /// The first token ending here, or `NO_TOKEN`.
    token: u32,
    /// Nodes in this subtree, including this one.
    subtree: u32,
    /// Depth (root = 0) in the low 24 bits, `DUP_FLAG` when more than one token has exactly
    /// these bytes.
    bits: u32,
}

impl Node {
    #[inline]
    fn depth(&self) -> usize {
        (self.bits & 0x00ff_ffff) as usize
    }
}

/// A byte-level recognizer the trie drives: it accepts bytes one at a time and can undo them.
///
/// The walk calls `try_push_byte(b)`; on `Ok(true)` the byte is pushed and the walk may descend,
/// on `Ok(false)` nothing was pushed and the subtree is skipped. `pop_bytes(n)` undoes the last
/// `n` successful pushes. An `Err` aborts the walk (a budget ran out).
pub trait Recognizer {
    /// Why a push could not be decided.
    type Error;
    /// Tries to extend the input by `byte`.
    fn try_push_byte(&mut self, byte: u8) -> Result<bool, Self::Error>;
    /// Undoes the last `n` successful pushes.
    fn pop_bytes(&mut self, n: usize);
    /// Like [`try_push_byte`](Self::try_push_byte), also told the trie node the byte belongs
    /// to (for recognizers that record where they stopped, e.g. to cache masks).
    #[inline]
    fn try_push_node(&mut self, byte: u8, node: usize) -> Result<bool, Self::Error> {
        let _ = node;
        self.try_push_byte(byte)
    }
}

/// The token trie of one vocabulary. Immutable after construction; share it in an `Arc`.
#[derive(Clone)]
pub struct TokTrie {
    nodes: Vec<Node>,
    /// The byte of each node (kept apart so the hot `Node` stays 12 bytes).
    node_bytes: Vec<u8>,
    /// Tokens beyond the first for nodes flagged `DUP_FLAG`.
    dups: HashMap<u32, Vec<u32>>,
    token_node: Vec<u32>,
    eos: Vec<TokenId>,
    vocab_len: usize,
    max_token_len: usize,
    tokens_in_trie: usize,
}

impl TokTrie {
    /// Builds the trie of `vocab`'s non-special, non-empty tokens.
    pub fn new(vocab: &dyn Vocab) -> Self {
        let n = vocab.vocab_len();
        let eos: Vec<TokenId> = vocab.eos_tokens().to_vec();
        let mut toks: Vec<(&[u8], u32)> = (0..n as u32)
            .filter(|&i| {
                let t = TokenId(i);
                !vocab.is_special(t) && !eos.contains(&t) && !vocab.token_bytes(t).is_empty()
            })
            .map(|i| (vocab.token_bytes(TokenId(i)), i))
            .collect();
        toks.sort_unstable();
        let mut nodes = vec![Node {
            token: NO_TOKEN,
            subtree: 0,
            bits: 0,
        }];
        let mut node_bytes = vec![0u8];
        let mut dups: HashMap<u32, Vec<u32>> = HashMap::new();
        let mut token_node = vec![NO_TOKEN; n];
        // Open path: node indices at depths 1..=len of the previous token.
        let mut path: Vec<u32> = Vec::new();
        let mut prev: &[u8] = &[];
        let mut max_token_len = 0;
        for &(bytes, id) in &toks {
            max_token_len = max_token_len.max(bytes.len());
            let lcp = prev.iter().zip(bytes).take_while(|(a, b)| a == b).count();
            while path.len() > lcp {
                let idx = path.pop().expect("non-empty path") as usize;
                nodes[idx].subtree = (nodes.len() - idx) as u32;
            }
            for (k, &b) in bytes.iter().enumerate().skip(lcp) {
                path.push(nodes.len() as u32);
                nodes.push(Node {
                    token: NO_TOKEN,
                    subtree: 0,
                    bits: k as u32 + 1,
                });
                node_bytes.push(b);
            }
            let at = *path.last().expect("tokens are non-empty") as usize;
            if nodes[at].token == NO_TOKEN {
                nodes[at].token = id;
            } else {
                nodes[at].bits |= DUP_FLAG;
                dups.entry(at as u32).or_default().push(id);
            }
            token_node[id as usize] = at as u32;
            prev = bytes;
        }
        while let Some(idx) = path.pop() {
            let idx = idx as usize;
            nodes[idx].subtree = (nodes.len() - idx) as u32;
        }
        nodes[0].subtree = nodes.len() as u32;
        Self {
            nodes,
            node_bytes,
            dups,
            token_node,
            eos,
            vocab_len: n,
            max_token_len,
            tokens_in_trie: toks.len(),
        }
    }

    /// Number of token ids in the vocabulary (the mask's universe).
    pub fn vocab_len(&self) -> usize {
        self.vocab_len
    }

    /// The end-of-sequence ids.
    pub fn eos_tokens(&self) -> &[TokenId] {
        &self.eos
    }

    /// Whether `t` is one of the EOS ids.
    pub fn is_eos(&self, t: TokenId) -> bool {
        self.eos.contains(&t)
    }

    /// Number of trie nodes (including the root): the worst-case cost of one walk.
    pub fn nodes_len(&self) -> usize {
        self.nodes.len()
    }

    /// Number of tokens in the trie (non-special, non-empty, not EOS).
    pub fn tokens_len(&self) -> usize {
        self.tokens_in_trie
    }

    /// The longest token, in bytes.
    pub fn max_token_len(&self) -> usize {
        self.max_token_len
    }

    /// Whether `t` is in the trie (so it can ever be in a mask other than as EOS).
    pub fn has_token(&self, t: TokenId) -> bool {
        self.token_node
            .get(t.as_usize())
            .is_some_and(|&n| n != NO_TOKEN)
    }

    /// The trie node reached by `bytes` from the root, if any.
    pub fn node_of(&self, bytes: &[u8]) -> Option<usize> {
        bytes.iter().try_fold(0, |at, &b| self.child(at, b))
    }

    /// The child of `node` on the edge `byte`, if any (the root is node 0).
    pub fn child(&self, node: usize, byte: u8) -> Option<usize> {
        let end = node + self.nodes[node].subtree as usize;
        let mut c = node + 1;
        while c < end {
            if self.node_bytes[c] == byte {
                return Some(c);
            }
            c += self.nodes[c].subtree as usize;
        }
        None
    }

    /// The children of `node`, in the trie's (preorder) order.
    ///
    /// # Panics
    /// If `node` is not a node of this trie.
    pub fn children(&self, node: usize) -> impl Iterator<Item = usize> + '_ {
        let end = node + self.nodes[node].subtree as usize;
        let mut c = node + 1;
        std::iter::from_fn(move || {
            (c < end).then(|| {
                let at = c;
                c += self.nodes[c].subtree as usize;
                at
            })
        })
    }

    /// Whether some token in the trie is strictly longer than `bytes` and starts with them.
    pub fn has_extension(&self, bytes: &[u8]) -> bool {
        self.node_of(bytes)
            .is_some_and(|n| self.nodes[n].subtree > 1)
    }

    /// Adds to `mask` every token of the trie that `rec` accepts byte by byte from its current
    /// state, pruning a subtree at the first rejected byte. `rec` is left as it was found.
    /// Returns the number of nodes visited (the work done).
    pub fn add_allowed<R: Recognizer>(
        &self,
        rec: &mut R,
        mask: &mut TokenSet,
    ) -> Result<usize, R::Error> {
        self.walk_range(rec, mask, 1, self.nodes.len(), 0)
    }

    /// Like [`add_allowed`](Self::add_allowed) for the subtree rooted at `node` only, with `rec`
    /// positioned at `node`'s parent (so the first byte tried is `node`'s).
    ///
    /// # Panics
    /// If `node` is not a node of this trie, or is the root.
    pub fn add_allowed_subtree<R: Recognizer>(
        &self,
        rec: &mut R,
        mask: &mut TokenSet,
        node: usize,
    ) -> Result<usize, R::Error> {
        assert!(node > 0, "the root has no byte");
        let end = node + self.nodes[node].subtree as usize;
        self.walk_range(rec, mask, node, end, self.nodes[node].depth() - 1)
    }

    /// The nodes of the subtree rooted at `node` (`node` first: the trie is in preorder).
    ///
    /// # Panics
    /// If `node` is not a node of this trie.
    pub fn subtree(&self, node: usize) -> std::ops::Range<usize> {
        node..node + self.nodes[node].subtree as usize
    }

    /// The byte on the edge into `node`.
    ///
    /// # Panics
    /// If `node` is not a node of this trie.
    pub fn node_byte(&self, node: usize) -> u8 {
        self.node_bytes[node]
    }

    /// Removes from `mask` every token in the subtree rooted at `node` (O(subtree nodes)).
    pub fn remove_subtree_tokens(&self, node: usize, mask: &mut TokenSet) {
        self.for_each_subtree_token(node, |t| mask.remove(t));
    }

    /// Calls `f` with every token whose bytes start with the bytes of `node` (the tokens of
    /// the subtree rooted at it, duplicates included), in preorder (O(subtree nodes)).
    ///
    /// # Panics
    /// If `node` is not a node of this trie.
    pub fn for_each_subtree_token(&self, node: usize, mut f: impl FnMut(TokenId)) {
        for i in self.subtree(node) {
            let n = self.nodes[i];
            if n.token != NO_TOKEN {
                f(TokenId(n.token));
                if n.bits & DUP_FLAG != 0 {
                    for &t in self.dups.get(&(i as u32)).into_iter().flatten() {
                        f(TokenId(t));
                    }
                }
            }
        }
    }

    /// Walks the nodes `start..end` (a subtree or a run of siblings' subtrees) whose parent is at
    /// depth `base_depth`, with `rec` positioned at that parent.
    fn walk_range<R: Recognizer>(
        &self,
        rec: &mut R,
        mask: &mut TokenSet,
        start: usize,
        end: usize,
        base_depth: usize,
    ) -> Result<usize, R::Error> {
        let mut pushed = 0usize;
        let mut i = start;
        let mut visited = 0usize;
        while i < end {
            let node = self.nodes[i];
            let d = node.depth() - base_depth;
            if pushed >= d {
                rec.pop_bytes(pushed - d + 1);
                pushed = d - 1;
            }
            visited += 1;
            let b = self.node_bytes[i];
            match rec.try_push_node(b, i) {
                Ok(true) => {
                    pushed += 1;
                    if node.token != NO_TOKEN {
                        mask.insert_raw(node.token);
                        if node.bits & DUP_FLAG != 0 {
                            if let Some(more) = self.dups.get(&(i as u32)) {
                                for &t in more {
                                    mask.insert_raw(t);
                                }
                            }
                        }
                    }
                    i += 1;
                }
                Ok(false) => i += node.subtree as usize,
                Err(e) => {
                    rec.pop_bytes(pushed);
                    return Err(e);
                }
            }
        }
        rec.pop_bytes(pushed);
        Ok(visited)
    }
}

/// The byte automaton of a vocabulary slice: text made of "characters" of one class. ASCII
/// bytes in `ascii` are one-byte characters; with `utf8`, so is every well-formed multi-byte
/// UTF-8 sequence (RFC 3629: no overlongs, no surrogates, at most U+10FFFF). A token is in the
/// slice when the automaton accepts all its bytes, even if it ends inside a character.
///
/// States: 0 is a character boundary; 1–3 wait for that many continuation bytes; 4–7 wait for
/// the restricted second byte after `E0`, `ED`, `F0` and `F4`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SliceClass {
    /// Bit `b` set: ASCII byte `b` is a character of the class.
    pub ascii: u128,
    /// Whether every well-formed multi-byte UTF-8 character is in the class.
    pub utf8: bool,
}

impl SliceClass {
    /// The state after `byte` from `state`, or `None` if the byte leaves the class.
    #[inline]
    pub fn next(&self, state: u8, byte: u8) -> Option<u8> {
        match (state, byte) {
            (0, 0x00..=0x7f) => (self.ascii >> byte & 1 == 1).then_some(0),
            (0, _) if !self.utf8 => None,
            (0, 0xc2..=0xdf) => Some(1),
            (0, 0xe0) => Some(4),
            (0, 0xe1..=0xec | 0xee..=0xef) => Some(2),
            (0, 0xed) => Some(5),
            (0, 0xf0) => Some(6),
            (0, 0xf1..=0xf3) => Some(3),
            (0, 0xf4) => Some(7),
            (1..=3, 0x80..=0xbf) => Some(state - 1),
            (4, 0xa0..=0xbf) | (5, 0x80..=0x9f) => Some(1),
            (6, 0x90..=0xbf) | (7, 0x80..=0x8f) => Some(2),
            _ => None,
        }
    }
}

/// A slice of the vocabulary ([`TokTrie::slice`]): the tokens of one [`SliceClass`], added to a
/// mask at once, and where the rest of the trie must still be walked.
///
/// Characters are counted for recognizer states that do not loop but advance one state per
/// character (a counted repetition such as a JSON string with `maxLength`): such a state allows
/// the slice's tokens of at most `k` characters, `k` the number of characters it can still
/// take ([`tokens_upto`](Self::tokens_upto)), and each frontier subtree is walked from the
/// state reached after the characters on the path to it ([`frontier_chars`](Self::frontier_chars)).
#[derive(Clone, Debug)]
pub struct TokenSlice {
    /// Every token whose bytes the class automaton accepts.
    pub tokens: TokenSet,
    /// The nodes the automaton rejects at a character boundary while accepting the path to
    /// their parent, in trie order: the subtrees still to walk. (Nodes rejected inside a
    /// character are not listed: callers check that their recognizer rejects them too.)
    pub frontier: Vec<u32>,
    /// For each frontier node, the characters on the path to its parent (all in the class).
    pub frontier_chars: Vec<u32>,
    /// The root's children the automaton accepts (one-byte paths inside the slice).
    pub root_children: Vec<u32>,
    /// The most characters begun on any path the automaton accepts (a token ending inside a
    /// character counts that character).
    pub max_chars: u32,
    /// Cumulative token sets at a few character counts (`(k, tokens of at most k characters)`,
    /// ascending `k`, below `max_chars`), so that [`tokens_upto`](Self::tokens_upto) is one copy
    /// plus a short list of inserts.
    upto: Vec<(u32, TokenSet)>,
    /// `(characters, token)` of every token of the slice, sorted.
    by_chars: Vec<(u32, u32)>,
}

/// Character counts at which [`TokenSlice`] keeps a cumulative token set.
const SLICE_CHECKPOINTS: [u32; 10] = [1, 2, 3, 4, 6, 8, 12, 16, 24, 32];

impl TokenSlice {
    /// Fills `mask` (previous contents discarded) with the slice's tokens of at most `k`
    /// characters: all of them when `k >= max_chars`.
    pub fn tokens_upto(&self, k: u32, mask: &mut TokenSet) {
        if k >= self.max_chars {
            mask.copy_from(&self.tokens);
            return;
        }
        let base = match self.upto.iter().rev().find(|(c, _)| *c <= k) {
            Some((c, set)) => {
                mask.copy_from(set);
                *c
            }
            None => {
                mask.clear();
                0
            }
        };
        let from = self.by_chars.partition_point(|&(c, _)| c <= base);
        for &(c, t) in &self.by_chars[from..] {
            if c > k {
                break;
            }
            mask.insert_raw(t);
        }
    }
}

impl TokTrie {
    /// Computes the slice of `class`: one pass over the trie, O(nodes), no recognizer calls.
    /// A recognizer state that stays put on every character of the class (and rejects
    /// malformed continuations) allows `tokens` plus whatever a walk of the `frontier`
    /// subtrees allows from that same state.
    pub fn slice(&self, class: SliceClass) -> TokenSlice {
        let mut tokens = TokenSet::new(self.vocab_len);
        let mut frontier = Vec::new();
        let mut frontier_chars = Vec::new();
        let mut root_children = Vec::new();
        let mut by_chars = Vec::new();
        let mut max_chars = 0;
        // Automaton state and characters begun after each depth of the current path.
        let mut at = vec![0u8; self.max_token_len + 1];
        let mut chars = vec![0u32; self.max_token_len + 1];
        let mut i = 1;
        while i < self.nodes.len() {
            let node = self.nodes[i];
            let d = node.depth();
            let parent = at[d - 1];
            match class.next(parent, self.node_bytes[i]) {
                Some(a) => {
                    at[d] = a;
                    chars[d] = chars[d - 1] + u32::from(parent == 0);
                    max_chars = max_chars.max(chars[d]);
                    if d == 1 {
                        root_children.push(i as u32);
                    }
                    if node.token != NO_TOKEN {
                        tokens.insert_raw(node.token);
                        by_chars.push((chars[d], node.token));
                        if node.bits & DUP_FLAG != 0 {
                            for &t in self.dups.get(&(i as u32)).into_iter().flatten() {
                                tokens.insert_raw(t);
                                by_chars.push((chars[d], t));
                            }
                        }
                    }
                    i += 1;
                }
                None => {
                    if parent == 0 {
                        frontier.push(i as u32);
                        frontier_chars.push(chars[d - 1]);
                    }
                    i += node.subtree as usize;
                }
            }
        }
        by_chars.sort_unstable();
        let mut upto = Vec::new();
        let mut acc = TokenSet::new(self.vocab_len);
        let mut j = 0;
        for &k in SLICE_CHECKPOINTS.iter().filter(|&&k| k < max_chars) {
            while j < by_chars.len() && by_chars[j].0 <= k {
                acc.insert_raw(by_chars[j].1);
                j += 1;
            }
            upto.push((k, acc.clone()));
        }
        TokenSlice {
            tokens,
            frontier,
            frontier_chars,
            root_children,
            max_chars,
            upto,
            by_chars,
        }
    }

    /// The depth of `node` (its token prefix length; the root is 0).
    ///
    /// # Panics
    /// If `node` is not a node of this trie.
    pub fn node_depth(&self, node: usize) -> usize {
        self.nodes[node].depth()
    }
}

impl std::fmt::Debug for TokTrie {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokTrie")
            .field("vocab_len", &self.vocab_len)
            .field("tokens", &self.tokens_in_trie)
            .field("nodes", &self.nodes.len())
            .field("max_token_len", &self.max_token_len)
            .field("eos", &self.eos)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::toktrie::SyntheticVocab;

    /// Accepts byte strings that are prefixes of one of `words`.
    struct Prefixes {
        words: Vec<Vec<u8>>,
        buf: Vec<u8>,
    }

    impl Recognizer for Prefixes {
        type Error = ();
        fn try_push_byte(&mut self, byte: u8) -> Result<bool, ()> {
            self.buf.push(byte);
            if self.words.iter().any(|w| w.starts_with(&self.buf)) {
                Ok(true)
            } else {
                self.buf.pop();
                Ok(false)
            }
        }
        fn pop_bytes(&mut self, n: usize) {
            let l = self.buf.len() - n;
            self.buf.truncate(l);
        }
    }

    #[test]
    fn walk_matches_brute_force() {
        let toks: Vec<&str> = vec![
            "a", "ab", "abc", "b", "ba", "bab", "c", "abd", "x", "xyz", "ab", "",
        ];
        let v = SyntheticVocab::new(toks.iter().map(|s| s.as_bytes().to_vec()).collect());
        let trie = TokTrie::new(&v);
        for words in [vec!["abc"], vec!["ba", "xy"], vec!["zzz"], vec!["abd", "c"]] {
            let words: Vec<Vec<u8>> = words.iter().map(|w| w.as_bytes().to_vec()).collect();
            let mut rec = Prefixes {
                words: words.clone(),
                buf: vec![],
            };
            let mut mask = TokenSet::new(v.vocab_len());
            trie.add_allowed(&mut rec, &mut mask).unwrap();
            assert!(rec.buf.is_empty());
            for id in 0..v.vocab_len() as u32 {
                let t = TokenId(id);
                let b = v.token_bytes(t);
                let want =
                    !b.is_empty() && !v.is_special(t) && words.iter().any(|w| w.starts_with(b));
                assert_eq!(mask.contains(t), want, "token {id} {:?}", b);
            }
        }
    }

    /// Accepts bytes while the slice automaton does, like a lexer state looping on the class.
    struct InClass {
        class: SliceClass,
        states: Vec<u8>,
    }

    impl Recognizer for InClass {
        type Error = ();
        fn try_push_byte(&mut self, byte: u8) -> Result<bool, ()> {
            let s = *self.states.last().unwrap();
            match self.class.next(s, byte) {
                Some(n) => {
                    self.states.push(n);
                    Ok(true)
                }
                None => Ok(false),
            }
        }
        fn pop_bytes(&mut self, n: usize) {
            let l = self.states.len() - n;
            self.states.truncate(l);
        }
    }

    /// A slice's tokens are exactly those a walk with the class automaton allows; its frontier
    /// is every node rejected at a character boundary under an accepted path.
    #[test]
    fn slices_match_a_walk() {
        let toks: Vec<&[u8]> = vec![
            b"ab",
            b"a\"b",
            b"\"",
            b"\xc3\xa9",
            b"\xc3",
            b"\xa9",
            b"x\xc3\xa9\"",
            b"\xe2\x82\xac",
            b"\xe2\x82",
            b"\xed\xa0\x80",
            b"\xf0\x9f\x98\x80!",
            b"\xff",
            b"a\xc3(",
            b"\\n",
            b"zz\\",
        ];
        let v = SyntheticVocab::new(toks.iter().map(|t| t.to_vec()).collect());
        let trie = TokTrie::new(&v);
        let printable: u128 = (0x20u32..0x7f)
            .filter(|&b| b != b'"' as u32 && b != b'\\' as u32)
            .fold(0, |m, b| m | 1 << b);
        for utf8 in [false, true] {
            let class = SliceClass {
                ascii: printable,
                utf8,
            };
            let slice = trie.slice(class);
            let mut want = TokenSet::new(v.vocab_len());
            let mut rec = InClass {
                class,
                states: vec![0],
            };
            trie.add_allowed(&mut rec, &mut want).unwrap();
            assert_eq!(slice.tokens, want, "utf8 {utf8}");
            let frontier: Vec<Vec<u8>> = slice
                .frontier
                .iter()
                .map(|&n| {
                    let t = (0..v.vocab_len() as u32)
                        .find(|&t| {
                            trie.token_node[t as usize] as usize >= n as usize
                                && (trie.token_node[t as usize] as usize)
                                    < n as usize + trie.nodes[n as usize].subtree as usize
                        })
                        .unwrap();
                    v.token_bytes(TokenId(t))[..trie.node_depth(n as usize)].to_vec()
                })
                .collect();
            // Brute force: prefixes accepted up to a boundary, then rejected.
            let mut expect: Vec<Vec<u8>> = Vec::new();
            for id in 0..v.vocab_len() as u32 {
                let b = v.token_bytes(TokenId(id));
                let mut st = Some(0u8);
                for k in 0..b.len() {
                    let Some(a) = st else { break };
                    st = class.next(a, b[k]);
                    if st.is_none() && a == 0 && !expect.contains(&b[..=k].to_vec()) {
                        expect.push(b[..=k].to_vec());
                    }
                }
            }
            assert!(expect.contains(&b"a\"".to_vec()) && expect.contains(&b"zz\\".to_vec()));
            assert_eq!(expect.contains(&b"x\xc3\xa9\"".to_vec()), utf8);
            expect.sort();
            let mut got = frontier.clone();
            got.sort();
            assert_eq!(got, expect, "utf8 {utf8}");
            assert!(slice
                .root_children
                .iter()
                .all(|&n| trie.node_depth(n as usize) == 1));
        }
    }

    #[test]
    fn extension_queries() {
        let v = SyntheticVocab::new(vec![b"ab".to_vec(), b"abc".to_vec()]);
        let trie = TokTrie::new(&v);
        assert!(trie.has_extension(b"ab"));
        assert!(!trie.has_extension(b"abc"));
        assert!(trie.has_extension(b""));
        assert!(trie.node_of(b"zz").is_none());
    }
}
