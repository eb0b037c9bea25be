//! Interface names for a capture that records only numbers: `tcpdump -i any` writes Linux
//! cooked v2 records, which carry the interface's index but not its name. `ip -o link`, taken
//! on the same node, maps one to the other, so that each interface is placed by its name
//! (placement rule b) rather than by the packets' addresses, which cannot tell an overlay
//! device leading to other nodes from a pod's veth.
use std::collections::HashMap;

/// The names `ip -o link` (or `ip -o -d link`) printed, by interface index: lines such as
/// `8: vxlan0: <BROADCAST,...> mtu 1450 ...` or `5: veth-a@if2: <...>`. Other lines are
/// ignored: the output may have been cut or mixed with other text.
pub fn parse_ip_link(text: &str) -> HashMap<u32, String> {
    text.lines()
        .filter_map(|line| {
            let (index, rest) = line.split_once(": ")?;
            let index: u32 = index.trim().parse().ok()?;
            let (name, _) = rest.split_once(": ")?;
            // `veth-a@if2`, `eth0@NONE`: the part after `@` names the peer or lower device.
            let name = name.split('@').next()?.trim();
            (!name.is_empty() && !name.contains(char::is_whitespace))
                .then(|| (index, name.to_owned()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_names_by_index_from_ip_link() {
        let text = "\
1: lo: <LOOPBACK,UP,LOWER_UP> mtu 65536 qdisc noqueue state UNKNOWN mode DEFAULT group default qlen 1000\\    link/loopback 00:00:00:00:00:00 brd 00:00:00:00:00:00
5: veth-coredns-a@if2: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500 qdisc noqueue master cni0 state UP
8: vxlan0: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1450 qdisc noqueue state UNKNOWN mode DEFAULT
    link/ether 6e:4f:4e:8b:8e:2d brd ff:ff:ff:ff:ff:ff
not a link line
x: bad: index
";
        let names = parse_ip_link(text);
        assert_eq!(names.len(), 3, "{names:?}");
        assert_eq!(names[&1], "lo");
        assert_eq!(names[&5], "veth-coredns-a");
        assert_eq!(names[&8], "vxlan0");
    }
}
