//! What the analyzers consume: one DNS message seen at one point of the node, decoded.
//!
//! Sources (the kernel ring buffer, pcap files) and the decoder produce these; the analyzers
//! never learn which source an observation came from.
use std::{
    hash::{BuildHasher, Hash, Hasher, RandomState},
    net::SocketAddr,
    sync::{Arc, LazyLock},
    time::SystemTime,
};

use dnsloop_shared::{parse::Probe, point::Direction};

use crate::present::names::Names;

/// A network namespace as the analyzers see it, named for people: `node`, `pod 10.244.0.3`,
/// `upstream`. Two observations are in the same namespace exactly when their names are equal.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Namespace(pub Arc<str>);

impl Namespace {
    pub fn new(name: &str) -> Self {
        Self(name.into())
    }
}

impl std::fmt::Display for Namespace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Where a packet was seen, and which namespaces it was leaving and entering there.
///
/// On the node side of a pod's veth, ingress leaves the pod and egress enters it; on the node's
/// own interfaces, ingress enters the node and egress leaves it; on a namespace's loopback a
/// packet leaves and enters that same namespace. `None` is a side that is not watched (the
/// network beyond a physical uplink, or the bridge between two pods).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Point {
    pub ifname: Arc<str>,
    pub direction: Direction,
    pub leaves: Option<Namespace>,
    pub enters: Option<Namespace>,
}

/// Where the kernel dropped a packet: the device it was on and that device's network
/// namespace, each as far as the tracer knows it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct DropPlace {
    pub namespace: Option<Namespace>,
    /// The device's name, or `if<index>` in a namespace whose devices the tracer does not list.
    pub device: Option<Arc<str>>,
}

impl std::fmt::Display for DropPlace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (&self.namespace, &self.device) {
            (Some(namespace), Some(device)) => write!(f, "{namespace}, on {device}"),
            (Some(namespace), None) => write!(f, "{namespace}"),
            (None, Some(device)) => write!(f, "an unknown namespace, on {device}"),
            (None, None) => f.write_str("an unknown place"),
        }
    }
}

/// Why and where the kernel dropped a packet (its `skb:kfree_skb` drop reason).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DropCause {
    /// The reason's name in the running kernel (`NETFILTER_DROP`, `SOCKET_RCVBUFF`, ...).
    pub reason: Arc<str>,
    /// The kernel function that dropped it, with the offset (`nf_hook_slow+0x9c`), when the
    /// kernel's symbols are readable.
    pub location: Option<Arc<str>>,
    pub place: DropPlace,
}

/// A DNS message the kernel dropped, decoded: why, where, and what it was.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DroppedMessage {
    pub ts: SystemTime,
    pub cause: DropCause,
    pub transport: Transport,
    pub src: SocketAddr,
    pub dst: SocketAddr,
    pub id: u16,
    pub is_response: bool,
    pub question: Option<Question>,
    /// Set when the packet dropped was the first fragment of a larger datagram: the rest of
    /// the message was in fragments the drop did not show.
    pub fragmented: Option<FragmentSizes>,
}

/// A fragmented DNS message's sizes, as its first fragment shows them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FragmentSizes {
    /// The whole message, in bytes, as the UDP header declares it.
    pub message: usize,
    /// The first fragment on the wire, IP header included: the path's MTU where it was cut was
    /// this large, at least.
    pub first_fragment: usize,
}

/// The parser's own: one type names a packet's transport from the kernel to the sinks.
pub use dnsloop_shared::parse::Transport;

/// A domain name as it was sent: uncompressed wire format, root label included, case preserved.
#[derive(Clone)]
pub struct DnsName {
    wire: Arc<[u8]>,
    folded: FoldedName,
}

/// The key of every hash made of what comes off the wire (names, and the analyzers' keys made
/// of them, `analyzers::packet`): SipHash with a random key of this process's, drawn once.
pub(crate) static WIRE_HASHER: LazyLock<RandomState> = LazyLock::new(RandomState::new);

