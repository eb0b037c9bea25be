//! Findings, packets and a summary to write in the sinks' and the recorder's tests.
use std::{
    collections::BTreeMap,
    sync::Arc,
    time::{Duration, SystemTime},
};

use dnsloop_frames::{dns_query, FrameSpec, QTYPE_A};
use dnsloop_shared::{
    parse::{LinkLayer, Probe},
    point::Direction,
};

use super::observations::*;
use crate::{
    analyzers::{HopTimes, LookupCounts, LookupSummary, ServerSummary, Summary},
    finding::{
        BundleNotice, ConntrackEvidence, Dnat, DropFinding, Finding, FragmentationFinding, Hop,
        LookupFinding, LookupHop, LoopFinding, LoopId, OffNode, SearchListFinding, ServfailFinding,
        SlowestSearch, TimeoutFinding, TruncationFinding, Unconfirmable, Unconfirmed,
        UnexpectedSourceFinding,
    },
    observation::{DropCause, DropPlace, FragmentSizes, Namespace, Point, Transport},
    points::{InterfaceRef, Seen},
    schema::{ConntrackCounts, InterfaceCount, KernelSummary, SummarySource},
    source::RawPacket,
};

fn hop(ms_at: u64, ifname: &str, direction: Direction, src: &str, dst: &str, id: u16) -> Hop {
    Hop {
        ts: ms(ms_at),
        point: Arc::new(Point {
            ifname: ifname.into(),
            direction,
            // The bridge's own interface: egress leaves the node's stack, ingress enters it.
            leaves: (direction == Direction::Egress).then(|| Namespace::new("node")),
            enters: (direction == Direction::Ingress).then(|| Namespace::new("node")),
        }),
        src: addr(src),
        dst: addr(dst),
        id,
        transport: Transport::Udp,
    }
}

pub fn a_loop(probe: Probe) -> Finding {
    Finding::Loop(a_loop_finding(probe))
}

fn a_loop_finding(probe: Probe) -> LoopFinding {
    LoopFinding {
        ts: ms(1_123),
        // A repeat: the loop was first reported earlier.
        since: ms(1_001),
        loop_id: LoopId(0x0123_4567_89ab_cdef),
        qname: "www.example.test.".into(),
        qtype: A,
        count: 3,
        off_node: Vec::new(),
        unanswered: 0,
        path: vec![
            hop(1_001, "cni0", Direction::Egress, "10.244.0.1:50000", "10.244.0.3:53", 1000),
            hop(1_123, "cni0", Direction::Ingress, "10.244.0.3:40000", "169.254.25.10:53", 2000),
        ],
        servers: vec!["10.244.0.3".parse().expect("an address"), "169.254.25.10".parse().expect("an address")],
        probe,
        summary: "loop: www.example.test. A re-entered node after node -> 10.244.0.3 -> pod 10.244.0.3 -> 169.254.25.10 (2 hops): check the upstream".into(),
        dnat: Vec::new(),
        unconfirmed: Vec::new(),
    }
}

/// A loop in a capture that shows no reply from the node cache's address: a possible loop.
pub fn a_possible_loop() -> Finding {
    Finding::Loop(LoopFinding {
        since: ms(1_123),
        count: 1,
        unconfirmed: vec![Unconfirmed {
            namespace: Namespace::new("node"),
            at: addr("169.254.25.10:53"),
            why: Unconfirmable::AddressNotShown,
        }],
        summary: "possible loop: www.example.test. A: node -> 10.244.0.3 (pod 10.244.0.3) -> 169.254.25.10 (node) (2 hops): check the upstream. Not confirmed: nothing shows that node holds 169.254.25.10 (its addresses were not listed, and no reply came from it there), so the question may have been routed on or dropped there unseen".into(),
        ..a_loop_finding(Probe::None)
    })
}

/// A later report of a loop through another node, two seconds after the first.
pub fn a_loop_through_other_nodes() -> Finding {
    Finding::Loop(LoopFinding {
        ts: ms(3_001),
        count: 40,
        off_node: vec![OffNode {
            left_via: "vxlan0".into(),
            sent_to: addr("10.244.1.3:53"),
            back_from: addr("10.244.1.0:41000"),
            back_via: "vxlan0".into(),
        }],
        ..a_loop_finding(Probe::None)
    })
}

/// The first report of a loop whose forward to 10.244.0.3 an enricher found DNAT'ed from the
/// ClusterIP, and named so in the summary.
pub fn a_loop_through_a_cluster_ip() -> Finding {
    Finding::Loop(LoopFinding {
        count: 1,
        since: ms(1_123),
        unanswered: 0,
        dnat: vec![Dnat {
            service: addr("10.96.0.10:53"),
            backend: addr("10.244.0.3:53"),
        }],
        summary: "loop: www.example.test. A: node -> 10.96.0.10 (DNAT -> 10.244.0.3) (pod 10.244.0.3) -> 169.254.25.10 (node) (2 hops): check the upstream".into(),
        ..a_loop_finding(Probe::None)
    })
}

