//! The soak: minutes of mixed healthy and failing DNS on two nodes, traced on both as a fleet
//! would, to show that dnsloop stays quiet about loops where there are none, names every server
//! that does not answer, and holds its memory and tables flat.
//!
//! The lab is `dead-upstream` on two nodes: both CoreDNS pods on node 0, node 1's client
//! reaching them over the VXLAN overlay. A client pod on each node asks its node cache names
//! from one list of thousands: most answered (cluster names by CoreDNS, external ones by the
//! upstream), and a few in each stub domain whose server is gone, closed or answers badly
//! (`dead_stub_domains`, `upstream_failure_domains`, the rest of `corp.example` to a server
//! where packets vanish). Meanwhile a process on node 0 asks the node's own resolver at
//! 127.0.0.1, where nothing listens. The lab's forwarders are dnsmasq, which gives up on a
//! query after 10 s and holds at most 150 in flight: the dead names are few enough that it
//! never runs out, so the healthy names keep being answered.
use std::{
    collections::BTreeSet,
    fmt::Write as _,
    net::{IpAddr, Ipv4Addr, SocketAddr},
    path::Path,
    process::Command,
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result};
use dnsloop_tests::{
    lab::{
        dead_stub_domains, upstream_failure_domains, Lab, Scenario, CLUSTER_DOMAIN, DEAD_DNS,
        EXTERNAL_NAME, NODE_LOCAL_DNS, STUB_DOMAIN,
    },
    tracer::READY_MARKER,
};
use serde_json::Value;

use super::{
    lab_file,
    measure::{resident_memory, Dnsperf, Load},
    process::Process,
    report::{Report, Row},
};

/// Queries/s each node's client asks: about 2,000 a second in all.
const RATE_PER_NODE: u64 = 1_000;
/// Queries/s the process on node 0 asks its own resolver, which is down.
const NODE_RESOLVER_RATE: u64 = 5;
/// Distinct names in the list the clients cycle through.
const NAMES: usize = 20_000;
/// In every block of this many names: one in each dead stub domain, two in each badly answering
/// one (one in the slow one, whose answers take 2.5 s), the rest answered. At the clients' rate
/// that keeps about 50 dead queries in flight at each forwarder, a third of what dnsmasq holds.
const BLOCK: usize = 1_000;
/// How often memory and the kernel's tables are sampled: once a minute, halfway through it.
const SAMPLE_EVERY: Duration = Duration::from_secs(60);
/// After the load ends, dnsloop's `--timeout` (2 s) and a second more, so that the last
/// queries' timeouts are reported before the tracers stop.
const SETTLE: Duration = Duration::from_secs(3);
/// The kernel's tables whose entries are sampled, as the kernel names them.
const KERNEL_TABLES: [&str; 2] = ["QUERIES", "QUESTIONS"];

const NODE_RESOLVER: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 53);

/// What one node's tracer made of the soak.
struct NodeRun {
    node: usize,
    records: Vec<Value>,
    /// Resident memory at each sample, in bytes.
    memory: Vec<u64>,
    /// Entries in each of [`KERNEL_TABLES`] at each sample.
    tables: Vec<[u64; KERNEL_TABLES.len()]>,
}

impl NodeRun {
    fn of_kind<'a>(&'a self, kind: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
        self.records
            .iter()
            .filter(move |record| record["kind"] == kind)
    }

    fn summary(&self) -> Option<&Value> {
        self.of_kind("summary").last()
    }

    fn config(&self) -> String {
        format!("dnsloop trace, node {}", self.node)
    }
}

/// The servers that should be named in timeouts on node 0, where CoreDNS forwards to them,
/// with what is wrong with each.
fn dead_servers() -> Vec<(SocketAddr, &'static str)> {
    dead_stub_domains()
        .into_iter()
        .map(|(_, server, what)| (SocketAddr::new(server, 53), what))
        .chain([
            (SocketAddr::new(DEAD_DNS.into(), 53), "packets to it vanish"),
            (NODE_RESOLVER, "the node's own resolver, down"),
        ])
        .collect()
}

