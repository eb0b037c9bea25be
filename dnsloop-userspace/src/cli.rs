//! The command line.
use std::{net::SocketAddr, path::PathBuf, time::Duration};

use clap::{Args, Parser, Subcommand, ValueEnum};

#[derive(Parser, Debug)]
#[command(
    name = "dnsloop",
    version,
    about = "Find DNS forwarding loops and broken DNS paths on a Kubernetes node while they happen",
    after_help = "Examples:\n  \
        dnsloop trace                          # the whole node: its interfaces, pods' loopbacks, new pods\n  \
        dnsloop trace -i cni0 -i eth0 --duration 30s\n  \
        dnsloop trace --output json | jq .\n  \
        dnsloop trace --packets -i cni0        # every DNS packet on the bridge\n  \
        dnsloop trace --metrics-addr 9553      # Prometheus metrics at http://127.0.0.1:9553/metrics\n  \
        dnsloop doctor --corefile coredns.yaml  # the node's DNS configuration, checked\n  \
        dnsloop analyze node.pcap              # the same findings, from a capture file"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Watch DNS on this node live (needs root: loads BPF programs).
    Trace(TraceArgs),
    /// Check the node's DNS configuration for loops and known faults (reads files only).
    #[command(after_help = "Examples:\n  \
        kubectl -n kube-system get configmap coredns -o yaml > coredns.yaml\n  \
        dnsloop doctor --corefile coredns.yaml\n  \
        dnsloop doctor --root /mnt/node --output json   # a node's disk mounted elsewhere\n\n\
        Exit status: 0 no errors, 1 errors found, 2 doctor could not run.")]
    Doctor(DoctorArgs),
    /// Send a CoreDNS-style loop probe to a resolver; with --trace, watch whether it comes back.
    Probe(ProbeArgs),
    /// Find the same faults in a capture file (pcap or pcapng), offline and unprivileged.
    Analyze(AnalyzeArgs),
    /// Trace every DNS packet for a while, then write a bundle for later: the packets as
    /// pcapng, and the findings and the node's DNS configuration as JSON and Markdown (root).
    Capture(CaptureArgs),
}

#[derive(Args, Debug)]
#[command(
    after_help = "Exit status: 0 when a probe was answered and none came back, 1 when \
    none was answered or one came back (a loop), 2 when dnsloop could not run.\n\n\
    Examples:\n  \
    dnsloop probe 169.254.25.10                  # the node-local cache: rcode and timing\n  \
    dnsloop probe 10.96.0.10 --trace             # as root: does the probe come back?\n  \
    dnsloop probe [fd00::a]:53 --tcp --zone cluster.local"
)]
pub struct ProbeArgs {
    /// The resolver to probe: an IP address, with an optional port (default 53).
    #[arg(value_name = "SERVER[:PORT]")]
    pub server: String,

    /// The zone the probe name is under, as CoreDNS uses its server block's zone.
    #[arg(long, default_value = ".")]
    pub zone: String,

    /// Probes to send, one after the other (at most 100).
    #[arg(long, default_value_t = 1)]
    pub count: u32,

    /// Send over TCP instead of UDP.
    #[arg(long)]
    pub tcp: bool,

    /// How long to wait for each probe's answer.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "2s", value_name = "DURATION")]
    pub timeout: Duration,

    /// Watch the node while the probes travel (needs root, as `trace`): report whether a probe
    /// came back, how many times, and its path.
    #[arg(long)]
    pub trace: bool,

    /// Output format on stdout.
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,
}

/// Defaults `trace` and `analyze` share, so that both judge packets alike.
const DEFAULT_TIMEOUT: &str = "2s";
const DEFAULT_REPORT_INTERVAL: &str = "10s";
const DEFAULT_DNS_PORT: u16 = 53;

#[derive(Args, Debug)]
pub struct TraceArgs {
    /// Interface to watch (repeatable). Default: every interface of the current network
    /// namespace, the loopback of every pod behind them, and new ones as they appear.
    #[arg(short = 'i', long = "interface", value_name = "IFACE")]
    pub interfaces: Vec<String>,

    /// Stop after this long (e.g. 30s, 5m). Default: until SIGINT or SIGTERM.
    #[arg(long, value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub duration: Option<Duration>,

    /// Output format on stdout.
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,

    /// A query with no answer after this long is reported as a timeout.
    #[arg(long, value_parser = humantime::parse_duration, default_value = DEFAULT_TIMEOUT, value_name = "DURATION")]
    pub timeout: Duration,

    /// A loop or an unexpected source still happening is reported again, with its count, at
    /// most this often.
    #[arg(long, value_parser = humantime::parse_duration, default_value = DEFAULT_REPORT_INTERVAL, value_name = "DURATION")]
    pub report_interval: Duration,

