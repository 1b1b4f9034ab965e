//! Think, then answer: a lazily triggered constraint. The model first writes free text (its
//! reasoning), unconstrained, until it writes a trigger string, emits a stop token, or spends
//! the thinking budget; then the grammar takes over and the answer is decoded under it exactly
//! as [`Generator::generate`] decodes (masking, fast-forward, budget-aware closing).
//!
//! Owns the free phase and the hand-over: where the reasoning ends (the first occurrence of the
//! trigger in its bytes), what the model sees before the answer (the prompt, the reasoning's
//! tokens, then the trigger: its own tokens when the model wrote it, the trigger appended when
//! the budget or a stop token ended the reasoning), and the split of the result into the
//! reasoning text and the answer. A prompt that opens a reasoning block (`<think>`) is closed
//! the same way: the trigger is the closing tag, written by the model or appended.
//!
//! Does not own the answer's decode loop (the parent module's) nor any prompt wording: what
//! tells the model to reason, and which trigger to write, is the caller's (extraction adds an
//! instruction naming the trigger).

use super::{
    empty_generation, sample_free, GenerateConfig, GenerateError, Generation, Generator,
    LogitsSource,
};
use crate::matcher::Matcher;
use crate::sampler::Sampler;
use crate::toktrie::{TokenId, Vocab};

/// How the free reasoning before the constrained answer is bounded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThinkConfig {
    /// Most tokens of reasoning. When they are spent the trigger is appended and the answer
    /// starts. 0 appends the trigger at once (no reasoning).
    pub budget: usize,
    /// The string that ends the reasoning when the model writes it (for example `"Answer:"`,
    /// or `"</think>"` when the prompt opens a `<think>` block). Must not be empty. What the
    /// model writes after it, in the same token, is dropped: the answer starts right after
    /// the trigger, under the grammar.
    pub trigger: String,
}

impl ThinkConfig {
    /// `budget` tokens of reasoning ended by `trigger`.
    pub fn new(budget: usize, trigger: impl Into<String>) -> Self {
        ThinkConfig {
            budget,
            trigger: trigger.into(),
        }
    }

    /// Most sequence positions the reasoning can take before the answer: the budget, then
    /// (when the budget ends it) a newline and the trigger, at most one token per byte. What
    /// a caller reserves for it (KV cache, context) on top of the prompt and the answer.
    pub fn max_positions(&self) -> usize {
        self.budget + self.trigger.len() + 1
    }
}

/// What ended the reasoning.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ThinkEnd {
    /// The model wrote the trigger.
    Trigger,
    /// The thinking budget was spent; the trigger was appended.
    Budget,
    /// The model emitted a stop token (end of turn); the trigger was appended instead of it.
    Stop,
}

/// The free phase of a [`Generator::generate_thinking`] call.
#[derive(Clone, Debug, PartialEq)]
pub struct Thought {
    /// The reasoning text the model wrote, up to (not including) the trigger.
    pub text: Vec<u8>,
    /// Tokens the model generated while reasoning (the one that completed the trigger
    /// included; an appended trigger not counted).
    pub tokens: usize,
    /// What ended it.
    pub end: ThinkEnd,
    /// The tokens the answer was conditioned on after the prompt: the reasoning, then the
    /// trigger (as the model wrote it, or appended).
    pub context: Vec<TokenId>,
}

impl Thought {
    /// The reasoning as text (invalid UTF-8 replaced).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.text).into_owned()
    }
}

/// The result of thinking, then answering.
#[derive(Clone, Debug, PartialEq)]
pub struct ThinkGeneration {
    /// The reasoning (never part of the answer).
    pub thought: Thought,
    /// The constrained answer, as [`Generator::generate`] returns it; its `prompt_tokens`
    /// count the reasoning and the trigger too.
    pub answer: Generation,
}

