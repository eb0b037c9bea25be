//! A latency histogram of fixed size: a few kilobytes per server, whatever the traffic.
use std::time::Duration;

/// Each power of two of microseconds is split into this many buckets, so a percentile is
/// within 1/8 (12.5 %) of the true value.
const SUB_BUCKETS: u64 = 8;
const SUB_BITS: u32 = SUB_BUCKETS.trailing_zeros();
/// Below this many microseconds every value has its own bucket.
const EXACT_BELOW: u64 = 2 * SUB_BUCKETS;
/// Latencies are recorded up to 2^36 µs (about 19 hours); longer ones count as that.
const MAX_MICROS: u64 = (1 << 36) - 1;
const BUCKETS: usize = bucket(MAX_MICROS) + 1;

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

const fn bucket(micros: u64) -> usize {
    if micros < EXACT_BELOW {
        return micros as usize;
    }
    let magnitude = u64::BITS - 1 - micros.leading_zeros();
    // The bits just below the leading one pick the sub-bucket.
    let sub = (micros >> (magnitude - SUB_BITS)) - SUB_BUCKETS;
    (EXACT_BELOW + (magnitude as u64 - SUB_BITS as u64 - 1) * SUB_BUCKETS + sub) as usize
}

/// The largest value that falls in bucket `index`.
fn upper_edge(index: usize) -> u64 {
    let index = index as u64;
    if index < EXACT_BELOW {
        return index;
    }
    let magnitude = (index - EXACT_BELOW) / SUB_BUCKETS + u64::from(SUB_BITS) + 1;
    let sub = (index - EXACT_BELOW) % SUB_BUCKETS;
    ((SUB_BUCKETS + sub + 1) << (magnitude - u64::from(SUB_BITS))) - 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_value_lands_in_a_bucket_whose_edge_is_within_an_eighth() {
        for micros in (0..5000).chain([1 << 20, (1 << 20) + 12345, MAX_MICROS]) {
            let index = bucket(micros);
            assert!(index < BUCKETS);
            let edge = upper_edge(index);
            assert!(edge >= micros, "{micros} -> {edge}");
            assert!(
                (edge - micros) as f64 <= micros as f64 / 8.0 + 1.0,
                "{micros} -> {edge}"
            );
            if index > 0 {
                assert!(
                    upper_edge(index - 1) < micros,
                    "{micros} is also in the bucket below"
                );
            }
        }
    }

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
    fn huge_latencies_are_clamped_not_lost() {
        let mut histogram = Histogram::new();
        histogram.record(Duration::MAX);
        assert_eq!(histogram.count(), 1);
        assert_eq!(histogram.quantile(0.5), Duration::from_micros(MAX_MICROS));
    }
}
