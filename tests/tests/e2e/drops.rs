//! dnsloop names the DNS packets the kernel drops, why and where, and ties a timeout to the
//! drop that caused it.
//!
//! Each test makes the lab's kernel drop DNS one way an operator meets: a NetworkPolicy-like
//! nftables rule, a DNS server that stops reading its socket, a port nobody listens on. The
//! tracer runs in the node namespace as in `detect.rs`.
use std::{thread, time::Duration};

use dnsloop_core::schema::DropRecord;
use dnsloop_tests::or_fail::OrFail as _;
use dnsloop_tests::test_name;
use dnsloop_tests::{
    dns_query,
    findings::{fqdn, Trace},
    lab::{dns_server, Lab, Pod, Scenario, Server, EXTERNAL_NAME},
    privilege::{can_run, dnsloop_bin, Need},
    tracer::Tracer,
};

/// dnsloop's query timeout (2 s) plus room for the tracer to notice.
const TIMEOUT_REPORTED_WITHIN: Duration = Duration::from_millis(2_500);

/// Brings up the healthy lab, lets `prepare` break it, runs `dnsloop trace --output json` on its
/// node while `traffic` runs, and returns what the tracer printed. `None` when this host cannot
/// run the test (it fails instead under `CI=true`).
fn traced(
    test: &str,
    prepare: impl FnOnce(&mut Lab),
    traffic: impl FnOnce(&Lab),
) -> Option<(Trace, Lab)> {
    if !can_run(test, &[Need::Root, Need::DnsloopBinary]) {
        return None;
    }
    let mut lab = Lab::builder(Scenario::Healthy).start().or_fail(test);
    prepare(&mut lab);
    let tracer =
        Tracer::start(&dnsloop_bin(), &lab, lab.node_ns(), &["--output", "json"]).or_fail(test);
    traffic(&lab);
    let output = tracer.interrupt().or_fail(test);
    let trace = Trace::from_output(output).or_fail(test);
    Some((trace, lab))
}

/// The drop reports for `reason`, or a failure showing everything the tracer printed.
fn drops_for<'a>(trace: &'a Trace, reason: &str) -> Vec<&'a DropRecord> {
    let drops: Vec<&DropRecord> = trace
        .drops()
        .into_iter()
        .filter(|found| found.reason == reason)
        .collect();
    assert!(!drops.is_empty(), "no drop reported as {reason}:\n{trace}");
    drops
}

/// The summary's count of drops for `reason`.
fn counted(trace: &Trace, reason: &str) -> u64 {
    let dnsloop_core::schema::SummarySource::Kernel(kernel) = &trace.summary().source else {
        panic!("a trace's summary has the kernel's numbers:\n{trace}");
    };
    let drops = kernel
        .drops
        .as_ref()
        .or_fail(format_args!("drops were not watched:\n{trace}"));
    drops.get(reason).copied().unwrap_or(0)
}

#[test]
fn a_network_policy_dropping_dns_to_a_coredns_pod_is_named_with_its_rule_and_place() {
    let coredns = dns_server(Pod::CoreDnsA.ip());
    let Some((trace, _lab)) = traced(
        test_name!(),
        |lab| {
            // What a NetworkPolicy denying DNS to the pod comes to: a drop in the node's
            // forward path (the client's frames cross the bridge through br_netfilter).
            let rules = format!(
                "add table inet netpol; \
                 add chain inet netpol forward {{ type filter hook forward priority 0; }}; \
                 add rule inet netpol forward ip daddr {} udp dport 53 drop",
                Pod::CoreDnsA.ip()
            );
            let added = lab.exec(lab.node_ns(), &["nft", &rules]).expect("nft runs");
            assert!(added.status.success(), "nft refused the rule: {added:?}");
        },
        |lab| {
            lab.dig_or_fail(
                Pod::Client,
                &Pod::CoreDnsA.ip().to_string(),
                &[EXTERNAL_NAME],
            );
            thread::sleep(TIMEOUT_REPORTED_WITHIN);
        },
    ) else {
        return;
    };
    let drops = drops_for(&trace, "NETFILTER_DROP");
    let drop = drops[0];
    assert_eq!(drop.message, "query", "{trace}");
    assert_eq!(drop.dst, coredns, "{trace}");
    assert_eq!(drop.src.ip(), Pod::Client.ip(), "{trace}");
    assert_eq!(
        drop.qname.as_deref(),
        Some(fqdn(EXTERNAL_NAME).as_str()),
        "{trace}"
    );
    assert_eq!(drop.namespace.as_deref(), Some("node"), "{trace}");
    // nf_hook_slow, or nft_do_chain where the kernel names the drop there (6.18).
    let location = drop.location.as_deref().unwrap_or_default();
    assert!(location.starts_with("nf"), "netfilter dropped it:\n{trace}");

    let timeout = trace
        .timeouts()
        .into_iter()
        .find(|timeout| timeout.server == coredns)
        .or_fail(format_args!("no timeout naming {coredns}:\n{trace}"));
    let dropped = timeout.dropped.as_ref().or_fail(format_args!(
        "the timeout does not say its query was dropped:\n{trace}"
    ));
    assert_eq!(dropped.reason, "NETFILTER_DROP", "{trace}");
    assert!(
        timeout.summary.contains("dropped as NETFILTER_DROP"),
        "{trace}"
    );
    assert!(counted(&trace, "NETFILTER_DROP") >= 1, "{trace}");
}

