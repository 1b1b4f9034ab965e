//! Batched decoding on the real models (issue 17): every sequence of a batch gets exactly the
//! logits it gets alone, over mixed prompt lengths, sequences joining and leaving between
//! steps, prefill chunks riding along with decode rows, and forked shared prefixes, for all
//! three families (SmolLM2, Qwen2.5-Coder-0.5B, Gemma 3 270M).
//!
//! The comparison is **bit-identical**, not within a tolerance: every kernel computes each
//! (weight row, activation row) product independently of the other rows in the call, with
//! the same block order whatever the tile or thread split (the kernel tests pin that), the
//! norms, rotary and attention are per row, and a forked cache is an exact copy. So any
//! difference at all is a bug (a row reading another sequence's cache or position, a wrong
//! offset), and a tolerance could hide one.
//!
//! Models are fetched and verified on first use, like every model-backed test (the root
//! package's `tests/it/model_fetch.rs::fetched` does the same through the same registry).

use std::sync::Arc;

use formwork_core::generate::batch::{BatchGenerator, BatchRequest};
use formwork_core::generate::{Closing, Generation, StopReason};
use formwork_core::sampler::argmax;
use formwork_core::{compile, CompileOptions, CompiledGrammar, GenerateConfig, Generator};
use formwork_core::{Limits, Matcher};
use formwork_model::fetch::FetchConfig;
use formwork_model::{Backend, Loaded, Model, ModelConfig, ModelError, Sequence};

#[path = "common/fetched.rs"]
mod fetched;
use fetched::fetched;

const MODELS: [&str; 3] = ["smollm2-135m", "qwen2.5-coder-0.5b", "gemma3-270m"];

/// A prompt of `len` ordinary ids, different per `seed` (no tokenizer needed).
fn prompt(model: &Model, len: usize, seed: u32) -> Vec<u32> {
    let bos = model.token_info().bos.unwrap_or(1);
    let mut ids = vec![bos];
    ids.extend((1..len as u32).map(|i| 300 + (i * 37 + seed * 101) % 5000));
    ids
}

/// A request's logits at each step and its generated tokens.
type Run = (Vec<Vec<f32>>, Vec<u32>);

fn bits(logits: &[f32]) -> Vec<u32> {
    logits.iter().map(|v| v.to_bits()).collect()
}

/// Greedy decoding of `prompt` alone through `Model::forward`: the logits after the prompt
/// and after each of the `n` generated tokens but the last, and the tokens.
fn solo(model: &mut Model, prompt: &[u32], n: usize) -> Run {
    model.reset();
    let mut all = vec![model.forward(prompt, 0).unwrap()];
    let mut out = Vec::new();
    for i in 0..n {
        let t = argmax(all.last().unwrap()).unwrap();
        out.push(t);
        if i + 1 < n {
            all.push(model.forward(&[t], prompt.len() + i).unwrap());
        }
    }
    (all, out)
}

/// A request of the batch test: its prompt, the step it joins at, and its state.
struct Live {
    id: usize,
    seq: Sequence,
    /// Tokens to feed at the next step (the prompt, then one generated token).
    next: Vec<u32>,
    logits: Vec<Vec<f32>>,
    out: Vec<u32>,
}

/// Runs requests `(prompt, join step)` through `forward_batch` with continuous batching:
/// a request joins at its step (its whole prompt fed as one chunk beside the others' decode
/// tokens), generates `n` greedy tokens and leaves (its sequence dropped) as soon as it has
/// them. Returns each request's logits and tokens, in request order.
fn batched(model: &mut Model, requests: &[(Vec<u32>, usize)], n: usize) -> Vec<Run> {
    let mut done: Vec<Option<Run>> = requests.iter().map(|_| None).collect();
    let mut live: Vec<Live> = Vec::new();
    let mut step = 0;
    while done.iter().any(Option::is_none) {
        for (id, (p, join)) in requests.iter().enumerate() {
            if *join == step {
                live.push(Live {
                    id,
                    seq: model.new_sequence(),
                    next: p.clone(),
                    logits: Vec::new(),
                    out: Vec::new(),
                });
            }
        }
        step += 1;
        if live.is_empty() {
            continue;
        }
        let mut batch: Vec<(&mut Sequence, &[u32])> = live
            .iter_mut()
            .map(|l| (&mut l.seq, l.next.as_slice()))
            .collect();
        let logits = model.forward_batch(&mut batch).unwrap();
        assert_eq!(logits.len(), live.len());
        for (l, lg) in live.iter_mut().zip(logits) {
            let t = argmax(&lg).unwrap();
            l.logits.push(lg);
            l.out.push(t);
            l.next = vec![t];
        }
        // Leave as soon as finished: the sequence (and its cache) is dropped here.
        live.retain_mut(|l| {
            if l.out.len() < n {
                return true;
            }
            done[l.id] = Some((std::mem::take(&mut l.logits), std::mem::take(&mut l.out)));
            false
        });
    }
    done.into_iter().map(Option::unwrap).collect()
}