impl<S: LogitsSource> Generator<S> {
    /// Lets the model reason freely, then answers under `matcher`: free text until
    /// `think.trigger` is written, a token of `stop` is sampled, or `think.budget` tokens are
    /// spent (the trigger is then appended), then [`generate`](Self::generate) from the
    /// prompt, the reasoning and the trigger, with `cfg` (its `max_tokens` bounds the answer
    /// alone). The reasoning's bytes go to `on_thought` as they come, the answer's to
    /// `on_bytes`. The reasoning is sampled with `cfg`'s sampling, seed and repeat penalty.
    ///
    /// # Errors
    /// As [`generate`](Self::generate); an empty trigger is a
    /// [`GenerateError::EmptyTrigger`].
    #[allow(clippy::too_many_arguments)]
    pub fn generate_thinking(
        &mut self,
        prompt: &[u32],
        think: &ThinkConfig,
        stop: &[TokenId],
        matcher: &mut Matcher,
        cfg: &GenerateConfig,
        on_thought: &mut dyn FnMut(&[u8]),
        on_bytes: &mut dyn FnMut(&[u8]),
    ) -> Result<ThinkGeneration, GenerateError> {
        if think.trigger.is_empty() {
            return Err(GenerateError::EmptyTrigger);
        }
        cfg.check()?;
        let thought = self.think(prompt, think, stop, cfg, on_thought)?;
        let mut context = prompt.to_vec();
        context.extend(thought.context.iter().map(|t| t.0));
        let answer = self.generate(&context, matcher, cfg, on_bytes)?;
        Ok(ThinkGeneration { thought, answer })
    }

    /// The free phase: samples until the trigger, a stop token or the budget.
    fn think(
        &mut self,
        prompt: &[u32],
        think: &ThinkConfig,
        stop: &[TokenId],
        cfg: &GenerateConfig,
        on_thought: &mut dyn FnMut(&[u8]),
    ) -> Result<Thought, GenerateError> {
        let mut r = Reasoning::new(think);
        let mut sampler = Sampler::new(cfg.sampling.clone(), cfg.seed)?;
        let vocab_len = self.vocab.vocab_len();
        let mut g = empty_generation();
        // Bytes handed to `on_thought` so far.
        let mut streamed = 0;
        let mut end = ThinkEnd::Budget;
        if think.budget > 0 {
            let mut logits = self.feed_prompt(prompt, &mut g)?;
            let mut pos = prompt.len();
            loop {
                let history = &r.tokens;
                let pick = sample_free(
                    vocab_len,
                    &mut sampler,
                    &mut logits,
                    history,
                    cfg,
                    stop,
                    &mut g.timings,
                )?;
                let Some(token) = pick else {
                    end = ThinkEnd::Stop;
                    break;
                };
                if let Some(e) = r.push(&*self.vocab, token) {
                    end = e;
                    break;
                }
                let shown = r.shown();
                on_thought(&shown[streamed..]);
                streamed = shown.len();
                logits = self.feed(&[token.0], pos, &mut g)?;
                pos += 1;
            }
        }
        let thought = r.finish(&*self.vocab, end);
        if thought.text.len() > streamed {
            on_thought(&thought.text[streamed..]);
        }
        Ok(thought)
    }
}

/// The reasoning of one sequence while it is written: the tokens sampled so far, their bytes,
/// and where the trigger was found. Shared by [`Generator::generate_thinking`] and the batched
/// loop, which push the tokens they sample and hand over to the answer the same way.
#[derive(Debug)]
pub(super) struct Reasoning {
    trigger: Vec<u8>,
    budget: usize,
    /// The tokens sampled (the one that completed the trigger included).
    pub(super) tokens: Vec<TokenId>,
    bytes: Vec<u8>,
    /// Byte offset in `bytes` where each token of `tokens` starts.
    starts: Vec<usize>,
    /// Where the trigger starts in `bytes`, once written.
    found: Option<usize>,
}

impl Reasoning {
    pub(super) fn new(think: &ThinkConfig) -> Self {
        Reasoning {
            trigger: think.trigger.as_bytes().to_vec(),
            budget: think.budget,
            tokens: Vec::new(),
            bytes: Vec::new(),
            starts: Vec::new(),
            found: None,
        }
    }

    /// The most tokens of reasoning.
    pub(super) fn budget(&self) -> usize {
        self.budget
    }

    /// Appends a sampled token (not a stop token); `Some` when the reasoning ends with it:
    /// it completed the trigger, or it spent the budget.
    pub(super) fn push(&mut self, vocab: &dyn Vocab, token: TokenId) -> Option<ThinkEnd> {
        let before = self.bytes.len();
        self.starts.push(before);
        self.tokens.push(token);
        self.bytes.extend_from_slice(vocab.token_bytes(token));
        // The trigger can only complete in this token's bytes: search from where it could
        // have started.
        let from = before.saturating_sub(self.trigger.len() - 1);
        if let Some(i) = find(&self.bytes[from..], &self.trigger) {
            self.found = Some(from + i);
            return Some(ThinkEnd::Trigger);
        }
        (self.tokens.len() >= self.budget).then_some(ThinkEnd::Budget)
    }

