//! The eval runner: cases × configurations × runs through a [`Backend`], each attempt judged and
//! written to the results file as it comes, so a long run can be resumed.
//!
//! Owns configurations (TOML or flags, [`EvalConfig`]), case selection (`--limit`,
//! `--per-intent`, a [`CaseRange`] per group with `--cases`, and the worked examples' pool,
//! `--shots-from`), the seed of each attempt (`seed + run` mixed with the case id; a greedy
//! configuration runs once), output validation against the case's schema or tool list, and the
//! results JSONL. Does not own decoding (the backend's) nor aggregation (see
//! [`report`](super::report)).
//!
//! Invariant: every (case, config, run) triple is attempted at most once per results file; a
//! resumed run reads the triples already written and skips them. Cost: one backend attempt per
//! triple plus one schema validator build per attempt (a schema walk, negligible next to
//! decoding).

use std::collections::{BTreeMap, HashSet};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::Deserialize;
use serde_json::Value;

use super::report::{CaseResult, SlotCounts, Status};
use super::suite::{bfcl_params, Case, EvalError, Scoring, Target};
use crate::run::GroundedSpans;
use crate::validate::InvalidSchema;
use formwork_core::schema::PropertyOrder;

/// How a configuration decodes: one of the four configurations an eval compares (issue 3's
/// prompt-only, validate-and-retry, constrained, grounded), named as the configuration files
/// and reports name them. Not a second decoding mode: it is the extraction's
/// [`run::Mode`](crate::run::Mode) plus whether string fields are grounded, which extraction
/// keeps apart (`--grounded` composes with any mode) and an eval names as one configuration
/// ([`Mode::extraction`] splits it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Prompt only; JSON is read out of free text.
    Prompt,
    /// Prompt, then one retry with the validation errors when the output is invalid.
    Retry,
    /// Decoding under the schema's grammar.
    #[default]
    Constrained,
    /// Constrained, with every string field of the schema a substring of the input.
    #[serde(alias = "constrained+grounded")]
    Grounded,
}

impl Mode {
    /// The extraction's decoding mode and whether the schema's string fields are grounded.
    pub fn extraction(self) -> (crate::run::Mode, bool) {
        use crate::run::Mode as X;
        match self {
            Mode::Prompt => (X::Prompt, false),
            Mode::Retry => (X::Retry, false),
            Mode::Constrained => (X::Constrained, false),
            Mode::Grounded => (X::Constrained, true),
        }
    }

    /// The mode's name as written in configurations.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Prompt => "prompt",
            Mode::Retry => "retry",
            Mode::Constrained => "constrained",
            Mode::Grounded => "grounded",
        }
    }
}

/// How worked examples are picked from a case's candidates (its group's unevaluated cases).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "snake_case")]
pub enum ShotSelection {
    /// The first `shots` candidates in suite order: one prompt prefix per group, which the
    /// model's prefix cache reuses from case to case.
    #[default]
    First,
    /// The `shots` candidates sharing the most words with the document (each shared word
    /// weighted by its rarity among the candidates), the most similar last, next to the
    /// document. Every case gets its own prompt, so each prefill is paid in full.
    Similar,
}

/// One configuration compared in an eval. Written in TOML as a `[[config]]` table; a typo in a
/// key fails loudly.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EvalConfig {
    /// The name shown in reports (default: the mode's name).
    pub name: String,
    /// How to decode (default: constrained).
    pub mode: Mode,
    /// Model name from the registry, or a local path (default: `qwen2.5-coder-0.5b`, the
    /// registry's default model; `smollm2-135m` is the small, fast one).
    pub model: String,
    /// A prompt template file; `None` is the extraction library's default template.
    pub template: Option<PathBuf>,
    /// The system prompt; `None` is the one the model's chat template uses, if any.
    pub system: Option<String>,
    /// Sampling temperature; 0 is greedy (default: 0, so the baseline is deterministic).
    pub temperature: f64,
    /// Base seed; run `r` of a case uses `seed + r` mixed with the case id (default: 0; see
    /// [`EvalConfig::seed_for`]).
    pub seed: u64,
    /// Token budget per attempt (default: 96, the cap of the issue's reference measurements).
    pub max_tokens: usize,
    /// Allow whitespace between tokens, at most N bytes per run (default: compact, which
    /// spends no budget on layout).
    pub flexible_whitespace: Option<u32>,
    /// Offer the model a refusal branch (default: false, so every case gets an answer).
    pub allow_refusal: bool,
    /// Worked examples shown before each document (few-shot prompting): `shots` cases of the
    /// same group (SNIPS intent) that are not themselves evaluated in the run, with their gold
    /// answers (default: 0).
    pub shots: usize,
    /// Which cases become the worked examples (default: the first ones, the same for every case
    /// of a group).
    pub shot_selection: ShotSelection,
    /// Repeat penalty on tokens already generated (1 = off, the default; see
    /// [`GenerateConfig::repeat_penalty`](formwork_core::generate::GenerateConfig::repeat_penalty)).
    pub repeat_penalty: f32,
    /// In grounded mode, how values may share the document: `"any"` (the default),
    /// `"distinct"` or `"disjoint"` (see [`GroundedSpans`]).
    pub grounded_spans: GroundedSpans,
    /// The order of an object's listed properties (default: the schema's; see
    /// [`PropertyOrder`]). Written `"schema"`, `"any"` or `{ window = 8 }`. Under any other
    /// than the schema's, worked examples keep their own key order.
    pub property_order: PropertyOrder,
    /// Think, then answer (constrained and grounded modes): the model first reasons in free
    /// text, at most this many tokens, until it writes `think_trigger`; then the answer is
    /// decoded under the grammar with its own `max_tokens` (default: off; see
    /// [`ExtractConfig::think`](crate::run::ExtractConfig::think)).
    pub think: Option<usize>,
    /// The text that ends the reasoning (default: `"Answer:"`,
    /// [`DEFAULT_THINK_TRIGGER`](crate::prompt::DEFAULT_THINK_TRIGGER)). Only with `think`.
    pub think_trigger: Option<String>,
}

impl Default for EvalConfig {
    fn default() -> Self {
        EvalConfig {
            name: String::new(),
            mode: Mode::Constrained,
            model: "qwen2.5-coder-0.5b".into(),
            template: None,
            system: None,
            temperature: 0.0,
            seed: 0,
            max_tokens: 96,
            flexible_whitespace: None,
            allow_refusal: false,
            shots: 0,
            shot_selection: ShotSelection::First,
            repeat_penalty: 1.0,
            grounded_spans: GroundedSpans::Any,
            property_order: PropertyOrder::Schema,
            think: None,
            think_trigger: None,
        }
    }
}

