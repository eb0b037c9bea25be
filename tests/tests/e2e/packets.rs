//! `dnsloop trace --packets` shows every hop of a query: each DNS message at each interface and
//! direction it crossed on the node, with the fields dig sent and got.
//!
//! Each test sends queries with dig from the client pod of a healthy lab to the node-local
//! cache, each from a source port of its own, and holds the `packet` lines against dig's own
//! report. On the node a query crosses veth-client and cni0 inward; the cache asks CoreDNS
//! (out of cni0 and the CoreDNS pod's veth, the reply back in) or the upstream resolver (out of
//! eth0 and back); the reply to the client crosses cni0 and veth-client outward.
use std::{net::SocketAddr, time::SystemTime};

use dnsloop_core::schema::PacketRecord;
use dnsloop_tests::or_fail::OrFail as _;
use dnsloop_tests::test_name;
use dnsloop_tests::{
    exchange::{Exchange, Query},
    findings::Trace,
    lab::{
        dns_server, Lab, Pod, Scenario, CLUSTER_DOMAIN, NODE_LOCAL_DNS, NODE_LOCAL_DNS_V6,
        UPSTREAM_DNS,
    },
    packet_lines::packet_lines,
    privilege::{can_run, dnsloop_bin, Need},
    tracer::Tracer,
};

const QUERY: bool = false;
const REPLY: bool = true;
/// The client's query and the cache's reply, as the node sees them pass: once, at the client's
/// bridge port (the bridge's own interface is not watched).
const CLIENT_HOPS: [(&str, &str, bool); 2] = [
    ("veth-client", "ingress", QUERY),
    ("veth-client", "egress", REPLY),
];
const UPSTREAM_HOPS: [(&str, &str, bool); 2] =
    [("eth0", "egress", QUERY), ("eth0", "ingress", REPLY)];

#[test]
fn a_cluster_and_an_external_query_are_shown_on_every_hop() {
    assert_every_hop_shown(
        test_name!(),
        &[
            Query::udp(NODE_LOCAL_DNS, "api.default.svc.cluster.local", "A"),
            Query::udp(NODE_LOCAL_DNS, "www.example.test", "A"),
        ],
    );
}

#[test]
fn tcp_and_ipv6_queries_are_shown_on_every_hop() {
    assert_every_hop_shown(
        test_name!(),
        &[
            Query::tcp(NODE_LOCAL_DNS, "kubernetes.default.svc.cluster.local", "A"),
            Query::udp(NODE_LOCAL_DNS_V6, "www.example.test", "AAAA"),
        ],
    );
}

#[test]
fn names_are_shown_exactly_as_sent() {
    // Labels of 63, 63, 63 and 61 bytes: 255 bytes in wire form, the most a name may have.
    let longest = [63, 63, 63, 61]
        .iter()
        .zip('a'..)
        .map(|(&len, letter)| letter.to_string().repeat(len))
        .collect::<Vec<_>>()
        .join(".");
    assert_every_hop_shown(
        test_name!(),
        &[
            Query::udp(NODE_LOCAL_DNS, "WwW.ExAmPlE.TeSt", "A"),
            Query::udp(NODE_LOCAL_DNS, &longest, "A"),
            // A BEL byte inside a label: printed escaped, as dig writes it.
            Query::udp(NODE_LOCAL_DNS, "bell\x07.example.test", "TXT"),
            // CoreDNS's loop probe.
            Query::udp(NODE_LOCAL_DNS, "1234.5678.cluster.local", "HINFO"),
        ],
    );
}

/// Where the node-local cache sends a name.
#[derive(Clone, Copy, Debug)]
enum Forward {
    /// Cluster names: to the ClusterIP, which nftables DNATs to a CoreDNS pod.
    ToCoreDns,
    /// Everything else: to the upstream resolver behind the uplink.
    ToUpstream,
}

impl Forward {
    fn of(query: &Query) -> Forward {
        let cluster_suffix = format!(".{CLUSTER_DOMAIN}.");
        if query.presented_qname().ends_with(&cluster_suffix) {
            Forward::ToCoreDns
        } else {
            Forward::ToUpstream
        }
    }
}

/// Sends `queries` on a healthy lab traced with `--packets` and checks that every hop of each
/// one, and of the cache's forward of it, is shown with the right fields.
fn assert_every_hop_shown(test: &str, queries: &[Query]) {
    if !can_run(test, &[Need::Root, Need::DnsloopBinary]) {
        return;
    }
    let lab = Lab::builder(Scenario::Healthy).start().or_fail(test);
    let tracer = Tracer::start(
        &dnsloop_bin(),
        &lab,
        lab.node_ns(),
        &["--packets", "--output", "json"],
    )
    .or_fail(test);
    let started = SystemTime::now();
    let exchanges: Vec<Exchange> = queries
        .iter()
        .map(|query| query.send(&lab).or_fail(test))
        .collect();
    let ended = SystemTime::now();
    let output = tracer.interrupt().or_fail(test);
    let trace = Trace::from_output(output).or_fail(test);
    let mut packets = packet_lines(&trace);
    // The output is in the order the kernel streamed the packets; put it in the order they
    // were seen, keeping that order among packets of the same millisecond.
    packets.sort_by_key(|packet| packet.ts);

    for exchange in &exchanges {
        let client_leg = client_leg(exchange, &packets);
        assert_leg(exchange, &client_leg, &CLIENT_HOPS, &trace);
        let forward_leg = forward_leg(exchange, &packets);
        assert_leg(
            exchange,
            &forward_leg,
            &forward_hops(exchange, &forward_leg),
            &trace,
        );
        for line in client_leg.lines.iter().chain(&forward_leg.lines) {
            assert!(
                (started..=ended).contains(&line.ts.0),
                "{exchange}: {line:?} is not stamped while the query was under way"
            );
        }
    }
}

