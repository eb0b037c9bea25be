//! `dnsloop trace --metrics-addr` serves what it sees to Prometheus while it runs: on a node
//! whose CoreDNS forwards back to the node-local cache, a scrape shows the loop, the packets
//! on the bridge, no lost events, and the cache's answer latencies.

use dnsloop_tests::or_fail::OrFail as _;
use dnsloop_tests::test_name;
use dnsloop_tests::{
    lab::{Lab, Pod, Scenario, CLUSTER_RECORDS, EXTERNAL_NAME, NODE_LOCAL_DNS},
    privilege::{can_run, dnsloop_bin, Need},
    scrape::{sample, scrape_until},
    tracer::Tracer,
};

const METRICS_ADDRESS: &str = "127.0.0.1:9553";
#[test]
fn a_scrape_shows_the_loop_the_bridge_traffic_and_answer_latencies() {
    let test = test_name!();
    if !can_run(test, &[Need::Root, Need::DnsloopBinary, Need::Tool("curl")]) {
        return;
    }
    let lab = Lab::builder(Scenario::NodelocalLoop).start().or_fail(test);
    let tracer = Tracer::start(
        &dnsloop_bin(),
        &lab,
        lab.node_ns(),
        &["--output", "json", "--metrics-addr", METRICS_ADDRESS],
    )
    .or_fail(test);

    let node_cache = NODE_LOCAL_DNS.to_string();
    let (cluster_name, _) = CLUSTER_RECORDS[0];
    // A cluster name is answered (a latency to show); an external one goes round the loop.
    for name in [cluster_name, EXTERNAL_NAME] {
        lab.dig(Pod::Client, &node_cache, &[name]).or_fail(test);
    }
    let url = format!("http://{METRICS_ADDRESS}/metrics");
    let cache_latency = format!("server=\"{node_cache}:53\"");
    let exposition = scrape_until(&lab, &url, |exposition| {
        sample(exposition, "dnsloop_loops_total", &[]).is_some_and(|loops| loops >= 1.0)
            && sample(
                exposition,
                "dnsloop_answer_latency_seconds_bucket",
                &[&cache_latency, "le=\"+Inf\""],
            )
            .is_some_and(|answers| answers >= 1.0)
    });
    let output = tracer.interrupt().or_fail(test);

    let shown = format!("{exposition}\n--- tracer's stderr ---\n{}", output.stderr);
    assert!(
        output
            .stderr
            .contains(&format!("dnsloop: serving metrics at {url}")),
        "{shown}"
    );
    assert!(
        sample(&exposition, "dnsloop_loops_total", &[]).is_some_and(|loops| loops >= 1.0),
        "the loop is counted:\n{shown}"
    );
    // The bridge's traffic is counted at its ports: the bridge's own interface is not watched.
    let port_in = ["interface=\"veth-client\"", "direction=\"ingress\""];
    assert!(
        sample(&exposition, "dnsloop_packets_total", &port_in).is_some_and(|n| n > 0.0),
        "packets into the bridge are counted:\n{shown}"
    );
    assert!(
        sample(&exposition, "dnsloop_dns_packets_total", &port_in).is_some_and(|n| n > 0.0),
        "DNS packets into the bridge are counted:\n{shown}"
    );
    let bridge_in = ["interface=\"cni0\"", "direction=\"ingress\""];
    assert_eq!(
        sample(&exposition, "dnsloop_packets_total", &bridge_in),
        None,
        "{shown}"
    );
    assert_eq!(
        sample(&exposition, "dnsloop_lost_events_total", &[]),
        Some(0.0),
        "lost events are shown, and none were lost:\n{shown}"
    );
    assert!(
        sample(
            &exposition,
            "dnsloop_answer_latency_seconds_bucket",
            &[&cache_latency, "le=\"+Inf\""]
        )
        .is_some_and(|answers| answers >= 1.0),
        "the node cache's answer latencies are a histogram:\n{shown}"
    );
    assert!(
        sample(
            &exposition,
            "dnsloop_answers_total",
            &[&cache_latency, "rcode=\"NOERROR\""]
        )
        .is_some_and(|answers| answers >= 1.0),
        "the node cache's answers are counted by rcode:\n{shown}"
    );
    assert!(
        !exposition.contains(EXTERNAL_NAME) && !exposition.contains(cluster_name),
        "no name asked about is a label:\n{shown}"
    );
}

#[test]
fn a_port_in_use_stops_a_second_tracer_at_startup() {
    let test = test_name!();
    if !can_run(test, &[Need::Root, Need::DnsloopBinary]) {
        return;
    }
    let lab = Lab::builder(Scenario::Healthy).start().or_fail(test);
    let _first = Tracer::start(
        &dnsloop_bin(),
        &lab,
        lab.node_ns(),
        &["--metrics-addr", METRICS_ADDRESS],
    )
    .or_fail(test);
    let binary = dnsloop_bin();
    let second = lab
        .exec(
            lab.node_ns(),
            &[
                binary.to_str().expect("a UTF-8 path"),
                "trace",
                "--metrics-addr",
                METRICS_ADDRESS,
                "--duration",
                "10s",
            ],
        )
        .or_fail(test);
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert_eq!(second.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "cannot serve metrics on {METRICS_ADDRESS}: port in use; choose another with --metrics-addr"
        )),
        "{stderr}"
    );
    assert!(
        !stderr.contains("watching"),
        "it stops before attaching anything:\n{stderr}"
    );
}
