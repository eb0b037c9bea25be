//! The tracer's own numbers for the end-of-run summary: what the kernel counted, and what was
//! lost on the way. Loss is always reported, never hidden.
use std::sync::Arc;

use dnsloop_core::{
    decode::ReassemblyCounts,
    schema::{InterfaceCount, KernelSummary, SummarySource},
};
use dnsloop_shared::counter::Counter;

use crate::kernel::{
    counters::{GlobalCounts, PointCount},
    features::Lack,
};

/// The kernel's side of the summary; `drops` per reason, `None` when drops were not watched;
/// `lacks`, what this kernel lacks of what dnsloop uses; `reassembly`, what userspace put
/// together, when every DNS packet was streamed.
pub fn summary_extra(
    interfaces: &[PointCount],
    kernel: &GlobalCounts,
    drops: Option<&[(Arc<str>, u64)]>,
    undecodable_records: u64,
    unplaced_records: u64,
    lacks: &[Lack],
    reassembly: Option<&ReassemblyCounts>,
) -> SummarySource {
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
        let SummarySource::Kernel(extra) =
            summary_extra(&interfaces, &kernel, None, 1, 0, &[Lack::Tcx], None)
        else {
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