impl EvalConfig {
    /// Whether sampling is greedy (temperature 0): then repeats are identical and one run is
    /// enough.
    pub fn is_greedy(&self) -> bool {
        self.temperature <= 0.0
    }

    /// How many runs this configuration gets when `requested` are asked for.
    pub fn runs(&self, requested: usize) -> usize {
        if self.is_greedy() {
            1
        } else {
            requested.max(1)
        }
    }

    /// The sampling seed of one attempt: run `run` of this configuration on the case `case_id`.
    /// It is `seed + run` mixed with the case id, so that the cases of a run draw independent
    /// random streams (with one seed for all of them, every case would take the same draw at
    /// its first token, and a run's mean would swing with that one draw), while configurations
    /// with the same seed share a case's stream, which keeps their comparison paired.
    pub fn seed_for(&self, run: usize, case_id: &str) -> u64 {
        // FNV-1a of the id, then one SplitMix64 round over the sum.
        let id = case_id.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        let mut z = self
            .seed
            .wrapping_add(run as u64)
            .wrapping_add(id)
            .wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// A configuration file: optional defaults and the `[[config]]` tables.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EvalFile {
    /// Runs per non-greedy configuration, unless `--runs` is given.
    pub runs: Option<usize>,
    /// The configurations, in report order.
    pub config: Vec<EvalConfig>,
}

impl EvalFile {
    /// Parses TOML text; `path` names the source in errors. Unnamed configurations are named
    /// after their mode; names must be unique, since results are keyed by them.
    pub fn parse(text: &str, path: &str) -> Result<EvalFile, EvalError> {
        let mut f: EvalFile = toml::from_str(text).map_err(|e| EvalError::Config {
            path: path.into(),
            message: e.to_string().trim_end().to_string(),
        })?;
        if f.config.is_empty() {
            return Err(EvalError::Config {
                path: path.into(),
                message: "no `[[config]]` table".into(),
            });
        }
        name_configs(&mut f.config, path)?;
        Ok(f)
    }

    /// Reads and parses a TOML file.
    pub fn read(path: &Path) -> Result<EvalFile, EvalError> {
        let text = std::fs::read_to_string(path).map_err(|source| EvalError::File {
            path: path.display().to_string(),
            source,
        })?;
        EvalFile::parse(&text, &path.display().to_string())
    }
}

/// Names unnamed configurations after their mode and rejects duplicate names.
pub fn name_configs(configs: &mut [EvalConfig], path: &str) -> Result<(), EvalError> {
    let mut seen = HashSet::new();
    for c in configs.iter_mut() {
        if c.name.is_empty() {
            c.name = c.mode.name().to_string();
        }
        if !seen.insert(c.name.clone()) {
            return Err(EvalError::Config {
                path: path.into(),
                message: format!("duplicate configuration name `{}`", c.name),
            });
        }
        let bad_think = match (c.think, &c.think_trigger) {
            (Some(_), _) if matches!(c.mode, Mode::Prompt | Mode::Retry) => {
                Some("`think` needs mode `constrained` or `constrained+grounded`")
            }
            (None, Some(_)) => Some("`think_trigger` without `think`"),
            (_, Some(t)) if t.is_empty() => Some("`think_trigger` is empty"),
            _ => None,
        };
        if let Some(m) = bad_think {
            return Err(EvalError::Config {
                path: path.into(),
                message: format!("configuration `{}`: {m}", c.name),
            });
        }
    }
    Ok(())
}

/// Case positions `first..=last` within each group (SNIPS intent; the whole suite when cases
/// have no group), counted from 0 in suite order. Written `FIRST..LAST` with **both ends
/// included**, as the shell's `{40..59}` and the docs' "cases 40–59": `40..59` is 20 cases.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CaseRange {
    first: usize,
    last: usize,
}

/// A case range that cannot be read (see [`CaseRange`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CaseRangeError {
    /// Not two numbers around `..`.
    #[error("`{text}` is not a case range: write FIRST..LAST, both ends included (e.g. 40..59)")]
    Malformed {
        /// The text given.
        text: String,
    },
    /// The first position comes after the last, so the range holds no case.
    #[error("case range `{text}` is empty: its first case {first} comes after its last {last}")]
    Empty {
        /// The text given.
        text: String,
        /// The first position.
        first: usize,
        /// The last position.
        last: usize,
    },
}

impl CaseRange {
    /// The positions `first..=last`.
    ///
    /// # Errors
    /// [`CaseRangeError::Empty`] when `first > last`.
    pub fn new(first: usize, last: usize) -> Result<CaseRange, CaseRangeError> {
        if first > last {
            return Err(CaseRangeError::Empty {
                text: format!("{first}..{last}"),
                first,
                last,
            });
        }
        Ok(CaseRange { first, last })
    }

    /// The first position in the range.
    pub fn first(self) -> usize {
        self.first
    }

    /// The last position in the range (included).
    pub fn last(self) -> usize {
        self.last
    }

    /// Whether position `pos` is in the range.
    pub fn contains(self, pos: usize) -> bool {
        (self.first..=self.last).contains(&pos)
    }
}

impl std::str::FromStr for CaseRange {
    type Err = CaseRangeError;

    /// Reads `FIRST..LAST` (decimal, both ends included).
    fn from_str(text: &str) -> Result<CaseRange, CaseRangeError> {
        let malformed = || CaseRangeError::Malformed { text: text.into() };
        let (a, b) = text.split_once("..").ok_or_else(malformed)?;
        let number = |s: &str| -> Result<usize, CaseRangeError> {
            if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
                return Err(malformed());
            }
            s.parse().map_err(|_| malformed())
        };
        let (first, last) = (number(a)?, number(b)?);
        CaseRange::new(first, last).map_err(|_| CaseRangeError::Empty {
            text: text.into(),
            first,
            last,
        })
    }
}

impl std::fmt::Display for CaseRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}..{}", self.first, self.last)
    }
}

/// Which cases of each group (SNIPS intent; the whole suite when cases have no group) a run
/// evaluates.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum GroupSelection {
    /// Every case.
    #[default]
    All,
    /// The first K of each group (`--per-intent K`); a smaller group gives all it has.
    First(usize),
    /// The cases at these positions of each group (`--cases FIRST..LAST`). A group with no
    /// case at the last position is an error, so a dev subset never silently shrinks.
    Range(CaseRange),
}

