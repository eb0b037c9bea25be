//! `--slow` names the hop a slow lookup spent its time at, live and in a capture.
//!
//! The lab's slow-upstream node: the client asks the node cache, which forwards to the
//! ClusterIP, DNAT'ed to a CoreDNS pod, which forwards to the upstream beyond the uplink; a
//! dnsdist in front of the upstream holds every answer 150 ms. `dnsloop trace --slow 100ms`
//! runs on the node while tcpdump captures it, then `dnsloop analyze --slow 100ms` reads the
//! capture: both must report the client's lookup with the upstream as its slowest hop.
use std::{net::IpAddr, path::Path};

use dnsloop_core::schema::{LookupRecord, Record};
use dnsloop_tests::or_fail::OrFail as _;
use dnsloop_tests::test_name;
use dnsloop_tests::{
    findings::{fqdn, Trace},
    lab::{
        dns_server, Lab, Pod, Scenario, CLUSTER_DNS, EXTERNAL_A, EXTERNAL_NAME, NODE_LOCAL_DNS,
        UPLINK_DEVICE, UPSTREAM_DNS,
    },
    privilege::{can_run, dnsloop_bin, Need},
    tracer::{self, Tracer},
};

/// Slower than every hop on the lab's node but the upstream (150 ms).
const SLOW: &str = "100ms";
/// Lookups asked: each must be followed.
const LOOKUPS: usize = 3;

fn lookups(trace: &Trace) -> Vec<&LookupRecord> {
    trace
        .records
        .iter()
        .filter_map(|record| match record {
            Record::Lookup(found) => Some(found),
            _ => None,
        })
        .collect()
}

/// Holds `trace`'s lookups to what the client asked: each from the client pod, for the
/// external name, through the node cache, CoreDNS and the upstream beyond the uplink, the
/// upstream's hop the slowest. `how` says where they came from; `live`, whether it was `trace`,
/// which names interfaces and asks conntrack for the ClusterIP behind a DNAT.
fn assert_upstream_was_slowest(trace: &Trace, how: &str, live: bool) {
    let found = lookups(trace);
    assert!(
        !found.is_empty(),
        "{how}: no slow lookup reported:\n{trace}"
    );
    let upstream = dns_server(UPSTREAM_DNS);
    for lookup in &found {
        assert_eq!(lookup.qname, fqdn(EXTERNAL_NAME), "{how}:\n{trace}");
        assert_eq!(
            lookup.client.ip(),
            IpAddr::V4(Pod::Client.ip()),
            "{how}:\n{trace}"
        );
        assert_eq!(lookup.server, dns_server(NODE_LOCAL_DNS), "{how}:\n{trace}");
        assert_eq!(lookup.rcode, "NOERROR", "{how}:\n{trace}");
        assert!(lookup.latency_ms >= 150.0, "{how}:\n{trace}");
        let slowest = &lookup.hops[lookup.slowest];
        assert_eq!(
            slowest.server, upstream,
            "{how}: the slowest hop is the upstream's:\n{trace}"
        );
        assert!(slowest.own_ms >= 140.0, "{how}:\n{trace}");
        // The chain: the client's query, the cache's forward to CoreDNS (through the ClusterIP),
        // CoreDNS's forward to the upstream; where the upstream's namespace has its loopback
        // watched (Linux 6.13 and later), the delaying dnsdist's forward to the resolver behind
        // it too, answered at once.
        let forwards: Vec<Option<usize>> = lookup.hops.iter().map(|hop| hop.forwards).collect();
        assert!(
            forwards.starts_with(&[None, Some(0), Some(1)])
                && forwards[3..].iter().all(|forwards| *forwards == Some(2)),
            "{how}:\n{trace}"
        );
        assert_eq!(lookup.slowest, 2, "{how}:\n{trace}");
        if live {
            assert!(
                slowest.via.as_deref() == Some(UPLINK_DEVICE)
                    || slowest.to.as_deref() == Some(format!("netns {UPSTREAM_DNS}").as_str()),
                "{how}: the upstream is beyond the uplink:\n{trace}"
            );
        }
        let to_coredns = &lookup.hops[1];
        let reached = to_coredns.backend.unwrap_or(to_coredns.server);
        assert!(
            Pod::COREDNS
                .iter()
                .any(|pod| reached == dns_server(pod.ip())),
            "{how}: the cache's forward reaches a CoreDNS pod:\n{trace}"
        );
        if live {
            // The node's own query was DNAT'ed before any watched point; conntrack names the
            // service it was sent to.
            assert_eq!(
                to_coredns.server,
                dns_server(CLUSTER_DNS),
                "{how}: the cache's forward goes to the ClusterIP:\n{trace}"
            );
        }
        assert!(
            lookup.summary.contains(&upstream.to_string()),
            "{how}: {}",
            lookup.summary
        );
    }
    let summary = trace.summary();
    let followed = summary
        .lookups
        .as_ref()
        .or_fail(format_args!("{how}: the summary has no lookups:\n{trace}"));
    assert!(followed.followed >= LOOKUPS as u64, "{how}:\n{trace}");
    assert_eq!(followed.reported, found.len() as u64, "{how}:\n{trace}");
    let at_upstream = followed
        .hops
        .iter()
        .find(|times| times.server == upstream)
        .or_fail(format_args!(
            "{how}: no times for the upstream's hops:\n{trace}"
        ));
    assert!(at_upstream.p50_ms >= 140.0, "{how}:\n{trace}");
}

#[test]
fn slow_lookups_name_the_upstream_as_the_slow_hop_live_and_in_a_capture() {
    let test = test_name!();
    if !can_run(
        test,
        &[Need::Root, Need::Tool("tcpdump"), Need::DnsloopBinary],
    ) {
        return;
    }
    let files = tempfile::tempdir().expect("a temporary directory");
    let capture_file = files.path().join("node.pcap");
    let lab = Lab::builder(Scenario::SlowUpstream).start().or_fail(test);
    let capture = lab
        .capture_pcap(lab.node_ns(), "any", "port 53", &capture_file)
        .or_fail(test);
    let tracer = Tracer::start(
        &dnsloop_bin(),
        &lab,
        lab.node_ns(),
        &["--output", "json", "--slow", SLOW],
    )
    .or_fail(test);
    for _ in 0..LOOKUPS {
        lab.dig_answers(
            Pod::Client,
            &NODE_LOCAL_DNS.to_string(),
            &[EXTERNAL_NAME],
            &EXTERNAL_A.to_string(),
        );
    }
    let output = tracer.interrupt().or_fail(test);
    capture.stop().or_fail(test);
    let traced = Trace::from_output(output).or_fail(test);
    assert_upstream_was_slowest(&traced, "trace --slow", true);
    assert!(
        traced
            .records
            .iter()
            .all(|record| !matches!(record, Record::Packet(_))),
        "--slow prints no packets:\n{traced}"
    );

    let analysed = analyze_slow(&capture_file);
    // A `tcpdump -i any` capture numbers its interfaces: the uplink is not named.
    assert_upstream_was_slowest(&analysed, "analyze --slow of tcpdump -i any", false);
}

fn analyze_slow(file: &Path) -> Trace {
    tracer::analyze(&dnsloop_bin(), file, &["--slow", SLOW])
        .and_then(Trace::from_output)
        .or_fail(format_args!("dnsloop analyze {}", file.display()))
}
