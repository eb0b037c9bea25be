//! The service addresses behind a loop's DNAT'ed forwards. Pure, so that which flows are looked
//! up and how the summary names what conntrack found are tested without a conntrack table.
//!
//! A query the node itself sends to a `ClusterIP` is DNAT'ed by the output chain before tc sees
//! it, so every hop of its path shows the pod it went to. Conntrack still holds the flow: asked
//! by its reply tuple (from the pod back to the sender), it gives where the query was sent.
use std::net::IpAddr;

use super::conntrack::QueryFlow;
use crate::finding::{ConntrackEvidence, Dnat, Hop, LookupHop};

/// The most conntrack lookups for one loop report. A loop through the node cache and a
/// `ClusterIP` has two flows (there and back); a lookup the kernel does not answer blocks the
/// tracer for the whole conntrack timeout.
pub const MAX_LOOKUPS: usize = 4;

/// The distinct flows of `path`'s hops as they were delivered, first seen first, at most
/// [`MAX_LOOKUPS`] of them.
pub fn flows_to_look_up(path: &[Hop]) -> Vec<QueryFlow> {
    distinct_flows(path.iter().map(|hop| QueryFlow {
        transport: hop.transport,
        client: hop.src,
        server: hop.dst,
    }))
}

/// The distinct flows of a lookup's queries delivered on the node where they were first seen
/// addressed, whose DNAT, if any, came before they were seen; at most [`MAX_LOOKUPS`] of them.
pub fn lookup_flows_to_look_up(hops: &[LookupHop]) -> Vec<QueryFlow> {
    let unseen_dnat = hops
        .iter()
        .filter(|hop| hop.backend.is_none() && hop.to.is_some());
    distinct_flows(unseen_dnat.map(|hop| QueryFlow {
        transport: hop.transport,
        client: hop.src,
        server: hop.server,
    }))
}

/// The first [`MAX_LOOKUPS`] distinct `flows` worth asking conntrack about.
fn distinct_flows(flows: impl Iterator<Item = QueryFlow>) -> Vec<QueryFlow> {
    let mut distinct = Vec::new();
    // Nothing DNATs to a loopback address (kube-proxy cannot), and a pod's loopback is not in
    // the node's conntrack table anyway: such a lookup could only come back empty.
    for flow in flows.filter(|flow| !flow.server.ip().is_loopback()) {
        if distinct.len() == MAX_LOOKUPS {
            break;
        }
        if !distinct.contains(&flow) {
            distinct.push(flow);
        }
    }
    distinct
}

/// The DNAT that `entry`, conntrack's entry for `delivered`, records; `None` when the query was
/// delivered where its client sent it.
pub fn translation(delivered: &QueryFlow, entry: &ConntrackEvidence) -> Option<Dnat> {
    (entry.original_dst != delivered.server).then_some(Dnat {
        service: entry.original_dst,
        backend: delivered.server,
    })
}

/// `summary` with each forward to a DNAT backend named by the service it was sent to:
/// `-> 10.244.0.4 (pod ...)` becomes `-> 10.96.0.10 (DNAT -> 10.244.0.4) (pod ...)`. Applying it
/// again changes nothing.
pub fn name_services(summary: &str, translations: &[Dnat]) -> String {
    let mut named = summary.to_owned();
    for dnat in translations {
        let (backend, service) = (dnat.backend.ip(), dnat.service.ip());
        if !has_one_service(backend, translations) {
            continue;
        }
        // The route names each forward `-> ADDRESS `, then its namespace or the next arrow. The
        // arrow and the space keep 10.244.0.4 from matching in 110.244.0.4 or 10.244.0.40; the
        // question's name cannot hold them, since presentation format escapes spaces.
        named = named.replace(
            &format!("-> {backend} "),
            &format!("-> {service} (DNAT -> {backend}) "),
        );
    }
    named
}

/// Whether every translation to `backend` came from one service address. The summary names
/// forwards by address only: were two services DNAT'ed to one backend, it could not tell which
/// forward went through which.
fn has_one_service(backend: IpAddr, translations: &[Dnat]) -> bool {
    let mut services = translations
        .iter()
        .filter(|dnat| dnat.backend.ip() == backend)
        .map(|dnat| dnat.service.ip());
    let first = services.next();
    services.all(|service| Some(service) == first)
}

