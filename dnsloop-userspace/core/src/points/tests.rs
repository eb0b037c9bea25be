use super::*;

#[test]
fn a_namespace_holds_the_addresses_its_links_hold_and_every_loopback_address() {
    let mut points = PointMap::default();
    let node = Namespace::new(NODE);
    let pod = Namespace::new("pod 10.244.0.3");
    let cache: IpAddr = "169.254.25.10".parse().unwrap();
    let gone: IpAddr = "10.99.0.53".parse().unwrap();
    assert_eq!(points.holds(&node, cache), None, "nothing is known yet");
    points.add_address(&node, 4, cache);
    points.add_address(&node, 5, cache);
    assert_eq!(points.holds(&node, cache), Some(true));
    assert_eq!(points.holds(&node, gone), Some(false));
    points.remove_address(&node, 4, cache);
    assert_eq!(
        points.holds(&node, cache),
        Some(true),
        "link 5 still holds it"
    );
    points.remove_address(&node, 5, cache);
    assert_eq!(points.holds(&node, cache), Some(false));
    for loopback in ["127.0.0.53", "::1"] {
        let loopback: IpAddr = loopback.parse().unwrap();
        assert_eq!(points.holds(&node, loopback), Some(true));
        assert_eq!(points.holds(&pod, loopback), Some(true));
    }
    assert_eq!(
        points.holds(&pod, gone),
        None,
        "a pod's addresses are not known"
    );
}

#[test]
fn each_namespace_has_one_number_for_the_kernel() {
    let mut points = PointMap::default();
    points.insert_loopback(7, Namespace::new("pod 10.244.0.3"));
    let bridge = LinkDescription {
        role: Role::BridgeMaster,
        namespace: None,
        gateway: None,
    };
    points.insert_link(3, "cni0", bridge, LinkLayer::Ethernet);
    let numbered = points.kernel_points();
    let at = |cookie, ifindex, direction: Direction| {
        numbered
            .iter()
            .find(|placed| {
                let point = placed.point;
                (point.netns_cookie, point.ifindex, point.direction)
                    == (cookie, ifindex, direction as u8)
            })
            .map(|placed| placed.namespaces)
            .expect("a numbered point")
    };
    let pod_lo = at(7, 1, Direction::Egress);
    assert_eq!(
        pod_lo.leaves, pod_lo.enters,
        "loopback leaves and enters its pod"
    );
    assert_ne!(pod_lo.leaves, 0);
    let into_node = at(0, 3, Direction::Ingress);
    let out_of_node = at(0, 3, Direction::Egress);
    assert_eq!(
        (into_node.leaves, out_of_node.enters),
        (0, 0),
        "the bridge side"
    );
    assert_eq!(into_node.enters, out_of_node.leaves, "the node");
    assert_ne!(into_node.enters, pod_lo.leaves);
    assert_eq!(points.kernel_points().len(), numbered.len());
    assert_eq!(at(0, 3, Direction::Ingress), into_node, "numbers are kept");
}

#[test]
fn a_bridge_port_places_frames_to_and_from_the_bridge_in_the_node_too() {
    let bridge_mac = [0x02, 0x42, 0x0a, 0xf4, 0x00, 0x01];
    let pod_mac = [0x02, 0, 0, 0, 0, 0x03];
    let mut points = PointMap::default();
    let port = LinkDescription {
        role: Role::Veth { bridged: true },
        namespace: Some(Namespace::new("pod 10.244.0.3")),
        gateway: Some(bridge_mac),
    };
    points.insert_link(5, "veth-coredns-a", port.clone(), LinkLayer::Ethernet);
    let names = |point: &Point| {
        (
            point.leaves.as_ref().map(ToString::to_string),
            point.enters.as_ref().map(ToString::to_string),
        )
    };
    let pod = || Some("pod 10.244.0.3".to_string());
    let node = || Some(NODE.to_string());
    let seen = |direction, via_gateway| Seen {
        interface: InterfaceRef {
            netns_cookie: 0,
            ifindex: 5,
        },
        direction,
        via_gateway,
    };
    let at = |direction, via_gateway| names(points.get(seen(direction, via_gateway)).unwrap());
    assert_eq!(
        at(Direction::Ingress, false),
        (pod(), None),
        "to another port"
    );
    assert_eq!(at(Direction::Ingress, true), (pod(), node()), "to the node");
    assert_eq!(at(Direction::Egress, false), (None, pod()));
    assert_eq!(at(Direction::Egress, true), (node(), pod()));

    let frame = |to: [u8; 6], from: [u8; 6]| [to, from].concat();
    let link = port.points("veth-coredns-a");
    assert!(link.via_gateway(Direction::Ingress, &frame(bridge_mac, pod_mac)));
    assert!(link.via_gateway(Direction::Egress, &frame(pod_mac, bridge_mac)));
    assert!(!link.via_gateway(Direction::Ingress, &frame(pod_mac, bridge_mac)));
    assert!(
        !link.via_gateway(Direction::Ingress, &bridge_mac),
        "a cut frame"
    );

    let kernel = points.kernel_points();
    let ingress = kernel
        .iter()
        .find(|point| point.point.direction == Direction::Ingress as u8)
        .unwrap();
    assert_eq!(ingress.gateway_mac, mac_word(bridge_mac));
    assert_ne!(ingress.namespaces.leaves, 0);
    assert_eq!(ingress.namespaces.enters, 0);
    assert_eq!(ingress.via_gateway.leaves, ingress.namespaces.leaves);
    assert_ne!(ingress.via_gateway.enters, 0, "the node");
}

