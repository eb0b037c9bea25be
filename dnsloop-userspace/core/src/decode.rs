//! The decoder: a captured packet in, one observation per DNS message out.
//!
//! The headers are walked by the same `no_std` parser the kernel programs run, so a packet means
//! the same thing in `trace` and in `analyze`. The DNS message itself is decoded with
//! hickory-proto; when it cannot be (cut by the snap length, or malformed past the question),
//! the shared parser's reading of the header and first question is used instead.
use std::{net::SocketAddr, sync::Arc, time::SystemTime};

use dnsloop_shared::parse::{
    classify, parse_dns, refused_query, tcp_framing, udp_message, DnsMessageRef, DnsPorts,
    IpFamily, LinkLayer, Malformed, PacketClass, Segment, SlicePacket, Unreachable, DNS_BUF_LEN,
};
use dnsloop_shared::point::Direction;
use hickory_proto::{op::Message, serialize::binary::BinDecodable};

use crate::{
    observation::{
        DnsName, DropCause, DropPlace, DroppedMessage, Observation, Point, Question, Transport,
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

pub struct Decoder {
    ports: DnsPorts,
}

impl Decoder {
    /// A decoder of the packets on `ports`.
    pub fn new(ports: DnsPorts) -> Self {
        Self { ports }
    }

    /// Appends an observation to `out` for each DNS message in `packet`, at the point
    /// `point_of` places where it was seen. Queries the kernel counted but did not
    /// stream, and that the packet's record describes, come first, rebuilt at their own points:
    /// the query a reply from an unexpected source answers, and the sighting before the query
    /// that made its question hot. The analyzers then judge the packet as from a capture.
    pub fn decode<'p>(
        &self,
        packet: &RawPacket,
        point_of: impl Fn(Seen) -> Option<&'p Point>,
        out: &mut Vec<Observation>,
    ) -> Result<(), NotDecoded> {
        let point = point_of(packet.seen).ok_or(NotDecoded::Unplaced)?;
        let query_point = packet.matched_query.and_then(|query| {
            point_of(Seen {
                interface: packet.seen.interface,
                direction: query.direction,
                via_gateway: query.via_gateway,
            })
        });
        let priors: Vec<(&PriorSighting, &Point)> = packet
            .priors
            .iter()
            .filter_map(|prior| Some((prior, point_of(prior.seen)?)))
            .collect();
        let bytes = SlicePacket(&packet.bytes);
        let segment = match classify(&bytes, packet.link_layer, &self.ports) {
            PacketClass::Dns(segment) => segment,
            PacketClass::Skip(_) | PacketClass::DnsPortUnreachable => {
                return Err(NotDecoded::NotDns)
            }
            PacketClass::Malformed(reason) => return Err(NotDecoded::Malformed(reason)),
        };
        // A datagram holds one message, a TCP segment any number: taken from either without
        // collecting them, as nearly every packet is a datagram.
        let transport = segment.transport;
        let (datagram, framing) = match transport {
            Transport::Udp => (Some(udp_message(&segment)), None),
            Transport::Tcp => (None, Some(tcp_framing(&bytes, &segment))),
        };
        let messages = datagram.into_iter().chain(
            framing
                .iter()
                .flat_map(|framing| framing.messages().copied()),
        );
        let src = socket_addr(segment.family, &segment.src, segment.sport);
        let dst = socket_addr(segment.family, &segment.dst, segment.dport);
        let before = out.len();
        let mut first_error = None;
        for message in messages {
            let Some(held) = message_bytes(&packet.bytes, &segment, &message) else {
                continue;
            };
            match decode_message(held) {
                Ok(decoded) => {
                    let observation = Observation {
                        ts: packet.ts,
                        point: point.clone(),
                        transport,
                        src,
                        dst,
                        id: decoded.id,
                        is_response: decoded.is_response,
                        opcode: decoded.opcode,
                        rcode: decoded.rcode,
                        question: decoded.question,
                        probe: decoded.probe,
                        size: message.len,
                        partial: false,
                        recalled: false,
                        to_own_address: None,
                    };
                    if let (Some(query), Some(query_point)) = (&packet.matched_query, query_point) {
                        out.push(matched_query(
                            &observation,
                            query,
                            segment.family,
                            query_point,
                        ));
                    }
                    for &(prior, prior_point) in &priors {
                        out.push(prior_sighting(&observation, prior, prior_point));
                    }
                    out.push(observation);
                }
                Err(reason) => {
                    first_error.get_or_insert(reason);
                }
            }
        }
        match (out.len() > before, first_error) {
            (false, Some(reason)) => Err(NotDecoded::Malformed(reason)),
            (false, None) => Err(NotDecoded::NotDns),
            (true, _) => Ok(()),
        }
    }

    /// A sample of `packet`, found malformed for `reason` and seen at `point`.
    pub fn malformed_sample(
        &self,
        packet: &RawPacket,
        point: &Point,
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
        let decoded = decode_message(message_bytes(&packet.bytes, &segment, &message)?).ok()?;
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
        })
    }

    /// The query that `packet`, seen at `point`, sends back in an ICMP port or host unreachable:
    /// a drop of it in the namespace the ICMP leaves, as the kernel would report it
    /// (`NO_SOCKET`: nothing listens on its port; `NEIGH_FAILED`: no neighbour answered for
    /// its destination). A capture shows no drops but these.
    pub fn decode_refusal(&self, packet: &RawPacket, point: &Point) -> Option<DroppedMessage> {
        let bytes = SlicePacket(&packet.bytes);
        let refused = refused_query(&bytes, packet.link_layer, &self.ports)?;
        let query = refused.query;
        let message = udp_message(&query);
        let decoded = decode_message(message_bytes(&packet.bytes, &query, &message)?).ok()?;
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
        })
    }

    /// The observation of a query no answer reached, as the kernel's query table held it: its
    /// first sighting, at the point `point_of` places it (`None` if it places it nowhere).
    pub fn decode_unanswered<'p>(
        &self,
        query: &UnansweredQuery,
        point_of: impl Fn(Seen) -> Option<&'p Point>,
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
        })
    }
}

