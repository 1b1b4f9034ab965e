//! The decode worker: one thread that owns the model and runs one sequence at a time.
//!
//! Owns the bounded job queue (a full queue is refused at once, never an unbounded backlog),
//! running each job through the engine's [`Generator`] (constrained under its compiled
//! grammar, or free text with stop strings), streaming the text to the request as it is
//! produced, and stopping a generation whose client has gone: every event is sent on the
//! job's channel, and when the receiver is dropped the next forward pass fails on purpose
//! ([`Cancellable`]) and the worker moves on. Does not own HTTP or the wire format.
//!
//! Generic over the engine's [`LogitsSource`], so tests drive it with a fake model.
//!
//! May use: nothing else in the crate.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::thread::JoinHandle;

use formwork_core::generate::{
    GenerateConfig, Generator, LogitsSource, SourceError, StopReason, Utf8Stream,
};
use formwork_core::matcher::{CompiledGrammar, Matcher};
use formwork_core::toktrie::{TokenId, Vocab};
use tokio::sync::mpsc::UnboundedSender;

/// Why an output ended, as the API reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Finish {
    /// Complete: the model stopped, the grammar completed, a stop string, or a valid output
    /// closed early to fit the budget.
    Stop,
    /// The token budget ran out before the output was complete.
    Length,
}

/// The end of a job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finished {
    /// Why it ended.
    pub finish: Finish,
    /// Whether budget-aware closing ended a valid output early.
    pub closed_early: bool,
    /// Prompt tokens.
    pub prompt_tokens: usize,
    /// Generated tokens.
    pub completion_tokens: usize,
    /// The stop string the output was cut at, if one was.
    pub stop_sequence: Option<String>,
    /// Whether a tool call identical to an earlier one ended the list of calls (and was
    /// dropped; see [`CallList`]).
    pub duplicate_call_dropped: bool,
    /// The constraints a lenient server did not enforce, as the extension lists them (filled
    /// by the HTTP layer, which knows the request; empty from the worker).
    pub dropped_constraints: Vec<serde_json::Value>,
}

impl Finished {
    /// The `formwork` extension object of a response: `closed_early`,
    /// `duplicate_call_dropped` and `dropped_constraints`.
    pub fn extension(&self) -> serde_json::Value {
        serde_json::json!({
            "closed_early": self.closed_early,
            "duplicate_call_dropped": self.duplicate_call_dropped,
            "dropped_constraints": self.dropped_constraints,
        })
    }
}

/// What a job sends back, in order: text pieces, then exactly one `Done`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// Generated text (complete UTF-8; stop strings already cut).
    Text(String),
    /// The end, or the engine's error.
    Done(Result<Finished, String>),
}

/// One generation request.
#[derive(Debug)]
pub struct Job {
    /// Prompt token ids.
    pub prompt: Vec<u32>,
    /// The constraint; `None` for free text.
    pub grammar: Option<Arc<CompiledGrammar>>,
    /// Budget and sampling.
    pub config: GenerateConfig,
    /// Stop strings (free text only): the output ends before the first one.
    pub stop: Vec<String>,
    /// Whether the output may be several tool calls, one per line: a call identical to an
    /// earlier one then ends the output and is dropped ([`CallList`]).
    pub parallel_calls: bool,
    /// Where the events go. Dropping the receiver cancels the job.
    pub events: UnboundedSender<Event>,
}

/// A logits source that fails once `cancel` is set: how the worker stops a generation
/// between two forward passes (the engine's loop has no other exit).
#[derive(Debug)]
pub struct Cancellable<S> {
    inner: S,
    cancel: Arc<AtomicBool>,
}

/// The error a cancelled forward pass returns.
#[derive(Debug, thiserror::Error)]
#[error("generation cancelled")]
struct Cancelled;

impl<S: LogitsSource> LogitsSource for Cancellable<S> {
    fn forward(&mut self, tokens: &[u32], pos: usize) -> Result<Vec<f32>, SourceError> {
        if self.cancel.load(Ordering::Relaxed) {
            return Err(Box::new(Cancelled));
        }
        self.inner.forward(tokens, pos)
    }
}

