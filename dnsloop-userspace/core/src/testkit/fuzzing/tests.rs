//! The seed corpus of the `decode_packets` fuzz target, and the regression tests of the crashes
//! it found.
//!
//! Regenerate the corpus with
//! `cargo test -p dnsloop-core --lib -- --ignored write_decode_packets_corpus`.
//! A crash the fuzzer finds (`dnsloop-userspace/core/fuzz/artifacts/decode_packets/crash-*`) joins
//! the corpus once fixed, under a name that says what it was: from then on it is a regression
//! test here, as every input of the corpus is.
use std::{net::IpAddr, path::Path};

use dnsloop_frames::{
    address_slot, dns_query, dns_query_wire, dns_response, icmp_frame, tcp_stream, v6, FrameSpec,
    QTYPE_A, QTYPE_HINFO, QTYPE_TXT,
};
use dnsloop_shared::point::Direction;

use super::*;

/// A fuzz input under construction, in the format of the module's documentation.
#[derive(Default)]
struct Sequence(Vec<u8>);

impl Sequence {
    /// Adds `frame`, seen `after_ms` after the previous packet at `point` (an index of
    /// `points()`).
    fn packet(self, after_ms: i16, point: u8, frame: &Frame) -> Self {
        self.streamed(after_ms, point, frame, Kernel::default())
    }

    /// Adds `frame` as `packet` does, with what the kernel's record of it adds.
    fn streamed(mut self, after_ms: i16, point: u8, frame: &Frame, kernel: Kernel) -> Self {
        let link = LINK_LAYERS
            .iter()
            .position(|&layer| layer == frame.link)
            .expect("a link layer of the table");
        let mut selector = point | (u8::try_from(link).unwrap() << 4);
        if kernel.matched_query.is_some() {
            selector |= HAS_MATCHED_QUERY;
        }
        if kernel.prior.is_some() {
            selector |= HAS_PRIOR;
        }
        let len = u16::try_from(frame.bytes.len()).expect("a frame fits the length field");
        self.0.extend_from_slice(&after_ms.to_le_bytes());
        self.0.push(selector);
        self.0.extend_from_slice(&len.to_le_bytes());
        for extension in [kernel.matched_query, kernel.prior].into_iter().flatten() {
            self.0.extend_from_slice(&extension);
        }
        self.0.extend_from_slice(&frame.bytes);
        self
    }
}

/// What a kernel record adds to a packet, encoded.
#[derive(Default)]
struct Kernel {
    matched_query: Option<Vec<u8>>,
    prior: Option<Vec<u8>>,
}

/// The query a packet answers or repeats, sent `before_ms` before it to `server`.
fn matched_query(before_ms: i16, direction: Direction, server: &str) -> Vec<u8> {
    let server: std::net::SocketAddr = server.parse().expect("a test address");
    let mut bytes = before_ms.to_le_bytes().to_vec();
    bytes.push(u8::from(direction == Egress));
    bytes.extend_from_slice(&address_slot(server.ip()));
    bytes.extend_from_slice(&server.port().to_le_bytes());
    bytes
}

/// The UDP query seen at `point` `before_ms` before a packet that made its question hot.
fn prior(before_ms: i16, point: u8, src: &str, dst: &str, id: u16) -> Vec<u8> {
    let mut bytes = before_ms.to_le_bytes().to_vec();
    let (src, sport) = split(src);
    let (dst, dport) = split(dst);
    let v6 = if src.is_ipv6() { 4 } else { 0 };
    bytes.push((point & 1) | v6 | ((point / 2) << 3));
    for (ip, port) in [(src, sport), (dst, dport)] {
        bytes.extend_from_slice(&address_slot(ip));
        bytes.extend_from_slice(&port.to_le_bytes());
    }
    bytes.extend_from_slice(&id.to_le_bytes());
    bytes
}

struct Frame {
    link: LinkLayer,
    bytes: Vec<u8>,
}

/// A UDP frame from `src` to `dst` (`ip:port`) carrying `payload`.
fn udp(src: &str, dst: &str, payload: Vec<u8>) -> FrameSpec {
    let (src, sport) = split(src);
    let (dst, dport) = split(dst);
    FrameSpec {
        src,
        dst,
        sport,
        dport,
        payload,
        ..FrameSpec::default()
    }
}

fn split(addr: &str) -> (IpAddr, u16) {
    let addr: std::net::SocketAddr = addr.parse().expect("a test address");
    (addr.ip(), addr.port())
}

fn frame(spec: FrameSpec) -> Frame {
    Frame {
        link: spec.link,
        bytes: spec.build(),
    }
}

