//! The dead-upstream scenario's traffic, and what must come of it: the same checks whether the
//! findings come from a live trace (`tests/detect.rs`) or from an analysis of a capture of the
//! same traffic (`tests/analyze.rs`).
use std::fmt;

use dnsloop_core::schema::TimeoutRecord;

use crate::lab::{
    dns_server, Lab, Pod, CLUSTER_RECORDS, DEAD_DNS, EXTERNAL_A, EXTERNAL_NAME, STUB_DOMAIN,
};
use crate::or_fail::OrFail as _;

/// A timeout is reported only after the query waited this long.
const TIMEOUT_MS: u64 = 2_000;

/// The stub domain's name the client asks: forwarded to the dead server, never answered.
pub fn stub_name() -> String {
    format!("www.{STUB_DOMAIN}")
}

/// Asks each of `servers`, from the client pod, the stub domain's name and two names that
/// resolve; those two answers are checked, so that a source with nothing to report is known to
/// have seen working traffic. Returns the IDs of the answers.
pub fn ask(lab: &Lab, servers: &[String]) -> Vec<u16> {
    let (cluster_name, cluster_address) = CLUSTER_RECORDS[0];
    let mut answered = Vec::new();
    for server in servers {
        lab.dig(Pod::Client, server, &[&stub_name()])
            .or_fail(format_args!("dig @{server}"));
        answered.push(dig_answers(
            lab,
            server,
            EXTERNAL_NAME,
            &EXTERNAL_A.to_string(),
        ));
        answered.push(dig_answers(
            lab,
            server,
            cluster_name,
            &cluster_address.to_string(),
        ));
    }
    answered
}

/// Asks `server` for `name` from the client pod, checks the one answer and returns its ID.
pub fn dig_answers(lab: &Lab, server: &str, name: &str, expected: &str) -> u16 {
    let outcome = lab
        .dig(Pod::Client, server, &[name])
        .or_fail(format_args!("dig @{server} {name}"));
    assert_eq!(
        (outcome.status.as_deref(), outcome.answers.as_slice()),
        (Some("NOERROR"), [expected.to_owned()].as_slice()),
        "dig @{server} {name}:\n{}",
        outcome.stdout
    );
    outcome.id.expect("an answer has an ID")
}

/// There is a timeout naming the dead server, every one of them asked the stub domain's name
/// and waited at least the timeout, and no name that resolves timed out. `output` is what the
/// findings came from, for the failure message.
pub fn assert_only_the_stub_domain_times_out(
    timeouts: &[&TimeoutRecord],
    output: &dyn fmt::Display,
) {
    let dead = dns_server(DEAD_DNS);
    let at_dead: Vec<_> = timeouts
        .iter()
        .filter(|timeout| timeout.server == dead)
        .collect();
    assert!(
        !at_dead.is_empty(),
        "no timeout naming {dead} after asking for {}:\n{output}",
        stub_name()
    );
    for timeout in at_dead {
        assert_eq!(timeout.qname, format!("{}.", stub_name()), "{output}");
        assert!(timeout.waited_ms >= TIMEOUT_MS, "{output}");
    }
    let working = [
        format!("{EXTERNAL_NAME}."),
        format!("{}.", CLUSTER_RECORDS[0].0),
    ];
    assert!(
        timeouts
            .iter()
            .all(|timeout| !working.contains(&timeout.qname)),
        "names that resolve must not time out:\n{output}"
    );
}
