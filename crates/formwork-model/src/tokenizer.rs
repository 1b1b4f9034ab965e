//! The tokenizer of a GGUF model, rebuilt from the file's metadata as a `tokenizers::Tokenizer`,
//! plus the exact byte string of every token id: [`GgufTokenizer`], which implements
//! [`Vocab`] for the grammar engine.
//!
//! Owns: reading `tokenizer.ggml.*` metadata, building the tokenizer pipeline for the two kinds
//! of vocabulary formwork supports, token bytes, special-token classification and stop tokens.
//! Does not own: the weights (the runtime reads those) or chat templates (see
//! [`registry`](super::registry)).
//!
//! # The two kinds
//! - **Byte-level BPE** (`tokenizer.ggml.model = gpt2`: SmolLM2, Qwen2.5): tokens are spelled in
//!   GPT-2's printable byte alphabet (`Ġ` is the space byte); merges are in the file. What varies
//!   is how text is split before BPE, named by `tokenizer.ggml.pre`; each supported value maps
//!   to the split its model's published `tokenizer.json` uses (see [`ByteLevelSplit`]). An
//!   unknown value is an error rather than a silent GPT-2 fallback, because a wrong split gives
//!   plausible but wrong ids.
//! - **SentencePiece BPE** (`tokenizer.ggml.model = llama`: Gemma 3): spaces are `▁`, unknown
//!   characters fall back to `<0xNN>` byte tokens, and the file has scores but no merges. The
//!   merges are rebuilt from the vocabulary: every split of a token into two tokens is a merge,
//!   ranked by the merged token's position in the file (Gemma's file order is its merge order;
//!   its scores agree except for a handful of ties). Tokens made only of spaces are stored with
//!   real spaces and are respelled with `▁` so the rebuilt merges can reach them.
//!
//! Candle 0.11's own GGUF tokenizer is not used: it adds a leading space for SmolLM2 and rejects
//! Gemma's vocabulary.
//!
//! # Costs
//! Measured with `formwork models tokenize` in the dev profile (formwork unoptimized, its
//! dependencies at opt-level 3), whole process: SmolLM2 0.5 s CPU / 42 MB peak RSS, Qwen2.5
//! 1.3 s / 132 MB, Gemma 3 4.0 s / 234 MB (262k tokens, 515k merges rebuilt). Two copies of the
//! pipeline are held (one parses special tokens in prompts, one treats them as text); for Gemma
//! the second costs an estimated 60 MB.
//!
//! May use: `registry`, `gguf`, `fetch`.

use std::collections::HashMap;
use std::path::Path;

use candle_core::quantized::gguf_file::{Content, Value};
use tokenizers::decoders::byte_fallback::ByteFallback;
use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::decoders::fuse::Fuse;
use tokenizers::decoders::sequence::Sequence as DecoderSequence;
use tokenizers::decoders::DecoderWrapper;
use tokenizers::models::bpe::{Vocab as BpeVocab, BPE};
use tokenizers::normalizers::replace::Replace;
use tokenizers::normalizers::unicode::NFC;
use tokenizers::normalizers::NormalizerWrapper;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence as PreSequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::{AddedToken, NormalizedString, Normalizer, SplitDelimiterBehavior, Tokenizer};

use crate::fetch::LocatedModel;
use crate::gguf;
use crate::registry::ModelEntry;
use crate::ModelError;
use formwork_core::toktrie::{TokenId, Vocab};

/// GGUF `tokenizer.ggml.token_type` values (llama.cpp's `llama_token_type`).
mod token_type {
    pub const NORMAL: i32 = 1;
    pub const CONTROL: i32 = 3;
    pub const USER_DEFINED: i32 = 4;
    pub const UNUSED: i32 = 5;
    pub const BYTE: i32 = 6;
}

/// The common end-of-turn / end-of-text tokens, taken as stop tokens of a vocabulary that has
/// them when nothing better says which (local GGUF files, a bare `tokenizer.json`).
pub const END_TOKENS: [&str; 4] = ["<|im_end|>", "<|endoftext|>", "<end_of_turn>", "<|eot_id|>"];

/// Which vocabulary kind a tokenizer is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenizerKind {
    /// Byte-level BPE (GPT-2 byte alphabet), with the named pre-tokenizer split.
    ByteLevelBpe(ByteLevelSplit),
    /// SentencePiece-style BPE with `▁` for spaces and `<0xNN>` byte fallback.
    SentencePiece,
}

/// How byte-level BPE text is split before merging (`tokenizer.ggml.pre`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ByteLevelSplit {
    /// GPT-2's regex (`gpt-2`, `default`, or no `pre` key).
    Gpt2,
    /// SmolLM2 (`smollm`): every digit on its own, then GPT-2's regex.
    Smollm,
    /// Qwen2 (`qwen2`): NFC, then Qwen's regex (single digits, letters with one leading
    /// non-letter).
    Qwen2,
    /// Llama 3 (`llama-bpe`, `llama3`): digits in groups of up to three.
    Llama3,
    /// Whatever a user-supplied `tokenizer.json` says.
    TokenizerJson,
}

const QWEN2_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const LLAMA3_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

impl ByteLevelSplit {
    fn from_pre(pre: Option<&str>) -> Result<Self, ModelError> {
        match pre {
            None | Some("default") | Some("gpt-2") | Some("gpt2") => Ok(Self::Gpt2),
            Some("smollm") => Ok(Self::Smollm),
            Some("qwen2") => Ok(Self::Qwen2),
            Some("llama-bpe") | Some("llama3") | Some("llama-v3") => Ok(Self::Llama3),
            Some(other) => Err(ModelError::UnsupportedTokenizer {
                what: format!("byte-level pre-tokenizer `{other}` (tokenizer.ggml.pre)"),
            }),
        }
    }
}