pub fn an_unexpected_source(conntrack: Option<ConntrackEvidence>) -> Finding {
    Finding::UnexpectedSource(UnexpectedSourceFinding {
        ts: ms(2_000),
        client: addr("10.244.0.2:41234"),
        expected: addr("10.96.0.10:53"),
        actual: addr("10.244.0.3:53"),
        id: 4242,
        qname: "www.example.test.".into(),
        qtype: A,
        transport: Transport::Udp,
        cause: conntrack.as_ref().map(|_| "br_netfilter is off".to_owned()),
        conntrack,
        summary: "reply to 10.244.0.2:41234 id 4242 came from 10.244.0.3:53, but the query went to 10.96.0.10:53: the client's socket drops it".into(),
    })
}

pub fn a_timeout() -> Finding {
    Finding::Timeout(TimeoutFinding {
        ts: ms(3_000),
        client: addr("10.244.0.3:5353"),
        server: addr("10.255.0.99:53"),
        id: 77,
        count: 1,
        qname: "corp.example.".into(),
        qtype: A,
        names_under: None,
        waited: Duration::from_secs(2),
        dropped: None,
            stale_conntrack: None,
        summary: "no answer from 10.255.0.99:53 for corp.example. A (client 10.244.0.3:5353, id 77) after 2.0s".into(),
    })
}

/// An Alpine pod taking a truncated answer from the node cache without retrying over TCP.
pub fn a_truncation_not_retried() -> Finding {
    let mut found = TruncationFinding {
        ts: ms(2_010),
        client: addr("10.244.0.2:41234"),
        client_namespace: Some(Namespace::new("pod default/alpine")),
        server: addr("169.254.25.10:53"),
        id: 4242,
        qname: "big.example.test.".into(),
        qtype: A,
        size: 508,
        waited: Duration::from_secs(2),
        count: 1,
        summary: String::new(),
    };
    found.summary = "10.244.0.2 (pod default/alpine) took a truncated answer from 169.254.25.10:53 (the latest for big.example.test. A, 508 bytes, TC set) and did not ask again over TCP within 2.0s".into();
    Finding::TruncatedNotRetried(found)
}

/// A pod whose lookups of an external name go through the cluster's search list first.
pub fn a_search_list_waste() -> Finding {
    Finding::SearchListWaste(SearchListFinding {
        ts: ms(10_000),
        since: ms(1_000),
        client: "10.244.0.2".parse().expect("an address"),
        client_namespace: Some(Namespace::new("pod default/web")),
        server: addr("169.254.25.10:53"),
        queries: 80,
        wasted: 60,
        lookups: 10,
        extra: Duration::from_millis(35),
        slowest: SlowestSearch {
            qname: "api.example.com.".into(),
            qtype: A,
            wasted: 6,
            extra: Duration::from_millis(7),
        },
        summary: "10.244.0.2 (pod default/web) wasted 60 of its 80 queries (75%) on search-list expansions".into(),
    })
}

/// The node cache answering SERVFAIL to everyone while its upstream is silent.
pub fn a_servfail_storm() -> Finding {
    Finding::ServfailStorm(ServfailFinding {
        ts: ms(8_000),
        since: ms(5_000),
        server: addr("169.254.25.10:53"),
        per_second: 120.0,
        share: 0.95,
        seconds: 4,
        also_storming: vec![addr("10.96.0.10:53")],
        timeouts_behind: vec![(addr("10.255.0.99:53"), 480)],
        drops_behind: vec![("NETFILTER_DROP".into(), 12)],
        summary: "169.254.25.10:53 answers SERVFAIL 120.0 times a second (95% of its answers) for 4s so far; in the same seconds 480 queries to 10.255.0.99:53 timed out, the kernel dropped 12 DNS packets as NETFILTER_DROP".into(),
    })
}

