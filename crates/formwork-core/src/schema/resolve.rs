//! Loading a schema document: draft detection, `$id`/`$anchor` indexing and local `$ref`
//! resolution to JSON pointers.
//!
//! Owns the mapping from a reference as written (`#/definitions/a`, `#foo`, `item.json#/x`
//! relative to an `$id`) to a JSON pointer into the document the caller gave, or into one of
//! the documents given alongside it ([`SchemaRegistry`]). It does not interpret validation
//! keywords. Remote documents are never fetched: a reference that leaves them all is
//! [`SchemaError::RemoteRef`].
//!
//! A location in the schema's own document is a JSON pointer (`""`, `/properties/a`); one in
//! a given document is its URI, `#`, and a pointer into it
//! (`http://localhost:1234/integer.json#/properties/a`), which is also how errors name it.
//! Given documents are read under the schema's draft.
//! Costs: indexing is one walk over the schema positions of each document; each resolution is
//! a hash lookup plus a pointer walk.

use std::collections::HashMap;

use serde_json::Value;

use super::error::SchemaError;
use super::registry::SchemaRegistry;

/// The JSON Schema draft a document is read under.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Draft {
    /// Draft 4 (`id`, boolean `exclusiveMinimum`).
    Draft4,
    /// Draft 6.
    Draft6,
    /// Draft 7.
    Draft7,
    /// Draft 2019-09.
    Draft2019,
    /// Draft 2020-12 (the default).
    Draft2020,
}

impl Draft {
    /// The draft named by a `$schema` URI, or `None` if it is not a known meta-schema.
    pub fn from_uri(uri: &str) -> Option<Draft> {
        let u = uri.trim_end_matches('#');
        if u.contains("draft-04") {
            Some(Draft::Draft4)
        } else if u.contains("draft-06") {
            Some(Draft::Draft6)
        } else if u.contains("draft-07") {
            Some(Draft::Draft7)
        } else if u.contains("2019-09") {
            Some(Draft::Draft2019)
        } else if u.contains("2020-12") {
            Some(Draft::Draft2020)
        } else {
            None
        }
    }

    /// Whether `$ref` overrides its sibling keywords (drafts 4–7).
    pub fn ref_overrides_siblings(self) -> bool {
        self <= Draft::Draft7
    }

    /// Whether `if`/`then`/`else` are keywords (draft 7 on). Earlier drafts do not define
    /// them, so their validators ignore them as unknown keywords.
    pub fn has_conditionals(self) -> bool {
        self >= Draft::Draft7
    }

    /// The keyword naming a schema's base URI.
    pub fn id_keyword(self) -> &'static str {
        if self == Draft::Draft4 {
            "id"
        } else {
            "$id"
        }
    }
}

/// The base URI of a document without an `$id`.
pub const DEFAULT_BASE: &str = "urn:formwork:root";

/// A loaded schema document with its `$id` and anchor index.
#[derive(Debug, Clone)]
pub struct Document {
    root: Value,
    draft: Draft,
    /// Absolute URI (no fragment) → JSON pointer of the resource.
    ids: HashMap<String, String>,
    /// (resource URI, anchor name) → JSON pointer.
    anchors: HashMap<(String, String), String>,
    /// The documents given alongside.
    registry: SchemaRegistry,
}

/// Keywords whose value is a schema.
const SCHEMA_KEYWORDS: &[&str] = &[
    "additionalProperties",
    "additionalItems",
    "items",
    "contains",
    "propertyNames",
    "not",
    "if",
    "then",
    "else",
    "unevaluatedItems",
    "unevaluatedProperties",
    "contentSchema",
];
/// Keywords whose value is an object of schemas.
const MAP_KEYWORDS: &[&str] = &[
    "properties",
    "patternProperties",
    "$defs",
    "definitions",
    "dependentSchemas",
    "dependencies",
];
/// Keywords whose value is an array of schemas.
const ARRAY_KEYWORDS: &[&str] = &["allOf", "anyOf", "oneOf", "prefixItems", "items"];

impl Document {
    /// Loads `root`, reading it under its `$schema` draft (or `default_draft`).
    pub fn new(root: Value, default_draft: Draft) -> Result<Document, SchemaError> {
        Self::with_registry(root, default_draft, &SchemaRegistry::default())
    }

