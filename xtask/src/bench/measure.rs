//! Reading what a run cost: BPF program statistics (and turning them on), a process's CPU time
//! and memory, and what dnsperf achieved.
use std::{collections::HashMap, process::Command, time::Duration};

use anyhow::{bail, Context as _, Result};
use dnsloop_tests::lab::{Lab, Pod};
use serde_json::Value;

/// Run time and run count of the loaded BPF programs, by name (as the kernel truncates it).
#[derive(Clone, Debug, Default)]
pub struct ProgramStats(HashMap<String, (u64, u64)>);

impl ProgramStats {
    /// Reads every program's statistics (`kernel.bpf_stats_enabled` must be on).
    pub fn read() -> Result<Self> {
        let output = Command::new("bpftool")
            .args(["prog", "show", "--json"])
            .output()
            .context("running bpftool prog show")?;
        let programs: Value =
            serde_json::from_slice(&output.stdout).context("reading bpftool's JSON")?;
        let mut stats = HashMap::new();
        for program in programs.as_array().into_iter().flatten() {
            let Some(name) = program["name"].as_str() else {
                continue;
            };
            let entry = stats.entry(name.to_owned()).or_insert((0, 0));
            entry.0 += program["run_time_ns"].as_u64().unwrap_or(0);
            entry.1 += program["run_cnt"].as_u64().unwrap_or(0);
        }
        Ok(Self(stats))
    }

    /// Nanoseconds per run and runs, of the programs named `names`, since `before`.
    pub fn since(&self, before: &Self, names: &[&str]) -> Option<(f64, u64)> {
        let (mut time, mut runs) = (0, 0);
        for name in names {
            let now = self.0.get(*name).copied().unwrap_or_default();
            let then = before.0.get(*name).copied().unwrap_or_default();
            time += now.0.saturating_sub(then.0);
            runs += now.1.saturating_sub(then.1);
        }
        (runs > 0).then(|| (time as f64 / runs as f64, runs))
    }

    /// Kernel memory of the maps the programs named `names` use, in bytes.
    pub fn map_memory(names: &[&str]) -> Result<u64> {
        let show = |what: &str| -> Result<Value> {
            let output = Command::new("bpftool")
                .args([what, "show", "--json"])
                .output()
                .with_context(|| format!("running bpftool {what} show"))?;
            serde_json::from_slice(&output.stdout).context("reading bpftool's JSON")
        };
        let programs = show("prog")?;
        let maps = show("map")?;
        let mut ids: Vec<u64> = programs
            .as_array()
            .into_iter()
            .flatten()
            .filter(|program| names.contains(&program["name"].as_str().unwrap_or_default()))
            .flat_map(|program| program["map_ids"].as_array().cloned().unwrap_or_default())
            .filter_map(|id| id.as_u64())
            .collect();
        ids.sort_unstable();
        ids.dedup();
        Ok(maps
            .as_array()
            .into_iter()
            .flatten()
            .filter(|map| map["id"].as_u64().is_some_and(|id| ids.contains(&id)))
            .map(|map| map["bytes_memlock"].as_u64().unwrap_or(0))
            .sum())
    }
}

/// `kernel.bpf_stats_enabled` on for the run, as it was before afterwards.
pub struct BpfStats {
    before: String,
}

const BPF_STATS: &str = "/proc/sys/kernel/bpf_stats_enabled";

impl BpfStats {
    pub fn enable() -> Result<Self> {
        let before =
            std::fs::read_to_string(BPF_STATS).with_context(|| format!("reading {BPF_STATS}"))?;
        std::fs::write(BPF_STATS, "1").with_context(|| format!("enabling {BPF_STATS}"))?;
        Ok(Self { before })
    }
}

impl Drop for BpfStats {
    fn drop(&mut self) {
        let _ = std::fs::write(BPF_STATS, self.before.trim());
    }
}

