//! DNS over TCP, reassembled: each direction of each stream, at each point it was seen, is put
//! back in sequence order and cut into messages at their length prefixes (RFC 7766), whether a
//! segment holds a message, several, part of one, or only its length.
//!
//! Nothing is guessed. Retransmitted and overlapping bytes are taken once; segments that
//! arrive early wait for the ones before them. Where bytes never arrive (a gap in the capture,
//! a snap length) they are counted, a message they cut is given as cut, and when the gap hides
//! where the next message starts, the stream is read again only from a segment that starts
//! with a whole, well-formed query or reply: a continuation of a message is never read as one.
use std::{hash::Hash, net::SocketAddr, time::SystemTime};

use dnsloop_shared::parse::{parse_dns, TcpPosition, DNS_BUF_LEN};
use hashlink::LinkedHashMap;
use hickory_proto::{op::Message, serialize::binary::BinDecodable};

use crate::points::Seen;

/// One direction of a TCP stream as seen at one point.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct StreamKey {
    pub seen: Seen,
    pub src: SocketAddr,
    pub dst: SocketAddr,
}

/// A message taken out of a stream.
#[derive(Debug)]
pub struct StreamMessage<'a> {
    /// The message as held: all of it, unless a gap cut it.
    pub bytes: &'a [u8],
    /// Its length, as its prefix declares.
    pub len: usize,
    /// When its last held byte was captured.
    pub ts: SystemTime,
    /// Whether its first byte came in a segment given for analysis (see `TcpSegment`).
    pub for_analysis: bool,
}

/// What reassembly met, over a run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StreamCounts {
    /// Messages put together from more than one segment.
    pub messages_across_segments: u64,
    /// Segments that arrived before one they follow, and waited for it.
    pub out_of_order: u64,
    /// Segments whose every byte had been taken already.
    pub retransmissions: u64,
    /// Places where bytes of a stream never arrived, and how many bytes they held.
    pub gaps: u64,
    pub bytes_lost: u64,
    /// Messages a gap cut, given as far as they were held.
    pub messages_cut: u64,
    /// Bytes passed over after a gap, up to a segment that starts with a message.
    pub bytes_skipped: u64,
    /// Messages begun but never finished when their stream ended (FIN, RST, idle, the end of
    /// the input, or a full table).
    pub messages_unfinished: u64,
}

/// Streams followed at once, and the bytes they may hold between them (a message is at most
/// 64 KiB); the idlest is let go first.
const MAX_STREAMS: usize = 16_384;
const MAX_HELD_BYTES: usize = 32 << 20;
/// Segments held ahead of a gap before the gap is taken to be lost, and how long (in packet
/// time) the first of them waits: a segment reordered on the way comes within microseconds.
const MAX_AHEAD: usize = 16;
const AHEAD_WAIT: std::time::Duration = std::time::Duration::from_millis(200);
/// A stream silent this long (in packet time) is let go.
const IDLE: std::time::Duration = std::time::Duration::from_secs(60);
/// The TCP length prefix.
const PREFIX: usize = 2;
/// The DNS header, which any message starts with.
const DNS_HEADER_LEN: usize = 12;

/// The streams being reassembled, each with the context `C` its messages are reported in.
pub struct TcpStreams<C> {
    streams: LinkedHashMap<StreamKey, Stream<C>>,
    /// Whether a segment that comes early waits for the ones before it (see `Coverage`).
    wait_ahead: bool,
    /// What the streams hold between them.
    held_bytes: usize,
    counts: StreamCounts,
}

/// One TCP segment's part in its stream.
pub struct TcpSegment<'a> {
    pub position: TcpPosition,
    /// The payload the capture holds.
    pub data: &'a [u8],
    /// Payload bytes the headers declare beyond `data` (cut by the snap length).
    pub cut: usize,
    pub ts: SystemTime,
    /// False for a segment streamed only to be recorded (`trace --record`): it completes
    /// messages begun in segments for analysis, and what begins in it is left out, as a trace
    /// without recording never sees it.
    pub for_analysis: bool,
}

impl<C> TcpStreams<C> {
    /// Streams whose early segments wait for the ones before them when `wait_ahead`, and are
    /// otherwise read at once, the bytes before them taken as lost.
    pub fn new(wait_ahead: bool) -> Self {
        Self {
            streams: LinkedHashMap::new(),
            wait_ahead,
            held_bytes: 0,
            counts: StreamCounts::default(),
        }
    }