/// A model's tokenizer and its vocabulary as the grammar engine needs it.
///
/// `encode` is for prompts (special tokens written in the text, like `<|im_start|>`, become
/// their ids); [`Vocab::tokenize`] is for generated text (special tokens stay text).
pub struct GgufTokenizer {
    /// Parses special tokens.
    tokenizer: Tokenizer,
    /// Treats special tokens as text and has no Unicode normalizer, so its ids spell exactly
    /// the input bytes.
    plain: Tokenizer,
    /// Whether the model's reference tokenizer NFC-normalizes text first (Qwen2).
    nfc: bool,
    kind: TokenizerKind,
    /// Concatenated token bytes; token `i` is `bytes[offsets[i]..offsets[i + 1]]`.
    bytes: Vec<u8>,
    offsets: Vec<u32>,
    special: Vec<bool>,
    eos: Vec<TokenId>,
    bos: Option<TokenId>,
    add_bos: bool,
    /// Token text → id, for exact lookups (stop tokens, byte fallback of invalid UTF-8).
    ids: HashMap<String, u32>,
}

impl std::fmt::Debug for GgufTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufTokenizer")
            .field("kind", &self.kind)
            .field("vocab_len", &self.vocab_len())
            .field("eos", &self.eos)
            .field("bos", &self.bos)
            .field("add_bos", &self.add_bos)
            .finish_non_exhaustive()
    }
}

/// The `tokenizer.ggml.*` metadata, typed.
struct Metadata {
    model: String,
    pre: Option<String>,
    tokens: Vec<String>,
    token_types: Vec<i32>,
    merges: Option<Vec<String>>,
    bos: Option<u32>,
    eos: Option<u32>,
    unk: Option<u32>,
    add_bos: Option<bool>,
}

impl GgufTokenizer {
    /// Reads the GGUF header of `path` and builds its tokenizer.
    ///
    /// # Errors
    /// [`ModelError::NotFound`], [`ModelError::InvalidGguf`] for a truncated or corrupt file,
    /// [`ModelError::Metadata`] / [`ModelError::UnsupportedTokenizer`] for a vocabulary it cannot
    /// rebuild exactly.
    pub fn from_gguf_file(path: &Path) -> Result<Self, ModelError> {
        let content = read_gguf(path)?;
        Self::from_gguf_content(&content)
    }

    /// Builds the tokenizer of a model whose GGUF header was already read (the runtime reads it
    /// once for both).
    pub fn from_gguf_content(content: &Content) -> Result<Self, ModelError> {
        let meta = Metadata::read(content)?;
        Self::build(meta)
    }

    /// Builds the tokenizer for a registry model whose file is at `path`, with the registry's
    /// stop tokens added to the end-of-sequence set.
    pub fn for_model(entry: &ModelEntry, path: &Path) -> Result<Self, ModelError> {
        let mut tok = Self::from_gguf_file(path)?;
        tok.add_stop_tokens(&entry.stop_tokens, &entry.name)?;
        Ok(tok)
    }

    /// Builds the tokenizer of a located model: the registry's stop tokens for registry models;
    /// for local files, `tokenizer.json` if one is beside the file, and as stop tokens the
    /// file's EOS plus whichever of the common end-of-turn tokens (`<|im_end|>`,
    /// `<|endoftext|>`, `<end_of_turn>`, `<|eot_id|>`) the vocabulary has.
    pub fn load(model: &LocatedModel) -> Result<Self, ModelError> {
        if let Some(entry) = &model.entry {
            return Self::for_model(entry, &model.path);
        }
        let mut tok = match &model.tokenizer_json {
            Some(json) => Self::from_tokenizer_json(json, &model.path)?,
            None => Self::from_gguf_file(&model.path)?,
        };
        for t in END_TOKENS {
            if let Some(id) = tok.token_id(t) {
                if !tok.eos.contains(&id) {
                    tok.eos.push(id);
                }
            }
        }
        Ok(tok)
    }

    /// Builds the tokenizer from a Hugging Face `tokenizer.json`, taking EOS/BOS and the vocabulary
    /// size from the GGUF file's metadata. Token bytes follow the file's decoder: byte-level if it
    /// decodes with `ByteLevel`, SentencePiece-style (`▁`, `<0xNN>`) otherwise.
    pub fn from_tokenizer_json(json: &Path, gguf: &Path) -> Result<Self, ModelError> {
        let content = read_gguf(gguf)?;
        let tokenizer = Tokenizer::from_file(json).map_err(|e| ModelError::Tokenizer {
            message: format!("{}: {e}", json.display()),
        })?;
        let md = &content.metadata;
        let meta_id = |key: &str| md.get(key).and_then(|v| v.to_u32().ok());
        let gguf_len = match md.get("tokenizer.ggml.tokens") {
            Some(Value::Array(items)) => items.len(),
            _ => 0,
        };
        let add_bos = md
            .get("tokenizer.ggml.add_bos_token")
            .and_then(|v| v.to_bool().ok());
        Self::from_hf(
            tokenizer,
            gguf_len,
            [
                meta_id("tokenizer.ggml.eos_token_id"),
                meta_id("tokenizer.ggml.bos_token_id"),
            ],
            add_bos,
        )
    }

