//! `dnsloop trace` on the lab: the programs load, attach in the node namespace, and count DNS
//! packets on the interfaces a query really crosses.
use std::{
    process::Command,
    time::{Duration, Instant},
};

use dnsloop_tests::or_fail::OrFail as _;
use dnsloop_tests::test_name;
use dnsloop_tests::{
    lab::{Lab, Pod, Scenario},
    privilege::{can_run, dnsloop_bin, Need},
    tracer::Tracer,
};
use serde_json::Value;

const QUERIES: u64 = 5;
/// The one external name asked after the cluster ones.
const EXTERNAL_QUERIES: u64 = 1;

/// A healthy lab with `dnsloop trace --output json` running in its node namespace; `None`
/// when the test cannot run here (and may skip).
fn traced_healthy_lab(test: &str) -> Option<(Lab, Tracer)> {
    traced_healthy_lab_with(test, &[])
}

/// The healthy lab, traced with JSON output and `options`.
fn traced_healthy_lab_with(test: &str, options: &[&str]) -> Option<(Lab, Tracer)> {
    if !can_run(test, &[Need::Root, Need::DnsloopBinary]) {
        return None;
    }
    let lab = Lab::builder(Scenario::Healthy).start().expect("lab up");
    let args: Vec<&str> = ["--output", "json"]
        .iter()
        .chain(options)
        .copied()
        .collect();
    let tracer = Tracer::start(&dnsloop_bin(), &lab, lab.node_ns(), &args).expect("tracer starts");
    Some((lab, tracer))
}

#[test]
fn trace_counts_dns_packets_on_every_hop_of_the_healthy_lab() {
    let Some((lab, tracer)) = traced_healthy_lab(test_name!()) else {
        return;
    };

    for _ in 0..QUERIES {
        // A cluster name: client -> node-local cache -> ClusterIP (DNAT) -> CoreDNS pod.
        let cluster = lab
            .dig(
                Pod::Client,
                "169.254.25.10",
                &["api.default.svc.cluster.local"],
            )
            .expect("dig");
        assert_eq!(
            cluster.status.as_deref(),
            Some("NOERROR"),
            "{}",
            cluster.stdout
        );
    }
    // An external name: client -> node-local cache -> upstream over the uplink.
    let external = lab
        .dig(Pod::Client, "169.254.25.10", &["www.example.test"])
        .expect("dig");
    assert_eq!(
        external.status.as_deref(),
        Some("NOERROR"),
        "{}",
        external.stdout
    );

    let output = tracer.interrupt().expect("tracer ends on SIGINT");
    assert!(
        output.status.success(),
        "exit {:?}: {}",
        output.status,
        output.stderr
    );
    let summary = summary_of(&output.stdout);
    let dns = |ifname: &str, dir: &str| -> u64 {
        summary["interfaces"]
            .as_array()
            .expect("interfaces array")
            .iter()
            .find(|point| point["ifname"] == ifname && point["dir"] == dir)
            .or_fail(format_args!("no {ifname} {dir} in {summary}"))["dns_packets"]
            .as_u64()
            .expect("dns_packets is a number")
    };

    // Queries leave the client (ingress on the node side of its veth), answers come back.
    assert!(
        dns("veth-client", "ingress") >= QUERIES + EXTERNAL_QUERIES,
        "{summary}"
    );
    assert!(
        dns("veth-client", "egress") >= QUERIES + EXTERNAL_QUERIES,
        "{summary}"
    );
    // The cache's cluster queries reach the CoreDNS pods, DNAT'ed from the ClusterIP.
    let to_coredns = dns("veth-coredns-a", "egress") + dns("veth-coredns-b", "egress");
    assert!(to_coredns >= QUERIES, "{summary}");
    // Each crossing is watched once: the bridge's own interface is not, its crossings into
    // and out of the node are seen at its ports.
    let watched_at_bridge = summary["interfaces"]
        .as_array()
        .expect("interfaces array")
        .iter()
        .any(|point| point["ifname"] == "cni0");
    assert!(!watched_at_bridge, "{summary}");
    // The external name went out of the uplink to the upstream, and its answer came back.
    assert!(dns("eth0", "egress") >= 1, "{summary}");
    assert!(dns("eth0", "ingress") >= 1, "{summary}");
}

/// A pod plugged into the lab's bridge after the tracer started, as a CNI would; its namespace
/// is deleted on drop.
struct LatePod {
    namespace: String,
}

impl LatePod {
    const ADDRESS: &'static str = "10.244.0.9";
    const VETH: &'static str = "veth-late";