    pub fn counts(&self) -> StreamCounts {
        self.counts
    }

    /// Takes `segment` of the stream `key` (reported in `context()` when it is new), and gives
    /// `emit` each message it completes.
    pub fn segment(
        &mut self,
        key: StreamKey,
        context: impl FnOnce() -> C,
        segment: &TcpSegment,
        emit: &mut impl FnMut(&C, StreamMessage),
    ) {
        let position = segment.position;
        let data_seq = if position.syn {
            // A SYN starts the stream afresh: its sequence number is the SYN's own.
            if let Some(old) = self.streams.remove(&key) {
                self.close(old, emit);
            }
            position.seq.wrapping_add(1)
        } else {
            position.seq
        };
        let synced_from_start = position.syn;
        let stream = match self.streams.to_back(&key) {
            Some(stream) => stream,
            None => {
                self.streams.insert(
                    key,
                    Stream::new(
                        context(),
                        data_seq,
                        synced_from_start,
                        self.wait_ahead,
                        segment.ts,
                    ),
                );
                self.streams
                    .get_mut(&key)
                    .expect("the stream was inserted just now")
            }
        };
        stream.last_ts = segment.ts;
        let held_before = stream.held();
        if !segment.data.is_empty() || segment.cut > 0 {
            stream.receive(
                Piece {
                    seq: data_seq,
                    data: segment.data.to_vec(),
                    cut: segment.cut,
                    ts: segment.ts,
                    for_analysis: segment.for_analysis,
                },
                &mut self.counts,
                emit,
            );
        }
        self.held_bytes = self.held_bytes + stream.held() - held_before;
        if position.fin || position.rst {
            if let Some(stream) = self.streams.remove(&key) {
                self.close(stream, emit);
            }
        }
        while self.streams.len() > MAX_STREAMS || self.held_bytes > MAX_HELD_BYTES {
            let Some((_, stream)) = self.streams.pop_front() else {
                break;
            };
            self.close(stream, emit);
        }
    }

    /// Lets go of `stream`, giving what it still holds.
    fn close(&mut self, stream: Stream<C>, emit: &mut impl FnMut(&C, StreamMessage)) {
        self.held_bytes -= stream.held();
        stream.close(&mut self.counts, emit);
    }

    /// Lets go of the streams silent since before `now - IDLE`, giving what they still hold.
    pub fn expire(&mut self, now: SystemTime, emit: &mut impl FnMut(&C, StreamMessage)) {
        while let Some((_, stream)) = self.streams.front() {
            let idle = now
                .duration_since(stream.last_ts)
                .is_ok_and(|since| since >= IDLE);
            if !idle {
                break;
            }
            if let Some((_, stream)) = self.streams.pop_front() {
                self.close(stream, emit);
            }
        }
    }

    /// The input ended: gives what every stream still holds.
    pub fn finish(&mut self, emit: &mut impl FnMut(&C, StreamMessage)) {
        while let Some((_, stream)) = self.streams.pop_front() {
            self.close(stream, emit);
        }
    }
}

/// Bytes of a stream from `seq` on: `data` as held, then `cut` bytes the capture does not hold.
struct Piece {
    seq: u32,
    data: Vec<u8>,
    cut: usize,
    ts: SystemTime,
    for_analysis: bool,
}

struct Stream<C> {
    context: C,
    /// The sequence number of the next byte in order.
    next_seq: u32,
    /// Whether `buffer` starts at a message's length prefix. False when the stream was met
    /// after its start, or after a gap that hid where the next message starts.
    synced: bool,
    /// Bytes in order not yet taken out as messages.
    buffer: Vec<u8>,
    /// While not synced: where in `buffer` each segment starts, the places a message may.
    segment_starts: Vec<usize>,
    /// Bytes still to pass over: the rest of a message a gap cut, whose end its length told.
    skip: usize,
    /// Where in `buffer` each segment's bytes start, and whether it was given for analysis.
    /// A message that starts before the latest segment's spans segments.
    analysed_from: Vec<(usize, bool)>,
    /// Segments that came before the ones they follow, in arrival order; `wait_ahead` as in
    /// `TcpStreams`.
    ahead: Vec<Piece>,
    wait_ahead: bool,
    last_ts: SystemTime,
}

