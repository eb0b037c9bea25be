//! dnsloop finds what goes wrong on the lab's node, and stays quiet when nothing does.
//!
//! Each test brings up one scenario on a lab of its own, runs `dnsloop trace --output json` in
//! the node namespace while it sends traffic from the pods, then stops the tracer as an
//! operator would (Ctrl-C) and reads what it printed. Tests run in parallel threads, but their
//! labs come up one at a time (see `dnsloop_tests::lab::Lab::builder`).
use std::{
    net::{IpAddr, Ipv4Addr, SocketAddr},
    thread,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use dnsloop_core::schema::{Hop, LoopRecord, Record};
use dnsloop_tests::or_fail::OrFail as _;
use dnsloop_tests::test_name;
use dnsloop_tests::{
    dead_upstream, dns_query,
    findings::{fqdn, LoopRecordExt as _, SummaryExt as _, Trace},
    lab::{
        dead_stub_domains, dns_server, upstream_failure_domains, Lab, Pod, Scenario, CLUSTER_DNS,
        CLUSTER_DNS_V6, DEAD_DNS, EXTERNAL_A, EXTERNAL_AAAA, EXTERNAL_NAME, GONE_DNS,
        LARGE_ANSWER_ZONE, NODE_LOCAL_DNS, NODE_LOCAL_DNS_V6, NODE_UPLINK, ODD_DNS, UPSTREAM_DNS,
    },
    privilege::{can_run, dnsloop_bin, Need},
    tracer::{self, Tracer},
    wait,
};

const CLUSTER_NAME: &str = "kubernetes.default.svc.cluster.local";
const CLUSTER_NAME_ADDRESS: &str = "10.96.0.1";

/// dnsloop's query timeout (2 s) plus room for the tracer to notice: stopping the tracer this
/// long after the last query gives every unanswered query the time to be reported.
const TIMEOUT_REPORTED_WITHIN: Duration = Duration::from_millis(2_500);
/// The lab's loops go round hundreds of times in a second; dnsloop must say so in a few
/// reports, not one per packet.
const MAX_REPORTS_PER_LOOP: usize = 5;
/// A loop must be reported while it is still going on.
const LOOP_REPORTED_WITHIN: Duration = Duration::from_secs(1);

/// Brings up `scenario`, runs `dnsloop trace --output json` on its node while `traffic` runs,
/// and returns what the tracer printed and what `traffic` returned. `None` when this host
/// cannot run the test (it fails instead under `CI=true`).
fn traced<T>(
    test: &str,
    scenario: Scenario,
    traffic: impl FnOnce(&Lab) -> T,
) -> Option<(Trace, T)> {
    traced_with(test, scenario, &[], traffic)
}

/// As `traced`, with `options` added to the tracer's command line.
fn traced_with<T>(
    test: &str,
    scenario: Scenario,
    options: &[&str],
    traffic: impl FnOnce(&Lab) -> T,
) -> Option<(Trace, T)> {
    if !can_run(test, &[Need::Root, Need::DnsloopBinary]) {
        return None;
    }
    let lab = Lab::builder(scenario).start().or_fail(test);
    Some(trace_lab(test, &lab, options, traffic))
}

/// Runs `dnsloop trace --output json` with `options` on `lab`'s node while `traffic` runs.
fn trace_lab<T>(
    test: &str,
    lab: &Lab,
    options: &[&str],
    traffic: impl FnOnce(&Lab) -> T,
) -> (Trace, T) {
    let args: Vec<&str> = ["--output", "json"]
        .iter()
        .chain(options)
        .copied()
        .collect();
    let tracer = Tracer::start(&dnsloop_bin(), lab, lab.node_ns(), &args).or_fail(test);
    let sent = traffic(lab);
    let output = tracer.interrupt().or_fail(test);
    let trace = Trace::from_output(output).or_fail(test);
    (trace, sent)
}

/// As `traced`, with tcpdump capturing every interface of the node at the same time (DNS and
/// ICMP, as an operator would); returns the trace, `dnsloop analyze` of the capture, and what
/// `traffic` returned.
fn traced_and_captured<T>(
    test: &str,
    scenario: Scenario,
    traffic: impl FnOnce(&Lab) -> T,
) -> Option<(Trace, Trace, T)> {
    traced_and_captured_with(test, scenario, &[], traffic)
}

/// As `traced_and_captured`, with `options` added to the tracer's command line.
fn traced_and_captured_with<T>(
    test: &str,
    scenario: Scenario,
    options: &[&str],
    traffic: impl FnOnce(&Lab) -> T,
) -> Option<(Trace, Trace, T)> {
    if !can_run(
        test,
        &[Need::Root, Need::Tool("tcpdump"), Need::DnsloopBinary],
    ) {
        return None;
    }
    let files = tempfile::tempdir().expect("a temporary directory");
    let file = files.path().join("node-any.pcap");
    let lab = Lab::builder(scenario).start().or_fail(test);
    let capture = lab
        .capture_pcap(lab.node_ns(), "any", "port 53 or icmp or icmp6", &file)
        .or_fail(test);
    let (trace, returned) = trace_lab(test, &lab, options, traffic);
    capture.stop_complete().or_fail(test);
    let analysed = tracer::analyze(&dnsloop_bin(), &file, &[])
        .and_then(Trace::from_output)
        .or_fail(format_args!("{test}: dnsloop analyze"));
    Some((trace, analysed, returned))
}

fn node_cache() -> String {
    NODE_LOCAL_DNS.to_string()
}

/// The first loop report for `qname`, or a failure showing everything the tracer printed.
fn first_loop<'a>(trace: &'a Trace, qname: &str, sent: &str) -> &'a LoopRecord {
    trace
        .loops_for(qname)
        .first()
        .copied()
        .or_fail(format_args!(
            "no loop reported for {qname} after {sent}:\n{trace}"
        ))
}

#[test]
fn nodelocal_loop_is_reported_within_a_second_and_not_per_packet() {
    let sent = format!("`dig @{NODE_LOCAL_DNS} {EXTERNAL_NAME}` from the client");
    let Some((trace, _)) = traced(test_name!(), Scenario::NodelocalLoop, |lab| {
        // The loop swallows the query: there is no answer to check.
        lab.dig_or_fail(Pod::Client, &node_cache(), &[EXTERNAL_NAME])
    }) else {
        return;
    };

    let qname = fqdn(EXTERNAL_NAME);
    let found = first_loop(&trace, &qname, &sent);
    assert_eq!(found.qtype, "A", "{trace}");
    // The question goes round cache -> ClusterIP -> CoreDNS pod -> cache: the path shows the
    // CoreDNS pod it went through, at its bridge port (the bridge itself is not watched: its
    // crossings into the node are seen at the ports).
    assert!(
        found.path.len() >= 2,
        "a loop takes two hops at least:\n{trace}"
    );
    assert!(
        !found.crosses("cni0"),
        "the bridge is watched at its ports:\n{trace}"
    );
    assert!(
        Pod::COREDNS
            .iter()
            .any(|pod| found.crosses(&pod.host_veth())),
        "the path should cross a CoreDNS pod's veth:\n{trace}"
    );
    assert!(
        found.servers.contains(&IpAddr::V4(NODE_LOCAL_DNS)),
        "the node cache forwards in the loop:\n{trace}"
    );
    // The cache's forward was DNAT'ed before tc saw it: conntrack names the ClusterIP.
    assert!(
        found
            .dnat
            .iter()
            .any(|dnat| dnat.service == dns_server(CLUSTER_DNS)),
        "the ClusterIP behind the CoreDNS pod is named:\n{trace}"
    );
    assert!(found.summary.contains("10.96.0.10 (DNAT -> "), "{trace}");
    let delay = found.reported_after().expect("the path has hops");
    assert!(
        delay <= LOOP_REPORTED_WITHIN,
        "reported {delay:?} after the loop's first packet:\n{trace}"
    );
    let reports = trace.loops_for(&qname).len();
    assert!(
        reports <= MAX_REPORTS_PER_LOOP,
        "{reports} reports of one loop (at most {MAX_REPORTS_PER_LOOP} expected):\n{trace}"
    );
}