fn names(crossing: (Option<Namespace>, Option<Namespace>)) -> (Option<String>, Option<String>) {
    (
        crossing.0.map(|namespace| namespace.to_string()),
        crossing.1.map(|namespace| namespace.to_string()),
    )
}

#[test]
fn bridge_ports_lead_into_pods_and_the_bridge_into_the_node() {
    let (node, pod) = (Namespace::new(NODE), Namespace::new("pod 10.244.0.2"));
    let port = Role::Veth { bridged: true };
    assert_eq!(
        names(crossing(&port, &node, &pod, Direction::Ingress)),
        (Some("pod 10.244.0.2".into()), None)
    );
    assert_eq!(
        names(crossing(&port, &node, &pod, Direction::Egress)),
        (None, Some("pod 10.244.0.2".into()))
    );
    let bridge = Role::BridgeMaster;
    assert_eq!(
        names(crossing(&bridge, &node, &pod, Direction::Ingress)),
        (None, Some("node".into()))
    );
    assert_eq!(
        names(crossing(&bridge, &node, &pod, Direction::Egress)),
        (Some("node".into()), None)
    );
}

#[test]
fn a_point_to_point_veth_joins_the_node_and_the_far_namespace() {
    let (node, far) = (Namespace::new(NODE), Namespace::new("pod 10.255.0.53"));
    let uplink = Role::Veth { bridged: false };
    assert_eq!(
        names(crossing(&uplink, &node, &far, Direction::Egress)),
        (Some("node".into()), Some("pod 10.255.0.53".into()))
    );
    let physical = Role::Other { bridged: false };
    assert_eq!(
        names(crossing(&physical, &node, &far, Direction::Egress)),
        (Some("node".into()), None)
    );
}

#[test]
fn descriptions_read_back_as_written() {
    let descriptions = [
        LinkDescription {
            role: Role::Veth { bridged: true },
            namespace: Some(Namespace::new("pod 10.244.0.3")),
            gateway: Some([0x02, 0x42, 0x0a, 0xf4, 0x00, 0x01]),
        },
        LinkDescription {
            role: Role::Loopback,
            namespace: Some(Namespace::new("pod 10.244.0.3")),
            gateway: None,
        },
        // A pod dnsloop named: the name runs to the end of the line.
        LinkDescription {
            role: Role::Veth { bridged: true },
            namespace: Some(Namespace::new("pod kube-system/coredns-5d78c9869d-abcde")),
            gateway: None,
        },
        LinkDescription {
            role: Role::BridgeMaster,
            namespace: None,
            gateway: None,
        },
        LinkDescription {
            role: Role::Other { bridged: false },
            namespace: None,
            gateway: None,
        },
    ];
    for description in descriptions {
        let text = description.to_string();
        assert_eq!(text.parse::<LinkDescription>(), Ok(description), "{text}");
    }
    assert_eq!(
        "dnsloop/1 role=veth bridged=1 ns=pod 10.244.0.3"
            .parse::<LinkDescription>()
            .map(|description| description
                .points("veth-a")
                .get(Direction::Ingress, false)
                .leaves
                .clone()),
        Ok(Some(Namespace::new("pod 10.244.0.3")))
    );
}

#[test]
fn foreign_and_future_descriptions_are_refused() {
    let refused = |text: &str| text.parse::<LinkDescription>().unwrap_err();
    assert_eq!(refused("Intel(R) Ethernet"), DescriptionError::Foreign);
    assert_eq!(
        refused("dnsloop/3 role=veth"),
        DescriptionError::Version("dnsloop/3".into())
    );
    assert_eq!(
        refused("dnsloop/1 role=veth bridged=1 gateway=02:42:0a:f4:00:01"),
        DescriptionError::Field("gateway=02:42:0a:f4:00:01".into()),
        "version 1 had no gateway"
    );
    assert_eq!(
        refused("dnsloop/2 role=veth bridged=1 gateway=02:42:0a"),
        DescriptionError::Field("gateway=02:42:0a".into())
    );
    assert_eq!(
        refused("dnsloop/1 role=veth colour=red"),
        DescriptionError::Field("colour=red".into())
    );
    assert_eq!(refused("dnsloop/1 bridged=1"), DescriptionError::NoRole);
    assert_eq!(
        refused("dnsloop/1 role=tunnel"),
        DescriptionError::Field("role=tunnel".into())
    );
}

#[test]
fn a_watched_loopback_takes_its_pods_name_and_no_other_appears() {
    let mut points = PointMap::default();
    points.insert_loopback(42, Namespace::new("pod 10.244.0.2"));
    points.rename_loopback(42, Namespace::new("pod default/client"));
    points.rename_loopback(43, Namespace::new("pod default/other"));
    let lo = |netns_cookie| Seen {
        interface: InterfaceRef {
            netns_cookie,
            ifindex: LOOPBACK_INDEX,
        },
        direction: Direction::Egress,
        via_gateway: false,
    };
    let renamed = points.get(lo(42)).expect("still watched");
    assert_eq!(
        (renamed.leaves.clone(), renamed.enters.clone()),
        (
            Some(Namespace::new("pod default/client")),
            Some(Namespace::new("pod default/client"))
        )
    );
    assert_eq!(points.get(lo(43)), None);
}
