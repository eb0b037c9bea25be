//! DNS replies lost to fragmentation: a reply larger than its path's MTU leaves its server in
//! fragments; where the fragments after the first are dropped (a firewall or cloud network that
//! passes no fragment without ports, a rule on non-first fragments), the host holding the first
//! one gives up after `net.ipv4.ipfrag_time` (30 s by default) and the client never gets an
//! answer. Its query may not even time out here: the first fragment carries the reply's header
//! and question, so it looks answered wherever that fragment was seen.
//!
//! The evidence is the host giving up: the kernel drops the first fragment as
//! `FRAG_REASM_TIMEOUT` (live), and a host that was the reply's destination says so in an ICMP
//! "fragment reassembly time exceeded" quoting it (a capture; the decoder turns it into the same
//! drop). Nothing else makes a finding, so a large reply delivered whole never does. Around it
//! the finding names what was seen, when it was: the query's EDNS size (the reply it invited)
//! and where the reply was seen on its way. Drops come apart from the packets, which the engine
//! holds `settle` to put them in order: a drop is judged once the packets before it are in.
use std::{
    collections::VecDeque,
    net::{IpAddr, SocketAddr},
    time::{Duration, SystemTime},
};

use super::{
    has_waited,
    repeats::{Repeated, Repeats},
    table::Table,
};
use crate::{
    decode::REASSEMBLY_TIMEOUT,
    finding::{Finding, FragmentationFinding, Hop},
    observation::{DroppedMessage, Observation, Transport},
    present::{mnemonic, names::Names},
};

/// The largest reply that fits every path without fragments (DNS Flag Day 2020: 1280 bytes of
/// IPv6 MTU less its headers); what CoreDNS's `bufsize 1232` keeps replies to.
pub const FITS_EVERY_PATH: usize = 1232;
/// How long a query or a reply is remembered for the drop that may follow: a host gives up a
/// datagram `net.ipv4.ipfrag_time` after its first fragment, 30 s by default.
const REMEMBERED: Duration = Duration::from_secs(60);
/// Sightings kept of one reply: its way across a node.
const MAX_SIGHTINGS: usize = 8;

/// A query or reply, by its client's address and port and its id.
type MessageRef = (SocketAddr, u16);

struct Invited {
    at: SystemTime,
    edns_udp_size: u16,
}

struct Sightings {
    at: SystemTime,
    hops: Vec<Hop>,
}

/// Judges the drops of fragmented replies; those from one server to one client are reported
/// when first found, then at most once per report interval, with their count.
pub struct FragmentedReplies {
    settle: Duration,
    capacity: usize,
    /// Replies given up, in the order they came, each judged `settle` after it.
    given_up: VecDeque<DroppedMessage>,
    /// Queries that advertised more than [`FITS_EVERY_PATH`] bytes, oldest first.
    invited: Table<MessageRef, Invited>,
    /// Where replies larger than [`FITS_EVERY_PATH`] were seen, oldest first.
    sightings: Table<MessageRef, Sightings>,
    reports: Repeats<(IpAddr, SocketAddr), FragmentationFinding>,
    names: Names,
}

impl FragmentedReplies {
    /// Drops are judged `settle` after they came.
    pub fn new(settle: Duration, report_interval: Duration, capacity: usize, names: Names) -> Self {
        Self {
            settle,
            capacity,
            given_up: VecDeque::new(),
            invited: Table::new(capacity),
            sightings: Table::new(capacity),
            reports: Repeats::new(report_interval, capacity),
            names,
        }
    }

    /// Notes a query inviting a reply that may not fit its path, and where a large reply was
    /// seen.
    pub fn observe(&mut self, obs: &Observation) {
        if obs.transport != Transport::Udp {
            return;
        }
        if !obs.is_response {
            if let Some(size) = obs
                .edns_udp_size
                .filter(|&size| usize::from(size) > FITS_EVERY_PATH)
            {
                let invited = Invited {
                    at: obs.ts,
                    edns_udp_size: size,
                };
                self.invited.insert((obs.src, obs.id), invited);
            }
            return;
        }
        if obs.size <= FITS_EVERY_PATH {
            return;
        }
        let key = (obs.dst, obs.id);
        match self.sightings.get_mut(&key) {
            Some(seen) if seen.hops.len() < MAX_SIGHTINGS => seen.hops.push(Hop::of(obs)),
            Some(_) => {}
            None => {
                let seen = Sightings {
                    at: obs.ts,
                    hops: vec![Hop::of(obs)],
                };
                self.sightings.insert(key, seen);
            }
        }
    }

    /// The kernel dropped `dropped`: a reply whose reassembly its host gave up is judged once
    /// the packets before it are in.
    pub fn dropped(&mut self, dropped: &DroppedMessage) {
        let given_up = dropped.is_response
            && dropped.question.is_some()
            && dropped.cause.reason.as_ref() == REASSEMBLY_TIMEOUT;
        if given_up && self.given_up.len() < self.capacity {
            self.given_up.push_back(dropped.clone());
        }
    }

