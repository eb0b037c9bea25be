//! dnsloop on a node over its lifetime: what it leaves attached when it ends (SIGTERM, SIGKILL),
//! two dnsloops on one node, the clsact path that kernels without TCX take (forced here with
//! `DNSLOOP_FORCE_CLSACT=1`), a restart that carries on from its pinned maps (`--pin`), and
//! `--expedite-attach`.
use std::{
    collections::BTreeSet,
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use dnsloop_tests::or_fail::OrFail as _;
use dnsloop_tests::test_name;
use dnsloop_tests::{
    lab::{Lab, Pod, Scenario, NODE_LOCAL_DNS},
    privilege::{can_run, dnsloop_bin, Need},
    tracer::{Tracer, TracerOutput},
};
use serde_json::Value;

const QUERIES: u64 = 3;
const CLUSTER_NAME: &str = "api.default.svc.cluster.local";
const FORCE_CLSACT: (&str, &str) = ("DNSLOOP_FORCE_CLSACT", "1");
/// The start of the warning dnsloop prints when it attaches with tc clsact.
const CLSACT_WARNING: &str = "dnsloop: TCX is not available";
/// Freeing a program the kernel no longer uses is deferred (RCU): give it this long.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(10);

fn healthy_lab(test: &str) -> Option<Lab> {
    if !can_run(
        test,
        &[
            Need::Root,
            Need::DnsloopBinary,
            Need::Tool("bpftool"),
            Need::Tool("tc"),
        ],
    ) {
        return None;
    }
    Some(Lab::builder(Scenario::Healthy).start().expect("lab up"))
}

fn start(lab: &Lab, env: &[(&str, &str)]) -> Tracer {
    Tracer::start_with_env(
        &dnsloop_bin(),
        lab,
        lab.node_ns(),
        &["--output", "json"],
        env,
    )
    .expect("tracer starts")
}

#[test]
fn sigkill_leaves_no_program_attached() {
    let Some(lab) = healthy_lab(test_name!()) else {
        return;
    };
    let tracer = start(&lab, &[]);
    let handles = BpfHandles::of(tracer.pid());
    // Both directions of the node's links, its loopback's egress and the pods' loopbacks.
    assert!(handles.tcx_links >= 5, "{handles:?}");
    assert_eq!(handles.classifiers.len(), 2, "{handles:?}");
    assert_eq!(
        handles.programs.len(),
        3,
        "and the drop program: {handles:?}"
    );

    let output = tracer.kill().expect("tracer ends on SIGKILL");
    assert!(!output.stderr.contains(CLSACT_WARNING), "{}", output.stderr);
    // TCX links die with the process, and with them the kernel's last use of the programs.
    assert_released(&handles.programs);
    assert_no_dnsloop_filters(&lab, lab.node_ns());
}

#[test]
fn sigterm_ends_with_the_summary_and_exit_0() {
    let Some(lab) = healthy_lab(test_name!()) else {
        return;
    };
    let tracer = start(&lab, &[]);
    let programs = BpfHandles::of(tracer.pid()).programs;
    ask(&lab, QUERIES);

    let output = tracer.terminate().expect("tracer ends on SIGTERM");
    assert!(
        output.status.success(),
        "exit {:?}: {}",
        output.status,
        output.stderr
    );
    let summary = summary_of(&output);
    assert!(client_queries(&summary) >= QUERIES, "{summary}");
    assert_released(&programs);
}

/// The capabilities are what counts, not root: a user holding CAP_BPF, CAP_NET_ADMIN and
/// CAP_PERFMON traces the node. `setpriv` makes them ambient, so that they stay effective
/// across the exec of dnsloop by a user other than root.
#[test]
fn a_user_holding_the_capabilities_traces_without_root() {
    let test = test_name!();
    if !can_run(test, &[Need::Tool("setpriv")]) {
        return;
    }
    let Some(lab) = healthy_lab(test) else {
        return;
    };
    let capabilities = "+bpf,+net_admin,+perfmon";
    let dnsloop = dnsloop_bin();
    let argv = [
        "--regid=65534",
        "--clear-groups",
        &format!("--inh-caps={capabilities}"),
        &format!("--ambient-caps={capabilities}"),
        "--",
        dnsloop.to_str().expect("a UTF-8 path"),
        "trace",
        "--output",
        "json",
    ];
    // setpriv runs in dnsloop's place, and then runs dnsloop as nobody.
    let tracer = Tracer::start_subcommand(
        Path::new("setpriv"),
        "--reuid=65534",
        &lab,
        lab.node_ns(),
        &argv,
    )
    .expect("a user holding the capabilities starts tracing");
    ask(&lab, QUERIES);

    let output = tracer.terminate().expect("tracer ends on SIGTERM");
    assert!(output.status.success(), "{}", output.stderr);
    let summary = summary_of(&output);
    assert!(client_queries(&summary) >= QUERIES, "{summary}");
}

/// The kernel's switch for expedited RCU grace periods, node-wide.
const RCU_EXPEDITED: &str = "/sys/kernel/rcu_expedited";

#[test]
fn expedite_attach_expedites_grace_periods_only_while_attaching_and_detaching() {
    let Some(lab) = healthy_lab(test_name!()) else {
        return;
    };
    let before = std::fs::read_to_string(RCU_EXPEDITED).expect("reading the RCU switch");
    let tracer = Tracer::start_with_env(
        &dnsloop_bin(),
        &lab,
        lab.node_ns(),
        &["--output", "json", "--expedite-attach"],
        &[],
    )
    .expect("tracer starts");
    // Attached: the setting is back to what it was for as long as dnsloop watches.
    assert_eq!(std::fs::read_to_string(RCU_EXPEDITED).unwrap(), before);
    ask(&lab, QUERIES);

    let output = tracer.terminate().expect("tracer ends on SIGTERM");
    assert!(output.status.success(), "{}", output.stderr);
    assert!(
        !output.stderr.contains("--expedite-attach"),
        "{}",
        output.stderr
    );
    assert!(client_queries(&summary_of(&output)) >= QUERIES);
    assert_eq!(std::fs::read_to_string(RCU_EXPEDITED).unwrap(), before);
}

#[test]
fn a_second_tracer_works_alongside_the_first_and_outlives_it() {
    let Some(lab) = healthy_lab(test_name!()) else {
        return;
    };
    side_by_side(&lab, &[]);
}

/// On the clsact path the second dnsloop's filters get priorities of their own: the first's
/// exit removes its filters only, and the second goes on seeing every query.
#[test]
fn on_the_clsact_path_a_second_tracer_keeps_its_filters_when_the_first_exits() {
    let Some(lab) = healthy_lab(test_name!()) else {
        return;
    };
    side_by_side(&lab, &[FORCE_CLSACT]);
}

/// Starts two tracers, asks `QUERIES` names, stops the first, asks as many again: the second,
/// still attached, saw both rounds.
fn side_by_side(lab: &Lab, env: &[(&str, &str)]) {
    let first = start(lab, env);
    let first_programs = BpfHandles::of(first.pid()).programs;
    let second = start(lab, env);
    let second_handles = BpfHandles::of(second.pid());
    ask(lab, QUERIES);

    let first = first.terminate().expect("first tracer ends on SIGTERM");
    assert!(first.status.success(), "{}", first.stderr);
    assert!(
        client_queries(&summary_of(&first)) >= QUERIES,
        "{}",
        first.stdout
    );
    assert_released(&first_programs);
    if !env.is_empty() {
        let attached = dnsloop_filters(lab, lab.node_ns());
        let ids: BTreeSet<u64> = attached.iter().map(|filter| filter.program).collect();
        assert_eq!(
            ids,
            second_handles.classifiers.iter().copied().collect(),
            "{attached:?}"
        );
    }

    ask(lab, QUERIES);
    let second = second.terminate().expect("second tracer ends on SIGTERM");
    assert!(second.status.success(), "{}", second.stderr);
    assert!(
        client_queries(&summary_of(&second)) >= 2 * QUERIES,
        "{}",
        second.stdout
    );
    assert_released(&second_handles.programs);
    assert_no_dnsloop_filters(lab, lab.node_ns());
}

#[test]
fn on_the_clsact_path_an_exit_removes_the_filters_and_qdiscs_it_added() {
    let Some(lab) = healthy_lab(test_name!()) else {
        return;
    };
    let client = lab.pod_ns(Pod::Client);
    for ns in [lab.node_ns(), &client] {
        assert!(clsact_qdiscs(&lab, ns).is_empty(), "the lab has no clsact");
    }
    let tracer = start(&lab, &[FORCE_CLSACT]);
    let programs = BpfHandles::of(tracer.pid()).programs;
    // The node's interfaces, and the pod's loopback in its own namespace.
    assert!(dnsloop_filters(&lab, lab.node_ns()).len() >= 5);
    assert_eq!(dnsloop_filters(&lab, &client).len(), 1);
    ask(&lab, QUERIES);

    let output = tracer.terminate().expect("tracer ends on SIGTERM");
    assert!(output.status.success(), "{}", output.stderr);
    assert!(output.stderr.contains(CLSACT_WARNING), "{}", output.stderr);
    // What it did without, in one line at start and in the summary.
    assert!(
        output
            .stderr
            .lines()
            .any(|line| line.starts_with("dnsloop: this kernel (Linux ")
                && line.contains("lacks TCX (6.6): attached through tc clsact")),
        "{}",
        output.stderr
    );
    let summary = summary_of(&output);
    assert!(client_queries(&summary) >= QUERIES);
    assert!(
        summary["kernel_lacks"]
            .as_array()
            .is_some_and(|lacks| lacks.contains(&"tcx".into())),
        "{}",
        summary["kernel_lacks"]
    );
    for ns in [lab.node_ns(), &client] {
        assert_no_dnsloop_filters(&lab, ns);
        assert_eq!(clsact_qdiscs(&lab, ns), Vec::<String>::new(), "in {ns}");
    }
    assert_released(&programs);
}

/// A SIGKILL leaves the clsact filters behind, as the warning says; the warning's own recipe
/// (`tc filter del dev IFACE DIRECTION pref PREF`) removes them.
#[test]
fn on_the_clsact_path_sigkill_leaves_the_filters_the_warning_tells_how_to_remove() {
    let Some(lab) = healthy_lab(test_name!()) else {
        return;
    };
    let tracer = start(&lab, &[FORCE_CLSACT]);
    let output = tracer.kill().expect("tracer ends on SIGKILL");
    let warning = output
        .stderr
        .lines()
        .find(|line| line.starts_with(CLSACT_WARNING))
        .or_fail(format_args!("no clsact warning in:\n{}", output.stderr));
    assert!(warning.contains("SIGKILL leaves them behind"), "{warning}");

    let left = dnsloop_filters(&lab, lab.node_ns());
    assert!(left.len() >= 5, "{left:?}");
    for filter in &left {
        let pref = filter.pref.to_string();
        let removed = lab
            .exec(
                lab.node_ns(),
                &[
                    "tc",
                    "filter",
                    "del",
                    "dev",
                    &filter.device,
                    &filter.direction,
                    "pref",
                    &pref,
                ],
            )
            .expect("run tc");
        assert!(removed.status.success(), "{filter:?}: {removed:?}");
    }
    assert_no_dnsloop_filters(&lab, lab.node_ns());
    // The pods' loopbacks keep theirs: deleting the lab removes them with the namespaces.
}

/// What a SIGKILL leaves on the clsact path, the next dnsloop removes where it attaches, on the
/// node's interfaces and the pods' loopbacks alike; the filters of a dnsloop still running stay.
#[test]
fn on_the_clsact_path_the_next_dnsloop_removes_the_filters_a_killed_one_left() {
    let Some(lab) = healthy_lab(test_name!()) else {
        return;
    };
    let client = lab.pod_ns(Pod::Client);
    let running = start(&lab, &[FORCE_CLSACT]);
    let running_programs = BpfHandles::of(running.pid()).classifiers;
    let killed = start(&lab, &[FORCE_CLSACT]);
    let killed_programs = BpfHandles::of(killed.pid()).programs;
    let output = killed.kill().expect("tracer ends on SIGKILL");
    assert!(
        output
            .stderr
            .contains("leaves them behind until the next dnsloop starts and removes them"),
        "{}",
        output.stderr
    );
    let left_by_the_killed = |ns: &str| {
        dnsloop_filters(&lab, ns)
            .into_iter()
            .filter(|filter| killed_programs.contains(&filter.program))
            .count()
    };
    assert!(left_by_the_killed(lab.node_ns()) >= 5);
    assert_eq!(left_by_the_killed(&client), 1);

    let next = start(&lab, &[FORCE_CLSACT]);
    let next_programs = BpfHandles::of(next.pid()).classifiers;
    let expected: BTreeSet<u64> = running_programs
        .iter()
        .chain(&next_programs)
        .copied()
        .collect();
    let node_ids: BTreeSet<u64> = dnsloop_filters(&lab, lab.node_ns())
        .iter()
        .map(|filter| filter.program)
        .collect();
    assert_eq!(node_ids, expected);
    // A pod's loopback is watched on egress only: one filter from each live tracer.
    let on_the_client = dnsloop_filters(&lab, &client);
    assert_eq!(on_the_client.len(), 2, "{on_the_client:?}");
    assert!(
        on_the_client
            .iter()
            .all(|filter| expected.contains(&filter.program)),
        "{on_the_client:?}"
    );
    assert_released(&killed_programs);

    ask(&lab, QUERIES);
    let next = next.terminate().expect("next tracer ends on SIGTERM");
    assert!(next.status.success(), "{}", next.stderr);
    let removed: Vec<&str> = next
        .stderr
        .lines()
        .filter(|line| line.contains("a dnsloop that no longer runs left it behind"))
        .collect();
    assert!(
        removed.len() >= 6,
        "the node's filters and the client's loopback's:\n{}",
        next.stderr
    );
    assert!(
        removed.iter().any(|line| line
            .starts_with("dnsloop: removed tc filter dnsloop_egress (pref ")
            && line.contains(") from lo in the namespace of ")),
        "{}",
        next.stderr
    );
    assert!(
        client_queries(&summary_of(&next)) >= QUERIES,
        "{}",
        next.stdout
    );
    let running = running.terminate().expect("running tracer ends on SIGTERM");
    assert!(running.status.success(), "{}", running.stderr);
    assert!(
        !running.stderr.contains("no longer runs left it behind"),
        "{}",
        running.stderr
    );
    for ns in [lab.node_ns(), &client] {
        assert_no_dnsloop_filters(&lab, ns);
    }
}

/// The maps `--pin` keeps, by name.
const PINNED_MAPS: [&str; 6] = [
    "COUNTERS",
    "LONG_NAMES",
    "POINTS",
    "POINT_COUNTERS",
    "QUERIES",
    "SERVERS",
];

/// A tracer stopped and started again with the same `--pin` carries on from its maps: the
/// per-interface and kernel counters and the server's answers continue; only one tracer may use
/// the directory at a time, and one with another query table size is refused.
#[test]
fn a_tracer_restarted_with_pin_continues_its_counters() {
    let Some(lab) = healthy_lab(test_name!()) else {
        return;
    };
    let bpffs = BpfFs::mount();
    let dir = bpffs.path().join("dnsloop");
    let dir_arg = dir.to_str().expect("a UTF-8 path");
    let pinned = ["--output", "json", "--pin", dir_arg];

    let first = Tracer::start(&dnsloop_bin(), &lab, lab.node_ns(), &pinned).expect("tracer starts");
    ask(&lab, QUERIES);
    let refused = run_trace(&lab, &pinned);
    assert_eq!(refused.status.code(), Some(2), "{refused:?}");
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("another dnsloop is tracing with it"),
        "{refused:?}"
    );
    let first = first.terminate().expect("first tracer ends on SIGTERM");
    assert!(first.status.success(), "{}", first.stderr);
    assert!(
        first.stderr.contains("dnsloop: pinning"),
        "{}",
        first.stderr
    );
    let before = summary_of(&first);
    assert_eq!(
        pinned_maps(&dir),
        PINNED_MAPS,
        "what --pin leaves in {dir:?}"
    );

    let second =
        Tracer::start(&dnsloop_bin(), &lab, lab.node_ns(), &pinned).expect("tracer starts again");
    ask(&lab, QUERIES);
    let second = second.terminate().expect("second tracer ends on SIGTERM");
    assert!(second.status.success(), "{}", second.stderr);
    assert!(
        second.stderr.contains("dnsloop: continuing from"),
        "{}",
        second.stderr
    );
    let after = summary_of(&second);
    assert!(
        client_queries(&after) >= client_queries(&before) + QUERIES,
        "the client's queries did not continue:\nbefore: {before}\nafter: {after}"
    );
    let dns_packets = |summary: &Value| summary["kernel"]["dns_packets"].as_u64().unwrap_or(0);
    assert!(
        dns_packets(&after) > dns_packets(&before),
        "{before}\n{after}"
    );
    let answered = |summary: &Value| {
        summary["servers"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|server| server["server"] == format!("{NODE_LOCAL_DNS}:53"))
            .and_then(|server| server["count"].as_u64())
            .unwrap_or(0)
    };
    assert!(answered(&before) >= QUERIES, "{before}");
    assert!(
        answered(&after) >= answered(&before) + QUERIES,
        "the cache's answers did not continue:\nbefore: {before}\nafter: {after}"
    );

    let resized = run_trace(&lab, &["--pin", dir_arg, "--query-table-size", "4096"]);
    let stderr = String::from_utf8_lossy(&resized.stderr);
    assert_eq!(resized.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("pinned map ") && stderr.contains("/QUERIES"),
        "{stderr}"
    );
    assert!(stderr.contains(&format!("`rm -r {dir_arg}`")), "{stderr}");
}

