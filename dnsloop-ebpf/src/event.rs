//! Records and map keys shared by the kernel programs and userspace.
//!
//! Every type is `#[repr(C)]` with explicit padding so that its layout is the same on both sides
//! and no uninitialised byte ever reaches userspace.

use crate::stores;

/// Which way a packet crossed the interface it was seen on.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Direction {
    Ingress = 0,
    Egress = 1,
}

impl Direction {
    pub fn from_u8(raw: u8) -> Option<Self> {
        match raw {
            0 => Some(Self::Ingress),
            1 => Some(Self::Egress),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ingress => "ingress",
            Self::Egress => "egress",
        }
    }
}

/// One observation point: an interface, and a direction across it.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ObservationPoint {
    /// For loopback (ifindex 1 in every namespace): the cookie of the namespace whose `lo` it
    /// is, as `SO_NETNS_COOKIE` reports it. Zero for every other interface, which userspace only
    /// watches in its own namespace.
    pub netns_cookie: u64,
    pub ifindex: u32,
    pub direction: u8,
    // Padding as scalars, not `[u8; 3]`: zeroing an array compiles, in BPF, to a `memset` call
    // that loops over the bytes, on every packet.
    _pad1: u8,
    _pad2: u16,
}

impl ObservationPoint {
    #[inline(always)]
    pub const fn new(netns_cookie: u64, ifindex: u32, direction: u8) -> Self {
        Self {
            netns_cookie,
            ifindex,
            direction,
            _pad1: 0,
            _pad2: 0,
        }
    }
}

/// Per observation point counts, kept per CPU and summed by userspace.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PointCounters {
    /// Every packet the program ran on.
    pub packets: u64,
    /// Packets that carried at least one parsed DNS message on a DNS port.
    pub dns_packets: u64,
}

/// Most bytes of one packet a [`PacketRecord`] carries (from the start of the frame): a 1232-byte
/// EDNS answer with its headers fits.
pub const PACKET_SNAP_MAX: usize = 2048;

/// Why the kernel streamed a packet to userspace. Everything else is only counted.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StreamReason {
    /// Every DNS packet was asked for (`trace --packets`, `capture`).
    EveryPacket = 0,
    /// A query for a question that was asked with another ID within the window: the question is
    /// being forwarded (or re-asked), which is what a loop is made of.
    HotQuestion = 1,
    /// A CoreDNS or dnsmasq loop probe.
    Probe = 2,
    /// A TCP segment whose last DNS message continues in the next segment.
    TcpSplit = 3,
    /// A reply reaching its client from another address than the query went to; the record's
    /// `matched_query` says where and when that query went.
    UnexpectedSource = 4,
    /// A query its client sent again (same socket, same ID) with no answer yet, with the first
    /// sending in `matched_query`; or the reply that finally answers such a query.
    Retried = 5,
    /// A malformed packet on a DNS port, as a sample: every one is counted by reason, at most
    /// one per CPU per `MALFORMED_SAMPLE_INTERVAL_NS` is streamed.
    Malformed = 6,
}

/// Malformed packets are streamed at most this often per CPU (every one is counted): enough to
/// show what they look like, never enough for a flood of junk to crowd out what matters.
pub const MALFORMED_SAMPLE_INTERVAL_NS: u64 = 100_000_000;

impl StreamReason {
    pub fn from_u8(raw: u8) -> Option<Self> {
        match raw {
            0 => Some(Self::EveryPacket),
            1 => Some(Self::HotQuestion),
            2 => Some(Self::Probe),
            3 => Some(Self::TcpSplit),
            4 => Some(Self::UnexpectedSource),
            5 => Some(Self::Retried),
            6 => Some(Self::Malformed),
            _ => None,
        }
    }
}

