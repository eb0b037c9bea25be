//! What runs on the node during a measurement (`Watcher`), started on every node of the lab and
//! stopped again (`Running`), and the figures read from its runs.
use std::time::Duration;

use anyhow::{bail, Context as _, Result};
use dnsloop_core::recorder::WRITER_THREAD;
use dnsloop_shared::names::{kernel_name, EGRESS_PROGRAM, INGRESS_PROGRAM, XDP_INGRESS_PROGRAM};
use dnsloop_tests::{lab::Lab, tracer::READY_MARKER};
use serde_json::Value;

use super::{
    floor::{self, Attached},
    measure::{cpu_time, peak_rss, resident_memory, thread_cpu_time},
    process::Process,
    Context,
};

/// Where the DaemonSet's metrics are served, in each node's own namespace (the manifest serves
/// them on the node's address).
const DAEMONSET_METRICS_ADDR: &str = "127.0.0.1:9553";
/// The programs as the kernel names them (it keeps 15 characters of a name).
const DNSLOOP_PROGRAMS: [&str; 2] = [kernel_name(INGRESS_PROGRAM), kernel_name(EGRESS_PROGRAM)];
const DNSLOOP_XDP_PROGRAMS: [&str; 3] = [
    kernel_name(INGRESS_PROGRAM),
    kernel_name(EGRESS_PROGRAM),
    kernel_name(XDP_INGRESS_PROGRAM),
];

/// What runs on the node during a measurement.
#[derive(Clone, Copy, PartialEq)]
pub enum Watcher {
    Nothing,
    Floor,
    /// The classifier making one hash-map lookup per packet.
    OneLookup,
    Dnsloop,
    DnsloopXdp,
    DnsloopPackets,
    /// `trace` as deploy/dnsloop.yaml runs it: JSON findings, metrics served, and the flight
    /// recorder, which makes the kernel stream every DNS packet.
    DnsloopDaemonSet,
    Tcpdump,
    /// tcpdump decoding each packet and printing it as a line of text, as `--packets` does in
    /// JSON.
    TcpdumpPrinting,
}

impl Watcher {
    pub fn name(self) -> &'static str {
        match self {
            Watcher::Nothing => "no program",
            Watcher::Floor => "empty classifier",
            Watcher::OneLookup => "classifier with one hash-map lookup",
            Watcher::Dnsloop => "dnsloop trace",
            Watcher::DnsloopXdp => "dnsloop trace --xdp",
            Watcher::DnsloopPackets => "dnsloop trace --packets",
            Watcher::DnsloopDaemonSet => "dnsloop trace as the DaemonSet runs it (--record)",
            Watcher::Tcpdump => "tcpdump -i any -w FILE port 53",
            Watcher::TcpdumpPrinting => "tcpdump -i any -n -l port 53 (a line per packet)",
        }
    }

    pub fn programs(self) -> &'static [&'static str] {
        match self {
            Watcher::Floor => &[floor::EMPTY],
            Watcher::OneLookup => &[floor::ONE_LOOKUP],
            Watcher::Dnsloop | Watcher::DnsloopPackets | Watcher::DnsloopDaemonSet => {
                &DNSLOOP_PROGRAMS
            }
            Watcher::DnsloopXdp => &DNSLOOP_XDP_PROGRAMS,
            Watcher::Nothing | Watcher::Tcpdump | Watcher::TcpdumpPrinting => &[],
        }
    }
}

/// The CPU time a watcher's processes have used.
#[derive(Clone, Copy, Debug, Default)]
pub struct CpuTime {
    /// Every thread's, together.
    pub total: Duration,
    /// The part of it the recorder's bundle writer used (`recorder::WRITER_THREAD`): a cost
    /// paid per bundle, that is per finding kind per `--record-interval`, not per packet.
    pub bundle_writer: Duration,
}

impl CpuTime {
    /// What was used since `before`.
    pub fn since(self, before: Self) -> Self {
        Self {
            total: self.total.saturating_sub(before.total),
            bundle_writer: self.bundle_writer.saturating_sub(before.bundle_writer),
        }
    }

    /// Every thread's but the bundle writer's.
    pub fn without_bundle_writer(self) -> Duration {
        self.total.saturating_sub(self.bundle_writer)
    }
}

/// A watcher running on every node of the lab, stopped when dropped.
pub enum Running {
    Nothing,
    /// Held for their `Drop`, which detaches them: one per node.
    Reference {
        _attached: Vec<Attached>,
    },
    /// One per node.
    Processes(Vec<Process>),
}

/// Where `Watcher::Tcpdump` writes node `node`'s capture: a file per node, as the nodes'
/// tcpdumps run at once. The last run's stays, for `analyze_speed`.
pub fn tcpdump_file(lab: &Lab, node: &str) -> std::path::PathBuf {
    lab.state_dir().join(format!("bench-tcpdump-{node}.pcap"))
}