/// A 3242-byte reply from the upstream whose fragments after the first never reached the
/// client pod, which gave up reassembling it.
pub fn a_fragmented_reply_lost() -> Finding {
    Finding::FragmentedReplyLost(FragmentationFinding {
        ts: ms(31_000),
        client: addr("10.244.0.2:41234"),
        server: addr("10.255.0.96:53"),
        id: 4242,
        qname: "large.example.test.".into(),
        qtype: A,
        sizes: Some(FragmentSizes {
            message: 3242,
            first_fragment: 1500,
        }),
        edns_udp_size: Some(4096),
        seen: vec![Hop {
            ts: ms(1_000),
            point: Arc::new(Point {
                ifname: "veth-client".into(),
                direction: Direction::Egress,
                leaves: None,
                enters: Some(Namespace::new("pod 10.244.0.2")),
            }),
            src: addr("10.255.0.96:53"),
            dst: addr("10.244.0.2:41234"),
            id: 4242,
            transport: Transport::Udp,
        }],
        lost: DropCause {
            reason: "FRAG_REASM_TIMEOUT".into(),
            location: Some("ip_expire+0x68".into()),
            place: DropPlace {
                namespace: Some(Namespace::new("pod 10.244.0.2")),
                device: Some("eth0".into()),
            },
        },
        count: 1,
        summary: "a reply from 10.255.0.96:53 to 10.244.0.2:41234 for large.example.test. A (id 4242, 3242 bytes, first fragment 1500 bytes, the query advertised EDNS 4096) was lost to fragmentation".into(),
    })
}

/// A NetworkPolicy's rule dropping queries to a CoreDNS pod, in the node's forward path.
fn a_netfilter_drop() -> DropCause {
    DropCause {
        reason: "NETFILTER_DROP".into(),
        location: Some("nf_hook_slow+0x9c".into()),
        place: DropPlace {
            namespace: Some(Namespace::new("node")),
            device: Some("cni0".into()),
        },
    }
}

/// A timeout whose query the kernel dropped on its way.
pub fn a_dropped_timeout() -> Finding {
    let Finding::Timeout(mut found) = a_timeout() else {
        unreachable!("a timeout");
    };
    found.dropped = Some(a_netfilter_drop());
    found
        .summary
        .push_str("; dropped as NETFILTER_DROP by nf_hook_slow+0x9c in node, on cni0");
    Finding::Timeout(found)
}

/// The kernel dropping queries: the third in a row; and a reply dropped where nobody listens,
/// its namespace unknown and its message without a question.
pub fn drops() -> [Finding; 2] {
    [
        Finding::Drop(DropFinding {
            ts: ms(3_100),
            cause: a_netfilter_drop(),
            src: addr("10.244.0.2:41234"),
            dst: addr("10.244.0.3:53"),
            id: 4242,
            is_response: false,
            transport: Transport::Udp,
            qname: Some("www.example.test.".into()),
            qtype: Some(A),
            count: 3,
            summary: "the kernel dropped a query for www.example.test. A (10.244.0.2:41234 -> 10.244.0.3:53, id 4242): dropped as NETFILTER_DROP by nf_hook_slow+0x9c in node, on cni0".into(),
        }),
        Finding::Drop(DropFinding {
            ts: ms(3_200),
            cause: DropCause {
                reason: "NO_SOCKET".into(),
                location: None,
                place: DropPlace {
                    namespace: None,
                    device: Some("if2".into()),
                },
            },
            src: addr("10.244.0.3:53"),
            dst: addr("10.244.0.2:41234"),
            id: 4243,
            is_response: true,
            transport: Transport::Udp,
            qname: None,
            qtype: None,
            count: 1,
            summary: "the kernel dropped a reply (10.244.0.3:53 -> 10.244.0.2:41234, id 4243): dropped as NO_SOCKET in an unknown namespace, on if2".into(),
        }),
    ]
}

/// The client asks the node cache, which asks CoreDNS through the ClusterIP, which asks the
/// upstream beyond eth0: 150 ms of the 153 ms it waited were the upstream's.
pub fn a_slow_lookup() -> Finding {
    let hop = |from: &str, src: &str, server: &str, sent: u64, answered: u64| LookupHop {
        from: Some(Namespace::new(from)),
        src: addr(src),
        server: addr(server),
        backend: None,
        to: None,
        via: None,
        id: 1,
        transport: Transport::Udp,
        sent: us(sent),
        answered: us(answered),
        rcode: 0,
        forwards: None,
        own: Duration::ZERO,
    };
    let client = LookupHop {
        to: Some(Namespace::new("node")),
        id: 4242,
        own: Duration::from_micros(1_000),
        ..hop(
            "pod 10.244.0.2",
            "10.244.0.2:41234",
            "169.254.25.10:53",
            0,
            153_000,
        )
    };
    let cache = LookupHop {
        backend: Some(addr("10.244.0.3:53")),
        to: Some(Namespace::new("pod 10.244.0.3")),
        id: 1000,
        forwards: Some(0),
        own: Duration::from_micros(2_000),
        ..hop("node", "10.255.0.1:50000", "10.96.0.10:53", 500, 152_500)
    };
    let upstream = LookupHop {
        via: Some("eth0".into()),
        id: 2000,
        forwards: Some(1),
        own: Duration::from_millis(150),
        ..hop(
            "pod 10.244.0.3",
            "10.244.0.3:40000",
            "10.255.0.53:53",
            1_000,
            151_000,
        )
    };
    Finding::Lookup(LookupFinding {
        ts: us(153_000),
        qname: "www.example.test.".into(),
        qtype: A,
        hops: vec![client, cache, upstream],
        slowest: 2,
        hops_left_out: 0,
        summary: "pod 10.244.0.2 waited 153.0 ms for www.example.test. A (NOERROR); the slowest hop: pod 10.244.0.3 -> 10.255.0.53:53 (off the node via eth0), 150.0 ms of it".into(),
    })
}

