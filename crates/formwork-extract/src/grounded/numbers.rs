//! The numbers a document states ([`document_numbers`]): digit runs as written and number
//! words, each with the JSON text a grounded number is written as.

/// Number words and their values: `zero` to `nineteen` and the tens; a compound such as
/// `twenty-five` is a ten, a hyphen and a unit.
const NUMBER_WORDS: [(&str, u32); 28] = [
    ("zero", 0),
    ("one", 1),
    ("two", 2),
    ("three", 3),
    ("four", 4),
    ("five", 5),
    ("six", 6),
    ("seven", 7),
    ("eight", 8),
    ("nine", 9),
    ("ten", 10),
    ("eleven", 11),
    ("twelve", 12),
    ("thirteen", 13),
    ("fourteen", 14),
    ("fifteen", 15),
    ("sixteen", 16),
    ("seventeen", 17),
    ("eighteen", 18),
    ("nineteen", 19),
    ("twenty", 20),
    ("thirty", 30),
    ("forty", 40),
    ("fifty", 50),
    ("sixty", 60),
    ("seventy", 70),
    ("eighty", 80),
    ("ninety", 90),
];

/// The numbers `text` states, each once, in order of first appearance, with the JSON text a
/// grounded number is written as: digit runs not inside a word (`12`, `3.5`; `1,200` with
/// thousands separators is 1200; a `-` that starts the word makes it negative; leading zeros
/// are dropped), and number words (see `NUMBER_WORDS`; `twenty-five` is 25). Digits inside
/// a word (`db-3`, `v2`) are not numbers the document states as such, and are skipped.
pub fn document_numbers(text: &str) -> Vec<(f64, String)> {
    let mut out: Vec<(f64, String)> = Vec::new();
    let mut push = |x: f64, text: String| {
        if x.is_finite() && !out.iter().any(|(_, t)| *t == text) {
            out.push((x, text));
        }
    };
    let b = text.as_bytes();
    let word_byte = |c: u8| c.is_ascii_alphanumeric() || c == b'_' || c >= 0x80;
    let mut i = 0;
    while i < b.len() {
        if !b[i].is_ascii_digit() || (i > 0 && (word_byte(b[i - 1]) || b[i - 1] == b'.')) {
            i += 1;
            continue;
        }
        // `db-3`: a digit run joined to a word by a hyphen is part of a name (a range such
        // as `5-12` is two numbers).
        if i > 1 && b[i - 1] == b'-' && (b[i - 2].is_ascii_alphabetic() || b[i - 2] >= 0x80) {
            while i < b.len() && b[i].is_ascii_digit() {
                i += 1;
            }
            continue;
        }
        let negative = i > 0 && b[i - 1] == b'-' && (i < 2 || !word_byte(b[i - 2]));
        let mut digits = String::new();
        while i < b.len() {
            if b[i].is_ascii_digit() {
                digits.push(b[i] as char);
                i += 1;
            } else if b[i] == b','
                && b.len() > i + 3
                && b[i + 1..i + 4].iter().all(u8::is_ascii_digit)
                && b.get(i + 4).is_none_or(|c| !c.is_ascii_digit())
            {
                i += 1;
            } else {
                break;
            }
        }
        let mut frac = String::new();
        if i + 1 < b.len() && b[i] == b'.' && b[i + 1].is_ascii_digit() {
            i += 1;
            while i < b.len() && b[i].is_ascii_digit() {
                frac.push(b[i] as char);
                i += 1;
            }
        }
        // A number glued to letters after it (`3rd`, `2x`) is kept: the digits are as written.
        let int = digits.trim_start_matches('0');
        let int = if int.is_empty() { "0" } else { int };
        let frac = frac.trim_end_matches('0');
        let sign = if negative && (int != "0" || !frac.is_empty()) {
            "-"
        } else {
            ""
        };
        let json = if frac.is_empty() {
            format!("{sign}{int}")
        } else {
            format!("{sign}{int}.{frac}")
        };
        if let Ok(x) = json.parse::<f64>() {
            push(x, json);
        }
    }
    let lower = text.to_lowercase();
    for word in lower.split(|c: char| !(c.is_alphabetic() || c == '-')) {
        let value = |w: &str| NUMBER_WORDS.iter().find(|(n, _)| *n == w).map(|&(_, v)| v);
        let v = match word.split_once('-') {
            Some((tens, unit)) => match (value(tens), value(unit)) {
                (Some(t), Some(u)) if t >= 20 && t % 10 == 0 && (1..10).contains(&u) => Some(t + u),
                _ => None,
            },
            None => value(word),
        };
        if let Some(v) = v {
            push(f64::from(v), v.to_string());
        }
    }
    out
}
