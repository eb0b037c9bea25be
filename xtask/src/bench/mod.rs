//! `cargo xtask bench`: what dnsloop costs a node, measured side by side on the lab, and
//! whether it keeps up. Writes BENCHMARKS.md.
//!
//! - Kernel cost per program run at a fixed load through nodelocal -> ClusterIP -> DNS pods:
//!   dnsloop's programs (TC, and XDP on ingress) against an empty classifier on the same
//!   interfaces (the floor), for DNS packets and for other packets; and for other packets again
//!   in a flood, closer together, as on a busy node (`non_dns_flood`). On DNS packets also a
//!   classifier making one hash-map lookup per packet: the least that remembering anything per
//!   packet costs (`fixed_load`).
//! - Userspace CPU during that load: dnsloop (default and `--packets`) against tcpdump writing
//!   every DNS packet.
//! - Throughput at saturation with no program, dnsloop, the empty classifier and tcpdump, in
//!   alternating rounds, and the programs' kernel time per query there (runs per query and
//!   time per run): on a bridged node, a routed node, and across two nodes (`saturation`, on
//!   each `Topology`).
//! - A loop storm: how soon each of 20 CoreDNS probes is reported, what was lost, peak memory
//!   (`storm`).
//! - A CoreDNS-like loop storm across two nodes (see `cluster_storm`): DNS packets/s, findings
//!   by kind, per second and per report interval, lost events, peak memory, and how soon the
//!   first loop is reported.
//! - A soak (see `soak`): minutes of mixed healthy and failing DNS on two nodes, each traced:
//!   loop findings (none expected), the dead servers named, memory and the kernel's tables
//!   sampled each minute.
//! - Attach time on a namespace of 100 veths: TCX links (with and without `--expedite-attach`)
//!   and, as kernels before 6.6 attach, filters on the clsact qdisc (`attach`).
//! - The programs on single packets of each kind (`BPF_PROG_TEST_RUN`), and the verifier's
//!   instruction counts (`kernel_profile`).
//! - How fast `analyze` reads the fixed load's capture, beside tshark (`analyze_speed`).
//!
//! Each measurement is a module with a `run`; this one holds the order they run in. What they
//! share: `watcher` (what runs on the node while they measure), `process`, `measure` (reading
//! what a run cost), `report` (the table and BENCHMARKS.md).
//!
//! `--only storm` runs the two storms alone and prints their rows (a minute or so);
//! `--only saturation` the saturation rows of the three topologies (about six minutes);
//! `--only flood` the non-DNS flood's rows, the drop program's among them (a minute or so);
//! `--only soak` the soak (`--soak-minutes`, 10 by default); `--only fixed` the fixed-load rows,
//! the DaemonSet's configuration and memory at rest among them, and `analyze`'s speed on the
//! capture it leaves (about eight minutes).
mod analyze_speed;
mod attach;
mod cluster_storm;
mod compare;
mod fixed_load;
mod flood;
mod floor;
mod kernel_profile;
mod measure;
mod namespace;
mod non_dns_flood;
mod process;
mod report;
mod saturation;
mod soak;
mod storm;
mod targets;
mod topology;
mod watcher;

use std::{path::Path, time::Duration};

use anyhow::{Context as _, Result};
use dnsloop_tests::lab::{Lab, Pod};

use self::{
    attach::VETH_PAIRS,
    fixed_load::FIXED_SECONDS,
    measure::{BpfStats, Dnsperf},
    report::Report,
    storm::PROBES,
    topology::Topology,
};
use crate::{build_release, command};

/// Repetitions of each fixed-load measurement, interleaved.
const REPEATS: usize = 3;
/// Where the non-DNS loads go on a CoreDNS pod: nothing listens there.
const NOT_DNS_PORT: u16 = 5300;

/// Names the CoreDNS pods answer themselves, so that every query crosses nodelocal ->
/// ClusterIP -> DNS pod and back.
const QUERIES: &str = "kubernetes.default.svc.cluster.local A\n\
    api.default.svc.cluster.local A\n\
    kube-dns.kube-system.svc.cluster.local A\n";

/// A piece of the bench that runs alone (`--only`): it prints its rows and leaves
/// BENCHMARKS.md alone.
#[derive(Clone, Copy, clap::ValueEnum)]
pub enum Piece {
    /// The loop storms: 20 CoreDNS probes on one node, and a CoreDNS-like loop across two.
    Storm,
    /// Throughput at saturation and what the programs cost per query there, on a bridged
    /// node, a routed node and across two nodes.
    Saturation,
    /// The non-DNS flood: what the classifiers and the drop program cost on packets that are
    /// not DNS, all of them dropped by the kernel.
    Flood,
    /// The soak: mixed healthy and failing DNS on two nodes for `--soak-minutes`.
    Soak,
    /// The fixed load on the bridged node (every configuration, the DaemonSet's among them),
    /// the non-DNS loads, and dnsloop at rest: its memory and its maps'.
    Fixed,
}

