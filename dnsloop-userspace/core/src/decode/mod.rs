//! The decoder: captured packets in, one observation per DNS message out.
//!
//! The headers are walked by the same `no_std` parser the kernel programs run, so a packet means
//! the same thing in `trace` and in `analyze`. Around it, the decoder keeps what spans packets:
//! TCP streams cut into messages ([`tcp_streams`]), fragmented datagrams put back together
//! ([`ip_fragments`]), and the frames VXLAN and Geneve carry. Of the DNS message, the shared
//! parser reads the header and first question, even of a message cut short; the EDNS record's
//! fields are read past them ([`edns`]).
mod edns;
mod ip_fragments;
mod recent_names;
mod tcp_streams;

use std::{net::SocketAddr, sync::Arc, time::SystemTime};

use dnsloop_shared::parse::{
    abandoned_reply, classify, encapsulated_frame, ip_fragment, ip_protocol, parse_dns,
    refused_query, tcp_framing, tcp_position, udp_message, DnsMessageRef, DnsPorts, IpFamily,
    LinkLayer, Malformed, PacketClass, Segment, Skip, SlicePacket, Unreachable, DNS_BUF_LEN,
};
use dnsloop_shared::point::Direction;

pub use self::ip_fragments::{FragmentCounts, IncompleteDatagram, FRAGMENT_WAIT};
pub use self::tcp_streams::StreamCounts;
use self::{
    ip_fragments::{FirstFragment, Fragment, IpFragments},
    recent_names::RecentNames,
    tcp_streams::{StreamKey, StreamMessage, TcpSegment, TcpStreams},
};
use crate::{
    observation::{
        DnsName, DropCause, DropPlace, DroppedMessage, FragmentSizes, Namespace, Observation,
        Point, Question, Transport,
    },
    points::Seen,
    source::{socket_addr, DroppedPacket, MatchedQuery, PriorSighting, RawPacket, UnansweredQuery},
};

/// The kernel's drop reason for what an ICMP destination unreachable sends back.
fn drop_reason(why: Unreachable) -> &'static str {
    match why {
        Unreachable::Port => "NO_SOCKET",
        Unreachable::Host => "NEIGH_FAILED",
    }
}

/// The kernel's drop reason for a datagram whose fragments did not all come in time.
pub const REASSEMBLY_TIMEOUT: &str = "FRAG_REASM_TIMEOUT";

/// The sizes of the DNS message `segment` starts, if the raw IP packet `bytes` is the first
/// fragment of its datagram.
fn first_fragment_sizes(bytes: &SlicePacket, segment: &Segment) -> Option<FragmentSizes> {
    let fragment = ip_fragment(bytes, LinkLayer::RawIp)?;
    (fragment.offset == 0 && fragment.more).then_some(FragmentSizes {
        message: segment.declared_payload_len,
        first_fragment: fragment.data_offset + fragment.declared_len,
    })
}

/// Offset of the question section in a DNS message.
const QUESTION_OFFSET: usize = 12;

/// Why a packet yielded no observation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotDecoded {
    /// Not DNS on a watched port (ARP, other traffic, a non-first fragment).
    NotDns,
    /// Seen on an interface the caller cannot place (one that has just gone away).
    Unplaced,
    Malformed(Malformed),
    /// A TCP segment or IP fragment of DNS traffic that completed no message itself: a
    /// handshake, an acknowledgement, or part of a message or datagram.
    InReassembly,
}

/// A malformed packet, as a sample of what the counted ones look like.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MalformedSample {
    pub ts: SystemTime,
    pub ifname: Arc<str>,
    pub direction: Direction,
    pub reason: Malformed,
    /// When the headers up to the transport parsed: who sent it, to whom.
    pub addresses: Option<(SocketAddr, SocketAddr)>,
    /// The first bytes of the frame, for a person to read.
    pub head: bytes::Bytes,
}

/// Bytes of a malformed packet a sample shows.
const SAMPLE_HEAD: usize = 96;

