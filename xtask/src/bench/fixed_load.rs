//! Kernel and userspace cost at a fixed load through nodelocal -> ClusterIP -> DNS pods, each
//! watcher in turn, `REPEATS` times: kernel time per program run on DNS packets and on others,
//! userspace CPU per query, what dnsloop parsed and lost, and its maps' memory.
use std::time::Duration;

use anyhow::Result;
use dnsloop_shared::names::{kernel_name, DROP_PROGRAM, EGRESS_PROGRAM, INGRESS_PROGRAM};
use serde_json::Value;

use super::{
    measure::{self, Dnsperf, ProgramStats},
    non_dns_flood,
    report::{Report, Row},
    saturation::{SATURATION_FLAGS, SATURATION_SECONDS},
    watcher::{summed, values_of, Running, Watcher},
    Context, REPEATS,
};

/// The fixed load the cost is measured at, and for how long. A machine whose lab answers less
/// than twice this with no program attached gets half of what it answers instead: a load the lab
/// cannot carry makes losses of its own, which dnsloop rightly reports as timeouts, and its cost
/// would then measure the lab's overload. (Half still overflows a socket buffer now and then on
/// two CPUs: `LAB_DROPS_SECTION` shows how often, under each watcher.)
const FIXED_RATE: u64 = 20_000;
pub const FIXED_SECONDS: u64 = 10;
/// Every program `dnsloop trace` loads by default, for its maps' memory.
const DNSLOOP_ALL_PROGRAMS: [&str; 3] = [
    kernel_name(INGRESS_PROGRAM),
    kernel_name(EGRESS_PROGRAM),
    kernel_name(DROP_PROGRAM),
];

/// One fixed-load measurement.
pub struct Measured {
    pub ns_per_run: Option<(f64, u64)>,
    cpu: Option<Duration>,
    load: measure::Load,
    summaries: Vec<Option<Value>>,
    /// Datagrams the lab's own sockets dropped during the run (see `measure::lab_socket_drops`).
    lab_drops: u64,
}

pub fn measure(context: &Context, watcher: Watcher, load: &Dnsperf, rate: u64) -> Result<Measured> {
    let running = Running::start(context, watcher)?;
    let lab_drops = measure::lab_socket_drops(context.lab)?;
    let (stats, cpu) = (ProgramStats::read()?, running.cpu_time()?);
    // Nothing answers on the port of the non-DNS load: dnsperf must not wait for answers.
    let achieved = load.run(FIXED_SECONDS, Some(rate), &["-q", "100000", "-t", "1"])?;
    let ns_per_run = ProgramStats::read()?.since(&stats, watcher.programs());
    let cpu = match (running.cpu_time()?, cpu) {
        (Some(now), Some(before)) => Some(now.saturating_sub(before)),
        _ => None,
    };
    let lab_drops = measure::lab_socket_drops(context.lab)?.saturating_sub(lab_drops);
    let summaries = running.stop()?;
    Ok(Measured {
        ns_per_run,
        cpu,
        load: achieved,
        summaries,
        lab_drops,
    })
}

/// The rate of the fixed load on this machine: `FIXED_RATE`, or half of what the lab answers at
/// saturation with no program when that is lower.
pub fn rate(dns: &Dnsperf, report: &mut Report) -> Result<u64> {
    let saturation = dns.run(SATURATION_SECONDS, None, &SATURATION_FLAGS)?;
    let half = (saturation.queries_per_second / 2.0 / 1000.0).floor() as u64 * 1000;
    let rate = FIXED_RATE.min(half.max(1000));
    report.note(format!(
        "Fixed load: {rate} queries/s. The lab answered {:.0} queries/s at saturation with no \
         program; the fixed load is {FIXED_RATE}, or half of that when lower, so that the lab \
         carries it. Not always whole: dnsperf's bursts overflow a server's socket buffer in \
         some runs whatever watches, so the datagrams the lab's own sockets dropped are counted \
         per run and watcher, and dnsloop reports them.",
        saturation.queries_per_second
    ));
    Ok(rate)
}

