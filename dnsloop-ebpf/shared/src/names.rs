//! The names the kernel programs and their maps have in the BPF object, by which userspace (and
//! `cargo xtask`) finds them.
//!
//! The kernel side cannot use these constants: aya's `#[classifier]`, `#[xdp]` and `#[map]`
//! name a program or map after its function or static (`dnsloop_ingress` in `main.rs`, `POINTS`
//! in `programs/maps.rs`). A userspace test reads the built object and checks that its programs
//! and maps are exactly [`PROGRAMS`] and [`MAPS`], so renaming either side alone fails there.

/// The TC/TCX classifier on ingress.
pub const INGRESS_PROGRAM: &str = "dnsloop_ingress";
/// The TC/TCX classifier on egress.
pub const EGRESS_PROGRAM: &str = "dnsloop_egress";
/// Ingress at XDP (`trace --xdp`), in place of [`INGRESS_PROGRAM`].
pub const XDP_INGRESS_PROGRAM: &str = "dnsloop_xdp_ingress";

/// On the `kfree_skb` tracepoint: DNS packets the kernel dropped.
pub const DROP_PROGRAM: &str = "dnsloop_drop";

/// Every program in the object.
pub const PROGRAMS: [&str; 4] = [
    INGRESS_PROGRAM,
    EGRESS_PROGRAM,
    XDP_INGRESS_PROGRAM,
    DROP_PROGRAM,
];

/// The point table (`point::PointSlot`).
pub const POINTS_MAP: &str = "POINTS";
/// Each point's counters (`point::PointCounters`), at its slot of [`POINTS_MAP`].
pub const POINT_COUNTERS_MAP: &str = "POINT_COUNTERS";
/// The global counters (`counter::Counter`, then the malformed reasons).
pub const COUNTERS_MAP: &str = "COUNTERS";
/// The question table (`question::QuestionState`).
pub const QUESTIONS_MAP: &str = "QUESTIONS";
/// The query table (`query::QueryEntry`).
pub const QUERIES_MAP: &str = "QUERIES";
/// The names too long for the query table's entries (`query::LongName`), under the same keys.
pub const LONG_NAMES_MAP: &str = "LONG_NAMES";
/// Answer statistics per server (`server::ServerStats`).
pub const SERVERS_MAP: &str = "SERVERS";
/// The addresses that forward DNS (`forwarder::ForwarderKey`).
pub const FORWARDERS_MAP: &str = "FORWARDERS";
/// Questions answered truncated at their client (`truncation::TruncatedKey`): the programs'
/// own, which userspace never opens.
pub const TRUNCATED_MAP: &str = "TRUNCATED";
/// The ring buffer of streamed packets (`record::PacketRecord`).
pub const RECORDS_MAP: &str = "RECORDS";
/// The ring buffer of dropped DNS packets (`drop::DropRecord`).
pub const DROPS_MAP: &str = "DROPS";
/// Dropped DNS packets per drop reason (`drop::reason_slot`).
pub const DROP_REASONS_MAP: &str = "DROP_REASONS";

/// Scratch space of the programs alone, which userspace never opens.
pub const NEW_QUESTION_MAP: &str = "NEW_QUESTION";
pub const ZERO_SERVER_STATS_MAP: &str = "ZERO_SERVER_STATS";
pub const DNS_BUFFER_MAP: &str = "DNS_BUFFER";
pub const PACKET_SCRATCH_MAP: &str = "PACKET_SCRATCH";
pub const DROP_SCRATCH_MAP: &str = "DROP_SCRATCH";
pub const STREAM_SCRATCH_MAP: &str = "STREAM_SCRATCH";
/// Used only by the build for kernels before 5.17 (in both, as every map the programs declare).
pub const NAME_WALK_MAP: &str = "NAME_WALK";
pub const PARSED_MAP: &str = "PARSED";

/// Every map in the object.
pub const MAPS: [&str; 20] = [
    POINTS_MAP,
    POINT_COUNTERS_MAP,
    COUNTERS_MAP,
    QUESTIONS_MAP,
    QUERIES_MAP,
    LONG_NAMES_MAP,
    SERVERS_MAP,
    FORWARDERS_MAP,
    TRUNCATED_MAP,
    RECORDS_MAP,
    DROPS_MAP,
    DROP_REASONS_MAP,
    NEW_QUESTION_MAP,
    ZERO_SERVER_STATS_MAP,
    DNS_BUFFER_MAP,
    PACKET_SCRATCH_MAP,
    DROP_SCRATCH_MAP,
    STREAM_SCRATCH_MAP,
    NAME_WALK_MAP,
    PARSED_MAP,
];

/// The longest name the kernel keeps for a program or map (`BPF_OBJ_NAME_LEN` less its NUL):
/// what `bpftool` and `bpf_prog_info` show.
pub const KERNEL_NAME_MAX: usize = 15;

/// `name` as the kernel keeps it: its first [`KERNEL_NAME_MAX`] bytes.
pub const fn kernel_name(name: &str) -> &str {
    if name.len() <= KERNEL_NAME_MAX {
        name
    } else {
        name.split_at(KERNEL_NAME_MAX).0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernel_keeps_fifteen_bytes_of_a_name() {
        assert_eq!(kernel_name(INGRESS_PROGRAM), "dnsloop_ingress");
        assert_eq!(kernel_name(EGRESS_PROGRAM), "dnsloop_egress");
        assert_eq!(kernel_name(XDP_INGRESS_PROGRAM), "dnsloop_xdp_ing");
    }

    #[test]
    fn names_are_distinct_as_the_kernel_keeps_them() {
        for names in [&PROGRAMS[..], &MAPS[..]] {
            for (index, name) in names.iter().enumerate() {
                let kept = kernel_name(name);
                let twice = names[..index]
                    .iter()
                    .any(|other| kernel_name(other) == kept);
                assert!(!twice, "{kept} twice");
            }
        }
    }
}
