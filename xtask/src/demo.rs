//! `cargo xtask demo`: dnsloop finding two real faults on the lab, as a person would see them.
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Result;
use dnsloop_tests::{
    lab::{Lab, Pod, Scenario},
    tracer::Tracer,
};

use crate::build_release;

/// Long enough for the loop's final count and the timeouts to be reported.
const SETTLE: Duration = Duration::from_millis(2500);

pub fn run() -> Result<()> {
    let dnsloop = build_release()?;

    let lab = Lab::up(Scenario::NodelocalLoop)?;
    println!("== {} ==\n{}\n", Scenario::NodelocalLoop, lab.describe());
    let tracer = Tracer::start(&dnsloop, &lab, lab.node_ns(), &[])?;
    let probe = coredns_probe_name();
    println!(
        "coredns-a sends a CoreDNS loop probe to its upstream: dig @169.254.25.10 HINFO {probe}"
    );
    let outcome = lab.dig(Pod::CoreDnsA, "169.254.25.10", &["HINFO", &probe])?;
    println!(
        "  -> {}\n",
        outcome.status.as_deref().unwrap_or("timed out")
    );
    std::thread::sleep(SETTLE);
    print_trace(tracer)?;
    drop(lab);

    let lab = Lab::up(Scenario::UnexpectedSource)?;
    println!("== {} ==", Scenario::UnexpectedSource);
    let tracer = Tracer::start(&dnsloop, &lab, lab.node_ns(), &[])?;
    println!(
        "the client asks the cluster DNS: dig @10.96.0.10 kubernetes.default.svc.cluster.local"
    );
    let outcome = lab.dig(
        Pod::Client,
        "10.96.0.10",
        &["kubernetes.default.svc.cluster.local"],
    )?;
    println!(
        "  -> {}\n",
        outcome.status.as_deref().unwrap_or("timed out")
    );
    std::thread::sleep(SETTLE);
    print_trace(tracer)?;
    Ok(())
}

/// `HINFO <random>.<random>.`, the probe CoreDNS's loop plugin sends at startup.
fn coredns_probe_name() -> String {
    let seed = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_nanos());
    format!("{}.{}.", seed % 10_000_000_000, (seed / 7) % 10_000_000_000)
}

fn print_trace(tracer: Tracer) -> Result<()> {
    let output = tracer.interrupt()?;
    println!("$ dnsloop trace   # in the node's network namespace, stopped with Ctrl-C");
    println!("{}", output.stdout);
    Ok(())
}
