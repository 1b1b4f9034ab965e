//! `formwork compile SCHEMA`: compile a JSON Schema and print the grammar (or the error);
//! with `--explain`, print what the compile does with each keyword instead; with `--lark`, the
//! file is a Lark grammar (its `%json` schemas compiled with the same options).

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;

use super::common::{PropertyOrderArg, SchemaDirArgs};
use crate::schema::{compile, explain, CompileOptions, Explanation, Outcome, Whitespace};

/// Arguments of `formwork compile`.
#[derive(Debug, clap::Args)]
pub struct CompileArgs {
    /// The schema file (`-` for stdin); with --lark, a Lark grammar file.
    pub schema: String,
    /// The file is a Lark grammar (OpenAI's custom-tool syntax, llguidance's): print the
    /// grammar it compiles to, or its error at line:column. The schema flags apply to its
    /// `%json` blocks.
    #[arg(long, conflicts_with = "explain")]
    pub lark: bool,
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
    /// Instead of the grammar, print each keyword with its JSON pointer and what the compile
    /// does with it: enforced (and how), an annotation, or refused (and why). Exits 2 when the
    /// compile would fail under these options.
    #[arg(long)]
    pub explain: bool,
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
    let opts = options(args)?;
    let mut out = std::io::stdout().lock();
    if args.lark {
        return match crate::lark::parse_with(&text, &opts) {
            Ok(c) => print_grammar(&mut out, &c.grammar, &c.warnings),
            Err(e) => {
                eprintln!("error: {}: {e}", args.schema);
                Ok(ExitCode::from(2))
            }
        };
    }
    let schema: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("parsing {} as JSON", args.schema))?;
    if args.explain {
        let e = explain(&schema, &opts);
        write_explanation(&mut out, &e, opts.lenient)?;
        out.flush()?;
        return Ok(if e.compiles(opts.lenient) {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(2)
        });
    }
    match compile(&schema, &opts) {
        Ok(c) => print_grammar(&mut out, &c.grammar, &c.warnings),
        Err(e) => {
            eprintln!("error: {e}");
            Ok(ExitCode::from(2))
        }
    }
}

/// A compiled grammar on stdout, what the compile did not enforce (lenient) on stderr.
fn print_grammar(
    out: &mut impl Write,
    grammar: &crate::grammar::Grammar,
    warnings: &[crate::schema::SchemaError],
) -> anyhow::Result<ExitCode> {
    for w in warnings {
        eprintln!("warning: {w}");
    }
    write!(out, "{grammar}")?;
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// The `--explain` report: one aligned line per keyword (pointer, keyword, outcome), then a
/// summary line.
fn write_explanation(out: &mut impl Write, e: &Explanation, lenient: bool) -> std::io::Result<()> {
    let pw = e
        .keywords
        .iter()
        .map(|k| k.pointer.len())
        .max()
        .unwrap_or(1);
    let kw = e
        .keywords
        .iter()
        .map(|k| k.keyword.len())
        .max()
        .unwrap_or(1);
    let (mut enforced, mut annotations, mut refused, mut unreached) = (0, 0, 0, 0);
    for k in &e.keywords {
        let what = match &k.outcome {
            Outcome::Enforced(how) => {
                enforced += 1;
                format!("enforced: {how}")
            }
            Outcome::Annotation(why) => {
                annotations += 1;
                format!("no constraint: {why}")
            }
            Outcome::Refused(why) => {
                refused += 1;
                format!("REFUSED: {why}")
            }
            Outcome::NotReached(why) => {
                unreached += 1;
                format!("not enforced: {why}")
            }
            _ => "unknown outcome".to_string(),
        };
        writeln!(out, "{:pw$}  {:kw$}  {what}", k.pointer, k.keyword)?;
    }
    if let Some(err) = &e.error {
        writeln!(out, "error: {err}")?;
    }
    let verdict = match (e.error.is_some(), refused > 0, lenient) {
        (true, _, _) => "the compile fails on the error above",
        (false, false, _) => "the schema compiles, every constraint enforced",
        (false, true, false) => "the compile fails on the refused keywords (--lenient drops them)",
        (false, true, true) => "lenient: the refused keywords are dropped, the rest enforced",
    };
    writeln!(
        out,
        "summary: {enforced} enforced, {annotations} without constraint, {refused} refused, \
         {unreached} not enforced under a refused keyword; {verdict}"
    )
}