/// User plus system CPU time a process has used so far.
pub fn cpu_time(pid: u32) -> Result<Duration> {
    let path = format!("/proc/{pid}/stat");
    let stat = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    Ok(parse_stat(&stat).1)
}

/// User plus system CPU time the threads of process `pid` named `name` have used so far; zero
/// when it has none. (A thread gone takes its time with it: only the process's total keeps it.)
pub fn thread_cpu_time(pid: u32, name: &str) -> Result<Duration> {
    let tasks = format!("/proc/{pid}/task");
    let mut total = Duration::ZERO;
    for task in std::fs::read_dir(&tasks).with_context(|| format!("listing {tasks}"))? {
        let path = task
            .with_context(|| format!("listing {tasks}"))?
            .path()
            .join("stat");
        // A thread may end between the listing and the read.
        let Ok(stat) = std::fs::read_to_string(&path) else {
            continue;
        };
        let (comm, cpu) = parse_stat(&stat);
        if comm == name {
            total += cpu;
        }
    }
    Ok(total)
}

/// The command name and the user plus system CPU time of a `/proc/.../stat` line.
fn parse_stat(stat: &str) -> (&str, Duration) {
    // The name is in parentheses and may hold spaces and parentheses of its own.
    let (head, rest) = stat.rsplit_once(')').unwrap_or_default();
    let comm = head.split_once('(').map_or("", |(_, comm)| comm);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line: 12 and 13 after the name.
    let ticks: u64 = [11, 12]
        .iter()
        .filter_map(|&at| fields.get(at)?.parse::<u64>().ok())
        .sum();
    // SAFETY: sysconf has no preconditions.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    (
        comm,
        Duration::from_nanos(ticks * 1_000_000_000 / per_second),
    )
}

/// The most memory a process has had resident (VmHWM), in bytes.
pub fn peak_rss(pid: u32) -> Result<u64> {
    memory_status(pid, "VmHWM")
}

/// The memory a process has resident now (VmRSS), in bytes.
pub fn resident_memory(pid: u32) -> Result<u64> {
    memory_status(pid, "VmRSS")
}

/// One of the kB figures of /proc/PID/status, in bytes.
fn memory_status(pid: u32, field: &str) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading /proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|value| {
            value
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .ok()
        })
        .map(|kib| kib * 1024)
        .with_context(|| format!("no {field} in /proc/{pid}/status"))
}

/// What one dnsperf run achieved.
#[derive(Clone, Copy, Debug)]
pub struct Load {
    pub queries_per_second: f64,
    pub completed: u64,
}

/// How dnsperf loads the lab: from the client pod on node `node`, at `server`:`port`.
pub struct Dnsperf<'a> {
    pub lab: &'a Lab,
    pub queries: &'a str,
    pub node: usize,
    pub server: String,
    pub port: u16,
}

impl Dnsperf<'_> {
    /// Runs dnsperf for `seconds`, at `rate` queries/s if given, else as fast as it can.
    pub fn run(&self, seconds: u64, rate: Option<u64>, extra: &[&str]) -> Result<Load> {
        let (seconds, port) = (seconds.to_string(), self.port.to_string());
        let rate = rate.map(|rate| rate.to_string());
        let mut argv = vec![
            "dnsperf",
            "-s",
            &self.server,
            "-p",
            &port,
            "-d",
            self.queries,
            "-l",
            &seconds,
        ];
        if let Some(rate) = &rate {
            argv.extend(["-Q", rate]);
        }
        argv.extend(extra);
        let client = self.lab.pod_ns_on(self.node, Pod::Client)?;
        let output = self.lab.exec(&client, &argv)?;
        let text = String::from_utf8_lossy(&output.stdout);
        let number = |label: &str| -> Option<f64> {
            text.lines()
                .find_map(|line| line.trim().strip_prefix(label))
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|value| value.parse().ok())
        };
        let (Some(queries_per_second), Some(completed)) =
            (number("Queries per second:"), number("Queries completed:"))
        else {
            bail!("dnsperf printed no statistics:\n{text}");
        };
        Ok(Load {
            queries_per_second,
            completed: completed as u64,
        })
    }
}

