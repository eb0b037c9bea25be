//! `dnsloop trace`: watch DNS live until the duration ends or a signal arrives.
//!
//! kernel programs -> ring buffer source -> pipeline (decoder -> analyzers -> sink on stdout);
//! with `--record DIR`, every packet goes to the flight recorder (`record`) on the way.
use std::{net::SocketAddr, path::PathBuf, time::Duration};

use clap::Args;
use dnsloop_core::sink::{self, OutputFormat};

use crate::{
    kernel::programs::{self, Settings},
    metrics,
    node::pods::{self, CriSocket},
    tracer::{self, Tracer},
};

mod record;

#[derive(Args, Debug)]
pub struct TraceArgs {
    /// Interface to watch (repeatable). Default: every interface of the current network
    /// namespace but bridges' own (their crossings are seen at their ports), the loopback of
    /// every pod behind them, and new ones as they appear. A bridge named here is watched, and
    /// its ports then leave the node's side of their crossings to it.
    #[arg(short = 'i', long = "interface", value_name = "IFACE")]
    pub interfaces: Vec<String>,

    /// Stop after this long (e.g. 30s, 5m). Default: until SIGINT or SIGTERM.
    #[arg(long, value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub duration: Option<Duration>,

    /// Output format on stdout.
    #[arg(long, value_parser = super::output_format(), default_value = "text")]
    pub output: OutputFormat,

    /// A query with no answer after this long is reported as a timeout.
    #[arg(long, value_parser = humantime::parse_duration, default_value = super::DEFAULT_TIMEOUT, value_name = "DURATION")]
    pub timeout: Duration,

    /// A loop or an unexpected source still happening is reported again, with its count, at
    /// most this often.
    #[arg(long, value_parser = humantime::parse_duration, default_value = super::DEFAULT_REPORT_INTERVAL, value_name = "DURATION")]
    pub report_interval: Duration,

    /// Print every DNS packet seen, at every crossing it makes (one line, or one JSON object,
    /// per packet).
    #[arg(long)]
    pub packets: bool,

    /// Follow every client's query through the forwards it caused on the node (pod -> cache
    /// -> ClusterIP -> CoreDNS pod -> upstream) and report those answered this long or more
    /// after they were sent (e.g. 200ms), with the time spent at each hop: the slowest is where
    /// the time went. The summary adds the time spent at each server's hops (p50, p90, p99).
    /// At most 10 are reported a second; the rest are counted. Costs what --packets costs but
    /// the printing: the kernel streams every DNS packet to dnsloop, which follows each.
    #[arg(long, value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub slow: Option<Duration>,

    /// Bytes of each streamed packet to keep, from the start of the frame (64-2048).
    #[arg(long, value_name = "BYTES", default_value_t = dnsloop_shared::record::PACKET_SNAP_MAX)]
    pub snap_len: usize,

    /// Questions the kernel remembers to see one come back into a namespace that forwarded it
    /// (LRU, a list per CPU). Each entry takes about 460 bytes of kernel memory. Default: 2048
    /// for each CPU, at least 4096 and at most 65536 (1.8 to 29 MiB).
    #[arg(long, value_name = "ENTRIES")]
    pub question_table_size: Option<u32>,

    /// Queries in flight the kernel remembers, with their question, to check and time their
    /// replies and to report those never answered. A full table takes no new query until
    /// dnsloop has collected the expired ones, and counts each it refused
    /// (`queries_not_tracked` in the summary, `dnsloop_untracked_queries_total`). Each entry
    /// takes about 210 bytes of kernel memory: the default 8192 is about 1.7 MiB; a query whose
    /// name is longer than 62 characters takes about 330 bytes more while it is in flight.
    #[arg(long, value_name = "ENTRIES", default_value_t = programs::DEFAULT_QUERY_TABLE_SIZE)]
    pub query_table_size: u32,

    /// Size of the ring buffer that carries packets to dnsloop, in MiB (a power of two). Each
    /// packet takes its captured bytes and 40 more (about 340 for the few carrying what the
    /// kernel knew of their query or question): 2 MiB holds about 14,500 queries of 100 bytes,
    /// or 1,000 packets of 2 KiB, before any is lost. Default: 2, or 4 when every DNS packet
    /// is streamed (--packets, --slow, --record).
    #[arg(long, value_name = "MIB")]
    pub ring_buffer_mib: Option<u32>,

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

    /// Do not watch the kernel's drops of DNS packets. By default the skb:kfree_skb tracepoint
    /// reports every DNS packet the kernel drops on this node, with the kernel's reason
    /// (NETFILTER_DROP, SOCKET_RCVBUFF, NO_SOCKET, ...) and where; a timeout whose query was
    /// dropped says so. It costs other packets nothing: the program runs only on drops.
    #[arg(long)]
    pub no_drops: bool,

    #[command(flatten)]
    pub dns_ports: super::DnsPortArgs,

    /// Serve Prometheus metrics over HTTP at /metrics on this address while tracing. A port
    /// alone (9553 or :9553) listens on 127.0.0.1 only; give an address to listen elsewhere
    /// (0.0.0.0:9553, [::]:9553). A port already in use stops dnsloop at startup.
    #[arg(long, value_name = "[IP]:PORT", value_parser = metrics::parse_listen_address)]
    pub metrics_addr: Option<SocketAddr>,

