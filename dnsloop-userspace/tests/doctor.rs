//! `dnsloop doctor` as a person or a script runs it: the binary's exit status, its JSON lines,
//! and a run on this machine's own root.
use std::{
    path::{Path, PathBuf},
    process::{Command, Output},
};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/core/tests/fixtures/doctor");

fn doctor(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dnsloop"))
        .arg("doctor")
        .args(args)
        .output()
        .expect("run dnsloop doctor")
}

fn fixture(name: &str) -> PathBuf {
    Path::new(FIXTURES).join(name)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8(bytes.to_vec()).expect("doctor writes UTF-8")
}

#[test]
fn a_healthy_node_exits_0_and_ends_with_a_tally() {
    let healthy = fixture("healthy");
    let output = doctor(&[
        "--root",
        healthy.join("root").to_str().unwrap(),
        "--corefile",
        healthy.join("corefiles/coredns.yaml").to_str().unwrap(),
    ]);
    let stdout = text(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{stdout}");
    assert_eq!(
        stdout.lines().last(),
        Some("doctor: 0 errors, 0 warnings, 3 info, 8 ok")
    );
    assert!(output.stderr.is_empty(), "{}", text(&output.stderr));
}

#[test]
fn errors_exit_1_and_json_lines_keep_their_keys_in_order() {
    let looped = fixture("systemd-stub-loop");
    let output = doctor(&[
        "--root",
        looped.join("root").to_str().unwrap(),
        "--corefile",
        looped.join("corefiles/Corefile").to_str().unwrap(),
        "--output",
        "json",
    ]);
    assert_eq!(output.status.code(), Some(1));
    let stdout = text(&output.stdout);
    let objects: Vec<serde_json::Map<String, serde_json::Value>> = stdout
        .lines()
        .map(|line| serde_json::from_str(line).expect("every line is one JSON object"))
        .collect();
    let first = &objects[0];
    assert_eq!(
        first.keys().collect::<Vec<_>>(),
        ["kind", "id", "severity", "subject", "summary", "fix", "file", "line"]
    );
    assert_eq!(first["kind"], "check");
    assert_eq!(first["id"], "resolv.loopback-upstream");
    assert_eq!(first["severity"], "error");
    assert_eq!(first["file"], "/run/systemd/resolve/stub-resolv.conf");
    assert_eq!(first["line"], 21);
    let summary = objects.last().unwrap();
    assert_eq!(summary["kind"], "summary");
    assert_eq!(summary["error"], 1);
}

#[test]
fn missing_inputs_exit_2_and_say_what_to_give() {
    let output = doctor(&["--root", "/nonexistent/node"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(output.stdout.is_empty());
    let stderr = text(&output.stderr);
    assert!(stderr.contains("--root /nonexistent/node"), "{stderr}");

    let healthy = fixture("healthy/root");
    let output = doctor(&[
        "--root",
        healthy.to_str().unwrap(),
        "--corefile",
        "/nonexistent/coredns.yaml",
    ]);
    assert_eq!(output.status.code(), Some(2));
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains("kubectl -n kube-system get configmap"),
        "{stderr}"
    );
}

/// This machine is no Kubernetes node, but doctor must read a live root (/proc, /sys, whatever
/// /etc holds) without failing itself: findings are fine, exit status 2 is not.
#[test]
fn the_live_root_is_read_without_doctor_failing() {
    let output = doctor(&[]);
    let stdout = text(&output.stdout);
    assert!(
        matches!(output.status.code(), Some(0 | 1)),
        "{:?}: {}",
        output.status,
        text(&output.stderr)
    );
    assert!(
        stdout
            .lines()
            .last()
            .is_some_and(|line| line.starts_with("doctor: ")),
        "{stdout}"
    );
}
