//! What the classifiers do with one packet.
#![expect(
    clippy::needless_borrows_for_generic_args,
    reason = "map keys and values passed by value would be copied onto the 512-byte BPF stack"
)]
#[macro_use]
mod entry_points;
mod counters;
mod drops;
mod forwarders;
mod hook;
#[expect(
    dead_code,
    reason = "each build (main.rs, before_5_17.rs) takes one `Linux`; the other's items go unused"
)]
pub mod linux;
mod maps;
mod queries;
mod questions;
mod stream;
mod truncations;

use aya_ebpf::helpers::bpf_ktime_get_ns;
use dnsloop_shared::{
    counter::Counter,
    parse::{
        classify, tcp_framing, udp_message, DnsHeader, DnsMessageRef, DnsSummary, LinkLayer,
        PacketBytes, PacketClass, Probe, Question, Skip, TcpFraming, Transport, MAX_TCP_MESSAGES,
    },
    point::{via_gateway, Direction, ObservationPoint, PointNamespaces, MAC_HEADER_LEN},
    question::Heat,
    record::{StreamReason, MALFORMED_SAMPLE_INTERVAL_NS},
};

pub use self::{
    drops::observe as observe_drop,
    hook::{Skb, Xdp},
};
use core::ops::ControlFlow;

use self::{
    hook::{Hook, HookBytes},
    linux::Linux,
    maps::{config, LastParse, PacketScratch, NO_POINT_SLOT},
};

/// Counts the packet at `hook`, seen in `direction`, and streams it if userspace needs it.
#[inline(always)]
pub fn observe<L: Linux, H: Hook>(hook: H, direction: Direction) {
    counters::bump(Counter::Packets);
    // Always there: a per-CPU array's one slot.
    let Some(scratch) = maps::packet_scratch() else {
        return;
    };
    let ifindex = hook.ifindex();
    let link = place(hook, ifindex, direction, scratch);
    let inspection = if classify_into(hook, link, scratch) {
        // SAFETY: the per-CPU value belongs to this program run until it returns.
        unsafe {
            (*scratch).netns_cookie = hook.loopback_netns_cookie();
            (*scratch).ifindex = ifindex;
            (*scratch).direction = direction as u8;
        }
        through_gateway(hook, direction, scratch);
        inspect_dns::<L, H>(&HookBytes(hook), scratch)
    } else {
        None
    };
    // SAFETY: as above.
    counters::count_point(unsafe { (*scratch).point_slot }, inspection.is_some());
    if inspection.is_some() {
        counters::bump(Counter::DnsPackets);
    }
    let reason = match inspection.and_then(|inspection| inspection.stream) {
        Some(reason) => Some(reason),
        None => malformed_sample(scratch),
    };
    if let Some(reason) = reason {
        // Built only now: what is live across the calls above shares their 512-byte stack.
        let point = ObservationPoint::new(hook.loopback_netns_cookie(), ifindex, direction as u8);
        stream::packet(hook, &point, link, reason, scratch);
    }
}

/// Finds the packet's point in the point table and notes it in `scratch`; returns how the
/// point's frames start.
///
/// What the table says goes to the per-CPU value rather than staying in registers: its contents
/// are opaque to the verifier, which would otherwise follow the rest of the program once for a
/// point found and once for a point missing (and the cookie, 0 on most paths and unknown on
/// loopback's, is asked again where needed for the same reason).
#[inline(always)]
fn place<H: Hook>(
    hook: H,
    ifindex: u32,
    direction: Direction,
    scratch: *mut PacketScratch,
) -> LinkLayer {
    let point = ObservationPoint::new(hook.loopback_netns_cookie(), ifindex, direction as u8);
    let placed = maps::place(&point);
    // SAFETY: the per-CPU value belongs to this program run until it returns.
    let scratch = unsafe { &mut *scratch };
    scratch.via_gateway = 0;
    match placed {
        Some(placed) => {
            scratch.point_slot = placed.slot;
            scratch.at = placed.namespaces;
            placed.link_layer
        }
        None => {
            scratch.point_slot = NO_POINT_SLOT;
            scratch.at = PointNamespaces::NONE;
            LinkLayer::Ethernet
        }
    }
}