/// One packet streamed through the ring buffer: where and when it was seen, and its first bytes
/// from the start of the frame, exactly as the program saw them.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct PacketRecord {
    /// `bpf_ktime_get_ns`: CLOCK_MONOTONIC.
    pub ts_ns: u64,
    /// As in [`ObservationPoint`].
    pub netns_cookie: u64,
    pub ifindex: u32,
    /// Length of the whole packet at the hook.
    pub wire_len: u32,
    /// Bytes of `bytes` that hold packet data.
    pub captured_len: u16,
    pub direction: u8,
    /// A [`StreamReason`].
    pub reason: u8,
    /// The `parse::LinkLayer` of `bytes`.
    pub link_layer: u8,
    pub _pad: [u8; 3],
    /// For `StreamReason::UnexpectedSource`: the query the reply answers. Zero otherwise.
    pub matched_query: QueryState,
    /// For the query that made its question hot: the sightings before it, oldest first, that
    /// were not streamed (`family` 0 in unused ones): the round of forwards that brought it back.
    pub priors: [Sighting; PRIOR_SIGHTINGS],
    pub bytes: [u8; PACKET_SNAP_MAX],
}

/// A query in flight, as the query table keys it: by its client and id, which its reply
/// carries back (the server side may be rewritten by DNAT on the way).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct QueryKey {
    /// IPv4 in the first 4 bytes.
    pub client: [u8; 16],
    pub client_port: u16,
    pub id: u16,
    /// `parse::Transport as u8`.
    pub transport: u8,
    // Scalars, as in `ObservationPoint`.
    _pad1: u8,
    _pad2: u16,
}

impl QueryState {
    /// `*self = *other`, field by field (see [`stores`]).
    #[inline(always)]
    pub fn copy_from(&mut self, other: &Self) {
        self.first_ns = other.first_ns;
        stores::copy(&mut self.server, &other.server);
        self.server_port = other.server_port;
        self.direction = other.direction;
        self.retried = other.retried;
        self.ifindex = other.ifindex;
    }

    /// Clears every field in place (see [`stores`]).
    #[inline(always)]
    pub fn clear(&mut self) {
        self.first_ns = 0;
        stores::fill(&mut self.server, 0);
        self.server_port = 0;
        self.direction = 0;
        self.retried = 0;
        self.ifindex = 0;
    }
}

impl QueryKey {
    #[inline(always)]
    pub const fn new(client: [u8; 16], client_port: u16, id: u16, transport: u8) -> Self {
        Self {
            client,
            client_port,
            id,
            transport,
            _pad1: 0,
            _pad2: 0,
        }
    }
}

/// Where and when a query was first seen, and where it was sent from there.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueryState {
    pub first_ns: u64,
    /// The query's destination at its first sighting, before any DNAT. IPv4 in the first 4 bytes.
    pub server: [u8; 16],
    pub server_port: u16,
    /// Direction of the first sighting; the reply reaches the client at the same interface in
    /// the other direction.
    pub direction: u8,
    /// Non-zero once the client sent the query again without an answer (it was streamed then,
    /// and its reply will be).
    pub retried: u8,
    pub ifindex: u32,
}

/// Room for a question's name in wire format: the longest legal name (255 bytes), rounded up to a
/// power of two so that a copy length can be bounded by a mask.
pub const NAME_WIRE_MAX: usize = 256;

/// A query in flight as the query table holds it: where it went, and what it asked, so that
/// userspace can report it by name if no answer ever reaches its client.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueryEntry {
    pub state: QueryState,
    /// Of the first sighting, as in [`ObservationPoint`].
    pub netns_cookie: u64,
    pub qtype: u16,
    pub qclass: u16,
    /// Bytes of `name` that hold the question's name (wire format, root label included).
    pub name_len: u16,
    /// `parse::IpFamily as u8` of the key's and `state`'s addresses.
    pub family: u8,
    pub _pad: [u8; 1],
    pub name: [u8; NAME_WIRE_MAX],
}

impl QueryEntry {
    pub const EMPTY: Self = Self {
        state: QueryState {
            first_ns: 0,
            server: [0; 16],
            server_port: 0,
            direction: 0,
            retried: 0,
            ifindex: 0,
        },
        netns_cookie: 0,
        qtype: 0,
        qclass: 0,
        name_len: 0,
        family: 0,
        _pad: [0; 1],
        name: [0; NAME_WIRE_MAX],
    };