    /// Loads `root` as [`new`](Self::new) does, with the documents of `registry` for its
    /// remote references.
    pub fn with_registry(
        root: Value,
        default_draft: Draft,
        registry: &SchemaRegistry,
    ) -> Result<Document, SchemaError> {
        let draft = match root.get("$schema") {
            Some(Value::String(s)) => Draft::from_uri(s).unwrap_or(default_draft),
            _ => default_draft,
        };
        let mut ids = HashMap::new();
        let mut anchors = HashMap::new();
        // The given documents first, so the schema's own `$id`s win over theirs.
        for (uri, d) in registry.docs() {
            let mut ptr = format!("{uri}#");
            ids.insert(uri.to_string(), ptr.clone());
            index(d, draft, uri, &mut ptr, &mut ids, &mut anchors, 0);
        }
        ids.insert(DEFAULT_BASE.to_string(), String::new());
        let mut own_ids = HashMap::new();
        index(
            &root,
            draft,
            DEFAULT_BASE,
            &mut String::new(),
            &mut own_ids,
            &mut anchors,
            0,
        );
        ids.extend(own_ids);
        Ok(Document {
            root,
            draft,
            ids,
            anchors,
            registry: registry.clone(),
        })
    }

    /// The document a location is in and the JSON pointer into it, with the document's base
    /// URI: the schema's own for a plain pointer, a given document's for `uri#pointer`.
    fn locate<'s, 'l>(&'s self, location: &'l str) -> Option<(&'s Value, &'l str, &'l str)> {
        if location.is_empty() || location.starts_with('/') {
            return Some((&self.root, location, DEFAULT_BASE));
        }
        let (uri, pointer) = location.split_once('#')?;
        Some((self.registry.get(uri)?, pointer, uri))
    }

    /// The document's draft.
    pub fn draft(&self) -> Draft {
        self.draft
    }

    /// The root schema.
    pub fn root(&self) -> &Value {
        &self.root
    }

    /// The base URI of the root schema.
    pub fn root_base(&self) -> String {
        match self.root.get(self.draft.id_keyword()) {
            Some(Value::String(id)) if !id.starts_with('#') => {
                join(DEFAULT_BASE, strip_fragment(id))
            }
            _ => DEFAULT_BASE.to_string(),
        }
    }

    /// The value at a location (a JSON pointer, or `uri#pointer` in a given document), if any.
    pub fn get(&self, pointer: &str) -> Option<&Value> {
        let (doc, pointer, _) = self.locate(pointer)?;
        doc.pointer(pointer)
    }

    /// Resolves `reference` (as written in a `$ref` at `at`, with base URI `base`) to the JSON
    /// pointer of its target and the target's base URI.
    pub fn resolve(
        &self,
        reference: &str,
        base: &str,
        at: &str,
    ) -> Result<(String, String), SchemaError> {
        let (uri_part, fragment) = match reference.split_once('#') {
            Some((u, f)) => (u, Some(f)),
            None => (reference, None),
        };
        let uri = if uri_part.is_empty() {
            base.to_string()
        } else {
            join(base, uri_part)
        };
        let Some(res_ptr) = self.ids.get(&uri).cloned() else {
            return Err(SchemaError::RemoteRef {
                reference: reference.to_string(),
                pointer: super::error::display_pointer(at),
            });
        };
        // A given document of another draft would be read under the wrong rules: refused.
        if let Some((doc, _, uri)) = self.locate(&res_ptr).filter(|l| l.2 != DEFAULT_BASE) {
            let declared = doc
                .get("$schema")
                .and_then(Value::as_str)
                .and_then(Draft::from_uri);
            if let Some(d) = declared.filter(|&d| d != self.draft) {
                return Err(SchemaError::unsupported(
                    "$ref",
                    at,
                    format!(
                        "the referenced document `{uri}` is of {d:?}, this schema of {:?}: \
                         documents of another draft are not supported",
                        self.draft
                    ),
                ));
            }
        }
        let fragment = percent_decode(fragment.unwrap_or(""));
        let pointer = if fragment.is_empty() {
            res_ptr
        } else if fragment.starts_with('/') {
            format!("{res_ptr}{fragment}")
        } else {
            match self.anchors.get(&(uri.clone(), fragment.clone())) {
                Some(p) => p.clone(),
                None => {
                    return Err(SchemaError::invalid(
                        at,
                        format!("`$ref` anchor `#{fragment}` not found"),
                    ))
                }
            }
        };
        if self.get(&pointer).is_none() {
            return Err(SchemaError::invalid(
                at,
                format!("`$ref` target `{reference}` does not exist"),
            ));
        }
        // The target's base: the nearest enclosing `$id` on the pointer path.
        let target_base = self.base_of(&pointer);
        Ok((pointer, target_base))
    }

