//! The search list pods get, and what it costs. kubelet gives a ClusterFirst pod
//! `search <namespace>.svc.<domain> svc.<domain> <domain>` followed by the search domains of
//! its resolvConf file (deduplicated, trailing dots ignored), and `options ndots:5`.
//!
//! Limits: glibc before 2.26 (and kubelet before 1.28, without ExpandedDNSConfig) keep 6
//! domains and 256 characters; kubelet 1.28+ allows 32 domains and 2048 characters.
use super::{count, list};
use crate::doctor::{
    check::{Check, Location, Severity},
    node::Node,
    read::resolv_conf::{ResolvConf, Search},
};

const STRAY: &str = "search.stray-domain";
const LIMITS: &str = "search.limits";
const AMPLIFICATION: &str = "search.ndots-amplification";

/// kubelet's `ndots` for ClusterFirst pods.
const POD_NDOTS: u32 = 5;
/// resolv.conf's default `ndots`.
const DEFAULT_NDOTS: u32 = 1;
const CLASSIC_MAX_DOMAINS: usize = 6;
const CLASSIC_MAX_CHARS: usize = 256;
const EXPANDED_MAX_DOMAINS: usize = 32;
const EXPANDED_MAX_CHARS: usize = 2048;
/// The namespace whose search list is measured: lists are longer in longer-named namespaces.
const MEASURED_NAMESPACE: &str = "default";

pub fn check(node: &Node) -> Vec<Check> {
    let mut checks = Vec::new();
    let pod_file = node.pod_resolv.file();
    let pod_conf = pod_file.and_then(|file| file.found());
    if let (Some(file), Some(conf)) = (pod_file, pod_conf) {
        checks.extend(stray_domains(&file.file.path, conf, true));
        checks.push(limits(node, &file.file.path, conf));
        checks.push(pod_amplification(node, &file.file.path, conf));
    }
    if let Some(host) = node.host_resolv.found() {
        if !node.pods_get_host_resolv() {
            checks.extend(stray_domains(&node.host_resolv.file.path, host, false));
        }
        checks.push(node_amplification(&node.host_resolv.file.path, host));
    }
    checks
}

fn normalized(domain: &str) -> &str {
    domain.trim_end_matches('.')
}

/// The search list a ClusterFirst pod in [`MEASURED_NAMESPACE`] gets.
fn pod_search_list(node: &Node, conf: &ResolvConf) -> Vec<String> {
    let domain = normalized(&node.kubelet.cluster_domain.value);
    let mut list = vec![
        format!("{MEASURED_NAMESPACE}.svc.{domain}"),
        format!("svc.{domain}"),
        domain.to_string(),
    ];
    for host_domain in conf.search_domains() {
        let host_domain = normalized(host_domain);
        if !host_domain.is_empty() && !list.iter().any(|known| known == host_domain) {
            list.push(host_domain.to_string());
        }
    }
    list
}

fn at_search(path: &str, search: Option<&Search>) -> Location {
    match search {
        Some(search) => Location::line(path, search.line),
        None => Location::file(path),
    }
}

/// Single-label search domains (`openstacklocal`, `localdomain`): DHCP's or a cloud image's
/// leftovers, never a zone pods need, and every short name pods look up is tried in them.
fn stray_domains(path: &str, conf: &ResolvConf, pods_get_it: bool) -> Vec<Check> {
    let Some(search) = &conf.search else {
        return Vec::new();
    };
    search
        .domains
        .iter()
        .filter(|domain| {
            let domain = normalized(domain);
            !domain.is_empty() && !domain.contains('.')
        })
        .map(|domain| {
            let origin = match normalized(domain) {
                "openstacklocal" => " (OpenStack's DHCP hands it out)",
                "localdomain" => " (a placeholder from the installer)",
                _ => "",
            };
            let check = if pods_get_it {
                Check::new(
                    STRAY,
                    Severity::Warning,
                    format!("search {domain}"),
                    format!("search domain {domain}{origin} is a single label, and kubelet appends it to every pod's search list: pods also ask upstream for names like kubernetes.default.svc.cluster.local.{domain}, which are slow to fail or time out"),
                )
                .fix("remove it where it comes from (DHCP through systemd-resolved: `UseDomains=no` in the .network file; cloud-init; dhclient `supersede domain-search`), or give kubelet a resolvConf without it")
            } else {
                Check::new(
                    STRAY,
                    Severity::Info,
                    format!("search {domain}"),
                    format!("search domain {domain}{origin} is a single label in the node's own search list; kubelet hands pods another file, so they do not get it"),
                )
            };
            check.at(Location::line(path, search.line))
        })
        .collect()
}

