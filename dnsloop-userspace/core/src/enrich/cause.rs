//! From evidence to a cause: why a reply came from the pod a `ClusterIP` was DNAT'ed to, rather
//! than from the `ClusterIP` itself. Pure, so that every combination of evidence is tested.
//!
//! The story it looks for: a client queried a `ClusterIP`, kube-proxy's DNAT sent the query to a
//! DNS pod on the client's bridge, and the pod's reply went straight back over the bridge. Unless
//! `br_netfilter` hands bridged packets to iptables, conntrack never sees that reply, so it is
//! never un-DNAT'ed: it keeps the pod's source, and the client's connected socket drops it.
use std::fmt;

use super::bridge_netfilter::{BridgeNetfilter, BridgeSysctl};
use crate::finding::{ConntrackEvidence, UnexpectedSourceFinding};

/// What the evidence supports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Explanation {
    pub cause: String,
    /// A one-line summary to replace the analyzer's, only when the cause is established (both
    /// what happened and why), so that it can name the fix.
    pub summary: Option<String>,
}

/// Explains `finding` from its conntrack evidence and the bridge netfilter state of the node
/// (`None` when that could not be read). `None` when the evidence supports no cause.
pub fn explain(
    finding: &UnexpectedSourceFinding,
    bridge: Option<BridgeNetfilter>,
) -> Option<Explanation> {
    let sysctl = BridgeSysctl::for_address(finding.client.ip());
    let conntrack = match &finding.conntrack {
        None => ConntrackStory::NoEntry,
        Some(evidence) if shows_unreplied_dnat(finding, evidence) => ConntrackStory::ReplyBypassed,
        Some(_) => ConntrackStory::Other,
    };
    match (conntrack, bridge) {
        // Conntrack knows this flow but tells another story (it saw a reply, or DNAT'ed the
        // query elsewhere): even a bridge that skips iptables would not explain this reply.
        (ConntrackStory::Other, _) => None,
        (ConntrackStory::ReplyBypassed, Some(BridgeNetfilter::Disabled)) => Some(established(
            finding,
            BridgeBypass::SysctlOff(sysctl),
            sysctl,
        )),
        (ConntrackStory::ReplyBypassed, Some(BridgeNetfilter::NotLoaded)) => {
            Some(established(finding, BridgeBypass::NotLoaded, sysctl))
        }
        // Conntrack shows the bypass but the bridge is not why: say what is known, no more.
        (ConntrackStory::ReplyBypassed, Some(BridgeNetfilter::Enabled)) => Some(Explanation {
            cause: format!("{UNREPLIED_DNAT}, though {}=1", sysctl.name()),
            summary: None,
        }),
        (ConntrackStory::ReplyBypassed, None) => Some(Explanation {
            cause: UNREPLIED_DNAT.to_string(),
            summary: None,
        }),
        // Without a conntrack entry to confirm this flow, the bridge setting is a likely cause,
        // not a proven one.
        (ConntrackStory::NoEntry, Some(BridgeNetfilter::Disabled)) => {
            Some(suspected(BridgeBypass::SysctlOff(sysctl)))
        }
        (ConntrackStory::NoEntry, Some(BridgeNetfilter::NotLoaded)) => {
            Some(suspected(BridgeBypass::NotLoaded))
        }
        (ConntrackStory::NoEntry, Some(BridgeNetfilter::Enabled) | None) => None,
    }
}

const UNREPLIED_DNAT: &str = "reply bypassed un-DNAT: conntrack saw no reply to the DNAT'ed query";

/// What conntrack says about the query's flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ConntrackStory {
    /// No entry (or the lookup failed).
    NoEntry,
    /// The query was DNAT'ed to the reply's source, and no reply came back through conntrack.
    ReplyBypassed,
    Other,
}

fn shows_unreplied_dnat(finding: &UnexpectedSourceFinding, conntrack: &ConntrackEvidence) -> bool {
    conntrack.original_dst == finding.expected
        && conntrack.reply_src == finding.actual
        && conntrack.unreplied
}

/// Conntrack shows the reply bypassed un-DNAT, and the bridge setting says why; the fix is to
/// turn on `sysctl`.
fn established(
    finding: &UnexpectedSourceFinding,
    bypass: BridgeBypass,
    sysctl: BridgeSysctl,
) -> Explanation {
    Explanation {
        cause: format!("reply bypassed un-DNAT: {bypass}"),
        summary: Some(format!(
            "reply to {} (id {}) came from {}, not {}: reply bypassed un-DNAT ({bypass}); \
             the client drops it. Fix: load br_netfilter and set net.bridge.{}=1",
            finding.client,
            finding.id,
            finding.actual,
            finding.expected,
            sysctl.name(),
        )),
    }
}

