//! `formwork eval`: runs a suite through configurations (from a TOML file or flags) with
//! repeats, writes each judged attempt to a results JSONL as it comes, and prints a report.
//!
//! Glue only: configurations, case selection, running and aggregation are `formwork::eval`.
//! Answers come from a [`Backend`]: by default the models the configurations name
//! ([`ModelBackend`], each distinct model loaded once), or with `--outputs` recorded outputs
//! (from any engine or an earlier run) replayed per configuration and run.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use clap::ValueEnum;
use indicatif::{ProgressBar, ProgressStyle};

use super::common::{
    kv_budget, kv_bytes_per_position, parallel_for, BatchArgs, ModelArg, SpeculateArg, ThreadsArg,
};
use super::fetch_config;
use crate::eval::backend::{ExtractBackend, PrefixReuse};
use crate::eval::error::EvalError;
use crate::eval::range::CaseRange;
use crate::eval::report::Report;
use crate::eval::run::{
    attach_examples, name_configs, plan, run_eval, select_cases, Backend, EvalConfig, EvalFile,
    GroupSelection, Mode, ReplayBackend, ResultsLog, ShotSelection,
};
use crate::eval::run::{Attempt, AttemptError};
use crate::eval::suite::{read_suite, Case};
use crate::extract::run::KvBudget;
use crate::model::fetch::FetchConfig;
use crate::model::runtime::init_threads;
use crate::model::{Loaded, Model, ModelConfig};

/// Report formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// A terminal table and the A/B verdicts.
    Text,
    /// The whole report as JSON, per-case results included.
    Json,
    /// A Markdown table and verdicts.
    Markdown,
    /// A self-contained HTML page with charts and failed cases.
    Html,
}

/// The per-configuration flags, which `--config` replaces.
const FLAGS_MODE: [&str; 10] = [
    "mode",
    "model",
    "temperature",
    "seed",
    "max_tokens",
    "prompt_template",
    "system",
    "flexible_whitespace",
    "shots",
    "shot_selection",
];

/// Arguments of `formwork eval`.
#[derive(Debug, clap::Args)]
pub struct EvalArgs {
    /// The suite: formwork's own JSONL (`evals/*.jsonl`) or a SNIPS / BFCL / GSM8K file.
    pub suite: PathBuf,
    /// Configurations as TOML (`[[config]]` tables), instead of the per-configuration flags
    /// (giving both is a usage error, so no flag is silently ignored).
    #[arg(long, conflicts_with_all = FLAGS_MODE)]
    pub config: Option<PathBuf>,
    /// Modes to compare, one configuration each (flags mode; default: constrained).
    #[arg(long, value_enum, value_delimiter = ',')]
    pub mode: Vec<Mode>,
    /// --model (flags mode).
    #[command(flatten)]
    pub model: ModelArg,
    /// Sampling temperature (flags mode; default 0 = greedy, one run).
    #[arg(long)]
    pub temperature: Option<f64>,
    /// Base seed; run r of a case uses seed + r mixed with the case id (flags mode; default 0).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Token budget per attempt (flags mode; default 96).
    #[arg(long)]
    pub max_tokens: Option<usize>,
    /// A user-message template file with {schema}, {keys}, {tools}, {examples} and {document}
    /// placeholders (flags mode; default: the extraction library's prompt).
    #[arg(long)]
    pub prompt_template: Option<PathBuf>,
    /// The system prompt (flags mode; default: the model's own).
    #[arg(long)]
    pub system: Option<String>,
    /// Allow whitespace between tokens, at most N bytes per run (flags mode; default compact).
    #[arg(long, value_name = "N")]
    pub flexible_whitespace: Option<u32>,
    /// Show N worked examples before each document: cases of the same group (SNIPS intent)
    /// not evaluated in the run, with their gold answers (flags mode; default 0).
    #[arg(long, value_name = "N")]
    pub shots: Option<usize>,
    /// Which cases become the worked examples: the first of the group, or those sharing the
    /// most words with the document (flags mode; default first).
    #[arg(long, value_enum)]
    pub shot_selection: Option<ShotSelection>,
    /// --threads.
    #[command(flatten)]
    pub threads: ThreadsArg,
    /// --parallel and --kv-budget.
    #[command(flatten)]
    pub batch: BatchArgs,
    /// Runs per non-greedy configuration (default: the config file's `runs`, else 1).
    #[arg(long)]
    pub runs: Option<usize>,
    /// Keep the first K cases.
    #[arg(long, value_name = "K")]
    pub limit: Option<usize>,
    /// Keep the first K cases of each intent (SNIPS).
    #[arg(long, value_name = "K")]
    pub per_intent: Option<usize>,
    /// Keep the cases at positions FIRST to LAST of each group (SNIPS intent; the whole suite
    /// when it has no groups), both ends included, counted from 0 in suite order:
    /// `--cases 40..59` is 20 cases per intent. A group with no case at LAST is an error.
    #[arg(long, value_name = "FIRST..LAST", conflicts_with = "per_intent")]
    pub cases: Option<CaseRange>,
    /// Draw the worked examples (`shots`) only from positions FIRST to LAST of each group, both
    /// ends included, instead of from every case the run does not evaluate; a case the run
    /// evaluates inside the range is an error.
    #[arg(long, value_name = "FIRST..LAST")]
    pub shots_from: Option<CaseRange>,
    /// Report format.
    #[arg(long, value_enum, default_value = "text")]
    pub format: Format,
    /// Write the report here instead of stdout.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Results JSONL, one line per case × configuration × run, written as they come.
    #[arg(long)]
    pub results: Option<PathBuf>,
    /// Keep the results already in `--results` and run only the missing attempts.
    #[arg(long, requires = "results")]
    pub resume: bool,
    /// Judge recorded outputs instead of running the models: JSONL `{"id", "output",
    /// "config"?, "run"?, "tokens"?}`.
    #[arg(long)]
    pub outputs: Option<PathBuf>,
    /// --no-speculate, in every configuration (its `speculate = false`).
    #[command(flatten)]
    pub speculate: SpeculateArg,
}

