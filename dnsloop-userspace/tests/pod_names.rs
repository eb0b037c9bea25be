//! dnsloop names the pods behind the node's veths `namespace/pod`, without the API server:
//! from the processes in a pod's network namespace, their cgroup, the pod UID in it, and the
//! kubelet's pod log directory, or the container runtime's CRI socket. The lab lays its pods out
//! as a kubelet does (sandbox process, cgroups named after pod UIDs, `<namespace>_<pod>_<uid>`
//! log directories) and hands its log directory to `dnsloop trace --pod-logs`; a stand-in
//! runtime in the test process ([`cri_runtime`]) lists them over a CRI socket.
mod cri_runtime;

use std::{process::Command, time::Duration};

use cri_runtime::{FakeRuntime, Sandbox};
use dnsloop_core::schema::PacketRecord;
use dnsloop_tests::or_fail::OrFail as _;
use dnsloop_tests::test_name;
use dnsloop_tests::{
    findings::{LoopRecordExt as _, Trace},
    lab::{Lab, Pod, Scenario, CLUSTER_DOMAIN, EXTERNAL_NAME, NODE_LOCAL_DNS},
    packet_lines::packet_lines,
    privilege::{can_run, dnsloop_bin, Need},
    tracer::Tracer,
};

/// dnsloop looks again for the pods it could not name every second: by then it has.
const NAMING_WITHIN: Duration = Duration::from_secs(4);

/// Brings up `scenario`, runs `dnsloop trace --output json OPTIONS` on its node while
/// `traffic` runs, and returns what it printed; `options` is given the lab. `None` when this
/// host cannot run the test (it fails instead under `CI=true`).
fn traced(
    test: &str,
    scenario: Scenario,
    options: impl FnOnce(&Lab) -> Vec<String>,
    traffic: impl FnOnce(&Lab),
) -> Option<Trace> {
    if !can_run(test, &[Need::Root, Need::DnsloopBinary]) {
        return None;
    }
    let lab = Lab::builder(scenario).start().or_fail(test);
    let mut args = vec!["--output".to_owned(), "json".to_owned()];
    args.extend(options(&lab));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let tracer = Tracer::start(&dnsloop_bin(), &lab, lab.node_ns(), &args).or_fail(test);
    traffic(&lab);
    let output = tracer.interrupt().or_fail(test);
    Some(Trace::from_output(output).or_fail(test))
}

fn pod_logs_of(lab: &Lab) -> Vec<String> {
    vec![
        "--pod-logs".to_owned(),
        lab.pod_logs().display().to_string(),
    ]
}

/// `pod kube-system/coredns-5d78c9869d-abcde`: a pod dnsloop knows.
fn named(pod: Pod) -> String {
    format!("pod {}", pod.kubernetes_id())
}

/// `pod 10.244.0.3`: a pod dnsloop knows only by address.
fn by_address(pod: Pod) -> String {
    format!("pod {}", pod.ip())
}

fn dig(lab: &Lab, from: Pod, qname: &str) {
    lab.dig(from, &NODE_LOCAL_DNS.to_string(), &[qname])
        .or_fail(format_args!("dig {qname} from {from:?}"));
}

/// The first `packet` line on `ifname` in `dir` that is a query (`qr` false) or a reply.
fn first_packet<'a>(
    packets: &'a [PacketRecord],
    ifname: &str,
    dir: &str,
    qr: bool,
    trace: &Trace,
) -> &'a PacketRecord {
    packets
        .iter()
        .find(|packet| packet.ifname == ifname && packet.dir == dir && packet.qr == qr)
        .or_fail(format_args!(
            "no packet on {ifname} {dir} (qr {qr}):\n{trace}"
        ))
}

/// The cache's forward, DNAT'ed to a CoreDNS pod, enters that pod, named.
fn assert_forward_enters_a_named_coredns_pod(packets: &[PacketRecord], trace: &Trace) {
    let (pod, forwarded) = Pod::COREDNS
        .into_iter()
        .find_map(|pod| {
            packets
                .iter()
                .find(|packet| packet.ifname == pod.host_veth() && packet.dir == "egress")
                .map(|packet| (pod, packet))
        })
        .or_fail(format_args!("no packet entered a CoreDNS pod:\n{trace}"));
    assert_eq!(
        forwarded.enters.as_deref(),
        Some(named(pod).as_str()),
        "{trace}"
    );
}

