//! Chat templates per model family, and the stop tokens each one uses.
//!
//! Renders a (system, user) exchange, or a whole conversation of [`Turn`]s
//! ([`ChatTemplate::render_turns`]), into [`Piece`]s — special tokens by name and plain text —
//! so that special tokens are never produced by tokenizing their text: a document that
//! contains `<|im_end|>` cannot close the user's turn. [`ChatTemplate::encode`] maps `Special`
//! pieces to their ids and encodes `Text` pieces with the model's reference tokenizer (special
//! tokens as text); for text without special-token spellings the ids equal the reference
//! tokenizer's encoding of the whole rendered prompt.
//!
//! Two formats cover the supported families: ChatML (SmolLM2, Qwen2.5) and Gemma's turn
//! markers; `Raw` feeds plain text. The default system prompt is the registry's, or for a local
//! file the GGUF's own Jinja template's, which is the model author's; formwork does not invent
//! one.
//!
//! May use: `registry`, `tokenizer`, `runtime`.

use crate::registry::{ChatFormat, ModelEntry};
use crate::runtime::{Architecture, TokenInfo};
use crate::tokenizer::GgufTokenizer;
use crate::ModelError;
use formwork_core::toktrie::{TokenId, Vocab};

/// The turns rendered here are plain data of `formwork_core`, so that a server reads them
/// from requests without linking this crate's model runtime.
pub use formwork_core::chat::{Role, Turn};

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
    /// No template: `{system}\n\n{user}`, or the user text alone.
    Raw,
}

impl ChatTemplate {
    /// The template a registry entry names, with its default system prompt.
    pub fn for_entry(entry: &ModelEntry) -> Self {
        match entry.chat_template {
            ChatFormat::Chatml => Self::ChatMl {
                default_system: entry.default_system_prompt.clone(),
            },
            ChatFormat::Gemma => Self::Gemma,
            ChatFormat::Raw => Self::Raw,
        }
    }

    /// The template for a model file: Gemma for gemma3; ChatML otherwise (SmolLM2 and Qwen2.5 both
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
            Self::Raw => &[],
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
            Self::Raw => vec![match system {
                Some(sys) => text(&format!("{sys}\n\n{user}")),
                None => text(user),
            }],
        }
    }

    /// Prompt token ids for one turn: BOS when the tokenizer asks for it
    /// ([`GgufTokenizer::add_bos`]), then the [`render`](Self::render)ed pieces, special ones
    /// by id and text through [`GgufTokenizer::encode_plain`].
    ///
    /// # Errors
    /// [`ModelError::Tokenizer`] if the vocabulary lacks a special token the template uses, or
    /// the tokenizer fails.
    pub fn encode(
        &self,
        tokenizer: &GgufTokenizer,
        system: Option<&str>,
        user: &str,
    ) -> Result<Vec<TokenId>, ModelError> {
        encode_pieces(tokenizer, self.render(system, user))
    }

    /// The tokens that end the assistant's turn: the tokenizer's EOS and stop tokens, then
    /// whichever of [`stop_tokens`](Self::stop_tokens) the vocabulary has and they lack.
    pub fn stop_ids(&self, tokenizer: &GgufTokenizer) -> Vec<TokenId> {
        let mut ids = tokenizer.eos_tokens().to_vec();
        for name in self.stop_tokens() {
            if let Some(id) = tokenizer.token_id(name) {
                if !ids.contains(&id) {
                    ids.push(id);
                }
            }
        }
        ids
    }
}

/// A tool result as the user-side text Qwen2.5's template writes (`<tool_response>` tags);
/// SmolLM2 and Gemma have no tool role, so the same text goes in a user turn.
fn tool_response(content: &str) -> String {
    format!("<tool_response>\n{content}\n</tool_response>")
}