/// Notes whether the DNS packet at `hook`, on a bridge port, was sent to or by the bridge itself
/// (see `PointSlot::gateway_mac`): it then also enters or leaves the node here, and `scratch.at`
/// says so. Only DNS packets ask: the rest of a node's packets never read their MACs.
#[inline(always)]
fn through_gateway<H: Hook>(hook: H, direction: Direction, scratch: *mut PacketScratch) {
    // SAFETY: the per-CPU value belongs to this program run until it returns.
    let scratch = unsafe { &mut *scratch };
    let Some(slot) = maps::POINTS.get(scratch.point_slot) else {
        return;
    };
    if slot.gateway_mac == 0 {
        return;
    }
    let Some(macs) = HookBytes(hook).read::<MAC_HEADER_LEN>(0) else {
        return;
    };
    if via_gateway(slot.gateway_mac, direction as u8, &macs) {
        scratch.at = slot.via_gateway;
        scratch.via_gateway = 1;
    }
}

/// `StreamReason::Malformed` if the packet was counted as malformed and this CPU has not
/// streamed one for `MALFORMED_SAMPLE_INTERVAL_NS`.
#[inline(always)]
fn malformed_sample(scratch: *mut PacketScratch) -> Option<StreamReason> {
    // SAFETY: the per-CPU value belongs to this program run until it returns.
    let scratch = unsafe { &mut *scratch };
    if scratch.malformed == 0 {
        return None;
    }
    // SAFETY: bpf_ktime_get_ns has no preconditions.
    let now = unsafe { bpf_ktime_get_ns() };
    if now.wrapping_sub(scratch.last_malformed_sample_ns) < MALFORMED_SAMPLE_INTERVAL_NS {
        return None;
    }
    scratch.last_malformed_sample_ns = now;
    // The record's time (a packet not inspected as DNS has none of its own yet).
    scratch.now_ns = now;
    // The sample carries nothing an earlier packet's inspection attached. (Cleared here rather
    // than where the packet is found malformed: the memset it compiles to is a call, and that
    // call chain would exceed Linux 6.1's stack limit.)
    scratch.matched_query.clear();
    scratch.clear_priors();
    Some(StreamReason::Malformed)
}

/// The outcome of looking at a DNS packet's messages.
struct Inspection {
    /// Why to stream the packet, if at all.
    stream: Option<StreamReason>,
}

/// Classifies the packet, counting what is not DNS; for DNS, stores its segment in `scratch`
/// and returns true.
///
/// Its own BPF function, not inlined: classification needs a deep stack frame, and the 512-byte
/// stack limit applies to a whole call chain, which later includes the `bpf_loop` body. As a
/// separate call its frame is gone by then.
#[inline(never)]
fn classify_into<H: Hook>(hook: H, link: LinkLayer, scratch: *mut PacketScratch) -> bool {
    // SAFETY: the per-CPU value belongs to this program run until it returns.
    unsafe { (*scratch).malformed = 0 };
    let ports = maps::dns_ports();
    let class = match hook::InPlace::of(hook) {
        Some(in_place) => classify(&in_place, link, &ports),
        None => classify(&HookBytes(hook), link, &ports),
    };
    match class {
        PacketClass::Dns(segment) => {
            // SAFETY: the per-CPU value belongs to this program run until it returns.
            unsafe { (*scratch).segment = segment };
            true
        }
        PacketClass::Skip(Skip::NonFirstFragment) => {
            counters::bump(Counter::NonFirstFragments);
            false
        }
        PacketClass::DnsPortUnreachable => {
            counters::bump(Counter::DnsPortUnreachable);
            false
        }
        PacketClass::Skip(_) => false,
        PacketClass::Malformed(reason) => {
            counters::bump_malformed(reason);
            // SAFETY: as above.
            unsafe { (*scratch).malformed = 1 };
            false
        }
    }
}