    /// The base URI in effect at `pointer` (walks the path from its document's root).
    pub fn base_of(&self, pointer: &str) -> String {
        let Some((mut cur, pointer, base)) = self.locate(pointer) else {
            return DEFAULT_BASE.to_string();
        };
        let mut base = base.to_string();
        let idk = self.draft.id_keyword();
        if let Some(Value::String(id)) = cur.get(idk) {
            if !id.starts_with('#') {
                base = join(&base, strip_fragment(id));
            }
        }
        for tok in super::pointer::tokens(pointer) {
            let next = match cur {
                Value::Object(m) => m.get(&tok),
                Value::Array(a) => tok.parse::<usize>().ok().and_then(|i| a.get(i)),
                _ => None,
            };
            let Some(next) = next else { break };
            cur = next;
            let ref_only = self.draft.ref_overrides_siblings() && cur.get("$ref").is_some();
            if let Some(Value::String(id)) = cur.get(idk).filter(|_| !ref_only) {
                if !id.starts_with('#') {
                    base = join(&base, strip_fragment(id));
                }
            }
        }
        base
    }
}

fn strip_fragment(s: &str) -> &str {
    s.split('#').next().unwrap_or("")
}

/// Walks the schema positions of `v`, recording `$id`s and anchors.
fn index(
    v: &Value,
    draft: Draft,
    base: &str,
    ptr: &mut String,
    ids: &mut HashMap<String, String>,
    anchors: &mut HashMap<(String, String), String>,
    depth: usize,
) {
    let Value::Object(m) = v else { return };
    if depth > 256 {
        return;
    }
    let mut base = base.to_string();
    let ref_only = draft.ref_overrides_siblings() && m.contains_key("$ref");
    if let Some(Value::String(id)) = m.get(draft.id_keyword()).filter(|_| !ref_only) {
        if let Some(anchor) = id.strip_prefix('#') {
            if draft <= Draft::Draft7 && !anchor.is_empty() {
                anchors.insert((base.clone(), anchor.to_string()), ptr.clone());
            }
        } else {
            base = join(&base, strip_fragment(id));
            ids.entry(base.clone()).or_insert_with(|| ptr.clone());
            if let Some((_, frag)) = id.split_once('#') {
                if !frag.is_empty() && !frag.starts_with('/') {
                    anchors.insert((base.clone(), frag.to_string()), ptr.clone());
                }
            }
        }
    }
    for key in ["$anchor", "$dynamicAnchor", "$recursiveAnchor"] {
        if let Some(Value::String(a)) = m.get(key) {
            anchors.insert((base.clone(), a.clone()), ptr.clone());
        }
    }
    for (k, child) in m {
        let len = ptr.len();
        ptr.push('/');
        ptr.push_str(&super::pointer::escape(k));
        if SCHEMA_KEYWORDS.contains(&k.as_str()) {
            index(child, draft, &base, ptr, ids, anchors, depth + 1);
        }
        if MAP_KEYWORDS.contains(&k.as_str()) {
            if let Value::Object(cm) = child {
                for (ck, cv) in cm {
                    let l2 = ptr.len();
                    ptr.push('/');
                    ptr.push_str(&super::pointer::escape(ck));
                    index(cv, draft, &base, ptr, ids, anchors, depth + 1);
                    ptr.truncate(l2);
                }
            }
        }
        if ARRAY_KEYWORDS.contains(&k.as_str()) {
            if let Value::Array(a) = child {
                for (i, cv) in a.iter().enumerate() {
                    let l2 = ptr.len();
                    ptr.push_str(&format!("/{i}"));
                    index(cv, draft, &base, ptr, ids, anchors, depth + 1);
                    ptr.truncate(l2);
                }
            }
        }
        ptr.truncate(len);
    }
}

/// Whether `s` starts with a URI scheme (`http:`, `urn:`, ...).
fn has_scheme(s: &str) -> bool {
    let Some(colon) = s.find(':') else {
        return false;
    };
    let scheme = &s[..colon];
    !scheme.is_empty()
        && scheme
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic())
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
}

