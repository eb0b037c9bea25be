//! The address and port of a packet's sender or receiver, in the room state kept per query can
//! afford.
use std::net::{IpAddr, SocketAddr};

/// An IP address and port: 20 bytes, where a `SocketAddr` takes 32 to hold an IPv6 flow label
/// and scope that no address read off a packet carries. The analyzers keep several per query,
/// for tens of thousands of queries in a storm.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Endpoint {
    ip: IpAddr,
    port: u16,
}

impl Endpoint {
    pub fn ip(self) -> IpAddr {
        self.ip
    }
}

impl From<SocketAddr> for Endpoint {
    fn from(addr: SocketAddr) -> Self {
        Self {
            ip: addr.ip(),
            port: addr.port(),
        }
    }
}

impl From<Endpoint> for SocketAddr {
    fn from(endpoint: Endpoint) -> Self {
        SocketAddr::new(endpoint.ip, endpoint.port)
    }
}

impl PartialEq<SocketAddr> for Endpoint {
    fn eq(&self, addr: &SocketAddr) -> bool {
        SocketAddr::from(*self) == *addr
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_off_a_packet_comes_back_unchanged_in_less_room() {
        for addr in ["10.96.0.10:53", "[fd00::a]:5353"] {
            let addr: SocketAddr = addr.parse().expect("an address");
            assert_eq!(SocketAddr::from(Endpoint::from(addr)), addr);
            assert_eq!(Endpoint::from(addr), addr);
        }
        assert!(size_of::<Endpoint>() < size_of::<SocketAddr>());
    }
}