/// Mixed prompt lengths (1 to 40 positions), two requests from the start, one joining at step
/// 2 (a 40-token prefill chunk beside three decode rows) and two more later; each must see
/// exactly its solo logits at every step, and so produce its solo greedy tokens.
#[test]
fn batch_equals_each_sequence_alone_on_every_family() {
    let n = 6;
    for name in MODELS {
        let mut model = Model::load(fetched(name)).expect(name);
        let requests: Vec<(Vec<u32>, usize)> = [(12, 0), (5, 0), (1, 1), (40, 2), (17, 4)]
            .iter()
            .enumerate()
            .map(|(i, &(len, join))| (prompt(&model, len, i as u32), join))
            .collect();
        let got = batched(&mut model, &requests, n);
        for (i, ((p, join), (logits, out))) in requests.iter().zip(&got).enumerate() {
            let (want_logits, want_out) = solo(&mut model, p, n);
            assert_eq!(
                out, &want_out,
                "{name}: request {i} (joins at {join}) tokens"
            );
            assert_eq!(logits.len(), want_logits.len());
            for (s, (a, b)) in logits.iter().zip(&want_logits).enumerate() {
                assert!(
                    bits(a) == bits(b),
                    "{name}: request {i} step {s}: batched logits differ from solo"
                );
            }
        }
    }
}

/// Shared prefixes: a prefix prefilled once and forked (whole, and cut two positions short)
/// gives each fork exactly the logits of feeding prefix + suffix alone in one call; the
/// forks run in one batch with different suffix lengths, and the original is untouched.
#[test]
fn forked_prefixes_equal_whole_prompts_on_every_family() {
    let n = 4;
    for name in MODELS {
        let mut model = Model::load(fetched(name)).expect(name);
        let prefix = prompt(&model, 30, 7);
        let mut base = model.new_sequence();
        model
            .forward_batch(&mut [(&mut base, &prefix[..])])
            .unwrap();
        let suffixes: Vec<Vec<u32>> = (0..4)
            .map(|k| prompt(&model, 1 + 3 * k, 20 + k as u32)[1..].to_vec())
            .collect();
        // Fork 0 and 1 start from the whole prefix, 2 and 3 from all but its last two
        // positions (they re-feed them). An empty suffix (k = 0) is not fed: fork 0 gets
        // its prefix's last token again instead, from a fork at 29.
        let mut forks: Vec<(Sequence, Vec<u32>, Vec<u32>)> = Vec::new();
        for (k, suffix) in suffixes.iter().enumerate() {
            let at = match k {
                0 => prefix.len() - 1,
                1 => prefix.len(),
                _ => prefix.len() - 2,
            };
            let mut feed = prefix[at..].to_vec();
            feed.extend(suffix);
            let mut whole = prefix.clone();
            whole.extend(suffix);
            forks.push((base.fork(at), feed, whole));
        }
        assert_eq!(base.len(), prefix.len());
        assert_eq!(forks[1].0.len(), prefix.len());
        assert_eq!(forks[2].0.len(), prefix.len() - 2);
        let mut outs: Vec<Run> = forks.iter().map(|_| Default::default()).collect();
        for _ in 0..n {
            let mut batch: Vec<(&mut Sequence, &[u32])> = forks
                .iter_mut()
                .map(|(seq, feed, _)| (seq, feed.as_slice()))
                .collect();
            let logits = model.forward_batch(&mut batch).unwrap();
            for ((_, feed, _), (lg, out)) in forks.iter_mut().zip(logits.into_iter().zip(&mut outs))
            {
                let t = argmax(&lg).unwrap();
                out.0.push(lg);
                out.1.push(t);
                *feed = vec![t];
            }
        }
        for (k, ((_, _, whole), (logits, out))) in forks.iter().zip(&outs).enumerate() {
            let (want_logits, want_out) = solo(&mut model, whole, n);
            assert_eq!(out, &want_out, "{name}: fork {k} tokens");
            for (s, (a, b)) in logits.iter().zip(&want_logits).enumerate() {
                assert!(
                    bits(a) == bits(b),
                    "{name}: fork {k} step {s} logits differ"
                );
            }
        }
        // The prefix itself still continues as if never forked.
        let next = model
            .forward_batch(&mut [(&mut base, &[prefix[1]][..])])
            .unwrap();
        let mut whole = prefix.clone();
        whole.push(prefix[1]);
        model.reset();
        let want = model.forward(&whole, 0).unwrap();
        assert!(
            bits(&next[0]) == bits(&want),
            "{name}: the forked-from prefix changed"
        );
    }
}

