//! Kernel cost per run on packets that are not DNS, in a flood (see `flood`), and the drop
//! program's on a flood the kernel drops whole.
use std::net::SocketAddr;

use anyhow::Result;
use dnsloop_shared::names::{kernel_name, DROP_PROGRAM};
use dnsloop_tests::lab::Pod;

use super::{
    flood, floor,
    measure::ProgramStats,
    report::{Report, Row},
    watcher::{values_of, Running, Watcher},
    Context, NOT_DNS_PORT, REPEATS,
};

/// The program on the kernel's drops: it runs apart from the packets' path, on drops only.
/// The drop program's cost per run, its target's row.
pub const DROP_SECTION: &str = "drop program ns per run, non-DNS flood (every datagram dropped)";
const DROP_PROGRAMS: [&str; 1] = [kernel_name(DROP_PROGRAM)];
/// The drop program's floor: an empty program on the same tracepoint.
const EMPTY_ON_DROPS: [&str; 1] = [kernel_name(floor::EMPTY_ON_DROPS)];
/// Its rows' configuration.
const EMPTY_ON_DROPS_NAME: &str = "empty program on the same tracepoint";

/// Kernel cost per run on other packets in a flood (see `flood`), the floor's and dnsloop's
/// runs alternating.
pub fn run(context: &Context, report: &mut Report) -> Result<()> {
    const SECTION: &str = "kernel ns per program run, non-DNS flood";
    let lab = context.lab;
    let client = lab.netns_path(&lab.pod_ns(Pod::Client));
    let target = SocketAddr::from((Pod::CoreDnsA.ip(), NOT_DNS_PORT));
    let watchers = [Watcher::Floor, Watcher::Dnsloop];
    let (mut per_run, mut rates) = (Vec::new(), Vec::new());
    // The flood's port has no listener: the kernel drops every datagram, so the drop program
    // runs on each, its worst case (and keeps none, none being DNS).
    // The floor's runs also carry the empty program on the drops' tracepoint.
    let (mut drop_ns, mut drop_runs, mut drop_floor_ns) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..REPEATS {
        for watcher in watchers {
            let running = Running::start(context, watcher)?;
            let on_drops = (watcher == Watcher::Floor)
                .then(|| floor::attach_on_drops(context.floor_object))
                .transpose()?;
            let stats = ProgramStats::read()?;
            let took = flood::run(client.clone(), target)?;
            let after = ProgramStats::read()?;
            drop(on_drops);
            running.stop()?;
            if let Some((ns, _)) = after.since(&stats, &EMPTY_ON_DROPS) {
                drop_floor_ns.push(ns);
            }
            per_run.extend(
                after
                    .since(&stats, watcher.programs())
                    .map(|ns| (watcher, ns.0)),
            );
            rates.push((watcher, flood::DATAGRAMS as f64 / took.as_secs_f64()));
            if watcher == Watcher::Dnsloop {
                if let Some((ns, runs)) = after.since(&stats, &DROP_PROGRAMS) {
                    drop_ns.push(ns);
                    drop_runs.push(runs as f64 / flood::DATAGRAMS as f64);
                }
            }
        }
    }
    report.add(Row::new(
        DROP_SECTION,
        Watcher::Dnsloop.name(),
        &drop_ns,
        "ns",
    ));
    report.add(Row::new(
        DROP_SECTION,
        EMPTY_ON_DROPS_NAME,
        &drop_floor_ns,
        "ns",
    ));
    report.add(Row::new(
        "drop program runs per datagram, non-DNS flood",
        Watcher::Dnsloop.name(),
        &drop_runs,
        "",
    ));
    for watcher in watchers {
        let name = watcher.name();
        report.add(Row::new(SECTION, name, &values_of(&per_run, watcher), "ns"));
        report.add(Row::new(
            "datagrams/s of the non-DNS flood",
            name,
            &values_of(&rates, watcher),
            "pkt/s",
        ));
    }
    let ratio = |section: &str| {
        let dnsloop = report.median(section, Watcher::Dnsloop.name())?;
        Some(dnsloop / report.median(section, Watcher::Floor.name())?)
    };
    if let Some((fixed, flood)) =
        ratio("kernel ns per program run, non-DNS load").zip(ratio(SECTION))
    {
        report.note(format!(
            "Kernel cost on other packets: {fixed:.1}x the empty classifier at the fixed load, \
             {flood:.1}x in a flood of {} datagrams from one sender (target <= 3x).",
            flood::DATAGRAMS
        ));
    }
    if let Some((drop, classifier)) = report
        .median(DROP_SECTION, Watcher::Dnsloop.name())
        .zip(report.median(SECTION, Watcher::Dnsloop.name()))
    {
        let floor = report
            .median(DROP_SECTION, EMPTY_ON_DROPS_NAME)
            .map(|floor| format!(", and {floor:.0} ns for an empty program on the same tracepoint"))
            .unwrap_or_default();
        report.note(format!(
            "The drop program (the kernel's drops of DNS packets) on a flood the kernel drops \
             whole, none of it DNS, its worst case: {drop:.0} ns per dropped datagram, against \
             {classifier:.0} ns per run of the classifiers on the same packets{floor}; it never \
             runs on packets that are not dropped."
        ));
    }
    Ok(())
}
