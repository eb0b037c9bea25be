//! SERVFAIL storms: a server answering SERVFAIL at a high rate, as its clients received the
//! answers, with what failed behind it in the same seconds: the servers whose queries timed out
//! and the kernel's drops of DNS packets, which is where a forwarder's SERVFAIL usually comes
//! from (a dead upstream, a NetworkPolicy).
//!
//! Answers are counted per server in one-second buckets, judged as each second ends: a server
//! whose last seconds (at least [`MIN_SECONDS`], at most [`WINDOW_SECONDS`]) hold at least
//! [`MIN_RATE`] SERVFAIL a second, and at least a fifth of its answers, is storming. Each
//! second of a storm is an occurrence: the first is reported at once, later ones at most once
//! per report interval, with the seconds so far. A forwarder passes its upstream's SERVFAIL on,
//! so every server of a failing chain storms at once: each report names the others storming in
//! the same seconds, the one furthest upstream among them being where it starts.
use std::{
    collections::{BTreeMap, VecDeque},
    net::SocketAddr,
    sync::Arc,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use super::{
    repeats::{Repeated, Repeats},
    table::{FastHash, Table},
};
use crate::finding::{Finding, ServfailFinding};

/// SERVFAIL response code.
const SERVFAIL: u16 = 2;

/// Seconds a rate is taken over.
const WINDOW_SECONDS: u64 = 5;

/// SERVFAIL answers a second, over the window, that make a storm: a client retrying a broken
/// name makes a few; a storm is a server failing for everyone.
const MIN_RATE: u64 = 10;

/// Seconds a storm lasts before it is one: a burst of one second is not.
const MIN_SECONDS: u64 = 3;

/// Servers and drop reasons named behind a storm, at most.
const MAX_BEHIND: usize = 8;

pub struct ServfailStorms {
    servers: Table<SocketAddr, Buckets<Answers>, FastHash>,
    /// Timeouts by the server that did not answer, and the kernel's drops by reason, in the
    /// same one-second buckets.
    timeouts: Buckets<BTreeMap<SocketAddr, u64>>,
    drops: Buckets<BTreeMap<Arc<str>, u64>>,
    /// Servers found storming, by the latest second they were.
    storming: Table<SocketAddr, u64, FastHash>,
    reports: Repeats<SocketAddr, ServfailFinding>,
}

#[derive(Clone, Copy, Default)]
struct Answers {
    answered: u64,
    servfail: u64,
}

/// The last [`WINDOW_SECONDS`] one-second buckets, by second since the epoch.
struct Buckets<T> {
    seconds: VecDeque<(u64, T)>,
}

impl<T: Default> Buckets<T> {
    fn new() -> Self {
        Self {
            seconds: VecDeque::new(),
        }
    }

    /// The bucket of `at`'s second, opened if need be, the ones older than the window dropped.
    fn at(&mut self, at: SystemTime) -> Option<&mut T> {
        let second = second_of(at);
        while self
            .seconds
            .front()
            .is_some_and(|&(first, _)| first + WINDOW_SECONDS <= second)
        {
            self.seconds.pop_front();
        }
        if self.seconds.back().is_none_or(|&(last, _)| last < second) {
            self.seconds.push_back((second, T::default()));
        }
        // An answer older than the newest bucket counts in the newest: time from captures and
        // kernels arrives in order, within the analyzers' reordering.
        self.seconds.back_mut().map(|(_, counts)| counts)
    }

    /// The buckets within the window that ends with `at`'s second.
    fn within(&self, at: SystemTime) -> impl Iterator<Item = &T> {
        let second = second_of(at);
        self.seconds
            .iter()
            .filter(move |&&(bucket, _)| bucket + WINDOW_SECONDS > second)
            .map(|(_, counts)| counts)
    }

    /// The seconds before `second` still in the window, and their buckets: those that ended.
    fn ended_before(&self, second: u64) -> impl Iterator<Item = (u64, &T)> {
        self.seconds
            .iter()
            .filter(move |&&(bucket, _)| bucket < second && bucket + WINDOW_SECONDS >= second)
            .map(|(bucket, counts)| (*bucket, counts))
    }
}

fn second_of(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs()
}

impl ServfailStorms {
    pub fn new(report_interval: Duration, capacity: usize) -> Self {
        Self {
            servers: Table::with_hasher(capacity),
            timeouts: Buckets::new(),
            drops: Buckets::new(),
            storming: Table::with_hasher(capacity),
            reports: Repeats::new(report_interval, capacity),
        }
    }

    /// `server` answered its client with `rcode` at `at`.
    pub fn answered(
        &mut self,
        server: SocketAddr,
        rcode: u16,
        at: SystemTime,
        out: &mut Vec<Finding>,
    ) {
        if self.servers.get(&server).is_none() {
            self.servers.insert(server, Buckets::new());
        }
        let Some(buckets) = self.servers.refresh(&server) else {
            return;
        };
        let new_second = buckets
            .seconds
            .back()
            .is_none_or(|&(last, _)| last < second_of(at));
        let Some(bucket) = buckets.at(at) else {
            return;
        };
        bucket.answered += 1;
        bucket.servfail += u64::from(rcode == SERVFAIL);
        // Judged once a second per server, as its first answer of a second says the seconds
        // before have ended.
        if new_second {
            self.judge(server, at, out);
        }
    }

    /// Queries to `server` timed out at `at`, `count` of them.
    pub fn timed_out(&mut self, server: SocketAddr, count: u64, at: SystemTime) {
        let Some(bucket) = self.timeouts.at(at) else {
            return;
        };
        if bucket.len() < MAX_BEHIND || bucket.contains_key(&server) {
            *bucket.entry(server).or_default() += count;
        }
    }

    /// The kernel dropped `count` DNS packets for `reason` at `at`.
    pub fn dropped(&mut self, reason: &Arc<str>, count: u64, at: SystemTime) {
        let Some(bucket) = self.drops.at(at) else {
            return;
        };
        if bucket.len() < MAX_BEHIND || bucket.contains_key(reason) {
            *bucket.entry(Arc::clone(reason)).or_default() += count;
        }
    }

    /// As `Analyzer::finish`: each storm's final count, if it went on after its last report.
    pub fn finish(&mut self, out: &mut Vec<Finding>) {
        out.extend(self.reports.unreported().map(Finding::ServfailStorm));
    }

    pub fn evictions(&self) -> u64 {
        self.servers.evictions() + self.reports.evictions()
    }

    fn judge(&mut self, server: SocketAddr, at: SystemTime, out: &mut Vec<Finding>) {
        let Some(buckets) = self.servers.get(&server) else {
            return;
        };
        let second = second_of(at);
        let (mut first, mut answered, mut servfail) = (second, 0, 0);
        for (bucket, counts) in buckets.ended_before(second) {
            first = first.min(bucket);
            answered += counts.answered;
            servfail += counts.servfail;
        }
        // From the first second counted to the end of the last: a second without answers
        // counts, at none.
        let seconds = second - first;
        let storming =
            seconds >= MIN_SECONDS && servfail >= MIN_RATE * seconds && servfail * 5 >= answered;
        if !storming {
            return;
        }
        self.storming.insert(server, second);
        let mut also: Vec<SocketAddr> = self
            .storming
            .iter()
            .filter(|&(&other, &last)| other != server && last + WINDOW_SECONDS > second)
            .map(|(&other, _)| other)
            .collect();
        also.sort();
        also.truncate(MAX_BEHIND);
        let (timeouts, drops) = (sum_within(&self.timeouts, at), sum_within(&self.drops, at));
        let per_second = servfail as f64 / seconds as f64;
        let share = servfail as f64 / answered.max(1) as f64;
        // What this second shows, into the report held as into a new one.
        let latest = |found: &mut ServfailFinding| {
            found.per_second = per_second;
            found.share = share;
            found.also_storming = also;
            found.timeouts_behind = timeouts;
            found.drops_behind = drops;
            found.summary = found.describe();
        };
        let found = if self.reports.last_occurred(&server).is_some() {
            self.reports.amend(&server, latest);
            self.reports.occurred(server, at, || None)
        } else {
            self.reports.occurred(server, at, || {
                let mut found = ServfailFinding::new(at, server);
                latest(&mut found);
                Some(found)
            })
        };
        out.extend(found.map(Finding::ServfailStorm));
    }
}

/// The counts of every key over the window that ends with `at`'s second, largest first.
fn sum_within<K: Ord + Clone>(
    buckets: &Buckets<BTreeMap<K, u64>>,
    at: SystemTime,
) -> Vec<(K, u64)> {
    let mut sums: BTreeMap<K, u64> = BTreeMap::new();
    for bucket in buckets.within(at) {
        for (key, count) in bucket {
            *sums.entry(key.clone()).or_default() += count;
        }
    }
    let mut sums: Vec<(K, u64)> = sums.into_iter().collect();
    sums.sort_by_key(|&(_, count)| std::cmp::Reverse(count));
    sums.truncate(MAX_BEHIND);
    sums
}

impl ServfailFinding {
    /// The storm of `server` found at `at`, its numbers still to be filled in.
    fn new(at: SystemTime, server: SocketAddr) -> Self {
        Self {
            ts: at,
            since: at,
            server,
            per_second: 0.0,
            share: 0.0,
            seconds: MIN_SECONDS,
            also_storming: Vec::new(),
            timeouts_behind: Vec::new(),
            drops_behind: Vec::new(),
            summary: String::new(),
        }
    }

    fn describe(&self) -> String {
        let mut behind: Vec<String> = self
            .timeouts_behind
            .iter()
            .map(|(server, count)| format!("{count} queries to {server} timed out"))
            .collect();
        behind.extend(
            self.drops_behind.iter().map(|(reason, count)| {
                format!("the kernel dropped {count} DNS packets as {reason}")
            }),
        );
        let also = if self.also_storming.is_empty() {
            String::new()
        } else {
            let servers: Vec<String> = self.also_storming.iter().map(ToString::to_string).collect();
            format!(
                "; {} answer SERVFAIL too (a chain of forwards passes it on)",
                servers.join(", ")
            )
        };
        let behind = if behind.is_empty() {
            "no timeout or drop seen behind it: look at the server's own log and its upstreams"
                .to_owned()
        } else {
            format!("in the same seconds {}", behind.join(", "))
        };
        format!(
            "{server} answers SERVFAIL {rate:.1} times a second ({share:.0}% of its answers), for \
             {seconds}s so far{also}; {behind}",
            server = self.server,
            rate = self.per_second,
            share = self.share * 100.0,
            seconds = self.seconds,
        )
    }
}

impl Repeated for ServfailFinding {
    fn repeated(&mut self, count: u64, last: SystemTime) {
        // One occurrence a second, the first once the storm had lasted its minimum.
        self.seconds = count + MIN_SECONDS - 1;
        self.ts = last;
        self.summary = self.describe();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(millis: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(1_000_000 + millis)
    }

    fn server() -> SocketAddr {
        "169.254.25.10:53".parse().unwrap()
    }

    fn storms() -> ServfailStorms {
        ServfailStorms::new(Duration::from_secs(10), 1024)
    }

    /// `per_second` answers with `rcode` a second for `seconds` seconds from `from` ms.
    fn answers(
        storms: &mut ServfailStorms,
        rcode: u16,
        per_second: u64,
        seconds: u64,
        from: u64,
    ) -> Vec<Finding> {
        let mut out = Vec::new();
        for n in 0..per_second * seconds {
            storms.answered(server(), rcode, at(from + n * 1000 / per_second), &mut out);
        }
        out
    }

    fn found(findings: &[Finding]) -> Vec<&ServfailFinding> {
        findings
            .iter()
            .filter_map(|finding| match finding {
                Finding::ServfailStorm(found) => Some(found),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_server_failing_everyone_is_a_storm_named_with_what_failed_behind_it() {
        let mut storms = storms();
        let upstream: SocketAddr = "10.255.0.99:53".parse().unwrap();
        storms.timed_out(upstream, 40, at(1_500));
        storms.dropped(&Arc::from("NETFILTER_DROP"), 3, at(2_500));
        let out = answers(&mut storms, SERVFAIL, 20, 6, 0);
        // Judged as each second ends, from the fourth on: 20 a second.
        let reports = found(&out);
        assert_eq!(reports.len(), 1, "reported once within the interval");
        let storm = reports[0];
        assert_eq!(storm.server, server());
        assert_eq!(storm.per_second, 20.0, "{storm:?}");
        assert_eq!(storm.share, 1.0, "{storm:?}");
        assert_eq!(storm.timeouts_behind, [(upstream, 40)]);
        assert_eq!(storm.drops_behind, [(Arc::from("NETFILTER_DROP"), 3)]);
        assert!(
            storm
                .summary
                .contains("40 queries to 10.255.0.99:53 timed out"),
            "{}",
            storm.summary
        );
        let mut end = Vec::new();
        storms.finish(&mut end);
        assert!(found(&end)[0].seconds > 1, "its final count at the end");
    }

    #[test]
    fn a_few_servfails_or_a_small_share_of_a_busy_servers_answers_are_no_storm() {
        let mut storms = storms();
        let mut out = answers(&mut storms, SERVFAIL, 5, 10, 0);
        // 15 a second, but among 100 answers a second.
        for n in 0..1000u64 {
            let rcode = if n % 100 < 15 { SERVFAIL } else { 0 };
            storms.answered(server(), rcode, at(20_000 + n * 10), &mut out);
        }
        storms.finish(&mut out);
        assert_eq!(found(&out), Vec::<&ServfailFinding>::new());
    }
}
