//! [`Sampler`]: picks the next token from a model's logits, after an optional grammar mask.
//!
//! Owns the sampling strategy ([`Sampling`], candle style: an enum carrying its parameters) and
//! a seeded random generator, so a run is reproducible from `(model, prompt, Sampling, seed)`.
//! Does not own the mask: the matcher computes the allowed-token bitset, and
//! [`Sampler::sample`] applies it to the logits (disallowed → -inf) before choosing.
//!
//! # Invariants
//! - A masked-out token is never returned, and neither is an id past the mask's universe (the
//!   model's padding rows beyond the tokenizer's vocabulary).
//! - `ArgMax` ignores the random generator, so greedy output does not depend on the seed.
//!
//! # Costs
//! Masking is O(vocab / 64) words plus O(vocab) floats; `ArgMax` and `All` are one pass;
//! `TopK` is O(vocab) (selection) plus O(k log k); `TopP` sorts the candidates, O(v log v).
//!
//! May use: `toktrie`.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::toktrie::TokenSet;

/// An error in sampler configuration or use.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SamplerError {
    /// A sampling parameter is out of range.
    #[error("invalid sampling parameter `{name}` = {value}: {expected}")]
    InvalidParameter {
        /// The parameter (`temperature`, `top_k`, `top_p`).
        name: &'static str,
        /// The value given.
        value: f64,
        /// The valid range.
        expected: &'static str,
    },

    /// Every token was masked out (or had a -inf/NaN logit): nothing can be sampled.
    #[error("no token is allowed: all {vocab_len} logits are masked out")]
    NoAllowedToken {
        /// The number of logits.
        vocab_len: usize,
    },
}

/// How to choose a token from the (masked) logits.
#[derive(Clone, Debug, PartialEq)]
pub enum Sampling {
    /// Greedy: the highest logit (lowest id on ties).
    ArgMax,
    /// Sample from the whole softmax at `temperature`.
    All {
        /// Softmax temperature, > 0.
        temperature: f64,
    },
    /// Sample among the `k` highest logits.
    TopK {
        /// Candidates kept, ≥ 1.
        k: usize,
        /// Softmax temperature, > 0.
        temperature: f64,
    },
    /// Nucleus sampling: the smallest set of top tokens whose probability reaches `p`.
    TopP {
        /// Cumulative probability kept, in (0, 1].
        p: f64,
        /// Softmax temperature, > 0.
        temperature: f64,
    },
    /// Top-k first, then top-p among those.
    TopKThenTopP {
        /// Candidates kept, ≥ 1.
        k: usize,
        /// Cumulative probability kept, in (0, 1].
        p: f64,
        /// Softmax temperature, > 0.
        temperature: f64,
    },
}

impl Sampling {
    /// The usual mapping from CLI-style flags: temperature 0 (or absent) is greedy; `top_k`
    /// and `top_p` narrow the candidates when sampling.
    pub fn from_params(temperature: Option<f64>, top_k: Option<usize>, top_p: Option<f64>) -> Self {
        let temperature = match temperature {
            Some(t) if t > 0.0 => t,
            _ => return Self::ArgMax,
        };
        match (top_k, top_p) {
            (None, None) => Self::All { temperature },
            (Some(k), None) => Self::TopK { k, temperature },
            (None, Some(p)) => Self::TopP { p, temperature },
            (Some(k), Some(p)) => Self::TopKThenTopP { k, p, temperature },
        }
    }

    /// Temperature 0 (or absent) is greedy, otherwise the whole softmax at that temperature.
    pub fn from_temperature(temperature: Option<f64>) -> Self {
        Self::from_params(temperature, None, None)
    }

    /// Whether sampling from the unmasked logits and accepting the draw when the grammar
    /// allows it (else masking and drawing again) gives exactly the masked distribution.
    ///
    /// True for `ArgMax` (an allowed argmax is the masked argmax) and `All` (rejection: a draw
    /// from p accepted on the allowed set A, else a draw from p restricted to A, returns `a`
    /// with probability p(a) + (1 - p(A)) p(a) / p(A) = p(a) / p(A)). False for top-k and
    /// top-p: masking first changes which tokens are among the top ones, so an accepted draw
    /// from the unmasked top-k would have the wrong probability.
    pub fn is_exact_unmasked_first(&self) -> bool {
        matches!(self, Self::ArgMax | Self::All { .. })
    }