/// The configurations the arguments ask for, and the runs per non-greedy configuration.
pub fn configs(args: &EvalArgs) -> anyhow::Result<(Vec<EvalConfig>, usize)> {
    let (mut configs, runs) = configs_asked(args)?;
    if args.speculate.no_speculate {
        configs.iter_mut().for_each(|c| c.speculate = false);
    }
    Ok((configs, runs))
}

/// [`configs`] before `--no-speculate`.
fn configs_asked(args: &EvalArgs) -> anyhow::Result<(Vec<EvalConfig>, usize)> {
    if let Some(path) = &args.config {
        let f = EvalFile::read(path)?;
        return Ok((f.config, args.runs.or(f.runs).unwrap_or(1)));
    }
    let modes = if args.mode.is_empty() {
        vec![Mode::Constrained]
    } else {
        args.mode.clone()
    };
    let d = EvalConfig::default();
    let mut configs: Vec<EvalConfig> = modes
        .into_iter()
        .map(|m| EvalConfig {
            mode: m,
            model: args.model.model.clone().unwrap_or_else(|| d.model.clone()),
            temperature: args.temperature.unwrap_or(d.temperature),
            seed: args.seed.unwrap_or(d.seed),
            max_tokens: args.max_tokens.unwrap_or(d.max_tokens),
            flexible_whitespace: args.flexible_whitespace,
            shots: args.shots.unwrap_or(d.shots),
            shot_selection: args.shot_selection.unwrap_or(d.shot_selection),
            template: args.prompt_template.clone(),
            system: args.system.clone(),
            ..EvalConfig::default()
        })
        .collect();
    name_configs(&mut configs, "flags")?;
    Ok((configs, args.runs.unwrap_or(1)))
}

/// The cases the arguments select out of the suite's `cases` (`--limit`, `--per-intent`,
/// `--cases`), each with its candidate worked examples (`--shots-from`) for the most `shots`
/// any of `configs` shows.
pub fn selection(
    args: &EvalArgs,
    configs: &[EvalConfig],
    cases: &[Case],
) -> Result<Vec<Case>, EvalError> {
    let per_group = match (args.cases, args.per_intent) {
        (Some(r), _) => GroupSelection::Range(r),
        (None, Some(k)) => GroupSelection::First(k),
        (None, None) => GroupSelection::All,
    };
    let mut selected = select_cases(cases.to_vec(), args.limit, per_group)?;
    let shots = configs.iter().map(|c| c.shots).max().unwrap_or(0);
    attach_examples(&mut selected, cases, shots, args.shots_from)?;
    Ok(selected)
}

