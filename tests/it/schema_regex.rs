//! The schema regex building blocks against the JSON-Schema-Test-Suite's string cases:
//! `optional/format/*.json`, `optional/ecmascript-regex.json`, `pattern.json`,
//! `minLength.json`, `maxLength.json` (draft 2020-12).
//!
//! Every string instance is serialized as compact JSON (serde_json) and fully matched against the
//! lexeme regex. An invalid instance must never be accepted. A valid instance may be rejected
//! only where the module documents a narrowing, listed in `NARROWER` with the reason.

use std::path::PathBuf;

use anyhow::{Context, Result};
use formwork::schema::regex::{format, json_string, RegexError};
use regex_automata::meta::Regex;
use serde_json::Value;

/// Valid instances a format regex rejects on purpose: (format, description, why).
const NARROWER: &[(&str, &str, &str)] = &[
    (
        "time",
        "valid leap second, positive time-offset",
        "leap seconds only in UTC",
    ),
    (
        "time",
        "valid leap second, large positive time-offset",
        "leap seconds only in UTC",
    ),
    (
        "time",
        "valid leap second, negative time-offset",
        "leap seconds only in UTC",
    ),
    (
        "time",
        "valid leap second, large negative time-offset",
        "leap seconds only in UTC",
    ),
    (
        "date-time",
        "a valid date-time with a leap second, with minus offset",
        "leap seconds only in UTC",
    ),
    (
        "hostname",
        "a valid host name (example.test in Hangul)",
        "A-labels (xn--) refused",
    ),
    (
        "hostname",
        "Exceptions that are PVALID, left-to-right chars",
        "A-labels (xn--) refused",
    ),
    (
        "hostname",
        "Exceptions that are PVALID, right-to-left chars",
        "A-labels (xn--) refused",
    ),
    (
        "hostname",
        "MIDDLE DOT with surrounding 'l's",
        "A-labels (xn--) refused",
    ),
    (
        "hostname",
        "Greek KERAIA followed by Greek",
        "A-labels (xn--) refused",
    ),
    (
        "hostname",
        "Hebrew GERESH preceded by Hebrew",
        "A-labels (xn--) refused",
    ),
    (
        "hostname",
        "Hebrew GERSHAYIM preceded by Hebrew",
        "A-labels (xn--) refused",
    ),
    (
        "hostname",
        "KATAKANA MIDDLE DOT with Hiragana",
        "A-labels (xn--) refused",
    ),
    (
        "hostname",
        "KATAKANA MIDDLE DOT with Katakana",
        "A-labels (xn--) refused",
    ),
    (
        "hostname",
        "KATAKANA MIDDLE DOT with Han",
        "A-labels (xn--) refused",
    ),
    (
        "hostname",
        "Arabic-Indic digits not mixed with Extended Arabic-Indic digits",
        "A-labels (xn--) refused",
    ),
    (
        "hostname",
        "Extended Arabic-Indic digits not mixed with Arabic-Indic digits",
        "A-labels (xn--) refused",
    ),
    (
        "hostname",
        "ZERO WIDTH JOINER preceded by Virama",
        "A-labels (xn--) refused",
    ),
    (
        "hostname",
        "ZERO WIDTH NON-JOINER preceded by Virama",
        "A-labels (xn--) refused",
    ),
    (
        "hostname",
        "ZERO WIDTH NON-JOINER not preceded by Virama but matches regexp",
        "A-labels (xn--) refused",
    ),
];

fn data_dir() -> Option<PathBuf> {
    Some(crate::data::data_dir()).filter(|p| p.is_dir())
}

fn suite(rel: &str) -> Result<Vec<Value>> {
    let dir = data_dir().context("no data dir: set FORMWORK_DATA")?;
    let path = dir
        .join("json-schema-test-suite/tests/draft2020-12")
        .join(rel);
    let text = std::fs::read_to_string(&path).with_context(|| format!("{}", path.display()))?;
    Ok(serde_json::from_value(serde_json::from_str(&text)?)?)
}

fn full(re: &str) -> Result<Regex> {
    Ok(Regex::new(&format!("^(?:{re})$"))?)
}

/// Runs one group's string tests against `re`; returns `(description, value)` of the rejected
/// valid ones, and fails on any accepted invalid one.
fn run_group(re: &Regex, group: &Value, label: &str) -> Result<Vec<(String, String)>> {
    let mut rejected = Vec::new();
    for t in group["tests"].as_array().context("tests")? {
        let Some(s) = t["data"].as_str() else {
            continue;
        };
        let valid = t["valid"].as_bool().context("valid")?;
        let desc = t["description"].as_str().unwrap_or_default().to_string();
        let json = serde_json::to_string(s)?;
        let got = re.is_match(&json);
        anyhow::ensure!(
            !got || valid,
            "{label}: invalid instance accepted: {desc} {json}"
        );
        if valid && !got {
            rejected.push((desc, s.to_string()));
        }
    }
    Ok(rejected)
}

