//! Cross-cutting primitives of the engine: the hasher of its hot integer-keyed maps.
//!
//! [`FxHasher`] (rotate, xor, multiply per word, as rustc's FxHash) keys the parser's per-row
//! dedup sets and memos, the row-signature table and the matcher's per-state memos: small
//! integer keys hashed millions of times per second of masking, where SipHash dominated the
//! row building time. It is the crate's only non-std hasher: the string-keyed maps of
//! compilation (lexeme texts in `grammar`, schema names in `schema`) keep std's SipHash, whose
//! random keys a schema sent to the server cannot flood; they are hashed a few times per lexeme
//! and schema node, once per compile, not per token.
//!
//! May use: nothing else in the crate.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

/// FxHash-style hasher for the per-row dedup set: items are two small integers, and SipHash
/// would dominate the row building time.
#[derive(Default)]
pub(crate) struct FxHasher(u64);

impl Hasher for FxHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        // Eight bytes at a time: slices of integers (row signatures) hash as one byte string.
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.write_u64(u64::from_le_bytes(w));
        }
        for &b in chunks.remainder() {
            self.write_u64(b as u64);
        }
    }
    #[inline]
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    #[inline]
    fn write_u32(&mut self, v: u32) {
        self.write_u64(v as u64);
    }
    #[inline]
    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64);
    }
    #[inline]
    fn write_u8(&mut self, v: u8) {
        self.write_u64(v as u64);
    }
}

/// A hash map with the Fx-style hasher, for small integer keys on hot paths.
pub(crate) type FxHashMap<K, V> = HashMap<K, V, BuildHasherDefault<FxHasher>>;

/// A hash set with the Fx-style hasher.
pub(crate) type FxHashSet<K> = HashSet<K, BuildHasherDefault<FxHasher>>;