    fn plug_into(lab: &Lab) -> Self {
        let pod = Self {
            namespace: format!("{}-late", lab.node_ns()),
        };
        let node = lab.node_ns();
        let ns = pod.namespace.as_str();
        for argv in [
            vec!["ip", "netns", "add", ns],
            vec![
                "ip",
                "-n",
                node,
                "link",
                "add",
                Self::VETH,
                "type",
                "veth",
                "peer",
                "name",
                "eth0",
                "netns",
                ns,
            ],
            vec![
                "ip",
                "-n",
                node,
                "link",
                "set",
                Self::VETH,
                "master",
                "cni0",
                "up",
            ],
            vec![
                "ip",
                "-n",
                ns,
                "addr",
                "add",
                &format!("{}/24", Self::ADDRESS),
                "dev",
                "eth0",
            ],
            vec!["ip", "-n", ns, "link", "set", "eth0", "up"],
            vec!["ip", "-n", ns, "link", "set", "lo", "up"],
            vec![
                "ip",
                "-n",
                ns,
                "route",
                "add",
                "default",
                "via",
                "10.244.0.1",
            ],
        ] {
            let status = Command::new(argv[0])
                .args(&argv[1..])
                .status()
                .expect("run ip");
            assert!(status.success(), "{argv:?} failed");
        }
        pod
    }

    fn dig(&self, server: &str, name: &str) -> String {
        let output = Command::new("ip")
            .args([
                "netns",
                "exec",
                &self.namespace,
                "dig",
                "+tries=1",
                "+timeout=1",
                "+short",
            ])
            .arg(format!("@{server}"))
            .arg(name)
            .output()
            .expect("run dig");
        String::from_utf8_lossy(&output.stdout).trim().to_owned()
    }
}

impl Drop for LatePod {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.namespace])
            .status();
    }
}

#[test]
fn trace_follows_a_pod_that_appears_while_it_runs() {
    let Some((lab, tracer)) = traced_healthy_lab_with(test_name!(), &["--packets"]) else {
        return;
    };
    let pod = LatePod::plug_into(&lab);
    // The tracer attaches on the netlink event; give it a moment, bounded.
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut answer = String::new();
    while answer.is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(300));
        answer = pod.dig("169.254.25.10", "api.default.svc.cluster.local");
    }
    assert_eq!(answer, "10.96.0.50", "the late pod resolves");
    for _ in 0..3 {
        pod.dig("169.254.25.10", "api.default.svc.cluster.local");
    }
    // Straight to a CoreDNS pod on the same bridge: passed from port to port, never routed by
    // the node. Its veth was put on the bridge after it appeared: placed as a port since.
    pod.dig(
        &Pod::CoreDnsA.ip().to_string(),
        "api.default.svc.cluster.local",
    );

    let output = tracer.interrupt().expect("tracer ends on SIGINT");
    assert!(
        output.status.success(),
        "exit {:?}: {}",
        output.status,
        output.stderr
    );
    let summary = summary_of(&output.stdout);
    let late = summary["interfaces"]
        .as_array()
        .expect("interfaces array")
        .iter()
        .find(|point| point["ifname"] == LatePod::VETH && point["dir"] == "ingress")
        .or_fail(format_args!("{} is not watched: {summary}", LatePod::VETH));
    assert!(late["dns_packets"].as_u64() >= Some(3), "{summary}");
    let entered_at_its_port = |server: &str| -> Vec<Value> {
        output
            .stdout
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .filter(|packet| {
                packet["kind"] == "packet"
                    && packet["ifname"] == LatePod::VETH
                    && packet["dir"] == "ingress"
                    && packet["qr"] == false
                    && packet["dst"]
                        .as_str()
                        .is_some_and(|dst| dst.starts_with(server))
            })
            .map(|packet| packet["enters"].clone())
            .collect()
    };
    let to_cache = entered_at_its_port("169.254.25.10:");
    assert!(
        !to_cache.is_empty() && to_cache.iter().all(|enters| *enters == "node"),
        "sent to the bridge, its queries to the node cache enter the node: {to_cache:?}\n{}",
        output.stdout
    );
    let to_pod = entered_at_its_port(&format!("{}:", Pod::CoreDnsA.ip()));
    assert_eq!(
        to_pod,
        [Value::Null],
        "its query to a pod on the bridge enters no namespace at its port:\n{}",
        output.stdout
    );
    drop(pod);
}

fn summary_of(stdout: &str) -> Value {
    stdout
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).expect("every stdout line is JSON"))
        .find(|value| value["kind"] == "summary")
        .or_fail(format_args!("no summary in {stdout}"))
}
