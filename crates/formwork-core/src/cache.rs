//! [`GrammarCache`]: grammars compiled for one vocabulary, kept across requests.
//!
//! A server sees the same schema or tool set again and again; compiling it (schema → grammar →
//! [`CompiledGrammar`]) costs milliseconds to tens of milliseconds, while a cache hit costs
//! one hash of the key. Owns a bounded map from a caller's key (the constraint's canonical
//! text; the cache adds nothing model-specific, since one cache serves one [`TokEnv`]) to the
//! shared compiled grammar, evicting the least recently used entry when full. Errors are not
//! cached: a bad schema costs a compile each time it is sent. `Send + Sync`; a compile runs
//! outside the lock, so two threads missing on one key may both compile it (the first to
//! finish is kept).
//!
//! May use: `grammar`, `schema`, `toktrie`, `matcher`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::grammar::Grammar;
use crate::matcher::{CompiledGrammar, Limits};
use crate::schema::{compile, CompileOptions};
use crate::toktrie::TokEnv;
use crate::Error;

/// Compiled grammars for one vocabulary, at most `capacity` of them, least recently used
/// evicted first.
///
/// # Example
/// ```
/// use std::sync::Arc;
/// use formwork_core::cache::GrammarCache;
/// use formwork_core::toktrie::{SyntheticVocab, TokEnv};
/// use formwork_core::{CompileOptions, Limits};
///
/// let env = TokEnv::new(Arc::new(SyntheticVocab::byte_level()));
/// let cache = GrammarCache::new(env, Limits::default(), 64);
/// let schema = serde_json::json!({"type": "integer"});
/// let a = cache.schema(&schema, &CompileOptions::default())?;
/// let b = cache.schema(&schema, &CompileOptions::default())?;
/// assert!(Arc::ptr_eq(&a, &b));
/// assert_eq!((cache.hits(), cache.len()), (1, 1));
/// # Ok::<(), formwork_core::Error>(())
/// ```
pub struct GrammarCache {
    env: TokEnv,
    limits: Limits,
    capacity: usize,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Key → (grammar, tick of its last use).
    map: HashMap<[u8; 32], (Arc<CompiledGrammar>, u64)>,
    tick: u64,
    hits: u64,
}

impl std::fmt::Debug for GrammarCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrammarCache")
            .field("capacity", &self.capacity)
            .field("len", &self.len())
            .field("hits", &self.hits())
            .finish_non_exhaustive()
    }
}

impl GrammarCache {
    /// An empty cache of at most `capacity` grammars (at least one) compiled for `env` with
    /// `limits`.
    pub fn new(env: TokEnv, limits: Limits, capacity: usize) -> Self {
        GrammarCache {
            env,
            limits,
            capacity: capacity.max(1),
            state: Mutex::default(),
        }
    }

    /// The vocabulary the grammars are compiled for.
    pub fn env(&self) -> &TokEnv {
        &self.env
    }

    /// The compiled grammar of a JSON Schema under `opts`, compiling it on a miss.
    ///
    /// # Errors
    /// The schema's [`SchemaError`](crate::SchemaError) (with its JSON pointer) or the
    /// matcher's compile error; neither is cached.
    pub fn schema(
        &self,
        schema: &Value,
        opts: &CompileOptions,
    ) -> Result<Arc<CompiledGrammar>, Error> {
        let key = format!(
            "schema\0{}\0{}",
            serde_json::to_string(schema).unwrap_or_default(),
            serde_json::to_string(opts).unwrap_or_default()
        );
        self.get_or_compile(key.as_bytes(), || Ok(compile(schema, opts)?.grammar))
    }

    /// The compiled grammar cached under `key`, or the one `build` makes (then cached). The
    /// key must determine the grammar: e.g. a tool set's canonical JSON plus the options that
    /// shape its grammar.
    ///
    /// # Errors
    /// `build`'s error, or the matcher's compile error; neither is cached.
    pub fn get_or_compile<E>(
        &self,
        key: &[u8],
        build: impl FnOnce() -> Result<Grammar, E>,
    ) -> Result<Arc<CompiledGrammar>, E>
    where
        E: From<crate::MatcherError>,
    {
        let digest: [u8; 32] = Sha256::digest(key).into();
        {
            let mut st = self.lock();
            st.tick += 1;
            let tick = st.tick;
            if let Some((g, used)) = st.map.get_mut(&digest) {
                *used = tick;
                let g = g.clone();
                st.hits += 1;
                return Ok(g);
            }
        }
        let compiled = Arc::new(CompiledGrammar::with_env(build()?, &self.env, self.limits)?);
        let mut st = self.lock();
        st.tick += 1;
        let tick = st.tick;
        if let Some((g, used)) = st.map.get_mut(&digest) {
            *used = tick;
            return Ok(g.clone());
        }
        if st.map.len() >= self.capacity {
            let oldest = st
                .map
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(k, _)| *k);
            if let Some(k) = oldest {
                st.map.remove(&k);
            }
        }
        st.map.insert(digest, (compiled.clone(), tick));
        Ok(compiled)
    }

    /// Grammars cached now.
    pub fn len(&self) -> usize {
        self.lock().map.len()
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Lookups answered from the cache so far.
    pub fn hits(&self) -> u64 {
        self.lock().hits
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::toktrie::SyntheticVocab;
    use serde_json::json;

    fn cache(capacity: usize) -> GrammarCache {
        let env = TokEnv::new(Arc::new(SyntheticVocab::byte_level()));
        GrammarCache::new(env, Limits::default(), capacity)
    }

    #[test]
    fn hits_share_the_grammar_and_options_are_part_of_the_key() {
        let c = cache(8);
        let s = json!({"type": "string"});
        let a = c.schema(&s, &CompileOptions::default()).unwrap();
        let b = c.schema(&s, &CompileOptions::default()).unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        let strict = CompileOptions {
            strict: true,
            ..Default::default()
        };
        let d = c.schema(&s, &strict).unwrap();
        assert!(!Arc::ptr_eq(&a, &d));
        assert_eq!((c.len(), c.hits()), (2, 1));
        assert!(Arc::ptr_eq(a.tok_env().trie_arc(), c.env().trie_arc()));
    }

    #[test]
    fn the_least_recently_used_grammar_is_evicted() {
        let c = cache(2);
        let opts = CompileOptions::default();
        let (x, y, z) = (
            json!({"type": "integer"}),
            json!({"type": "boolean"}),
            json!({"type": "null"}),
        );
        let gx = c.schema(&x, &opts).unwrap();
        c.schema(&y, &opts).unwrap();
        c.schema(&x, &opts).unwrap(); // x is now the most recent
        c.schema(&z, &opts).unwrap(); // evicts y
        assert_eq!(c.len(), 2);
        assert!(Arc::ptr_eq(&gx, &c.schema(&x, &opts).unwrap()));
        let hits = c.hits();
        c.schema(&y, &opts).unwrap();
        assert_eq!(c.hits(), hits, "y was evicted: a miss");
    }

    #[test]
    fn errors_are_returned_and_not_cached() {
        let c = cache(4);
        let bad = json!({"type": "string", "pattern": "(?<=a)b"});
        let e = c.schema(&bad, &CompileOptions::default()).unwrap_err();
        assert!(e.to_string().contains("/pattern"), "{e}");
        assert!(c.is_empty());
    }
}
