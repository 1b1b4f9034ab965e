//! Loading a model for extraction: resolve a name or path, fetch on first use, and bundle the
//! weights with their tokenizer, chat template (as a [`ChatEncoder`]) and stop tokens.
//!
//! Shared by `formwork extract`, `formwork eval` and embedded users; the runtime itself is
//! `crate::model`.

use std::sync::Arc;

use super::run::ChatEncoder;
use crate::model::fetch::{self, FetchConfig};
use crate::model::registry::{ChatTemplate, ModelSpec, Registry};
use crate::model::tokenizer::GgufTokenizer;
use crate::model::{Model, ModelError};
use crate::toktrie::{TokenId, Vocab};

/// A model ready for extraction.
pub struct Loaded {
    /// The model.
    pub model: Model,
    /// Its tokenizer.
    pub vocab: Arc<dyn Vocab>,
    /// Its chat template as an encoder.
    pub encode: ChatEncoder,
    /// Its stop tokens.
    pub stop: Vec<TokenId>,
}

impl std::fmt::Debug for Loaded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loaded").finish_non_exhaustive()
    }
}

/// Resolves, fetches (first use, per `fetch`) and loads a model with its tokenizer and chat
/// template.
pub fn load_model(name: Option<&str>, fetch: &FetchConfig) -> Result<Loaded, ModelError> {
    let registry = Registry::builtin()?;
    let (path, tok, template, default_system) = match registry.resolve(name)? {
        ModelSpec::Known(entry) => {
            let path = fetch::ensure(&entry, fetch)?;
            let tok = GgufTokenizer::for_model(&entry, &path)?;
            (path, tok, entry.chat_template, entry.default_system_prompt)
        }
        ModelSpec::Local { gguf, .. } => {
            let tok = GgufTokenizer::from_gguf_file(&gguf)?;
            (gguf, tok, ChatTemplate::Chatml, None)
        }
    };
    let model = Model::load(&path)?;
    let stop = tok.eos_tokens().to_vec();
    let tok = Arc::new(tok);
    let enc_tok = tok.clone();
    let encode: ChatEncoder = Arc::new(move |system, user| {
        let text = template.render(system.or(default_system.as_deref()), user);
        let mut ids: Vec<u32> = Vec::new();
        if enc_tok.add_bos() {
            ids.extend(enc_tok.bos_token().map(|t| t.0));
        }
        let body = enc_tok.encode(&text).map_err(|e| e.to_string())?;
        ids.extend(body.into_iter().map(|t| t.0));
        Ok(ids)
    });
    Ok(Loaded {
        model,
        vocab: tok,
        encode,
        stop,
    })
}
