//! What an eval compares: one [`EvalConfig`] per configuration (its [`Mode`], model, prompt,
//! sampling and worked examples' [`ShotSelection`]), read from a TOML [`EvalFile`] or flags and
//! named by [`name_configs`]; and the seed of each attempt ([`EvalConfig::seed_for`]).
//!
//! A typo in a key fails loudly (`deny_unknown_fields`); names are unique, since results are
//! keyed by them.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::eval::error::EvalError;
use crate::run::GroundedSpans;
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
    /// Token budget per attempt (default: 96, the cap of the reference measurements).
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
    /// Speculative decoding (default: on). The output is the same either way (greedy
    /// byte-identical, seeded sampling the same draws); `false` only to compare speed (see
    /// [`GenerateConfig::speculation`](formwork_core::generate::GenerateConfig::speculation)).
    pub speculate: bool,
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
            speculate: true,
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
