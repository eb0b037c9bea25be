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
    watcher::{summed, values_of, CpuTime, Running, Watcher},
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
    cpu: Option<CpuTime>,
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
        (Some(now), Some(before)) => Some(now.since(before)),
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
/// The DaemonSet's every run, without the CPU of the thread that writes its bundles.
pub const USERSPACE_WITHOUT_BUNDLES_SECTION: &str =
    "userspace CPU s per 100k queries, every run, the thread writing bundles left out";
const BUNDLE_WRITER_SECTION: &str = "CPU s of the thread writing bundles, per run";
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

/// Userspace CPU per query, for each watcher that is a process. The DaemonSet's recorder writes
/// a bundle (the last seconds of every DNS packet, tens of MB at the fixed load) when a finding
/// fires: a cost paid once per finding kind per `--record-interval`, not per query, which in a
/// 10 s run would outweigh the recording itself. So its runs with no finding have the
/// `USERSPACE_SECTION` row, the others a row of their own, and every run is also counted
/// without the thread that writes bundles, whose CPU has a row of its own: on this small
/// machine the lab's own sockets overflow in some runs whatever watches, and the DaemonSet
/// rightly reports it, so runs with no finding may be few or none.
fn add_userspace_rows(runs: &[(Watcher, Measured)], report: &mut Report) {
    let per_100k = |m: &Measured, cpu: Duration| {
        cpu.as_secs_f64() * 100_000.0 / (m.load.completed.max(1) as f64)
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
            .filter_map(|m| Some(per_100k(m, m.cpu?.total)))
            .collect();
        report.add(Row::new(USERSPACE_SECTION, watcher.name(), &seconds, "s"));
    }
    let daemonset = || runs_of(runs, Watcher::DnsloopDaemonSet);
    let rows: [(&str, Vec<f64>, &str); 4] = [
        (
            USERSPACE_WITH_FINDINGS_SECTION,
            daemonset()
                .filter(|m| findings(m) > 0.0)
                .filter_map(|m| Some(per_100k(m, m.cpu?.total)))
                .collect(),
            "s",
        ),
        (
            USERSPACE_WITHOUT_BUNDLES_SECTION,
            daemonset()
                .filter_map(|m| Some(per_100k(m, m.cpu?.without_bundle_writer())))
                .collect(),
            "s",
        ),
        (
            BUNDLE_WRITER_SECTION,
            daemonset()
                .filter_map(|m| Some(m.cpu?.bundle_writer.as_secs_f64()))
                .collect(),
            "s",
        ),
        (
            "findings per run at the fixed load",
            daemonset().map(findings).collect(),
            "",
        ),
    ];
    for (section, values, unit) in rows {
        report.add(Row::new(
            section,
            Watcher::DnsloopDaemonSet.name(),
            &values,
            unit,
        ));
    }
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
    let daemonset = |section: &str| report.median(section, Watcher::DnsloopDaemonSet.name());
    let recording = daemonset(USERSPACE_WITHOUT_BUNDLES_SECTION)
        .zip(daemonset(BUNDLE_WRITER_SECTION))
        .zip(userspace(Watcher::Tcpdump));
    let whole = |seconds: Option<f64>| seconds.map_or("none".to_owned(), |s| format!("{s:.3} s"));
    let (without_finding, with_finding) = (
        whole(userspace(Watcher::DnsloopDaemonSet)),
        whole(daemonset(USERSPACE_WITH_FINDINGS_SECTION)),
    );
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
    if let Some(((steady, writer), tcpdump)) = recording {
        report.note(format!(
            "As the DaemonSet runs it: {steady:.3} s of userspace CPU per 100k queries, every \
             run counted without the thread writing bundles ({:.2}x tcpdump -w's), which used \
             {writer:.3} s per run: a bundle (the last seconds of every DNS packet) is written \
             once per finding kind per --record-interval (10 min by default), not per query. \
             Whole process: {without_finding} in runs with no finding, {with_finding} in runs \
             in which one fired.",
            steady / tcpdump
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