impl<C> Stream<C> {
    fn new(context: C, next_seq: u32, synced: bool, wait_ahead: bool, ts: SystemTime) -> Self {
        Self {
            context,
            next_seq,
            synced,
            buffer: Vec::new(),
            segment_starts: Vec::new(),
            skip: 0,
            analysed_from: Vec::new(),
            ahead: Vec::new(),
            wait_ahead,
            last_ts: ts,
        }
    }

    /// Where in `buffer` the latest segment's bytes start (0 when it holds none).
    fn latest_segment_start(&self) -> usize {
        self.analysed_from.last().map_or(0, |&(start, _)| start)
    }

    /// Whether the byte at `offset` of `buffer` came in a segment given for analysis.
    fn for_analysis_at(&self, offset: usize) -> bool {
        self.analysed_from
            .iter()
            .rev()
            .find(|(start, _)| *start <= offset)
            .is_none_or(|&(_, for_analysis)| for_analysis)
    }

    /// `count` bytes were taken from the front of `buffer`.
    fn drained(&mut self, count: usize) {
        for (start, _) in &mut self.analysed_from {
            *start = start.saturating_sub(count);
        }
        // Of the segments that now start at the front, the last holds the front.
        let at_front = self
            .analysed_from
            .iter()
            .take_while(|(start, _)| *start == 0)
            .count();
        if at_front > 1 {
            self.analysed_from.drain(..at_front - 1);
        }
    }

    /// The bytes it holds: in order, and waiting ahead.
    fn held(&self) -> usize {
        self.buffer.len()
            + self
                .ahead
                .iter()
                .map(|piece| piece.data.len())
                .sum::<usize>()
    }

    /// How far `seq` lies past the next byte in order (negative: before it).
    fn distance(&self, seq: u32) -> i64 {
        i64::from(seq.wrapping_sub(self.next_seq) as i32)
    }

    fn receive(
        &mut self,
        piece: Piece,
        counts: &mut StreamCounts,
        emit: &mut impl FnMut(&C, StreamMessage),
    ) {
        if self.distance(piece.seq) > 0 {
            counts.out_of_order += 1;
            let ts = piece.ts;
            self.ahead.push(piece);
            let waited_long = self.ahead.first().is_some_and(|first| {
                ts.duration_since(first.ts)
                    .is_ok_and(|waited| waited >= AHEAD_WAIT)
            });
            if !self.wait_ahead || waited_long || self.ahead.len() > MAX_AHEAD {
                self.skip_to_ahead(counts, emit);
            }
            return;
        }
        self.take_in_order(piece, counts, emit);
        self.take_ahead(counts, emit);
    }

    /// Takes `piece`, which starts at or before the next byte in order.
    fn take_in_order(
        &mut self,
        piece: Piece,
        counts: &mut StreamCounts,
        emit: &mut impl FnMut(&C, StreamMessage),
    ) {
        let seen = usize::try_from(-self.distance(piece.seq)).unwrap_or(0);
        let total = piece.data.len() + piece.cut;
        if seen >= total {
            counts.retransmissions += 1;
            return;
        }
        let (data, cut) = if seen <= piece.data.len() {
            (&piece.data[seen..], piece.cut)
        } else {
            (&[][..], total - seen)
        };
        self.take(data, piece.ts, piece.for_analysis, counts, emit);
        if cut > 0 {
            self.lose(cut, piece.ts, counts, emit);
        }
    }

    /// Takes the segments waiting ahead that are now in order.
    fn take_ahead(&mut self, counts: &mut StreamCounts, emit: &mut impl FnMut(&C, StreamMessage)) {
        while let Some(index) = self
            .ahead
            .iter()
            .position(|piece| self.distance(piece.seq) <= 0)
        {
            let piece = self.ahead.swap_remove(index);
            self.take_in_order(piece, counts, emit);
        }
    }

    /// Gives up on the bytes before the nearest segment waiting ahead: they are lost.
    fn skip_to_ahead(
        &mut self,
        counts: &mut StreamCounts,
        emit: &mut impl FnMut(&C, StreamMessage),
    ) {
        let Some(nearest) = self
            .ahead
            .iter()
            .map(|piece| self.distance(piece.seq))
            .min()
        else {
            return;
        };
        let ts = self.last_ts;
        self.lose(usize::try_from(nearest).unwrap_or(0), ts, counts, emit);
        self.take_ahead(counts, emit);
    }

