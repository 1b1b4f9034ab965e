//! Schema documents given alongside a schema, so its remote `$ref`s resolve without a network.
//!
//! Owns the set of documents a caller supplies (by URI, or read from a directory: each file by
//! its path under a base URI and by its own `$id`). The resolver indexes them with the
//! schema's own document; a `$ref` to anything not given is still
//! [`SchemaError::RemoteRef`](super::SchemaError::RemoteRef): formwork never fetches.
//! Costs: documents are shared (`Arc`) between clones of the options that carry them; a
//! fingerprint of their text, taken when each is added, stands in for them in `Hash`/`Eq`
//! (so a grammar cache keyed by compile options tells registries apart).
//!
//! May use: `error`.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::path::Path;
use std::sync::Arc;

use serde_json::Value;

use super::error::SchemaError;

/// Documents a compile may reference by URI. Empty by default.
///
/// # Example
/// ```
/// use formwork_core::schema::{compile, CompileOptions, SchemaRegistry};
/// use serde_json::json;
/// let mut registry = SchemaRegistry::default();
/// registry.insert("https://example.com/point.json", json!({"type": "integer"}));
/// let opts = CompileOptions { registry, ..Default::default() };
/// let schema = json!({"$ref": "https://example.com/point.json"});
/// assert!(compile(&schema, &opts).is_ok());
/// assert!(compile(&schema, &CompileOptions::default()).is_err()); // never fetched
/// ```
#[derive(Clone, Debug, Default)]
pub struct SchemaRegistry {
    docs: Arc<BTreeMap<String, Value>>,
    fingerprint: u64,
}

impl SchemaRegistry {
    /// Adds `doc` as the document at `uri` (a fragment, if any, is dropped), replacing one
    /// given there before. Its `$id`s (and anchors) are indexed when a schema is compiled.
    pub fn insert(&mut self, uri: &str, doc: Value) {
        let uri = uri.split('#').next().unwrap_or("").to_string();
        let mut h = std::collections::hash_map::DefaultHasher::new();
        self.fingerprint.hash(&mut h);
        uri.hash(&mut h);
        doc.to_string().hash(&mut h);
        self.fingerprint = h.finish();
        Arc::make_mut(&mut self.docs).insert(uri, doc);
    }

    /// Reads every `*.json` file under `dir` (recursively, in path order): each is added at
    /// `base` joined with its path relative to `dir` (`base` `http://localhost:1234/` and
    /// `nested/foo.json` give `http://localhost:1234/nested/foo.json`; without `base`, its
    /// `file://` URL), and again at its root `$id` (or draft 4's `id`) when that is an
    /// absolute URI.
    ///
    /// # Errors
    /// A directory or file that cannot be read, or a file that is not JSON:
    /// [`SchemaError::Invalid`] naming the path (and line:column).
    pub fn from_dir(dir: &Path, base: Option<&str>) -> Result<Self, SchemaError> {
        let mut files = Vec::new();
        collect_json_files(dir, &mut files)?;
        files.sort();
        let mut reg = SchemaRegistry::default();
        for path in files {
            let text = std::fs::read_to_string(&path).map_err(|e| file_error(&path, &e))?;
            let doc: Value = serde_json::from_str(&text).map_err(|e| file_error(&path, &e))?;
            let rel = path.strip_prefix(dir).unwrap_or(&path);
            let rel = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy())
                .collect::<Vec<_>>()
                .join("/");
            let uri = match base {
                Some(b) => format!("{}/{rel}", b.trim_end_matches('/')),
                None => {
                    let abs = std::fs::canonicalize(&path).unwrap_or(path.clone());
                    format!("file://{}", abs.display())
                }
            };
            let id = ["$id", "id"]
                .iter()
                .find_map(|k| doc.get(*k).and_then(Value::as_str))
                .filter(|id| id.contains(':'))
                .map(str::to_string);
            if let Some(id) = id {
                reg.insert(&id, doc.clone());
            }
            reg.insert(&uri, doc);
        }
        Ok(reg)
    }

    /// Number of documents.
    pub fn len(&self) -> usize {
        self.docs.len()
    }

    /// Whether no document was given.
    pub fn is_empty(&self) -> bool {
        self.docs.is_empty()
    }

    /// The documents by URI.
    pub(crate) fn docs(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.docs.iter().map(|(u, d)| (u.as_str(), d))
    }

    /// The document at `uri`.
    pub(crate) fn get(&self, uri: &str) -> Option<&Value> {
        self.docs.get(uri)
    }
}

impl PartialEq for SchemaRegistry {
    fn eq(&self, other: &Self) -> bool {
        self.fingerprint == other.fingerprint && self.docs.len() == other.docs.len()
    }
}

impl Eq for SchemaRegistry {}

impl Hash for SchemaRegistry {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.fingerprint.hash(state);
    }
}

fn file_error(path: &Path, e: &dyn std::fmt::Display) -> SchemaError {
    SchemaError::Invalid {
        pointer: path.display().to_string(),
        message: format!("schema registry file: {e}"),
    }
}

fn collect_json_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) -> Result<(), SchemaError> {
    let entries = std::fs::read_dir(dir).map_err(|e| file_error(dir, &e))?;
    for entry in entries {
        let path = entry.map_err(|e| file_error(dir, &e))?.path();
        if path.is_dir() {
            collect_json_files(&path, out)?;
        } else if path.extension().is_some_and(|x| x == "json") {
            out.push(path);
        }
    }
    Ok(())
}