/// Datagrams the lab's own sockets have dropped so far for want of room in their receive
/// buffers (UDP `RcvbufErrors`, IPv4 and IPv6), summed over its nodes', pods' and upstream's
/// namespaces: the losses of a server that cannot keep up, whatever watches it.
pub fn lab_socket_drops(lab: &Lab) -> Result<u64> {
    let mut namespaces = vec![lab.upstream_ns().to_owned()];
    for node in 0..lab.nodes() {
        namespaces.push(lab.node_ns_of(node)?.to_owned());
        for pod in lab.pods_on(node) {
            namespaces.push(lab.pod_ns_on(node, pod)?);
        }
    }
    let mut drops = 0;
    for namespace in &namespaces {
        let output = lab.exec(namespace, &["cat", "/proc/net/snmp", "/proc/net/snmp6"])?;
        if !output.status.success() {
            bail!(
                "reading the socket counters of {namespace}: {}",
                String::from_utf8_lossy(&output.stderr).trim()
            );
        }
        drops += udp_receive_buffer_errors(&String::from_utf8_lossy(&output.stdout))
            .with_context(|| format!("no UDP RcvbufErrors in {namespace}'s /proc/net/snmp"))?;
    }
    Ok(drops)
}

/// `RcvbufErrors` of `/proc/net/snmp`'s `Udp:` table (a line of names, then one of values) plus
/// `Udp6RcvbufErrors` of `/proc/net/snmp6` (name and value on one line), from both files'
/// contents in a row.
fn udp_receive_buffer_errors(snmp: &str) -> Option<u64> {
    let mut tables = snmp.lines().filter(|line| line.starts_with("Udp: "));
    let (names, values) = (tables.next()?, tables.next()?);
    let ipv4 = names
        .split_whitespace()
        .zip(values.split_whitespace())
        .find(|(name, _)| *name == "RcvbufErrors")?
        .1
        .parse::<u64>()
        .ok()?;
    let ipv6: u64 = snmp
        .lines()
        .filter_map(|line| line.strip_prefix("Udp6RcvbufErrors"))
        .filter_map(|value| value.trim().parse::<u64>().ok())
        .sum();
    Some(ipv4 + ipv6)
}

/// Median, minimum and maximum of `values`.
pub fn spread(values: &[f64]) -> Option<(f64, f64, f64)> {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let median = match sorted.len() {
        0 => return None,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    };
    Some((median, sorted[0], sorted[sorted.len() - 1]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn receive_buffer_errors_are_summed_over_ipv4_and_ipv6() {
        let snmp = "Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors\n\
                    Udp: 120 3 7 118 7 0\n\
                    UdpLite: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors\n\
                    UdpLite: 0 0 0 0 9 0\n\
                    Udp6InDatagrams                 \t40\n\
                    Udp6RcvbufErrors                \t2\n";
        assert_eq!(udp_receive_buffer_errors(snmp), Some(9));
        assert_eq!(udp_receive_buffer_errors("Ip: Forwarding\nIp: 1\n"), None);
    }

    #[test]
    fn a_stat_line_gives_its_name_and_user_plus_system_time() {
        // Fields 14 and 15 (utime, stime) are 150 and 50 ticks; the name holds a space and a
        // parenthesis of its own.
        let stat = "4242 (dnsloop (x) y) S 1 4242 4242 0 -1 4194560 900 0 0 0 150 50 0 0 20 0 3";
        // SAFETY: sysconf has no preconditions.
        let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
        assert_eq!(
            parse_stat(stat),
            (
                "dnsloop (x) y",
                Duration::from_nanos(200 * 1_000_000_000 / per_second)
            )
        );
    }
}
