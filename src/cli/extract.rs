//! `formwork extract`: a schema (or regex, grammar, tools) and a document in, JSON out.
//!
//! Glue only: turns flags into an [`ExtractConfig`] and a [`Constraint`], loads the model, and
//! prints. The engine logic is in `formwork::extract` and `formwork::generate`.
//!
//! Batches (`--input`) decode `--parallel` documents together through the model's batched
//! forward pass ([`Extractor::run_batch_parallel`]); the default batch size and the KV budget
//! are chosen by the throughput jobs' shared rules ([`parallel_for`], [`kv_budget`]).
//!
//! Exit codes: 0 the output is valid (batch: every record `ok` or `refusal`); 1 the output is
//! not (invalid, incomplete, or a failed record); 2 bad input (unreadable schema or document,
//! unknown model, bad flags); 3 the model refused (single document, `--allow-refusal`).

use super::common::{
    kv_budget, kv_bytes_per_position, parallel_for, BatchArgs, ModelArg, PropertyOrderArg,
    SchemaDirArgs, SpeculateArg, ThreadsArg,
};
use super::fetch_config;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::{ArgGroup, Args};

use crate::extract::batch::{
    check_unique_ids, read_records, BadSamples, OutputLog, RecordResult, RecordStatus,
};
use crate::extract::prompt::PromptTemplate;
use crate::extract::run::{Constraint, ExtractConfig, Extractor, GroundedSpans, Mode, Prepared};
use crate::extract::{read_json, tools};
use crate::generate::Sampling;
use crate::generate::{Closing, GenerateConfig};
use crate::model::runtime::init_threads;
use crate::model::{Loaded, Model, ModelConfig};

