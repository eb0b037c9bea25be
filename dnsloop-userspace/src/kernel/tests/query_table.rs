//! The query table: queries in flight, collected once they expire unanswered, and the answers
//! that take them out and count for their server.
use std::{
    net::{IpAddr, Ipv4Addr},
    time::Duration,
};

use dnsloop_frames::*;
use dnsloop_shared::{
    counter::Counter,
    names::LONG_NAMES_MAP,
    point::Direction,
    query::{LongName, QueryKey},
};

use crate::kernel::{
    clock::{monotonic_now_ns, MonotonicClock},
    programs::{self, Settings},
    unanswered::{UnansweredQueries, SWEEP_MAX},
};

use super::kit::*;

#[test]
fn a_query_never_answered_is_collected_with_its_question_once_it_expires() {
    for_each_build(loaded(trace_settings()), |mut kernel| {
        kernel.run(
            Direction::Ingress,
            &query_frame(0x5151, "Corp.Example", QTYPE_AAAA),
        );
        let mut unanswered = kernel.unanswered_queries();
        let mut expired = Vec::new();
        unanswered
            .take_expired(Duration::from_secs(60), &mut expired)
            .expect("reading the query table");
        assert!(expired.is_empty(), "not expired yet: {expired:?}");

        unanswered
            .take_expired(Duration::ZERO, &mut expired)
            .expect("reading the query table");
        let [query] = expired.as_slice() else {
            panic!("one unanswered query: {expired:?}");
        };
        assert_eq!(
            query
                .name
                .presented(&dnsloop_core::present::names::Names::AsSent),
            "Corp.Example.",
            "as sent, case kept"
        );
        assert_eq!((query.qtype, query.qclass), (QTYPE_AAAA, QCLASS_IN));
        assert_eq!(query.id, 0x5151);
        assert_eq!(query.client, "10.0.0.1:40000".parse().unwrap());
        assert_eq!(query.server, "10.96.0.10:53".parse().unwrap());
        assert_eq!(
            (query.seen.interface.ifindex, query.seen.direction),
            (LOOPBACK_IFINDEX, Direction::Ingress)
        );
        assert!(!query.tcp);

        expired.clear();
        unanswered
            .take_expired(Duration::ZERO, &mut expired)
            .expect("reading the query table");
        assert!(expired.is_empty(), "each is collected once: {expired:?}");
    });
}

/// A sweep holds at most `SWEEP_MAX` expired queries: the oldest, in the order they were sent,
/// and says that it left the others for the next.
#[test]
fn a_sweep_takes_the_oldest_expired_queries_and_leaves_the_rest_for_the_next() {
    for_each_build(loaded(trace_settings()), |mut kernel| {
        let sent = u16::try_from(SWEEP_MAX + 100).expect("ids enough");
        for id in 1..=sent {
            kernel.run(
                Direction::Ingress,
                &query_frame(id, "many.example", QTYPE_A),
            );
        }
        let mut unanswered = kernel.unanswered_queries();
        let mut ids = Vec::new();
        let mut lefts = Vec::new();
        loop {
            let mut expired = Vec::new();
            let left = unanswered
                .take_expired(Duration::ZERO, &mut expired)
                .expect("reading the query table");
            lefts.push((left, expired.len()));
            ids.extend(expired.iter().map(|query| query.id));
            if !left {
                break;
            }
        }
        assert_eq!(lefts, [(true, SWEEP_MAX), (false, 100)]);
        assert_eq!(
            ids,
            (1..=sent).collect::<Vec<_>>(),
            "oldest first, each once"
        );
    });
}

/// A name too long for the query's entry is kept in the long-name table beside it: collected
/// whole with an unanswered query, and taken out with an answered one.
#[test]
fn a_long_name_is_collected_whole_and_leaves_with_its_answered_query() {
    for_each_build(loaded(trace_settings()), |mut kernel| {
        // Wire lengths on both sides of the entry's room (64), and the longest name there is.
        let names: Vec<String> = [64, 65, 255].map(name_of_wire_len).into();
        for (id, name) in (1..).zip(&names) {
            kernel.run(Direction::Ingress, &query_frame(id, name, QTYPE_A));
        }
        let answered = name_of_wire_len(200);
        kernel.run(Direction::Ingress, &query_frame(9, &answered, QTYPE_A));
        kernel.run(Direction::Egress, &answer_frame(9, &answered, QTYPE_A, 0));
        assert_eq!(
            long_names_held(&kernel),
            2,
            "65 and 255 bytes, not the answered one"
        );

        let mut expired = Vec::new();
        kernel
            .unanswered_queries()
            .take_expired(Duration::ZERO, &mut expired)
            .expect("reading the query table");
        let collected: Vec<String> = expired
            .iter()
            .map(|query| {
                query
                    .name
                    .presented(&dnsloop_core::present::names::Names::AsSent)
            })
            .collect();
        let asked: Vec<String> = names.iter().map(|name| format!("{name}.")).collect();
        assert_eq!(collected, asked);
    });
}