fn limits(node: &Node, path: &str, conf: &ResolvConf) -> Check {
    let list = pod_search_list(node, conf);
    let chars = list.join(" ").len();
    let domains = list.len();
    let measured = format!(
        "pods' search list has {} ({chars} characters in namespace {MEASURED_NAMESPACE}): kubelet's 3 and {} from {path}",
        count(domains, "domain", "domains"),
        domains - 3
    );
    let at = at_search(path, conf.search.as_ref());
    let fix = "trim the search domains of the file kubelet hands to pods (its resolvConf), or give kubelet a resolvConf with fewer";
    if domains > EXPANDED_MAX_DOMAINS || chars > EXPANDED_MAX_CHARS {
        Check::new(
            LIMITS,
            Severity::Error,
            "pods' search list",
            format!("{measured}, past even kubelet 1.28+'s limit of {EXPANDED_MAX_DOMAINS} domains and {EXPANDED_MAX_CHARS} characters: kubelet drops the rest and warns \"Search Line limits were exceeded\""),
        )
        .fix(fix)
        .at(at)
    } else if domains > CLASSIC_MAX_DOMAINS || chars > CLASSIC_MAX_CHARS {
        Check::new(
            LIMITS,
            Severity::Warning,
            "pods' search list",
            format!("{measured}, past the classic limit of {CLASSIC_MAX_DOMAINS} domains and {CLASSIC_MAX_CHARS} characters: kubelet before 1.28 drops the rest (\"Search Line limits were exceeded\"), and so does glibc before 2.26 in the pods' images"),
        )
        .fix(fix)
        .at(at)
    } else {
        Check::new(
            LIMITS,
            Severity::Ok,
            "pods' search list",
            format!("{measured}, within the classic limit of {CLASSIC_MAX_DOMAINS} domains and {CLASSIC_MAX_CHARS} characters"),
        )
        .at(at)
    }
}

/// Queries one lookup of a one-dot name (`example.com`) costs: a name with fewer dots than
/// ndots is tried with every search domain before it is tried as it is, each try an A and an
/// AAAA query.
fn one_dot_lookup_cost(ndots: u32, search_domains: usize) -> usize {
    let tries = if 1 < ndots { search_domains + 1 } else { 1 };
    tries * 2
}

fn pod_amplification(node: &Node, path: &str, conf: &ResolvConf) -> Check {
    let domains = pod_search_list(node, conf).len();
    let queries = one_dot_lookup_cost(POD_NDOTS, domains);
    Check::new(
        AMPLIFICATION,
        Severity::Info,
        "pods' lookups",
        format!(
            "one lookup of an external name like example.com from a ClusterFirst pod (ndots:{POD_NDOTS}, {}) costs {queries} queries, A and AAAA for each search domain and then the name itself: {} answered NXDOMAIN before the real answer",
            count(domains, "search domain", "search domains"),
            queries - 2
        ),
    )
    .fix("write external names fully qualified (`example.com.`) in busy clients, or lower ndots with the pod's dnsConfig (`ndots: 2`); drop search domains pods do not need")
    .at(at_search(path, conf.search.as_ref()))
}

fn node_amplification(path: &str, conf: &ResolvConf) -> Check {
    let ndots = conf.ndots.map_or(DEFAULT_NDOTS, |ndots| ndots.value);
    let domains = conf.search_domains().len();
    let queries = one_dot_lookup_cost(ndots, domains);
    let how = if queries == 2 {
        "a name with at least one dot is asked as it is first".to_string()
    } else {
        format!(
            "names with fewer than {ndots} dots are tried in {} first",
            list(conf.search_domains())
        )
    };
    let at = match conf.ndots {
        Some(ndots) => Location::line(path, ndots.line),
        None => at_search(path, conf.search.as_ref()),
    };
    Check::new(
        AMPLIFICATION,
        Severity::Info,
        "the node's lookups",
        format!(
            "one lookup of example.com on the node itself (ndots:{ndots}, {}) costs {queries} queries: {how}",
            count(domains, "search domain", "search domains")
        ),
    )
    .at(at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_one_dot_name_is_searched_only_below_ndots() {
        // ClusterFirst pods: 3 cluster domains, ndots:5.
        assert_eq!(one_dot_lookup_cost(5, 3), 8);
        // ... and one more from the host, as with openstacklocal.
        assert_eq!(one_dot_lookup_cost(5, 4), 10);
        // The node: ndots:1 asks example.com as it is first.
        assert_eq!(one_dot_lookup_cost(1, 2), 2);
        assert_eq!(one_dot_lookup_cost(2, 2), 6);
        assert_eq!(one_dot_lookup_cost(0, 0), 2);
    }
}
