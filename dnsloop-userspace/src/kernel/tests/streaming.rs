//! What else is streamed to userspace, and what is only counted: retries, loop probes, long
//! packets, and every packet with `--packets` or `--record`.
use std::time::Duration;

use dnsloop_frames::*;
use dnsloop_shared::{counter::Counter, point::Direction, record::StreamReason};

use crate::kernel::clock::monotonic_now_ns;

use super::kit::*;

#[test]
fn a_query_and_its_retries_with_the_same_id_are_only_counted() {
    for_each_build(loaded(trace_settings()), |mut kernel| {
        let query = query_frame(0x1001, "www.example.test", QTYPE_A);

        // The client's first try, its retry, and the query crossing a second hop unchanged.
        kernel.run(Direction::Ingress, &query);
        kernel.run(Direction::Ingress, &query);
        kernel.run(Direction::Egress, &query);

        kernel.assert_streamed(&[]);
        assert_eq!(kernel.counts().get(Counter::DnsMessages), 3);
    });
}

#[test]
fn a_query_sent_again_unanswered_is_streamed_with_its_first_sending_and_so_is_its_answer() {
    for_each_build(loaded(trace_settings()), |mut kernel| {
        let query = query_frame(0x4242, "www.example.test", QTYPE_A);
        let answer = answer_frame(0x4242, "www.example.test", QTYPE_A, 0);

        let first = monotonic_now_ns();
        kernel.run(Direction::Ingress, &query);
        // Met again at once: the same query, not a retry (a client waits before it resends).
        kernel.run(Direction::Ingress, &query);
        std::thread::sleep(Duration::from_millis(250));
        // The client's retry: same socket, same ID, no answer yet.
        kernel.run(Direction::Ingress, &query);
        // The answer at last, back where the query left.
        kernel.run(Direction::Egress, &answer);

        let records = kernel.assert_streamed(&[
            (&query, Direction::Ingress, StreamReason::Retried),
            (&answer, Direction::Egress, StreamReason::Retried),
        ]);
        let sent = &records[0].matched_query();
        assert!(
            sent.first_ns >= first && records[0].record.ts_ns - sent.first_ns >= 200_000_000,
            "the retry carries the first sending: {sent:?}"
        );
        assert_eq!(
            (&sent.server[..4], sent.server_port),
            (&[10, 96, 0, 10][..], 53)
        );
        assert_eq!(
            records[1].matched_query().first_ns,
            0,
            "the answer carries no query"
        );
    });
}

/// A truncated answer is streamed with its query; the client's retry of the question over TCP
/// (a new socket, a new ID) is streamed with its answer, and so is nothing else over TCP.
#[test]
fn a_truncated_answer_and_the_clients_retry_over_tcp_are_streamed() {
    for_each_build(loaded(trace_settings()), |mut kernel| {
        let query = query_frame(0x5151, "big.example.test", QTYPE_TXT);
        let mut cut = dns_response(0x5151, "big.example.test", QTYPE_TXT);
        // TC set.
        cut[2] |= 0x02;
        let truncated = FrameSpec {
            src: FrameSpec::default().dst,
            dst: FrameSpec::default().src,
            sport: 53,
            dport: 40000,
            payload: cut,
            ..FrameSpec::default()
        }
        .build();
        let over_tcp = |id: u16, name: &str, answer: bool| {
            let spec = FrameSpec {
                sport: 40001,
                payload: dns_query(id, name, QTYPE_TXT),
                ..FrameSpec::default()
            };
            let spec = if answer {
                FrameSpec {
                    src: spec.dst,
                    dst: spec.src,
                    sport: 53,
                    dport: 40001,
                    payload: dns_response(id, name, QTYPE_TXT),
                    ..spec
                }
            } else {
                spec
            };
            spec.tcp().build()
        };
        let retry = over_tcp(0x6161, "big.example.test", false);
        let retry_answer = over_tcp(0x6161, "big.example.test", true);
        let other = over_tcp(0x7171, "other.example.test", false);

        kernel.run(Direction::Ingress, &query);
        kernel.run(Direction::Egress, &truncated);
        kernel.run(Direction::Ingress, &other);
        kernel.run(Direction::Ingress, &retry);
        kernel.run(Direction::Egress, &retry_answer);

        let records = kernel.assert_streamed(&[
            (&truncated, Direction::Egress, StreamReason::Truncated),
            (&retry, Direction::Ingress, StreamReason::Truncated),
            (&retry_answer, Direction::Egress, StreamReason::Retried),
        ]);
        assert_ne!(
            records[0].matched_query().first_ns,
            0,
            "the truncated answer carries its query"
        );
        let servers =
            crate::kernel::counters::read_servers(&kernel.ebpf).expect("reading the servers");
        let truncated: Vec<(String, u64, u64)> = servers
            .iter()
            .map(|server| (server.server.to_string(), server.answered, server.truncated))
            .collect();
        assert_eq!(truncated, [("10.96.0.10:53".to_owned(), 2, 1)]);
    });
}