/// The point of `ifname` in `direction`: the `nth` link of that name.
fn at(ifname: &str, direction: Direction, nth: usize) -> u8 {
    let index = links()
        .iter()
        .flat_map(|link| [Ingress, Egress].map(|direction| link.get(direction, false).clone()))
        .enumerate()
        .filter(|(_, point)| &*point.ifname == ifname && point.direction == direction)
        .nth(nth)
        .map(|(index, _)| index)
        .expect("a point of the table");
    u8::try_from(index).expect("16 points")
}

use Direction::{Egress, Ingress};

const NAME: &str = "www.example.test";

/// The client asks the node-local cache and gets its answer.
fn query_and_answer() -> Sequence {
    let query = frame(udp(
        "10.244.0.2:41234",
        "169.254.25.10:53",
        dns_query(4242, NAME, QTYPE_A),
    ));
    let answer = frame(udp(
        "169.254.25.10:53",
        "10.244.0.2:41234",
        dns_response(4242, NAME, QTYPE_A),
    ));
    Sequence::default()
        .packet(0, at("veth-client", Ingress, 0), &query)
        .packet(0, at("cni0", Ingress, 0), &query)
        .packet(3, at("cni0", Egress, 0), &answer)
        .packet(0, at("veth-client", Egress, 0), &answer)
}

/// The node-local cache forwards to CoreDNS, whose upstream is the node-local cache: the
/// question comes back into the node, round after round.
fn nodelocal_loop(qname: &str, qtype: u16) -> Sequence {
    let mut sequence = cache_and_coredns_answered();
    let client = frame(udp(
        "10.244.0.2:41234",
        "169.254.25.10:53",
        dns_query(4242, qname, qtype),
    ));
    sequence = sequence
        .packet(0, at("veth-client", Ingress, 0), &client)
        .packet(0, at("cni0", Ingress, 0), &client);
    for round in 0..3u16 {
        let to_coredns = frame(udp(
            &format!("10.244.0.1:{}", 50000 + round),
            "10.244.0.3:53",
            dns_query(1000 + round, qname, qtype),
        ));
        let back_to_node = frame(udp(
            &format!("10.244.0.3:{}", 40000 + round),
            "169.254.25.10:53",
            dns_query(2000 + round, qname, qtype),
        ));
        sequence = sequence
            .packet(1, at("cni0", Egress, 0), &to_coredns)
            .packet(0, at("veth-coredns-a", Egress, 0), &to_coredns)
            .packet(1, at("veth-coredns-a", Ingress, 0), &back_to_node)
            .packet(0, at("cni0", Ingress, 0), &back_to_node);
    }
    // Time moves past the settle time, so the loop is reported.
    sequence.packet(200, at("eth0", Egress, 0), &client)
}

/// The node cache and CoreDNS answer a name each: what shows that each holds the address it is
/// asked at, so that a cycle through them is a loop, not a possible one.
fn cache_and_coredns_answered() -> Sequence {
    let cache_answers = frame(udp(
        "169.254.25.10:53",
        "10.244.0.2:41000",
        dns_response(1, "answered.test", QTYPE_A),
    ));
    let coredns_answers = frame(udp(
        "10.244.0.3:53",
        "10.244.0.1:41000",
        dns_response(2, "answered.test", QTYPE_A),
    ));
    Sequence::default()
        .packet(0, at("cni0", Egress, 0), &cache_answers)
        .packet(0, at("veth-coredns-a", Ingress, 0), &coredns_answers)
}

/// A reply to the ClusterIP that skipped un-DNAT: it comes from the CoreDNS pod.
fn unexpected_source() -> Sequence {
    let query = frame(udp(
        "10.244.0.2:38819",
        "10.96.0.10:53",
        dns_query(54170, "kubernetes.default.svc.cluster.local", QTYPE_A),
    ));
    let reply = frame(udp(
        "10.244.0.3:53",
        "10.244.0.2:38819",
        dns_response(54170, "kubernetes.default.svc.cluster.local", QTYPE_A),
    ));
    Sequence::default()
        .packet(0, at("veth-client", Ingress, 0), &query)
        .packet(0, at("veth-coredns-a", Egress, 0), &query)
        .packet(1, at("veth-coredns-a", Ingress, 0), &reply)
        .packet(0, at("veth-client", Egress, 0), &reply)
        .packet(3000, at("eth0", Ingress, 0), &query)
}

