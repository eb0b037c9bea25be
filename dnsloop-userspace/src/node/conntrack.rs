//! The node's conntrack counters, from `/proc/net/stat/nf_conntrack` of the tracer's network
//! namespace (the node's): every flow's, not only DNS's, but a resolver's parallel A and AAAA
//! queries from one socket are the usual race between two packets of one new flow on two CPUs.
//! The kernel resolves most such clashes (Linux 5.6 and later); one it cannot is a dropped
//! packet, and for DNS over UDP a 5-second timeout.
use dnsloop_core::doctor::{parse_conntrack_stats, ConntrackStats};
use dnsloop_core::schema::ConntrackCounts;

const STAT: &str = "/proc/net/stat/nf_conntrack";

/// The counters now, summed over CPUs; `None` where conntrack is not loaded or its file does not
/// read as expected (said once, at start, by the caller that keeps the first reading).
pub fn read() -> Option<ConntrackStats> {
    let text = std::fs::read_to_string(STAT).ok()?;
    parse_conntrack_stats(&text).ok()
}

/// What the counters rose by from `start` to `end`.
pub fn counts_between(start: &ConntrackStats, end: &ConntrackStats) -> ConntrackCounts {
    ConntrackCounts {
        clashes_resolved: start
            .clashes_resolved
            .zip(end.clashes_resolved)
            .map(|(start, end)| end.saturating_sub(start)),
        insert_failed: end.insert_failed.saturating_sub(start.insert_failed),
        drop: end.drop.saturating_sub(start.drop),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_what_the_counters_rose_by() {
        let stats = |resolved, insert_failed, drop| ConntrackStats {
            cpus: 2,
            insert_failed,
            drop,
            clashes_resolved: resolved,
        };
        assert_eq!(
            counts_between(&stats(Some(10), 4, 1), &stats(Some(110), 4, 2)),
            ConntrackCounts {
                clashes_resolved: Some(100),
                insert_failed: 0,
                drop: 1
            }
        );
        assert_eq!(
            counts_between(&stats(None, 0, 0), &stats(None, 0, 0)).clashes_resolved,
            None,
            "a kernel without the column"
        );
    }
}
