//! llguidance's tokenizer environment over one of our vocabularies, shared by the benches that
//! compare with it (`mask`, `compile`): same token bytes, special tokens marked as llguidance
//! expects.

use std::sync::Arc;

use formwork::toktrie::{TokenId, Vocab};

/// llguidance's tokenizer environment over the same vocabulary.
pub fn llg_env(v: &dyn Vocab) -> toktrie::TokEnv {
    let words: Vec<Vec<u8>> = (0..v.vocab_len() as u32)
        .map(|i| {
            let t = TokenId(i);
            let b = v.token_bytes(t).to_vec();
            if v.is_special(t) || v.eos_tokens().contains(&t) {
                // llguidance marks special tokens with a leading 0xFF.
                let mut s = vec![0xff];
                s.extend(b);
                s
            } else {
                b
            }
        })
        .collect();
    let info = toktrie::TokRxInfo::new(v.vocab_len() as u32, v.eos_tokens()[0].0);
    Arc::new(toktrie::ApproximateTokEnv::new(toktrie::TokTrie::from(
        &info, &words,
    )))
}
