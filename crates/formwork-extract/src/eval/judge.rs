//! Judges: decide how right one output is against its gold answer, from strict to loose.
//!
//! Owns the scoring of a single value (or a set of slots); knows nothing of models, modes or
//! runs. A wrong judge silently reverses conclusions, so every judge here is tested on
//! known-right and known-wrong answers at the bottom of this file.
//!
//! Strictness, strictest first: [`Judge::Exact`] (JSON equality, numbers by value),
//! [`Judge::Numeric`] (within a tolerance), [`Judge::OneOf`] (any acceptable value, as BFCL
//! gives them), [`Judge::Contains`] (the gold text occurs in the output), and for free text
//! [`Judge::NumberInText`] (the answer's number, see [`extract_number`]). Slot-filling outputs
//! are scored with [`slot_scores`] (precision, recall, F1 over slot/value pairs).

use regex_automata::meta::Regex;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::sync::OnceLock;

/// How to judge one value against its gold answer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Judge {
    /// Equal as JSON values; numbers compare by value (`5` equals `5.0`), object key order is
    /// ignored.
    Exact,
    /// Both are numbers (or numeric strings) within `abs_tol` or within `rel_tol` × |gold|.
    Numeric {
        /// Absolute tolerance.
        #[serde(default)]
        abs_tol: f64,
        /// Relative tolerance.
        #[serde(default)]
        rel_tol: f64,
    },
    /// The output, as text, contains the gold text (after trimming; case-insensitive unless
    /// `case_sensitive`).
    Contains {
        /// Compare case-sensitively.
        #[serde(default)]
        case_sensitive: bool,
    },
    /// The output equals (as in [`Judge::Exact`]) any of these acceptable values.
    OneOf {
        /// The acceptable values.
        values: Vec<Value>,
    },
    /// The output is free text; the number it answers with (see [`extract_number`]) is within
    /// `abs_tol` of the gold number.
    NumberInText {
        /// Absolute tolerance.
        #[serde(default)]
        abs_tol: f64,
    },
}

/// The judgement of one value.
#[derive(Clone, Debug, PartialEq)]
pub struct Verdict {
    /// Whether the output counts as right.
    pub correct: bool,
    /// Why, in a few words, for per-case failure listings.
    pub reason: String,
}

impl Verdict {
    fn yes(reason: impl Into<String>) -> Verdict {
        Verdict {
            correct: true,
            reason: reason.into(),
        }
    }
    fn no(reason: impl Into<String>) -> Verdict {
        Verdict {
            correct: false,
            reason: reason.into(),
        }
    }
}

impl Judge {
    /// Judges `output` against `gold`. `question` is the input text, used only by
    /// [`Judge::NumberInText`] to avoid taking a number that merely repeats the question.
    pub fn judge(&self, gold: &Value, output: &Value, question: Option<&str>) -> Verdict {
        match self {
            Judge::Exact => {
                if json_eq(gold, output) {
                    Verdict::yes("exact match")
                } else {
                    Verdict::no(format!("expected {gold}, got {output}"))
                }
            }
            Judge::Numeric { abs_tol, rel_tol } => match (as_number(gold), as_number(output)) {
                (Some(g), Some(o)) if within(g, o, *abs_tol, *rel_tol) => {
                    Verdict::yes(format!("{o} ≈ {g}"))
                }
                (Some(g), Some(o)) => Verdict::no(format!("{o} is not within tolerance of {g}")),
                (None, _) => Verdict::no(format!("gold {gold} is not a number")),
                (_, None) => Verdict::no(format!("{output} is not a number")),
            },
            Judge::Contains { case_sensitive } => {
                let (g, o) = (as_text(gold), as_text(output));
                let (g, o) = if *case_sensitive {
                    (g.trim().to_string(), o)
                } else {
                    (g.trim().to_lowercase(), o.to_lowercase())
                };
                if !g.is_empty() && o.contains(&g) {
                    Verdict::yes("contains the gold text")
                } else {
                    Verdict::no(format!("does not contain {gold}"))
                }
            }
            Judge::OneOf { values } => {
                if values.iter().any(|v| json_eq(v, output)) {
                    Verdict::yes("one of the acceptable values")
                } else {
                    Verdict::no(format!(
                        "{output} is not among {}",
                        Value::from(values.clone())
                    ))
                }
            }
            Judge::NumberInText { abs_tol } => {
                let Some(g) = as_number(gold) else {
                    return Verdict::no(format!("gold {gold} is not a number"));
                };
                match extract_number(&as_text(output), question) {
                    Some(o) if within(g, o, *abs_tol, 0.0) => Verdict::yes(format!("found {o}")),
                    Some(o) => Verdict::no(format!("found {o}, expected {g}")),
                    None => Verdict::no("no number in the answer"),
                }
            }
        }
    }
}

