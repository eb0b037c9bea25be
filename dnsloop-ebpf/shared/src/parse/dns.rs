//! DNS: the header and the first question of one message, read from a fixed-size buffer.

use core::ops::ControlFlow;

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
/// The most labels a name can have (127, of one byte each) and its root label: the most steps
/// of a walk label by label.
pub const MAX_NAME_LABEL_STEPS: u32 = 128;

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
pub fn parse_dns(buf: &[u8; DNS_BUF_LEN], len: usize) -> Result<DnsSummary, Malformed> {
    parse_dns_with(buf, len, &mut NameWalk::default(), PlainWalk)
}

/// [`parse_dns`], with the name walk kept in `walk`, which the caller sets to its default, and
/// run by `walker`.
///
/// In BPF, `walk` is a per-CPU map value and `walker` a walk the verifier checks once (in
/// `bpf_loop`, or in a function of its own), instead of following every byte of every possible
/// name (which took Linux 6.1 past its budget of one million instructions). For the same
/// reason nothing here branches on what the walk found except through values read back from
/// `walk`, which the verifier does not track.
#[inline(always)]
pub fn parse_dns_with<W: NameWalker>(
    buf: &[u8; DNS_BUF_LEN],
    len: usize,
    walk: &mut NameWalk,
    walker: W,
) -> Result<DnsSummary, Malformed> {
    let msg = Message::new(buf, len).ok_or(Malformed::DnsBadLength)?;
    let header = read_header(&msg).ok_or(Malformed::DnsTruncatedHeader)?;
    if header.qdcount == 0 {
        return Ok(DnsSummary {
            header,
            question: None,
        });
    }
    walker.walk(walk, &msg);
    let name_len = walk.finished()?;
    let type_class = NAME_OFFSET + usize::from(name_len);
    let (Some(qtype), Some(qclass)) = (msg.u16_at(type_class), msg.u16_at(type_class + 2)) else {
        return Err(Malformed::DnsTruncatedQuestion);
    };
    let question = Question {
        name_hash: walk.hash,
        name_len,
        labels: walk.labels,
        qtype,
        qclass,
        probe: detect_probe(&AcceptedName { msg: &msg }, qtype),
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

/// Runs a walk of the first question's name. The walk is the same everywhere; how its steps
/// run is what a kernel's verifier can check.
pub trait NameWalker {
    /// Walks the name at the start of `msg`'s question with `walk`, at its default.
    fn walk(self, walk: &mut NameWalk, msg: &Message);
}

/// Label by label, in a plain loop: userspace's walk.
pub struct PlainWalk;

impl NameWalker for PlainWalk {
    #[inline(always)]
    fn walk(self, walk: &mut NameWalk, msg: &Message) {
        for _ in 0..MAX_NAME_LABEL_STEPS {
            if walk.label_step(msg).is_break() {
                return;
            }
        }
    }
}

/// Byte by byte (see [`NameWalk::walk_bytes`]).
pub struct ByteWalk;

impl NameWalker for ByteWalk {
    #[inline(always)]
    fn walk(self, walk: &mut NameWalk, msg: &Message) {
        walk.walk_bytes(msg);
    }
}

/// A walk of the first question's name, one label per step, hashing it as it goes.
///
/// A pointer ends the walk as an error instead of being followed: the first question of a
/// query never needs one, and pointers can loop.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct NameWalk {
    hash: u64,
    /// Wire index of the next length octet; once the root label is read, the name's length.
    next: u16,
    labels: u8,
    /// `WALKING`, `ACCEPTED`, or `REJECTED + Malformed as u8`.
    outcome: u8,
    _pad: [u8; 4],
}

impl Default for NameWalk {
    fn default() -> Self {
        Self {
            hash: NAME_HASH_SEED,
            next: 0,
            labels: 0,
            outcome: WALKING,
            _pad: [0; 4],
        }
    }
}

const WALKING: u8 = 0;
const ACCEPTED: u8 = 1;
const REJECTED: u8 = 2;

impl NameWalk {
    /// Reads the label at `next`: its length octet and bytes. A walk takes at most
    /// [`MAX_NAME_LABEL_STEPS`] of them.
    #[inline(always)]
    pub fn label_step(&mut self, msg: &Message) -> ControlFlow<()> {
        let at = usize::from(self.next);
        let Some(len) = msg.byte_at(NAME_OFFSET + at) else {
            return self.reject(Malformed::DnsTruncatedQuestion);
        };
        self.hash = name_hash_fold(self.hash, len);
        let next = self.length_octet(msg, at, len)?;
        let mut hash = self.hash;
        // Bounded by the constant for the verifier, ended by the label length. The bytes are
        // valid: the label's last one is.
        for index in 0..usize::from(MAX_LABEL_LEN) {
            if index == usize::from(len) {
                break;
            }
            hash = name_hash_fold(hash, msg.buffer_byte(NAME_OFFSET + at + 1 + index));
        }
        self.hash = hash;
        // Below MAX_NAME_WIRE_LEN, so the cast is exact.
        self.next = next as u16;
        ControlFlow::Continue(())
    }

    /// The whole walk, a byte per step, in a plain loop: what a verifier without `bpf_loop`
    /// (Linux < 5.17) can check. It follows every iteration of a loop, and label by label that
    /// is 128 labels of up to 63 bytes each; byte by byte it is 255 short steps, whose states it
    /// prunes. Same outcome, hash and labels as [`Self::label_step`]'s walk.
    #[inline(always)]
    pub fn walk_bytes(&mut self, msg: &Message) {
        for at in 0..MAX_NAME_WIRE_LEN {
            if self.byte_step(msg, at).is_break() {
                return;
            }
        }
    }

    /// Reads the name's byte at wire index `at`: a label's length octet where `next` says, one
    /// of its bytes before that.
    #[inline(always)]
    fn byte_step(&mut self, msg: &Message, at: usize) -> ControlFlow<()> {
        let Some(byte) = msg.byte_at(NAME_OFFSET + at) else {
            return self.reject(Malformed::DnsTruncatedQuestion);
        };
        self.hash = name_hash_fold(self.hash, byte);
        if at != usize::from(self.next) {
            return ControlFlow::Continue(());
        }
        let next = self.length_octet(msg, at, byte)?;
        // Below MAX_NAME_WIRE_LEN, so the cast is exact.
        self.next = next as u16;
        ControlFlow::Continue(())
    }

    /// Reads the length octet `len` at wire index `at` (below MAX_NAME_WIRE_LEN): the root
    /// label accepts the name; a label must end inside the message and leave room for the root
    /// label, and gives the wire index of the next length octet; a pointer or a reserved label
    /// type rejects the name.
    #[inline(always)]
    fn length_octet(&mut self, msg: &Message, at: usize, len: u8) -> ControlFlow<(), usize> {
        match len {
            0 => {
                self.next = (at + 1) as u16;
                self.outcome = ACCEPTED;
                ControlFlow::Break(())
            }
            1..=MAX_LABEL_LEN => {
                let next = at + 1 + usize::from(len);
                if msg.byte_at(NAME_OFFSET + next - 1).is_none() {
                    return self.reject(Malformed::DnsTruncatedQuestion);
                }
                if next >= MAX_NAME_WIRE_LEN {
                    return self.reject(Malformed::DnsNameTooLong);
                }
                self.labels += 1;
                ControlFlow::Continue(next)
            }
            COMPRESSION_POINTER..=u8::MAX => self.reject(Malformed::DnsCompressionPointer),
            _ => self.reject(Malformed::DnsLabelTooLong),
        }
    }

    #[inline(always)]
    fn reject<T>(&mut self, reason: Malformed) -> ControlFlow<(), T> {
        self.outcome = REJECTED + reason as u8;
        ControlFlow::Break(())
    }

    /// The name's wire length, root label included, if the walk accepted it.
    #[inline(always)]
    fn finished(&self) -> Result<u16, Malformed> {
        match self.outcome {
            // Never past MAX_NAME_WIRE_LEN once accepted; said again for verifiers that cannot
            // see it (5.10's, where the compiler then drops `Message`'s index mask as
            // redundant with its length check).
            ACCEPTED => Ok(self.next.min(MAX_NAME_WIRE_LEN as u16)),
            // Every step but the last reads a label of at least two bytes: a walk that never
            // broke ran past MAX_NAME_WIRE_LEN.
            WALKING => Err(Malformed::DnsNameTooLong),
            rejected => Err(Self::rejection(rejected - REJECTED)),
        }
    }

    /// The reason `reject` noted as `code`. Compared one by one, not looked up in
    /// `Malformed::ALL`: in the programs for kernels before 5.17 the compiler bounded one copy
    /// of the index and read the table with another, which the verifier refused.
    #[inline(always)]
    fn rejection(code: u8) -> Malformed {
        [
            Malformed::DnsTruncatedQuestion,
            Malformed::DnsLabelTooLong,
            Malformed::DnsCompressionPointer,
        ]
        .into_iter()
        .find(|reason| *reason as u8 == code)
        .unwrap_or(Malformed::DnsNameTooLong)
    }
}