    /// The question's name as held, or `None` if the length is out of range.
    pub fn name(&self) -> Option<&[u8]> {
        self.name.get(..usize::from(self.name_len))
    }
}

/// A server as its clients addressed it (before any DNAT), for its answer statistics.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ServerKey {
    /// IPv4 in the first 4 bytes.
    pub address: [u8; 16],
    pub port: u16,
    /// `parse::IpFamily as u8`.
    pub family: u8,
    pub _pad: [u8; 1],
}

/// Answers a server gave, as they reached their clients: counted by the kernel for every query
/// it matched, streamed or not. Shared by all CPUs and updated with atomic adds.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServerStats {
    pub answered: u64,
    /// The slowest answer; updated without a lock, so a near-simultaneous one may be missed.
    pub max_ns: u64,
    /// Answers per 4-bit header rcode.
    pub rcodes: [u64; 16],
    /// Answers per latency bucket (see `latency::bucket`), from the query's first sighting.
    pub latency: [u64; crate::latency::LATENCY_BUCKETS],
}

impl ServerStats {
    pub const ZERO: Self = Self {
        answered: 0,
        max_ns: 0,
        rcodes: [0; 16],
        latency: [0; crate::latency::LATENCY_BUCKETS],
    };
}

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
}

impl Counter {
    pub const ALL: [Self; 10] = [
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
        }
    }
}

/// Slot of the counter of one malformed reason (`parse::Malformed as u8`).
pub const fn malformed_counter_slot(reason: u8) -> u32 {
    Counter::COUNT + reason as u32
}

/// Slots in the counter array.
pub const COUNTER_SLOTS: u32 = Counter::COUNT + crate::parse::Malformed::COUNT as u32;

/// An address that forwards DNS, as the forwarder table keys it (IPv4 in the first 4 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ForwarderKey {
    pub address: [u8; 16],
}

/// A question, as the question table keys it: the case-folded name hash, type and class.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct QuestionKey {
    pub name_hash: u64,
    pub qtype: u16,
    pub qclass: u16,
    pub _pad: [u8; 4],
}

/// Namespaces, and destinations, each question remembers.
pub const QUESTION_SLOTS: usize = 4;

/// Sightings of a question kept while it is cold, streamed with the one that makes it hot: a
/// loop between the node and a pod on a bridge shows four hops a round (the client's query
/// entering the node, the forward leaving it and entering the pod, and the pod's forward leaving
/// it), enough to prove the loop from its first round. A power of two, for index masks.
pub const PRIOR_SIGHTINGS: usize = 4;

/// Slots of the point table, and how many of them the programs look at for one point. The
/// per-point counters have as many slots. 4096 covers a node with ~1000 pods (2 points on each
/// veth, 1 on each pod's loopback).
pub const POINT_SLOTS: u32 = 4096;
pub const POINT_PROBES: u32 = 16;
/// How far apart a point's probes are: coprime with `POINT_SLOTS`, so they are all distinct, and
/// far enough to leave a run of taken slots (the node's interfaces, numbered in a row).
const POINT_PROBE_STRIDE: u32 = 1031;

const _: () = assert!(POINT_SLOTS.is_power_of_two() && POINT_PROBE_STRIDE % 2 == 1);

/// A watched observation point in the point table, at slot [`PointSlot::index`] of one of its
/// probes, with what the programs need to know about it. Userspace registers every point before
/// attaching there. A slot whose point has `ifindex` 0, which no interface has, is free; the
/// programs look at every probe of a point, so a point is removed by zeroing its slot alone.
///
/// An array searched by index rather than a hash map: every packet asks, and an array lookup is
/// a few instructions where a hash lookup is a helper call, a hash and a bucket walk (on a busy
/// node, cache misses across CPUs).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PointSlot {
    pub point: ObservationPoint,
    /// The namespaces its packets leave and enter.
    pub namespaces: PointNamespaces,
    /// A `parse::LinkLayer as u8`: how its frames start.
    pub link_layer: u8,
    // Scalars, as in `ObservationPoint`.
    _pad1: u8,
    _pad2: u16,
    _pad3: u32,
}

