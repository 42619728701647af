//! Latency statistics from HDR histograms: values are recorded in microseconds with three
//! significant digits (0.1% relative error), and reported in milliseconds.

use hdrhistogram::Histogram;
use serde::Serialize;

/// Summary of one latency metric, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Default)]
pub struct Summary {
    /// Values recorded: percentiles from fewer than 100 are coarse, and the terminal marks them.
    pub count: u64,
    /// Mean, ms.
    pub mean: f64,
    /// Standard deviation, ms.
    pub std: f64,
    /// Smallest value, ms.
    pub min: f64,
    /// Median, ms.
    pub p50: f64,
    /// 90th percentile, ms.
    pub p90: f64,
    /// 95th percentile, ms.
    pub p95: f64,
    /// 99th percentile, ms.
    pub p99: f64,
    /// 99.9th percentile, ms.
    #[serde(rename = "p99.9")]
    pub p999: f64,
    /// Largest value, ms.
    pub max: f64,
}

/// Collects values and summarises them.
#[derive(Debug, Clone)]
pub struct Recorder {
    h: Histogram<u64>,
}

impl Default for Recorder {
    fn default() -> Self {
        Self::new()
    }
}

impl Recorder {
    /// An empty recorder.
    pub fn new() -> Self {
        // 1 us .. 1 day, 3 significant digits; auto-resize covers anything longer.
        let mut h = Histogram::new_with_bounds(1, 86_400_000_000, 3).expect("constant bounds 1 us .. 1 day with 3 digits are valid");
        h.auto(true);
        Self { h }
    }

    /// Records a duration in nanoseconds.
    pub fn record_ns(&mut self, ns: u64) {
        let _ = self.h.record((ns / 1000).max(1));
    }

    /// Records `n` values of `ns` nanoseconds each.
    pub fn record_ns_n(&mut self, ns: u64, n: u64) {
        let _ = self.h.record_n((ns / 1000).max(1), n);
    }

    /// Records a duration in milliseconds (fractional).
    pub fn record_ms(&mut self, ms: f64) {
        if ms.is_finite() && ms >= 0.0 {
            let _ = self.h.record(((ms * 1000.0).round() as u64).max(1));
        }
    }

    /// Values recorded.
    pub fn len(&self) -> u64 {
        self.h.len()
    }

    /// Nothing recorded.
    pub fn is_empty(&self) -> bool {
        self.h.is_empty()
    }

    /// The value at percentile `p` (0..=100), in ms.
    pub fn percentile_ms(&self, p: f64) -> f64 {
        if self.h.is_empty() {
            return 0.0;
        }
        self.h.value_at_percentile(p) as f64 / 1000.0
    }

    /// Count, mean, spread and percentiles, in ms; all zero when empty.
    pub fn summary(&self) -> Summary {
        if self.h.is_empty() {
            return Summary::default();
        }
        let ms = |v: u64| v as f64 / 1000.0;
        Summary {
            count: self.h.len(),
            mean: self.h.mean() / 1000.0,
            std: self.h.stdev() / 1000.0,
            min: ms(self.h.min()),
            p50: ms(self.h.value_at_quantile(0.50)),
            p90: ms(self.h.value_at_quantile(0.90)),
            p95: ms(self.h.value_at_quantile(0.95)),
            p99: ms(self.h.value_at_quantile(0.99)),
            p999: ms(self.h.value_at_quantile(0.999)),
            max: ms(self.h.max()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_within_histogram_precision() {
        let mut r = Recorder::new();
        for i in 1..=1000u64 {
            r.record_ms(i as f64);
        }
        let s = r.summary();
        assert_eq!(s.count, 1000);
        assert!((s.p50 - 500.0).abs() / 500.0 < 0.002, "{}", s.p50);
        assert!((s.p99 - 990.0).abs() / 990.0 < 0.002, "{}", s.p99);
        assert!((s.mean - 500.5).abs() / 500.5 < 0.002, "{}", s.mean);
        assert!((s.max - 1000.0).abs() < 1.0);
    }

    #[test]
    fn empty_summary_is_zero() {
        assert_eq!(Recorder::new().summary(), Summary::default());
    }
}
