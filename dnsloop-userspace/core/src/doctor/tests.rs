//! doctor end to end: every fixture tree under `tests/fixtures/doctor/` (node layouts modelled
//! on the field reports) gives exactly the checks listed here, and the exit status that goes
//! with them; small trees built here reach the branches the fixtures do not.
use std::{
    fs,
    os::unix::fs::symlink,
    path::{Path, PathBuf},
};

use super::{
    check::{Check, Severity},
    doctor, examine, exit_status, Config, EXIT_CANNOT_RUN, EXIT_ERRORS,
};
use crate::sink::OutputFormat;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/doctor");

use Severity::{Error as E, Info as I, Ok as K, Warning as W};

/// One expected check: severity, id, the end of its file's name ("" for none), its line.
type Expected = (Severity, &'static str, &'static str, Option<u32>);

fn fixture_args(name: &str) -> Config {
    let dir = Path::new(FIXTURES).join(name);
    let mut corefiles: Vec<PathBuf> = fs::read_dir(dir.join("corefiles"))
        .map(|entries| entries.map(|entry| entry.unwrap().path()).collect())
        .unwrap_or_default();
    corefiles.sort();
    Config {
        root: dir.join("root"),
        corefiles,
        output: OutputFormat::Text,
    }
}

fn summarize(checks: &[Check]) -> Vec<(Severity, &'static str, String, Option<u32>)> {
    checks
        .iter()
        .map(|check| {
            let location = check.location.as_ref();
            (
                check.severity,
                check.id,
                location.map_or(String::new(), |l| l.file.clone()),
                location.and_then(|l| l.line),
            )
        })
        .collect()
}

/// Runs doctor on a fixture: the checks must be `expected`, in that order, and the exit status
/// `status`; the text report must name every check.
fn assert_fixture(name: &str, expected: &[Expected], status: u8) {
    let args = fixture_args(name);
    let checks = examine(&args).unwrap_or_else(|error| panic!("{name}: {error}"));
    let got = summarize(&checks);
    let matches = got.len() == expected.len()
        && got.iter().zip(expected).all(|(got, want)| {
            got.0 == want.0 && got.1 == want.1 && got.2.ends_with(want.2) && got.3 == want.3
        });
    assert!(matches, "{name}:\n got {got:#?}\nwant {expected:#?}");
    let mut report = Vec::new();
    let result = doctor(&args, &mut report);
    assert_eq!(exit_status(&result), status, "{name}");
    let report = String::from_utf8(report).unwrap();
    for check in &checks {
        assert!(
            report.contains(check.id),
            "{name}: {} missing from\n{report}",
            check.id
        );
    }
}

fn with_summary<'a>(checks: &'a [Check], id: &str) -> &'a Check {
    checks
        .iter()
        .find(|check| check.id == id)
        .unwrap_or_else(|| panic!("no {id} in {checks:#?}"))
}

#[test]
fn healthy_node_has_no_error_or_warning() {
    assert_fixture(
        "healthy",
        &[
            (I, "kubelet.config", "/var/lib/kubelet/config.yaml", None),
            (
                I,
                "search.ndots-amplification",
                "/run/systemd/resolve/resolv.conf",
                Some(19),
            ),
            (
                I,
                "search.ndots-amplification",
                "/run/systemd/resolve/stub-resolv.conf",
                Some(23),
            ),
            (
                K,
                "resolv.loopback-upstream",
                "/run/systemd/resolve/stub-resolv.conf",
                Some(21),
            ),
            (
                K,
                "resolv.link-local-upstream",
                "/run/systemd/resolve/resolv.conf",
                None,
            ),
            (
                K,
                "corefile.forwards",
                "healthy/corefiles/coredns.yaml",
                None,
            ),
            (
                K,
                "search.limits",
                "/run/systemd/resolve/resolv.conf",
                Some(19),
            ),
            (
                K,
                "bridge.nf-call-iptables",
                "/proc/sys/net/bridge/bridge-nf-call-iptables",
                Some(1),
            ),
            (
                K,
                "bridge.nf-call-ip6tables",
                "/proc/sys/net/bridge/bridge-nf-call-ip6tables",
                Some(1),
            ),
            (
                K,
                "conntrack.insert-failed",
                "/proc/net/stat/nf_conntrack",
                None,
            ),
            (
                K,
                "conntrack.table",
                "/proc/sys/net/netfilter/nf_conntrack_count",
                Some(1),
            ),
        ],
        0,
    );
}