/// The model side of the server: a logits source and what belongs to its vocabulary.
pub struct Backend<S> {
    /// The model.
    pub source: S,
    /// Its vocabulary.
    pub vocab: Arc<dyn Vocab>,
    /// Tokens that end a free-text answer.
    pub stop: Vec<TokenId>,
}

impl<S> std::fmt::Debug for Backend<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Backend")
            .field("vocab_len", &self.vocab.vocab_len())
            .field("stop", &self.stop)
            .finish()
    }
}

/// The handle requests submit jobs through.
#[derive(Clone, Debug)]
pub struct Queue {
    tx: SyncSender<Job>,
    load: Arc<Counts>,
}

/// Jobs waiting and decoding, counted by the queue and the worker.
#[derive(Debug, Default)]
struct Counts {
    waiting: AtomicUsize,
    running: AtomicUsize,
}

/// How busy the worker is, as `GET /health` reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Load {
    /// Jobs decoding now.
    pub running: usize,
    /// Jobs queued behind them.
    pub waiting: usize,
}

/// Why a job was not queued.
#[derive(Debug, PartialEq, Eq)]
pub enum SubmitError {
    /// The queue holds its maximum of waiting jobs.
    Full,
    /// The worker has stopped.
    Stopped,
}

impl Queue {
    /// Queues `job` without waiting.
    ///
    /// # Errors
    /// [`SubmitError::Full`] when `capacity` jobs already wait.
    pub fn submit(&self, job: Job) -> Result<(), SubmitError> {
        // Counted before sending, so the worker never takes a job that is not counted yet.
        self.load.waiting.fetch_add(1, Ordering::SeqCst);
        self.tx.try_send(job).map_err(|e| {
            self.load.waiting.fetch_sub(1, Ordering::SeqCst);
            match e {
                TrySendError::Full(_) => SubmitError::Full,
                TrySendError::Disconnected(_) => SubmitError::Stopped,
            }
        })
    }

    /// Jobs decoding and waiting now (a job whose client left while it waited is counted
    /// until the worker reaches it and skips it).
    pub fn load(&self) -> Load {
        Load {
            running: self.load.running.load(Ordering::SeqCst),
            waiting: self.load.waiting.load(Ordering::SeqCst),
        }
    }
}

/// Starts the worker thread; at most `capacity` jobs wait behind the running one.
pub fn spawn<S: LogitsSource + Send + 'static>(
    backend: Backend<S>,
    capacity: usize,
) -> std::io::Result<(Queue, JoinHandle<()>)> {
    let (tx, rx) = sync_channel(capacity);
    let load = Arc::new(Counts::default());
    let counts = load.clone();
    let handle = std::thread::Builder::new()
        .name("formwork-decode".into())
        .spawn(move || run(backend, rx, &counts))?;
    Ok((Queue { tx, load }, handle))
}

fn run<S: LogitsSource>(backend: Backend<S>, rx: Receiver<Job>, counts: &Counts) {
    let cancel = Arc::new(AtomicBool::new(false));
    let source = Cancellable {
        inner: backend.source,
        cancel: cancel.clone(),
    };
    let mut generator = Generator::new(source, backend.vocab);
    for job in rx {
        counts.waiting.fetch_sub(1, Ordering::SeqCst);
        // A client that left while queued costs nothing.
        if job.events.is_closed() {
            continue;
        }
        cancel.store(false, Ordering::Relaxed);
        counts.running.store(1, Ordering::SeqCst);
        run_job(&mut generator, &backend.stop, &cancel, job);
        counts.running.store(0, Ordering::SeqCst);
    }
}