    /// Builds the tokenizer from the text of a Hugging Face `tokenizer.json` alone (what
    /// `tokenizers.Tokenizer.to_str()` returns), for callers that have no GGUF file: the Python
    /// package's `Tokenizer.from_tokenizer_json` and `from_huggingface`. A `tokenizer.json`
    /// names no end-of-sequence token (that is `tokenizer_config.json`'s), so the EOS set is
    /// whichever of the common end tokens ([`END_TOKENS`]) the vocabulary has, possibly none:
    /// callers that know better replace it.
    ///
    /// # Errors
    /// [`ModelError::Tokenizer`] naming `source` when the text is not a tokenizer the
    /// `tokenizers` crate reads.
    pub fn from_tokenizer_json_text(json: &str, source: &str) -> Result<Self, ModelError> {
        let tokenizer: Tokenizer = json.parse().map_err(|e| ModelError::Tokenizer {
            message: format!("{source}: {e}"),
        })?;
        let mut tok = Self::from_hf(tokenizer, 0, [None, None], Some(false))?;
        for t in END_TOKENS {
            if let Some(id) = tok.token_id(t) {
                tok.eos.push(id);
            }
        }
        Ok(tok)
    }

    /// The part shared by the two `tokenizer.json` constructors: ids `0..max(gguf_len, highest
    /// id + 1)`, each token's type from the added-tokens table.
    fn from_hf(
        tokenizer: Tokenizer,
        gguf_len: usize,
        eos_bos: [Option<u32>; 2],
        add_bos: Option<bool>,
    ) -> Result<Self, ModelError> {
        let vocab = tokenizer.get_vocab(true);
        let n = vocab
            .values()
            .map(|&i| i as usize + 1)
            .max()
            .unwrap_or(0)
            .max(gguf_len);
        let decoder = tokenizer
            .get_decoder()
            .and_then(|d| serde_json::to_string(d).ok())
            .unwrap_or_default();
        let kind = if decoder.contains("\"ByteLevel\"") {
            TokenizerKind::ByteLevelBpe(ByteLevelSplit::TokenizerJson)
        } else {
            TokenizerKind::SentencePiece
        };
        let mut tokens = vec![String::new(); n];
        for (t, &i) in &vocab {
            tokens[i as usize] = t.clone();
        }
        let added = tokenizer.get_added_tokens_decoder();
        let token_types: Vec<i32> = tokens
            .iter()
            .enumerate()
            .map(|(i, t)| match added.get(&(i as u32)) {
                Some(a) if a.special => token_type::CONTROL,
                Some(_) => token_type::USER_DEFINED,
                // Ids the tokenizer never produces (padding up to the model's vocabulary size).
                None if t.is_empty() => token_type::UNUSED,
                None if kind == TokenizerKind::SentencePiece && parse_byte_token(t).is_some() => {
                    token_type::BYTE
                }
                None => token_type::NORMAL,
            })
            .collect();
        Self::assemble(tokenizer, kind, &tokens, &token_types, eos_bos, add_bos)
    }

    /// Adds the named tokens (e.g. `<|im_end|>`) to the end-of-sequence set.
    ///
    /// # Errors
    /// [`ModelError::UnknownToken`] if one is not a token of this vocabulary.
    pub fn add_stop_tokens(&mut self, tokens: &[String], model: &str) -> Result<(), ModelError> {
        for t in tokens {
            let id = self.token_id(t).ok_or_else(|| ModelError::UnknownToken {
                token: t.clone(),
                model: model.to_string(),
            })?;
            if !self.eos.contains(&id) {
                self.eos.push(id);
            }
        }
        Ok(())
    }

    fn build(meta: Metadata) -> Result<Self, ModelError> {
        let n = meta.tokens.len();
        if n == 0 {
            return Err(ModelError::Metadata {
                key: "tokenizer.ggml.tokens".into(),
                problem: "empty vocabulary".into(),
            });
        }
        if meta.token_types.len() != n {
            return Err(ModelError::Metadata {
                key: "tokenizer.ggml.token_type".into(),
                problem: format!("{} entries for {n} tokens", meta.token_types.len()),
            });
        }
        let (mut tokenizer, kind) = match meta.model.as_str() {
            "gpt2" => {
                let split = ByteLevelSplit::from_pre(meta.pre.as_deref())?;
                (
                    build_byte_level(&meta, split)?,
                    TokenizerKind::ByteLevelBpe(split),
                )
            }
            "llama" => (build_sentencepiece(&meta)?, TokenizerKind::SentencePiece),
            other => {
                return Err(ModelError::UnsupportedTokenizer {
                    what: format!("tokenizer model `{other}` (tokenizer.ggml.model)"),
                })
            }
        };
        add_added_tokens(&mut tokenizer, &meta, kind);
        Self::assemble(
            tokenizer,
            kind,
            &meta.tokens,
            &meta.token_types,
            [meta.eos, meta.bos],
            meta.add_bos,
        )
    }

