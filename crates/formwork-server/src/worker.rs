//! The decode worker: one thread that owns the model and decodes the requests in flight
//! together, continuous batching through the engine's [`BatchGenerator`].
//!
//! Owns the bounded job queue (a full queue is refused at once, never an unbounded backlog),
//! the batch (up to `parallel` jobs in flight, each constrained under its compiled grammar or
//! free text with stop strings; a job joins at the next step with room and leaves as soon as
//! it ends, so a short request never waits for a long one), streaming each job's new text
//! after every step, and stopping a job whose client has gone (its channel is closed): it is
//! cancelled before the next forward pass and its sequence freed at once. Does not own HTTP or
//! the wire format.
//!
//! # Loop
//! ```text
//! admit queued jobs while in flight < parallel (blocking only when idle)
//! cancel the jobs whose client left
//! step(): one batched forward pass, one token (+ forced tokens) per job
//! per job: new output bytes -> UTF-8 -> repeated-call policy -> stop strings -> Text events;
//!          a stop string or a repeated call cancels it (Done, finish `stop`)
//! per finished job: the rest of its text, then Done
//! ```
//!
//! Generic over the engine's [`BatchLogitsSource`], so tests drive it with a fake model; a
//! model that cannot batch runs through [`OneAtATime`] with `parallel` 1.
//!
//! May use: nothing else in the crate.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TryRecvError, TrySendError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use formwork_core::generate::batch::{self, BatchGenerator, BatchLogitsSource, BatchRequest};
use formwork_core::generate::{
    GenerateConfig, Generation, LogitsSource, SourceError, StopReason, ThinkConfig, Thought,
    Utf8Stream,
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
pub struct JobEnd {
    /// Why it ended.
    pub finish: Finish,
    /// Whether budget-aware closing ended a valid output early.
    pub closed_early: bool,
    /// Prompt tokens.
    pub prompt_tokens: usize,
    /// Generated tokens (the reasoning's included).
    pub completion_tokens: usize,
    /// Of those, tokens of reasoning before the answer (0 when the job did not reason).
    pub reasoning_tokens: usize,
    /// The stop string the output was cut at, if one was.
    pub stop_sequence: Option<String>,
    /// Whether a tool call identical to an earlier one ended the list of calls (and was
    /// dropped; see [`CallList`]).
    pub duplicate_call_dropped: bool,
    /// The constraints a lenient server did not enforce, as the extension lists them (filled
    /// by the HTTP layer, which knows the request; empty from the worker).
    pub dropped_constraints: Vec<serde_json::Value>,
}

impl JobEnd {
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
    /// Reasoning before the answer (complete UTF-8), all of it sent before any `Text`, only
    /// for a job that reasons ([`Job::think`]); never part of the answer.
    Reasoning(String),
    /// The raw tokens of one step, each as text and whether the grammar forced it (only for
    /// a job that asked, [`Job::tokens`]; sent before that step's `Text`). Raw: a repeated
    /// call or the text after a stop string is still here, though `Text` drops it.
    Tokens(Vec<Piece>),
    /// The end, or the engine's error.
    Done(Result<JobEnd, String>),
}

/// One generated token as [`Event::Tokens`] reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Piece {
    /// Its text: the token's bytes completed to UTF-8 (a token ending inside a character
    /// gives its bytes to the next piece, so a piece may be empty).
    pub text: String,
    /// Forced by the grammar (fast-forwarded, or appended by the budget's closing), not
    /// sampled by the model.
    pub forced: bool,
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
    /// Whether to report each step's tokens, forced apart from sampled ([`Event::Tokens`]).
    pub tokens: bool,
    /// Reason first (a constrained job only): free text until the trigger, a stop token or
    /// the budget, sent as [`Event::Reasoning`], then the answer under the grammar
    /// ([`BatchGenerator::push_thinking`]). `config.max_tokens` bounds the answer alone.
    pub think: Option<ThinkConfig>,
    /// Where the events go. Dropping the receiver cancels the job.
    pub events: UnboundedSender<Event>,
}

/// A single-sequence model as a batch source of one sequence at a time: each sequence is its
/// length, fed at that position into the model's one cache (feeding a new sequence overwrites
/// the cache from position 0). Exact only while one sequence is alive, so the worker over it
/// must run with `parallel` 1 (and no shared prefix): for a model whose runtime cannot batch.
#[derive(Debug)]
pub struct OneAtATime<S>(pub S);