/// Shared prefixes are copy-on-write (issue 17: forks share the prefix's keys instead of
/// copying them): a fork of a fork (two shared segments), the forked-from sequences fed
/// after their forks (their own positions are copied first, the forks keep the old ones),
/// and a fork truncated back into the shared prefix and re-fed each give exactly the
/// logits of feeding their whole token history alone; a fork's own KV bytes do not count
/// the shared prefix. Gemma 3 (sliding-window layers) and SmolLM2.
#[test]
fn forks_of_forks_and_writes_after_forking_equal_whole_prompts() {
    for name in ["smollm2-135m", "gemma3-270m"] {
        let mut model = Model::load(fetched(name)).expect(name);
        let p = prompt(&model, 48, 11);
        let alone = |model: &mut Model, tokens: &[u32]| {
            model.reset();
            bits(&model.forward(tokens, 0).unwrap())
        };
        let check = |model: &mut Model, seq: &mut Sequence, feed: &[u32], whole: &[u32]| {
            let got = model.forward_batch(&mut [(seq, feed)]).unwrap();
            assert!(
                bits(&got[0]) == alone(model, whole),
                "{name}: {} positions differ",
                whole.len()
            );
        };
        let mut base = model.new_sequence();
        check(&mut model, &mut base, &p[..30], &p[..30]);
        let mut a = base.fork(30);
        assert_eq!(a.kv_bytes(), 0, "{name}: a fork copies nothing");
        check(&mut model, &mut a, &p[30..35], &p[..35]);
        // b shares base's 30 positions and a's first 3 own ones.
        let mut b = a.fork(33);
        let mut hb = p[..33].to_vec();
        hb.extend([p[40], p[41], p[42], p[43]]);
        check(&mut model, &mut b, &hb[33..], &hb);
        // a and base are written while b (and a) still share their positions.
        check(&mut model, &mut a, &p[35..38], &p[..38]);
        let mut hbase = p[..30].to_vec();
        hbase.push(p[47]);
        check(&mut model, &mut base, &[p[47]], &hbase);
        // b continues from its own history, unchanged by those writes.
        hb.push(p[44]);
        check(&mut model, &mut b, &[p[44]], &hb);
        // b truncated into base's segment, then re-fed differently.
        b.truncate(25);
        assert_eq!(b.len(), 25);
        let mut hb2 = p[..25].to_vec();
        hb2.extend(&p[38..46]);
        check(&mut model, &mut b, &hb2[25..], &hb2);
        // a truncated into its own positions (a fork, b's first one, shares them).
        let c = a.fork(36);
        a.truncate(34);
        let mut ha = p[..34].to_vec();
        ha.extend([p[1], p[2]]);
        check(&mut model, &mut a, &ha[34..], &ha);
        let mut c = c;
        let mut hc = p[..36].to_vec();
        hc.push(p[3]);
        check(&mut model, &mut c, &[p[3]], &hc);
    }
}

