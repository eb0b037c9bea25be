//! The stream reassembler on hand-cut streams: every way a TCP sender or a capture splits,
//! repeats, reorders or loses DNS messages.
use std::{
    net::SocketAddr,
    time::{Duration, SystemTime},
};

use dnsloop_frames::{dns_query, dns_response, tcp_stream, QTYPE_A};
use dnsloop_shared::{parse::TcpPosition, point::Direction};

use super::*;
use crate::points::{InterfaceRef, Seen};

/// The client's initial sequence number: near the top, so that the streams wrap around 0.
const ISN: u32 = u32::MAX - 40;

fn key() -> StreamKey {
    StreamKey {
        seen: Seen {
            interface: InterfaceRef {
                netns_cookie: 0,
                ifindex: 3,
            },
            direction: Direction::Egress,
            via_gateway: false,
        },
        src: "10.0.0.1:40000".parse::<SocketAddr>().unwrap(),
        dst: "10.96.0.10:53".parse::<SocketAddr>().unwrap(),
    }
}

fn at(millis: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_millis(millis)
}

/// A stream being fed by hand, and the messages it gave, each with when.
struct Feed {
    streams: TcpStreams<()>,
    messages: Vec<(Vec<u8>, usize, SystemTime)>,
    /// Whether each message began in a segment given for analysis.
    analysed: Vec<bool>,
    clock: u64,
}

impl Feed {
    fn new(wait_ahead: bool) -> Self {
        Self {
            streams: TcpStreams::new(wait_ahead),
            messages: Vec::new(),
            analysed: Vec::new(),
            clock: 0,
        }
    }

    fn send(&mut self, seq: u32, data: &[u8], cut: usize, flags: (bool, bool, bool)) {
        self.send_for(seq, data, cut, flags, true);
    }

    /// As `send`, the segment given for analysis or only to be recorded.
    fn send_for(
        &mut self,
        seq: u32,
        data: &[u8],
        cut: usize,
        flags: (bool, bool, bool),
        for_analysis: bool,
    ) {
        self.clock += 1;
        let (syn, fin, rst) = flags;
        let segment = TcpSegment {
            position: TcpPosition { seq, syn, fin, rst },
            data,
            cut,
            ts: at(self.clock),
            for_analysis,
        };
        let messages = &mut self.messages;
        let analysed = &mut self.analysed;
        self.streams
            .segment(key(), || (), &segment, &mut |_, message| {
                messages.push((message.bytes.to_vec(), message.len, message.ts));
                analysed.push(message.for_analysis);
            });
    }

    /// `data` at `offset` bytes into the stream after the SYN.
    fn data(&mut self, offset: u32, data: &[u8]) {
        self.send(
            ISN.wrapping_add(1).wrapping_add(offset),
            data,
            0,
            (false, false, false),
        );
    }

    fn syn(&mut self) {
        self.send(ISN, &[], 0, (true, false, false));
    }

    fn fin(&mut self, offset: u32) {
        self.send(
            ISN.wrapping_add(1).wrapping_add(offset),
            &[],
            0,
            (false, true, false),
        );
    }

    fn bytes(&self) -> Vec<Vec<u8>> {
        self.messages
            .iter()
            .map(|(bytes, ..)| bytes.clone())
            .collect()
    }
}

fn queries() -> (Vec<u8>, Vec<u8>, Vec<u8>) {
    (
        dns_query(0x0101, "api.default.svc.cluster.local", QTYPE_A),
        dns_query(0x0202, "www.example.test", QTYPE_A),
        dns_response(0x0303, "kubernetes.default.svc.cluster.local", QTYPE_A),
    )
}

