//! Enrichment against a real conntrack table: each test works in a network namespace of its own,
//! whose entries the conntrack CLI creates. Nothing here sends a packet; `conntrack -I` only
//! writes the table.
use std::{
    net::SocketAddr,
    path::PathBuf,
    process::{Command, Output},
    sync::Arc,
    time::SystemTime,
};

use dnsloop_core::{
    enrich::{
        conntrack::{ConntrackTable, QueryFlow},
        Enricher,
    },
    finding::{ConntrackEvidence, Dnat, Hop, LoopFinding, LoopId, UnexpectedSourceFinding},
    observation::{Namespace, Point, Transport},
};
use dnsloop_shared::{parse::Probe, point::Direction};
use dnsloop_tests::or_fail::OrFail as _;
use dnsloop_tests::test_name;
use dnsloop_tests::{
    in_netns,
    privilege::{self, Need},
};

/// The fault's flow: 10.244.0.2 queried the ClusterIP, DNAT sent it to the pod 10.244.0.3.
const UDP_V4_QUERY: &str = "-p udp -s 10.244.0.2 -d 10.96.0.10 --sport 41234 --dport 53 \
    --reply-src 10.244.0.3 --reply-dst 10.244.0.2 --reply-port-src 53 --reply-port-dst 41234";

#[test]
fn an_unreplied_udp_v4_entry_gives_the_dnat_evidence() {
    if !can_run(test_name!()) {
        return;
    }
    let namespace = TestNamespace::create("udp4");
    namespace.insert_entry(UDP_V4_QUERY);

    let (found, missing) = namespace.run(|| {
        let mut table = ConntrackTable::default();
        let found = table.lookup(&udp_flow("10.244.0.2:41234", "10.96.0.10:53"));
        let missing = table.lookup(&udp_flow("10.244.0.2:41235", "10.96.0.10:53"));
        (found, missing)
    });

    assert_eq!(
        found.expect("the lookup succeeds"),
        Some(ConntrackEvidence {
            original_dst: addr("10.96.0.10:53"),
            reply_src: addr("10.244.0.3:53"),
            unreplied: true,
        })
    );
    assert_eq!(missing.expect("a lookup of an absent flow succeeds"), None);
}

#[test]
fn a_replied_udp_v6_entry_is_not_unreplied() {
    if !can_run(test_name!()) {
        return;
    }
    let namespace = TestNamespace::create("udp6");
    namespace.insert_entry(
        "-p udp -s fd00:10:244::2 -d fd00:10:96::a --sport 41234 --dport 53 \
         --reply-src fd00:10:244::3 --reply-dst fd00:10:244::2 --reply-port-src 53 \
         --reply-port-dst 41234 -u SEEN_REPLY",
    );

    let found = namespace.run(|| {
        ConntrackTable::default().lookup(&udp_flow("[fd00:10:244::2]:41234", "[fd00:10:96::a]:53"))
    });

    assert_eq!(
        found.expect("the lookup succeeds"),
        Some(ConntrackEvidence {
            original_dst: addr("[fd00:10:96::a]:53"),
            reply_src: addr("[fd00:10:244::3]:53"),
            unreplied: false,
        })
    );
}

#[test]
fn a_tcp_entry_is_found_only_as_tcp() {
    if !can_run(test_name!()) {
        return;
    }
    let namespace = TestNamespace::create("tcp4");
    let entry = UDP_V4_QUERY.replace("-p udp", "-p tcp");
    namespace.insert_entry(&format!("{entry} --state SYN_SENT"));

    let (as_tcp, as_udp) = namespace.run(|| {
        let mut table = ConntrackTable::default();
        let client = addr("10.244.0.2:41234");
        let server = addr("10.96.0.10:53");
        let as_tcp = table.lookup(&QueryFlow {
            transport: Transport::Tcp,
            client,
            server,
        });
        let as_udp = table.lookup(&QueryFlow {
            transport: Transport::Udp,
            client,
            server,
        });
        (as_tcp, as_udp)
    });

    assert_eq!(
        as_tcp.expect("the lookup succeeds"),
        Some(ConntrackEvidence {
            original_dst: addr("10.96.0.10:53"),
            reply_src: addr("10.244.0.3:53"),
            unreplied: true,
        })
    );
    assert_eq!(as_udp.expect("the lookup succeeds"), None);
}

