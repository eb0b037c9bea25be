//! What a guest reported on its serial console, between its marker lines, and the check that
//! it showed everything dnsloop must do on that kernel.
use anyhow::{ensure, Context as _, Result};
use dnsloop_shared::names::{kernel_name, EGRESS_PROGRAM};
use serde_json::Value;

use super::{Hook, Target, MARKER, QUERY_NAMES};

/// What the guest reported between its marker lines.
#[derive(Debug, Default)]
pub struct Report {
    /// `uname -r` and /proc/version.
    booted: Option<String>,
    ready: bool,
    exit: Option<i32>,
    attached: String,
    /// `link_type:` and `verified_insns:` lines of dnsloop's descriptors.
    descriptors: String,
    stderr: String,
    stdout: String,
    after_exit: String,
}

/// What the run showed.
#[derive(Debug, PartialEq, Eq)]
pub struct Checked {
    pub kernel: String,
    pub dns_packets: u64,
    /// Queries the kernel dropped for want of a listener, as the summary counted them.
    pub closed_port_drops: u64,
    /// Instructions the verifier processed, per loaded program.
    pub verified: Vec<u64>,
}

impl Report {
    pub fn parse(console: &str) -> Report {
        let mut report = Report::default();
        let mut section: Option<&str> = None;
        for line in console.lines() {
            // The console's escape sequences may share a line with a marker.
            if let Some((_, said)) = line.split_once(MARKER) {
                let (word, rest) = said.split_once(' ').unwrap_or((said, ""));
                match word {
                    "booted" => report.booted = Some(rest.to_owned()),
                    "ready" => report.ready = rest == "yes",
                    "exit" => report.exit = rest.parse().ok(),
                    _ => match word.strip_suffix("-begin") {
                        Some(name) => section = Some(name),
                        None => section = None,
                    },
                }
                continue;
            }
            let text = match section {
                Some("attached") => &mut report.attached,
                Some("descriptors") => &mut report.descriptors,
                Some("stderr") => &mut report.stderr,
                Some("stdout") => &mut report.stdout,
                Some("after-exit") => &mut report.after_exit,
                _ => continue,
            };
            text.push_str(line);
            text.push('\n');
        }
        report
    }

    /// What the run showed, or the first thing it should have shown and did not.
    pub fn check(&self, target: &Target) -> Result<Checked> {
        let kernel = self.booted_kernel()?;
        self.check_attached(target, &kernel)?;
        self.check_exit()?;
        let lines: Vec<Value> = self
            .stdout
            .lines()
            .filter_map(|line| serde_json::from_str(line).ok())
            .collect();
        let summary = self.summary_with_lacks(&lines, target, &kernel)?;
        self.check_packet_lines(&lines)?;
        let closed_port_drops = self.check_drops(&lines, summary, target, &kernel)?;
        let dns_packets = self.lo_egress_dns_packets(summary)?;
        self.check_detached()?;
        Ok(Checked {
            kernel,
            dns_packets,
            closed_port_drops,
            verified: self.verified_instructions(),
        })
    }

    /// The release of the kernel the guest booted.
    fn booted_kernel(&self) -> Result<String> {
        let booted = self
            .booted
            .as_deref()
            .context("the guest never reported booting")?;
        Ok(booted
            .split_whitespace()
            .next()
            .unwrap_or_default()
            .to_owned())
    }

    /// dnsloop attached, on the hook `target` expects.
    fn check_attached(&self, target: &Target, kernel: &str) -> Result<()> {
        ensure!(
            self.ready,
            "dnsloop never attached on {kernel}; its stderr (a verifier rejection ends with the verifier's log):\n{}",
            condensed(&self.stderr)
        );
        let clsact_warning = format!("dnsloop: TCX is not available (Linux {}.", target.series);
        match target.hook {
            Hook::Clsact => {
                ensure!(
                    self.stderr.contains(&clsact_warning),
                    "dnsloop did not report the clsact fallback on {kernel}:\n{}",
                    self.stderr
                );
                let egress = format!("clsact/egress {}", kernel_name(EGRESS_PROGRAM));
                ensure!(
                    self.attached.lines().any(|line| line.contains(&egress)),
                    "bpftool shows no {EGRESS_PROGRAM} on lo's clsact egress:\n{}",
                    self.attached
                );
            }
            Hook::Tcx => {
                ensure!(
                    !self.stderr.contains("TCX is not available"),
                    "dnsloop fell back to clsact on {kernel}, which has TCX:\n{}",
                    self.stderr
                );
                ensure!(
                    self.descriptors
                        .lines()
                        .any(|line| line.starts_with("link_type:") && line.ends_with("tcx")),
                    "dnsloop holds no TCX link on {kernel}:\n{}",
                    self.descriptors
                );
            }
        }
        Ok(())
    }