#[test]
fn nodelocal_loop_is_reported_with_ingress_watched_at_xdp() {
    let sent = format!("`dig @{NODE_LOCAL_DNS} {EXTERNAL_NAME}` from the client");
    let Some((trace, attached)) =
        traced_with(test_name!(), Scenario::NodelocalLoop, &["--xdp"], |lab| {
            let attached = lab
                .exec(lab.node_ns(), &["bpftool", "net", "show"])
                .map(|output| String::from_utf8_lossy(&output.stdout).into_owned())
                .or_fail("bpftool net show");
            lab.dig_or_fail(Pod::Client, &node_cache(), &[EXTERNAL_NAME]);
            attached
        })
    else {
        return;
    };
    let xdp_section = attached.split("tc:").next().unwrap_or_default();
    assert!(
        xdp_section.contains(&Pod::Client.host_veth()),
        "the client's veth has an XDP program while dnsloop runs:\n{attached}"
    );
    assert!(
        trace
            .summary()
            .dns_packets(&Pod::Client.host_veth(), "ingress")
            > 0,
        "XDP counted the client's query:\n{trace}"
    );
    let found = first_loop(&trace, &fqdn(EXTERNAL_NAME), &sent);
    assert!(
        Pod::COREDNS
            .iter()
            .any(|pod| found.crosses(&pod.host_veth())),
        "the path should cross a CoreDNS pod's veth:\n{trace}"
    );
}

/// A name like the CoreDNS `loop` plugin's probe: two random numbers under the root zone.
fn coredns_probe_name() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    format!("{}.{}.", nanos % 1_000_000_007, std::process::id())
}

#[test]
fn coredns_loop_probe_coming_back_is_reported_as_a_probe() {
    let probe = coredns_probe_name();
    let sent = format!("`dig @{NODE_LOCAL_DNS} {probe} HINFO` from coredns-a");
    // As the loop plugin does at start: CoreDNS asks its upstream (here the node cache, which
    // forwards to the ClusterIP) for the probe name, which should never come back to it.
    let Some((trace, _)) = traced(test_name!(), Scenario::NodelocalLoop, |lab| {
        lab.dig_or_fail(Pod::CoreDnsA, &node_cache(), &[&probe, "HINFO"])
    }) else {
        return;
    };

    let found = first_loop(&trace, &probe, &sent);
    assert_eq!(found.qtype, "HINFO", "{trace}");
    assert_eq!(found.probe.as_deref(), Some("coredns"), "{trace}");
}

/// `10.255.0.1.41410`: an endpoint as tcpdump prints it.
fn tcpdump_endpoint(address: SocketAddr) -> String {
    format!("{}.{}", address.ip(), address.port())
}

/// Whether tcpdump printed the DNS message of `hop`: from its source to its destination, with
/// its id (`48238+ [1au] A? www.example.test.`).
fn captured(packets: &[String], hop: &Hop) -> bool {
    let between = format!(
        "{} > {}:",
        tcpdump_endpoint(hop.src),
        tcpdump_endpoint(hop.dst)
    );
    let id = hop.id.to_string();
    // The id is followed by flag marks such as `+` (recursion desired).
    let carries_id = |line: &str| {
        line.split_whitespace()
            .any(|token| token.trim_end_matches(['+', '*', '-', '$', '|', '%']) == id)
    };
    packets
        .iter()
        .any(|line| line.contains(&between) && carries_id(line))
}

#[test]
fn tcp_loop_is_reported_on_tcp_hops() {
    let sent = format!("`dig @{NODE_LOCAL_DNS} {EXTERNAL_NAME}` from the client");
    let Some((trace, tcp_packets)) = traced(test_name!(), Scenario::TcpLoop, |lab| {
        // Loop findings do not name the transport: tcpdump, capturing TCP only, tells which
        // hops of the path were TCP.
        let capture = lab
            .capture(lab.node_ns(), "cni0", "tcp port 53")
            .expect("tcpdump starts");
        lab.dig_or_fail(Pod::Client, &node_cache(), &[EXTERNAL_NAME]);
        capture.stop().expect("tcpdump stops")
    }) else {
        return;
    };

    let found = first_loop(&trace, &fqdn(EXTERNAL_NAME), &sent);
    assert!(
        found.path.iter().any(|hop| captured(&tcp_packets, hop)),
        "no hop of the loop's path was among the TCP packets on cni0:\n{}\n{trace}",
        tcp_packets.join("\n")
    );
}

#[test]
fn self_loop_is_reported_on_the_pods_loopback() {
    // Both CoreDNS pods forward to 127.0.0.1, which is themselves; ask coredns-a directly.
    let pod = Pod::CoreDnsA;
    let sent = format!("`dig @{} {EXTERNAL_NAME}` from the client", pod.ip());
    let Some((trace, _)) = traced(test_name!(), Scenario::SelfLoop, |lab| {
        lab.dig_or_fail(Pod::Client, &pod.ip().to_string(), &[EXTERNAL_NAME])
    }) else {
        return;
    };

    let found = first_loop(&trace, &fqdn(EXTERNAL_NAME), &sent);
    assert!(
        !found.path.is_empty() && found.path.iter().all(|hop| hop.ifname == "lo"),
        "the pod forwards to itself: the loop's path is on its lo:\n{trace}"
    );
    assert!(
        found.servers.contains(&IpAddr::V4(Ipv4Addr::LOCALHOST)),
        "the pod forwards to 127.0.0.1:\n{trace}"
    );
    // Every pod has a 127.0.0.1: only the summary says whose loopback this is.
    assert!(
        found.summary.contains(&pod.ip().to_string()),
        "the summary should name the pod:\n{trace}"
    );
}

#[test]
fn unexpected_source_is_reported_with_conntrack_evidence_and_its_cause() {
    let sent = format!("`dig @{CLUSTER_DNS} {CLUSTER_NAME}` from the client");
    let Some((trace, outcome)) = traced(test_name!(), Scenario::UnexpectedSource, |lab| {
        lab.dig_or_fail(Pod::Client, &CLUSTER_DNS.to_string(), &[CLUSTER_NAME])
    }) else {
        return;
    };
    assert_eq!(
        outcome.status, None,
        "the client must drop the reply:\n{}",
        outcome.stdout
    );

    let findings = trace.unexpected_sources();
    let found = findings
        .first()
        .or_fail(format_args!("no unexpected_source after {sent}:\n{trace}"));
    assert_eq!(found.client.ip(), IpAddr::V4(Pod::Client.ip()), "{trace}");
    assert_eq!(found.expected, dns_server(CLUSTER_DNS), "{trace}");
    assert!(
        Pod::COREDNS
            .iter()
            .any(|pod| found.actual == dns_server(pod.ip())),
        "the reply comes from a CoreDNS pod's own address:\n{trace}"
    );
    assert_eq!(found.qname, fqdn(CLUSTER_NAME), "{trace}");
    // conntrack DNAT'ed the query to that pod and never saw the reply go back through it.
    let conntrack = found
        .conntrack
        .as_ref()
        .or_fail(format_args!("no conntrack evidence:\n{trace}"));
    assert!(conntrack.unreplied, "{trace}");
    assert_eq!(conntrack.reply_src, found.actual, "{trace}");
    assert_eq!(conntrack.original_dst, found.expected, "{trace}");
    let cause = found.cause.as_deref().unwrap_or_default();
    assert!(
        cause.contains("bridge-nf-call-iptables"),
        "the cause should name the bridge setting:\n{trace}"
    );
    // The client's socket refused the reply with an ICMP port unreachable, counted.
    let refused = trace.summary().kernel_counter("dns_port_unreachable");
    assert!(refused >= Some(1), "the ICMP refusal is counted:\n{trace}");
}

