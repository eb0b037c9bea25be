//! The command line: its subcommands. Each command's arguments live beside its flow, in
//! `commands`.
use clap::{Parser, Subcommand};

use crate::commands::{
    analyze::AnalyzeArgs, capture::CaptureArgs, doctor::DoctorArgs, probe::ProbeArgs,
    trace::TraceArgs,
};

#[derive(Parser, Debug)]
#[command(
    name = "dnsloop",
    version,
    about = "Find DNS forwarding loops and broken DNS paths on a Kubernetes node while they happen",
    after_help = "Examples:\n  \
        dnsloop trace                          # the whole node: its interfaces, pods' loopbacks, new pods\n  \
        dnsloop trace -i cni0 -i eth0 --duration 30s\n  \
        dnsloop trace --output json | jq .\n  \
        dnsloop trace --packets -i cni0        # every DNS packet on the bridge\n  \
        dnsloop trace --slow 200ms             # lookups that slow, hop by hop: which one was slow\n  \
        dnsloop trace --metrics-addr 9553      # Prometheus metrics at http://127.0.0.1:9553/metrics\n  \
        dnsloop doctor --corefile coredns.yaml  # the node's DNS configuration, checked\n  \
        dnsloop analyze node.pcap              # the same findings, from a capture file"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// `dnsloop trace --help`'s account of its attach points; docs/architecture.md says the same.
const WHERE_TRACE_WATCHES: &str = "\
Where it watches: each crossing between network namespaces once, one program run a crossing.
  pod veth on a bridge    its port, both ways. A frame sent to the bridge's own MAC, or by it,
                          is routed by the node: that one sighting leaves the pod and enters
                          the node (or the other way). Other frames pass to another port.
  the bridge itself       nothing: its crossings are seen at its ports
  routed pod veth         the veth, both ways: between the pod and the node (cali*, lxc*)
  overlay, uplink         the device, both ways: between the node and the rest of the network
  loopback                egress, of the node and of every pod (Linux 6.13 or later for pods)
A pod's query through the node cache to a CoreDNS pod and back takes 4 program runs.";

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Watch DNS on this node live (needs root: loads BPF programs).
    #[command(after_help = WHERE_TRACE_WATCHES)]
    Trace(TraceArgs),
    /// Check the node's DNS configuration for loops and known faults (reads files only).
    #[command(after_help = "Examples:\n  \
        kubectl -n kube-system get configmap coredns -o yaml > coredns.yaml\n  \
        dnsloop doctor --corefile coredns.yaml\n  \
        dnsloop doctor --root /mnt/node --output json   # a node's disk mounted elsewhere\n\n\
        Exit status: 0 no errors, 1 errors found, 2 doctor could not run.")]
    Doctor(DoctorArgs),
    /// Send a CoreDNS-style loop probe to a resolver; with --trace, watch whether it comes back.
    Probe(ProbeArgs),
    /// Find the same faults in a capture file (pcap or pcapng), offline and unprivileged.
    Analyze(AnalyzeArgs),
    /// Trace every DNS packet for a while, then write a bundle for later: the packets as
    /// pcapng, and the findings and the node's DNS configuration as JSON and Markdown (root).
    Capture(CaptureArgs),
}