/// `formwork extract ...`
#[derive(Debug, Args)]
#[command(group(ArgGroup::new("constraint").required(true).args(["schema", "json", "regex", "grammar", "lark", "tools"])))]
// The shared batch flags size a batch, so here they need one.
#[command(mut_arg("parallel", |a| a.requires("input")), mut_arg("kv_budget", |a| a.requires("input")))]
pub struct ExtractArgs {
    /// The document: a file path, or `-` / absent for stdin. Not with --input.
    #[arg(conflicts_with = "input")]
    pub document: Option<PathBuf>,
    /// A JSON Schema file; the output is a JSON value valid against it. String properties
    /// marked `"x-grounded": true` must be verbatim substrings of the document.
    #[arg(long)]
    pub schema: Option<PathBuf>,
    /// Any JSON value.
    #[arg(long)]
    pub json: bool,
    /// A regex the whole output must match (regex-syntax syntax).
    #[arg(long)]
    pub regex: Option<String>,
    /// A GBNF grammar file.
    #[arg(long)]
    pub grammar: Option<PathBuf>,
    /// A Lark grammar file (the syntax of OpenAI's custom tools and llguidance: rules,
    /// terminals, `%import common`, `%ignore`, `%json {schema}`); its `start` rule is the output.
    #[arg(long)]
    pub lark: Option<PathBuf>,
    /// A tools file (array of OpenAI-style function definitions); the output is a call
    /// `{"name": ..., "arguments": ...}`.
    #[arg(long)]
    pub tools: Option<PathBuf>,
    /// With --tools: `auto` (a call or plain text), `required` (a call), or a tool name.
    #[arg(long, default_value = "auto", requires = "tools")]
    pub tool_choice: String,
    /// Allow the model to refuse with `{"refusal": "<reason>"}` (status `refusal`, exit 3).
    #[arg(long)]
    pub allow_refusal: bool,
    /// A JSON pointer into the schema naming a string property that must be grounded (a
    /// verbatim substring of the document). Repeatable.
    #[arg(long, value_name = "POINTER")]
    pub grounded: Vec<String>,
    /// --model.
    #[command(flatten)]
    pub model: ModelArg,
    /// Decoding mode: constrained (valid by construction), or the prompt-only baselines.
    #[arg(long, value_enum, default_value_t = Mode::Constrained)]
    pub mode: Mode,
    /// Most tokens to generate; a constrained output is closed early to fit.
    #[arg(long, default_value_t = 256)]
    pub max_tokens: usize,
    /// Sampling temperature; 0 is greedy.
    #[arg(long, default_value_t = 0.0)]
    pub temperature: f64,
    /// Seed of the sampler.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// System prompt (default: the model's own).
    #[arg(long)]
    pub system: Option<String>,
    /// A user-message template file with {schema}, {keys} (the schema's property names), {tools},
    /// {examples} and {document} placeholders.
    #[arg(long)]
    pub prompt_template: Option<PathBuf>,
    /// Batch input: JSONL, one `{"id": ..., "text": ...}` per line; ids must be unique (they
    /// key the output and --resume). A bad line becomes an `error` result naming its line.
    #[arg(long, requires = "output")]
    pub input: Option<PathBuf>,
    /// Batch output: JSONL, one result per input line.
    #[arg(long, requires = "input")]
    pub output: Option<PathBuf>,
    /// Skip ids already present in --output (append to it).
    #[arg(long, requires = "output")]
    pub resume: bool,
    /// --parallel and --kv-budget, with --input.
    #[command(flatten)]
    pub batch: BatchArgs,
    /// Where invalid outputs of --mode prompt/retry go (default: bad-samples.jsonl next to
    /// --output, or in the current directory).
    #[arg(long)]
    pub bad_samples: Option<PathBuf>,
    /// Indent the printed JSON.
    #[arg(long)]
    pub pretty: bool,
    /// Print the output to stderr as it is generated.
    #[arg(long)]
    pub stream: bool,
    /// Do not fast-forward forced tokens (for measuring).
    #[arg(long)]
    pub no_fast_forward: bool,
    /// --no-speculate.
    #[command(flatten)]
    pub speculate: SpeculateArg,
    /// Do not close early when the budget runs low (for measuring).
    #[arg(long)]
    pub no_close: bool,
    /// Compute the full mask before every sampled token instead of checking the model's
    /// choice first (for measuring; the output is the same).
    #[arg(long)]
    pub no_argmax_first: bool,
    /// How grounded values may share the document: `distinct` drops a value that repeats an
    /// earlier one, `disjoint` also one that overlaps a shorter one (where the schema lets the
    /// field be absent).
    #[arg(long, value_enum, default_value = "any", value_name = "RULE")]
    pub grounded_spans: GroundedSpans,
    /// Repeat penalty: the logits of tokens already generated are divided by this factor
    /// (llama.cpp's `repeat_penalty`; 1 = off).
    #[arg(long, default_value_t = 1.0, value_name = "FACTOR")]
    pub repeat_penalty: f32,
    /// The order of an object's listed properties under --schema: `schema` or `any`.
    #[arg(long, value_enum, default_value_t = PropertyOrderArg::Schema)]
    pub property_order: PropertyOrderArg,
    /// Listed properties in any order within a window of N schema positions (exact any order
    /// for objects of at most N listed properties; narrower for large objects).
    #[arg(long, value_name = "N", conflicts_with = "property_order")]
    pub property_window: Option<u32>,
    /// Documents for remote `$ref`s (--schema-dir, --schema-base).
    #[command(flatten)]
    pub schema_dir: SchemaDirArgs,
    /// --threads.
    #[command(flatten)]
    pub threads: ThreadsArg,
    /// Think, then answer: the model first reasons in free text, at most N tokens, until it
    /// writes --think-trigger, then answers under the constraint (constrained mode; batches
    /// reason in parallel as they decode, --parallel). The prompt asks for it; the reasoning
    /// is printed to stderr (batch: the `reasoning` field), never part of the output.
    #[arg(long, value_name = "N")]
    pub think: Option<usize>,
    /// Worked examples shown before the document, as the eval runner shows shots: JSONL, one
    /// `{"document": "...", "answer": <the right output>}` per line (answers to a schema are
    /// shown with their keys in schema order).
    #[arg(long, value_name = "FILE.jsonl")]
    pub examples: Option<PathBuf>,
    /// With --think: the text that ends the reasoning.
    #[arg(long, value_name = "TEXT", requires = "think", default_value = crate::extract::prompt::DEFAULT_THINK_TRIGGER)]
    pub think_trigger: String,
}

/// Exit code: the model refused.
const EXIT_REFUSAL: u8 = 3;