impl PointSlot {
    pub const FREE: Self = Self::new(ObservationPoint::new(0, 0, 0), PointNamespaces::NONE, 0);

    #[inline(always)]
    pub const fn new(point: ObservationPoint, namespaces: PointNamespaces, link_layer: u8) -> Self {
        Self {
            point,
            namespaces,
            link_layer,
            _pad1: 0,
            _pad2: 0,
            _pad3: 0,
        }
    }

    /// The slot of `point`'s probe number `probe` (0 to `POINT_PROBES - 1`).
    ///
    /// The node's own interfaces (cookie 0) are numbered in a row by the kernel: each has its
    /// home at twice its index, one slot a direction, so they do not collide until the indices
    /// wrap around the table. A pod's loopback (ifindex 1, its namespace's cookie) has its home
    /// wherever its cookie scatters it.
    #[inline(always)]
    pub fn index(point: &ObservationPoint, probe: u32) -> u32 {
        let cookie = (point.netns_cookie ^ (point.netns_cookie >> 32)) as u32;
        let home = point
            .ifindex
            .wrapping_mul(2)
            .wrapping_add(u32::from(point.direction))
            ^ cookie.wrapping_mul(0x9e37_79b9);
        home.wrapping_add(probe.wrapping_mul(POINT_PROBE_STRIDE)) % POINT_SLOTS
    }

    pub fn is_free(&self) -> bool {
        self.point.ifindex == 0
    }
}

/// The namespaces a packet leaves and enters where it is seen, as userspace numbers them for
/// the kernel (see `points`); 0 is a side that is not watched.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PointNamespaces {
    pub leaves: u32,
    pub enters: u32,
}

impl PointNamespaces {
    pub const NONE: Self = Self {
        leaves: 0,
        enters: 0,
    };
}

/// One query sighting, as the question table judges it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QuerySighting {
    /// IPv4 in the first 4 bytes.
    pub src: [u8; 16],
    pub dst: [u8; 16],
    /// The source is known to serve DNS (it answered a query, or it is the node's or loopback).
    pub src_serves_dns: bool,
    pub at: PointNamespaces,
}

/// What the kernel remembers about a question asked recently.
///
/// A loop is a question that re-enters a namespace along a chain of forwards. The table sees
/// forwards without following them: a query is a forward when its source serves DNS or was sent
/// the question recently (`sent_to`); a namespace that a forward leaves is forwarding the question
/// (`forwarding`) until an answer to it enters there. A forward entering a namespace that is
/// forwarding the question is the question coming back: from then on every sighting is streamed
/// (the question is hot) until it has been quiet for the window. Popular questions forwarded
/// for many clients never come back into the forwarder, and stay cold.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QuestionState {
    /// The latest sighting: a question quiet for the window starts afresh.
    pub last_ns: u64,
    /// Set once the question came back into a namespace that was forwarding it.
    pub hot: u8,
    /// The slot of `sent_to` to fill next.
    pub sent_to_next: u8,
    /// The slot of `cold` to fill next.
    pub cold_next: u8,
    pub _pad: [u8; 5],
    /// Namespaces with a forward of the question unanswered (0: free slot), since when.
    pub forwarding: [u32; QUESTION_SLOTS],
    pub forwarding_since: [u64; QUESTION_SLOTS],
    /// Where the question was sent lately (IPv4 in the first 4 bytes; all zero: free slot).
    pub sent_to: [[u8; 16]; QUESTION_SLOTS],
    /// The latest sightings while the question was not hot (not streamed), a ring from
    /// `cold_next`: the round that brought the question back.
    pub cold: [Sighting; PRIOR_SIGHTINGS],
}