#[test]
fn dead_upstream_times_out_naming_the_dead_server_and_nothing_else() {
    let Some((trace, _)) = traced(test_name!(), Scenario::DeadUpstream, |lab| {
        dead_upstream::ask(lab, &[CLUSTER_DNS.to_string(), node_cache()]);
        thread::sleep(TIMEOUT_REPORTED_WITHIN);
    }) else {
        return;
    };
    dead_upstream::assert_only_the_stub_domain_times_out(&trace.timeouts(), &trace);
    assert!(trace.loops().is_empty(), "{trace}");
}

/// CoreDNS forwards a stub domain each to a server gone from a subnet the node routes out of the
/// pod bridge (NEIGH_FAILED on the node), and to hosts up with no DNS server: beyond the node, on
/// the node itself, in a pod (NO_SOCKET there, ICMP port unreachable back). A pod asks each
/// through its node cache, twice; at the same time two processes on the node ask its own
/// resolver, down, at 127.0.0.1, twice each.
fn ask_dead_servers(lab: &Lab) {
    let stubs = dead_stub_domains();
    thread::scope(|scope| {
        for (zone, _, _) in &stubs {
            scope.spawn(move || {
                let name = format!("db.{zone}");
                for _ in 0..2 {
                    let _ = lab.dig(Pod::Client, &node_cache(), &[&name]);
                }
            });
        }
        for _ in 0..2 {
            scope.spawn(|| {
                for _ in 0..2 {
                    let _ = lab.exec(
                        lab.node_ns(),
                        &["dig", "+tries=1", "+timeout=1", "@127.0.0.1", EXTERNAL_NAME],
                    );
                }
            });
        }
    });
}

#[test]
fn servers_gone_or_with_their_port_closed_are_timeouts_naming_them_never_loops() {
    // See `ask_dead_servers`.
    let stubs = dead_stub_domains();
    let node_resolver = SocketAddr::from((Ipv4Addr::LOCALHOST, 53));
    let test = test_name!();
    let Some((trace, analysed, ())) = traced_and_captured(test, Scenario::DeadUpstream, |lab| {
        ask_dead_servers(lab);
        thread::sleep(TIMEOUT_REPORTED_WITHIN);
    }) else {
        return;
    };
    for (how, trace) in [("trace", &trace), ("analyze of a capture", &analysed)] {
        assert!(
            trace.loops().is_empty(),
            "{how}: none of this is a loop:\n{trace}"
        );
        // Live, the tracer knows every address and drop. A capture shows a refusal only in the
        // ICMP message that says so, and the kernel sends few of those to one host in a second:
        // a question whose refusal went unsaid may stay a possible loop there.
        assert!(
            how != "trace" || trace.possible_loops().is_empty(),
            "{how}: nor a possible one:\n{trace}"
        );
        let timeouts = trace.timeouts();
        for (zone, server, what) in &stubs {
            let server = SocketAddr::new(*server, 53);
            assert!(
                timeouts.iter().any(|timeout| timeout.server == server
                    && timeout.qname == fqdn(&format!("db.{zone}"))),
                "{how}: no timeout naming {server} ({what}):\n{trace}"
            );
        }
        assert!(
            timeouts
                .iter()
                .any(|timeout| timeout.server == node_resolver),
            "{how}: no timeout naming the node's own resolver {node_resolver}:\n{trace}"
        );
    }
    // Live, the timeout says why the gone server did not answer: from the node's neighbour
    // table ("no host answers ARP for ... on cni0") before the kernel gives up on it, from the
    // kernel's NEIGH_FAILED drop ("no host answered ARP for ...") once it has.
    let gone = SocketAddr::new(GONE_DNS.into(), 53);
    let arp = format!("ARP for {GONE_DNS}");
    assert!(
        trace
            .timeouts()
            .iter()
            .filter(|timeout| timeout.server == gone)
            .all(|timeout| timeout.summary.contains(&arp)),
        "a timeout naming {gone} without saying that nothing answers ARP for it:\n{trace}"
    );
}

/// A tracer that fell behind (starved of CPU on a busy node; here stopped while the traffic
/// passes) takes seconds of packets and drops in one batch. A drop must still say that the query
/// it ends was not taken in where it stayed, though the packets after it are already in.
#[test]
fn a_tracer_that_fell_behind_still_takes_refused_queries_for_no_loops() {
    let test = test_name!();
    if !can_run(test, &[Need::Root, Need::DnsloopBinary]) {
        return;
    }
    let lab = Lab::builder(Scenario::DeadUpstream).start().or_fail(test);
    let mut tracer =
        Tracer::start(&dnsloop_bin(), &lab, lab.node_ns(), &["--output", "json"]).or_fail(test);
    let stopped = Stopped::now(tracer.pid());
    ask_dead_servers(&lab);
    drop(stopped);
    let node_server = SocketAddr::from((NODE_UPLINK, 53));
    tracer
        .wait_for_record(
            Duration::from_secs(20),
            |record| matches!(record, Record::Timeout(found) if found.server == node_server),
        )
        .or_fail(format_args!("{test}: a timeout naming {node_server}"));
    let trace = Trace::from_output(tracer.interrupt().or_fail(test)).or_fail(test);
    assert!(
        trace.loops().is_empty() && trace.possible_loops().is_empty(),
        "a query refused where it came back is no loop:\n{trace}"
    );
}

/// SIGSTOP for a process, SIGCONT once dropped (on a failure too).
struct Stopped(libc::pid_t);

impl Stopped {
    fn now(pid: u32) -> Self {
        let pid = pid as libc::pid_t;
        // SAFETY: signalling the test's own child by its PID.
        unsafe { libc::kill(pid, libc::SIGSTOP) };
        Self(pid)
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        // SAFETY: as above.
        unsafe { libc::kill(self.0, libc::SIGCONT) };
    }
}

/// Ok once the node's neighbour entry for `address` is FAILED: it gave up resolving it, and
/// dropped what waited for it.
fn neighbour_failed(lab: &Lab, address: Ipv4Addr) -> Result<(), String> {
    let shown = lab
        .exec(
            lab.node_ns(),
            &["ip", "neigh", "show", &address.to_string()],
        )
        .map_err(|error| format!("ip neigh show {address}: {error:#}"))?;
    let state = String::from_utf8_lossy(&shown.stdout).into_owned();
    if state.contains("FAILED") {
        Ok(())
    } else {
        Err(format!(
            "the node's neighbour entry for {address}: {state:?}"
        ))
    }
}

