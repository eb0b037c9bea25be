//! The node lab: a Kubernetes node's DNS path rebuilt in network namespaces, with real DNS
//! servers (dnsmasq, unbound, dnsdist and Knot Resolver playing node-local-dns, CoreDNS and the
//! upstream resolver). A lab has one node, or up to [`MAX_NODES`] joined into a cluster by a
//! VXLAN overlay ([`LabBuilder::nodes`]), its pods on a `cni0` bridge or routed Calico-style
//! ([`PodNetwork`]).
//!
//! ```text
//!  pod namespaces            node namespace                                upstream namespace
//!  client    10.244.0.2 ─┐
//!  coredns-a 10.244.0.3 ─┼─ cni0 10.244.0.1            eth0 10.255.0.1 ─── eth0 10.255.0.53
//!  coredns-b 10.244.0.4 ─┘  nodelocaldns 169.254.25.10 (node-local cache)
//!                           nftables: ClusterIP 10.96.0.10 -> DNAT to coredns-a / coredns-b
//! ```
//!
//! With two nodes or more, node `i` has the same layout with pod CIDR 10.244.`i`.0/24 (node 0
//! keeps the names and addresses above), and the nodes meet only in a fabric namespace:
//!
//! ```text
//!  node  eth1 10.253.0.1 ─┐ fabric: bridge `underlay` (UDP 4789 only)   ┌─ eth1 10.253.0.2  node1
//!        vxlan0 10.244.0.0 ┘                                            └ vxlan0 10.244.1.0
//!        eth0 10.255.0.1 (macvlan) ─ bridge `external` ─ eth0 10.255.0.2 (macvlan)
//!                                          │
//!                                   upstream 10.255.0.53
//! ```
//!
//! No server caches, so every query travels its whole path each time; the servers log every
//! query they receive ([`Lab::server_log`]).
//!
//! [`Lab::builder`] brings a lab up. Each [`Lab`] owns its namespaces (`<prefix>-node`,
//! `<prefix>-client`, ...) and server processes, and holds the host's one lab turn while it is
//! up (`turn`), so parallel tests bring their labs up one after another. Dropping a `Lab` tears
//! it down; [`Lab::keep`] leaves it up for [`status`] and [`down`] in another process.
mod builder;
mod capture;
mod command;
mod describe;
mod dig;
mod ip_netns;
mod kubelet;
mod network;
mod nftables;
mod preflight;
mod process;
mod scenario;
mod servers;
mod state;
mod topology;
mod turn;