/// One sighting of a query: enough for userspace to rebuild the observation of a packet that
/// was counted but not streamed.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sighting {
    pub ts_ns: u64,
    /// As in [`ObservationPoint`].
    pub netns_cookie: u64,
    /// IPv4 in the first 4 bytes.
    pub src: [u8; 16],
    pub dst: [u8; 16],
    pub ifindex: u32,
    pub sport: u16,
    pub dport: u16,
    pub id: u16,
    pub direction: u8,
    /// `parse::Transport as u8`.
    pub transport: u8,
    /// `parse::IpFamily as u8`; 0 when there is no sighting.
    pub family: u8,
    pub _pad: [u8; 3],
}

impl Sighting {
    /// `*self = *other`, field by field (see [`stores`]).
    #[inline(always)]
    pub fn copy_from(&mut self, other: &Self) {
        self.ts_ns = other.ts_ns;
        self.netns_cookie = other.netns_cookie;
        stores::copy(&mut self.src, &other.src);
        stores::copy(&mut self.dst, &other.dst);
        self.ifindex = other.ifindex;
        self.sport = other.sport;
        self.dport = other.dport;
        self.id = other.id;
        self.direction = other.direction;
        self.transport = other.transport;
        self.family = other.family;
        stores::fill(&mut self._pad, 0);
    }
}

/// Copies every sighting of `from` into `to`, field by field (see [`stores`]).
#[inline(always)]
pub fn copy_sightings(to: &mut [Sighting; PRIOR_SIGHTINGS], from: &[Sighting; PRIOR_SIGHTINGS]) {
    for (to, from) in to.iter_mut().zip(from) {
        to.copy_from(from);
    }
}

/// What a query sighting made of its question.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Heat {
    /// Not come back: not streamed.
    Cold,
    /// This sighting is the question coming back: streamed, with the cold sightings before it
    /// attached.
    BecameHot,
    /// Already hot: streamed.
    Hot,
}

impl QuestionState {
    /// The state of a question not seen for a quiet window. The kernel inserts a zeroed
    /// state instead, which its first sighting resets the same way.
    #[inline(always)]
    pub const fn fresh(now_ns: u64) -> Self {
        Self {
            last_ns: now_ns,
            hot: 0,
            sent_to_next: 0,
            cold_next: 0,
            _pad: [0; 5],
            forwarding: [0; QUESTION_SLOTS],
            forwarding_since: [0; QUESTION_SLOTS],
            sent_to: [[0; 16]; QUESTION_SLOTS],
            cold: [Sighting {
                ts_ns: 0,
                netns_cookie: 0,
                src: [0; 16],
                dst: [0; 16],
                ifindex: 0,
                sport: 0,
                dport: 0,
                id: 0,
                direction: 0,
                transport: 0,
                family: 0,
                _pad: [0; 3],
            }; PRIOR_SIGHTINGS],
        }
    }

    /// Whether the question is hot at `now_ns`: it came back, and it has not been quiet for
    /// `window_ns` since.
    #[inline(always)]
    pub fn is_hot_at(&self, now_ns: u64, window_ns: u64) -> bool {
        self.hot != 0 && now_ns.saturating_sub(self.last_ns) <= window_ns
    }

    /// Records a query sighting at `now_ns` and says whether it should be streamed (see the
    /// type's documentation). The caller keeps `cold` up to date for `Heat::Cold` ones.
    #[inline(always)]
    pub fn record_query(&mut self, now_ns: u64, window_ns: u64, seen: &QuerySighting) -> Heat {
        if now_ns.saturating_sub(self.last_ns) > window_ns {
            self.reset(now_ns);
        }
        self.last_ns = now_ns;
        if self.hot != 0 {
            return Heat::Hot;
        }
        let mut was_sent_it = false;
        for slot in 0..QUESTION_SLOTS {
            was_sent_it |= self.sent_to[slot] == seen.src;
        }
        let forward = seen.src_serves_dns || was_sent_it;
        if forward
            && self
                .forwarding_since(seen.at.enters, now_ns, window_ns)
                .is_some()
        {
            self.hot = 1;
            return Heat::BecameHot;
        }
        self.remember_destination(seen.dst);
        if forward && seen.at.leaves != 0 {
            self.mark_forwarding(seen.at.leaves, now_ns);
        }
        Heat::Cold
    }