/// Keeps the cases `per_group` asks for in each group, then the first `limit` of those, in
/// suite order.
///
/// # Errors
/// [`EvalError::RangePastGroup`] when `per_group` is a range that reaches past a group's end.
pub fn select_cases(
    cases: Vec<Case>,
    limit: Option<usize>,
    per_group: GroupSelection,
) -> Result<Vec<Case>, EvalError> {
    if let GroupSelection::Range(r) = per_group {
        check_range(&cases, r, "cases")?;
    }
    let positions = group_positions(&cases);
    let mut out: Vec<Case> = cases
        .into_iter()
        .zip(positions)
        .filter(|(_, pos)| match per_group {
            GroupSelection::All => true,
            GroupSelection::First(k) => *pos < k,
            GroupSelection::Range(r) => r.contains(*pos),
        })
        .map(|(c, _)| c)
        .collect();
    if let Some(k) = limit {
        out.truncate(k);
    }
    Ok(out)
}

/// Each case's position within its group, counted from 0 in suite order.
fn group_positions(cases: &[Case]) -> Vec<usize> {
    let mut seen: BTreeMap<Option<&str>, usize> = BTreeMap::new();
    cases
        .iter()
        .map(|c| {
            let n = seen.entry(c.group.as_deref()).or_insert(0);
            *n += 1;
            *n - 1
        })
        .collect()
}

/// Fails when a group of `cases` (the first in suite order) has no case at `range`'s last
/// position; `what` names the range in the error.
fn check_range(cases: &[Case], range: CaseRange, what: &'static str) -> Result<(), EvalError> {
    let mut sizes: BTreeMap<Option<&str>, usize> = BTreeMap::new();
    for c in cases {
        *sizes.entry(c.group.as_deref()).or_default() += 1;
    }
    for c in cases {
        let len = sizes[&c.group.as_deref()];
        if len <= range.last {
            return Err(EvalError::RangePastGroup {
                what,
                range,
                group: c.group.clone(),
                len,
            });
        }
    }
    Ok(())
}

/// Gives each selected case its candidate worked examples: the cases of `all` in the same group
/// that are not selected themselves (so no case is shown its own answer, nor another
/// evaluated case's), in suite order; with `pool`, only those at the pool's positions of the
/// group (`--shots-from`). Each configuration then picks its `shots` of them
/// ([`choose_examples`]).
///
/// # Errors
/// [`EvalError::Config`] when a group has fewer than `shots` candidates, the suite judges cases
/// as function calls (a tool call has no answer to show as an example), or a `pool` is given
/// with no shots to draw; [`EvalError::RangePastGroup`] when `pool` reaches past a group's
/// end; [`EvalError::ExampleEvaluated`] when `pool` holds a selected case.
pub fn attach_examples(
    selected: &mut [Case],
    all: &[Case],
    shots: usize,
    pool: Option<CaseRange>,
) -> Result<(), EvalError> {
    if shots == 0 {
        return match pool {
            None => Ok(()),
            Some(r) => Err(EvalError::Config {
                path: "shots".into(),
                message: format!(
                    "worked examples are drawn from {r}, but no configuration shows any (shots = 0)"
                ),
            }),
        };
    }
    if let Some(r) = pool {
        check_range(all, r, "shots from")?;
    }
    let chosen: HashSet<&str> = selected.iter().map(|c| c.id.as_str()).collect();
    let mut pools: BTreeMap<Option<&str>, Vec<&Case>> = BTreeMap::new();
    for (c, pos) in all.iter().zip(group_positions(all)) {
        let evaluated = chosen.contains(c.id.as_str());
        match pool {
            Some(r) if !r.contains(pos) => continue,
            Some(range) if evaluated => {
                return Err(EvalError::ExampleEvaluated {
                    range,
                    case: c.id.clone(),
                })
            }
            None if evaluated => continue,
            _ => pools.entry(c.group.as_deref()).or_default().push(c),
        }
    }
    let source = match pool {
        Some(r) => format!("cases in {r}"),
        None => "cases outside the run".to_string(),
    };
    for case in selected.iter_mut() {
        if matches!(case.scoring, Scoring::Call(_)) {
            return Err(EvalError::Config {
                path: "shots".into(),
                message: format!(
                    "case `{}` is judged as a function call and has no answer to show as an example",
                    case.id
                ),
            });
        }
        let pool = pools
            .get(&case.group.as_deref())
            .map_or(&[][..], Vec::as_slice);
        if pool.len() < shots {
            return Err(EvalError::Config {
                path: "shots".into(),
                message: format!(
                    "{shots} examples asked for, but group `{}` has only {} {source}",
                    case.group.as_deref().unwrap_or("(none)"),
                    pool.len()
                ),
            });
        }
        case.examples = pool
            .iter()
            .map(|c| (c.input.text(), c.gold.clone()))
            .collect();
    }
    Ok(())
}

/// Picks `shots` worked examples for `document` out of its `candidates` (see
/// [`ShotSelection`]). Fewer candidates than `shots` gives all of them.
pub fn choose_examples(
    document: &str,
    candidates: &[(String, Value)],
    shots: usize,
    selection: ShotSelection,
) -> Vec<(String, Value)> {
    let shots = shots.min(candidates.len());
    match selection {
        ShotSelection::First => candidates[..shots].to_vec(),
        ShotSelection::Similar => {
            let words = |t: &str| -> HashSet<String> {
                t.split(|c: char| !c.is_alphanumeric())
                    .filter(|w| !w.is_empty())
                    .map(str::to_lowercase)
                    .collect()
            };
            let sets: Vec<HashSet<String>> = candidates.iter().map(|(t, _)| words(t)).collect();
            let mut df: BTreeMap<&str, usize> = BTreeMap::new();
            for w in sets.iter().flatten() {
                *df.entry(w.as_str()).or_default() += 1;
            }
            let n = candidates.len() as f64;
            let doc = words(document);
            let score = |set: &HashSet<String>| -> f64 {
                set.intersection(&doc)
                    .map(|w| (1.0 + n / df[w.as_str()] as f64).ln())
                    .sum()
            };
            let mut ranked: Vec<(f64, usize)> = sets
                .iter()
                .enumerate()
                .map(|(i, s)| (score(s), i))
                .collect();
            // Most similar first, ties in suite order; then reversed so the most similar example
            // sits right before the document.
            ranked.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
            ranked[..shots]
                .iter()
                .rev()
                .map(|&(_, i)| candidates[i].clone())
                .collect()
        }
    }
}