    /// The part shared by GGUF vocabularies and `tokenizer.json`: token bytes, special flags,
    /// lookups, and the plain (special-tokens-as-text) pipeline.
    fn assemble(
        tokenizer: Tokenizer,
        kind: TokenizerKind,
        tokens: &[String],
        token_types: &[i32],
        [eos, bos]: [Option<u32>; 2],
        add_bos: Option<bool>,
    ) -> Result<Self, ModelError> {
        let n = tokens.len();
        let special: Vec<bool> = token_types
            .iter()
            .map(|&t| {
                !matches!(
                    t,
                    token_type::NORMAL | token_type::USER_DEFINED | token_type::BYTE
                )
            })
            .collect();
        let mut plain = tokenizer.clone();
        plain.set_encode_special_tokens(true);
        let nfc = kind == TokenizerKind::ByteLevelBpe(ByteLevelSplit::Qwen2);
        if nfc {
            plain.with_normalizer(None::<NormalizerWrapper>);
        }

        let mut bytes = Vec::new();
        let mut offsets = Vec::with_capacity(n + 1);
        offsets.push(0u32);
        let inverse = match kind {
            TokenizerKind::ByteLevelBpe(_) => Some(byte_alphabet_inverse()),
            TokenizerKind::SentencePiece => None,
        };
        for (i, token) in tokens.iter().enumerate() {
            let ty = token_types[i];
            match &inverse {
                Some(inv) if !special[i] => match byte_level_bytes(token, inv) {
                    Some(b) => bytes.extend_from_slice(&b),
                    None => bytes.extend_from_slice(token.as_bytes()),
                },
                Some(_) => bytes.extend_from_slice(token.as_bytes()),
                None if ty == token_type::BYTE => match parse_byte_token(token) {
                    Some(b) => bytes.push(b),
                    None => {
                        return Err(ModelError::Metadata {
                            key: "tokenizer.ggml.tokens".into(),
                            problem: format!("byte token {i} is `{token}`, not `<0xNN>`"),
                        })
                    }
                },
                None if special[i] => bytes.extend_from_slice(token.as_bytes()),
                None => bytes.extend_from_slice(token.replace('\u{2581}', " ").as_bytes()),
            }
            let end = u32::try_from(bytes.len()).map_err(|_| ModelError::Metadata {
                key: "tokenizer.ggml.tokens".into(),
                problem: "vocabulary larger than 4 GiB".into(),
            })?;
            offsets.push(end);
        }

        let ids = tokens
            .iter()
            .enumerate()
            .filter(|(_, t)| !t.is_empty())
            .map(|(i, t)| (t.clone(), i as u32))
            .collect();
        let check = |id: Option<u32>, key: &str| -> Result<Option<TokenId>, ModelError> {
            match id {
                Some(id) if (id as usize) >= n => Err(ModelError::Metadata {
                    key: key.into(),
                    problem: format!("id {id} is outside the vocabulary of {n} tokens"),
                }),
                other => Ok(other.map(TokenId)),
            }
        };
        let eos = check(eos, "tokenizer.ggml.eos_token_id")?;
        let bos = check(bos, "tokenizer.ggml.bos_token_id")?;
        // llama.cpp's default: SentencePiece vocabularies add BOS unless told otherwise.
        let add_bos = add_bos.unwrap_or(kind == TokenizerKind::SentencePiece) && bos.is_some();
        Ok(Self {
            tokenizer,
            plain,
            nfc,
            kind,
            bytes,
            offsets,
            special,
            eos: eos.into_iter().collect(),
            bos,
            add_bos,
            ids,
        })
    }

    /// The vocabulary kind.
    pub fn kind(&self) -> TokenizerKind {
        self.kind
    }

    /// The `tokenizers` pipeline (parses special tokens).
    pub fn inner(&self) -> &Tokenizer {
        &self.tokenizer
    }

    /// The beginning-of-sequence token, if the vocabulary has one.
    pub fn bos_token(&self) -> Option<TokenId> {
        self.bos
    }

    /// Whether prompts should start with [`bos_token`](Self::bos_token)
    /// (`tokenizer.ggml.add_bos_token`).
    pub fn add_bos(&self) -> bool {
        self.add_bos
    }

    /// The id of the token spelled exactly `text` (as the file spells it: `<|im_end|>`, `Ġthe`,
    /// `▁the`).
    pub fn token_id(&self, text: &str) -> Option<TokenId> {
        self.ids.get(text).map(|&i| TokenId(i))
    }

    /// Encodes a prompt: special tokens written in `text` become their ids; no BOS is added
    /// (the caller decides, see [`add_bos`](Self::add_bos)).
    pub fn encode(&self, text: &str) -> Result<Vec<TokenId>, ModelError> {
        let enc = self
            .tokenizer
            .encode_fast(text, false)
            .map_err(|e| ModelError::Tokenizer {
                message: e.to_string(),
            })?;
        Ok(enc.get_ids().iter().map(|&i| TokenId(i)).collect())
    }

    /// Encodes text as the model's reference tokenizer does, with special tokens treated as
    /// text (NFC-normalized first for Qwen2, so the ids may spell a different byte string; see
    /// [`Vocab::tokenize`] for the byte-exact variant).
    pub fn encode_plain(&self, text: &str) -> Result<Vec<TokenId>, ModelError> {
        if self.nfc {
            let mut normalized = NormalizedString::from(text);
            NFC.normalize(&mut normalized).map_err(tokenizer_err)?;
            return self.encode_exact(normalized.get());
        }
        self.encode_exact(text)
    }

    /// Special tokens as text, no normalization: the ids spell exactly `text`.
    fn encode_exact(&self, text: &str) -> Result<Vec<TokenId>, ModelError> {
        let enc = self
            .plain
            .encode_fast(text, false)
            .map_err(|e| ModelError::Tokenizer {
                message: e.to_string(),
            })?;
        Ok(enc.get_ids().iter().map(|&i| TokenId(i)).collect())
    }

    /// The concatenated bytes of `ids` (special tokens as their text). Ids outside the
    /// vocabulary contribute nothing.
    pub fn decode_bytes(&self, ids: &[TokenId]) -> Vec<u8> {
        let mut out = Vec::new();
        for &id in ids {
            if id.as_usize() < self.vocab_len() {
                out.extend_from_slice(self.token_bytes(id));
            }
        }
        out
    }

    /// The id of the single-byte token for `b`: `<0xNN>` (SentencePiece) or the byte-alphabet
    /// character (byte-level).
    fn byte_token(&self, b: u8) -> Option<TokenId> {
        match self.kind {
            TokenizerKind::SentencePiece => self.token_id(&format!("<0x{b:02X}>")),
            TokenizerKind::ByteLevelBpe(_) => {
                let c = byte_alphabet()[b as usize];
                self.token_id(c.encode_utf8(&mut [0u8; 4]))
            }
        }
    }
}

