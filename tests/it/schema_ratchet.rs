//! Ratchet files (STYLE.md §17): compare a run's outcomes with the committed expectations,
//! print every improvement, regression, new and missing entry, fail on any difference, and
//! rewrite the file under `FORMWORK_BLESS=1`. What no ratchet may record (an accepted
//! invalid instance, a mask that disagrees with consume) is a hard assertion,
//! [`assert_none_of`], checked before any bless.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

/// Rank of an outcome category, best first. Unknown categories (compile errors, `budget`:
/// the matcher gave up, `matcher_error`) rank as compile errors: no answer, rather than a wrong
/// one.
pub fn rank(category: &str) -> u8 {
    if category == "pass" {
        0
    } else if category.starts_with("valid_rejected") {
        2
    } else if category.starts_with("invalid_accepted") {
        3
    } else if category.starts_with("mask_disagrees") {
        4
    } else {
        1
    }
}

/// Fails if any outcome of `got` is one of `forbidden`, listing them: these hold whatever a
/// ratchet file says, so `FORMWORK_BLESS=1` cannot record them.
pub fn assert_none_of(got: &BTreeMap<String, String>, forbidden: &[&str], what: &str) {
    let bad: Vec<String> = got
        .iter()
        .filter(|(_, c)| forbidden.contains(&c.as_str()))
        .map(|(k, c)| format!("{k}: {c}"))
        .collect();
    assert!(
        bad.is_empty(),
        "{what}: {} outcomes no ratchet may record ({forbidden:?}):\n  {}",
        bad.len(),
        bad.join("\n  ")
    );
}

/// Compares `got` (key → category, already flattened) with the file's, prints the
/// differences, blesses or fails.
pub fn check(
    path: &Path,
    got: &BTreeMap<String, String>,
    expected_flat: &BTreeMap<String, String>,
    file_value: Value,
    command: &str,
) {
    let mut regressions = Vec::new();
    let mut improvements = Vec::new();
    let mut changed = Vec::new();
    for (k, g) in got {
        match expected_flat.get(k) {
            None => changed.push(format!("new: {k} = {g}")),
            Some(e) if e == g => {}
            Some(e) => {
                let line = format!("{k}: {e} -> {g}");
                match rank(g).cmp(&rank(e)) {
                    std::cmp::Ordering::Less => improvements.push(line),
                    std::cmp::Ordering::Greater => regressions.push(line),
                    std::cmp::Ordering::Equal => changed.push(line),
                }
            }
        }
    }
    for k in expected_flat.keys() {
        if !got.contains_key(k) {
            changed.push(format!("missing: {k}"));
        }
    }
    for l in &improvements {
        println!("improvement: {l}");
    }
    for l in &regressions {
        println!("REGRESSION: {l}");
    }
    for l in &changed {
        println!("changed: {l}");
    }
    let bless = std::env::var("FORMWORK_BLESS").is_ok_and(|v| v == "1");
    if bless {
        let text = serde_json::to_string_pretty(&file_value).expect("serializable") + "\n";
        std::fs::write(path, text).expect("write ratchet file");
        println!("blessed {}", path.display());
        return;
    }
    let total = improvements.len() + regressions.len() + changed.len();
    assert!(
        total == 0,
        "{} regressions, {} unrecorded improvements, {} other changes against {}.\n\
         If the changes are intended, rewrite the file with:\n  FORMWORK_BLESS=1 {command}",
        regressions.len(),
        improvements.len(),
        changed.len(),
        path.display()
    );
}

/// Reads a ratchet file (an empty object when it does not exist yet).
pub fn load(path: &Path) -> Value {
    match std::fs::read_to_string(path) {
        Ok(t) => serde_json::from_str(&t).expect("ratchet file is JSON"),
        Err(_) => Value::Object(Default::default()),
    }
}

/// Percentile (0..=100) of sorted durations in microseconds.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let idx = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}
