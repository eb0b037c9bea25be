//! The programs' maps and load-time settings.
use aya_ebpf::{
    bindings::{BPF_F_NO_COMMON_LRU, BPF_F_NO_PREALLOC},
    macros::map,
    maps::{Array, HashMap, LruHashMap, PerCpuArray, RingBuf},
};
use dnsloop_shared::{
    config::ProgramConfig,
    counter::COUNTER_SLOTS,
    drop::{DropLayout, DropRecord, DROP_REASON_SLOTS},
    forwarder::ForwarderKey,
    parse::{
        DnsHeader, DnsPorts, DnsSummary, LinkLayer, NameWalk, Probe, Question, Segment, TcpFraming,
        DNS_BUF_LEN,
    },
    point::{
        ObservationPoint, PointCounters, PointNamespaces, PointSlot, POINT_CANDIDATES, POINT_SLOTS,
    },
    query::{LongName, QueryEntry, QueryKey, QueryState},
    question::{QuestionKey, QuestionState, Sighting, PRIOR_SIGHTINGS},
    record::{PacketRecord, RecordContext, StreamReason, PACKET_SNAP_MAX},
    server::{ServerKey, ServerStats},
    stores,
    truncation::TruncatedKey,
};

use super::linux::ParsedMessage;

/// The watched observation points (see `PointSlot`).
#[map]
pub static POINTS: Array<PointSlot> = Array::with_max_entries(POINT_SLOTS, 0);

/// Each point's counters, at its slot of `POINTS`.
#[map]
pub static POINT_COUNTERS: PerCpuArray<PointCounters> =
    PerCpuArray::with_max_entries(POINT_SLOTS, 0);

/// `Counter` slots, then one per `Malformed` reason.
#[map]
pub static COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(COUNTER_SLOTS, 0);

/// Questions asked recently. LRU, so a storm of distinct names evicts the oldest instead of
/// failing inserts. Shared by all CPUs: concurrent sightings of one question may race on its
/// counts, which only makes them approximate. Userspace sizes it at load time.
#[map]
pub static QUESTIONS: LruHashMap<QuestionKey, QuestionState> =
    LruHashMap::with_max_entries(4096, BPF_F_NO_COMMON_LRU);

/// Where a new `QUESTIONS` entry is built before it is inserted: too big for the stack.
#[map]
pub static NEW_QUESTION: PerCpuArray<QuestionState> = PerCpuArray::with_max_entries(1, 0);

/// Queries in flight, to check their replies' source and time them (see `queries`). Userspace
/// takes out the ones never answered once they are older than its timeout. A plain hash, not
/// an LRU: under a storm of unanswered queries a full table refuses new ones and counts them
/// (`Counter::QueriesNotTracked`), where an LRU would forget the oldest, which userspace was
/// about to report as timeouts, without a trace. Userspace sizes it at load time.
#[map]
pub static QUERIES: HashMap<QueryKey, QueryEntry> = HashMap::with_max_entries(8192, 0);

/// The names of queries in `QUERIES` too long for their entries, under the same keys; as many
/// entries as `QUERIES` (userspace sizes both at load time). Not preallocated: long names are
/// few, and a table holding room for every query's would be most of the query tables' memory.
/// A query whose long name finds no room here is not tracked either.
#[map]
pub static LONG_NAMES: HashMap<QueryKey, LongName> =
    HashMap::with_max_entries(8192, BPF_F_NO_PREALLOC);

/// Answer counts and latency per server, as its clients addressed it. A node talks to a few
/// dozen servers; LRU keeps the busiest under a storm of new ones. Each entry takes 1.7 KiB,
/// the latency histogram most of it.
#[map]
pub static SERVERS: LruHashMap<ServerKey, ServerStats> = LruHashMap::with_max_entries(256, 0);

/// Never written: the zeroed value a new `SERVERS` entry is inserted from (too big for the stack).
#[map]
pub static ZERO_SERVER_STATS: PerCpuArray<ServerStats> = PerCpuArray::with_max_entries(1, 0);

/// Addresses that forward DNS (see `forwarders`); userspace adds the node's own. LRU: a storm of
/// responders evicts the oldest.
#[map]
pub static FORWARDERS: LruHashMap<ForwarderKey, u8> = LruHashMap::with_max_entries(4096, 0);

/// Questions answered truncated at their client, by when (see `truncations`). Truncated
/// answers are rare; LRU keeps the latest under a burst of them.
#[map]
pub static TRUNCATED: LruHashMap<TruncatedKey, u64> = LruHashMap::with_max_entries(1024, 0);