    /// The kubelet's pod log directory, whose `<namespace>_<pod>_<uid>` directories name the
    /// pods behind the node's veths (`pod kube-system/coredns-5d78c9869d-abcde`); pods it does
    /// not name are shown by address (`pod 10.244.0.3`). In a container, mount the node's.
    #[arg(long, value_name = "DIR", default_value = pods::POD_LOGS)]
    pub pod_logs: PathBuf,

    /// The container runtime's CRI socket, which names the pods behind the node's veths before
    /// the pod log directory does: its ready pod sandboxes are listed at start and again when
    /// a pod it has not listed appears. `none`: do not ask the runtime. Default: the first of
    /// /run/containerd/containerd.sock and /run/crio/crio.sock that exists, if any. A socket
    /// given that does not exist stops dnsloop at start; a runtime that fails to answer later
    /// is reported and asked again. In a container, mount the node's socket.
    #[arg(long, value_name = "PATH|none", value_parser = CriSocket::parse)]
    pub cri_socket: Option<CriSocket>,

    /// Keep the kernel's counters, per-server answer statistics and queries in flight in DIR,
    /// on a BPF filesystem (e.g. /sys/fs/bpf/dnsloop), and carry on from them when started
    /// again with the same DIR: counters continue, and answers to queries asked before the
    /// restart are still matched. Give the same table sizes each time; `rm -r DIR` starts from
    /// zero.
    #[arg(long, value_name = "DIR")]
    pub pin: Option<PathBuf>,

    #[command(flatten)]
    pub record: record::RecordArgs,

    #[command(flatten)]
    pub redact: super::redact::RedactArgs,
}

impl TraceArgs {
    /// What the tracer is to do, the redaction key read; the duration and the output format
    /// are the command's.
    pub fn config(&self) -> anyhow::Result<tracer::Config> {
        Ok(tracer::Config {
            programs: Settings {
                dns_ports: self.dns_ports.ports.clone(),
                // Printing packets and following lookups need every DNS packet analysed;
                // recording needs every one kept, and the rest only to analyse; a recording
                // with names redacted keeps no packet (see `dnsloop_core::bundle`).
                stream_every_packet: self.packets || self.slow.is_some(),
                record_every_packet: self.record.record.is_some() && !self.redact.redacting(),
                snap_len: self.snap_len,
                question_table_size: self.question_table_size,
                query_table_size: self.query_table_size,
                ring_buffer_mib: self.ring_buffer_mib,
                xdp_ingress: self.xdp,
                watch_drops: !self.no_drops,
                build: None,
            },
            interfaces: self.interfaces.clone(),
            print_packets: self.packets,
            slow: self.slow,
            timeout: self.timeout,
            report_interval: self.report_interval,
            expedite_attach: self.expedite_attach,
            metrics_addr: self.metrics_addr,
            pod_logs: self.pod_logs.clone(),
            cri_socket: self.cri_socket.clone(),
            pin: self.pin.clone(),
            names: self.redact.names()?,
        })
    }
}

pub fn run(args: TraceArgs) -> anyhow::Result<()> {
    let config = args.config()?;
    let mut recorder = args.record.recorder(&config)?;
    tracer::runtime()?.block_on(async {
        let end = tracer::end_of_run(args.duration)?;
        // Buffered: each batch is written at once (see `Sink::flush`), not line by line.
        let stdout =
            std::io::BufWriter::with_capacity(sink::STDOUT_BUFFER, std::io::stdout().lock());
        let node = sink::NodeName::from_environment();
        let mut tracer = Tracer::start(&config).await?;
        let out = tracer.counted(sink::for_format(args.output, &node, &config.names, stdout));
        if let Some(recorder) = &mut recorder {
            return record::run(tracer, out, recorder, end).await;
        }
        let mut pipeline = tracer.pipeline(out);
        tracer.run(&mut pipeline, end).await?;
        tracer.finish(pipeline)
    })?;
    if let Some(recorder) = recorder {
        record::finish(recorder);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;

    #[test]
    fn trace_without_options_is_the_tracers_default() {
        let cli = crate::cli::Cli::try_parse_from(["dnsloop", "trace"]).expect("trace parses");
        let crate::cli::Command::Trace(args) = cli.command else {
            panic!("not trace: {:?}", cli.command);
        };
        assert_eq!(args.config().unwrap(), tracer::Config::default());
        assert_eq!(args.output, OutputFormat::Text);
    }

    #[test]
    fn slow_streams_every_packet_without_printing_them() {
        let cli = crate::cli::Cli::try_parse_from(["dnsloop", "trace", "--slow", "200ms"])
            .expect("trace parses");
        let crate::cli::Command::Trace(args) = cli.command else {
            panic!("not trace: {:?}", cli.command);
        };
        let config = args.config().unwrap();
        assert!(config.programs.stream_every_packet);
        assert!(!config.print_packets);
        assert_eq!(config.slow, Some(Duration::from_millis(200)));
    }
}