#[test]
fn upstreams_answering_refused_servfail_late_or_on_a_second_try_are_no_loop() {
    // CoreDNS forwards stub domains to a server that answers REFUSED or SERVFAIL at once, or
    // only after dnsloop's timeout, and to two servers of which the first is gone. A pod asks
    // each through its node cache.
    let test = test_name!();
    let [refused, servfail, slow, _, retry] =
        upstream_failure_domains().map(|(zone, _)| fqdn(&format!("db.{zone}")));
    let Some((trace, analysed, ())) = traced_and_captured(test, Scenario::DeadUpstream, |lab| {
        // One at a time, each failure on its own, the retried one first: the node drops the
        // query to its gone server seconds later, while the others are asked.
        for name in [&retry, &refused, &servfail, &slow] {
            let _ = lab.dig(Pod::Client, &node_cache(), &[name]);
        }
        // The node drops the query to the gone server (NEIGH_FAILED, asserted below) once ARP
        // has given up on its address, some 3 s after the query: waited for, not assumed.
        wait::until(Duration::from_secs(15), || neighbour_failed(lab, GONE_DNS))
            .or_fail(format_args!("{test}: the node giving up on {GONE_DNS}"));
        thread::sleep(TIMEOUT_REPORTED_WITHIN);
    }) else {
        return;
    };
    let odd = SocketAddr::new(ODD_DNS.into(), 53);
    let gone = SocketAddr::new(GONE_DNS.into(), 53);
    for (how, trace) in [("trace", &trace), ("analyze of a capture", &analysed)] {
        trace.assert_no_loop(how);
        // dnsmasq sends the query its gone server left unanswered to both servers, with the
        // same id from the same socket: the second's reply is its answer.
        assert!(
            trace.unexpected_sources().is_empty(),
            "{how}: every reply came from a server its query went to:\n{trace}"
        );
        let timeouts = trace.timeouts();
        // A refusal and a failure are answers, however unwelcome.
        for name in [&refused, &servfail] {
            assert!(
                timeouts.iter().all(|timeout| &timeout.qname != name),
                "{how}: {name} was answered at once:\n{trace}"
            );
        }
        assert!(
            timeouts
                .iter()
                .any(|timeout| timeout.qname == slow && timeout.server == odd),
            "{how}: no timeout naming {odd} for {slow}:\n{trace}"
        );
        // The second server answered the retried query; the first one's loss is a drop (in a
        // capture, the ICMP host unreachable the node sends back).
        assert!(
            timeouts.iter().all(|timeout| timeout.qname != retry),
            "{how}: {retry} was answered by the second server:\n{trace}"
        );
        assert!(
            trace
                .drops()
                .iter()
                .any(|dropped| dropped.reason == "NEIGH_FAILED"
                    && dropped.dst == gone
                    && dropped.qname.as_deref() == Some(retry.as_str())),
            "{how}: no NEIGH_FAILED drop of {retry} to {gone}:\n{trace}"
        );
    }
    // The kernel counts every answer by server and rcode (the late one came after its client
    // had given up).
    let answers = trace
        .summary()
        .servers
        .iter()
        .find(|answers| answers.server == odd)
        .or_fail(format_args!("no answers counted from {odd}:\n{trace}"));
    for rcode in ["REFUSED", "SERVFAIL"] {
        assert!(
            answers.rcodes.get(rcode).is_some_and(|&count| count > 0),
            "no {rcode} from {odd}:\n{trace}"
        );
    }
}

#[test]
fn an_answer_truncated_over_udp_and_asked_again_over_tcp_is_no_loop() {
    // The question goes round the same servers twice, over UDP then over TCP, each time on
    // new sockets: a client asking again, not a loop.
    let [_, _, _, big, _] = upstream_failure_domains().map(|(zone, _)| fqdn(&format!("db.{zone}")));
    let test = test_name!();
    let Some((trace, analysed, outcome)) =
        traced_and_captured(test, Scenario::DeadUpstream, |lab| {
            lab.dig(Pod::Client, &node_cache(), &[&big])
                .or_fail(format_args!("dig {big}"))
        })
    else {
        return;
    };
    assert_eq!(
        outcome.answers,
        [EXTERNAL_A.to_string()],
        "{big} is answered over TCP:\n{}",
        outcome.stdout
    );
    for (how, trace) in [("trace", &trace), ("analyze of a capture", &analysed)] {
        trace.assert_no_loop(how);
        assert!(
            trace.timeouts().is_empty(),
            "{how}: every query was answered:\n{trace}"
        );
        assert!(
            trace.truncations_not_retried().is_empty(),
            "{how}: every truncated answer was asked again over TCP:\n{trace}"
        );
    }
}

#[test]
fn a_truncated_answer_the_client_does_not_ask_again_over_tcp_names_client_and_server() {
    // The upstream truncates over UDP; CoreDNS and the node cache pass the cut answer on as it
    // is, for their client to ask again over TCP. dig +ignore takes it as it is, as musl's
    // resolver did before 1.2.4: only that client is reported, not the forwarders on the way.
    // dig without it asks again over TCP, and is no finding.
    let [_, _, _, (big, _), _] = upstream_failure_domains();
    let (cut, retried) = (fqdn(&format!("cut.{big}")), fqdn(&format!("retried.{big}")));
    let cache = SocketAddr::new(NODE_LOCAL_DNS.into(), 53);
    let test = test_name!();
    let Some((trace, analysed, outcomes)) =
        traced_and_captured(test, Scenario::DeadUpstream, |lab| {
            let server = node_cache();
            let cut = lab.dig_or_fail(Pod::Client, &server, &["+ignore", &cut]);
            let retried = lab.dig_or_fail(Pod::Client, &server, &[&retried]);
            // A truncated answer is judged once the client had --timeout to ask again; the
            // query after that moves a capture's time past it.
            thread::sleep(TIMEOUT_REPORTED_WITHIN);
            lab.dig_or_fail(Pod::Client, &node_cache(), &[CLUSTER_NAME]);
            (cut, retried)
        })
    else {
        return;
    };
    let (cut_outcome, retried_outcome) = outcomes;
    assert!(
        cut_outcome.stdout.contains(" tc ") || cut_outcome.stdout.contains(" tc;"),
        "dig +ignore keeps the truncated answer:\n{}",
        cut_outcome.stdout
    );
    assert_eq!(
        retried_outcome.answers,
        [EXTERNAL_A.to_string()],
        "{retried} is answered over TCP:\n{}",
        retried_outcome.stdout
    );
    for (how, trace) in [("trace", &trace), ("analyze of a capture", &analysed)] {
        let found = trace.truncations_not_retried();
        assert_eq!(
            found.len(),
            1,
            "{how}: one client took one cut answer:\n{trace}"
        );
        let found = found[0];
        assert_eq!(
            (found.qname.as_str(), found.server, found.count),
            (cut.as_str(), cache, 1),
            "{how}: {found:?}"
        );
        assert_eq!(found.client.ip(), IpAddr::V4(Pod::Client.ip()), "{found:?}");
        assert!(
            found.summary.contains("did not ask again over TCP"),
            "{how}: {}",
            found.summary
        );
        let answers = trace
            .summary()
            .servers
            .iter()
            .find(|answers| answers.server == cache)
            .or_fail(format_args!(
                "{how}: no answers counted from {cache}:\n{trace}"
            ));
        assert_eq!(
            answers.truncated, 2,
            "{how}: both truncated answers counted"
        );
        trace.assert_no_loop(how);
    }
    let found = trace.truncations_not_retried()[0];
    assert!(
        found
            .client_namespace
            .as_deref()
            .is_some_and(|namespace| namespace.starts_with("pod ")),
        "the trace names the client's pod: {found:?}"
    );
}

#[test]
fn a_pods_lookup_of_an_external_name_through_its_search_list_is_reported_as_waste() {
    // glibc, with the resolv.conf kubelet gives a pod (three cluster suffixes, ndots:5), asks
    // the name with each suffix first, A and AAAA at once, each answered NXDOMAIN, then the name
    // itself: 6 of its 8 queries wasted. The node cache forwards every one of them and is not
    // reported. Every packet is analysed live with --slow.
    let test = test_name!();
    let Some((trace, analysed, addresses)) =
        traced_and_captured_with(test, Scenario::Healthy, &["--slow", "10s"], |lab| {
            lab.getent_as_a_pod(Pod::Client, EXTERNAL_NAME)
                .or_fail(format_args!("looking {EXTERNAL_NAME} up as a pod"))
        })
    else {
        return;
    };
    assert_eq!(
        addresses,
        [EXTERNAL_A.to_string(), EXTERNAL_AAAA.to_string()],
        "{EXTERNAL_NAME} is found after the search list"
    );
    for (how, trace) in [("trace", &trace), ("analyze of a capture", &analysed)] {
        let found = trace.search_list_wastes();
        assert_eq!(found.len(), 1, "{how}: one pod wasted queries:\n{trace}");
        let found = found[0];
        assert_eq!(
            found.client,
            IpAddr::V4(Pod::Client.ip()),
            "{how}: {found:?}"
        );
        assert_eq!(
            (found.queries, found.wasted, found.lookups),
            (8, 6, 2),
            "{how}: {found:?}"
        );
        assert_eq!(
            (found.slowest.qname.as_str(), found.slowest.wasted),
            (fqdn(EXTERNAL_NAME).as_str(), 3),
            "{how}: {found:?}"
        );
        assert!(found.extra_ms > 0.0, "{how}: {found:?}");
        trace.assert_no_loop(how);
        assert!(trace.timeouts().is_empty(), "{how}:\n{trace}");
    }
}

