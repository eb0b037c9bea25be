//! The kernel's fine latency buckets (about 190, see `dnsloop_shared::latency_buckets`) folded into the
//! few fixed `le` buckets a Prometheus histogram has.
use dnsloop_shared::latency_buckets::{upper_edge, LATENCY_BUCKETS};

/// The `le` bounds, in microseconds: 0.5 ms to 5 s, then +Inf.
const BOUNDS_MICROS: [u64; 13] = [
    500, 1_000, 2_000, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000, 1_000_000,
    2_500_000, 5_000_000,
];

/// A histogram in the shape prometheus-client encodes.
#[derive(Debug, PartialEq)]
pub struct Coarse {
    /// `(le in seconds, count in that bucket alone)`, +Inf last; the encoder accumulates.
    pub buckets: Vec<(f64, u64)>,
    pub count: u64,
    /// Estimated: the kernel keeps no sum, so each answer counts as the middle of its kernel
    /// bucket (within 1/16 of its latency).
    pub sum_seconds: f64,
}

/// Each kernel bucket's answers go to the first `le` bound at or above the bucket's top, so an
/// answer is never shown faster than it was; at worst it shows in the next bound up when its
/// kernel bucket straddles a bound.
pub fn coarse(kernel_counts: &[u64; LATENCY_BUCKETS]) -> Coarse {
    let mut counts = [0u64; BOUNDS_MICROS.len() + 1];
    let mut sum_micros = 0.0;
    let mut bottom = 0;
    for (index, &count) in kernel_counts.iter().enumerate() {
        let top = upper_edge(index);
        if count > 0 {
            let slot = BOUNDS_MICROS
                .iter()
                .position(|&bound| bound >= top)
                .unwrap_or(BOUNDS_MICROS.len());
            counts[slot] += count;
            sum_micros += count as f64 * (bottom + top) as f64 / 2.0;
        }
        bottom = top + 1;
    }
    let bounds = BOUNDS_MICROS
        .iter()
        .map(|&micros| micros as f64 / 1e6)
        .chain([f64::INFINITY]);
    Coarse {
        buckets: bounds.zip(counts).collect(),
        count: counts.iter().sum(),
        sum_seconds: sum_micros / 1e6,
    }
}

#[cfg(test)]
mod tests {
    use dnsloop_shared::latency_buckets::bucket;

    use super::*;

    fn kernel_counts(latencies_micros: &[u64]) -> Box<[u64; LATENCY_BUCKETS]> {
        let mut counts = Box::new([0; LATENCY_BUCKETS]);
        for &micros in latencies_micros {
            counts[bucket(micros)] += 1;
        }
        counts
    }

    fn in_bucket(coarse: &Coarse, le: f64) -> u64 {
        coarse
            .buckets
            .iter()
            .find(|(bound, _)| *bound == le)
            .map_or_else(|| panic!("no le={le}"), |(_, count)| *count)
    }

    #[test]
    fn answers_fall_in_the_first_bound_above_their_kernel_bucket() {
        // 300 µs, 900 µs, 7 ms, 7 ms, 3 s, and one past every bound (60 s).
        let coarse = coarse(&kernel_counts(&[
            300, 900, 7_000, 7_000, 3_000_000, 60_000_000,
        ]));
        assert_eq!(coarse.count, 6);
        assert_eq!(in_bucket(&coarse, 0.0005), 1);
        assert_eq!(in_bucket(&coarse, 0.001), 1);
        assert_eq!(in_bucket(&coarse, 0.01), 2);
        assert_eq!(in_bucket(&coarse, 5.0), 1);
        assert_eq!(in_bucket(&coarse, f64::INFINITY), 1);
        assert_eq!(coarse.buckets.len(), 14);
        let total: f64 = 0.0003 + 0.0009 + 0.014 + 3.0 + 60.0;
        assert!(
            (coarse.sum_seconds - total).abs() <= total / 16.0,
            "{} vs {total}",
            coarse.sum_seconds
        );
    }

    #[test]
    fn a_kernel_bucket_straddling_a_bound_counts_above_it_never_below() {
        // 490 µs shares its kernel bucket (480..=511 µs) with answers slower than 0.5 ms.
        let coarse = coarse(&kernel_counts(&[490]));
        assert_eq!(in_bucket(&coarse, 0.0005), 0);
        assert_eq!(in_bucket(&coarse, 0.001), 1);
    }

    #[test]
    fn no_answers_give_empty_buckets() {
        let coarse = coarse(&[0; LATENCY_BUCKETS]);
        assert_eq!(coarse.count, 0);
        assert_eq!(coarse.sum_seconds, 0.0);
        assert!(coarse.buckets.iter().all(|&(_, count)| count == 0));
    }
}
