//! The candle runtime on real models: determinism, KV-cache reset, chunked feeding, agreement
//! with candle's reference llama, the mask hook, and clear errors on bad files.
//!
//! Every model of the registry (smollm2-135m, qwen2.5-coder-0.5b, gemma3-270m) is fetched and
//! verified on first use, like every model-backed test, so a fresh clone covers all three.

use std::path::PathBuf;

use crate::model_fetch::fetched;
use formwork::model::fetch;
use formwork::model::{Architecture, Backend, Model, ModelConfig, ModelError};
use formwork::sampler::{argmax, Sampler, Sampling};
use formwork::toktrie::{TokenId, TokenSet};

/// The registry's models, the default first: the architecture-generic checks run on each.
const MODELS: [&str; 3] = ["smollm2-135m", "qwen2.5-coder-0.5b", "gemma3-270m"];

fn smollm2_path() -> PathBuf {
    fetched("smollm2-135m")
}

fn default_model() -> Model {
    Model::load(smollm2_path()).expect("load smollm2-135m")
}

/// Every registry model, loaded (each fetched first if missing).
fn all_models() -> Vec<(&'static str, Model)> {
    MODELS
        .iter()
        .map(|&name| (name, Model::load(fetched(name)).expect(name)))
        .collect()
}

/// A short fixed prompt of ordinary ids (no tokenizer needed to test the runtime).
fn prompt(model: &Model) -> Vec<u32> {
    let bos = model.token_info().bos.unwrap_or(1);
    let mut ids = vec![bos];
    ids.extend((0..11u32).map(|i| 300 + i * 37));
    ids
}

/// SmolLM2's ChatML prompt "What is the capital of France?" as token ids (no system turn):
/// `<|im_start|>` user `Ċ` What `Ġis` `Ġthe` `Ġcapital` `Ġof` `ĠFrance` ? `<|im_end|>` `Ċ`
/// `<|im_start|>` ass istant `Ċ`.
const SMOLLM2_CHAT: [u32; 16] = [
    1, 4093, 198, 1780, 314, 260, 3575, 282, 4649, 47, 2, 198, 1, 520, 9531, 198,
];

/// "The capital of France is Paris" in SmolLM2 ids.
const SMOLLM2_ANSWER: [u32; 6] = [504, 3575, 282, 4649, 314, 7042];

