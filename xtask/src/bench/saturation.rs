//! Throughput at saturation with each watcher in turn, in alternating rounds, and what the
//! programs cost per query there, on each topology (see `Topology`).
use std::path::Path;

use anyhow::Result;
use serde_json::Value;

use super::{
    measure::{self, Dnsperf, ProgramStats},
    queries_file,
    report::{Report, Row},
    topology::Topology,
    watcher::{summed, Running, Watcher},
    Context,
};

/// Flags of every run at saturation: enough clients and queries in flight to keep the lab busy.
pub const SATURATION_FLAGS: [&str; 6] = ["-c", "8", "-T", "2", "-q", "500"];
/// Saturation runs: rounds of every configuration in turn, each run this long. Rounds on this
/// machine differ by 10-20 %, more than most changes move throughput: the ratio is a median.
const ROUNDS: usize = 7;
pub const SATURATION_SECONDS: u64 = 5;
/// What runs on the node during the saturation runs, in the order of every round; the first
/// is the baseline the others are set against. The machine drifts (clock frequency,
/// temperature, the lab's caches, whatever else runs) by as much as the differences measured
/// here, so one configuration measured all at once would take a drift the others escape.
/// Alternating them in a fixed order puts each next to the same neighbours in every round,
/// so that the drift falls on all of them alike.
const SATURATION_WATCHERS: [Watcher; 4] = [
    Watcher::Nothing,
    Watcher::Dnsloop,
    Watcher::Floor,
    Watcher::Tcpdump,
];
/// The saturation rows' measurements; each topology's rows add its name
/// ([`Topology::section`]).
pub const SATURATION_QUERIES: &str = "queries/s at saturation";
pub const SATURATION_SHARE: &str = "% of no program's queries/s in its round, at saturation";
pub const SATURATION_KERNEL_PER_QUERY: &str = "kernel ns per query at saturation";
pub const SATURATION_RUNS_PER_QUERY: &str = "program runs per query at saturation";
const SATURATION_KERNEL_PER_RUN: &str = "kernel ns per program run, DNS at saturation";
const SATURATION_LOST: &str = "lost events per run at saturation";
const SATURATION_PACKETS: &str = "DNS packets/s the programs parsed at saturation";

/// The saturation rows of `topology`, on a lab of its own.
pub fn on_own_lab(
    topology: Topology,
    dnsloop: &Path,
    floor_object: &Path,
    report: &mut Report,
) -> Result<()> {
    let lab = topology.lab()?;
    let queries = queries_file(&lab)?;
    let context = Context {
        lab: &lab,
        dnsloop,
        floor_object,
    };
    run(&context, &topology.load(&lab, &queries), topology, report)
}

/// A figure read from a run at saturation, if it measured it.
pub type RunValue = fn(&SaturationRun) -> Option<f64>;

/// One run at saturation.
pub struct SaturationRun {
    watcher: Watcher,
    pub load: measure::Load,
    /// Kernel ns per run of the watcher's programs, and their runs.
    kernel: Option<(f64, u64)>,
    summaries: Vec<Option<Value>>,
}

impl SaturationRun {
    pub fn measure(context: &Context, dns: &Dnsperf, watcher: Watcher) -> Result<Self> {
        let running = Running::start(context, watcher)?;
        let stats = ProgramStats::read()?;
        let load = dns.run(SATURATION_SECONDS, None, &SATURATION_FLAGS)?;
        let kernel = ProgramStats::read()?.since(&stats, watcher.programs());
        Ok(Self {
            watcher,
            load,
            kernel,
            summaries: running.stop()?,
        })
    }

    fn completed(&self) -> Option<f64> {
        (self.load.completed > 0).then_some(self.load.completed as f64)
    }

    /// The programs' kernel time over the queries answered.
    pub fn kernel_ns_per_query(&self) -> Option<f64> {
        let (ns_per_run, runs) = self.kernel?;
        Some(ns_per_run * runs as f64 / self.completed()?)
    }

    pub fn runs_per_query(&self) -> Option<f64> {
        Some(self.kernel?.1 as f64 / self.completed()?)
    }
}