/// Rolling a sequence back and re-feeding equals a fresh run; dropping and truncating
/// behave; the single-sequence path is unaffected by batches running beside it.
#[test]
fn rollback_and_the_models_own_sequence_are_independent_of_batches() {
    let mut model = Model::load(fetched("smollm2-135m")).unwrap();
    let p = prompt(&model, 20, 3);
    model.reset();
    let own = model.forward(&p[..10], 0).unwrap();
    let mut seq = model.new_sequence();
    assert!(seq.is_empty() && seq.kv_bytes() == 0);
    model.forward_batch(&mut [(&mut seq, &p[..])]).unwrap();
    assert_eq!(seq.len(), 20);
    assert!(seq.kv_bytes() > 0);
    // The model's own sequence continues where it was (10 positions), not disturbed.
    assert_eq!(model.cached_len(), 10);
    let own_next = model.forward(&p[10..], 10).unwrap();
    model.reset();
    let fresh = model.forward(&p, 0).unwrap();
    assert!(bits(&own_next) == bits(&fresh));
    assert!(bits(&own) != bits(&fresh));
    // Roll the batch sequence back to 12 and re-feed the rest: same bits as the whole run.
    seq.truncate(12);
    assert_eq!(seq.len(), 12);
    let again = model.forward_batch(&mut [(&mut seq, &p[12..])]).unwrap();
    assert!(bits(&again[0]) == bits(&fresh));
    // A one-sequence batch equals Model::forward for the same prompt.
    let mut other = model.new_sequence();
    let one = model.forward_batch(&mut [(&mut other, &p[..])]).unwrap();
    assert!(bits(&one[0]) == bits(&fresh));
    assert!(model.forward_batch(&mut []).unwrap().is_empty());
}

/// The logits after each of `tokens` fed one at a time from position 0 (the reference of
/// the verification tests).
fn token_by_token(model: &mut Model, tokens: &[u32]) -> Vec<Vec<f32>> {
    model.reset();
    (0..tokens.len())
        .map(|i| model.forward(&tokens[i..=i], i).unwrap())
        .collect()
}

/// Issue 45, the model side of speculative decoding: a verification pass (a prompt's
/// pending tokens and a random draft fed at once, logits asked at chosen rows) gives at each
/// row the bits feeding the tokens one at a time gives, through `Model::forward_rows` and
/// `Model::forward_batch_rows`; rolling the KV cache back past a rejected draft (feeding at
/// an earlier position, or `Sequence::truncate`) and feeding other tokens equals a fresh run,
/// on all three families.
#[test]
fn verification_rows_and_kv_rollback_equal_token_by_token_on_every_family() {
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move |n: u32| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        (rng % u64::from(n)) as u32
    };
    for name in MODELS {
        let mut model = Model::load(fetched(name)).unwrap();
        let p = prompt(&model, 12, 7);
        for round in 0..3 {
            let draft: Vec<u32> = (0..6).map(|_| 300 + next(5000)).collect();
            let kept = next(6) as usize;
            let other: Vec<u32> = (0..3).map(|_| 300 + next(5000)).collect();
            let mut first = p.clone();
            first.extend(&draft);
            let mut second = first[..p.len() + kept].to_vec();
            second.extend(&other);
            let want1 = token_by_token(&mut model, &first);
            let want2 = token_by_token(&mut model, &second);
            let case = format!("{name} round {round} kept {kept}");
            // The model's own sequence: the prompt's last 2 tokens pending, then the draft.
            model.reset();
            model.forward(&p[..p.len() - 2], 0).unwrap();
            let rows: Vec<usize> = (1..8).step_by(1 + round).collect();
            let got = model
                .forward_rows(&first[p.len() - 2..], p.len() - 2, &rows)
                .unwrap();
            assert_eq!(model.cached_len(), first.len(), "{case}");
            for (r, l) in rows.iter().zip(&got) {
                assert!(bits(l) == bits(&want1[p.len() - 2 + r]), "{case} row {r}");
            }
            // Rejected after `kept` draft tokens: feed the others from there.
            let at = p.len() + kept;
            let got = model.forward_rows(&other, at, &[0, 1, 2]).unwrap();
            for (i, l) in got.iter().enumerate() {
                assert!(bits(l) == bits(&want2[at + i]), "{case} rollback row {i}");
            }
            // Batched: the drafted sequence beside a plain decode row of another.
            let mut seq = model.new_sequence();
            let mut plain = model.new_sequence();
            model
                .forward_batch(&mut [(&mut seq, &p[..p.len() - 1]), (&mut plain, &p[..4])])
                .unwrap();
            // One token fewer pending: the same positions are rows one lower.
            let rows: Vec<usize> = rows.iter().map(|r| r - 1).collect();
            let got = model
                .forward_batch_rows(
                    &mut [(&mut seq, &first[p.len() - 1..]), (&mut plain, &p[4..5])],
                    &[rows.clone(), vec![0]],
                )
                .unwrap();
            assert_eq!(seq.len(), first.len());
            for (r, l) in rows.iter().zip(&got[0]) {
                assert!(
                    bits(l) == bits(&want1[p.len() - 1 + r]),
                    "{case} batch row {r}"
                );
            }
            let alone = token_by_token(&mut model, &p[..5]);
            assert!(bits(&got[1][0]) == bits(&alone[4]), "{case} plain row");
            seq.truncate(at);
            let got = model
                .forward_batch_rows(&mut [(&mut seq, &other[..])], &[vec![1, 2]])
                .unwrap();
            for (i, l) in got[0].iter().enumerate() {
                assert!(
                    bits(l) == bits(&want2[at + 1 + i]),
                    "{case} batch rollback {i}"
                );
            }
        }
        // Rows out of order, past the tokens, or none: a typed error, nothing fed.
        model.reset();
        for rows in [&[1usize, 1][..], &[3], &[]] {
            let err = model.forward_rows(&p[..3], 0, rows).unwrap_err();
            assert!(matches!(err, ModelError::BadRows { .. }), "{err}");
            assert_eq!(model.cached_len(), 0);
        }
    }
}

