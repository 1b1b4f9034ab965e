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
    /// List, fetch and inspect models.
    Models(super::models::ModelsArgs),
}