#[cfg(test)]
mod tests {
    use std::{net::SocketAddr, sync::Arc, time::SystemTime};

    use dnsloop_shared::point::Direction;

    use super::*;
    use crate::observation::{Point, Transport};

    /// What the analyzer says of the node cache's loop through CoreDNS, seen after DNAT.
    const NODELOCAL_LOOP: &str = "loop: www.example.test. A: node -> 10.244.0.4 (pod \
        10.244.0.4) -> 169.254.25.10 (node) (4 hops): pod 10.244.0.4 forwards to 169.254.25.10 \
        on the node, which sends the question back";

    fn addr(text: &str) -> SocketAddr {
        text.parse().expect("a socket address")
    }

    fn hop(transport: Transport, src: &str, dst: &str) -> Hop {
        Hop {
            ts: SystemTime::UNIX_EPOCH,
            point: Arc::new(Point {
                ifname: Arc::from("cni0"),
                direction: Direction::Egress,
                leaves: None,
                enters: None,
            }),
            src: addr(src),
            dst: addr(dst),
            id: 1,
            transport,
        }
    }

    fn udp(client: &str, server: &str) -> QueryFlow {
        QueryFlow {
            transport: Transport::Udp,
            client: addr(client),
            server: addr(server),
        }
    }

    fn dnat(service: &str, backend: &str) -> Dnat {
        Dnat {
            service: addr(service),
            backend: addr(backend),
        }
    }

    fn entry(original_dst: &str, reply_src: &str) -> ConntrackEvidence {
        ConntrackEvidence {
            original_dst: addr(original_dst),
            reply_src: addr(reply_src),
            unreplied: false,
        }
    }

    #[test]
    fn each_flow_is_looked_up_once_in_the_order_it_was_seen() {
        let path = [
            hop(Transport::Udp, "10.255.0.1:43913", "10.244.0.4:53"),
            hop(Transport::Udp, "10.255.0.1:43913", "10.244.0.4:53"),
            hop(Transport::Udp, "10.244.0.4:40000", "169.254.25.10:53"),
            hop(Transport::Udp, "10.244.0.4:40000", "169.254.25.10:53"),
        ];
        assert_eq!(
            flows_to_look_up(&path),
            [
                udp("10.255.0.1:43913", "10.244.0.4:53"),
                udp("10.244.0.4:40000", "169.254.25.10:53"),
            ]
        );
    }

    #[test]
    fn a_flow_is_keyed_by_its_transport_too() {
        let path = [
            hop(Transport::Tcp, "10.255.0.1:43913", "10.244.0.4:53"),
            hop(Transport::Udp, "10.255.0.1:43913", "10.244.0.4:53"),
        ];
        let transports: Vec<Transport> = flows_to_look_up(&path)
            .iter()
            .map(|flow| flow.transport)
            .collect();
        assert_eq!(transports, [Transport::Tcp, Transport::Udp]);
    }

    #[test]
    fn loopback_hops_are_not_looked_up() {
        let path = [
            hop(Transport::Udp, "127.0.0.1:40000", "127.0.0.1:53"),
            hop(Transport::Udp, "[::1]:40000", "[::1]:53"),
        ];
        assert_eq!(flows_to_look_up(&path), []);
    }

    #[test]
    fn lookups_per_report_are_bounded() {
        let path: Vec<Hop> = (0..10)
            .map(|port| {
                hop(
                    Transport::Udp,
                    &format!("10.255.0.1:{}", 40000 + port),
                    "10.244.0.4:53",
                )
            })
            .collect();
        let flows = flows_to_look_up(&path);
        assert_eq!(flows.len(), MAX_LOOKUPS);
        assert_eq!(flows[0], udp("10.255.0.1:40000", "10.244.0.4:53"));
    }