/// The soak, for `duration`, and its rows.
pub fn run(dnsloop: &Path, duration: Duration, report: &mut Report) -> Result<()> {
    let lab = Lab::builder(Scenario::DeadUpstream).nodes(2).start()?;
    let queries = lab_file(&lab, "soak-queries.txt", &query_list())?;
    let resolver_queries = lab_file(
        &lab,
        "soak-node-resolver.txt",
        &format!("{EXTERNAL_NAME} A\n{EXTERNAL_NAME} AAAA\n"),
    )?;

    // Each tracer's kernel tables are the ones that appeared while it started.
    let mut tracers = Vec::new();
    let mut known_tables = kernel_table_ids()?;
    for node in 0..lab.nodes() {
        let binary = dnsloop.to_str().context("a UTF-8 path")?;
        let child = lab.spawn(
            lab.node_ns_of(node)?,
            &[binary, "trace", "--output", "json"],
        )?;
        let tracer = Process::started(child, READY_MARKER)?;
        let tables = kernel_table_ids()?;
        let own: Vec<[u32; KERNEL_TABLES.len()]> =
            tables.difference(&known_tables).copied().collect();
        let [tables] = own[..] else {
            anyhow::bail!(
                "node {node}'s tracer: expected one new set of kernel tables, found {own:?}"
            );
        };
        known_tables.extend(own);
        tracers.push((tracer, tables));
    }

    let seconds = duration.as_secs().to_string();
    let started = Instant::now();
    let (loads, samples) = thread::scope(|scope| -> Result<_> {
        let clients: Vec<_> = (0..lab.nodes())
            .map(|node| {
                let (lab, queries) = (&lab, &queries);
                let seconds = duration.as_secs();
                scope.spawn(move || {
                    Dnsperf {
                        lab,
                        queries,
                        node,
                        server: NODE_LOCAL_DNS.to_string(),
                        port: 53,
                    }
                    .run(seconds, Some(RATE_PER_NODE), &["-q", "500"])
                })
            })
            .collect();
        let node_resolver = scope.spawn(|| {
            let rate = NODE_RESOLVER_RATE.to_string();
            lab.exec(
                lab.node_ns(),
                &[
                    "dnsperf",
                    "-s",
                    "127.0.0.1",
                    "-d",
                    &resolver_queries,
                    "-l",
                    &seconds,
                    "-Q",
                    &rate,
                    "-t",
                    "1",
                ],
            )
        });
        // Each sample in the middle of its minute, while the load runs.
        let mut samples = Vec::new();
        let mut next = SAMPLE_EVERY / 2;
        while next < duration {
            thread::sleep(next.saturating_sub(started.elapsed()));
            next += SAMPLE_EVERY;
            let sample = tracers
                .iter()
                .map(|(tracer, tables)| {
                    Ok((resident_memory(tracer.child.id())?, table_entries(tables)?))
                })
                .collect::<Result<Vec<_>>>()?;
            samples.push(sample);
        }
        let loads = clients
            .into_iter()
            .map(|client| client.join().expect("dnsperf's thread panicked"))
            .collect::<Result<Vec<Load>>>()?;
        node_resolver
            .join()
            .expect("dnsperf's thread panicked")
            .context("asking the node's resolver")?;
        Ok((loads, samples))
    })?;
    thread::sleep(SETTLE);

    let runs = tracers
        .into_iter()
        .enumerate()
        .map(|(node, (tracer, _))| {
            let records = tracer
                .interrupt()?
                .into_iter()
                .filter_map(|(_, line)| serde_json::from_str(&line).ok())
                .collect();
            Ok(NodeRun {
                node,
                records,
                memory: samples.iter().map(|sample| sample[node].0).collect(),
                tables: samples.iter().map(|sample| sample[node].1).collect(),
            })
        })
        .collect::<Result<Vec<_>>>()?;
    drop(lab);
    add_rows(report, duration, &loads, &runs);
    Ok(())
}

/// The list the clients cycle through, in dnsperf's format: [`NAMES`] distinct names, A and
/// AAAA in turn.
fn query_list() -> String {
    let dead: Vec<String> = dead_stub_domains()
        .iter()
        .map(|(zone, _, _)| zone.to_string())
        .chain([STUB_DOMAIN.to_owned()])
        .collect();
    let [refused, servfail, slow, big, retry] = upstream_failure_domains().map(|(zone, _)| zone);
    let failing_in_a_block: Vec<&str> = dead
        .iter()
        .map(String::as_str)
        .chain([
            refused, servfail, big, retry, refused, servfail, big, retry, slow,
        ])
        .collect();
    let mut list = String::new();
    for number in 0..NAMES {
        let qtype = if number % 2 == 0 { "A" } else { "AAAA" };
        let in_block = number % BLOCK;
        let name = match failing_in_a_block.get(in_block) {
            Some(zone) => format!("soak{number}.{zone}"),
            None if number % 3 == 0 => format!("soak{number}.example.test"),
            None => format!("soak{number}.default.svc.{CLUSTER_DOMAIN}"),
        };
        let _ = writeln!(list, "{name} {qtype}");
    }
    list
}

/// The ids of the maps named [`KERNEL_TABLES`], in sets of one of each: a tracer's.
fn kernel_table_ids() -> Result<BTreeSet<[u32; KERNEL_TABLES.len()]>> {
    let output = Command::new("bpftool")
        .args(["map", "show", "--json"])
        .output()
        .context("running bpftool map show")?;
    let maps: Value = serde_json::from_slice(&output.stdout).context("reading bpftool's JSON")?;
    let ids_of = |name: &str| -> Vec<u32> {
        let mut ids: Vec<u32> = maps
            .as_array()
            .into_iter()
            .flatten()
            .filter(|map| map["name"] == name)
            .filter_map(|map| u32::try_from(map["id"].as_u64()?).ok())
            .collect();
        ids.sort_unstable();
        ids
    };
    let by_table = KERNEL_TABLES.map(ids_of);
    // Each tracer creates its tables in the same order, so the n-th of each name are one
    // tracer's.
    Ok((0..by_table[0].len())
        .filter_map(|n| {
            let set = [by_table[0][n], *by_table[1].get(n)?];
            Some(set)
        })
        .collect())
}