/// The whole enrichment, with the bridge sysctl of the test's namespace (not the host's) off.
#[test]
fn the_enricher_establishes_the_bypass_in_its_namespace() {
    if !can_run(test_name!()) {
        return;
    }
    let namespace = TestNamespace::create("enrich");
    namespace.insert_entry(UDP_V4_QUERY);
    // br_netfilter's sysctls are per namespace, and /proc/sys/net shows the calling thread's.
    // Where br_netfilter is not loaded there is no sysctl to turn off: that is the cause then.
    let loaded = namespace.run(|| match std::fs::write(BRIDGE_CALL_IPTABLES, "0") {
        Ok(()) => true,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => false,
        Err(error) => panic!("turning {BRIDGE_CALL_IPTABLES} off: {error}"),
    });
    let reason = if loaded {
        "bridge-nf-call-iptables=0"
    } else {
        "br_netfilter is not loaded"
    };

    let mut finding = UnexpectedSourceFinding {
        ts: SystemTime::now(),
        client: addr("10.244.0.2:41234"),
        expected: addr("10.96.0.10:53"),
        actual: addr("10.244.0.3:53"),
        id: 4242,
        qname: "kubernetes.default.svc.cluster.local.".to_string(),
        qtype: 1,
        transport: Transport::Udp,
        conntrack: None,
        cause: None,
        summary: "the analyzer's summary".to_string(),
    };
    let finding = namespace.run(move || {
        Enricher::new().enrich(&mut finding);
        finding
    });

    assert_eq!(
        finding.conntrack,
        Some(ConntrackEvidence {
            original_dst: addr("10.96.0.10:53"),
            reply_src: addr("10.244.0.3:53"),
            unreplied: true,
        })
    );
    assert_eq!(
        finding.cause.as_deref(),
        Some(format!("reply bypassed un-DNAT: {reason}").as_str())
    );
    assert_eq!(
        finding.summary,
        format!(
            "reply to 10.244.0.2:41234 (id 4242) came from 10.244.0.3:53, not 10.96.0.10:53: \
             reply bypassed un-DNAT ({reason}); the client drops it. \
             Fix: load br_netfilter and set net.bridge.bridge-nf-call-iptables=1"
        )
    );
}

/// The node cache's forward to the ClusterIP, which the output chain DNAT'ed to the CoreDNS pod
/// 10.244.0.4 before any hop saw it.
const NODE_CACHE_TO_CLUSTER_IP: &str = "-p udp -s 10.255.0.1 -d 10.96.0.10 --sport 43913 \
    --dport 53 --reply-src 10.244.0.4 --reply-dst 10.255.0.1 --reply-port-src 53 \
    --reply-port-dst 43913";

/// CoreDNS's forward back to the node cache: delivered where it was sent.
const COREDNS_TO_NODE_CACHE: &str = "-p udp -s 10.244.0.4 -d 169.254.25.10 --sport 40000 \
    --dport 53 --reply-src 169.254.25.10 --reply-dst 10.244.0.4 --reply-port-src 53 \
    --reply-port-dst 40000";

#[test]
fn a_delivered_flow_is_found_by_its_reply_tuple() {
    if !can_run(test_name!()) {
        return;
    }
    let namespace = TestNamespace::create("reply4");
    namespace.insert_entry(NODE_CACHE_TO_CLUSTER_IP);

    let (found, as_sent, missing) = namespace.run(|| {
        let mut table = ConntrackTable::default();
        let found = table.lookup_delivered(&udp_flow("10.255.0.1:43913", "10.244.0.4:53"));
        // The flow as sent is the original tuple, not the reply's mirror image.
        let as_sent = table.lookup_delivered(&udp_flow("10.255.0.1:43913", "10.96.0.10:53"));
        let missing = table.lookup_delivered(&udp_flow("10.255.0.1:43914", "10.244.0.4:53"));
        (found, as_sent, missing)
    });

    assert_eq!(
        found.expect("the lookup succeeds"),
        Some(ConntrackEvidence {
            original_dst: addr("10.96.0.10:53"),
            reply_src: addr("10.244.0.4:53"),
            unreplied: true,
        })
    );
    assert_eq!(as_sent.expect("a lookup of an absent flow succeeds"), None);
    assert_eq!(missing.expect("a lookup of an absent flow succeeds"), None);
}