impl Vocab for GgufTokenizer {
    fn vocab_len(&self) -> usize {
        self.offsets.len() - 1
    }

    fn token_bytes(&self, id: TokenId) -> &[u8] {
        let i = id.as_usize();
        match (self.offsets.get(i), self.offsets.get(i + 1)) {
            (Some(&s), Some(&e)) => &self.bytes[s as usize..e as usize],
            _ => &[],
        }
    }

    fn is_special(&self, id: TokenId) -> bool {
        self.special.get(id.as_usize()).copied().unwrap_or(false)
    }

    fn eos_tokens(&self) -> &[TokenId] {
        &self.eos
    }

    /// Valid UTF-8 runs go through the tokenizer (special tokens as text, no Unicode
    /// normalization: fast-forwarded bytes must be reproduced exactly); bytes that are not valid
    /// UTF-8 (a character cut by a grammar boundary) become single-byte tokens. Equal to
    /// [`GgufTokenizer::encode_plain`] on text that normalization leaves unchanged.
    ///
    /// The result spells exactly `bytes` unless a byte has no token at all (SmolLM2's vocabulary
    /// lacks 21 byte values, e.g. the control characters 0x04 and 0x1D and the never-valid 0xC0,
    /// 0xF5–0xFF); such bytes are dropped, as the reference tokenizer drops them. Use
    /// [`GgufTokenizer::try_tokenize`] to get an error instead.
    fn tokenize(&self, bytes: &[u8]) -> Vec<TokenId> {
        let mut out = Vec::new();
        self.tokenize_into(bytes, &mut out, false)
            .expect("lenient tokenization has no error path");
        out
    }
}

impl GgufTokenizer {
    /// [`Vocab::tokenize`], or [`ModelError::Untokenizable`] naming the first byte that no token
    /// of this vocabulary can spell.
    pub fn try_tokenize(&self, bytes: &[u8]) -> Result<Vec<TokenId>, ModelError> {
        let mut out = Vec::new();
        self.tokenize_into(bytes, &mut out, true)?;
        Ok(out)
    }

    fn tokenize_into(
        &self,
        bytes: &[u8],
        out: &mut Vec<TokenId>,
        strict: bool,
    ) -> Result<(), ModelError> {
        let mut offset = 0;
        let push_byte = |out: &mut Vec<TokenId>, b: u8, at: usize| match self.byte_token(b) {
            Some(id) => {
                out.push(id);
                Ok(())
            }
            None if strict => Err(ModelError::Untokenizable {
                byte: b,
                offset: at,
            }),
            None => Ok(()),
        };
        for chunk in bytes.utf8_chunks() {
            let valid = chunk.valid();
            if !valid.is_empty() {
                match self.encode_exact(valid) {
                    Ok(ids) if self.decode_bytes(&ids) == valid.as_bytes() => out.extend(ids),
                    // The tokenizer dropped a character it has no token for: spell the run byte
                    // by byte, so nothing else is silently changed.
                    _ => {
                        for (i, b) in valid.bytes().enumerate() {
                            push_byte(out, b, offset + i)?;
                        }
                    }
                }
                offset += valid.len();
            }
            for &b in chunk.invalid() {
                push_byte(out, b, offset)?;
                offset += 1;
            }
        }
        Ok(())
    }
}

/// Reads the GGUF header (metadata and tensor index) of `path`.
pub fn read_gguf(path: &Path) -> Result<Content, ModelError> {
    let file = std::fs::File::open(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => ModelError::NotFound {
            path: path.to_path_buf(),
        },
        _ => ModelError::io("open", path, e),
    })?;
    let len = file
        .metadata()
        .map_err(|e| ModelError::io("read", path, e))?
        .len();
    // Checked before candle allocates from the header's counts (see `gguf`).
    let mut file = std::io::BufReader::with_capacity(1 << 16, file);
    gguf::read_header(&mut file, len, path)
}

impl Metadata {
    fn read(content: &Content) -> Result<Self, ModelError> {
        let md = &content.metadata;
        let bad = |key: &str, problem: &str| ModelError::Metadata {
            key: key.to_string(),
            problem: problem.to_string(),
        };
        let string = |key: &str| -> Result<Option<String>, ModelError> {
            match md.get(key) {
                None => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(_) => Err(bad(key, "expected a string")),
            }
        };
        let strings = |key: &str| -> Result<Option<Vec<String>>, ModelError> {
            match md.get(key) {
                None => Ok(None),
                Some(Value::Array(items)) => items
                    .iter()
                    .map(|v| match v {
                        Value::String(s) => Ok(s.clone()),
                        _ => Err(bad(key, "expected an array of strings")),
                    })
                    .collect::<Result<Vec<_>, _>>()
                    .map(Some),
                Some(_) => Err(bad(key, "expected an array of strings")),
            }
        };
        let id = |key: &str| -> Result<Option<u32>, ModelError> {
            match md.get(key) {
                None => Ok(None),
                Some(v) => v
                    .to_u32()
                    .or_else(|_| v.to_i32().map(|i| i as u32))
                    .map(Some)
                    .map_err(|_| bad(key, "expected an integer token id")),
            }
        };
        let model = string("tokenizer.ggml.model")?.ok_or_else(|| {
            bad(
                "tokenizer.ggml.model",
                "missing (the file has no tokenizer)",
            )
        })?;
        let tokens = strings("tokenizer.ggml.tokens")?
            .ok_or_else(|| bad("tokenizer.ggml.tokens", "missing"))?;
        let token_types = match md.get("tokenizer.ggml.token_type") {
            None => vec![token_type::NORMAL; tokens.len()],
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| {
                    v.to_i32()
                        .map_err(|_| bad("tokenizer.ggml.token_type", "expected i32 values"))
                })
                .collect::<Result<Vec<_>, _>>()?,
            Some(_) => return Err(bad("tokenizer.ggml.token_type", "expected an array")),
        };
        let add_bos = match md.get("tokenizer.ggml.add_bos_token") {
            None => None,
            Some(v) => Some(
                v.to_bool()
                    .map_err(|_| bad("tokenizer.ggml.add_bos_token", "expected a bool"))?,
            ),
        };
        Ok(Self {
            model,
            pre: string("tokenizer.ggml.pre")?,
            tokens,
            token_types,
            merges: strings("tokenizer.ggml.merges")?,
            bos: id("tokenizer.ggml.bos_token_id")?,
            eos: id("tokenizer.ggml.eos_token_id")?,
            unk: id("tokenizer.ggml.unknown_token_id")?,
            add_bos,
        })
    }
}