#[test]
fn misuse_is_a_typed_error_and_changes_nothing() {
    let mut model = Model::load(fetched("smollm2-135m")).unwrap();
    let other = Model::load(fetched("smollm2-135m")).unwrap();
    let (mut a, mut b) = (model.new_sequence(), other.new_sequence());
    let p = prompt(&model, 5, 1);
    let err = model
        .forward_batch(&mut [(&mut a, &p[..]), (&mut b, &p[..])])
        .unwrap_err();
    assert!(
        matches!(err, ModelError::ForeignSequence { index: 1 }),
        "{err}"
    );
    // Checked before feeding: `a` was not advanced.
    assert_eq!(a.len(), 0);
    let mut c = model.new_sequence();
    let err = model
        .forward_batch(&mut [(&mut a, &p[..]), (&mut c, &[][..])])
        .unwrap_err();
    assert!(matches!(err, ModelError::EmptyInput), "{err}");
    let err = model
        .forward_batch(&mut [(&mut a, &[u32::MAX][..])])
        .unwrap_err();
    assert!(matches!(err, ModelError::TokenOutOfRange { .. }), "{err}");
    let long = vec![1u32; model.context_len() + 1];
    let err = model.forward_batch(&mut [(&mut a, &long[..])]).unwrap_err();
    assert!(matches!(err, ModelError::ContextOverflow { .. }), "{err}");
    assert_eq!(a.len(), 0);

    let cfg = ModelConfig::new().backend(Backend::Candle);
    let mut candle = Model::load_with(fetched("smollm2-135m"), &cfg).unwrap();
    let mut c = candle.new_sequence();
    let err = candle.forward_batch(&mut [(&mut c, &p[..])]).unwrap_err();
    assert!(matches!(err, ModelError::BatchUnsupported { .. }), "{err}");
}