/// Without `--pin` no map outlives the tracer: none is pinned, in /sys/fs/bpf or anywhere.
#[test]
fn without_pin_no_map_outlives_the_tracer() {
    let Some(lab) = healthy_lab(test_name!()) else {
        return;
    };
    let sys_fs_bpf = pinned_maps(Path::new("/sys/fs/bpf"));
    let tracer = start(&lab, &[]);
    let maps = BpfHandles::of(tracer.pid()).maps;
    assert!(maps.len() >= PINNED_MAPS.len(), "{maps:?}");
    ask(&lab, QUERIES);
    let output = tracer.terminate().expect("tracer ends on SIGTERM");
    assert!(output.status.success(), "{}", output.stderr);
    assert!(!output.stderr.contains("pinning"), "{}", output.stderr);
    wait_until_gone("maps", &maps, |id| bpftool_shows("map", id));
    assert_eq!(pinned_maps(Path::new("/sys/fs/bpf")), sys_fs_bpf);
}

/// `dnsloop trace ARGS` run to its end in the lab's node namespace, for a start it refuses.
fn run_trace(lab: &Lab, args: &[&str]) -> std::process::Output {
    let dnsloop = dnsloop_bin();
    let argv: Vec<&str> = [
        dnsloop.to_str().expect("a UTF-8 path"),
        "trace",
        "--duration",
        "1s",
    ]
    .into_iter()
    .chain(args.iter().copied())
    .collect();
    lab.exec(lab.node_ns(), &argv).expect("run dnsloop trace")
}