fn within(gold: f64, out: f64, abs_tol: f64, rel_tol: f64) -> bool {
    let d = (gold - out).abs();
    d <= abs_tol || d <= rel_tol * gold.abs()
}

/// Text form of a value: strings as themselves, anything else as compact JSON.
fn as_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A number, or a string that is exactly a number (thousands separators allowed).
fn as_number(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().replace(',', "").parse().ok(),
        _ => None,
    }
}

/// JSON equality as JSON Schema's `const` and `enum` use it: numbers by value (`5` equals
/// `5.0`, integers exactly), object key order ignored.
pub use formwork_core::schema::ir::json_eq;

fn number_regex() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        // A sign, digits with optional thousands separators, an optional fraction. A leading
        // currency sign is allowed between sign and digits.
        Regex::new(r"-?\$?(?:[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?:\.[0-9]+)?").expect("static regex")
    })
}

fn cue_regex() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        Regex::new(r"(?i)####|answer\s*(?:is|:|=)|result\s*(?:is|:|=)|total\s*(?:is|:|=)|=")
            .expect("static regex")
    })
}

fn numbers_in(text: &str) -> Vec<f64> {
    number_regex()
        .find_iter(text)
        .filter_map(|m| {
            let s = text[m.range()].replace([',', '$'], "");
            s.parse().ok()
        })
        .collect()
}

/// The number a free-text answer gives, or `None`.
///
/// Rules, in order (each one guards a known pitfall):
/// 1. After the last answer cue (`####`, "answer is", "result:", "total =", `=`), the first
///    number: "5 + 3 = 8" answers 8, not 3.
/// 2. Otherwise the last number in the text that does not occur in `question`: an answer that
///    restates the question ("Tom had 5 apples, so he has 8") answers 8; "8, since he started
///    with 5" answers 8, not the question's 5.
/// 3. Otherwise the last number at all.
///
/// Thousands separators and a `$` are understood ("$1,200.50" is 1200.5); a sentence-final
/// period is not a decimal point ("It is 42." is 42).
pub fn extract_number(text: &str, question: Option<&str>) -> Option<f64> {
    if let Some(cue) = cue_regex().find_iter(text).last() {
        if let Some(&n) = numbers_in(&text[cue.end()..]).first() {
            return Some(n);
        }
    }
    let found = numbers_in(text);
    let asked = question.map(numbers_in).unwrap_or_default();
    found
        .iter()
        .rev()
        .find(|n| !asked.contains(n))
        .or(found.last())
        .copied()
}

/// Precision, recall and F1 of predicted slots against gold slots.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SlotScores {
    /// Predicted pairs that are in gold.
    pub true_positives: usize,
    /// Number of predicted (slot, value) pairs.
    pub predicted: usize,
    /// Number of gold (slot, value) pairs.
    pub gold: usize,
}

impl SlotScores {
    /// Adds the counts of another case (micro-averaging).
    pub fn add(&mut self, other: SlotScores) {
        self.true_positives += other.true_positives;
        self.predicted += other.predicted;
        self.gold += other.gold;
    }
    /// tp / predicted; 1 when nothing was predicted and nothing was expected.
    pub fn precision(&self) -> f64 {
        ratio(self.true_positives, self.predicted, self.gold == 0)
    }
    /// tp / gold; 1 when nothing was expected.
    pub fn recall(&self) -> f64 {
        ratio(self.true_positives, self.gold, true)
    }
    /// Harmonic mean of precision and recall.
    pub fn f1(&self) -> f64 {
        let (p, r) = (self.precision(), self.recall());
        if p + r == 0.0 {
            0.0
        } else {
            2.0 * p * r / (p + r)
        }
    }
    /// Whether the prediction is exactly the gold slot set.
    pub fn exact(&self) -> bool {
        self.true_positives == self.gold && self.predicted == self.gold
    }
}

fn ratio(num: usize, den: usize, empty_is_one: bool) -> f64 {
    if den == 0 {
        if empty_is_one {
            1.0
        } else {
            0.0
        }
    } else {
        num as f64 / den as f64
    }
}