/// The error of a batch of more than one sequence through [`OneAtATime`].
#[derive(Debug, thiserror::Error)]
#[error("this model decodes one sequence at a time, the batch had {0}")]
struct NotBatched(usize);

impl<S: LogitsSource> BatchLogitsSource for OneAtATime<S> {
    type Sequence = usize;

    fn new_sequence(&mut self) -> usize {
        0
    }

    fn forward_batch(
        &mut self,
        batch: &mut [(&mut usize, &[u32])],
    ) -> Result<Vec<Vec<f32>>, SourceError> {
        let [(len, tokens)] = batch else {
            return Err(Box::new(NotBatched(batch.len())));
        };
        let logits = self.0.forward(tokens, **len)?;
        **len += tokens.len();
        Ok(vec![logits])
    }

    fn fork(&mut self, seq: &usize, len: usize) -> usize {
        len.min(*seq)
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
    parallel: usize,
}

/// Jobs waiting and decoding, counted by the queue and the worker, and how long a job takes.
#[derive(Debug, Default)]
struct Counts {
    waiting: AtomicUsize,
    running: AtomicUsize,
    /// A moving average of the time from a job's admission to its end, in microseconds (0:
    /// no job has ended yet): what a waiting job's wait is estimated from.
    service_us: AtomicU64,
}

impl Counts {
    /// Folds one job's time into the moving average (weight 1/8: the last few dozen jobs).
    fn record(&self, took: Duration) {
        let us = took.as_micros().min(u128::from(u64::MAX)) as u64;
        let old = self.service_us.load(Ordering::Relaxed);
        let new = if old == 0 { us } else { old - old / 8 + us / 8 };
        self.service_us.store(new.max(1), Ordering::Relaxed);
    }
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
    /// The job would wait about `estimate` before it starts, longer than it may.
    TooLong {
        /// The estimated wait: the jobs ahead of it, `parallel` at a time, each taking the
        /// recent average job time.
        estimate: Duration,
    },
    /// The worker has stopped.
    Stopped,
}

impl Queue {
    /// Queues `job` without waiting.
    ///
    /// # Errors
    /// [`SubmitError::Full`] when `capacity` jobs already wait.
    pub fn submit(&self, job: Job) -> Result<(), SubmitError> {
        self.submit_within(job, None)
    }

