//! The benchmark's table: each measurement's median, minimum and maximum, and what they mean.
use std::fmt::Write as _;

use super::measure::spread;

/// One measured quantity under one configuration.
pub struct Row {
    section: String,
    config: String,
    /// Median, minimum, maximum; `None` when nothing was measured.
    spread: Option<(f64, f64, f64)>,
    samples: usize,
    unit: String,
}

impl Row {
    pub fn new(section: &str, config: &str, values: &[f64], unit: &str) -> Self {
        Self {
            section: section.to_owned(),
            config: config.to_owned(),
            spread: spread(values),
            samples: values.len(),
            unit: unit.to_owned(),
        }
    }
}

#[derive(Default)]
pub struct Report {
    rows: Vec<Row>,
    notes: Vec<String>,
}

impl Report {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn add(&mut self, row: Row) {
        self.rows.push(row);
    }

    pub fn note(&mut self, note: String) {
        self.notes.push(note);
    }

    /// The median of `section` under `config`, if it was measured.
    pub fn median(&self, section: &str, config: &str) -> Option<f64> {
        self.rows
            .iter()
            .find(|row| row.section == section && row.config == config)
            .and_then(|row| row.spread)
            .map(|(median, _, _)| median)
    }

    /// A Markdown table of every row.
    pub fn table(&self) -> String {
        let mut text = String::from(
            "| measurement | configuration | median | min | max | runs |\n|---|---|---:|---:|---:|---:|\n",
        );
        for row in &self.rows {
            let cells = match row.spread {
                Some((median, min, max)) => [median, min, max]
                    .map(|value| format!("{} {}", number(value), row.unit).trim().to_owned())
                    .join(" | "),
                None => "not measured | | ".to_owned(),
            };
            let _ = writeln!(
                text,
                "| {} | {} | {cells} | {} |",
                row.section, row.config, row.samples
            );
        }
        text.push('\n');
        for note in &self.notes {
            let _ = writeln!(text, "- {note}");
        }
        text
    }

    /// BENCHMARKS.md: the table, the machine it ran on, and how to run it again.
    pub fn markdown(&self) -> String {
        let read = |path: &str| std::fs::read_to_string(path).unwrap_or_default();
        let cpu = read("/proc/cpuinfo")
            .lines()
            .find_map(|line| line.strip_prefix("model name"))
            .map(|model| model.trim_start_matches([' ', '\t', ':']).to_owned())
            .unwrap_or_else(|| "unknown CPU".to_owned());
        let cores = std::thread::available_parallelism().map_or(0, usize::from);
        let kernel = read("/proc/sys/kernel/osrelease").trim().to_owned();
        format!(
            "# Benchmarks\n\n\
             Measured by `cargo xtask bench` on the lab (network namespaces on one machine): \
             {cpu}, {cores} cores, Linux {kernel}.\n\
             Every row is measured side by side in one run; medians, minimums and maximums are \
             over the runs shown. The fixed load is dnsperf from the client pod to the node-local \
             cache, which forwards every query to the ClusterIP and a CoreDNS pod (about 8 \
             program runs per query). Throughput at saturation is measured there and again \
             on a routed node (no bridge) and across two nodes, each with rows of its own. \
             Kernel cost is `run_time_ns / run_cnt` with \
             `kernel.bpf_stats_enabled` on, for dnsloop's programs or for a reference \
             classifier (empty, or making one hash-map lookup) attached to the same \
             interfaces; kernel time per query is their `run_time_ns` over the queries \
             dnsperf completed.\n\n\
             {}\n\
             {ANALYSIS}\n\n\
             Reproduce: `cargo xtask bench` as root (it builds everything, brings the lab up, and \
             rewrites this file).\n",
            self.table()
        )
    }
}

fn number(value: f64) -> String {
    if value >= 100.0 {
        format!("{value:.0}")
    } else if value >= 1.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.3}")
    }
}

/// What the numbers mean against the targets: written with the last full run in view, and kept
/// with the generator so that a new run keeps it (revise it when the numbers move).
const ANALYSIS: &str = r#"## Where the targets stand, and why