/// One query and its reply between two addresses, as the packet lines show them.
struct Leg<'a> {
    /// The querier's and the server's address.
    client: SocketAddr,
    server: SocketAddr,
    id: u16,
    query_size: usize,
    reply_size: usize,
    /// Every line of the leg, in the order seen.
    lines: Vec<&'a PacketRecord>,
}

/// The client's own exchange with the cache: what dig sent and got.
fn client_leg<'a>(exchange: &Exchange, packets: &'a [PacketRecord]) -> Leg<'a> {
    let client = exchange.client;
    Leg {
        server: exchange.server,
        id: exchange.report.id,
        query_size: exchange.report.query_size,
        reply_size: exchange.report.reply_size,
        lines: packets
            .iter()
            .filter(|packet| packet.src == client || packet.dst == client)
            .collect(),
        client,
    }
}

/// The cache's query for the same question, and its reply: dig does not see them, so their
/// ID, addresses and sizes are taken from the first query and reply shown, and must be the same
/// on every hop.
fn forward_leg<'a>(exchange: &Exchange, packets: &'a [PacketRecord]) -> Leg<'a> {
    let client = exchange.client;
    let qname = exchange.query.presented_qname();
    let lines: Vec<&PacketRecord> = packets
        .iter()
        .filter(|packet| packet.qname.as_deref() == Some(qname.as_str()))
        .filter(|packet| packet.qtype.as_deref() == Some(exchange.query.qtype))
        .filter(|packet| packet.src != client && packet.dst != client)
        .collect();
    let query = lines.iter().find(|line| !line.qr).or_fail(format_args!(
        "{exchange}: the cache's query is not shown: {lines:#?}"
    ));
    let reply_size = lines
        .iter()
        .find(|line| line.qr)
        .map_or(0, |line| line.size);
    Leg {
        client: query.src,
        server: query.dst,
        id: query.id,
        query_size: query.size,
        reply_size,
        lines,
    }
}

/// The hops of the cache's forward: to the CoreDNS pod the DNAT picked, or out of the uplink.
fn forward_hops(exchange: &Exchange, leg: &Leg) -> Vec<(String, &'static str, bool)> {
    let server = leg.server;
    match Forward::of(&exchange.query) {
        Forward::ToCoreDns => {
            let pod = Pod::COREDNS
                .into_iter()
                .find(|pod| server == dns_server(pod.ip()))
                .or_fail(format_args!(
                    "{exchange}: forwarded to {server}, not to a CoreDNS pod"
                ));
            let veth = pod.host_veth();
            vec![(veth.clone(), "egress", QUERY), (veth, "ingress", REPLY)]
        }
        Forward::ToUpstream => {
            assert_eq!(server, dns_server(UPSTREAM_DNS), "{exchange}");
            UPSTREAM_HOPS
                .iter()
                .map(|&(ifname, dir, qr)| (ifname.to_owned(), dir, qr))
                .collect()
        }
    }
}

/// Checks that `leg` is shown on exactly `hops`, in that order, each line with every field of
/// the query or reply it is.
fn assert_leg<S: AsRef<str>>(
    exchange: &Exchange,
    leg: &Leg,
    hops: &[(S, &str, bool)],
    trace: &Trace,
) {
    let shown: Vec<(&str, &str, bool)> = leg
        .lines
        .iter()
        .map(|line| (line.ifname.as_str(), line.dir.as_str(), line.qr))
        .collect();
    let expected: Vec<(&str, &str, bool)> = hops
        .iter()
        .map(|(ifname, dir, qr)| (ifname.as_ref(), *dir, *qr))
        .collect();
    assert_eq!(
        shown, expected,
        "{exchange}: hops of {} <-> {}\n{trace}",
        leg.client, leg.server
    );
    for line in &leg.lines {
        let (src, dst, rcode, size) = if line.qr {
            (
                leg.server,
                leg.client,
                exchange.report.rcode.as_str(),
                leg.reply_size,
            )
        } else {
            (leg.client, leg.server, "NOERROR", leg.query_size)
        };
        let expected = PacketRecord {
            ts: line.ts,
            ifname: line.ifname.clone(),
            dir: line.dir.clone(),
            proto: exchange.query.transport.as_str().to_owned(),
            src,
            dst,
            id: leg.id,
            qr: line.qr,
            opcode: "QUERY".to_owned(),
            rcode: rcode.to_owned(),
            qname: Some(exchange.query.presented_qname()),
            qtype: Some(exchange.query.qtype.to_owned()),
            size,
            // Where each hop leads is `pod_names`'s to check.
            leaves: line.leaves.clone(),
            enters: line.enters.clone(),
            node: line.node.clone(),
        };
        assert_eq!(**line, expected, "{exchange}");
    }
}
