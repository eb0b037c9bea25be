//! IPv4 and IPv6 datagrams put back together from their fragments, at each point they were
//! seen, so that a DNS reply larger than the path's MTU is read whole, as the host it reached
//! read it.
//!
//! A datagram whose fragments do not all arrive is never completed by guesswork. When its first
//! fragment was DNS, it is counted and named, and that fragment, which holds the header and the
//! question, is given on its own: a capture filtered on port 53 holds only first fragments, and
//! the reply they carry was sent all the same.
use std::{
    net::IpAddr,
    time::{Duration, SystemTime},
};

use dnsloop_shared::parse::{IpFamily, IpFragment, LinkLayer};
use hashlink::LinkedHashMap;

use crate::{points::Seen, source::socket_addr};

/// A datagram being reassembled: where it was seen, and the fields that tell its fragments.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct DatagramKey {
    seen: Seen,
    family: IpFamily,
    src: [u8; 16],
    dst: [u8; 16],
    id: u32,
    protocol: u8,
}

/// What reassembly met, over a run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FragmentCounts {
    /// Fragments taken in.
    pub fragments: u64,
    /// Datagrams put back together.
    pub reassembled: u64,
    /// DNS datagrams some fragment of which never arrived, and up to
    /// [`INCOMPLETE_NAMED`] of them.
    pub incomplete: u64,
    pub incomplete_named: Vec<IncompleteDatagram>,
}

/// A DNS datagram that was never completed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IncompleteDatagram {
    /// When its first fragment was captured.
    pub ts: SystemTime,
    pub src: IpAddr,
    pub dst: IpAddr,
    pub id: u32,
    /// Payload bytes its fragments held, and its length when its last fragment came.
    pub held: usize,
    pub len: Option<usize>,
}

impl std::fmt::Display for IncompleteDatagram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} > {} id {:#x}: {} bytes",
            self.src, self.dst, self.id, self.held
        )?;
        match self.len {
            Some(len) => write!(f, " of {len}"),
            None => f.write_str(" (the last fragment never came)"),
        }
    }
}

/// Incomplete datagrams named in the summary; the rest are counted.
pub const INCOMPLETE_NAMED: usize = 16;
/// Fragments of one datagram cross a point back to back; one missing this long is lost.
pub const FRAGMENT_WAIT: Duration = Duration::from_secs(1);
/// Datagrams reassembled at once, and the bytes they may hold between them: the oldest is let
/// go first.
const MAX_DATAGRAMS: usize = 1024;
const MAX_HELD_BYTES: usize = 16 << 20;
const IPV4_HEADER_LEN: usize = 20;
const IPV6_HEADER_LEN: usize = 40;
const DEFAULT_TTL: u8 = 64;

/// A DNS first fragment, kept to be given alone if its datagram is never completed.
pub struct FirstFragment<C> {
    pub context: C,
    pub seen: Seen,
    pub ts: SystemTime,
    pub frame: Vec<u8>,
    pub link: LinkLayer,
}

struct Partial<C> {
    /// Each fragment's offset in the payload, and its data as held.
    pieces: Vec<(usize, Vec<u8>)>,
    /// The payload's length, once the last fragment came.
    len: Option<usize>,
    /// Some fragment was cut short by the capture: the datagram cannot be completed.
    cut: bool,
    first_ts: SystemTime,
    last_ts: SystemTime,
    held: usize,
    /// Set when its first fragment was DNS.
    first_dns: Option<FirstFragment<C>>,
}

/// The datagrams being reassembled, each with the context `C` it is reported in.
pub struct IpFragments<C> {
    datagrams: LinkedHashMap<DatagramKey, Partial<C>>,
    held_bytes: usize,
    counts: FragmentCounts,
}

impl<C> Default for IpFragments<C> {
    fn default() -> Self {
        Self {
            datagrams: LinkedHashMap::new(),
            held_bytes: 0,
            counts: FragmentCounts::default(),
        }
    }
}

/// One fragment, as the decoder hands it over.
pub struct Fragment<'a, C> {
    pub seen: Seen,
    pub ts: SystemTime,
    pub fields: &'a IpFragment,
    pub frame: &'a [u8],
    /// For a first fragment of a DNS datagram: what it is given in if its datagram is never
    /// completed.
    pub first_dns: Option<(C, LinkLayer)>,
}

impl<C> IpFragments<C> {
    pub fn counts(&self) -> &FragmentCounts {
        &self.counts
    }

