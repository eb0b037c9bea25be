//! The cluster deployment in `deploy/`: the manifests are valid Kubernetes objects, the
//! DaemonSet keeps the posture its comments document (the node's network and processes, root
//! with a handful of capabilities and nothing else, JSON lines out, metrics on a named port),
//! Prometheus finds that port, the image builds what `cargo xtask setup` installs, and on the
//! lab dnsloop, run as the container runtime would run it, does its job with exactly those
//! capabilities and loses a part of it without any one of them.
use std::{
    fs,
    os::unix::fs::MetadataExt as _,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    thread,
    time::{Duration, Instant},
};

use dnsloop_core::schema::{DropRecord, Record};
use dnsloop_tests::or_fail::OrFail as _;
use dnsloop_tests::test_name;
use dnsloop_tests::{
    findings::Trace,
    lab::{Lab, Pod, Scenario, CLUSTER_DNS, EXTERNAL_NAME, NODE_UPLINK},
    privilege::{can_run, dnsloop_bin, Need},
    scrape::{sample, scrape_until},
    tracer::Tracer,
};
use serde_json::{json, Value};

const MANIFEST: &str = "dnsloop.yaml";
const SERVICE_MONITOR: &str = "servicemonitor.yaml";
/// The alerts for the Prometheus operator (tests/tests/e2e/alerts.rs checks what they say).
const PROMETHEUS_RULE: &str = "prometheusrule.yaml";
const DOCKERFILE: &str = "Dockerfile";
const VALIDATOR: &str = "kubernetes-validate";
/// The oldest release the manifests are written for (dnsloop.yaml's header says so); they are
/// also validated against the newest one the validator knows, its default.
const OLDEST_KUBERNETES: &str = "1.25.0";
/// The capabilities the DaemonSet adds to none: the manifest says what each one is for, and
/// the `without_*` tests below show what dnsloop loses without it.
const CAPABILITIES: [&str; 6] = [
    "BPF",
    "PERFMON",
    "NET_ADMIN",
    "SYS_ADMIN",
    "SYS_PTRACE",
    "SYSLOG",
];
/// containerd's CRI socket, the first place dnsloop looks for one (`--cri-socket`).
const CONTAINERD_SOCKET: &str = "/run/containerd/containerd.sock";
const METRICS_PORT_NAME: &str = "metrics";
const METRICS_PORT: u64 = 9553;
const METRICS_PATH: &str = "/metrics";
/// The arguments `dnsloop` runs with by default in the image, where only every interface is a
/// known address.
const TRACE_ARGS: [&str; 5] = [
    "trace",
    "--output",
    "json",
    "--metrics-addr",
    "0.0.0.0:9553",
];
/// The DaemonSet's: metrics on the node's own address only, which Kubernetes puts in for
/// `$(HOST_IP)` from the downward API.
const DAEMONSET_TRACE_ARGS: [&str; 5] = [
    "trace",
    "--output",
    "json",
    "--metrics-addr",
    "$(HOST_IP):9553",
];
/// The environment variable the DaemonSet's `--metrics-addr` is made of.
const HOST_IP: &str = "HOST_IP";
/// Where the DaemonSet's flight recorder writes its bundles, on the node (`--record`): not
/// in the image's default command, which has no such directory mounted.
const RECORD_DIR: &str = "/var/lib/dnsloop/record";

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy")
}

fn read_deploy_file(name: &str) -> String {
    let path = deploy_dir().join(name);
    fs::read_to_string(&path).or_fail(format_args!("reading {}", path.display()))
}

/// The objects of a manifest in `deploy/`, in order.
fn objects(file: &str) -> Vec<Value> {
    serde_saphyr::from_multiple::<Value>(&read_deploy_file(file))
        .or_fail(format_args!("{file} is not YAML"))
        .into_iter()
        .filter(|object| !object.is_null())
        .collect()
}

/// The one object of `kind` in `file`.
fn the(file: &str, kind: &str) -> Value {
    let mut found: Vec<Value> = objects(file)
        .into_iter()
        .filter(|object| object["kind"] == kind)
        .collect();
    assert_eq!(found.len(), 1, "{file} should hold exactly one {kind}");
    found.remove(0)
}

fn daemonset() -> Value {
    the(MANIFEST, "DaemonSet")
}

fn pod_spec() -> Value {
    daemonset()["spec"]["template"]["spec"].clone()
}

/// The DaemonSet's one container.
fn container() -> Value {
    let containers = pod_spec()["containers"].clone();
    assert_eq!(
        containers.as_array().map(Vec::len),
        Some(1),
        "the DaemonSet runs dnsloop alone: {containers}"
    );
    containers[0].clone()
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .or_fail(format_args!("not a list: {value}"))
        .iter()
        .map(|item| {
            item.as_str()
                .or_fail(format_args!("not a string: {item}"))
                .to_owned()
        })
        .collect()
}