    /// The reasoning that may be shown while it is written: its bytes but a tail that may
    /// begin the trigger. It only grows, and it is a prefix of the final [`Thought::text`].
    pub(super) fn shown(&self) -> &[u8] {
        let end = match self.found {
            Some(at) => at,
            None => self.bytes.len() - partial_trigger(&self.bytes, &self.trigger),
        };
        &self.bytes[..end]
    }

    /// The finished reasoning: its text up to the trigger, and the tokens the answer is
    /// conditioned on after the prompt. Found trigger: the tokens that end within it, the
    /// last one, if it runs past the trigger's end, replaced by the tokens of its part up to
    /// that end. Otherwise (budget or stop token): every token, then the trigger appended
    /// (after a newline unless the text is empty or ends with one).
    pub(super) fn finish(self, vocab: &dyn Vocab, end: ThinkEnd) -> Thought {
        let generated = self.tokens.len();
        let Reasoning {
            trigger,
            tokens,
            bytes,
            starts,
            found,
            ..
        } = self;
        let (text, context) = match found {
            Some(at) => {
                let stop_at = at + trigger.len();
                let last = tokens.len() - 1;
                let mut context = tokens;
                if bytes.len() > stop_at {
                    context.truncate(last);
                    context.extend(vocab.tokenize(&bytes[starts[last]..stop_at]));
                }
                (bytes[..at].to_vec(), context)
            }
            None => {
                let mut context = tokens;
                let mut tail = Vec::new();
                if !bytes.is_empty() && !bytes.ends_with(b"\n") {
                    tail.push(b'\n');
                }
                tail.extend_from_slice(&trigger);
                context.extend(vocab.tokenize(&tail));
                (bytes, context)
            }
        };
        Thought {
            text,
            tokens: generated,
            end,
            context,
        }
    }
}

/// The length of the longest proper prefix of `trigger` that `bytes` ends with.
fn partial_trigger(bytes: &[u8], trigger: &[u8]) -> usize {
    (1..trigger.len())
        .rev()
        .find(|&k| bytes.ends_with(&trigger[..k]))
        .unwrap_or(0)
}