#[test]
fn a_loop_through_coredns_names_the_coredns_pod() {
    let Some(trace) = traced(test_name!(), Scenario::NodelocalLoop, pod_logs_of, |lab| {
        dig(lab, Pod::Client, EXTERNAL_NAME)
    }) else {
        return;
    };

    let qname = format!("{EXTERNAL_NAME}.");
    let found = trace
        .loops_for(&qname)
        .first()
        .copied()
        .or_fail(format_args!("no loop reported for {qname}:\n{trace}"));
    // The question goes round cache -> ClusterIP -> a CoreDNS pod -> cache.
    let coredns = Pod::COREDNS
        .into_iter()
        .find(|&pod| found.passes_through(&named(pod)))
        .or_fail(format_args!(
            "no hop of the loop names a CoreDNS pod:\n{trace}"
        ));
    assert!(
        Pod::ALL
            .iter()
            .all(|&pod| !found.passes_through(&by_address(pod))),
        "a pod the lab names is shown by address:\n{trace}"
    );
    // The summary says which pod sends the question back.
    assert!(
        found.summary.contains(&format!("({})", named(coredns)))
            && found
                .summary
                .contains(&format!("{} forwards to {NODE_LOCAL_DNS}", named(coredns))),
        "the summary should name {}:\n{trace}",
        coredns.kubernetes_id()
    );
}

#[test]
fn packets_name_the_pods_they_leave_and_enter() {
    let cluster_name = format!("kubernetes.default.svc.{CLUSTER_DOMAIN}");
    let Some(trace) = traced(
        test_name!(),
        Scenario::Healthy,
        |lab| {
            let mut options = pod_logs_of(lab);
            options.push("--packets".to_owned());
            options
        },
        |lab| dig(lab, Pod::Client, &cluster_name),
    ) else {
        return;
    };
    let packets = packet_lines(&trace);

    // The client's query leaves its pod, and the cache's reply enters it.
    let client = Pod::Client.host_veth();
    let asked = first_packet(&packets, &client, "ingress", false, &trace);
    assert_eq!(asked.leaves.as_deref(), Some(named(Pod::Client).as_str()));
    let answered = first_packet(&packets, &client, "egress", true, &trace);
    assert_eq!(
        answered.enters.as_deref(),
        Some(named(Pod::Client).as_str())
    );
    assert_forward_enters_a_named_coredns_pod(&packets, &trace);
}

#[test]
fn pods_the_log_directory_does_not_name_are_shown_by_address() {
    let elsewhere = tempfile::tempdir().expect("create a temporary directory");
    let Some(trace) = traced(
        test_name!(),
        Scenario::Healthy,
        |_| {
            vec![
                "--packets".to_owned(),
                "--pod-logs".to_owned(),
                elsewhere.path().display().to_string(),
            ]
        },
        |lab| dig(lab, Pod::Client, EXTERNAL_NAME),
    ) else {
        return;
    };
    let packets = packet_lines(&trace);

    let asked = first_packet(&packets, &Pod::Client.host_veth(), "ingress", false, &trace);
    assert_eq!(
        asked.leaves.as_deref(),
        Some(by_address(Pod::Client).as_str()),
        "{trace}"
    );
    // The operator is told why, and what to do.
    assert!(
        trace.stderr.contains("has no directory in"),
        "dnsloop should say why it names pods by address:\n{trace}"
    );
}

