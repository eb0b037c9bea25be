//! `dnsloop probe` proves a loop on demand: sent into the node-local cache of a node whose
//! CoreDNS forwards back to that cache, the probe is seen coming back, with its path; on a
//! healthy node it is answered and never comes back.
use std::process::Output;

use dnsloop_tests::or_fail::OrFail as _;
use dnsloop_tests::test_name;
use dnsloop_tests::{
    lab::{Lab, Scenario, NODE_LOCAL_DNS},
    privilege::{can_run, dnsloop_bin, Need},
};
use serde_json::Value;

/// Runs `dnsloop probe --trace --output json` at the node-local cache, from the node as
/// CoreDNS's `loop` plugin would, and returns its exit code and JSON lines.
fn probe(test: &str, scenario: Scenario) -> Option<(i32, Vec<Value>, String)> {
    if !can_run(test, &[Need::Root, Need::DnsloopBinary]) {
        return None;
    }
    let lab = Lab::builder(scenario).start().or_fail(test);
    let binary = dnsloop_bin();
    let server = NODE_LOCAL_DNS.to_string();
    let Output {
        status,
        stdout,
        stderr,
    } = lab
        .exec(
            lab.node_ns(),
            &[
                binary.to_str().expect("a UTF-8 path"),
                "probe",
                &server,
                "--trace",
                "--output",
                "json",
            ],
        )
        .or_fail(test);
    let stdout = String::from_utf8_lossy(&stdout).into_owned();
    let shown = format!(
        "--- stdout ---\n{stdout}--- stderr ---\n{}",
        String::from_utf8_lossy(&stderr)
    );
    let lines = stdout
        .lines()
        .map(|line| serde_json::from_str(line).or_fail(format_args!("not JSON: {line}\n{shown}")))
        .collect();
    Some((status.code().unwrap_or(-1), lines, shown))
}

fn of_kind<'a>(lines: &'a [Value], kind: &str) -> Vec<&'a Value> {
    lines.iter().filter(|line| line["kind"] == kind).collect()
}

#[test]
fn a_probe_into_a_nodelocal_loop_comes_back_and_shows_its_path() {
    let Some((code, lines, shown)) = probe(test_name!(), Scenario::NodelocalLoop) else {
        return;
    };
    let [result] = of_kind(&lines, "probe")[..] else {
        panic!("one probe result:\n{shown}");
    };
    let qname = result["qname"].as_str().expect("the probe's name");
    assert_eq!(result["looped"], true, "{shown}");
    assert!(result["came_back"].as_u64() > Some(1), "{shown}");
    let loops = of_kind(&lines, "loop");
    assert!(!loops.is_empty(), "the loop is reported:\n{shown}");
    for found in &loops {
        assert_eq!(found["qname"], qname, "only the probe's loop:\n{shown}");
        assert_eq!(found["probe"], "coredns", "{shown}");
    }
    let path = loops[0]["path"].as_array().expect("a path");
    assert!(
        path.iter().any(|hop| hop["ifname"]
            .as_str()
            .is_some_and(|ifname| ifname.starts_with("veth-coredns"))),
        "the path crosses a CoreDNS pod's bridge port:\n{shown}"
    );
    assert_eq!(code, 1, "a loop is a fault:\n{shown}");
}

#[test]
fn a_probe_on_a_healthy_node_is_answered_and_never_comes_back() {
    let Some((code, lines, shown)) = probe(test_name!(), Scenario::Healthy) else {
        return;
    };
    let [result] = of_kind(&lines, "probe")[..] else {
        panic!("one probe result:\n{shown}");
    };
    assert_eq!(result["looped"], false, "{shown}");
    assert_eq!(result["results"][0]["rcode"], "NXDOMAIN", "{shown}");
    assert!(of_kind(&lines, "loop").is_empty(), "{shown}");
    assert_eq!(code, 0, "{shown}");
}
