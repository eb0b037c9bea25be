//! Crafted frames and DNS messages for tests: the parser's own (`dnsloop-shared`'s
//! `tests/parse`), userspace's runs of the real kernel programs on them, and the kernel programs'
//! profile (`cargo xtask bench`).
//!
//! Only for tests and measurements, so the helpers panic on inputs no test should give them.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use dnsloop_shared::parse::{IpFamily, LinkLayer, Segment, Transport};

pub const QTYPE_A: u16 = 1;
pub const QTYPE_HINFO: u16 = 13;
pub const QTYPE_TXT: u16 = 16;
pub const QCLASS_IN: u16 = 1;

/// DNS header flags of a query with recursion desired (RD).
const FLAGS_QUERY: u16 = 0x0100;
/// QR, RD and RA: what a recursive server answers with (rcode NOERROR).
const FLAGS_RESPONSE: u16 = 0x8180;

/// The wire form of a dotted name (`"www.example.com"`, trailing dot optional, `"."` or `""`
/// for the root). Labels are taken as bytes, so any length can be built.
pub fn wire_name(name: &str) -> Vec<u8> {
    let mut wire = Vec::new();
    for label in name.split('.').filter(|label| !label.is_empty()) {
        wire.push(u8::try_from(label.len()).expect("label length fits a byte"));
        wire.extend_from_slice(label.as_bytes());
    }
    wire.push(0);
    wire
}

/// A DNS header with RD set and `qdcount` questions, followed by `question` bytes.
pub fn dns_message(id: u16, qdcount: u16, question: &[u8]) -> Vec<u8> {
    let mut msg = Vec::new();
    msg.extend_from_slice(&id.to_be_bytes());
    msg.extend_from_slice(&FLAGS_QUERY.to_be_bytes());
    msg.extend_from_slice(&qdcount.to_be_bytes());
    msg.extend_from_slice(&[0; 6]);
    msg.extend_from_slice(question);
    msg
}

/// A query for `name` (in wire form) with `qtype` in class IN.
pub fn dns_query_wire(id: u16, wire: &[u8], qtype: u16) -> Vec<u8> {
    let mut question = wire.to_vec();
    question.extend_from_slice(&qtype.to_be_bytes());
    question.extend_from_slice(&QCLASS_IN.to_be_bytes());
    dns_message(id, 1, &question)
}

pub fn dns_query(id: u16, name: &str, qtype: u16) -> Vec<u8> {
    dns_query_wire(id, &wire_name(name), qtype)
}

/// A response to [`dns_query`] with the same question and no records.
pub fn dns_response(id: u16, name: &str, qtype: u16) -> Vec<u8> {
    let mut msg = dns_query(id, name, qtype);
    msg[2..4].copy_from_slice(&FLAGS_RESPONSE.to_be_bytes());
    msg
}

/// DNS messages as a TCP stream carries them, each behind its 2-byte length.
pub fn tcp_stream(messages: &[&[u8]]) -> Vec<u8> {
    let mut stream = Vec::new();
    for msg in messages {
        let len = u16::try_from(msg.len()).expect("a DNS message fits its TCP length prefix");
        stream.extend_from_slice(&len.to_be_bytes());
        stream.extend_from_slice(msg);
    }
    stream
}

/// An IPv6 extension header as `FrameSpec` puts it in front of the transport header.
#[derive(Clone, Copy, Debug)]
pub enum ExtensionHeader {
    HopByHop,
    Routing,
    DestinationOptions,
    /// 12 bytes: its length field counts 4-octet units minus 2 (RFC 4302).
    Authentication,
    Fragment {
        offset: u16,
        more: bool,
    },
}

impl ExtensionHeader {
    fn protocol(self) -> u8 {
        match self {
            Self::HopByHop => 0,
            Self::Routing => 43,
            Self::Fragment { .. } => 44,
            Self::Authentication => 51,
            Self::DestinationOptions => 60,
        }
    }

