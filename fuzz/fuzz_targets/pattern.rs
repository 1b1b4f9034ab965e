//! Fuzz target: ECMA-262 `pattern` translation and the `format` regexes. A pattern the
//! translator accepts must give a regex that `regex-automata` builds (or refuses with a size
//! error), and `pattern_matches`-style search over a short haystack must not panic; every
//! format name (known or not) must give a regex or an error. The input is the pattern; its
//! first byte also picks a format name and a haystack is cut from its end.
//!
//! The format regexes depend only on the name, so every known format is checked once per
//! process (in `KNOWN`) and an input naming one reuses that result: rebuilding them on every
//! input (the email, URI and hostname regexes are large) held the first runs to 5 exec/s.
#![no_main]

use std::collections::HashMap;
use std::sync::LazyLock;

use formwork_core::grammar::regex::grammar_from_regex;
use formwork_core::schema::regex::{ecma_to_regex, format, format_decoded, is_known_format};
use libfuzzer_sys::fuzz_target;

const FORMATS: [&str; 14] = [
    "date",
    "date-time",
    "time",
    "duration",
    "email",
    "idn-email",
    "uuid",
    "ipv4",
    "ipv6",
    "uri",
    "uri-reference",
    "hostname",
    "regex",
    "json-pointer",
];

/// JSON Schema 2020-12's format names plus the ones above, so an input naming any of them hits
/// the cache; `is_known_format` is asked for each, not assumed.
const MORE: [&str; 5] = [
    "idn-hostname",
    "iri",
    "iri-reference",
    "uri-template",
    "relative-json-pointer",
];

/// Each name's check, done once: `format` gives a regex exactly for known names, that regex
/// builds a grammar, and `format_decoded` answers. The value is whether `format` succeeded.
static KNOWN: LazyLock<HashMap<&'static str, bool>> = LazyLock::new(|| {
    FORMATS
        .iter()
        .chain(MORE.iter())
        .map(|&name| (name, check_format(name)))
        .collect()
});

fn check_format(name: &str) -> bool {
    let ok = match (format(name), is_known_format(name)) {
        (Ok(re), known) => {
            assert!(known, "unknown format `{name}` gave {re}");
            grammar_from_regex(&re).expect("a format regex builds");
            true
        }
        (Err(_), _) => false,
    };
    let _ = format_decoded(name);
    ok
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let name = text
        .get(..text.len().min(16))
        .filter(|_| data.first().is_some_and(|b| b & 1 == 1))
        .unwrap_or(FORMATS[data.first().copied().unwrap_or(0) as usize % FORMATS.len()]);
    if !KNOWN.contains_key(name) {
        check_format(name);
    }
    if let Ok(re) = ecma_to_regex(text) {
        // A translated pattern is a regex-syntax regex: it builds, or is refused as too large.
        let built = regex_automata::meta::Regex::builder()
            .syntax(regex_automata::util::syntax::Config::new().utf8(true))
            .configure(regex_automata::meta::Config::new().nfa_size_limit(Some(1 << 22)))
            .build(&re);
        match built {
            Ok(r) => {
                // The second half of the input, from a char boundary (cutting at a byte index
                // inside a multi-byte char panicked: fuzz/regressions/pattern/mid-char-haystack).
                let mid = (text.len() / 2..=text.len())
                    .find(|&i| text.is_char_boundary(i))
                    .unwrap_or(text.len());
                let hay = &text[mid..];
                let _ = r.is_match(hay);
            }
            Err(e) => assert!(
                e.size_limit().is_some(),
                "`{text}` translated to `{re}`, which does not build: {e}"
            ),
        }
        let _ = grammar_from_regex(&re);
    }
});
