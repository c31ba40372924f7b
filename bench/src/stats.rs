//! Median, spread and percentiles of a set of samples; a small deterministic PRNG.

use serde::Serialize;
use std::time::Duration;

/// The figures of one measured quantity: median and spread (min–max) over the runs,
/// and the 99th percentile when there are enough samples for it to mean something.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct Summary {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p99: Option<f64>,
    pub samples: usize,
}

impl Summary {
    /// One figure measured once (an RSS, a count).
    pub fn single(value: f64) -> Summary {
        Summary {
            median: value,
            min: value,
            max: value,
            p99: None,
            samples: 1,
        }
    }

    /// `None` when there are no samples.
    pub fn of(samples: &[f64]) -> Option<Summary> {
        let mut sorted: Vec<f64> = samples.iter().copied().filter(|v| v.is_finite()).collect();
        if sorted.is_empty() {
            return None;
        }
        sorted.sort_by(f64::total_cmp);
        Some(Summary {
            median: percentile(&sorted, 50.0),
            min: sorted[0],
            max: sorted[sorted.len() - 1],
            p99: (sorted.len() >= 100).then(|| percentile(&sorted, 99.0)),
            samples: sorted.len(),
        })
    }
}

/// Nearest-rank-with-interpolation percentile of an ascending slice (not empty).
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    let rank = (p / 100.0) * (sorted.len() - 1) as f64;
    let low = rank.floor() as usize;
    let high = rank.ceil() as usize;
    let weight = rank - low as f64;
    sorted[low] * (1.0 - weight) + sorted[high] * weight
}

pub fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

/// splitmix64: tiny, fast, and the same sequence on every machine.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `low..=high`.
    pub fn range(&mut self, low: u64, high: u64) -> u64 {
        low + self.next_u64() % (high - low + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_and_spread() {
        let s = Summary::of(&[5.0, 1.0, 3.0, 2.0, 4.0]).expect("samples");
        assert_eq!((s.median, s.min, s.max, s.p99), (3.0, 1.0, 5.0, None));
        let even = Summary::of(&[1.0, 2.0, 3.0, 4.0]).expect("samples");
        assert_eq!(even.median, 2.5);
        assert!(Summary::of(&[]).is_none());
        let many: Vec<f64> = (1..=1000).map(f64::from).collect();
        let p99 = Summary::of(&many).and_then(|s| s.p99).expect("p99");
        assert!((p99 - 990.01).abs() < 1e-6, "{p99}");
    }

    #[test]
    fn rng_is_deterministic_and_in_range() {
        let a: Vec<u64> = (0..5).map(|_| Rng::new(7).range(3, 9)).collect();
        assert!(a.iter().all(|v| (3..=9).contains(v)));
        let mut x = Rng::new(42);
        let mut y = Rng::new(42);
        assert_eq!(x.next_u64(), y.next_u64());
    }
}