    fn bytes(self, next_header: u8) -> Vec<u8> {
        match self {
            // 16 bytes (length field 1) to exercise the 8-octet length rule beyond its minimum.
            Self::HopByHop | Self::DestinationOptions => {
                let mut header = vec![next_header, 1, 1, 12];
                header.extend_from_slice(&[0; 12]);
                header
            }
            Self::Routing => vec![next_header, 0, 0, 0, 0, 0, 0, 0],
            Self::Authentication => {
                let mut header = vec![next_header, 1, 0, 0];
                header.extend_from_slice(&[0xaa; 8]);
                header
            }
            Self::Fragment { offset, more } => {
                let field = (offset << 3) | u16::from(more);
                let mut header = vec![next_header, 0];
                header.extend_from_slice(&field.to_be_bytes());
                header.extend_from_slice(&[0x12, 0x34, 0x56, 0x78]);
                header
            }
        }
    }
}

/// Everything a crafted frame is made of. `Default` is an Ethernet/IPv4/UDP query for
/// `example.com` from port 40000 to 53.
#[derive(Clone, Debug)]
pub struct FrameSpec {
    pub link: LinkLayer,
    /// VLAN tags after the link header; the outer one is QinQ (0x88a8) when there are two.
    pub vlan_tags: usize,
    pub src: IpAddr,
    pub dst: IpAddr,
    pub transport: Transport,
    pub sport: u16,
    pub dport: u16,
    /// IPv4 options (a multiple of 4 bytes).
    pub ipv4_options: Vec<u8>,
    /// IPv4 fragment offset (in 8-byte units) and the more-fragments flag.
    pub ipv4_fragment: (u16, bool),
    pub ipv6_extensions: Vec<ExtensionHeader>,
    /// TCP options (a multiple of 4 bytes).
    pub tcp_options: Vec<u8>,
    /// The transport payload as sent (for TCP, already length-prefixed).
    pub payload: Vec<u8>,
}

impl Default for FrameSpec {
    fn default() -> Self {
        Self {
            link: LinkLayer::Ethernet,
            vlan_tags: 0,
            src: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
            dst: IpAddr::V4(Ipv4Addr::new(10, 96, 0, 10)),
            transport: Transport::Udp,
            sport: 40000,
            dport: 53,
            ipv4_options: Vec::new(),
            ipv4_fragment: (0, false),
            ipv6_extensions: Vec::new(),
            tcp_options: Vec::new(),
            payload: dns_query(0x1234, "example.com", QTYPE_A),
        }
    }
}

pub fn v6(text: &str) -> IpAddr {
    IpAddr::V6(text.parse::<Ipv6Addr>().expect("an IPv6 address"))
}

/// The address as `Segment` carries it.
pub fn address_slot(addr: IpAddr) -> [u8; 16] {
    let mut slot = [0; 16];
    match addr {
        IpAddr::V4(v4) => slot[..4].copy_from_slice(&v4.octets()),
        IpAddr::V6(v6) => slot.copy_from_slice(&v6.octets()),
    }
    slot
}

/// An Ethernet frame of ICMP (ICMPv6 for IPv6 addresses) `kind`/`code` from `src` to `dst`,
/// quoting `quoted`, an IP packet: an error about it, such as a port unreachable.
pub fn icmp_frame(src: IpAddr, dst: IpAddr, kind: u8, code: u8, quoted: &[u8]) -> Vec<u8> {
    let mut icmp = vec![kind, code, 0, 0, 0, 0, 0, 0];
    icmp.extend_from_slice(quoted);
    let ipv6 = src.is_ipv6();
    let mut frame = link_header(LinkLayer::Ethernet, 0, if ipv6 { 0x86dd } else { 0x0800 });
    if ipv6 {
        frame.extend_from_slice(&[0x60, 0, 0, 0]);
        frame.extend_from_slice(
            &u16::try_from(icmp.len())
                .expect("a short quote")
                .to_be_bytes(),
        );
        frame.extend_from_slice(&[58, 64]);
        frame.extend_from_slice(&address_slot(src));
        frame.extend_from_slice(&address_slot(dst));
    } else {
        let total = u16::try_from(20 + icmp.len()).expect("a short quote");
        frame.extend_from_slice(&[0x45, 0]);
        frame.extend_from_slice(&total.to_be_bytes());
        frame.extend_from_slice(&[0, 0, 0, 0, 64, 1, 0, 0]);
        frame.extend_from_slice(&address_slot(src)[..4]);
        frame.extend_from_slice(&address_slot(dst)[..4]);
    }
    frame.extend_from_slice(&icmp);
    frame
}

