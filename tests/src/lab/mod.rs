//! The node lab: a Kubernetes node's DNS path rebuilt in network namespaces, with real DNS
//! servers (dnsmasq and unbound playing node-local-dns, CoreDNS and the upstream resolver).
//!
//! ```text
//!  pod namespaces            node namespace                                upstream namespace
//!  client    10.244.0.2 ─┐
//!  coredns-a 10.244.0.3 ─┼─ cni0 10.244.0.1            eth0 10.255.0.1 ─── eth0 10.255.0.53
//!  coredns-b 10.244.0.4 ─┘  nodelocaldns 169.254.25.10 (node-local cache)
//!                           nftables: ClusterIP 10.96.0.10 -> DNAT to coredns-a / coredns-b
//! ```
//!
//! No server caches, so every query travels its whole path each time; the servers log every
//! query they receive ([`Lab::server_log`]).
//!
//! Each [`Lab`] owns its namespaces (`<prefix>-node`, `<prefix>-client`, ...) and server
//! processes, so labs run side by side in parallel tests. Dropping a `Lab` tears it down;
//! [`Lab::keep`] leaves it up for [`status`] and [`down`] in another process.
mod capture;
mod command;
mod describe;
mod dig;
mod kubelet;
mod netns;
mod network;
mod nftables;
mod preflight;
mod process;
mod scenario;
mod serial;
mod servers;
mod state;
mod topology;

use std::{
    fs,
    io::Write as _,
    path::{Path, PathBuf},
    process::{Child, Output, Stdio},
    sync::atomic::{AtomicU32, Ordering},
    time::{Duration, Instant},
};

use anyhow::{bail, ensure, Context as _, Result};

pub use capture::{Capture, PcapCapture};
pub use dig::DigOutcome;
pub use preflight::{check_host, HostNotReady};
pub use scenario::{Scenario, UnknownScenario};
pub use serial::one_lab_at_a_time;
pub use topology::{
    dns_server, Pod, Server, CLUSTER_DNS, CLUSTER_DNS_V6, CLUSTER_DOMAIN, CLUSTER_RECORDS,
    DEAD_DNS, DNS_PORT, EXTERNAL_A, EXTERNAL_AAAA, EXTERNAL_NAME, NODE_LOCAL_DNS,
    NODE_LOCAL_DNS_V6, NODE_UPLINK, NODE_UPLINK_V6, STUB_DOMAIN, UPSTREAM_DNS, UPSTREAM_DNS_V6,
};

use describe::ServerProcess;
use kubelet::KubeletPods;
use servers::RunningServer;
use state::{LabState, ServerState};
use topology::Namespaces;

/// How long `up` waits for every server to answer.
const SERVERS_READY_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest accepted prefix; namespace names add at most 10 characters.
const MAX_PREFIX_LEN: usize = 32;

/// Numbers the labs of this process, so that each gets its own prefix.
static NEXT_INSTANCE: AtomicU32 = AtomicU32::new(0);

/// One lab instance. Dropping it stops its servers, deletes its namespaces and removes its
/// state directory.
pub struct Lab {
    prefix: String,
    scenario: Scenario,
    names: Namespaces,
    servers: Vec<RunningServer>,
    /// The pods' sandboxes, cgroups and log directories, as a kubelet would leave them.
    kubelet: KubeletPods,
    /// Numbers this lab's captures, for their file names.
    next_capture: AtomicU32,
}

impl Lab {
    /// Brings up `scenario` under a prefix of its own (`dl<pid>x<counter>`).
    pub fn up(scenario: Scenario) -> Result<Lab> {
        let instance = NEXT_INSTANCE.fetch_add(1, Ordering::Relaxed);
        Lab::up_with_prefix(&format!("dl{}x{instance}", std::process::id()), scenario)
    }

    /// Brings up `scenario` with namespaces named `<prefix>-node`, `<prefix>-client`, ... and
    /// state in `/run/dnsloop-lab/<prefix>/`. Fails if a lab with that prefix is already up.
    pub fn up_with_prefix(prefix: &str, scenario: Scenario) -> Result<Lab> {
        validate_prefix(prefix)?;
        check_host()?;
        let state_dir = state::dir(prefix);
        let mut leftovers = netns::list_with_prefix(prefix)?;
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
        let mut lab = Lab {
            prefix: prefix.to_owned(),
            scenario,
            names: Namespaces::new(prefix),
            servers: Vec::new(),
            kubelet: KubeletPods::default(),
            next_capture: AtomicU32::new(0),
        };
        // On any error `lab` is dropped here, which removes whatever was already built.
        lab.build()
            .with_context(|| format!("bringing up lab `{prefix}` ({scenario})"))?;
        Ok(lab)
    }