fn tokenizer_err(e: impl std::fmt::Display) -> ModelError {
    ModelError::Tokenizer {
        message: e.to_string(),
    }
}

fn build_byte_level(meta: &Metadata, split: ByteLevelSplit) -> Result<Tokenizer, ModelError> {
    let merges_text = meta.merges.as_ref().ok_or_else(|| ModelError::Metadata {
        key: "tokenizer.ggml.merges".into(),
        problem: "missing (required for byte-level BPE)".into(),
    })?;
    let vocab: BpeVocab = meta
        .tokens
        .iter()
        .enumerate()
        .map(|(i, t)| (t.clone(), i as u32))
        .collect();
    let mut merges = Vec::with_capacity(merges_text.len());
    for (i, m) in merges_text.iter().enumerate() {
        let (a, b) = m.split_once(' ').ok_or_else(|| ModelError::Metadata {
            key: "tokenizer.ggml.merges".into(),
            problem: format!("merge {i} `{m}` is not two tokens separated by a space"),
        })?;
        merges.push((a.to_string(), b.to_string()));
    }
    let bpe = BPE::builder()
        .vocab_and_merges(vocab, merges)
        .build()
        .map_err(tokenizer_err)?;
    let mut tok = Tokenizer::new(bpe);
    let byte_level = ByteLevel::default().add_prefix_space(false);
    let regex_split = |pattern: &str| -> Result<PreTokenizerWrapper, ModelError> {
        Ok(Split::new(
            SplitPattern::Regex(pattern.to_string()),
            SplitDelimiterBehavior::Isolated,
            false,
        )
        .map_err(tokenizer_err)?
        .into())
    };
    let pre: PreTokenizerWrapper = match split {
        // `TokenizerJson` never reaches here (its pipeline comes from the file).
        ByteLevelSplit::Gpt2 | ByteLevelSplit::TokenizerJson => byte_level.use_regex(true).into(),
        ByteLevelSplit::Smollm => PreSequence::new(vec![
            Digits::new(true).into(),
            byte_level.use_regex(true).into(),
        ])
        .into(),
        ByteLevelSplit::Qwen2 => PreSequence::new(vec![
            regex_split(QWEN2_SPLIT)?,
            byte_level.use_regex(false).into(),
        ])
        .into(),
        ByteLevelSplit::Llama3 => PreSequence::new(vec![
            regex_split(LLAMA3_SPLIT)?,
            byte_level.use_regex(false).into(),
        ])
        .into(),
    };
    if split == ByteLevelSplit::Qwen2 {
        tok.with_normalizer(Some(NormalizerWrapper::from(NFC)));
    }
    tok.with_pre_tokenizer(Some(pre));
    tok.with_decoder(Some(DecoderWrapper::from(ByteLevelDecoder::default())));
    Ok(tok)
}

fn build_sentencepiece(meta: &Metadata) -> Result<Tokenizer, ModelError> {
    // Space-only tokens are stored with real spaces; everywhere else a space is `▁`.
    let spelled: Vec<String> = meta
        .tokens
        .iter()
        .map(|t| {
            if !t.is_empty() && t.bytes().all(|b| b == b' ') {
                "\u{2581}".repeat(t.len())
            } else {
                t.clone()
            }
        })
        .collect();
    let vocab: HashMap<&str, u32> = spelled
        .iter()
        .enumerate()
        .map(|(i, t)| (t.as_str(), i as u32))
        .collect();
    // Every split of a token into two tokens is a merge producing it; earlier tokens merge
    // first. Among splits of one token: longer left part first, then lower ids.
    // Tokens are visited in rank order, so only each token's own splits need sorting.
    let mut merges: Vec<(String, String)> = Vec::new();
    let mut splits: Vec<(usize, u32, u32)> = Vec::new();
    for (i, t) in spelled.iter().enumerate() {
        if meta.token_types[i] == token_type::BYTE {
            continue;
        }
        splits.clear();
        for (pos, _) in t.char_indices().skip(1) {
            let (l, r) = t.split_at(pos);
            if let Some(&li) = vocab.get(l) {
                if let Some(&ri) = vocab.get(r) {
                    splits.push((usize::MAX - l.len(), li, ri));
                }
            }
        }
        splits.sort_unstable();
        merges.extend(
            splits
                .iter()
                .map(|&(_, l, r)| (spelled[l as usize].clone(), spelled[r as usize].clone())),
        );
    }
    let owned_vocab: BpeVocab = vocab.iter().map(|(k, &v)| (k.to_string(), v)).collect();
    let mut builder = BPE::builder()
        .vocab_and_merges(owned_vocab, merges)
        .byte_fallback(true)
        .fuse_unk(true);
    if let Some(unk) = meta.unk.and_then(|u| spelled.get(u as usize)) {
        builder = builder.unk_token(unk.clone());
    }
    let bpe = builder.build().map_err(tokenizer_err)?;
    let mut tok = Tokenizer::new(bpe);
    tok.with_normalizer(Some(NormalizerWrapper::from(
        Replace::new(" ", "\u{2581}").map_err(tokenizer_err)?,
    )));
    tok.with_decoder(Some(DecoderWrapper::from(DecoderSequence::new(vec![
        DecoderWrapper::from(Replace::new("\u{2581}", " ").map_err(tokenizer_err)?),
        DecoderWrapper::from(ByteFallback::new()),
        DecoderWrapper::from(Fuse::new()),
    ]))));
    Ok(tok)
}