#[test]
fn systemd_resolved_stub_handed_to_pods_loops() {
    assert_fixture(
        "systemd-stub-loop",
        &[
            (
                E,
                "resolv.loopback-upstream",
                "/run/systemd/resolve/stub-resolv.conf",
                Some(21),
            ),
            (
                W,
                "search.stray-domain",
                "/run/systemd/resolve/stub-resolv.conf",
                Some(23),
            ),
            (I, "kubelet.config", "/var/lib/kubelet/config.yaml", None),
            (
                I,
                "search.ndots-amplification",
                "/run/systemd/resolve/stub-resolv.conf",
                Some(23),
            ),
            (
                I,
                "search.ndots-amplification",
                "/run/systemd/resolve/stub-resolv.conf",
                Some(23),
            ),
            (I, "bridge.netfilter", "/sys/class/net", None),
            (
                I,
                "conntrack.insert-failed",
                "/proc/net/stat/nf_conntrack",
                None,
            ),
            (
                I,
                "conntrack.table",
                "/proc/sys/net/netfilter/nf_conntrack_count",
                None,
            ),
            (
                K,
                "resolv.link-local-upstream",
                "/run/systemd/resolve/stub-resolv.conf",
                None,
            ),
            (
                K,
                "corefile.forwards",
                "systemd-stub-loop/corefiles/Corefile",
                None,
            ),
            (
                K,
                "search.limits",
                "/run/systemd/resolve/stub-resolv.conf",
                Some(23),
            ),
        ],
        EXIT_ERRORS,
    );
    let checks = examine(&fixture_args("systemd-stub-loop")).unwrap();
    let looped = with_summary(&checks, "resolv.loopback-upstream");
    // Through the absolute symlink, inside the root: the summary shows the way.
    assert!(
        looped
            .summary
            .contains("/etc/resolv.conf -> /run/systemd/resolve/stub-resolv.conf"),
        "{}",
        looped.summary
    );
    assert!(looped.summary.contains("Corefile:13"), "{}", looped.summary);
    let fix = looped.fix.as_deref().unwrap();
    assert!(
        fix.contains("resolvConf: /run/systemd/resolve/resolv.conf"),
        "{fix}"
    );
    assert!(fix.contains("114.114.114.114 and 8.8.8.8"), "{fix}");
}

#[test]
fn kubespray_host_resolvconf_loops_through_node_local_dns() {
    assert_fixture(
        "kubespray-host-resolvconf",
        &[
            (E, "resolv.link-local-upstream", "/etc/resolv.conf", Some(3)),
            (
                I,
                "kubelet.config",
                "/etc/kubernetes/kubelet-config.yaml",
                None,
            ),
            (I, "search.ndots-amplification", "/etc/resolv.conf", Some(2)),
            (I, "search.ndots-amplification", "/etc/resolv.conf", Some(5)),
            (K, "resolv.loopback-upstream", "/etc/resolv.conf", None),
            (K, "corefile.forwards", "coredns.yaml", None),
            (K, "corefile.forwards", "nodelocaldns.yaml", None),
            (K, "search.limits", "/etc/resolv.conf", Some(2)),
            (K, "bridge.netfilter", "/sys/class/net", None),
            (
                K,
                "conntrack.insert-failed",
                "/proc/net/stat/nf_conntrack",
                None,
            ),
            (
                K,
                "conntrack.table",
                "/proc/sys/net/netfilter/nf_conntrack_count",
                Some(1),
            ),
        ],
        EXIT_ERRORS,
    );
    let checks = examine(&fixture_args("kubespray-host-resolvconf")).unwrap();
    let looped = with_summary(&checks, "resolv.link-local-upstream");
    // node-local-dns's own forward loops at once (field report 000).
    assert!(
        looped.summary.contains("nodelocaldns.yaml:12"),
        "{}",
        looped.summary
    );
    assert!(
        looped.summary.contains("straight back to itself"),
        "{}",
        looped.summary
    );
    // The cluster domains kubespray wrote into the host's search list, trailing dots and all,
    // are kubelet's own: pods get no extra domain.
    let limits = with_summary(&checks, "search.limits");
    assert!(limits.summary.contains("3 domains"), "{}", limits.summary);
    let node = checks
        .iter()
        .find(|check| check.subject == "the node's lookups")
        .unwrap();
    assert!(
        node.summary
            .contains("ndots:2, 3 search domains) costs 8 queries"),
        "{}",
        node.summary
    );
}

