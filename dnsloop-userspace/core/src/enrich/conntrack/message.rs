//! ctnetlink messages: the `IPCTNL_MSG_CT_GET` request for one flow, by either of its tuples, and
//! the evidence in the kernel's answer to it.
use std::net::{IpAddr, SocketAddr};

use netlink_packet_core::{NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_REQUEST};
use netlink_packet_netfilter::{
    conntrack::{
        ConntrackAttribute, ConntrackMessage, IPTuple, ProtoTuple, Protocol, Status, Tuple,
    },
    NetfilterHeader, NetfilterMessage, NetfilterMessageInner, NetfilterProtoFamily,
};

use super::{ConntrackError, KeyTuple, QueryFlow};
use crate::{finding::ConntrackEvidence, observation::Transport};

/// `nfgenmsg.version`: `NFNETLINK_V0`, the only version there is.
const NFNETLINK_V0: u8 = 0;

/// The serialized request for the entry that `flow` is the `by` direction of (in conntrack zone 0,
/// where kube-proxy's entries live): with [`KeyTuple::Reply`], `flow` is the query as delivered,
/// so the entry's reply tuple is its mirror image.
pub fn get_request(flow: &QueryFlow, by: KeyTuple) -> Result<Vec<u8>, ConntrackError> {
    // The kernel reads the tuple's addresses in the family of the netfilter header.
    let family = match (flow.client.ip(), flow.server.ip()) {
        (IpAddr::V4(_), IpAddr::V4(_)) => NetfilterProtoFamily::IPv4,
        (IpAddr::V6(_), IpAddr::V6(_)) => NetfilterProtoFamily::IPv6,
        (client, server) => return Err(ConntrackError::MixedFamilies { client, server }),
    };
    let key = match by {
        KeyTuple::Original => {
            ConntrackAttribute::CtaTupleOrig(key_tuple(flow.transport, flow.client, flow.server))
        }
        KeyTuple::Reply => {
            ConntrackAttribute::CtaTupleReply(key_tuple(flow.transport, flow.server, flow.client))
        }
    };
    let request = NetfilterMessage::new(
        NetfilterHeader::new(family, NFNETLINK_V0, 0),
        ConntrackMessage::Get(vec![key]),
    );
    let mut header = NetlinkHeader::default();
    // No NLM_F_ACK: the kernel answers with the entry or with an error, never with both.
    header.flags = NLM_F_REQUEST;
    let mut message = NetlinkMessage::new(header, NetlinkPayload::from(request));
    message.finalize();
    let mut bytes = vec![0; message.buffer_len()];
    message.serialize(&mut bytes);
    Ok(bytes)
}

/// The evidence in the kernel's answer to [`get_request`]; `Ok(None)` when it has no such entry.
pub fn parse_reply(bytes: &[u8]) -> Result<Option<ConntrackEvidence>, ConntrackError> {
    let message =
        NetlinkMessage::<NetfilterMessage>::deserialize(bytes).map_err(ConntrackError::Decode)?;
    match message.payload {
        NetlinkPayload::InnerMessage(NetfilterMessage {
            inner: NetfilterMessageInner::Conntrack(ConntrackMessage::New(attributes)),
            ..
        }) => evidence(&attributes).map(Some),
        NetlinkPayload::Error(error) => match error.code {
            Some(code) if code.get() == -libc::ENOENT => Ok(None),
            Some(_) => Err(ConntrackError::Refused(error.to_io())),
            None => Err(ConntrackError::Unexpected(
                "an acknowledgement instead of an entry",
            )),
        },
        _ => Err(ConntrackError::Unexpected("neither an entry nor an error")),
    }
}

/// One direction of a flow, as a request names it.
fn key_tuple(transport: Transport, source: SocketAddr, destination: SocketAddr) -> Vec<Tuple> {
    vec![
        Tuple::Ip(vec![
            IPTuple::SourceAddress(source.ip()),
            IPTuple::DestinationAddress(destination.ip()),
        ]),
        Tuple::Proto(vec![
            ProtoTuple::Protocol(protocol(transport)),
            ProtoTuple::SourcePort(source.port()),
            ProtoTuple::DestinationPort(destination.port()),
        ]),
    ]
}