#[test]
fn a_name_the_upstream_fails_asked_50_times_a_second_is_a_servfail_storm_down_the_chain() {
    // dnsperf asks the node cache a name the upstream answers SERVFAIL, 50 times a second for
    // 7 s: the cache, CoreDNS and the upstream each answer SERVFAIL to everyone, and each
    // report names the others storming with it. Every packet is analysed live with --slow.
    let [_, (servfail, _), _, _, _] = upstream_failure_domains();
    let cache = SocketAddr::new(NODE_LOCAL_DNS.into(), 53);
    let upstream = SocketAddr::new(ODD_DNS.into(), 53);
    let test = test_name!();
    if !can_run(test, &[Need::Tool("dnsperf")]) {
        return;
    }
    let Some((trace, analysed, ())) =
        traced_and_captured_with(test, Scenario::DeadUpstream, &["--slow", "10s"], |lab| {
            lab.dnsperf(
                Pod::Client,
                cache,
                &format!("{servfail} A"),
                50,
                STORM_LASTS,
            )
            .or_fail(format_args!("dnsperf asking {servfail}"));
        })
    else {
        return;
    };
    for (how, trace) in [("trace", &trace), ("analyze of a capture", &analysed)] {
        let storms = trace.servfail_storms();
        let from_the_cache = storms
            .iter()
            .find(|storm| storm.server == cache)
            .or_fail(format_args!("{how}: no storm from the cache:\n{trace}"));
        assert!(
            from_the_cache.per_second >= 10.0 && from_the_cache.share > 0.9,
            "{how}: {from_the_cache:?}"
        );
        assert!(
            storms
                .iter()
                .any(|storm| storm.server == cache && storm.also_storming.contains(&upstream)),
            "{how}: the upstream storms with the cache:\n{trace}"
        );
        trace.assert_no_loop(how);
        assert!(trace.timeouts().is_empty(), "{how}:\n{trace}");
    }
}

/// How long the SERVFAIL storm's load lasts: past the 3 s a storm takes to be one.
const STORM_LASTS: Duration = Duration::from_secs(7);

#[test]
fn a_policy_dropping_a_clients_queries_to_the_cluster_ip_is_a_drop_and_a_timeout() {
    // What a NetworkPolicy denying the client DNS comes to, before kube-proxy's DNAT: the
    // node drops its queries to the ClusterIP. The client asks twice, as resolvers retry.
    let test = test_name!();
    let service = SocketAddr::new(CLUSTER_DNS.into(), 53);
    let Some((trace, analysed, ())) = traced_and_captured(test, Scenario::Healthy, |lab| {
        let rules = format!(
            "add table inet netpol; \
             add chain inet netpol pre {{ type filter hook prerouting priority -150; }}; \
             add rule inet netpol pre ip saddr {} ip daddr {CLUSTER_DNS} udp dport 53 drop",
            Pod::Client.ip()
        );
        add_policy(lab, &rules);
        for _ in 0..2 {
            let _ = lab.dig(Pod::Client, &CLUSTER_DNS.to_string(), &[EXTERNAL_NAME]);
        }
        thread::sleep(TIMEOUT_REPORTED_WITHIN);
        // A capture's clock is its packets: one past the timeout shows that it ran that long.
        lab.dig_or_fail(Pod::Client, &node_cache(), &[EXTERNAL_NAME]);
    }) else {
        return;
    };
    for (how, trace) in [("trace", &trace), ("analyze of a capture", &analysed)] {
        trace.assert_no_loop(how);
        assert!(
            trace.timeouts().iter().any(|timeout| timeout.server == service
                && timeout.client.ip() == Pod::Client.ip()),
            "{how}: no timeout naming {service} for the client:\n{trace}"
        );
    }
    // Live, the kernel says where and why.
    assert_netfilter_drop_in_the_node(&trace, service, "the client's query");
}

#[test]
fn a_policy_dropping_corednss_queries_to_its_upstream_is_a_drop_and_timeouts() {
    // What a NetworkPolicy limiting CoreDNS's egress comes to: the node drops its forwards to
    // the upstream. The client asks through the node cache, which forwards everything to the
    // ClusterIP (slow-upstream's caches do): the question goes pod -> cache -> CoreDNS pod ->
    // node, where it is dropped, so it comes back into the namespace that forwarded it without
    // being taken in there.
    let test = test_name!();
    let upstream = SocketAddr::new(UPSTREAM_DNS.into(), 53);
    let blocked = format!("blocked.{EXTERNAL_NAME}");
    let Some((trace, analysed, ())) = traced_and_captured(test, Scenario::SlowUpstream, |lab| {
        // Before the policy, as in any capture of a node that ran a while, the upstream
        // answers from where it is.
        lab.dig_or_fail(Pod::Client, &node_cache(), &[EXTERNAL_NAME]);
        let rules = format!(
            "add table inet netpol; \
             add chain inet netpol forward {{ type filter hook forward priority 0; }}; \
             add rule inet netpol forward ip daddr {UPSTREAM_DNS} udp dport 53 drop"
        );
        add_policy(lab, &rules);
        for _ in 0..2 {
            let _ = lab.dig(Pod::Client, &node_cache(), &[&blocked]);
        }
        thread::sleep(TIMEOUT_REPORTED_WITHIN);
        // A capture's clock is its packets: one past the timeout shows that it ran that long.
        lab.dig_or_fail(Pod::Client, &node_cache(), &[CLUSTER_NAME]);
    }) else {
        return;
    };
    assert_no_loop_and_a_timeout(&trace, &analysed, upstream, &blocked);
    assert_netfilter_drop_in_the_node(&trace, upstream, "CoreDNS's forward");
}

/// Neither `trace` nor `analysed` (of a capture of the same traffic) reports a loop or a
/// possible one, and each reports a timeout naming `server` for `name`: by name, or counted with
/// its siblings under their domain.
fn assert_no_loop_and_a_timeout(trace: &Trace, analysed: &Trace, server: SocketAddr, name: &str) {
    let name = fqdn(name);
    let domain = name.split_once('.').map(|(_, domain)| domain);
    for (how, trace) in [("trace", trace), ("analyze of a capture", analysed)] {
        trace.assert_no_loop(how);
        assert!(
            trace
                .timeouts()
                .iter()
                .any(|timeout| timeout.server == server
                    && (timeout.qname == name || timeout.names_under.as_deref() == domain)),
            "{how}: no timeout naming {server} for {name}:\n{trace}"
        );
    }
}

/// Adds nftables `rules` in the lab's node, as a NetworkPolicy's come to.
fn add_policy(lab: &Lab, rules: &str) {
    let added = lab.exec(lab.node_ns(), &["nft", rules]).expect("nft runs");
    assert!(added.status.success(), "nft refused the rule: {added:?}");
}

/// `trace` shows the kernel dropping `what`, a query to `server`, in the node, by a rule.
fn assert_netfilter_drop_in_the_node(trace: &Trace, server: SocketAddr, what: &str) {
    assert!(
        trace
            .drops()
            .iter()
            .any(|dropped| dropped.reason == "NETFILTER_DROP"
                && dropped.dst == server
                && dropped.namespace.as_deref() == Some("node")),
        "no NETFILTER_DROP of {what} to {server} in the node:\n{trace}"
    );
}