    /// dnsloop ended cleanly on SIGTERM.
    fn check_exit(&self) -> Result<()> {
        ensure!(
            self.exit == Some(0),
            "dnsloop ended with {:?} on SIGTERM, not 0:\n{}",
            self.exit,
            self.stderr
        );
        Ok(())
    }

    /// The summary, once dnsloop has said what the kernel lacks: at start, and in the summary.
    fn summary_with_lacks<'a>(
        &self,
        lines: &'a [Value],
        target: &Target,
        kernel: &str,
    ) -> Result<&'a Value> {
        ensure!(
            self.stderr
                .contains(&format!("dnsloop: this kernel (Linux {}", target.series)),
            "dnsloop did not say what {kernel} lacks:\n{}",
            self.stderr
        );
        let summary = lines
            .iter()
            .find(|line| line["kind"] == "summary")
            .with_context(|| format!("no summary on {kernel}:\n{}", self.stdout))?;
        ensure!(
            summary["kernel_lacks"] == serde_json::json!(target.lacks),
            "the summary on {kernel} lists {} as lacking, not {:?}",
            summary["kernel_lacks"],
            target.lacks
        );
        Ok(summary)
    }

    /// A packet line on lo for every query asked.
    fn check_packet_lines(&self, lines: &[Value]) -> Result<()> {
        for name in QUERY_NAMES {
            ensure!(
                lines.iter().any(|line| line["kind"] == "packet"
                    && line["ifname"] == "lo"
                    && line["qname"]
                        .as_str()
                        .is_some_and(|qname| qname.trim_end_matches('.') == name)),
                "no packet line for the query {name} on lo:\n{}",
                self.stdout
            );
        }
        Ok(())
    }

    /// The kernel's drops of the queries, reported and counted; returns their count.
    fn check_drops(
        &self,
        lines: &[Value],
        summary: &Value,
        target: &Target,
        kernel: &str,
    ) -> Result<u64> {
        // Nothing listens on port 53: the kernel drops every query, and says why.
        ensure!(
            !self.stderr.contains("not watching the kernel's drops"),
            "dnsloop watched no drops on {kernel}:\n{}",
            self.stderr
        );
        // Drops alike are reported together: the first, then its count.
        let (first, reason) = (QUERY_NAMES[0], target.drop_reason);
        ensure!(
            lines.iter().any(|line| line["kind"] == "drop"
                && line["reason"] == reason
                && line["qname"]
                    .as_str()
                    .is_some_and(|qname| qname.trim_end_matches('.') == first)),
            "no drop line ({reason}) for the query {first}:\n{}",
            self.stdout
        );
        let closed_port_drops = summary["drops"][reason].as_u64().unwrap_or(0);
        ensure!(
            closed_port_drops >= QUERY_NAMES.len() as u64,
            "only {closed_port_drops} {reason} drops counted for {} queries: {summary}",
            QUERY_NAMES.len()
        );
        Ok(closed_port_drops)
    }

    /// The DNS packets the summary counted on lo egress, at least one per query.
    fn lo_egress_dns_packets(&self, summary: &Value) -> Result<u64> {
        let dns_packets = summary["interfaces"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|point| point["ifname"] == "lo" && point["dir"] == "egress")
            .and_then(|point| point["dns_packets"].as_u64())
            .with_context(|| format!("the summary has no lo egress: {summary}"))?;
        ensure!(
            dns_packets >= QUERY_NAMES.len() as u64,
            "only {dns_packets} DNS packets counted on lo egress for {} queries: {summary}",
            QUERY_NAMES.len()
        );
        Ok(dns_packets)
    }

    /// Nothing of dnsloop's left attached after it exited.
    fn check_detached(&self) -> Result<()> {
        ensure!(
            !self.after_exit.contains("dnsloop"),
            "dnsloop's programs are still attached after it exited:\n{}",
            self.after_exit
        );
        Ok(())
    }

    /// Instructions the verifier processed, per loaded program.
    fn verified_instructions(&self) -> Vec<u64> {
        self.descriptors
            .lines()
            .filter_map(|line| line.strip_prefix("verified_insns:"))
            .filter_map(|count| count.trim().parse().ok())
            .collect()
    }
}

