//! Plain chat data: who speaks a turn of a conversation ([`Role`]) and what is said
//! ([`Turn`]). Shared by what renders turns into a prompt (formwork-model's chat templates)
//! and what reads them from requests (formwork-server's APIs), so neither links the other.
//! Owns no template, tokenizer or wire format.
//!
//! May use: nothing else in the crate.

/// Who speaks a turn of a multi-turn conversation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Instructions (OpenAI's `system` and `developer`).
    System,
    /// The user.
    User,
    /// The model (its earlier answers, tool calls written out as text).
    Assistant,
    /// A tool's result, fed back to the model.
    Tool,
}

/// One turn of a conversation: who speaks, and the text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Turn {
    /// Who speaks.
    pub role: Role,
    /// What is said (plain text: special-token spellings in it stay text).
    pub content: String,
}

impl Turn {
    /// A turn of `role` saying `content`.
    pub fn new(role: Role, content: impl Into<String>) -> Self {
        Turn {
            role,
            content: content.into(),
        }
    }
}
