//! Latency samples and their percentiles.

use super::report::{Measured, Value};
use std::time::Duration;

/// Sorted latency samples. Percentiles use the nearest-rank method, so p99 of 200 samples is
/// the 198th smallest, an observed value rather than an interpolation.
#[derive(Debug, Clone, Default)]
pub struct Samples {
    sorted: Vec<Duration>,
}

impl Samples {
    pub fn new(mut samples: Vec<Duration>) -> Samples {
        samples.sort_unstable();
        Samples { sorted: samples }
    }

    pub fn len(&self) -> usize {
        self.sorted.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sorted.is_empty()
    }

    /// The `p`th percentile (0 < p ≤ 100) in milliseconds; `None` without samples.
    pub fn percentile_ms(&self, p: f64) -> Option<f64> {
        if self.sorted.is_empty() {
            return None;
        }
        let rank = ((p / 100.0) * self.sorted.len() as f64).ceil() as usize;
        let i = rank.clamp(1, self.sorted.len()) - 1;
        Some(self.sorted[i].as_secs_f64() * 1e3)
    }

    pub fn p50_ms(&self) -> Option<f64> {
        self.percentile_ms(50.0)
    }

    /// The `p`th percentile as a report's figure: milliseconds, or why there is none.
    pub fn figure(&self, p: f64) -> Measured {
        self.percentile_ms(p).map(Value::Millis).ok_or_else(|| "no samples".to_string())
    }

    pub fn p99_ms(&self) -> Option<f64> {
        self.percentile_ms(99.0)
    }

    pub fn min_ms(&self) -> Option<f64> {
        self.sorted.first().map(|d| d.as_secs_f64() * 1e3)
    }

    pub fn max_ms(&self) -> Option<f64> {
        self.sorted.last().map(|d| d.as_secs_f64() * 1e3)
    }

    /// "n=200, min 0.91 ms, p50 1.02 ms, p99 1.80 ms, max 2.41 ms", for the notes.
    pub fn summary(&self) -> String {
        let f = |v: Option<f64>| v.map_or("—".to_string(), |ms| format!("{ms:.3} ms"));
        format!(
            "n={}, min {}, p50 {}, p99 {}, max {}",
            self.len(),
            f(self.min_ms()),
            f(self.p50_ms()),
            f(self.p99_ms()),
            f(self.max_ms())
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank() {
        let s = Samples::new((1..=200).rev().map(Duration::from_millis).collect());
        assert_eq!(s.p50_ms(), Some(100.0));
        assert_eq!(s.p99_ms(), Some(198.0));
        assert_eq!(s.min_ms(), Some(1.0));
        assert_eq!(Samples::new(vec![Duration::from_millis(7)]).p99_ms(), Some(7.0));
        assert_eq!(Samples::default().p50_ms(), None);
    }
}
