//! A conntrack entry that outlived its endpoint: a client's UDP flow to a service address is
//! still translated to a backend (a CoreDNS pod) that nothing answers for, so every query the
//! client sends on that flow goes there and times out. kube-proxy deletes the UDP entries of
//! an endpoint it removes; where it does not (kubernetes#125467), the entry lasts as long as
//! the client keeps the flow busy.
use crate::finding::{ConntrackEvidence, TimeoutFinding};

/// The kernel's reasons for dropping a query sent to a backend's address that say nobody holds
/// it there: no neighbour answered for it (`NEIGH_FAILED`); the frame went to its old MAC and a
/// bridge flooded it to namespaces that do not hold it (`OTHERHOST`); a new pod took the
/// address and serves no DNS (`NO_SOCKET`).
pub const BACKEND_GONE: [&str; 3] = ["NEIGH_FAILED", "OTHERHOST", "NO_SOCKET"];

/// The sentence a timeout's summary gains, with the command that removes the entry.
pub fn explain(finding: &TimeoutFinding, entry: &ConntrackEvidence) -> String {
    format!(
        "conntrack still sends this client's flow to {service} on to {backend}, which nothing \
         answers for (a stale entry, left when that backend went): \
         `conntrack -D -p udp --orig-src {client_ip} --orig-port-src {client_port} --orig-dst \
         {service_ip} --orig-port-dst {service_port}` removes it; kube-proxy removes a removed \
         endpoint's UDP entries, and where it did not, kubernetes#125467",
        service = entry.original_dst,
        backend = entry.reply_src,
        client_ip = finding.client.ip(),
        client_port = finding.client.port(),
        service_ip = entry.original_dst.ip(),
        service_port = entry.original_dst.port(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_deletes_exactly_the_clients_flow() {
        let finding = crate::testkit::samples::a_timeout();
        let crate::finding::Finding::Timeout(finding) = finding else {
            unreachable!("a timeout")
        };
        let entry = ConntrackEvidence {
            original_dst: "10.96.0.10:53".parse().unwrap(),
            reply_src: "10.244.0.3:53".parse().unwrap(),
            unreplied: false,
        };
        let said = explain(&finding, &entry);
        assert!(
            said.contains("to 10.96.0.10:53 on to 10.244.0.3:53"),
            "{said}"
        );
        assert!(
            said.contains(
                "`conntrack -D -p udp --orig-src 10.244.0.3 --orig-port-src 5353 --orig-dst 10.96.0.10 --orig-port-dst 53`"
            ),
            "{said}"
        );
    }
}