    /// Print every DNS packet seen, on every hop (one line, or one JSON object, per packet).
    #[arg(long)]
    pub packets: bool,

    /// Bytes of each streamed packet to keep, from the start of the frame (64-2048).
    #[arg(long, value_name = "BYTES", default_value_t = dnsloop_ebpf::record::PACKET_SNAP_MAX)]
    pub snap_len: usize,

    /// Questions the kernel remembers to see one come back into a namespace that forwarded it
    /// (LRU). Each entry takes about 460 bytes of kernel memory: the default 32768 is about
    /// 15 MiB.
    #[arg(long, value_name = "ENTRIES", default_value_t = 32768)]
    pub question_table_size: u32,

    /// Queries in flight the kernel remembers, with their question, to check and time their
    /// replies and to report those never answered (LRU). Each entry takes about 380 bytes of
    /// kernel memory: the default 32768 is about 12 MiB.
    #[arg(long, value_name = "ENTRIES", default_value_t = 32768)]
    pub query_table_size: u32,

    /// Size of the ring buffer that carries packets to dnsloop, in MiB (a power of two). Each
    /// packet takes about 2 KiB: the default 4 MiB holds about 2000 before any is lost.
    #[arg(long, value_name = "MIB", default_value_t = 4)]
    pub ring_buffer_mib: u32,

    /// Watch ingress at XDP instead of TC on every interface but loopback and bridges: cheaper,
    /// as it runs before the kernel builds a socket buffer. An interface already holding an XDP
    /// program, or whose driver cannot run one, makes dnsloop stop with an error.
    #[arg(long)]
    pub xdp: bool,

    /// Attach and detach at full speed on a node with many pods, by switching the kernel to
    /// expedited RCU grace periods (/sys/kernel/rcu_expedited) meanwhile. Each TCX link waits
    /// out a grace period, one link after another: 100 veths take about 2.5 s at the normal
    /// pace and a tenth of a second expedited. Expedited grace periods interrupt every CPU,
    /// node-wide, while the setting holds; it is restored at once, but a SIGKILL in that
    /// moment leaves it set.
    #[arg(long)]
    pub expedite_attach: bool,

    /// UDP/TCP port that carries DNS (repeatable, at most 8).
    #[arg(long = "dns-port", value_name = "PORT", default_values_t = [DEFAULT_DNS_PORT])]
    pub dns_ports: Vec<u16>,

    /// Serve Prometheus metrics over HTTP at /metrics on this address while tracing. A port
    /// alone (9553 or :9553) listens on 127.0.0.1 only; give an address to listen elsewhere
    /// (0.0.0.0:9553, [::]:9553). A port already in use stops dnsloop at startup.
    #[arg(long, value_name = "[IP]:PORT", value_parser = crate::metrics::parse_listen_address)]
    pub metrics_addr: Option<SocketAddr>,

    /// The kubelet's pod log directory, whose `<namespace>_<pod>_<uid>` directories name the
    /// pods behind the node's veths (`pod kube-system/coredns-5d78c9869d-abcde`); pods it does
    /// not name are shown by address (`pod 10.244.0.3`). In a container, mount the node's.
    #[arg(long, value_name = "DIR", default_value = crate::pods::POD_LOGS)]
    pub pod_logs: PathBuf,

    /// The container runtime's CRI socket, which names the pods behind the node's veths before
    /// the pod log directory does: its ready pod sandboxes are listed at start and again when
    /// a pod it has not listed appears. `none`: do not ask the runtime. Default: the first of
    /// /run/containerd/containerd.sock and /run/crio/crio.sock that exists, if any. A socket
    /// given that does not exist stops dnsloop at start; a runtime that fails to answer later
    /// is reported and asked again. In a container, mount the node's socket.
    #[arg(long, value_name = "PATH|none", value_parser = crate::pods::CriSocket::parse)]
    pub cri_socket: Option<crate::pods::CriSocket>,

    /// Keep the kernel's counters, per-server answer statistics and queries in flight in DIR,
    /// on a BPF filesystem (e.g. /sys/fs/bpf/dnsloop), and carry on from them when started
    /// again with the same DIR: counters continue, and answers to queries asked before the
    /// restart are still matched. Give the same table sizes each time; `rm -r DIR` starts from
    /// zero.
    #[arg(long, value_name = "DIR")]
    pub pin: Option<PathBuf>,
}

impl TraceArgs {
    /// `dnsloop trace` as given no option: what `probe --trace` and `capture` start from.
    pub fn defaults() -> Self {
        use clap::FromArgMatches as _;
        let matches = Self::augment_args(clap::Command::new("trace")).get_matches_from(["trace"]);
        Self::from_arg_matches(&matches).expect("trace's defaults parse")
    }
}