#[test]
fn formats_match_the_test_suite() -> Result<()> {
    let dir = data_dir().context("no data dir")?;
    let fdir = dir.join("json-schema-test-suite/tests/draft2020-12/optional/format");
    let mut checked = 0;
    let mut refused = Vec::new();
    let mut unexpected = Vec::new();
    for entry in std::fs::read_dir(&fdir)? {
        let path = entry?.path();
        let name = path
            .file_stem()
            .and_then(|s| s.to_str())
            .context("name")?
            .to_string();
        for group in suite(&format!("optional/format/{name}.json"))? {
            let Some(fmt) = group["schema"]["format"].as_str() else {
                continue;
            };
            let re = match format(fmt) {
                Ok(re) => full(&re)?,
                Err(RegexError::Unsupported { .. }) => {
                    refused.push(fmt.to_string());
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            for (desc, value) in run_group(&re, &group, fmt)? {
                // The idn formats are ASCII-only: internationalized names are refused.
                let idn = fmt.starts_with("idn-") && (!value.is_ascii() || value.contains("xn--"));
                if !idn && !NARROWER.iter().any(|(f, d, _)| *f == fmt && *d == desc) {
                    unexpected.push(format!("{fmt}: {desc}"));
                }
            }
            checked += 1;
        }
    }
    assert!(
        unexpected.is_empty(),
        "valid instances rejected: {unexpected:#?}"
    );
    refused.sort();
    refused.dedup();
    assert_eq!(
        refused,
        ["regex", "unknown"],
        "only these formats may be refused"
    );
    assert!(checked >= 18, "checked {checked} format groups");
    Ok(())
}

#[test]
fn patterns_and_lengths_match_the_test_suite() -> Result<()> {
    let mut groups = 0;
    for file in [
        "pattern.json",
        "minLength.json",
        "maxLength.json",
        "optional/ecmascript-regex.json",
    ] {
        for group in suite(file)? {
            let schema = &group["schema"];
            // Only plain string-value groups: patternProperties groups test object keys.
            if schema.get("patternProperties").is_some() {
                continue;
            }
            let pattern = schema["pattern"].as_str();
            let min = schema["minLength"].as_f64().map_or(0, |v| v as u64);
            let max = schema["maxLength"].as_f64().map(|v| v as u64);
            let re = full(&json_string(pattern, min, max)?)?;
            let rejected = run_group(&re, &group, file)?;
            anyhow::ensure!(rejected.is_empty(), "{file}: valid rejected: {rejected:?}");
            groups += 1;
        }
    }
    assert!(groups >= 20, "checked {groups} groups");
    Ok(())
}

/// Collects every `pattern` string in a JSON value.
fn patterns_in(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                match (k.as_str(), x) {
                    ("pattern", Value::String(p)) => out.push(p.clone()),
                    ("patternProperties", Value::Object(pp)) => out.extend(pp.keys().cloned()),
                    _ => {}
                }
                patterns_in(x, out);
            }
        }
        Value::Array(a) => a.iter().for_each(|x| patterns_in(x, out)),
        _ => {}
    }
}

/// Real-world patterns (the MaskBench sample) translate, or are refused by construct name.
/// On the full MaskBench set, 2,562 of its 2,590 distinct patterns translate; the rest use
/// lookahead (22), anchors under repetition (4), a backreference and a word boundary.
#[test]
fn maskbench_sample_patterns_translate() -> Result<()> {
    let dir = data_dir().context("no data dir")?;
    let text = std::fs::read_to_string(dir.join("maskbench-sample.jsonl"))?;
    let mut patterns = Vec::new();
    for line in text.lines() {
        let row: Value = serde_json::from_str(line)?;
        patterns_in(&row["schema"], &mut patterns);
    }
    patterns.sort();
    patterns.dedup();
    let (mut ok, mut refused) = (0, Vec::new());
    for p in &patterns {
        match json_string(Some(p), 0, None) {
            Ok(re) => {
                full(&re).with_context(|| format!("pattern {p:?} gave a bad regex"))?;
                ok += 1;
            }
            Err(RegexError::Unsupported { feature, .. }) => refused.push(feature),
            Err(e) => anyhow::bail!("pattern {p:?}: {e}"),
        }
    }
    println!(
        "{ok} of {} sample patterns translate; refused: {refused:?}",
        patterns.len()
    );
    assert!(
        ok * 100 >= patterns.len() * 97,
        "{ok} of {}",
        patterns.len()
    );
    Ok(())
}

