//! Chat templates per model family, and the stop tokens each one uses.
//!
//! Renders a (system, user) exchange into [`Piece`]s — special tokens by name and plain text —
//! so that special tokens are never produced by tokenizing their text (the tokenizer's
//! `tokenize` treats `<|im_start|>` as plain characters). Callers map `Special` pieces through
//! the model's [`TokenInfo::special`](super::runtime::TokenInfo) table and tokenize `Text`
//! pieces, as [`ChatTemplate::encode`] does.
//!
//! Two formats cover the supported families: ChatML (SmolLM2, Qwen2.5) and Gemma's turn
//! markers. The default system prompt comes from the GGUF's own Jinja template, which is the
//! model author's; formwork does not invent one.

use std::collections::HashMap;

use crate::runtime::{Architecture, TokenInfo};
use formwork_core::toktrie::{TokenId, Vocab};

/// One piece of a rendered prompt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Piece {
    /// A special token, by its text (e.g. `<|im_start|>`).
    Special(&'static str),
    /// Plain text, tokenized normally.
    Text(String),
}

/// A chat prompt format.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ChatTemplate {
    /// `<|im_start|>role\ncontent<|im_end|>\n` turns, ending with an open assistant turn.
    ChatMl {
        /// System prompt used when the caller gives none (from the GGUF template), if any.
        default_system: Option<String>,
    },
    /// `<start_of_turn>user\n…<end_of_turn>\n<start_of_turn>model\n`; a system prompt is
    /// prepended to the first user turn, as Gemma 3's own template does.
    Gemma,
}

/// A special token a template needs is not in the model's vocabulary.
#[derive(Debug, thiserror::Error)]
#[error("the model's vocabulary has no special token `{token}` needed by its chat template")]
#[non_exhaustive]
pub struct MissingSpecialToken {
    /// The token text.
    pub token: &'static str,
}

impl ChatTemplate {
    /// The template for a model: Gemma for gemma3; ChatML otherwise (SmolLM2 and Qwen2.5 both
    /// use it), with the default system prompt taken from the GGUF template when it has one.
    pub fn for_model(arch: Architecture, tokens: &TokenInfo) -> Self {
        match arch {
            Architecture::Gemma3 => Self::Gemma,
            _ => Self::ChatMl {
                default_system: tokens
                    .chat_template
                    .as_deref()
                    .and_then(default_system_prompt),
            },
        }
    }

    /// Special tokens that end the assistant's turn (besides the model's EOS).
    pub fn stop_tokens(&self) -> &'static [&'static str] {
        match self {
            Self::ChatMl { .. } => &["<|im_end|>"],
            Self::Gemma => &["<end_of_turn>"],
        }
    }

    /// Renders one user turn (and an optional system prompt) up to the open assistant turn.
    pub fn render(&self, system: Option<&str>, user: &str) -> Vec<Piece> {
        let text = |s: &str| Piece::Text(s.to_string());
        match self {
            Self::ChatMl { default_system } => {
                let mut out = Vec::new();
                if let Some(sys) = system.or(default_system.as_deref()) {
                    out.extend([
                        Piece::Special("<|im_start|>"),
                        text(&format!("system\n{sys}")),
                        Piece::Special("<|im_end|>"),
                        text("\n"),
                    ]);
                }
                out.extend([
                    Piece::Special("<|im_start|>"),
                    text(&format!("user\n{user}")),
                    Piece::Special("<|im_end|>"),
                    text("\n"),
                    Piece::Special("<|im_start|>"),
                    text("assistant\n"),
                ]);
                out
            }
            Self::Gemma => {
                let body = match system {
                    Some(sys) => format!("user\n{sys}\n\n{user}"),
                    None => format!("user\n{user}"),
                };
                vec![
                    Piece::Special("<start_of_turn>"),
                    text(&body),
                    Piece::Special("<end_of_turn>"),
                    text("\n"),
                    Piece::Special("<start_of_turn>"),
                    text("model\n"),
                ]
            }
        }
    }

    /// Token ids for `pieces`: special pieces through `special`, text through
    /// `vocab.tokenize`.
    ///
    /// # Errors
    /// [`MissingSpecialToken`] if the vocabulary lacks a special token the template uses.
    pub fn encode(
        pieces: &[Piece],
        special: &HashMap<String, u32>,
        vocab: &dyn Vocab,
    ) -> Result<Vec<u32>, MissingSpecialToken> {
        let mut ids = Vec::new();
        for piece in pieces {
            match piece {
                Piece::Special(name) => {
                    let id = special
                        .get(*name)
                        .ok_or(MissingSpecialToken { token: name })?;
                    ids.push(*id);
                }
                Piece::Text(t) => ids.extend(vocab.tokenize(t.as_bytes()).into_iter().map(|t| t.0)),
            }
        }
        Ok(ids)
    }

    /// Ids of [`stop_tokens`](Self::stop_tokens) present in `special`, plus the model's EOS
    /// and end-of-turn ids.
    pub fn stop_ids(&self, tokens: &TokenInfo) -> Vec<TokenId> {
        let mut ids: Vec<u32> = self
            .stop_tokens()
            .iter()
            .filter_map(|s| tokens.special.get(*s).copied())
            .chain(tokens.eos)
            .chain(tokens.eot)
            .collect();
        ids.sort_unstable();
        ids.dedup();
        ids.into_iter().map(TokenId).collect()
    }
}

