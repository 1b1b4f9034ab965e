//! Eval reports: per-case results in, per-configuration metrics with their spread and pairwise
//! A/B verdicts out, rendered as a terminal table, Markdown, JSON or a self-contained HTML page.
//!
//! Owns aggregation and rendering only; results come from the runner. Every number shown is
//! computed here from [`CaseResult`]s, so a rendering cannot disagree with the JSON.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::judge::SlotScores;
use super::stats::{paired_bootstrap, AbVerdict, Spread};

/// How one attempt at one case ended: the same outcomes as an extraction record.
pub use crate::batch::RecordStatus as Status;

/// One configuration's attempt at one case in one run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CaseResult {
    /// The case id.
    pub case: String,
    /// The configuration's name.
    pub config: String,
    /// 0-based run index (runs differ by seed).
    pub run: usize,
    /// How it ended.
    pub status: Status,
    /// The parsed output, if it parsed.
    pub output: Option<Value>,
    /// The raw text the model produced.
    pub raw: String,
    /// Whether the case was judged right (false unless `status` is `Ok`).
    pub correct: bool,
    /// Field-level accuracy (or slot F1) in [0, 1].
    pub field_accuracy: f64,
    /// Slot counts, for slot-filling suites.
    pub slots: Option<SlotCounts>,
    /// The judge's reason.
    pub reason: String,
    /// Tokens generated (sampled plus forced).
    pub tokens: usize,
    /// Of those, tokens the grammar forced (fast-forwarded).
    pub forced_tokens: usize,
    /// Whether grounded values could be any substring, not only whole-word spans (the
    /// document was over the span automaton's budget; see
    /// [`RecordResult::grounded_substrings`](crate::batch::RecordResult)).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub grounded_substrings: bool,
    /// Wall time for the case, milliseconds.
    pub latency_ms: f64,
}

/// Serializable slot counts (see [`SlotScores`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlotCounts {
    /// Predicted pairs that are right.
    pub true_positives: usize,
    /// Predicted pairs.
    pub predicted: usize,
    /// Gold pairs.
    pub gold: usize,
}

impl From<SlotScores> for SlotCounts {
    fn from(s: SlotScores) -> Self {
        SlotCounts {
            true_positives: s.true_positives,
            predicted: s.predicted,
            gold: s.gold,
        }
    }
}

/// The metrics, in report order. Higher is better for all but latency.
pub const METRICS: [&str; 8] = [
    "validity",
    "accuracy",
    "field_accuracy",
    "slot_f1",
    "refusal_rate",
    "forced_share",
    "latency_ms",
    "tokens_per_s",
];

/// The metrics of one run of one configuration (each a mean over the run's cases).
fn run_metrics(results: &[&CaseResult]) -> BTreeMap<&'static str, f64> {
    let n = results.len().max(1) as f64;
    let share =
        |f: &dyn Fn(&CaseResult) -> bool| results.iter().filter(|r| f(r)).count() as f64 / n;
    let mut m = BTreeMap::new();
    m.insert("validity", share(&|r| r.status == Status::Ok));
    m.insert("accuracy", share(&|r| r.correct));
    m.insert(
        "field_accuracy",
        results.iter().map(|r| r.field_accuracy).sum::<f64>() / n,
    );
    m.insert("refusal_rate", share(&|r| r.status == Status::Refusal));
    let tokens: usize = results.iter().map(|r| r.tokens).sum();
    let forced: usize = results.iter().map(|r| r.forced_tokens).sum();
    m.insert(
        "forced_share",
        if tokens == 0 {
            0.0
        } else {
            forced as f64 / tokens as f64
        },
    );
    let ms: f64 = results.iter().map(|r| r.latency_ms).sum();
    m.insert("latency_ms", ms / n);
    m.insert(
        "tokens_per_s",
        if ms > 0.0 {
            tokens as f64 / (ms / 1000.0)
        } else {
            0.0
        },
    );
    if results.iter().any(|r| r.slots.is_some()) {
        let mut s = SlotScores::default();
        for r in results {
            if let Some(c) = r.slots {
                s.add(SlotScores {
                    true_positives: c.true_positives,
                    predicted: c.predicted,
                    gold: c.gold,
                });
            }
        }
        m.insert("slot_f1", s.f1());
    }
    m
}