impl Running {
    pub fn start(context: &Context, watcher: Watcher) -> Result<Self> {
        let lab = context.lab;
        let nodes = (0..lab.nodes())
            .map(|node| lab.node_ns_of(node))
            .collect::<Result<Vec<_>>>()?;
        match watcher {
            Watcher::Nothing => Ok(Running::Nothing),
            Watcher::Floor | Watcher::OneLookup => {
                let program = watcher.programs()[0];
                let attached = nodes
                    .iter()
                    .map(|node| {
                        Attached::attach(context.floor_object, program, &lab.netns_path(node))
                    })
                    .collect::<Result<_>>()?;
                Ok(Running::Reference {
                    _attached: attached,
                })
            }
            _ => nodes
                .iter()
                .map(|node| Self::start_process(context, watcher, node))
                .collect::<Result<_>>()
                .map(Running::Processes),
        }
    }

    /// `watcher`'s process in namespace `node`.
    fn start_process(context: &Context, watcher: Watcher, node: &str) -> Result<Process> {
        let lab = context.lab;
        let dnsloop = context.dnsloop.to_str().context("a UTF-8 path")?;
        let pcap = tcpdump_file(lab, node);
        let record = lab.state_dir().join(format!("bench-record-{node}"));
        let argv: Vec<&str> = match watcher {
            Watcher::Nothing | Watcher::Floor | Watcher::OneLookup => {
                bail!("{} runs no process", watcher.name())
            }
            Watcher::Dnsloop => vec![dnsloop, "trace", "--output", "json"],
            Watcher::DnsloopXdp => vec![dnsloop, "trace", "--output", "json", "--xdp"],
            Watcher::DnsloopPackets => {
                vec![dnsloop, "trace", "--output", "json", "--packets"]
            }
            Watcher::DnsloopDaemonSet => vec![
                dnsloop,
                "trace",
                "--output",
                "json",
                "--metrics-addr",
                DAEMONSET_METRICS_ADDR,
                "--record",
                record.to_str().context("a UTF-8 path")?,
            ],
            Watcher::Tcpdump => vec![
                "tcpdump",
                "-i",
                "any",
                "-w",
                pcap.to_str().context("a UTF-8 path")?,
                "port",
                "53",
            ],
            Watcher::TcpdumpPrinting => vec!["tcpdump", "-i", "any", "-n", "-l", "port", "53"],
        };
        let ready = if matches!(watcher, Watcher::Tcpdump | Watcher::TcpdumpPrinting) {
            "listening on"
        } else {
            READY_MARKER
        };
        let child = lab.spawn(node, &argv)?;
        Process::started(child, ready)
    }

    /// The CPU time its processes have used so far, together; `None` when it is no process.
    pub fn cpu_time(&self) -> Result<Option<CpuTime>> {
        let Running::Processes(processes) = self else {
            return Ok(None);
        };
        let mut used = CpuTime::default();
        for process in processes {
            let pid = process.child.id();
            used.total += cpu_time(pid)?;
            used.bundle_writer += thread_cpu_time(pid, WRITER_THREAD)?;
        }
        Ok(Some(used))
    }

    /// The memory its processes have resident now (VmRSS) and have had at most (VmHWM), each
    /// the largest of its processes'; `None` when it is no process.
    pub fn memory(&self) -> Result<Option<(u64, u64)>> {
        let Running::Processes(processes) = self else {
            return Ok(None);
        };
        let mut most = (0, 0);
        for process in processes {
            let pid = process.child.id();
            most.0 = most.0.max(resident_memory(pid)?);
            most.1 = most.1.max(peak_rss(pid)?);
        }
        Ok(Some(most))
    }

    /// Stops it; for dnsloop, returns each node's summary (`None` where it printed none).
    pub fn stop(self) -> Result<Vec<Option<Value>>> {
        let Running::Processes(processes) = self else {
            return Ok(Vec::new());
        };
        processes
            .into_iter()
            .map(|process| {
                process.interrupt().map(|lines| {
                    lines.into_iter().rev().find_map(|(_, line)| {
                        serde_json::from_str::<Value>(&line)
                            .ok()
                            .filter(|value| value["kind"] == "summary")
                    })
                })
            })
            .collect()
    }
}

/// The number at `pointer` (a JSON pointer) in every node's summary, added up; `None` unless
/// every node printed a summary holding it.
pub fn summed(summaries: &[Option<Value>], pointer: &str) -> Option<f64> {
    if summaries.is_empty() {
        return None;
    }
    summaries
        .iter()
        .map(|summary| summary.as_ref()?.pointer(pointer)?.as_f64())
        .sum()
}

/// What the runs of `watcher` measured, in the order they ran.
pub fn values_of(runs: &[(Watcher, f64)], watcher: Watcher) -> Vec<f64> {
    runs.iter()
        .filter(|(w, _)| *w == watcher)
        .map(|(_, value)| *value)
        .collect()
}
