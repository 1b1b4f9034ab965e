//! What several subcommands share: the clap groups of the model and the resources it runs on
//! (`--model`, `--threads`, `--parallel`, `--kv-budget`) and of a schema's options
//! (`--schema-dir`, `--property-order`) and `--no-speculate`, flattened into each subcommand's arguments; and the
//! helpers that size a batch from them (the model's KV cache bytes per position, the memory
//! the kernel reports available).
//!
//! The batch sizes themselves are each command's choice: the throughput jobs (`extract
//! --input`, `eval`) take [`parallel_for`]; the server, which decodes for latency, its own.

use anyhow::Context;

use crate::extract::run::KvBudget;
use crate::model::Model;

/// `--model` (of `extract`, `eval`, `generate` and `serve`).
#[derive(Debug, Default, clap::Args)]
pub struct ModelArg {
    /// A registry model name (fetched on first use) or a path to a .gguf file. Default: the
    /// registry's default model.
    #[arg(long, short = 'm')]
    pub model: Option<String>,
}

/// `--threads` (of `extract`, `eval`, `generate` and `serve`).
#[derive(Debug, Default, clap::Args)]
pub struct ThreadsArg {
    /// Compute threads. Default: the number of physical cores.
    #[arg(long)]
    pub threads: Option<usize>,
}

/// `--no-speculate` (of `extract`, `eval` and `serve`).
#[derive(Debug, Default, clap::Args)]
pub struct SpeculateArg {
    /// Do not speculate (check tokens drafted from the prompt and the grammar several per
    /// forward pass, docs/speculative.md): the output is the same, only slower. For
    /// measuring.
    #[arg(long)]
    pub no_speculate: bool,
}