/// One configuration's summary.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ConfigSummary {
    /// The configuration's name.
    pub config: String,
    /// Metric → spread over runs.
    pub metrics: BTreeMap<String, SpreadJson>,
    /// Number of runs.
    pub runs: usize,
}

/// [`Spread`] as report data.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct SpreadJson {
    /// Mean over runs.
    pub mean: f64,
    /// Sample standard deviation over runs.
    pub std_dev: f64,
    /// Smallest run value.
    pub min: f64,
    /// Largest run value.
    pub max: f64,
}

impl From<Spread> for SpreadJson {
    fn from(s: Spread) -> Self {
        SpreadJson {
            mean: s.mean,
            std_dev: s.std_dev,
            min: s.min,
            max: s.max,
        }
    }
}

/// An A/B comparison of two configurations on one metric.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Comparison {
    /// Configuration A.
    pub a: String,
    /// Configuration B.
    pub b: String,
    /// The metric compared (per-case `accuracy` or `field_accuracy`).
    pub metric: String,
    /// Mean A − B.
    pub diff: f64,
    /// Confidence interval of the difference.
    pub ci: (f64, f64),
    /// "A", "B" or "no significant difference".
    pub verdict: String,
}

/// A whole eval report.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Report {
    /// The suite's name.
    pub suite: String,
    /// Number of cases.
    pub cases: usize,
    /// One summary per configuration, in the order given.
    pub configs: Vec<ConfigSummary>,
    /// Every pair of configurations, on case accuracy and field accuracy.
    pub comparisons: Vec<Comparison>,
    /// Every result, for per-case failure listings.
    pub results: Vec<CaseResult>,
}

impl Report {
    /// Aggregates `results` (any order) into a report. `configs` gives the display order.
    /// The bootstrap uses 2,000 resamples at 95% with a fixed seed.
    pub fn build(suite: &str, configs: &[String], results: Vec<CaseResult>) -> Report {
        let mut case_ids: Vec<&str> = results.iter().map(|r| r.case.as_str()).collect();
        case_ids.sort_unstable();
        case_ids.dedup();
        let mut summaries = Vec::new();
        for c in configs {
            let mine: Vec<&CaseResult> = results.iter().filter(|r| &r.config == c).collect();
            let runs = mine.iter().map(|r| r.run + 1).max().unwrap_or(0);
            let per_run: Vec<_> = (0..runs)
                .map(|i| {
                    let rs: Vec<&CaseResult> =
                        mine.iter().copied().filter(|r| r.run == i).collect();
                    run_metrics(&rs)
                })
                .collect();
            let mut metrics = BTreeMap::new();
            for name in METRICS {
                let vals: Vec<f64> = per_run
                    .iter()
                    .filter_map(|m| m.get(name).copied())
                    .collect();
                if let Some(s) = Spread::of(&vals) {
                    metrics.insert(name.to_string(), s.into());
                }
            }
            summaries.push(ConfigSummary {
                config: c.clone(),
                metrics,
                runs,
            });
        }
        // Per-case scores averaged over runs, for the paired bootstrap.
        let case_means = |config: &str, f: &dyn Fn(&CaseResult) -> f64| -> Vec<f64> {
            case_ids
                .iter()
                .map(|id| {
                    let rs: Vec<f64> = results
                        .iter()
                        .filter(|r| r.config == config && r.case == *id)
                        .map(f)
                        .collect();
                    rs.iter().sum::<f64>() / rs.len().max(1) as f64
                })
                .collect()
        };
        let mut comparisons = Vec::new();
        for (i, a) in configs.iter().enumerate() {
            for b in &configs[i + 1..] {
                for (metric, f) in [
                    (
                        "accuracy",
                        &(|r: &CaseResult| f64::from(u8::from(r.correct)))
                            as &dyn Fn(&CaseResult) -> f64,
                    ),
                    ("field_accuracy", &|r: &CaseResult| r.field_accuracy),
                ] {
                    let (xa, xb) = (case_means(a, f), case_means(b, f));
                    if let Some(v) = paired_bootstrap(&xa, &xb, 2000, 0.95, 0x5eed) {
                        comparisons.push(comparison(a, b, metric, v));
                    }
                }
            }
        }
        Report {
            suite: suite.to_string(),
            cases: case_ids.len(),
            configs: summaries,
            comparisons,
            results,
        }
    }

