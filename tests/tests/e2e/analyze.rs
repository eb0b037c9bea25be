//! `dnsloop analyze` finds in a tcpdump capture what `dnsloop trace` finds live.
//!
//! Each test brings up one scenario, captures its node (or a pod) with tcpdump while it sends
//! the traffic `detect.rs` sends for that scenario, then runs `dnsloop analyze --output json`
//! on the files, unprivileged work that needs no lab. Captures are taken as operators take
//! them: of every interface (`-i any`, Linux cooked v2, and v1 with `-y LINUX_SLL`) and of one
//! interface (a plain Ethernet capture, whose directions only its MAC addresses tell). The
//! loop and unexpected-source tests also run `dnsloop trace` alongside, and hold the two to the
//! same findings.
use std::{
    collections::BTreeSet,
    net::{IpAddr, Ipv4Addr},
    path::{Path, PathBuf},
    thread,
    time::Duration,
};

use dnsloop_core::schema::Record;
use dnsloop_tests::or_fail::OrFail as _;
use dnsloop_tests::test_name;
use dnsloop_tests::{
    dead_upstream,
    findings::{fqdn, Trace},
    lab::{
        dns_server, Lab, PcapCapture, Pod, Scenario, CLUSTER_DNS, EXTERNAL_A, EXTERNAL_NAME,
        NODE_LOCAL_DNS,
    },
    packet_lines::packet_lines,
    privilege::{can_run, dnsloop_bin, Need},
    tracer::{self, Tracer},
};

const CLUSTER_NAME: &str = "kubernetes.default.svc.cluster.local";
const CLUSTER_NAME_ADDRESS: &str = "10.96.0.1";
/// What the captures keep: DNS only, as an operator chasing a DNS fault would capture.
const FILTER: &str = "port 53";
/// dnsloop's query timeout (2 s) and some: a capture must run this long past a query for its
/// timeout to show in it.
const TIMEOUT_SHOWS_AFTER: Duration = Duration::from_millis(2_500);

/// Where a capture is taken, and how.
struct Take {
    /// `None`: the node's namespace; otherwise that pod's.
    pod: Option<Pod>,
    interface: &'static str,
    /// tcpdump's `-y`, when not its default for the interface.
    link_type: Option<&'static str>,
}

const NODE_ANY: Take = Take {
    pod: None,
    interface: "any",
    link_type: None,
};
const NODE_ANY_COOKED_V1: Take = Take {
    pod: None,
    interface: "any",
    link_type: Some("LINUX_SLL"),
};
const NODE_BRIDGE: Take = Take {
    pod: None,
    interface: "cni0",
    link_type: None,
};

impl Take {
    fn describe(&self) -> String {
        let place = self
            .pod
            .map_or("the node".into(), |pod| pod.name().to_owned());
        let link = self
            .link_type
            .map_or(String::new(), |link| format!(" -y {link}"));
        format!("tcpdump -i {}{link} in {place}", self.interface)
    }
}

/// One capture file and how it was taken.
struct Captured {
    how: String,
    file: PathBuf,
}

/// Everything a test's run left: its captures, the trace if one ran, and what the traffic
/// returned. The lab is gone by then; the files stay in a directory of the test's own.
struct Run<T> {
    captures: Vec<Captured>,
    trace: Option<Trace>,
    sent: T,
    _files: tempfile::TempDir,
}

