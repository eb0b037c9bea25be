//! Reading what tshark, the reference decoder, and dnsloop each say about DNS messages, so
//! that the tests can hold one to the other.
use std::{path::Path, process::Command};

use dnsloop_core::{present::mnemonic, schema::PacketRecord};

use crate::or_fail::OrFail as _;

/// What identifies a DNS message in both tools' output. Types and rcodes are named as
/// dnsloop names them: tshark's numbers are put in its words.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MessageKey {
    pub id: u16,
    pub qr: bool,
    /// Raw bytes, ASCII lower-cased, without the trailing dot: the tools escape differently.
    pub qname: Vec<u8>,
    pub qtype: String,
    /// The header's 4 bits alone: tshark shows an EDNS extended rcode apart.
    pub rcode: String,
}

impl MessageKey {
    /// A `--packets` line of dnsloop's JSON output.
    pub fn from_dnsloop(line: &PacketRecord) -> Self {
        let qname = line.qname.as_deref().unwrap_or_default();
        Self {
            id: line.id,
            qr: line.qr,
            qname: unescape(qname.strip_suffix('.').unwrap_or(qname), dnsloop_escape),
            qtype: line.qtype.clone().unwrap_or_default(),
            rcode: line.rcode.clone(),
        }
    }
}

/// tshark's reading of every DNS message in `capture`, with `options` (`-o`, `-d`) given
/// before the reading: one key per message, several for a segment that holds several.
pub fn tshark_messages(capture: &Path, options: &[&str]) -> Vec<MessageKey> {
    const FIELDS: [&str; 5] = [
        "dns.id",
        "dns.flags.response",
        "dns.qry.name",
        "dns.qry.type",
        "dns.flags.rcode",
    ];
    let mut tshark = Command::new("tshark");
    tshark.arg("-r").arg(capture).args(options);
    tshark.args(["-Y", "dns", "-T", "json"]);
    for field in FIELDS {
        tshark.args(["-e", field]);
    }
    let output = tshark.output().or_fail("running tshark (is it installed?)");
    assert!(
        output.status.success(),
        "tshark failed on {}: {}",
        capture.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    let packets: Vec<serde_json::Value> =
        serde_json::from_slice(&output.stdout).or_fail("reading tshark's JSON");
    let mut messages = Vec::new();
    for packet in &packets {
        let layers = &packet["_source"]["layers"];
        let field = |name: &str| -> Vec<String> {
            layers[name]
                .as_array()
                .map(|values| {
                    values
                        .iter()
                        .map(|value| value.as_str().unwrap_or_default().to_owned())
                        .collect()
                })
                .unwrap_or_default()
        };
        let [ids, responses, names, types, rcodes] = FIELDS.map(field);
        // tshark shows an rcode for replies only; a query's is 0.
        let mut rcodes = rcodes.iter();
        for (index, id) in ids.iter().enumerate() {
            let at = |values: &[String]| values.get(index).cloned().unwrap_or_default();
            let qr = at(&responses) == "1" || at(&responses) == "True";
            let rcode = match qr.then(|| rcodes.next()).flatten() {
                Some(rcode) => number(rcode),
                None => 0,
            };
            messages.push(MessageKey {
                id: number(id),
                qr,
                qname: unescape(&at(&names), tshark_escape),
                qtype: Some(at(&types))
                    .filter(|text| !text.is_empty())
                    .map(|text| mnemonic::qtype(number(&text)).into_owned())
                    .unwrap_or_default(),
                rcode: mnemonic::rcode(rcode).into_owned(),
            });
        }
    }
    messages
}

/// A number as tshark prints it: decimal or `0x` hexadecimal.
fn number(text: &str) -> u16 {
    let parsed = match text.strip_prefix("0x") {
        Some(hex) => u16::from_str_radix(hex, 16),
        None => text.parse(),
    };
    parsed.or_fail(format_args!("{text:?} is not a number"))
}

pub fn qtype_number(mnemonic: &str) -> u16 {
    match mnemonic {
        "A" => 1,
        "HINFO" => 13,
        "TXT" => 16,
        "AAAA" => 28,
        "SRV" => 33,
        other => panic!("add {other} to the types this test knows"),
    }
}

/// A name's bytes, ASCII lower-cased, with the escapes `escape` reads resolved.
pub fn unescape(text: &str, escape: fn(&mut std::str::Chars) -> Option<u8>) -> Vec<u8> {
    let mut bytes = Vec::new();
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        let byte = if c == '\\' {
            escape(&mut chars).or_fail(format_args!("a bad escape in {text}"))
        } else {
            u8::try_from(c).unwrap_or_else(|_| panic!("{c:?} in {text} is not a byte"))
        };
        bytes.push(byte.to_ascii_lowercase());
    }
    bytes
}

/// dnsloop's escapes, which are dig's: `\DDD` (decimal) or `\` before the character itself.
pub fn dnsloop_escape(rest: &mut std::str::Chars) -> Option<u8> {
    let first = rest.next()?;
    if !first.is_ascii_digit() {
        return u8::try_from(first).ok();
    }
    let digits: String = [Some(first), rest.next(), rest.next()]
        .into_iter()
        .collect::<Option<_>>()?;
    digits.parse().ok()
}

/// tshark's escapes, which are C's: `\a`, `\t`, ..., `\\`, and `\xHH` for other bytes.
pub fn tshark_escape(rest: &mut std::str::Chars) -> Option<u8> {
    let byte = match rest.next()? {
        'a' => 0x07,
        'b' => 0x08,
        't' => b'\t',
        'n' => b'\n',
        'v' => 0x0b,
        'f' => 0x0c,
        'r' => b'\r',
        '\\' => b'\\',
        'x' => {
            let hex: String = [rest.next(), rest.next()]
                .into_iter()
                .collect::<Option<_>>()?;
            u8::from_str_radix(&hex, 16).ok()?
        }
        _ => return None,
    };
    Some(byte)
}
