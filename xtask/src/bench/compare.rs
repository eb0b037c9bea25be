//! `cargo xtask bench --compare OLD_DNSLOOP`: the A/B of a change, on the lab. The build at hand
//! and a saved binary from before the change run in alternating pairs under the same loads as the
//! full bench (the DNS fixed load, the non-DNS fixed load, saturation on the bridged node, where
//! also the programs' kernel time and runs per query are read), next to the empty classifier.
//! The machine drifts between runs by as much as most changes move the cost, so only pairs
//! measured side by side say which way a change went. Prints a table; BENCHMARKS.md is left as
//! it is.
use std::path::Path;

use anyhow::{bail, Result};

use super::{
    fixed_load,
    measure::{self, Dnsperf},
    report::{Report, Row},
    saturation::{
        RunValue, SaturationRun, SATURATION_KERNEL_PER_QUERY, SATURATION_QUERIES,
        SATURATION_RUNS_PER_QUERY,
    },
    topology::Topology,
    watcher::Watcher,
    Context,
};

/// Pairs per load: enough for a median that one disturbed run does not move.
const PAIRS: usize = 5;

/// Fails at once, before the build and the lab, when `baseline` is no binary to run.
pub fn check_baseline(baseline: &Path) -> Result<()> {
    if !baseline.is_file() {
        bail!(
            "{} is not a file: give --compare a copy of target/release/dnsloop built before the \
             change (cp target/release/dnsloop /tmp/dnsloop-before, then change and compare)",
            baseline.display()
        );
    }
    Ok(())
}

pub fn run(
    current: &Context,
    baseline_binary: &Path,
    dns: &Dnsperf,
    not_dns: &Dnsperf,
    report: &mut Report,
) -> Result<()> {
    let baseline = Context {
        dnsloop: baseline_binary,
        ..*current
    };
    let builds = [("baseline", &baseline), ("this build", current)];
    let rate = fixed_load::rate(dns, report)?;
    eprintln!("bench: {PAIRS} pairs at {rate} queries/s, DNS and not, then at saturation");
    for (section, load) in [
        ("kernel ns per program run, DNS load", dns),
        ("kernel ns per program run, non-DNS load", not_dns),
    ] {
        let mut floor = Vec::new();
        let mut per_build = vec![Vec::new(); builds.len()];
        for _ in 0..PAIRS {
            floor.extend(
                fixed_load::measure(current, Watcher::Floor, load, rate)?
                    .ns_per_run
                    .map(|(ns, _)| ns),
            );
            let mut pair = Vec::with_capacity(builds.len());
            for (_, context) in &builds {
                let measured = fixed_load::measure(context, Watcher::Dnsloop, load, rate)?;
                pair.push(measured.ns_per_run.map(|(ns, _)| ns));
            }
            // A pair with a run that measured nothing is left out whole, so that the pairs stay
            // aligned.
            if let Some(pair) = pair.into_iter().collect::<Option<Vec<f64>>>() {
                for (values, value) in per_build.iter_mut().zip(pair) {
                    values.push(value);
                }
            }
        }
        report.add(Row::new(section, Watcher::Floor.name(), &floor, "ns"));
        add_pairs(report, section, &builds, &per_build, "ns");
    }
    let mut runs: Vec<Vec<SaturationRun>> = builds.iter().map(|_| Vec::new()).collect();
    for _ in 0..PAIRS {
        for ((_, context), runs) in builds.iter().zip(&mut runs) {
            runs.push(SaturationRun::measure(context, dns, Watcher::Dnsloop)?);
        }
    }
    let section = |what| Topology::BridgedNode.section(what);
    let queries_per_second = paired(&runs, |run| Some(run.load.queries_per_second));
    add_pairs(
        report,
        &section(SATURATION_QUERIES),
        &builds,
        &queries_per_second,
        "q/s",
    );
    // The figure a change to the programs is judged by (issue 20's target: <= 1.5 µs).
    let per_query = paired(&runs, SaturationRun::kernel_ns_per_query);
    add_pairs(
        report,
        &section(SATURATION_KERNEL_PER_QUERY),
        &builds,
        &per_query,
        "ns",
    );
    // The same for both builds unless a change moves where the programs attach: shown so that
    // a change in the time per query can be told apart from one in the runs.
    for ((name, _), runs) in builds.iter().zip(&runs) {
        let values: Vec<f64> = runs
            .iter()
            .filter_map(SaturationRun::runs_per_query)
            .collect();
        report.add(Row::new(
            &section(SATURATION_RUNS_PER_QUERY),
            name,
            &values,
            "",
        ));
    }
    Ok(())
}

/// `value` of every build's runs, pair by pair; a pair with a run that measured nothing is left
/// out whole, so that the pairs stay aligned.
fn paired(runs: &[Vec<SaturationRun>], value: RunValue) -> Vec<Vec<f64>> {
    let mut per_build = vec![Vec::new(); runs.len()];
    for pair in 0..runs.first().map_or(0, Vec::len) {
        let values: Option<Vec<f64>> = runs.iter().map(|runs| value(runs.get(pair)?)).collect();
        for (build, value) in per_build.iter_mut().zip(values.into_iter().flatten()) {
            build.push(value);
        }
    }
    per_build
}

/// A row per build, and the median of this build's change against the baseline, pair by pair.
fn add_pairs(
    report: &mut Report,
    section: &str,
    builds: &[(&str, &Context)],
    per_build: &[Vec<f64>],
    unit: &str,
) {
    for ((name, _), values) in builds.iter().zip(per_build) {
        report.add(Row::new(section, name, values, unit));
    }
    if let Some((median, min, max)) = measure::spread(&changes(&per_build[0], &per_build[1])) {
        report.note(format!(
            "{section}: this build against the baseline, pair by pair: median {median:+.1} % \
             (from {min:+.1} to {max:+.1} %)."
        ));
    }
}

/// The change from `before` to `after` of each pair, in per cent of `before`.
fn changes(before: &[f64], after: &[f64]) -> Vec<f64> {
    before
        .iter()
        .zip(after)
        .map(|(before, after)| 100.0 * (after - before) / before)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_pair_is_set_against_its_own_baseline() {
        // The machine drifted up between the pairs: only pair by pair does the change show.
        let changes = changes(&[100.0, 200.0, 400.0], &[90.0, 180.0, 440.0]);
        assert_eq!(changes.len(), 3);
        for (change, expected) in changes.iter().zip([-10.0, -10.0, 10.0]) {
            assert!((change - expected).abs() < 1e-9, "{change} for {expected}");
        }
    }
}
