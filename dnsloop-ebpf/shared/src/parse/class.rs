//! What the parser concludes about a packet: DNS, not interesting, or malformed (and why).

use super::{IpFamily, Segment};

/// The verdict of [`classify`](super::classify) on one packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PacketClass {
    /// UDP or TCP on a DNS port; the segment says where its payload is.
    Dns(Segment),
    /// A well-formed packet that is not DNS, or that cannot be inspected as DNS.
    Skip(Skip),
    /// An ICMP port unreachable quoting a DNS reply: a client refused an answer.
    DnsPortUnreachable,
    /// A packet whose headers contradict themselves or end early.
    Malformed(Malformed),
}

/// Why a well-formed packet is not looked at. Discriminants are stable counter indices.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Skip {
    /// The link layer carries something other than IPv4/IPv6 (ARP, MPLS, a third VLAN tag...).
    NotIp = 0,
    /// The IP payload is not UDP or TCP (ICMP, ESP, an unknown extension header...).
    NotUdpOrTcp = 1,
    /// Neither port is one of the DNS ports.
    NotDnsPort = 2,
    /// A fragment other than the first: it has no transport header to look at.
    NonFirstFragment = 3,
}

impl Skip {
    /// Every variant, in discriminant order.
    pub const ALL: [Self; 4] = [
        Self::NotIp,
        Self::NotUdpOrTcp,
        Self::NotDnsPort,
        Self::NonFirstFragment,
    ];
    pub const COUNT: usize = Self::ALL.len();

    /// The variant whose discriminant is `raw`.
    pub fn from_u8(raw: u8) -> Option<Self> {
        Self::ALL.get(usize::from(raw)).copied()
    }

    /// A stable snake_case name for metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NotIp => "not_ip",
            Self::NotUdpOrTcp => "not_udp_or_tcp",
            Self::NotDnsPort => "not_dns_port",
            Self::NonFirstFragment => "non_first_fragment",
        }
    }
}

/// Why a packet or DNS message could not be parsed. Discriminants are stable counter indices.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Malformed {
    /// The packet ends inside the link-layer header or a VLAN tag (for raw IP: before the
    /// version nibble), so the network protocol is unknown.
    TruncatedL2 = 0,
    /// The link layer announces IPv4 (IPv6) but the version nibble says otherwise.
    BadIpVersion = 1,
    /// The packet ends inside the IPv4 header or its options.
    TruncatedIpv4 = 2,
    /// IPv4 header length below the 5 words of the fixed header.
    BadIhl = 3,
    /// An IP length field is smaller than the headers it must contain: IPv4 total length below
    /// the header length, or an IPv6 extension header / transport header past the declared end.
    BadIpLength = 4,
    /// The packet ends inside the IPv6 header or an extension header.
    TruncatedIpv6 = 5,
    /// More IPv6 extension headers than the parser walks (see `MAX_EXTENSION_HEADERS`).
    TooManyExtensionHeaders = 6,
    /// The packet ends inside the UDP or TCP header (options included).
    TruncatedL4 = 7,
    /// UDP length below the 8-byte UDP header.
    BadUdpLength = 8,
    /// TCP data offset below the 5 words of the fixed header.
    BadTcpOffset = 9,
    /// `parse_dns` was given more valid bytes than its buffer holds.
    DnsBadLength = 10,
    /// Fewer than the 12 bytes of the DNS header.
    DnsTruncatedHeader = 11,
    /// The message ends inside the first question (name, type or class).
    DnsTruncatedQuestion = 12,
    /// The first question's name exceeds 255 wire bytes (which also bounds it to 127 labels).
    DnsNameTooLong = 13,
    /// A label type byte in 64..=191: the obsolete extended (0x40) or reserved (0x80) types.
    DnsLabelTooLong = 14,
    /// A compression pointer in the first question, which a query never needs; the walk stops
    /// there rather than follow it (pointers can loop).
    DnsCompressionPointer = 15,
}

