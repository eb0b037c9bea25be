//! What a DNS server address means on a Kubernetes node.
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The host itself: 127.0.0.0/8, ::1, and 127.x written as an IPv4-mapped IPv6 address.
pub fn is_loopback(address: IpAddr) -> bool {
    match address {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => {
            v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    }
}

/// 169.254.0.0/16 and fe80::/10: where node-local-dns listens, and where some clouds serve
/// their resolver.
pub fn is_link_local(address: IpAddr) -> bool {
    match address {
        IpAddr::V4(v4) => v4.is_link_local(),
        IpAddr::V6(v6) => v6.segments()[0] & 0xffc0 == 0xfe80,
    }
}

/// Link-local addresses at which a cloud serves its own resolver: a real upstream, not a loop.
pub fn cloud_resolver(address: IpAddr) -> Option<&'static str> {
    const AWS_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x253);
    match address {
        IpAddr::V4(v4) if v4 == Ipv4Addr::new(169, 254, 169, 253) => Some("the AWS VPC resolver"),
        IpAddr::V4(v4) if v4 == Ipv4Addr::new(169, 254, 169, 254) => {
            Some("the cloud metadata server, which answers DNS on Google Cloud")
        }
        IpAddr::V6(v6) if v6 == AWS_V6 => Some("the AWS VPC resolver"),
        _ => None,
    }
}

/// node-local-dns's usual addresses: 169.254.20.10 (the Kubernetes manifest's) and
/// 169.254.25.10 (kubespray's).
pub fn is_usual_node_local_dns(address: IpAddr) -> bool {
    matches!(address, IpAddr::V4(v4) if v4 == Ipv4Addr::new(169, 254, 20, 10) || v4 == Ipv4Addr::new(169, 254, 25, 10))
}

/// What listens on a loopback address, when the address says so.
pub fn loopback_listener(address: IpAddr) -> &'static str {
    match address {
        IpAddr::V4(v4) if v4 == Ipv4Addr::new(127, 0, 0, 53) => "systemd-resolved's stub listener",
        IpAddr::V4(v4) if v4 == Ipv4Addr::new(127, 0, 0, 54) => "systemd-resolved's proxy listener",
        IpAddr::V4(v4) if v4 == Ipv4Addr::new(127, 0, 1, 1) => {
            "a local cache (NetworkManager's dnsmasq listens there)"
        }
        _ => "a loopback address",
    }
}

/// An address as it is written in a resolv.conf or a Corefile: IPv6 zones (`fe80::1%eth0`)
/// dropped, since they name an interface, not a host.
pub fn parse(text: &str) -> Option<IpAddr> {
    let without_zone = text.split_once('%').map_or(text, |(address, _)| address);
    without_zone.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn loopback_covers_the_whole_range_and_mapped_v4() {
        for looped in [
            "127.0.0.1",
            "127.0.0.53",
            "127.255.0.9",
            "::1",
            "::ffff:127.0.0.1",
        ] {
            assert!(is_loopback(ip(looped)), "{looped}");
        }
        for not_looped in ["10.96.0.10", "169.254.25.10", "::ffff:10.0.0.1", "fe80::1"] {
            assert!(!is_loopback(ip(not_looped)), "{not_looped}");
        }
    }

    #[test]
    fn link_local_covers_v4_and_v6() {
        for local in ["169.254.25.10", "169.254.169.253", "fe80::1", "febf::1"] {
            assert!(is_link_local(ip(local)), "{local}");
        }
        for not_local in ["169.255.0.1", "10.96.0.10", "fec0::1", "::1"] {
            assert!(!is_link_local(ip(not_local)), "{not_local}");
        }
    }

    #[test]
    fn cloud_resolvers_are_named_and_node_local_defaults_are_not_cloud() {
        assert!(cloud_resolver(ip("169.254.169.253")).is_some());
        assert!(cloud_resolver(ip("fd00:ec2::253")).is_some());
        assert!(cloud_resolver(ip("169.254.25.10")).is_none());
        assert!(is_usual_node_local_dns(ip("169.254.25.10")));
        assert!(is_usual_node_local_dns(ip("169.254.20.10")));
        assert!(!is_usual_node_local_dns(ip("169.254.169.253")));
    }

    #[test]
    fn zones_are_dropped_and_junk_is_none() {
        assert_eq!(parse("fe80::1%eth0"), Some(ip("fe80::1")));
        assert_eq!(parse("10.0.0.2"), Some(ip("10.0.0.2")));
        assert_eq!(parse("dns.example"), None);
        assert_eq!(parse(""), None);
    }
}
