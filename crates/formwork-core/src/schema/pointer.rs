//! JSON Pointer (RFC 6901) reference tokens: escaping a key into a pointer and back.
//!
//! Every stage names places by JSON pointer: schema errors (`/properties/a~1b/type`), grounded
//! fields, eval field judges. A key containing `~` or `/` must round-trip through
//! [`escape`] and [`unescape`]; this module is the one place that does it.

/// The key `token` as one pointer step: `~` → `~0`, `/` → `~1`.
pub fn escape(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

/// The key one pointer step names: `~1` → `/`, then `~0` → `~` (in that order, so `~01`
/// stays `~1`).
pub fn unescape(token: &str) -> String {
    token.replace("~1", "/").replace("~0", "~")
}

/// `pointer` extended by the key `token`.
pub fn push(pointer: &str, token: &str) -> String {
    format!("{pointer}/{}", escape(token))
}

/// The keys `pointer` steps through, unescaped; none for the root `""`.
pub fn tokens(pointer: &str) -> impl Iterator<Item = String> + '_ {
    pointer.split('/').skip(1).map(unescape)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_with_tilde_and_slash_round_trip() {
        for key in ["a/b", "~1", "~0", "m~/n", "", "plain"] {
            assert_eq!(unescape(&escape(key)), key);
        }
        assert_eq!(push("/properties", "a/b~"), "/properties/a~1b~0");
        assert_eq!(unescape("~01"), "~1", "~0 is unescaped last");
        assert_eq!(tokens("/a~1b/0/").collect::<Vec<_>>(), ["a/b", "0", ""]);
        assert_eq!(tokens("").count(), 0);
    }
}