impl Malformed {
    /// Every variant, in discriminant order.
    pub const ALL: [Self; 16] = [
        Self::TruncatedL2,
        Self::BadIpVersion,
        Self::TruncatedIpv4,
        Self::BadIhl,
        Self::BadIpLength,
        Self::TruncatedIpv6,
        Self::TooManyExtensionHeaders,
        Self::TruncatedL4,
        Self::BadUdpLength,
        Self::BadTcpOffset,
        Self::DnsBadLength,
        Self::DnsTruncatedHeader,
        Self::DnsTruncatedQuestion,
        Self::DnsNameTooLong,
        Self::DnsLabelTooLong,
        Self::DnsCompressionPointer,
    ];
    pub const COUNT: usize = Self::ALL.len();

    /// The variant whose discriminant is `raw`.
    pub fn from_u8(raw: u8) -> Option<Self> {
        Self::ALL.get(usize::from(raw)).copied()
    }

    /// A stable snake_case name for metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::TruncatedL2 => "truncated_l2",
            Self::BadIpVersion => "bad_ip_version",
            Self::TruncatedIpv4 => "truncated_ipv4",
            Self::BadIhl => "bad_ihl",
            Self::BadIpLength => "bad_ip_length",
            Self::TruncatedIpv6 => "truncated_ipv6",
            Self::TooManyExtensionHeaders => "too_many_extension_headers",
            Self::TruncatedL4 => "truncated_l4",
            Self::BadUdpLength => "bad_udp_length",
            Self::BadTcpOffset => "bad_tcp_offset",
            Self::DnsBadLength => "dns_bad_length",
            Self::DnsTruncatedHeader => "dns_truncated_header",
            Self::DnsTruncatedQuestion => "dns_truncated_question",
            Self::DnsNameTooLong => "dns_name_too_long",
            Self::DnsLabelTooLong => "dns_label_too_long",
            Self::DnsCompressionPointer => "dns_compression_pointer",
        }
    }
}

/// A packet the layers below stopped on before reaching a DNS segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Rejected {
    Skip(Skip),
    Malformed(Malformed),
    /// ICMP (v4 or v6, per `family`) at `offset`: neither UDP nor TCP, but perhaps about DNS.
    Icmp {
        family: IpFamily,
        offset: usize,
    },
}

impl From<Skip> for Rejected {
    #[inline(always)]
    fn from(skip: Skip) -> Self {
        Self::Skip(skip)
    }
}

impl From<Malformed> for Rejected {
    #[inline(always)]
    fn from(malformed: Malformed) -> Self {
        Self::Malformed(malformed)
    }
}

impl From<Rejected> for PacketClass {
    #[inline(always)]
    fn from(rejected: Rejected) -> Self {
        match rejected {
            Rejected::Skip(skip) => Self::Skip(skip),
            Rejected::Malformed(malformed) => Self::Malformed(malformed),
            // `classify` looks into ICMP first; what reaches here is not about DNS.
            Rejected::Icmp { .. } => Self::Skip(Skip::NotUdpOrTcp),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn discriminants_index_all_and_names_are_unique() {
        for (index, reason) in Malformed::ALL.iter().enumerate() {
            assert_eq!(*reason as usize, index);
            assert_eq!(Malformed::from_u8(index as u8), Some(*reason));
            let clashes = Malformed::ALL
                .iter()
                .filter(|r| r.as_str() == reason.as_str());
            assert_eq!(clashes.count(), 1, "{}", reason.as_str());
        }
        assert_eq!(Malformed::from_u8(Malformed::COUNT as u8), None);
        for (index, reason) in Skip::ALL.iter().enumerate() {
            assert_eq!(*reason as usize, index);
            assert_eq!(Skip::from_u8(index as u8), Some(*reason));
            assert_eq!(
                Skip::ALL
                    .iter()
                    .filter(|r| r.as_str() == reason.as_str())
                    .count(),
                1
            );
        }
        assert_eq!(Skip::from_u8(Skip::COUNT as u8), None);
    }
}
