//! clap types for every subcommand. The `///` on each flag is its help text.

use clap::{Parser, Subcommand};

/// formwork: grammar-constrained local decoding.
#[derive(Debug, Parser)]
#[command(name = "formwork", version, about)]
pub struct Args {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Compile a JSON Schema and print the grammar (or the error naming keyword and pointer).
    Compile(CompileArgs),
    /// Run an eval suite through configurations and report validity and accuracy with spread.
    Eval(Box<super::eval::EvalArgs>),
    /// List, fetch and inspect models.
    Models(super::models::ModelsArgs),
    /// Generate text from a prompt with a local model (no grammar), streamed to stdout.
    Generate(super::generate::GenerateArgs),
    /// Extract JSON from a document under a schema (or regex, grammar, tools).
    Extract(Box<super::extract::ExtractArgs>),
    /// Serve the model over OpenAI- and Anthropic-compatible HTTP APIs (chat completions,
    /// messages; schemas, tools).
    Serve(Box<super::serve::ServeArgs>),
    /// Show the engine's internals (mask digests along token walks), for checking other front
    /// ends against it.
    Debug(super::debug::DebugArgs),
}

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

/// Documents a schema's remote `$ref`s may name (of `compile` and `extract`): never fetched.
#[derive(Debug, Default, clap::Args)]
pub struct SchemaDirArgs {
    /// A directory of schema documents for remote `$ref`s: every `*.json` under it, by its
    /// `$id` and by its path under --schema-base (default: its `file://` URL). Nothing is
    /// ever fetched; a `$ref` to any other document is an error.
    #[arg(long, value_name = "DIR")]
    pub schema_dir: Option<std::path::PathBuf>,
    /// The URI the --schema-dir directory stands for (`https://example.com/schemas/` makes
    /// `DIR/a/b.json` the document `https://example.com/schemas/a/b.json`).
    #[arg(long, value_name = "URI", requires = "schema_dir")]
    pub schema_base: Option<String>,
}

impl SchemaDirArgs {
    /// The documents of --schema-dir (none without it).
    pub fn registry(&self) -> anyhow::Result<crate::schema::SchemaRegistry> {
        match &self.schema_dir {
            Some(dir) => Ok(crate::schema::SchemaRegistry::from_dir(
                dir,
                self.schema_base.as_deref(),
            )?),
            None => Ok(crate::schema::SchemaRegistry::default()),
        }
    }
}

/// `--property-order` (of `compile` and `extract`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum PropertyOrderArg {
    /// Listed properties in schema order (the default).
    Schema,
    /// Listed properties in any order, each at most once.
    Any,
}

impl From<PropertyOrderArg> for crate::schema::PropertyOrder {
    fn from(a: PropertyOrderArg) -> Self {
        match a {
            PropertyOrderArg::Schema => crate::schema::PropertyOrder::Schema,
            PropertyOrderArg::Any => crate::schema::PropertyOrder::Any,
        }
    }
}