/// Control and other non-text tokens are matched whole as special tokens; user-defined tokens
/// (Gemma's `\n\n`, HTML tags, Qwen's `<tool_call>`) are matched whole as plain added tokens,
/// as llama.cpp does.
fn add_added_tokens(tok: &mut Tokenizer, meta: &Metadata, kind: TokenizerKind) {
    let alphabet: Option<std::collections::HashSet<char>> = match kind {
        TokenizerKind::ByteLevelBpe(_) => Some(byte_alphabet().iter().copied().collect()),
        TokenizerKind::SentencePiece => None,
    };
    let mut special = Vec::new();
    let mut user = Vec::new();
    for (token, &ty) in meta.tokens.iter().zip(&meta.token_types) {
        match ty {
            token_type::NORMAL | token_type::BYTE => {}
            token_type::USER_DEFINED => {
                // Space-only SentencePiece tokens are reached through merges of `▁` instead.
                if kind == TokenizerKind::SentencePiece && token.bytes().all(|b| b == b' ') {
                    continue;
                }
                user.push(AddedToken::from(token.clone(), false).normalized(false));
            }
            _ => {
                // A byte-level "special" token spelled outside the byte alphabet is a mislabelled
                // padding entry; matching it would produce ids the model never saw.
                if let Some(a) = &alphabet {
                    if !token.chars().all(|c| a.contains(&c)) {
                        continue;
                    }
                }
                special.push(AddedToken::from(token.clone(), true).normalized(false));
            }
        }
    }
    tok.add_special_tokens(&special);
    tok.add_tokens(&user);
}

/// GPT-2's byte alphabet: byte `b` is spelled as `byte_alphabet()[b]`. Printable bytes stand for
/// themselves; the rest are shifted to U+0100 and up in byte order.
fn byte_alphabet() -> [char; 256] {
    let mut table = ['\0'; 256];
    let mut next = 256u32;
    for b in 0..=255u8 {
        let printable = matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
        table[b as usize] = if printable {
            char::from(b)
        } else {
            let c = char::from_u32(next).unwrap_or('\u{FFFD}');
            next += 1;
            c
        };
    }
    table
}

fn byte_alphabet_inverse() -> HashMap<char, u8> {
    byte_alphabet()
        .iter()
        .enumerate()
        .map(|(b, &c)| (c, b as u8))
        .collect()
}

/// The bytes a byte-level token spells, or `None` if it uses characters outside the alphabet.
fn byte_level_bytes(token: &str, inverse: &HashMap<char, u8>) -> Option<Vec<u8>> {
    token.chars().map(|c| inverse.get(&c).copied()).collect()
}

