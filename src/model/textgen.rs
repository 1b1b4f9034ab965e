//! [`TextGeneration`]: the plain decode loop (prompt → sampled tokens until a stop token or the
//! token budget), and [`Utf8Stream`] for printing token bytes as they arrive.
//!
//! Unconstrained: no grammar, no matcher. This is what `formwork generate` runs; grammar-
//! constrained generation drives [`Model::forward`] and [`Sampler::sample`] itself with a mask.
//!
//! Cost per token: one [`Model::forward`] of one token (the prompt is fed in one call).

use super::runtime::Model;
use crate::sampler::Sampler;
use crate::toktrie::TokenId;

/// Why generation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// The model produced a stop token (EOS or end of turn); it is not emitted.
    StopToken(TokenId),
    /// `max_tokens` tokens were produced.
    MaxTokens,
}

/// An in-progress generation; call [`next_token`](Self::next_token) until it returns `None`.
#[derive(Debug)]
pub struct TextGeneration<'m> {
    model: &'m mut Model,
    sampler: Sampler,
    stop: Vec<TokenId>,
    max_tokens: usize,
    produced: usize,
    /// Tokens to feed at the next step: the prompt first, then the last sampled token.
    pending: Vec<u32>,
    pos: usize,
    done: Option<StopReason>,
}

impl<'m> TextGeneration<'m> {
    /// Starts generating after `prompt` (which must not be empty). Clears the model's KV
    /// cache.
    pub fn new(
        model: &'m mut Model,
        prompt: Vec<u32>,
        sampler: Sampler,
        stop: Vec<TokenId>,
        max_tokens: usize,
    ) -> Self {
        model.reset();
        Self {
            model,
            sampler,
            stop,
            max_tokens,
            produced: 0,
            pending: prompt,
            pos: 0,
            done: None,
        }
    }

    /// The next token, or `None` once generation has stopped (see
    /// [`stop_reason`](Self::stop_reason)).
    ///
    /// # Errors
    /// Model errors (empty prompt, context overflow, candle failures) and sampler errors.
    pub fn next_token(&mut self) -> Result<Option<TokenId>, crate::Error> {
        if self.done.is_some() {
            return Ok(None);
        }
        if self.produced >= self.max_tokens {
            self.done = Some(StopReason::MaxTokens);
            return Ok(None);
        }
        let input = std::mem::take(&mut self.pending);
        let mut logits = self.model.forward(&input, self.pos)?;
        self.pos += input.len();
        let token = TokenId(self.sampler.sample(&mut logits, None)?);
        self.produced += 1;
        if self.stop.contains(&token) {
            self.done = Some(StopReason::StopToken(token));
            return Ok(None);
        }
        self.pending = vec![token.0];
        Ok(Some(token))
    }

    /// Why generation stopped, once it has.
    pub fn stop_reason(&self) -> Option<StopReason> {
        self.done
    }

    /// Tokens produced so far (including a final stop token).
    pub fn produced(&self) -> usize {
        self.produced
    }
}

/// Turns a stream of token bytes into printable text: a multi-byte character split across
/// tokens is held back until complete; invalid bytes become U+FFFD.
#[derive(Debug, Default)]
pub struct Utf8Stream {
    pending: Vec<u8>,
}

impl Utf8Stream {
    /// A stream with nothing pending.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `bytes`; returns the text that is now complete.
    pub fn push(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        let mut out = String::new();
        loop {
            match std::str::from_utf8(&self.pending) {
                Ok(s) => {
                    out.push_str(s);
                    self.pending.clear();
                    return out;
                }
                Err(e) => {
                    let valid = e.valid_up_to();
                    // Safe: from_utf8 just validated this prefix.
                    out.push_str(std::str::from_utf8(&self.pending[..valid]).unwrap_or_default());
                    match e.error_len() {
                        Some(bad) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            self.pending.drain(..valid + bad);
                        }
                        None => {
                            // Incomplete sequence at the end: wait for more bytes.
                            self.pending.drain(..valid);
                            return out;
                        }
                    }
                }
            }
        }
    }

    /// Flushes whatever is pending (an incomplete sequence becomes U+FFFD).
    pub fn finish(&mut self) -> String {
        let out = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utf8_stream_holds_back_split_characters() {
        let mut s = Utf8Stream::new();
        let snow = "a☃b".as_bytes(); // ☃ is 3 bytes
        assert_eq!(s.push(&snow[..2]), "a");
        assert_eq!(s.push(&snow[2..3]), "");
        assert_eq!(s.push(&snow[3..]), "☃b");
        assert_eq!(s.finish(), "");
    }

    #[test]
    fn utf8_stream_replaces_invalid_bytes() {
        let mut s = Utf8Stream::new();
        assert_eq!(s.push(b"x\xffy"), "x\u{fffd}y");
        assert_eq!(s.push(b"\xe2\x98"), "");
        assert_eq!(s.finish(), "\u{fffd}");
    }
}