/// The rows of the fixed load at `rate` queries/s: the DNS load `dns` under every watcher, the
/// non-DNS load `not_dns` and the non-DNS flood under the floor and dnsloop, and dnsloop's maps'
/// memory.
pub fn run(
    context: &Context,
    dns: &Dnsperf,
    not_dns: &Dnsperf,
    rate: u64,
    report: &mut Report,
) -> Result<()> {
    let runs = measure_dns_load(context, dns, rate)?;
    add_kernel_rows(&runs, report);
    add_userspace_rows(&runs, report);
    add_lab_drop_rows(&runs, report);
    note_ratios(report);
    add_dnsloop_rows(&runs, report);
    measure_non_dns_load(context, not_dns, rate, report)?;
    non_dns_flood::run(context, report)?;
    measure_at_rest(context, report)
}

/// The table's sections that the notes and the targets set against each other.
pub const KERNEL_DNS_SECTION: &str = "kernel ns per program run, DNS load";
pub const KERNEL_PER_QUERY_SECTION: &str = "kernel ns per query, DNS load";
pub const USERSPACE_SECTION: &str = "userspace CPU s per 100k queries";
/// The DaemonSet's runs in which a finding fired, so that its recorder wrote a bundle.
pub const USERSPACE_WITH_FINDINGS_SECTION: &str =
    "userspace CPU s per 100k queries, runs in which a finding fired (a bundle written)";
const LAB_DROPS_SECTION: &str =
    "datagrams the lab's own sockets dropped per run (receive buffer full)";
pub const MAP_MEMORY_SECTION: &str = "kernel map memory, default sizes";
pub const MEMORY_AT_REST_SECTION: &str = "userspace memory at rest (VmRSS)";
const MEMORY_AT_START_SECTION: &str = "peak userspace memory by then (VmHWM)";

/// Every watcher of the DNS load, in the order each round runs them.
const DNS_LOAD_WATCHERS: [Watcher; 9] = [
    Watcher::Nothing,
    Watcher::Floor,
    Watcher::OneLookup,
    Watcher::Dnsloop,
    Watcher::DnsloopXdp,
    Watcher::DnsloopPackets,
    Watcher::DnsloopDaemonSet,
    Watcher::Tcpdump,
    Watcher::TcpdumpPrinting,
];

/// Every watcher under the DNS load, in turn, `REPEATS` times.
fn measure_dns_load(
    context: &Context,
    dns: &Dnsperf,
    rate: u64,
) -> Result<Vec<(Watcher, Measured)>> {
    let mut runs: Vec<(Watcher, Measured)> = Vec::new();
    for _ in 0..REPEATS {
        for watcher in DNS_LOAD_WATCHERS {
            runs.push((watcher, measure(context, watcher, dns, rate)?));
        }
    }
    // The DaemonSet's userspace CPU is judged on runs with no finding. When the lab lost queries
    // of its own in every round (its node cache's socket buffer overflowing in a burst, which
    // the DaemonSet rightly reports), it gets up to as many runs again, until one without.
    for _ in 0..REPEATS {
        if runs_of(&runs, Watcher::DnsloopDaemonSet).any(|m| findings(m) == 0.0) {
            break;
        }
        let watcher = Watcher::DnsloopDaemonSet;
        runs.push((watcher, measure(context, watcher, dns, rate)?));
    }
    Ok(runs)
}

/// The runs of `watcher`, in the order they ran.
fn runs_of(runs: &[(Watcher, Measured)], watcher: Watcher) -> impl Iterator<Item = &Measured> + '_ {
    runs.iter()
        .filter(move |(w, _)| *w == watcher)
        .map(|(_, m)| m)
}

/// The datagrams the lab's own sockets dropped per run under each watcher: what a watcher's
/// CPU takes from the servers on this small machine shows here first.
fn add_lab_drop_rows(runs: &[(Watcher, Measured)], report: &mut Report) {
    for watcher in DNS_LOAD_WATCHERS {
        let drops: Vec<f64> = runs_of(runs, watcher).map(|m| m.lab_drops as f64).collect();
        report.add(Row::new(LAB_DROPS_SECTION, watcher.name(), &drops, ""));
    }
}