/// A packet seen again at the next point is not parsed again (see `a_dns_query_is_counted_...`,
/// whose second sighting is counted all the same); another message from the same socket right
/// after, with another ID, is parsed for itself.
#[test]
fn the_next_message_from_a_socket_is_parsed_for_itself_even_at_once() {
    for_each_build(loaded(trace_settings()), |mut kernel| {
        // As long as the probe, so that only the ID tells them apart.
        let query = query_frame(0x0301, "abcd.efgh.cluster.local.", QTYPE_HINFO);
        let probe = query_frame(0x0302, "1234.5678.cluster.local.", QTYPE_HINFO);
        kernel.run(Direction::Ingress, &query);
        kernel.run(Direction::Egress, &probe);
        kernel.assert_streamed(&[(&probe, Direction::Egress, StreamReason::Probe)]);
    });
}

#[test]
fn loop_probes_are_streamed_and_near_misses_are_not() {
    for_each_build(loaded(trace_settings()), |mut kernel| {
        let coredns_probe = query_frame(0x0101, "1234.5678.cluster.local.", QTYPE_HINFO);
        let dnsmasq_probe = query_frame(0x0102, "deadbeef.test.", QTYPE_TXT);
        let near_misses = [
            query_frame(0x0201, "1234.abcd.cluster.local.", QTYPE_HINFO),
            query_frame(0x0202, "1234.cluster.local.", QTYPE_HINFO),
            query_frame(0x0203, "1234.5678.cluster.local.", QTYPE_A),
            query_frame(0x0204, "deadbee.test.", QTYPE_TXT),
            query_frame(0x0205, "deadbeeg.test.", QTYPE_TXT),
            query_frame(0x0206, "deadbeef.example.", QTYPE_TXT),
            query_frame(0x0207, "deadbeef.test.", QTYPE_A),
        ];

        kernel.run(Direction::Ingress, &coredns_probe);
        for frame in &near_misses {
            kernel.run(Direction::Ingress, frame);
        }
        kernel.run(Direction::Ingress, &dnsmasq_probe);

        kernel.assert_streamed(&[
            (&coredns_probe, Direction::Ingress, StreamReason::Probe),
            (&dnsmasq_probe, Direction::Ingress, StreamReason::Probe),
        ]);
    });
}

#[test]
fn a_packet_too_long_to_be_read_in_place_is_read_with_the_helper() {
    for_each_build(loaded(trace_settings()), |mut kernel| {
        // Past the programs' in-place limit (2048 bytes) and within what a test run takes (a page):
        // a probe followed by records the programs do not read.
        let mut payload = dns_query(0x0103, "1234.5678.cluster.local.", QTYPE_HINFO);
        payload.resize(2400, 0);
        let long_probe = FrameSpec {
            payload,
            ..FrameSpec::default()
        }
        .build();

        kernel.run(Direction::Ingress, &long_probe);

        assert_eq!(kernel.counts(), one_streamed_dns_packet(1));
        kernel.assert_streamed(&[(&long_probe, Direction::Ingress, StreamReason::Probe)]);
    });
}

#[test]
fn every_packet_mode_streams_every_dns_packet_cut_at_the_snap_length() {
    const SNAP_LEN: usize = 64;
    for_each_build(loaded(every_packet(SNAP_LEN)), |mut kernel| {
        let query = query_frame(0x4242, "www.example.test", QTYPE_A);
        let response = answer_frame(0x4242, "www.example.test", QTYPE_A, 0);
        let shorter_than_the_snap_length = query_frame(0x4343, "a.b", QTYPE_A);
        assert!(query.len() > SNAP_LEN && shorter_than_the_snap_length.len() < SNAP_LEN);

        kernel.run(Direction::Ingress, &query);
        kernel.run(Direction::Egress, &response);
        kernel.run(Direction::Ingress, &shorter_than_the_snap_length);

        kernel.assert_streamed(&[
            (&query, Direction::Ingress, StreamReason::EveryPacket),
            (&response, Direction::Egress, StreamReason::EveryPacket),
            (
                &shorter_than_the_snap_length,
                Direction::Ingress,
                StreamReason::EveryPacket,
            ),
        ]);
    });
}

#[test]
fn recording_streams_every_dns_packet_and_keeps_the_reasons_a_trace_streams_it_for() {
    for_each_build(loaded(recording()), |mut kernel| {
        let query = query_frame(0x5151, "www.example.test", QTYPE_A);
        let answer = answer_frame(0x5151, "www.example.test", QTYPE_A, 0);
        let not_dns = FrameSpec {
            dport: 80,
            ..FrameSpec::default()
        }
        .build();

        kernel.run(Direction::Ingress, &query);
        std::thread::sleep(Duration::from_millis(250));
        // The client's retry, which a trace streams with its first sending.
        kernel.run(Direction::Ingress, &query);
        kernel.run(Direction::Egress, &answer);
        kernel.run(Direction::Ingress, &not_dns);

        let records = kernel.assert_streamed(&[
            (&query, Direction::Ingress, StreamReason::Recorded),
            (&query, Direction::Ingress, StreamReason::Retried),
            (&answer, Direction::Egress, StreamReason::Retried),
        ]);
        assert_ne!(
            records[1].matched_query().first_ns,
            0,
            "the retry carries its first sending, as in a trace without recording"
        );
    });
}