/// `<0xNN>` → the byte.
fn parse_byte_token(token: &str) -> Option<u8> {
    let hex = token.strip_prefix("<0x")?.strip_suffix('>')?;
    if hex.len() != 2 {
        return None;
    }
    u8::from_str_radix(hex, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_alphabet_matches_gpt2() {
        let a = byte_alphabet();
        assert_eq!(a[b' ' as usize], 'Ġ');
        assert_eq!(a[b'\n' as usize], 'Ċ');
        assert_eq!(a[b'\t' as usize], 'ĉ');
        assert_eq!(a[b'A' as usize], 'A');
        assert_eq!(a[0], 'Ā');
        assert_eq!(a[0xAD], 'Ń');
        let inv = byte_alphabet_inverse();
        assert_eq!(inv.len(), 256, "the alphabet is a bijection");
        assert_eq!(byte_level_bytes("ĠAlice", &inv).unwrap(), b" Alice");
        assert_eq!(byte_level_bytes("<|im_end|>", &inv).unwrap(), b"<|im_end|>");
        assert!(byte_level_bytes("▁x", &inv).is_none());
    }

    #[test]
    fn byte_tokens_parse() {
        assert_eq!(parse_byte_token("<0x0A>"), Some(b'\n'));
        assert_eq!(parse_byte_token("<0xFF>"), Some(0xFF));
        assert_eq!(parse_byte_token("<0xG0>"), None);
        assert_eq!(parse_byte_token("<0x0A0>"), None);
        assert_eq!(parse_byte_token("0x0A"), None);
    }

    fn meta(model: &str, tokens: &[&str], types: &[i32], merges: Option<&[&str]>) -> Metadata {
        Metadata {
            model: model.to_string(),
            pre: None,
            tokens: tokens.iter().map(|s| s.to_string()).collect(),
            token_types: types.to_vec(),
            merges: merges.map(|m| m.iter().map(|s| s.to_string()).collect()),
            bos: None,
            eos: Some(0),
            unk: None,
            add_bos: Some(false),
        }
    }

    /// A tiny SentencePiece vocabulary: merges are rebuilt from token order, unknown characters
    /// fall back to bytes, and the byte strings round-trip.
    #[test]
    fn tiny_sentencepiece_vocabulary() {
        let mut tokens = vec!["<eos>", "▁", "a", "b", "ab", "▁ab", "  "];
        let mut types = vec![3, 1, 1, 1, 1, 1, 4];
        let bytes: Vec<String> = (0..=255u8).map(|b| format!("<0x{b:02X}>")).collect();
        tokens.extend(bytes.iter().map(String::as_str));
        types.extend(std::iter::repeat_n(6, 256));
        let tok = GgufTokenizer::build(meta("llama", &tokens, &types, None)).unwrap();
        assert_eq!(tok.kind(), TokenizerKind::SentencePiece);
        let ids = |s: &str| {
            tok.tokenize(s.as_bytes())
                .iter()
                .map(|t| t.0)
                .collect::<Vec<_>>()
        };
        assert_eq!(ids("ab"), vec![4]);
        assert_eq!(ids(" ab"), vec![5]);
        assert_eq!(ids("  "), vec![6], "space-only tokens are respelled with ▁");
        // 'é' is not in the vocabulary: two byte tokens (0xC3 0xA9) after the 7 text tokens.
        assert_eq!(ids("é"), vec![7 + 0xC3, 7 + 0xA9]);
        assert_eq!(tok.token_bytes(TokenId(5)), b" ab");
        assert_eq!(tok.token_bytes(TokenId(7 + 10)), b"\n");
        assert!(tok.is_special(TokenId(0)));
        assert!(!tok.is_special(TokenId(6)));
        // Special tokens are text for `tokenize`, tokens for `encode`.
        assert_eq!(tok.encode("<eos>").unwrap(), vec![TokenId(0)]);
        assert_ne!(tok.tokenize(b"<eos>"), vec![TokenId(0)]);
        assert_eq!(tok.decode_bytes(&tok.tokenize(b"<eos>")), b"<eos>");
        // Invalid UTF-8 (a character cut in half) still spells exactly the input.
        assert_eq!(
            tok.tokenize(&[b'a', 0xC3]),
            vec![TokenId(2), TokenId(7 + 0xC3)]
        );
    }

    #[test]
    fn tiny_byte_level_vocabulary() {
        let alphabet = byte_alphabet();
        let mut tokens: Vec<String> = vec!["<|end|>".into()];
        tokens.extend(alphabet.iter().map(|c| c.to_string()));
        tokens.push("Ġa".into());
        let mut types = vec![3];
        types.extend(std::iter::repeat_n(1, 257));
        let token_refs: Vec<&str> = tokens.iter().map(String::as_str).collect();
        let tok = GgufTokenizer::build(meta("gpt2", &token_refs, &types, Some(&["Ġ a"]))).unwrap();
        let ga = TokenId(257);
        assert_eq!(tok.tokenize(b" a"), vec![ga]);
        assert_eq!(tok.token_bytes(ga), b" a");
        assert_eq!(tok.token_bytes(TokenId(1 + b'\n' as u32)), b"\n");
        assert_eq!(
            tok.tokenize(&[0xFF, b'x']),
            vec![TokenId(1 + 0xFF), TokenId(1 + b'x' as u32)]
        );
        assert_eq!(tok.eos_tokens(), &[TokenId(0)]);
    }

    #[test]
    fn unsupported_kinds_are_errors() {
        let err = GgufTokenizer::build(meta("rwkv", &["a"], &[1], None)).unwrap_err();
        assert!(err.to_string().contains("tokenizer model `rwkv`"), "{err}");
        let mut m = meta("gpt2", &["a"], &[1], Some(&[]));
        m.pre = Some("exotic".into());
        let err = GgufTokenizer::build(m).unwrap_err();
        assert!(err.to_string().contains("pre-tokenizer `exotic`"), "{err}");
        let err = GgufTokenizer::build(meta("gpt2", &["a"], &[1], None)).unwrap_err();
        assert!(err.to_string().contains("tokenizer.ggml.merges"), "{err}");
    }

    fn tiny_sentencepiece() -> GgufTokenizer {
        let mut tokens: Vec<String> = [
            "<eos>",
            "\u{2581}",
            "a",
            "b",
            "ab",
            "\u{2581}ab",
            "  ",
            "<s>",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let mut types = vec![3, 1, 1, 1, 1, 1, 4, 3];
        tokens.extend((0..=255u8).map(|b| format!("<0x{b:02X}>")));
        types.extend(std::iter::repeat_n(6, 256));
        let refs: Vec<&str> = tokens.iter().map(String::as_str).collect();
        GgufTokenizer::build(meta("llama", &refs, &types, None)).unwrap()
    }

    fn tiny_byte_level() -> GgufTokenizer {
        let mut tokens: Vec<String> = vec!["<|end|>".into()];
        tokens.extend(byte_alphabet().iter().map(|c| c.to_string()));
        tokens.extend(["\u{0120}a".to_string(), "ab".to_string()]);
        let mut types = vec![3];
        types.extend(std::iter::repeat_n(1, 258));
        let refs: Vec<&str> = tokens.iter().map(String::as_str).collect();
        GgufTokenizer::build(meta("gpt2", &refs, &types, Some(&["\u{0120} a", "a b"]))).unwrap()
    }

    proptest::proptest! {
        /// Whatever the bytes (text, special-token spellings, invalid UTF-8), `tokenize` spells
        /// them exactly and never yields a special token.
        #[test]
        fn tokenize_round_trips_any_bytes(
            bytes in proptest::collection::vec(
                proptest::prop_oneof![
                    proptest::sample::select(b" ab<>seo|nd".to_vec()),
                    proptest::num::u8::ANY,
                ],
                0..40,
            )
        ) {
            for tok in [tiny_sentencepiece(), tiny_byte_level()] {
                let ids = tok.tokenize(&bytes);
                proptest::prop_assert_eq!(tok.decode_bytes(&ids), bytes.clone());
                proptest::prop_assert!(ids.iter().all(|&id| !tok.is_special(id)));
            }
        }
    }
}