/// Brings up `scenario`, starts the captures `takes` (and `dnsloop trace` on the node when
/// `with_trace`), runs `traffic`, stops everything. `None` when this host cannot run the test.
fn run<T>(
    test: &str,
    scenario: Scenario,
    takes: &[Take],
    with_trace: bool,
    traffic: impl FnOnce(&Lab) -> T,
) -> Option<Run<T>> {
    if !can_run(
        test,
        &[Need::Root, Need::Tool("tcpdump"), Need::DnsloopBinary],
    ) {
        return None;
    }
    let files = tempfile::tempdir().expect("a temporary directory");
    let lab = Lab::builder(scenario).start().or_fail(test);
    let mut running: Vec<PcapCapture> = Vec::new();
    let mut captures = Vec::new();
    for (number, take) in takes.iter().enumerate() {
        let ns = take
            .pod
            .map_or(lab.node_ns().to_owned(), |pod| lab.pod_ns(pod));
        let file = files
            .path()
            .join(format!("{number}-{}.pcap", take.interface));
        let capture = match take.link_type {
            Some(link) => lab.capture_pcap_as(&ns, take.interface, link, FILTER, &file),
            None => lab.capture_pcap(&ns, take.interface, FILTER, &file),
        };
        running.push(capture.or_fail(test));
        captures.push(Captured {
            how: take.describe(),
            file,
        });
    }
    let tracer = with_trace.then(|| {
        Tracer::start(&dnsloop_bin(), &lab, lab.node_ns(), &["--output", "json"]).or_fail(test)
    });
    let sent = traffic(&lab);
    let trace = tracer.map(|tracer| {
        let output = tracer.interrupt().or_fail(test);
        Trace::from_output(output).or_fail(test)
    });
    for capture in running {
        capture.stop().or_fail(test);
    }
    Some(Run {
        captures,
        trace,
        sent,
        _files: files,
    })
}

/// `dnsloop analyze --output json FILE`, as any user may run it.
fn analyze(file: &Path) -> Trace {
    analyze_with(file, &[])
}

/// `dnsloop analyze --output json ARGS FILE`.
fn analyze_with(file: &Path, args: &[&str]) -> Trace {
    tracer::analyze(&dnsloop_bin(), file, args)
        .and_then(Trace::from_output)
        .or_fail(format_args!("dnsloop analyze {}", file.display()))
}

/// Each finding as a kind and a question name: what a live trace and an analysis of a
/// capture of the same traffic can be compared on.
fn kinds_and_names(trace: &Trace) -> BTreeSet<(&'static str, String)> {
    trace
        .records
        .iter()
        .filter_map(|record| match record {
            Record::Loop(found) => Some(("loop", found.qname.to_ascii_lowercase())),
            Record::UnexpectedSource(found) => {
                Some(("unexpected_source", found.qname.to_ascii_lowercase()))
            }
            Record::Timeout(found) => Some(("timeout", found.qname.to_ascii_lowercase())),
            _ => None,
        })
        .collect()
}

/// Holds `analysed` to `traced`'s findings, compared on what both can know.
///
/// Paths cannot be compared hop for hop: live, dnsloop names each interface and the pod behind
/// it (`veth-coredns-a`, `pod 10.244.0.3`), while a `-i any` capture numbers interfaces
/// (`ifindex 5`) and names namespaces after addresses (`host 10.244.0.3`). Nor can counts:
/// tcpdump and the kernel programs see a loop storm from slightly different instants. What a
/// finding is about, its kind and question, must be the same.
fn assert_agree(traced: &Trace, analysed: &Trace, how: &str) {
    assert_eq!(
        kinds_and_names(analysed),
        kinds_and_names(traced),
        "analyze of {how} (left) and trace (right) disagree:\n--- trace ---\n{traced}\n--- analyze ---\n{analysed}"
    );
}

