//! What dnsloop must cost a node at most (issue 32), and how fast `analyze` must read (issue
//! 33), judged against the rows of one run: each target is held, missed, or not measured in
//! this run (`--only` runs a piece alone).
use super::{
    analyze_speed::{ANALYZE, ANALYZE_SPEED_SECTION},
    fixed_load::{
        KERNEL_DNS_SECTION, KERNEL_PER_QUERY_SECTION, MAP_MEMORY_SECTION, MEMORY_AT_REST_SECTION,
        USERSPACE_SECTION, USERSPACE_WITHOUT_BUNDLES_SECTION,
    },
    non_dns_flood::DROP_SECTION,
    report::{number, Report},
    saturation::SATURATION_SHARE,
    storm::LOOP_REPORTED_SECTION,
    topology::Topology,
    watcher::Watcher,
};

/// Kernel time per query, counting every program run, in nanoseconds.
const KERNEL_NS_PER_QUERY: f64 = 1500.0;
/// A program run on DNS packets against the empty classifier's.
const PER_RUN_OVER_FLOOR: f64 = 4.0;
/// Of untraced queries/s, at saturation.
const SATURATION_PERCENT: f64 = 95.0;
const MAP_MEMORY_MIB: f64 = 8.0;
const MEMORY_AT_REST_MIB: f64 = 24.0;
const STORM_PEAK_MIB: f64 = 64.0;
const DROP_NS: f64 = 150.0;
const LOOP_REPORTED_MS: f64 = 1000.0;
/// Capture packets `analyze` reads a second (issue 33).
const ANALYZE_PACKETS_PER_SECOND: f64 = 500_000.0;

/// One target, as this run measured it.
pub struct Judged {
    pub target: String,
    /// What was measured, in the target's terms; `None` when this run did not measure it.
    pub measured: Option<String>,
    pub held: bool,
}

impl Judged {
    fn at_most(target: String, measured: Option<f64>, limit: f64, unit: &str) -> Self {
        Self {
            target,
            measured: measured
                .map(|value| format!("{} {unit}", number(value)).trim_end().to_owned()),
            held: measured.is_some_and(|value| value <= limit),
        }
    }

    pub fn verdict(&self) -> &'static str {
        match (&self.measured, self.held) {
            (None, _) => "not measured",
            (Some(_), true) => "held",
            (Some(_), false) => "missed",
        }
    }
}

/// Every target, judged against `report`'s medians (its maximums for what must hold in every
/// run).
pub fn judge(report: &Report) -> Vec<Judged> {
    let median = |section: &str, watcher: Watcher| report.median(section, watcher.name());
    let mut judged = Vec::new();
    for watcher in [Watcher::Dnsloop, Watcher::DnsloopDaemonSet] {
        judged.push(Judged::at_most(
            format!(
                "kernel time per query at the fixed load, {}: <= {} ns",
                watcher.name(),
                KERNEL_NS_PER_QUERY
            ),
            median(KERNEL_PER_QUERY_SECTION, watcher),
            KERNEL_NS_PER_QUERY,
            "ns",
        ));
    }
    judged.push(Judged::at_most(
        format!("kernel time per program run on DNS packets: <= {PER_RUN_OVER_FLOOR}x the empty classifier's"),
        median(KERNEL_DNS_SECTION, Watcher::Dnsloop)
            .zip(median(KERNEL_DNS_SECTION, Watcher::Floor))
            .map(|(dnsloop, floor)| dnsloop / floor),
        PER_RUN_OVER_FLOOR,
        "x",
    ));
    for topology in Topology::ALL {
        let section = topology.section(SATURATION_SHARE);
        let dnsloop = median(&section, Watcher::Dnsloop);
        let tcpdump = median(&section, Watcher::Tcpdump);
        judged.push(Judged {
            target: format!(
                "queries/s at saturation, {}: >= {SATURATION_PERCENT} % of untraced, and above \
                 tcpdump -w's",
                topology.name()
            ),
            measured: dnsloop.zip(tcpdump).map(|(dnsloop, tcpdump)| {
                format!("{} % (tcpdump -w {} %)", number(dnsloop), number(tcpdump))
            }),
            held: dnsloop.zip(tcpdump).is_some_and(|(dnsloop, tcpdump)| {
                dnsloop >= SATURATION_PERCENT && dnsloop > tcpdump
            }),
        });
    }
    judged.push(Judged::at_most(
        format!("kernel map memory with default options: <= {MAP_MEMORY_MIB} MiB"),
        median(MAP_MEMORY_SECTION, Watcher::Dnsloop),
        MAP_MEMORY_MIB,
        "MiB",
    ));
    for watcher in [Watcher::Dnsloop, Watcher::DnsloopDaemonSet] {
        judged.push(Judged::at_most(
            format!(
                "userspace memory at rest, {}: <= {MEMORY_AT_REST_MIB} MiB",
                watcher.name()
            ),
            median(MEMORY_AT_REST_SECTION, watcher),
            MEMORY_AT_REST_MIB,
            "MiB",
        ));
    }
    judged.push(Judged::at_most(
        format!("peak userspace memory in the cluster loop storm: <= {STORM_PEAK_MIB} MiB"),
        report.max(
            "peak userspace memory (VmHWM), cluster loop storm",
            Watcher::Dnsloop.name(),
        ),
        STORM_PEAK_MIB,
        "MiB",
    ));
    judged.push(Judged::at_most(
        format!("drop program per dropped datagram that is not DNS: <= {DROP_NS} ns"),
        median(DROP_SECTION, Watcher::Dnsloop),
        DROP_NS,
        "ns",
    ));
    judged.push(Judged::at_most(
        format!(
            "userspace CPU, {}, the thread writing bundles left out: <= tcpdump -w's",
            Watcher::DnsloopDaemonSet.name()
        ),
        median(USERSPACE_WITHOUT_BUNDLES_SECTION, Watcher::DnsloopDaemonSet)
            .zip(median(USERSPACE_SECTION, Watcher::Tcpdump))
            .map(|(dnsloop, tcpdump)| dnsloop / tcpdump),
        1.0,
        "x",
    ));
    judged.push(Judged::at_most(
        "lost events in default mode, at the fixed load: 0 in every run".to_owned(),
        report.max("lost events per run", Watcher::Dnsloop.name()),
        0.0,
        "",
    ));
    judged.push(Judged::at_most(
        format!("every loop probe of the storm reported within {LOOP_REPORTED_MS} ms"),
        report.max(LOOP_REPORTED_SECTION, Watcher::Dnsloop.name()),
        LOOP_REPORTED_MS,
        "ms",
    ));
    let read = report.median(ANALYZE_SPEED_SECTION, ANALYZE);
    judged.push(Judged {
        target: format!(
            "capture packets analyze reads per second: >= {} (issue 33)",
            number(ANALYZE_PACKETS_PER_SECOND)
        ),
        measured: read.map(|read| format!("{} pkt/s", number(read))),
        held: read.is_some_and(|read| read >= ANALYZE_PACKETS_PER_SECOND),
    });
    judged
}