/// Runs `formwork extract`.
pub fn run(args: ExtractArgs) -> anyhow::Result<ExitCode> {
    let constraint = match constraint(&args) {
        Ok(c) => c,
        Err(e) => return bad_input(e),
    };
    let cfg = match config(&args) {
        Ok(c) => c,
        Err(e) => return bad_input(e),
    };
    // Read the single document before loading the model: a missing file is a quick error.
    let document = match (&args.input, &args.document) {
        (Some(_), _) => None,
        (None, doc) => match read_document(doc.as_deref()) {
            Ok(d) => Some(d),
            Err(e) => return bad_input(e),
        },
    };
    let records = match &args.input {
        Some(p) => match read_records(p) {
            Ok(r) => match check_unique_ids(&r) {
                Ok(()) => Some(r),
                Err(e) => return bad_input(anyhow::anyhow!("{}: {e}", p.display())),
            },
            Err(e) => return bad_input(anyhow::anyhow!("cannot read {}: {e}", p.display())),
        },
        None => None,
    };
    // Compile the constraint before loading (or fetching) the model: a bad schema or an
    // unsupported keyword is reported at once.
    let prepared = match Prepared::new(&constraint, &cfg) {
        Ok(p) => p,
        Err(e) => return bad_input(e.into()),
    };
    let kv_bytes = match args.batch.kv_budget_bytes() {
        Ok(b) => b,
        Err(e) => return bad_input(e),
    };
    let threads = init_threads(args.threads.threads);
    let mut loaded = match Loaded::load(
        args.model.model.as_deref(),
        &fetch_config(),
        &ModelConfig::new(),
    ) {
        Ok(l) => l,
        Err(e) => return bad_input(e.into()),
    };
    // Only batches of the constrained mode decode together (thinking first included), on a
    // backend that batches.
    let batched = records.is_some() && args.mode == Mode::Constrained;
    let per_position = batched
        .then(|| kv_bytes_per_position(&mut loaded.model))
        .flatten();
    let (parallel, kv) = match per_position {
        Some(per) => (
            parallel_for(args.batch.parallel, threads),
            kv_budget(kv_bytes, per),
        ),
        _ => (1, None),
    };
    let (vocab, encode) = (loaded.vocab(), loaded.chat_encoder());
    let mut ex =
        match Extractor::with_prepared(loaded.model, vocab, encode, loaded.stop, prepared, cfg) {
            Ok(x) => x,
            Err(e) => return bad_input(e.into()),
        };
    if args.mode != Mode::Constrained {
        let path = args.bad_samples.clone().unwrap_or_else(|| {
            args.output
                .as_deref()
                .and_then(Path::parent)
                .unwrap_or(Path::new(""))
                .join("bad-samples.jsonl")
        });
        let log = BadSamples::open(&path)
            .with_context(|| format!("cannot open the bad-samples log {}", path.display()))?;
        ex = ex.with_bad_samples(log);
    }
    match (document, records) {
        (Some(doc), _) => single(&mut ex, &doc, &args),
        (None, Some(records)) => {
            let out_path = args
                .output
                .as_deref()
                .expect("clap: --input requires --output");
            let mut out = OutputLog::open(out_path, args.resume)
                .with_context(|| format!("cannot open {}", out_path.display()))?;
            let todo = records
                .iter()
                .filter(|r| {
                    let id = match r {
                        Ok(r) => &r.id,
                        Err(b) => &b.id,
                    };
                    !out.is_done(id)
                })
                .count();
            let bar = indicatif::ProgressBar::new(todo as u64);
            bar.set_style(
                indicatif::ProgressStyle::with_template(
                    "{bar:30} {pos}/{len} docs {per_sec} eta {eta} {msg}",
                )
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            let mut substrings = Vec::new();
            let (start, mut tokens) = (std::time::Instant::now(), 0usize);
            let summary = ex.run_batch_parallel(&records, &mut out, parallel, kv, &mut |r| {
                tokens += r.tokens;
                let rate = tokens as f64 / start.elapsed().as_secs_f64().max(1e-3);
                bar.set_message(format!("{rate:.0} tok/s, {} {:?}", r.id, r.status));
                bar.inc(1);
                if r.grounded_substrings {
                    substrings.push(r.id.clone());
                }
            })?;
            bar.finish_and_clear();
            warn(&mut ex);
            if !substrings.is_empty() {
                eprintln!(
                    "{GROUNDED_SUBSTRINGS_NOTE} (records {}; `grounded_substrings` in the output)",
                    substrings.join(", ")
                );
            }
            eprintln!(
                "{} records: {} ok, {} refusal, {} invalid, {} incomplete, {} error ({} skipped) → {}",
                summary.processed(),
                summary.ok,
                summary.refusal,
                summary.invalid,
                summary.incomplete,
                summary.error,
                summary.skipped,
                out.path().display()
            );
            Ok(ExitCode::from(if summary.all_ok() { 0 } else { 1 }))
        }
        (None, None) => unreachable!("a document or --input is always read"),
    }
}

/// What the CLI says when a document was over the span automaton's budget.
const GROUNDED_SUBSTRINGS_NOTE: &str = "note: the document is too long and repetitive for \
    whole-word spans: grounded values were allowed to be any substring, and may cut a word";

/// Prints what the extractor reported without failing a record.
fn warn(ex: &mut Extractor<Model>) {
    for w in ex.take_warnings() {
        eprintln!("warning: {w}");
    }
}

fn bad_input(e: anyhow::Error) -> anyhow::Result<ExitCode> {
    eprintln!("error: {e:#}");
    Ok(ExitCode::from(2))
}

/// The reasoning as `extract` shows it after its `reasoning:` label: trimmed, without the
/// "Reasoning:" the think instruction asks the model to open with (it would only repeat the
/// label), `(empty)` when nothing is left.
fn shown_reasoning(reasoning: &str) -> &str {
    let text = reasoning.trim();
    match text.strip_prefix("Reasoning:").unwrap_or(text).trim_start() {
        "" => "(empty)",
        text => text,
    }
}

fn single(ex: &mut Extractor<Model>, doc: &str, args: &ExtractArgs) -> anyhow::Result<ExitCode> {
    let stream = args.stream;
    let r: RecordResult = ex.extract("doc", doc, &mut |b| {
        if stream {
            let _ = std::io::stderr().write_all(b);
        }
    });
    if stream {
        eprintln!();
    }
    if let Some(reasoning) = &r.reasoning {
        eprintln!("reasoning: {}", shown_reasoning(reasoning));
    }
    warn(ex);
    let mut out = std::io::stdout().lock();
    match r.status {
        RecordStatus::Ok | RecordStatus::Refusal => {
            let v = r.output.unwrap_or(serde_json::Value::Null);
            let text = if args.pretty {
                serde_json::to_string_pretty(&v)?
            } else {
                serde_json::to_string(&v)?
            };
            writeln!(out, "{text}")?;
            if r.closed_early {
                eprintln!("note: closed early to fit --max-tokens {}", args.max_tokens);
            }
            if r.grounded_substrings {
                eprintln!("{GROUNDED_SUBSTRINGS_NOTE}");
            }
            Ok(ExitCode::from(if r.status == RecordStatus::Ok {
                0
            } else {
                EXIT_REFUSAL
            }))
        }
        status => {
            eprintln!(
                "error: {status:?}: {}",
                r.error.as_deref().unwrap_or("no output")
            );
            Ok(ExitCode::from(if status == RecordStatus::Error {
                2
            } else {
                1
            }))
        }
    }
}

fn constraint(args: &ExtractArgs) -> anyhow::Result<Constraint> {
    if let Some(p) = &args.schema {
        return Ok(Constraint::Schema(read_json(p)?));
    }
    if args.json {
        return Ok(Constraint::Json);
    }
    if let Some(re) = &args.regex {
        return Ok(Constraint::Regex(re.clone()));
    }
    if let Some(p) = &args.grammar {
        let text =
            std::fs::read_to_string(p).with_context(|| format!("cannot read {}", p.display()))?;
        let g =
            crate::grammar::gbnf::parse(&text).with_context(|| format!("in {}", p.display()))?;
        return Ok(Constraint::Grammar(g));
    }
    if let Some(p) = &args.lark {
        let text =
            std::fs::read_to_string(p).with_context(|| format!("cannot read {}", p.display()))?;
        let g = crate::lark::parse(&text).with_context(|| format!("in {}", p.display()))?;
        return Ok(Constraint::Grammar(g));
    }
    if let Some(p) = &args.tools {
        let tools = tools::parse_tools(&read_json(p)?)?;
        let choice = tool_choice(&args.tool_choice, &tools)?;
        return Ok(Constraint::Tools { tools, choice });
    }
    anyhow::bail!("one of --schema, --json, --regex, --grammar, --lark, --tools is required")
}

/// `--tool-choice`: `auto`, `required`, or the name of one of `tools`. A name that is none of
/// them is bad input (exit 2, before the model loads), never read as `auto`: a typo would
/// otherwise let the model call any tool, or none.
fn tool_choice(text: &str, tools: &[tools::Tool]) -> anyhow::Result<tools::ToolChoice> {
    let Ok(choice) = text.parse::<tools::ToolChoice>();
    if let tools::ToolChoice::Named(name) = &choice {
        if !tools.iter().any(|t| &t.name == name) {
            let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
            anyhow::bail!(
                "--tool-choice `{name}` is not one of the tools ({}), `auto` or `required`",
                names.join(", ")
            );
        }
    }
    Ok(choice)
}

fn config(args: &ExtractArgs) -> anyhow::Result<ExtractConfig> {
    let template = match &args.prompt_template {
        Some(p) => {
            let text = std::fs::read_to_string(p)
                .with_context(|| format!("cannot read {}", p.display()))?;
            PromptTemplate::new(&text).map_err(|m| anyhow::anyhow!("{}: {m}", p.display()))?
        }
        None => PromptTemplate::default_template(),
    };
    let examples = match &args.examples {
        Some(p) => read_examples(p)?,
        None => Vec::new(),
    };
    Ok(ExtractConfig {
        mode: args.mode,
        examples,
        generate: GenerateConfig {
            max_tokens: args.max_tokens,
            sampling: Sampling::from_temperature(Some(args.temperature)),
            seed: args.seed,
            fast_forward: !args.no_fast_forward,
            // Json for schemas, JSON and tools; the extractor turns it Generic for text.
            closing: if args.no_close {
                Closing::Off
            } else {
                Closing::Json
            },
            argmax_first: !args.no_argmax_first,
            repeat_penalty: args.repeat_penalty,
            speculation: args.speculate.speculation(),
        },
        allow_refusal: args.allow_refusal,
        grounded: args.grounded.clone(),
        grounded_spans: args.grounded_spans,
        system: args.system.clone(),
        template,
        compile: crate::schema::CompileOptions {
            property_order: match args.property_window {
                Some(w) => crate::schema::PropertyOrder::Window(w),
                None => args.property_order.into(),
            },
            registry: args.schema_dir.registry()?,
            ..Default::default()
        },
        think: args
            .think
            .map(|n| crate::generate::ThinkConfig::new(n, args.think_trigger.clone())),
        ..ExtractConfig::default()
    })
}

/// Reads `--examples`: one `{"document": string, "answer": value}` per non-blank line; a bad
/// line is an error naming the file and line.
fn read_examples(path: &Path) -> anyhow::Result<Vec<(String, serde_json::Value)>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let at = || format!("{}:{}", path.display(), i + 1);
        let v: serde_json::Value =
            serde_json::from_str(line).with_context(|| format!("{}: malformed JSON", at()))?;
        let document = v.get("document").and_then(serde_json::Value::as_str);
        match (document, v.get("answer")) {
            (Some(d), Some(a)) => out.push((d.to_string(), a.clone())),
            _ => anyhow::bail!(
                "{}: an example is {{\"document\": string, \"answer\": value}}",
                at()
            ),
        }
    }
    Ok(out)
}

