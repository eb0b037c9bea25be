//! resolv.conf, as glibc and kubelet read it: `nameserver`, `search`/`domain` (the last one
//! wins), `options ndots:N`; `#` and `;` start comments; anything else is ignored.
use std::net::IpAddr;

use crate::doctor::address;

/// glibc stops counting dots at 15 (`RES_MAXNDOTS`).
const MAX_NDOTS: u32 = 15;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResolvConf {
    pub nameservers: Vec<Nameserver>,
    /// `nameserver` lines whose argument is not an address: resolvers skip them.
    pub malformed_nameservers: Vec<Malformed>,
    /// The search list in effect: the last `search` or `domain` line.
    pub search: Option<Search>,
    /// `options ndots:N`, from the last line that sets it.
    pub ndots: Option<Ndots>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Nameserver {
    pub address: IpAddr,
    pub line: u32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Malformed {
    pub text: String,
    pub line: u32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Search {
    pub domains: Vec<String>,
    pub line: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ndots {
    pub value: u32,
    pub line: u32,
}

impl ResolvConf {
    pub fn parse(text: &str) -> Self {
        let mut conf = Self::default();
        for (index, raw) in text.lines().enumerate() {
            let line = u32::try_from(index + 1).unwrap_or(u32::MAX);
            let content = raw.split(['#', ';']).next().unwrap_or_default();
            let mut words = content.split_whitespace();
            let Some(keyword) = words.next() else {
                continue;
            };
            match keyword {
                "nameserver" => match words.next() {
                    Some(word) => match address::parse(word) {
                        Some(address) => conf.nameservers.push(Nameserver { address, line }),
                        None => conf.malformed_nameservers.push(Malformed {
                            text: word.to_string(),
                            line,
                        }),
                    },
                    None => conf.malformed_nameservers.push(Malformed {
                        text: String::new(),
                        line,
                    }),
                },
                "search" => {
                    conf.search = Some(Search {
                        domains: words.map(String::from).collect(),
                        line,
                    });
                }
                "domain" => {
                    conf.search = Some(Search {
                        domains: words.next().map(String::from).into_iter().collect(),
                        line,
                    });
                }
                "options" => {
                    for option in words {
                        if let Some(value) = option.strip_prefix("ndots:") {
                            if let Ok(value) = value.parse::<u32>() {
                                conf.ndots = Some(Ndots {
                                    value: value.min(MAX_NDOTS),
                                    line,
                                });
                            }
                        }
                    }
                }
                _ => {}
            }
        }
        conf
    }

    pub fn search_domains(&self) -> &[String] {
        self.search.as_ref().map_or(&[], |search| &search.domains)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SYSTEMD_STUB: &str = "\
# This is /run/systemd/resolve/stub-resolv.conf managed by man:systemd-resolved(8).
# Do not edit.

nameserver 127.0.0.53
options edns0 trust-ad
search openstacklocal
";

    #[test]
    fn reads_a_systemd_stub_file() {
        let conf = ResolvConf::parse(SYSTEMD_STUB);
        assert_eq!(
            conf.nameservers,
            [Nameserver {
                address: "127.0.0.53".parse().unwrap(),
                line: 4
            }]
        );
        assert_eq!(conf.search_domains(), ["openstacklocal"]);
        assert_eq!(conf.search.unwrap().line, 6);
        assert_eq!(conf.ndots, None);
    }

    #[test]
    fn the_last_search_or_domain_line_wins() {
        // kubespray's host_resolvconf layout: `domain` then `search`.
        let conf = ResolvConf::parse(
            "domain cluster.local\nsearch default.svc.cluster.local svc.cluster.local\nnameserver 169.254.25.10\n",
        );
        assert_eq!(
            conf.search_domains(),
            ["default.svc.cluster.local", "svc.cluster.local"]
        );
        let conf = ResolvConf::parse("search a.example b.example\ndomain corp.example\n");
        assert_eq!(conf.search_domains(), ["corp.example"]);
        assert_eq!(conf.search.unwrap().line, 2);
    }

    #[test]
    fn options_set_ndots_capped_and_other_options_are_ignored() {
        let conf = ResolvConf::parse(
            "options timeout:2 attempts:3 rotate\noptions ndots:5 edns0 single-request-reopen\n",
        );
        assert_eq!(conf.ndots, Some(Ndots { value: 5, line: 2 }));
        let conf = ResolvConf::parse("options ndots:99\n");
        assert_eq!(conf.ndots.unwrap().value, MAX_NDOTS);
        let conf = ResolvConf::parse("options ndots:x ndots:\n");
        assert_eq!(conf.ndots, None);
    }

    #[test]
    fn ipv6_zones_and_trailing_comments_are_handled() {
        let conf = ResolvConf::parse(
            "nameserver fe80::1%eth0 # router\nnameserver 2001:db8::53;backup\nnameserver\tfd00::a\n",
        );
        let addresses: Vec<String> = conf
            .nameservers
            .iter()
            .map(|ns| ns.address.to_string())
            .collect();
        assert_eq!(addresses, ["fe80::1", "2001:db8::53", "fd00::a"]);
    }

    #[test]
    fn malformed_nameservers_are_kept_with_their_line() {
        let conf = ResolvConf::parse("nameserver dns.example\nnameserver\nnameserver 10.0.0.2\n");
        assert_eq!(conf.nameservers.len(), 1);
        assert_eq!(
            conf.malformed_nameservers,
            [
                Malformed {
                    text: "dns.example".into(),
                    line: 1
                },
                Malformed {
                    text: String::new(),
                    line: 2
                }
            ]
        );
    }

    #[test]
    fn odd_input_never_panics_and_keeps_line_numbers() {
        // CRLF, tabs, no final newline.
        let conf =
            ResolvConf::parse("search\ta.example\r\n\r\nnameserver\t10.0.0.2\r\noptions ndots:2");
        assert_eq!(conf.search_domains(), ["a.example"]);
        assert_eq!(conf.nameservers[0].line, 3);
        assert_eq!(conf.ndots, Some(Ndots { value: 2, line: 4 }));
        // Binary junk and a huge line.
        let junk = String::from_utf8_lossy(&[0, 159, 146, 150, b'\n', 0xff, b' ', 7]).into_owned();
        let conf = ResolvConf::parse(&junk);
        assert!(conf.nameservers.is_empty());
        let huge = format!(
            "search {}\nnameserver 10.0.0.2\n",
            "a.example ".repeat(100_000)
        );
        let conf = ResolvConf::parse(&huge);
        assert_eq!(conf.search_domains().len(), 100_000);
        assert_eq!(conf.nameservers[0].line, 2);
        assert_eq!(ResolvConf::parse(""), ResolvConf::default());
    }
}