    fn take(
        &mut self,
        data: &[u8],
        ts: SystemTime,
        for_analysis: bool,
        counts: &mut StreamCounts,
        emit: &mut impl FnMut(&C, StreamMessage),
    ) {
        if data.is_empty() {
            return;
        }
        if !self.synced {
            self.segment_starts.push(self.buffer.len());
        }
        self.analysed_from.push((self.buffer.len(), for_analysis));
        self.buffer.extend_from_slice(data);
        self.next_seq = self.next_seq.wrapping_add(data.len() as u32);
        self.extract(ts, counts, emit);
        if !self.wait_ahead {
            self.give_what_is_held(ts, counts, emit);
        }
    }

    /// Where a stream's segments are streamed only when worth it, the rest of a message begun
    /// seldom comes: the message is given at once as held, if its header is, and its rest
    /// passed over should it come.
    fn give_what_is_held(
        &mut self,
        ts: SystemTime,
        counts: &mut StreamCounts,
        emit: &mut impl FnMut(&C, StreamMessage),
    ) {
        let Some(declared) = declared_len(&self.buffer) else {
            return;
        };
        let end = PREFIX + declared;
        if self.buffer.len() < PREFIX + DNS_HEADER_LEN || self.buffer.len() >= end {
            return;
        }
        // Met mid-stream, as such streams are: the segment must start with a query or reply
        // whose header and question it holds.
        if !self.synced {
            if !starts_with_question(&self.buffer) {
                return;
            }
            self.synced = true;
            self.segment_starts.clear();
        }
        self.skip = self.give_front_as_held(declared, ts, counts, emit);
    }

    /// Takes out every whole message at the front of `buffer`.
    fn extract(
        &mut self,
        ts: SystemTime,
        counts: &mut StreamCounts,
        emit: &mut impl FnMut(&C, StreamMessage),
    ) {
        let mut start = 0;
        loop {
            if self.skip > 0 {
                let passed = self.skip.min(self.buffer.len() - start);
                start += passed;
                self.skip -= passed;
                if self.skip > 0 {
                    break;
                }
            }
            if !self.synced {
                match self.find_message(start, counts) {
                    Some(found) => start = found,
                    None => {
                        start = self.buffer.len();
                        break;
                    }
                }
                if !self.synced {
                    break;
                }
            }
            let Some(len) = declared_len(&self.buffer[start..]) else {
                break;
            };
            let end = start + PREFIX + len;
            if end > self.buffer.len() {
                break;
            }
            if start < self.latest_segment_start() {
                counts.messages_across_segments += 1;
            }
            emit(
                &self.context,
                StreamMessage {
                    bytes: &self.buffer[start + PREFIX..end],
                    len,
                    ts,
                    for_analysis: self.for_analysis_at(start),
                },
            );
            start = end;
        }
        self.buffer.drain(..start);
        self.drained(start);
        for segment_start in &mut self.segment_starts {
            *segment_start = segment_start.saturating_sub(start);
        }
    }

    /// While not synced: the first segment start at or after `from` where a message plainly
    /// starts (the stream is then synced there), or where one may once more bytes come;
    /// `None` when no segment start can, and everything held is passed over.
    fn find_message(&mut self, from: usize, counts: &mut StreamCounts) -> Option<usize> {
        let candidates: Vec<usize> = self
            .segment_starts
            .iter()
            .copied()
            .filter(|&start| start >= from)
            .collect();
        for start in candidates {
            match starts_message(&self.buffer[start..]) {
                Verdict::Yes => {
                    counts.bytes_skipped += (start - from) as u64;
                    self.synced = true;
                    self.segment_starts.clear();
                    return Some(start);
                }
                Verdict::NotYet => {
                    counts.bytes_skipped += (start - from) as u64;
                    self.segment_starts.retain(|&kept| kept >= start);
                    return Some(start);
                }
                Verdict::No => {}
            }
        }
        counts.bytes_skipped += (self.buffer.len() - from) as u64;
        self.segment_starts.clear();
        None
    }

    /// Gives the message at the front of `buffer`, of `declared` bytes, as far as it is held,
    /// and lets go of it; returns how many of its bytes are missing.
    fn give_front_as_held(
        &mut self,
        declared: usize,
        ts: SystemTime,
        counts: &mut StreamCounts,
        emit: &mut impl FnMut(&C, StreamMessage),
    ) -> usize {
        let missing = PREFIX + declared - self.buffer.len();
        counts.messages_cut += 1;
        emit(
            &self.context,
            StreamMessage {
                bytes: &self.buffer[PREFIX..],
                len: declared,
                ts,
                for_analysis: self.for_analysis_at(0),
            },
        );
        self.buffer.clear();
        self.analysed_from.clear();
        missing
    }

