//! How dnsloop names what it shows people and logs: DNS codes as dig prints them
//! ([`mnemonic`]), DNS names, as sent or redacted ([`names`]), times ([`time`]), probes, and
//! bytes as hex. A leaf that imports nothing from
//! the crate, so that the analyzers' summaries, the schema and the sinks all say it alike.
pub mod mnemonic;
pub mod names;
pub mod time;

use dnsloop_shared::parse::Probe;

/// The name of a loop-detection probe, `None` for an ordinary question.
pub(crate) fn probe_name(probe: Probe) -> Option<&'static str> {
    match probe {
        Probe::None => None,
        Probe::CoreDns => Some("coredns"),
        Probe::Dnsmasq => Some("dnsmasq"),
    }
}

/// Bytes as lowercase hex, two digits each.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes
        .iter()
        .fold(String::with_capacity(2 * bytes.len()), |mut text, byte| {
            use std::fmt::Write as _;
            let _ = write!(text, "{byte:02x}");
            text
        })
}