/// How much of each TCP stream the decoder is given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Coverage {
    /// Every packet at the points it watches (a capture, `trace --packets`): a segment that
    /// comes early waits for the ones before it, and what never comes is counted as lost.
    EveryPacket,
    /// Only the packets worth streaming (`trace` by default): a stream's other segments are
    /// missing by design, so a segment is read at once, from its start, if it starts with a
    /// message.
    Sampled,
}

/// Whether `packet`, streamed only to be recorded, still matters to the analysis: a TCP
/// segment may complete a message begun in one streamed for analysis. (A look at the IP
/// protocol alone: most recorded packets are UDP, and are passed over at the cost of it.)
pub fn completes_for_analysis(packet: &RawPacket) -> bool {
    !packet.recorder_only
        || ip_protocol(&SlicePacket(&packet.bytes), packet.link_layer) == Some(TCP)
}

/// The IP protocol number of TCP.
const TCP: u8 = 6;

pub struct Decoder {
    ports: DnsPorts,
    streams: TcpStreams<StreamContext>,
    fragments: IpFragments<Arc<Point>>,
    /// Packets whose DNS was found inside VXLAN or Geneve.
    encapsulated: u64,
    names: RecentNames,
}

/// What reassembly and decapsulation met, over a run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReassemblyCounts {
    pub tcp: StreamCounts,
    pub ip: FragmentCounts,
    /// Packets whose DNS was found inside VXLAN or Geneve.
    pub encapsulated: u64,
}

/// Tunnels looked into per packet: a frame in a frame (VXLAN inside VXLAN) is real, deeper is
/// not worth the walk.
const MAX_ENCAPSULATION: usize = 2;

impl Decoder {
    /// A decoder of the packets on `ports`, given `coverage` of each TCP stream.
    pub fn new(ports: DnsPorts, coverage: Coverage) -> Self {
        Self {
            ports,
            streams: TcpStreams::new(coverage == Coverage::EveryPacket),
            fragments: IpFragments::default(),
            encapsulated: 0,
            names: RecentNames::default(),
        }
    }

    pub fn reassembly(&self) -> ReassemblyCounts {
        ReassemblyCounts {
            tcp: self.streams.counts(),
            ip: self.fragments.counts().clone(),
            encapsulated: self.encapsulated,
        }
    }