/// Runs `formwork eval`. Exit 0 when the report is written, 1 when suite lines were skipped
/// (the report is still written: skipped lines are never counted), 2 on usage errors.
pub fn run(args: &EvalArgs) -> anyhow::Result<ExitCode> {
    let (configs, runs) = configs(args)?;
    let kv_bytes = args.batch.kv_budget_bytes()?;
    let threads = init_threads(args.threads.threads);
    let parallel = parallel_for(args.batch.parallel, threads);
    let (cases, skipped) = read_suite(&args.suite)?;
    for e in &skipped {
        eprintln!("skipped {e}");
    }
    let cases = selection(args, &configs, &cases)?;
    let mut log = match &args.results {
        Some(p) => ResultsLog::open(p, args.resume)?,
        None => ResultsLog::in_memory(),
    };
    let pending: Vec<EvalConfig> = plan(&cases, &configs, runs)
        .into_iter()
        .filter(|(case, c, run)| !log.has(&case.id, &c.name, *run))
        .map(|(_, c, _)| c.clone())
        .collect();
    let mut backend: Box<dyn Backend> = match &args.outputs {
        Some(p) => Box::new(ReplayBackend::read(p)?),
        // Only the models of attempts still to make are loaded: a finished resumed run
        // reports without loading anything.
        None => {
            let b = ModelBackend::load(&pending, &fetch_config(), parallel, kv_bytes)?;
            if !pending.is_empty() {
                eprintln!("models: {}", b.model_names().join(", "));
            }
            Box::new(b)
        }
    };
    let total = plan(&cases, &configs, runs).len();
    let bar = ProgressBar::new(total as u64);
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} attempts, {per_sec}, eta {eta} {msg}")
            .context("progress bar template")?,
    );
    run_eval(
        &cases,
        &configs,
        runs,
        backend.as_mut(),
        &mut log,
        &mut |r| {
            if let Some(r) = r {
                bar.set_message(format!("{} {} run {}", r.config, r.case, r.run));
            }
            bar.inc(1);
        },
    )?;
    bar.finish_and_clear();
    let names: Vec<String> = configs.iter().map(|c| c.name.clone()).collect();
    let ids: std::collections::HashSet<&str> = cases.iter().map(|c| c.id.as_str()).collect();
    // A resumed results file may hold cases outside this selection: report only the selection.
    let results = log
        .into_results()
        .into_iter()
        .filter(|r| ids.contains(r.case.as_str()) && names.contains(&r.config))
        .collect();
    let report = Report::build(&suite_name(&args.suite), &names, results);
    let text = match args.format {
        Format::Text => report.to_text(),
        Format::Json => report.to_json(),
        Format::Markdown => report.to_markdown(),
        Format::Html => report.to_html(),
    };
    match &args.out {
        Some(p) => {
            std::fs::write(p, text).with_context(|| format!("cannot write {}", p.display()))?
        }
        None => print!("{text}"),
    }
    Ok(if skipped.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn suite_name(path: &Path) -> String {
    path.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string())
}

/// Answers cases with the models the configurations name (registry names or GGUF paths), each
/// loaded once and shared by every configuration that names it; each model's attempts are
/// decoded `parallel` at a time ([`ExtractBackend::attempt_batch`]) where its runtime batches.
pub struct ModelBackend {
    models: BTreeMap<String, ExtractBackend<PrefixReuse<Model>>>,
    /// Per model: attempts in flight together, and the KV budget (1 and none where the
    /// runtime cannot batch).
    batch: BTreeMap<String, (usize, Option<KvBudget>)>,
}