    /// `len` bytes from the next in order on never arrived.
    fn lose(
        &mut self,
        len: usize,
        ts: SystemTime,
        counts: &mut StreamCounts,
        emit: &mut impl FnMut(&C, StreamMessage),
    ) {
        if len == 0 {
            return;
        }
        counts.gaps += 1;
        counts.bytes_lost += len as u64;
        self.next_seq = self.next_seq.wrapping_add(len as u32);
        let mut unknown = len;
        if self.synced {
            let passed = self.skip.min(unknown);
            self.skip -= passed;
            unknown -= passed;
            if unknown == 0 {
                return;
            }
            if let Some(declared) = declared_len(&self.buffer) {
                // The gap cuts the message at the front: give it as held, and pass over the
                // rest of it when the gap ends inside it.
                let missing = self.give_front_as_held(declared, ts, counts, emit);
                if unknown <= missing {
                    self.skip = missing - unknown;
                    return;
                }
            }
        }
        counts.bytes_skipped += self.buffer.len() as u64;
        self.buffer.clear();
        self.analysed_from.clear();
        self.segment_starts.clear();
        self.skip = 0;
        self.synced = false;
    }

    /// The stream ended: what waited ahead is taken after its gap, and a message begun and
    /// never finished is counted.
    fn close(mut self, counts: &mut StreamCounts, emit: &mut impl FnMut(&C, StreamMessage)) {
        while !self.ahead.is_empty() {
            self.skip_to_ahead(counts, emit);
        }
        if self.synced && !self.buffer.is_empty() {
            counts.messages_unfinished += 1;
        }
    }
}

/// Whether `bytes`, a segment's payload from its start, start with a message's length prefix
/// and a standard query or its reply whose header and one question they hold.
fn starts_with_question(bytes: &[u8]) -> bool {
    let Some(len) = declared_len(bytes).filter(|&len| len >= DNS_HEADER_LEN) else {
        return false;
    };
    let message = &bytes[PREFIX..bytes.len().min(PREFIX + len)];
    message
        .get(..DNS_HEADER_LEN)
        .is_some_and(is_standard_header)
        && holds_question(message)
}

/// Whether `header` is a standard query's or reply's, with one question.
fn is_standard_header(header: &[u8]) -> bool {
    let opcode = (header[2] >> 3) & 0x0f;
    let questions = u16::from_be_bytes([header[4], header[5]]);
    opcode == 0 && questions == 1
}

/// Whether `message`, as far as held, parses through its first question.
fn holds_question(message: &[u8]) -> bool {
    let mut buffer = [0u8; DNS_BUF_LEN];
    let held = message.len().min(DNS_BUF_LEN);
    buffer[..held].copy_from_slice(&message[..held]);
    parse_dns(&buffer, held).is_ok_and(|summary| summary.question.is_some())
}

/// The length the prefix at the front of `bytes` declares, if `bytes` holds it.
fn declared_len(bytes: &[u8]) -> Option<usize> {
    match bytes {
        [hi, lo, ..] => Some(usize::from(u16::from_be_bytes([*hi, *lo]))),
        _ => None,
    }
}

enum Verdict {
    Yes,
    No,
    NotYet,
}

/// Whether `bytes`, read from a segment's start after a gap, start with a whole DNS message:
/// a length prefix, then a standard query or its reply with one question, which decodes in
/// full. Strict, as it must be: reading a message's middle as a message would invent one.
fn starts_message(bytes: &[u8]) -> Verdict {
    let Some(len) = declared_len(bytes) else {
        return Verdict::NotYet;
    };
    if len < DNS_HEADER_LEN {
        return Verdict::No;
    }
    let Some(header) = bytes.get(PREFIX..PREFIX + DNS_HEADER_LEN) else {
        return Verdict::NotYet;
    };
    if !is_standard_header(header) {
        return Verdict::No;
    }
    let Some(message) = bytes.get(PREFIX..PREFIX + len) else {
        return Verdict::NotYet;
    };
    if holds_question(message) && Message::from_bytes(message).is_ok() {
        Verdict::Yes
    } else {
        Verdict::No
    }
}

#[cfg(test)]
mod tests;