fn run_job<S: LogitsSource>(
    generator: &mut Generator<Cancellable<S>>,
    stop_ids: &[TokenId],
    cancel: &AtomicBool,
    job: Job,
) {
    let mut utf8 = Utf8Stream::new();
    let mut calls = CallList::new(job.parallel_calls);
    let mut scanner = StopScanner::new(job.stop);
    let mut produced = 0usize;
    let mut stopped = false;
    let events = &job.events;
    let mut on_bytes = |bytes: &[u8]| {
        produced += 1;
        if stopped {
            return;
        }
        let (text, repeated) = calls.push(&utf8.push(bytes));
        let (emit, hit) = scanner.push(&text);
        if !emit.is_empty() && events.send(Event::Text(emit)).is_err() {
            cancel.store(true, Ordering::Relaxed);
        }
        if hit || repeated {
            stopped = true;
            cancel.store(true, Ordering::Relaxed);
        }
    };
    let result = match &job.grammar {
        Some(g) => match Matcher::new(g.clone()) {
            Ok(mut m) => generator
                .generate(&job.prompt, &mut m, &job.config, &mut on_bytes)
                .map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        },
        None => generator
            .generate_free(&job.prompt, stop_ids, &job.config, &mut on_bytes)
            .map_err(|e| e.to_string()),
    };
    let done = match result {
        Ok(g) => {
            let rest = scanner.finish(&calls.finish(&utf8.finish()));
            let stop_sequence = scanner.hit.clone();
            if !rest.is_empty() {
                let _ = events.send(Event::Text(rest));
            }
            let finish = match g.stop {
                StopReason::MaxTokens if !g.accepted || job.grammar.is_none() => Finish::Length,
                _ => Finish::Stop,
            };
            Ok(Finished {
                finish,
                closed_early: g.closed_early,
                prompt_tokens: g.prompt_tokens,
                completion_tokens: g.tokens_len(),
                stop_sequence,
                duplicate_call_dropped: false,
                dropped_constraints: Vec::new(),
            })
        }
        Err(e) => {
            // The source failed mid-pass: its cache no longer matches what the generator
            // recorded.
            generator.forget_cache();
            if stopped {
                // Stopped on purpose: at a stop string or a repeated call. The output before
                // it is complete (a list of calls ends after any call).
                Ok(Finished {
                    finish: Finish::Stop,
                    closed_early: false,
                    prompt_tokens: job.prompt.len(),
                    completion_tokens: produced,
                    stop_sequence: scanner.hit.clone(),
                    duplicate_call_dropped: calls.repeated,
                    dropped_constraints: Vec::new(),
                })
            } else {
                Err(e)
            }
        }
    };
    let _ = events.send(Event::Done(done));
}

/// The policy for repeated tool calls: with parallel calls allowed, a call identical to an
/// earlier call of the same output (the same bytes: the tool grammar writes compact JSON, so
/// the same name and the same arguments) ends the list. Small models tend to repeat their
/// call until the budget runs out; a repeated call asks for nothing new, and a client that
/// runs each call would run it twice. The repeat is dropped, generation stops there, and
/// the response says so (`formwork.duplicate_call_dropped`).
///
/// Streamed text of a call that is, so far, a prefix of an earlier call (and the newline
/// before it) is held back until it differs from every earlier call, so a dropped repeat is
/// never half sent. Outputs that are not calls (text under `tool_choice: auto`: the first
/// byte is not `{`) pass through unchanged.
#[derive(Debug)]
pub struct CallList {
    /// Whether the policy applies (parallel calls allowed).
    on: bool,
    text: String,
    /// Bytes of `text` scanned and sent.
    scanned: usize,
    sent: usize,
    depth: usize,
    in_string: bool,
    escaped: bool,
    /// Where the call being written starts (its `{`).
    start: Option<usize>,
    /// The byte ranges of the complete calls.
    done: Vec<(usize, usize)>,
    /// Whether a repeated call ended the output.
    pub repeated: bool,
}

impl CallList {
    /// A fresh list; `on` is whether several calls are allowed.
    pub fn new(on: bool) -> Self {
        CallList {
            on,
            text: String::new(),
            scanned: 0,
            sent: 0,
            depth: 0,
            in_string: false,
            escaped: false,
            start: None,
            done: Vec::new(),
            repeated: false,
        }
    }