    /// Forgets the last window, field by field: the whole state is too big for the BPF stack,
    /// where a new value would be built.
    #[inline(always)]
    pub fn reset(&mut self, now_ns: u64) {
        self.last_ns = now_ns;
        self.hot = 0;
        self.sent_to_next = 0;
        stores::fill(&mut self.forwarding, 0);
        stores::fill(&mut self.forwarding_since, 0);
        for destination in &mut self.sent_to {
            stores::fill(destination, 0);
        }
        for sighting in &mut self.cold {
            sighting.family = 0;
        }
    }

    /// Records an answer to the question entering `namespace`: a forward from there is done.
    #[inline(always)]
    pub fn record_answer(&mut self, namespace: u32) {
        for slot in 0..QUESTION_SLOTS {
            if namespace != 0 && self.forwarding[slot] == namespace {
                self.forwarding[slot] = 0;
            }
        }
    }

    /// When `namespace` started forwarding the question, if it still is (within the window).
    #[inline(always)]
    fn forwarding_since(&self, namespace: u32, now_ns: u64, window_ns: u64) -> Option<u64> {
        let mut since = None;
        for slot in 0..QUESTION_SLOTS {
            let recent = now_ns.saturating_sub(self.forwarding_since[slot]) <= window_ns;
            if namespace != 0 && self.forwarding[slot] == namespace && recent {
                since = Some(self.forwarding_since[slot]);
            }
        }
        since
    }

    #[inline(always)]
    fn remember_destination(&mut self, dst: [u8; 16]) {
        let mut known = false;
        for slot in 0..QUESTION_SLOTS {
            known |= self.sent_to[slot] == dst;
        }
        if !known {
            let slot = usize::from(self.sent_to_next) % QUESTION_SLOTS;
            stores::copy(&mut self.sent_to[slot], &dst);
            self.sent_to_next = ((slot + 1) % QUESTION_SLOTS) as u8;
        }
    }

    /// Marks `namespace` as forwarding the question since `now_ns`: in its own slot if it has
    /// one, else in a free one, else in place of the oldest.
    #[inline(always)]
    fn mark_forwarding(&mut self, namespace: u32, now_ns: u64) {
        let mut chosen = 0;
        let mut found = false;
        for slot in 0..QUESTION_SLOTS {
            if !found && self.forwarding[slot] == namespace {
                chosen = slot;
                found = true;
            }
        }
        for slot in 0..QUESTION_SLOTS {
            if !found && self.forwarding[slot] == 0 {
                chosen = slot;
                found = true;
            }
        }
        if !found {
            for slot in 1..QUESTION_SLOTS {
                if self.forwarding_since[slot] < self.forwarding_since[chosen] {
                    chosen = slot;
                }
            }
        }
        self.forwarding[chosen] = namespace;
        self.forwarding_since[chosen] = now_ns;
    }
}

/// Settings userspace patches into the programs at load time.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProgramConfig {
    /// A question stays hot while sightings are less than this apart, and a forward not
    /// answered within it no longer waits for the question to come back. Longer than resolvers'
    /// retry intervals (unbound retries a forward after 3 s), so that a loop going round once per
    /// retry stays hot from one round to the next.
    pub hot_window_ns: u64,
    /// Bytes of each streamed packet to keep, at most [`PACKET_SNAP_MAX`].
    pub snap_len: u32,
    /// Non-zero: stream every DNS packet (`--packets`).
    pub stream_every_packet: u8,
    pub _pad: [u8; 3],
    /// Non-zero: the namespace cookie loopback packets are tagged with, on kernels whose TC
    /// programs cannot ask for it (`bpf_get_netns_cookie` came to TC in Linux 6.13); userspace
    /// then watches its own namespace's loopback alone. Zero: the programs ask the kernel.
    pub loopback_cookie: u64,
}

