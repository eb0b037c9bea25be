//! The names people know DNS codes by, as dig prints them.
use std::borrow::Cow;

use hickory_proto::rr::RecordType;

/// A question type: its mnemonic, or `TYPE<n>` (RFC 3597) for a type without one.
pub fn qtype(code: u16) -> Cow<'static, str> {
    match RecordType::from(code) {
        // 0 is reserved and ANAME never got a code point: hickory's names for them are not
        // mnemonics a person could look up.
        RecordType::Unknown(_) | RecordType::ZERO | RecordType::ANAME => {
            Cow::Owned(format!("TYPE{code}"))
        }
        known => Cow::Borrowed(known.into()),
    }
}

/// An opcode: its IANA name, or its number.
pub fn opcode(code: u8) -> Cow<'static, str> {
    let name = match code {
        0 => "QUERY",
        1 => "IQUERY",
        2 => "STATUS",
        4 => "NOTIFY",
        5 => "UPDATE",
        6 => "DSO",
        _ => return Cow::Owned(code.to_string()),
    };
    Cow::Borrowed(name)
}

/// A response code, EDNS extended bits included: its IANA name, or `RCODE<n>`.
pub fn rcode(code: u16) -> Cow<'static, str> {
    let name = match code {
        0 => "NOERROR",
        1 => "FORMERR",
        2 => "SERVFAIL",
        3 => "NXDOMAIN",
        4 => "NOTIMP",
        5 => "REFUSED",
        6 => "YXDOMAIN",
        7 => "YXRRSET",
        8 => "NXRRSET",
        9 => "NOTAUTH",
        10 => "NOTZONE",
        11 => "DSOTYPENI",
        // 16 is also TSIG's BADSIG, but a response's own rcode of 16 can only come from EDNS.
        16 => "BADVERS",
        17 => "BADKEY",
        18 => "BADTIME",
        19 => "BADMODE",
        20 => "BADNAME",
        21 => "BADALG",
        22 => "BADTRUNC",
        23 => "BADCOOKIE",
        _ => return Cow::Owned(format!("RCODE{code}")),
    };
    Cow::Borrowed(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_types_by_name_and_the_rest_per_rfc_3597() {
        assert_eq!(qtype(1), "A");
        assert_eq!(qtype(13), "HINFO");
        assert_eq!(qtype(28), "AAAA");
        assert_eq!(qtype(65), "HTTPS");
        assert_eq!(qtype(0), "TYPE0");
        assert_eq!(qtype(65280), "TYPE65280");
        assert_eq!(qtype(65305), "TYPE65305");
    }

    #[test]
    fn opcodes_and_rcodes_by_iana_name_or_number() {
        assert_eq!(opcode(0), "QUERY");
        assert_eq!(opcode(6), "DSO");
        assert_eq!(opcode(3), "3");
        assert_eq!(rcode(0), "NOERROR");
        assert_eq!(rcode(3), "NXDOMAIN");
        assert_eq!(rcode(16), "BADVERS");
        assert_eq!(rcode(12), "RCODE12");
        assert_eq!(rcode(4095), "RCODE4095");
    }
}