/// Entries in each of one tracer's kernel tables now: bpftool's dump ends with "Found N
/// elements".
fn table_entries(ids: &[u32; KERNEL_TABLES.len()]) -> Result<[u64; KERNEL_TABLES.len()]> {
    let mut entries = [0; KERNEL_TABLES.len()];
    for (count, id) in entries.iter_mut().zip(ids) {
        let output = Command::new("bpftool")
            .args(["map", "dump", "id", &id.to_string()])
            .output()
            .context("running bpftool map dump")?;
        let text = String::from_utf8_lossy(&output.stdout);
        *count = text
            .lines()
            .rev()
            .find_map(|line| {
                line.strip_prefix("Found ")?
                    .split_whitespace()
                    .next()?
                    .parse()
                    .ok()
            })
            .with_context(|| format!("bpftool printed no count for map {id}"))?;
    }
    Ok(entries)
}

fn add_rows(report: &mut Report, duration: Duration, loads: &[Load], runs: &[NodeRun]) {
    const SECTION: &str = "soak";
    let section = |what: &str| format!("{what}, {SECTION}");
    for (node, load) in loads.iter().enumerate() {
        report.add(Row::new(
            &section("queries/s answered"),
            &format!("dnsperf, client pod on node {node}"),
            &[load.queries_per_second],
            "q/s",
        ));
    }
    for run in runs {
        let config = run.config();
        let count = |kind: &str| run.of_kind(kind).count() as f64;
        for (what, kind) in [
            ("loop findings", "loop"),
            ("possible loop findings", "possible_loop"),
            ("timeout findings", "timeout"),
        ] {
            report.add(Row::new(&section(what), &config, &[count(kind)], ""));
        }
        let mib: Vec<f64> = run
            .memory
            .iter()
            .map(|&bytes| bytes as f64 / 1024.0 / 1024.0)
            .collect();
        report.add(Row::new(
            &section("userspace memory (VmRSS) each minute"),
            &config,
            &mib,
            "MiB",
        ));
        for (at, table) in KERNEL_TABLES.iter().enumerate() {
            let entries: Vec<f64> = run.tables.iter().map(|sample| sample[at] as f64).collect();
            report.add(Row::new(
                &section(&format!(
                    "entries in the kernel's {table} table each minute"
                )),
                &config,
                &entries,
                "",
            ));
        }
        let summary = run.summary();
        let lost = summary.and_then(|summary| summary["lost_events"].as_f64());
        report.add(Row::new(
            &section("lost events"),
            &config,
            &lost.into_iter().collect::<Vec<_>>(),
            "",
        ));
    }
    report.note(note(duration, loads, runs));
}

fn note(duration: Duration, loads: &[Load], runs: &[NodeRun]) -> String {
    let asked: f64 = loads.iter().map(|load| load.queries_per_second).sum();
    let loops: usize = runs.iter().map(|run| run.of_kind("loop").count()).sum();
    let possible: usize = runs
        .iter()
        .map(|run| run.of_kind("possible_loop").count())
        .sum();
    let named: BTreeSet<String> = runs
        .first()
        .map(|run| {
            run.of_kind("timeout")
                .filter_map(|timeout| Some(timeout["server"].as_str()?.to_owned()))
                .collect()
        })
        .unwrap_or_default();
    let dead = dead_servers();
    let unnamed: Vec<String> = dead
        .iter()
        .filter(|(server, _)| !named.contains(&server.to_string()))
        .map(|(server, what)| format!("{server} ({what})"))
        .collect();
    let evictions: u64 = runs
        .iter()
        .filter_map(|run| run.summary()?["evictions"].as_object().cloned())
        .flat_map(|evictions| evictions.into_iter().filter_map(|(_, n)| n.as_u64()))
        .sum();
    let memory: Vec<String> = runs
        .iter()
        .map(|run| {
            let at = |bytes: Option<&u64>| bytes.map_or(0.0, |&b| b as f64 / 1024.0 / 1024.0);
            format!(
                "node {} {:.1} MiB after the first minute, {:.1} MiB at the end",
                run.node,
                at(run.memory.first()),
                at(run.memory.last())
            )
        })
        .collect();
    format!(
        "Soak ({} min on two nodes of `dead-upstream`, traced on both; {RATE_PER_NODE} queries/s \
         asked by a client pod on each node from {NAMES} distinct names, 1 in {BLOCK} in each \
         of 5 dead stub domains and 1 or 2 in each of 5 answered badly; {NODE_RESOLVER_RATE}/s \
         to the node's own resolver, down): {asked:.0} queries/s answered in all; {loops} loop \
         findings (target 0), {possible} possible loops; {} of {} dead servers named in node \
         0's timeouts{}; {evictions} table evictions; memory {}.",
        duration.as_secs() / 60,
        dead.len() - unnamed.len(),
        dead.len(),
        if unnamed.is_empty() {
            String::new()
        } else {
            format!(" (not named: {})", unnamed.join(", "))
        },
        memory.join(", ")
    )
}