fn added_capabilities() -> Vec<String> {
    strings(&container()["securityContext"]["capabilities"]["add"])
}

/// Every `key: value` of `subset` is in `labels`.
fn labels_include(labels: &Value, subset: &Value) -> bool {
    subset
        .as_object()
        .is_some_and(|subset| subset.iter().all(|(key, value)| &labels[key] == value))
}

/// Runs the validator on `file`, against `version` or, with `None`, its newest, and returns
/// what it said. Fails the test if it finds the file invalid.
fn validate(file: &str, version: Option<&str>) -> String {
    let mut command = Command::new(VALIDATOR);
    command.arg("--strict");
    if let Some(version) = version {
        command.args(["--kubernetes-version", version]);
    }
    let output = command
        .arg(deploy_dir().join(file))
        .output()
        .or_fail(format_args!("running {VALIDATOR}"));
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success(),
        "{file} against Kubernetes {}:\n{said}",
        version.unwrap_or("(newest)")
    );
    said
}

#[test]
fn every_core_object_validates_against_the_kubernetes_schemas() {
    if !can_run(test_name!(), &[Need::Tool(VALIDATOR)]) {
        return;
    }
    let mut files: Vec<String> = fs::read_dir(deploy_dir())
        .expect("deploy/ is listed")
        .map(|entry| entry.expect("a deploy/ entry").file_name())
        .map(|name| name.to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".yaml"))
        .collect();
    files.sort();
    assert_eq!(files, [MANIFEST, PROMETHEUS_RULE, SERVICE_MONITOR]);
    for file in &files {
        for version in [Some(OLDEST_KUBERNETES), None] {
            let said = validate(file, version);
            for object in objects(file) {
                let kind = object["kind"].as_str().expect("every object has a kind");
                let name = object["metadata"]["name"].as_str().expect("and a name");
                // The ServiceMonitor's and the PrometheusRule's CRDs are the Prometheus
                // operator's, not in the core schemas: the validator knows nothing of them, so
                // the Service's and the ServiceMonitor's agreement is checked below instead,
                // and the rules in tests/tests/e2e/alerts.rs.
                let checked = if object["apiVersion"] == "monitoring.coreos.com/v1" {
                    said.contains(&format!("Couldn't find schema for kind {kind}"))
                } else {
                    said.contains(&format!(
                        "passed for resource {}/{name}",
                        kind.to_lowercase()
                    ))
                };
                assert!(checked, "{file}: what of {kind} {name}?\n{said}");
            }
        }
    }
}