fn protocol(transport: Transport) -> Protocol {
    match transport {
        Transport::Udp => Protocol::Udp,
        Transport::Tcp => Protocol::Tcp,
    }
}

fn evidence(attributes: &[ConntrackAttribute]) -> Result<ConntrackEvidence, ConntrackError> {
    let (_, original_dst) = attributes
        .iter()
        .find_map(|attribute| match attribute {
            ConntrackAttribute::CtaTupleOrig(tuple) => Some(endpoints(tuple)),
            _ => None,
        })
        .ok_or(ConntrackError::Unexpected(
            "an entry without its original tuple",
        ))??;
    let (reply_src, _) = attributes
        .iter()
        .find_map(|attribute| match attribute {
            ConntrackAttribute::CtaTupleReply(tuple) => Some(endpoints(tuple)),
            _ => None,
        })
        .ok_or(ConntrackError::Unexpected(
            "an entry without its reply tuple",
        ))??;
    let status = attributes
        .iter()
        .find_map(|attribute| match attribute {
            ConntrackAttribute::CtaStatus(status) => Some(*status),
            _ => None,
        })
        .ok_or(ConntrackError::Unexpected("an entry without its status"))?;
    Ok(ConntrackEvidence {
        original_dst,
        reply_src,
        unreplied: !status.contains(Status::SeenReply),
    })
}

/// The source and destination of one direction's tuple.
fn endpoints(tuple: &[Tuple]) -> Result<(SocketAddr, SocketAddr), ConntrackError> {
    let addresses = tuple.iter().flat_map(|part| match part {
        Tuple::Ip(addresses) => addresses.as_slice(),
        _ => &[],
    });
    let ports = tuple.iter().flat_map(|part| match part {
        Tuple::Proto(ports) => ports.as_slice(),
        _ => &[],
    });
    let (mut source, mut destination) = (None, None);
    for address in addresses {
        match address {
            IPTuple::SourceAddress(ip) => source = Some(*ip),
            IPTuple::DestinationAddress(ip) => destination = Some(*ip),
            _ => {}
        }
    }
    let (mut source_port, mut destination_port) = (None, None);
    for port in ports {
        match port {
            ProtoTuple::SourcePort(port) => source_port = Some(*port),
            ProtoTuple::DestinationPort(port) => destination_port = Some(*port),
            _ => {}
        }
    }
    match (source, source_port, destination, destination_port) {
        (Some(source), Some(source_port), Some(destination), Some(destination_port)) => Ok((
            SocketAddr::new(source, source_port),
            SocketAddr::new(destination, destination_port),
        )),
        _ => Err(ConntrackError::Unexpected(
            "a tuple without both addresses and ports",
        )),
    }
}

#[cfg(test)]
mod tests {
    use netlink_packet_core::ErrorMessage;

    use super::*;

    /// Linux 6.18's answer to the request for the fault's flow, after `conntrack -I -p udp
    /// -s 10.244.0.2 -d 10.96.0.10 --sport 41234 --dport 53 --reply-src 10.244.0.3
    /// --reply-dst 10.244.0.2 --reply-port-src 53 --reply-port-dst 41234 --timeout 60`.
    /// Netlink headers are in host byte order: these bytes are a little-endian host's.
    const KERNEL_UNREPLIED_ENTRY: &[u8] = &[
        0xc0, 0x00, 0x00, 0x00, 0x00, 0x01, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x8e, 0x7d, 0x00,
        0x00, 0x02, 0x00, 0x00, 0x00, 0x34, 0x00, 0x01, 0x80, 0x14, 0x00, 0x01, 0x80, 0x08, 0x00,
        0x01, 0x00, 0x0a, 0xf4, 0x00, 0x02, 0x08, 0x00, 0x02, 0x00, 0x0a, 0x60, 0x00, 0x0a, 0x1c,
        0x00, 0x02, 0x80, 0x05, 0x00, 0x01, 0x00, 0x11, 0x00, 0x00, 0x00, 0x06, 0x00, 0x02, 0x00,
        0xa1, 0x12, 0x00, 0x00, 0x06, 0x00, 0x03, 0x00, 0x00, 0x35, 0x00, 0x00, 0x34, 0x00, 0x02,
        0x80, 0x14, 0x00, 0x01, 0x80, 0x08, 0x00, 0x01, 0x00, 0x0a, 0xf4, 0x00, 0x03, 0x08, 0x00,
        0x02, 0x00, 0x0a, 0xf4, 0x00, 0x02, 0x1c, 0x00, 0x02, 0x80, 0x05, 0x00, 0x01, 0x00, 0x11,
        0x00, 0x00, 0x00, 0x06, 0x00, 0x02, 0x00, 0x00, 0x35, 0x00, 0x00, 0x06, 0x00, 0x03, 0x00,
        0xa1, 0x12, 0x00, 0x00, 0x08, 0x00, 0x03, 0x00, 0x00, 0x00, 0x00, 0x08, 0x08, 0x00, 0x08,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x08, 0x00, 0x0c, 0x00, 0x77, 0x2d, 0xe1, 0x70, 0x08, 0x00,
        0x0b, 0x00, 0x00, 0x00, 0x00, 0x02, 0x08, 0x00, 0x07, 0x00, 0x00, 0x00, 0x00, 0x3b, 0x1c,
        0x00, 0x18, 0x80, 0x08, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x08, 0x00, 0x02, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x08, 0x00, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00,
    ];