    /// Takes `fragment`; returns its datagram as raw IP (header, then payload) once every
    /// fragment of it came. `gone` gets the first fragments of datagrams let go to make room.
    pub fn add(
        &mut self,
        fragment: Fragment<C>,
        gone: &mut impl FnMut(FirstFragment<C>),
    ) -> Option<Vec<u8>> {
        let fields = fragment.fields;
        self.counts.fragments += 1;
        let key = DatagramKey {
            seen: fragment.seen,
            family: fields.family,
            src: fields.src,
            dst: fields.dst,
            id: fields.id,
            protocol: fields.protocol,
        };
        let data = fragment
            .frame
            .get(fields.data_offset..fields.data_offset + fields.data_len)
            .unwrap_or_default();
        let partial = match self.datagrams.to_back(&key) {
            Some(partial) => partial,
            None => {
                self.datagrams.insert(
                    key,
                    Partial {
                        pieces: Vec::new(),
                        len: None,
                        cut: false,
                        first_ts: fragment.ts,
                        last_ts: fragment.ts,
                        held: 0,
                        first_dns: None,
                    },
                );
                self.datagrams
                    .get_mut(&key)
                    .expect("the datagram was inserted just now")
            }
        };
        partial.last_ts = fragment.ts;
        partial.cut |= fields.data_len < fields.declared_len;
        if !fields.more {
            partial.len = Some(fields.offset + fields.declared_len);
        }
        if let Some((context, link)) = fragment.first_dns {
            partial.first_dns = Some(FirstFragment {
                context,
                seen: fragment.seen,
                ts: fragment.ts,
                frame: fragment.frame.to_vec(),
                link,
            });
        }
        partial.held += data.len();
        self.held_bytes += data.len();
        partial.pieces.push((fields.offset, data.to_vec()));
        let payload = partial
            .len
            .filter(|_| !partial.cut)
            .and_then(|len| whole(&partial.pieces, len));
        if let Some(payload) = payload {
            let partial = self.datagrams.remove(&key)?;
            self.held_bytes -= partial.held;
            self.counts.reassembled += 1;
            return datagram(&key, &payload);
        }
        while self.datagrams.len() > MAX_DATAGRAMS || self.held_bytes > MAX_HELD_BYTES {
            let Some((key, partial)) = self.datagrams.pop_front() else {
                break;
            };
            self.let_go(&key, partial, gone);
        }
        None
    }

    /// Lets go of the datagrams still incomplete `FRAGMENT_WAIT` after their latest fragment.
    pub fn expire(&mut self, now: SystemTime, gone: &mut impl FnMut(FirstFragment<C>)) {
        while let Some((_, partial)) = self.datagrams.front() {
            let waited = now
                .duration_since(partial.last_ts)
                .is_ok_and(|since| since >= FRAGMENT_WAIT);
            if !waited {
                break;
            }
            if let Some((key, partial)) = self.datagrams.pop_front() {
                self.let_go(&key, partial, gone);
            }
        }
    }

    /// The input ended: lets go of every datagram still incomplete.
    pub fn finish(&mut self, gone: &mut impl FnMut(FirstFragment<C>)) {
        while let Some((key, partial)) = self.datagrams.pop_front() {
            self.let_go(&key, partial, gone);
        }
    }

    fn let_go(
        &mut self,
        key: &DatagramKey,
        partial: Partial<C>,
        gone: &mut impl FnMut(FirstFragment<C>),
    ) {
        self.held_bytes -= partial.held;
        // Only a DNS datagram is counted: the rest of a fragmented datagram is not known to be
        // DNS until its first fragment comes.
        let Some(first) = partial.first_dns else {
            return;
        };
        self.counts.incomplete += 1;
        if self.counts.incomplete_named.len() < INCOMPLETE_NAMED {
            self.counts.incomplete_named.push(IncompleteDatagram {
                ts: partial.first_ts,
                src: socket_addr(key.family, &key.src, 0).ip(),
                dst: socket_addr(key.family, &key.dst, 0).ip(),
                id: key.id,
                held: partial.held,
                len: partial.len,
            });
        }
        gone(first);
    }
}

/// The payload of `len` bytes the pieces cover without a hole, if they do.
fn whole(pieces: &[(usize, Vec<u8>)], len: usize) -> Option<Vec<u8>> {
    let mut sorted: Vec<&(usize, Vec<u8>)> = pieces.iter().collect();
    sorted.sort_by_key(|(offset, _)| *offset);
    let mut payload = Vec::with_capacity(len);
    for (offset, data) in sorted {
        if *offset > payload.len() {
            return None;
        }
        // Overlapping bytes are taken from the fragment that came first in offset order.
        let fresh = data.get(payload.len() - offset..).unwrap_or_default();
        let room = len.saturating_sub(payload.len());
        payload.extend_from_slice(&fresh[..fresh.len().min(room)]);
    }
    (payload.len() == len).then_some(payload)
}

/// The datagram `key` with `payload`, as raw IP: a plain header (no options, no extension
/// headers, which the reassembly consumed) and the payload.
fn datagram(key: &DatagramKey, payload: &[u8]) -> Option<Vec<u8>> {
    let mut packet;
    match key.family {
        IpFamily::V4 => {
            let total = u16::try_from(IPV4_HEADER_LEN + payload.len()).ok()?;
            packet = Vec::with_capacity(usize::from(total));
            packet.extend_from_slice(&[0x45, 0]);
            packet.extend_from_slice(&total.to_be_bytes());
            packet.extend_from_slice(&(key.id as u16).to_be_bytes());
            packet.extend_from_slice(&[0, 0, DEFAULT_TTL, key.protocol, 0, 0]);
            packet.extend_from_slice(&key.src[..4]);
            packet.extend_from_slice(&key.dst[..4]);
        }
        IpFamily::V6 => {
            let payload_len = u16::try_from(payload.len()).ok()?;
            packet = Vec::with_capacity(IPV6_HEADER_LEN + payload.len());
            packet.extend_from_slice(&[0x60, 0, 0, 0]);
            packet.extend_from_slice(&payload_len.to_be_bytes());
            packet.extend_from_slice(&[key.protocol, DEFAULT_TTL]);
            packet.extend_from_slice(&key.src);
            packet.extend_from_slice(&key.dst);
        }
    }
    packet.extend_from_slice(payload);
    Some(packet)
}