/// Parses the DNS messages of the segment in `scratch` and decides whether userspace needs the
/// packet. `None` when no message could be parsed (the packet is then not counted as DNS).
///
/// One call site parses every message, UDP's single one as TCP's several, inside a `bpf_loop`
/// where the kernel has one: the verifier re-checks a message's inspection (thousands of
/// instructions) per call site and per distinct state it is reached with, so unrolled calls
/// cost it dear. The packet's state lives in a per-CPU map value, not on the 512-byte stack
/// (which the loop body's frame shares), and its contents are opaque to the verifier, so the
/// loop body's state converges at once.
#[inline(always)]
fn inspect_dns<L: Linux, H: Hook>(
    packet: &HookBytes<H>,
    scratch: *mut PacketScratch,
) -> Option<Inspection> {
    frame_messages(packet, scratch);
    // Only the messages found: each `bpf_loop` iteration is an indirect call.
    // SAFETY: the per-CPU value belongs to this program run until it returns.
    let messages = unsafe { (*scratch).framing.count } as u32;
    L::each_message(
        messages,
        |index| {
            inspect_message::<L, H>(packet, scratch, index & (MAX_TCP_MESSAGES - 1));
            ControlFlow::Continue(())
        },
        || follow_noted_question(packet, scratch),
    );
    // SAFETY: as above.
    let scratch = unsafe { &mut *scratch };
    if scratch.framing.split {
        counters::bump(Counter::TcpSplits);
        scratch.stream_unless_set(StreamReason::TcpSplit);
    }
    if scratch.framing.more {
        counters::bump(Counter::TcpMessagesBeyondLimit);
    }
    // A split segment is DNS even when it holds too little of its message to parse.
    (scratch.parsed != 0 || scratch.framing.split).then(|| Inspection {
        stream: scratch
            .stream_reason()
            .or_else(|| (config().record_every_packet != 0).then_some(StreamReason::Recorded)),
    })
}

/// Resets `scratch` for a new packet and finds the messages of its segment.
///
/// Its own BPF function for the same reason as `classify_into`: the framing is built on the
/// stack before it lands in the map, and must not share a call chain with the loop body.
#[inline(never)]
fn frame_messages<H: Hook>(packet: &HookBytes<H>, scratch: *mut PacketScratch) {
    let stream_every_packet = config().stream_every_packet != 0;
    // SAFETY: the per-CPU value belongs to this program run until it returns.
    let scratch = unsafe { &mut *scratch };
    // SAFETY: bpf_ktime_get_ns has no preconditions.
    scratch.now_ns = unsafe { bpf_ktime_get_ns() };
    scratch.parsed = 0;
    scratch.stream = if stream_every_packet {
        StreamReason::EveryPacket as u8 + 1
    } else {
        0
    };
    scratch.matched_query.clear();
    scratch.clear_priors();
    let segment = scratch.segment;
    match segment.transport {
        Transport::Udp => single_message(&mut scratch.framing, udp_message(&segment)),
        Transport::Tcp => scratch.framing = tcp_framing(packet, &segment),
    }
}

/// Puts a UDP datagram's one message in the shape of a TCP segment's framing: the other slots
/// get length 0, which marks them unused.
#[inline(always)]
fn single_message(framing: &mut TcpFraming, message: DnsMessageRef) {
    // Slot by slot: an array literal compiles to a `memset` call (see `stores`).
    framing.messages[0] = message;
    for slot in &mut framing.messages[1..] {
        slot.len = 0;
    }
    framing.count = 1;
    framing.split = false;
    framing.more = false;
}

/// What the message this CPU parsed last held, if `message` is that message seen again further
/// on its way (one pod's veth, then another's): parsing it again would copy it and walk its
/// question's name; comparing costs a read of its first four bytes, only for a candidate.
#[inline(always)]
fn parsed_just_before<H: Hook>(
    packet: &HookBytes<H>,
    message: &DnsMessageRef,
    scratch: &PacketScratch,
) -> Option<DnsSummary> {
    let last = &scratch.last_parse;
    if last.parsed == 0 || !last.seen.just_before_elsewhere(scratch) {
        return None;
    }
    let [id_high, id_low, flags_high, flags_low] = packet.read::<4>(message.offset)?;
    let (id, flags) = (
        u16::from_be_bytes([id_high, id_low]),
        u16::from_be_bytes([flags_high, flags_low]),
    );
    last.is_seen_again(scratch, message.offset, id, flags)
        .then(|| last.summary())
}