/// Packets streamed to userspace. Userspace sizes it at load time.
#[map]
pub static RECORDS: RingBuf = RingBuf::with_byte_size(2 * 1024 * 1024, 0);

/// A packet to stream, built here: its context (when it has one), its record and up to
/// `PACKET_SNAP_MAX` bytes of it, of which `RECORDS` gets the record and the bytes it holds,
/// from the context on when there is one.
#[repr(C)]
pub struct StreamScratch {
    pub context: RecordContext,
    pub record: PacketRecord,
    pub bytes: [u8; PACKET_SNAP_MAX],
}

#[map]
pub static STREAM_SCRATCH: PerCpuArray<StreamScratch> = PerCpuArray::with_max_entries(1, 0);

/// Dropped DNS packets (`drop::DropRecord`), apart from `RECORDS`: a storm of packets there
/// must not crowd out the drops that explain it. Room for about 3,500 dropped queries of 100
/// bytes: a burst of drops comes from a server falling behind, on a node busy already.
#[map]
pub static DROPS: RingBuf = RingBuf::with_byte_size(512 * 1024, 0);

/// Dropped DNS packets per drop reason (`drop::reason_slot`), per CPU: counted even when the
/// ring has no room for their records.
#[map]
pub static DROP_REASONS: PerCpuArray<u64> = PerCpuArray::with_max_entries(DROP_REASON_SLOTS, 0);

/// The drop program's record, built here before it is copied into `DROPS`.
#[map]
pub static DROP_SCRATCH: PerCpuArray<DropRecord> = PerCpuArray::with_max_entries(1, 0);

/// Scratch space for the DNS message being parsed: too big for the 512-byte BPF stack.
#[map]
pub static DNS_BUFFER: PerCpuArray<[u8; DNS_BUF_LEN]> = PerCpuArray::with_max_entries(1, 0);

/// Where `dnsloop_parse_dns` walks a name, and what it parsed (`Linux510`'s programs only).
#[map]
pub static NAME_WALK: PerCpuArray<NameWalk> = PerCpuArray::with_max_entries(1, 0);
#[map]
pub static PARSED: PerCpuArray<ParsedMessage> = PerCpuArray::with_max_entries(1, 0);

/// This CPU's scratch space for the packet being inspected: where it is seen, what its messages
/// concluded (see `inspect_dns`), and the entries built for the tables before they are copied
/// in; a few fields are kept from packet to packet.
#[map]
pub static PACKET_SCRATCH: PerCpuArray<PacketScratch> = PerCpuArray::with_max_entries(1, 0);

#[repr(C)]
#[derive(Clone, Copy)]
pub struct PacketScratch {
    /// Non-zero once a message parsed.
    pub parsed: u8,
    /// Non-zero once the packet was counted as malformed.
    pub malformed: u8,
    /// When this CPU last streamed a malformed packet (kept from packet to packet).
    pub last_malformed_sample_ns: u64,
    /// `StreamReason as u8 + 1`, or 0 for none: the first reason found wins.
    pub stream: u8,
    /// Where the packet is being seen (the cookie as in `ObservationPoint`).
    pub netns_cookie: u64,
    pub ifindex: u32,
    pub direction: u8,
    /// When the packet's inspection began: one clock read serves all its messages.
    pub now_ns: u64,
    /// The packet's point in the point table, or `NO_POINT_SLOT`.
    pub point_slot: u32,
    /// The namespaces the packet leaves and enters there.
    pub at: PointNamespaces,
    /// Non-zero when the packet, on a bridge port, went to or came from the bridge itself (see
    /// `PointSlot::gateway_mac`): `at` is then the slot's `via_gateway`.
    pub via_gateway: u8,
    /// The segment being inspected, and where its messages are (one for UDP).
    pub segment: Segment,
    pub framing: TcpFraming,
    /// The query a reply from an unexpected source answers.
    pub matched_query: QueryState,
    /// The name walk of the message being parsed: here, where the verifier does not track it.
    pub name_walk: NameWalk,
    /// Non-zero once a message parsed with a question, which `follow_question` is to follow.
    pub question_to_follow: u8,
    /// A query met for the first time, built here before it is copied into `QUERIES`, and its
    /// name when too long for the entry, before it is copied into `LONG_NAMES`.
    pub new_query: QueryEntry,
    pub new_long_name: LongName,
    /// This CPU's last look into `QUERIES` and last parsed message (both kept from packet to
    /// packet).
    pub last_lookup: LastLookup,
    pub last_parse: LastParse,
    /// For a query that made its question hot: the last sighting before it.
    pub priors: [Sighting; PRIOR_SIGHTINGS],
}