    /// Adds `piece`; returns the text that can be sent and whether a repeated call was found
    /// (then nothing more is sent: the output ends after the last different call).
    pub fn push(&mut self, piece: &str) -> (String, bool) {
        if self.repeated {
            return (String::new(), true);
        }
        if !self.on {
            return (piece.to_string(), false);
        }
        self.text.push_str(piece);
        if !self.text.starts_with('{') {
            // Not calls (or nothing yet): nothing to hold back.
            let out = self.text[self.sent..].to_string();
            self.sent = self.text.len();
            return (out, false);
        }
        let bytes = self.text.as_bytes();
        for (i, &c) in bytes.iter().enumerate().skip(self.scanned) {
            if self.in_string {
                match c {
                    _ if self.escaped => self.escaped = false,
                    b'\\' => self.escaped = true,
                    b'"' => self.in_string = false,
                    _ => {}
                }
                continue;
            }
            match c {
                b'"' => self.in_string = true,
                b'{' | b'[' => {
                    if self.depth == 0 {
                        self.start = Some(i);
                    }
                    self.depth += 1;
                }
                b'}' | b']' => {
                    self.depth = self.depth.saturating_sub(1);
                    if self.depth > 0 {
                        continue;
                    }
                    let Some(s) = self.start.take() else { continue };
                    let call = &self.text[s..=i];
                    if self.done.iter().any(|&(a, b)| &self.text[a..b] == call) {
                        self.repeated = true;
                        let end = self.done.last().map_or(0, |&(_, b)| b);
                        let out = self.text[self.sent.min(end)..end].to_string();
                        self.sent = end;
                        return (out, true);
                    }
                    self.done.push((s, i + 1));
                }
                _ => {}
            }
        }
        self.scanned = self.text.len();
        let hold = match (self.done.last(), self.start) {
            (None, _) => self.text.len(),
            // Between calls: the separator waits for the next call to differ.
            (Some(&(_, end)), None) => end,
            (Some(&(_, end)), Some(s)) => {
                let partial = &self.text[s..];
                let may_repeat = self
                    .done
                    .iter()
                    .any(|&(a, b)| self.text[a..b].starts_with(partial));
                if may_repeat {
                    end
                } else {
                    self.text.len()
                }
            }
        };
        let upto = hold.max(self.sent);
        let out = self.text[self.sent..upto].to_string();
        self.sent = upto;
        (out, false)
    }

    /// Adds the last `piece`; returns everything left to send (the output ended without a
    /// repeat, so nothing is held back any more).
    pub fn finish(&mut self, piece: &str) -> String {
        let (mut out, repeated) = self.push(piece);
        if !repeated && self.on {
            out.push_str(&self.text[self.sent..]);
            self.sent = self.text.len();
        }
        out
    }
}

/// Cuts text at the first stop string, holding back a tail that could be the start of one
/// (so a streamed stop string is never half sent).
#[derive(Debug)]
struct StopScanner {
    stops: Vec<String>,
    held: String,
    /// The stop string found (the one that starts first).
    hit: Option<String>,
}

impl StopScanner {
    fn new(stops: Vec<String>) -> Self {
        StopScanner {
            stops,
            held: String::new(),
            hit: None,
        }
    }

    /// Adds `text`; returns what can be sent and whether a stop string was found.
    fn push(&mut self, text: &str) -> (String, bool) {
        if self.hit.is_some() {
            return (String::new(), true);
        }
        if self.stops.is_empty() {
            return (text.to_string(), false);
        }
        self.held.push_str(text);
        if let Some((at, stop)) = self
            .stops
            .iter()
            .filter_map(|s| self.held.find(s.as_str()).map(|at| (at, s)))
            .min_by_key(|&(at, _)| at)
        {
            self.hit = Some(stop.clone());
            let out = self.held[..at].to_string();
            self.held.clear();
            return (out, true);
        }
        // Keep the longest suffix that is a proper prefix of some stop string.
        let keep = self
            .stops
            .iter()
            .flat_map(|s| {
                (1..s.len())
                    .filter(|&k| s.is_char_boundary(k))
                    .map(move |k| &s[..k])
            })
            .filter(|p| self.held.ends_with(p))
            .map(str::len)
            .max()
            .unwrap_or(0);
        let cut = self.held.len() - keep;
        let out = self.held[..cut].to_string();
        self.held.drain(..cut);
        (out, false)
    }