/// The full bench, its soak `soak` long; with `compare`, the A/B of this build against that
/// dnsloop binary; with `only`, that piece alone.
pub fn run(compare: Option<&Path>, only: Option<Piece>, soak: Duration) -> Result<()> {
    if let Some(baseline) = compare {
        compare::check_baseline(baseline)?;
    }
    let dnsloop = build_release()?;
    if let Some(report) = only
        .map(|piece| alone(piece, &dnsloop, soak))
        .transpose()?
        .flatten()
    {
        print!("{}", report.table());
        return Ok(());
    }
    let floor_object = floor::build()?;
    let _stats = BpfStats::enable()?;
    let mut report = Report::new();

    let lab = Topology::BridgedNode.lab()?;
    let queries = queries_file(&lab)?;
    let node_cache = Topology::BridgedNode.load(&lab, &queries);
    // A port nothing listens on, behind the bridge: every packet is UDP, none of it DNS.
    let not_dns = Dnsperf {
        lab: &lab,
        queries: &queries,
        node: 0,
        server: Pod::CoreDnsA.ip().to_string(),
        port: NOT_DNS_PORT,
    };
    let context = Context {
        lab: &lab,
        dnsloop: &dnsloop,
        floor_object: &floor_object,
    };
    if let Some(baseline) = compare {
        compare::run(&context, baseline, &node_cache, &not_dns, &mut report)?;
        print!("{}", report.table());
        return Ok(());
    }
    let rate = fixed_load::rate(&node_cache, &mut report)?;
    eprintln!(
        "bench: kernel and userspace cost at {rate} queries/s ({REPEATS} x {FIXED_SECONDS} s each)"
    );
    fixed_load::run(&context, &node_cache, &not_dns, rate, &mut report)?;
    analyze_speed::run(&context, &mut report)?;
    if only.is_some() {
        print!("{}", report.table());
        return Ok(());
    }
    // The bridged node's lab is up already; the other topologies bring up labs of their own.
    saturation::run(&context, &node_cache, Topology::BridgedNode, &mut report)?;
    drop(lab);
    for topology in [Topology::RoutedNode, Topology::TwoNodes] {
        saturation::on_own_lab(topology, &dnsloop, &floor_object, &mut report)?;
    }

    storms(&dnsloop, &mut report)?;
    soak_for(&dnsloop, soak, &mut report)?;
    eprintln!("bench: attaching to {} veths", 2 * VETH_PAIRS);
    attach::run(&dnsloop, &mut report)?;
    eprintln!("bench: the programs on single packets (BPF_PROG_TEST_RUN, {REPEATS} runs)");
    kernel_profile::run(&mut report)?;

    print!("{}", report.table());
    let path = command::workspace_root().join("BENCHMARKS.md");
    std::fs::write(&path, report.markdown()).context("writing BENCHMARKS.md")?;
    eprintln!("bench: wrote {}", path.display());
    Ok(())
}

/// The rows of `piece` run alone; `None` for the fixed load, which shares the full run's
/// first steps and stops after them.
fn alone(piece: Piece, dnsloop: &Path, soak: Duration) -> Result<Option<Report>> {
    let mut report = Report::new();
    match piece {
        Piece::Storm => storms(dnsloop, &mut report)?,
        Piece::Saturation => {
            let floor_object = floor::build()?;
            let _stats = BpfStats::enable()?;
            for topology in Topology::ALL {
                saturation::on_own_lab(topology, dnsloop, &floor_object, &mut report)?;
            }
        }
        Piece::Flood => {
            let floor_object = floor::build()?;
            let _stats = BpfStats::enable()?;
            let lab = Topology::BridgedNode.lab()?;
            let context = Context {
                lab: &lab,
                dnsloop,
                floor_object: &floor_object,
            };
            non_dns_flood::run(&context, &mut report)?;
        }
        Piece::Soak => soak_for(dnsloop, soak, &mut report)?,
        Piece::Fixed => return Ok(None),
    }
    Ok(Some(report))
}

struct Context<'a> {
    lab: &'a Lab,
    dnsloop: &'a Path,
    floor_object: &'a Path,
}

/// Writes `QUERIES` for dnsperf into `lab`'s state directory, and returns the file's path.
fn queries_file(lab: &Lab) -> Result<String> {
    lab_file(lab, "bench-queries.txt", QUERIES)
}

/// Writes `contents` (dnsperf's queries, say) to `name` in `lab`'s state directory, which goes
/// with the lab; returns its path.
fn lab_file(lab: &Lab, name: &str, contents: &str) -> Result<String> {
    let path = lab.state_dir().join(name);
    std::fs::write(&path, contents).with_context(|| format!("writing {}", path.display()))?;
    Ok(path.to_str().context("a UTF-8 path")?.to_owned())
}

/// The single-node storm of CoreDNS probes, then the CoreDNS-like loop across two nodes.
fn storms(dnsloop: &Path, report: &mut Report) -> Result<()> {
    eprintln!("bench: a loop storm of {PROBES} CoreDNS probes");
    storm::run(dnsloop, report)?;
    eprintln!("bench: a CoreDNS-like loop storm across two nodes ({REPEATS} runs)");
    cluster_storm::run(dnsloop, report)
}

fn soak_for(dnsloop: &Path, duration: Duration, report: &mut Report) -> Result<()> {
    eprintln!(
        "bench: a soak of {} min, healthy and failing DNS on two nodes",
        duration.as_secs() / 60
    );
    soak::run(dnsloop, duration, report)
}