/// The names in `dir`, sorted; none when it does not exist.
fn pinned_maps(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// A BPF filesystem of the test's own, unmounted (and with it whatever was pinned there) when
/// dropped.
struct BpfFs {
    dir: tempfile::TempDir,
}

impl BpfFs {
    fn mount() -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let mounted = Command::new("mount")
            .args(["-t", "bpf", "bpf"])
            .arg(dir.path())
            .status()
            .expect("run mount");
        assert!(mounted.success(), "mount -t bpf failed");
        Self { dir }
    }

    fn path(&self) -> PathBuf {
        self.dir.path().to_owned()
    }
}

impl Drop for BpfFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).status();
    }
}

/// Asks the node-local cache for a cluster name `count` times from the client pod.
fn ask(lab: &Lab, count: u64) {
    for _ in 0..count {
        let outcome = lab
            .dig(Pod::Client, &NODE_LOCAL_DNS.to_string(), &[CLUSTER_NAME])
            .expect("dig");
        assert_eq!(
            outcome.status.as_deref(),
            Some("NOERROR"),
            "{}",
            outcome.stdout
        );
    }
}

fn summary_of(output: &TracerOutput) -> Value {
    output
        .stdout
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .find(|value| value["kind"] == "summary")
        .or_fail(format_args!(
            "no JSON summary on stdout:\n{}\nstderr:\n{}",
            output.stdout, output.stderr
        ))
}