#[test]
fn corefiles_that_forward_to_themselves() {
    assert_fixture(
        "corefile-loops",
        &[
            (
                E,
                "corefile.forward-cluster-dns",
                "coredns.Corefile",
                Some(13),
            ),
            (
                E,
                "corefile.forward-self",
                "node-local-dns.Corefile",
                Some(10),
            ),
            (W, "corefile.no-loop-plugin", "coredns.Corefile", Some(1)),
            (W, "corefile.forward-loopback", "coredns.Corefile", Some(24)),
            (I, "kubelet.config", "/var/lib/kubelet/config.yaml", None),
            (I, "corefile.no-loop-plugin", "coredns.Corefile", Some(21)),
            (I, "corefile.no-loop-plugin", "coredns.Corefile", Some(26)),
            (I, "search.ndots-amplification", "/etc/resolv.conf", Some(2)),
            (I, "search.ndots-amplification", "/etc/resolv.conf", Some(2)),
            (I, "bridge.netfilter", "/sys/class/net", None),
            (
                I,
                "conntrack.insert-failed",
                "/proc/net/stat/nf_conntrack",
                None,
            ),
            (
                I,
                "conntrack.table",
                "/proc/sys/net/netfilter/nf_conntrack_count",
                None,
            ),
            (K, "resolv.loopback-upstream", "/etc/resolv.conf", None),
            (K, "resolv.link-local-upstream", "/etc/resolv.conf", None),
            (K, "search.limits", "/etc/resolv.conf", Some(2)),
        ],
        EXIT_ERRORS,
    );
    let checks = examine(&fixture_args("corefile-loops")).unwrap();
    let own = with_summary(&checks, "corefile.forward-self");
    assert!(
        own.fix.as_deref().unwrap().contains("kube-dns-upstream"),
        "{own:?}"
    );
}

#[test]
fn node_local_dns_templates() {
    assert_fixture(
        "nodelocaldns-template",
        &[
            (
                W,
                "corefile.template",
                "nodelocaldns-template.Corefile",
                Some(1),
            ),
            (
                W,
                "corefile.template",
                "nodelocaldns-template.Corefile",
                Some(9),
            ),
            (
                W,
                "corefile.template",
                "nodelocaldns-template.Corefile",
                Some(9),
            ),
            (I, "kubelet.config", "/var/lib/kubelet/config.yaml", None),
            (I, "corefile.template", "node-local-dns.yaml", Some(13)),
            (I, "corefile.template", "node-local-dns.yaml", Some(36)),
            (
                I,
                "corefile.template",
                "nodelocaldns-template.Corefile",
                Some(10),
            ),
            (
                I,
                "corefile.template",
                "nodelocaldns-template.Corefile",
                Some(33),
            ),
            (I, "search.ndots-amplification", "/etc/resolv.conf", None),
            (I, "search.ndots-amplification", "/etc/resolv.conf", None),
            (I, "bridge.netfilter", "/sys/class/net", None),
            (
                I,
                "conntrack.insert-failed",
                "/proc/net/stat/nf_conntrack",
                None,
            ),
            (
                I,
                "conntrack.table",
                "/proc/sys/net/netfilter/nf_conntrack_count",
                None,
            ),
            (K, "resolv.loopback-upstream", "/etc/resolv.conf", None),
            (K, "resolv.link-local-upstream", "/etc/resolv.conf", None),
            // -o json puts the Corefile on one line: its lines are the Corefile's own.
            (K, "corefile.forwards", "coredns.json (data.Corefile)", None),
            (K, "corefile.forwards", "node-local-dns.yaml", None),
            (
                K,
                "corefile.forwards",
                "nodelocaldns-template.Corefile",
                None,
            ),
            (K, "search.limits", "/etc/resolv.conf", None),
        ],
        0,
    );
}

