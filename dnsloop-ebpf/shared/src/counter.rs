//! The global counters: their slots in the programs' per-CPU counter array.

/// Global counters, one slot each in a per-CPU array; the malformed reasons follow them.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counter {
    /// Every packet a program ran on.
    Packets = 0,
    /// Packets on a DNS port that held at least one parsed DNS message.
    DnsPackets = 1,
    /// DNS messages parsed (a TCP segment may hold several).
    DnsMessages = 2,
    NonFirstFragments = 3,
    /// TCP segments whose last message continues in the next segment.
    TcpSplits = 4,
    /// TCP segments holding more messages than the programs look at.
    TcpMessagesBeyondLimit = 5,
    /// Records the ring buffer had no room for: events lost, never hidden.
    LostRecords = 6,
    /// Records streamed to userspace.
    StreamedRecords = 7,
    /// ICMP port unreachables refusing a DNS reply: a client dropped an answer (a reply from an
    /// unexpected source, or one that came too late).
    DnsPortUnreachable = 8,
    /// Packets at a point missing from the point table: not counted per point, and not placed in
    /// namespaces (the table was full, or the point was met before it was registered).
    UnplacedPackets = 9,
    /// DNS packets the kernel dropped (`skb:kfree_skb`), each streamed to userspace with its
    /// reason unless the drop ring was full (then counted in `LostRecords` too).
    DnsDrops = 10,
    /// New queries the query table had no room for (or, with a name too long for its entry,
    /// the kernel no memory for the name): their answers are not timed, and no timeout of
    /// theirs is reported.
    QueriesNotTracked = 11,
}

impl Counter {
    pub const ALL: [Self; 12] = [
        Self::Packets,
        Self::DnsPackets,
        Self::DnsMessages,
        Self::NonFirstFragments,
        Self::TcpSplits,
        Self::TcpMessagesBeyondLimit,
        Self::LostRecords,
        Self::StreamedRecords,
        Self::DnsPortUnreachable,
        Self::UnplacedPackets,
        Self::DnsDrops,
        Self::QueriesNotTracked,
    ];
    pub const COUNT: u32 = Self::ALL.len() as u32;

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Packets => "packets",
            Self::DnsPackets => "dns_packets",
            Self::DnsMessages => "dns_messages",
            Self::NonFirstFragments => "non_first_fragments",
            Self::TcpSplits => "tcp_splits",
            Self::TcpMessagesBeyondLimit => "tcp_messages_beyond_limit",
            Self::LostRecords => "lost_records",
            Self::StreamedRecords => "streamed_records",
            Self::DnsPortUnreachable => "dns_port_unreachable",
            Self::UnplacedPackets => "unplaced_packets",
            Self::DnsDrops => "dns_drops",
            Self::QueriesNotTracked => "queries_not_tracked",
        }
    }
}

/// Slot of the counter of one malformed reason (`parse::Malformed as u8`).
pub const fn malformed_counter_slot(reason: u8) -> u32 {
    Counter::COUNT + reason as u32
}

/// Slots in the counter array.
pub const COUNTER_SLOTS: u32 = Counter::COUNT + crate::parse::Malformed::COUNT as u32;
