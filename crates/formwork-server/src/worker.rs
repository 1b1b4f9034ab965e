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

use std::sync::atomic::{AtomicBool, Ordering};
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
        self.tx.try_send(job).map_err(|e| match e {
            TrySendError::Full(_) => SubmitError::Full,
            TrySendError::Disconnected(_) => SubmitError::Stopped,
        })
    }
}

/// Starts the worker thread; at most `capacity` jobs wait behind the running one.
pub fn spawn<S: LogitsSource + Send + 'static>(
    backend: Backend<S>,
    capacity: usize,
) -> std::io::Result<(Queue, JoinHandle<()>)> {
    let (tx, rx) = sync_channel(capacity);
    let handle = std::thread::Builder::new()
        .name("formwork-decode".into())
        .spawn(move || run(backend, rx))?;
    Ok((Queue { tx }, handle))
}

fn run<S: LogitsSource>(backend: Backend<S>, rx: Receiver<Job>) {
    let cancel = Arc::new(AtomicBool::new(false));
    let source = Cancellable {
        inner: backend.source,
        cancel: cancel.clone(),
    };
    let mut generator = Generator::new(source, backend.vocab);
    for job in rx {
        // A client that left while queued costs nothing.
        if job.events.is_closed() {
            continue;
        }
        cancel.store(false, Ordering::Relaxed);
        run_job(&mut generator, &backend.stop, &cancel, job);
    }
}

fn run_job<S: LogitsSource>(
    generator: &mut Generator<Cancellable<S>>,
    stop_ids: &[TokenId],
    cancel: &AtomicBool,
    job: Job,
) {
    let mut utf8 = Utf8Stream::new();
    let mut scanner = StopScanner::new(job.stop);
    let mut produced = 0usize;
    let mut stopped = false;
    let events = &job.events;
    let mut on_bytes = |bytes: &[u8]| {
        produced += 1;
        if stopped {
            return;
        }
        let text = utf8.push(bytes);
        let (emit, hit) = scanner.push(&text);
        if !emit.is_empty() && events.send(Event::Text(emit)).is_err() {
            cancel.store(true, Ordering::Relaxed);
        }
        if hit {
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
            let rest = scanner.finish(&utf8.finish());
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
            })
        }
        Err(e) => {
            // The source failed mid-pass: its cache no longer matches what the generator
            // recorded.
            generator.forget_cache();
            if stopped {
                Ok(Finished {
                    finish: Finish::Stop,
                    closed_early: false,
                    prompt_tokens: job.prompt.len(),
                    completion_tokens: produced,
                    stop_sequence: scanner.hit.clone(),
                })
            } else {
                Err(e)
            }
        }
    };
    let _ = events.send(Event::Done(done));
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
