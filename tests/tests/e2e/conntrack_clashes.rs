//! The conntrack clash behind Kubernetes' 5-second DNS timeouts: a resolver's A and AAAA queries
//! sent at once from one socket to the ClusterIP race, on two CPUs, to insert one flow's
//! conntrack entry. Linux since 5.6 resolves most such clashes (`clashres`), so the race is
//! survived and no query is dropped; dnsloop counts the clashes, resolved or not, in its
//! summary and its metrics.
use std::{net::SocketAddr, time::Duration};

use dnsloop_core::doctor::parse_conntrack_stats;
use dnsloop_tests::or_fail::OrFail as _;
use dnsloop_tests::test_name;
use dnsloop_tests::{
    dns_query,
    findings::Trace,
    lab::{Lab, Pod, Scenario, CLUSTER_DNS},
    privilege::{can_run, dnsloop_bin, Need},
    scrape::{sample, scrape_until},
    tracer::Tracer,
};

const METRICS_ADDRESS: &str = "127.0.0.1:9554";
/// Enough for the race to be resolved many times: about 1,000 resolved clashes in 4,000 pairs
/// on this project's machines.
const PAIRS: u32 = 4_000;
/// The race stops by itself after the pairs or this long, whichever comes first.
const RACE_LASTS_AT_MOST: Duration = Duration::from_secs(30);

/// The node's clashes resolved since boot, summed over CPUs as `conntrack -S` shows them, read
/// as doctor and the tracer read them.
fn resolved_on_the_node(lab: &Lab) -> u64 {
    let output = lab
        .exec(lab.node_ns(), &["cat", "/proc/net/stat/nf_conntrack"])
        .or_fail("reading the node's conntrack counters");
    let text = String::from_utf8_lossy(&output.stdout);
    parse_conntrack_stats(&text)
        .ok()
        .and_then(|stats| stats.clashes_resolved)
        .or_fail(format_args!("no clashres column:\n{text}"))
}

#[test]
fn a_and_aaaa_racing_to_the_cluster_ip_are_counted_as_conntrack_clashes() {
    let test = test_name!();
    if !can_run(test, &[Need::Root, Need::DnsloopBinary]) {
        return;
    }
    let lab = Lab::builder(Scenario::Healthy).start().or_fail(test);
    let tracer = Tracer::start(
        &dnsloop_bin(),
        &lab,
        lab.node_ns(),
        &["--output", "json", "--metrics-addr", METRICS_ADDRESS],
    )
    .or_fail(test);
    let server = SocketAddr::new(CLUSTER_DNS.into(), 53);
    let raced = dns_query::race_a_and_aaaa(
        &lab.netns_path(&lab.pod_ns(Pod::Client)),
        server,
        "kubernetes.default.svc.cluster.local",
        PAIRS,
        RACE_LASTS_AT_MOST,
    )
    .or_fail(format_args!("{test}: racing A and AAAA to {server}"));
    // The node's own count once the race is over, which a scrape shows within a few seconds
    // (the tracer reads it every second).
    let on_the_node = resolved_on_the_node(&lab);
    let url = format!("http://{METRICS_ADDRESS}/metrics");
    let resolved_served =
        |exposition: &str| sample(exposition, "dnsloop_conntrack_clashes_resolved_total", &[]);
    let exposition = scrape_until(&lab, &url, |exposition| {
        resolved_served(exposition) >= Some(on_the_node as f64)
    });
    let served = resolved_served(&exposition);
    let trace = Trace::from_output(tracer.interrupt().or_fail(test)).or_fail(test);

    let conntrack = trace
        .summary()
        .kernel()
        .and_then(|kernel| kernel.conntrack)
        .or_fail(format_args!("no conntrack counts in the summary:\n{trace}"));
    let resolved = conntrack.clashes_resolved.or_fail(format_args!(
        "this kernel counts resolved clashes:\n{trace}"
    ));
    eprintln!(
        "{test}: {raced} pairs raced: {resolved} clashes resolved, {} insert_failed, {} dropped",
        conntrack.insert_failed, conntrack.drop
    );
    assert!(
        resolved > 0,
        "{raced} pairs raced and no clash resolved:\n{trace}"
    );
    assert_eq!(
        served,
        Some(on_the_node as f64),
        "the metric is the node's count since boot:\n{exposition}"
    );
    assert!(
        on_the_node >= resolved,
        "{on_the_node} on the node, {resolved} in the run"
    );
    assert!(
        exposition.contains("dnsloop_conntrack_drops_total "),
        "{exposition}"
    );
    assert!(trace.loops().is_empty(), "a race is no loop:\n{trace}");
}
