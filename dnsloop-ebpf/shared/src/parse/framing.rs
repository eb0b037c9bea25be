//! Where the DNS messages of a segment are: one per UDP datagram, length-prefixed in TCP.

use super::bytes::{read_u16, PacketBytes};
use super::message::DNS_BUF_LEN;
use super::Segment;

/// Messages looked at per TCP segment; pipelined queries rarely put more in one segment.
pub const MAX_TCP_MESSAGES: usize = 4;

/// RFC 1035 4.2.2 / RFC 7766: each message over TCP is preceded by its length as a `u16`.
const TCP_LENGTH_PREFIX_LEN: usize = 2;

/// One DNS message inside a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DnsMessageRef {
    /// Absolute offset of the message (after any TCP length prefix) in the packet.
    pub offset: usize,
    /// The message length its framing declares (UDP length, or the TCP length prefix).
    pub len: usize,
    /// The packet holds the whole message.
    pub complete: bool,
}

impl DnsMessageRef {
    const NONE: Self = Self {
        offset: 0,
        len: 0,
        complete: false,
    };

    /// How many bytes to copy from `offset` into the DNS buffer for `parse_dns`: the part of
    /// the message the packet holds, capped at [`DNS_BUF_LEN`]. `seg` is the segment the
    /// message was found in.
    #[inline(always)]
    pub fn load_len(&self, seg: &Segment) -> usize {
        let held = (seg.payload_offset + seg.payload_len).saturating_sub(self.offset);
        self.len.min(held).min(DNS_BUF_LEN)
    }
}

/// The DNS messages of one TCP segment, which is assumed to start with a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TcpFraming {
    /// The first `count` entries are messages, in order.
    pub messages: [DnsMessageRef; MAX_TCP_MESSAGES],
    pub count: usize,
    /// The last message (or its length prefix) continues beyond this segment.
    pub split: bool,
    /// The segment has more messages than [`MAX_TCP_MESSAGES`].
    pub more: bool,
}

impl TcpFraming {
    /// The messages found, in order.
    pub fn messages(&self) -> impl Iterator<Item = &DnsMessageRef> {
        self.messages.iter().take(self.count)
    }
}

/// Splits a TCP segment's payload into length-prefixed DNS messages.
///
/// A message is `complete` if the packet holds all of it. A message that runs past the end of
/// the segment as its headers declare it continues in the next segment: that sets `split` and
/// is never reassembled or guessed at. One that fits the segment but not the packet (a capture
/// cut at its snaplen) is incomplete without being split.
#[inline(always)]
pub fn tcp_framing<P: PacketBytes>(pkt: &P, seg: &Segment) -> TcpFraming {
    let mut framing = TcpFraming {
        messages: [DnsMessageRef::NONE; MAX_TCP_MESSAGES],
        count: 0,
        split: false,
        more: false,
    };
    let held_end = seg.payload_offset + seg.payload_len;
    let declared_end = seg.payload_offset + seg.declared_payload_len;
    let mut cursor = seg.payload_offset;
    for slot in framing.messages.iter_mut() {
        if cursor >= held_end {
            return framing;
        }
        if cursor + TCP_LENGTH_PREFIX_LEN > held_end {
            framing.split = cursor + TCP_LENGTH_PREFIX_LEN > declared_end;
            return framing;
        }
        // Only fails for a segment that `classify` did not produce from this packet.
        let Some(len) = read_u16(pkt, cursor) else {
            return framing;
        };
        let offset = cursor + TCP_LENGTH_PREFIX_LEN;
        let end = offset + usize::from(len);
        *slot = DnsMessageRef {
            offset,
            len: usize::from(len),
            complete: end <= held_end,
        };
        framing.count += 1;
        if end > held_end {
            framing.split = end > declared_end;
            return framing;
        }
        cursor = end;
    }
    framing.more = cursor < declared_end;
    framing
}

/// The single DNS message of a UDP segment.
#[inline(always)]
pub fn udp_message(seg: &Segment) -> DnsMessageRef {
    DnsMessageRef {
        offset: seg.payload_offset,
        len: seg.declared_payload_len,
        complete: seg.payload_len >= seg.declared_payload_len,
    }
}
