//! Attach time on a namespace of `VETH_PAIRS` veth pairs: from starting `dnsloop trace` to its
//! programs attached, with TCX links (with and without `--expedite-attach`) and with filters on
//! the clsact qdisc, as kernels before 6.6 attach.
use std::{
    path::Path,
    process::{Command, Stdio},
    time::Instant,
};

use anyhow::{bail, Context as _, Result};
use dnsloop_tests::tracer::READY_MARKER;

use super::{
    process::Process,
    report::{Report, Row},
    REPEATS,
};

/// veth pairs of the attach-time namespace (two interfaces each).
pub const VETH_PAIRS: usize = 50;

/// One way of starting dnsloop whose attach time is measured: `dnsloop trace` with `args`, in
/// an environment with `env` added.
struct AttachConfiguration {
    name: &'static str,
    args: &'static [&'static str],
    env: &'static [(&'static str, &'static str)],
}

const ATTACH_CONFIGURATIONS: [AttachConfiguration; 3] = [
    AttachConfiguration {
        name: "dnsloop trace",
        args: &[],
        env: &[],
    },
    AttachConfiguration {
        name: "dnsloop trace --expedite-attach",
        args: &["--expedite-attach"],
        env: &[],
    },
    // Quicker here than TCX links: creating a TCX link waits out an RCU grace period under
    // RTNL, adding a filter to the clsact qdisc does not.
    AttachConfiguration {
        name: "dnsloop trace, tc clsact (DNSLOOP_FORCE_CLSACT=1, the path before Linux 6.6)",
        args: &[],
        env: &[("DNSLOOP_FORCE_CLSACT", "1")],
    },
];

pub fn run(dnsloop: &Path, report: &mut Report) -> Result<()> {
    let namespace = AttachNamespace::create()?;
    let binary = dnsloop.to_str().context("a UTF-8 path")?;
    for configuration in &ATTACH_CONFIGURATIONS {
        let mut times = Vec::new();
        for _ in 0..REPEATS {
            let started = Instant::now();
            let child = Command::new("ip")
                .args(["netns", "exec", &namespace.name, binary, "trace"])
                .args(configuration.args)
                .envs(configuration.env.iter().copied())
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .context("starting dnsloop in the attach namespace")?;
            let process = Process::started(child, READY_MARKER)?;
            times.push(started.elapsed().as_secs_f64() * 1000.0);
            process.interrupt()?;
        }
        report.add(Row::new(
            "start to attached, 100 veths (load, verify, attach)",
            configuration.name,
            &times,
            "ms",
        ));
    }
    Ok(())
}

/// A namespace of its own with `VETH_PAIRS` veth pairs, deleted when dropped.
struct AttachNamespace {
    name: String,
}

impl AttachNamespace {
    fn create() -> Result<Self> {
        let name = format!("dnsloopbench-{}", std::process::id());
        let ip = |args: &[&str]| -> Result<()> {
            let status = Command::new("ip")
                .args(args)
                .status()
                .context("running ip")?;
            if !status.success() {
                bail!("ip {args:?} failed");
            }
            Ok(())
        };
        ip(&["netns", "add", &name])?;
        let namespace = Self { name };
        let batch: String = (0..VETH_PAIRS)
            .map(|n| format!("link add vb{n}a type veth peer name vb{n}b\nlink set vb{n}a up\nlink set vb{n}b up\n"))
            .collect();
        let batch_file = std::env::temp_dir().join(format!("{}.ip", namespace.name));
        std::fs::write(&batch_file, batch).context("writing the veth batch")?;
        ip(&[
            "-n",
            &namespace.name,
            "-batch",
            batch_file.to_str().context("a UTF-8 path")?,
        ])?;
        let _ = std::fs::remove_file(batch_file);
        ip(&["-n", &namespace.name, "link", "set", "lo", "up"])?;
        Ok(namespace)
    }
}

impl Drop for AttachNamespace {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "delete", &self.name])
            .status();
    }
}