/// The loop's enrichment: the forward to the pod is named by its ClusterIP, the forward back
/// to the node cache (not DNAT'ed) is not.
#[test]
fn the_enricher_names_the_cluster_ip_a_loops_forward_was_sent_to() {
    if !can_run(test_name!()) {
        return;
    }
    let namespace = TestNamespace::create("loop");
    namespace.insert_entry(NODE_CACHE_TO_CLUSTER_IP);
    namespace.insert_entry(COREDNS_TO_NODE_CACHE);

    let mut finding = unenriched_loop(
        vec![
            loop_hop(
                Direction::Egress,
                "10.255.0.1:43913",
                "10.244.0.4:53",
                "pod 10.244.0.4",
            ),
            loop_hop(
                Direction::Ingress,
                "10.244.0.4:40000",
                "169.254.25.10:53",
                "node",
            ),
        ],
        "loop: www.example.test. A: node -> 10.244.0.4 (pod 10.244.0.4) -> 169.254.25.10 (node) \
         (2 hops): check the resolv.conf CoreDNS uses",
    );
    let finding = namespace.run(move || {
        Enricher::new().enrich_loop(&mut finding);
        finding
    });

    assert_eq!(
        finding.dnat,
        [Dnat {
            service: addr("10.96.0.10:53"),
            backend: addr("10.244.0.4:53"),
        }]
    );
    assert_eq!(
        finding.summary,
        "loop: www.example.test. A: node -> 10.96.0.10 (DNAT -> 10.244.0.4) (pod 10.244.0.4) \
         -> 169.254.25.10 (node) (2 hops): check the resolv.conf CoreDNS uses"
    );
    assert_eq!(
        finding.servers,
        [
            "10.244.0.4"
                .parse::<std::net::IpAddr>()
                .expect("an address"),
            "169.254.25.10".parse().expect("an address"),
        ],
        "servers stay as observed"
    );
}

/// A loop goes on longer than conntrack keeps its flows: its repeat reports, which carry the
/// first report's path, still name the ClusterIP once the entry is gone.
#[test]
fn a_loops_repeat_keeps_its_cluster_ip_after_the_conntrack_entry_is_gone() {
    if !can_run(test_name!()) {
        return;
    }
    let namespace = TestNamespace::create("repeat");
    namespace.insert_entry(NODE_CACHE_TO_CLUSTER_IP);
    let report = || {
        unenriched_loop(
            vec![loop_hop(
                Direction::Egress,
                "10.255.0.1:43913",
                "10.244.0.4:53",
                "pod 10.244.0.4",
            )],
            "loop: www.example.test. A: node -> 10.244.0.4 (pod 10.244.0.4) -> 169.254.25.10 \
             (node) (1 hop): check the resolv.conf CoreDNS uses",
        )
    };
    let (first, repeat) = namespace.run(move || {
        let mut enricher = Enricher::new();
        let mut first = report();
        enricher.enrich_loop(&mut first);
        // The thread is in the test's namespace, and so is the conntrack it starts.
        succeed(Command::new("conntrack").arg("-F"));
        let mut repeat = report();
        enricher.enrich_loop(&mut repeat);
        (first, repeat)
    });
    assert_eq!(first.dnat.len(), 1, "{first:?}");
    assert_eq!(repeat.dnat, first.dnat);
    assert_eq!(repeat.summary, first.summary);
}

