//! Reading the kernel's per-CPU counters.
use aya::{
    maps::{MapError, PerCpuArray},
    Ebpf,
};
use dnsloop_shared::{
    counter::{malformed_counter_slot, Counter},
    names::{COUNTERS_MAP, POINT_COUNTERS_MAP},
    parse::Malformed,
    point::{Direction, ObservationPoint, PointCounters},
};

use std::time::Duration;

use crate::{
    kernel::attach::watched_directions,
    kernel::point_table,
    kernel::programs::{self, LoadError},
    node::topology::{Link, LinkRole},
};
use dnsloop_core::{
    analyzers::ServerSummary,
    source::{ip_family, socket_addr},
};

/// What the programs counted on one interface in one direction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PointCount {
    pub ifname: String,
    pub direction: Direction,
    pub packets: u64,
    pub dns_packets: u64,
}

/// The programs' global counters, summed over CPUs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GlobalCounts {
    /// In `Counter::ALL` order.
    pub counters: Vec<(Counter, u64)>,
    /// Only reasons that occurred.
    pub malformed: Vec<(Malformed, u64)>,
}

impl GlobalCounts {
    pub fn get(&self, counter: Counter) -> u64 {
        self.counters
            .iter()
            .find(|(candidate, _)| *candidate == counter)
            .map_or(0, |(_, value)| *value)
    }
}

fn map<'a>(ebpf: &'a Ebpf, name: &str) -> Result<&'a aya::maps::Map, MapError> {
    ebpf.map(name)
        .ok_or_else(|| MapError::InvalidName { name: name.into() })
}

/// Sums the counters of the watched `links` of the namespace whose loopback cookie is
/// `loopback_cookie`, in link order, ingress before egress. Points that saw nothing, or that the
/// point table had no room for, count zero.
pub fn read_points(
    ebpf: &Ebpf,
    loopback_cookie: u64,
    links: &[Link],
) -> Result<Vec<PointCount>, MapError> {
    let counters: PerCpuArray<_, PointCounters> =
        PerCpuArray::try_from(map(ebpf, POINT_COUNTERS_MAP)?)?;
    let mut counts = Vec::with_capacity(links.len() * 2);
    for link in links {
        for &direction in watched_directions(link) {
            // The kernel tells namespaces apart only for loopback (see ObservationPoint).
            let netns_cookie = if link.role == LinkRole::Loopback {
                loopback_cookie
            } else {
                0
            };
            let point = ObservationPoint::new(netns_cookie, link.index, direction as u8);
            let total = match point_table::find_in_kernel(ebpf, &point)? {
                Some(slot) => {
                    counters
                        .get(&slot, 0)?
                        .iter()
                        .fold(PointCounters::default(), |sum, cpu| PointCounters {
                            packets: sum.packets + cpu.packets,
                            dns_packets: sum.dns_packets + cpu.dns_packets,
                        })
                }
                None => PointCounters::default(),
            };
            counts.push(PointCount {
                ifname: link.name.clone(),
                direction,
                packets: total.packets,
                dns_packets: total.dns_packets,
            });
        }
    }
    Ok(counts)
}

pub fn read_global(ebpf: &Ebpf) -> Result<GlobalCounts, MapError> {
    let array: PerCpuArray<_, u64> = PerCpuArray::try_from(map(ebpf, COUNTERS_MAP)?)?;
    let slot = |index: u32| -> Result<u64, MapError> { Ok(array.get(&index, 0)?.iter().sum()) };
    let mut counts = GlobalCounts::default();
    for counter in Counter::ALL {
        counts.counters.push((counter, slot(counter as u32)?));
    }
    for reason in Malformed::ALL {
        let value = slot(malformed_counter_slot(reason as u8))?;
        if value > 0 {
            counts.malformed.push((reason, value));
        }
    }
    Ok(counts)
}

/// Every server's answers as the kernel counted them, in address order.
pub fn read_servers(ebpf: &Ebpf) -> Result<Vec<ServerSummary>, LoadError> {
    let mut servers: Vec<ServerSummary> = programs::read_servers(ebpf)?
        .iter()
        .filter_map(|(key, stats)| {
            let family = ip_family(key.family)?;
            let rcodes = (0u16..)
                .zip(stats.rcodes)
                .filter(|&(_, count)| count > 0)
                .collect();
            Some(ServerSummary::from_kernel_counts(
                socket_addr(family, &key.address, key.port),
                &stats.latency,
                Duration::from_nanos(stats.max_ns),
                rcodes,
                stats.truncated,
            ))
        })
        .collect();
    servers.sort_by_key(|summary| summary.server);
    Ok(servers)
}