#[test]
fn search_list_amplification_and_limits() {
    assert_fixture(
        "search-amplification",
        &[
            (W, "resolv.nameserver-limit", "/etc/resolv.conf", Some(7)),
            (
                W,
                "resolv.malformed-nameserver",
                "/etc/resolv.conf",
                Some(6),
            ),
            (W, "search.stray-domain", "/etc/resolv.conf", Some(2)),
            (W, "search.limits", "/etc/resolv.conf", Some(2)),
            (I, "kubelet.config", "/var/lib/kubelet/config.yaml", None),
            (I, "search.ndots-amplification", "/etc/resolv.conf", Some(2)),
            (I, "search.ndots-amplification", "/etc/resolv.conf", Some(8)),
            (I, "bridge.netfilter", "/sys/class/net", None),
            (
                I,
                "conntrack.insert-failed",
                "/proc/net/stat/nf_conntrack",
                None,
            ),
            (
                I,
                "conntrack.table",
                "/proc/sys/net/netfilter/nf_conntrack_count",
                None,
            ),
            (K, "resolv.loopback-upstream", "/etc/resolv.conf", None),
            (K, "resolv.link-local-upstream", "/etc/resolv.conf", None),
        ],
        0,
    );
    let checks = examine(&fixture_args("search-amplification")).unwrap();
    let pods = checks
        .iter()
        .find(|check| check.subject == "pods' lookups")
        .unwrap();
    // 3 cluster domains and 5 of the host's: 9 tries, A and AAAA each.
    assert!(
        pods.summary.contains("8 search domains) costs 18 queries"),
        "{}",
        pods.summary
    );
    assert!(
        pods.summary.contains("16 answered NXDOMAIN"),
        "{}",
        pods.summary
    );
}

#[test]
fn bridge_netfilter_off_while_pods_are_bridged() {
    assert_fixture(
        "bridge-nf-off",
        &[
            (
                E,
                "bridge.nf-call-iptables",
                "/proc/sys/net/bridge/bridge-nf-call-iptables",
                Some(1),
            ),
            // The cluster DNS has an IPv6 address: IPv6 lookups hit it too.
            (
                E,
                "bridge.nf-call-ip6tables",
                "/proc/sys/net/bridge/bridge-nf-call-ip6tables",
                Some(1),
            ),
            (I, "kubelet.config", "/var/lib/kubelet/config.yaml", None),
            (I, "search.ndots-amplification", "/etc/resolv.conf", None),
            (I, "search.ndots-amplification", "/etc/resolv.conf", None),
            (
                I,
                "conntrack.insert-failed",
                "/proc/net/stat/nf_conntrack",
                None,
            ),
            (
                I,
                "conntrack.table",
                "/proc/sys/net/netfilter/nf_conntrack_count",
                None,
            ),
            (K, "resolv.loopback-upstream", "/etc/resolv.conf", None),
            (K, "resolv.link-local-upstream", "/etc/resolv.conf", None),
            (K, "search.limits", "/etc/resolv.conf", None),
        ],
        EXIT_ERRORS,
    );
}

#[test]
fn br_netfilter_not_loaded_while_pods_are_bridged() {
    assert_fixture(
        "br-netfilter-missing",
        &[
            (
                E,
                "bridge.br-netfilter-missing",
                "/proc/sys/net/bridge",
                None,
            ),
            (I, "kubelet.config", "/var/lib/kubelet/config.yaml", None),
            (I, "search.ndots-amplification", "/etc/resolv.conf", None),
            (I, "search.ndots-amplification", "/etc/resolv.conf", None),
            (
                I,
                "conntrack.insert-failed",
                "/proc/net/stat/nf_conntrack",
                None,
            ),
            (K, "resolv.loopback-upstream", "/etc/resolv.conf", None),
            (K, "resolv.link-local-upstream", "/etc/resolv.conf", None),
            (K, "search.limits", "/etc/resolv.conf", None),
            (
                K,
                "conntrack.table",
                "/proc/sys/net/netfilter/nf_conntrack_count",
                Some(1),
            ),
        ],
        EXIT_ERRORS,
    );
    let checks = examine(&fixture_args("br-netfilter-missing")).unwrap();
    let missing = with_summary(&checks, "bridge.br-netfilter-missing");
    // docker0 has no ports: only cni0 carries pods.
    assert!(
        missing.summary.contains("bridge cni0 (1 port)"),
        "{}",
        missing.summary
    );
}

