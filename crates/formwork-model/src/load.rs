//! Loading a model for use: resolve a name or path through the registry, fetch on first use,
//! and bundle the weights with their tokenizer, chat template and stop tokens.
//!
//! The one place that decides, for a registry name or a local GGUF file, which tokenizer
//! (`tokenizer.json` beside a local file, else the GGUF vocabulary), which chat template (the
//! registry's, else the file's own family) and which stop tokens go with the weights. Every
//! command (`generate`, `extract`, `eval`) and embedded users load through [`Loaded::load`].
//!
//! May use: `registry`, `fetch`, `tokenizer`, `chat`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use formwork_core::toktrie::{TokenId, Vocab};
use formwork_core::SourceError;

use crate::chat::ChatTemplate;
use crate::fetch::{locate, FetchConfig};
use crate::registry::Registry;
use crate::tokenizer::GgufTokenizer;
use crate::{Model, ModelConfig, ModelError};

/// A model ready to decode: weights, tokenizer, chat template and stop tokens.
pub struct Loaded {
    /// The weights and KV cache.
    pub model: Model,
    /// The tokenizer (also the engine's [`Vocab`]).
    pub tokenizer: Arc<GgufTokenizer>,
    /// How a conversation is written for this model.
    pub template: ChatTemplate,
    /// Tokens that end generation: the tokenizer's EOS and stop tokens plus the template's
    /// end-of-turn token.
    pub stop: Vec<TokenId>,
    /// The GGUF file the weights came from.
    pub path: PathBuf,
    /// Time spent reading the weights (not fetching them).
    pub load_time: Duration,
}

impl std::fmt::Debug for Loaded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loaded")
            .field("path", &self.path)
            .field("template", &self.template)
            .field("stop", &self.stop)
            .finish_non_exhaustive()
    }
}

impl Loaded {
    /// Resolves `name` (a registry name, a GGUF path, or `None` for the registry's default),
    /// fetches it on first use per `fetch`, and loads it with `config`.
    ///
    /// ```no_run
    /// use formwork_model::fetch::FetchConfig;
    /// use formwork_model::load::Loaded;
    /// use formwork_model::ModelConfig;
    ///
    /// let loaded = Loaded::load(None, &FetchConfig::new(), &ModelConfig::new())?;
    /// let prompt = loaded.encode_chat(None, "Say hi.")?;
    /// assert!(!prompt.is_empty());
    /// # Ok::<(), formwork_model::ModelError>(())
    /// ```
    pub fn load(
        name: Option<&str>,
        fetch: &FetchConfig,
        config: &ModelConfig,
    ) -> Result<Loaded, ModelError> {
        let spec = Registry::builtin()?.resolve(name)?;
        let located = locate(&spec, fetch)?;
        let start = Instant::now();
        let model = Model::load_with(&located.path, config)?;
        let load_time = start.elapsed();
        let tokenizer = GgufTokenizer::load(&located)?;
        let template = match &located.entry {
            Some(entry) => ChatTemplate::for_entry(entry),
            None => ChatTemplate::for_model(model.architecture(), model.token_info()),
        };
        let stop = template.stop_ids(&tokenizer);
        Ok(Loaded {
            model,
            tokenizer: Arc::new(tokenizer),
            template,
            stop,
            path: located.path,
            load_time,
        })
    }

    /// Prompt ids for one user turn under the model's chat template (see
    /// [`ChatTemplate::encode`]); `system` falls back to the template's default.
    pub fn encode_chat(&self, system: Option<&str>, user: &str) -> Result<Vec<u32>, ModelError> {
        let ids = self.template.encode(&self.tokenizer, system, user)?;
        Ok(ids.into_iter().map(|t| t.0).collect())
    }

    /// [`encode_chat`](Self::encode_chat) as a shareable function (the [`ModelError`] boxed),
    /// which owns what it needs and so can outlive `self`: the shape of an extraction
    /// `ChatEncoder`.
    #[allow(clippy::type_complexity)]
    pub fn chat_encoder(
        &self,
    ) -> Arc<dyn Fn(Option<&str>, &str) -> Result<Vec<u32>, SourceError> + Send + Sync> {
        let tokenizer = self.tokenizer.clone();
        let template = self.template.clone();
        Arc::new(move |system, user| {
            let ids = template.encode(&tokenizer, system, user)?;
            Ok(ids.into_iter().map(|t| t.0).collect())
        })
    }

    /// The tokenizer as the engine's vocabulary.
    pub fn vocab(&self) -> Arc<dyn Vocab> {
        self.tokenizer.clone()
    }
}