    fn validate(&self) -> Result<(), SamplerError> {
        let temp = |t: f64| {
            if t.is_finite() && t > 0.0 {
                Ok(())
            } else {
                Err(SamplerError::InvalidParameter {
                    name: "temperature",
                    value: t,
                    expected: "a finite number > 0 (use ArgMax for greedy)",
                })
            }
        };
        let k_ok = |k: usize| {
            if k >= 1 {
                Ok(())
            } else {
                Err(SamplerError::InvalidParameter {
                    name: "top_k",
                    value: k as f64,
                    expected: "at least 1",
                })
            }
        };
        let p_ok = |p: f64| {
            if p > 0.0 && p <= 1.0 {
                Ok(())
            } else {
                Err(SamplerError::InvalidParameter {
                    name: "top_p",
                    value: p,
                    expected: "in (0, 1]",
                })
            }
        };
        match *self {
            Self::ArgMax => Ok(()),
            Self::All { temperature } => temp(temperature),
            Self::TopK { k, temperature } => k_ok(k).and(temp(temperature)),
            Self::TopP { p, temperature } => p_ok(p).and(temp(temperature)),
            Self::TopKThenTopP { k, p, temperature } => k_ok(k).and(p_ok(p)).and(temp(temperature)),
        }
    }
}

/// Sets every logit whose token is not in `allowed` to -inf.
///
/// `allowed` is a bitset in `u64` words (bit `i % 64` of word `i / 64` is token `i`), the
/// layout of the engine's `TokenSet`. Ids past the end of `allowed`, or past `universe_len`,
/// are never allowed: a model's logits can be longer than the tokenizer's vocabulary.
pub fn apply_mask(logits: &mut [f32], allowed: &[u64], universe_len: usize) {
    let limit = universe_len.min(allowed.len() * 64).min(logits.len());
    for (w, chunk) in logits[..limit].chunks_mut(64).enumerate() {
        let word = allowed[w];
        if word == u64::MAX {
            continue;
        }
        for (b, l) in chunk.iter_mut().enumerate() {
            if word & (1u64 << b) == 0 {
                *l = f32::NEG_INFINITY;
            }
        }
    }
    logits[limit..].fill(f32::NEG_INFINITY);
}

/// A seeded sampler. Reusable across steps; keeps scratch buffers between calls.
#[derive(Debug)]
pub struct Sampler {
    sampling: Sampling,
    rng: StdRng,
    /// (token, logit) candidates of the current step.
    scratch: Vec<(u32, f32)>,
}

impl Sampler {
    /// A sampler with the given strategy and seed.
    ///
    /// # Errors
    /// [`SamplerError::InvalidParameter`] for a non-positive temperature, `k = 0`, or `p`
    /// outside (0, 1].
    pub fn new(sampling: Sampling, seed: u64) -> Result<Self, SamplerError> {
        sampling.validate()?;
        Ok(Self {
            sampling,
            rng: StdRng::seed_from_u64(seed),
            scratch: Vec::new(),
        })
    }

    /// The strategy.
    pub fn sampling(&self) -> &Sampling {
        &self.sampling
    }