impl ChatTemplate {
    /// Renders a whole conversation up to the open assistant turn.
    ///
    /// ChatML: one `<|im_start|>role\n…<|im_end|>\n` turn each; the default system prompt
    /// when the first turn is not a system turn (as the models' own templates do); tool
    /// results in a `user` turn wrapped in `<tool_response>` (Qwen2.5's layout). Gemma:
    /// system turns are folded into the first user turn, assistant turns are `model` turns,
    /// tool results are user turns. Raw: the contents joined by blank lines. With one
    /// optional system turn and one user turn, equals [`render`](Self::render).
    pub fn render_turns(&self, turns: &[Turn]) -> Vec<Piece> {
        let text = |s: String| Piece::Text(s);
        match self {
            Self::ChatMl { default_system } => {
                let mut out = Vec::new();
                let open = |out: &mut Vec<Piece>, role: &str, content: &str| {
                    out.extend([
                        Piece::Special("<|im_start|>"),
                        text(format!("{role}\n{content}")),
                        Piece::Special("<|im_end|>"),
                        text("\n".into()),
                    ]);
                };
                if turns.first().map(|t| t.role) != Some(Role::System) {
                    if let Some(sys) = default_system {
                        open(&mut out, "system", sys);
                    }
                }
                for t in turns {
                    match t.role {
                        Role::System => open(&mut out, "system", &t.content),
                        Role::User => open(&mut out, "user", &t.content),
                        Role::Assistant => open(&mut out, "assistant", &t.content),
                        Role::Tool => open(&mut out, "user", &tool_response(&t.content)),
                    }
                }
                out.extend([Piece::Special("<|im_start|>"), text("assistant\n".into())]);
                out
            }
            Self::Gemma => {
                let system: Vec<&str> = turns
                    .iter()
                    .filter(|t| t.role == Role::System)
                    .map(|t| t.content.as_str())
                    .collect();
                let mut pending_system = (!system.is_empty()).then(|| system.join("\n\n"));
                let mut out = Vec::new();
                for t in turns.iter().filter(|t| t.role != Role::System) {
                    let (role, mut body) = match t.role {
                        Role::Assistant => ("model", t.content.clone()),
                        Role::Tool => ("user", tool_response(&t.content)),
                        _ => ("user", t.content.clone()),
                    };
                    if role == "user" {
                        if let Some(sys) = pending_system.take() {
                            body = format!("{sys}\n\n{body}");
                        }
                    }
                    out.extend([
                        Piece::Special("<start_of_turn>"),
                        text(format!("{role}\n{body}")),
                        Piece::Special("<end_of_turn>"),
                        text("\n".into()),
                    ]);
                }
                if let Some(sys) = pending_system {
                    // Only system turns: they still reach the model, as a user turn.
                    out.extend([
                        Piece::Special("<start_of_turn>"),
                        text(format!("user\n{sys}")),
                        Piece::Special("<end_of_turn>"),
                        text("\n".into()),
                    ]);
                }
                out.extend([Piece::Special("<start_of_turn>"), text("model\n".into())]);
                out
            }
            Self::Raw => {
                let parts: Vec<&str> = turns.iter().map(|t| t.content.as_str()).collect();
                vec![text(parts.join("\n\n"))]
            }
        }
    }

    /// Prompt token ids for a conversation ([`render_turns`](Self::render_turns)): BOS when
    /// the tokenizer asks for it, special pieces by id, text through
    /// [`GgufTokenizer::encode_plain`].
    ///
    /// # Errors
    /// As [`encode`](Self::encode).
    pub fn encode_turns(
        &self,
        tokenizer: &GgufTokenizer,
        turns: &[Turn],
    ) -> Result<Vec<TokenId>, ModelError> {
        encode_pieces(tokenizer, self.render_turns(turns))
    }
}

/// BOS when the tokenizer asks for it, then `pieces`: special ones by id, text encoded plainly.
fn encode_pieces(
    tokenizer: &GgufTokenizer,
    pieces: Vec<Piece>,
) -> Result<Vec<TokenId>, ModelError> {
    let mut ids = Vec::new();
    if tokenizer.add_bos() {
        ids.extend(tokenizer.bos_token());
    }
    for piece in pieces {
        match piece {
            Piece::Special(name) => ids.push(tokenizer.token_id(name).ok_or_else(|| {
                ModelError::Tokenizer {
                    message: format!(
                        "the vocabulary has no special token `{name}`, which its chat template needs"
                    ),
                }
            })?),
            Piece::Text(t) => ids.extend(tokenizer.encode_plain(&t)?),
        }
    }
    Ok(ids)
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

    fn flat(pieces: &[Piece]) -> String {
        pieces
            .iter()
            .map(|p| match p {
                Piece::Special(s) => s.to_string(),
                Piece::Text(s) => s.clone(),
            })
            .collect()
    }

    #[test]
    fn render_turns_of_one_exchange_equals_render() {
        let t = ChatTemplate::ChatMl {
            default_system: Some("Be brief.".into()),
        };
        let one = [Turn::new(Role::User, "Hi")];
        assert_eq!(flat(&t.render_turns(&one)), flat(&t.render(None, "Hi")));
        let two = [Turn::new(Role::System, "S"), Turn::new(Role::User, "U")];
        assert_eq!(flat(&t.render_turns(&two)), flat(&t.render(Some("S"), "U")));
        assert_eq!(
            flat(&ChatTemplate::Gemma.render_turns(&two)),
            flat(&ChatTemplate::Gemma.render(Some("S"), "U"))
        );
    }

    #[test]
    fn chatml_render_turns_writes_assistant_and_tool_turns() {
        let t = ChatTemplate::ChatMl {
            default_system: None,
        };
        let turns = [
            Turn::new(Role::User, "Add 1 and 2."),
            Turn::new(Role::Assistant, "<tool_call>\n{}\n</tool_call>"),
            Turn::new(Role::Tool, "3"),
        ];
        assert_eq!(
            flat(&t.render_turns(&turns)),
            "<|im_start|>user\nAdd 1 and 2.<|im_end|>\n<|im_start|>assistant\n<tool_call>\n{}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n3\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
        );
    }

    #[test]
    fn gemma_render_turns_folds_system_and_names_model_turns() {
        let turns = [
            Turn::new(Role::System, "S"),
            Turn::new(Role::User, "U1"),
            Turn::new(Role::Assistant, "A"),
            Turn::new(Role::User, "U2"),
        ];
        assert_eq!(
            flat(&ChatTemplate::Gemma.render_turns(&turns)),
            "<start_of_turn>user\nS\n\nU1<end_of_turn>\n<start_of_turn>model\nA<end_of_turn>\n<start_of_turn>user\nU2<end_of_turn>\n<start_of_turn>model\n"
        );
    }
}