/// The first position of `needle` in `hay`.
fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::generate::tests::{object_grammar, vocab};
    use crate::generate::SourceError;
    use crate::matcher::{CompiledGrammar, Limits};
    use crate::toktrie::{SyntheticVocab, Vocab};

    /// A fake model that writes `script` (token ids) after the prompt, one per position, then
    /// prefers `then` in order at every later position. Records what it is fed.
    struct Script {
        prompt_len: usize,
        script: Vec<u32>,
        then: Vec<u32>,
        vocab_len: usize,
        fed: Vec<(Vec<u32>, usize)>,
    }

    impl LogitsSource for Script {
        fn forward(&mut self, tokens: &[u32], pos: usize) -> Result<Vec<f32>, SourceError> {
            self.fed.push((tokens.to_vec(), pos));
            let next = pos + tokens.len() - self.prompt_len;
            let mut logits = vec![0.0f32; self.vocab_len];
            match self.script.get(next) {
                Some(&t) => logits[t as usize] = 10.0,
                None => {
                    for (i, &t) in self.then.iter().enumerate() {
                        logits[t as usize] = 10.0 - i as f32 * 0.1;
                    }
                }
            }
            Ok(logits)
        }
    }

    const PROMPT: [u32; 3] = [1, 2, 3];

    fn ids(v: &SyntheticVocab, text: &str) -> Vec<u32> {
        v.tokenize(text.as_bytes()).iter().map(|t| t.0).collect()
    }

    /// Runs `script` then `then` (both text, tokenized by the test vocabulary) through think
    /// and the object grammar.
    fn run(
        script: &str,
        then: &str,
        think: &ThinkConfig,
        stop: &[TokenId],
    ) -> (ThinkGeneration, Vec<(Vec<u32>, usize)>, String) {
        let v = vocab();
        let cg =
            Arc::new(CompiledGrammar::new(object_grammar(), v.clone(), Limits::default()).unwrap());
        let mut m = Matcher::new(cg).unwrap();
        let mut src = Script {
            prompt_len: PROMPT.len(),
            script: ids(&v, script),
            then: ids(&v, then),
            vocab_len: v.vocab_len(),
            fed: Vec::new(),
        };
        if let Some(s) = stop.first() {
            src.script.push(s.0);
        }
        let mut gen = Generator::new(src, v.clone());
        let mut streamed = Vec::new();
        let cfg = GenerateConfig {
            max_tokens: 40,
            ..Default::default()
        };
        let out = gen
            .generate_thinking(
                &PROMPT,
                think,
                stop,
                &mut m,
                &cfg,
                &mut |b| streamed.extend_from_slice(b),
                &mut |_| {},
            )
            .unwrap();
        let fed = gen.source().fed.clone();
        (out, fed, String::from_utf8(streamed).unwrap())
    }

    /// The bytes of what the model saw after the prompt and before the answer.
    fn context_bytes(v: &SyntheticVocab, out: &ThinkGeneration) -> Vec<u8> {
        out.thought
            .context
            .iter()
            .flat_map(|&t| v.token_bytes(t).to_vec())
            .collect()
    }

    fn answer(out: &ThinkGeneration) -> serde_json::Value {
        assert!(out.answer.accepted, "{:?}", out.answer.text());
        serde_json::from_slice(&out.answer.bytes).unwrap()
    }

    /// The model writes the trigger: reasoning ends there, the answer is valid under the
    /// grammar, and the reasoning is not in it.
    #[test]
    fn a_written_trigger_ends_the_reasoning() {
        let think = ThinkConfig::new(64, "ANSWER:");
        let (out, fed, streamed) = run("two plus two is four ANSWER:", "x", &think, &[]);
        assert_eq!(out.thought.end, ThinkEnd::Trigger);
        assert_eq!(out.thought.text(), "two plus two is four ");
        assert_eq!(streamed, "two plus two is four ");
        assert_eq!(out.thought.tokens, "two plus two is four ANSWER:".len());
        let v = answer(&out);
        assert!(v["name"].as_str().unwrap().starts_with('x'), "{v}");
        assert!(!out.answer.text().contains("four"), "{}", out.answer.text());
        // The answer was conditioned on the reasoning and the trigger: the model saw them.
        let seen: Vec<u32> = fed.iter().flat_map(|(t, _)| t.clone()).collect();
        let v = vocab();
        let trigger = ids(&v, "ANSWER:");
        assert!(
            seen.windows(trigger.len()).any(|w| w == trigger),
            "{seen:?}"
        );
        // ... each position fed once (the KV cache is reused from reasoning to answer).
        for w in fed.windows(2) {
            assert_eq!(w[0].1 + w[0].0.len(), w[1].1, "{fed:?}");
        }
    }

    /// Without the trigger the budget ends the reasoning: exactly `budget` tokens, then the
    /// trigger is appended (after a newline) and the answer follows, valid.
    #[test]
    fn the_budget_ends_the_reasoning() {
        for budget in [0, 1, 5, 17] {
            let think = ThinkConfig::new(budget, "ANSWER:");
            let (out, fed, _) = run(&"hmm ".repeat(20), "x", &think, &[]);
            assert_eq!(out.thought.end, ThinkEnd::Budget, "{budget}");
            assert_eq!(out.thought.tokens, budget);
            assert_eq!(out.thought.text.len(), budget);
            answer(&out);
            let v = vocab();
            let mut tail = if budget == 0 { "" } else { "\n" }.to_string();
            tail.push_str("ANSWER:");
            let context: Vec<u32> = out.thought.context.iter().map(|t| t.0).collect();
            assert!(context.ends_with(&ids(&v, &tail)), "{budget}: {context:?}");
            // The answer's prompt is the prompt, the reasoning and the trigger.
            assert_eq!(
                out.answer.prompt_tokens,
                PROMPT.len() + out.thought.context.len()
            );
            assert!(fed[0].1 == 0 && fed[0].0.starts_with(&PROMPT), "{fed:?}");
        }
    }

    /// A stop token (end of turn) ends the reasoning too; it is not fed, the trigger is.
    #[test]
    fn a_stop_token_ends_the_reasoning() {
        let v = vocab();
        let eos = v.eos_tokens()[0];
        let think = ThinkConfig::new(64, "ANSWER:");
        let (out, fed, _) = run("done", "x", &think, &[eos]);
        assert_eq!(out.thought.end, ThinkEnd::Stop);
        assert_eq!(out.thought.text(), "done");
        answer(&out);
        assert!(fed.iter().all(|(t, _)| !t.contains(&eos.0)), "{fed:?}");
    }

    /// A token running past the trigger is cut: what follows the trigger in it never reaches
    /// the answer or the model; the trigger's own bytes do.
    #[test]
    fn text_after_the_trigger_in_its_token_is_dropped() {
        // "\"}" is one token of the test vocabulary: the trigger `"` ends inside it.
        let think = ThinkConfig::new(64, "#\"");
        let (out, _, streamed) = run("ok #\"}", "x", &think, &[]);
        assert_eq!(out.thought.end, ThinkEnd::Trigger);
        assert_eq!(out.thought.text(), "ok ");
        assert_eq!(streamed, "ok ");
        assert_eq!(context_bytes(&vocab(), &out), b"ok #\"");
        answer(&out);
    }

    /// Issue 19: a chat template that opens a reasoning block in the prompt (the assistant
    /// turn starts with `<think>`, as Qwen3's and DeepSeek-R1's do; none of formwork's
    /// registry templates does) must still close it before the constrained answer, which the
    /// answer's grammar (JSON) could never write. With `</think>` as the trigger the block is
    /// closed whether the model writes the tag itself (as one special-looking token or byte by
    /// byte) or the budget ends first (the tag is appended); either way the model sees the
    /// closed block before the answer, and the answer is valid and holds no part of the tag.
    #[test]
    fn a_prompt_that_opens_a_think_block_is_closed_before_the_answer() {
        let mut toks: Vec<Vec<u8>> = (0u8..=255).map(|b| vec![b]).collect();
        toks.push(b"<think>".to_vec());
        toks.push(b"</think>".to_vec());
        let v = Arc::new(SyntheticVocab::new(toks).with_eos("<eos>"));
        let close = v.token_of(b"</think>").unwrap();
        // The synthetic template: an assistant turn that opens the block.
        let prompt: Vec<u32> = v
            .tokenize(b"user: n?\nassistant:\n<think>\n")
            .iter()
            .map(|t| t.0)
            .collect();
        assert!(prompt.contains(&v.token_of(b"<think>").unwrap().0));
        let ids = |t: &[u8]| -> Vec<u32> { v.tokenize(t).iter().map(|t| t.0).collect() };
        let by_bytes: Vec<u32> = b"ok.</think>".iter().map(|&b| u32::from(b)).collect();
        for (name, script, budget, end) in [
            ("one token", ids(b"ok.</think>"), 32, ThinkEnd::Trigger),
            ("byte by byte", by_bytes, 32, ThinkEnd::Trigger),
            ("budget", ids(b"hmm hmm hmm hmm"), 5, ThinkEnd::Budget),
        ] {
            let cg = Arc::new(
                CompiledGrammar::new(object_grammar(), v.clone(), Limits::default()).unwrap(),
            );
            let mut m = Matcher::new(cg).unwrap();
            let src = Script {
                prompt_len: prompt.len(),
                script,
                then: ids(b"x"),
                vocab_len: v.vocab_len(),
                fed: Vec::new(),
            };
            let mut gen = Generator::new(src, v.clone());
            let cfg = GenerateConfig {
                max_tokens: 40,
                ..Default::default()
            };
            let think = ThinkConfig::new(budget, "</think>");
            let out = gen
                .generate_thinking(&prompt, &think, &[], &mut m, &cfg, &mut |_| {}, &mut |_| {})
                .unwrap();
            assert_eq!(out.thought.end, end, "{name}");
            assert!(!out.thought.text().contains("</think"), "{name}");
            // What the model saw before the answer ends with the closed block.
            let seen = context_bytes(&v, &out);
            assert!(seen.ends_with(b"</think>"), "{name}: {seen:?}");
            if name != "byte by byte" {
                assert_eq!(out.thought.context.last(), Some(&close), "{name}");
            }
            let answer = answer(&out);
            assert!(
                answer["name"].as_str().unwrap().starts_with('x'),
                "{name}: {answer}"
            );
            assert!(!out.answer.text().contains("think"), "{name}");
        }
    }

    #[test]
    fn an_empty_trigger_is_an_error() {
        let v = vocab();
        let cg =
            Arc::new(CompiledGrammar::new(object_grammar(), v.clone(), Limits::default()).unwrap());
        let mut m = Matcher::new(cg).unwrap();
        let mut gen = Generator::new(
            crate::generate::testing::FixedLogits::new(vec![0.0; v.vocab_len()]),
            v.clone(),
        );
        let e = gen
            .generate_thinking(
                &PROMPT,
                &ThinkConfig::new(4, ""),
                &[],
                &mut m,
                &GenerateConfig::default(),
                &mut |_| {},
                &mut |_| {},
            )
            .unwrap_err();
        assert!(matches!(e, GenerateError::EmptyTrigger), "{e}");
    }
}
