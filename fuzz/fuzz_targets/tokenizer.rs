//! Fuzz target: tokenizer metadata as a GGUF file's header carries it (`tokenizer.ggml.*`),
//! structure-aware: a small vocabulary of arbitrary tokens (duplicates, empty strings, bad byte
//! tokens), merges that may name missing tokens, token types out of range, scores missing or
//! short, BOS/EOS/UNK ids past the end, either model kind and any pre-tokenizer name. Building
//! the tokenizer must succeed or give a `ModelError`, never panic; a built tokenizer must encode
//! and decode arbitrary text and ids, and its vocabulary must answer for every id.
#![no_main]

use std::collections::HashMap;

use arbitrary::{Arbitrary, Unstructured};
use candle_core::quantized::gguf_file::{Content, Value, VersionedMagic};
use formwork_core::toktrie::{TokenId, Vocab};
use formwork_model::tokenizer::GgufTokenizer;
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
struct Meta {
    kind: u8,
    pre: u8,
    tokens: Vec<String>,
    merges: Option<Vec<(u8, u8)>>,
    raw_merges: Vec<String>,
    types: Option<Vec<i32>>,
    scores: Option<Vec<f32>>,
    bos: Option<u32>,
    eos: Option<i32>,
    unk: Option<u32>,
    add_bos: Option<bool>,
    text: String,
    ids: Vec<u32>,
}

const PRE: [&str; 6] = ["smollm", "qwen2", "gpt2", "default", "llama-bpe", ""];

fn strings(v: impl IntoIterator<Item = String>) -> Value {
    Value::Array(v.into_iter().map(Value::String).collect())
}

fuzz_target!(|data: &[u8]| {
    let Ok(m) = Meta::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    // Byte tokens and a few real pieces keep the vocabularies close to real ones.
    let mut tokens: Vec<String> = m.tokens.iter().take(48).cloned().collect();
    if m.kind & 2 != 0 {
        tokens.extend((0..=255u8).map(|b| format!("<0x{b:02X}>")));
    }
    let mut md = HashMap::new();
    let kind = match m.kind % 4 {
        0 | 1 => "gpt2",
        2 => "llama",
        _ => "bert",
    };
    md.insert("tokenizer.ggml.model".into(), Value::String(kind.into()));
    if m.pre as usize % 8 < PRE.len() {
        md.insert(
            "tokenizer.ggml.pre".into(),
            Value::String(PRE[m.pre as usize % 8].into()),
        );
    }
    if let Some(pairs) = &m.merges {
        let n = tokens.len().max(1);
        let mut merges: Vec<String> = pairs
            .iter()
            .take(64)
            .map(|&(a, b)| {
                let a = tokens.get(a as usize % n).cloned().unwrap_or_default();
                let b = tokens.get(b as usize % n).cloned().unwrap_or_default();
                format!("{a} {b}")
            })
            .collect();
        merges.extend(m.raw_merges.iter().take(8).cloned());
        md.insert("tokenizer.ggml.merges".into(), strings(merges));
    }
    if let Some(types) = &m.types {
        md.insert(
            "tokenizer.ggml.token_type".into(),
            Value::Array(types.iter().take(400).map(|&t| Value::I32(t)).collect()),
        );
    }
    if let Some(scores) = &m.scores {
        md.insert(
            "tokenizer.ggml.scores".into(),
            Value::Array(scores.iter().take(400).map(|&s| Value::F32(s)).collect()),
        );
    }
    if let Some(b) = m.bos {
        md.insert("tokenizer.ggml.bos_token_id".into(), Value::U32(b % 512));
    }
    if let Some(e) = m.eos {
        md.insert("tokenizer.ggml.eos_token_id".into(), Value::I32(e % 512));
    }
    if let Some(u) = m.unk {
        md.insert("tokenizer.ggml.unknown_token_id".into(), Value::U32(u));
    }
    if let Some(b) = m.add_bos {
        md.insert("tokenizer.ggml.add_bos_token".into(), Value::Bool(b));
    }
    md.insert("tokenizer.ggml.tokens".into(), strings(tokens));
    let content = Content {
        magic: VersionedMagic::GgufV3,
        metadata: md,
        tensor_infos: HashMap::new(),
        tensor_data_offset: 0,
    };
    let Ok(tok) = GgufTokenizer::from_gguf_content(&content) else {
        return;
    };
    let n = tok.vocab_len();
    for id in 0..n as u32 {
        let _ = tok.token_bytes(TokenId(id));
        let _ = tok.is_special(TokenId(id));
    }
    if let Ok(ids) = tok.encode(&m.text) {
        assert!(ids.iter().all(|t| (t.0 as usize) < n), "id out of range");
        let _ = tok.decode_bytes(&ids);
    }
    let _ = tok.encode_plain(&m.text);
    let ids: Vec<TokenId> = m.ids.iter().map(|&i| TokenId(i % (n as u32 + 8))).collect();
    let _ = tok.decode_bytes(&ids);
});
