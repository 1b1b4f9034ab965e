//! `formwork compile SCHEMA`: compile a JSON Schema and print the grammar (or the error).

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;

use super::common::{PropertyOrderArg, SchemaDirArgs};
use crate::schema::{compile, CompileOptions, Whitespace};

/// Arguments of `formwork compile`.
#[derive(Debug, clap::Args)]
pub struct CompileArgs {
    /// The schema file (`-` for stdin).
    pub schema: String,
    /// Compile options as JSON text or a JSON file (fields of `CompileOptions`).
    #[arg(long)]
    pub options: Option<String>,
    /// Report unsupported keywords as warnings instead of failing.
    #[arg(long)]
    pub lenient: bool,
    /// OpenAI-style strict mode: all properties required, no extra properties.
    #[arg(long)]
    pub strict: bool,
    /// Treat an absent `additionalProperties` as `false`.
    #[arg(long)]
    pub no_additional_properties: bool,
    /// Allow whitespace between tokens, at most N bytes per run (default: compact).
    #[arg(long, value_name = "N")]
    pub flexible_whitespace: Option<u32>,
    /// The order of an object's listed properties: `schema` (as listed) or `any` (each at most
    /// once, every required one present; exact for any number of properties).
    #[arg(long, value_enum, default_value_t = PropertyOrderArg::Schema)]
    pub property_order: PropertyOrderArg,
    /// Listed properties in any order within a window of N schema positions (exact any order
    /// for objects of at most N listed properties; narrower for large objects).
    #[arg(long, value_name = "N", conflicts_with = "property_order")]
    pub property_window: Option<u32>,
    /// Documents for remote `$ref`s (--schema-dir, --schema-base).
    #[command(flatten)]
    pub schema_dir: SchemaDirArgs,
}

/// Turns the flags into library options (the LowArgs → HiArgs step).
fn options(args: &CompileArgs) -> anyhow::Result<CompileOptions> {
    let mut opts: CompileOptions = match &args.options {
        Some(text) => {
            let text = if text.trim_start().starts_with('{') {
                text.clone()
            } else {
                std::fs::read_to_string(text).with_context(|| format!("reading {text}"))?
            };
            serde_json::from_str(&text).context("parsing compile options")?
        }
        None => CompileOptions::default(),
    };
    if args.lenient {
        opts.lenient = true;
    }
    if args.strict {
        opts.strict = true;
    }
    if args.no_additional_properties {
        opts.no_additional_properties = true;
    }
    if let Some(n) = args.flexible_whitespace {
        opts.whitespace = Whitespace::Flexible { max_run: n };
    }
    if args.property_order != PropertyOrderArg::Schema {
        opts.property_order = args.property_order.into();
    }
    if let Some(w) = args.property_window {
        opts.property_order = crate::schema::PropertyOrder::Window(w);
    }
    opts.registry = args.schema_dir.registry()?;
    Ok(opts)
}

/// Runs `formwork compile`. Exit codes: 0 compiled, 2 the schema was refused (bad input, like
/// an unreadable or malformed file: the binary's exit codes, `src/main.rs`).
pub fn run(args: &CompileArgs) -> anyhow::Result<ExitCode> {
    let text = if args.schema == "-" {
        std::io::read_to_string(std::io::stdin()).context("reading stdin")?
    } else {
        std::fs::read_to_string(&args.schema).with_context(|| format!("reading {}", args.schema))?
    };
    let schema: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("parsing {} as JSON", args.schema))?;
    let opts = options(args)?;
    let mut out = std::io::stdout().lock();
    match compile(&schema, &opts) {
        Ok(c) => {
            for w in &c.warnings {
                eprintln!("warning: {w}");
            }
            write!(out, "{}", c.grammar)?;
            out.flush()?;
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            eprintln!("error: {e}");
            Ok(ExitCode::from(2))
        }
    }
}
