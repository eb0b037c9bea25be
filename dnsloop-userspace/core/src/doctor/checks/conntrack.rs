//! conntrack: entries that lost an insert race (the "5-second DNS timeout": a resolver sends A
//! and AAAA from one socket at once, and one of them is dropped), and a table near full.
use crate::doctor::{
    check::{Check, Location, Severity},
    node::Node,
    read::{conntrack, root::Unavailable},
};

const STATS: &str = "conntrack.insert-failed";
const TABLE: &str = "conntrack.table";

/// Warn from this fill of the table on.
const WARN_PERCENT: u64 = 90;

pub fn check(node: &Node) -> Vec<Check> {
    vec![stats(node), table(node)]
}

fn unavailable(id: &'static str, what: &str, path: &str, why: &Unavailable) -> Check {
    let reason = match why {
        Unavailable::Missing => format!(
            "{path} does not exist (nf_conntrack is not loaded, or /proc is not under the root)"
        ),
        Unavailable::Unreadable(reason) => format!("{path} cannot be read: {reason}"),
    };
    Check::new(id, Severity::Info, what, format!("{reason}; not checked")).at(Location::file(path))
}

fn stats(node: &Node) -> Check {
    let read = &node.conntrack.stats;
    let stats = match &read.content {
        Ok(stats) => stats,
        Err(why) => return unavailable(STATS, "nf_conntrack", conntrack::STAT, why),
    };
    // As asked: /proc/net leads through /proc/self to this process's own pid.
    let at = Location::file(&read.file.asked);
    let resolved = match stats.clashes_resolved {
        Some(resolved) => format!(" (and {resolved} clashes resolved without a drop)"),
        None => String::new(),
    };
    let counted = format!(
        "insert_failed {} and drop {} since boot{resolved}, summed over {} CPUs",
        stats.insert_failed, stats.drop, stats.cpus
    );
    if stats.insert_failed == 0 && stats.drop == 0 {
        return Check::new(
            STATS,
            Severity::Ok,
            "nf_conntrack",
            format!("conntrack counted {counted}"),
        )
        .at(at);
    }
    Check::new(
        STATS,
        Severity::Warning,
        "nf_conntrack",
        format!("conntrack counted {counted}: packets of new flows were dropped, and for DNS over UDP each is a 5-second timeout when a resolver's parallel A and AAAA queries race"),
    )
    .fix("read it again in a minute (`conntrack -S`) to see whether it still rises; if it does, run node-local-dns (it reaches CoreDNS over TCP) or give pods `options single-request-reopen`")
    .at(at)
}

fn table(node: &Node) -> Check {
    let conntrack = &node.conntrack;
    let (count, max) = match (&conntrack.count.content, &conntrack.max.content) {
        (Ok(count), Ok(max)) if *max > 0 => (*count, *max),
        (Err(why), _) => return unavailable(TABLE, "nf_conntrack_count", conntrack::COUNT, why),
        (_, Err(why)) => return unavailable(TABLE, "nf_conntrack_max", conntrack::MAX, why),
        (Ok(_), Ok(_)) => {
            return Check::new(
                TABLE,
                Severity::Info,
                "nf_conntrack_max",
                "nf_conntrack_max is 0; not checked",
            )
        }
    };
    let percent = count.saturating_mul(100) / max;
    let at = Location::line(&conntrack.count.file.path, 1);
    let filled = format!("the conntrack table holds {count} of {max} entries ({percent}%)");
    let fix = "raise net.netfilter.nf_conntrack_max (kube-proxy sets it from conntrack.maxPerCore) and find what fills the table (`conntrack -L`)";
    if count >= max {
        Check::new(
            TABLE,
            Severity::Error,
            "nf_conntrack_count",
            format!("{filled}: it is full, and the kernel drops packets of new flows, DNS queries among them (\"nf_conntrack: table full, dropping packet\")"),
        )
        .fix(fix)
        .at(at)
    } else if percent >= WARN_PERCENT {
        Check::new(
            TABLE,
            Severity::Warning,
            "nf_conntrack_count",
            format!("{filled}: when it fills, the kernel drops packets of new flows, DNS queries among them"),
        )
        .fix(fix)
        .at(at)
    } else {
        Check::new(TABLE, Severity::Ok, "nf_conntrack_count", filled).at(at)
    }
}