    #[test]
    fn a_lookups_queries_delivered_where_first_addressed_are_looked_up_once() {
        let crate::finding::Finding::Lookup(found) = crate::testkit::samples::a_slow_lookup()
        else {
            unreachable!("a lookup")
        };
        let mut hops = found.hops;
        // The cache's forward, seen already DNAT'ed, and the same flow again.
        hops[1].backend = None;
        hops[1].server = addr("10.244.0.3:53");
        hops.push(hops[1].clone());
        let mut on_loopback = hops[1].clone();
        on_loopback.server = addr("127.0.0.1:53");
        hops.push(on_loopback);
        assert_eq!(
            lookup_flows_to_look_up(&hops),
            [
                udp("10.244.0.2:41234", "169.254.25.10:53"),
                udp("10.255.0.1:50000", "10.244.0.3:53")
            ],
            "the upstream's hop left the node; loopback is never DNAT'ed"
        );
    }

    #[test]
    fn a_query_delivered_elsewhere_than_sent_was_dnated() {
        let delivered = udp("10.255.0.1:43913", "10.244.0.4:53");
        assert_eq!(
            translation(&delivered, &entry("10.96.0.10:53", "10.244.0.4:53")),
            Some(dnat("10.96.0.10:53", "10.244.0.4:53"))
        );
    }

    #[test]
    fn a_query_delivered_where_it_was_sent_was_not_dnated() {
        let delivered = udp("10.244.0.4:40000", "169.254.25.10:53");
        assert_eq!(
            translation(&delivered, &entry("169.254.25.10:53", "169.254.25.10:53")),
            None
        );
    }

    #[test]
    fn the_summary_names_the_service_before_its_backend() {
        assert_eq!(
            name_services(NODELOCAL_LOOP, &[dnat("10.96.0.10:53", "10.244.0.4:53")]),
            "loop: www.example.test. A: node -> 10.96.0.10 (DNAT -> 10.244.0.4) (pod \
             10.244.0.4) -> 169.254.25.10 (node) (4 hops): pod 10.244.0.4 forwards to \
             169.254.25.10 on the node, which sends the question back"
        );
    }

    #[test]
    fn naming_twice_is_naming_once() {
        let translations = [dnat("10.96.0.10:53", "10.244.0.4:53")];
        let once = name_services(NODELOCAL_LOOP, &translations);
        assert_eq!(name_services(&once, &translations), once);
    }

    #[test]
    fn without_translations_the_summary_stays() {
        assert_eq!(name_services(NODELOCAL_LOOP, &[]), NODELOCAL_LOOP);
    }

    #[test]
    fn only_the_backends_own_address_is_renamed() {
        let summary = "loop: x. A: node -> 10.244.0.40 (pod a) -> 110.244.0.4 (pod b) -> \
                       10.244.0.4 (pod c) (3 hops): check";
        assert_eq!(
            name_services(summary, &[dnat("10.96.0.10:53", "10.244.0.4:53")]),
            "loop: x. A: node -> 10.244.0.40 (pod a) -> 110.244.0.4 (pod b) -> 10.96.0.10 \
             (DNAT -> 10.244.0.4) (pod c) (3 hops): check"
        );
    }

    #[test]
    fn a_forward_to_an_unwatched_namespace_is_named_too() {
        let summary = "loop: x. A: node -> fd00:10:244::4 -> fd00:10:244::1 (node) (2 hops): check";
        assert_eq!(
            name_services(
                summary,
                &[dnat("[fd00:10:96::a]:53", "[fd00:10:244::4]:53")]
            ),
            "loop: x. A: node -> fd00:10:96::a (DNAT -> fd00:10:244::4) -> fd00:10:244::1 \
             (node) (2 hops): check"
        );
    }

    #[test]
    fn a_backend_behind_two_services_is_not_named() {
        let translations = [
            dnat("10.96.0.10:53", "10.244.0.4:53"),
            dnat("10.96.0.11:53", "10.244.0.4:53"),
        ];
        assert_eq!(name_services(NODELOCAL_LOOP, &translations), NODELOCAL_LOOP);
    }

    #[test]
    fn one_service_on_two_ports_is_still_one_service() {
        let translations = [
            dnat("10.96.0.10:53", "10.244.0.4:53"),
            dnat("10.96.0.10:5353", "10.244.0.4:5353"),
        ];
        assert!(name_services(NODELOCAL_LOOP, &translations)
            .contains("node -> 10.96.0.10 (DNAT -> 10.244.0.4) (pod 10.244.0.4)"));
    }
}