    /// Linux 6.18's answer (ENOENT) to a request for a flow it has no entry for.
    const KERNEL_NO_ENTRY: &[u8] = &[
        0x5c, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x90, 0x7d, 0x00,
        0x00, 0xfe, 0xff, 0xff, 0xff, 0x48, 0x00, 0x00, 0x00, 0x01, 0x01, 0x01, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x34, 0x00, 0x01, 0x80, 0x14,
        0x00, 0x01, 0x80, 0x08, 0x00, 0x01, 0x00, 0x0a, 0xf4, 0x00, 0x02, 0x08, 0x00, 0x02, 0x00,
        0x0a, 0x60, 0x00, 0x0b, 0x1c, 0x00, 0x02, 0x80, 0x05, 0x00, 0x01, 0x00, 0x11, 0x00, 0x00,
        0x00, 0x06, 0x00, 0x02, 0x00, 0xa1, 0x12, 0x00, 0x00, 0x06, 0x00, 0x03, 0x00, 0x00, 0x35,
        0x00, 0x00,
    ];

    fn addr(text: &str) -> SocketAddr {
        text.parse().expect("a socket address")
    }

    fn flow(transport: Transport, client: &str, server: &str) -> QueryFlow {
        QueryFlow {
            transport,
            client: addr(client),
            server: addr(server),
        }
    }

    fn tuple(source: SocketAddr, destination: SocketAddr, protocol: Protocol) -> Vec<Tuple> {
        vec![
            Tuple::Ip(vec![
                IPTuple::SourceAddress(source.ip()),
                IPTuple::DestinationAddress(destination.ip()),
            ]),
            Tuple::Proto(vec![
                ProtoTuple::Protocol(protocol),
                ProtoTuple::SourcePort(source.port()),
                ProtoTuple::DestinationPort(destination.port()),
            ]),
        ]
    }

    /// Serializes what the kernel would send: `payload` in a netlink message.
    fn kernel_message(payload: NetlinkPayload<NetfilterMessage>) -> Vec<u8> {
        let mut message = NetlinkMessage::new(NetlinkHeader::default(), payload);
        message.finalize();
        let mut bytes = vec![0; message.buffer_len()];
        message.serialize(&mut bytes);
        bytes
    }

    fn kernel_entry(attributes: Vec<ConntrackAttribute>) -> Vec<u8> {
        kernel_message(NetlinkPayload::from(NetfilterMessage::new(
            NetfilterHeader::new(NetfilterProtoFamily::IPv6, NFNETLINK_V0, 0),
            ConntrackMessage::New(attributes),
        )))
    }

    fn kernel_error(errno: i32) -> Vec<u8> {
        let mut error = ErrorMessage::default();
        error.code = std::num::NonZeroI32::new(-errno);
        kernel_message(NetlinkPayload::Error(error))
    }