    /// Chooses a token. With a mask, tokens outside it (and logits past its universe: the
    /// model's padding rows) are set to -inf in `logits` first (see [`apply_mask`]).
    ///
    /// # Errors
    /// [`SamplerError::NoAllowedToken`] when every logit is -inf or NaN after masking.
    pub fn sample(
        &mut self,
        logits: &mut [f32],
        mask: Option<&TokenSet>,
    ) -> Result<u32, SamplerError> {
        if let Some(set) = mask {
            apply_mask(logits, set.as_words(), set.universe_len());
        }
        let best = argmax(logits).ok_or(SamplerError::NoAllowedToken {
            vocab_len: logits.len(),
        })?;
        let (k, p, temperature) = match self.sampling {
            Sampling::ArgMax => return Ok(best),
            Sampling::All { temperature } => (None, None, temperature),
            Sampling::TopK { k, temperature } => (Some(k), None, temperature),
            Sampling::TopP { p, temperature } => (None, Some(p), temperature),
            Sampling::TopKThenTopP { k, p, temperature } => (Some(k), Some(p), temperature),
        };
        self.scratch.clear();
        self.scratch.extend(
            logits
                .iter()
                .enumerate()
                .filter(|(_, l)| l.is_finite())
                .map(|(i, &l)| (i as u32, l)),
        );
        let by_logit_desc =
            |a: &(u32, f32), b: &(u32, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
        if let Some(k) = k {
            if k < self.scratch.len() {
                self.scratch.select_nth_unstable_by(k - 1, by_logit_desc);
                self.scratch.truncate(k);
            }
        }
        // Softmax over the candidates, at temperature, relative to the best logit.
        let max = logits[best as usize] as f64;
        let mut probs: Vec<f64> = self
            .scratch
            .iter()
            .map(|&(_, l)| ((l as f64 - max) / temperature).exp())
            .collect();
        if let Some(p) = p {
            let mut order: Vec<usize> = (0..probs.len()).collect();
            order.sort_by(|&a, &b| by_logit_desc(&self.scratch[a], &self.scratch[b]));
            let total: f64 = probs.iter().sum();
            let mut kept = vec![false; probs.len()];
            let mut cum = 0.0;
            for &i in &order {
                kept[i] = true;
                cum += probs[i] / total;
                if cum >= p {
                    break;
                }
            }
            for (prob, keep) in probs.iter_mut().zip(kept) {
                if !keep {
                    *prob = 0.0;
                }
            }
        }
        let total: f64 = probs.iter().sum();
        let mut r = self.rng.random::<f64>() * total;
        for (i, &prob) in probs.iter().enumerate() {
            if r < prob {
                return Ok(self.scratch[i].0);
            }
            r -= prob;
        }
        // Rounding left r just above the last bucket: take the last candidate with mass.
        Ok(probs
            .iter()
            .rposition(|&p| p > 0.0)
            .map_or(best, |i| self.scratch[i].0))
    }
}

/// The id of the highest finite logit (lowest id on ties), or `None` if there is none.
pub fn argmax(logits: &[f32]) -> Option<u32> {
    let mut best: Option<(usize, f32)> = None;
    for (i, &l) in logits.iter().enumerate() {
        if l.is_finite() && best.is_none_or(|(_, b)| l > b) {
            best = Some((i, l));
        }
    }
    best.map(|(i, _)| i as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::toktrie::TokenId;

    fn bits(len: usize, allowed: &[usize]) -> Vec<u64> {
        set(len, allowed).as_words().to_vec()
    }

    fn set(len: usize, allowed: &[usize]) -> TokenSet {
        let mut s = TokenSet::new(len);
        for &i in allowed {
            s.insert(TokenId(i as u32));
        }
        s
    }

    #[test]
    fn argmax_takes_lowest_id_on_ties_and_skips_non_finite() {
        assert_eq!(argmax(&[1.0, 3.0, 3.0, f32::NAN]), Some(1));
        assert_eq!(argmax(&[f32::NAN, f32::NEG_INFINITY, -5.0]), Some(2));
        assert_eq!(argmax(&[f32::NEG_INFINITY]), None);
    }

    #[test]
    fn mask_removes_disallowed_and_padding_rows() {
        // 130 logits, a 100-token universe: ids 100.. are padding and never allowed.
        let mut logits = vec![1.0f32; 130];
        let words = bits(100, &[3, 64, 99]);
        apply_mask(&mut logits, &words, 100);
        let finite: Vec<usize> = (0..130).filter(|&i| logits[i].is_finite()).collect();
        assert_eq!(finite, vec![3, 64, 99]);
    }

    #[test]
    fn greedy_respects_the_mask() {
        let mut s = Sampler::new(Sampling::ArgMax, 0).unwrap();
        let mut logits = vec![0.0, 9.0, 1.0, 2.0];
        assert_eq!(s.sample(&mut logits, Some(&set(4, &[2, 3]))).unwrap(), 3);
    }

    #[test]
    fn empty_mask_is_an_error() {
        let mut s = Sampler::new(Sampling::All { temperature: 1.0 }, 0).unwrap();
        let mut logits = vec![0.0; 10];
        assert!(matches!(
            s.sample(&mut logits, Some(&set(10, &[]))),
            Err(SamplerError::NoAllowedToken { vocab_len: 10 })
        ));
    }

    #[test]
    fn invalid_parameters_are_rejected() {
        for bad in [
            Sampling::All { temperature: 0.0 },
            Sampling::All {
                temperature: f64::NAN,
            },
            Sampling::TopK {
                k: 0,
                temperature: 1.0,
            },
            Sampling::TopP {
                p: 0.0,
                temperature: 1.0,
            },
            Sampling::TopP {
                p: 1.5,
                temperature: 1.0,
            },
        ] {
            assert!(Sampler::new(bad.clone(), 0).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn same_seed_same_draws() {
        let logits: Vec<f32> = (0..50).map(|i| (i % 7) as f32 * 0.3).collect();
        let draw = |seed| {
            let mut s = Sampler::new(Sampling::All { temperature: 1.0 }, seed).unwrap();
            (0..20)
                .map(|_| s.sample(&mut logits.clone(), None).unwrap())
                .collect::<Vec<_>>()
        };
        assert_eq!(draw(7), draw(7));
        assert_ne!(draw(7), draw(8));
    }

    #[test]
    fn top_k_only_returns_the_k_best() {
        let logits: Vec<f32> = (0..100).map(|i| i as f32 / 10.0).collect();
        let mut s = Sampler::new(
            Sampling::TopK {
                k: 3,
                temperature: 5.0,
            },
            1,
        )
        .unwrap();
        for _ in 0..200 {
            let t = s.sample(&mut logits.clone(), None).unwrap();
            assert!(t >= 97, "sampled {t}");
        }
    }

    #[test]
    fn top_p_keeps_the_nucleus() {
        // Probabilities ~0.66, 0.24, 0.09, ...: p = 0.8 keeps exactly the first two.
        let logits = vec![3.0f32, 2.0, 1.0, -5.0, -5.0];
        let mut s = Sampler::new(
            Sampling::TopP {
                p: 0.8,
                temperature: 1.0,
            },
            3,
        )
        .unwrap();
        let mut seen = [0usize; 5];
        for _ in 0..500 {
            seen[s.sample(&mut logits.clone(), None).unwrap() as usize] += 1;
        }
        assert!(seen[0] > 0 && seen[1] > 0, "{seen:?}");
        assert_eq!(seen[2] + seen[3] + seen[4], 0, "{seen:?}");
    }

    #[test]
    fn sampling_follows_the_distribution() {
        // Two tokens with logits differing by ln 3: expect a 3:1 split.
        let logits = vec![3f32.ln(), 0.0];
        let mut s = Sampler::new(Sampling::All { temperature: 1.0 }, 11).unwrap();
        let n = 4000;
        let zeros = (0..n)
            .filter(|_| s.sample(&mut logits.clone(), None).unwrap() == 0)
            .count();
        let frac = zeros as f64 / n as f64;
        assert!((frac - 0.75).abs() < 0.03, "{frac}");
    }

    #[test]
    fn from_params_maps_flags() {
        assert_eq!(Sampling::from_params(None, Some(5), None), Sampling::ArgMax);
        assert_eq!(
            Sampling::from_params(Some(0.0), None, None),
            Sampling::ArgMax
        );
        assert_eq!(
            Sampling::from_params(Some(0.7), Some(40), Some(0.9)),
            Sampling::TopKThenTopP {
                k: 40,
                p: 0.9,
                temperature: 0.7
            }
        );
    }
}