/// CoreDNS asks the client pod, where nothing listens on port 53: the pod's kernel sends the
/// query back in an ICMP port unreachable, seen on its way at two points.
fn refused_by_a_pod() -> Sequence {
    let spec = udp(
        "10.244.0.3:40000",
        "10.244.0.2:53",
        dns_query(99, "db.corp.example", QTYPE_A),
    );
    let refusal = Frame {
        link: LinkLayer::Ethernet,
        bytes: icmp_frame(
            "10.244.0.2".parse().expect("an address"),
            "10.244.0.3".parse().expect("an address"),
            3,
            3,
            &spec.ip_packet(),
        ),
    };
    let query = frame(spec);
    Sequence::default()
        .packet(0, at("veth-coredns-a", Ingress, 0), &query)
        .packet(0, at("veth-client", Egress, 0), &query)
        .packet(0, at("veth-client", Ingress, 0), &refusal)
        .packet(0, at("veth-coredns-a", Egress, 0), &refusal)
        .packet(3000, at("eth0", Ingress, 0), &query)
}

/// A query to a dead upstream beyond the uplink, unanswered past the timeout.
fn timeout() -> Sequence {
    let query = frame(udp(
        "10.255.0.1:33757",
        "10.255.0.99:53",
        dns_query(7, "stub.example.test", QTYPE_A),
    ));
    let later = frame(udp(
        "10.255.0.1:33758",
        "10.255.0.98:53",
        dns_query(8, "other.example.test", QTYPE_A),
    ));
    Sequence::default()
        .packet(0, at("eth0", Egress, 0), &query)
        .packet(i16::MAX, at("eth0", Egress, 0), &later)
}

/// Over TCP and IPv6, two messages in one segment, on a loopback, and their answers.
fn tcp_ipv6_loopback() -> Sequence {
    let first = dns_query(11, NAME, QTYPE_A);
    let second = dns_query(12, "WWW.Example.ORG", QTYPE_TXT);
    let queries = FrameSpec {
        src: v6("fd00::2"),
        dst: v6("fd00::a"),
        sport: 40001,
        dport: 53,
        link: LinkLayer::LinuxSll2,
        payload: tcp_stream(&[&first, &second]),
        ..FrameSpec::default()
    }
    .ipv6()
    .tcp();
    let answers = FrameSpec {
        src: queries.dst,
        dst: queries.src,
        sport: 53,
        dport: 40001,
        payload: tcp_stream(&[
            &dns_response(11, NAME, QTYPE_A),
            &dns_response(12, "WWW.Example.ORG", QTYPE_TXT),
        ]),
        ..queries.clone()
    };
    Sequence::default()
        .packet(0, at("lo", Egress, 0), &frame(queries))
        .packet(2, at("lo", Egress, 0), &frame(answers))
}

/// Names that must be escaped, raw IP and Linux SLL frames, and malformed packets: a
/// compression pointer in the question, a frame cut short, and a query sent backwards in time.
fn odd_packets() -> Sequence {
    let escaped = frame(FrameSpec {
        link: LinkLayer::RawIp,
        payload: dns_query_wire(21, b"\x08\x1b[31mr\x07d\x04a.b\\\x04test\x00", QTYPE_TXT),
        ..FrameSpec::default()
    });
    let pointer = frame(FrameSpec {
        link: LinkLayer::LinuxSll,
        payload: dns_query_wire(22, &[0xc0, 0x0c], QTYPE_A),
        ..FrameSpec::default()
    });
    let mut cut = frame(FrameSpec::default());
    cut.bytes.truncate(30);
    let earlier = frame(udp(
        "10.244.1.5:40000",
        "169.254.25.10:53",
        dns_query(23, NAME, QTYPE_A),
    ));
    Sequence::default()
        .packet(0, at("cali-b", Ingress, 0), &escaped)
        .packet(1, at("cali-b", Ingress, 0), &pointer)
        .packet(1, at("eth0", Ingress, 0), &cut)
        .packet(-40, at("cali-b", Ingress, 0), &earlier)
}

/// A reply from an unexpected source as the kernel streams it: the reply alone, with the query
/// it remembered.
fn unexpected_source_streamed() -> Sequence {
    let reply = frame(udp(
        "10.244.0.3:53",
        "10.244.0.2:38819",
        dns_response(54170, "kubernetes.default.svc.cluster.local", QTYPE_A),
    ));
    let kernel = Kernel {
        matched_query: Some(matched_query(1, Ingress, "10.96.0.10:53")),
        prior: None,
    };
    Sequence::default()
        .streamed(0, at("veth-client", Egress, 0), &reply, kernel)
        .packet(3000, at("eth0", Ingress, 0), &reply)
}