    #[test]
    fn the_request_asks_for_the_original_tuple_of_the_flow() {
        let bytes = get_request(
            &flow(Transport::Udp, "10.244.0.2:41234", "10.96.0.10:53"),
            KeyTuple::Original,
        )
        .expect("an IPv4 flow makes a request");
        let message =
            NetlinkMessage::<NetfilterMessage>::deserialize(&bytes).expect("the request decodes");
        assert_eq!(message.header.flags, NLM_F_REQUEST);
        // NFNL_SUBSYS_CTNETLINK << 8 | IPCTNL_MSG_CT_GET
        assert_eq!(message.header.message_type, 0x0101);
        let NetlinkPayload::InnerMessage(request) = message.payload else {
            panic!("not a netfilter message: {:?}", message.payload);
        };
        assert_eq!(request.header.family, NetfilterProtoFamily::IPv4);
        assert_eq!(
            request.inner,
            NetfilterMessageInner::Conntrack(ConntrackMessage::Get(vec![
                ConntrackAttribute::CtaTupleOrig(tuple(
                    addr("10.244.0.2:41234"),
                    addr("10.96.0.10:53"),
                    Protocol::Udp
                ))
            ]))
        );
    }

    #[test]
    fn an_ipv6_tcp_request_names_its_family_and_protocol() {
        let bytes = get_request(
            &flow(
                Transport::Tcp,
                "[fd00:10:244::2]:41234",
                "[fd00:10:96::a]:53",
            ),
            KeyTuple::Original,
        )
        .expect("an IPv6 flow makes a request");
        let message =
            NetlinkMessage::<NetfilterMessage>::deserialize(&bytes).expect("the request decodes");
        let NetlinkPayload::InnerMessage(request) = message.payload else {
            panic!("not a netfilter message: {:?}", message.payload);
        };
        assert_eq!(request.header.family, NetfilterProtoFamily::IPv6);
        assert_eq!(
            request.inner,
            NetfilterMessageInner::Conntrack(ConntrackMessage::Get(vec![
                ConntrackAttribute::CtaTupleOrig(tuple(
                    addr("[fd00:10:244::2]:41234"),
                    addr("[fd00:10:96::a]:53"),
                    Protocol::Tcp
                ))
            ]))
        );
    }

    #[test]
    fn a_flow_mixing_families_makes_no_request() {
        for by in [KeyTuple::Original, KeyTuple::Reply] {
            let error = get_request(
                &flow(Transport::Udp, "10.244.0.2:41234", "[fd00:10:96::a]:53"),
                by,
            )
            .unwrap_err();
            assert!(
                matches!(error, ConntrackError::MixedFamilies { .. }),
                "{by:?}: {error:?}"
            );
        }
    }

    /// The node cache's query to the ClusterIP, seen only after the output chain DNAT'ed it to
    /// the pod: the entry's reply tuple runs from the pod back to the cache.
    #[test]
    fn a_delivered_query_is_asked_for_by_its_mirror_image_as_the_reply_tuple() {
        let delivered = flow(Transport::Udp, "10.255.0.1:43913", "10.244.0.4:53");
        let bytes = get_request(&delivered, KeyTuple::Reply).expect("an IPv4 flow makes a request");
        let message =
            NetlinkMessage::<NetfilterMessage>::deserialize(&bytes).expect("the request decodes");
        assert_eq!(message.header.flags, NLM_F_REQUEST);
        // NFNL_SUBSYS_CTNETLINK << 8 | IPCTNL_MSG_CT_GET
        assert_eq!(message.header.message_type, 0x0101);
        let NetlinkPayload::InnerMessage(request) = message.payload else {
            panic!("not a netfilter message: {:?}", message.payload);
        };
        assert_eq!(request.header.family, NetfilterProtoFamily::IPv4);
        assert_eq!(
            request.inner,
            NetfilterMessageInner::Conntrack(ConntrackMessage::Get(vec![
                ConntrackAttribute::CtaTupleReply(tuple(
                    addr("10.244.0.4:53"),
                    addr("10.255.0.1:43913"),
                    Protocol::Udp
                ))
            ]))
        );
    }