#[test]
fn nodelocal_loop_in_captures_agrees_with_trace() {
    let test = test_name!();
    let Some(run) = run(
        test,
        Scenario::NodelocalLoop,
        &[NODE_ANY, NODE_ANY_COOKED_V1, NODE_BRIDGE],
        true,
        |lab| lab.dig_or_fail(Pod::Client, &NODE_LOCAL_DNS.to_string(), &[EXTERNAL_NAME]),
    ) else {
        return;
    };
    let traced = run.trace.as_ref().expect("traced");
    let qname = fqdn(EXTERNAL_NAME);
    for capture in &run.captures {
        let analysed = analyze(&capture.file);
        let found = analysed
            .loops_for(&qname)
            .first()
            .copied()
            .or_fail(format_args!("no loop in {}:\n{analysed}", capture.how));
        assert_eq!(found.qtype, "A", "{analysed}");
        assert!(found.path.len() >= 2, "{}:\n{analysed}", capture.how);
        assert!(
            found.servers.contains(&IpAddr::V4(NODE_LOCAL_DNS)),
            "the node cache forwards in the loop ({}):\n{analysed}",
            capture.how
        );
        // Offline there is no conntrack to ask.
        assert!(found.dnat.is_empty(), "{analysed}");
        assert!(
            analysed.loops_for(&qname).len() <= 5,
            "a loop is reported a few times, not per packet ({}):\n{analysed}",
            capture.how
        );
        assert_agree(traced, &analysed, &capture.how);
    }
}

#[test]
fn unexpected_source_in_captures_agrees_with_trace() {
    let test = test_name!();
    let client_veth = Take {
        pod: None,
        interface: "veth-client",
        link_type: None,
    };
    let Some(run) = run(
        test,
        Scenario::UnexpectedSource,
        &[NODE_ANY, client_veth],
        true,
        |lab| lab.dig_or_fail(Pod::Client, &CLUSTER_DNS.to_string(), &[CLUSTER_NAME]),
    ) else {
        return;
    };
    assert_eq!(run.sent.status, None, "the client must drop the reply");
    let traced = run.trace.as_ref().expect("traced");
    for capture in &run.captures {
        let analysed = analyze(&capture.file);
        let findings = analysed.unexpected_sources();
        let found = findings.first().or_fail(format_args!(
            "no unexpected_source in {}:\n{analysed}",
            capture.how
        ));
        assert_eq!(
            found.client.ip(),
            IpAddr::V4(Pod::Client.ip()),
            "{analysed}"
        );
        assert_eq!(found.expected, dns_server(CLUSTER_DNS), "{analysed}");
        assert!(
            Pod::COREDNS
                .iter()
                .any(|pod| found.actual == dns_server(pod.ip())),
            "the reply comes from a CoreDNS pod's own address:\n{analysed}"
        );
        assert_eq!(found.qname, fqdn(CLUSTER_NAME), "{analysed}");
        // The evidence is the node's, and the node is not here.
        assert!(
            found.conntrack.is_none() && found.cause.is_none(),
            "{analysed}"
        );
        assert_agree(traced, &analysed, &capture.how);
    }
}

#[test]
fn self_loop_in_a_capture_of_the_pod_is_a_possible_loop() {
    // The loop never leaves the CoreDNS pod: it shows only in a capture of that pod. Nothing in
    // the capture shows a server on the pod's 127.0.0.1 (no reply ever came from it): the
    // query may have found no socket there, as when nothing listens. Live, the tracer knows
    // the kernel did not drop it, and reports a loop (`detect.rs`).
    let pod = Pod::CoreDnsA;
    let takes = [
        Take {
            pod: Some(pod),
            interface: "any",
            link_type: None,
        },
        Take {
            pod: Some(pod),
            interface: "lo",
            link_type: None,
        },
    ];
    let Some(run) = run(test_name!(), Scenario::SelfLoop, &takes, false, |lab| {
        lab.dig_or_fail(Pod::Client, &pod.ip().to_string(), &[EXTERNAL_NAME])
    }) else {
        return;
    };
    for capture in &run.captures {
        let analysed = analyze(&capture.file);
        assert!(
            analysed.loops().is_empty(),
            "no evidence, no loop ({}):\n{analysed}",
            capture.how
        );
        let found = analysed
            .possible_loops_for(&fqdn(EXTERNAL_NAME))
            .first()
            .copied()
            .or_fail(format_args!(
                "no possible loop in {}:\n{analysed}",
                capture.how
            ));
        assert!(
            found.servers.contains(&IpAddr::V4(Ipv4Addr::LOCALHOST)),
            "the pod forwards to 127.0.0.1 ({}):\n{analysed}",
            capture.how
        );
        assert!(
            found
                .unconfirmed
                .iter()
                .any(|delivery| delivery.at.ip() == IpAddr::V4(Ipv4Addr::LOCALHOST)),
            "the delivery to 127.0.0.1 is the unconfirmed one ({}):\n{analysed}",
            capture.how
        );
    }
    // With every interface captured, the cooked header tells the loopback apart.
    let analysed = analyze(&run.captures[0].file);
    let found = analysed.possible_loops_for(&fqdn(EXTERNAL_NAME))[0];
    assert!(
        found.path.iter().all(|hop| hop.ifname == "lo"),
        "the pod forwards to itself: the path is on its lo:\n{analysed}"
    );
}