impl PacketScratch {
    #[inline(always)]
    pub fn stream_unless_set(&mut self, reason: StreamReason) {
        if self.stream == 0 {
            self.stream = reason as u8 + 1;
        }
    }

    /// Streams the packet for `reason` whatever was decided before: the record will carry data
    /// only this reason has.
    #[inline(always)]
    pub fn stream_because(&mut self, reason: StreamReason) {
        self.stream = reason as u8 + 1;
    }

    /// Forgets the sightings a hot question would attach.
    #[inline(always)]
    pub fn clear_priors(&mut self) {
        for prior in &mut self.priors {
            prior.family = 0;
        }
    }

    #[inline(always)]
    pub fn stream_reason(&self) -> Option<StreamReason> {
        self.stream.checked_sub(1).and_then(StreamReason::from_u8)
    }
}

/// Where and when this CPU last looked something up for a packet. A packet the node routes or a
/// bridge forwards is seen again a moment later on the same CPU (at one pod's veth, then at
/// another's or at the overlay, or the other way), and that sighting takes what the first one
/// found instead of looking again.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Moment {
    pub at_ns: u64,
    pub netns_cookie: u64,
    pub ifindex: u32,
    pub direction: u8,
}

impl Moment {
    /// Crossing the node takes microseconds; a client's next query with the same source port
    /// and ID, or the same bytes sent again, come a retry interval later.
    const SAME_PACKET_NS: u64 = 100_000;

    #[inline(always)]
    pub fn of(scratch: &PacketScratch) -> Self {
        Self {
            at_ns: scratch.now_ns,
            netns_cookie: scratch.netns_cookie,
            ifindex: scratch.ifindex,
            direction: scratch.direction,
        }
    }

    /// Whether the packet in `scratch` could be the one seen then, further on its way: moments
    /// later, at another point. (At the same point it is a copy of the packet, a packet of its
    /// own.)
    #[inline(always)]
    pub fn just_before_elsewhere(&self, scratch: &PacketScratch) -> bool {
        scratch.now_ns.wrapping_sub(self.at_ns) < Self::SAME_PACKET_NS
            && (self.ifindex != scratch.ifindex
                || self.direction != scratch.direction
                || self.netns_cookie != scratch.netns_cookie)
    }
}

/// What `QUERIES` held for one key when this CPU last looked (see `queries`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct LastLookup {
    pub seen: Moment,
    pub key: QueryKey,
    /// Non-zero for a reply's look (by its destination), zero for a query's (by its source).
    pub reply: u8,
    /// Non-zero when the key had an entry (after the look: 0 once the reply took it out).
    pub found: u8,
    pub family: u8,
    /// Non-zero when the entry's name is in `LONG_NAMES`, to be taken out with it.
    pub long_name: u8,
    /// The entry's query and first sighting's namespace, when `found`.
    pub query: QueryState,
    pub query_netns_cookie: u64,
}

/// The last DNS message this CPU parsed: where it was and what it held, kept flat so that it is
/// written and read field by field (see `inspect_message`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct LastParse {
    pub seen: Moment,
    pub src: [u8; 16],
    pub dst: [u8; 16],
    pub sport: u16,
    pub dport: u16,
    pub transport: u8,
    /// Non-zero when the fields below are what the message held (zero when it did not parse).
    pub parsed: u8,
    pub has_question: u8,
    pub labels: u8,
    pub payload_len: u32,
    pub message_offset: u32,
    pub header: DnsHeader,
    pub name_hash: u64,
    pub name_len: u16,
    pub qtype: u16,
    pub qclass: u16,
    pub probe: Probe,
}

impl LastParse {
    /// Notes that the message at `message_offset` of the segment in `scratch` parsed as
    /// `summary`.
    #[inline(always)]
    pub fn note(scratch: &mut PacketScratch, message_offset: usize, summary: &DnsSummary) {
        let seen = Moment::of(scratch);
        let segment = &scratch.segment;
        let last = &mut scratch.last_parse;
        last.seen = seen;
        stores::copy(&mut last.src, &segment.src);
        stores::copy(&mut last.dst, &segment.dst);
        last.sport = segment.sport;
        last.dport = segment.dport;
        last.transport = segment.transport as u8;
        last.payload_len = segment.payload_len as u32;
        last.message_offset = message_offset as u32;
        last.header = summary.header;
        last.has_question = 0;
        if let Some(question) = &summary.question {
            last.name_hash = question.name_hash;
            last.name_len = question.name_len;
            last.labels = question.labels;
            last.qtype = question.qtype;
            last.qclass = question.qclass;
            last.probe = question.probe;
            last.has_question = 1;
        }
        last.parsed = 1;
    }

