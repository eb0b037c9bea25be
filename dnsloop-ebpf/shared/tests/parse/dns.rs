//! `parse_dns`: header fields, the first question's name walk, hashing and probes.

use super::common::*;
use dnsloop_shared::parse::{name_hash, parse_dns, Malformed, Probe, Question, DNS_BUF_LEN};

fn question_of(msg: &[u8]) -> Question {
    parse_bytes(msg).unwrap().question.expect("a question")
}

fn name_error(wire: &[u8]) -> Malformed {
    parse_bytes(&dns_query_wire(1, wire, QTYPE_A)).unwrap_err()
}

fn probe_of(name: &str, qtype: u16) -> Probe {
    question_of(&dns_query(1, name, qtype)).probe
}

// --- header -----------------------------------------------------------------------------------

#[test]
fn header_fields_and_flags() {
    let mut msg = dns_query(0xbeef, "example.com", QTYPE_A);
    // QR 1, opcode 2, AA, TC, RD, RA, Z/AD/CD 0, rcode 5.
    let flags: u16 = (1 << 15) | (2 << 11) | (1 << 10) | (1 << 9) | (1 << 8) | (1 << 7) | 5;
    msg[2..4].copy_from_slice(&flags.to_be_bytes());
    msg[6..12].copy_from_slice(&[0, 3, 0, 4, 0, 5]);
    let header = parse_bytes(&msg).unwrap().header;
    assert_eq!(
        (
            header.id,
            header.qdcount,
            header.ancount,
            header.nscount,
            header.arcount
        ),
        (0xbeef, 1, 3, 4, 5)
    );
    assert!(header.qr() && header.aa() && header.tc() && header.rd() && header.ra());
    assert_eq!((header.opcode(), header.rcode()), (2, 5));

    let plain = parse_bytes(&dns_query(1, "example.com", QTYPE_A))
        .unwrap()
        .header;
    assert!(!plain.qr() && !plain.aa() && !plain.tc() && plain.rd() && !plain.ra());
    assert_eq!((plain.opcode(), plain.rcode()), (0, 0));
}

#[test]
fn no_question_when_qdcount_is_zero() {
    let summary = parse_bytes(&dns_message(9, 0, &[0xc0, 0x0c])).unwrap();
    assert_eq!(summary.header.id, 9);
    assert_eq!(summary.question, None);
}

#[test]
fn truncated_header() {
    let msg = dns_query(1, "example.com", QTYPE_A);
    for len in 0..12 {
        assert_eq!(parse_bytes(&msg[..len]), Err(Malformed::DnsTruncatedHeader));
    }
}

#[test]
fn truncated_question_at_every_length() {
    let msg = dns_query(1, "example.com", QTYPE_A);
    for len in 12..msg.len() {
        assert_eq!(
            parse_bytes(&msg[..len]),
            Err(Malformed::DnsTruncatedQuestion),
            "{len}"
        );
    }
    assert!(parse_bytes(&msg).is_ok());
}

#[test]
fn more_valid_bytes_than_the_buffer_holds() {
    let buf = [0; DNS_BUF_LEN];
    assert_eq!(
        parse_dns(&buf, DNS_BUF_LEN + 1),
        Err(Malformed::DnsBadLength)
    );
}

#[test]
fn bytes_after_the_first_question_are_not_read() {
    let mut msg = dns_query(1, "example.com", QTYPE_A);
    msg[4..6].copy_from_slice(&2u16.to_be_bytes());
    msg.extend_from_slice(&[0xc0, 0x0c, 0xff]); // a compressed, cut second question
    assert!(parse_bytes(&msg).is_ok());
}

// --- the name walk ----------------------------------------------------------------------------

#[test]
fn question_fields() {
    let wire = wire_name("www.example.com");
    let question = question_of(&dns_query_wire(1, &wire, QTYPE_TXT));
    assert_eq!(
        question,
        Question {
            name_hash: name_hash(&wire),
            name_len: 17,
            labels: 3,
            qtype: QTYPE_TXT,
            qclass: QCLASS_IN,
            probe: Probe::None,
        }
    );
}

#[test]
fn root_name() {
    let question = question_of(&dns_query(1, ".", 2));
    assert_eq!((question.name_len, question.labels), (1, 0));
    assert_eq!(question.name_hash, name_hash(&[0]));
}

#[test]
fn compression_pointer_in_the_question() {
    assert_eq!(name_error(&[0xc0, 0x0c]), Malformed::DnsCompressionPointer);
    assert_eq!(
        name_error(&[3, b'w', b'w', b'w', 0xc0, 0x10]),
        Malformed::DnsCompressionPointer
    );
    assert_eq!(name_error(&[0xff, 0xff]), Malformed::DnsCompressionPointer);
}

#[test]
fn compression_loop_bytes_end_the_walk() {
    // A pointer to itself, and two pointers to each other: following them would never end.
    assert_eq!(
        name_error(&[0xc0, 0x0c, 0, 0]),
        Malformed::DnsCompressionPointer
    );
    assert_eq!(
        name_error(&[0xc0, 0x0e, 0xc0, 0x0c]),
        Malformed::DnsCompressionPointer
    );
}

#[test]
fn label_types_between_64_and_191_are_illegal() {
    for label_type in [64, 0x41, 0x7f, 0x80, 0xbf] {
        let mut wire = vec![label_type];
        wire.extend_from_slice(&[b'a'; 70]);
        wire.push(0);
        assert_eq!(
            name_error(&wire),
            Malformed::DnsLabelTooLong,
            "{label_type:#x}"
        );
    }
}

#[test]
fn label_of_63_bytes_is_legal() {
    let label = "a".repeat(63);
    assert_eq!(
        question_of(&dns_query(1, &format!("{label}.com"), QTYPE_A)).name_len,
        69
    );
}