#[test]
fn a_length_alone_in_its_segment_is_joined_to_the_message_after_it() {
    let (query, ..) = queries();
    let stream = tcp_stream(&[&query]);
    for with_syn in [true, false] {
        let mut feed = Feed::new(true);
        if with_syn {
            feed.syn();
        }
        feed.data(0, &stream[..2]);
        assert!(feed.messages.is_empty(), "a length is no message");
        feed.data(2, &stream[2..]);
        assert_eq!(feed.bytes(), vec![query.clone()], "with SYN: {with_syn}");
        assert_eq!(
            feed.messages[0].2,
            at(feed.clock),
            "when its last byte came"
        );
        assert_eq!(feed.streams.counts().messages_across_segments, 1);
    }
}

#[test]
fn several_messages_in_one_segment_and_one_across_three() {
    let (first, second, third) = queries();
    let stream = tcp_stream(&[&first, &second, &third]);
    let mut feed = Feed::new(true);
    feed.syn();
    let two = first.len() + second.len() + 4;
    feed.data(0, &stream[..two]);
    assert_eq!(feed.bytes(), vec![first.clone(), second.clone()]);
    feed.data(two as u32, &stream[two..two + 5]);
    feed.data(two as u32 + 5, &stream[two + 5..two + 20]);
    feed.data(two as u32 + 20, &stream[two + 20..]);
    assert_eq!(feed.bytes(), vec![first, second, third]);
    assert_eq!(feed.streams.counts().messages_across_segments, 1);
}

#[test]
fn retransmitted_and_reordered_segments_give_each_message_once_in_order() {
    let (first, second, _) = queries();
    let stream = tcp_stream(&[&first, &second]);
    let split = first.len() + 2;
    let mut feed = Feed::new(true);
    feed.syn();
    feed.data(split as u32, &stream[split..]);
    assert!(feed.messages.is_empty(), "the second waits for the first");
    feed.data(0, &stream[..split]);
    feed.data(0, &stream[..split]);
    // Overlapping the end of what came: only the new bytes are taken.
    feed.data(split as u32 - 4, &stream[split - 4..]);
    assert_eq!(feed.bytes(), vec![first, second]);
    let counts = feed.streams.counts();
    assert_eq!(counts.out_of_order, 1);
    assert_eq!(counts.retransmissions, 2);
    assert_eq!(counts.gaps, 0);
}

#[test]
fn a_gap_cuts_its_message_and_the_next_message_is_found_at_a_segment_start() {
    let (first, second, third) = queries();
    let stream = tcp_stream(&[&first, &second, &third]);
    let second_start = first.len() + 2;
    let third_start = second_start + second.len() + 2;
    let mut feed = Feed::new(true);
    feed.syn();
    feed.data(0, &stream[..second_start + 10]);
    // The rest of the second message and the start of the third are never captured.
    feed.data(third_start as u32 + 6, &stream[third_start + 6..]);
    feed.fin(stream.len() as u32);
    let counts = feed.streams.counts();
    assert_eq!(counts.gaps, 1);
    assert_eq!(
        counts.bytes_lost,
        (third_start + 6 - second_start - 10) as u64
    );
    assert_eq!(counts.messages_cut, 1, "the second, as far as it was held");
    assert_eq!(feed.messages.len(), 2, "the third is never guessed at");
    assert_eq!(feed.bytes()[0], first);
    assert_eq!(feed.messages[1].0, second[..8], "the second's held part");
    assert_eq!(feed.messages[1].1, second.len());
}

#[test]
fn a_gap_inside_a_message_skips_to_its_known_end() {
    let (first, second, _) = queries();
    let stream = tcp_stream(&[&first, &second]);
    let second_start = first.len() + 2;
    let mut feed = Feed::new(true);
    feed.syn();
    feed.data(0, &stream[..10]);
    // A snap length cut the segment that held the rest of the first message.
    feed.send(
        ISN.wrapping_add(11),
        &stream[10..20],
        second_start - 20,
        (false, false, false),
    );
    feed.data(second_start as u32, &stream[second_start..]);
    assert_eq!(feed.messages.len(), 2);
    assert_eq!(feed.messages[0].0, first[..18], "the first as held");
    assert_eq!(
        feed.bytes()[1],
        second,
        "its length told where the next begins"
    );
    assert_eq!(feed.streams.counts().bytes_skipped, 0);
}