impl FrameSpec {
    pub fn family(&self) -> IpFamily {
        match self.src {
            IpAddr::V4(_) => IpFamily::V4,
            IpAddr::V6(_) => IpFamily::V6,
        }
    }

    /// Uses IPv6 addresses (and so an IPv6 header).
    pub fn ipv6(mut self) -> Self {
        self.src = v6("fd00::1");
        self.dst = v6("fd00:10:96::a");
        self
    }

    /// Switches to TCP, framing the current payload as one length-prefixed message.
    pub fn tcp(mut self) -> Self {
        self.transport = Transport::Tcp;
        self.payload = tcp_stream(&[&self.payload]);
        self
    }

    pub fn link_header_len(&self) -> usize {
        let base = match self.link {
            LinkLayer::Ethernet => 14,
            LinkLayer::RawIp => 0,
            LinkLayer::LinuxSll => 16,
            LinkLayer::LinuxSll2 => 20,
        };
        base + 4 * self.vlan_tags
    }

    pub fn build(&self) -> Vec<u8> {
        let ip = self.ip_packet();
        let ethertype: u16 = match self.family() {
            IpFamily::V4 => 0x0800,
            IpFamily::V6 => 0x86dd,
        };
        let mut frame = link_header(self.link, self.vlan_tags, ethertype);
        frame.extend_from_slice(&ip);
        frame
    }

    /// The transport header and payload.
    pub fn l4_segment(&self) -> Vec<u8> {
        let mut segment = Vec::new();
        segment.extend_from_slice(&self.sport.to_be_bytes());
        segment.extend_from_slice(&self.dport.to_be_bytes());
        match self.transport {
            Transport::Udp => {
                let len =
                    u16::try_from(8 + self.payload.len()).expect("a UDP datagram fits 64 KiB");
                segment.extend_from_slice(&len.to_be_bytes());
                segment.extend_from_slice(&[0, 0]);
            }
            Transport::Tcp => {
                assert_eq!(self.tcp_options.len() % 4, 0);
                let data_offset =
                    u8::try_from(5 + self.tcp_options.len() / 4).expect("TCP options fit");
                segment.extend_from_slice(&1000u32.to_be_bytes()); // sequence
                segment.extend_from_slice(&0u32.to_be_bytes()); // acknowledgement
                segment.push(data_offset << 4);
                segment.push(0x18); // PSH, ACK
                segment.extend_from_slice(&[0xff, 0xff, 0, 0, 0, 0]); // window, checksum, urgent
                segment.extend_from_slice(&self.tcp_options);
            }
        }
        segment.extend_from_slice(&self.payload);
        segment
    }

