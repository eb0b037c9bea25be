//! The lab's DNS servers: what each one does ([`ServerConfig`]), its dnsmasq, unbound, dnsdist
//! or Knot Resolver configuration file, and its process.
use std::{
    fmt::Write as _,
    fs::{self, OpenOptions},
    net::IpAddr,
    path::{Path, PathBuf},
    process::{Child, Stdio},
    thread,
    time::{Duration, Instant},
};

use anyhow::{bail, ensure, Context as _, Result};

use super::{command, ip_netns, topology::Server};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Software {
    Dnsmasq,
    Unbound,
    /// Forwards like CoreDNS's `forward` plugin: every query it sends gets a new ID, and it
    /// never folds a question into an identical one in flight, so a loop goes round and round.
    Dnsdist,
    /// Knot Resolver (`kresd`): the cluster scenarios' upstream, answering from its own local
    /// data (policy rules) and forwarding nothing.
    KnotResolver,
}

impl Software {
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Software::Dnsmasq => "dnsmasq",
            Software::Unbound => "unbound",
            Software::Dnsdist => "dnsdist",
            Software::KnotResolver => "kresd",
        }
    }
}

/// Source ports a dnsdist server sends each forward target's queries from, in turn.
const FORWARD_SOCKETS: u32 = 8;

/// A dnsdist server forwards this many queries at once before its budget runs out ...
pub(crate) const STORM_BURST: u32 = 20_000;
/// ... which then refills at this many per second. Working traffic never comes near it; a loop
/// drains it in a few seconds (one looping query makes thousands of hops a second), after which
/// dnsdist drops what it would forward beyond the refill and the storm dies by itself.
pub(crate) const STORM_REFILL_PER_SECOND: u32 = 50;
/// Of the burst, this many forwards of queries that came in over TCP. A loop over TCP is a chain:
/// every hop waits on its own connection for the next one's answer, so each forward holds a
/// connection (two descriptors, one on each end) until the chain ends. 20000 of them would run
/// into the descriptor limit; this many keeps a TCP storm to a few thousand connections, after
/// which a dropped query closes its connection and the chain unwinds.
pub(crate) const STORM_BURST_TCP: u32 = 1_000;

/// How a server sends forwarded queries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Transport {
    /// UDP, falling back to TCP for truncated answers. (dnsmasq also forwards a query it
    /// received over TCP over TCP.)
    Udp,
    /// TCP only, like node-local-dns's `force_tcp` (unbound's `tcp-upstream`, dnsdist's
    /// `tcpOnly`).
    Tcp,
}

/// Zone that matches every name.
pub(crate) const ROOT: &str = ".";

/// Sends the names in `zone` (and below it) to `to`, port 53.
#[derive(Clone, Debug)]
pub(crate) struct Forward {
    pub zone: &'static str,
    pub to: IpAddr,
}