#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  \
    tcpdump -i any -w node.pcap port 53       # on the node, then elsewhere:\n  \
    dnsloop analyze node.pcap\n  \
    dnsloop analyze --output json --packets bundle.pcapng\n\n\
    Captures of several interfaces (tcpdump -i any, or pcapng with interface names) show a \
    loop's path hop by hop; a capture of one interface shows what crossed it.")]
pub struct AnalyzeArgs {
    /// The capture to analyse: pcap or pcapng, as tcpdump, dumpcap/Wireshark or dnsloop write
    /// them.
    #[arg(value_name = "FILE")]
    pub file: PathBuf,

    /// Output format on stdout.
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,

    /// A query with no answer after this long, in the capture's time, is reported as a timeout.
    #[arg(long, value_parser = humantime::parse_duration, default_value = DEFAULT_TIMEOUT, value_name = "DURATION")]
    pub timeout: Duration,

    /// A loop or an unexpected source going on is reported again, with its count, at most
    /// this often in the capture's time.
    #[arg(long, value_parser = humantime::parse_duration, default_value = DEFAULT_REPORT_INTERVAL, value_name = "DURATION")]
    pub report_interval: Duration,

    /// Print every DNS packet of the capture, on every hop.
    #[arg(long)]
    pub packets: bool,

    /// `ip -o link` as printed on the node the capture was taken on: names the interfaces of a
    /// `tcpdump -i any` capture, which records only their numbers, so that each is placed by
    /// its name (an overlay device such as vxlan0 leads to other nodes, a veth to a pod).
    #[arg(long, value_name = "FILE")]
    pub links: Option<PathBuf>,

    /// The node the capture was taken on, named in every JSON object (`node`). Default: the
    /// NODE_NAME environment variable, else this host's name.
    #[arg(long, value_name = "NAME")]
    pub node: Option<String>,

    /// UDP/TCP port that carries DNS (repeatable, at most 8).
    #[arg(long = "dns-port", value_name = "PORT", default_values_t = [DEFAULT_DNS_PORT])]
    pub dns_ports: Vec<u16>,
}

#[derive(Args, Debug)]
#[command(after_help = "Examples:\n  \
    dnsloop capture --duration 30s --out /var/tmp/dns-$(date +%s)\n  \
    dnsloop capture -i cni0 -i eth0 --duration 2m --out bundle --max-bytes 50000000\n\n\
    Then, anywhere: tshark -r bundle/capture.pcapng, or dnsloop analyze bundle/capture.pcapng.")]
pub struct CaptureArgs {
    /// Interface to watch (repeatable). Default: the whole node, as `trace` watches it.
    #[arg(short = 'i', long = "interface", value_name = "IFACE")]
    pub interfaces: Vec<String>,

    /// How long to capture (e.g. 30s, 5m). SIGINT or SIGTERM ends it sooner, and the bundle of
    /// what was captured is still written.
    #[arg(long, value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub duration: Duration,

    /// Directory to write the bundle into (created if needed; an existing bundle there is
    /// never overwritten).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,

    /// Most bytes the packet file may take; past it, packets are counted, not written, and the
    /// reports say so.
    #[arg(long, value_name = "BYTES", default_value_t = 256 * 1024 * 1024)]
    pub max_bytes: u64,

    /// Bytes of each packet to keep, from the start of the frame (64-2048).
    #[arg(long, value_name = "BYTES", default_value_t = dnsloop_ebpf::record::PACKET_SNAP_MAX)]
    pub snap_len: usize,

    /// Output format of the findings printed while capturing.
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,

    /// As for `trace`: attach at full speed on a node with many pods, so that the capture
    /// starts sooner.
    #[arg(long)]
    pub expedite_attach: bool,

    /// Directory holding the node's root, for the reports' view of its DNS configuration
    /// (resolv.conf and doctor's checks), as `doctor --root` reads it: in a pod, where the
    /// container's own /etc is not the node's, mount the node's / and give its mount point.
    #[arg(long, value_name = "DIR", default_value = "/")]
    pub root: PathBuf,
}

#[derive(Args, Debug)]
pub struct DoctorArgs {
    /// Directory holding the node's root: /etc, /run, /proc/sys, /proc/net, /sys and
    /// /var/lib/kubelet are read below it, and absolute symlinks stay inside it.
    #[arg(long, value_name = "DIR", default_value = "/")]
    pub root: PathBuf,

    /// A Corefile, or a ConfigMap holding one (`kubectl get configmap -o yaml`), for CoreDNS
    /// or node-local-dns (repeatable). Read as given, not below --root.
    #[arg(long = "corefile", value_name = "FILE")]
    pub corefiles: Vec<PathBuf>,

    /// Output format on stdout.
    #[arg(long, value_enum, default_value_t = OutputFormat::Text)]
    pub output: OutputFormat,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputFormat {
    /// One line per finding, for a person at a terminal.
    Text,
    /// One JSON object per line, for a log shipper.
    Json,
}