#[test]
fn clients_beside_the_forwarders_asking_again_are_no_loop() {
    // Processes in the CoreDNS pod (a sidecar, a health check) and on the node ask the node
    // cache stub names, dig's tries a second apart with new ids. Each question goes pod ->
    // cache -> ClusterIP -> a CoreDNS pod -> dead server, so a try that follows one the
    // ClusterIP sent to the asker's own pod leaves a namespace that has taken the question in:
    // asking again, not sending it on. Three names from the pod: the ClusterIP picks a pod at
    // random, so that some try follows one sent to its own.
    let test = test_name!();
    let dead = SocketAddr::new(DEAD_DNS.into(), 53);
    let names = [
        "sidecar1.corp.example",
        "sidecar2.corp.example",
        "sidecar3.corp.example",
        "host.corp.example",
    ];
    let Some((trace, analysed, ())) = traced_and_captured(test, Scenario::DeadUpstream, |lab| {
        let tries = ["dig", "+tries=3", "+timeout=1", "@169.254.25.10"];
        let coredns = lab.pod_ns(Pod::CoreDnsA);
        let askers = [&coredns, &coredns, &coredns, lab.node_ns()];
        thread::scope(|scope| {
            for (namespace, name) in askers.into_iter().zip(names) {
                scope.spawn(move || {
                    let argv = [&tries[..], &[name]].concat();
                    let _ = lab.exec(namespace, &argv);
                });
            }
        });
        thread::sleep(TIMEOUT_REPORTED_WITHIN);
        // A capture's clock is its packets: one past the timeout shows that it ran that long.
        lab.dig_or_fail(Pod::Client, &node_cache(), &[CLUSTER_NAME]);
    }) else {
        return;
    };
    for name in names {
        assert_no_loop_and_a_timeout(&trace, &analysed, dead, name);
    }
}

#[test]
fn a_dns_pod_deleted_in_the_middle_of_a_lookup_is_a_timeout_naming_it() {
    // The client asks CoreDNS pod A a name it forwards to a server that never answers; while
    // the lookup waits, the pod goes (its veth is deleted, as when its sandbox is torn down),
    // and the client asks again, now of pod B.
    let coredns_a = SocketAddr::new(Pod::CoreDnsA.ip().into(), 53);
    let name = format!("db.{}", dead_stub_domains()[0].0);
    let test = test_name!();
    let Some((trace, analysed, ())) = traced_and_captured(test, Scenario::DeadUpstream, |lab| {
        thread::scope(|scope| {
            let asking = scope.spawn(|| {
                let _ = lab.dig(Pod::Client, &Pod::CoreDnsA.ip().to_string(), &[&name]);
            });
            thread::sleep(Duration::from_millis(300));
            let deleted = lab
                .exec(
                    lab.node_ns(),
                    &["ip", "link", "del", &Pod::CoreDnsA.host_veth()],
                )
                .expect("ip runs");
            assert!(deleted.status.success(), "deleting the veth: {deleted:?}");
            asking.join().expect("dig runs");
        });
        let _ = lab.dig(Pod::Client, &Pod::CoreDnsB.ip().to_string(), &[&name]);
        thread::sleep(TIMEOUT_REPORTED_WITHIN);
    }) else {
        return;
    };
    assert_no_loop_and_a_timeout(&trace, &analysed, coredns_a, &name);
}

/// The client's port for the flow conntrack keeps after its backend goes.
const STALE_FLOW_PORT: u16 = 40404;

/// The backend conntrack translated the client's flow from `port` to, as `conntrack -L` says.
fn conntrack_backend(lab: &Lab, port: u16) -> IpAddr {
    let output = lab
        .exec(
            lab.node_ns(),
            &[
                "conntrack",
                "-L",
                "-p",
                "udp",
                "--orig-port-src",
                &port.to_string(),
            ],
        )
        .or_fail("conntrack -L");
    let listed = String::from_utf8_lossy(&output.stdout);
    // `udp 17 29 src=C dst=SERVICE sport=P dport=53 src=BACKEND dst=C ...`: the reply tuple's
    // source.
    listed
        .split_whitespace()
        .filter_map(|field| field.strip_prefix("src="))
        .nth(1)
        .and_then(|backend| backend.parse().ok())
        .or_fail(format_args!(
            "no translated flow from port {port}:\n{listed}"
        ))
}

#[test]
fn a_flow_conntrack_keeps_on_a_gone_dns_pod_is_a_timeout_naming_the_stale_entry() {
    // The client asks the ClusterIP from one socket, answered by the pod conntrack chose; that
    // pod goes (its veth deleted, its endpoint not flushed from conntrack, as kubernetes#125467
    // leaves it), and the client asks again on the same socket: conntrack still sends the flow
    // to the gone pod.
    let test = test_name!();
    if !can_run(test, &[Need::Tool("conntrack")]) {
        return;
    }
    let service = SocketAddr::new(CLUSTER_DNS.into(), 53);
    let Some((trace, (answered, gone, answered_again))) = traced(test, Scenario::Healthy, |lab| {
        let client = lab.netns_path(&lab.pod_ns(Pod::Client));
        let asked = dns_query::ask_around(&client, service, CLUSTER_NAME, STALE_FLOW_PORT, || {
            let backend = conntrack_backend(lab, STALE_FLOW_PORT);
            let pod = Pod::COREDNS
                .into_iter()
                .find(|pod| IpAddr::V4(pod.ip()) == backend)
                .or_fail(format_args!("{backend} is no CoreDNS pod"));
            let deleted = lab
                .exec(lab.node_ns(), &["ip", "link", "del", &pod.host_veth()])
                .or_fail("ip runs");
            assert!(deleted.status.success(), "deleting the veth: {deleted:?}");
            backend
        })
        .or_fail("asking the ClusterIP around the pod's going");
        thread::sleep(TIMEOUT_REPORTED_WITHIN);
        asked
    }) else {
        return;
    };
    assert!(answered && !answered_again, "answered, then not:\n{trace}");
    let timeout = trace
        .timeouts()
        .into_iter()
        .find(|timeout| timeout.server == service && timeout.client.port() == STALE_FLOW_PORT)
        .or_fail(format_args!(
            "no timeout of the client's flow to {service}:\n{trace}"
        ));
    let stale = timeout
        .stale_conntrack
        .or_fail(format_args!("the timeout names the stale entry:\n{trace}"));
    assert_eq!(
        (stale.original_dst, stale.reply_src),
        (service, SocketAddr::new(gone, 53)),
        "{trace}"
    );
    assert!(
        timeout.summary.contains(&format!(
            "conntrack -D -p udp --orig-src {} --orig-port-src {STALE_FLOW_PORT}",
            Pod::Client.ip()
        )),
        "the summary says how to remove it: {}",
        timeout.summary
    );
    trace.assert_no_loop("trace");
}

#[test]
fn a_client_retrying_a_dead_server_directly_times_out_naming_it() {
    // No forwarder is involved: only the client's own query, sent again after a second on the
    // same socket with the same id, as glibc retries.
    let Some((trace, _)) = traced(test_name!(), Scenario::DeadUpstream, |lab| {
        let client_ns = lab.netns_path(&lab.pod_ns(Pod::Client));
        let replies = dns_query::send_twice(
            &client_ns,
            dns_server(DEAD_DNS),
            EXTERNAL_NAME,
            0x5151,
            Duration::from_secs(1),
        )
        .expect("query sent twice");
        assert_eq!(replies, 0, "nothing answers at {DEAD_DNS}");
        thread::sleep(TIMEOUT_REPORTED_WITHIN);
    }) else {
        return;
    };
    let dead = dns_server(DEAD_DNS);
    let timeout = trace
        .timeouts()
        .into_iter()
        .find(|timeout| timeout.server == dead)
        .or_fail(format_args!("no timeout naming {dead}:\n{trace}"));
    assert_eq!(timeout.qname, fqdn(EXTERNAL_NAME), "{trace}");
    assert_eq!(timeout.client.ip(), Pod::Client.ip(), "{trace}");
    assert_eq!(timeout.id, 0x5151, "{trace}");
    assert!(timeout.waited_ms >= 2_000, "{trace}");
    assert_eq!(
        trace.timeouts().len(),
        1,
        "one query, retried once, is one timeout:\n{trace}"
    );
}

