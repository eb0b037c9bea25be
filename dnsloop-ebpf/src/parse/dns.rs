//! DNS: the header and the first question of one message, read from a fixed-size buffer.

use super::class::Malformed;
use super::message::{Message, DNS_BUF_LEN};
use super::name_hash::{name_hash_fold, NAME_HASH_SEED};
use super::probe::{detect_probe, Probe};

/// Where the first question's name starts: right after the 12-byte header.
const NAME_OFFSET: usize = 12;
/// RFC 1035 3.1: a name is at most 255 wire bytes, root label included. This also bounds the
/// labels to 127 (each takes at least two bytes), so they need no limit of their own.
const MAX_NAME_WIRE_LEN: usize = 255;
const MAX_LABEL_LEN: u8 = 63;
/// Label types 0b11 (a pointer); 0b01 and 0b10 (64..=191) are the extended and reserved ones.
const COMPRESSION_POINTER: u8 = 0xc0;
const TYPE_CLASS_LEN: usize = 4;

const _: () = assert!(NAME_OFFSET + MAX_NAME_WIRE_LEN + TYPE_CLASS_LEN <= DNS_BUF_LEN);

/// The fixed 12-byte DNS header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DnsHeader {
    pub id: u16,
    pub flags: u16,
    pub qdcount: u16,
    pub ancount: u16,
    pub nscount: u16,
    pub arcount: u16,
}

impl DnsHeader {
    /// A response (rather than a query).
    pub fn qr(&self) -> bool {
        self.flags & 0x8000 != 0
    }

    pub fn opcode(&self) -> u8 {
        ((self.flags >> 11) & 0x0f) as u8
    }

    /// Authoritative answer.
    pub fn aa(&self) -> bool {
        self.flags & 0x0400 != 0
    }

    /// Truncated (the answer did not fit in a UDP datagram).
    pub fn tc(&self) -> bool {
        self.flags & 0x0200 != 0
    }

    /// Recursion desired.
    pub fn rd(&self) -> bool {
        self.flags & 0x0100 != 0
    }

    /// Recursion available.
    pub fn ra(&self) -> bool {
        self.flags & 0x0080 != 0
    }

    /// The 4-bit header rcode (EDNS extends it in the OPT record, which is not read).
    pub fn rcode(&self) -> u8 {
        (self.flags & 0x0f) as u8
    }
}

/// The first question of a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Question {
    /// See [`name_hash`](super::name_hash()) for the definition.
    pub name_hash: u64,
    /// Wire bytes of the name, root label included; the name starts at offset 12.
    pub name_len: u16,
    pub labels: u8,
    pub qtype: u16,
    pub qclass: u16,
    pub probe: Probe,
}

/// What `parse_dns` reads from a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DnsSummary {
    pub header: DnsHeader,
    /// `None` when `qdcount` is 0.
    pub question: Option<Question>,
}

/// Parses the header and first question of the message whose first `len` bytes are in `buf`.
///
/// Only the first question is read; answers and further questions are not needed to follow
/// a query around a loop, so a message cut after its first question still parses.
///
/// Verifier cost: about 70k processed instructions (kernel 6.18) for each distinct state the
/// caller enters it with, so keep what is live across the call uniform (e.g. per-packet flags
/// in a per-CPU map rather than in registers). And avoid branching on `name_len` and `labels`:
/// each of the verifier's paths through the name walk knows them as constants, and a branch on
/// them (or a variable-length copy of the name) makes it keep those paths apart from there on.
#[inline(always)]
pub fn parse_dns(buf: &[u8; DNS_BUF_LEN], len: usize) -> Result<DnsSummary, Malformed> {
    let msg = Message::new(buf, len).ok_or(Malformed::DnsBadLength)?;
    let header = read_header(&msg).ok_or(Malformed::DnsTruncatedHeader)?;
    if header.qdcount == 0 {
        return Ok(DnsSummary {
            header,
            question: None,
        });
    }
    let wire = read_question(&msg)?;
    let question = Question {
        name_hash: wire.name_hash,
        name_len: wire.name_len,
        labels: wire.labels,
        qtype: wire.qtype,
        qclass: wire.qclass,
        probe: detect_probe(&wire.name, wire.qtype),
    };
    Ok(DnsSummary {
        header,
        question: Some(question),
    })
}