    fn build(&mut self) -> Result<()> {
        for namespace in self.names.all() {
            netns::add(namespace)?;
        }
        network::wire(
            &self.names,
            &self.scenario.node_settings(),
            &self.state_dir(),
        )?;
        for pod in Pod::ALL {
            self.kubelet.start(&self.prefix, pod, self.names.pod(pod))?;
        }
        for server in Server::ALL {
            let config = self.scenario.server_config(server);
            let namespace = self.names.of_server(server);
            let running = servers::start(&config, namespace, &self.state_dir())?;
            let pid = running.child.id();
            self.servers.push(running);
            if let Some(pod) = server.pod() {
                self.kubelet.adopt(pod, pid)?;
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
            namespaces: self.names.all().map(str::to_owned).to_vec(),
            servers: self
                .servers
                .iter()
                .map(|running| ServerState {
                    server: running.server.name().to_owned(),
                    pid: running.child.id(),
                })
                .collect(),
        }
        .save()
    }

    /// Leaves the lab running after this process ends (`cargo xtask lab up`); [`down`] removes
    /// it, [`status`] describes it.
    pub fn keep(self) {
        // Skipping Drop is the point: servers, namespaces and state directory stay.
        std::mem::forget(self);
    }

    pub fn scenario(&self) -> Scenario {
        self.scenario
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    pub fn node_ns(&self) -> &str {
        self.names.node()
    }

    pub fn pod_ns(&self, pod: Pod) -> String {
        self.names.pod(pod).to_owned()
    }

    pub fn upstream_ns(&self) -> &str {
        self.names.upstream()
    }

    /// Where `ip netns` mounts namespace `ns` (for `setns`).
    pub fn netns_path(&self, ns: &str) -> PathBuf {
        netns::path(ns)
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
        self.kubelet.uid(pod)
    }

    /// Ends `pod`'s sandbox (its pause process), as if its container runtime had set up its
    /// network but not started it yet: the pod's namespace and network stay. The client pod
    /// then has no process in its namespace; a CoreDNS pod still has its server.
    pub fn stop_sandbox(&mut self, pod: Pod) -> Result<()> {
        self.kubelet.stop_sandbox(pod)
    }

    /// Starts `pod`'s sandbox again after [`Lab::stop_sandbox`].
    pub fn start_sandbox(&mut self, pod: Pod) -> Result<()> {
        self.kubelet.start_sandbox(pod)
    }

    /// PID of `server`'s process.
    pub fn server_pid(&self, server: Server) -> Option<u32> {
        self.running(server).map(|running| running.child.id())
    }

    /// Everything `server` has logged so far (dnsmasq and unbound log every query they get).
    pub fn server_log(&self, server: Server) -> Result<String> {
        let running = self
            .running(server)
            .with_context(|| format!("{} is not running", server.name()))?;
        fs::read_to_string(&running.log)
            .with_context(|| format!("reading {}", running.log.display()))
    }

    fn running(&self, server: Server) -> Option<&RunningServer> {
        self.servers.iter().find(|running| running.server == server)
    }

    /// Runs `argv` in namespace `ns` of this lab (`ip netns exec`) and returns its output,
    /// whatever its exit status.
    pub fn exec(&self, ns: &str, argv: &[&str]) -> Result<Output> {
        self.ensure_own(ns)?;
        let output = netns::exec_command(ns, argv)
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("running `{}` in {ns}", argv.join(" ")))?;
        Ok(output)
    }

    /// Starts `argv` in namespace `ns` of this lab with stdout and stderr piped. The caller
    /// owns the child: it must read the pipes and reap it.
    pub fn spawn(&self, ns: &str, argv: &[&str]) -> Result<Child> {
        self.ensure_own(ns)?;
        netns::exec_command(ns, argv)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("starting `{}` in {ns}", argv.join(" ")))
    }

    /// Runs `dig +tries=1 +timeout=1 @SERVER ARGS...` in `from`'s namespace. Do not pass
    /// `+short`: the status is read from dig's header.
    pub fn dig(&self, from: Pod, server: &str, args: &[&str]) -> Result<DigOutcome> {
        let at_server = format!("@{server}");
        let argv: Vec<&str> = ["dig", "+tries=1", "+timeout=1", &at_server]
            .iter()
            .chain(args)
            .copied()
            .collect();
        let output = self.exec(self.names.pod(from), &argv)?;
        DigOutcome::from_output(&output)
            .with_context(|| format!("`{}` from {}", argv.join(" "), from.name()))
    }

    /// [`Lab::dig`], failing the test when dig itself cannot run.
    pub fn dig_or_fail(&self, from: Pod, server: &str, args: &[&str]) -> DigOutcome {
        self.dig(from, server, args)
            .unwrap_or_else(|error| panic!("{error:#}"))
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
                pid: running.child.id(),
                running: process::is_running(running.child.id()),
            })
            .collect();
        describe::render(&self.prefix, self.scenario, &processes)
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
    let namespaces = netns::list_with_prefix(prefix)?;
    let mut failures = Vec::new();
    let mut pids = Vec::new();
    for namespace in &namespaces {
        match netns::pids(namespace) {
            Ok(found) => pids.extend(found),
            Err(error) => failures.push(format!("{error:#}")),
        }
    }
    // A namespace outlives `ip netns delete` for as long as a process is inside it.
    process::terminate(&pids);
    for namespace in &namespaces {
        if let Err(error) = netns::delete(namespace) {
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
                pid: recorded.pid,
                running: process::is_running(recorded.pid),
            })
        })
        .collect::<Vec<_>>();
    Ok(Some(describe::render(prefix, scenario, &processes)))
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

#[cfg(test)]
mod tests {
    use super::*;

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
