//! [`Utf8Stream`]: token bytes → printable text, for streaming output as it is decoded
//! (the command line and the server print through it).
//!
//! Owns only the UTF-8 reassembly; uses nothing else of the crate.

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