/// How often `tcp_loop_in_captures` asks its question, and how long the captures run on after
/// the last time: longer than one round of the loop over TCP (about 3 s: unbound merges the
/// returning query and sends it on later).
const TCP_LOOP_ROUNDS: usize = 3;
const TCP_ROUND_SETTLE: std::time::Duration = std::time::Duration::from_secs(4);

#[test]
fn tcp_loop_in_captures_is_a_loop_or_a_possible_one() {
    // Now and then, on a slow machine, the captures hold no complete round of the loop (the
    // forward back over TCP came after they stopped, or in segments the decoder does not
    // reassemble): the analysis rightly finds no loop in them. Such captures are taken again,
    // once.
    for attempt in 1..=2 {
        let Some(run) = run(
            test_name!(),
            Scenario::TcpLoop,
            &[NODE_ANY, NODE_BRIDGE],
            false,
            |lab| {
                for _ in 0..TCP_LOOP_ROUNDS {
                    lab.dig_or_fail(Pod::Client, &NODE_LOCAL_DNS.to_string(), &[EXTERNAL_NAME]);
                }
                std::thread::sleep(TCP_ROUND_SETTLE);
            },
        ) else {
            return;
        };
        let without_loop: Vec<String> = run
            .captures
            .iter()
            .filter_map(|capture| {
                let analysed = analyze(&capture.file);
                // Nothing answers in a loop over TCP until it ends, and a connection shows no
                // server's namespace: the cycle is a possible loop, unless the servers' last
                // answers show where they listen.
                let name = fqdn(EXTERNAL_NAME);
                (analysed.loops_for(&name).is_empty()
                    && analysed.possible_loops_for(&name).is_empty())
                .then(|| format!("no loop in {}:\n{analysed}", capture.how))
            })
            .collect();
        if without_loop.is_empty() {
            return;
        }
        assert!(attempt < 2, "{}", without_loop.join("\n"));
        eprintln!(
            "tcp_loop_in_captures: taking the captures again: {}",
            without_loop.join("\n")
        );
    }
}

#[test]
fn dead_upstream_times_out_in_a_capture() {
    // Now and then, on a busy machine, `tcpdump -i any` misses an answer dig got: the analysis
    // rightly reports a timeout the capture shows, which says nothing of dnsloop. Such a
    // capture is taken again, once.
    for attempt in 1..=2 {
        let Some(run) = run(
            test_name!(),
            Scenario::DeadUpstream,
            &[NODE_ANY],
            false,
            |lab| {
                let mut answered =
                    dead_upstream::ask(lab, &[CLUSTER_DNS.to_string(), NODE_LOCAL_DNS.to_string()]);
                // A capture knows time only from its packets: one more, answered, query after
                // the timeout shows that time went on without an answer.
                thread::sleep(TIMEOUT_SHOWS_AFTER);
                answered.push(dead_upstream::dig_answers(
                    lab,
                    &CLUSTER_DNS.to_string(),
                    CLUSTER_NAME,
                    CLUSTER_NAME_ADDRESS,
                ));
                answered
            },
        ) else {
            return;
        };
        let file = &run.captures[0].file;
        let missed = answers_missing_from(file, &run.sent);
        if !missed.is_empty() {
            assert!(
                attempt < 2,
                "tcpdump missed answers dig got (IDs {missed:?}) in two captures in a row"
            );
            eprintln!("the capture misses answers dig got (IDs {missed:?}): capturing again");
            continue;
        }
        let analysed = analyze(file);
        dead_upstream::assert_only_the_stub_domain_times_out(&analysed.timeouts(), &analysed);
        // The dead server's queries pass through the node on their way out: no question comes
        // back.
        assert!(analysed.loops().is_empty(), "{analysed}");
        return;
    }
}