#[test]
fn a_stream_met_in_a_message_is_read_from_the_next_segment_that_starts_one() {
    let (first, second, _) = queries();
    let stream = tcp_stream(&[&first, &second]);
    let second_start = first.len() + 2;
    let mut feed = Feed::new(true);
    // The capture began inside the first message: its tail is no message.
    feed.data(6, &stream[6..second_start]);
    feed.data(second_start as u32, &stream[second_start..]);
    assert_eq!(feed.bytes(), vec![second]);
    assert_eq!(
        feed.streams.counts().bytes_skipped,
        (second_start - 6) as u64
    );
}

#[test]
fn a_continuation_read_alone_is_never_a_message() {
    // The bytes of a message from its ID on, without their length: what a reader that takes
    // every segment as starting with a message misreads as a query with ID 256 and no name.
    let (query, ..) = queries();
    let stream = tcp_stream(&[&query]);
    let mut feed = Feed::new(true);
    feed.data(2, &stream[2..]);
    feed.fin(stream.len() as u32);
    assert!(feed.messages.is_empty(), "{:?}", feed.messages);
}

#[test]
fn sampled_streams_read_a_later_segment_at_once() {
    let (first, second, _) = queries();
    let stream = tcp_stream(&[&first, &second]);
    let second_start = first.len() + 2;
    let mut feed = Feed::new(false);
    feed.data(0, &stream[..second_start]);
    feed.data(second_start as u32 + 100, &tcp_stream(&[&second]));
    assert_eq!(feed.bytes(), vec![first, second]);
}

#[test]
fn a_message_still_open_when_the_stream_ends_is_counted() {
    let (query, ..) = queries();
    let stream = tcp_stream(&[&query]);
    let mut feed = Feed::new(true);
    feed.syn();
    feed.data(0, &stream[..9]);
    feed.send(ISN.wrapping_add(10), &[], 0, (false, false, true));
    assert!(feed.messages.is_empty());
    assert_eq!(feed.streams.counts().messages_unfinished, 1);
}

#[test]
fn sampled_streams_give_a_message_begun_at_once_as_held() {
    // Only the first segment of a large reply is streamed: it is given as held, as a reader of
    // single segments would, and should the rest come after all, it is passed over.
    let (first, _, mut third) = queries();
    // Its answers, as far as the reader of its header and question cares.
    third.resize(third.len() + 200, 0xaa);
    let stream = tcp_stream(&[&third, &first]);
    let mut feed = Feed::new(false);
    // The header and the question: 2 + 12 + 38 + 4 bytes.
    feed.data(0, &stream[..60]);
    assert_eq!(feed.messages.len(), 1);
    assert_eq!(feed.messages[0].0, third[..58]);
    assert_eq!(feed.messages[0].1, third.len());
    feed.data(60, &stream[60..]);
    assert_eq!(
        feed.bytes()[1],
        first,
        "the rest passed over, the next read"
    );
    assert_eq!(feed.messages.len(), 2);
}

#[test]
fn a_message_is_for_analysis_when_it_began_in_a_segment_for_analysis() {
    // trace --record: the kernel streams the segment that starts a query it judged, and the
    // rest only to be recorded; and segments of queries it did not judge, only recorded.
    let (first, second, _) = queries();
    let stream = tcp_stream(&[&first, &second]);
    let second_start = first.len() + 2;
    let mut feed = Feed::new(true);
    feed.syn();
    let seq = |offset: usize| ISN.wrapping_add(1).wrapping_add(offset as u32);
    let none = (false, false, false);
    feed.send_for(seq(0), &stream[..10], 0, none, true);
    feed.send_for(seq(10), &stream[10..second_start + 6], 0, none, false);
    feed.send_for(
        seq(second_start + 6),
        &stream[second_start + 6..],
        0,
        none,
        false,
    );
    assert_eq!(feed.bytes(), vec![first, second]);
    assert_eq!(feed.analysed, [true, false]);
}