/// DNS packets from the client pod into the node: the queries asked.
fn client_queries(summary: &Value) -> u64 {
    summary["interfaces"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|point| point["ifname"] == "veth-client" && point["dir"] == "ingress")
        .and_then(|point| point["dns_packets"].as_u64())
        .unwrap_or(0)
}

/// The BPF programs, maps and TCX links a process holds, from its file descriptors.
#[derive(Debug)]
struct BpfHandles {
    /// Every program it holds: the classifiers, and the drop program on the kernel's drops.
    programs: Vec<u64>,
    /// Of those, the classifiers, which its TC filters and TCX links hold too.
    classifiers: Vec<u64>,
    maps: Vec<u64>,
    tcx_links: usize,
}

/// `BPF_PROG_TYPE_SCHED_CLS` in a program's fdinfo.
const SCHED_CLS: &str = "3";

impl BpfHandles {
    fn of(pid: u32) -> Self {
        let mut handles = BpfHandles {
            programs: Vec::new(),
            classifiers: Vec::new(),
            maps: Vec::new(),
            tcx_links: 0,
        };
        let fdinfo = std::fs::read_dir(format!("/proc/{pid}/fdinfo")).expect("read fdinfo");
        for entry in fdinfo.flatten() {
            let Ok(info) = std::fs::read_to_string(entry.path()) else {
                continue;
            };
            let field = |name: &str| {
                info.lines()
                    .find_map(|line| line.strip_prefix(name))
                    .map(str::trim)
            };
            match (field("link_type:"), field("prog_id:"), field("map_id:")) {
                (Some("tcx"), _, _) => handles.tcx_links += 1,
                (None, Some(id), _) => {
                    let id = id.parse().expect("prog_id");
                    handles.programs.push(id);
                    if field("prog_type:") == Some(SCHED_CLS) {
                        handles.classifiers.push(id);
                    }
                }
                (None, None, Some(id)) => handles.maps.push(id.parse().expect("map_id")),
                _ => {}
            }
        }
        handles
    }
}