impl SpeculateArg {
    /// The decoder's speculation: the default, or off with `--no-speculate`.
    pub fn speculation(&self) -> crate::generate::Speculation {
        if self.no_speculate {
            crate::generate::Speculation::Off
        } else {
            crate::generate::Speculation::default()
        }
    }
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

/// `--parallel` and `--kv-budget` of the throughput jobs (`extract --input`, `eval`).
#[derive(Debug, Default, clap::Args)]
pub struct BatchArgs {
    /// Documents (`extract --input`) or attempts (`eval`) decoded together, one batched
    /// forward pass serving them all (extract: constrained mode; the prompt/retry baselines
    /// run one at a time). Each result is the one it gets decoded alone, greedy or sampled;
    /// results are written as they finish, so a batch's output lines are in finish order, not
    /// input order (1: one at a time, in input order). Default: 8 per compute thread, at most
    /// 16, fewer if --kv-budget cannot hold them.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub parallel: Option<u32>,
    /// Memory for the KV caches of the documents or attempts in flight, in bytes, with an
    /// optional K, M or G suffix (powers of 1024). One is admitted only when its cache at full
    /// length (its prompt + --max-tokens positions, and with --think the reasoning's budget
    /// and trigger, × 2 for the cache's growth) fits beside the others'; one that fits only
    /// alone runs alone, and a document that cannot fit even alone is an error record.
    /// Default: half the memory available when the run starts (MemAvailable), else no cap
    /// beyond --parallel.
    #[arg(long, value_name = "BYTES")]
    pub kv_budget: Option<String>,
}

impl BatchArgs {
    /// `--kv-budget` in bytes (`None` without the flag).
    ///
    /// # Errors
    /// A malformed size (see [`parse_bytes`]).
    pub fn kv_budget_bytes(&self) -> anyhow::Result<Option<usize>> {
        self.kv_budget.as_deref().map(parse_bytes).transpose()
    }
}

/// Documents in flight for a throughput job (`extract --input`, `eval`): `--parallel`, else 8
/// per compute thread, at most 16. CPU decoding is bound by reading the weights, so a batch
/// gains until its rows make the step compute-bound: the decode bench on the 2-thread VM of
/// docs/inference.md flattens past 8 (≈ 3.8× batch 1 at 8), but whole extractions still
/// gained from 8 to 16 there (`extract_batch`, 200 SNIPS requests: SmolLM2 18.7–19.2 s →
/// 17.2–17.3 s, Qwen2.5-Coder-0.5B 37.6 → 37.1 s; docs/inference.md). The server keeps 4 per
/// thread, for latency.
pub(crate) fn parallel_for(flag: Option<u32>, threads: usize) -> usize {
    flag.map_or((8 * threads).clamp(1, 16), |n| n as usize)
}

/// The memory the kernel reports available (`MemAvailable` in `/proc/meminfo`), in bytes;
/// `None` where it cannot be read.
pub(crate) fn mem_available() -> Option<usize> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kb: usize = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// The KV budget of a batch whose model holds `bytes_per_position` per cached position:
/// `flag` bytes, else half the memory available when the run starts ([`mem_available`]: the
/// weights are already loaded, and the rest is left for everything else); `None` (no cap
/// beyond `--parallel`) where that cannot be read.
pub(crate) fn kv_budget(flag: Option<usize>, bytes_per_position: usize) -> Option<KvBudget> {
    flag.or_else(|| mem_available().map(|bytes| bytes / 2))
        .map(|bytes| KvBudget {
            bytes,
            bytes_per_position,
        })
}

/// The model's KV cache bytes per position, measured: a sequence fed one token holds exactly
/// one position per layer (its first allocation is exact; later ones double). `None` when the
/// runtime cannot batch (candle), so its batches run one at a time.
pub(crate) fn kv_bytes_per_position(model: &mut Model) -> Option<usize> {
    let token = model.token_info().bos.unwrap_or(0);
    let mut seq = model.new_sequence();
    model.forward_batch(&mut [(&mut seq, &[token][..])]).ok()?;
    Some(seq.kv_bytes())
}

/// `123`, `64K`, `512M`, `2G` (powers of 1024; `KiB`-style and `B` suffixes accepted).
pub(crate) fn parse_bytes(text: &str) -> anyhow::Result<usize> {
    let t = text.trim();
    let upper = t.to_ascii_uppercase();
    let digits = upper.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let unit = &upper[digits.len()..];
    let shift = match unit {
        "" | "B" => 0,
        "K" | "KB" | "KIB" => 10,
        "M" | "MB" | "MIB" => 20,
        "G" | "GB" | "GIB" => 30,
        _ => anyhow::bail!("--kv-budget {t:?}: unknown unit {unit:?} (use K, M or G)"),
    };
    let n: usize = digits
        .trim()
        .parse()
        .with_context(|| format!("--kv-budget {t:?}: not a whole number of bytes"))?;
    n.checked_mul(1 << shift)
        .filter(|&b| b > 0)
        .ok_or_else(|| anyhow::anyhow!("--kv-budget {t:?}: must be more than 0 and fit in usize"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kv_budgets_parse_with_binary_units_and_reject_the_rest() {
        assert_eq!(parse_bytes("123").unwrap(), 123);
        assert_eq!(parse_bytes("64K").unwrap(), 64 << 10);
        assert_eq!(parse_bytes("512mib").unwrap(), 512 << 20);
        assert_eq!(parse_bytes(" 2G ").unwrap(), 2 << 30);
        for bad in ["", "0", "-1", "1.5G", "12T", "G"] {
            let e = parse_bytes(bad).unwrap_err().to_string();
            assert!(e.contains("--kv-budget"), "{bad}: {e}");
        }
    }

    #[test]
    fn the_default_batch_is_eight_per_thread_up_to_sixteen() {
        assert_eq!(parallel_for(None, 1), 8);
        assert_eq!(parallel_for(None, 2), 16);
        assert_eq!(parallel_for(None, 8), 16);
        assert_eq!(parallel_for(Some(3), 8), 3);
    }
}