/// The numeric keywords against the suite: `minimum`, `maximum`, `exclusiveMinimum`,
/// `exclusiveMaximum`, `multipleOf` (draft 2020-12). Invalid numbers are never accepted; a valid
/// number may only be rejected in a documented narrowing (an exponent, or `.0` on a value the
/// regex writes as an integer), and an unsupported `multipleOf` must say so.
#[test]
fn numbers_match_the_test_suite() -> Result<()> {
    use formwork::schema::regex::{multiple_of, number_range, Bound, Decimal};
    let mut checked = 0;
    for file in [
        "minimum.json",
        "maximum.json",
        "exclusiveMinimum.json",
        "exclusiveMaximum.json",
        "multipleOf.json",
    ] {
        for group in suite(file)? {
            let s = &group["schema"];
            let dec = |key: &str| -> Result<Option<Decimal>> {
                s[key]
                    .as_number()
                    .map(Decimal::try_from)
                    .transpose()
                    .map_err(Into::into)
            };
            let min = match (dec("minimum")?, dec("exclusiveMinimum")?) {
                (_, Some(v)) => Some(Bound::exclusive(v)),
                (Some(v), None) => Some(Bound::inclusive(v)),
                (None, None) => None,
            };
            let max = match (dec("maximum")?, dec("exclusiveMaximum")?) {
                (_, Some(v)) => Some(Bound::exclusive(v)),
                (Some(v), None) => Some(Bound::inclusive(v)),
                (None, None) => None,
            };
            let integer_only = s["type"] == "integer";
            let built = match dec("multipleOf")? {
                Some(k) => multiple_of(&k, min, max, integer_only),
                None => number_range(min, max, integer_only),
            };
            let re = match built {
                Ok(re) => full(&re)?,
                Err(RegexError::Unsupported { .. } | RegexError::TooLarge { .. }) => continue,
                Err(e) => return Err(e.into()),
            };
            for t in group["tests"].as_array().context("tests")? {
                if !t["data"].is_number() {
                    continue;
                }
                let text = serde_json::to_string(&t["data"])?;
                let valid = t["valid"].as_bool().context("valid")?;
                let got = re.is_match(&text);
                anyhow::ensure!(!got || valid, "{file} {s}: invalid {text} accepted");
                if valid && !got {
                    let narrowing = text.contains(['e', 'E']) || text.ends_with(".0");
                    anyhow::ensure!(narrowing, "{file} {s}: valid {text} rejected");
                }
            }
            checked += 1;
        }
    }
    assert!(checked >= 9, "checked {checked} groups");
    Ok(())
}

/// The lexemes work in the real engine: each format's string lexeme, compiled by the matcher
/// with a byte-level vocabulary, accepts the suite's valid values to the end and rejects the
/// invalid ones (same narrowings as above), and a few number and string lexemes do too.
#[test]
fn lexemes_run_in_the_matcher() -> Result<()> {
    use crate::schema_support::test_limits;
    use formwork::grammar::{GrammarBuilder, Symbol};
    use formwork::matcher::{CompiledGrammar, Matcher};
    use formwork::schema::regex::integer_range;
    use formwork::toktrie::{SyntheticVocab, TokenSet, Vocab};
    use std::sync::Arc;

    let vocab = Arc::new(SyntheticVocab::byte_level());
    let accepts = |re: &str, text: &str| -> Result<bool> {
        let mut b = GrammarBuilder::new();
        let lx = b.lexeme("value", re);
        let start = b.choice("start", &[Symbol::Lexeme(lx)]);
        let cg = Arc::new(CompiledGrammar::new(
            b.build(start)?,
            vocab.clone(),
            test_limits(),
        )?);
        let mut m = Matcher::new(cg)?;
        let mut mask = TokenSet::new(vocab.vocab_len());
        m.compute_mask(&mut mask)?;
        Ok(m.consume_bytes(text.as_bytes()).is_ok() && m.is_accepting())
    };
    for (fmt, yes, no) in [
        (
            "date-time",
            "1963-06-19T08:30:06.283185Z",
            "1963-06-19T08:30:06",
        ),
        ("email", "joe.bloggs@example.com", "joe..bloggs@example.com"),
        ("ipv6", "::ffff:1.2.3.4", "::ffff:01.2.3.4"),
        ("uri", "http://foo.bar/?baz=qux#quux", "//foo.bar"),
        ("hostname", "www.example.com", "-example.com"),
    ] {
        let re = format(fmt)?;
        let (y, n) = (serde_json::to_string(yes)?, serde_json::to_string(no)?);
        anyhow::ensure!(accepts(&re, &y)?, "{fmt}: {y} rejected by the matcher");
        anyhow::ensure!(!accepts(&re, &n)?, "{fmt}: {n} accepted by the matcher");
    }
    let re = integer_range(Some(-5), Some(120))?;
    anyhow::ensure!(accepts(&re, "120")? && !accepts(&re, "121")? && accepts(&re, "-0")?);
    let re = json_string(Some("^[a-z]+$"), 1, Some(4096))?;
    let long = format!("\"{}\"", "a".repeat(4096));
    let longer = format!("\"{}\"", "a".repeat(4097));
    anyhow::ensure!(accepts(&re, &long)? && !accepts(&re, &longer)?);
    Ok(())
}
