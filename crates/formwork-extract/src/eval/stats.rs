//! Statistics for repeated eval runs: mean ± spread, and the paired-bootstrap A/B verdict.
//!
//! Owns only arithmetic over already-scored numbers; knows nothing of models or judges. All
//! randomness is seeded, so a report is reproducible.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::fmt;

/// Summary of one metric over repeated runs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Spread {
    /// Number of runs.
    pub n: usize,
    /// Arithmetic mean.
    pub mean: f64,
    /// Sample standard deviation (n − 1 in the denominator; 0 for a single run).
    pub std_dev: f64,
    /// Smallest value.
    pub min: f64,
    /// Largest value.
    pub max: f64,
}

impl Spread {
    /// Summarizes `values`; `None` when there are none.
    pub fn of(values: &[f64]) -> Option<Spread> {
        let n = values.len();
        if n == 0 {
            return None;
        }
        let mean = values.iter().sum::<f64>() / n as f64;
        let var = if n > 1 {
            values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1) as f64
        } else {
            0.0
        };
        let min = values.iter().copied().fold(f64::INFINITY, f64::min);
        let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        Some(Spread {
            n,
            mean,
            std_dev: var.sqrt(),
            min,
            max,
        })
    }
}

/// Renders as "7.6 ± 0.5 (5 runs)", or "7.6 (1 run)"; precision follows the formatter's
/// (default 3 significant decimals).
impl fmt::Display for Spread {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = f.precision().unwrap_or(3);
        if self.n == 1 {
            write!(f, "{:.p$} (1 run)", self.mean)
        } else {
            write!(
                f,
                "{:.p$} ± {:.p$} ({} runs)",
                self.mean, self.std_dev, self.n
            )
        }
    }
}

/// The outcome of comparing configuration A with configuration B on the same cases.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AbVerdict {
    /// Mean of (A − B) over cases.
    pub diff: f64,
    /// Lower end of the confidence interval of the difference.
    pub lo: f64,
    /// Upper end of the confidence interval of the difference.
    pub hi: f64,
    /// Confidence level, e.g. 0.95.
    pub level: f64,
}

impl AbVerdict {
    /// Which side wins, if the interval excludes zero.
    pub fn winner(&self) -> Option<Side> {
        if self.lo > 0.0 {
            Some(Side::A)
        } else if self.hi < 0.0 {
            Some(Side::B)
        } else {
            None
        }
    }
}

/// One side of an A/B comparison.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// The first configuration.
    A,
    /// The second configuration.
    B,
}

impl fmt::Display for AbVerdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let pct = (self.level * 100.0).round();
        write!(
            f,
            "A − B = {:+.3} ({pct}% CI {:+.3} … {:+.3}): ",
            self.diff, self.lo, self.hi
        )?;
        match self.winner() {
            Some(Side::A) => write!(f, "A is better"),
            Some(Side::B) => write!(f, "B is better"),
            None => write!(f, "no significant difference"),
        }
    }
}

/// Paired bootstrap over cases: `a[i]` and `b[i]` are the scores of the same case under the two
/// configurations (already averaged over runs). Resamples cases with replacement `resamples`
/// times and takes the percentile interval of the mean difference at `level` (e.g. 0.95).
///
/// Returns `None` if the slices are empty or of different lengths. Cost: O(resamples × cases).
pub fn paired_bootstrap(
    a: &[f64],
    b: &[f64],
    resamples: usize,
    level: f64,
    seed: u64,
) -> Option<AbVerdict> {
    if a.is_empty() || a.len() != b.len() || resamples == 0 {
        return None;
    }
    let d: Vec<f64> = a.iter().zip(b).map(|(x, y)| x - y).collect();
    let n = d.len();
    let diff = d.iter().sum::<f64>() / n as f64;
    let mut rng = StdRng::seed_from_u64(seed);
    let mut means: Vec<f64> = (0..resamples)
        .map(|_| (0..n).map(|_| d[rng.random_range(0..n)]).sum::<f64>() / n as f64)
        .collect();
    means.sort_by(f64::total_cmp);
    let alpha = (1.0 - level) / 2.0;
    let idx = |q: f64| ((q * (resamples - 1) as f64).round() as usize).min(resamples - 1);
    Some(AbVerdict {
        diff,
        lo: means[idx(alpha)],
        hi: means[idx(1.0 - alpha)],
        level,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_matches_hand_computation() {
        let s = Spread::of(&[7.0, 8.0, 7.5, 8.5, 7.0]).unwrap();
        assert_eq!(s.n, 5);
        assert!((s.mean - 7.6).abs() < 1e-12);
        // sample variance: (0.36+0.16+0.01+0.81+0.36)/4 = 0.425
        assert!((s.std_dev - 0.425f64.sqrt()).abs() < 1e-12);
        assert_eq!((s.min, s.max), (7.0, 8.5));
        assert_eq!(format!("{s:.1}"), "7.6 ± 0.7 (5 runs)");
        assert_eq!(
            format!("{:.2}", Spread::of(&[0.5]).unwrap()),
            "0.50 (1 run)"
        );
        assert!(Spread::of(&[]).is_none());
    }

    #[test]
    fn bootstrap_finds_a_real_difference() {
        // A is right on 90 of 100 cases, B on 40: a difference no resampling hides.
        let a: Vec<f64> = (0..100)
            .map(|i| if i % 10 == 0 { 0.0 } else { 1.0 })
            .collect();
        let b: Vec<f64> = (0..100)
            .map(|i| if i % 5 < 2 { 1.0 } else { 0.0 })
            .collect();
        let v = paired_bootstrap(&a, &b, 2000, 0.95, 7).unwrap();
        assert!((v.diff - 0.5).abs() < 1e-12);
        assert_eq!(v.winner(), Some(Side::A));
        assert!(v.lo > 0.3 && v.hi < 0.7, "{v}");
        let rev = paired_bootstrap(&b, &a, 2000, 0.95, 7).unwrap();
        assert_eq!(rev.winner(), Some(Side::B));
    }

    #[test]
    fn bootstrap_says_no_difference_for_noise() {
        // Same accuracy, disagreements balanced: the interval must straddle zero.
        let a: Vec<f64> = (0..60).map(|i| (i % 2) as f64).collect();
        let b: Vec<f64> = (0..60).map(|i| ((i + 1) % 2) as f64).collect();
        let v = paired_bootstrap(&a, &b, 2000, 0.95, 1).unwrap();
        assert_eq!(v.diff, 0.0);
        assert_eq!(v.winner(), None);
        assert!(v.to_string().ends_with("no significant difference"), "{v}");
    }

    #[test]
    fn bootstrap_is_seeded_and_checks_lengths() {
        let a = [1.0, 0.0, 1.0, 1.0];
        let b = [0.0, 0.0, 1.0, 0.0];
        assert_eq!(
            paired_bootstrap(&a, &b, 500, 0.9, 3),
            paired_bootstrap(&a, &b, 500, 0.9, 3)
        );
        assert!(paired_bootstrap(&a, &b[..3], 500, 0.9, 3).is_none());
        assert!(paired_bootstrap(&[], &[], 500, 0.9, 3).is_none());
    }
}