/// The node-local loop as the kernel streams it: from CoreDNS's forward back into the node,
/// which made the question hot, with the cache's forward before it.
fn nodelocal_loop_streamed() -> Sequence {
    let back_to_node = |round: u16| {
        frame(udp(
            &format!("10.244.0.3:{}", 40000 + round),
            "169.254.25.10:53",
            dns_query(2000 + round, NAME, QTYPE_A),
        ))
    };
    let kernel = Kernel {
        matched_query: None,
        prior: Some(prior(
            1,
            at("cni0", Egress, 0),
            "10.244.0.1:50000",
            "10.244.0.3:53",
            1000,
        )),
    };
    let mut sequence =
        cache_and_coredns_answered().streamed(0, at("cni0", Ingress, 0), &back_to_node(0), kernel);
    for round in 1..3 {
        let to_coredns = frame(udp(
            &format!("10.244.0.1:{}", 50000 + round),
            "10.244.0.3:53",
            dns_query(1000 + round, NAME, QTYPE_A),
        ));
        sequence = sequence
            .packet(1, at("cni0", Egress, 0), &to_coredns)
            .packet(0, at("veth-coredns-a", Egress, 0), &to_coredns)
            .packet(1, at("veth-coredns-a", Ingress, 0), &back_to_node(round))
            .packet(0, at("cni0", Ingress, 0), &back_to_node(round));
    }
    sequence.packet(200, at("eth0", Egress, 0), &back_to_node(9))
}

fn seeds() -> Vec<(&'static str, Sequence)> {
    vec![
        ("query_and_answer", query_and_answer()),
        ("nodelocal_loop", nodelocal_loop(NAME, QTYPE_A)),
        (
            "coredns_probe_loop",
            nodelocal_loop("8771826115.8395975159.", QTYPE_HINFO),
        ),
        ("unexpected_source", unexpected_source()),
        ("unexpected_source_streamed", unexpected_source_streamed()),
        ("nodelocal_loop_streamed", nodelocal_loop_streamed()),
        ("timeout", timeout()),
        ("refused_by_a_pod", refused_by_a_pod()),
        ("tcp_ipv6_loopback", tcp_ipv6_loopback()),
        ("odd_packets", odd_packets()),
    ]
}

#[test]
fn every_seed_runs_through_both_sinks() {
    for (_, sequence) in seeds() {
        decode_packets(&sequence.0);
    }
}

/// The checked-in corpus: the seeds, and the inputs of every crash the fuzzer found.
#[test]
fn every_corpus_input_runs_through_both_sinks() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/decode_packets");
    let mut inputs = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let input = std::fs::read(&path).unwrap();
        if std::panic::catch_unwind(|| decode_packets(&input)).is_err() {
            panic!("{} fails", path.display());
        }
        inputs += 1;
    }
    assert!(inputs >= seeds().len(), "the corpus lost its seeds");
}

#[test]
fn the_seeds_reach_every_kind_of_finding() {
    let json = |sequence: Sequence| {
        String::from_utf8(run(&sequence.0, OutputFormat::Json)).expect("JSON is UTF-8")
    };
    assert!(json(nodelocal_loop(NAME, QTYPE_A)).contains(r#""kind":"loop""#));
    assert!(json(unexpected_source()).contains(r#""kind":"unexpected_source""#));
    assert!(json(unexpected_source_streamed()).contains(r#""kind":"unexpected_source""#));
    assert!(json(nodelocal_loop_streamed()).contains(r#""kind":"loop""#));
    assert!(json(timeout()).contains(r#""kind":"timeout""#));
    let refused = json(refused_by_a_pod());
    assert_eq!(
        refused.matches(r#""kind":"drop""#).count(),
        1,
        "one ICMP message, seen twice, is one drop:\n{refused}"
    );
    assert!(
        refused.contains(r#""reason":"NO_SOCKET""#) && refused.contains(r#""kind":"timeout""#),
        "{refused}"
    );
    let text = String::from_utf8(run(&odd_packets().0, OutputFormat::Text)).unwrap();
    assert!(text.contains(r"\027[31mr\007d.a\.b\\.test."), "{text}");
}

#[test]
fn a_header_cut_short_ends_the_sequence() {
    let whole = query_and_answer().0;
    assert_eq!(packets(&whole).count(), 4);
    assert_eq!(
        packets(&whole[..whole.len() - 1]).count(),
        4,
        "last frame cut"
    );
    let first_len = 5 + usize::from(u16::from_le_bytes([whole[3], whole[4]]));
    assert_eq!(packets(&whole[..first_len + 2]).count(), 1);
    assert_eq!(packets(&[]).count(), 0);
    let streamed = unexpected_source_streamed().0;
    assert_eq!(
        packets(&streamed[..5 + 10]).count(),
        0,
        "cut in a matched query"
    );
    let packet = packets(&streamed).next().unwrap();
    assert!(packet.matched_query.is_some() && packet.prior.is_none());
}

#[test]
#[ignore = "writes dnsloop-userspace/core/fuzz/corpus/decode_packets; run it on purpose"]
fn write_decode_packets_corpus() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/decode_packets");
    std::fs::create_dir_all(&dir).unwrap();
    for (name, sequence) in seeds() {
        std::fs::write(dir.join(name), sequence.0).unwrap();
    }
}