fn greedy(model: &mut Model, prompt: &[u32], n: usize) -> Vec<u32> {
    let mut out = Vec::new();
    let mut logits = model.forward(prompt, 0).unwrap();
    for i in 0..n {
        let t = argmax(&logits).unwrap();
        out.push(t);
        logits = model.forward(&[t], prompt.len() + i).unwrap();
    }
    out
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

#[test]
fn greedy_is_deterministic_and_survives_reset() {
    let mut model = default_model();
    assert_eq!(model.architecture(), Architecture::Llama);
    let p = SMOLLM2_CHAT;
    let first = greedy(&mut model, &p, 6);
    assert_eq!(first, SMOLLM2_ANSWER, "the model does not answer sensibly");
    model.reset();
    assert_eq!(model.cached_len(), 0);
    let second = greedy(&mut model, &p, 6);
    assert_eq!(first, second, "greedy output changed after reset");
    // A second model instance gives the same output too.
    let mut other = default_model();
    assert_eq!(greedy(&mut other, &p, 6), first);
}

#[test]
fn whole_chunked_and_token_by_token_agree() {
    for (name, mut model) in all_models() {
        let p = prompt(&model);
        let whole = model.forward(&p, 0).unwrap();

        model.reset();
        model.forward(&p[..5], 0).unwrap();
        model.forward(&p[5..9], 5).unwrap();
        let chunked = model.forward(&p[9..], 9).unwrap();

        model.reset();
        let mut single = Vec::new();
        for (i, t) in p.iter().enumerate() {
            single = model.forward(&[*t], i).unwrap();
        }
        assert_eq!(
            argmax(&whole),
            argmax(&chunked),
            "{name}: chunked argmax differs"
        );
        assert_eq!(
            argmax(&whole),
            argmax(&single),
            "{name}: one-by-one argmax differs"
        );
        // Attention is computed row by row in a fixed order, so on SmolLM2 the logits are
        // bit-identical (a gemm-based attention drifted by up to 0.6 between whole and chunked
        // feeding). Qwen's and Gemma's Q6_K matrices go through a different candle kernel for
        // one row than for several, which rounds differently (measured up to 0.41).
        let tolerance = if name == "smollm2-135m" { 0.0 } else { 1.0 };
        assert!(
            max_abs_diff(&whole, &chunked) <= tolerance,
            "{name}: chunked logits differ by {}",
            max_abs_diff(&whole, &chunked)
        );
        assert!(
            max_abs_diff(&whole, &single) <= tolerance,
            "{name}: one-by-one logits differ by {}",
            max_abs_diff(&whole, &single)
        );
        assert_eq!(whole.len(), model.vocab_len());
    }
}

#[test]
fn rollback_by_position_equals_a_fresh_run() {
    let mut model = default_model();
    let p = prompt(&model);
    let expected = model.forward(&p, 0).unwrap();
    // Feed something else after the first 8 positions, then rewind to 8 and feed the real tail.
    model.forward(&[900, 901, 902], 8).unwrap();
    assert_eq!(model.cached_len(), 11);
    let again = model.forward(&p[8..], 8).unwrap();
    assert!(
        expected == again,
        "differ by {}",
        max_abs_diff(&expected, &again)
    );
}

#[test]
fn matches_candles_reference_llama() {
    // Without requantization our forward pass must agree with candle-transformers'
    // quantized_llama on the same weights (it is the reference for the llama layout). On a
    // short prefix the two agree to rounding; on longer ones float summation order differs
    // (gemm vs our row-wise attention) and the 8-bit activation quantization amplifies it, so
    // the long check is the argmax and a loose bound (measured: up to 0.7 on logits ~21).
    use candle_core::quantized::gguf_file;
    use candle_core::{Device, Tensor};
    //
    // The candle backend runs the same kernels as the reference and must match it tightly;
    // the native backend quantizes activations with f32 block scales where candle rounds
    // them to f16, so it is held to the argmax and the loose bound on both prefixes
    // (measured 1.19 on the short one at 20:46 UTC; greedy agreement is tested separately).
    let path = smollm2_path();
    let exact = ModelConfig::new().requantize(false);
    let mut ours = Model::load_with(&path, &exact.clone().backend(Backend::Candle)).unwrap();
    let mut native = Model::load_with(&path, &exact).unwrap();
    let p = prompt(&ours);
    let mine_short = ours.forward(&p[..4], 0).unwrap();
    let mine = ours.forward(&p, 0).unwrap();
    let native_short = native.forward(&p[..4], 0).unwrap();
    let native_all = native.forward(&p, 0).unwrap();

    let mut file = std::fs::File::open(&path).unwrap();
    let content = gguf_file::Content::read(&mut file).unwrap();
    let mut reference = candle_transformers::models::quantized_llama::ModelWeights::from_gguf(
        content,
        &mut file,
        &Device::Cpu,
    )
    .unwrap();
    let mut run = |toks: &[u32]| -> Vec<f32> {
        reference.clear_kv_cache();
        let input = Tensor::new(toks, &Device::Cpu)
            .unwrap()
            .unsqueeze(0)
            .unwrap();
        reference
            .forward(&input, 0)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap()
    };
    let theirs_short = run(&p[..4]);
    let theirs = run(&p);
    assert!(
        max_abs_diff(&mine_short, &theirs_short) < 1e-3,
        "short prefix diff {}",
        max_abs_diff(&mine_short, &theirs_short)
    );
    assert_eq!(argmax(&mine), argmax(&theirs));
    assert!(
        max_abs_diff(&mine, &theirs) < 1.5,
        "diff {}",
        max_abs_diff(&mine, &theirs)
    );
    for (native, theirs) in [(&native_short, &theirs_short), (&native_all, &theirs)] {
        assert_eq!(argmax(native), argmax(theirs));
        let diff = max_abs_diff(native, theirs);
        eprintln!("native vs candle-transformers: max logit diff {diff}");
        assert!(diff < 2.0, "native diff {diff}");
    }
}

/// Issue 7: the native forward pass (own kernels) against the candle-op reference path on
/// the same weights, for every registry model. 32 greedy tokens from the native model, with
/// the candle model teacher-forced along the same sequence so one near-tie cannot cascade;
/// the argmax agreement rate is printed. Both quantize activations to 8 bits, but candle uses
/// 256-wide blocks (Q8_K) for the k-quants where we use 32-wide ones, so ties may flip
/// (`-- --nocapture` prints the rate per model); at least 30 of 32 must agree.
#[test]
fn native_greedy_agrees_with_the_candle_reference() {
    for name in MODELS {
        let path = fetched(name);
        let exact = ModelConfig::new().requantize(false);
        let mut native = Model::load_with(&path, &exact).unwrap();
        let mut reference =
            Model::load_with(&path, &exact.clone().backend(Backend::Candle)).unwrap();
        let p: Vec<u32> = if name == "smollm2-135m" {
            SMOLLM2_CHAT.to_vec()
        } else {
            prompt(&native)
        };
        let ours = greedy(&mut native, &p, 32);
        let mut logits = reference.forward(&p, 0).unwrap();
        let mut agree = 0;
        for (i, &t) in ours.iter().enumerate() {
            agree += usize::from(argmax(&logits) == Some(t));
            logits = reference.forward(&[t], p.len() + i).unwrap();
        }
        eprintln!("{name}: native vs candle greedy argmax agreement {agree}/32");
        assert!(agree >= 30, "{name}: only {agree}/32 greedy tokens agree");
    }
}

#[test]
fn requantized_greedy_output_matches_original_weights() {
    let path = smollm2_path();
    // Requantization is a candle-backend option (the native kernels read Q4_1 directly).
    let candle = ModelConfig::new().backend(Backend::Candle);
    let mut exact = Model::load_with(&path, &candle.clone().requantize(false)).unwrap();
    assert_eq!(exact.load_stats().requantized, 0);
    let mut fast = Model::load_with(&path, &candle).unwrap();
    assert!(fast.load_stats().requantized > 0);
    assert_eq!(default_model().load_stats().requantized, 0);
    // On a real chat prompt (on a prompt of arbitrary ids, a near-tie flipped the 6th token).
    assert_eq!(
        greedy(&mut exact, &SMOLLM2_CHAT, 10),
        greedy(&mut fast, &SMOLLM2_CHAT, 10)
    );
}

#[test]
fn mask_hook_restricts_the_choice() {
    let mut model = default_model();
    let p = prompt(&model);
    let logits = model.forward(&p, 0).unwrap();
    let best = argmax(&logits).unwrap();
    // Allow only two ids that are not the unmasked favourite.
    let allowed = [best.wrapping_add(1) % 1000, 42];
    let mut set = TokenSet::new(model.vocab_len());
    for a in allowed {
        set.insert(TokenId(a));
    }
    let mut sampler = Sampler::new(Sampling::All { temperature: 1.0 }, 5).unwrap();
    for _ in 0..20 {
        let t = sampler.sample(&mut logits.clone(), Some(&set)).unwrap();
        assert!(allowed.contains(&t), "sampled {t} outside the mask");
    }
}

#[test]
fn misuse_is_a_typed_error() {
    let mut model = default_model();
    assert!(matches!(model.forward(&[], 0), Err(ModelError::EmptyInput)));
    assert!(matches!(
        model.forward(&[1], 5),
        Err(ModelError::PositionGap { pos: 5, cached: 0 })
    ));
    let too_big = model.vocab_len() as u32 + 10;
    assert!(matches!(
        model.forward(&[too_big], 0),
        Err(ModelError::TokenOutOfRange { .. })
    ));
    let mut short =
        Model::load_with(smollm2_path(), &ModelConfig::new().max_context(Some(4))).unwrap();
    assert!(matches!(
        short.forward(&[1, 2, 3, 4, 5], 0),
        Err(ModelError::ContextOverflow {
            needed: 5,
            limit: 4
        })
    ));
}

#[test]
fn corrupt_and_truncated_files_are_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.gguf");
    std::fs::write(&junk, b"this is not a model at all").unwrap();
    let err = Model::load(&junk).unwrap_err();
    assert!(matches!(err, ModelError::InvalidGguf { .. }), "{err}");

    let src = std::fs::read(smollm2_path()).unwrap();
    let truncated = dir.path().join("truncated.gguf");
    std::fs::write(&truncated, &src[..src.len() / 3]).unwrap();
    let err = Model::load(&truncated).unwrap_err();
    assert!(matches!(err, ModelError::InvalidGguf { .. }), "{err}");
    assert!(err.to_string().contains("truncated"), "{err}");

    let header_only = dir.path().join("header.gguf");
    std::fs::write(&header_only, &src[..100]).unwrap();
    assert!(matches!(
        Model::load(&header_only),
        Err(ModelError::InvalidGguf { .. })
    ));

    let missing = dir.path().join("missing.gguf");
    assert!(matches!(Model::load(&missing), Err(ModelError::Io { .. })));
}