    #[test]
    fn a_reply_tuple_request_keeps_the_flows_protocol() {
        let delivered = flow(
            Transport::Tcp,
            "[fd00:10:255::1]:43913",
            "[fd00:10:244::4]:53",
        );
        let bytes = get_request(&delivered, KeyTuple::Reply).expect("an IPv6 flow makes a request");
        let message =
            NetlinkMessage::<NetfilterMessage>::deserialize(&bytes).expect("the request decodes");
        let NetlinkPayload::InnerMessage(request) = message.payload else {
            panic!("not a netfilter message: {:?}", message.payload);
        };
        assert_eq!(request.header.family, NetfilterProtoFamily::IPv6);
        assert_eq!(
            request.inner,
            NetfilterMessageInner::Conntrack(ConntrackMessage::Get(vec![
                ConntrackAttribute::CtaTupleReply(tuple(
                    addr("[fd00:10:244::4]:53"),
                    addr("[fd00:10:255::1]:43913"),
                    Protocol::Tcp
                ))
            ]))
        );
    }

    #[cfg(target_endian = "little")]
    #[test]
    fn the_kernels_unreplied_entry_gives_the_dnat_evidence() {
        assert_eq!(
            parse_reply(KERNEL_UNREPLIED_ENTRY).expect("the kernel's entry decodes"),
            Some(ConntrackEvidence {
                original_dst: addr("10.96.0.10:53"),
                reply_src: addr("10.244.0.3:53"),
                unreplied: true,
            })
        );
    }

    #[cfg(target_endian = "little")]
    #[test]
    fn the_kernels_enoent_means_no_entry() {
        assert_eq!(
            parse_reply(KERNEL_NO_ENTRY).expect("ENOENT is an answer"),
            None
        );
    }

    #[test]
    fn an_entry_that_saw_a_reply_is_not_unreplied() {
        let client = addr("[fd00:10:244::2]:41234");
        let cluster_ip = addr("[fd00:10:96::a]:53");
        let pod = addr("[fd00:10:244::3]:53");
        let bytes = kernel_entry(vec![
            ConntrackAttribute::CtaTupleOrig(tuple(client, cluster_ip, Protocol::Udp)),
            ConntrackAttribute::CtaTupleReply(tuple(pod, client, Protocol::Udp)),
            ConntrackAttribute::CtaStatus(Status::Confirmed | Status::SeenReply | Status::DstNat),
        ]);
        assert_eq!(
            parse_reply(&bytes).expect("the entry decodes"),
            Some(ConntrackEvidence {
                original_dst: cluster_ip,
                reply_src: pod,
                unreplied: false,
            })
        );
    }

    #[test]
    fn an_entry_missing_a_part_is_unexpected() {
        let client = addr("10.244.0.2:41234");
        let cluster_ip = addr("10.96.0.10:53");
        let pod = addr("10.244.0.3:53");
        let original = ConntrackAttribute::CtaTupleOrig(tuple(client, cluster_ip, Protocol::Udp));
        let reply = ConntrackAttribute::CtaTupleReply(tuple(pod, client, Protocol::Udp));
        let status = ConntrackAttribute::CtaStatus(Status::Confirmed);
        let portless = ConntrackAttribute::CtaTupleReply(vec![Tuple::Ip(vec![
            IPTuple::SourceAddress(pod.ip()),
            IPTuple::DestinationAddress(client.ip()),
        ])]);
        for attributes in [
            vec![reply.clone(), status.clone()],
            vec![original.clone(), status.clone()],
            vec![original.clone(), reply],
            vec![original, portless, status],
        ] {
            let error = parse_reply(&kernel_entry(attributes.clone())).unwrap_err();
            assert!(
                matches!(error, ConntrackError::Unexpected(_)),
                "{attributes:?}: {error:?}"
            );
        }
    }

    #[test]
    fn other_kernel_errors_are_refusals() {
        let error = parse_reply(&kernel_error(libc::EPERM)).unwrap_err();
        let ConntrackError::Refused(io) = error else {
            panic!("not a refusal: {error:?}");
        };
        assert_eq!(io.raw_os_error(), Some(libc::EPERM));
    }

    #[test]
    fn an_acknowledgement_is_unexpected() {
        let error = parse_reply(&kernel_error(0)).unwrap_err();
        assert!(matches!(error, ConntrackError::Unexpected(_)), "{error:?}");
    }

    #[test]
    fn garbage_does_not_decode() {
        let error = parse_reply(&[0xff; 7]).unwrap_err();
        assert!(matches!(error, ConntrackError::Decode(_)), "{error:?}");
    }
}