#[test]
fn conntrack_races_and_a_full_table() {
    assert_fixture(
        "conntrack-races",
        &[
            (
                W,
                "conntrack.insert-failed",
                "/proc/net/stat/nf_conntrack",
                None,
            ),
            (
                W,
                "conntrack.table",
                "/proc/sys/net/netfilter/nf_conntrack_count",
                Some(1),
            ),
            (I, "kubelet.config", "/var/lib/kubelet/config.yaml", None),
            (I, "search.ndots-amplification", "/etc/resolv.conf", None),
            (I, "search.ndots-amplification", "/etc/resolv.conf", None),
            (I, "bridge.netfilter", "/sys/class/net", None),
            (K, "resolv.loopback-upstream", "/etc/resolv.conf", None),
            (K, "resolv.link-local-upstream", "/etc/resolv.conf", None),
            (K, "search.limits", "/etc/resolv.conf", None),
        ],
        0,
    );
    let checks = examine(&fixture_args("conntrack-races")).unwrap();
    let races = with_summary(&checks, "conntrack.insert-failed");
    assert!(
        races
            .summary
            .contains("insert_failed 50 and drop 4 since boot (and 43 clashes resolved without a drop), summed over 4 CPUs"),
        "{}",
        races.summary
    );
}

#[test]
fn kubelet_pointing_at_a_missing_file_without_cluster_dns() {
    assert_fixture(
        "kubelet-faults",
        &[
            (
                E,
                "kubelet.resolv-conf",
                "/var/lib/kubelet/config.yaml",
                Some(35),
            ),
            (
                W,
                "kubelet.cluster-dns",
                "/var/lib/kubelet/config.yaml",
                None,
            ),
            (I, "kubelet.config", "/var/lib/kubelet/config.yaml", None),
            (I, "search.ndots-amplification", "/etc/resolv.conf", None),
            (I, "bridge.netfilter", "/sys/class/net", None),
            (
                I,
                "conntrack.insert-failed",
                "/proc/net/stat/nf_conntrack",
                None,
            ),
            (
                I,
                "conntrack.table",
                "/proc/sys/net/netfilter/nf_conntrack_count",
                None,
            ),
        ],
        EXIT_ERRORS,
    );
}

#[test]
fn kubelet_with_an_empty_resolv_conf_hands_coredns_its_own_loopback() {
    assert_fixture(
        "kubelet-resolvconf-empty",
        &[
            (
                E,
                "kubelet.resolv-conf",
                "/var/lib/kubelet/config.yaml",
                Some(37),
            ),
            (I, "kubelet.config", "/var/lib/kubelet/config.yaml", None),
            (I, "search.ndots-amplification", "/etc/resolv.conf", None),
            (I, "bridge.netfilter", "/sys/class/net", None),
            (
                I,
                "conntrack.insert-failed",
                "/proc/net/stat/nf_conntrack",
                None,
            ),
            (
                I,
                "conntrack.table",
                "/proc/sys/net/netfilter/nf_conntrack_count",
                None,
            ),
            (K, "corefile.forwards", "coredns.yaml", None),
        ],
        EXIT_ERRORS,
    );
}

#[test]
fn a_mounted_disk_without_run_proc_or_sys_is_not_an_error() {
    assert_fixture(
        "mounted-disk",
        &[
            (I, "kubelet.config", "/var/lib/kubelet/config.yaml", None),
            (
                I,
                "kubelet.resolv-conf",
                "/var/lib/kubelet/config.yaml",
                Some(37),
            ),
            (I, "resolv.file", "/etc/resolv.conf", None),
            (I, "bridge.netfilter", "/sys/class/net", None),
            (
                I,
                "conntrack.insert-failed",
                "/proc/net/stat/nf_conntrack",
                None,
            ),
            (
                I,
                "conntrack.table",
                "/proc/sys/net/netfilter/nf_conntrack_count",
                None,
            ),
        ],
        0,
    );
}

#[test]
fn doctor_cannot_run_without_its_inputs() {
    let mut args = fixture_args("healthy");
    args.root = PathBuf::from("/nonexistent/node");
    assert_eq!(
        exit_status(&doctor(&args, &mut Vec::new())),
        EXIT_CANNOT_RUN
    );

    let mut args = fixture_args("healthy");
    args.root = Path::new(FIXTURES).join("healthy/corefiles/coredns.yaml");
    assert_eq!(
        exit_status(&doctor(&args, &mut Vec::new())),
        EXIT_CANNOT_RUN
    );

    let mut args = fixture_args("healthy");
    args.corefiles
        .push(PathBuf::from("/nonexistent/coredns.yaml"));
    assert_eq!(
        exit_status(&doctor(&args, &mut Vec::new())),
        EXIT_CANNOT_RUN
    );
}