#[test]
fn the_daemonset_runs_on_the_nodes_network_and_processes_as_root_with_only_its_capabilities() {
    let pod = pod_spec();
    let container = container();
    let security = &container["securityContext"];

    assert_eq!(
        pod["hostNetwork"], true,
        "the node's interfaces are watched"
    );
    assert_eq!(pod["hostPID"], true, "pods' namespaces are reached by PID");
    assert!(pod.get("hostIPC").is_none(), "no use for the node's IPC");
    assert_eq!(
        pod["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );

    assert_eq!(security["privileged"], false);
    assert_eq!(
        security["runAsUser"], 0,
        "the runtime makes added capabilities effective for uid 0 only"
    );
    assert!(
        security.get("allowPrivilegeEscalation").is_none(),
        "no_new_privs bounds nothing with SYS_ADMIN; the API refuses the pair (see the manifest)"
    );
    assert_eq!(security["readOnlyRootFilesystem"], true);
    assert_eq!(strings(&security["capabilities"]["drop"]), ["ALL"]);
    let mut added = added_capabilities();
    added.sort();
    let mut documented = CAPABILITIES.map(str::to_owned).to_vec();
    documented.sort();
    assert_eq!(added, documented);

    // No API access: no token, and no RBAC object to go with one.
    let account = the(MANIFEST, "ServiceAccount");
    assert_eq!(pod["serviceAccountName"], account["metadata"]["name"]);
    assert_eq!(account["automountServiceAccountToken"], false);
    assert_eq!(pod["automountServiceAccountToken"], false);
    for object in objects(MANIFEST) {
        let kind = object["kind"].as_str().unwrap_or_default();
        assert!(!kind.contains("Role"), "dnsloop needs no {kind}");
    }
}

#[test]
fn the_daemonset_mounts_only_the_nodes_netns_pins_bpffs_cri_socket_and_record_dir() {
    let pod = pod_spec();
    let container = container();
    let volumes = pod["volumes"].as_array().expect("volumes").clone();
    let mounts = container["volumeMounts"]
        .as_array()
        .expect("volumeMounts")
        .clone();
    let host_path = |mount: &Value| {
        let volume = volumes
            .iter()
            .find(|volume| volume["name"] == mount["name"])
            .or_fail(format_args!("no volume for {mount}"));
        volume["hostPath"]["path"].as_str().map(str::to_owned)
    };
    let mut seen: Vec<(String, String)> = Vec::new();
    for mount in &mounts {
        let from = host_path(mount).or_fail(format_args!("not a hostPath: {mount}"));
        let at = mount["mountPath"].as_str().expect("mountPath").to_owned();
        assert_eq!(
            mount["mountPropagation"], "HostToContainer",
            "what the node mounts later must show in the container: {mount}"
        );
        seen.push((from, at));
    }
    seen.sort();
    assert_eq!(
        seen,
        [
            (CONTAINERD_SOCKET.to_owned(), CONTAINERD_SOCKET.to_owned()),
            ("/run/netns".to_owned(), "/run/netns".to_owned()),
            ("/sys/fs/bpf".to_owned(), "/sys/fs/bpf".to_owned()),
            (RECORD_DIR.to_owned(), RECORD_DIR.to_owned()),
        ],
        "no other part of the node's filesystem: /proc is the node's through hostPID"
    );
    let netns = mounts
        .iter()
        .find(|mount| mount["mountPath"] == "/run/netns")
        .expect("the netns mount");
    assert_eq!(
        netns["readOnly"], true,
        "namespaces are entered, never pinned"
    );
    // Where dnsloop looks for the runtime's socket by default, read-only, and only a socket.
    let cri = mounts
        .iter()
        .find(|mount| mount["mountPath"] == CONTAINERD_SOCKET)
        .expect("the CRI socket mount");
    assert_eq!(cri["readOnly"], true, "pods are only listed");
    let cri_volume = volumes
        .iter()
        .find(|volume| volume["name"] == cri["name"])
        .expect("the CRI socket volume");
    assert_eq!(cri_volume["hostPath"]["type"], "Socket");
    // The recorder's bundles, on the node's disk: written, and made on a node without them.
    let record = mounts
        .iter()
        .find(|mount| mount["mountPath"] == RECORD_DIR)
        .expect("the record mount");
    assert_ne!(record["readOnly"], true, "bundles are written there");
    let record_volume = volumes
        .iter()
        .find(|volume| volume["name"] == record["name"])
        .expect("the record volume");
    assert_eq!(record_volume["hostPath"]["type"], "DirectoryOrCreate");
}

#[test]
fn the_daemonset_prints_json_lines_and_serves_metrics_on_a_named_port() {
    let pod_template = daemonset()["spec"]["template"].clone();
    let container = container();
    let mut args = DAEMONSET_TRACE_ARGS.to_vec();
    args.extend(["--record", RECORD_DIR]);
    assert_eq!(strings(&container["args"]), args);
    let host_ip = container["env"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|variable| variable["name"] == HOST_IP)
        .or_fail(format_args!("no {HOST_IP} in the container's env"));
    assert_eq!(
        host_ip["valueFrom"],
        json!({"fieldRef": {"fieldPath": "status.hostIP"}}),
        "the node's address, from the downward API, not every interface"
    );
    assert_eq!(
        container["ports"],
        json!([{"name": METRICS_PORT_NAME, "containerPort": METRICS_PORT, "protocol": "TCP"}])
    );
    for probe in ["readinessProbe", "livenessProbe"] {
        assert_eq!(
            container[probe]["httpGet"],
            json!({"path": METRICS_PATH, "port": METRICS_PORT_NAME}),
            "{probe}"
        );
    }
    // For a Prometheus without the operator.
    assert_eq!(
        pod_template["metadata"]["annotations"],
        json!({
            "prometheus.io/scrape": "true",
            "prometheus.io/port": METRICS_PORT.to_string(),
            "prometheus.io/path": METRICS_PATH,
        })
    );
}

#[test]
fn prometheus_finds_every_nodes_metrics_port_through_the_service_and_the_servicemonitor() {
    let pod_labels = daemonset()["spec"]["template"]["metadata"]["labels"].clone();
    let service = the(MANIFEST, "Service");
    let monitor = the(SERVICE_MONITOR, "ServiceMonitor");

    assert_eq!(
        service["spec"]["clusterIP"], "None",
        "headless: one target per node"
    );
    assert!(
        labels_include(&pod_labels, &service["spec"]["selector"]),
        "the Service selects the DaemonSet's pods: {service}"
    );
    assert_eq!(
        service["spec"]["ports"],
        json!([{
            "name": METRICS_PORT_NAME,
            "port": METRICS_PORT,
            "targetPort": METRICS_PORT_NAME,
            "protocol": "TCP",
        }])
    );

    assert_eq!(
        monitor["metadata"]["namespace"],
        service["metadata"]["namespace"]
    );
    assert!(
        labels_include(
            &service["metadata"]["labels"],
            &monitor["spec"]["selector"]["matchLabels"]
        ),
        "the ServiceMonitor selects the Service: {monitor}"
    );
    let endpoints = monitor["spec"]["endpoints"].as_array().expect("endpoints");
    assert_eq!(endpoints.len(), 1, "{monitor}");
    assert_eq!(endpoints[0]["port"], METRICS_PORT_NAME);
    assert_eq!(endpoints[0]["path"], METRICS_PATH);
}

#[test]
fn the_daemonset_runs_on_every_node_with_requests_and_limits() {
    let pod = pod_spec();
    assert_eq!(
        pod["tolerations"],
        json!([{"operator": "Exists"}]),
        "every taint is tolerated: an unwatched node is where a loop goes unseen"
    );
    assert!(
        pod.get("priorityClassName").is_none(),
        "a diagnostic tool preempts no workload (see the manifest)"
    );
    let resources = &container()["resources"];
    for (resource, parse) in [
        ("cpu", millicores as fn(&str) -> u64),
        ("memory", mebibytes),
    ] {
        let amount = |bound: &str| {
            let quantity = resources[bound][resource]
                .as_str()
                .or_fail(format_args!("no {bound}.{resource}: {resources}"));
            parse(quantity)
        };
        let (request, limit) = (amount("requests"), amount("limits"));
        assert!(
            0 < request && request <= limit,
            "{resource}: {request} requested, {limit} at most"
        );
    }
    // The kernel's maps alone take about 30 MiB at the default table sizes (the manifest's
    // comment adds them up), all charged to the container.
    assert!(mebibytes(resources["limits"]["memory"].as_str().unwrap_or_default()) >= 128);
}

/// `500m` or `1` (CPUs), in millicores.
fn millicores(quantity: &str) -> u64 {
    match quantity.strip_suffix('m') {
        Some(millis) => millis.parse().ok(),
        None => quantity.parse::<u64>().ok().map(|cpus| cpus * 1000),
    }
    .or_fail(format_args!(
        "not a CPU quantity this test reads: {quantity}"
    ))
}

/// `64Mi` or `1Gi`, in MiB.
fn mebibytes(quantity: &str) -> u64 {
    let (number, scale) = if let Some(number) = quantity.strip_suffix("Mi") {
        (number, 1)
    } else if let Some(number) = quantity.strip_suffix("Gi") {
        (number, 1024)
    } else {
        panic!("not a memory quantity this test reads: {quantity}")
    };
    number
        .parse::<u64>()
        .unwrap_or_else(|_| panic!("not a memory quantity this test reads: {quantity}"))
        * scale
}

/// A Dockerfile's instructions, comments dropped and continued lines joined, split into its
/// stages (each starts with its `FROM`).
fn dockerfile_stages(text: &str) -> Vec<Vec<String>> {
    let mut instructions: Vec<String> = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('#') || (line.is_empty() && current.is_empty()) {
            continue;
        }
        match line.strip_suffix('\\') {
            Some(continued) => current.push_str(continued),
            None => {
                current.push_str(line);
                instructions.push(current.split_whitespace().collect::<Vec<_>>().join(" "));
                current.clear();
            }
        }
    }
    let mut stages: Vec<Vec<String>> = Vec::new();
    for instruction in instructions {
        if instruction.starts_with("FROM ") || stages.is_empty() {
            stages.push(Vec::new());
        }
        stages.last_mut().expect("a stage").push(instruction);
    }
    stages
}

/// The string value of `const NAME: &str = "...";` in xtask's setup.
fn setup_constant(setup: &str, name: &str) -> String {
    let declaration = format!("const {name}: &str = \"");
    let start = setup
        .find(&declaration)
        .or_fail(format_args!("xtask/src/setup.rs declares no {name}"))
        + declaration.len();
    let length = setup[start..].find('"').expect("a closing quote");
    setup[start..start + length].to_owned()
}

#[test]
fn the_image_builds_with_what_xtask_setup_installs_and_runs_the_daemonsets_command() {
    let setup_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../xtask/src/setup.rs");
    let setup = fs::read_to_string(&setup_path).expect("reading xtask/src/setup.rs");
    let linker_version = setup_constant(&setup, "BPF_LINKER_VERSION");
    let llvm_prefix = setup_constant(&setup, "LLVM_PREFIX");
    let packages_start = setup
        .find("const DEBIAN_PACKAGES: &[&str] = &[")
        .expect("xtask/src/setup.rs declares DEBIAN_PACKAGES");
    let packages = &setup[packages_start..];
    let packages = &packages[..packages.find("];").expect("the end of DEBIAN_PACKAGES")];
    let llvm_packages: Vec<&str> = packages
        .split('"')
        .skip(1)
        .step_by(2)
        .filter(|package| package.starts_with("llvm-") || package.starts_with("libpolly-"))
        .collect();
    assert_eq!(llvm_packages.len(), 2, "LLVM and Polly: {llvm_packages:?}");
    let llvm_feature = format!(
        "llvm-{}",
        llvm_prefix.rsplit('-').next().expect("a versioned prefix")
    );
    assert!(
        setup.contains(&format!("\"--features\", \"{llvm_feature}\"")),
        "setup builds bpf-linker with {llvm_feature}"
    );

    let stages = dockerfile_stages(&read_deploy_file(DOCKERFILE));
    assert_eq!(
        stages.len(),
        2,
        "a build stage and a runtime stage: {stages:#?}"
    );
    let (build, runtime) = (&stages[0], &stages[1]);
    assert!(
        build[0].starts_with("FROM rust:") && build[0].ends_with("-bookworm AS build"),
        "{}",
        build[0]
    );
    let build_runs = |needle: &str| {
        build
            .iter()
            .any(|instruction| instruction.starts_with("RUN ") && instruction.contains(needle))
    };
    for package in &llvm_packages {
        assert!(
            build_runs(&format!(" {package}")),
            "LLVM as setup installs it: {package}"
        );
    }
    for needle in [
        "rustup toolchain install nightly --profile minimal --component rust-src".to_owned(),
        format!("LLVM_PREFIX={llvm_prefix} cargo install --locked bpf-linker@{linker_version}"),
        format!("--no-default-features --features {llvm_feature}"),
        "cargo build --release --locked --bin dnsloop".to_owned(),
    ] {
        assert!(
            build_runs(&needle),
            "the build stage runs `{needle}`:\n{build:#?}"
        );
    }

    assert_eq!(runtime[0], "FROM debian:bookworm-slim");
    let runtime_has = |instruction: &str| runtime.iter().any(|have| have == instruction);
    assert!(
        runtime_has("COPY --from=build /usr/local/bin/dnsloop /usr/local/bin/dnsloop"),
        "the binary only: {runtime:#?}"
    );
    assert_eq!(
        runtime
            .iter()
            .filter(|instruction| !instruction.starts_with("FROM "))
            .filter(|instruction| !instruction.starts_with("COPY --from=build "))
            .filter(|instruction| !["USER ", "ENTRYPOINT ", "CMD "]
                .iter()
                .any(|keyword| instruction.starts_with(keyword)))
            .collect::<Vec<_>>(),
        Vec::<&String>::new(),
        "nothing is installed in the runtime image"
    );
    assert!(runtime_has("USER 0"), "{runtime:#?}");
    assert!(
        runtime_has(r#"ENTRYPOINT ["/usr/local/bin/dnsloop"]"#),
        "{runtime:#?}"
    );
    let command = format!(
        "CMD [{}]",
        TRACE_ARGS.map(|arg| format!("\"{arg}\"")).join(", ")
    );
    assert!(
        runtime_has(&command),
        "`docker run` traces as the DaemonSet does: {command}"
    );

    // The build context is the repository: its build output stays out of it.
    let ignored = read_deploy_file(&format!("{DOCKERFILE}.dockerignore"));
    for path in [".git", "target"] {
        assert!(
            ignored.lines().any(|line| line == path),
            "{path} is ignored"
        );
    }
}

#[test]
fn the_dockerfile_passes_hadolint() {
    if !can_run(test_name!(), &[Need::Tool("hadolint")]) {
        return;
    }
    let output = Command::new("hadolint")
        .arg("--no-color")
        .arg(deploy_dir().join(DOCKERFILE))
        .output()
        .expect("running hadolint");
    assert!(
        output.status.success(),
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

// dnsloop run as the container runtime runs the DaemonSet's container, on the lab.

fn can_run_as_in_the_daemonset(test: &str) -> bool {
    can_run(
        test,
        &[
            Need::Root,
            Need::DnsloopBinary,
            Need::Tool("setpriv"),
            Need::Tool("curl"),
        ],
    )
}

/// The DaemonSet's capabilities, less `dropped`.
fn capabilities_without(dropped: &[&str]) -> Vec<String> {
    let added = added_capabilities();
    for capability in dropped {
        assert!(added.iter().any(|have| have == capability), "{capability}");
    }
    added
        .into_iter()
        .filter(|capability| !dropped.contains(&capability.as_str()))
        .collect()
}

/// Starts `dnsloop` with the DaemonSet's arguments in `lab`'s node as the container runtime
/// starts the container: as root, holding `capabilities` and no other (root's exec takes its
/// capabilities from the bounding set), none inheritable.
fn start_as_in_the_daemonset(lab: &Lab, capabilities: &[String]) -> anyhow::Result<Tracer> {
    let bounding_set = capabilities
        .iter()
        .fold("--bounding-set=-all".to_owned(), |set, capability| {
            format!("{set},+{}", capability.to_lowercase())
        });
    let dnsloop = dnsloop_bin();
    let container = container();
    // The bundles go to the lab's state directory, removed with it, not to the machine's disk.
    let record_dir = lab.state_dir().join("record").display().to_string();
    // As Kubernetes expands `$(HOST_IP)`: the lab node's own address.
    let host_ip = format!("$({HOST_IP})");
    let args: Vec<String> = strings(&container["args"])
        .into_iter()
        .map(|arg| {
            if arg == RECORD_DIR {
                record_dir.clone()
            } else {
                arg.replace(&host_ip, &NODE_UPLINK.to_string())
            }
        })
        .collect();
    let mut argv: Vec<&str> = vec![
        "--inh-caps=-all",
        "--",
        dnsloop.to_str().expect("a UTF-8 path"),
    ];
    argv.extend(args.iter().map(String::as_str));
    // setpriv runs in dnsloop's place, and then runs dnsloop.
    Tracer::start_subcommand(
        Path::new("setpriv"),
        &bounding_set,
        lab,
        lab.node_ns(),
        &argv,
    )
}

/// What dnsloop, started as in the DaemonSet holding `capabilities`, printed while `traffic`
/// ran on a `scenario` lab; `traffic` also gets to scrape its metrics.
fn traced_as_in_the_daemonset<T>(
    test: &str,
    scenario: Scenario,
    capabilities: &[String],
    traffic: impl FnOnce(&Lab) -> T,
) -> (Trace, T) {
    let lab = Lab::builder(scenario).start().or_fail(test);
    let tracer = start_as_in_the_daemonset(&lab, capabilities).or_fail(test);
    let sent = traffic(&lab);
    let output = tracer.interrupt().or_fail(test);
    let trace = Trace::from_output(output).or_fail(test);
    (trace, sent)
}

/// The line dnsloop prints once attached: the interfaces, then the pods' loopbacks.
fn watching_line(trace: &Trace) -> &str {
    trace
        .stderr
        .lines()
        .find(|line| line.starts_with("dnsloop: watching"))
        .or_fail(format_args!("no `watching` line:\n{trace}"))
}

/// Asks coredns-a, which forwards to 127.0.0.1 in the self-loop lab, i.e. to itself.
fn ask_the_self_looping_pod(lab: &Lab) {
    lab.dig(
        Pod::Client,
        &Pod::CoreDnsA.ip().to_string(),
        &[EXTERNAL_NAME],
    )
    .or_fail("dig from the client to coredns-a");
}

/// `dnsloop_loops_total` as the node's Prometheus would scrape it, at the node's address.
fn scraped_loops(lab: &Lab) -> Option<f64> {
    let url = format!("http://{NODE_UPLINK}:{METRICS_PORT}{METRICS_PATH}");
    let loops = |exposition: &str| sample(exposition, "dnsloop_loops_total", &[]);
    loops(&scrape_until(lab, &url, |exposition| {
        loops(exposition).is_some_and(|loops| loops >= 1.0)
    }))
}

#[test]
fn with_the_daemonsets_capabilities_a_pod_looping_over_its_loopback_is_found_and_scraped() {
    let test = test_name!();
    if !can_run_as_in_the_daemonset(test) {
        return;
    }
    let (trace, scraped) = traced_as_in_the_daemonset(
        test,
        Scenario::SelfLoop,
        &capabilities_without(&[]),
        |lab| {
            ask_the_self_looping_pod(lab);
            scraped_loops(lab)
        },
    );
    let qname = format!("{EXTERNAL_NAME}.");
    let found = trace
        .loops_for(&qname)
        .first()
        .copied()
        .or_fail(format_args!("no loop for {qname}:\n{trace}"));
    assert!(
        found.path.iter().all(|hop| hop.ifname == "lo"),
        "on the pod's loopback:\n{trace}"
    );
    assert!(
        scraped.is_some_and(|loops| loops >= 1.0),
        "the metrics port shows it: {scraped:?}\n{trace}"
    );
    let recorded = trace.records.iter().any(|record| {
        matches!(record, Record::Bundle(bundle) if bundle.loop_id.as_ref() == Some(&found.loop_id))
    });
    assert!(recorded, "the recorder names the loop's bundle:\n{trace}");
    assert!(
        trace.stderr.contains("bundle written to"),
        "and writes it with the DaemonSet's capabilities:\n{}",
        trace.stderr
    );
}

#[test]
fn without_sys_admin_the_pods_loopbacks_go_unwatched() {
    let test = test_name!();
    if !can_run_as_in_the_daemonset(test) {
        return;
    }
    let (trace, _) = traced_as_in_the_daemonset(
        test,
        Scenario::SelfLoop,
        &capabilities_without(&["SYS_ADMIN"]),
        ask_the_self_looping_pod,
    );
    assert!(
        !watching_line(&trace).contains("lo of"),
        "setns into a pod's namespace needs SYS_ADMIN:\n{trace}"
    );
    assert!(trace.loops().is_empty(), "{trace}");
}

/// Asks the cluster DNS in the unexpected-source lab, whose reply skips un-DNAT.
fn ask_the_cluster_dns(lab: &Lab) {
    lab.dig(
        Pod::Client,
        &CLUSTER_DNS.to_string(),
        &["kubernetes.default.svc.cluster.local"],
    )
    .or_fail("dig from the client to the cluster DNS");
}

#[test]
fn with_the_daemonsets_capabilities_conntrack_shows_the_reply_that_skipped_un_dnat() {
    let test = test_name!();
    if !can_run_as_in_the_daemonset(test) {
        return;
    }
    let (trace, _) = traced_as_in_the_daemonset(
        test,
        Scenario::UnexpectedSource,
        &capabilities_without(&[]),
        ask_the_cluster_dns,
    );
    let found = trace.unexpected_sources();
    assert!(
        found.first().is_some_and(|found| found.conntrack.is_some()),
        "{trace}"
    );
}

#[test]
fn without_net_admin_conntrack_is_not_read() {
    let test = test_name!();
    if !can_run_as_in_the_daemonset(test) {
        return;
    }
    let (trace, _) = traced_as_in_the_daemonset(
        test,
        Scenario::UnexpectedSource,
        &capabilities_without(&["NET_ADMIN"]),
        ask_the_cluster_dns,
    );
    let found = trace.unexpected_sources();
    let found = found.first().or_fail(format_args!(
        "the finding itself needs no conntrack:\n{trace}"
    ));
    assert!(
        found.conntrack.is_none(),
        "NETLINK_NETFILTER answers only CAP_NET_ADMIN:\n{trace}"
    );
}

/// Asks the client pod, where nothing serves DNS, from the node: the kernel drops the query in
/// the pod's namespace (`NO_SOCKET`).
fn ask_a_pod_serving_no_dns(lab: &Lab) {
    let server = format!("@{}", Pod::Client.ip());
    lab.exec(
        lab.node_ns(),
        &["dig", "+tries=1", "+timeout=1", &server, EXTERNAL_NAME],
    )
    .or_fail(format_args!("dig {server} from the node"));
}

/// The drop of that query, or a failure showing everything the tracer printed.
fn the_drop(trace: &Trace) -> &DropRecord {
    trace
        .drops()
        .into_iter()
        .find(|found| found.reason == "NO_SOCKET")
        .or_fail(format_args!("no NO_SOCKET drop reported:\n{trace}"))
}

/// Whether /proc/kallsyms shows addresses to a process, with CAP_SYSLOG or without: the
/// kernel's rule (`kallsyms_show_value`), from its two sysctls.
fn kallsyms_shown(with_syslog: bool) -> bool {
    let sysctl = |name: &str| -> i64 {
        let path = format!("/proc/sys/kernel/{name}");
        let text = fs::read_to_string(&path).or_fail(&path);
        text.trim().parse().or_fail(&path)
    };
    match sysctl("kptr_restrict") {
        0 => with_syslog || sysctl("perf_event_paranoid") <= 1,
        1 => with_syslog,
        _ => false,
    }
}

#[test]
fn with_the_daemonsets_capabilities_a_drop_is_located_in_the_kernel() {
    let test = test_name!();
    if !can_run_as_in_the_daemonset(test) {
        return;
    }
    let (trace, _) = traced_as_in_the_daemonset(
        test,
        Scenario::Healthy,
        &capabilities_without(&[]),
        ask_a_pod_serving_no_dns,
    );
    let location = the_drop(&trace).location.as_deref();
    assert_eq!(
        location.is_some_and(|location| location.contains("+0x")),
        kallsyms_shown(true),
        "named by kallsyms where the kernel shows it:\n{trace}"
    );
}

#[test]
fn without_syslog_drops_are_reported_without_their_kernel_function() {
    let test = test_name!();
    if !can_run_as_in_the_daemonset(test) {
        return;
    }
    let (trace, _) = traced_as_in_the_daemonset(
        test,
        Scenario::Healthy,
        &capabilities_without(&["SYSLOG"]),
        ask_a_pod_serving_no_dns,
    );
    assert_eq!(
        the_drop(&trace).location.is_some(),
        kallsyms_shown(false),
        "kallsyms shows zeros without CAP_SYSLOG unless perf events are open:\n{trace}"
    );
}

/// The error dnsloop stops with when started holding `capabilities` on a healthy lab.
fn startup_error(test: &str, capabilities: &[String]) -> String {
    let lab = Lab::builder(Scenario::Healthy).start().or_fail(test);
    match start_as_in_the_daemonset(&lab, capabilities) {
        Ok(tracer) => {
            let stderr = tracer
                .interrupt()
                .map(|output| output.stderr)
                .unwrap_or_else(|error| format!("{error:#}"));
            panic!("{test}: dnsloop started with {capabilities:?}:\n{stderr}")
        }
        Err(error) => format!("{error:#}"),
    }
}

#[test]
fn without_sys_admin_and_perfmon_the_missing_capability_is_named() {
    let test = test_name!();
    if !can_run_as_in_the_daemonset(test) {
        return;
    }
    // SYS_ADMIN counts as PERFMON to the kernel: both go. Without it the verifier would refuse
    // the programs' pointer arithmetic; preflight reads the effective set first, and says so.
    let error = startup_error(test, &capabilities_without(&["SYS_ADMIN", "PERFMON"]));
    assert!(error.contains("this process lacks CAP_PERFMON:"), "{error}");
}

#[test]
fn without_sys_admin_and_bpf_the_missing_capability_is_named() {
    let test = test_name!();
    if !can_run_as_in_the_daemonset(test) {
        return;
    }
    // SYS_ADMIN counts as BPF to the kernel: both go. Preflight reads the effective set before
    // any map is created, and says which capability is missing.
    let error = startup_error(test, &capabilities_without(&["SYS_ADMIN", "BPF"]));
    assert!(error.contains("this process lacks CAP_BPF:"), "{error}");
}

/// A network namespace that only a process of another user holds (as a pod's pause container
/// does), with a veth from the lab's node into it: not pinned under /run/netns, so dnsloop
/// finds it only through /proc/<pid>/ns/net. Its process is killed, by PID, when dropped.
struct NamespaceOfAnotherUser {
    holder: Child,
}

/// The address inside that namespace, which dnsloop names it by (a documentation address:
/// nothing is sent to it).
const OTHER_USERS_ADDRESS: &str = "192.0.2.7";
/// The user it runs as: `nobody`, as the pause container's 65535 is another user.
const OTHER_USER: u32 = 65534;

impl NamespaceOfAnotherUser {
    fn new(lab: &Lab) -> NamespaceOfAnotherUser {
        let holder = Command::new("unshare")
            .args(["--net", "setpriv"])
            .args([
                format!("--reuid={OTHER_USER}"),
                format!("--regid={OTHER_USER}"),
            ])
            .args(["--clear-groups", "sleep", "600"])
            .stdin(Stdio::null())
            .spawn()
            .expect("starting a process in a namespace of its own");
        let held = NamespaceOfAnotherUser { holder };
        let pid = held.holder.id();
        let process = PathBuf::from(format!("/proc/{pid}"));
        // Owned by the other user once setpriv has switched to it and run sleep.
        let deadline = Instant::now() + Duration::from_secs(5);
        while !fs::metadata(&process).is_ok_and(|meta| meta.uid() == OTHER_USER) {
            assert!(Instant::now() < deadline, "{pid} never became {OTHER_USER}");
            thread::sleep(Duration::from_millis(20));
        }
        let namespace = process.join("ns/net");
        let run = |argv: &[&str]| {
            let output = lab
                .exec(lab.node_ns(), argv)
                .or_fail(format_args!("{argv:?}"));
            assert!(output.status.success(), "{argv:?}: {output:?}");
        };
        let pid = pid.to_string();
        run(&[
            "ip",
            "link",
            "add",
            "veth-held",
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            &pid,
        ]);
        let address = format!("{OTHER_USERS_ADDRESS}/32");
        let net = format!("--net={}", namespace.display());
        run(&[
            "nsenter", &net, "ip", "address", "add", &address, "dev", "eth0",
        ]);
        held
    }
}

impl Drop for NamespaceOfAnotherUser {
    fn drop(&mut self) {
        let _ = self.holder.kill();
        let _ = self.holder.wait();
    }
}

/// What dnsloop, started holding `capabilities` on a healthy lab that also has a namespace
/// only another user's process holds, printed on stderr.
fn stderr_with_a_namespace_of_another_user(test: &str, capabilities: &[String]) -> String {
    let lab = Lab::builder(Scenario::Healthy).start().or_fail(test);
    let _held = NamespaceOfAnotherUser::new(&lab);
    let tracer = start_as_in_the_daemonset(&lab, capabilities).or_fail(test);
    let output = tracer.interrupt().or_fail(test);
    assert!(
        output.stderr.contains("dnsloop: watching"),
        "{}",
        output.stderr
    );
    output.stderr
}

fn can_run_with_a_namespace_of_another_user(test: &str) -> bool {
    can_run_as_in_the_daemonset(test)
        && can_run(test, &[Need::Tool("unshare"), Need::Tool("nsenter")])
}

#[test]
fn with_the_daemonsets_capabilities_a_namespace_held_by_another_user_is_entered() {
    let test = test_name!();
    if !can_run_with_a_namespace_of_another_user(test) {
        return;
    }
    let stderr = stderr_with_a_namespace_of_another_user(test, &capabilities_without(&[]));
    assert!(
        stderr.contains(&format!("netns {OTHER_USERS_ADDRESS}")),
        "its loopback is watched:\n{stderr}"
    );
}

#[test]
fn without_sys_ptrace_a_namespace_held_by_another_user_is_out_of_reach() {
    let test = test_name!();
    if !can_run_with_a_namespace_of_another_user(test) {
        return;
    }
    let stderr =
        stderr_with_a_namespace_of_another_user(test, &capabilities_without(&["SYS_PTRACE"]));
    assert!(
        !stderr.contains(&format!("netns {OTHER_USERS_ADDRESS}")),
        "/proc/<pid>/ns/net of another user's process needs SYS_PTRACE:\n{stderr}"
    );
}