Targets (issue 8): kernel cost <= 3x the empty classifier; userspace CPU <= tcpdump's in default
mode and <= 2x with `--packets`; throughput >= 95 % of none; 0 lost events in default mode;
a loop reported <= 1 s after its first packet; 100 veths attached in <= 2 s; userspace RSS
<= 64 MiB; a CoreDNS-like loop storm printed as a few dozen findings per report interval at
most, with its lost events counted. Read the table above against them (the machine moves between runs by 10-20 %, as
the floor and the single-packet rows show: read ratios, not absolute figures). The machine is
an AMD EPYC virtual machine whose lab answers 22-25k queries/s at saturation with no program
(42k on the faster machine of the earliest runs), so the fixed load runs at half of that (the
table's first note): a load the lab cannot carry makes losses of its own, which dnsloop rightly
reports as timeouts.

- **Held:** default-mode userspace CPU (0.12x tcpdump's), 0 lost events in default mode, also
  at saturation (159k DNS packets/s is all this machine's lab makes; the faster machine made
  240-300k, above the 200k target, also with none lost), every loop probe of the storm reported
  within 0.4 s, memory (26 MiB), attach time with `--expedite-attach` (0.26 s for 100 veths),
  and the kernel cost on other packets, nearly all of a node's, where they come close together:
  2.0x the empty classifier in the flood (101 ns against 51). At the fixed load, where they come
  a few thousand a second to caches the rest of the node emptied meanwhile, 2.8-3.2x over the
  last two runs.
- **Kernel cost on DNS packets cannot hold: 14x the floor at the fixed load, 13x at
  saturation.** The table's second row measures what remembering anything per packet costs:
  a classifier that does nothing but add one to a count in a hash map, on the same load, is
  already 1.9x the empty classifier (118 ns against 63: 55 ns for the one lookup). To follow a
  question around a loop, and time and check each reply where it reaches its client, a DNS
  packet needs at least two such operations (its query in the query table: put in, found, taken
  out at the client; its question in the question table), on top of finding its interface in
  the point table and classifying it (50 ns in the flood) and walking its question's name:
  about 63 + 50 + 2 x 55 + the name, over 3.5x before any of the rest is done. Every design
  that keeps this state in the kernel, and so streams only what matters, pays it; one that
  streams every packet instead is `--packets`, below. dnsloop makes three or four lookups (the
  point, the query, the question, the forwarder) and costs 0.7-0.9 µs a DNS run in the lab,
  460 ns for a query's next hop on a single packet run again and again (`BPF_PROG_TEST_RUN`,
  caches warm): the programs' 2 x 29 KB of code and their map entries leave the caches between
  packets. A `perf record -a` profile of the node at 10k queries/s (an earlier run) put the
  programs and the kernel functions they call at about 4.7 % of both CPUs' samples: half of it
  the programs' own code, a quarter the hash maps' lookups, an eighth inserting and removing
  LRU entries, a tenth the clock (partly `bpf_stats_enabled`'s own).
  Tried and measured with `cargo xtask bench --compare` (5 alternating pairs on the lab), and
  left out, as none moved the DNS cost beyond the noise:
  - a packet that is not DNS leaving the per-CPU scratch value untouched (one cache line less
    per run): other packets -2.1 % (pairs from -15.6 to +17.6 %), DNS packets -4.4 %; it took
    28 % more verifier work, and put the programs over Linux 6.1's 512-byte stack limit (544
    bytes over three frames), so 6.1 refused them;
  - a packet seen again further on its way (the bridge after its port) taking its first
    sighting's forwarder lookups instead of looking again: -0.8 % (pairs -7.0 to +2.0 %);
  - an upper bound for contention between the CPUs on a popular question's shared entry: not
    writing its ring of cold sightings at all, +0.3 % (pairs -12.5 to +5.0 %);
  - an upper bound for a word-wise name hash: no hashing of the name's bytes at all, 453 ->
    422 ns on a single packet;
  - (an earlier run) keeping queries' names in a table of their own instead of in each query's
    304-byte entry: -140 ns on single packets for a name met before, no difference in the lab
    (median -11 ns over ten pairs), 600-900 ns more for every name never seen before.
- **Throughput cannot hold with every hop watched: 88.9 % of no program's queries/s at
  saturation** (84-89 % over the recent runs; tcpdump 90-96 %, the empty classifier 95-100 %;
  medians of 5 rounds, the four alternating). dnsloop's userspace takes no measurable CPU
  there: the loss is the programs'. A query crosses eight program runs (each packet is seen at
  its pod's veth and at the bridge, which is how the programs know which namespaces it leaves
  and enters), 5.8 µs of program time at 0.72 µs a run; the lab's own work is 89 µs of CPU per
  query, and the queries/s fell by what 11 µs a query more would take: the programs also cost
  the packets' own path the caches they use. 95 % allows 4.7 µs a query; at that ratio the
  programs' own time would have to stay under 2.5 µs a query, about 0.3 µs a run, which is the
  least the map work above costs. tcpdump holds it because its kernel side copies each packet
  into a ring once and keeps no state.