/// A node tree built in a test: files, symlinks and Corefiles.
struct Tree {
    dir: tempfile::TempDir,
    corefiles: Vec<PathBuf>,
}

impl Tree {
    fn new() -> Self {
        Self {
            dir: tempfile::tempdir().expect("create a temporary directory"),
            corefiles: Vec::new(),
        }
    }

    fn root(&self) -> PathBuf {
        self.dir.path().join("root")
    }

    fn file(self, path: &str, content: &str) -> Self {
        let host = self.root().join(path.trim_start_matches('/'));
        fs::create_dir_all(host.parent().unwrap()).unwrap();
        fs::write(host, content).unwrap();
        self
    }

    fn link(self, path: &str, target: &str) -> Self {
        let host = self.root().join(path.trim_start_matches('/'));
        fs::create_dir_all(host.parent().unwrap()).unwrap();
        symlink(target, host).unwrap();
        self
    }

    fn kubelet(self, config: &str) -> Self {
        self.file("/var/lib/kubelet/config.yaml", config)
    }

    fn corefile(mut self, text: &str) -> Self {
        let path = self
            .dir
            .path()
            .join(format!("Corefile-{}", self.corefiles.len()));
        fs::write(&path, text).unwrap();
        self.corefiles.push(path);
        self
    }

    fn checks(&self) -> Vec<Check> {
        fs::create_dir_all(self.root()).unwrap();
        examine(&Config {
            root: self.root(),
            corefiles: self.corefiles.clone(),
            output: OutputFormat::Text,
        })
        .unwrap()
    }
}

fn severity_of(checks: &[Check], id: &str) -> Vec<Severity> {
    checks
        .iter()
        .filter(|check| check.id == id)
        .map(|check| check.severity)
        .collect()
}

const KUBELET: &str =
    "kind: KubeletConfiguration\nclusterDNS:\n- 10.96.0.10\nresolvConf: /etc/resolv.conf\n";
const FORWARD_TO_RESOLV_CONF: &str = ".:53 {\n    forward . /etc/resolv.conf\n    loop\n}\n";

#[test]
fn a_loopback_upstream_without_kubelet_config_is_a_warning() {
    let tree = Tree::new().file("/etc/resolv.conf", "nameserver 127.0.0.1\n");
    let checks = tree.checks();
    assert_eq!(severity_of(&checks, "resolv.loopback-upstream"), [W]);
    let fix = with_summary(&checks, "resolv.loopback-upstream")
        .fix
        .clone()
        .unwrap();
    assert!(fix.contains("127.0.0.1 uses"), "{fix}");
}

#[test]
fn link_local_upstreams_by_what_doctor_knows() {
    // Unknown to doctor: could be anything link-local.
    let unknown = Tree::new()
        .kubelet(KUBELET)
        .file("/etc/resolv.conf", "nameserver 169.254.7.7\n")
        .checks();
    assert_eq!(severity_of(&unknown, "resolv.link-local-upstream"), [W]);
    // The usual node-local-dns address, no Corefile given: CoreDNS's default forward loops.
    let usual = Tree::new()
        .kubelet(KUBELET)
        .file("/etc/resolv.conf", "nameserver 169.254.20.10\n")
        .checks();
    assert_eq!(severity_of(&usual, "resolv.link-local-upstream"), [E]);
    // Corefiles given, none forwarding to /etc/resolv.conf: no loop through them.
    let explicit = Tree::new()
        .kubelet(KUBELET)
        .file("/etc/resolv.conf", "nameserver 169.254.20.10\n")
        .corefile(".:53 {\n    forward . 10.0.0.2\n    loop\n}\n")
        .checks();
    assert_eq!(severity_of(&explicit, "resolv.link-local-upstream"), [I]);
    // A cloud's own resolver is a real upstream.
    let aws = Tree::new()
        .kubelet(KUBELET)
        .file("/etc/resolv.conf", "nameserver 169.254.169.253\n")
        .corefile(FORWARD_TO_RESOLV_CONF)
        .checks();
    assert_eq!(severity_of(&aws, "resolv.link-local-upstream"), [K]);
}

