//! dnsloop and tshark agree on the DNS packets of an interface: `dnsloop trace --packets -i
//! veth-client` runs while tcpdump captures the same interface, and tshark's decoding of the
//! capture must name the same packets, each seen at the same time.
use std::{
    net::{IpAddr, SocketAddr},
    path::Path,
    process::Command,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use dnsloop_core::schema::{PacketRecord, SummarySource};
use dnsloop_tests::or_fail::OrFail as _;
use dnsloop_tests::test_name;
use dnsloop_tests::tshark::{dnsloop_escape, qtype_number, tshark_escape, unescape};
use dnsloop_tests::{
    exchange::Query,
    findings::Trace,
    lab::{Lab, Pod, Scenario, NODE_LOCAL_DNS, NODE_LOCAL_DNS_V6},
    packet_lines::packet_lines,
    privilege::{can_run, dnsloop_bin, Need},
    tracer::Tracer,
};

/// dnsloop stamps a packet in the kernel on the monotonic clock, which it maps to wall-clock
/// time; tcpdump stamps it on the wall clock as it reaches the capture socket. This allows for
/// that mapping, dnsloop's millisecond rounding and scheduling.
const SAME_TIME_WITHIN: Duration = Duration::from_millis(100);

#[test]
fn dnsloop_and_tshark_see_the_same_dns_packets_on_an_interface() {
    let test = test_name!();
    if !can_run(test, &[Need::Root, Need::DnsloopBinary]) {
        return;
    }
    let lab = Lab::builder(Scenario::Healthy).start().or_fail(test);
    let interface = Pod::Client.host_veth();
    let pcap = lab.state_dir().join(format!("{interface}.pcap"));
    let capture = lab
        .capture_pcap(lab.node_ns(), &interface, "port 53", &pcap)
        .or_fail(test);
    let tracer = Tracer::start(
        &dnsloop_bin(),
        &lab,
        lab.node_ns(),
        &["--packets", "--output", "json", "-i", &interface],
    )
    .or_fail(test);

    let queries = [
        Query::udp(NODE_LOCAL_DNS, "api.default.svc.cluster.local", "A"),
        Query::tcp(NODE_LOCAL_DNS, "kubernetes.default.svc.cluster.local", "A"),
        Query::udp(NODE_LOCAL_DNS_V6, "www.example.test", "AAAA"),
        Query::udp(NODE_LOCAL_DNS, "WwW.ExAmPlE.TeSt", "A"),
        Query::udp(NODE_LOCAL_DNS, "1234.5678.cluster.local", "HINFO"),
        Query::udp(NODE_LOCAL_DNS, "bell\x07.example.test", "TXT"),
    ];
    for query in &queries {
        query.send(&lab).or_fail(test);
    }

    let output = tracer.interrupt().or_fail(test);
    capture.stop().or_fail(test);
    let trace = Trace::from_output(output).or_fail(test);
    // With every packet streamed, userspace put the TCP query and reply back together from
    // their segments, and lost nothing.
    let SummarySource::Kernel(kernel) = &trace.summary().source else {
        panic!("a trace's summary has the kernel's numbers:\n{trace}");
    };
    let reassembly = kernel.reassembly.as_ref().or_fail(format_args!(
        "no reassembly counts with --packets:\n{trace}"
    ));
    assert_eq!(
        (reassembly.tcp_gaps, reassembly.tcp_bytes_skipped),
        (0, 0),
        "{trace}"
    );
    let dnsloop = sorted(
        packet_lines(&trace)
            .iter()
            .map(Seen::from_dnsloop)
            .collect(),
    );
    let tshark = sorted(tshark_dns_packets(&pcap));

    assert_eq!(
        tshark.len(),
        2 * queries.len(),
        "the capture holds each query and its reply: {tshark:#?}"
    );
    let keys = |seen: &[Seen]| {
        seen.iter()
            .map(|packet| packet.key.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        keys(&dnsloop),
        keys(&tshark),
        "dnsloop (left) and tshark (right)\n{trace}"
    );
    for (by_dnsloop, by_tshark) in dnsloop.iter().zip(&tshark) {
        let apart = by_dnsloop
            .at
            .duration_since(by_tshark.at)
            .unwrap_or_else(|earlier| earlier.duration());
        assert!(
            apart <= SAME_TIME_WITHIN,
            "{:?} seen {apart:?} apart by dnsloop and tshark",
            by_dnsloop.key
        );
    }
}

/// What both tools say about a DNS packet.
#[derive(Debug)]
struct Seen {
    key: PacketKey,
    at: SystemTime,
}

/// What identifies a DNS packet in both tools' output.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct PacketKey {
    src: SocketAddr,
    id: u16,
    qr: bool,
    /// Raw bytes, ASCII lower-cased, without the trailing dot: the tools escape differently.
    qname: Vec<u8>,
    qtype: u16,
}

impl Seen {
    fn from_dnsloop(line: &PacketRecord) -> Seen {
        let qname = line.qname.as_deref().expect("dnsloop shows the question");
        let qtype = line
            .qtype
            .as_deref()
            .expect("dnsloop shows the question's type");
        Seen {
            key: PacketKey {
                src: line.src,
                id: line.id,
                qr: line.qr,
                qname: unescape(qname.strip_suffix('.').unwrap_or(qname), dnsloop_escape),
                qtype: qtype_number(qtype),
            },
            at: line.ts.0,
        }
    }

    /// One line of [`TSHARK_FIELDS`].
    fn from_tshark(line: &str) -> Seen {
        let fields: Vec<&str> = line.split('\t').collect();
        let [time, ipv4, ipv6, udp_port, tcp_port, id, response, qname, qtype] = fields[..] else {
            panic!("tshark printed {} fields, not 9: {line}", fields.len());
        };
        let ip: IpAddr = [ipv4, ipv6]
            .into_iter()
            .find(|address| !address.is_empty())
            .and_then(|address| address.parse().ok())
            .or_fail(format_args!("no source address in {line}"));
        let port = [udp_port, tcp_port]
            .into_iter()
            .find(|port| !port.is_empty())
            .and_then(|port| port.parse().ok())
            .or_fail(format_args!("no source port in {line}"));
        let number = |text: &str| -> u16 {
            let parsed = match text.strip_prefix("0x") {
                Some(hex) => u16::from_str_radix(hex, 16),
                None => text.parse(),
            };
            parsed.or_fail(format_args!("{text} in {line}"))
        };
        let seconds: f64 = time.parse().or_fail(format_args!("{time} in {line}"));
        Seen {
            key: PacketKey {
                src: SocketAddr::new(ip, port),
                id: number(id),
                qr: response == "1",
                qname: unescape(qname, tshark_escape),
                qtype: number(qtype),
            },
            at: UNIX_EPOCH + Duration::from_secs_f64(seconds),
        }
    }
}

/// The fields asked of tshark, in this order, for one DNS message per packet.
const TSHARK_FIELDS: [&str; 9] = [
    "frame.time_epoch",
    "ip.src",
    "ipv6.src",
    "udp.srcport",
    "tcp.srcport",
    "dns.id",
    "dns.flags.response",
    "dns.qry.name",
    "dns.qry.type",
];

/// tshark's reading of the DNS packets in the capture `pcap`.
fn tshark_dns_packets(pcap: &Path) -> Vec<Seen> {
    let mut tshark = Command::new("tshark");
    tshark
        .arg("-r")
        .arg(pcap)
        .args(["-Y", "dns", "-T", "fields"]);
    for field in TSHARK_FIELDS {
        tshark.args(["-e", field]);
    }
    let output = tshark.output().or_fail("running tshark (is it installed?)");
    assert!(
        output.status.success(),
        "tshark failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(Seen::from_tshark)
        .collect()
}

fn sorted(mut seen: Vec<Seen>) -> Vec<Seen> {
    seen.sort_by(|a, b| a.key.cmp(&b.key));
    seen
}