    /// Appends an observation to `out` for each DNS message in `packet`, at the point
    /// `point_of` places where it was seen. Queries the kernel counted but did not
    /// stream, and that the packet's record describes, come first, rebuilt at their own points:
    /// the query a reply from an unexpected source answers, and the sighting before the query
    /// that made its question hot. The analyzers then judge the packet as from a capture.
    ///
    /// A message may end in a later packet (TCP, IP fragments): it comes out with that one.
    pub fn decode<'p>(
        &mut self,
        packet: &RawPacket,
        point_of: impl Fn(Seen) -> Option<&'p Arc<Point>>,
        out: &mut Vec<Observation>,
    ) -> Result<(), NotDecoded> {
        let point = point_of(packet.seen).ok_or(NotDecoded::Unplaced)?;
        let matched = packet.matched_query.and_then(|query| {
            let point = point_of(Seen {
                interface: packet.seen.interface,
                direction: query.direction,
                via_gateway: query.via_gateway,
            })?;
            Some((query, point))
        });
        let priors = packet
            .priors
            .iter()
            .filter_map(|prior| Some((*prior, point_of(prior.seen)?)))
            .collect();
        let at = At {
            seen: packet.seen,
            ts: packet.ts,
            point,
            for_analysis: !packet.recorder_only,
        };
        self.with_recent_names(|decoder, names| {
            let mut found = Found::new(out, names, Recalled { matched, priors });
            let mut let_go = Vec::new();
            decoder.decode_frame(
                &packet.bytes,
                packet.link_layer,
                &at,
                &mut found,
                &mut let_go,
                0,
            );
            let outcome = found.outcome();
            decoder.decode_let_go(let_go, names, out);
            outcome
        })
    }

    /// Time has reached `now`: gives what waited in vain for the rest of a stream or a
    /// datagram, as far as it was held.
    pub fn expire(&mut self, now: SystemTime, out: &mut Vec<Observation>) {
        self.with_recent_names(|decoder, names| {
            let mut found = Found::new(out, names, Recalled::default());
            decoder.streams.expire(now, &mut |context, message| {
                found.stream_message(context, message)
            });
            let mut let_go = Vec::new();
            decoder
                .fragments
                .expire(now, &mut |first| let_go.push(first));
            decoder.decode_let_go(let_go, names, out);
        });
    }

    /// The input ended: gives everything still waiting, as far as it was held.
    pub fn finish(&mut self, out: &mut Vec<Observation>) {
        self.with_recent_names(|decoder, names| {
            let mut found = Found::new(out, names, Recalled::default());
            decoder
                .streams
                .finish(&mut |context, message| found.stream_message(context, message));
            let mut let_go = Vec::new();
            decoder.fragments.finish(&mut |first| let_go.push(first));
            decoder.decode_let_go(let_go, names, out);
        });
    }

    /// Runs `decode` with the recent names taken out of the decoder: the messages found deep in
    /// its walk take their names from them, beside `&mut self`.
    fn with_recent_names<R>(&mut self, decode: impl FnOnce(&mut Self, &mut RecentNames) -> R) -> R {
        let mut names = std::mem::replace(&mut self.names, RecentNames::placeholder());
        let result = decode(self, &mut names);
        self.names = names;
        result
    }

    /// Decodes the frame `bytes`, with link layer `link`, seen as `at` says; `depth` tunnels
    /// deep. First fragments of datagrams let go to make room go to `let_go`.
    fn decode_frame(
        &mut self,
        bytes: &[u8],
        link: LinkLayer,
        at: &At,
        found: &mut Found,
        let_go: &mut Vec<FirstFragment<Arc<Point>>>,
        depth: usize,
    ) {
        let packet = SlicePacket(bytes);
        let fragment = |fields, first_dns| Fragment {
            seen: at.seen,
            ts: at.ts,
            fields,
            frame: bytes,
            first_dns,
        };
        match classify(&packet, link, &self.ports) {
            PacketClass::Dns(segment) => {
                // A first fragment of a DNS datagram: read whole once the rest comes.
                if segment.payload_len < segment.declared_payload_len {
                    if let Some(fields) = ip_fragment(&packet, link) {
                        let first = fragment(&fields, Some((at.point.clone(), link)));
                        return self.reassemble(first, at, found, let_go, depth);
                    }
                }
                self.decode_segment(bytes, &segment, at, found);
            }
            PacketClass::Skip(Skip::NonFirstFragment) => {
                if let Some(fields) = ip_fragment(&packet, link) {
                    self.reassemble(fragment(&fields, None), at, found, let_go, depth);
                }
            }
            PacketClass::Skip(Skip::NotDnsPort) if depth < MAX_ENCAPSULATION => {
                let Some(inner) = encapsulated_frame(&packet, link) else {
                    return;
                };
                if let Some(frame) = inner.frame(bytes) {
                    let before = found.messages();
                    self.decode_frame(frame, LinkLayer::Ethernet, at, found, let_go, depth + 1);
                    if found.messages() > before {
                        self.encapsulated += 1;
                    }
                }
            }
            PacketClass::Skip(_) | PacketClass::DnsPortUnreachable => {}
            PacketClass::Malformed(reason) => found.error(reason),
        }
    }

    /// Takes `fragment` into its datagram, and decodes the datagram if it is now whole.
    fn reassemble(
        &mut self,
        fragment: Fragment<Arc<Point>>,
        at: &At,
        found: &mut Found,
        let_go: &mut Vec<FirstFragment<Arc<Point>>>,
        depth: usize,
    ) {
        if !at.for_analysis {
            return;
        }
        match self
            .fragments
            .add(fragment, &mut |first| let_go.push(first))
        {
            Some(datagram) => {
                self.decode_frame(&datagram, LinkLayer::RawIp, at, found, let_go, depth)
            }
            None => found.held = true,
        }
    }

    /// Decodes, alone, the first fragments of datagrams never completed: the header and
    /// question they hold were sent.
    fn decode_let_go(
        &mut self,
        let_go: Vec<FirstFragment<Arc<Point>>>,
        names: &mut RecentNames,
        out: &mut Vec<Observation>,
    ) {
        let mut found = Found::new(out, names, Recalled::default());
        for first in let_go {
            let PacketClass::Dns(segment) =
                classify(&SlicePacket(&first.frame), first.link, &self.ports)
            else {
                continue;
            };
            let at = At {
                seen: first.seen,
                ts: first.ts,
                point: &first.context,
                for_analysis: true,
            };
            if segment.transport == Transport::Udp {
                self.decode_segment(&first.frame, &segment, &at, &mut found);
            }
        }
    }

    /// Decodes the messages of the UDP or TCP `segment` in `bytes`.
    fn decode_segment(&mut self, bytes: &[u8], segment: &Segment, at: &At, found: &mut Found) {
        let src = socket_addr(segment.family, &segment.src, segment.sport);
        let dst = socket_addr(segment.family, &segment.dst, segment.dport);
        let route = Route {
            transport: segment.transport,
            family: segment.family,
            src,
            dst,
        };
        match segment.transport {
            Transport::Udp if !at.for_analysis => {}
            Transport::Udp => {
                let message = udp_message(segment);
                if let Some(held) = message_bytes(bytes, segment, &message) {
                    found.message(at.ts, at.point, &route, held, message.len);
                }
            }
            Transport::Tcp => {
                let Some(position) = tcp_position(&SlicePacket(bytes), segment) else {
                    return found.error(Malformed::TruncatedL4);
                };
                let data = bytes
                    .get(segment.payload_offset..segment.payload_offset + segment.payload_len)
                    .unwrap_or_default();
                let tcp_segment = TcpSegment {
                    position,
                    data,
                    cut: segment.declared_payload_len - segment.payload_len,
                    ts: at.ts,
                    for_analysis: at.for_analysis,
                };
                let key = StreamKey {
                    seen: at.seen,
                    src,
                    dst,
                };
                let before = found.messages();
                self.streams.segment(
                    key,
                    || StreamContext {
                        point: at.point.clone(),
                        route,
                    },
                    &tcp_segment,
                    &mut |context, message| found.stream_message(context, message),
                );
                if found.messages() == before {
                    found.held = true;
                }
            }
        }
    }

    /// A sample of `packet`, found malformed for `reason` and seen at `point`.
    pub fn malformed_sample(
        &self,
        packet: &RawPacket,
        point: &Arc<Point>,
        reason: Malformed,
    ) -> MalformedSample {
        let addresses = match classify(&SlicePacket(&packet.bytes), packet.link_layer, &self.ports)
        {
            PacketClass::Dns(segment) => Some((
                socket_addr(segment.family, &segment.src, segment.sport),
                socket_addr(segment.family, &segment.dst, segment.dport),
            )),
            _ => None,
        };
        MalformedSample {
            ts: packet.ts,
            ifname: point.ifname.clone(),
            direction: point.direction,
            reason,
            addresses,
            // A copy, not a slice: the packet's bytes may share an allocation with many others
            // (see `source::ringbuf`), which a kept sample would hold on to.
            head: bytes::Bytes::copy_from_slice(
                &packet.bytes[..packet.bytes.len().min(SAMPLE_HEAD)],
            ),
        }
    }

    /// The first DNS message of `packet`, which the kernel dropped at `place`: `None` when it
    /// holds none that decodes (the kernel filtered on ports alone).
    pub fn decode_drop(&self, packet: &DroppedPacket, place: DropPlace) -> Option<DroppedMessage> {
        let bytes = SlicePacket(&packet.bytes);
        let PacketClass::Dns(segment) = classify(&bytes, LinkLayer::RawIp, &self.ports) else {
            return None;
        };
        let message = match segment.transport {
            Transport::Udp => udp_message(&segment),
            Transport::Tcp => *tcp_framing(&bytes, &segment).messages().next()?,
        };
        let decoded = decode_message(
            DnsName::from_wire,
            message_bytes(&packet.bytes, &segment, &message)?,
        )
        .ok()?;
        Some(DroppedMessage {
            ts: packet.ts,
            cause: DropCause {
                reason: packet.reason.clone(),
                location: packet.location.clone(),
                place,
            },
            transport: segment.transport,
            src: socket_addr(segment.family, &segment.src, segment.sport),
            dst: socket_addr(segment.family, &segment.dst, segment.dport),
            id: decoded.id,
            is_response: decoded.is_response,
            question: decoded.question,
            fragmented: first_fragment_sizes(&bytes, &segment),
        })
    }

    /// The query that `packet`, seen at `point`, sends back in an ICMP port or host unreachable:
    /// a drop of it in the namespace the ICMP leaves, as the kernel would report it
    /// (`NO_SOCKET`: nothing listens on its port; `NEIGH_FAILED`: no neighbour answered for
    /// its destination). A capture shows no drops but these.
    ///
    /// Or the reply whose reassembly `packet`, an ICMP "fragment reassembly time exceeded",
    /// says its sender gave up: a drop of it as `FRAG_REASM_TIMEOUT` there, as the kernel of
    /// that host reports it.
    pub fn decode_refusal(&self, packet: &RawPacket, point: &Arc<Point>) -> Option<DroppedMessage> {
        let bytes = SlicePacket(&packet.bytes);
        let Some(refused) = refused_query(&bytes, packet.link_layer, &self.ports) else {
            return self.decode_abandoned(packet, point);
        };
        let query = refused.query;
        let message = udp_message(&query);
        let decoded = decode_message(
            DnsName::from_wire,
            message_bytes(&packet.bytes, &query, &message)?,
        )
        .ok()?;
        Some(DroppedMessage {
            ts: packet.ts,
            cause: DropCause {
                reason: drop_reason(refused.why).into(),
                location: None,
                place: DropPlace {
                    namespace: point.leaves.clone(),
                    device: Some(point.ifname.clone()),
                },
            },
            transport: Transport::Udp,
            src: socket_addr(query.family, &query.src, query.sport),
            dst: socket_addr(query.family, &query.dst, query.dport),
            id: decoded.id,
            is_response: decoded.is_response,
            question: decoded.question,
            fragmented: None,
        })
    }

    /// The reply an ICMP "fragment reassembly time exceeded" in `packet` quotes, dropped where
    /// that ICMP leaves: the host that held its first fragment and gave up on the rest.
    fn decode_abandoned(&self, packet: &RawPacket, point: &Arc<Point>) -> Option<DroppedMessage> {
        let bytes = SlicePacket(&packet.bytes);
        let abandoned = abandoned_reply(&bytes, packet.link_layer, &self.ports)?;
        let reply = abandoned.reply;
        let message = udp_message(&reply);
        let decoded = decode_message(
            DnsName::from_wire,
            message_bytes(&packet.bytes, &reply, &message)?,
        )
        .ok()?;
        if !decoded.is_response {
            return None;
        }
        // A capture places only DNS by its addresses: the ICMP's sender names the host.
        let host = || {
            let sender = socket_addr(reply.family, &abandoned.abandoned_by, 0).ip();
            Some(Namespace::new(&format!("host {sender}")))
        };
        Some(DroppedMessage {
            ts: packet.ts,
            cause: DropCause {
                reason: REASSEMBLY_TIMEOUT.into(),
                location: None,
                place: DropPlace {
                    namespace: point.leaves.clone().or_else(host),
                    device: Some(point.ifname.clone()),
                },
            },
            transport: Transport::Udp,
            src: socket_addr(reply.family, &reply.src, reply.sport),
            dst: socket_addr(reply.family, &reply.dst, reply.dport),
            id: decoded.id,
            is_response: true,
            question: decoded.question,
            fragmented: Some(FragmentSizes {
                message: reply.declared_payload_len,
                first_fragment: abandoned.fragment_len,
            }),
        })
    }

    /// The observation of a query no answer reached, as the kernel's query table held it: its
    /// first sighting, at the point `point_of` places it (`None` if it places it nowhere).
    pub fn decode_unanswered<'p>(
        &self,
        query: &UnansweredQuery,
        point_of: impl Fn(Seen) -> Option<&'p Arc<Point>>,
    ) -> Option<Observation> {
        let point = point_of(query.seen)?;
        Some(Observation {
            ts: query.at,
            point: point.clone(),
            transport: if query.tcp {
                Transport::Tcp
            } else {
                Transport::Udp
            },
            src: query.client,
            dst: query.server,
            id: query.id,
            is_response: false,
            opcode: 0,
            rcode: 0,
            truncated: false,
            question: Some(Question {
                name: query.name.clone(),
                qtype: query.qtype,
                qclass: query.qclass,
            }),
            probe: dnsloop_shared::parse::Probe::None,
            // The table keeps the question, not the message.
            size: 0,
            partial: false,
            recalled: true,
            to_own_address: None,
            edns_udp_size: None,
        })
    }
}

