//! The command line's top: [`Args`] and its [`Command`]s, each holding its subcommand's
//! arguments (declared beside the subcommand's code; the groups several share in `common`).
//! The `///` on each flag is its help text.

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
    Compile(super::compile::CompileArgs),
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
    ///
    /// Clients name the model (--model) in a request's `model`; `GET /v1/models` lists it.
    Serve(Box<super::serve::ServeArgs>),
    /// Show the engine's internals (mask digests along token walks), for checking other front
    /// ends against it.
    Debug(super::debug::DebugArgs),
}