#[test]
fn the_node_on_node_local_dns_while_pods_get_another_file_is_info() {
    let checks = Tree::new()
        .kubelet("resolvConf: /etc/kubernetes/resolv.conf\nclusterDNS: [169.254.25.10]\n")
        .file(
            "/etc/resolv.conf",
            "nameserver 169.254.25.10\nnameserver 10.0.0.2\n",
        )
        .file("/etc/kubernetes/resolv.conf", "nameserver 10.0.0.2\n")
        .corefile(FORWARD_TO_RESOLV_CONF)
        .checks();
    assert_eq!(severity_of(&checks, "resolv.link-local-upstream"), [I]);
    let node = with_summary(&checks, "resolv.link-local-upstream");
    assert_eq!(node.location.as_ref().unwrap().line, Some(1));
}

#[test]
fn corefile_targets_that_loop() {
    let checks = Tree::new()
        .kubelet("clusterDNS: [169.254.25.10]\n")
        .file("/etc/resolv.conf", "nameserver 10.0.0.2\n")
        .corefile(".:53 {\n    forward . 169.254.25.10 127.0.0.1 [::1]:53 8.8.8.8\n    loop\n}\n")
        .checks();
    // node-local-dns's address (kubelet's link-local clusterDNS), and CoreDNS itself twice.
    assert_eq!(severity_of(&checks, "corefile.forward-link-local"), [E]);
    assert_eq!(severity_of(&checks, "corefile.forward-loopback"), [E, E]);
    assert!(severity_of(&checks, "corefile.forwards").is_empty());
}

#[test]
fn a_node_local_dns_corefile_may_forward_to_the_cluster_dns_and_the_node() {
    let checks = Tree::new()
        .kubelet(KUBELET)
        .file("/etc/resolv.conf", "nameserver 10.0.0.2\n")
        .corefile("cluster.local:53 {\n    bind 169.254.20.10\n    forward . 10.96.0.10\n    loop\n}\n.:53 {\n    bind 169.254.20.10\n    forward . 127.0.0.53 169.254.20.10\n    loop\n}\n")
        .checks();
    assert_eq!(severity_of(&checks, "corefile.forward-cluster-dns"), []);
    assert_eq!(severity_of(&checks, "corefile.forward-loopback"), [W]);
    assert_eq!(severity_of(&checks, "corefile.forward-self"), [E]);
}

#[test]
fn a_corefile_that_does_not_parse_is_an_error_at_its_line() {
    let checks = Tree::new()
        .file("/etc/resolv.conf", "nameserver 10.0.0.2\n")
        .corefile(".:53 {\n    forward . 10.0.0.2 {\n        force_tcp\n    loop\n}\n")
        .checks();
    let syntax = with_summary(&checks, "corefile.syntax");
    assert_eq!(syntax.severity, E);
    assert_eq!(syntax.location.as_ref().unwrap().line, Some(1));
}

#[test]
fn kubelet_config_problems() {
    let invalid = Tree::new()
        .kubelet("clusterDNS:\n- kube-dns.kube-system\n")
        .file("/etc/resolv.conf", "nameserver 10.0.0.2\n")
        .checks();
    assert_eq!(severity_of(&invalid, "kubelet.cluster-dns"), [E]);
    let unusable = Tree::new()
        .kubelet("clusterDNS: 10.96.0.10\n")
        .file("/etc/resolv.conf", "nameserver 10.0.0.2\n")
        .checks();
    assert_eq!(severity_of(&unusable, "kubelet.config"), [W]);
}

#[test]
fn resolv_conf_without_nameservers() {
    let checks = Tree::new()
        .kubelet(KUBELET)
        .file(
            "/etc/resolv.conf",
            "# emptied by a failed DHCP run\nsearch example.com\n",
        )
        .checks();
    assert_eq!(severity_of(&checks, "resolv.no-nameserver"), [W]);
}

#[test]
fn a_dangling_resolv_conf_on_a_running_node_is_a_warning() {
    let checks = Tree::new()
        .kubelet(KUBELET)
        .file("/run/containerd/containerd.sock", "")
        .link(
            "/etc/resolv.conf",
            "../run/systemd/resolve/stub-resolv.conf",
        )
        .checks();
    assert_eq!(severity_of(&checks, "resolv.file"), [W]);
    // kubelet hands pods the same missing file: that is an error of its own.
    assert_eq!(severity_of(&checks, "kubelet.resolv-conf"), [E]);
}

