//! What this kernel lacks of what dnsloop uses, and what each lack costs. An older node runs
//! with less, and says so: in one line at start, in the summary (`kernel_lacks`) and in the
//! `dnsloop_kernel_lacks` metric.
use std::fmt::Write as _;

/// A kernel feature dnsloop does without where it is missing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Lack {
    /// `SO_NETNS_COOKIE` (Linux 5.14).
    NetnsCookie,
    /// `bpf_loop` (Linux 5.17).
    BpfLoop,
    /// The drop reason in the `skb:kfree_skb` tracepoint (Linux 5.17).
    DropReasons,
    /// TCX (Linux 6.6).
    Tcx,
    /// `bpf_get_netns_cookie` in TC programs (Linux 6.13).
    TcNetnsCookie,
}

impl Lack {
    /// Its name in the summary, and the metric's `feature` label.
    pub fn name(self) -> &'static str {
        match self {
            Lack::NetnsCookie => "netns_cookie",
            Lack::BpfLoop => "bpf_loop",
            Lack::DropReasons => "drop_reasons",
            Lack::Tcx => "tcx",
            Lack::TcNetnsCookie => "tc_netns_cookie",
        }
    }

    /// The feature, and the first Linux that has it.
    fn feature(self) -> &'static str {
        match self {
            Lack::NetnsCookie => "SO_NETNS_COOKIE (5.14)",
            Lack::BpfLoop => "bpf_loop (5.17)",
            Lack::DropReasons => "drop reasons in the kfree_skb tracepoint (5.17)",
            Lack::Tcx => "TCX (6.6)",
            Lack::TcNetnsCookie => "bpf_get_netns_cookie in TC programs (6.13)",
        }
    }

    /// What dnsloop does without it.
    fn costs(self) -> &'static str {
        match self {
            Lack::NetnsCookie => "network namespaces are told apart by their inode",
            Lack::BpfLoop => {
                "the programs built for older kernels run, which find the same but walk names \
                 a byte at a time"
            }
            Lack::DropReasons => {
                "the kernel's drops of DNS packets are reported without their reason, as \
                 \"unknown (Linux < 5.17)\""
            }
            Lack::Tcx => {
                "attached through tc clsact, whose filters a SIGKILL leaves behind until the \
                 next dnsloop starts"
            }
            Lack::TcNetnsCookie => "pods' loopbacks are not watched, only the node's",
        }
    }
}

/// `lacks` in one line, each with what it costs; `None` when nothing is lacking.
pub fn describe(kernel: &str, lacks: &[Lack]) -> Option<String> {
    let (first, rest) = lacks.split_first()?;
    let mut text = format!(
        "this kernel (Linux {kernel}) lacks {}: {}",
        first.feature(),
        first.costs()
    );
    for lack in rest {
        let _ = write!(text, "; {}: {}", lack.feature(), lack.costs());
    }
    Some(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_lack_is_said_with_its_cost_in_one_line() {
        assert_eq!(describe("6.18.1", &[]), None);
        let said = describe("6.1.0", &[Lack::Tcx, Lack::TcNetnsCookie]).expect("lacks");
        assert_eq!(
            said,
            "this kernel (Linux 6.1.0) lacks TCX (6.6): attached through tc clsact, whose \
             filters a SIGKILL leaves behind until the next dnsloop starts; bpf_get_netns_cookie \
             in TC programs (6.13): pods' loopbacks are not watched, only the node's"
        );
        assert!(!said.contains('\n'));
    }
}