    /// One row per configuration: its name and the formatted `mean ± spread` of each metric
    /// in `cols` (empty where the configuration lacks it). Shared by the text and Markdown
    /// tables so they cannot disagree.
    fn rows<'a>(&'a self, cols: &'a [&str]) -> impl Iterator<Item = (&'a str, Vec<String>)> {
        self.configs.iter().map(move |c| {
            let cells = cols
                .iter()
                .map(|m| {
                    c.metrics
                        .get(*m)
                        .map(|s| fmt_spread(m, s, c.runs))
                        .unwrap_or_default()
                })
                .collect();
            (c.config.as_str(), cells)
        })
    }

    /// A fixed-width table for the terminal, then the A/B verdicts.
    pub fn to_text(&self) -> String {
        let mut out = format!("suite {} — {} cases\n", self.suite, self.cases);
        let cols = self.present_metrics();
        let _ = write!(out, "{:<24}", "config");
        for m in &cols {
            let _ = write!(out, " {m:>22}");
        }
        out.push('\n');
        for (config, cells) in self.rows(&cols) {
            let _ = write!(out, "{config:<24}");
            for cell in cells {
                let _ = write!(out, " {cell:>22}");
            }
            out.push('\n');
        }
        for cmp in &self.comparisons {
            let _ = writeln!(out, "{}", fmt_comparison(cmp));
        }
        out
    }

    /// A Markdown table with the same content as [`to_text`](Self::to_text), plus failures.
    pub fn to_markdown(&self) -> String {
        let cols = self.present_metrics();
        let mut out = format!("### {} ({} cases)\n\n| config |", self.suite, self.cases);
        for m in &cols {
            let _ = write!(out, " {m} |");
        }
        out.push_str("\n|---|");
        out.push_str(&"---:|".repeat(cols.len()));
        out.push('\n');
        for (config, cells) in self.rows(&cols) {
            let _ = write!(out, "| {config} |");
            for cell in cells {
                let _ = write!(out, " {cell} |");
            }
            out.push('\n');
        }
        if !self.comparisons.is_empty() {
            out.push('\n');
            for cmp in &self.comparisons {
                let _ = writeln!(out, "- {}", fmt_comparison(cmp));
            }
        }
        out
    }

    /// The report as pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
    }

    /// A self-contained HTML page: bar charts (SVG) with error bars per configuration for
    /// accuracy, validity and latency, the table, the verdicts, and the failed cases.
    pub fn to_html(&self) -> String {
        let mut out = String::from(
            "<!doctype html><html><head><meta charset=\"utf-8\"><title>formwork eval</title><style>\
             body{font-family:system-ui,sans-serif;margin:2em;max-width:70em}\
             table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.3em .6em;text-align:right}\
             td:first-child,th:first-child{text-align:left}.chart{display:inline-block;margin:0 2em 1em 0}\
             pre{white-space:pre-wrap;background:#f6f6f6;padding:.4em}</style></head><body>",
        );
        let _ = write!(out, "<h1>{} — {} cases</h1>", esc(&self.suite), self.cases);
        for (metric, title) in [
            ("accuracy", "Accuracy"),
            ("field_accuracy", "Field accuracy / slot F1"),
            ("validity", "Validity"),
            ("latency_ms", "Latency per case (ms)"),
        ] {
            out.push_str(&self.svg_chart(metric, title));
        }
        out.push_str("<h2>Metrics (mean ± std over runs)</h2>");
        out.push_str(&markdown_table_to_html(self));
        if !self.comparisons.is_empty() {
            out.push_str("<h2>A/B verdicts (paired bootstrap, 95%)</h2><ul>");
            for c in &self.comparisons {
                let _ = write!(out, "<li>{}</li>", esc(&fmt_comparison(c)));
            }
            out.push_str("</ul>");
        }
        out.push_str("<h2>Failed cases</h2>");
        for r in self.results.iter().filter(|r| !r.correct) {
            let _ = write!(
                out,
                "<details><summary>{} · {} · run {} · {:?}: {}</summary><pre>{}</pre></details>",
                esc(&r.case),
                esc(&r.config),
                r.run,
                r.status,
                esc(&r.reason),
                esc(&r.raw)
            );
        }
        out.push_str("</body></html>\n");
        out
    }

    fn present_metrics(&self) -> Vec<&'static str> {
        METRICS
            .iter()
            .copied()
            .filter(|m| self.configs.iter().any(|c| c.metrics.contains_key(*m)))
            .collect()
    }

    fn svg_chart(&self, metric: &str, title: &str) -> String {
        let rows: Vec<(&str, SpreadJson)> = self
            .configs
            .iter()
            .filter_map(|c| c.metrics.get(metric).map(|s| (c.config.as_str(), *s)))
            .collect();
        if rows.is_empty() {
            return String::new();
        }
        let top = rows
            .iter()
            .map(|(_, s)| s.max.max(s.mean + s.std_dev))
            .fold(if metric == "latency_ms" { 0.0 } else { 1.0 }, f64::max)
            .max(1e-9);
        let (w, bar_h, gap, label_w) = (420.0, 22.0, 10.0, 150.0);
        let h = rows.len() as f64 * (bar_h + gap) + 30.0;
        let scale = |v: f64| label_w + v / top * (w - label_w - 60.0);
        let mut svg = format!(
            "<div class=\"chart\"><h3>{}</h3><svg width=\"{w}\" height=\"{h}\" role=\"img\">",
            esc(title)
        );
        for (i, (name, s)) in rows.iter().enumerate() {
            let y = 10.0 + i as f64 * (bar_h + gap);
            let _ = write!(
                svg,
                "<text x=\"0\" y=\"{:.1}\" font-size=\"12\">{}</text>\
                 <rect x=\"{label_w}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{bar_h}\" fill=\"#4a7fb5\"/>\
                 <line x1=\"{:.1}\" x2=\"{:.1}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"#222\" stroke-width=\"2\"/>\
                 <text x=\"{:.1}\" y=\"{:.1}\" font-size=\"11\">{:.3}</text>",
                y + 15.0,
                esc(name),
                (scale(s.mean) - label_w).max(0.5),
                scale((s.mean - s.std_dev).max(0.0)),
                scale(s.mean + s.std_dev),
                y + bar_h / 2.0,
                y + bar_h / 2.0,
                scale(s.mean + s.std_dev) + 6.0,
                y + 15.0,
                s.mean
            );
        }
        svg.push_str("</svg></div>");
        svg
    }
}