    pub fn ip_packet(&self) -> Vec<u8> {
        let l4 = self.l4_segment();
        let protocol = self.transport as u8;
        match (self.src, self.dst) {
            (IpAddr::V4(src), IpAddr::V4(dst)) => {
                assert_eq!(self.ipv4_options.len() % 4, 0);
                let ihl = u8::try_from(5 + self.ipv4_options.len() / 4).expect("IPv4 options fit");
                let total = u16::try_from(usize::from(ihl) * 4 + l4.len())
                    .expect("an IPv4 packet fits 64 KiB");
                let (fragment_offset, more) = self.ipv4_fragment;
                let fragment = fragment_offset | if more { 0x2000 } else { 0 };
                let mut packet = vec![0x40 | ihl, 0];
                packet.extend_from_slice(&total.to_be_bytes());
                packet.extend_from_slice(&[0xab, 0xcd]); // identification
                packet.extend_from_slice(&fragment.to_be_bytes());
                packet.extend_from_slice(&[64, protocol, 0, 0]); // ttl, protocol, checksum
                packet.extend_from_slice(&src.octets());
                packet.extend_from_slice(&dst.octets());
                packet.extend_from_slice(&self.ipv4_options);
                packet.extend_from_slice(&l4);
                packet
            }
            (IpAddr::V6(src), IpAddr::V6(dst)) => {
                let mut extensions = Vec::new();
                let protocols: Vec<u8> =
                    self.ipv6_extensions.iter().map(|e| e.protocol()).collect();
                for (index, extension) in self.ipv6_extensions.iter().enumerate() {
                    let next = protocols.get(index + 1).copied().unwrap_or(protocol);
                    extensions.extend_from_slice(&extension.bytes(next));
                }
                let first_next = protocols.first().copied().unwrap_or(protocol);
                let payload_len = u16::try_from(extensions.len() + l4.len())
                    .expect("an IPv6 payload fits 64 KiB");
                let mut packet = vec![0x60, 0, 0, 0];
                packet.extend_from_slice(&payload_len.to_be_bytes());
                packet.extend_from_slice(&[first_next, 64]);
                packet.extend_from_slice(&src.octets());
                packet.extend_from_slice(&dst.octets());
                packet.extend_from_slice(&extensions);
                packet.extend_from_slice(&l4);
                packet
            }
            _ => panic!("source and destination of different families"),
        }
    }

    /// Where the transport payload starts in the built frame.
    pub fn payload_offset(&self) -> usize {
        self.build().len() - self.payload.len()
    }

    /// The segment `classify` must find in the built frame.
    pub fn expected_segment(&self) -> Segment {
        Segment {
            l3_offset: self.link_header_len(),
            family: self.family(),
            src: address_slot(self.src),
            dst: address_slot(self.dst),
            sport: self.sport,
            dport: self.dport,
            transport: self.transport,
            l4_offset: self.payload_offset()
                - match self.transport {
                    Transport::Udp => 8,
                    Transport::Tcp => 20 + self.tcp_options.len(),
                },
            payload_offset: self.payload_offset(),
            payload_len: self.payload.len(),
            declared_payload_len: self.payload.len(),
        }
    }
}

/// The link-layer header (and VLAN tags) in front of an IP packet.
pub fn link_header(link: LinkLayer, vlan_tags: usize, ethertype: u16) -> Vec<u8> {
    let mut tags = Vec::new();
    for index in 0..vlan_tags {
        let tpid: u16 = if index + 1 < vlan_tags {
            0x88a8
        } else {
            0x8100
        };
        tags.push(tpid);
    }
    // The protocol field names the first tag (or the IP version); each tag names the next.
    let announced = tags.first().copied().unwrap_or(ethertype);
    let mut header = match link {
        LinkLayer::Ethernet => {
            let mut header = vec![0x02, 0, 0, 0, 0, 0x01, 0x02, 0, 0, 0, 0, 0x02];
            header.extend_from_slice(&announced.to_be_bytes());
            header
        }
        LinkLayer::RawIp => {
            assert_eq!(vlan_tags, 0, "raw IP has no VLAN tags");
            return Vec::new();
        }
        LinkLayer::LinuxSll => {
            // Packet type "outgoing", ARPHRD_ETHER, 6-byte address padded to 8, protocol.
            let mut header = vec![0, 4, 0, 1, 0, 6, 0x02, 0, 0, 0, 0, 0x01, 0, 0];
            header.extend_from_slice(&announced.to_be_bytes());
            header
        }
        LinkLayer::LinuxSll2 => {
            // Protocol, reserved, ifindex, ARPHRD_ETHER, packet type, address length, address.
            let mut header = announced.to_be_bytes().to_vec();
            header.extend_from_slice(&[0, 0, 0, 0, 0, 2, 0, 1, 4, 6]);
            header.extend_from_slice(&[0x02, 0, 0, 0, 0, 0x01, 0, 0]);
            header
        }
    };
    for index in 0..vlan_tags {
        let inner = tags.get(index + 1).copied().unwrap_or(ethertype);
        header.extend_from_slice(&(100 + index as u16).to_be_bytes()); // TCI: VLAN id
        header.extend_from_slice(&inner.to_be_bytes());
    }
    header
}
