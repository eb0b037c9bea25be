//! `report.md`: a bundle's findings, packets and node, for a person.
use std::time::SystemTime;

use super::{NodeConfig, PCAPNG_FILE};
use crate::{bundle::pcapng::PcapngReport, present::time::rfc3339, schema::RecordedBundle};

/// The report: findings first (as `trace` printed them, `trace_text`), then the summary, the
/// packet file, and the node's configuration.
pub(super) fn report(
    trace_text: &str,
    pcapng: Option<&PcapngReport>,
    note: Option<&str>,
    interfaces: &[(String, String)],
    node: &NodeConfig,
    started: SystemTime,
    recorded: Option<&RecordedBundle>,
) -> String {
    let (findings, summary) = match trace_text.find("summary:") {
        Some(at) => trace_text.split_at(at),
        None => (trace_text, ""),
    };
    let mut text = format!(
        "# dnsloop capture on {} at {}\n\n",
        node.hostname.as_deref().unwrap_or("this node"),
        rfc3339(started)
    );
    if let Some(recorded) = recorded {
        text.push_str(&format!(
            "Recorded by `dnsloop trace --record` for the {} {}: the packets from {} to {}{}.\n\n",
            recorded.finding.replace('_', " "),
            recorded
                .qname
                .as_ref()
                .map_or("of a message without a question".to_owned(), |qname| {
                    format!("`{qname}`")
                }),
            recorded.from,
            recorded.until,
            if recorded.complete {
                ""
            } else {
                " (the oldest had already been dropped to stay within `--record-bytes`)"
            }
        ));
    }
    text.push_str("## Findings\n\n");
    if findings.trim().is_empty() {
        text.push_str("None: no loop, no reply from an unexpected source, no timeout.\n\n");
    } else {
        text.push_str(
            "Each loop is followed by its path, one hop per line: where the question was seen, \
             and which namespace it left or entered there.\n\n",
        );
        text.push_str(&fenced(findings));
    }
    text.push_str("## Latency and answers per server, and what was counted\n\n");
    if summary.is_empty() && recorded.is_some() {
        text.push_str("Not in a recorded bundle: the trace went on after it was written.\n\n");
    } else {
        text.push_str(&fenced(summary));
    }
    text.push_str("## Packets\n\n");
    match pcapng {
        Some(pcapng) => text.push_str(&format!(
            "`{PCAPNG_FILE}`: {} packets, {} bytes, {} with a finding's comment \
             (open it with Wireshark, `tshark -r {PCAPNG_FILE}`, or `dnsloop analyze {PCAPNG_FILE}`).\n\n",
            pcapng.packets, pcapng.bytes, pcapng.commented
        )),
        None => text.push_str(&format!(
            "Names are redacted (`--redact-names`): each is a keyed hash of its labels but the \
             cluster's structure, and `{PCAPNG_FILE}` is left out, since its packets carry \
             every name.\n\n"
        )),
    }
    if let Some(note) = note {
        text.push_str(&format!("**Note:** {note}.\n\n"));
    }
    for (name, description) in interfaces {
        text.push_str(&format!("- `{name}`: `{description}`\n"));
    }
    text.push_str("\n## The node's DNS configuration\n\n");
    text.push_str(&format!(
        "Kernel {}. `/etc/resolv.conf`{}:\n\n",
        node.kernel.as_deref().unwrap_or("unknown"),
        node.resolv_conf_target
            .as_ref()
            .map(|target| format!(" (a symlink to `{}`)", target.display()))
            .unwrap_or_default()
    ));
    text.push_str(&fenced(
        node.resolv_conf.as_deref().unwrap_or("(unreadable)\n"),
    ));
    for (name, value) in &node.sysctls {
        text.push_str(&format!(
            "- `{}` = {}\n",
            name.replace('/', "."),
            value.as_deref().unwrap_or("(absent)")
        ));
    }
    text.push_str("\n`dnsloop doctor` on this node at capture time:\n\n");
    text.push_str(&fenced(&node.checks_text));
    text
}

fn fenced(body: &str) -> String {
    let body = body.trim_end();
    format!("```\n{body}\n```\n\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node() -> NodeConfig {
        NodeConfig {
            kernel: Some("6.18.0".into()),
            hostname: Some("node-1".into()),
            resolv_conf: Some("nameserver 169.254.25.10\n".into()),
            resolv_conf_target: None,
            sysctls: vec![("net/bridge/bridge-nf-call-iptables", Some("0".into()))],
            checks_json: Vec::new(),
            checks_text: "doctor: 0 errors\n".into(),
        }
    }

    fn pcapng() -> PcapngReport {
        PcapngReport {
            bytes: 1000,
            packets: 10,
            commented: 4,
            ..PcapngReport::default()
        }
    }

    #[test]
    fn the_markdown_report_puts_findings_first_and_says_when_there_are_none() {
        let node = node();
        let report_of = |text: &str, note| {
            let interfaces = [("cni0".to_string(), "dnsloop/2 role=bridge".to_string())];
            report(
                text,
                Some(&pcapng()),
                note,
                &interfaces,
                &node,
                SystemTime::UNIX_EPOCH,
                None,
            )
        };
        let with_loop = report_of(
            "12:00:00.000  LOOP  x1  www.example.test. A: ...\n  12:00:00.000  cni0 ...\nsummary: 10 observations\n",
            Some("the packet file reached its limit"),
        );
        let findings = with_loop.find("## Findings").unwrap();
        let loop_line = with_loop.find("LOOP  x1").unwrap();
        let servers = with_loop.find("## Latency").unwrap();
        assert!(findings < loop_line && loop_line < servers, "{with_loop}");
        assert!(with_loop.contains("**Note:** the packet file reached its limit"));
        assert!(with_loop.contains("`net.bridge.bridge-nf-call-iptables` = 0"));
        assert!(with_loop.contains("nameserver 169.254.25.10"));

        let quiet = report_of("summary: 0 observations\n", None);
        assert!(quiet.contains("None: no loop"), "{quiet}");
    }

    #[test]
    fn a_recorded_bundle_says_what_made_it() {
        let at = |secs| SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(secs);
        let recorded = RecordedBundle {
            finding: "unexpected_source".into(),
            loop_id: None,
            qname: Some("www.example.test.".into()),
            from: at(10).into(),
            until: at(45).into(),
            complete: false,
        };
        let text = report(
            "12:00:00.000  UNEXPECTED SOURCE ...\n",
            Some(&pcapng()),
            None,
            &[],
            &node(),
            at(10),
            Some(&recorded),
        );
        assert!(
            text.contains("for the unexpected source `www.example.test.`"),
            "{text}"
        );
        assert!(
            text.contains("dropped to stay within `--record-bytes`"),
            "{text}"
        );
        assert!(text.contains("the trace went on"), "{text}");
    }
}
