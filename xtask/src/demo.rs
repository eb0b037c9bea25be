//! `cargo xtask demo`: dnsloop on the lab, as a person would see it.
use std::time::Duration;

use anyhow::Result;
use dnsloop_tests::{
    lab::{Lab, Pod, Scenario},
    tracer::Tracer,
};

use crate::build_release;

pub fn run() -> Result<()> {
    let dnsloop = build_release()?;
    let lab = Lab::up(Scenario::NodelocalLoop)?;
    println!("== lab: {} ==\n{}", Scenario::NodelocalLoop, lab.describe());

    let tracer = Tracer::start(&dnsloop, &lab, lab.node_ns(), &["--duration", "4s"])?;
    println!("== a client pod asks the node-local cache for a cluster name and an external name ==");
    for name in ["kubernetes.default.svc.cluster.local", "www.example.test"] {
        let outcome = lab.dig(Pod::Client, "169.254.25.10", &[name])?;
        println!("  dig @169.254.25.10 {name}: {}", outcome.status.as_deref().unwrap_or("timed out"));
    }
    let output = tracer.wait(Duration::from_secs(10))?;
    println!("== dnsloop trace in the node namespace ==\n{}", output.stdout);
    Ok(())
}