    /// A reply given up: reported, with what was seen of its query and of itself.
    fn report(&mut self, dropped: &DroppedMessage, out: &mut Vec<Finding>) {
        let Some(question) = &dropped.question else {
            return;
        };
        let key = (dropped.dst, dropped.id);
        let edns_udp_size = self
            .invited
            .remove(&key)
            .map(|invited| invited.edns_udp_size);
        let mut seen = self
            .sightings
            .remove(&key)
            .map(|seen| seen.hops)
            .unwrap_or_default();
        seen.sort_by_key(|hop| hop.ts);
        let found = self
            .reports
            .occurred((dropped.dst.ip(), dropped.src), dropped.ts, || {
                let mut found = FragmentationFinding {
                    ts: dropped.ts,
                    client: dropped.dst,
                    server: dropped.src,
                    id: dropped.id,
                    qname: question.name.presented(&self.names),
                    qtype: question.qtype,
                    sizes: dropped.fragmented,
                    edns_udp_size,
                    seen,
                    lost: dropped.cause.clone(),
                    count: 1,
                    summary: String::new(),
                };
                found.summary = found.describe();
                Some(found)
            });
        out.extend(found.map(Finding::FragmentedReplyLost));
    }

    /// As `Analyzer::tick`: reports the replies given up `settle` ago or more, and forgets what
    /// no drop can follow any more.
    pub fn tick(&mut self, now: SystemTime, out: &mut Vec<Finding>) {
        while let Some(dropped) = self
            .given_up
            .pop_front_if(|dropped| has_waited(dropped.ts, self.settle, now))
        {
            self.report(&dropped, out);
        }
        while self
            .invited
            .pop_stalest_if(|_, invited| has_waited(invited.at, REMEMBERED, now))
            .is_some()
        {}
        while self
            .sightings
            .pop_stalest_if(|_, seen| has_waited(seen.at, REMEMBERED, now))
            .is_some()
        {}
    }

    /// As `Analyzer::finish`: every reply given up, and every count not yet reported.
    pub fn finish(&mut self, out: &mut Vec<Finding>) {
        while let Some(dropped) = self.given_up.pop_front() {
            self.report(&dropped, out);
        }
        out.extend(self.reports.unreported().map(Finding::FragmentedReplyLost));
    }

    /// Entries dropped from full tables so far.
    pub fn evictions(&self) -> u64 {
        self.invited.evictions() + self.sightings.evictions() + self.reports.evictions()
    }
}

impl FragmentationFinding {
    fn describe(&self) -> String {
        let replies = match self.count {
            1 => "a reply".to_owned(),
            count => format!("{count} replies (the latest"),
        };
        let mut facts = vec![format!("id {}", self.id)];
        if let Some(sizes) = &self.sizes {
            facts.push(format!(
                "{} bytes, first fragment {} bytes",
                sizes.message, sizes.first_fragment
            ));
        }
        if let Some(size) = self.edns_udp_size {
            facts.push(format!("the query advertised EDNS {size}"));
        }
        let seen = match self.seen.as_slice() {
            [] => String::new(),
            hops => {
                let hops: Vec<String> = hops
                    .iter()
                    .map(|hop| format!("{} {}", hop.point.ifname, hop.point.direction.as_str()))
                    .collect();
                format!("; seen at {}", hops.join(", "))
            }
        };
        let close = if self.count == 1 { "" } else { ")" };
        format!(
            "{replies} from {server} to {client} for {qname} {qtype} ({facts}){close} was lost \
             to fragmentation: {place} held its first fragment and gave up waiting for the rest \
             ({reason}){seen}. The client got no answer. Keep replies within the path's MTU: \
             CoreDNS `bufsize 1232` (in `forward`'s server block), or the answering server's \
             EDNS buffer size (1232); or let IP fragments through on the path",
            server = self.server,
            client = self.client,
            qname = self.qname,
            qtype = mnemonic::qtype(self.qtype),
            facts = facts.join(", "),
            place = self.lost.place,
            reason = self.lost.reason,
        )
    }
}

impl Repeated for FragmentationFinding {
    fn repeated(&mut self, count: u64, last: SystemTime) {
        self.count = count;
        self.ts = last;
        self.summary = self.describe();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        observation::{DnsName, DropCause, DropPlace, FragmentSizes, Namespace, Question},
        testkit::observations::*,
    };

    const SETTLE: Duration = Duration::from_millis(50);
    const INTERVAL: Duration = Duration::from_secs(10);
    const CLIENT_ADDR: &str = "10.244.0.2:41234";
    const SERVER_ADDR: &str = "10.255.0.96:53";

    /// The client's query for `large.test.` to the upstream, with its EDNS size.
    fn asks(id: u16, edns: u16, at: u64) -> Observation {
        query("large.test.")
            .id(id)
            .from(CLIENT_ADDR)
            .to(SERVER_ADDR)
            .edns(edns)
            .at_ms(at)
            .seen(CLIENT_OUT)
    }