/// Resolves the URI reference `rel` against `base` (RFC 3986, the parts schemas use).
pub fn join(base: &str, rel: &str) -> String {
    if rel.is_empty() {
        return strip_fragment(base).to_string();
    }
    if has_scheme(rel) {
        return normalize_path(rel);
    }
    let base = strip_fragment(base);
    if let Some(idx) = base.find("://") {
        let after = &base[idx + 3..];
        let auth_end = after.find('/').map(|i| idx + 3 + i).unwrap_or(base.len());
        let origin = &base[..auth_end];
        if let Some(r) = rel.strip_prefix("//") {
            return format!("{}://{}", &base[..idx], r);
        }
        if rel.starts_with('/') {
            return normalize_path(&format!("{origin}{rel}"));
        }
        let path = &base[auth_end..];
        let dir = match path.rfind('/') {
            Some(i) => &path[..=i],
            None => "/",
        };
        return normalize_path(&format!("{origin}{dir}{rel}"));
    }
    // Opaque base (urn:...): replace after the last '/' or ':'.
    let cut = base.rfind(['/', ':']).map(|i| i + 1).unwrap_or(0);
    normalize_path(&format!("{}{}", &base[..cut], rel))
}

fn normalize_path(uri: &str) -> String {
    if !uri.contains("./") {
        return uri.to_string();
    }
    let (prefix, path) = match uri.find("://") {
        Some(i) => {
            let after = &uri[i + 3..];
            let p = after.find('/').map(|j| i + 3 + j).unwrap_or(uri.len());
            (&uri[..p], &uri[p..])
        }
        None => ("", uri),
    };
    let mut out: Vec<&str> = Vec::new();
    for seg in path.split('/') {
        match seg {
            "." => {}
            ".." => {
                if out.len() > 1 {
                    out.pop();
                }
            }
            s => out.push(s),
        }
    }
    format!("{prefix}{}", out.join("/"))
}

fn percent_decode(s: &str) -> String {
    if !s.contains('%') {
        return s.to_string();
    }
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let Ok(b) = u8::from_str_radix(&s[i + 1..i + 3], 16) {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn draft_detection() {
        let d = Document::new(
            json!({"$schema": "http://json-schema.org/draft-04/schema#"}),
            Draft::Draft2020,
        )
        .unwrap();
        assert_eq!(d.draft(), Draft::Draft4);
        let d = Document::new(json!({}), Draft::Draft2020).unwrap();
        assert_eq!(d.draft(), Draft::Draft2020);
    }

    #[test]
    fn pointer_and_anchor_refs() {
        let d = Document::new(
            json!({
                "$defs": {"a": {"type": "string"}, "b": {"$anchor": "bee"}, "c~/d": {}},
                "definitions": {"x": {"$id": "other.json", "$defs": {"y": {"$anchor": "why"}}}}
            }),
            Draft::Draft2020,
        )
        .unwrap();
        let base = DEFAULT_BASE;
        assert_eq!(d.resolve("#/$defs/a", base, "").unwrap().0, "/$defs/a");
        assert_eq!(d.resolve("#bee", base, "").unwrap().0, "/$defs/b");
        assert_eq!(d.resolve("#", base, "").unwrap().0, "");
        assert_eq!(
            d.resolve("#/$defs/c~0~1d", base, "").unwrap().0,
            "/$defs/c~0~1d"
        );
        assert_eq!(
            d.resolve("other.json#why", base, "").unwrap().0,
            "/definitions/x/$defs/y"
        );
        assert!(matches!(
            d.resolve("http://example.com/s.json", base, "/p"),
            Err(SchemaError::RemoteRef { .. })
        ));
        assert!(matches!(
            d.resolve("#/$defs/missing", base, "/p"),
            Err(SchemaError::Invalid { .. })
        ));
    }

    #[test]
    fn id_relative_refs() {
        let d = Document::new(
            json!({
                "$id": "http://example.com/root.json",
                "$defs": {"a": {"$id": "nested/a.json", "$defs": {"b": {"type": "integer"}}}}
            }),
            Draft::Draft2020,
        )
        .unwrap();
        let (p, b) = d
            .resolve("nested/a.json#/$defs/b", "http://example.com/root.json", "")
            .unwrap();
        assert_eq!(p, "/$defs/a/$defs/b");
        assert_eq!(b, "http://example.com/nested/a.json");
        assert_eq!(
            d.resolve("http://example.com/root.json#/$defs/a", "urn:x", "")
                .unwrap()
                .0,
            "/$defs/a"
        );
    }

    #[test]
    fn uri_join() {
        assert_eq!(join("http://a/b/c.json", "d.json"), "http://a/b/d.json");
        assert_eq!(join("http://a/b/c.json", "/d.json"), "http://a/d.json");
        assert_eq!(join("http://a/b/c.json", "../d.json"), "http://a/d.json");
        assert_eq!(join("urn:formwork:root", "x.json"), "urn:formwork:x.json");
    }
}