/// Scores a slot-filling output: both sides are objects of slot name → value. Values compare
/// after trimming and case-folding (SNIPS spans differ in case from model output); `null` and
/// empty-string values in the output count as "slot omitted". A non-object output predicts
/// nothing.
pub fn slot_scores(gold: &Value, output: &Value) -> SlotScores {
    let norm = |v: &Value| match v {
        Value::String(s) => s.trim().to_lowercase(),
        other => other.to_string(),
    };
    let pairs = |v: &Value| -> Vec<(String, String)> {
        v.as_object()
            .map(|o| {
                o.iter()
                    .filter(|(_, v)| !v.is_null() && v.as_str() != Some(""))
                    .map(|(k, v)| (k.clone(), norm(v)))
                    .collect()
            })
            .unwrap_or_default()
    };
    let g = pairs(gold);
    let o = pairs(output);
    SlotScores {
        true_positives: o.iter().filter(|p| g.contains(p)).count(),
        predicted: o.len(),
        gold: g.len(),
    }
}

/// BFCL's rule for one acceptable answer `{name: {arg: [values]}}` against a call
/// `{"name", "arguments"}`.
pub(crate) fn call_verdict(answer: &Value, call: &Value) -> Verdict {
    match call_mismatch(answer, call) {
        None => Verdict::yes("call matches"),
        Some(reason) => Verdict::no(reason),
    }
}

/// Why `call` is not the acceptable `answer`, or `None` when it is.
fn call_mismatch(answer: &Value, call: &Value) -> Option<String> {
    let Some((name, args)) = answer.as_object().and_then(|o| o.iter().next()) else {
        return Some("malformed acceptable answer".into());
    };
    let got_name = call.get("name").and_then(Value::as_str).unwrap_or("");
    if got_name != name {
        return Some(format!("called `{got_name}`, expected `{name}`"));
    }
    let empty = Map::new();
    let got = call
        .get("arguments")
        .and_then(Value::as_object)
        .unwrap_or(&empty);
    let Some(allowed) = args.as_object() else {
        return Some("malformed acceptable arguments".into());
    };
    for k in got.keys() {
        if !allowed.contains_key(k) {
            return Some(format!("unexpected argument `{k}`"));
        }
    }
    for (k, values) in allowed {
        let Some(values) = values.as_array() else {
            return Some("malformed acceptable values".into());
        };
        match got.get(k) {
            None if values.iter().any(|v| v.as_str() == Some("")) => {}
            None => return Some(format!("missing argument `{k}`")),
            Some(v) if values.iter().any(|a| arg_eq(a, v)) => {}
            Some(v) => return Some(format!("argument `{k}` = {v} is not acceptable")),
        }
    }
    None
}