/// How a dnsdist answers a zone's names itself, the way a broken upstream does.
#[derive(Clone, Debug)]
pub(crate) enum ZoneAnswer {
    /// At once, with `rcode` (`REFUSED`, `SERVFAIL`: dnsdist's `DNSRCode` names).
    Rcode {
        zone: &'static str,
        rcode: &'static str,
    },
    /// `address`, after `delay` (UDP only, as dnsdist's DelayAction).
    Late {
        zone: &'static str,
        address: IpAddr,
        delay: Duration,
    },
    /// Truncated (TC) over UDP, so that it is asked again over TCP; `address` over TCP.
    TruncatedOverUdp { zone: &'static str, address: IpAddr },
    /// `records` A records (198.51.100.1 on), over UDP too, whatever size the query invites.
    Large { zone: &'static str, records: u8 },
}

/// What one DNS server does.
#[derive(Clone, Debug)]
pub(crate) struct ServerConfig {
    pub server: Server,
    /// The node it runs on (0 for the shared upstream).
    pub node: usize,
    pub software: Software,
    /// Addresses it listens on, UDP and TCP port 53; the first one is probed for readiness.
    pub listen: Vec<IpAddr>,
    /// Zones it answers itself, from `records` alone (NXDOMAIN for other names in them).
    pub local_zones: Vec<&'static str>,
    pub records: Vec<(&'static str, IpAddr)>,
    /// Most specific zone first.
    pub forwards: Vec<Forward>,
    pub transport: Transport,
    /// How long it holds every answer it forwards back before sending it on (dnsdist only, UDP
    /// only: dnsdist's DelayResponseAction).
    pub answer_delay: Option<Duration>,
    /// Zones it answers itself badly (dnsdist only).
    pub zone_answers: Vec<ZoneAnswer>,
}

impl ServerConfig {
    /// The configuration file for this server; `state_dir` is where it may keep files.
    pub(crate) fn render(&self, state_dir: &Path) -> Result<String> {
        match self.software {
            Software::Dnsmasq => {
                self.ensure_no_answer_delay()?;
                self.dnsmasq_conf()
            }
            Software::Unbound => {
                self.ensure_no_answer_delay()?;
                self.unbound_conf(state_dir)
            }
            Software::Dnsdist => self.dnsdist_conf(state_dir),
            Software::KnotResolver => {
                self.ensure_no_answer_delay()?;
                self.kresd_conf()
            }
        }
    }

    /// Names its files in the state directory: `node-cache` on node 0, `node1-node-cache` on
    /// node 1, ...
    pub(crate) fn file_stem(&self) -> String {
        server_file_stem(self.server, self.node)
    }

    /// How forwarded queries travel, for descriptions.
    pub(crate) fn forward_protocol(&self) -> &'static str {
        match (self.transport, self.software) {
            (Transport::Tcp, _) => "tcp only",
            (Transport::Udp, Software::Dnsmasq | Software::Dnsdist) => {
                "udp, or tcp if received over tcp"
            }
            (Transport::Udp, Software::Unbound | Software::KnotResolver) => "udp",
        }
    }

    fn dnsmasq_conf(&self) -> Result<String> {
        ensure!(
            self.transport == Transport::Udp,
            "{}: dnsmasq cannot be told to forward over TCP only; use unbound",
            self.server.name()
        );
        let mut conf = format!(
            "# {} (dnsmasq), generated by the dnsloop lab\n\
             keep-in-foreground\n\
             # Only what this file says: no /etc/resolv.conf, no /etc/hosts.\n\
             no-resolv\n\
             no-hosts\n\
             bind-interfaces\n\
             # Root inside the namespace; no pid file, so instances never collide.\n\
             user=root\n\
             group=root\n\
             pid-file=\n\
             log-queries\n\
             log-facility=-\n\
             # No cache: every query travels the whole path, every time.\n\
             cache-size=0\n",
            self.server.name()
        );
        for address in &self.listen {
            writeln!(conf, "listen-address={address}")?;
        }
        for zone in &self.local_zones {
            writeln!(conf, "local=/{}/", dnsmasq_domain(zone))?;
        }
        for (name, address) in &self.records {
            writeln!(conf, "host-record={name},{address}")?;
        }
        for forward in &self.forwards {
            match forward.zone {
                ROOT => writeln!(conf, "server={}", forward.to)?,
                zone => writeln!(conf, "server=/{zone}/{}", forward.to)?,
            }
        }
        if !self.forwards.is_empty() {
            // dnsmasq (since 2.83) folds a query into an identical one already in flight, so a
            // query that comes back around a loop is swallowed after one turn; CoreDNS does no
            // such thing. With a client-subnet option taken from each querier's address, an
            // answer depends on who asked, so dnsmasq folds nothing and forwards every query.
            conf.push_str("add-subnet=32,128\n");
        }
        Ok(conf)
    }

    fn unbound_conf(&self, state_dir: &Path) -> Result<String> {
        let mut conf = format!(
            "# {} (unbound), generated by the dnsloop lab\n\
             server:\n\
             \tchroot: \"\"\n\
             \tusername: \"\"\n\
             \tdirectory: \"{}\"\n\
             \tpidfile: \"\"\n\
             \tuse-syslog: no\n\
             \tlogfile: \"\"\n\
             \tverbosity: 1\n\
             \tlog-queries: yes\n\
             \tnum-threads: 1\n\
             \tport: 53\n\
             \tdo-ip6: yes\n\
             \taccess-control: 0.0.0.0/0 allow\n\
             \taccess-control: ::/0 allow\n\
             \t# No cache (unbound always has one; a zero TTL cap keeps nothing in it).\n\
             \tcache-max-ttl: 0\n\
             \tcache-max-negative-ttl: 0\n\
             \t# No DNSSEC validation: nothing in the lab is signed.\n\
             \tmodule-config: \"iterator\"\n\
             \t# unbound answers the RFC 6761 zone test. itself by default; forward it instead.\n\
             \tlocal-zone: \"test.\" nodefault\n",
            self.server.name(),
            state_dir.display()
        );
        for address in &self.listen {
            writeln!(conf, "\tinterface: {address}")?;
        }
        if self.forwards.iter().any(|forward| forward.to.is_loopback()) {
            conf.push_str("\t# Forwarding to loopback (to itself) is the point here.\n");
            conf.push_str("\tdo-not-query-localhost: no\n");
        }
        if self.transport == Transport::Tcp {
            conf.push_str("\ttcp-upstream: yes\n");
        }
        for zone in &self.local_zones {
            writeln!(conf, "\tlocal-zone: \"{}\" static", fqdn(zone))?;
        }
        for (name, address) in &self.records {
            let kind = if address.is_ipv4() { "A" } else { "AAAA" };
            writeln!(conf, "\tlocal-data: \"{name}. 0 IN {kind} {address}\"")?;
        }
        for forward in &self.forwards {
            writeln!(
                conf,
                "forward-zone:\n\tname: \"{}\"\n\tforward-addr: {}@53",
                fqdn(forward.zone),
                forward.to
            )?;
        }
        Ok(conf)
    }

    /// Refuses a setting the server's software is not rendered with, rather than ignore it.
    fn ensure_no_answer_delay(&self) -> Result<()> {
        ensure!(
            self.answer_delay.is_none() && self.zone_answers.is_empty(),
            "{}: only the lab's dnsdist delays answers or answers zones badly",
            self.server.name()
        );
        Ok(())
    }

    fn dnsdist_conf(&self, state_dir: &Path) -> Result<String> {
        let log = self.log_path(state_dir);
        let mut conf = format!(
            "-- {} (dnsdist), generated by the dnsloop lab\n\
             -- No security polling: it would send DNS queries of its own.\n\
             setSecurityPollSuffix(\"\")\n\
             -- The names in one zone, for SuffixMatchNodeRule (SuffixMatchNode:add returns nothing).\n\
             function zone(name) local names = newSuffixMatchNode(); names:add(name); return names end\n\
             -- No packet cache is configured: every query travels the whole path, every time.\n",
            self.server.name()
        );
        for (index, address) in self.listen.iter().enumerate() {
            let call = if index == 0 { "setLocal" } else { "addLocal" };
            writeln!(
                conf,
                "{call}(\"{}\")",
                std::net::SocketAddr::new(*address, 53)
            )?;
        }
        writeln!(
            conf,
            "-- Every query it receives, appended unbuffered to its log:\n\
             -- `[time] Packet from ADDRESS:PORT for NAME TYPE with id ID`.\n\
             addAction(AllRule(), LogAction(\"{}\", false, true, false, false, true))",
            log.display()
        )?;
        conf.push_str(
            "-- The readiness probe (version.bind CH TXT) is answered here, never forwarded.\n\
             addAction(QClassRule(DNSClass.CHAOS), RCodeAction(DNSRCode.REFUSED))\n",
        );
        let mut names: Vec<&str> = Vec::new();
        for (name, _) in &self.records {
            if !names.contains(name) {
                names.push(name);
            }
        }
        for name in names {
            let addresses: Vec<String> = self
                .records
                .iter()
                .filter(|(known, _)| *known == name)
                .map(|(_, address)| format!("\"{address}\""))
                .collect();
            writeln!(
                conf,
                "addAction(QNameRule(\"{name}.\"), SpoofAction({{{}}}))",
                addresses.join(", ")
            )?;
        }
        for answer in &self.zone_answers {
            match answer {
                ZoneAnswer::Rcode { zone, rcode } => writeln!(
                    conf,
                    "addAction({}, RCodeAction(DNSRCode.{rcode}))",
                    dnsdist_zone_rule(zone)
                )?,
                ZoneAnswer::Late {
                    zone,
                    address,
                    delay,
                } => writeln!(
                    conf,
                    "-- {zone}: answered, {ms} ms late.\n\
                     addAction({rule}, DelayAction({ms}))\n\
                     addAction({rule}, SpoofAction({{\"{address}\"}}))",
                    rule = dnsdist_zone_rule(zone),
                    ms = delay.as_millis()
                )?,
                ZoneAnswer::TruncatedOverUdp { zone, address } => writeln!(
                    conf,
                    "-- {zone}: truncated over UDP, answered over TCP.\n\
                     addAction(AndRule({{{rule}, TCPRule(false)}}), TCAction())\n\
                     addAction({rule}, SpoofAction({{\"{address}\"}}))",
                    rule = dnsdist_zone_rule(zone)
                )?,
                ZoneAnswer::Large { zone, records } => {
                    let addresses: Vec<String> = (1..=*records)
                        .map(|host| format!("\"198.51.100.{host}\""))
                        .collect();
                    writeln!(
                        conf,
                        "-- {zone}: {records} A records, in one UDP reply larger than an MTU.\n\
                         addAction({}, SpoofAction({{{}}}))",
                        dnsdist_zone_rule(zone),
                        addresses.join(", ")
                    )?
                }
            }
        }
        for zone in &self.local_zones {
            writeln!(
                conf,
                "addAction({}, RCodeAction(DNSRCode.NXDOMAIN))",
                dnsdist_zone_rule(zone)
            )?;
        }
        if !self.forwards.is_empty() {
            writeln!(
                conf,
                "-- A storm budget: {STORM_BURST} forwards at once, then {STORM_REFILL_PER_SECOND} a second;\n\
                 -- {STORM_BURST_TCP} at once for queries received over TCP, each of which holds a connection.\n\
                 addAction(NotRule(MaxQPSRule({STORM_REFILL_PER_SECOND}, {STORM_BURST})), DropAction())\n\
                 addAction(AndRule({{TCPRule(true), NotRule(MaxQPSRule({STORM_REFILL_PER_SECOND}, {STORM_BURST_TCP}))}}), DropAction())"
            )?;
        }
        if let Some(delay) = self.answer_delay {
            writeln!(
                conf,
                "-- A slow upstream: every answer from a forward target is held back {ms} ms\n\
                 -- before it goes to the querier (over UDP; TCP answers are not delayed).\n\
                 addResponseAction(AllRule(), DelayResponseAction({ms}))",
                ms = delay.as_millis()
            )?;
        }
        // force_tcp: every forwarded query on a TCP connection of its own making, whatever
        // it came in over.
        let tcp_only = match self.transport {
            Transport::Udp => "",
            Transport::Tcp => ", tcpOnly=true",
        };
        for (index, forward) in self.forwards.iter().enumerate() {
            let pool = format!("forward-{index}");
            writeln!(
                conf,
                "-- {} -> {}. Marked up: health checks would be queries of their own,\n\
                 -- looping with the rest. Several sockets, as CoreDNS's forward keeps several\n\
                 -- connections: each source port is its own conntrack entry, so the ClusterIP's\n\
                 -- DNAT picks a pod per socket instead of pinning every query to one.\n\
                 newServer({{address=\"{}\", pool=\"{pool}\", sockets={FORWARD_SOCKETS}{tcp_only}}}):setUp()\n\
                 addAction({}, PoolAction(\"{pool}\"))",
                forward.zone,
                forward.to,
                std::net::SocketAddr::new(forward.to, 53),
                dnsdist_zone_rule(forward.zone)
            )?;
        }
        Ok(conf)
    }

    /// Knot Resolver answering `records` itself and NXDOMAIN for every other name of its local
    /// zones (the root: every name). It never recurses or forwards, and nothing of its own
    /// (root priming, trust anchor updates) leaves it.
    fn kresd_conf(&self) -> Result<String> {
        ensure!(
            self.forwards.is_empty(),
            "{}: the lab's Knot Resolver answers from local data only; forward with dnsdist, \
             dnsmasq or unbound",
            self.server.name()
        );
        let mut conf = format!(
            "-- {} (kresd), generated by the dnsloop lab\n\
             -- Every query it receives goes to stdout, the server's log, unbuffered.\n\
             io.stdout:setvbuf('no')\n",
            self.server.name()
        );
        for address in &self.listen {
            writeln!(conf, "net.listen('{address}', 53, {{ kind = 'dns' }})")?;
        }
        conf.push_str(
            "-- Nothing in the lab is signed, and it must send no query of its own: no trust\n\
             -- anchor, no root priming, none of the modules that probe.\n\
             trust_anchors.remove('.')\n\
             modules.unload('priming')\n\
             modules.unload('detect_time_skew')\n\
             modules.unload('ta_signal_query')\n\
             modules.unload('ta_sentinel')\n\
             cache.size = 1 * MB\n\
             -- `query from ADDRESS#PORT for NAME TYPE`; returning nil passes it on to the rules below.\n\
             policy.add(function(req, qry)\n\
             \tprint(string.format('query from %s for %s %s', tostring(req.qsource.addr),\n\
             \t\tkres.dname2str(qry.sname), kres.tostring.type[qry.stype]))\n\
             \treturn nil\n\
             end)\n",
        );
        let mut names: Vec<&str> = Vec::new();
        for (name, _) in &self.records {
            if !names.contains(name) {
                names.push(name);
            }
        }
        for name in names {
            let of_type = |ipv4: bool| -> Vec<String> {
                self.records
                    .iter()
                    .filter(|(known, address)| *known == name && address.is_ipv4() == ipv4)
                    .map(|(_, address)| format!("kres.str2ip('{address}')"))
                    .collect()
            };
            let mut rrsets = Vec::new();
            for (kind, addresses) in [("A", of_type(true)), ("AAAA", of_type(false))] {
                if !addresses.is_empty() {
                    rrsets.push(format!(
                        "[kres.type.{kind}] = {{ rdata = {{ {} }}, ttl = 0 }}",
                        addresses.join(", ")
                    ));
                }
            }
            // `true`: NODATA for the name's other types, as a zone would answer.
            writeln!(
                conf,
                "policy.add(policy.domains(policy.ANSWER({{ {} }}, true), {{ todname('{name}.') }}))",
                rrsets.join(", ")
            )?;
        }
        for zone in &self.local_zones {
            let rule = if *zone == ROOT {
                "policy.all(policy.DENY)".to_owned()
            } else {
                format!("policy.suffix(policy.DENY, {{ todname('{zone}.') }})")
            };
            writeln!(
                conf,
                "-- NXDOMAIN for the rest of {zone}\npolicy.add({rule})"
            )?;
        }
        Ok(conf)
    }

    /// kresd's working directory (its cache and control socket), in the state directory.
    fn run_dir(&self, state_dir: &Path) -> PathBuf {
        state_dir.join(format!("{}.kresd", self.file_stem()))
    }

    fn log_path(&self, state_dir: &Path) -> PathBuf {
        state_dir.join(format!("{}.log", self.file_stem()))
    }

    fn command_line(&self, config: &Path, state_dir: &Path) -> Vec<String> {
        let run_dir = self.run_dir(state_dir).display().to_string();
        let config = config.display();
        match self.software {
            Software::Dnsmasq => vec!["dnsmasq".into(), format!("--conf-file={config}")],
            // -d: stay in the foreground.
            Software::Unbound => vec![
                "unbound".into(),
                "-d".into(),
                "-c".into(),
                config.to_string(),
            ],
            // --supervised: in the foreground, without a console.
            Software::Dnsdist => vec![
                "dnsdist".into(),
                "--supervised".into(),
                "--disable-syslog".into(),
                "-C".into(),
                config.to_string(),
            ],
            // -n: no console on stdin.
            Software::KnotResolver => vec![
                "kresd".into(),
                "-n".into(),
                "-c".into(),
                config.to_string(),
                run_dir,
            ],
        }
    }
}

/// The state-directory name of `server` on node `node`.
pub(crate) fn server_file_stem(server: Server, node: usize) -> String {
    match node {
        0 => server.name().to_owned(),
        node => format!("node{node}-{}", server.name()),
    }
}

/// A dnsdist rule matching the names in `zone`.
fn dnsdist_zone_rule(zone: &str) -> String {
    if zone == ROOT {
        "AllRule()".to_owned()
    } else {
        format!("SuffixMatchNodeRule(zone(\"{zone}.\"))")
    }
}

/// dnsmasq spells "every domain" `#`.
fn dnsmasq_domain(zone: &str) -> &str {
    if zone == ROOT {
        "#"
    } else {
        zone
    }
}

fn fqdn(zone: &str) -> String {
    if zone == ROOT {
        ROOT.to_owned()
    } else {
        format!("{zone}.")
    }
}

/// A started server. Its process is stopped by whoever owns the lab.
pub(crate) struct RunningServer {
    pub server: Server,
    pub node: usize,
    pub child: Child,
    pub log: PathBuf,
    namespace: String,
    software: Software,
    probe_address: IpAddr,
}

/// Writes `config` to `<state_dir>/<server>.conf` and starts the server in `namespace`, in the
/// foreground, logging to `<state_dir>/<server>.log`.
pub(crate) fn start(
    config: &ServerConfig,
    namespace: &str,
    state_dir: &Path,
) -> Result<RunningServer> {
    let name = config.file_stem();
    let probe_address = *config
        .listen
        .first()
        .with_context(|| format!("{name} listens on no address"))?;
    let config_path = state_dir.join(format!("{name}.conf"));
    fs::write(&config_path, config.render(state_dir)?)
        .with_context(|| format!("writing {}", config_path.display()))?;
    let log = config.log_path(state_dir);
    // Appending: dnsdist's query log goes to the same file through a descriptor of its own.
    let stdout = OpenOptions::new()
        .create(true)
        .truncate(false)
        .append(true)
        .open(&log)
        .with_context(|| format!("creating {}", log.display()))?;
    let stderr = stdout.try_clone()?;
    if config.software == Software::KnotResolver {
        let run_dir = config.run_dir(state_dir);
        fs::create_dir_all(&run_dir).with_context(|| format!("creating {}", run_dir.display()))?;
    }
    let argv = config.command_line(&config_path, state_dir);
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let child = ip_netns::exec_command(namespace, &argv)
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .spawn()
        .with_context(|| {
            format!(
                "starting {} for {name} in {namespace}",
                config.software.name()
            )
        })?;
    Ok(RunningServer {
        server: config.server,
        node: config.node,
        child,
        log,
        namespace: namespace.to_owned(),
        software: config.software,
        probe_address,
    })
}

const PROBE_INTERVAL: Duration = Duration::from_millis(50);

impl RunningServer {
    /// Polls the server with a query it answers itself (`version.bind CH TXT`, which neither
    /// dnsmasq, unbound nor kresd forwards and dnsdist is told to refuse, so no probe ever enters a
    /// loop) until it answers.
    pub(crate) fn wait_until_answering(&mut self, deadline: Instant) -> Result<()> {
        let server = format!("@{}", self.probe_address);
        let probe = ip_netns::exec_argv(
            &self.namespace,
            &[
                "dig",
                "+tries=1",
                "+timeout=1",
                &server,
                "version.bind",
                "CH",
                "TXT",
            ],
        );
        loop {
            if let Some(status) = self.child.try_wait()? {
                bail!(
                    "{} ({}) exited with {status} while starting; its log ends with:\n{}",
                    server_file_stem(self.server, self.node),
                    self.software.name(),
                    self.log_tail()
                );
            }
            let output = command::output(&probe)?;
            if String::from_utf8_lossy(&output.stdout).contains("status: ") {
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!(
                    "{} ({}) did not answer on {} in time; its log ends with:\n{}",
                    server_file_stem(self.server, self.node),
                    self.software.name(),
                    self.probe_address,
                    self.log_tail()
                );
            }
            thread::sleep(PROBE_INTERVAL);
        }
    }

    fn log_tail(&self) -> String {
        let log = fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(10)..].join("\n")
    }
}