/// The system prompt a ChatML Jinja template inserts when the conversation has none.
///
/// Both supported templates hard-code it as a literal starting with "You are" (SmolLM2:
/// `'<|im_start|>system\nYou are a helpful AI assistant named SmolLM, …<|im_end|>\n'`;
/// Qwen2.5: `{{- 'You are Qwen, created by Alibaba Cloud. …' }}`), ending at the closing
/// quote or at `<|im_end|>`. A template without such a literal has no default.
fn default_system_prompt(template: &str) -> Option<String> {
    let start = template.find("You are")?;
    let rest = &template[start..];
    let end = [rest.find('\''), rest.find("<|im_end|>"), rest.find('"')]
        .into_iter()
        .flatten()
        .min()?;
    Some(rest[..end].to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_system_prompt_from_smollm2_and_qwen_templates() {
        let smol = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}";
        assert_eq!(
            default_system_prompt(smol).as_deref(),
            Some("You are a helpful AI assistant named SmolLM, trained by Hugging Face")
        );
        let qwen = "{%- else %}\n        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}\n";
        assert_eq!(
            default_system_prompt(qwen).as_deref(),
            Some("You are Qwen, created by Alibaba Cloud. You are a helpful assistant.")
        );
        assert_eq!(default_system_prompt("{{ messages }}"), None);
    }

    #[test]
    fn chatml_render_matches_the_reference_layout() {
        let t = ChatTemplate::ChatMl {
            default_system: Some("Be brief.".into()),
        };
        let flat: String = t
            .render(None, "Hi")
            .iter()
            .map(|p| match p {
                Piece::Special(s) => s.to_string(),
                Piece::Text(s) => s.clone(),
            })
            .collect();
        assert_eq!(
            flat,
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
        );
    }

    #[test]
    fn gemma_render_folds_system_into_user_turn() {
        let pieces = ChatTemplate::Gemma.render(Some("S"), "U");
        assert_eq!(pieces[1], Piece::Text("user\nS\n\nU".into()));
        assert_eq!(pieces.last(), Some(&Piece::Text("model\n".into())));
    }

    #[test]
    fn stop_ids_include_turn_end_and_eos() {
        let mut info = TokenInfo {
            eos: Some(2),
            ..TokenInfo::default()
        };
        info.special.insert("<|im_end|>".into(), 2);
        info.special.insert("<end_of_turn>".into(), 106);
        let chatml = ChatTemplate::ChatMl {
            default_system: None,
        };
        assert_eq!(chatml.stop_ids(&info), vec![TokenId(2)]);
        assert_eq!(
            ChatTemplate::Gemma.stop_ids(&info),
            vec![TokenId(2), TokenId(106)]
        );
    }
}