#[test]
fn a_search_list_past_kubelets_expanded_limits_is_an_error() {
    let domains: Vec<String> = (0..40).map(|n| format!("d{n}.example.com")).collect();
    let checks = Tree::new()
        .kubelet(KUBELET)
        .file(
            "/etc/resolv.conf",
            &format!("nameserver 10.0.0.2\nsearch {}\n", domains.join(" ")),
        )
        .checks();
    assert_eq!(severity_of(&checks, "search.limits"), [E]);
}

#[test]
fn ip6tables_off_without_ipv6_cluster_dns_is_a_warning() {
    let checks = Tree::new()
        .kubelet(KUBELET)
        .file("/etc/resolv.conf", "nameserver 10.0.0.2\n")
        .file("/sys/class/net/cni0/bridge/stp_state", "0\n")
        .link("/sys/class/net/cni0/brif/veth1", "../../veth1/brport")
        .file("/proc/sys/net/bridge/bridge-nf-call-iptables", "1\n")
        .file("/proc/sys/net/bridge/bridge-nf-call-ip6tables", "0\n")
        .checks();
    assert_eq!(severity_of(&checks, "bridge.nf-call-iptables"), [K]);
    assert_eq!(severity_of(&checks, "bridge.nf-call-ip6tables"), [W]);
}

#[test]
fn a_full_conntrack_table_is_an_error() {
    let checks = Tree::new()
        .file("/etc/resolv.conf", "nameserver 10.0.0.2\n")
        .file("/proc/sys/net/netfilter/nf_conntrack_count", "65536\n")
        .file("/proc/sys/net/netfilter/nf_conntrack_max", "65536\n")
        .checks();
    assert_eq!(severity_of(&checks, "conntrack.table"), [E]);
}

#[test]
fn junk_in_every_file_never_stops_doctor() {
    let junk = String::from_utf8_lossy(&[
        0, 0xff, b'\n', 0x1b, b'[', b'2', b'J', b'\r', b'{', b'}', b'"',
    ])
    .into_owned();
    let huge = "x".repeat(1 << 20);
    let mut tree = Tree::new();
    for path in [
        "/etc/resolv.conf",
        "/var/lib/kubelet/config.yaml",
        "/var/lib/kubelet/kubeadm-flags.env",
        "/proc/net/stat/nf_conntrack",
        "/proc/sys/net/netfilter/nf_conntrack_count",
        "/proc/sys/net/netfilter/nf_conntrack_max",
        "/proc/sys/net/bridge/bridge-nf-call-iptables",
        "/sys/class/net/cni0/bridge/stp_state",
    ] {
        tree = tree.file(path, &format!("{junk}{huge}\n{junk}"));
    }
    let tree = tree.corefile(&junk).corefile(&huge);
    let checks = tree.checks();
    assert!(!checks.is_empty());
    let mut report = Vec::new();
    doctor(
        &Config {
            root: tree.root(),
            corefiles: tree.corefiles.clone(),
            output: OutputFormat::Text,
        },
        &mut report,
    )
    .unwrap();
    // No control byte from the files reaches the terminal.
    assert!(!report.contains(&0x1b), "an escape sequence got through");
}

#[test]
fn a_block_forwarding_with_a_large_bufsize_is_a_risk_and_1232_is_none() {
    let bufsize = |size: &str| {
        Tree::new()
            .kubelet(KUBELET)
            .file("/etc/resolv.conf", "nameserver 10.0.0.2\n")
            .corefile(&format!(
                ".:53 {{\n    bufsize {size}\n    forward . 10.0.0.2\n    loop\n}}\n"
            ))
            .checks()
    };
    let large = bufsize("4096");
    assert_eq!(severity_of(&large, "corefile.large-bufsize"), [I]);
    let check = with_summary(&large, "corefile.large-bufsize");
    assert_eq!(check.location.as_ref().unwrap().line, Some(2));
    assert!(
        check.fix.as_deref().unwrap().contains("bufsize 1232"),
        "{check:?}"
    );
    assert!(severity_of(&bufsize("1232"), "corefile.large-bufsize").is_empty());
    let without = Tree::new()
        .kubelet(KUBELET)
        .file("/etc/resolv.conf", "nameserver 10.0.0.2\n")
        .corefile(FORWARD_TO_RESOLV_CONF)
        .checks();
    assert!(severity_of(&without, "corefile.large-bufsize").is_empty());
}