/// What a backend produced for one attempt, before judging.
#[derive(Clone, Debug, PartialEq)]
pub struct Attempt {
    /// The raw text produced (for a failed attempt, what the model wrote, if anything).
    pub raw: String,
    /// How decoding ended, if the backend knows better than the runner (a refusal branch, a
    /// budget that ran out); `None` lets the runner decide by parsing and validating `raw`.
    pub status: Option<Status>,
    /// The backend's reason for a failed `status` (what did not parse or validate, the budget
    /// that ran out), reported after the status.
    pub error: Option<String>,
    /// Tokens generated (sampled plus forced).
    pub tokens: usize,
    /// Tokens the grammar forced.
    pub forced_tokens: usize,
    /// Whether grounded values could be any substring, not only whole-word spans.
    pub grounded_substrings: bool,
}

/// Something that answers cases: the extraction library over a model, or recorded outputs.
pub trait Backend {
    /// Answers `case` under `config` in run `run` (a sampling backend draws with
    /// [`EvalConfig::seed_for`]). An `Err` is the attempt's own failure (recorded as
    /// [`Status::Error`] with the error and its causes as the reason), not the run's.
    fn attempt(
        &mut self,
        case: &Case,
        config: &EvalConfig,
        run: usize,
    ) -> Result<Attempt, AttemptError>;

    /// Answers every item of `items` (case, configuration, run), handing each to `done` with
    /// its index in `items` and its latency in milliseconds as soon as it is answered. A
    /// backend that decodes several attempts together overrides it (the model backend: see
    /// [`ExtractBackend::attempt_batch`](super::backend::ExtractBackend::attempt_batch)); each answer must be
    /// the one [`attempt`](Self::attempt) would give, only the order and latencies differ.
    /// The default answers them one at a time, in order.
    ///
    /// # Errors
    /// The first error `done` returns (answering stops there).
    fn attempt_many(
        &mut self,
        items: &[(&Case, &EvalConfig, usize)],
        done: &mut dyn FnMut(usize, Result<Attempt, AttemptError>, f64) -> Result<(), EvalError>,
    ) -> Result<(), EvalError> {
        for (i, &(case, config, run)) in items.iter().enumerate() {
            let start = Instant::now();
            let attempt = self.attempt(case, config, run);
            done(i, attempt, start.elapsed().as_secs_f64() * 1000.0)?;
        }
        Ok(())
    }
}

/// Why one attempt failed: the backend's own error, boxed.
pub type AttemptError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// An error and its causes on one line, `outer: cause: root cause`, for result rows.
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

/// Outputs recorded earlier (by formwork, another engine or a person), replayed for judging:
/// JSONL lines `{"id": ..., "output": "raw text", "config"?: name, "run"?: n, "tokens"?: n}`.
/// A line without `config` answers for every configuration.
#[derive(Debug, Default)]
pub struct ReplayBackend {
    outputs: BTreeMap<(String, Option<String>, usize), (String, usize)>,
}

impl ReplayBackend {
    /// Reads an outputs file; a bad line is an error with its line number.
    pub fn read(path: &Path) -> Result<ReplayBackend, EvalError> {
        let text = std::fs::read_to_string(path).map_err(|source| EvalError::File {
            path: path.display().to_string(),
            source,
        })?;
        ReplayBackend::parse(&text, &path.display().to_string())
    }

    /// Parses outputs JSONL text; `path` names the source in errors.
    pub fn parse(text: &str, path: &str) -> Result<ReplayBackend, EvalError> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Line {
            id: Value,
            output: String,
            config: Option<String>,
            #[serde(default)]
            run: usize,
            #[serde(default)]
            tokens: usize,
        }
        let mut outputs = BTreeMap::new();
        for (i, l) in text.lines().enumerate() {
            if l.trim().is_empty() {
                continue;
            }
            let line: Line = serde_json::from_str(l).map_err(|e| EvalError::Line {
                path: path.into(),
                line: i + 1,
                message: e.to_string(),
            })?;
            let id = match line.id {
                Value::String(s) => s,
                other => other.to_string(),
            };
            outputs.insert((id, line.config, line.run), (line.output, line.tokens));
        }
        Ok(ReplayBackend { outputs })
    }
}

impl Backend for ReplayBackend {
    fn attempt(
        &mut self,
        case: &Case,
        config: &EvalConfig,
        run: usize,
    ) -> Result<Attempt, AttemptError> {
        let keys = [
            (case.id.clone(), Some(config.name.clone()), run),
            (case.id.clone(), None, run),
            (case.id.clone(), Some(config.name.clone()), 0),
            (case.id.clone(), None, 0),
        ];
        let (raw, tokens) = keys
            .iter()
            .find_map(|k| self.outputs.get(k))
            .ok_or_else(|| format!("no recorded output for case `{}`", case.id))?;
        Ok(Attempt {
            raw: raw.clone(),
            status: None,
            error: None,
            tokens: *tokens,
            forced_tokens: 0,
            grounded_substrings: false,
        })
    }
}

/// Parses `raw` as JSON and validates it against the case's schema, or as a call
/// `{"name", "arguments"}` of one of the case's tools. The error lists what is wrong.
pub fn check_output(case: &Case, raw: &str) -> Result<Value, OutputError> {
    let value: Value =
        serde_json::from_str(raw.trim()).map_err(|e| OutputError::Parse(e.to_string()))?;
    match &case.target {
        Target::Schema(schema) => validate(schema, &value)?,
        Target::Tools(tools) => {
            let name = value
                .get("name")
                .and_then(Value::as_str)
                .ok_or(OutputError::NoToolName)?;
            let tool = tools
                .iter()
                .find(|t| tool_name(t) == Some(name))
                .ok_or_else(|| OutputError::UnknownTool(name.to_string()))?;
            let args = value.get("arguments").cloned().unwrap_or(Value::Null);
            let params = tool
                .get("parameters")
                .or_else(|| tool.pointer("/function/parameters"));
            if let Some(p) = params {
                validate(&bfcl_params(p), &args)
                    .map_err(|e| OutputError::Arguments(Box::new(e)))?;
            }
        }
    }
    Ok(value)
}

/// Why an output is not a valid answer to its case ([`check_output`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OutputError {
    /// The output is not JSON.
    #[error("does not parse: {0}")]
    Parse(String),
    /// The case's schema does not compile in the validator.
    #[error("schema does not compile: {0}")]
    Schema(#[from] InvalidSchema),
    /// The output breaks the schema: every error, `<instance pointer>: <message>`.
    #[error("{}", .0.join("; "))]
    Invalid(Vec<String>),
    /// A tool call without a string `name`.
    #[error("a call needs a string `name`")]
    NoToolName,
    /// A call of a tool the case does not offer.
    #[error("unknown tool `{0}`")]
    UnknownTool(String),
    /// A call whose arguments break the tool's parameter schema.
    #[error("arguments: {0}")]
    Arguments(Box<OutputError>),
}

fn tool_name(tool: &Value) -> Option<&str> {
    tool.get("name")
        .or_else(|| tool.pointer("/function/name"))
        .and_then(Value::as_str)
}