    /// Whether the message at `message_offset` of the segment in `scratch`, whose ID and flags
    /// are `id` and `flags`, is the one noted, seen again further on its way (see `Moment`).
    #[inline(always)]
    pub fn is_seen_again(
        &self,
        scratch: &PacketScratch,
        message_offset: usize,
        id: u16,
        flags: u16,
    ) -> bool {
        let segment = &scratch.segment;
        self.parsed != 0
            && self.seen.just_before_elsewhere(scratch)
            && self.message_offset as usize == message_offset
            && self.payload_len as usize == segment.payload_len
            && self.sport == segment.sport
            && self.dport == segment.dport
            && self.transport == segment.transport as u8
            && self.src == segment.src
            && self.dst == segment.dst
            && self.header.id == id
            && self.header.flags == flags
    }

    /// What the noted message held.
    #[inline(always)]
    pub fn summary(&self) -> DnsSummary {
        DnsSummary {
            header: self.header,
            question: self.question(),
        }
    }

    /// The noted message's question, if it has one.
    #[inline(always)]
    pub fn question(&self) -> Option<Question> {
        (self.has_question != 0).then_some(Question {
            name_hash: self.name_hash,
            name_len: self.name_len,
            labels: self.labels,
            qtype: self.qtype,
            qclass: self.qclass,
            probe: self.probe,
        })
    }
}

#[inline(always)]
pub fn packet_scratch() -> Option<*mut PacketScratch> {
    PACKET_SCRATCH.get_ptr_mut(0)
}

/// The DNS ports, written by userspace at load time (`--dns-port`) as `[u16; 8]` slots.
#[no_mangle]
static DNS_PORTS: DnsPorts = DnsPorts::from_slots([53, 0, 0, 0, 0, 0, 0, 0]);

#[no_mangle]
static CONFIG: ProgramConfig = ProgramConfig::DEFAULT;

/// Where the drop program reads, in the running kernel; written by userspace at load time.
#[no_mangle]
static DROP_LAYOUT: DropLayout = DropLayout::NONE;

// The volatile reads below stop the compiler from folding the defaults: the loader patches
// these globals before the programs are verified.

#[inline(always)]
pub fn dns_ports() -> DnsPorts {
    // SAFETY: reading a global of plain data.
    unsafe { core::ptr::read_volatile(&DNS_PORTS) }
}

#[inline(always)]
pub fn config() -> ProgramConfig {
    // SAFETY: reading a global of plain data.
    unsafe { core::ptr::read_volatile(&CONFIG) }
}

#[inline(always)]
pub fn drop_layout() -> DropLayout {
    // SAFETY: reading a global of plain data.
    unsafe { core::ptr::read_volatile(&DROP_LAYOUT) }
}

/// [`ProgramConfig::loopback_cookie`], read alone so that the verifier sees a constant (CONFIG
/// is read-only to the programs) and skips the branch it rules out.
#[inline(always)]
pub fn loopback_cookie() -> u64 {
    // SAFETY: reading a field of a global of plain data.
    unsafe { core::ptr::read_volatile(&raw const CONFIG.loopback_cookie) }
}

/// `PacketScratch::point_slot` of a packet at a point missing from the table: past its last slot.
pub const NO_POINT_SLOT: u32 = POINT_SLOTS;

/// Where a packet is seen, as the point table has it.
#[derive(Clone, Copy)]
pub struct Placed {
    /// Of `POINTS` and `POINT_COUNTERS`.
    pub slot: u32,
    pub namespaces: PointNamespaces,
    pub link_layer: LinkLayer,
}

/// `point` in the point table; `None` for a point userspace did not register.
#[inline(always)]
pub fn place(point: &ObservationPoint) -> Option<Placed> {
    for candidate in 0..POINT_CANDIDATES {
        let index = PointSlot::index(point, candidate);
        let Some(slot) = POINTS.get(index) else {
            continue;
        };
        if slot.point == *point {
            return Some(Placed {
                slot: index,
                namespaces: slot.namespaces,
                link_layer: if slot.link_layer == LinkLayer::RawIp as u8 {
                    LinkLayer::RawIp
                } else {
                    LinkLayer::Ethernet
                },
            });
        }
    }
    None
}