#[test]
fn name_of_255_bytes_is_legal_and_256_is_too_long() {
    // 3 labels of 63 and one of 61: 4 + 63 * 3 + 61 + 1 = 255 wire bytes.
    let longest = format!("{0}.{0}.{0}.{1}", "a".repeat(63), "b".repeat(61));
    assert_eq!(wire_name(&longest).len(), 255);
    assert_eq!(question_of(&dns_query(1, &longest, QTYPE_A)).name_len, 255);

    let too_long = format!("{0}.{0}.{0}.{1}", "a".repeat(63), "b".repeat(62));
    assert_eq!(wire_name(&too_long).len(), 256);
    assert_eq!(name_error(&wire_name(&too_long)), Malformed::DnsNameTooLong);
}

#[test]
fn labels_without_a_root_are_too_long() {
    let endless: Vec<u8> = [&[63u8][..], &[b'x'; 63]].concat().repeat(5);
    assert_eq!(name_error(&endless), Malformed::DnsNameTooLong);
}

#[test]
fn label_running_past_the_message_is_a_truncated_question() {
    let mut msg = dns_message(1, 1, &[10, b'a', b'b']);
    assert_eq!(parse_bytes(&msg), Err(Malformed::DnsTruncatedQuestion));
    msg.truncate(12);
    assert_eq!(parse_bytes(&msg), Err(Malformed::DnsTruncatedQuestion));
}

#[test]
fn one_hundred_and_twenty_seven_labels_but_not_128() {
    let name_127 = vec!["a"; 127].join(".");
    let question = question_of(&dns_query(1, &name_127, QTYPE_A));
    assert_eq!((question.labels, question.name_len), (127, 255));

    // 128 labels take at least 257 wire bytes: the length bound is what rejects them.
    let name_128 = vec!["a"; 128].join(".");
    assert_eq!(name_error(&wire_name(&name_128)), Malformed::DnsNameTooLong);
}

#[test]
fn mixed_case_names_hash_equal() {
    let lower = question_of(&dns_query(1, "www.example.com", QTYPE_A));
    let mixed = question_of(&dns_query(1, "WwW.ExAmPlE.CoM", QTYPE_A));
    assert_eq!(lower.name_hash, mixed.name_hash);
    let other = question_of(&dns_query(1, "www.example.org", QTYPE_A));
    assert_ne!(lower.name_hash, other.name_hash);
    // Label boundaries are part of the hash.
    let split = question_of(&dns_query(1, "www.exam.ple.com", QTYPE_A));
    assert_ne!(lower.name_hash, split.name_hash);
}

// --- probes -----------------------------------------------------------------------------------

#[test]
fn coredns_loop_probe() {
    assert_eq!(
        probe_of("6627366374841107488.3394449046415853644.", QTYPE_HINFO),
        Probe::CoreDns
    );
    assert_eq!(probe_of("1.2.cluster.local", QTYPE_HINFO), Probe::CoreDns);
    assert_eq!(
        probe_of("12345678901234567890.1.", QTYPE_HINFO),
        Probe::CoreDns
    );
}

#[test]
fn coredns_near_misses() {
    assert_eq!(
        probe_of("6627366374841107488.33944490464158x3644.", QTYPE_HINFO),
        Probe::None
    );
    assert_eq!(
        probe_of("abc.3394449046415853644.", QTYPE_HINFO),
        Probe::None
    );
    assert_eq!(probe_of("6627366374841107488.", QTYPE_HINFO), Probe::None);
    assert_eq!(
        probe_of("123456789012345678901.1.", QTYPE_HINFO),
        Probe::None
    );
    assert_eq!(
        probe_of("6627366374841107488.3394449046415853644.", QTYPE_TXT),
        Probe::None
    );
}

#[test]
fn dnsmasq_loop_probe() {
    assert_eq!(probe_of("0badcafe.test.", QTYPE_TXT), Probe::Dnsmasq);
    assert_eq!(probe_of("0BADcaFE.TeSt", QTYPE_TXT), Probe::Dnsmasq);
    assert_eq!(probe_of("12345678.test", QTYPE_TXT), Probe::Dnsmasq);
}

#[test]
fn dnsmasq_near_misses() {
    assert_eq!(probe_of("0badcaf.test.", QTYPE_TXT), Probe::None);
    assert_eq!(probe_of("0badcafe0.test.", QTYPE_TXT), Probe::None);
    assert_eq!(probe_of("0badcafg.test.", QTYPE_TXT), Probe::None);
    assert_eq!(probe_of("0badcafe.test.example.", QTYPE_TXT), Probe::None);
    assert_eq!(probe_of("0badcafe.tesd.", QTYPE_TXT), Probe::None);
    assert_eq!(probe_of("0badcafe.tests.", QTYPE_TXT), Probe::None);
    assert_eq!(probe_of("0badcafe.", QTYPE_TXT), Probe::None);
    assert_eq!(probe_of("0badcafe.test.", QTYPE_HINFO), Probe::None);
}

#[test]
fn probes_through_the_whole_pipeline() {
    let coredns = dns_query(3, "1.2.", QTYPE_HINFO);
    let spec = FrameSpec {
        payload: coredns,
        ..FrameSpec::default()
    }
    .ipv6()
    .tcp();
    assert_eq!(
        parse_single(&spec).unwrap().question.unwrap().probe,
        Probe::CoreDns
    );
    let dnsmasq = dns_query(4, "deadbeef.test", QTYPE_TXT);
    let spec = FrameSpec {
        payload: dnsmasq,
        vlan_tags: 2,
        ..FrameSpec::default()
    };
    assert_eq!(
        parse_single(&spec).unwrap().question.unwrap().probe,
        Probe::Dnsmasq
    );
}