#[test]
fn a_query_asked_once_and_never_answered_times_out_and_answers_are_counted_per_server() {
    // One try, never resent: nothing about it is streamed, so dnsloop learns of it from the
    // kernel's query table once it has waited past the timeout.
    let Some((trace, _)) = traced(test_name!(), Scenario::DeadUpstream, |lab| {
        lab.dig_or_fail(
            Pod::Client,
            &DEAD_DNS.to_string(),
            &["+tries=1", "+timeout=1", CLUSTER_NAME],
        );
        for _ in 0..3 {
            lab.dig_answers(
                Pod::Client,
                &node_cache(),
                &[EXTERNAL_NAME],
                &EXTERNAL_A.to_string(),
            );
        }
        thread::sleep(TIMEOUT_REPORTED_WITHIN);
    }) else {
        return;
    };
    let dead = dns_server(DEAD_DNS);
    let timeouts = trace.timeouts();
    let [timeout] = timeouts.as_slice() else {
        panic!("exactly one timeout, for the query asked once:\n{trace}");
    };
    assert_eq!(timeout.server, dead, "{trace}");
    assert_eq!(timeout.qname, fqdn(CLUSTER_NAME), "{trace}");
    assert_eq!(timeout.client.ip(), Pod::Client.ip(), "{trace}");

    // The kernel times every answer, streamed or not: the node cache answered the client thrice.
    let servers = &trace.summary().servers;
    let node_cache = servers
        .iter()
        .find(|server| server.server == dns_server(NODE_LOCAL_DNS))
        .or_fail(format_args!(
            "no answers counted for the node cache:\n{trace}"
        ));
    assert_eq!(node_cache.answered, 3, "{trace}");
    assert!(
        servers.iter().all(|server| server.server != dead),
        "the dead server answered nothing:\n{trace}"
    );
}

/// The search list of a pod in namespace `default` (ndots 5) tried for `api`, in order.
const SEARCH_LIST_EXPANSION: [&str; 4] = [
    "api.default.svc.cluster.local",
    "api.svc.cluster.local",
    "api.cluster.local",
    "api",
];

/// How many times the healthy client asks for one name in a row.
const REPEATED_QUERIES: u64 = 30;

/// Legitimate traffic that repeats itself, as a busy node's does: none of it is a fault.
fn repetitive_legitimate_traffic(lab: &Lab) {
    let cache = node_cache();
    let external_a = EXTERNAL_A.to_string();

    // The same name over and over, each time with a new id.
    for _ in 0..REPEATED_QUERIES {
        lab.dig_answers(Pod::Client, &cache, &[EXTERNAL_NAME], &external_a);
    }

    // A retry: the same query, same id and port, sent again.
    let client_ns = lab.netns_path(&lab.pod_ns(Pod::Client));
    let replies = dns_query::send_twice(
        &client_ns,
        dns_server(NODE_LOCAL_DNS),
        EXTERNAL_NAME,
        0x4242,
        Duration::ZERO,
    )
    .expect("query sent twice");
    assert!(
        replies >= 1,
        "the node cache should answer the retried query"
    );

    // A short name tried through the search list: NXDOMAIN for all but the first.
    for name in SEARCH_LIST_EXPANSION {
        let outcome = lab.dig_or_fail(Pod::Client, &cache, &[name]);
        assert!(
            outcome.status.is_some(),
            "dig @{cache} {name}:\n{}",
            outcome.stdout
        );
    }

    // Two clients after the same external name at once: the client pod through the cache,
    // and a CoreDNS pod straight at the upstream, as CoreDNS forwards.
    let upstream = format!("@{UPSTREAM_DNS}");
    let coredns = lab
        .spawn(
            &lab.pod_ns(Pod::CoreDnsA),
            &["dig", "+tries=1", "+timeout=1", &upstream, EXTERNAL_NAME],
        )
        .expect("dig starts in coredns-a");
    lab.dig_answers(Pod::Client, &cache, &[EXTERNAL_NAME], &external_a);
    let coredns = coredns.wait_with_output().expect("dig ends in coredns-a");
    let coredns_stdout = String::from_utf8_lossy(&coredns.stdout);
    assert!(
        coredns_stdout.contains("status: NOERROR"),
        "{coredns_stdout}"
    );

    // Cluster names through the ClusterIP and through the cache, over UDP and TCP, IPv4 and
    // IPv6.
    for server in [
        CLUSTER_DNS.to_string(),
        cache.clone(),
        CLUSTER_DNS_V6.to_string(),
        NODE_LOCAL_DNS_V6.to_string(),
    ] {
        for transport in ["+notcp", "+tcp"] {
            lab.dig_answers(
                Pod::Client,
                &server,
                &[transport, CLUSTER_NAME],
                CLUSTER_NAME_ADDRESS,
            );
        }
    }
    // External names over TCP and IPv6.
    lab.dig_answers(Pod::Client, &cache, &["+tcp", EXTERNAL_NAME], &external_a);
    lab.dig_answers(
        Pod::Client,
        &NODE_LOCAL_DNS_V6.to_string(),
        &[EXTERNAL_NAME, "AAAA"],
        &EXTERNAL_AAAA.to_string(),
    );
}

#[test]
fn healthy_repetitive_traffic_is_not_a_fault() {
    let Some((trace, analysed, ())) = traced_and_captured(test_name!(), Scenario::Healthy, |lab| {
        repetitive_legitimate_traffic(lab);
        // Anything left unanswered would be reported by now.
        thread::sleep(TIMEOUT_REPORTED_WITHIN);
        // A capture's clock is its packets: one past the timeout shows that it ran that long.
        lab.dig_or_fail(Pod::Client, &node_cache(), &[CLUSTER_NAME]);
    }) else {
        return;
    };
    analysed.assert_no_loop("analyze of a capture");
    assert!(
        analysed.unexpected_sources().is_empty() && analysed.timeouts().is_empty(),
        "analyze of a capture: every query answered from where it went:\n{analysed}"
    );

    // A quiet trace means something only if the tracer saw the traffic.
    let client_queries = trace
        .summary()
        .dns_packets(&Pod::Client.host_veth(), "ingress");
    assert!(
        client_queries >= REPEATED_QUERIES,
        "dnsloop counted {client_queries} DNS packets from the client:\n{trace}"
    );
    trace.assert_no_loop("trace");
    assert!(
        trace.unexpected_sources().is_empty(),
        "every reply came from where its query went:\n{trace}"
    );
    assert!(
        trace.timeouts().is_empty(),
        "every query was answered:\n{trace}"
    );
    assert_eq!(trace.summary().lost_events(), 0, "{trace}");
}

#[test]
fn another_labs_traffic_stays_out_of_the_trace() {
    let test = test_name!();
    if !can_run(test, &[Need::Root, Need::DnsloopBinary]) {
        return;
    }
    // Two nodes on one host, built alike: same addresses, same interface numbers. dnsloop on
    // the idle one must not watch the other's pods, whose loopback carries a looping query.
    let idle = Lab::builder(Scenario::Healthy)
        .start()
        .or_fail("bringing up the idle lab");
    let looping = Lab::builder(Scenario::SelfLoop)
        .beside(&idle)
        .start()
        .or_fail("bringing up the looping lab");
    let (trace, _) = trace_lab(test, &idle, &[], |_| {
        looping.dig_or_fail(
            Pod::Client,
            &Pod::CoreDnsA.ip().to_string(),
            &[EXTERNAL_NAME],
        )
    });

    assert!(trace.loops().is_empty(), "{trace}");
    assert_eq!(
        trace.summary().observations,
        0,
        "nothing was sent on this node, yet dnsloop observed DNS:\n{trace}"
    );
}

