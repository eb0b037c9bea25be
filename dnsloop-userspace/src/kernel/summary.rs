//! The tracer's own numbers for the end-of-run summary: what the kernel counted, and what was
//! lost on the way. Loss is always reported, never hidden.
use serde_json::{json, Map, Value};

use crate::kernel::counters::{GlobalCounts, PointCount};
use dnsloop_ebpf::counter::Counter;

/// Fields the sink merges into the `summary` object.
pub fn summary_extra(
    interfaces: &[PointCount],
    kernel: &GlobalCounts,
    undecodable_records: u64,
    unplaced_records: u64,
) -> Value {
    let interfaces: Vec<Value> = interfaces
        .iter()
        .map(|count| {
            json!({
                "ifname": count.ifname,
                "dir": count.direction.as_str(),
                "dns_packets": count.dns_packets,
                "packets": count.packets,
            })
        })
        .collect();
    let mut counters = Map::new();
    for (counter, value) in &kernel.counters {
        counters.insert(counter.as_str().into(), (*value).into());
    }
    let malformed: Map<String, Value> = kernel
        .malformed
        .iter()
        .map(|(reason, value)| (reason.as_str().into(), (*value).into()))
        .collect();
    json!({
        "interfaces": interfaces,
        "kernel": counters,
        "malformed": malformed,
        "lost_events": kernel.get(Counter::LostRecords),
        "undecodable_records": undecodable_records,
        "unplaced_records": unplaced_records,
    })
}

#[cfg(test)]
mod tests {
    use dnsloop_ebpf::{parse::Malformed, point::Direction};

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
        let extra = summary_extra(&interfaces, &kernel, 1, 0);
        assert_eq!(extra["interfaces"][0]["ifname"], "cni0");
        assert_eq!(extra["interfaces"][0]["dir"], "ingress");
        assert_eq!(extra["interfaces"][0]["dns_packets"], 4);
        assert_eq!(extra["lost_events"], 3);
        assert_eq!(extra["kernel"]["packets"], 10);
        assert_eq!(extra["malformed"]["dns_compression_pointer"], 2);
        assert_eq!(extra["undecodable_records"], 1);
    }
}
