//! The model families formwork runs ([`Architecture`]) and each one's row of facts beyond
//! its GGUF metadata (`ArchSpec`): activation, rotary layout and base, sliding-window layers,
//! embedding scale. Read by the loader for both forward passes.

use crate::forward::Act;

/// The model families formwork can run, read from `general.architecture`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Architecture {
    /// Llama and its derivatives (SmolLM2): interleaved rotary, SiLU MLP.
    Llama,
    /// Qwen2 / Qwen2.5: q/k/v biases, split-half (NeoX) rotary, SiLU MLP.
    Qwen2,
    /// Gemma 3: q/k norms, post-norms, tanh-GELU MLP, scaled embeddings, sliding-window layers.
    Gemma3,
}

impl Architecture {
    /// Every supported architecture.
    const ALL: [Architecture; 3] = [Self::Llama, Self::Qwen2, Self::Gemma3];

    /// The architecture for a GGUF `general.architecture` value, if supported.
    pub fn from_gguf_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|a| a.spec().gguf_name == name)
    }

    /// The GGUF name (also the metadata key prefix).
    pub fn as_str(self) -> &'static str {
        self.spec().gguf_name
    }

    /// This architecture's row of facts, the one place they are written (see [`ArchSpec`]).
    pub(super) fn spec(self) -> ArchSpec {
        match self {
            Self::Llama => ArchSpec {
                gguf_name: "llama",
                act: Act::Silu,
                rope_interleaved: true,
                rope_base: 10_000.0,
                sliding: None,
                scaled_embeddings: false,
            },
            Self::Qwen2 => ArchSpec {
                gguf_name: "qwen2",
                act: Act::Silu,
                rope_interleaved: false,
                rope_base: 10_000.0,
                sliding: None,
                scaled_embeddings: false,
            },
            Self::Gemma3 => ArchSpec {
                gguf_name: "gemma3",
                act: Act::GeluTanh,
                rope_interleaved: false,
                rope_base: 1_000_000.0,
                sliding: Some(Sliding {
                    pattern: 6,
                    local_rope_base: 10_000.0,
                }),
                scaled_embeddings: true,
            },
        }
    }
}

/// What the loader knows about an architecture beyond its GGUF metadata: one row per
/// [`Architecture`] ([`Architecture::spec`]), read by [`Model::load_with`] for both forward
/// passes. Sizes, the norm epsilon and which optional tensors exist (q/k/v biases, q/k norms,
/// post-norms) come from the file; defaults here apply only where the file is silent.
#[derive(Clone, Copy, Debug)]
pub(super) struct ArchSpec {
    /// `general.architecture`, also the prefix of the architecture's metadata keys.
    pub(super) gguf_name: &'static str,
    /// The MLP gate's activation.
    pub(super) act: Act,
    /// Llama GGUFs store q/k permuted for interleaved pairs (2i, 2i+1); qwen2 and gemma3 use
    /// split halves (i, i + d/2), matching llama.cpp's `LLAMA_ROPE_TYPE_NORM` / `NEOX`.
    pub(super) rope_interleaved: bool,
    /// The rotary base when the file has no `rope.freq_base`.
    pub(super) rope_base: f32,
    /// Sliding-window (local) layers between the global ones (Gemma 3).
    pub(super) sliding: Option<Sliding>,
    /// Embeddings are multiplied by sqrt(hidden) (Gemma).
    pub(super) scaled_embeddings: bool,
}

/// How an architecture mixes sliding-window layers with global ones: the defaults of the
/// metadata that says so. The window itself (`attention.sliding_window`) must be in the file.
#[derive(Clone, Copy, Debug)]
pub(super) struct Sliding {
    /// One global layer every `pattern` layers when the file has no
    /// `attention.sliding_window_type`.
    pub(super) pattern: usize,
    /// The local layers' rotary base (unscaled) when the file has no `rope.local_freq_base`.
    pub(super) local_rope_base: f32,
}

impl std::fmt::Display for Architecture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn architecture_names_round_trip() {
        for a in [
            Architecture::Llama,
            Architecture::Qwen2,
            Architecture::Gemma3,
        ] {
            assert_eq!(Architecture::from_gguf_name(a.as_str()), Some(a));
        }
        assert_eq!(Architecture::from_gguf_name("mamba"), None);
    }
}