/// The output's errors under `schema` (one validator, [`crate::validate`], for extraction and
/// evals alike).
fn validate(schema: &Value, value: &Value) -> Result<(), OutputError> {
    let errors = crate::validate::validate(schema, value)?;
    if errors.is_empty() {
        Ok(())
    } else {
        Err(OutputError::Invalid(errors))
    }
}

/// Judges one attempt into a result row.
pub fn judge_attempt(
    case: &Case,
    config: &EvalConfig,
    run: usize,
    attempt: Result<Attempt, AttemptError>,
    latency_ms: f64,
) -> CaseResult {
    let mut r = CaseResult {
        case: case.id.clone(),
        config: config.name.clone(),
        run,
        status: Status::Error,
        output: None,
        raw: String::new(),
        correct: false,
        field_accuracy: 0.0,
        // A slot case that produced nothing still has gold slots: they count as missed, so a
        // configuration cannot raise its F1 by failing.
        slots: matches!(case.scoring, Scoring::Slots).then(|| SlotCounts {
            true_positives: 0,
            predicted: 0,
            gold: case.gold.as_object().map_or(0, |o| o.len()),
        }),
        reason: String::new(),
        tokens: 0,
        forced_tokens: 0,
        grounded_substrings: false,
        latency_ms,
    };
    let a = match attempt {
        Ok(a) => a,
        Err(e) => {
            r.reason = error_chain(e.as_ref());
            return r;
        }
    };
    r.raw = a.raw;
    r.tokens = a.tokens;
    r.forced_tokens = a.forced_tokens;
    r.grounded_substrings = a.grounded_substrings;
    match a.status {
        // The backend's own verdict on a failed attempt stands (its validator saw the raw
        // text).
        Some(s @ (Status::Refusal | Status::Incomplete | Status::Error | Status::Invalid)) => {
            r.status = s;
            r.reason = format!("{s:?}").to_lowercase();
            if let Some(e) = a.error {
                r.reason = format!("{}: {e}", r.reason);
            }
            return r;
        }
        Some(Status::Ok) | None => {}
    }
    match check_output(case, &r.raw) {
        Ok(value) => {
            let s = case.score(&value);
            r.status = Status::Ok;
            r.correct = s.correct;
            r.field_accuracy = s.field_accuracy;
            if let Some(slots) = s.slots {
                r.slots = Some(slots.into());
            }
            r.reason = s.reason;
            r.output = Some(value);
        }
        Err(e) => {
            r.status = if a.status == Some(Status::Ok) {
                // The backend claims validity the validator denies: a formwork bug, surfaced.
                Status::Error
            } else {
                Status::Invalid
            };
            r.reason = e.to_string();
        }
    }
    r
}

/// The results JSONL: one [`CaseResult`] per line, appended and flushed as each attempt ends.
#[derive(Debug)]
pub struct ResultsLog {
    path: PathBuf,
    file: Option<std::fs::File>,
    done: Vec<CaseResult>,
}

impl ResultsLog {
    /// Opens `path` for writing. With `resume`, the results already there are kept and their
    /// triples skipped (a torn last line, from a killed run, is dropped); without, the file is
    /// truncated.
    pub fn open(path: &Path, resume: bool) -> Result<ResultsLog, EvalError> {
        let err = |source| EvalError::File {
            path: path.display().to_string(),
            source,
        };
        let mut done = Vec::new();
        if resume && path.exists() {
            let text = std::fs::read_to_string(path).map_err(err)?;
            let lines: Vec<&str> = text.lines().collect();
            for (i, l) in lines.iter().enumerate() {
                match serde_json::from_str::<CaseResult>(l) {
                    Ok(r) => done.push(r),
                    Err(_) if i + 1 == lines.len() => {}
                    Err(e) => {
                        return Err(EvalError::Line {
                            path: path.display().to_string(),
                            line: i + 1,
                            message: e.to_string(),
                        })
                    }
                }
            }
            // Rewrite without a torn line so appends start on a fresh line.
            let mut f = std::fs::File::create(path).map_err(err)?;
            for r in &done {
                writeln!(f, "{}", serde_json::to_string(r).unwrap_or_default()).map_err(err)?;
            }
        } else {
            std::fs::File::create(path).map_err(err)?;
        }
        let file = std::fs::OpenOptions::new()
            .append(true)
            .open(path)
            .map_err(err)?;
        Ok(ResultsLog {
            path: path.to_path_buf(),
            file: Some(file),
            done,
        })
    }

    /// A log that keeps results in memory only.
    pub fn in_memory() -> ResultsLog {
        ResultsLog {
            path: PathBuf::new(),
            file: None,
            done: Vec::new(),
        }
    }

    /// The results so far (resumed and new).
    pub fn results(&self) -> &[CaseResult] {
        &self.done
    }

    /// Takes the results.
    pub fn into_results(self) -> Vec<CaseResult> {
        self.done
    }

    /// Whether the triple (case, configuration name, run) has a result.
    pub fn has(&self, case: &str, config: &str, run: usize) -> bool {
        self.done
            .iter()
            .any(|r| r.case == case && r.config == config && r.run == run)
    }

    fn push(&mut self, r: CaseResult) -> Result<(), EvalError> {
        if let Some(f) = &mut self.file {
            let line = serde_json::to_string(&r).map_err(|e| EvalError::Line {
                path: self.path.display().to_string(),
                line: self.done.len() + 1,
                message: e.to_string(),
            })?;
            writeln!(f, "{line}")
                .and_then(|()| f.flush())
                .map_err(|source| EvalError::File {
                    path: self.path.display().to_string(),
                    source,
                })?;
        }
        self.done.push(r);
        Ok(())
    }
}

/// The attempts an eval makes, in order: case-major, then run, then configuration. All
/// attempts on one case come back to back, so configurations that render the same prompt
/// (the four modes under one template) and every run of them share its prefill through the
/// model's prompt-prefix cache; and an interrupted eval has every configuration and run on
/// the same cases, which is what the paired comparisons need.
pub fn plan<'a>(
    cases: &'a [Case],
    configs: &'a [EvalConfig],
    runs: usize,
) -> Vec<(&'a Case, &'a EvalConfig, usize)> {
    let max_runs = configs.iter().map(|c| c.runs(runs)).max().unwrap_or(0);
    let mut out = Vec::new();
    for case in cases {
        for run in 0..max_runs {
            for config in configs.iter().filter(|c| run < c.runs(runs)) {
                out.push((case, config, run));
            }
        }
    }
    out
}