impl ProgramConfig {
    pub const DEFAULT: Self = Self {
        hot_window_ns: 5_000_000_000,
        snap_len: PACKET_SNAP_MAX as u32,
        stream_every_packet: 0,
        _pad: [0; 3],
        loopback_cookie: 0,
    };
}

#[cfg(feature = "user")]
mod user {
    /// `aya::Pod` for the types userspace reads from and writes to the maps.
    macro_rules! pod {
        ($($ty:ident),* $(,)?) => {
            $(
                // SAFETY: plain-old-data, `#[repr(C)]`, every byte (padding included) is
                // initialised.
                unsafe impl aya::Pod for super::$ty {}
            )*
        };
    }

    pod!(
        ObservationPoint,
        PointCounters,
        QuestionKey,
        QuestionState,
        PointNamespaces,
        ProgramConfig,
        QueryKey,
        QueryState,
        QueryEntry,
        ServerKey,
        ServerStats,
        Sighting,
        ForwarderKey,
        PointSlot,
    );
}

#[cfg(test)]
mod tests {
    use core::mem::size_of;

    use super::*;

    /// The layouts are a contract with the kernel programs: no implicit padding anywhere.
    #[test]
    fn shared_types_have_no_implicit_padding() {
        assert_eq!(size_of::<ObservationPoint>(), 16);
        assert_eq!(size_of::<PointCounters>(), 16);
        assert_eq!(size_of::<QueryKey>(), 24);
        assert_eq!(size_of::<QueryState>(), 32);
        assert_eq!(
            size_of::<PacketRecord>(),
            32 + 32 + 64 * PRIOR_SIGHTINGS + PACKET_SNAP_MAX
        );
        assert_eq!(size_of::<QuestionKey>(), 16);
        assert_eq!(size_of::<Sighting>(), 64);
        assert_eq!(
            size_of::<QuestionState>(),
            8 + 8 + QUESTION_SLOTS * (4 + 8 + 16) + 64 * PRIOR_SIGHTINGS
        );
        assert_eq!(size_of::<PointNamespaces>(), 8);
        assert_eq!(size_of::<PointSlot>(), 32);
        assert_eq!(size_of::<ProgramConfig>(), 24);
        assert_eq!(size_of::<QueryEntry>(), 32 + 8 + 8 + NAME_WIRE_MAX);
        assert_eq!(size_of::<ServerKey>(), 20);
        assert_eq!(
            size_of::<ServerStats>(),
            8 * (2 + 16 + crate::latency::LATENCY_BUCKETS)
        );
    }

    const WINDOW: u64 = 2_000_000_000;
    const NODE: u32 = 1;
    const COREDNS: u32 = 2;
    const CLIENT: u32 = 3;

    fn ip(last: u8) -> [u8; 16] {
        let mut address = [0; 16];
        address[..4].copy_from_slice(&[10, 0, 0, last]);
        address
    }

    fn query(src: u8, dst: u8, serves_dns: bool, leaves: u32, enters: u32) -> QuerySighting {
        QuerySighting {
            src: ip(src),
            dst: ip(dst),
            src_serves_dns: serves_dns,
            at: PointNamespaces { leaves, enters },
        }
    }

    /// The node-local cache (on the node, sending from .1, known to serve DNS) forwarding a
    /// client's question to a CoreDNS pod (.3), hop by hop.
    fn cache_forwards(state: &mut QuestionState, at: u64) -> [Heat; 4] {
        [
            state.record_query(at, WINDOW, &query(2, 10, false, CLIENT, 0)),
            state.record_query(at, WINDOW, &query(2, 10, false, 0, NODE)),
            state.record_query(at, WINDOW, &query(1, 3, true, NODE, 0)),
            state.record_query(at, WINDOW, &query(1, 3, true, 0, COREDNS)),
        ]
    }