    /// Queues `job` unless it would wait longer than `max_wait` before decoding starts, as
    /// estimated from the jobs ahead of it and the recent average job time (a job is never
    /// refused before any job has ended: there is no estimate yet).
    ///
    /// # Errors
    /// [`SubmitError::TooLong`] for a wait over `max_wait`; as [`submit`](Self::submit).
    pub fn submit_within(&self, job: Job, max_wait: Option<Duration>) -> Result<(), SubmitError> {
        if let Some(limit) = max_wait {
            let estimate = self.estimated_wait();
            if estimate > limit {
                return Err(SubmitError::TooLong { estimate });
            }
        }
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

    /// How long a job queued now would wait before it starts: every running slot busy and
    /// the jobs already waiting ahead, `parallel` at a time, each the recent average job time.
    pub fn estimated_wait(&self) -> Duration {
        let service = Duration::from_micros(self.load.service_us.load(Ordering::Relaxed));
        let running = self.load.running.load(Ordering::SeqCst);
        let waiting = self.load.waiting.load(Ordering::SeqCst);
        if running + waiting < self.parallel {
            return Duration::ZERO;
        }
        // Rounds of `parallel` jobs ahead of this one, the running round counted as half done.
        let rounds = (waiting / self.parallel) as u32;
        service * rounds + service / 2
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

/// Starts the worker thread, decoding up to `parallel` jobs together (at least 1); at most
/// `capacity` jobs wait behind them. Prompts are fed whole ([`spawn_with`] chunks them).
pub fn spawn<S>(
    backend: Backend<S>,
    capacity: usize,
    parallel: usize,
) -> std::io::Result<(Queue, JoinHandle<()>)>
where
    S: BatchLogitsSource + Send + 'static,
{
    spawn_with(backend, capacity, parallel, None)
}

/// As [`spawn`], with chunked prefill: while jobs are decoding, a pass feeds at most
/// `prefill_chunk` tokens of new prompts beside their steps
/// ([`BatchGenerator::set_prefill_chunk`]), so a long prompt does not stop running streams.
pub fn spawn_with<S>(
    backend: Backend<S>,
    capacity: usize,
    parallel: usize,
    prefill_chunk: Option<usize>,
) -> std::io::Result<(Queue, JoinHandle<()>)>
where
    S: BatchLogitsSource + Send + 'static,
{
    let (tx, rx) = sync_channel(capacity);
    let load = Arc::new(Counts::default());
    let counts = load.clone();
    let handle = std::thread::Builder::new()
        .name("formwork-decode".into())
        .spawn(move || run(backend, rx, &counts, parallel.max(1), prefill_chunk))?;
    Ok((
        Queue {
            tx,
            load,
            parallel: parallel.max(1),
        },
        handle,
    ))
}

/// The token report of a job that asked for one ([`Job::tokens`]): which of each step's new
/// tokens was sampled. A step appends its sampled token (if any) and then the tokens forced
/// after it (fast-forward, the closing's path); the first step is preceded by the grammar's
/// forced start, whose length is computed beside the batch on a fresh matcher of the same
/// grammar (the same computation, the same budget).
struct TokenReport {
    /// Tokens already reported.
    seen: usize,
    /// Sampled tokens already counted.
    sampled: usize,
    /// The forced start's length, until the first report.
    start: Option<usize>,
    utf8: Utf8Stream,
}

impl TokenReport {
    fn new(job: &Job) -> Result<Self, String> {
        let start = match &job.grammar {
            Some(g) if job.config.fast_forward => {
                let mut m = Matcher::new(g.clone()).map_err(|e| e.to_string())?;
                let forced = m.compute_forced_tokens().map_err(|e| e.to_string())?;
                forced.len().min(job.config.max_tokens)
            }
            _ => 0,
        };
        Ok(TokenReport {
            seen: 0,
            sampled: 0,
            start: Some(start),
            utf8: Utf8Stream::new(),
        })
    }

    /// The pieces of the tokens `g` gained since the last report (one step's).
    fn pieces(&mut self, g: &Generation, vocab: &dyn Vocab) -> Vec<Piece> {
        let new = &g.tokens[self.seen.min(g.tokens.len())..];
        let sampled_at = (g.sampled_tokens > self.sampled).then(|| self.start.unwrap_or(0));
        self.start = None;
        self.seen = g.tokens.len();
        self.sampled = g.sampled_tokens;
        new.iter()
            .enumerate()
            .map(|(i, &t)| Piece {
                text: self.utf8.push(vocab.token_bytes(t)),
                forced: sampled_at != Some(i),
            })
            .collect()
    }
}

/// A job in flight: its channel and its text pipeline.
struct Running {
    job: Job,
    /// When it was admitted (the job times [`Counts::record`] averages).
    admitted: Instant,
    /// Output bytes already taken from the batch.
    taken: usize,
    utf8: Utf8Stream,
    calls: CallList,
    scanner: StopScanner,
    report: Option<TokenReport>,
    /// Reasoning bytes already taken from the batch, and their UTF-8 stream.
    reasoning_taken: usize,
    reasoning_utf8: Utf8Stream,
}

impl Running {
    fn new(job: Job, report: Option<TokenReport>) -> Self {
        Running {
            admitted: Instant::now(),
            taken: 0,
            utf8: Utf8Stream::new(),
            calls: CallList::new(job.parallel_calls),
            scanner: StopScanner::new(job.stop.clone()),
            report,
            reasoning_taken: 0,
            reasoning_utf8: Utf8Stream::new(),
            job,
        }
    }

    /// Sends the reasoning `shown` (all of it so far) adds to what was sent.
    fn reason(&mut self, shown: &[u8]) {
        if shown.len() > self.reasoning_taken {
            let text = self.reasoning_utf8.push(&shown[self.reasoning_taken..]);
            self.reasoning_taken = shown.len();
            if !text.is_empty() {
                let _ = self.job.events.send(Event::Reasoning(text));
            }
        }
    }

    /// Sends the rest of the reasoning, once it has ended (`thought`); its tokens.
    fn reasoned(&mut self, thought: Option<&Thought>) -> usize {
        let Some(t) = thought else {
            return 0;
        };
        self.reason(&t.text);
        let rest = self.reasoning_utf8.finish();
        if !rest.is_empty() {
            let _ = self.job.events.send(Event::Reasoning(rest));
        }
        t.tokens
    }

    /// Sends the tokens `g` gained since the last report, if the job asked.
    fn report(&mut self, g: &Generation, vocab: &dyn Vocab) {
        if let Some(r) = &mut self.report {
            let pieces = r.pieces(g, vocab);
            if !pieces.is_empty() {
                let _ = self.job.events.send(Event::Tokens(pieces));
            }
        }
    }

    /// Pushes new output bytes through the pipeline and sends what may be sent; `true` when
    /// a stop string or a repeated call ended the output.
    fn push(&mut self, bytes: &[u8]) -> bool {
        self.taken += bytes.len();
        let (text, repeated) = self.calls.push(&self.utf8.push(bytes));
        let (emit, hit) = self.scanner.push(&text);
        if !emit.is_empty() {
            // A client that left is cancelled before the next step.
            let _ = self.job.events.send(Event::Text(emit));
        }
        hit || repeated
    }

    /// Ended on purpose at a stop string or a repeated call after `tokens` tokens of answer
    /// and `reasoning` tokens of reasoning: the output before it is complete (a list of calls
    /// ends after any call).
    fn stopped(self, tokens: usize, reasoning: usize) {
        let done = JobEnd {
            finish: Finish::Stop,
            closed_early: false,
            prompt_tokens: self.job.prompt.len(),
            completion_tokens: tokens + reasoning,
            reasoning_tokens: reasoning,
            stop_sequence: self.scanner.hit.clone(),
            duplicate_call_dropped: self.calls.repeated,
            dropped_constraints: Vec::new(),
        };
        let _ = self.job.events.send(Event::Done(Ok(done)));
    }

    /// Ended by the engine: sends the rest of the reasoning (`thought`, if it reasoned), of
    /// the text, and the end.
    fn finished(
        mut self,
        result: Result<Generation, String>,
        thought: Option<&Thought>,
        vocab: &dyn Vocab,
    ) {
        let g = match result {
            Ok(g) => g,
            Err(e) => {
                let _ = self.job.events.send(Event::Done(Err(e)));
                return;
            }
        };
        let reasoning = self.reasoned(thought);
        self.report(&g, vocab);
        if self.push(&g.bytes[self.taken.min(g.bytes.len())..]) {
            return self.stopped(g.tokens_len(), reasoning);
        }
        let rest = self.scanner.finish(&self.calls.finish(&self.utf8.finish()));
        if !rest.is_empty() {
            let _ = self.job.events.send(Event::Text(rest));
        }
        let finish = match g.stop {
            StopReason::MaxTokens if !g.accepted || self.job.grammar.is_none() => Finish::Length,
            _ => Finish::Stop,
        };
        let done = JobEnd {
            finish,
            closed_early: g.closed_early,
            // The prompt as sent, without the reasoning the answer's prompt counts.
            prompt_tokens: self.job.prompt.len(),
            completion_tokens: g.tokens_len() + reasoning,
            reasoning_tokens: reasoning,
            stop_sequence: self.scanner.hit.clone(),
            duplicate_call_dropped: false,
            dropped_constraints: Vec::new(),
        };
        let _ = self.job.events.send(Event::Done(Ok(done)));
    }
}

fn run<S: BatchLogitsSource>(
    backend: Backend<S>,
    rx: Receiver<Job>,
    counts: &Counts,
    parallel: usize,
    prefill_chunk: Option<usize>,
) {
    let vocab = backend.vocab.clone();
    let mut batch = BatchGenerator::new(backend.source, backend.vocab, parallel);
    batch.set_prefill_chunk(prefill_chunk);
    let mut running: HashMap<usize, Running> = HashMap::new();
    let mut open = true;
    loop {
        // Admit up to `parallel` jobs (so the generator's own queue stays empty and every
        // job taken is in flight); block only when nothing is.
        while open && running.len() < parallel {
            let job = if running.is_empty() {
                match rx.recv() {
                    Ok(job) => job,
                    Err(_) => {
                        open = false;
                        break;
                    }
                }
            } else {
                match rx.try_recv() {
                    Ok(job) => job,
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => {
                        open = false;
                        break;
                    }
                }
            };
            counts.waiting.fetch_sub(1, Ordering::SeqCst);
            // A client that left while queued costs nothing.
            if job.events.is_closed() {
                continue;
            }
            let report = match job.tokens.then(|| TokenReport::new(&job)).transpose() {
                Ok(r) => r,
                Err(e) => {
                    let _ = job.events.send(Event::Done(Err(e)));
                    continue;
                }
            };
            let (prompt, config) = (job.prompt.clone(), job.config.clone());
            let id = match &job.grammar {
                Some(g) => match Matcher::new(g.clone()) {
                    Ok(matcher) => {
                        let request = BatchRequest {
                            prompt,
                            matcher,
                            config,
                        };
                        match &job.think {
                            Some(t) => {
                                batch.push_thinking(request, t.clone(), backend.stop.clone())
                            }
                            None => batch.push(request),
                        }
                    }
                    Err(e) => {
                        let _ = job.events.send(Event::Done(Err(e.to_string())));
                        continue;
                    }
                },
                None => batch.push_free(prompt, backend.stop.clone(), config),
            };
            running.insert(id, Running::new(job, report));
        }
        // Clients that left: their sequences go now.
        running.retain(|&id, r| {
            let gone = r.job.events.is_closed();
            if gone {
                batch.cancel(id);
            }
            !gone
        });
        counts.running.store(running.len(), Ordering::SeqCst);
        if running.is_empty() {
            if open {
                continue;
            }
            return;
        }
        let finished = match batch.step() {
            Ok(f) => f,
            Err(e) => {
                // Every job in flight was dropped with the failed pass.
                let e = e.to_string();
                for (id, r) in running.drain() {
                    batch.cancel(id);
                    r.finished(Err(e.clone()), None, &*vocab);
                }
                counts.running.store(0, Ordering::SeqCst);
                continue;
            }
        };
        for batch::Finished {
            id,
            result,
            thought,
            ..
        } in finished
        {
            if let Some(r) = running.remove(&id) {
                counts.record(r.admitted.elapsed());
                r.finished(result.map_err(|e| e.to_string()), thought.as_ref(), &*vocab);
            }
        }
        let mut ended = Vec::new();
        for (id, out) in batch.outputs() {
            let Some(r) = running.get_mut(&id) else {
                continue;
            };
            if let Some(shown) = batch.reasoning(id) {
                r.reason(shown);
            }
            if let Some(g) = batch.generation(id) {
                r.report(g, &*vocab);
            }
            if out.len() > r.taken && r.push(&out[r.taken..]) {
                ended.push(id);
            }
        }
        for id in ended {
            let tokens = batch.tokens_len(id).unwrap_or(0);
            let reasoning = batch.thought(id).map_or(0, |t| t.tokens);
            batch.cancel(id);
            if let Some(r) = running.remove(&id) {
                counts.record(r.admitted.elapsed());
                r.stopped(tokens, reasoning);
            }
        }
        counts.running.store(running.len(), Ordering::SeqCst);
    }
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

    fn collect(mut rx: tokio::sync::mpsc::UnboundedReceiver<Event>) -> (String, JobEnd) {
        let mut text = String::new();
        while let Some(e) = rx.blocking_recv() {
            match e {
                Event::Text(t) => text.push_str(&t),
                Event::Tokens(_) | Event::Reasoning(_) => {}
                Event::Done(d) => return (text, d.unwrap()),
            }
        }
        panic!("no Done event");
    }

    /// The queue estimates a new job's wait from the jobs ahead of it and the moving average of
    /// job times, and refuses at once a job that would wait longer than it may (no worker
    /// here: the counts are set as the worker would leave them).
    #[test]
    fn a_wait_over_the_limit_is_refused_at_once_with_its_estimate() {
        let (tx, rx) = sync_channel(8);
        let queue = Queue {
            tx,
            load: Arc::new(Counts::default()),
            parallel: 2,
        };
        let free = || Job {
            prompt: vec![1],
            grammar: None,
            config: GenerateConfig::default(),
            stop: vec![],
            parallel_calls: false,
            tokens: false,
            think: None,
            events: unbounded_channel().0,
        };
        let limit = Some(Duration::from_secs(20));
        queue.load.running.store(2, Ordering::SeqCst);
        queue.load.waiting.store(4, Ordering::SeqCst);
        // No job has ended yet: no estimate, nothing refused.
        assert_eq!(queue.estimated_wait(), Duration::ZERO);
        queue.submit_within(free(), limit).unwrap();
        assert_eq!(queue.load().waiting, 5);
        // Jobs of 10 s: 5 waiting, 2 at a time, is two rounds ahead plus half the running one.
        queue.load.record(Duration::from_secs(10));
        assert_eq!(queue.estimated_wait(), Duration::from_secs(25));
        assert_eq!(
            queue.submit_within(free(), limit),
            Err(SubmitError::TooLong {
                estimate: Duration::from_secs(25)
            })
        );
        assert_eq!(queue.load().waiting, 5, "a refused job is not counted");
        // Without a limit it waits; with free slots it starts at once.
        queue.submit_within(free(), None).unwrap();
        queue.load.running.store(0, Ordering::SeqCst);
        queue.load.waiting.store(1, Ordering::SeqCst);
        assert_eq!(queue.estimated_wait(), Duration::ZERO);
        // The average follows recent jobs: 10 s, then 2 s jobs.
        for _ in 0..40 {
            queue.load.record(Duration::from_secs(2));
        }
        let us = queue.load.service_us.load(Ordering::Relaxed);
        assert!((2_000_000..2_100_000).contains(&us), "{us}");
        drop(rx);
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
        let (queue, _h) = spawn(b, 2, 4).unwrap();
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
                tokens: false,
                think: None,
                events: tx,
            })
            .unwrap();
        let (text, done) = collect(rx);
        assert_eq!(text, "77");
        assert_eq!(done.finish, Finish::Stop);
        assert_eq!(done.completion_tokens, 2);
        assert_eq!(done.prompt_tokens, 2);
    }

    /// A job's text and its reported tokens (text, forced).
    fn collect_tokens(
        mut rx: tokio::sync::mpsc::UnboundedReceiver<Event>,
    ) -> (String, Vec<(String, bool)>) {
        let (mut text, mut tokens) = (String::new(), Vec::new());
        while let Some(e) = rx.blocking_recv() {
            match e {
                Event::Text(t) => text.push_str(&t),
                Event::Tokens(p) => tokens.extend(p.into_iter().map(|p| (p.text, p.forced))),
                Event::Reasoning(_) => {}
                Event::Done(d) => {
                    d.unwrap();
                    return (text, tokens);
                }
            }
        }
        panic!("no Done event");
    }

    #[test]
    fn reported_tokens_tell_forced_from_sampled_as_the_generator_counts_them() {
        let schema = serde_json::json!({"type": "object", "additionalProperties": false,
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"]});
        let b = backend(b"},7");
        let env = TokEnv::new(b.vocab.clone());
        let g = formwork_core::compile(&schema, &Default::default())
            .unwrap()
            .grammar;
        let g = Arc::new(CompiledGrammar::with_env(g, &env, Limits::default()).unwrap());
        let (queue, _h) = spawn(b, 4, 4).unwrap();
        let job = |max_tokens: usize, events| Job {
            prompt: vec![1, 2],
            grammar: Some(g.clone()),
            config: GenerateConfig {
                max_tokens,
                ..GenerateConfig::default()
            },
            stop: vec![],
            parallel_calls: false,
            tokens: true,
            think: None,
            events,
        };
        // The forced start, then per step the sampled token and what is forced after it.
        let (tx, rx) = unbounded_channel();
        queue.submit(job(32, tx)).unwrap();
        let (text, tokens) = collect_tokens(rx);
        assert_eq!(text, r#"{"a":7,"b":7}"#);
        let runs: Vec<(String, bool)> = tokens.iter().fold(Vec::new(), |mut runs, (t, f)| {
            match runs.last_mut() {
                Some((run, forced)) if forced == f => run.push_str(t),
                _ => runs.push((t.clone(), *f)),
            }
            runs
        });
        let want = [
            (r#"{"a":"#, true),
            ("7,", false),
            (r#""b":"#, true),
            ("7}", false),
        ];
        let want: Vec<(String, bool)> = want.iter().map(|&(t, f)| (t.into(), f)).collect();
        assert_eq!(runs, want);
        // Under every budget (closing appends forced tokens at the end), the same counts as
        // the sequential generator's, and the same text.
        for max_tokens in 6..14 {
            let mut generator =
                formwork_core::Generator::new(backend(b"},7").source, env.vocab().clone());
            let mut m = Matcher::new(g.clone()).unwrap();
            let cfg = job(max_tokens, unbounded_channel().0).config;
            let want = generator
                .generate(&[1, 2], &mut m, &cfg, &mut |_| {})
                .unwrap();
            let (tx, rx) = unbounded_channel();
            queue.submit(job(max_tokens, tx)).unwrap();
            let (_, tokens) = collect_tokens(rx);
            let text: String = tokens.iter().map(|(t, _)| t.as_str()).collect();
            let forced = tokens.iter().filter(|(_, f)| *f).count();
            assert_eq!(text, want.text(), "budget {max_tokens}");
            assert_eq!(forced, want.forced_tokens, "budget {max_tokens}");
            assert_eq!(
                tokens.len() - forced,
                want.sampled_tokens,
                "budget {max_tokens}"
            );
        }
    }

    #[test]
    fn free_text_stops_at_a_stop_string_or_the_budget() {
        let (queue, _h) = spawn(backend(b"a"), 2, 4).unwrap();
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
                tokens: false,
                think: None,
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
                tokens: false,
                think: None,
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
        let (queue, _h) = spawn(backend(b"a"), 1, 1).unwrap();
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
                tokens: false,
                think: None,
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
                tokens: false,
                think: None,
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

    /// The worker counts nothing running or waiting within a second (it stores its count
    /// after sending the last `Done`).
    fn assert_idle(queue: &Queue) {
        for _ in 0..100 {
            if queue.load()
                == (Load {
                    running: 0,
                    waiting: 0,
                })
            {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        panic!("still busy: {:?}", queue.load());
    }

    /// A batched fake that takes `delay` per pass and records each pass's batch size. Its
    /// favourite byte depends on the sequence's length (`a` + len % 26, then the digit
    /// len % 10), so requests with prompts of different lengths write different outputs.
    struct Recording {
        sizes: Arc<std::sync::Mutex<Vec<usize>>>,
        delay: std::time::Duration,
    }

    impl BatchLogitsSource for Recording {
        type Sequence = usize;

        fn new_sequence(&mut self) -> usize {
            0
        }

        fn forward_batch(
            &mut self,
            batch: &mut [(&mut usize, &[u32])],
        ) -> Result<Vec<Vec<f32>>, SourceError> {
            std::thread::sleep(self.delay);
            self.sizes.lock().unwrap().push(batch.len());
            Ok(batch
                .iter_mut()
                .map(|(len, tokens)| {
                    **len += tokens.len();
                    let mut logits = vec![0.0f32; 257];
                    logits[usize::from(b'a') + **len % 26] = 10.0;
                    logits[usize::from(b'0') + **len % 10] = 9.0;
                    logits
                })
                .collect())
        }

        fn fork(&mut self, seq: &usize, len: usize) -> usize {
            len.min(*seq)
        }
    }

    fn recording(delay_ms: u64) -> (Backend<Recording>, Arc<std::sync::Mutex<Vec<usize>>>) {
        let sizes = Arc::new(std::sync::Mutex::new(Vec::new()));
        let source = Recording {
            sizes: sizes.clone(),
            delay: std::time::Duration::from_millis(delay_ms),
        };
        let backend = Backend {
            source,
            vocab: Arc::new(SyntheticVocab::byte_level()),
            stop: vec![TokenId(256)],
        };
        (backend, sizes)
    }

    /// Job `i` of the batching tests: prompts of different lengths; even ones free text
    /// (odd ones with a stop string), every third one an integer under a grammar.
    fn varied_job(
        i: usize,
        integer: &Arc<CompiledGrammar>,
    ) -> (Job, tokio::sync::mpsc::UnboundedReceiver<Event>) {
        let (tx, rx) = unbounded_channel();
        let job = Job {
            prompt: vec![1; i + 1],
            grammar: (i % 3 == 2).then(|| integer.clone()),
            config: GenerateConfig {
                max_tokens: 6 + i,
                ..GenerateConfig::default()
            },
            stop: if i % 2 == 1 { vec!["f".into()] } else { vec![] },
            parallel_calls: false,
            tokens: false,
            think: None,
            events: tx,
        };
        (job, rx)
    }

    /// Issue 18 item 4: concurrent requests are decoded in one batch (the fake sees passes
    /// of all of them), and each ends exactly as it ends alone (text, finish, counts, stop
    /// string), free text and constrained alike.
    #[test]
    fn concurrent_jobs_share_a_batch_and_equal_their_solo_results() {
        let (b, _) = recording(0);
        let env = TokEnv::new(b.vocab.clone());
        let g =
            formwork_core::compile(&serde_json::json!({"type": "integer"}), &Default::default())
                .unwrap()
                .grammar;
        let integer = Arc::new(CompiledGrammar::with_env(g, &env, Limits::default()).unwrap());
        let n = 6;
        // Alone: one job at a time through a worker of one.
        let (solo_queue, _h) = spawn(b, 8, 1).unwrap();
        let solo: Vec<_> = (0..n)
            .map(|i| {
                let (job, rx) = varied_job(i, &integer);
                solo_queue.submit(job).unwrap();
                collect(rx)
            })
            .collect();
        // Together: every job submitted at once to a worker of `n`.
        let (b, sizes) = recording(5);
        let (queue, _h) = spawn(b, 8, n).unwrap();
        let receivers: Vec<_> = (0..n)
            .map(|i| {
                let (job, rx) = varied_job(i, &integer);
                queue.submit(job).unwrap();
                rx
            })
            .collect();
        let together: Vec<_> = receivers.into_iter().map(collect).collect();
        assert_eq!(together, solo);
        // Outputs differ (else equality would not show that each got its own logits).
        assert!(solo.iter().any(|r| r.0 != solo[0].0), "{solo:?}");
        assert!(solo.iter().any(|r| r.1.stop_sequence.is_some()), "{solo:?}");
        let sizes = sizes.lock().unwrap();
        assert_eq!(sizes.iter().max(), Some(&n), "batch sizes {sizes:?}");
        assert_idle(&queue);
    }

    /// Issue 18 item 4: a job whose client left is cancelled and its slot freed while the
    /// others keep decoding: with two slots, a long job and a cancelled one, a third job
    /// runs to its end while the long one is still decoding, and the long one's output is
    /// unchanged.
    #[test]
    fn a_cancelled_job_frees_its_slot_while_the_others_continue() {
        let (b, sizes) = recording(2);
        let (queue, _h) = spawn(b, 4, 2).unwrap();
        let job = |max_tokens, events| Job {
            prompt: vec![1],
            grammar: None,
            config: GenerateConfig {
                max_tokens,
                ..GenerateConfig::default()
            },
            stop: vec![],
            parallel_calls: false,
            tokens: false,
            think: None,
            events,
        };
        let (tx, mut long) = unbounded_channel();
        queue.submit(job(150, tx)).unwrap();
        let (tx, mut gone) = unbounded_channel();
        queue.submit(job(100_000, tx)).unwrap();
        // The leaving client reads one piece, then goes.
        assert!(matches!(gone.blocking_recv(), Some(Event::Text(_))));
        drop(gone);
        let (tx, third) = unbounded_channel();
        queue.submit(job(5, tx)).unwrap();
        let (text, done) = collect(third);
        assert_eq!((text.len(), done.finish), (5, Finish::Length));
        // The long job is still decoding: it has not ended yet.
        let mut long_text = String::new();
        loop {
            match long.try_recv() {
                Ok(Event::Text(t)) => long_text.push_str(&t),
                Ok(Event::Tokens(_) | Event::Reasoning(_)) => {}
                Ok(Event::Done(d)) => panic!("the long job ended first: {d:?}"),
                Err(_) => break,
            }
        }
        let (rest, done) = collect(long);
        long_text.push_str(&rest);
        let want: String = (1..151)
            .map(|len| char::from(b'a' + (len % 26) as u8))
            .collect();
        assert_eq!((long_text, done.finish), (want, Finish::Length));
        assert!(sizes.lock().unwrap().iter().all(|&s| s <= 2));
        assert_idle(&queue);
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