    fn finish(&mut self, text: &str) -> String {
        let (mut out, hit) = self.push(text);
        if !hit {
            out.push_str(&std::mem::take(&mut self.held));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use formwork_core::generate::testing::FixedLogits;
    use formwork_core::toktrie::{SyntheticVocab, TokEnv};
    use formwork_core::Limits;
    use tokio::sync::mpsc::unbounded_channel;

    fn collect(mut rx: tokio::sync::mpsc::UnboundedReceiver<Event>) -> (String, Finished) {
        let mut text = String::new();
        while let Some(e) = rx.blocking_recv() {
            match e {
                Event::Text(t) => text.push_str(&t),
                Event::Done(d) => return (text, d.unwrap()),
            }
        }
        panic!("no Done event");
    }

    fn backend(prefer: &[u8]) -> Backend<FixedLogits> {
        let vocab = Arc::new(SyntheticVocab::byte_level());
        Backend {
            source: FixedLogits::preferring(257, prefer.iter().map(|&b| b as u32)),
            vocab,
            stop: vec![TokenId(256)],
        }
    }

    #[test]
    fn constrained_job_streams_a_valid_output() {
        let b = backend(b"7}");
        let env = TokEnv::new(b.vocab.clone());
        let g = formwork_core::compile(
            &serde_json::json!({"type": "integer", "maximum": 99}),
            &Default::default(),
        )
        .unwrap()
        .grammar;
        let g = Arc::new(CompiledGrammar::with_env(g, &env, Limits::default()).unwrap());
        let (queue, _h) = spawn(b, 2).unwrap();
        let (tx, rx) = unbounded_channel();
        let config = GenerateConfig {
            max_tokens: 16,
            ..GenerateConfig::default()
        };
        queue
            .submit(Job {
                prompt: vec![1, 2],
                grammar: Some(g),
                config,
                stop: vec![],
                parallel_calls: false,
                events: tx,
            })
            .unwrap();
        let (text, done) = collect(rx);
        assert_eq!(text, "77");
        assert_eq!(done.finish, Finish::Stop);
        assert_eq!(done.completion_tokens, 2);
        assert_eq!(done.prompt_tokens, 2);
    }

    #[test]
    fn free_text_stops_at_a_stop_string_or_the_budget() {
        let (queue, _h) = spawn(backend(b"a"), 2).unwrap();
        let config = GenerateConfig {
            max_tokens: 5,
            ..GenerateConfig::default()
        };
        let (tx, rx) = unbounded_channel();
        queue
            .submit(Job {
                prompt: vec![1],
                grammar: None,
                config: config.clone(),
                stop: vec![],
                parallel_calls: false,
                events: tx,
            })
            .unwrap();
        let (text, done) = collect(rx);
        assert_eq!((text.as_str(), done.finish), ("aaaaa", Finish::Length));
        let (tx, rx) = unbounded_channel();
        queue
            .submit(Job {
                prompt: vec![1],
                grammar: None,
                config,
                stop: vec!["aaa".into()],
                parallel_calls: false,
                events: tx,
            })
            .unwrap();
        let (text, done) = collect(rx);
        assert_eq!((text.as_str(), done.finish), ("", Finish::Stop));
        assert_eq!(done.stop_sequence.as_deref(), Some("aaa"));
    }

    #[test]
    fn a_full_queue_refuses_and_a_gone_client_is_skipped() {
        // The worker is busy with a long job whose client left: the queue of one fills.
        let (queue, _h) = spawn(backend(b"a"), 1).unwrap();
        let long = GenerateConfig {
            max_tokens: 100_000,
            ..GenerateConfig::default()
        };
        let mut full = false;
        let mut receivers = Vec::new();
        for _ in 0..50 {
            let (tx, rx) = unbounded_channel();
            receivers.push(rx);
            let job = Job {
                prompt: vec![1],
                grammar: None,
                config: long.clone(),
                stop: vec![],
                parallel_calls: false,
                events: tx,
            };
            if queue.submit(job) == Err(SubmitError::Full) {
                full = true;
                break;
            }
        }
        assert!(full, "a queue of one never filled");
        // Every client leaves: the running job is cancelled, the queued ones skipped, and a
        // new job runs to completion.
        receivers.clear();
        let short = GenerateConfig {
            max_tokens: 3,
            ..GenerateConfig::default()
        };
        for _ in 0..500 {
            let (tx, rx) = unbounded_channel();
            let job = Job {
                prompt: vec![1],
                grammar: None,
                config: short.clone(),
                stop: vec![],
                parallel_calls: false,
                events: tx,
            };
            match queue.submit(job) {
                Ok(()) => {
                    let (text, done) = collect(rx);
                    assert_eq!((text.as_str(), done.finish), ("aaa", Finish::Length));
                    return;
                }
                Err(_) => std::thread::sleep(std::time::Duration::from_millis(10)),
            }
        }
        panic!("the worker never freed its queue after every client left");
    }

    /// Feeds `text` to a [`CallList`] in pieces of `split` bytes (at char boundaries).
    fn through_call_list(text: &str, split: usize) -> (String, bool) {
        let mut list = CallList::new(true);
        let mut out = String::new();
        let chars: Vec<char> = text.chars().collect();
        for piece in chars.chunks(split) {
            let (sent, repeated) = list.push(&piece.iter().collect::<String>());
            out.push_str(&sent);
            if repeated {
                return (out, true);
            }
        }
        out.push_str(&list.finish(""));
        (out, false)
    }

    #[test]
    fn a_repeated_call_ends_the_list_at_every_split() {
        let a = r#"{"name":"f","arguments":{"s":"} \" {","n":[1]}}"#;
        let b = r#"{"name":"f","arguments":{"s":"} \" {","n":[2]}}"#;
        let c = r#"{"name":"g","arguments":{"é":"ü"}}"#;
        for split in [1, 2, 3, 7, 500] {
            // A repeat of the first call after a different one: the list ends before it.
            let (out, repeated) = through_call_list(&format!("{a}\n{b}\n{a}\n{c}"), split);
            assert_eq!(
                (out.as_str(), repeated),
                (format!("{a}\n{b}").as_str(), true)
            );
            // Calls that only share a prefix with an earlier one are all sent.
            let all = format!("{a}\n{b}\n{c}");
            assert_eq!(through_call_list(&all, split), (all.clone(), false));
            // Cut by the budget while it could still be a repeat: sent at the end.
            let cut = format!("{a}\n{}", &a[..20]);
            assert_eq!(through_call_list(&cut, split), (cut.clone(), false));
            // Text under `auto` passes through.
            let text = "The sum {is} 3.\nThe sum {is} 3.";
            assert_eq!(through_call_list(text, split), (text.to_string(), false));
        }
        // While a call may still repeat an earlier one, it is held back.
        let mut list = CallList::new(true);
        assert_eq!(list.push(a), (a.to_string(), false));
        assert_eq!(list.push("\n{\"name\":\"f\""), (String::new(), false));
        assert_eq!(
            list.push(",\"x"),
            ("\n{\"name\":\"f\",\"x".to_string(), false)
        );
        // Off (at most one call): nothing is held or dropped.
        let mut off = CallList::new(false);
        let twice = format!("{a}\n{a}");
        assert_eq!(off.push(&twice), (twice.clone(), false));
    }

    #[test]
    fn stop_scanner_holds_back_a_possible_stop_prefix() {
        let mut s = StopScanner::new(vec!["END".into()]);
        assert_eq!(s.push("abcE"), ("abc".to_string(), false));
        assert_eq!(s.push("N"), (String::new(), false));
        assert_eq!(s.push("Dx"), (String::new(), true));
        assert_eq!(s.hit.as_deref(), Some("END"));
        let mut s = StopScanner::new(vec!["END".into()]);
        assert_eq!(s.push("xE"), ("x".to_string(), false));
        assert_eq!(s.finish("!"), "E!");
    }
}