fn suspected(bypass: BridgeBypass) -> Explanation {
    Explanation {
        cause: format!("{bypass}: replies between pods on one bridge skip un-DNAT"),
        summary: None,
    }
}

/// Why bridged replies skip iptables on this node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum BridgeBypass {
    SysctlOff(BridgeSysctl),
    NotLoaded,
}

impl fmt::Display for BridgeBypass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::SysctlOff(sysctl) => write!(f, "{}=0", sysctl.name()),
            Self::NotLoaded => f.write_str("br_netfilter is not loaded"),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::{net::SocketAddr, time::SystemTime};

    use super::*;
    use crate::observation::Transport;

    const ALL_BRIDGE_STATES: [Option<BridgeNetfilter>; 4] = [
        Some(BridgeNetfilter::Enabled),
        Some(BridgeNetfilter::Disabled),
        Some(BridgeNetfilter::NotLoaded),
        None,
    ];

    fn addr(text: &str) -> SocketAddr {
        text.parse().expect("a socket address")
    }

    /// The fault's finding: queried 10.96.0.10:53, answered by 10.244.0.3:53.
    fn finding(conntrack: Option<ConntrackEvidence>) -> UnexpectedSourceFinding {
        UnexpectedSourceFinding {
            ts: SystemTime::UNIX_EPOCH,
            client: addr("10.244.0.2:41234"),
            expected: addr("10.96.0.10:53"),
            actual: addr("10.244.0.3:53"),
            id: 4242,
            qname: "kubernetes.default.svc.cluster.local.".to_string(),
            qtype: 1,
            transport: Transport::Udp,
            conntrack,
            cause: None,
            summary: "the analyzer's summary".to_string(),
        }
    }

    fn unreplied_dnat() -> ConntrackEvidence {
        ConntrackEvidence {
            original_dst: addr("10.96.0.10:53"),
            reply_src: addr("10.244.0.3:53"),
            unreplied: true,
        }
    }

    /// Conntrack entries that tell another story than the bypass.
    fn contradicting_entries() -> [ConntrackEvidence; 3] {
        [
            ConntrackEvidence {
                unreplied: false,
                ..unreplied_dnat()
            },
            ConntrackEvidence {
                reply_src: addr("10.244.0.4:53"),
                ..unreplied_dnat()
            },
            ConntrackEvidence {
                original_dst: addr("10.96.0.11:53"),
                ..unreplied_dnat()
            },
        ]
    }

    #[test]
    fn bypass_with_the_sysctl_off_is_established_and_names_the_fix() {
        let explanation = explain(
            &finding(Some(unreplied_dnat())),
            Some(BridgeNetfilter::Disabled),
        )
        .unwrap();
        assert_eq!(
            explanation.cause,
            "reply bypassed un-DNAT: bridge-nf-call-iptables=0"
        );
        assert_eq!(
            explanation.summary.as_deref(),
            Some(
                "reply to 10.244.0.2:41234 (id 4242) came from 10.244.0.3:53, not 10.96.0.10:53: \
                 reply bypassed un-DNAT (bridge-nf-call-iptables=0); the client drops it. \
                 Fix: load br_netfilter and set net.bridge.bridge-nf-call-iptables=1"
            )
        );
    }

    #[test]
    fn bypass_without_br_netfilter_is_established() {
        let explanation = explain(
            &finding(Some(unreplied_dnat())),
            Some(BridgeNetfilter::NotLoaded),
        )
        .unwrap();
        assert_eq!(
            explanation.cause,
            "reply bypassed un-DNAT: br_netfilter is not loaded"
        );
        assert_eq!(
            explanation.summary.as_deref(),
            Some(
                "reply to 10.244.0.2:41234 (id 4242) came from 10.244.0.3:53, not 10.96.0.10:53: \
                 reply bypassed un-DNAT (br_netfilter is not loaded); the client drops it. \
                 Fix: load br_netfilter and set net.bridge.bridge-nf-call-iptables=1"
            )
        );
    }

    #[test]
    fn ipv6_clients_are_explained_by_the_ip6tables_sysctl() {
        let finding = UnexpectedSourceFinding {
            client: addr("[fd00:10:244::2]:41234"),
            expected: addr("[fd00:10:96::a]:53"),
            actual: addr("[fd00:10:244::3]:53"),
            conntrack: Some(ConntrackEvidence {
                original_dst: addr("[fd00:10:96::a]:53"),
                reply_src: addr("[fd00:10:244::3]:53"),
                unreplied: true,
            }),
            ..finding(None)
        };
        let explanation = explain(&finding, Some(BridgeNetfilter::Disabled)).unwrap();
        assert_eq!(
            explanation.cause,
            "reply bypassed un-DNAT: bridge-nf-call-ip6tables=0"
        );
        assert_eq!(
            explanation.summary.as_deref(),
            Some(
                "reply to [fd00:10:244::2]:41234 (id 4242) came from [fd00:10:244::3]:53, \
                 not [fd00:10:96::a]:53: reply bypassed un-DNAT (bridge-nf-call-ip6tables=0); \
                 the client drops it. Fix: load br_netfilter and set \
                 net.bridge.bridge-nf-call-ip6tables=1"
            )
        );
    }

    #[test]
    fn bypass_with_the_bridge_calling_iptables_names_no_culprit() {
        let explanation = explain(
            &finding(Some(unreplied_dnat())),
            Some(BridgeNetfilter::Enabled),
        )
        .unwrap();
        assert_eq!(
            explanation,
            Explanation {
                cause: "reply bypassed un-DNAT: conntrack saw no reply to the DNAT'ed query, \
                        though bridge-nf-call-iptables=1"
                    .to_string(),
                summary: None,
            }
        );
    }

    #[test]
    fn bypass_with_an_unreadable_bridge_state_names_no_culprit() {
        let explanation = explain(&finding(Some(unreplied_dnat())), None).unwrap();
        assert_eq!(
            explanation,
            Explanation {
                cause: "reply bypassed un-DNAT: conntrack saw no reply to the DNAT'ed query"
                    .to_string(),
                summary: None,
            }
        );
    }

    #[test]
    fn without_conntrack_a_bridge_skipping_iptables_is_only_suspected() {
        assert_eq!(
            explain(&finding(None), Some(BridgeNetfilter::Disabled)),
            Some(Explanation {
                cause: "bridge-nf-call-iptables=0: replies between pods on one bridge skip \
                        un-DNAT"
                    .to_string(),
                summary: None,
            })
        );
        assert_eq!(
            explain(&finding(None), Some(BridgeNetfilter::NotLoaded)),
            Some(Explanation {
                cause: "br_netfilter is not loaded: replies between pods on one bridge skip \
                        un-DNAT"
                    .to_string(),
                summary: None,
            })
        );
    }

    #[test]
    fn without_conntrack_or_a_bridge_culprit_there_is_no_cause() {
        assert_eq!(
            explain(&finding(None), Some(BridgeNetfilter::Enabled)),
            None
        );
        assert_eq!(explain(&finding(None), None), None);
    }

    #[test]
    fn conntrack_telling_another_story_gives_no_cause_whatever_the_bridge() {
        for entry in contradicting_entries() {
            for bridge in ALL_BRIDGE_STATES {
                assert_eq!(
                    explain(&finding(Some(entry.clone())), bridge),
                    None,
                    "{entry:?} {bridge:?}"
                );
            }
        }
    }

    /// Over every combination: the summary is rewritten exactly when conntrack shows the bypass
    /// and the bridge explains it, and a cause is given only on some evidence of a bypass.
    #[test]
    fn every_combination_claims_no_more_than_its_evidence() {
        let mut entries: Vec<Option<ConntrackEvidence>> = vec![None, Some(unreplied_dnat())];
        entries.extend(contradicting_entries().into_iter().map(Some));
        for conntrack in entries {
            for bridge in ALL_BRIDGE_STATES {
                let explanation = explain(&finding(conntrack.clone()), bridge);
                let shows_bypass = conntrack.as_ref() == Some(&unreplied_dnat());
                let bridge_skips = matches!(
                    bridge,
                    Some(BridgeNetfilter::Disabled | BridgeNetfilter::NotLoaded)
                );
                let case = format!("{conntrack:?} {bridge:?}");
                assert_eq!(
                    explanation.as_ref().is_some_and(|e| e.summary.is_some()),
                    shows_bypass && bridge_skips,
                    "{case}"
                );
                let contradicted = conntrack.is_some() && !shows_bypass;
                assert_eq!(
                    explanation.is_some(),
                    !contradicted && (shows_bypass || bridge_skips),
                    "{case}"
                );
            }
        }
    }
}