- **`--packets` cannot hold: 13x tcpdump's CPU.** It decodes every DNS packet, analyses it and
  prints a JSON line for it, where `tcpdump -w` copies bytes to a file. tcpdump itself, doing
  that job (decoding each packet with its DNS printer and printing a line of text, `-n` so no
  name lookups), costs 45x its `-w` (the table's row), over three times what `--packets` costs:
  2x the cost of copying bytes is no budget for decoding and printing them. A profile of
  `--packets` (frame pointers, `perf record --call-graph fp`, an earlier run) spreads over many
  pieces: the analyzers about a third, hickory's decode about a sixth, the JSON lines about a
  sixth and writing them about 7 %, the ring buffer about 9 %. It is a diagnostic mode for one
  interface or a quiet node (`capture` writes pcapng instead): at 87k DNS packets/s on 2 busy
  cores one run in three lost some of its packets when the tracer was descheduled (4067 in
  that run, counted in `dnsloop_lost_events_total` and the summary, never hidden).
- **Attach time holds with `--expedite-attach` (0.26 s for 100 veths here), not without (2.7
  s):** the programs load and verify in well under a second; the rest is the kernel creating 200
  TCX links, each waiting out an RCU grace period under RTNL, one lock for every namespace, so
  threads cannot overlap them (200 links took 1.7 s from 8 threads as from one on the faster
  machine). `--expedite-attach` switches the kernel to expedited grace periods
  (`/sys/kernel/rcu_expedited`) while attaching and detaching, and back: it is opt-in because
  expedited grace periods interrupt every CPU of the node meanwhile. tc clsact filters, which
  dnsloop uses before Linux 6.6, wait for no grace period (0.26 s, the table's third attach
  row), but outlive a dnsloop killed with SIGKILL until the next one starts and removes them,
  where a TCX link goes with the process: so TCX stays the default wherever the kernel has it.

- **The cluster loop storm** (the rows ending in "cluster loop storm", and their note) is the
  storm a CoreDNS-like loop makes, where the single-node storm above is CoreDNS's own probes:
  the `cluster-loop` lab on two nodes, whose dnsdist caches and CoreDNS pods give every forward
  a new ID and merge nothing, so each looping question is thousands of new queries a second,
  crossing the VXLAN overlay every round. A client on node 1 asks its cache four external
  names and the tracer runs on node 0. The storm ends by itself once a dnsdist has spent its
  budget (20,000 forwards, then 50 a second); its length runs from the first query to the last
  one the servers logged, and the DNS packets/s are the programs' count over it. Findings per
  report interval (`--report-interval`, 10 s; the whole run fits in one) is what the operator
  reads: it must stay a few dozen however many packets the storm makes. Lost events must be
  in every run's summary (counted, zero or not). The first loop report's time runs from the
  client's first query; each name loops both within node 0 (its cache, the ClusterIP, its own
  CoreDNS pod) and through node 1, so the note says how often the first report already was of
  a loop through other nodes (`off_node`), and a row when the first such report came.
  The peak memory is the analysis engine's tables at their bound: such a storm starts
  thousands of new forwards a second, and each is followed for the forward window (5 s) as a
  flight with its hops, up to `max_tracked` (65,536) flights and as many outstanding queries;
  the single-node probe storm never fills them. Bounded, but above the 64 MiB target: flights
  that hold their hops more compactly, or that a storm's known loop lets go sooner, are what
  would bring it under.

To measure a change: copy `target/release/dnsloop` aside before it, then run
`cargo xtask bench --compare COPY` after it. Single runs of the full bench differ by more than
most changes move the cost."#;