/// A name of `len` bytes in wire format (root label included), of labels of `a`s.
fn name_of_wire_len(len: usize) -> String {
    let mut labels = Vec::new();
    let mut left = len - 1;
    while left > 0 {
        let mut label = 63.min(left - 1);
        // A label takes two bytes at least: leave none of one.
        if left - (label + 1) == 1 {
            label -= 1;
        }
        labels.push("a".repeat(label));
        left -= label + 1;
    }
    labels.join(".")
}

/// Entries in the kernel's long-name table.
fn long_names_held(kernel: &Kernel) -> usize {
    let map = kernel
        .ebpf
        .map(LONG_NAMES_MAP)
        .expect("the programs have a long-name table");
    let long_names: aya::maps::HashMap<_, QueryKey, LongName> =
        aya::maps::HashMap::try_from(map).expect("a hash map");
    long_names.keys().count()
}

/// The table is read many entries per call: a table of thousands, as when an upstream is dead,
/// comes back whole, oldest first.
#[test]
fn every_query_of_a_large_table_is_collected_once_oldest_first() {
    for_each_build(loaded(trace_settings()), |mut kernel| {
        const QUERIES: u16 = 2000;
        ask_distinct(&mut kernel, QUERIES);
        let mut unanswered = kernel.unanswered_queries();
        assert_eq!(
            expired_ids(&mut unanswered),
            (0..QUERIES).collect::<Vec<_>>()
        );
        assert!(
            expired_ids(&mut unanswered).is_empty(),
            "each is collected once"
        );
    });
}

/// A full table refuses new queries and counts each, rather than forgetting queries about to be
/// reported as timeouts; once those are collected, it takes new ones again.
#[test]
fn a_full_table_counts_the_queries_it_refuses_and_keeps_those_it_holds() {
    const TABLE: u16 = 1024;
    let settings = Settings {
        query_table_size: u32::from(TABLE),
        ..trace_settings()
    };
    for_each_build(loaded(settings), |mut kernel| {
        ask_distinct(&mut kernel, TABLE + 6);
        assert_eq!(kernel.counts().get(Counter::QueriesNotTracked), 6);

        let mut unanswered = kernel.unanswered_queries();
        assert_eq!(
            expired_ids(&mut unanswered),
            (0..TABLE).collect::<Vec<_>>(),
            "the first ones, all kept"
        );

        kernel.run(
            Direction::Ingress,
            &query_frame(9999, "later.example", QTYPE_A),
        );
        assert_eq!(
            kernel.counts().get(Counter::QueriesNotTracked),
            6,
            "room again once collected"
        );
    });
}

/// `count` queries for distinct names, ids 0 to `count - 1`, none answered.
fn ask_distinct(kernel: &mut Kernel, count: u16) {
    for id in 0..count {
        kernel.run(
            Direction::Ingress,
            &query_frame(id, &format!("host{id}.example"), QTYPE_A),
        );
    }
}

/// The ids of every query `unanswered` collects as expired now, in the order it gives them.
fn expired_ids(unanswered: &mut UnansweredQueries) -> Vec<u16> {
    let mut expired = Vec::new();
    unanswered
        .take_expired(Duration::ZERO, &mut expired)
        .expect("reading the query table");
    expired.iter().map(|query| query.id).collect()
}

/// A query from before the run (pinned by an earlier one, `--pin`) that expires is counted but
/// not reported: its answer may have come while no program watched.
#[test]
fn a_query_from_before_the_run_expires_unreported() {
    for_each_build(loaded(trace_settings()), |mut kernel| {
        kernel.run(
            Direction::Ingress,
            &query_frame(0x5152, "before.example", QTYPE_AAAA),
        );
        let table =
            programs::take_queries(&mut kernel.ebpf).expect("the programs have a query table");
        let mut unanswered =
            UnansweredQueries::new(table, MonotonicClock::anchored_now(), monotonic_now_ns());
        let mut expired = Vec::new();
        unanswered
            .take_expired(Duration::ZERO, &mut expired)
            .expect("reading the query table");
        assert!(expired.is_empty(), "not reported: {expired:?}");
        assert_eq!(unanswered.expired_from_before, 1);
        unanswered
            .take_expired(Duration::ZERO, &mut expired)
            .expect("reading the query table");
        assert_eq!(unanswered.expired_from_before, 1, "taken out of the table");
    });
}