fn comparison(a: &str, b: &str, metric: &str, v: AbVerdict) -> Comparison {
    Comparison {
        a: a.to_string(),
        b: b.to_string(),
        metric: metric.to_string(),
        diff: v.diff,
        ci: (v.lo, v.hi),
        verdict: match v.winner() {
            Some(super::stats::Side::A) => a.to_string(),
            Some(super::stats::Side::B) => b.to_string(),
            None => "no significant difference".to_string(),
        },
    }
}

fn fmt_comparison(c: &Comparison) -> String {
    let verdict = if c.verdict == "no significant difference" {
        c.verdict.clone()
    } else {
        format!("{} is better", c.verdict)
    };
    format!(
        "{} vs {} on {}: {:+.3} (95% CI {:+.3} … {:+.3}) — {verdict}",
        c.a, c.b, c.metric, c.diff, c.ci.0, c.ci.1
    )
}

fn fmt_spread(metric: &str, s: &SpreadJson, runs: usize) -> String {
    let p = if metric == "latency_ms" || metric == "tokens_per_s" {
        1
    } else {
        3
    };
    if runs <= 1 {
        format!("{:.p$}", s.mean)
    } else {
        format!("{:.p$} ± {:.p$}", s.mean, s.std_dev)
    }
}

fn markdown_table_to_html(r: &Report) -> String {
    let cols = r.present_metrics();
    let mut out = String::from("<table><tr><th>config</th>");
    for m in &cols {
        let _ = write!(out, "<th>{m}</th>");
    }
    out.push_str("</tr>");
    for c in &r.configs {
        let _ = write!(out, "<tr><td>{}</td>", esc(&c.config));
        for m in &cols {
            let cell = c
                .metrics
                .get(*m)
                .map(|s| fmt_spread(m, s, c.runs))
                .unwrap_or_default();
            let _ = write!(out, "<td>{cell}</td>");
        }
        out.push_str("</tr>");
    }
    out.push_str("</table>");
    out
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(case: usize, config: &str, run: usize, correct: bool) -> CaseResult {
        CaseResult {
            case: format!("c{case}"),
            config: config.into(),
            run,
            status: if correct { Status::Ok } else { Status::Invalid },
            output: None,
            raw: "<raw & output>".into(),
            correct,
            field_accuracy: f64::from(u8::from(correct)),
            slots: None,
            reason: "r".into(),
            tokens: 10,
            forced_tokens: 4,
            grounded_substrings: false,
            latency_ms: 100.0,
        }
    }

    /// Config "good" is right on every case in every run, "bad" on case 0 only in run 0.
    fn report() -> Report {
        let mut rs = Vec::new();
        for run in 0..3 {
            for case in 0..20 {
                rs.push(result(case, "good", run, true));
                rs.push(result(case, "bad", run, case == 0 && run == 0));
            }
        }
        Report::build("toy", &["good".into(), "bad".into()], rs)
    }

    #[test]
    fn metrics_and_spread_are_computed_per_run() {
        let r = report();
        assert_eq!(r.cases, 20);
        let good = &r.configs[0];
        assert_eq!(good.runs, 3);
        assert_eq!(good.metrics["accuracy"].mean, 1.0);
        assert!((good.metrics["forced_share"].mean - 0.4).abs() < 1e-12);
        assert!((good.metrics["tokens_per_s"].mean - 100.0).abs() < 1e-9);
        let bad = &r.configs[1].metrics["accuracy"];
        // Runs: 1/20, 0, 0.
        assert!((bad.mean - 0.05 / 3.0).abs() < 1e-12);
        assert_eq!((bad.min, bad.max), (0.0, 0.05));
        assert!(!r.configs[0].metrics.contains_key("slot_f1"));
    }

    #[test]
    fn verdict_names_the_winner() {
        let r = report();
        let acc = r
            .comparisons
            .iter()
            .find(|c| c.metric == "accuracy")
            .unwrap();
        assert_eq!(acc.verdict, "good");
        assert!(acc.ci.0 > 0.8);
        assert!(r.to_text().contains("good is better"), "{}", r.to_text());
    }

    #[test]
    fn renderings_carry_the_same_numbers_and_escape_text() {
        let r = report();
        let md = r.to_markdown();
        assert!(
            md.contains("| good | 1.000 ± 0.000 | 1.000 ± 0.000 |"),
            "{md}"
        );
        let html = r.to_html();
        assert!(html.contains("<svg") && html.contains("&lt;raw &amp; output&gt;"));
        assert!(!html.contains("<raw & output>"));
        let json: Value = serde_json::from_str(&r.to_json()).unwrap();
        assert_eq!(json["configs"][0]["metrics"]["accuracy"]["mean"], 1.0);
    }
}