/// Queries sent to the stuck server at once: far more than its buffer holds.
const BURST: u16 = 200;

#[test]
fn a_dns_server_that_stops_reading_is_named_when_its_socket_buffer_fills() {
    let stuck = dns_server(Pod::CoreDnsB.ip());
    let mut socket = None;
    let Some((trace, _lab)) = traced(
        test_name!(),
        |lab| {
            lab.stop_server(0, Server::CoreDnsB)
                .expect("CoreDNS B stops");
            let netns = lab.netns_path(&lab.pod_ns(Pod::CoreDnsB));
            socket = Some(
                dns_query::stuck_server(&netns, stuck, 2048).expect("a server that never reads"),
            );
        },
        |lab| {
            let client = lab.netns_path(&lab.pod_ns(Pod::Client));
            dns_query::send_burst(&client, stuck, EXTERNAL_NAME, 0x1000, BURST)
                .expect("the burst is sent");
            thread::sleep(TIMEOUT_REPORTED_WITHIN);
        },
    ) else {
        return;
    };
    drop(socket);
    let drops = drops_for(&trace, "SOCKET_RCVBUFF");
    let drop = drops[0];
    assert_eq!(drop.dst, stuck, "{trace}");
    let namespace = drop.namespace.as_deref().unwrap_or_default();
    assert!(
        namespace.starts_with("pod ") && namespace != "node",
        "dropped in the stuck server's pod:\n{trace}"
    );
    let dropped = counted(&trace, "SOCKET_RCVBUFF");
    assert!(
        dropped > 0 && dropped < u64::from(BURST),
        "the buffer held the first queries and dropped the rest ({dropped}):\n{trace}"
    );
    assert!(
        drops.len() <= 3,
        "a storm of drops is a few reports, each with its count:\n{trace}"
    );
    assert_eq!(
        drops.iter().map(|found| found.count).max(),
        Some(dropped),
        "the last report counts every drop:\n{trace}"
    );
}

#[test]
fn a_query_to_a_port_nobody_listens_on_is_dropped_as_no_socket() {
    let gone = dns_server(Pod::CoreDnsB.ip());
    let Some((trace, _lab)) = traced(
        test_name!(),
        |lab| {
            lab.stop_server(0, Server::CoreDnsB)
                .expect("CoreDNS B stops");
        },
        |lab| {
            lab.dig_or_fail(
                Pod::Client,
                &Pod::CoreDnsB.ip().to_string(),
                &[EXTERNAL_NAME],
            );
            thread::sleep(TIMEOUT_REPORTED_WITHIN);
        },
    ) else {
        return;
    };
    let drops = drops_for(&trace, "NO_SOCKET");
    assert_eq!(drops[0].dst, gone, "{trace}");
    assert!(
        drops[0]
            .namespace
            .as_deref()
            .is_some_and(|namespace| namespace.starts_with("pod ")),
        "{trace}"
    );
    assert!(trace.loops().is_empty(), "{trace}");
}