/// Of the `answered` IDs (answers a client got), those with no DNS response in `pcap`, as
/// tshark reads it.
fn answers_missing_from(pcap: &Path, answered: &[u16]) -> Vec<u16> {
    let output = std::process::Command::new("tshark")
        .args(["-n", "-r"])
        .arg(pcap)
        .args([
            "-Y",
            "dns.flags.response == 1",
            "-T",
            "fields",
            "-e",
            "dns.id",
        ])
        .output()
        .expect("running tshark");
    assert!(output.status.success(), "tshark reads {}", pcap.display());
    let captured: BTreeSet<u16> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|id| u16::from_str_radix(id.trim().trim_start_matches("0x"), 16).ok())
        .collect();
    answered
        .iter()
        .copied()
        .filter(|id| !captured.contains(id))
        .collect()
}

/// The client's veth, not the bridge: tcpdump on a bridge device makes it promiscuous, so it
/// sees every frame the bridge forwards, and with bridge netfilter on, a frame DNAT'ed on the
/// bridge can show up rewritten before its original does. Its client then seems to be the node,
/// and the reply, which goes straight to the pod, never to reach it: a timeout that is not one.
/// `-i any` and a veth see each frame as it passes.
#[test]
fn healthy_traffic_in_captures_is_not_a_fault() {
    let client_veth = Take {
        pod: None,
        interface: "veth-client",
        link_type: None,
    };
    let Some(run) = run(
        test_name!(),
        Scenario::Healthy,
        &[NODE_ANY, client_veth],
        false,
        |lab| {
            let cache = NODE_LOCAL_DNS.to_string();
            for _ in 0..10 {
                lab.dig_answers(
                    Pod::Client,
                    &cache,
                    &[EXTERNAL_NAME],
                    &EXTERNAL_A.to_string(),
                );
            }
            for transport in ["+notcp", "+tcp"] {
                lab.dig_answers(
                    Pod::Client,
                    &CLUSTER_DNS.to_string(),
                    &[transport, CLUSTER_NAME],
                    CLUSTER_NAME_ADDRESS,
                );
            }
            thread::sleep(TIMEOUT_SHOWS_AFTER);
            lab.dig_answers(
                Pod::Client,
                &cache,
                &[EXTERNAL_NAME],
                &EXTERNAL_A.to_string(),
            );
        },
    ) else {
        return;
    };
    for capture in &run.captures {
        let analysed = analyze_with(&capture.file, &["--packets"]);
        // A quiet analysis means something only if it read the traffic.
        assert!(
            analysed.summary().observations >= 20,
            "{}:\n{analysed}",
            capture.how
        );
        assert!(
            analysed.loops().is_empty() && analysed.unexpected_sources().is_empty(),
            "{}:\n{analysed}",
            capture.how
        );
        // tcpdump on `-i any` now and then misses a packet (one run in twenty or so here): a
        // query whose reply the capture lacks did time out, as far as the file can tell.
        let packets = packet_lines(&analysed);
        for timeout in analysed.timeouts() {
            assert!(
                !packets.iter().any(|packet| packet.qr
                    && packet.id == timeout.id
                    && packet.dst == timeout.client),
                "the capture holds the reply to a query reported timed out ({}):\n{analysed}",
                capture.how
            );
        }
    }
}