/// Without conntrack entries a loop keeps its summary and gets no DNAT: never an error.
#[test]
fn a_loop_without_entries_is_left_as_it_was() {
    if !can_run(test_name!()) {
        return;
    }
    let namespace = TestNamespace::create("noloop");
    let unenriched = unenriched_loop(
        vec![loop_hop(
            Direction::Egress,
            "10.255.0.1:43913",
            "10.244.0.4:53",
            "pod 10.244.0.4",
        )],
        "loop: www.example.test. A: node -> 10.244.0.4 (pod 10.244.0.4) -> 169.254.25.10 (node) \
         (1 hop): check",
    );
    let mut finding = unenriched.clone();
    let finding = namespace.run(move || {
        Enricher::new().enrich_loop(&mut finding);
        finding
    });

    assert_eq!(finding, unenriched);
}

/// A loop report as the analyzer makes it: `servers` are the hops' destinations.
fn unenriched_loop(path: Vec<Hop>, summary: &str) -> LoopFinding {
    LoopFinding {
        ts: SystemTime::now(),
        since: SystemTime::UNIX_EPOCH,
        loop_id: LoopId(1),
        qname: "www.example.test.".to_string(),
        qtype: 1,
        count: 1,
        unanswered: 0,
        servers: path.iter().map(|hop| hop.dst.ip()).collect(),
        path,
        off_node: Vec::new(),
        probe: Probe::None,
        summary: summary.to_string(),
        dnat: Vec::new(),
        unconfirmed: Vec::new(),
    }
}

fn loop_hop(direction: Direction, src: &str, dst: &str, enters: &str) -> Hop {
    Hop {
        ts: SystemTime::now(),
        point: Arc::new(Point {
            ifname: "cni0".into(),
            direction,
            leaves: None,
            enters: Some(Namespace::new(enters)),
        }),
        src: addr(src),
        dst: addr(dst),
        id: 4242,
        transport: Transport::Udp,
    }
}

const BRIDGE_CALL_IPTABLES: &str = "/proc/sys/net/bridge/bridge-nf-call-iptables";

fn addr(text: &str) -> SocketAddr {
    text.parse().expect("a socket address")
}

fn udp_flow(client: &str, server: &str) -> QueryFlow {
    QueryFlow {
        transport: Transport::Udp,
        client: addr(client),
        server: addr(server),
    }
}

/// Whether this host can run the privileged tests (see `dnsloop_tests::privilege`).
fn can_run(test: &str) -> bool {
    privilege::can_run(
        test,
        &[Need::Root, Need::Tool("ip"), Need::Tool("conntrack")],
    )
}

/// A network namespace of the test's own, deleted when dropped, even when the test fails.
struct TestNamespace {
    name: String,
}

impl TestNamespace {
    /// `label` tells apart the namespaces of tests that run at once in one process.
    fn create(label: &str) -> Self {
        let name = format!("dnsloop-enrich-{}-{label}", std::process::id());
        succeed(Command::new("ip").args(["netns", "add", &name]));
        Self { name }
    }

    /// Creates a conntrack entry from `conntrack -I` options (tuples, status, state).
    fn insert_entry(&self, options: &str) {
        succeed(
            Command::new("ip")
                .args([
                    "netns",
                    "exec",
                    &self.name,
                    "conntrack",
                    "-I",
                    "--timeout",
                    "60",
                ])
                .args(options.split_whitespace()),
        );
    }

    /// Runs `work` on a thread inside the namespace.
    fn run<T: Send>(&self, work: impl FnOnce() -> T + Send) -> T {
        let path = PathBuf::from("/var/run/netns").join(&self.name);
        in_netns::run(&path, work).expect("enter the test's namespace")
    }
}

impl Drop for TestNamespace {
    fn drop(&mut self) {
        match Command::new("ip")
            .args(["netns", "del", &self.name])
            .output()
        {
            Ok(output) if output.status.success() => {}
            Ok(output) => eprintln!("deleting netns {}: {}", self.name, stderr(&output)),
            Err(error) => eprintln!("deleting netns {}: {error}", self.name),
        }
    }
}

fn succeed(command: &mut Command) {
    let output = command.output().or_fail(format_args!("{command:?}"));
    assert!(
        output.status.success(),
        "{command:?} failed: {}",
        stderr(&output)
    );
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).trim().to_string()
}