/// Throughput at saturation on `topology` with each of `SATURATION_WATCHERS` in turn, `ROUNDS`
/// times; what the programs cost per query there, and whether dnsloop lost anything.
pub fn run(
    context: &Context,
    dns: &Dnsperf,
    topology: Topology,
    report: &mut Report,
) -> Result<()> {
    eprintln!(
        "bench: throughput at saturation, {} ({ROUNDS} rounds of {} configurations, \
         {SATURATION_SECONDS} s each)",
        topology.name(),
        SATURATION_WATCHERS.len()
    );
    let mut rounds: Vec<Vec<SaturationRun>> = Vec::with_capacity(ROUNDS);
    for _ in 0..ROUNDS {
        let mut round = Vec::with_capacity(SATURATION_WATCHERS.len());
        for watcher in SATURATION_WATCHERS {
            round.push(SaturationRun::measure(context, dns, watcher)?);
        }
        rounds.push(round);
    }
    let values = |watcher: Watcher, value: RunValue| -> Vec<f64> {
        rounds
            .iter()
            .flatten()
            .filter(|run| run.watcher == watcher)
            .filter_map(value)
            .collect()
    };
    let mut add = |what: &str, watcher: Watcher, values: &[f64], unit: &str| {
        report.add(Row::new(
            &topology.section(what),
            watcher.name(),
            values,
            unit,
        ));
    };
    for watcher in SATURATION_WATCHERS {
        let queries_per_second = values(watcher, |run| Some(run.load.queries_per_second));
        add(SATURATION_QUERIES, watcher, &queries_per_second, "q/s");
    }
    // Each against the baseline of its own round, which ran next to it: the drift between
    // rounds falls out.
    for watcher in &SATURATION_WATCHERS[1..] {
        let shares: Vec<f64> = rounds
            .iter()
            .filter_map(|round| {
                let without = round.first()?.load.queries_per_second;
                let with = round.iter().find(|run| run.watcher == *watcher)?;
                Some(100.0 * with.load.queries_per_second / without)
            })
            .collect();
        add(SATURATION_SHARE, *watcher, &shares, "%");
    }
    let kernel_rows: [(&str, &str, RunValue); 3] = [
        (
            SATURATION_KERNEL_PER_QUERY,
            "ns",
            SaturationRun::kernel_ns_per_query,
        ),
        (SATURATION_RUNS_PER_QUERY, "", SaturationRun::runs_per_query),
        (SATURATION_KERNEL_PER_RUN, "ns", |run| Some(run.kernel?.0)),
    ];
    for (what, unit, value) in kernel_rows {
        for watcher in [Watcher::Floor, Watcher::Dnsloop] {
            add(what, watcher, &values(watcher, value), unit);
        }
    }
    // The highest DNS packet rates of the bench, where the default mode must still lose nothing.
    let lost = values(Watcher::Dnsloop, |run| {
        summed(&run.summaries, "/lost_events")
    });
    add(SATURATION_LOST, Watcher::Dnsloop, &lost, "");
    let packets = values(Watcher::Dnsloop, |run| {
        Some(summed(&run.summaries, "/kernel/dns_packets")? / SATURATION_SECONDS as f64)
    });
    add(SATURATION_PACKETS, Watcher::Dnsloop, &packets, "pkt/s");
    let note = note(report, topology, &lost);
    report.note(note);
    Ok(())
}

/// The saturation rows of `topology` against the targets, and the lost events of
/// dnsloop's runs there, `lost`.
fn note(report: &Report, topology: Topology, lost: &[f64]) -> String {
    let median =
        |what: &str, watcher: Watcher| report.median(&topology.section(what), watcher.name());
    let verdict = |held: bool| if held { "held" } else { "missed" };
    let shares: Vec<String> = SATURATION_WATCHERS[1..]
        .iter()
        .map(|&watcher| match median(SATURATION_SHARE, watcher) {
            Some(share) if watcher == Watcher::Dnsloop => format!(
                "{} {share:.1} % (target >= 95 %: {})",
                watcher.name(),
                verdict(share >= 95.0)
            ),
            Some(share) => format!("{} {share:.1} %", watcher.name()),
            None => format!("{} not measured", watcher.name()),
        })
        .collect();
    let kernel = |watcher: Watcher| {
        Some((
            median(SATURATION_KERNEL_PER_QUERY, watcher)?,
            median(SATURATION_RUNS_PER_QUERY, watcher)?,
            median(SATURATION_KERNEL_PER_RUN, watcher)?,
        ))
    };
    let kernel = match (kernel(Watcher::Dnsloop), kernel(Watcher::Floor)) {
        (Some((per_query, runs, per_run)), floor) => {
            let floor = floor.map_or(String::new(), |(_, floor_runs, floor_per_run)| {
                format!(
                    " ({:.1}x the empty classifier's {floor_per_run:.0} ns, which runs \
                     {floor_runs:.1} times per query)",
                    per_run / floor_per_run
                )
            });
            format!(
                "dnsloop's programs {:.2} µs of kernel time per query (target <= 1.5 µs: {}): \
                 {runs:.1} program runs per query at {per_run:.0} ns per run{floor}",
                per_query / 1000.0,
                verdict(per_query <= 1500.0)
            )
        }
        (None, _) => "dnsloop's kernel time per query not measured".to_owned(),
    };
    let lost = match lost.iter().copied().reduce(f64::max) {
        None => "not reported".to_owned(),
        Some(0.0) => {
            format!("0 in each of {} runs (target 0: held)", lost.len())
        }
        Some(most) => format!(
            "{:.0} over {} runs, up to {most:.0} in one (target 0: missed)",
            lost.iter().sum::<f64>(),
            lost.len()
        ),
    };
    format!(
        "Saturation, {} ({}): queries/s against no program's in the same round, medians of \
         {ROUNDS} rounds with the configurations alternating: {}. {kernel}. dnsloop's lost \
         events: {lost}.",
        topology.name(),
        topology.path(),
        shares.join(", ")
    )
}