/// Runs every planned attempt not already in `log` through `backend`
/// ([`Backend::attempt_many`]: in plan order, or several at once and written as they finish),
/// judging each and appending it to `log`; `progress` is called once per skipped attempt
/// (with `None`, first) and after each attempt made, with its result.
pub fn run_eval(
    cases: &[Case],
    configs: &[EvalConfig],
    runs: usize,
    backend: &mut dyn Backend,
    log: &mut ResultsLog,
    progress: &mut dyn FnMut(Option<&CaseResult>),
) -> Result<(), EvalError> {
    let mut todo = Vec::new();
    for (case, config, run) in plan(cases, configs, runs) {
        if log.has(&case.id, &config.name, run) {
            progress(None);
        } else {
            todo.push((case, config, run));
        }
    }
    backend.attempt_many(&todo, &mut |i, attempt, ms| {
        let (case, config, run) = todo[i];
        log.push(judge_attempt(case, config, run, attempt, ms))?;
        progress(log.results().last());
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::suite::Input;
    use serde_json::json;

    fn case(id: &str, group: Option<&str>) -> Case {
        Case {
            id: id.into(),
            input: Input::Text("Add the album to my Flow playlist".into()),
            target: Target::Schema(json!({
                "type": "object",
                "properties": {"playlist": {"type": "string"}, "music_item": {"type": "string"}},
                "additionalProperties": false
            })),
            gold: json!({"playlist": "Flow", "music_item": "album"}),
            scoring: Scoring::Slots,
            group: group.map(str::to_string),
            examples: Vec::new(),
        }
    }

    #[test]
    fn toml_configs_are_named_checked_and_typos_fail() {
        let f = EvalFile::parse(
            "runs = 3\n[[config]]\nmode = \"prompt\"\n[[config]]\nmode = \"constrained+grounded\"\ntemperature = 0.7\nseed = 10\n",
            "t.toml",
        )
        .unwrap();
        assert_eq!(f.runs, Some(3));
        let names: Vec<&str> = f.config.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["prompt", "grounded"]);
        assert_eq!(f.config[0].runs(3), 1, "greedy runs once");
        assert_eq!(f.config[1].runs(3), 3);
        let c = &f.config[1];
        assert_eq!(c.seed_for(2, "a"), c.seed_for(2, "a"), "deterministic");
        assert_ne!(c.seed_for(2, "a"), c.seed_for(2, "b"), "cases draw apart");
        assert_ne!(c.seed_for(2, "a"), c.seed_for(1, "a"), "runs draw apart");
        let same_seed = EvalConfig {
            name: "other".into(),
            ..c.clone()
        };
        assert_eq!(
            same_seed.seed_for(2, "a"),
            c.seed_for(2, "a"),
            "paired across configs"
        );
        let e = EvalFile::parse("[[config]]\ntemprature = 0.5\n", "t.toml").unwrap_err();
        assert!(e.to_string().contains("temprature"), "{e}");
        let e = EvalFile::parse("[[config]]\n[[config]]\n", "t.toml").unwrap_err();
        assert!(e.to_string().contains("duplicate"), "{e}");
        assert!(EvalFile::parse("", "t.toml").is_err());
    }

    #[test]
    fn examples_come_from_unselected_cases_of_the_same_group() {
        let all: Vec<Case> = [
            ("a1", "A"),
            ("a2", "A"),
            ("b1", "B"),
            ("a3", "A"),
            ("b2", "B"),
        ]
        .into_iter()
        .chain([("b3", "B")])
        .map(|(id, g)| Case {
            input: Input::Text(format!("text of {id}")),
            ..case(id, Some(g))
        })
        .collect();
        let mut sel = select_cases(all.clone(), None, GroupSelection::First(1)).unwrap();
        attach_examples(&mut sel, &all, 2, None).unwrap();
        let shown = |c: &Case| -> Vec<String> { c.examples.iter().map(|e| e.0.clone()).collect() };
        assert_eq!(sel[0].id, "a1");
        assert_eq!(shown(&sel[0]), ["text of a2", "text of a3"]);
        assert_eq!(shown(&sel[1]), ["text of b2", "text of b3"]);
        let first = choose_examples("text of a1", &sel[0].examples, 1, ShotSelection::First);
        assert_eq!(first[0].0, "text of a2");
        let err = attach_examples(&mut sel, &all, 3, None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("only 2 cases outside the run"), "{err}");
        let mut none = select_cases(all.clone(), None, GroupSelection::First(1)).unwrap();
        attach_examples(&mut none, &all, 0, None).unwrap();
        assert!(none.iter().all(|c| c.examples.is_empty()));
    }

    #[test]
    fn similar_examples_share_the_rarest_words_and_come_last() {
        let c = |t: &str| (t.to_string(), Value::Null);
        let pool = [
            c("play some jazz music"),
            c("add this song to my road trip playlist"),
            c("play the album by Miles Davis"),
            c("add Miles Davis to my jazz playlist"),
        ];
        let doc = "Add Miles Davis to the workout playlist";
        let texts =
            |v: Vec<(String, Value)>| -> Vec<String> { v.into_iter().map(|e| e.0).collect() };
        // "miles" and "davis" (2 of 4 candidates) outweigh "add" and "playlist" alone; the best
        // match shares all four and is shown last.
        assert_eq!(
            texts(choose_examples(doc, &pool, 2, ShotSelection::Similar)),
            [
                "play the album by Miles Davis",
                "add Miles Davis to my jazz playlist"
            ]
        );
        assert_eq!(
            texts(choose_examples(doc, &pool, 2, ShotSelection::First)),
            [
                "play some jazz music",
                "add this song to my road trip playlist"
            ]
        );
        assert_eq!(
            choose_examples(doc, &pool, 9, ShotSelection::Similar).len(),
            4
        );
        let f = EvalFile::parse(
            "[[config]]\nshots = 2\nshot_selection = \"similar\"\n",
            "t.toml",
        );
        assert_eq!(f.unwrap().config[0].shot_selection, ShotSelection::Similar);
        assert!(EvalFile::parse("[[config]]\nshot_selection = \"best\"\n", "t.toml").is_err());
        let f = EvalFile::parse("[[config]]\nproperty_order = { window = 8 }\n", "t.toml");
        assert_eq!(
            f.unwrap().config[0].property_order,
            PropertyOrder::Window(8)
        );
        let f = EvalFile::parse("[[config]]\nproperty_order = \"any\"\n", "t.toml");
        assert_eq!(f.unwrap().config[0].property_order, PropertyOrder::Any);
        let f = EvalFile::parse("[[config]]\ngrounded_spans = \"disjoint\"\n", "t.toml");
        assert_eq!(f.unwrap().config[0].grounded_spans, GroundedSpans::Disjoint);
        let f = EvalFile::parse("[[config]]\nthink = 64\n", "t.toml").unwrap();
        assert_eq!(f.config[0].think, Some(64));
        for bad in [
            "[[config]]\nmode = \"prompt\"\nthink = 64\n",
            "[[config]]\nthink_trigger = \"A:\"\n",
            "[[config]]\nthink = 8\nthink_trigger = \"\"\n",
        ] {
            let e = EvalFile::parse(bad, "t.toml").unwrap_err().to_string();
            assert!(e.contains("think"), "{bad}: {e}");
        }
        let f = EvalFile::parse("[[config]]\nsystem = \"Be brief.\"\n", "t.toml");
        assert_eq!(f.unwrap().config[0].system.as_deref(), Some("Be brief."));
        // The old boolean spelling is gone: a typo-level mistake, so it fails loudly.
        assert!(EvalFile::parse("[[config]]\ndistinct_grounded = true\n", "t.toml").is_err());
    }

    #[test]
    fn per_group_then_limit_selection() {
        let cases = vec![
            case("a1", Some("A")),
            case("a2", Some("A")),
            case("a3", Some("A")),
            case("b1", Some("B")),
            case("b2", Some("B")),
        ];
        let ids = |v: Result<Vec<Case>, EvalError>| {
            v.unwrap().into_iter().map(|c| c.id).collect::<Vec<_>>()
        };
        let first = GroupSelection::First;
        assert_eq!(
            ids(select_cases(cases.clone(), None, first(2))),
            ["a1", "a2", "b1", "b2"]
        );
        assert_eq!(
            ids(select_cases(cases.clone(), Some(3), first(1))),
            ["a1", "b1"]
        );
        assert_eq!(
            ids(select_cases(cases, Some(2), GroupSelection::All)),
            ["a1", "a2"]
        );
    }

    #[test]
    fn case_ranges_parse_both_ends_included_and_reject_the_malformed() {
        let r: CaseRange = "40..59".parse().unwrap();
        assert_eq!((r.first(), r.last()), (40, 59));
        assert!(r.contains(40) && r.contains(59));
        assert!(!r.contains(39) && !r.contains(60));
        assert_eq!(r.to_string(), "40..59");
        let one: CaseRange = "7..7".parse().unwrap();
        assert!(one.contains(7) && !one.contains(6) && !one.contains(8));
        for bad in [
            "", "40", "40..", "..59", "40...59", "40..=59", "a..b", "-1..5", " 40..59", "40-59",
            "1..2..3",
        ] {
            let e = bad.parse::<CaseRange>().unwrap_err();
            assert_eq!(e, CaseRangeError::Malformed { text: bad.into() }, "{bad:?}");
            assert!(
                e.to_string().contains("FIRST..LAST, both ends included"),
                "{e}"
            );
        }
        let e = "59..40".parse::<CaseRange>().unwrap_err();
        assert_eq!(
            e.to_string(),
            "case range `59..40` is empty: its first case 59 comes after its last 40"
        );
        assert!(CaseRange::new(3, 2).is_err());
        // A number too large for usize is malformed, not a panic.
        assert!("0..99999999999999999999999".parse::<CaseRange>().is_err());
    }

    /// Cases of two interleaved groups, `<group><position>` in suite order.
    fn grouped(sizes: &[(&str, usize)]) -> Vec<Case> {
        let longest = sizes.iter().map(|s| s.1).max().unwrap_or(0);
        (0..longest)
            .flat_map(|i| {
                sizes.iter().filter(move |s| i < s.1).map(move |s| Case {
                    input: Input::Text(format!("text of {}{i}", s.0)),
                    ..case(&format!("{}{i}", s.0), Some(s.0))
                })
            })
            .collect()
    }

    #[test]
    fn a_case_range_selects_per_group_in_suite_order() {
        let cases = grouped(&[("a", 5), ("b", 4)]);
        let range = |t: &str| GroupSelection::Range(t.parse().unwrap());
        let ids = |v: Vec<Case>| v.into_iter().map(|c| c.id).collect::<Vec<_>>();
        // Positions count within each group; suite order (interleaved groups) is kept.
        assert_eq!(
            ids(select_cases(cases.clone(), None, range("1..3")).unwrap()),
            ["a1", "b1", "a2", "b2", "a3", "b3"]
        );
        assert_eq!(
            ids(select_cases(cases.clone(), Some(3), range("1..3")).unwrap()),
            ["a1", "b1", "a2"]
        );
        // Without groups the range is over the whole suite.
        let flat: Vec<Case> = ["x", "y", "z"].iter().map(|id| case(id, None)).collect();
        assert_eq!(
            ids(select_cases(flat.clone(), None, range("1..2")).unwrap()),
            ["y", "z"]
        );
        // Group b has no position 4: an error naming the group and its size, not fewer cases.
        let e = select_cases(cases, None, range("2..4")).unwrap_err();
        assert_eq!(e.to_string(), "cases 2..4: group `b` has only 4 cases");
        let e = select_cases(flat, None, range("0..3")).unwrap_err();
        assert_eq!(e.to_string(), "cases 0..3: the suite has only 3 cases");
    }

    #[test]
    fn worked_examples_come_from_the_pool_range_of_each_group() {
        let all = grouped(&[("a", 6), ("b", 6)]);
        let range = |t: &str| -> CaseRange { t.parse().unwrap() };
        let mut sel =
            select_cases(all.clone(), None, GroupSelection::Range(range("1..2"))).unwrap();
        attach_examples(&mut sel, &all, 2, Some(range("4..5"))).unwrap();
        let shown = |c: &Case| -> Vec<String> { c.examples.iter().map(|e| e.0.clone()).collect() };
        assert_eq!(sel[0].id, "a1");
        assert_eq!(shown(&sel[0]), ["text of a4", "text of a5"]);
        assert_eq!(sel[1].id, "b1");
        assert_eq!(shown(&sel[1]), ["text of b4", "text of b5"]);
        // Without a pool, every unselected case of the group is a candidate.
        attach_examples(&mut sel, &all, 2, None).unwrap();
        assert_eq!(
            shown(&sel[0]),
            ["text of a0", "text of a3", "text of a4", "text of a5"]
        );
        // Too few in the pool, a pool past a group's end, a pool holding an evaluated case.
        let e = attach_examples(&mut sel, &all, 3, Some(range("4..5"))).unwrap_err();
        assert!(e.to_string().contains("only 2 cases in 4..5"), "{e}");
        let e = attach_examples(&mut sel, &all, 2, Some(range("4..6"))).unwrap_err();
        assert_eq!(e.to_string(), "shots from 4..6: group `a` has only 6 cases");
        let e = attach_examples(&mut sel, &all, 2, Some(range("2..5"))).unwrap_err();
        assert_eq!(
            e.to_string(),
            "shots from 2..5 include case `a2`, which the run evaluates"
        );
        // A pool with no shots to draw is a mistake, not silently ignored.
        let e = attach_examples(&mut sel, &all, 0, Some(range("4..5"))).unwrap_err();
        assert!(e.to_string().contains("shots = 0"), "{e}");
    }

    #[test]
    fn judging_statuses_and_missed_slots() {
        let c = case("x", None);
        let cfg = EvalConfig {
            name: "c".into(),
            ..EvalConfig::default()
        };
        let ok = |raw: &str| Attempt {
            raw: raw.into(),
            status: None,
            error: None,
            tokens: 4,
            forced_tokens: 1,
            grounded_substrings: false,
        };
        let r = judge_attempt(&c, &cfg, 0, Ok(ok(r#"{"playlist": "Flow"}"#)), 1.0);
        assert_eq!(r.status, Status::Ok);
        assert!(!r.correct);
        assert_eq!(
            r.slots,
            Some(SlotCounts {
                true_positives: 1,
                predicted: 1,
                gold: 2
            })
        );
        let r = judge_attempt(&c, &cfg, 0, Ok(ok(r#"{"playlist": 3}"#)), 1.0);
        assert_eq!(r.status, Status::Invalid, "{}", r.reason);
        assert_eq!(
            r.slots.map(|s| s.gold),
            Some(2),
            "failures still count gold"
        );
        let r = judge_attempt(&c, &cfg, 0, Ok(ok("{\"playlist\": ")), 1.0);
        assert_eq!(r.status, Status::Invalid);
        assert!(r.reason.contains("does not parse"), "{}", r.reason);
        let mut refused = ok("");
        refused.status = Some(Status::Refusal);
        assert_eq!(
            judge_attempt(&c, &cfg, 0, Ok(refused), 1.0).status,
            Status::Refusal
        );
        // A backend's failure keeps the model's text as the output and its reason.
        let mut prose = ok("Sure! The playlist is Flow");
        prose.status = Some(Status::Invalid);
        prose.error = Some("no JSON object or array in the output".into());
        let r = judge_attempt(&c, &cfg, 0, Ok(prose), 1.0);
        assert_eq!(
            (r.status, r.raw.as_str(), r.reason.as_str()),
            (
                Status::Invalid,
                "Sure! The playlist is Flow",
                "invalid: no JSON object or array in the output"
            )
        );
        // The backend claiming validity for an invalid output is a bug, not an invalid output.
        let mut lying = ok("[]");
        lying.status = Some(Status::Ok);
        assert_eq!(
            judge_attempt(&c, &cfg, 0, Ok(lying), 1.0).status,
            Status::Error
        );
        let r = judge_attempt(&c, &cfg, 0, Err("model failed".into()), 1.0);
        assert_eq!(
            (r.status, r.reason.as_str()),
            (Status::Error, "model failed")
        );
    }

    #[test]
    fn tool_calls_are_validated_against_bfcl_parameters() {
        let c = Case {
            id: "t".into(),
            input: Input::Text("area of base 10".into()),
            target: Target::Tools(vec![json!({"name": "area", "parameters": {
                "type": "dict",
                "properties": {"base": {"type": "float"}},
                "required": ["base"]}})]),
            gold: Value::Null,
            scoring: Scoring::Call(vec![json!({"area": {"base": [10]}})]),
            group: None,
            examples: Vec::new(),
        };
        assert!(check_output(&c, r#"{"name": "area", "arguments": {"base": 10}}"#).is_ok());
        let e = check_output(&c, r#"{"name": "area", "arguments": {"base": "10"}}"#);
        assert!(e.unwrap_err().to_string().contains("/base"));
        let e = check_output(&c, r#"{"name": "volume", "arguments": {}}"#);
        assert_eq!(e, Err(OutputError::UnknownTool("volume".into())));
    }

    #[test]
    fn results_are_written_as_they_come_and_resumed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("results.jsonl");
        let cases = vec![case("a", None), case("b", None)];
        let mut configs = vec![
            EvalConfig {
                mode: Mode::Prompt,
                ..EvalConfig::default()
            },
            EvalConfig {
                mode: Mode::Grounded,
                temperature: 0.5,
                seed: 7,
                ..EvalConfig::default()
            },
        ];
        name_configs(&mut configs, "flags").unwrap();
        let outputs = r#"{"id": "a", "output": "{\"playlist\": \"Flow\", \"music_item\": \"album\"}"}
{"id": "b", "output": "not json"}
{"id": "b", "config": "grounded", "run": 1, "output": "{}"}"#;
        // Every (case, config, run) triple: prompt is greedy (1 run), grounded gets 2.
        assert_eq!(plan(&cases, &configs, 2).len(), 2 + 4);
        let mut backend = ReplayBackend::parse(outputs, "o.jsonl").unwrap();
        {
            let mut log = ResultsLog::open(&path, false).unwrap();
            // Stop after 3 attempts, as a killed run would.
            let mut n = 0;
            let mut partial = plan(&cases, &configs, 2);
            partial.truncate(3);
            for (c, cfg, run) in partial {
                let a = backend.attempt(c, cfg, run);
                log.push(judge_attempt(c, cfg, run, a, 0.0)).unwrap();
                n += 1;
            }
            assert_eq!(n, 3);
        }
        // A torn last line from the kill is dropped on resume.
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(b"{\"case\": \"b\", \"con")
            .unwrap();
        let mut log = ResultsLog::open(&path, true).unwrap();
        assert_eq!(log.results().len(), 3);
        let mut made = 0;
        run_eval(&cases, &configs, 2, &mut backend, &mut log, &mut |r| {
            made += usize::from(r.is_some())
        })
        .unwrap();
        assert_eq!(made, 3, "only the missing triples are attempted");
        let results = log.into_results();
        assert_eq!(results.len(), 6);
        let on_disk = std::fs::read_to_string(&path).unwrap();
        assert_eq!(on_disk.lines().count(), 6);
        let get = |case: &str, config: &str, run: usize| {
            results
                .iter()
                .find(|r| r.case == case && r.config == config && r.run == run)
                .unwrap()
        };
        assert!(get("a", "prompt", 0).correct);
        assert_eq!(get("b", "prompt", 0).status, Status::Invalid);
        assert_eq!(get("b", "grounded", 1).status, Status::Ok);
        assert_eq!(get("b", "grounded", 0).status, Status::Invalid);
    }
}
