//! The tracer's own numbers for the end-of-run summary: what the kernel counted, and what was
//! lost on the way. Loss is always reported, never hidden.
use std::sync::Arc;

use dnsloop_core::{
    decode::ReassemblyCounts,
    schema::{ConntrackCounts, InterfaceCount, KernelSummary, SummarySource},
};
use dnsloop_shared::counter::Counter;

use crate::kernel::{
    counters::{GlobalCounts, PointCount},
    features::Lack,
};

/// What the tracer counted, for the kernel's side of the summary.
pub struct KernelNumbers<'a> {
    pub interfaces: &'a [PointCount],
    pub kernel: &'a GlobalCounts,
    /// Per reason; `None` when drops were not watched.
    pub drops: Option<&'a [(Arc<str>, u64)]>,
    pub undecodable_records: u64,
    pub unplaced_records: u64,
    /// What this kernel lacks of what dnsloop uses.
    pub lacks: &'a [Lack],
    /// What userspace put together, when every DNS packet was streamed.
    pub reassembly: Option<&'a ReassemblyCounts>,
    /// What the node's conntrack counters rose by, when they could be read.
    pub conntrack: Option<ConntrackCounts>,
}

/// The kernel's side of the summary.
pub fn summary_extra(numbers: KernelNumbers<'_>) -> SummarySource {
    let KernelNumbers {
        interfaces,
        kernel,
        drops,
        undecodable_records,
        unplaced_records,
        lacks,
        reassembly,
        conntrack,
    } = numbers;
    SummarySource::Kernel(KernelSummary {
        interfaces: interfaces
            .iter()
            .map(|count| InterfaceCount {
                ifname: count.ifname.clone(),
                dir: count.direction.as_str().to_owned(),
                dns_packets: count.dns_packets,
                packets: count.packets,
            })
            .collect(),
        kernel: kernel
            .counters
            .iter()
            .map(|&(counter, value)| (counter.as_str(), value))
            .collect(),
        malformed: kernel
            .malformed
            .iter()
            .map(|&(reason, value)| (reason.as_str(), value))
            .collect(),
        drops: drops.map(|drops| {
            drops
                .iter()
                .map(|(reason, count)| (reason.to_string(), *count))
                .collect()
        }),
        lost_events: kernel.get(Counter::LostRecords),
        undecodable_records,
        unplaced_records,
        kernel_lacks: lacks.iter().map(|lack| lack.name().to_owned()).collect(),
        reassembly: reassembly.map(|counts| Box::new(counts.into())),
        conntrack,
    })
}

#[cfg(test)]
mod tests {
    use dnsloop_shared::{parse::Malformed, point::Direction};

    use super::*;

    #[test]
    fn summary_extra_reports_interfaces_losses_and_malformed_reasons() {
        let interfaces = [PointCount {
            ifname: "cni0".into(),
            direction: Direction::Ingress,
            packets: 10,
            dns_packets: 4,
        }];
        let kernel = GlobalCounts {
            counters: vec![(Counter::LostRecords, 3), (Counter::Packets, 10)],
            malformed: vec![(Malformed::DnsCompressionPointer, 2)],
        };
        let SummarySource::Kernel(extra) = summary_extra(KernelNumbers {
            interfaces: &interfaces,
            kernel: &kernel,
            drops: None,
            undecodable_records: 1,
            unplaced_records: 0,
            lacks: &[Lack::Tcx],
            reassembly: None,
            conntrack: None,
        }) else {
            panic!("the kernel's numbers");
        };
        assert_eq!(extra.interfaces[0].ifname, "cni0");
        assert_eq!(extra.interfaces[0].dir, "ingress");
        assert_eq!(extra.interfaces[0].dns_packets, 4);
        assert_eq!(extra.lost_events, 3);
        assert_eq!(extra.kernel.get("packets"), Some(&10));
        assert_eq!(extra.malformed.get("dns_compression_pointer"), Some(&2));
        assert_eq!(extra.undecodable_records, 1);
        // In the kernel's order, as read.
        let names: Vec<&str> = extra.kernel.iter().map(|(name, _)| name).collect();
        assert_eq!(names, ["lost_records", "packets"]);
        assert_eq!(extra.kernel_lacks, ["tcx"]);
    }
}
