//! What a run is asked for: the [`Constraint`] the output must meet, the [`ExtractConfig`]
//! options ([`Mode`], [`GroundedSpans`], prompt, budgets, thinking) and the [`ChatEncoder`] the
//! caller supplies. Plain data, with defaults.
//!
//! Does not own compiling the constraint ([`Prepared`](super::Prepared)) or running it.
//!
//! May use (within `run`): nothing.

use std::sync::Arc;

use serde_json::Value;

use crate::prompt::PromptTemplate;
use crate::tools::{Tool, ToolChoice};
use formwork_core::generate::{GenerateConfig, SourceError, ThinkConfig};
use formwork_core::grammar::Grammar;
use formwork_core::matcher::Limits;
use formwork_core::schema::CompileOptions;

/// How outputs are produced.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum Mode {
    /// Decode under the grammar: valid by construction.
    #[default]
    Constrained,
    /// Baseline: ask for JSON in the prompt, no constraint; strip fences, parse, validate.
    Prompt,
    /// Baseline: like prompt, then on an error feed the errors back once and try again.
    Retry,
}

/// What the output must be.
#[derive(Clone, Debug, PartialEq)]
pub enum Constraint {
    /// A JSON Schema (`x-grounded` markers allowed).
    Schema(Value),
    /// Any JSON value.
    Json,
    /// A text matching a regex (whole output).
    Regex(String),
    /// A grammar (e.g. read from GBNF); the output is text.
    Grammar(Grammar),
    /// A call to one of these tools (or text, with [`ToolChoice::Auto`]).
    Tools {
        /// The tool definitions.
        tools: Vec<Tool>,
        /// Which outputs are allowed.
        choice: ToolChoice,
    },
}

/// Options of an extraction run. Plain data; defaults in [`Default`].
#[derive(Clone, Debug, PartialEq)]
pub struct ExtractConfig {
    /// Constrained (default) or a baseline.
    pub mode: Mode,
    /// Decoding options (budget, sampling, [closing](formwork_core::generate::Closing)):
    /// closing `Json` (the default) is taken as `Generic` for regex and grammar constraints,
    /// whose output is text.
    pub generate: GenerateConfig,
    /// Add the refusal branch `{"refusal": "<reason>"}`. Default `false`.
    pub allow_refusal: bool,
    /// Extra grounded fields, as JSON pointers into the schema. Default none.
    pub grounded: Vec<String>,
    /// How the grounded values of one output may share the document (see [`GroundedSpans`]).
    /// Default: [`GroundedSpans::Any`].
    pub grounded_spans: GroundedSpans,
    /// System prompt (default: the model's own default).
    pub system: Option<String>,
    /// The user-message template (default: instruction + schema + document).
    pub template: PromptTemplate,
    /// Worked examples shown before the document, as (document, answer) pairs (default
    /// none). Answers to a schema are written with their keys in schema order, the order
    /// constrained decoding emits.
    pub examples: Vec<(String, Value)>,
    /// Schema compiler options. Default: the compiler's defaults (compact JSON).
    pub compile: CompileOptions,
    /// Matcher budgets.
    pub limits: Limits,
    /// Think, then answer (constrained mode only): the model first reasons in free text, at
    /// most `budget` tokens, until it writes the trigger, and then answers under the grammar
    /// ([`Generator::generate_thinking`]). The user message then ends with an instruction
    /// naming the trigger ([`think_instruction`](crate::prompt::think_instruction)); the
    /// reasoning goes to [`RecordResult::reasoning`], never into the output, and its tokens
    /// count in [`RecordResult::tokens`]. Default `None`.
    ///
    /// [`Generator::generate_thinking`]: formwork_core::generate::Generator::generate_thinking
    /// [`RecordResult::reasoning`]: crate::batch::RecordResult::reasoning
    /// [`RecordResult::tokens`]: crate::batch::RecordResult::tokens
    pub think: Option<ThinkConfig>,
}

impl Default for ExtractConfig {
    fn default() -> Self {
        ExtractConfig {
            mode: Mode::Constrained,
            generate: GenerateConfig::default(),
            allow_refusal: false,
            grounded: Vec::new(),
            grounded_spans: GroundedSpans::Any,
            system: None,
            template: PromptTemplate::default_template(),
            examples: Vec::new(),
            compile: CompileOptions::default(),
            limits: Limits::default(),
            think: None,
        }
    }
}

/// Turns (system prompt, user message) into prompt token ids with the model's chat template.
/// Fails with the encoder's own error, boxed (as a [`LogitsSource`] does).
///
/// [`LogitsSource`]: formwork_core::generate::LogitsSource
pub type ChatEncoder =
    Arc<dyn Fn(Option<&str>, &str) -> Result<Vec<u32>, SourceError> + Send + Sync>;

/// How the grounded values of one output may share the document, for span extraction (slot
/// filling), where each piece of the document fills at most one slot and small models repeat
/// one value across every slot. Enforced after decoding, by removing the values that break
/// the rule where the schema lets them be absent (the output stays as valid as it was).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "snake_case")]
pub enum GroundedSpans {
    /// No rule: values may repeat and overlap.
    #[default]
    Any,
    /// One span, one field: a value that repeats an earlier value (in output order) is removed.
    Distinct,
    /// Disjoint spans: values are placed in the document shortest first, each at its first
    /// occurrence that overlaps no value already placed; a value with no such occurrence is
    /// removed. Implies `Distinct` (a repeat overlaps itself), and also removes a value that
    /// contains or cuts into another (`"at Caribbean Cinemas"` next to `"Caribbean Cinemas"`).
    Disjoint,
}
