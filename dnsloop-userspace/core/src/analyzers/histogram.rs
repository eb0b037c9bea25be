//! A latency histogram of fixed size: a few kilobytes per server, whatever the traffic.
use std::time::Duration;

use dnsloop_shared::latency_buckets::{bucket, upper_edge, LATENCY_BUCKETS as BUCKETS, MAX_MICROS};

pub struct Histogram {
    counts: Box<[u64; BUCKETS]>,
    total: u64,
    max: Duration,
}

impl Histogram {
    pub fn new() -> Self {
        Self {
            counts: Box::new([0; BUCKETS]),
            total: 0,
            max: Duration::ZERO,
        }
    }

    /// A histogram of counts kept elsewhere in the same buckets (the kernel's).
    pub fn from_counts(counts: &[u64; BUCKETS], max: Duration) -> Self {
        Self {
            counts: Box::new(*counts),
            total: counts.iter().sum(),
            max,
        }
    }

    pub fn record(&mut self, latency: Duration) {
        let micros = u64::try_from(latency.as_micros())
            .unwrap_or(u64::MAX)
            .min(MAX_MICROS);
        self.counts[bucket(micros)] += 1;
        self.total += 1;
        self.max = self.max.max(latency);
    }

    pub fn count(&self) -> u64 {
        self.total
    }

    pub fn max(&self) -> Duration {
        self.max
    }

    /// The latency that `quantile` (0..=1) of the recorded ones do not exceed: the upper edge
    /// of its bucket, capped at the maximum seen. Zero when nothing was recorded.
    pub fn quantile(&self, quantile: f64) -> Duration {
        // The rank of the value sought, counting from 1; the float is in 0..=total.
        let rank = ((quantile.clamp(0.0, 1.0) * self.total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (index, &count) in self.counts.iter().enumerate() {
            seen += count;
            if seen >= rank {
                return Duration::from_micros(upper_edge(index)).min(self.max);
            }
        }
        self.max
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_of_a_spread_of_latencies() {
        let mut histogram = Histogram::new();
        for millis in 1..=100 {
            histogram.record(Duration::from_millis(millis));
        }
        let close = |actual: Duration, expected_ms: f64| {
            let actual_ms = actual.as_secs_f64() * 1000.0;
            assert!(
                (actual_ms - expected_ms).abs() <= expected_ms / 8.0,
                "{actual_ms} vs {expected_ms}"
            );
        };
        close(histogram.quantile(0.5), 50.0);
        close(histogram.quantile(0.9), 90.0);
        close(histogram.quantile(0.99), 99.0);
        assert_eq!(histogram.quantile(1.0), Duration::from_millis(100));
        assert_eq!(histogram.max(), Duration::from_millis(100));
        assert_eq!(histogram.count(), 100);
    }

    #[test]
    fn counts_kept_elsewhere_read_the_same() {
        let mut recorded = Histogram::new();
        let mut counts = [0; BUCKETS];
        for millis in [1, 2, 2, 40, 900] {
            let latency = Duration::from_millis(millis);
            recorded.record(latency);
            counts[bucket(latency.as_micros() as u64)] += 1;
        }
        let rebuilt = Histogram::from_counts(&counts, Duration::from_millis(900));
        assert_eq!(rebuilt.count(), recorded.count());
        for quantile in [0.5, 0.9, 0.99, 1.0] {
            assert_eq!(rebuilt.quantile(quantile), recorded.quantile(quantile));
        }
    }

    #[test]
    fn huge_latencies_are_clamped_not_lost() {
        let mut histogram = Histogram::new();
        histogram.record(Duration::MAX);
        assert_eq!(histogram.count(), 1);
        assert_eq!(histogram.quantile(0.5), Duration::from_micros(MAX_MICROS));
    }
}
