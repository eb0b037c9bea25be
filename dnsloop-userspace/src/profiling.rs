//! What one run of the kernel programs costs, by kind of packet: the programs `dnsloop trace`
//! loads, run with `BPF_PROG_TEST_RUN` on crafted frames (`cargo xtask bench`, through the
//! `kernel_profile` bench target). One CPU and nothing else running: the programs' own work
//! on each kind of packet, apart from what a loaded node adds (cache misses, map values that
//! move between CPUs).
use std::time::Duration;

use anyhow::{Context as _, Result};
use aya::{programs::SchedClassifier, Ebpf, TestRun as _, TestRunOptions};
use dnsloop_frames::{dns_query, dns_response, FrameSpec};
use dnsloop_shared::{
    drop::DropLayout,
    names::{EGRESS_PROGRAM, INGRESS_PROGRAM},
    point::{Direction, ObservationPoint},
};

use dnsloop_core::points::LOOPBACK_INDEX;

use crate::{
    kernel::{
        point_table::{ethernet_point, PointTable},
        programs::{self, Settings},
    },
    node::namespaces,
};

pub use crate::kernel::programs::Build;

/// Runs per call for the kinds of packet that can repeat, and distinct packets for the others.
const REPEAT: u32 = 100_000;
const DISTINCT: u16 = 20_000;
const QTYPE_A: u16 = 1;
const NAME: &str = "kubernetes.default.svc.cluster.local";

/// The mean cost of one program run on a kind of packet.
pub struct PacketCost {
    pub kind: &'static str,
    pub ns_per_run: f64,
}

/// The verifier's work on one program.
pub struct Verified {
    pub program: &'static str,
    pub instructions: u32,
    pub translated_bytes: u32,
    pub jited_bytes: u32,
}

/// Loads the programs of `build` as `dnsloop trace` does and measures each kind of packet on
/// the egress program (ingress runs the same code).
pub fn packet_costs(build: Build) -> Result<Vec<PacketCost>> {
    let mut ebpf = load(build)?;
    let program = programs::classifier(&mut ebpf, EGRESS_PROGRAM)?;
    let not_dns = FrameSpec {
        dport: 80,
        ..FrameSpec::default()
    }
    .build();
    let query = query_frame(7, NAME);
    let mut costs = vec![
        PacketCost {
            kind: "not DNS (UDP to port 80)",
            ns_per_run: repeated(program, &not_dns)?,
        },
        PacketCost {
            kind: "a query met before (its next hop)",
            ns_per_run: repeated(program, &query)?,
        },
        PacketCost {
            kind: "a reply to no query in flight",
            ns_per_run: repeated(program, &answer_frame(7, NAME))?,
        },
        PacketCost {
            kind: "not DNS, one run per call (the call's own share)",
            ns_per_run: once_each(program, std::iter::repeat_n(not_dns, usize::from(DISTINCT)))?,
        },
    ];
    let names: Vec<String> = (0..DISTINCT)
        .map(|n| format!("host{n}.default.svc.cluster.local"))
        .collect();
    costs.push(PacketCost {
        kind: "a new query, one run per call",
        ns_per_run: once_each(
            program,
            names
                .iter()
                .zip(0..)
                .map(|(name, id)| query_frame(id, name)),
        )?,
    });
    costs.push(PacketCost {
        kind: "the reply reaching its client, one run per call",
        ns_per_run: once_each(
            program,
            names
                .iter()
                .zip(0..)
                .map(|(name, id)| answer_frame(id, name)),
        )?,
    });
    // The common case on a node: a popular name asked again by a new query.
    costs.push(PacketCost {
        kind: "a new query for a question met before, one run per call",
        ns_per_run: once_each(program, (0..DISTINCT).map(|id| query_frame(id, NAME)))?,
    });
    Ok(costs)
}

/// What the verifier made of each program of `build`.
pub fn verified(build: Build) -> Result<Vec<Verified>> {
    let mut ebpf = load(build)?;
    [INGRESS_PROGRAM, EGRESS_PROGRAM]
        .into_iter()
        .map(|name| {
            let info = programs::classifier(&mut ebpf, name)?
                .info()
                .with_context(|| format!("reading {name}'s information"))?;
            Ok(Verified {
                program: name,
                instructions: info.verified_instruction_count().unwrap_or(0),
                translated_bytes: info.size_translated().unwrap_or(0),
                jited_bytes: info.size_jitted(),
            })
        })
        .collect()
}

fn load(build: Build) -> Result<Ebpf> {
    let settings = Settings {
        build: Some(build),
        ..Settings::default()
    };
    let mut ebpf = programs::load(&settings, None, &DropLayout::NONE)?;
    // The frames run on this namespace's loopback: its points are registered, as `dnsloop
    // trace` registers every point it watches.
    let cookie = namespaces::current_cookie().context("reading this namespace's cookie")?;
    let points = [Direction::Ingress, Direction::Egress].map(|direction| {
        ethernet_point(ObservationPoint::new(
            cookie,
            LOOPBACK_INDEX,
            direction as u8,
        ))
    });
    PointTable::read(&ebpf)?.sync(&mut ebpf, &points)?;
    Ok(ebpf)
}

/// A client's query, from port 40000 + id.
fn query_frame(id: u16, name: &str) -> Vec<u8> {
    FrameSpec {
        sport: client_port(id),
        payload: dns_query(id, name, QTYPE_A),
        ..FrameSpec::default()
    }
    .build()
}

/// The reply to `query_frame(id, name)`, on its way back to the client.
fn answer_frame(id: u16, name: &str) -> Vec<u8> {
    let query = FrameSpec::default();
    FrameSpec {
        src: query.dst,
        dst: query.src,
        sport: query.dport,
        dport: client_port(id),
        payload: dns_response(id, name, QTYPE_A),
        ..FrameSpec::default()
    }
    .build()
}

fn client_port(id: u16) -> u16 {
    40_000 + id % 1000
}

/// The mean of `REPEAT` runs on `frame`, timed by the kernel.
fn repeated(program: &mut SchedClassifier, frame: &[u8]) -> Result<f64> {
    let result = program
        .test_run(TestRunOptions {
            data_in: Some(frame),
            repeat: REPEAT,
            ..TestRunOptions::default()
        })
        .context("BPF_PROG_TEST_RUN")?;
    Ok(result.duration.as_nanos() as f64)
}

/// The mean of one run on each of `frames`, timed by the kernel.
fn once_each(program: &mut SchedClassifier, frames: impl Iterator<Item = Vec<u8>>) -> Result<f64> {
    let (mut total, mut runs) = (Duration::ZERO, 0u32);
    for frame in frames {
        let result = program
            .test_run(TestRunOptions {
                data_in: Some(&frame),
                ..TestRunOptions::default()
            })
            .context("BPF_PROG_TEST_RUN")?;
        total += result.duration;
        runs += 1;
    }
    Ok(total.as_nanos() as f64 / f64::from(runs.max(1)))
}