/// A name folded to ASCII lower case: the key under which case variants of one name meet.
///
/// Folded and hashed once, when decoded: the analyzers' keys (`analyzers::packet`) are made of
/// it, several for each packet, and a name shared between messages is hashed only once.
#[derive(Clone, Debug)]
pub struct FoldedName {
    bytes: Arc<[u8]>,
    /// `WIRE_HASHER`'s hash of `bytes`.
    hash: u64,
}

impl FoldedName {
    fn of(wire: &Arc<[u8]>) -> Self {
        let bytes: Arc<[u8]> = if wire.iter().any(u8::is_ascii_uppercase) {
            wire.to_ascii_lowercase().into()
        } else {
            Arc::clone(wire)
        };
        // A name in wire format ends with its root label, so none is the start of another: its
        // bytes need no length before them.
        let mut hasher = WIRE_HASHER.build_hasher();
        hasher.write(&bytes);
        Self {
            hash: hasher.finish(),
            bytes,
        }
    }

    /// The name's keyed hash: equal names have equal hashes.
    pub fn keyed_hash(&self) -> u64 {
        self.hash
    }

    /// The name in wire format, root label included.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }
}

impl PartialEq for FoldedName {
    fn eq(&self, other: &Self) -> bool {
        self.hash == other.hash && self.bytes == other.bytes
    }
}

impl Eq for FoldedName {}

impl Hash for FoldedName {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

// A name is its wire bytes: the folded name is made from them.
impl PartialEq for DnsName {
    fn eq(&self, other: &Self) -> bool {
        self.wire == other.wire
    }
}

impl Eq for DnsName {}

impl Hash for DnsName {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.wire.hash(state);
    }
}

impl std::fmt::Debug for DnsName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DnsName").field("wire", &self.wire).finish()
    }
}

impl DnsName {
    /// Accepts a well-formed uncompressed name (labels of 1..=63 bytes ending with the root);
    /// `None` otherwise.
    pub fn from_wire(wire: &[u8]) -> Option<Self> {
        let mut at = 0;
        loop {
            let len = usize::from(*wire.get(at)?);
            if len == 0 {
                return (at + 1 == wire.len() && wire.len() <= 255).then(|| {
                    let wire = Arc::from(wire);
                    Self {
                        folded: FoldedName::of(&wire),
                        wire,
                    }
                });
            }
            if len > 63 {
                return None;
            }
            at += 1 + len;
        }
    }

    /// The name in wire format, root label included, as sent.
    pub fn as_wire(&self) -> &[u8] {
        &self.wire
    }

    /// The labels, without the root.
    pub fn labels(&self) -> impl Iterator<Item = &[u8]> {
        let mut at = 0;
        std::iter::from_fn(move || {
            let len = usize::from(*self.wire.get(at)?);
            if len == 0 {
                return None;
            }
            let label = self.wire.get(at + 1..at + 1 + len)?;
            at += 1 + len;
            Some(label)
        })
    }

    /// The domain the name is in: the name without its first label; `None` for the root.
    pub fn parent(&self) -> Option<Self> {
        let first = usize::from(*self.wire.first()?);
        if first == 0 {
            return None;
        }
        Self::from_wire(self.wire.get(1 + first..)?)
    }

    /// The key under which case variants of one name meet.
    pub fn folded(&self) -> &FoldedName {
        &self.folded
    }

    /// The name as `names` writes it out, with a trailing dot: presentation format as sent,
    /// or redacted (`--redact-names`). Every name that leaves dnsloop goes through here.
    pub fn presented(&self, names: &Names) -> String {
        let mut text = String::with_capacity(self.wire.len() + 1);
        self.write_presented(names, &mut text);
        text
    }