/// Where and when the packet being decoded was seen, and whether it is for analysis (not
/// streamed only to be recorded, see `RawPacket::recorder_only`).
struct At<'p> {
    seen: Seen,
    ts: SystemTime,
    point: &'p Arc<Point>,
    for_analysis: bool,
}

/// Who sent a message to whom, over what.
#[derive(Clone, Copy)]
struct Route {
    transport: Transport,
    family: IpFamily,
    src: SocketAddr,
    dst: SocketAddr,
}

/// What the messages of a TCP stream are reported with.
struct StreamContext {
    point: Arc<Point>,
    route: Route,
}

/// What the kernel's record of a packet recalls besides the packet: the query a reply or retry
/// matched, and the sightings before a query that made its question hot, each with its point.
#[derive(Default)]
struct Recalled<'p> {
    matched: Option<(MatchedQuery, &'p Arc<Point>)>,
    priors: Vec<(PriorSighting, &'p Arc<Point>)>,
}

/// The observations one packet (or one expiry) yields, and why it yielded none.
struct Found<'o, 'p> {
    out: &'o mut Vec<Observation>,
    names: &'o mut RecentNames,
    before: usize,
    recalled: Recalled<'p>,
    first_error: Option<Malformed>,
    /// Part of a stream or a datagram that is still being put together.
    held: bool,
}

impl<'o, 'p> Found<'o, 'p> {
    fn new(
        out: &'o mut Vec<Observation>,
        names: &'o mut RecentNames,
        recalled: Recalled<'p>,
    ) -> Self {
        Self {
            before: out.len(),
            out,
            names,
            recalled,
            first_error: None,
            held: false,
        }
    }

    fn messages(&self) -> usize {
        self.out.len() - self.before
    }

    fn error(&mut self, reason: Malformed) {
        self.first_error.get_or_insert(reason);
    }

    fn stream_message(&mut self, context: &StreamContext, message: StreamMessage) {
        // Begun in a segment streamed only to be recorded: a trace without recording never
        // sees it.
        if !message.for_analysis {
            return;
        }
        self.message(
            message.ts,
            &context.point,
            &context.route,
            message.bytes,
            message.len,
        );
    }

    /// The message `held` (of `len` bytes, as its framing declares), seen at `point` at `ts`.
    fn message(
        &mut self,
        ts: SystemTime,
        point: &Arc<Point>,
        route: &Route,
        held: &[u8],
        len: usize,
    ) {
        let decoded = match decode_message(|wire| self.names.name(wire), held) {
            Ok(decoded) => decoded,
            Err(reason) => return self.error(reason),
        };
        let observation = Observation {
            ts,
            point: point.clone(),
            transport: route.transport,
            src: route.src,
            dst: route.dst,
            id: decoded.id,
            is_response: decoded.is_response,
            opcode: decoded.opcode,
            rcode: decoded.rcode,
            truncated: decoded.truncated,
            question: decoded.question,
            probe: decoded.probe,
            size: len,
            partial: false,
            recalled: false,
            to_own_address: None,
            edns_udp_size: decoded.edns_udp_size,
        };
        if let Some((query, query_point)) = &self.recalled.matched {
            self.out.push(matched_query(
                &observation,
                query,
                route.family,
                query_point,
            ));
        }
        for (prior, prior_point) in &self.recalled.priors {
            self.out
                .push(prior_sighting(&observation, prior, prior_point));
        }
        self.out.push(observation);
    }

    fn outcome(&self) -> Result<(), NotDecoded> {
        if self.messages() > 0 {
            Ok(())
        } else if let Some(reason) = self.first_error {
            Err(NotDecoded::Malformed(reason))
        } else if self.held {
            Err(NotDecoded::InReassembly)
        } else {
            Err(NotDecoded::NotDns)
        }
    }
}

/// The first sending of the query `seen` answers (a reply) or repeats (a retry), as the kernel
/// remembered it: `seen`'s question and id, sent by its client to the server the client chose.
fn matched_query(
    seen: &Observation,
    query: &MatchedQuery,
    family: IpFamily,
    point: &Arc<Point>,
) -> Observation {
    let client = if seen.is_response { seen.dst } else { seen.src };
    Observation {
        ts: query.at,
        point: point.clone(),
        src: client,
        dst: socket_addr(family, &query.server, query.server_port),
        is_response: false,
        rcode: 0,
        truncated: false,
        ..seen.clone()
    }
}

/// The query seen before `query` made its question hot: `query`'s question, asked by the
/// sighting's own addresses and id.
fn prior_sighting(query: &Observation, prior: &PriorSighting, point: &Arc<Point>) -> Observation {
    Observation {
        ts: prior.at,
        point: point.clone(),
        transport: if prior.tcp {
            Transport::Tcp
        } else {
            Transport::Udp
        },
        src: prior.src,
        dst: prior.dst,
        id: prior.id,
        partial: true,
        edns_udp_size: None,
        ..query.clone()
    }
}

/// The part of `message` the capture holds.
fn message_bytes<'a>(
    packet: &'a [u8],
    segment: &Segment,
    message: &DnsMessageRef,
) -> Option<&'a [u8]> {
    let held_end = (segment.payload_offset + segment.payload_len).min(packet.len());
    let end = (message.offset + message.len).min(held_end);
    packet.get(message.offset..end)
}