#[test]
fn unsupported_architecture_is_named() {
    use candle_core::quantized::{gguf_file, GgmlDType, QTensor};
    use candle_core::{Device, Tensor};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mamba.gguf");
    let arch = gguf_file::Value::String("mamba".into());
    let weight = QTensor::quantize(
        &Tensor::zeros((4, 32), candle_core::DType::F32, &Device::Cpu).unwrap(),
        GgmlDType::Q8_0,
    )
    .unwrap();
    let mut f = std::fs::File::create(&path).unwrap();
    gguf_file::write(
        &mut f,
        &[("general.architecture", &arch)],
        &[("token_embd.weight", &weight)],
    )
    .unwrap();
    drop(f);
    let err = Model::load(&path).unwrap_err();
    match &err {
        ModelError::UnsupportedArchitecture { architecture, .. } => {
            assert_eq!(architecture, "mamba")
        }
        other => panic!("expected UnsupportedArchitecture, got {other:?}"),
    }
    assert!(err.to_string().contains("unsupported architecture `mamba`"));
}

fn formwork_cmd() -> std::process::Command {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_formwork"));
    cmd.env("FORMWORK_MODELS", fetch::models_dir());
    cmd
}

#[test]
fn cli_generate_streams_reproducible_text_with_the_default_model() {
    // With SmolLM2's default system prompt the 135M model answers this oddly ("L'Étoile, …"),
    // exactly as candle's reference llama does; the check is that text comes out and that a
    // seeded sampled run repeats.
    let run = || {
        let out = formwork_cmd()
            .args(["generate", "--max-tokens", "8", "--temperature", "0.8"])
            .args([
                "--top-k",
                "40",
                "--seed",
                "3",
                "What is the capital of France?",
            ])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "stderr: {stderr}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let first = run();
    assert!(!first.trim().is_empty());
    assert_eq!(first, run());
}

#[test]
fn cli_generate_rejects_bad_input_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.gguf");
    std::fs::write(&junk, b"GGUF but not really").unwrap();
    let cases: [(&[&str], &str); 3] = [
        (&["generate", "   "], "empty prompt"),
        (
            &["generate", "--model", junk.to_str().unwrap(), "hi"],
            "invalid gguf file",
        ),
        (
            &["generate", "--temperature", "0.5", "--top-p", "2", "hi"],
            "top_p",
        ),
    ];
    for (args, expected) in cases {
        let out = formwork_cmd().args(args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}