fn read_document(path: Option<&Path>) -> anyhow::Result<String> {
    match path {
        None => read_stdin(),
        Some(p) if p == Path::new("-") => read_stdin(),
        Some(p) => {
            std::fs::read_to_string(p).with_context(|| format!("cannot read {}", p.display()))
        }
    }
}

fn read_stdin() -> anyhow::Result<String> {
    let mut s = String::new();
    std::io::stdin()
        .read_to_string(&mut s)
        .context("cannot read the document from stdin")?;
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasoning_is_shown_without_the_label_it_was_asked_to_open_with() {
        assert_eq!(
            shown_reasoning("Reasoning:\nFive of twelve are done.\n"),
            "Five of twelve are done."
        );
        assert_eq!(shown_reasoning("  Five of twelve.  "), "Five of twelve.");
        // Only a leading label goes.
        assert_eq!(shown_reasoning("So: Reasoning: x"), "So: Reasoning: x");
        assert_eq!(shown_reasoning(" Reasoning: "), "(empty)");
        assert_eq!(shown_reasoning(""), "(empty)");
    }

    #[test]
    fn examples_files_are_document_answer_lines() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("ex.jsonl");
        std::fs::write(
            &p,
            "{\"document\": \"5 of 12\", \"answer\": {\"done\": 5}}\n\n{\"document\": \"none\", \"answer\": 0}\n",
        )
        .unwrap();
        let ex = read_examples(&p).unwrap();
        assert_eq!(ex.len(), 2);
        assert_eq!(ex[0], ("5 of 12".into(), serde_json::json!({"done": 5})));
        std::fs::write(&p, "{\"document\": \"x\"}\n").unwrap();
        let e = read_examples(&p).unwrap_err().to_string();
        assert!(e.contains("ex.jsonl:1"), "{e}");
    }
}
