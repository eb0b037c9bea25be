//! Server addresses as label values, bounded: a node talks to a few servers, but a label set
//! must stay bounded whatever the traffic.
use std::{collections::HashSet, net::SocketAddr};

/// Distinct servers named in labels; servers met after these count together as
/// [`OTHER_SERVERS`]. A node's clients ask a few servers (its cache, the cluster DNS, the
/// upstreams); each named one costs up to 33 series (rcodes, the latency histogram, timeouts),
/// so 16 keep a node within a few hundred series whatever its traffic (docs/operations.md's
/// "Series per node"). The JSON findings name every server.
pub const MAX_SERVER_LABELS: usize = 16;
pub const OTHER_SERVERS: &str = "other";

/// Hands out label values: a server keeps the one it was first given, so its series never
/// moves to `other` and back.
#[derive(Debug)]
pub struct ServerLabels {
    named: HashSet<SocketAddr>,
    capacity: usize,
}

impl ServerLabels {
    pub fn new(capacity: usize) -> Self {
        Self {
            named: HashSet::new(),
            capacity,
        }
    }

    /// `ip:port` (`[ip6]:port`) while fewer than the capacity are named, else `other`.
    pub fn label(&mut self, server: SocketAddr) -> String {
        if self.named.contains(&server) || self.named.len() < self.capacity {
            self.named.insert(server);
            server.to_string()
        } else {
            OTHER_SERVERS.to_owned()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(last: u16) -> SocketAddr {
        SocketAddr::from(([10, 96, (last >> 8) as u8, last as u8], 53))
    }

    #[test]
    fn servers_past_the_cap_are_folded_into_other() {
        let mut labels = ServerLabels::new(MAX_SERVER_LABELS);
        for last in 0..MAX_SERVER_LABELS as u16 {
            assert_eq!(labels.label(server(last)), server(last).to_string());
        }
        assert_eq!(labels.label(server(1000)), OTHER_SERVERS);
        assert_eq!(labels.label(server(1001)), OTHER_SERVERS);
        assert_eq!(
            labels.label(server(7)),
            "10.96.0.7:53",
            "a named server keeps its label"
        );
    }

    #[test]
    fn ipv6_servers_are_labelled_with_brackets() {
        let mut labels = ServerLabels::new(1);
        assert_eq!(
            labels.label("[fd00::a]:53".parse().unwrap()),
            "[fd00::a]:53"
        );
    }
}
