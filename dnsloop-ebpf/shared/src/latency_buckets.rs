//! Latency buckets shared by the kernel's per-server histograms and userspace's: the kernel
//! counts answers per bucket, userspace reads the counts as a histogram of the same shape.

/// Each power of two of microseconds is split into this many buckets, so a percentile is
/// within 1/8 (12.5 %) of the true value.
const SUB_BUCKETS: u64 = 8;
const SUB_BITS: u32 = SUB_BUCKETS.trailing_zeros();
/// Below this many microseconds every value has its own bucket.
const EXACT_BELOW: u64 = 2 * SUB_BUCKETS;
/// Latencies are recorded up to 2^26 µs (about 67 s, far past any resolver's timeout); longer
/// ones count as that.
pub const MAX_MICROS: u64 = (1 << 26) - 1;
pub const LATENCY_BUCKETS: usize = bucket(MAX_MICROS) + 1;

/// The bucket that `micros` falls in (clamped to [`MAX_MICROS`]).
#[inline(always)]
pub const fn bucket(micros: u64) -> usize {
    let micros = if micros > MAX_MICROS {
        MAX_MICROS
    } else {
        micros
    };
    if micros < EXACT_BELOW {
        return micros as usize;
    }
    let magnitude = u64::BITS - 1 - micros.leading_zeros();
    // The bits just below the leading one pick the sub-bucket.
    let sub = (micros >> (magnitude - SUB_BITS)) - SUB_BUCKETS;
    (EXACT_BELOW + (magnitude as u64 - SUB_BITS as u64 - 1) * SUB_BUCKETS + sub) as usize
}

/// The largest value that falls in bucket `index`.
pub const fn upper_edge(index: usize) -> u64 {
    let index = index as u64;
    if index < EXACT_BELOW {
        return index;
    }
    let magnitude = (index - EXACT_BELOW) / SUB_BUCKETS + SUB_BITS as u64 + 1;
    let sub = (index - EXACT_BELOW) % SUB_BUCKETS;
    ((SUB_BUCKETS + sub + 1) << (magnitude - SUB_BITS as u64)) - 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_value_lands_in_a_bucket_whose_edge_is_within_an_eighth() {
        for micros in (0..5000).chain([1 << 20, (1 << 20) + 12345, MAX_MICROS]) {
            let index = bucket(micros);
            assert!(index < LATENCY_BUCKETS);
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
    fn values_past_the_range_count_in_the_last_bucket() {
        assert_eq!(bucket(u64::MAX), LATENCY_BUCKETS - 1);
        assert_eq!(upper_edge(LATENCY_BUCKETS - 1), MAX_MICROS);
    }
}