#[inline(always)]
fn read_header(msg: &Message) -> Option<DnsHeader> {
    Some(DnsHeader {
        id: msg.u16_at(0)?,
        flags: msg.u16_at(2)?,
        qdcount: msg.u16_at(4)?,
        ancount: msg.u16_at(6)?,
        nscount: msg.u16_at(8)?,
        arcount: msg.u16_at(10)?,
    })
}

/// The first question's name, once the name walk has accepted it.
pub(crate) struct AcceptedName<'m, 'b> {
    msg: &'m Message<'b>,
}

impl AcceptedName<'_, '_> {
    /// The name's byte at `wire_index` (0 is the first length octet).
    ///
    /// Not checked against the message length: the walk found the name well-formed up to its
    /// root label, so a reader that follows the labels and stops at the root reads only valid
    /// bytes. Skipping the check keeps the verifier from telling apart the walk's exit paths,
    /// each of which has narrowed the valid length differently.
    #[inline(always)]
    pub(crate) fn byte(&self, wire_index: usize) -> u8 {
        self.msg.buffer_byte(NAME_OFFSET + wire_index)
    }
}

/// The first question as read off the wire.
struct QuestionWire<'m, 'b> {
    name: AcceptedName<'m, 'b>,
    name_hash: u64,
    name_len: u16,
    labels: u8,
    qtype: u16,
    qclass: u16,
}

/// Reads the first question: walks its name, hashing it, then reads the type and class.
///
/// Written for the verifier, which follows every path through the loop separately and can
/// only merge paths whose registers it need not tell apart:
/// - One flat loop over the bytes, carrying how many are left in the current label, instead of
///   a loop over labels with a loop over bytes inside, which it would explore as the product of
///   their bounds.
/// - Nothing branches on the label count or the name length, nor reads at an offset computed
///   from them: every path knows them as constants, and a branch or an offset would make the
///   verifier keep apart paths that differ only there. Over 255 iterations that exceeds its
///   budget of one million instructions. So the type and class are read by the same loop, as
///   the four bytes after the root label, at offsets that depend only on the loop index; and
///   the label count is not checked, since 255 bytes cannot hold more than 127 labels anyway.
///
/// A pointer ends the walk as an error instead of being followed: the first question of a
/// query never needs one, and pointers can loop.
#[inline(always)]
fn read_question<'m, 'b>(msg: &'m Message<'b>) -> Result<QuestionWire<'m, 'b>, Malformed> {
    let mut name_hash = NAME_HASH_SEED;
    let mut labels: u8 = 0;
    let mut label_left: u8 = 0;
    let mut name_len: u16 = 0;
    // Set at the root label: how many type and class bytes remain to be read.
    let mut type_class_left: u8 = 0;
    let mut type_class: u32 = 0;
    for wire_index in 0..MAX_NAME_WIRE_LEN + TYPE_CLASS_LEN {
        let byte = msg
            .byte_at(NAME_OFFSET + wire_index)
            .ok_or(Malformed::DnsTruncatedQuestion)?;
        if type_class_left > 0 {
            type_class = (type_class << 8) | u32::from(byte);
            type_class_left -= 1;
            if type_class_left == 0 {
                return Ok(QuestionWire {
                    name: AcceptedName { msg },
                    name_hash,
                    name_len,
                    labels,
                    qtype: (type_class >> 16) as u16,
                    qclass: type_class as u16,
                });
            }
            continue;
        }
        name_hash = name_hash_fold(name_hash, byte);
        if label_left > 0 {
            label_left -= 1;
            continue;
        }
        match byte {
            0 if wire_index < MAX_NAME_WIRE_LEN => {
                // At most MAX_NAME_WIRE_LEN, so the cast is exact.
                name_len = (wire_index + 1) as u16;
                type_class_left = TYPE_CLASS_LEN as u8;
            }
            0 => return Err(Malformed::DnsNameTooLong),
            1..=MAX_LABEL_LEN => {
                labels += 1;
                label_left = byte;
            }
            COMPRESSION_POINTER..=u8::MAX => return Err(Malformed::DnsCompressionPointer),
            _ => return Err(Malformed::DnsLabelTooLong),
        }
    }
    // The loop covers a maximal name and its type and class: no root label within it.
    Err(Malformed::DnsNameTooLong)
}