/// The first sending of the query `seen` answers (a reply) or repeats (a retry), as the kernel
/// remembered it: `seen`'s question and id, sent by its client to the server the client chose.
fn matched_query(
    seen: &Observation,
    query: &MatchedQuery,
    family: IpFamily,
    point: &Point,
) -> Observation {
    let client = if seen.is_response { seen.dst } else { seen.src };
    Observation {
        ts: query.at,
        point: point.clone(),
        src: client,
        dst: socket_addr(family, &query.server, query.server_port),
        is_response: false,
        rcode: 0,
        ..seen.clone()
    }
}

/// The query seen before `query` made its question hot: `query`'s question, asked by the
/// sighting's own addresses and id.
fn prior_sighting(query: &Observation, prior: &PriorSighting, point: &Point) -> Observation {
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
    question: Option<Question>,
    probe: dnsloop_shared::parse::Probe,
}

fn decode_message(bytes: &[u8]) -> Result<DecodedMessage, Malformed> {
    // The shared parser reads the header and first question, and recognises probes, even in a
    // message cut short; hickory then refines what only a full decode knows (EDNS rcode bits).
    let mut buffer = [0u8; DNS_BUF_LEN];
    let held = bytes.len().min(DNS_BUF_LEN);
    buffer[..held].copy_from_slice(&bytes[..held]);
    let summary = parse_dns(&buffer, held)?;
    let question = match summary.question {
        Some(question) => {
            let name_end = QUESTION_OFFSET + usize::from(question.name_len);
            let name = bytes
                .get(QUESTION_OFFSET..name_end)
                .and_then(DnsName::from_wire)
                .ok_or(Malformed::DnsTruncatedQuestion)?;
            Some(Question {
                name,
                qtype: question.qtype,
                qclass: question.qclass,
            })
        }
        None => None,
    };
    // Only a reply's OPT record (in the additional section) can extend its rcode: every other
    // message is not decoded a second time.
    let header_rcode = u16::from(summary.header.rcode());
    let rcode = if summary.header.qr() && summary.header.arcount > 0 {
        Message::from_bytes(bytes)
            .map(|message| u16::from(message.response_code))
            .unwrap_or(header_rcode)
    } else {
        header_rcode
    };
    Ok(DecodedMessage {
        id: summary.header.id,
        is_response: summary.header.qr(),
        opcode: summary.header.opcode(),
        rcode,
        question,
        probe: summary
            .question
            .map(|question| question.probe)
            .unwrap_or(dnsloop_shared::parse::Probe::None),
    })
}