/// Kernel time per program run on DNS packets, for each watcher with programs.
fn add_kernel_rows(runs: &[(Watcher, Measured)], report: &mut Report) {
    for watcher in [
        Watcher::Floor,
        Watcher::OneLookup,
        Watcher::Dnsloop,
        Watcher::DnsloopXdp,
        Watcher::DnsloopDaemonSet,
    ] {
        let per_run: Vec<f64> = runs_of(runs, watcher)
            .filter_map(|m| m.ns_per_run)
            .map(|(ns, _)| ns)
            .collect();
        report.add(Row::new(KERNEL_DNS_SECTION, watcher.name(), &per_run, "ns"));
    }
    for watcher in [
        Watcher::Floor,
        Watcher::Dnsloop,
        Watcher::DnsloopXdp,
        Watcher::DnsloopDaemonSet,
    ] {
        let per_query: Vec<f64> = runs_of(runs, watcher)
            .filter_map(|m| {
                let (ns, program_runs) = m.ns_per_run?;
                (m.load.completed > 0).then(|| ns * program_runs as f64 / m.load.completed as f64)
            })
            .collect();
        report.add(Row::new(
            KERNEL_PER_QUERY_SECTION,
            watcher.name(),
            &per_query,
            "ns",
        ));
    }
}

/// Userspace CPU per query, for each watcher that is a process. The DaemonSet's runs in which
/// a finding fired are a row of their own: its recorder then writes a bundle (the last seconds
/// of every DNS packet, tens of MB at the fixed load), a cost paid once per finding kind per
/// `--record-interval`, not per query, which in a 10 s run would outweigh the recording itself.
fn add_userspace_rows(runs: &[(Watcher, Measured)], report: &mut Report) {
    let cpu_per_100k = |m: &Measured| {
        m.cpu
            .map(|cpu| cpu.as_secs_f64() * 100_000.0 / (m.load.completed.max(1) as f64))
    };
    for watcher in [
        Watcher::Dnsloop,
        Watcher::DnsloopPackets,
        Watcher::DnsloopDaemonSet,
        Watcher::Tcpdump,
        Watcher::TcpdumpPrinting,
    ] {
        let seconds: Vec<f64> = runs_of(runs, watcher)
            .filter(|m| watcher != Watcher::DnsloopDaemonSet || findings(m) == 0.0)
            .filter_map(cpu_per_100k)
            .collect();
        report.add(Row::new(USERSPACE_SECTION, watcher.name(), &seconds, "s"));
    }
    let with_findings: Vec<f64> = runs_of(runs, Watcher::DnsloopDaemonSet)
        .filter(|m| findings(m) > 0.0)
        .filter_map(cpu_per_100k)
        .collect();
    report.add(Row::new(
        USERSPACE_WITH_FINDINGS_SECTION,
        Watcher::DnsloopDaemonSet.name(),
        &with_findings,
        "s",
    ));
    let findings_per_run: Vec<f64> = runs_of(runs, Watcher::DnsloopDaemonSet)
        .map(findings)
        .collect();
    report.add(Row::new(
        "findings per run at the fixed load",
        Watcher::DnsloopDaemonSet.name(),
        &findings_per_run,
        "",
    ));
}

/// The findings of every kind a run's summaries counted.
fn findings(m: &Measured) -> f64 {
    m.summaries
        .iter()
        .flatten()
        .filter_map(|summary| summary.get("findings")?.as_object())
        .flat_map(|kinds| kinds.values())
        .filter_map(Value::as_f64)
        .sum()
}

/// The kernel and userspace rows against the floor's and tcpdump's, and the targets.
fn note_ratios(report: &mut Report) {
    let kernel = |watcher: Watcher| report.median(KERNEL_DNS_SECTION, watcher.name());
    let userspace = |watcher: Watcher| report.median(USERSPACE_SECTION, watcher.name());
    let kernel_ratio = kernel(Watcher::Dnsloop).zip(kernel(Watcher::Floor));
    let one_lookup_ratio = kernel(Watcher::OneLookup).zip(kernel(Watcher::Floor));
    let userspace_ratio = userspace(Watcher::Dnsloop)
        .zip(userspace(Watcher::DnsloopPackets))
        .zip(userspace(Watcher::Tcpdump));
    let printing_ratio = userspace(Watcher::TcpdumpPrinting).zip(userspace(Watcher::Tcpdump));
    let recording = userspace(Watcher::DnsloopDaemonSet).zip(report.median(
        USERSPACE_WITH_FINDINGS_SECTION,
        Watcher::DnsloopDaemonSet.name(),
    ));
    if let Some((dnsloop, floor)) = kernel_ratio {
        report.note(format!(
            "Kernel cost on DNS packets: {:.1}x the empty classifier.",
            dnsloop / floor
        ));
    }
    if let Some((one_lookup, floor)) = one_lookup_ratio {
        report.note(format!(
            "One hash-map lookup per packet, and nothing else: {:.1}x the empty classifier.",
            one_lookup / floor
        ));
    }
    if let Some(((dnsloop, packets), tcpdump)) = userspace_ratio {
        report.note(format!(
            "Userspace CPU against tcpdump's: {:.2}x in default mode (target <= 1x), {:.2}x with \
             --packets (target <= 2x).",
            dnsloop / tcpdump,
            packets / tcpdump
        ));
    }
    if let Some((steady, with_bundle)) = recording {
        report.note(format!(
            "As the DaemonSet runs it: {steady:.3} s of userspace CPU per 100k queries in runs \
             with no finding, {with_bundle:.3} s in runs in which one fired and the recorder \
             wrote its bundle (the last seconds of every DNS packet): a cost paid once per \
             finding kind per --record-interval (10 min by default), not per query."
        ));
    }
    if let Some((printing, tcpdump)) = printing_ratio {
        report.note(format!(
            "tcpdump printing a line per packet: {:.2}x the CPU of tcpdump writing the packets to a \
             file.",
            printing / tcpdump
        ));
    }
}

