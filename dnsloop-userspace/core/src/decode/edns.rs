//! What a message's EDNS (OPT) record adds to its header (RFC 6891): the UDP payload size a
//! query invites, and the upper bits of a reply's response code.
//!
//! Read by walking the records to the OPT one, not by decoding the whole message: a reply with
//! an OPT record is most replies, and a full decode of each (every name and record allocated,
//! then freed) was an eighth of what `analyze` executed.
use dnsloop_shared::parse::{DnsHeader, Question};

use super::QUESTION_OFFSET;

const OPT: u16 = 41;
/// A record's type, class, TTL and data length, after its name.
const RECORD_FIXED_LEN: usize = 10;
const POINTER: u8 = 0xc0;

/// The UDP payload size the OPT record of a query advertises (RFC 6891 6.2.3): a query has no
/// answer or authority records, so an OPT record comes right after its question.
pub(super) fn query_udp_size(bytes: &[u8], header: &DnsHeader, question: &Question) -> Option<u16> {
    if header.ancount != 0 || header.nscount != 0 || header.arcount == 0 {
        return None;
    }
    let record = question_end(question);
    let [root, type_high, type_low, size_high, size_low] =
        *bytes.get(record..record + 5)?.first_chunk::<5>()?;
    (root == 0 && u16::from_be_bytes([type_high, type_low]) == OPT)
        .then(|| u16::from_be_bytes([size_high, size_low]))
}

/// The response code of the reply `bytes`, its OPT record's upper 8 bits (RFC 6891 6.1.3)
/// joined to the header's 4; the header's alone when it has no OPT record, or its records
/// cannot be walked to one.
pub(super) fn reply_rcode(bytes: &[u8], header: &DnsHeader, question: Option<&Question>) -> u16 {
    let low = u16::from(header.rcode());
    if header.arcount == 0 {
        return low;
    }
    match opt_upper_rcode(bytes, header, question) {
        Some(upper) => u16::from(upper) << 4 | low,
        None => low,
    }
}

/// The upper bits of the response code in the first OPT record of the additional section.
fn opt_upper_rcode(bytes: &[u8], header: &DnsHeader, question: Option<&Question>) -> Option<u8> {
    let mut at = match question {
        Some(question) => question_end(question),
        None => QUESTION_OFFSET,
    };
    // Questions past the first, which the shared parser does not read.
    for _ in 1..header.qdcount {
        at = name_end(bytes, at)?.checked_add(4)?;
    }
    let before_additional = u32::from(header.ancount) + u32::from(header.nscount);
    for record in 0..before_additional + u32::from(header.arcount) {
        let fixed = name_end(bytes, at)?;
        let [type_high, type_low, _, _, upper_rcode, _, _, _, len_high, len_low] =
            *bytes.get(fixed..)?.first_chunk::<RECORD_FIXED_LEN>()?;
        if record >= before_additional && u16::from_be_bytes([type_high, type_low]) == OPT {
            return Some(upper_rcode);
        }
        at = fixed + RECORD_FIXED_LEN + usize::from(u16::from_be_bytes([len_high, len_low]));
    }
    None
}

/// Where the first question ends: after its name, type and class.
fn question_end(question: &Question) -> usize {
    QUESTION_OFFSET + usize::from(question.name_len) + 4
}

/// Where the name at `at` ends: after its root label or the pointer that ends it. Each step
/// moves forward, so the walk ends within the message.
fn name_end(bytes: &[u8], mut at: usize) -> Option<usize> {
    loop {
        let len = *bytes.get(at)?;
        match len {
            0 => return Some(at + 1),
            _ if len & POINTER == POINTER => return (at + 2 <= bytes.len()).then_some(at + 2),
            // 64..=191: label types no one sends.
            _ if len & POINTER != 0 => return None,
            _ => at += 1 + usize::from(len),
        }
    }
}