use std::{
    fs,
    io::Write as _,
    net::SocketAddr,
    path::{Path, PathBuf},
    process::{Child, Output, Stdio},
    sync::{
        atomic::{AtomicU32, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};

use anyhow::{bail, ensure, Context as _, Result};

pub use builder::LabBuilder;
pub use capture::{Capture, PcapCapture};
pub use dig::DigOutcome;
pub use network::{EXTERNAL_BRIDGE, UNDERLAY_BRIDGE};
pub use preflight::{check_host, HostNotReady};
pub use scenario::{Scenario, UnknownScenario};
pub use topology::{
    dead_stub_domains, dns_server, node_underlay_on, node_uplink_on, overlay_address_on,
    pod_cidr_on, pod_gateway_on, Pod, PodNetwork, Server, CLUSTER_DNS, CLUSTER_DNS_UPSTREAM,
    CLUSTER_DNS_V6, CLUSTER_DOMAIN, CLUSTER_POD_NETWORK, CLUSTER_RECORDS, DEAD_DNS, DNS_PORT,
    EXTERNAL_A, EXTERNAL_AAAA, EXTERNAL_NAME, MAX_NODES, NODE_LOCAL_DNS, NODE_LOCAL_DNS_V6,
    NODE_UPLINK, NODE_UPLINK_V6, OVERLAY_DEVICE, ROUTED_HOST_VETH_MAC, ROUTED_POD_GATEWAY,
    ROUTED_POD_GATEWAY_V6, STUB_DOMAIN, UNDERLAY_DEVICE, UPLINK_DEVICE, UPSTREAM_DNS,
    UPSTREAM_DNS_V6, VXLAN_PORT,
};
pub use topology::{
    upstream_failure_domains, GONE_DNS, LARGE_ANSWER_RECORDS, LARGE_ANSWER_ZONE, ODD_DNS,
    ODD_DNS_DELAY,
};

use crate::or_fail::OrFail as _;
use describe::ServerProcess;
use kubelet::KubeletPods;
use servers::{server_file_stem, RunningServer};
use state::{LabState, ServerState};
use topology::Namespaces;
use turn::LabTurn;

/// How long `up` waits for every server to answer.
const SERVERS_READY_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest accepted prefix; namespace names add at most 10 characters (`-coredns-a`,
/// `-coredns2b`).
const MAX_PREFIX_LEN: usize = 32;

/// One lab instance. Dropping it stops its servers, deletes its namespaces and removes its
/// state directory.
pub struct Lab {
    prefix: String,
    scenario: Scenario,
    nodes: usize,
    names: Namespaces,
    servers: Vec<RunningServer>,
    /// The pods' sandboxes, cgroups and log directories, as a kubelet would leave them.
    kubelet: KubeletPods,
    /// Numbers this lab's captures, for their file names.
    next_capture: AtomicU32,
    /// Held from before the lab is built until after [`Drop`] has torn it down (fields drop
    /// after `drop` runs); given up by [`Lab::keep`].
    turn: Option<Arc<LabTurn>>,
}

impl Lab {
    /// What to bring up: `scenario`, on its default number of nodes and under a prefix of its
    /// own unless told otherwise; [`LabBuilder::start`] brings it up.
    pub fn builder(scenario: Scenario) -> LabBuilder {
        LabBuilder::new(scenario)
    }

    /// Brings `scenario` up on `nodes` nodes under `prefix`, in `turn` if given, else once it
    /// has taken a turn of its own.
    fn bring_up(
        prefix: &str,
        scenario: Scenario,
        nodes: usize,
        turn: Option<Arc<LabTurn>>,
    ) -> Result<Lab> {
        validate_prefix(prefix)?;
        validate_nodes(nodes)?;
        check_host()?;
        let turn = match turn {
            Some(turn) => turn,
            None => Arc::new(LabTurn::take()?),
        };
        let state_dir = state::dir(prefix);
        let mut leftovers = ip_netns::list_with_prefix(prefix)?;
        if state_dir.exists() {
            leftovers.push(state_dir.display().to_string());
        }
        ensure!(
            leftovers.is_empty(),
            "a lab named `{prefix}` is already up or was left behind ({}): take it down first \
             with `cargo xtask lab down` or dnsloop_tests::lab::down(\"{prefix}\")",
            leftovers.join(", ")
        );
        fs::create_dir_all(&state_dir)
            .with_context(|| format!("creating {}", state_dir.display()))?;
        let pods_per_node: Vec<Vec<Pod>> = (0..nodes).map(|node| scenario.pods_on(node)).collect();
        let mut lab = Lab {
            prefix: prefix.to_owned(),
            scenario,
            nodes,
            names: Namespaces::new(prefix, &pods_per_node),
            servers: Vec::new(),
            kubelet: KubeletPods::default(),
            next_capture: AtomicU32::new(0),
            turn: Some(turn),
        };
        // On any error `lab` is dropped here, which removes whatever was already built.
        lab.build()
            .with_context(|| format!("bringing up lab `{prefix}` ({scenario}, {nodes} node(s))"))?;
        Ok(lab)
    }

    fn build(&mut self) -> Result<()> {
        for namespace in self.names.all() {
            ip_netns::add(namespace)?;
        }
        network::wire(
            &self.names,
            &self.scenario.node_settings(),
            &self.state_dir(),
        )?;
        for node in 0..self.nodes {
            for pod in self.scenario.pods_on(node) {
                let namespace = self.names.pod_on(node, pod)?.to_owned();
                self.kubelet.start(&self.prefix, node, pod, &namespace)?;
            }
        }
        for node in 0..self.nodes {
            for server in self.scenario.servers_on(node) {
                let config = self.scenario.server_config(server, node);
                let namespace = self.names.server_on(node, server)?;
                let running = servers::start(&config, namespace, &self.state_dir())?;
                let pid = running.child.id();
                self.servers.push(running);
                if let Some(pod) = server.pod() {
                    self.kubelet.adopt(node, pod, pid)?;
                }
            }
        }
        let deadline = Instant::now() + SERVERS_READY_TIMEOUT;
        for server in &mut self.servers {
            server.wait_until_answering(deadline)?;
        }
        self.save_state()
    }

    fn save_state(&self) -> Result<()> {
        LabState {
            prefix: self.prefix.clone(),
            scenario: self.scenario.to_string(),
            nodes: self.nodes,
            namespaces: self.names.all().into_iter().map(str::to_owned).collect(),
            servers: self
                .servers
                .iter()
                .map(|running| ServerState {
                    server: running.server.name().to_owned(),
                    node: running.node,
                    pid: running.child.id(),
                })
                .collect(),
        }
        .save()
    }

    /// Leaves the lab running after this process ends (`cargo xtask lab up`); [`down`] removes
    /// it, [`status`] describes it.
    pub fn keep(mut self) {
        // The kept lab no longer holds up the labs of this process.
        drop(self.turn.take());
        // Skipping Drop is the point: servers, namespaces and state directory stay.
        std::mem::forget(self);
    }

    pub fn scenario(&self) -> Scenario {
        self.scenario
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Node 0's namespace.
    pub fn node_ns(&self) -> &str {
        self.names.node()
    }

    /// `pod`'s namespace on node 0.
    pub fn pod_ns(&self, pod: Pod) -> String {
        self.names.pod(pod)
    }

    pub fn upstream_ns(&self) -> &str {
        self.names.upstream()
    }

    /// How many nodes the lab has.
    pub fn nodes(&self) -> usize {
        self.nodes
    }

    /// Node `node`'s namespace (`<prefix>-node`, `<prefix>-node1`, ...).
    pub fn node_ns_of(&self, node: usize) -> Result<&str> {
        self.names.node_of(node)
    }

    /// The namespace of `pod` on node `node`; fails if that node does not run it.
    pub fn pod_ns_on(&self, node: usize, pod: Pod) -> Result<String> {
        self.names.pod_on(node, pod).map(str::to_owned)
    }

    /// The node side of `pod`'s veth on node `node`: `veth-<pod>` on the `cni0` bridge, or
    /// `cali<hash>` when the scenario routes its pods ([`Scenario::pod_network`]).
    pub fn pod_host_veth(&self, node: usize, pod: Pod) -> Result<String> {
        self.names.pod_on(node, pod)?;
        Ok(match self.scenario.pod_network() {
            PodNetwork::Bridge => pod.host_veth(),
            PodNetwork::Routed => pod.cali_veth_on(node),
        })
    }

    /// The pods node `node` runs.
    pub fn pods_on(&self, node: usize) -> Vec<Pod> {
        match self.names.of_node(node) {
            Some(names) => names.pods().collect(),
            None => Vec::new(),
        }
    }

    /// The namespace standing for the network between the nodes: the underlay bridge
    /// ([`UNDERLAY_BRIDGE`]) and the external one ([`EXTERNAL_BRIDGE`]). Only with two nodes
    /// or more.
    pub fn fabric_ns(&self) -> Option<&str> {
        self.names.fabric()
    }

    /// Where `ip netns` mounts namespace `ns` (for `setns`).
    pub fn netns_path(&self, ns: &str) -> PathBuf {
        ip_netns::path(ns)
    }

    /// The lab's state directory: configs, server logs, nftables rules, captures.
    pub fn state_dir(&self) -> PathBuf {
        state::dir(&self.prefix)
    }

    /// The lab's stand-in for the kubelet's `/var/log/pods`, naming its pods (`dnsloop trace
    /// --pod-logs`): `default/client`, `kube-system/coredns-5d78c9869d-abcde`, ...
    pub fn pod_logs(&self) -> PathBuf {
        kubelet::pod_logs(&self.prefix)
    }

    /// `pod`'s UID, which names its cgroup and log directory (and which a container runtime
    /// would list it under).
    pub fn pod_uid(&self, pod: Pod) -> Result<&str> {
        self.kubelet.uid(0, pod)
    }

    /// Ends `pod`'s sandbox (its pause process), as if its container runtime had set up its
    /// network but not started it yet: the pod's namespace and network stay. The client pod
    /// then has no process in its namespace; a CoreDNS pod still has its server.
    pub fn stop_sandbox(&mut self, pod: Pod) -> Result<()> {
        self.kubelet.stop_sandbox(0, pod)
    }

    /// Starts `pod`'s sandbox again after [`Lab::stop_sandbox`].
    pub fn start_sandbox(&mut self, pod: Pod) -> Result<()> {
        self.kubelet.start_sandbox(0, pod)
    }

    /// PID of `server`'s process on node 0 (the upstream is node 0's).
    pub fn server_pid(&self, server: Server) -> Option<u32> {
        self.server_pid_on(0, server)
    }

    /// PID of `server`'s process on node `node` (the shared upstream servers are node 0's).
    pub fn server_pid_on(&self, node: usize, server: Server) -> Option<u32> {
        self.running(node, server).map(|running| running.child.id())
    }

    /// Everything `server` on node 0 has logged so far (every server logs every query it gets).
    pub fn server_log(&self, server: Server) -> Result<String> {
        self.server_log_on(0, server)
    }

    /// Everything `server` on node `node` has logged so far.
    pub fn server_log_on(&self, node: usize, server: Server) -> Result<String> {
        let running = self
            .running(node, server)
            .with_context(|| format!("{} does not run", server_file_stem(server, node)))?;
        fs::read_to_string(&running.log)
            .with_context(|| format!("reading {}", running.log.display()))
    }

    /// Stops `server` on node `node` by its PID (SIGTERM, then SIGKILL after two seconds) and
    /// reaps it; stopping a stopped server does nothing. Ends a storm: once one server of a
    /// loop is gone, the loop is broken.
    pub fn stop_server(&mut self, node: usize, server: Server) -> Result<()> {
        let running = self
            .servers
            .iter_mut()
            .find(|running| running.node == node && running.server == server)
            .with_context(|| format!("{} does not run", server_file_stem(server, node)))?;
        process::terminate(&[running.child.id()]);
        running
            .child
            .wait()
            .with_context(|| format!("reaping {}", server_file_stem(server, node)))?;
        Ok(())
    }

    /// Stops every DNS server of the lab, on every node, by PID (all signalled at once, so a
    /// storm ends within the two seconds' grace at most). The namespaces stay.
    pub fn stop_servers(&mut self) {
        let pids: Vec<u32> = self
            .servers
            .iter()
            .map(|running| running.child.id())
            .collect();
        process::terminate(&pids);
        for running in &mut self.servers {
            // terminate() has ended it: this only reaps.
            let _ = running.child.wait();
        }
    }

    fn running(&self, node: usize, server: Server) -> Option<&RunningServer> {
        let node = if server.is_upstream_side() { 0 } else { node };
        self.servers
            .iter()
            .find(|running| running.node == node && running.server == server)
    }

    /// Runs `argv` in namespace `ns` of this lab (`ip netns exec`) and returns its output,
    /// whatever its exit status.
    pub fn exec(&self, ns: &str, argv: &[&str]) -> Result<Output> {
        self.ensure_own(ns)?;
        let output = ip_netns::exec_command(ns, argv)
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("running `{}` in {ns}", argv.join(" ")))?;
        Ok(output)
    }

    /// Starts `argv` in namespace `ns` of this lab with stdout and stderr piped. The caller
    /// owns the child: it must read the pipes and reap it.
    pub fn spawn(&self, ns: &str, argv: &[&str]) -> Result<Child> {
        self.ensure_own(ns)?;
        ip_netns::exec_command(ns, argv)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting `{}` in {ns}", argv.join(" ")))
    }

    /// Runs `dig +tries=1 +timeout=1 @SERVER ARGS...` in `from`'s namespace on node 0. Do not
    /// pass `+short`: the status is read from dig's header.
    pub fn dig(&self, from: Pod, server: &str, args: &[&str]) -> Result<DigOutcome> {
        self.dig_from(0, from, server, args)
    }

    /// [`Lab::dig`] from pod `from` on node `node`.
    pub fn dig_from(
        &self,
        node: usize,
        from: Pod,
        server: &str,
        args: &[&str],
    ) -> Result<DigOutcome> {
        let at_server = format!("@{server}");
        let argv: Vec<&str> = ["dig", "+tries=1", "+timeout=1", &at_server]
            .iter()
            .chain(args)
            .copied()
            .collect();
        let namespace = self.names.pod_on(node, from)?;
        let output = self.exec(namespace, &argv)?;
        DigOutcome::from_output(&output)
            .with_context(|| format!("`{}` from {} on node {node}", argv.join(" "), from.name()))
    }

    /// Looks `name` up with glibc (`getent ahosts`: A and AAAA at once) in `from`'s namespace on
    /// node 0, through the resolv.conf kubelet gives a pod in namespace `default`: the node
    /// cache, the cluster's search list and `ndots:5`. Mounted over /etc/resolv.conf in a mount
    /// namespace of the command's own, so nothing else sees it. Returns the addresses found.
    pub fn getent_as_a_pod(&self, from: Pod, name: &str) -> Result<Vec<String>> {
        // In the lab's state directory, which goes with the lab.
        let resolv_conf = self
            .state_dir()
            .join(format!("{}-resolv.conf", from.name()));
        fs::write(
            &resolv_conf,
            format!(
                "nameserver {NODE_LOCAL_DNS}\n\
                 search default.svc.{CLUSTER_DOMAIN} svc.{CLUSTER_DOMAIN} {CLUSTER_DOMAIN}\n\
                 options ndots:5\n"
            ),
        )
        .with_context(|| format!("writing {}", resolv_conf.display()))?;
        let script = format!(
            "mount --bind {} /etc/resolv.conf && exec getent ahosts {name}",
            resolv_conf.display()
        );
        let namespace = self.names.pod_on(0, from)?;
        let output = self.exec(namespace, &["unshare", "--mount", "sh", "-c", &script])?;
        ensure!(
            output.status.success(),
            "`getent ahosts {name}` from {}: {}",
            from.name(),
            String::from_utf8_lossy(&output.stderr)
        );
        let mut addresses: Vec<String> = String::from_utf8_lossy(&output.stdout)
            .lines()
            .filter_map(|line| line.split_whitespace().next().map(str::to_owned))
            .collect();
        addresses.dedup();
        Ok(addresses)
    }

    /// Runs dnsperf in `from`'s namespace on node 0: `query` (`NAME TYPE`) asked of `server`
    /// `per_second` times a second for `duration`, then it stops by itself.
    pub fn dnsperf(
        &self,
        from: Pod,
        server: SocketAddr,
        query: &str,
        per_second: u32,
        duration: Duration,
    ) -> Result<()> {
        let queries = self
            .state_dir()
            .join(format!("{}-dnsperf.txt", from.name()));
        fs::write(&queries, format!("{query}\n"))
            .with_context(|| format!("writing {}", queries.display()))?;
        let (address, port) = (server.ip().to_string(), server.port().to_string());
        let (rate, seconds) = (
            per_second.to_string(),
            duration.as_secs().max(1).to_string(),
        );
        let queries = queries.display().to_string();
        let argv = [
            "dnsperf", "-s", &address, "-p", &port, "-d", &queries, "-Q", &rate, "-l", &seconds,
        ];
        let namespace = self.names.pod_on(0, from)?;
        let output = self.exec(namespace, &argv)?;
        ensure!(
            output.status.success(),
            "`{}` from {}: {}",
            argv.join(" "),
            from.name(),
            String::from_utf8_lossy(&output.stderr)
        );
        Ok(())
    }

    /// [`Lab::dig`], failing the test when dig itself cannot run.
    pub fn dig_or_fail(&self, from: Pod, server: &str, args: &[&str]) -> DigOutcome {
        self.dig(from, server, args)
            .or_fail(format_args!("dig @{server} {args:?}"))
    }

    /// Digs and checks the one answer, so that a quiet trace is known to have seen working
    /// traffic.
    pub fn dig_answers(&self, from: Pod, server: &str, args: &[&str], expected: &str) {
        let outcome = self.dig_or_fail(from, server, args);
        assert_eq!(
            (outcome.status.as_deref(), outcome.answers.as_slice()),
            (Some("NOERROR"), [expected.to_owned()].as_slice()),
            "dig @{server} {args:?} from {}:\n{}",
            from.name(),
            outcome.stdout
        );
    }

    /// Starts tcpdump on `interface` in namespace `ns` with a pcap `filter` (e.g. `udp port
    /// 53`) and returns once it captures. Its output is also kept in the state directory.
    pub fn capture(&self, ns: &str, interface: &str, filter: &str) -> Result<Capture> {
        self.ensure_own(ns)?;
        let number = self.next_capture.fetch_add(1, Ordering::Relaxed);
        let stem = self
            .state_dir()
            .join(format!("capture-{number}-{ns}-{interface}"));
        Capture::start(ns, interface, filter, stem)
    }

    /// Starts capturing `interface` in namespace `ns` (`filter` in pcap syntax) into the pcap
    /// file `file`, and returns once tcpdump captures.
    pub fn capture_pcap(
        &self,
        ns: &str,
        interface: &str,
        filter: &str,
        file: &Path,
    ) -> Result<PcapCapture> {
        self.ensure_own(ns)?;
        PcapCapture::start(ns, interface, None, filter, file)
    }

    /// As [`Lab::capture_pcap`], with tcpdump's link type `link_type` (`-y`, e.g. `LINUX_SLL`
    /// for `-i any` in Linux cooked v1).
    pub fn capture_pcap_as(
        &self,
        ns: &str,
        interface: &str,
        link_type: &str,
        filter: &str,
        file: &Path,
    ) -> Result<PcapCapture> {
        self.ensure_own(ns)?;
        PcapCapture::start(ns, interface, Some(link_type), filter, file)
    }

    /// Topology, addresses, and what each server answers and forwards where.
    pub fn describe(&self) -> String {
        let processes: Vec<ServerProcess> = self
            .servers
            .iter()
            .map(|running| ServerProcess {
                server: running.server,
                node: running.node,
                pid: running.child.id(),
                running: process::is_running(running.child.id()),
            })
            .collect();
        describe::render(&self.prefix, self.scenario, self.nodes, &processes)
    }

    fn ensure_own(&self, ns: &str) -> Result<()> {
        ensure!(
            self.names.contains(ns),
            "{ns} is not a namespace of lab `{}` (its namespaces: {})",
            self.prefix,
            self.names.all().join(", ")
        );
        Ok(())
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        let mut pids: Vec<u32> = self
            .servers
            .iter()
            .map(|running| running.child.id())
            .collect();
        pids.extend(self.kubelet.sandbox_pids());
        process::terminate(&pids);
        for running in &mut self.servers {
            // Reap: terminate() has already ended it.
            let _ = running.child.wait();
        }
        self.kubelet.reap();
        if let Err(error) = down(&self.prefix) {
            // Drop must not panic; say what is left behind and how to remove it.
            let _ = writeln!(
                std::io::stderr(),
                "dnsloop lab `{}`: teardown incomplete: {error:#}",
                self.prefix
            );
        }
    }
}

/// Tears down the lab named `prefix`, whichever process started it: ends every process in its
/// namespaces (each lab process lives in one, so nothing else is touched), deletes the
/// namespaces `<prefix>-*`, removes its pods' cgroups and its state directory. Doing nothing
/// is fine.
pub fn down(prefix: &str) -> Result<()> {
    validate_prefix(prefix)?;
    preflight::require_root()?;
    let namespaces = ip_netns::list_with_prefix(prefix)?;
    let mut failures = Vec::new();
    let mut pids = Vec::new();
    for namespace in &namespaces {
        match ip_netns::pids(namespace) {
            Ok(found) => pids.extend(found),
            Err(error) => failures.push(format!("{error:#}")),
        }
    }
    // A namespace outlives `ip netns delete` for as long as a process is inside it.
    process::terminate(&pids);
    for namespace in &namespaces {
        if let Err(error) = ip_netns::delete(namespace) {
            failures.push(format!("{error:#}"));
        }
    }
    if let Err(error) = kubelet::remove(prefix) {
        failures.push(format!("{error:#}"));
    }
    if let Err(error) = state::remove(prefix) {
        failures.push(format!("{error:#}"));
    }
    if !failures.is_empty() {
        bail!("taking down lab `{prefix}`: {}", failures.join("; "));
    }
    Ok(())
}

/// The description of the lab named `prefix` left up by [`Lab::keep`], or `None` if there is
/// none.
pub fn status(prefix: &str) -> Result<Option<String>> {
    validate_prefix(prefix)?;
    let Some(state) = LabState::load(prefix)? else {
        return Ok(None);
    };
    let scenario: Scenario = state.scenario.parse()?;
    let processes = state
        .servers
        .iter()
        .filter_map(|recorded| {
            let server = Server::ALL
                .into_iter()
                .find(|server| server.name() == recorded.server)?;
            Some(ServerProcess {
                server,
                node: recorded.node,
                pid: recorded.pid,
                running: process::is_running(recorded.pid),
            })
        })
        .collect::<Vec<_>>();
    Ok(Some(describe::render(
        prefix,
        scenario,
        state.nodes,
        &processes,
    )))
}

/// A prefix names namespaces (`<prefix>-node`) and a directory, and `down` removes every
/// namespace called `<prefix>-*`: so no `-` (prefix `a` must not match lab `a-b`), no `/`.
fn validate_prefix(prefix: &str) -> Result<()> {
    ensure!(
        !prefix.is_empty()
            && prefix.len() <= MAX_PREFIX_LEN
            && prefix
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_'),
        "invalid lab prefix `{prefix}`: use 1 to {MAX_PREFIX_LEN} ASCII letters, digits or `_`"
    );
    Ok(())
}

fn validate_nodes(nodes: usize) -> Result<()> {
    ensure!(
        (1..=MAX_NODES).contains(&nodes),
        "a lab has 1 to {MAX_NODES} nodes, not {nodes}"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lab_has_one_to_three_nodes() {
        for good in 1..=MAX_NODES {
            assert!(validate_nodes(good).is_ok(), "{good}");
        }
        for bad in [0, MAX_NODES + 1] {
            let error = validate_nodes(bad).expect_err("refused").to_string();
            assert!(error.contains("1 to 3 nodes"), "{error}");
        }
    }

    #[test]
    fn namespace_names_fit_the_prefix_budget() {
        let prefix = "x".repeat(MAX_PREFIX_LEN);
        let pods: Vec<Vec<Pod>> = (0..MAX_NODES).map(|_| Pod::ALL.to_vec()).collect();
        let names = Namespaces::new(&prefix, &pods);
        for name in names.all() {
            assert!(name.len() <= MAX_PREFIX_LEN + 10, "{name}");
        }
        let one_node = Namespaces::new("p", &[Pod::ALL.to_vec()]);
        assert_eq!(
            one_node.all(),
            [
                "p-node",
                "p-client",
                "p-coredns-a",
                "p-coredns-b",
                "p-upstream"
            ]
        );
    }

    #[test]
    fn prefixes_cannot_reach_other_labs() {
        for good in ["dnsloop", "dl1234x0", "a_b"] {
            assert!(validate_prefix(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "a-b",
            "../etc",
            "a b",
            "x*",
            &"x".repeat(MAX_PREFIX_LEN + 1),
        ] {
            assert!(validate_prefix(bad).is_err(), "{bad}");
        }
    }
}
