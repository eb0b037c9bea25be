//! `dnsloop trace` on the lab: the programs load, attach in the node namespace, and count DNS
//! packets on the interfaces a query really crosses.
use dnsloop_tests::{
    lab::{Lab, Pod, Scenario},
    privilege::{can_run, dnsloop_bin, Need},
    tracer::Tracer,
};
use serde_json::Value;

const QUERIES: u64 = 5;

#[test]
fn trace_counts_dns_packets_on_every_hop_of_the_healthy_lab() {
    if !can_run("trace_counts_dns_packets", &[Need::Root, Need::DnsloopBinary]) {
        return;
    }
    let lab = Lab::up(Scenario::Healthy).expect("lab up");
    let tracer = Tracer::start(&dnsloop_bin(), &lab, lab.node_ns(), &["--output", "json"])
        .expect("tracer starts");

    for _ in 0..QUERIES {
        // A cluster name: client -> node-local cache -> ClusterIP (DNAT) -> CoreDNS pod.
        let cluster = lab
            .dig(Pod::Client, "169.254.25.10", &["api.default.svc.cluster.local"])
            .expect("dig");
        assert_eq!(cluster.status.as_deref(), Some("NOERROR"), "{}", cluster.stdout);
    }
    // An external name: client -> node-local cache -> upstream over the uplink.
    let external = lab
        .dig(Pod::Client, "169.254.25.10", &["www.example.test"])
        .expect("dig");
    assert_eq!(external.status.as_deref(), Some("NOERROR"), "{}", external.stdout);

    let output = tracer.interrupt().expect("tracer ends on SIGINT");
    assert!(output.status.success(), "exit {:?}: {}", output.status, output.stderr);
    let summary: Value = output
        .stdout
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).expect("every stdout line is JSON"))
        .find(|value| value["kind"] == "summary")
        .unwrap_or_else(|| panic!("no summary in {}", output.stdout));
    let dns = |ifname: &str, dir: &str| -> u64 {
        summary["interfaces"]
            .as_array()
            .expect("interfaces array")
            .iter()
            .find(|point| point["ifname"] == ifname && point["dir"] == dir)
            .unwrap_or_else(|| panic!("no {ifname} {dir} in {summary}"))["dns_packets"]
            .as_u64()
            .expect("dns_packets is a number")
    };

    // Queries leave the client (ingress on the node side of its veth), answers come back.
    assert!(dns("veth-client", "ingress") >= QUERIES + 1, "{summary}");
    assert!(dns("veth-client", "egress") >= QUERIES + 1, "{summary}");
    // The cache's cluster queries reach the CoreDNS pods, DNAT'ed from the ClusterIP.
    let to_coredns = dns("veth-coredns-a", "egress") + dns("veth-coredns-b", "egress");
    assert!(to_coredns >= QUERIES, "{summary}");
    // Both directions cross the bridge's own interface: into the node, and out of it.
    assert!(dns("cni0", "ingress") >= QUERIES, "{summary}");
    assert!(dns("cni0", "egress") >= QUERIES, "{summary}");
    // The external name went out of the uplink to the upstream, and its answer came back.
    assert!(dns("eth0", "egress") >= 1, "{summary}");
    assert!(dns("eth0", "ingress") >= 1, "{summary}");
}