impl std::fmt::Debug for ModelBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelBackend")
            .field("models", &self.models.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl ModelBackend {
    /// Loads (fetching on first use, per `fetch`) every distinct model of `configs`, to
    /// decode `parallel` attempts together under a KV cache budget of `kv_bytes` (default:
    /// half the memory available).
    pub fn load(
        configs: &[EvalConfig],
        fetch: &FetchConfig,
        parallel: usize,
        kv_bytes: Option<usize>,
    ) -> Result<ModelBackend, EvalError> {
        let mut models = BTreeMap::new();
        let mut batch = BTreeMap::new();
        for c in configs {
            if models.contains_key(&c.model) {
                continue;
            }
            let mut l = Loaded::load(Some(&c.model), fetch, &ModelConfig::new()).map_err(|e| {
                EvalError::Backend {
                    message: format!("cannot load model `{}`: {e}", c.model),
                }
            })?;
            let per_position = (parallel > 1)
                .then(|| kv_bytes_per_position(&mut l.model))
                .flatten();
            let plan = match per_position {
                Some(per) => (parallel, kv_budget(kv_bytes, per)),
                None => (1, None),
            };
            batch.insert(c.model.clone(), plan);
            let b = {
                let (vocab, encode) = (l.vocab(), l.chat_encoder());
                ExtractBackend::new(PrefixReuse::new(l.model), vocab, encode, l.stop)
            };
            models.insert(c.model.clone(), b);
        }
        Ok(ModelBackend { models, batch })
    }

    /// The names of the loaded models.
    pub fn model_names(&self) -> Vec<&str> {
        self.models.keys().map(String::as_str).collect()
    }
}

impl Backend for ModelBackend {
    fn attempt(
        &mut self,
        case: &Case,
        config: &EvalConfig,
        run: usize,
    ) -> Result<Attempt, AttemptError> {
        self.models
            .get_mut(&config.model)
            .ok_or_else(|| format!("model `{}` was not loaded", config.model))?
            .attempt(case, config, run)
    }

    /// Each model's attempts in one batched run of their own, model by model.
    fn attempt_many(
        &mut self,
        items: &[(&Case, &EvalConfig, usize)],
        done: &mut dyn FnMut(usize, Result<Attempt, AttemptError>, f64) -> Result<(), EvalError>,
    ) -> Result<(), EvalError> {
        let mut by_model: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
        for (i, (_, config, _)) in items.iter().enumerate() {
            by_model.entry(config.model.as_str()).or_default().push(i);
        }
        for (model, indices) in by_model {
            let mine: Vec<(&Case, &EvalConfig, usize)> =
                indices.iter().map(|&i| items[i]).collect();
            let Some(backend) = self.models.get_mut(model) else {
                for &i in &indices {
                    let e = format!("model `{model}` was not loaded");
                    done(i, Err(e.into()), 0.0)?;
                }
                continue;
            };
            let (parallel, kv) = self.batch.get(model).copied().unwrap_or((1, None));
            backend.attempt_batch(&mine, parallel, kv, &mut |j, attempt, ms| {
                done(indices[j], attempt, ms)
            })?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use crate::cli::{Args, Command};

    fn parse(argv: &[&str]) -> Result<Args, clap::Error> {
        Args::try_parse_from(["formwork", "eval", "suite.jsonl"].iter().chain(argv))
    }

    #[test]
    fn a_config_file_and_configuration_flags_do_not_mix() {
        for flag in [
            &["--temperature", "0.7"][..],
            &["--mode", "prompt"],
            &["--system", "Be brief."],
            &["--shots", "3"],
        ] {
            let argv: Vec<&str> = ["--config", "c.toml"].iter().chain(flag).copied().collect();
            let err = parse(&argv).unwrap_err();
            assert_eq!(
                err.kind(),
                clap::error::ErrorKind::ArgumentConflict,
                "{flag:?}"
            );
            // What the user sees names both sides of the conflict.
            let message = err.to_string();
            assert!(
                message.contains("'--config <CONFIG>' cannot be used with")
                    && message.contains(flag[0]),
                "{message}"
            );
            assert!(parse(flag).is_ok(), "{flag:?} alone");
        }
        // Run-level options go with a config file.
        let args = parse(&["--config", "c.toml", "--runs", "3", "--limit", "5"]).unwrap();
        let Command::Eval(e) = args.command else {
            panic!("not eval")
        };
        assert_eq!((e.runs, e.limit), (Some(3), Some(5)));
    }
}