#[test]
fn an_answered_query_leaves_the_table_and_counts_for_its_server() {
    for_each_build(loaded(trace_settings()), |mut kernel| {
        // The query's direction, its ID, name and answer's rcode. Test runs are seen on loopback,
        // watched on egress only: there a reply reaches its client in the same direction as the
        // query left (the last).
        for (asked, id, name, rcode) in [
            (Direction::Ingress, 1, "www.example.test", 0),
            (Direction::Ingress, 2, "nx.example.test", 3),
            (Direction::Egress, 3, "lo.example.test", 0),
        ] {
            kernel.run(asked, &query_frame(id, name, QTYPE_A));
            kernel.run(Direction::Egress, &answer_frame(id, name, QTYPE_A, rcode));
        }

        let mut expired = Vec::new();
        kernel
            .unanswered_queries()
            .take_expired(Duration::ZERO, &mut expired)
            .expect("reading the query table");
        assert!(expired.is_empty(), "every query was answered: {expired:?}");

        let servers =
            crate::kernel::counters::read_servers(&kernel.ebpf).expect("reading the servers");
        let [server] = servers.as_slice() else {
            panic!("one server: {servers:?}");
        };
        assert_eq!(server.server, "10.96.0.10:53".parse().unwrap());
        assert_eq!(server.answered, 3);
        assert_eq!(
            server.rcodes,
            [(0, 2), (3, 1)].into_iter().collect(),
            "NOERROR twice, NXDOMAIN once"
        );
        assert!(server.max > Duration::ZERO && server.p50 <= server.max);
    });
}

/// A packet crossing a bridge is seen twice in a row on one CPU (at the port and at the bridge),
/// and the second sighting takes the query table's answer from the first.
#[test]
fn a_packet_seen_again_further_on_leaves_its_query_as_the_first_sighting_left_it() {
    for_each_build(loaded(trace_settings()), |mut kernel| {
        let query = query_frame(4, "www.example.test", QTYPE_A);
        kernel.run(Direction::Ingress, &query);
        kernel.run(Direction::Egress, &query);
        let mut expired = Vec::new();
        kernel
            .unanswered_queries()
            .take_expired(Duration::ZERO, &mut expired)
            .expect("reading the query table");
        let [unanswered] = expired.as_slice() else {
            panic!("one query in flight: {expired:?}");
        };
        assert_eq!(
            unanswered.seen.direction,
            Direction::Ingress,
            "first seen there"
        );

        // Loopback's reply reaches its client at once (see the test above); seen again, it finds
        // the query answered.
        kernel.run(
            Direction::Egress,
            &query_frame(5, "www.example.test", QTYPE_A),
        );
        let answer = answer_frame(5, "www.example.test", QTYPE_A, 0);
        kernel.run(Direction::Egress, &answer);
        kernel.run(Direction::Ingress, &answer);
        let servers =
            crate::kernel::counters::read_servers(&kernel.ebpf).expect("reading the servers");
        let [server] = servers.as_slice() else {
            panic!("one server: {servers:?}");
        };
        assert_eq!(server.answered, 1, "one answer, seen twice");
    });
}

#[test]
fn a_reply_from_elsewhere_is_not_counted_as_its_servers_answer() {
    for_each_build(loaded(trace_settings()), |mut kernel| {
        kernel.run(
            Direction::Ingress,
            &query_frame(9, "www.example.test", QTYPE_A),
        );
        let from_pod = FrameSpec {
            src: IpAddr::V4(Ipv4Addr::new(10, 244, 0, 3)),
            dst: FrameSpec::default().src,
            sport: 53,
            dport: 40000,
            payload: dns_response(9, "www.example.test", QTYPE_A),
            ..FrameSpec::default()
        }
        .build();
        kernel.run(Direction::Egress, &from_pod);
        let servers =
            crate::kernel::counters::read_servers(&kernel.ebpf).expect("reading the servers");
        assert!(servers.is_empty(), "the client drops it: {servers:?}");
    });
}
