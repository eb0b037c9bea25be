//! The programs on single packets of each kind (`BPF_PROG_TEST_RUN`), and the verifier's
//! instruction counts, read from the `kernel_profile` bench target of dnsloop-userspace.
use std::process::Stdio;

use anyhow::{bail, Context as _, Result};

use super::{
    report::{Report, Row},
    REPEATS,
};
use crate::command;

/// The programs' own cost per kind of packet, on one CPU with nothing else running, and what
/// the verifier made of them: the `kernel_profile` bench target of dnsloop-userspace.
pub fn run(report: &mut Report) -> Result<()> {
    let mut costs: Vec<(String, Vec<f64>)> = Vec::new();
    let mut verified = Vec::new();
    for _ in 0..REPEATS {
        let output = command::cargo_command()
            .args([
                "bench",
                "--quiet",
                "-p",
                "dnsloop-userspace",
                "--features",
                "profiling",
                "--bench",
                "kernel_profile",
            ])
            .stderr(Stdio::inherit())
            .output()
            .context("running the kernel_profile bench")?;
        if !output.status.success() {
            bail!("the kernel_profile bench failed ({})", output.status);
        }
        verified.clear();
        for line in String::from_utf8_lossy(&output.stdout).lines() {
            match line.split('\t').collect::<Vec<_>>().as_slice() {
                ["cost", kind, ns] => {
                    let ns: f64 = ns.parse().context("a cost in ns")?;
                    match costs.iter_mut().find(|(known, _)| known == kind) {
                        Some((_, values)) => values.push(ns),
                        None => costs.push(((*kind).to_owned(), vec![ns])),
                    }
                }
                ["verified", program, instructions, translated, jited] => verified.push(format!(
                    "{program}: {instructions} instructions processed by the verifier, \
                     {translated} bytes translated, {jited} bytes JITed"
                )),
                _ => {}
            }
        }
    }
    for (kind, values) in &costs {
        report.add(Row::new(
            "kernel ns per run on one packet (BPF_PROG_TEST_RUN)",
            kind,
            values,
            "ns",
        ));
    }
    for line in verified {
        report.note(line);
    }
    Ok(())
}