/// Several schemas in one batch (issue 17's mask correctness): every request decodes under
/// its own matcher (two share one compiled grammar), one joins when another leaves (batch of
/// 3, 5 requests), every output is valid against its own schema, and each equals the
/// sequential greedy `Generator` on the same prompt, schema and config token for token. Four
/// prompts share a system prompt, prefilled once as the batch's shared prefix (each forks it);
/// the fifth has none and shares only the template's first tokens. Budget-aware closing is on
/// (JSON, and the generic strategy for the string pattern); the last request's budget is too
/// small for its answer, so the budget ends it, in the batch exactly as alone (closed early
/// where a closing path fits, on SmolLM2 at least; on Qwen the greedy walk finds none in time
/// and the output is cut, `accepted == false`, the same in both).
#[test]
fn batch_generator_keeps_each_schema_on_every_family() {
    let schemas = [
        serde_json::json!({"type": "object", "properties": {
            "name": {"type": "string", "maxLength": 16},
            "age": {"type": "integer", "minimum": 0, "maximum": 150}},
            "required": ["name", "age"], "additionalProperties": false}),
        serde_json::json!({"type": "array", "items": {"enum": ["red", "green", "blue"]},
            "minItems": 1, "maxItems": 3}),
        serde_json::json!({"type": "object", "properties": {
            "city": {"enum": ["Paris", "Rome", "Berlin"]}, "capital": {"type": "boolean"}},
            "required": ["city", "capital"], "additionalProperties": false}),
        serde_json::json!({"type": "string", "pattern": "^[a-z]{2,8}$"}),
    ];
    let asks = [
        (0, "Describe Ada Lovelace as JSON with her name and age."),
        (1, "List two colours of the French flag."),
        (2, "Which city is the capital of France? Answer in JSON."),
        (3, "Give one lowercase English word for a pet."),
        (
            0,
            "Describe a 40 year old man called Bartholomew Montgomery as JSON.",
        ),
    ];
    let cfg = |k: usize, i: usize| GenerateConfig {
        max_tokens: if i == 4 { 11 } else { 48 },
        closing: if k == 3 {
            Closing::Generic
        } else {
            Closing::Json
        },
        ..GenerateConfig::default()
    };
    // Whether the short-budget request closed early, per family.
    let mut closed = Vec::new();
    for name in MODELS {
        let mut loaded = Loaded::load(Some(name), &FetchConfig::new(), &ModelConfig::new())
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let vocab = loaded.vocab();
        let compiled: Vec<Arc<CompiledGrammar>> = schemas
            .iter()
            .map(|s| {
                let grammar = compile(s, &CompileOptions::default()).unwrap().grammar;
                Arc::new(CompiledGrammar::new(grammar, vocab.clone(), Limits::default()).unwrap())
            })
            .collect();
        let system = "You answer every question with one JSON value and nothing else. Be brief, \
            be accurate, and never explain the answer.";
        let prompts: Vec<Vec<u32>> = asks
            .iter()
            .enumerate()
            .map(|(i, (_, q))| {
                let system = (i < 4).then_some(system);
                loaded.encode_chat(system, q).unwrap()
            })
            .collect();
        let common = |a: &[u32], b: &[u32]| a.iter().zip(b).take_while(|(x, y)| x == y).count();
        let shared = prompts[..4]
            .iter()
            .map(|p| common(p, &prompts[0]))
            .min()
            .unwrap();
        assert!(
            shared > 20,
            "{name}: the system prompt is shared ({shared} tokens)"
        );
        let prefix = prompts[0][..shared].to_vec();
        let mut batch = BatchGenerator::new(&mut loaded.model, vocab.clone(), 3);
        batch.set_prefix(prefix.clone()).unwrap();
        for (i, ((k, _), prompt)) in asks.iter().zip(&prompts).enumerate() {
            batch.push(BatchRequest {
                prompt: prompt.clone(),
                matcher: Matcher::new(compiled[*k].clone()).unwrap(),
                config: cfg(*k, i),
            });
        }
        let mut outs = vec![None; asks.len()];
        let mut order = Vec::new();
        batch
            .run(|f| {
                order.push(f.id);
                outs[f.id] = Some(f.result.unwrap_or_else(|e| panic!("{name}: {e}")));
            })
            .unwrap();
        assert_eq!(
            order.len(),
            asks.len(),
            "{name}: each result handed back once"
        );
        for (i, ((k, q), out)) in asks.iter().zip(outs).enumerate() {
            let out = out.unwrap();
            let text = out.text();
            let mut matcher = Matcher::new(compiled[*k].clone()).unwrap();
            loaded.model.reset();
            let mut alone = Generator::new(&mut loaded.model, vocab.clone());
            let want = alone
                .generate(&prompts[i], &mut matcher, &cfg(*k, i), &mut |_| {})
                .unwrap();
            assert_eq!(
                out.tokens,
                want.tokens,
                "{name}: request {i}: batch {text:?} vs alone {:?}",
                want.text()
            );
            let ends = |g: &Generation| (g.stop, g.accepted, g.closed_early, g.forced_tokens);
            assert_eq!(ends(&out), ends(&want), "{name}: request {i}: {text}");
            if i == 4 {
                // The budget ends it, closed or (when no path fit) cut: the same either way.
                assert_ne!(out.stop, StopReason::GrammarComplete, "{name}: {text}");
                closed.push(out.closed_early);
                continue;
            }
            let reused = common(&prompts[i], &prefix).min(prompts[i].len() - 1);
            assert_eq!(out.reused_prompt_tokens, reused, "{name}: request {i}");
            assert!(
                out.accepted,
                "{name}: request {i} ({q}) not complete: {text}"
            );
            assert_ne!(out.stop, StopReason::MaxTokens, "{name}: request {i}");
            assert!(!out.closed_early, "{name}: request {i}: {text}");
            let value: serde_json::Value = serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("{name}: request {i}: {e}: {text}"));
            let validator = jsonschema::validator_for(&schemas[*k]).unwrap();
            assert!(
                validator.is_valid(&value),
                "{name}: request {i} breaks schema {k}: {text}"
            );
        }
    }
    // The closing did end it on some family (else the case tests nothing).
    assert!(closed.contains(&true), "{closed:?}");
}