    /// The reply's first fragment, 3242 bytes of message, entering the node and the pod.
    fn reply_seen(id: u16, at: u64) -> Vec<Observation> {
        reply("large.test.")
            .id(id)
            .from(SERVER_ADDR)
            .to(CLIENT_ADDR)
            .size(3242)
            .at_ms(at)
            .route(&[NODE_FROM_UPLINK, CLIENT_IN])
    }

    /// The pod's kernel giving up reassembling reply `id` at `at`, for `reason`.
    fn given_up(id: u16, at: u64, reason: &str) -> DroppedMessage {
        DroppedMessage {
            ts: ms(at),
            cause: DropCause {
                reason: reason.into(),
                location: Some("ip_expire+0x68".into()),
                place: DropPlace {
                    namespace: Some(Namespace::new("pod 10.244.0.2")),
                    device: Some("if2".into()),
                },
            },
            transport: Transport::Udp,
            src: addr(SERVER_ADDR),
            dst: addr(CLIENT_ADDR),
            id,
            is_response: true,
            question: Some(Question {
                name: DnsName::from_wire(&name_wire("large.test.")).expect("a name"),
                qtype: A,
                qclass: 1,
            }),
            fragmented: Some(FragmentSizes {
                message: 3242,
                first_fragment: 1500,
            }),
        }
    }

    fn found(out: &[Finding]) -> Vec<&FragmentationFinding> {
        out.iter()
            .filter_map(|finding| match finding {
                Finding::FragmentedReplyLost(found) => Some(found),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_reply_given_up_in_reassembly_names_sizes_path_and_fix() {
        let mut replies = FragmentedReplies::new(SETTLE, INTERVAL, 1024, Names::AsSent);
        replies.observe(&asks(7, 4096, 1_000));
        for seen in reply_seen(7, 1_001) {
            replies.observe(&seen);
        }
        let mut out = Vec::new();
        replies.dropped(&given_up(7, 31_001, REASSEMBLY_TIMEOUT));
        replies.tick(ms(31_050), &mut out);
        assert!(out.is_empty(), "judged once the packets before it are in");
        replies.tick(ms(31_051), &mut out);
        let found = found(&out);
        assert_eq!(found.len(), 1, "{out:?}");
        let found = found[0];
        assert_eq!(
            (found.client, found.server, found.id, found.edns_udp_size),
            (addr(CLIENT_ADDR), addr(SERVER_ADDR), 7, Some(4096))
        );
        assert_eq!(found.sizes.map(|sizes| sizes.message), Some(3242));
        let seen: Vec<&str> = found
            .seen
            .iter()
            .map(|hop| hop.point.ifname.as_ref())
            .collect();
        assert_eq!(seen, [NODE_FROM_UPLINK.ifname, CLIENT_IN.ifname]);
        for said in [
            "lost to fragmentation",
            "3242 bytes, first fragment 1500 bytes",
            "EDNS 4096",
            "pod 10.244.0.2, on if2 held its first fragment",
            "bufsize 1232",
        ] {
            assert!(found.summary.contains(said), "{said}: {}", found.summary);
        }
    }

    #[test]
    fn a_large_reply_delivered_or_dropped_for_another_reason_is_no_finding() {
        let mut replies = FragmentedReplies::new(SETTLE, INTERVAL, 1024, Names::AsSent);
        let mut out = Vec::new();
        replies.observe(&asks(8, 4096, 1_000));
        for seen in reply_seen(8, 1_001) {
            replies.observe(&seen);
        }
        replies.tick(ms(70_000), &mut out);
        replies.dropped(&given_up(8, 1_002, "NETFILTER_DROP"));
        let query = DroppedMessage {
            is_response: false,
            ..given_up(8, 1_003, REASSEMBLY_TIMEOUT)
        };
        replies.dropped(&query);
        replies.finish(&mut out);
        assert!(out.is_empty(), "{out:?}");
    }

    #[test]
    fn what_was_not_seen_is_not_claimed_and_repeats_are_counted() {
        let mut replies = FragmentedReplies::new(SETTLE, INTERVAL, 1024, Names::AsSent);
        let mut out = Vec::new();
        // A default trace streams neither the query nor the reply: the drop alone, with the
        // sizes its first fragment shows.
        replies.dropped(&given_up(9, 31_000, REASSEMBLY_TIMEOUT));
        replies.dropped(&given_up(10, 32_000, REASSEMBLY_TIMEOUT));
        replies.finish(&mut out);
        let found = found(&out);
        assert_eq!(found.len(), 2, "the first at once, the count at the end");
        assert_eq!((found[0].edns_udp_size, found[0].seen.len()), (None, 0));
        assert!(
            !found[0].summary.contains("advertised"),
            "{}",
            found[0].summary
        );
        assert!(
            !found[0].summary.contains("seen at"),
            "{}",
            found[0].summary
        );
        assert_eq!(found[1].count, 2);
        assert!(
            found[1].summary.starts_with("2 replies"),
            "{}",
            found[1].summary
        );
    }
}