/// Drops every IP fragment but the first in namespace `ns` of `lab`, in a chain of `family` on
/// `hook`, and has the hosts of `giving_up` give a datagram up 2 s after its first fragment
/// (30 s by default).
fn lose_later_fragments(
    lab: &Lab,
    test: &str,
    ns: &str,
    giving_up: &str,
    family: &str,
    hook: &str,
) {
    let chain = format!("add chain {family} lose-fragments later {{ type filter {hook}; }}");
    let rule = format!("add rule {family} lose-fragments later ip frag-off & 0x1fff != 0 drop");
    for (ns, argv) in [
        (giving_up, &["sysctl", "-qw", "net.ipv4.ipfrag_time=2"][..]),
        (ns, &["nft", "add", "table", family, "lose-fragments"]),
        (ns, &["nft", &chain]),
        (ns, &["nft", &rule]),
    ] {
        let output = lab.exec(ns, argv).or_fail(test);
        assert!(
            output.status.success(),
            "{argv:?} in {ns}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

#[test]
fn a_large_reply_whose_fragments_never_reach_the_client_is_lost_to_fragmentation() {
    // The upstream answers a large name with 200 records whatever EDNS size is asked: 3,2xx
    // bytes over UDP, in three IP fragments. First, nothing on the way drops fragments: the
    // client gets every record, and nothing is reported. Then a rule in the client's namespace
    // drops every fragment but the first before reassembly (prerouting at -450, before
    // conntrack's defragmentation at -400), as a firewall passing no fragment without ports
    // does; the client's kernel holds the first fragment, gives up after ipfrag_time (2 s
    // here, 30 s by default) as FRAG_REASM_TIMEOUT, and sends the server an ICMP "fragment
    // reassembly time exceeded". dig times out. The trace sees the kernel's drop, analyze of
    // the capture the ICMP: both name the reply lost, its sizes and the fix.
    let (whole, lost) = (
        fqdn(&format!("whole.{LARGE_ANSWER_ZONE}")),
        fqdn(&format!("lost.{LARGE_ANSWER_ZONE}")),
    );
    let server = ODD_DNS.to_string();
    let test = test_name!();
    let Some((trace, analysed, (delivered, timed_out))) =
        traced_and_captured(test, Scenario::DeadUpstream, |lab| {
            let asked = ["+bufsize=4096", "+tries=1", "+timeout=3"];
            let delivered =
                lab.dig_or_fail(Pod::Client, &server, &[&asked[..], &[&whole]].concat());
            let client = lab.pod_ns(Pod::Client);
            lose_later_fragments(
                lab,
                test,
                &client,
                &client,
                "ip",
                "hook prerouting priority -450",
            );
            let timed_out = lab.dig_or_fail(Pod::Client, &server, &[&asked[..], &[&lost]].concat());
            // The query after it moves a capture's time past the reply's reassembly.
            lab.dig_or_fail(Pod::Client, &node_cache(), &[CLUSTER_NAME]);
            (delivered, timed_out)
        })
    else {
        return;
    };
    assert_eq!(
        delivered.answers.len(),
        200,
        "{whole} arrives whole:\n{}",
        delivered.stdout
    );
    assert_eq!(
        timed_out.status, None,
        "{lost} never arrives:\n{}",
        timed_out.stdout
    );
    for (how, trace) in [("trace", &trace), ("analyze of a capture", &analysed)] {
        let found = trace.fragmented_replies_lost();
        assert_eq!(found.len(), 1, "{how}: one reply lost:\n{trace}");
        let found = found[0];
        assert_eq!(
            (found.qname.as_str(), found.server, found.count),
            (lost.as_str(), SocketAddr::new(ODD_DNS.into(), 53), 1),
            "{how}: {found:?}"
        );
        assert_eq!(found.client.ip(), IpAddr::V4(Pod::Client.ip()), "{found:?}");
        assert_eq!(found.lost.reason, "FRAG_REASM_TIMEOUT", "{how}: {found:?}");
        assert_eq!(found.first_fragment, Some(1500), "{how}: {found:?}");
        assert!(
            found.size.is_some_and(|size| size > 3_000),
            "{how}: {found:?}"
        );
        assert!(
            found.summary.contains("bufsize 1232"),
            "{how}: {}",
            found.summary
        );
        assert!(
            trace
                .drops()
                .iter()
                .all(|drop| drop.qname.as_deref() != Some(whole.as_str())),
            "{how}: the reply delivered whole was not dropped:\n{trace}"
        );
        trace.assert_no_loop(how);
    }
    // Every packet is analysed: the query's EDNS size, and where the reply went.
    let found = analysed.fragmented_replies_lost()[0];
    assert_eq!(found.edns_udp_size, Some(4096), "{found:?}");
    let client = format!("host {}", Pod::Client.ip());
    assert_eq!(
        (
            found.seen.first().and_then(|hop| hop.enters.as_deref()),
            found.seen.last().and_then(|hop| hop.enters.as_deref()),
            found.lost.namespace.as_deref(),
        ),
        (Some("node"), Some(client.as_str()), Some(client.as_str())),
        "the reply's first fragment came in to the node and on to the client, which gave it \
         up: {found:?}"
    );
    // The tracer knows the namespace the kernel gave it up in.
    let found = trace.fragmented_replies_lost()[0];
    assert!(
        found
            .lost
            .namespace
            .as_deref()
            .is_some_and(|namespace| namespace.starts_with("pod ")),
        "{found:?}"
    );
}

#[test]
fn a_large_reply_whose_later_fragments_the_network_drops_is_given_up_on_the_node() {
    // The fragments after the first are lost before the node: the upstream's uplink drops
    // them, as a network passing no fragment without ports does. The node's conntrack holds
    // the first one to reassemble the reply and gives it up there as FRAG_REASM_TIMEOUT, with
    // no ICMP (the kernel sends none for a datagram it only forwards). The trace names the
    // reply lost on the node; a capture shows no host giving it up: analyze reports the
    // query's timeout, and claims no fragmentation.
    let lost = fqdn(&format!("lost.{LARGE_ANSWER_ZONE}"));
    let server = ODD_DNS.to_string();
    let test = test_name!();
    let Some((trace, analysed, timed_out)) =
        traced_and_captured(test, Scenario::DeadUpstream, |lab| {
            lose_later_fragments(
                lab,
                test,
                lab.upstream_ns(),
                lab.node_ns(),
                "netdev",
                "hook egress device eth0 priority 0",
            );
            let asked = ["+bufsize=4096", "+tries=1", "+timeout=3", lost.as_str()];
            let timed_out = lab.dig_or_fail(Pod::Client, &server, &asked);
            lab.dig_or_fail(Pod::Client, &node_cache(), &[CLUSTER_NAME]);
            timed_out
        })
    else {
        return;
    };
    assert_eq!(timed_out.status, None, "{}", timed_out.stdout);
    let found = trace.fragmented_replies_lost();
    assert_eq!(found.len(), 1, "one reply lost:\n{trace}");
    let found = found[0];
    assert_eq!(
        (
            found.qname.as_str(),
            found.lost.reason.as_str(),
            found.lost.namespace.as_deref(),
            found.lost.device.as_deref(),
        ),
        (
            lost.as_str(),
            "FRAG_REASM_TIMEOUT",
            Some("node"),
            Some("eth0")
        ),
        "{found:?}"
    );
    assert!(
        analysed.fragmented_replies_lost().is_empty(),
        "a capture shows no host giving the reply up:\n{analysed}"
    );
    for (how, trace) in [("trace", &trace), ("analyze of a capture", &analysed)] {
        assert!(
            trace.timeouts().iter().any(|timeout| timeout.qname == lost),
            "{how}: the query timed out:\n{trace}"
        );
    }
}
