//! `cargo xtask demo`: dnsloop finding three real faults on the lab, as a person would see them:
//! a loop on one node, answers from an unexpected source, and a loop through two nodes.
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Result;
use dnsloop_tests::{
    lab::{Lab, Pod, Scenario, EXTERNAL_NAME, NODE_LOCAL_DNS},
    tracer::Tracer,
};

use crate::build_release;

/// Long enough for the loop's final count and the timeouts to be reported.
const SETTLE: Duration = Duration::from_millis(2500);

pub fn run() -> Result<()> {
    let dnsloop = build_release()?;

    let lab = Lab::builder(Scenario::NodelocalLoop).start()?;
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

    let lab = Lab::builder(Scenario::UnexpectedSource).start()?;
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
    drop(lab);

    two_node_loop(&dnsloop)
}

/// The kubespray loop across two nodes, seen by the tracer on node 0 while a client on node 1
/// asks: the question leaves node 0 through vxlan0 and comes back from node 1.
fn two_node_loop(dnsloop: &std::path::Path) -> Result<()> {
    let scenario = Scenario::ClusterLoop;
    let mut lab = Lab::builder(scenario).start()?;
    println!("== {scenario} ==\n{}\n", lab.describe());
    let tracer = Tracer::start(dnsloop, &lab, lab.node_ns(), &[])?;
    println!(
        "the client on node 1 asks its node cache an external name: dig @{NODE_LOCAL_DNS} \
         {EXTERNAL_NAME}"
    );
    let outcome = lab.dig_from(
        1,
        Pod::Client,
        &NODE_LOCAL_DNS.to_string(),
        &[EXTERNAL_NAME],
    )?;
    println!(
        "  -> {}\n",
        outcome.status.as_deref().unwrap_or("timed out")
    );
    std::thread::sleep(SETTLE);
    // The storm would end by itself within seconds; stopping the servers ends it now, before
    // the tracer's last report.
    lab.stop_servers();
    println!("(the lab's DNS servers are stopped: the storm is over)\n");
    let output = tracer.interrupt()?;
    println!("$ dnsloop trace   # in node 0's network namespace, stopped with Ctrl-C");
    println!("{}", output.stdout);
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