/// Waits until the kernel has freed every program in `ids`: nothing holds them any more, no
/// link, no filter, no process.
fn assert_released(ids: &[u64]) {
    wait_until_gone("programs", ids, |id| bpftool_shows("prog", id));
}

/// Waits until none of the BPF objects `ids` (`what`: programs, maps) exists any more.
fn wait_until_gone(what: &str, ids: &[u64], exists: impl Fn(u64) -> bool) {
    let deadline = Instant::now() + RELEASE_TIMEOUT;
    loop {
        let held: Vec<u64> = ids.iter().copied().filter(|&id| exists(id)).collect();
        if held.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what} {held:?} are still in the kernel after {RELEASE_TIMEOUT:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Whether the BPF object of `kind` (`prog`, `map`) with `id` exists.
fn bpftool_shows(kind: &str, id: u64) -> bool {
    Command::new("bpftool")
        .args([kind, "show", "id", &id.to_string()])
        .output()
        .expect("run bpftool")
        .status
        .success()
}

/// A dnsloop classifier attached as a tc filter, as `bpftool net show` and `tc` list it.
#[derive(Debug)]
struct TcFilter {
    device: String,
    direction: String,
    program: u64,
    pref: u64,
}

/// dnsloop's tc filters in namespace `ns`. (TCX links show in `bpftool net show` only from
/// bpftool 7.3; Debian 12 has 7.1, hence `BpfHandles` for them.)
fn dnsloop_filters(lab: &Lab, ns: &str) -> Vec<TcFilter> {
    let shown = json(lab, ns, &["bpftool", "-j", "net", "show"]);
    let mut filters = Vec::new();
    for entry in shown[0]["tc"].as_array().into_iter().flatten() {
        let name = entry["name"].as_str().unwrap_or_default();
        if !name.starts_with("dnsloop") {
            continue;
        }
        let device = entry["devname"].as_str().expect("devname").to_owned();
        let direction = entry["kind"]
            .as_str()
            .and_then(|kind| kind.strip_prefix("clsact/"))
            .expect("a clsact filter")
            .to_owned();
        let program = entry["id"].as_u64().expect("program id");
        let pref = json(
            lab,
            ns,
            &["tc", "-j", "filter", "show", "dev", &device, &direction],
        )
        .as_array()
        .into_iter()
        .flatten()
        .find(|filter| filter["options"]["prog"]["id"].as_u64() == Some(program))
        .and_then(|filter| filter["pref"].as_u64())
        .expect("tc lists the filter bpftool shows");
        filters.push(TcFilter {
            device,
            direction,
            program,
            pref,
        });
    }
    filters
}

fn assert_no_dnsloop_filters(lab: &Lab, ns: &str) {
    let left = dnsloop_filters(lab, ns);
    assert!(left.is_empty(), "dnsloop filters left in {ns}: {left:?}");
}

/// The devices of namespace `ns` that have a clsact qdisc.
fn clsact_qdiscs(lab: &Lab, ns: &str) -> Vec<String> {
    json(lab, ns, &["tc", "-j", "qdisc", "show"])
        .as_array()
        .into_iter()
        .flatten()
        .filter(|qdisc| qdisc["kind"] == "clsact")
        .map(|qdisc| qdisc["dev"].as_str().unwrap_or_default().to_owned())
        .collect()
}

fn json(lab: &Lab, ns: &str, argv: &[&str]) -> Value {
    let output = lab.exec(ns, argv).expect("run a tool in the lab");
    assert!(output.status.success(), "{argv:?}: {output:?}");
    serde_json::from_slice(&output.stdout)
        .or_fail(format_args!("{argv:?} printed no JSON ({output:?})"))
}