/// BFCL compares strings case-insensitively and with surrounding whitespace trimmed, numbers
/// by value (an integer gold accepts the same float), lists element-wise.
fn arg_eq(gold: &Value, got: &Value) -> bool {
    match (gold, got) {
        (Value::String(a), Value::String(b)) => a.trim().eq_ignore_ascii_case(b.trim()),
        (Value::Array(a), Value::Array(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| arg_eq(x, y))
        }
        _ => json_eq(gold, got),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ok(j: &Judge, gold: Value, out: Value) -> bool {
        j.judge(&gold, &out, None).correct
    }

    #[test]
    fn exact_compares_numbers_by_value_and_ignores_key_order() {
        let j = Judge::Exact;
        assert!(ok(&j, json!(5), json!(5.0)));
        assert!(ok(
            &j,
            json!({"a": 1, "b": [1, 2]}),
            json!({"b": [1, 2.0], "a": 1})
        ));
        assert!(!ok(&j, json!({"a": 1}), json!({"a": 1, "b": 2})));
        assert!(!ok(&j, json!("5"), json!(5)));
        assert!(!ok(&j, json!([1, 2]), json!([2, 1])));
    }

    #[test]
    fn numeric_tolerance_catches_the_float_trap() {
        let j = Judge::Numeric {
            abs_tol: 1e-9,
            rel_tol: 0.0,
        };
        // 0.1 + 0.2 in binary floating point.
        assert!(ok(&j, json!(0.3), json!(0.30000000000000004)));
        assert!(
            !Judge::Exact
                .judge(&json!(0.3), &json!(0.30000000000000004), None)
                .correct
        );
        assert!(!ok(&j, json!(0.3), json!(0.31)));
        assert!(ok(&j, json!(1200), json!("1,200")));
        assert!(!ok(&j, json!(3), json!("three")));
        let rel = Judge::Numeric {
            abs_tol: 0.0,
            rel_tol: 0.01,
        };
        assert!(ok(&rel, json!(1000), json!(1009)));
        assert!(!ok(&rel, json!(1000), json!(1011)));
    }

    #[test]
    fn contains_is_case_insensitive_by_default() {
        let j = Judge::Contains {
            case_sensitive: false,
        };
        assert!(ok(&j, json!("Paris"), json!("The capital is paris.")));
        assert!(!ok(&j, json!("Paris"), json!("The capital is Lyon.")));
        assert!(
            !ok(&j, json!(""), json!("anything")),
            "empty gold never matches"
        );
        let cs = Judge::Contains {
            case_sensitive: true,
        };
        assert!(!ok(&cs, json!("Paris"), json!("paris")));
    }

    #[test]
    fn one_of_accepts_any_listed_value() {
        let j: Judge =
            serde_json::from_value(json!({"kind": "one_of", "values": ["celsius", 10]})).unwrap();
        assert!(ok(&j, Value::Null, json!(10.0)));
        assert!(ok(&j, Value::Null, json!("celsius")));
        assert!(!ok(&j, Value::Null, json!("fahrenheit")));
    }

    #[test]
    fn judges_deserialize_strictly() {
        assert!(serde_json::from_value::<Judge>(json!({"kind": "exact"})).is_ok());
        assert!(serde_json::from_value::<Judge>(json!({"kind": "exakt"})).is_err());
        assert!(
            serde_json::from_value::<Judge>(json!({"kind": "numeric", "tolerance": 1})).is_err()
        );
    }

    #[test]
    fn number_extraction_pitfalls() {
        let q = "Tom has 5 apples and buys 3 more. How many apples does he have?";
        assert_eq!(extract_number("The answer is 8.", Some(q)), Some(8.0));
        assert_eq!(extract_number("5 + 3 = 8", Some(q)), Some(8.0));
        assert_eq!(
            extract_number("8, since he started with 5", Some(q)),
            Some(8.0)
        );
        assert_eq!(
            extract_number("He had 5 apples and bought 3, so 8 apples", Some(q)),
            Some(8.0)
        );
        assert_eq!(extract_number("#### 72", None), Some(72.0));
        assert_eq!(
            extract_number("It costs $1,200.50 in all", None),
            Some(1200.5)
        );
        assert_eq!(extract_number("It is 42.", None), Some(42.0));
        assert_eq!(
            extract_number("The temperature fell to -3", None),
            Some(-3.0)
        );
        assert_eq!(extract_number("no idea", None), None);
        // When the answer only repeats the question's numbers, the last one is the answer.
        assert_eq!(extract_number("He has 5", Some(q)), Some(5.0));
        let j = Judge::NumberInText { abs_tol: 0.0 };
        assert!(j.judge(&json!(8), &json!("So 8 apples."), Some(q)).correct);
        assert!(
            !j.judge(&json!(8), &json!("He had 5 apples."), Some(q))
                .correct
        );
    }

    #[test]
    fn slot_scores_micro_average() {
        let gold = json!({"city": "Paris", "date": "tomorrow"});
        let perfect = slot_scores(&gold, &json!({"date": "Tomorrow ", "city": "paris"}));
        assert!(perfect.exact());
        assert_eq!(perfect.f1(), 1.0);
        // One right, one wrong, one extra: P = 1/3, R = 1/2.
        let s = slot_scores(
            &gold,
            &json!({"city": "Paris", "date": "today", "time": "noon"}),
        );
        assert_eq!((s.true_positives, s.predicted, s.gold), (1, 3, 2));
        assert!((s.f1() - 0.4).abs() < 1e-12);
        assert!(!s.exact());
        // Omitted slots (null / empty) are not predictions.
        let omitted = slot_scores(&gold, &json!({"city": "Paris", "date": null, "time": ""}));
        assert_eq!((omitted.predicted, omitted.true_positives), (1, 1));
        assert_eq!(omitted.precision(), 1.0);
        // Empty gold and empty output: a perfect (exact) answer.
        let empty = slot_scores(&json!({}), &json!({}));
        assert!(empty.exact());
        assert_eq!(empty.f1(), 1.0);
        // Non-object output predicts nothing.
        let junk = slot_scores(&gold, &json!("Paris"));
        assert_eq!((junk.predicted, junk.recall()), (0, 0.0));
        let mut total = SlotScores::default();
        total.add(perfect);
        total.add(s);
        assert_eq!(
            (total.true_positives, total.predicted, total.gold),
            (3, 5, 4)
        );
    }
}