    /// Appends [`DnsName::presented`] to `text`: for a caller that reuses one buffer.
    pub fn write_presented(&self, names: &Names, text: &mut String) {
        names.write(self.labels(), text);
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Question {
    pub name: DnsName,
    pub qtype: u16,
    pub qclass: u16,
}

/// One DNS message seen at one point.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observation {
    pub ts: SystemTime,
    /// Shared by every observation made there (see `points`).
    pub point: Arc<Point>,
    pub transport: Transport,
    pub src: SocketAddr,
    pub dst: SocketAddr,
    pub id: u16,
    pub is_response: bool,
    pub opcode: u8,
    /// The response code, EDNS extended bits included when present.
    pub rcode: u16,
    /// An answer with TC set: cut to fit, to be asked again over TCP.
    pub truncated: bool,
    pub question: Option<Question>,
    pub probe: Probe,
    /// Length of the DNS message in bytes.
    pub size: usize,
    /// A query seen in the middle of its path, its earlier hops unseen (the kernel streams a
    /// question's queries only once it is forwarded). It still shows where the query went;
    /// analyzers that judge a query from where its client sent it skip it.
    pub partial: bool,
    /// A query recalled from the kernel's query table because no answer reached its client: not
    /// a packet seen now, but its first sighting again. Only the timeout analyzer takes it; the
    /// loop analyzer followed the query when it was streamed, if it was, and a first sighting
    /// met again would look like the query arriving a second time.
    pub recalled: bool,
    /// Whether the destination is an address of the namespace the packet enters here, as far
    /// as the source knows that namespace's addresses: `Some(false)` for a packet the node
    /// routes on, or holds for a neighbour that may never answer ARP, but never takes in;
    /// `None` when it enters no namespace, or one whose addresses are unknown (a pod, a
    /// capture).
    pub to_own_address: Option<bool>,
    /// The UDP payload size a query's EDNS (OPT) record advertises: the largest reply it
    /// invites. `None` for a reply, or a query without one.
    pub edns_udp_size: Option<u16>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wire(labels: &[&[u8]]) -> Vec<u8> {
        let mut wire = Vec::new();
        for label in labels {
            wire.push(label.len() as u8);
            wire.extend_from_slice(label);
        }
        wire.push(0);
        wire
    }

    #[test]
    fn presentation_keeps_case_and_escapes_like_dig() {
        let name = DnsName::from_wire(&wire(&[b"Api", b"a.b", b"\x07bell", b"svc"])).unwrap();
        assert_eq!(name.presented(&Names::AsSent), "Api.a\\.b.\\007bell.svc.");
        let root = DnsName::from_wire(&[0]).unwrap();
        assert_eq!(root.presented(&Names::AsSent), ".");
    }

    #[test]
    fn names_fold_ascii_case_only() {
        let upper = DnsName::from_wire(&wire(&[b"WWW", b"Example"])).unwrap();
        let lower = DnsName::from_wire(&wire(&[b"www", b"example"])).unwrap();
        assert_eq!(upper.folded(), lower.folded());
        let other = DnsName::from_wire(&wire(&[b"www", b"\xc9xample"])).unwrap();
        assert_ne!(other.folded(), lower.folded());
    }

    #[test]
    fn case_variants_of_a_name_meet_in_a_hash_table() {
        let upper = DnsName::from_wire(&wire(&[b"WWW", b"Example"])).unwrap();
        let lower = DnsName::from_wire(&wire(&[b"www", b"example"])).unwrap();
        let other = DnsName::from_wire(&wire(&[b"www", b"example2"])).unwrap();
        let table: std::collections::HashSet<&FoldedName> = [upper.folded()].into();
        assert!(table.contains(lower.folded()));
        assert!(!table.contains(other.folded()));
        assert_ne!(upper, lower, "the name itself keeps its case");
    }

    #[test]
    fn a_names_parent_drops_its_first_label_and_the_root_has_none() {
        let name = DnsName::from_wire(&wire(&[b"Www", b"Corp", b"example"])).unwrap();
        let parent = name.parent().unwrap();
        assert_eq!(parent.presented(&Names::AsSent), "Corp.example.");
        assert_eq!(parent.parent().unwrap().parent().unwrap().as_wire(), [0]);
        assert!(DnsName::from_wire(&[0]).unwrap().parent().is_none());
    }

    #[test]
    fn from_wire_rejects_malformed_names() {
        assert!(DnsName::from_wire(&[]).is_none());
        assert!(DnsName::from_wire(&[3, b'a', b'b']).is_none());
        assert!(DnsName::from_wire(&[64]).is_none());
        assert!(DnsName::from_wire(&[1, b'a', 0, 0]).is_none());
        assert!(DnsName::from_wire(&[0xc0, 0x0c]).is_none());
    }
}
