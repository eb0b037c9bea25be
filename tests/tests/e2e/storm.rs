//! A forwarding loop is a storm: every forward is a new query, thousands a second, and those
//! left unanswered time out. dnsloop must still say it in a few findings, with nothing lost:
//! the loop reported, its unanswered queries counted in its reports, and every timeout in the
//! summary's counts.
//!
//! The lab's loop goes round a few hundred times before the cache gives up and answers
//! REFUSED, so the client keeps asking for the whole storm; the analyzers' unit tests cover
//! loops whose every forward times out.
use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

use dnsloop_tests::or_fail::OrFail as _;
use dnsloop_tests::test_name;
use dnsloop_tests::{
    findings::{fqdn, Trace},
    lab::{Lab, Pod, Scenario, EXTERNAL_NAME, NODE_LOCAL_DNS},
    privilege::{can_run, dnsloop_bin, Need},
    tracer::Tracer,
};

/// How long the loops are left to go round.
const STORM: Duration = Duration::from_secs(8);
/// dnsloop's `--report-interval`, by default.
const REPORT_INTERVAL: Duration = Duration::from_secs(10);
/// Reports of one loop, or of one server's timeouts for one name, within one report interval:
/// the first, one a report interval later, and the final count at the end.
const MAX_REPORTS_PER_INTERVAL: usize = 3;
/// Findings of the whole run: a few loops and a few names, each a few reports.
const MAX_FINDINGS: usize = 50;

#[test]
fn a_nodelocal_loop_storm_is_a_few_findings_with_every_timeout_counted() {
    let test = test_name!();
    if !can_run(test, &[Need::Root, Need::DnsloopBinary]) {
        return;
    }
    assert!(STORM < REPORT_INTERVAL, "the storm fits in one interval");
    let lab = Lab::builder(Scenario::NodelocalLoop).start().or_fail(test);
    let tracer =
        Tracer::start(&dnsloop_bin(), &lab, lab.node_ns(), &["--output", "json"]).or_fail(test);
    // Each external name asked starts a loop of its own, again with every ask.
    let names: Vec<String> = (0..3)
        .map(|n| format!("storm{n}.{EXTERNAL_NAME}"))
        .chain([EXTERNAL_NAME.to_owned()])
        .collect();
    let started = Instant::now();
    let mut asked = 0;
    while started.elapsed() < STORM {
        for name in &names {
            lab.dig_or_fail(Pod::Client, &NODE_LOCAL_DNS.to_string(), &[name]);
            asked += 1;
        }
    }
    let output = tracer.interrupt().or_fail(test);
    let trace = Trace::from_output(output).or_fail(test);

    let loops = trace.loops();
    assert!(
        !trace.loops_for(&fqdn(EXTERNAL_NAME)).is_empty(),
        "no loop reported for {EXTERNAL_NAME}:\n{trace}"
    );
    let timeouts = trace.timeouts();
    let findings = loops.len() + trace.unexpected_sources().len() + timeouts.len();
    assert!(
        findings <= MAX_FINDINGS,
        "{findings} findings after {asked} questions in {STORM:?}:\n{trace}"
    );
    let mut reports_per_loop = BTreeMap::<String, usize>::new();
    let mut unanswered_per_loop = BTreeMap::<String, u64>::new();
    for found in &loops {
        let qname = found.qname.to_ascii_lowercase();
        *reports_per_loop.entry(qname.clone()).or_default() += 1;
        // Each report carries the count so far: the last one has them all.
        unanswered_per_loop.insert(qname, found.unanswered);
    }
    let mut reports_per_timeout = BTreeMap::<(String, String), usize>::new();
    for found in &timeouts {
        let key = (found.server.to_string(), found.qname.to_ascii_lowercase());
        *reports_per_timeout.entry(key).or_default() += 1;
    }
    assert!(
        reports_per_loop
            .values()
            .chain(reports_per_timeout.values())
            .all(|&reports| reports <= MAX_REPORTS_PER_INTERVAL),
        "more than {MAX_REPORTS_PER_INTERVAL} reports of one loop or timeout in {STORM:?}: \
         {reports_per_loop:?} {reports_per_timeout:?}\n{trace}"
    );

    // Nothing lost: every timed-out query is in a timeout's count or a loop's unanswered.
    let summary = trace.summary();
    let counted_in_timeouts: u64 = timeouts.iter().map(|found| found.count).sum();
    let counted_in_loops: u64 = unanswered_per_loop.values().sum();
    assert_eq!(
        (counted_in_timeouts, counted_in_loops),
        (
            summary.timeouts.queries - summary.timeouts.in_loops,
            summary.timeouts.in_loops
        ),
        "{trace}"
    );
    // Lost events are always reported, none or not.
    assert!(
        trace
            .stdout
            .lines()
            .any(|line| line.contains(r#""kind":"summary""#) && line.contains(r#""lost_events":"#)),
        "the summary reports lost events:\n{trace}"
    );
}
