//! The seed corpus of the `parse_packet` fuzz target: crafted frames that reach every layer.
//!
//! Regenerate with `cargo test -p dnsloop-shared --test parse -- --ignored write_fuzz_seed_corpus`.

use std::path::Path;

use super::common::*;
use dnsloop_shared::parse::LinkLayer;
use ExtensionHeader::*;

fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    let query = dns_query(0x1234, "www.example.com", QTYPE_A);
    let second = dns_query(0x1235, "WWW.Example.ORG", QTYPE_TXT);
    let extensions = vec![
        HopByHop,
        Fragment {
            offset: 0,
            more: true,
        },
        Authentication,
    ];
    let tcp_options = vec![2, 4, 5, 0xb4, 1, 1, 4, 2];
    vec![
        ("eth_ipv4_udp_query", FrameSpec::default().build()),
        (
            "eth_vlan_ipv4_options_udp",
            FrameSpec {
                vlan_tags: 1,
                ipv4_options: vec![1, 1, 1, 0],
                ..FrameSpec::default()
            }
            .build(),
        ),
        (
            "eth_qinq_ipv6_extensions_tcp_two_messages",
            FrameSpec {
                vlan_tags: 2,
                ipv6_extensions: extensions,
                tcp_options,
                transport: dnsloop_shared::parse::Transport::Tcp,
                payload: tcp_stream(&[&query, &second]),
                ..FrameSpec::default()
            }
            .ipv6()
            .build(),
        ),
        (
            "sll_ipv4_udp_coredns_probe",
            FrameSpec {
                link: LinkLayer::LinuxSll,
                payload: dns_query(7, "6627366374841107488.3394449046415853644.", QTYPE_HINFO),
                ..FrameSpec::default()
            }
            .build(),
        ),
        (
            "sll2_ipv6_udp_dnsmasq_probe",
            FrameSpec {
                link: LinkLayer::LinuxSll2,
                payload: dns_query(8, "0badcafe.test.", QTYPE_TXT),
                ..FrameSpec::default()
            }
            .ipv6()
            .build(),
        ),
        (
            "raw_ipv4_tcp_query",
            FrameSpec {
                link: LinkLayer::RawIp,
                ..FrameSpec::default()
            }
            .tcp()
            .build(),
        ),
        (
            "eth_ipv4_udp_compression_pointer",
            FrameSpec {
                payload: dns_query_wire(9, &[0xc0, 0x0c], QTYPE_A),
                ..FrameSpec::default()
            }
            .build(),
        ),
        ("bare_dns_query", query),
    ]
}

#[test]
#[ignore = "writes dnsloop-ebpf/shared/fuzz/corpus/parse_packet; run it on purpose"]
fn write_fuzz_seed_corpus() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/parse_packet");
    std::fs::create_dir_all(&dir).unwrap();
    for (name, bytes) in seeds() {
        std::fs::write(dir.join(name), bytes).unwrap();
    }
}
