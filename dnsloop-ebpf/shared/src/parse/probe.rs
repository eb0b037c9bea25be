//! Recognises the loop-detection probes of CoreDNS and dnsmasq in a query's first question.

use super::dns::AcceptedName;

/// Which loop-detection probe a question is.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Probe {
    None = 0,
    /// CoreDNS `loop` plugin: `HINFO <digits>.<digits>.<zone>` (the zone may be the root).
    CoreDns = 1,
    /// dnsmasq `--dns-loop-detect`: `TXT <8 hex digits>.test.`
    Dnsmasq = 2,
}

const QTYPE_HINFO: u16 = 13;
const QTYPE_TXT: u16 = 16;
/// CoreDNS prints two random `i64`s (at most 19 digits); allow a little slack.
const COREDNS_MAX_DIGITS: u8 = 20;
/// dnsmasq prints a `u32` as `%.8x`, then `.test`: in wire form the name is the length octet
/// 8, eight hex digits, and this suffix.
const DNSMASQ_HEX_DIGITS: u8 = 8;
const DNSMASQ_SUFFIX: [u8; 6] = *b"\x04test\x00";
const DNSMASQ_NAME_LEN: usize = 1 + DNSMASQ_HEX_DIGITS as usize + DNSMASQ_SUFFIX.len();

/// Which probe a question with this name and type is.
///
/// Both checks follow the name's labels from the start and stop at the first byte that does not
/// fit, which is at the latest the root label: so they only read bytes of the name.
#[inline(always)]
pub(crate) fn detect_probe(name: &AcceptedName, qtype: u16) -> Probe {
    match qtype {
        QTYPE_HINFO if is_coredns_probe(name) => Probe::CoreDns,
        QTYPE_TXT if is_dnsmasq_probe(name) => Probe::Dnsmasq,
        _ => Probe::None,
    }
}

/// The first two labels are 1 to 20 ASCII digits; any zone (the root included) may follow.
#[inline(always)]
fn is_coredns_probe(name: &AcceptedName) -> bool {
    match digit_label_end(name, 0) {
        Some(second) => digit_label_end(name, second).is_some(),
        None => false,
    }
}

/// If the label at `wire_index` is 1 to 20 ASCII digits, the index just past it.
#[inline(always)]
fn digit_label_end(name: &AcceptedName, wire_index: usize) -> Option<usize> {
    let len = name.byte(wire_index);
    if !(1..=COREDNS_MAX_DIGITS).contains(&len) {
        return None;
    }
    // Bounded by the constant for the verifier, ended by the label length.
    for digit in 0..usize::from(COREDNS_MAX_DIGITS) {
        if digit == usize::from(len) {
            break;
        }
        if !name.byte(wire_index + 1 + digit).is_ascii_digit() {
            return None;
        }
    }
    Some(wire_index + 1 + usize::from(len))
}

/// The name is exactly `<8 hex digits>.test.` (case-insensitive).
#[inline(always)]
fn is_dnsmasq_probe(name: &AcceptedName) -> bool {
    for wire_index in 0..DNSMASQ_NAME_LEN {
        let byte = name.byte(wire_index);
        let fits = match wire_index {
            0 => byte == DNSMASQ_HEX_DIGITS,
            1..=8 => byte.is_ascii_hexdigit(),
            _ => DNSMASQ_SUFFIX.get(wire_index - 9) == Some(&byte.to_ascii_lowercase()),
        };
        if !fits {
            return false;
        }
    }
    true
}