/// What following lookups with `--slow 100ms` gave.
pub fn lookups_followed() -> LookupSummary {
    LookupSummary {
        slow: Duration::from_millis(100),
        counts: LookupCounts {
            followed: 20,
            slow: 1,
            reported: 1,
            suppressed: 0,
            unlinked: 0,
        },
        servers: vec![HopTimes {
            server: addr("10.255.0.53:53"),
            hops: 20,
            p50: Duration::from_millis(150),
            p90: Duration::from_millis(150),
            p99: Duration::from_millis(151),
            max: Duration::from_millis(151),
        }],
    }
}

/// A query for `www.example.test` from `src` to `dst` with `id`, seen entering cni0 (interface
/// 3) at `at`.
pub fn a_query(at: SystemTime, src: &str, dst: &str, id: u16) -> RawPacket {
    let frame = FrameSpec {
        src: addr(src).ip(),
        dst: addr(dst).ip(),
        sport: addr(src).port(),
        dport: addr(dst).port(),
        payload: dns_query(id, "www.example.test", QTYPE_A),
        ..FrameSpec::default()
    }
    .build();
    RawPacket {
        ts: at,
        seen: Seen {
            interface: InterfaceRef {
                netns_cookie: 0,
                ifindex: 3,
            },
            direction: Direction::Ingress,
            via_gateway: false,
        },
        link_layer: LinkLayer::Ethernet,
        bytes: frame.into(),
        matched_query: None,
        priors: Vec::new(),
        recorder_only: false,
    }
}

/// The bundle `trace --record` writes for a loop (started by it) or for a drop without a
/// question (which joined it).
pub fn a_bundle_notice(for_a_loop: bool) -> BundleNotice {
    BundleNotice {
        finding: if for_a_loop { "loop" } else { "drop" },
        loop_id: for_a_loop.then_some(LoopId(0x0123_4567_89ab_cdef)),
        qname: for_a_loop.then(|| "www.example.test.".into()),
        path: "/var/lib/dnsloop/record/dnsloop-1970-01-01T000001.123Z-loop-0123456789abcdef".into(),
        started: for_a_loop,
        from: ms(0),
        until: ms(6_123),
        suppressed: if for_a_loop { 0 } else { 3 },
    }
}

pub fn a_summary() -> Summary {
    Summary {
        at: ms(60_000),
        observations: 1234,
        late_observations: 2,
        findings: Default::default(),
        timeouts: Default::default(),
        evictions: BTreeMap::from([("reorder", 0), ("timeout", 5)]),
        unanswered_at_end: 1,
        servers: vec![ServerSummary {
            server: addr("169.254.25.10:53"),
            answered: 30,
            p50: Duration::from_micros(1_200),
            p90: Duration::from_millis(3),
            p99: Duration::from_millis(10),
            max: Duration::from_millis(12),
            rcodes: BTreeMap::from([(0, 28), (3, 2)]),
            truncated: 1,
        }],
        lookups: None,
    }
}

/// A DNS packet with a compression pointer where its question's name must be spelled out, seen
/// on the bridge at 12:00:01.500.
pub fn malformed_sample() -> crate::decode::MalformedSample {
    crate::decode::MalformedSample {
        ts: std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_millis(43_201_500),
        ifname: "cni0".into(),
        direction: dnsloop_shared::point::Direction::Ingress,
        reason: dnsloop_shared::parse::Malformed::DnsCompressionPointer,
        addresses: Some((
            "10.244.0.2:41234".parse().expect("an address"),
            "10.96.0.10:53".parse().expect("an address"),
        )),
        head: bytes::Bytes::from_static(&[0x12, 0x34, 0x01, 0x00, 0xc0, 0x0c]),
    }
}

/// The kernel's numbers for a summary: one interface's packets, a counter, lost events.
pub fn kernel_numbers() -> SummarySource {
    SummarySource::Kernel(KernelSummary {
        interfaces: vec![InterfaceCount {
            ifname: "cni0".into(),
            dir: "ingress".into(),
            dns_packets: 4,
            packets: 10,
        }],
        kernel: [("packets", 10)].into_iter().collect(),
        drops: Some([("NETFILTER_DROP", 3)].into_iter().collect()),
        lost_events: 3,
        conntrack: Some(ConntrackCounts {
            clashes_resolved: Some(12),
            insert_failed: 0,
            drop: 0,
        }),
        ..KernelSummary::default()
    })
}