/// `text` with its middle left out past a few dozen lines: a verifier log runs to thousands,
/// and its start (the error) and end (the verdict and its statistics) say what failed.
fn condensed(text: &str) -> String {
    const HEAD: usize = 3;
    const TAIL: usize = 12;
    let lines: Vec<&str> = text.lines().collect();
    if lines.len() <= HEAD + TAIL {
        return text.to_owned();
    }
    format!(
        "{}\n[... {} lines ...]\n{}",
        lines[..HEAD].join("\n"),
        lines.len() - HEAD - TAIL,
        lines[lines.len() - TAIL..].join("\n")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::TARGETS;

    const CLSACT: &Target = &TARGETS[1];
    const TCX: &Target = &TARGETS[2];

    /// A guest's console as the 6.12 guest printed it, cut down; `attached` and `stderr` vary.
    fn console(kernel: &str, attached: &str, descriptors: &str, stderr: &str, exit: i32) -> String {
        let packets: String = QUERY_NAMES
            .iter()
            .map(|name| format!("{{\"kind\":\"packet\",\"ifname\":\"lo\",\"dir\":\"egress\",\"qname\":\"{name}.\"}}\n{{\"kind\":\"drop\",\"reason\":\"NO_SOCKET\",\"qname\":\"{name}.\"}}\n"))
            .collect();
        let (version, lacks) = if kernel.starts_with("6.1.") {
            ("6.1.192", r#"["tcx","tc_netns_cookie"]"#)
        } else {
            ("6.12.117", r#"["tc_netns_cookie"]"#)
        };
        format!(
            "\u{1b}c\u{1b}[?7l\u{1b}[2Jdnsloop-kernels: booted {kernel} (Linux version {kernel})\n\
             dnsloop-kernels: ready yes\n\
             dnsloop-kernels: attached-begin\nxdp:\n\ntc:\n{attached}\nflow_dissector:\n\ndnsloop-kernels: attached-end\n\
             dnsloop-kernels: descriptors-begin\n{descriptors}dnsloop-kernels: descriptors-end\n\
             dnsloop-kernels: exit {exit}\n\
             dnsloop-kernels: stderr-begin\n{stderr}dnsloop: this kernel (Linux {version}) lacks ...\ndnsloop: watching 1 interface(s): lo\ndnsloop-kernels: stderr-end\n\
             dnsloop-kernels: stdout-begin\n{packets}\
             {{\"kind\":\"summary\",\"interfaces\":[{{\"ifname\":\"lo\",\"dir\":\"egress\",\"dns_packets\":6,\"packets\":12}}],\"drops\":{{\"NO_SOCKET\":3}},\"kernel_lacks\":{lacks}}}\n\
             dnsloop-kernels: stdout-end\n\
             dnsloop-kernels: after-exit-begin\nxdp:\n\ntc:\n\nflow_dissector:\n\ndnsloop-kernels: after-exit-end\n\
             dnsloop-kernels: done\n[   26.873268] reboot: Power down\n"
        )
    }

    const TCX_DESCRIPTORS: &str =
        "verified_insns:\t154958\nverified_insns:\t155014\nlink_type:\ttcx\nlink_type:\ttcx\n";
    const CLSACT_STDERR: &str =
        "dnsloop: TCX is not available (Linux 6.1.192 < 6.6): attached with tc clsact; ...\n";
    const CLSACT_ATTACHED: &str = "lo(1) clsact/egress dnsloop_egress id 12";

    #[test]
    fn a_tcx_run_is_read_from_the_console() {
        let console = console("6.12.117+deb12-amd64", "", TCX_DESCRIPTORS, "", 0);
        let checked = Report::parse(&console).check(TCX).unwrap();
        assert_eq!(
            checked,
            Checked {
                kernel: "6.12.117+deb12-amd64".into(),
                dns_packets: 6,
                closed_port_drops: 3,
                verified: vec![154958, 155014],
            }
        );
    }

    #[test]
    fn a_clsact_run_needs_the_warning_and_the_filter() {
        let descriptors = "verified_insns:\t9\n";
        let good = console(
            "6.1.0-56-amd64",
            CLSACT_ATTACHED,
            descriptors,
            CLSACT_STDERR,
            0,
        );
        assert!(Report::parse(&good).check(CLSACT).is_ok());

        let silent = console("6.1.0-56-amd64", CLSACT_ATTACHED, descriptors, "", 0);
        let error = Report::parse(&silent).check(CLSACT).unwrap_err();
        assert!(
            error
                .to_string()
                .contains("did not report the clsact fallback"),
            "{error}"
        );

        // On a kernel with TCX, a fallback is a failure.
        let fell_back = console(
            "6.12.117+deb12-amd64",
            "",
            TCX_DESCRIPTORS,
            CLSACT_STDERR,
            0,
        );
        let error = Report::parse(&fell_back).check(TCX).unwrap_err();
        assert!(error.to_string().contains("fell back to clsact"), "{error}");
    }

    #[test]
    fn a_failed_run_says_what_failed() {
        let failed = console("6.12.117+deb12-amd64", "", TCX_DESCRIPTORS, "", 2);
        let error = Report::parse(&failed).check(TCX).unwrap_err();
        assert!(error.to_string().contains("ended with Some(2)"), "{error}");

        let no_drops = console("6.12.117+deb12-amd64", "", TCX_DESCRIPTORS, "", 0).replace(
            "{\"kind\":\"drop\",\"reason\":\"NO_SOCKET\",",
            "{\"kind\":\"drop\",\"reason\":\"OTHER\",",
        );
        let error = Report::parse(&no_drops).check(TCX).unwrap_err();
        assert!(error.to_string().contains("no drop line"), "{error}");

        let lacking_more = console("6.12.117+deb12-amd64", "", TCX_DESCRIPTORS, "", 0)
            .replace(r#"["tc_netns_cookie"]"#, r#"["tcx","tc_netns_cookie"]"#);
        let error = Report::parse(&lacking_more).check(TCX).unwrap_err();
        assert!(error.to_string().contains("as lacking"), "{error}");

        let rejected = "dnsloop-kernels: booted 6.1.0-56-amd64 (Linux)\ndnsloop-kernels: ready no\n\
            dnsloop-kernels: exit 2\ndnsloop-kernels: stderr-begin\nBPF program is too large\ndnsloop-kernels: stderr-end\n";
        let error = Report::parse(rejected).check(CLSACT).unwrap_err();
        assert!(error.to_string().contains("never attached"), "{error}");
        assert!(
            error.to_string().contains("BPF program is too large"),
            "{error}"
        );

        let left = console("6.1.0-56-amd64", CLSACT_ATTACHED, "", CLSACT_STDERR, 0).replace(
            "tc:\n\nflow_dissector:\n\ndnsloop-kernels: after-exit-end",
            &format!("tc:\n{CLSACT_ATTACHED}\nflow_dissector:\n\ndnsloop-kernels: after-exit-end"),
        );
        let error = Report::parse(&left).check(CLSACT).unwrap_err();
        assert!(
            error.to_string().contains("still attached after it exited"),
            "{error}"
        );
    }

    #[test]
    fn a_long_log_keeps_its_start_and_end() {
        let log: String = (0..100).map(|line| format!("line {line}\n")).collect();
        let short = condensed(&log);
        assert!(short.starts_with("line 0\nline 1\nline 2\n[... 85 lines ...]\nline 88\n"));
        assert!(short.ends_with("line 99"));
        assert_eq!(condensed("short\n"), "short\n");
    }
}