/// What dnsloop's own summaries say of its runs: the load achieved, the DNS packets parsed and
/// the events lost.
fn add_dnsloop_rows(runs: &[(Watcher, Measured)], report: &mut Report) {
    let qps: Vec<f64> = runs_of(runs, Watcher::Dnsloop)
        .map(|m| m.load.queries_per_second)
        .collect();
    report.add(Row::new(
        "achieved queries/s at the fixed load",
        "dnsloop trace",
        &qps,
        "q/s",
    ));
    let dns_rate: Vec<f64> = runs_of(runs, Watcher::Dnsloop)
        .filter_map(|m| summed(&m.summaries, "/kernel/dns_packets"))
        .map(|packets| packets / FIXED_SECONDS as f64)
        .collect();
    report.add(Row::new(
        "DNS packets/s the programs parsed",
        "dnsloop trace",
        &dns_rate,
        "pkt/s",
    ));
    for watcher in [
        Watcher::Dnsloop,
        Watcher::DnsloopPackets,
        Watcher::DnsloopDaemonSet,
    ] {
        let lost: Vec<f64> = runs_of(runs, watcher)
            .filter_map(|m| summed(&m.summaries, "/lost_events"))
            .collect();
        report.add(Row::new("lost events per run", watcher.name(), &lost, ""));
    }
}

/// Kernel time per program run on the non-DNS load, the floor's and dnsloop's runs alternating.
fn measure_non_dns_load(
    context: &Context,
    not_dns: &Dnsperf,
    rate: u64,
    report: &mut Report,
) -> Result<()> {
    let mut not_dns_runs = Vec::new();
    for _ in 0..REPEATS {
        for watcher in [Watcher::Floor, Watcher::Dnsloop] {
            let measured = measure(context, watcher, not_dns, rate)?;
            not_dns_runs.extend(measured.ns_per_run.map(|(ns, _)| (watcher, ns)));
        }
    }
    for watcher in [Watcher::Floor, Watcher::Dnsloop] {
        report.add(Row::new(
            "kernel ns per program run, non-DNS load",
            watcher.name(),
            &values_of(&not_dns_runs, watcher),
            "ns",
        ));
    }
    Ok(())
}

/// dnsloop at rest, attached and with nothing to see, in default mode and as the DaemonSet
/// runs it: its maps' kernel memory, and its own memory now and at most since it started.
fn measure_at_rest(context: &Context, report: &mut Report) -> Result<()> {
    for watcher in [Watcher::Dnsloop, Watcher::DnsloopDaemonSet] {
        let running = Running::start(context, watcher)?;
        let map_memory = ProgramStats::map_memory(&DNSLOOP_ALL_PROGRAMS)?;
        let memory = running.memory()?;
        running.stop()?;
        // Every node's tracer loads its own maps.
        let nodes = context.lab.nodes().max(1) as f64;
        report.add(Row::new(
            MAP_MEMORY_SECTION,
            watcher.name(),
            &[map_memory as f64 / nodes / MIB],
            "MiB",
        ));
        if let Some((resident, peak)) = memory {
            report.add(Row::new(
                MEMORY_AT_REST_SECTION,
                watcher.name(),
                &[resident as f64 / MIB],
                "MiB",
            ));
            report.add(Row::new(
                MEMORY_AT_START_SECTION,
                watcher.name(),
                &[peak as f64 / MIB],
                "MiB",
            ));
        }
    }
    Ok(())
}

const MIB: f64 = 1024.0 * 1024.0;