struct DecodedMessage {
    id: u16,
    is_response: bool,
    opcode: u8,
    rcode: u16,
    truncated: bool,
    question: Option<Question>,
    probe: dnsloop_shared::parse::Probe,
    edns_udp_size: Option<u16>,
}

/// Decodes the DNS message `bytes`, its question's name made by `name_of` from its wire bytes.
fn decode_message(
    mut name_of: impl FnMut(&[u8]) -> Option<DnsName>,
    bytes: &[u8],
) -> Result<DecodedMessage, Malformed> {
    // The shared parser reads the header and first question, and recognises probes, even in a
    // message cut short.
    let mut buffer = [0u8; DNS_BUF_LEN];
    let held = bytes.len().min(DNS_BUF_LEN);
    buffer[..held].copy_from_slice(&bytes[..held]);
    let summary = parse_dns(&buffer, held)?;
    let question = match summary.question {
        Some(question) => {
            let name_end = QUESTION_OFFSET + usize::from(question.name_len);
            let name = bytes
                .get(QUESTION_OFFSET..name_end)
                .and_then(&mut name_of)
                .ok_or(Malformed::DnsTruncatedQuestion)?;
            Some(Question {
                name,
                qtype: question.qtype,
                qclass: question.qclass,
            })
        }
        None => None,
    };
    // Only a reply's OPT record can extend its rcode.
    let rcode = if summary.header.qr() {
        edns::reply_rcode(bytes, &summary.header, summary.question.as_ref())
    } else {
        u16::from(summary.header.rcode())
    };
    let edns_udp_size = summary
        .question
        .filter(|_| !summary.header.qr())
        .and_then(|question| edns::query_udp_size(bytes, &summary.header, &question));
    Ok(DecodedMessage {
        edns_udp_size,
        id: summary.header.id,
        is_response: summary.header.qr(),
        opcode: summary.header.opcode(),
        rcode,
        truncated: summary.header.qr() && summary.header.tc(),
        question,
        probe: summary
            .question
            .map(|question| question.probe)
            .unwrap_or(dnsloop_shared::parse::Probe::None),
    })
}

#[cfg(test)]
mod tests;