/// Parses message `index` of the packet in `scratch`, recording whether it parsed and why to
/// stream the packet. Unused slots have length 0.
#[inline(always)]
fn inspect_message<L: Linux, H: Hook>(
    packet: &HookBytes<H>,
    scratch: *mut PacketScratch,
    index: usize,
) {
    // SAFETY: the per-CPU value belongs to this program run until it returns.
    let scratch = unsafe { &mut *scratch };
    let message = scratch.framing.messages[index];
    if message.len == 0 {
        return;
    }
    let summary = match parsed_just_before(packet, &message, scratch) {
        Some(summary) => summary,
        None => {
            scratch.last_parse.parsed = 0;
            let load_len = message.load_len(&scratch.segment);
            let Some((buffer, len)) = hook::load_dns_buffer(packet, message.offset, load_len)
            else {
                return;
            };
            let Some(parsed) = L::parse_dns(buffer, len, &mut scratch.name_walk) else {
                return;
            };
            let summary = match parsed {
                Ok(summary) => summary,
                // A message cut by the segment's end is not malformed: the rest is in the next
                // segment.
                Err(_) if !message.complete => return,
                Err(reason) => {
                    counters::bump_malformed(reason);
                    scratch.malformed = 1;
                    return;
                }
            };
            LastParse::note(scratch, message.offset, &summary);
            summary
        }
    };
    counters::bump(Counter::DnsMessages);
    scratch.parsed = 1;
    if L::FOLLOW_APART {
        scratch.question_to_follow = 1;
    } else if let Some(question) = summary.question {
        follow_question(packet, scratch, message.offset, summary.header, &question);
    }
}

/// Follows the question of the message `inspect_message` just parsed, if it has one and left
/// it to follow apart (`Linux::FOLLOW_APART`), as `scratch.last_parse` holds it.
#[inline(always)]
fn follow_noted_question<H: Hook>(packet: &HookBytes<H>, scratch: *mut PacketScratch) {
    // SAFETY: the per-CPU value belongs to this program run until it returns.
    let scratch = unsafe { &mut *scratch };
    if scratch.question_to_follow == 0 {
        return;
    }
    scratch.question_to_follow = 0;
    let Some(question) = scratch.last_parse.question() else {
        return;
    };
    let (header, message_offset) = (
        scratch.last_parse.header,
        scratch.last_parse.message_offset as usize,
    );
    follow_question(packet, scratch, message_offset, header, &question);
}

/// Follows the `question` of the message with `header` at `message_offset` of the packet in
/// `scratch`: its query or answer, its heat; decides whether to stream the packet for it.
#[inline(always)]
fn follow_question<H: Hook>(
    packet: &HookBytes<H>,
    scratch: &mut PacketScratch,
    message_offset: usize,
    header: DnsHeader,
    question: &Question,
) {
    let id = header.id;
    // With every packet streamed, userspace has the queries already: nothing to attach.
    let attach_unstreamed = config().stream_every_packet == 0;
    if header.qr() {
        forwarders::note_responder(&scratch.segment);
        if let Some(query) = queries::answered_at_client(header, scratch) {
            if attach_unstreamed && queries::from_elsewhere(&scratch.segment, &query) {
                scratch.matched_query.copy_from(&query);
                scratch.stream_because(StreamReason::UnexpectedSource);
            } else if query.retried != 0 {
                // The retry was streamed: so is its answer, or the query would look unanswered.
                scratch.stream_unless_set(StreamReason::Retried);
            } else if attach_unstreamed && header.tc() {
                truncations::note_answer(question, scratch);
                scratch.matched_query.copy_from(&query);
                scratch.stream_because(StreamReason::Truncated);
            }
        }
    } else {
        // A retry over TCP is streamed, and so is its answer (`QueryState::retried`): the
        // truncated answer's client is then seen asking again, and answered.
        let retry_over_tcp = attach_unstreamed && truncations::retries_over_tcp(question, scratch);
        if retry_over_tcp {
            scratch.stream_unless_set(StreamReason::Truncated);
        }
        if let Some(first) = queries::remember(
            packet,
            message_offset,
            question,
            id,
            retry_over_tcp,
            scratch,
        ) {
            if attach_unstreamed {
                scratch.matched_query.copy_from(&first);
                scratch.stream_because(StreamReason::Retried);
            }
        }
    }
    let window = config().hot_window_ns;
    if !matches!(question.probe, Probe::None) {
        scratch.stream_unless_set(StreamReason::Probe);
    } else if header.qr() {
        if questions::answer_sighting(question, window, scratch) {
            scratch.stream_unless_set(StreamReason::HotQuestion);
        }
    } else {
        match questions::query_sighting(question, id, window, scratch) {
            Heat::Cold => {}
            Heat::BecameHot | Heat::Hot => scratch.stream_unless_set(StreamReason::HotQuestion),
        }
        if !attach_unstreamed {
            scratch.clear_priors();
        }
    }
}