#[test]
fn a_pod_whose_sandbox_starts_after_its_network_is_named_once_it_runs() {
    let test = test_name!();
    if !can_run(test, &[Need::Root, Need::DnsloopBinary]) {
        return;
    }
    let mut lab = Lab::builder(Scenario::Healthy).start().or_fail(test);
    // A container runtime sets up a pod's network, then starts its sandbox: dnsloop sees the
    // pod before any process of it is there to name it.
    lab.stop_sandbox(Pod::Client).or_fail(test);
    let args = ["--output", "json", "--packets", "--pod-logs"];
    let pod_logs = lab.pod_logs().display().to_string();
    let args: Vec<&str> = args.into_iter().chain([pod_logs.as_str()]).collect();
    let tracer = Tracer::start(&dnsloop_bin(), &lab, lab.node_ns(), &args).or_fail(test);
    let before = format!("before.{EXTERNAL_NAME}");
    dig(&lab, Pod::Client, &before);
    lab.start_sandbox(Pod::Client).or_fail(test);
    // dnsloop looks for the names of unnamed pods every second; give it a few.
    std::thread::sleep(NAMING_WITHIN);
    let after = format!("after.{EXTERNAL_NAME}");
    dig(&lab, Pod::Client, &after);
    let output = tracer.interrupt().or_fail(test);
    let trace = Trace::from_output(output).or_fail(test);
    let packets = packet_lines(&trace);

    let left_from = |qname: &str| {
        packets
            .iter()
            .find(|packet| {
                packet.ifname == Pod::Client.host_veth()
                    && packet.dir == "ingress"
                    && packet.qname.as_deref() == Some(&format!("{qname}."))
            })
            .or_fail(format_args!(
                "no query for {qname} left the client:\n{trace}"
            ))
            .leaves
            .clone()
    };
    assert_eq!(left_from(&before), Some(by_address(Pod::Client)), "{trace}");
    assert_eq!(left_from(&after), Some(named(Pod::Client)), "{trace}");
}

#[test]
fn without_a_pod_log_directory_the_container_runtime_names_the_pods() {
    let test = test_name!();
    if !can_run(test, &[Need::Root, Need::DnsloopBinary]) {
        return;
    }
    let lab = Lab::builder(Scenario::Healthy).start().or_fail(test);
    let sandboxes: Vec<Sandbox> = Pod::ALL
        .into_iter()
        .map(|pod| Sandbox {
            namespace: pod.kubernetes_namespace(),
            name: pod.kubernetes_name(),
            uid: lab.pod_uid(pod).or_fail(test),
        })
        .collect();
    let runtime = FakeRuntime::serve(&lab.state_dir().join("cri.sock"), &sandboxes).or_fail(test);
    // No log directory names any pod: only the runtime can.
    let no_pod_logs = tempfile::tempdir().expect("create a temporary directory");
    let no_pod_logs = no_pod_logs.path().display().to_string();
    let socket = runtime.socket().display().to_string();
    let args = [
        "--output",
        "json",
        "--packets",
        "--pod-logs",
        &no_pod_logs,
        "--cri-socket",
        &socket,
    ];
    let tracer = Tracer::start(&dnsloop_bin(), &lab, lab.node_ns(), &args).or_fail(test);
    let cluster_name = format!("kubernetes.default.svc.{CLUSTER_DOMAIN}");
    dig(&lab, Pod::Client, &cluster_name);
    let output = tracer.interrupt().or_fail(test);
    let trace = Trace::from_output(output).or_fail(test);
    let packets = packet_lines(&trace);

    assert!(
        runtime.listings() >= 1,
        "dnsloop never asked the runtime:\n{trace}"
    );
    assert!(
        trace.stderr.contains(&format!(
            "naming pods after the container runtime at {socket}"
        )),
        "{trace}"
    );
    let client = Pod::Client.host_veth();
    let asked = first_packet(&packets, &client, "ingress", false, &trace);
    assert_eq!(
        asked.leaves.as_deref(),
        Some(named(Pod::Client).as_str()),
        "{trace}"
    );
    assert_forward_enters_a_named_coredns_pod(&packets, &trace);
    // Every pod was named: nothing was looked for in the (empty) log directory.
    assert!(!trace.stderr.contains("has no directory in"), "{trace}");
}

#[test]
fn a_cri_socket_that_is_not_there_stops_dnsloop_at_start() {
    if !can_run(test_name!(), &[Need::DnsloopBinary]) {
        return;
    }
    let dir = tempfile::tempdir().expect("create a temporary directory");
    let socket = dir.path().join("containerd.sock");
    let output = Command::new(dnsloop_bin())
        .args(["trace", "--duration", "1s", "--cri-socket"])
        .arg(&socket)
        .output()
        .expect("run dnsloop");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!("no CRI socket at {}", socket.display())),
        "{stderr}"
    );
}