    #[test]
    fn a_question_forwarded_for_many_clients_stays_cold() {
        let mut state = QuestionState::fresh(0);
        for at in 0..100 {
            assert_eq!(cache_forwards(&mut state, at), [Heat::Cold; 4]);
            if at % 2 == 0 {
                state.record_answer(NODE);
            }
        }
    }

    #[test]
    fn a_forward_coming_back_into_the_forwarder_makes_the_question_hot_until_it_is_quiet() {
        let mut state = QuestionState::fresh(0);
        cache_forwards(&mut state, 0);
        // CoreDNS, which was sent the question, sends it back to the node-local cache.
        assert_eq!(
            state.record_query(10, WINDOW, &query(3, 10, false, COREDNS, 0)),
            Heat::Cold
        );
        assert_eq!(
            state.record_query(10, WINDOW, &query(3, 10, false, 0, NODE)),
            Heat::BecameHot,
            "the node was forwarding it"
        );
        assert_eq!(cache_forwards(&mut state, 20), [Heat::Hot; 4]);
        assert!(
            state.is_hot_at(20 + WINDOW, WINDOW),
            "replies stream while it is hot"
        );
        assert!(
            !state.is_hot_at(21 + WINDOW, WINDOW),
            "not once it has been quiet"
        );
        assert_eq!(
            cache_forwards(&mut state, 21 + WINDOW),
            [Heat::Cold; 4],
            "reset"
        );
    }

    #[test]
    fn an_answered_forward_is_no_longer_waited_for() {
        let mut state = QuestionState::fresh(0);
        cache_forwards(&mut state, 0);
        state.record_answer(NODE);
        assert_eq!(
            state.record_query(10, WINDOW, &query(3, 10, false, 0, NODE)),
            Heat::Cold
        );
    }

    #[test]
    fn a_server_forwarding_to_its_own_loopback_comes_back_on_the_second_round() {
        let mut state = QuestionState::fresh(0);
        let to_itself = query(1, 1, true, COREDNS, COREDNS);
        assert_eq!(state.record_query(0, WINDOW, &to_itself), Heat::Cold);
        assert_eq!(state.record_query(5, WINDOW, &to_itself), Heat::BecameHot);
    }

    #[test]
    fn a_forward_older_than_the_window_is_forgotten() {
        let mut state = QuestionState::fresh(0);
        cache_forwards(&mut state, 0);
        // Sightings keep the window open, but the node's forward is too old to come back.
        for at in [WINDOW / 2, WINDOW, WINDOW + WINDOW / 2] {
            state.record_query(at, WINDOW, &query(2, 10, false, CLIENT, 0));
        }
        assert_eq!(
            state.record_query(2 * WINDOW + 1, WINDOW, &query(3, 10, true, 0, NODE)),
            Heat::Cold
        );
    }

    #[test]
    fn many_forwarding_namespaces_keep_the_latest() {
        let mut state = QuestionState::fresh(0);
        for (at, namespace) in (10..20).enumerate() {
            state.record_query(at as u64, WINDOW, &query(1, 9, true, namespace, 0));
        }
        assert_eq!(
            state.record_query(30, WINDOW, &query(1, 9, true, 0, 19)),
            Heat::BecameHot
        );
        let mut state = QuestionState::fresh(0);
        for (at, namespace) in (10..20).enumerate() {
            state.record_query(at as u64, WINDOW, &query(1, 9, true, namespace, 0));
        }
        assert_eq!(
            state.record_query(30, WINDOW, &query(1, 9, true, 0, 10)),
            Heat::Cold,
            "the oldest gave its slot"
        );
    }

    #[test]
    fn stream_reasons_round_trip() {
        for reason in [
            StreamReason::EveryPacket,
            StreamReason::HotQuestion,
            StreamReason::Probe,
            StreamReason::TcpSplit,
            StreamReason::UnexpectedSource,
            StreamReason::Retried,
            StreamReason::Malformed,
        ] {
            assert_eq!(StreamReason::from_u8(reason as u8), Some(reason));
        }
        assert_eq!(StreamReason::from_u8(7), None);
    }
}
