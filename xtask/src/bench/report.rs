//! The benchmark's table: each measurement's median, minimum and maximum, and what they mean.
use std::fmt::Write as _;

use super::{measure::spread, targets};

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

    /// The largest value of `section` under `config`, if it was measured.
    pub fn max(&self, section: &str, config: &str) -> Option<f64> {
        self.rows
            .iter()
            .find(|row| row.section == section && row.config == config)
            .and_then(|row| row.spread)
            .map(|(_, _, max)| max)
    }

    /// The targets this run measured, each held or missed, as a Markdown list.
    pub fn targets(&self) -> String {
        let mut text = String::new();
        for judged in targets::judge(self) {
            if let Some(measured) = &judged.measured {
                let _ = writeln!(
                    text,
                    "- {}: {measured}, **{}**",
                    judged.target,
                    judged.verdict()
                );
            }
        }
        text
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
        let targets = self.targets();
        if !targets.is_empty() {
            let _ = write!(
                text,
                "\nTargets (issue 32), as this run measured them:\n\n{targets}"
            );
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
             cache, which forwards every query to the ClusterIP and a CoreDNS pod (4 program runs \
             a query: the client's and the CoreDNS pod's bridge ports, each way). Throughput at saturation is measured there and again \
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

/// `value` as the table prints figures.
pub fn number(value: f64) -> String {
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

Issue 32's targets: at most 1.5 µs of kernel time per query on the fixed-load rows, counting
every program run; per run, at most 4x the empty classifier on DNS packets; at saturation, at
least 95 % of the untraced queries/s on the bridged node, the routed node and across two nodes,
and above `tcpdump -w`'s; kernel map memory with default options at most 8 MiB; idle RSS at most
24 MiB; peak RSS in the cluster loop storm at most 64 MiB; the drop program at most 150 ns per
dropped datagram that is not DNS; the DaemonSet's own configuration (`trace --record
--metrics-addr`) at most `tcpdump -w`'s userspace CPU and 1.5 µs of kernel time per query; and 0
lost events in default mode, with loops reported within 1 s. The list above marks each held or
missed. Read the table as ratios, not absolute figures: the machine (an AMD EPYC virtual machine,
2 cores) moves by 10-20 % between runs, as the floor and the single-packet rows show. Its lab
answered 14.4k queries/s with no program when this run began, so the fixed load runs at 7000
(the table's first note): a load the lab cannot carry makes losses of its own, which dnsloop
rightly reports as timeouts.

- **Held: idle RSS, 19.9 MiB for `trace` and 20.1 MiB as the DaemonSet runs it (target <= 24
  MiB).** It was 31.6 MiB before the tracer gave the loader's freed heap back to the system with
  glibc's `malloc_trim(0)` once the programs are loaded (RssAnon from 14.2 to 2.1 MiB). Most of
  what stays, about 17.7 MiB, is RssFile: the binary's text and the two BPF objects embedded in
  it (1.3 MB each). The peak by then (VmHWM 30.8 and 31.5 MiB) is the loading's: aya parses the
  kernel's whole BTF in `EbpfLoader::new`, and `EbpfLoader::btf(None)` does not avoid it,
  though the objects have no CO-RE relocations. Next lever for the peak: a loader that parses no
  vmlinux BTF when the objects need none, a change to aya upstream.
- **Held: 0 lost events in default mode, and loops reported within 1 s.** 0 lost at the fixed
  load (28k DNS packets/s), at saturation on every topology (46k, 170k and 141k DNS packets/s:
  all this machine's lab makes), in both loop storms and in the soak. All 20 CoreDNS probes of
  the loop storm were reported as loops, 388 ms after their first packet (median; 396 ms at
  most); in the cluster loop storm the first loop report came 128 ms after the client's first
  query. Also held: default-mode userspace CPU, 0.20x `tcpdump -w`'s (0.043 s against 0.214 s
  per 100k queries), and the kernel cost on packets that are not DNS (issue 8's target <= 3x),
  nearly all of a node's, where they come close together: 2.2x the empty classifier in the flood
  (143 ns against 63.4). At the fixed load, where they come a few thousand a second to caches
  the rest of the node emptied meanwhile, it is just over, 3.2x (373 ns against 117).
- **Missed: kernel time per query, 9.5 µs at the fixed load (target <= 1.5 µs), and per run,
  23.7x the empty classifier (target <= 4x).** A query makes 4 program runs at 2375 ns each,
  against the empty classifier's 100 ns. At saturation it is 8.4 µs a query on the bridged node,
  4.6 µs routed and 13.5 µs across two nodes (12 runs there). Every run does the work that makes
  dnsloop what it is: the client's query and the node cache's forward each go into the query
  table (to time and check their replies where they reach their clients, and to report those
  never answered) and into the question table (to see one come back into a namespace that
  forwarded it), with a look into the forwarder table; each reply takes its query out again and
  counts its server's answer. On a single packet (`BPF_PROG_TEST_RUN`, the table's last rows) a
  packet that is not DNS costs 159 ns, a reply to no query in flight 620 ns, a query met before
  657 ns, and a new query 3.7 µs at one run per call (a call's own share is about 150 ns: 306
  against 159 ns for a packet that is not DNS). 1.5 µs a query leaves 375 ns a run, where a
  classifier making one hash-map lookup and nothing else already takes 171 ns (the table's
  second row) and a run needs four or five lookups. The LRU is not where most of the time goes:
  the issue's author swapped the LRU query table for a plain preallocated hash, which moved the
  cost per run from 792 to 768 ns, about 3 %, within the noise. Tried and measured in earlier
  sessions, and left out as within the noise: the server table per CPU; no writes to a popular
  question's ring of cold sightings (an upper bound for the contention on its shared entry); no
  hashing of the name at all (an upper bound of 30 ns, so a hash a word at a time can save no
  more); a packet seen again reusing its first sighting's lookups. Next: the ~400 ns of the DNS
  path before any table is touched (the copy of up to 512 bytes of the message, the name walked
  a byte at a time in `bpf_loop`, the memo, the scratch clears), by issue levers 2 (match a reply
  on its 5-tuple and ID before parsing its name), 4 (copy only the header and the question) and
  5 (`u64` copies; a valid flag instead of clearing the priors). To see which one moves it:
  per-path ablation with `BPF_PROG_TEST_RUN` (the `kernel_profile` bench), finer than the
  saturation rounds.
- **Missed: saturation, 87.3 % of no program's queries/s on the bridged node, 81.8 % routed,
  71.8 % across two nodes (target >= 95 %, and above `tcpdump -w`'s 97.8, 84.7 and 81.6 %).**
  Medians of each round's ratio over 7 rounds, the configurations alternating; the empty
  classifier keeps 96.7, 97.4 and 94.7 %, and dnsloop's own rounds spread from 79.2 to 98.8 % on
  the bridged node. dnsloop's userspace takes 0.43 µs of CPU a query (0.043 s per 100k at the
  fixed load): the loss is the programs'. The lab spends about 146 µs of CPU a query on the
  bridged node (2 cores at 13.7k queries/s), so 95 % leaves about 7 µs a query for everything
  the programs cost, their own time and the caches they take from the packets' own path; their
  own time alone is 8.4 µs. Routed, 2 cores at 52.7k queries/s leave 1.9 µs against 4.6 µs;
  across two nodes, 2 cores at 23.2k leave 4.3 µs against 13.5 µs. `tcpdump -w` comes closer
  because its kernel side copies each packet into a ring once and keeps no state. The lever is
  the kernel time per query, above.
- **Missed: kernel map memory, 33.7 MiB with default options (target <= 8 MiB), the same as
  the DaemonSet runs it.** The question table (32,768 entries) takes 14.5 MiB, the query table
  12.5 MiB, the packet ring 4 MiB and the rest 2.7 MiB. A query entry is 312 bytes, 256 of them
  a copy of the name; a question entry 384 bytes, 256 of them its ring of cold sightings. The
  lever is smaller entries, not smaller tables (issue levers 2 and 3): the name kept once, in the
  question table, and the query entry holding the name's hash, qtype and qclass, about 56 bytes;
  fewer or smaller cold sightings. Smaller tables are not the lever: `BPF_F_NO_COMMON_LRU`
  splits an LRU per CPU, and a smaller question table loses questions in a storm.
- **Missed: peak RSS in the cluster loop storm, 89.8 MiB (VmHWM, median; 90.3 MiB at most;
  target <= 64 MiB).** No table is at its bound there (0 evictions in the summary): the
  memory is what the engine keeps per query. Each forward of the loop is a new query, followed
  for the forward window (5 s) as a flight with its hops, and the storm sends about 50,000 of
  them in its first seconds. A heap profile (valgrind's massif, of `analyze` on a 100,150-packet
  `tcpdump -i any` capture of the same storm on node 0; 69 MB of heap at its peak, the process
  74 MiB) puts it in: the flights' table entries, 18.0 MB (a `Flight` is 336 bytes); their
  hops, 10.9 MB at first and 9.5 MB more as vectors grow past two (a `Hop` is 136 bytes, three
  shared strings among them); the queries outstanding for the client view, 11.6 MB (168 bytes
  each); the index of each message's latest flight, 3.6 MB; and names decoded anew for each
  message, 2.4 MB (8 MB of the capture reader are `analyze`'s own). About 1 KB a query. The
  tables grow with use (issue lever 9): at the soak's 1000 queries/s the tracer holds 34-37 MiB.
  Next lever: hops that name their point by one shared reference instead of three (136 to about
  90 bytes), flights' positions and times packed, names shared per question, and a flight's
  hops let go once a loop it belongs to has been reported.
- **Missed: the drop program, 255 ns per dropped datagram that is not DNS (target <= 150 ns),**
  against 143 ns per run for dnsloop's classifiers on the same packets. Every freed buffer took
  three `bpf_probe_read_kernel` calls of about 40 ns each (its protocol and network header, its
  tail and head, then the packet) before the ports said it was not DNS. **Since this run** the
  buffer's fields come in one read where they sit together, as in every Debian kernel from 5.10
  to 6.18: `--only flood` on a faster machine the same day, 171 ns (170-171) against 201 and
  202 ns (199-204) in two runs before it, with the classifiers at 97-99 ns in all three. A
  floor row since (`--only flood`, the same day): an empty program on the same tracepoint takes
  64 ns, the drop program 173 ns, so its own work is 109 ns, two reads and the port check, where
  the target leaves 86 ns. Reading the headers and ports before copying the packet (issue lever
  8) saves no read, as the packet is one read either way. Next lever: a BTF-typed tracepoint
  (`tp_btf`), whose program reads `sk_buff`'s fields by plain loads, at offsets patched in as
  read-only constants, with no helper call; the packet's bytes stay one read.
- **Missed: the DaemonSet's configuration (`trace --record --metrics-addr`): userspace CPU 2.0 s
  per 100k queries, 9.6x `tcpdump -w`'s 0.214 s (target <= 1x), and 14.1 µs of kernel time per
  query (target <= 1.5 µs); it also lost events at the fixed load, 3843 per run (median; 0 in
  one run of 3).** `--record` makes the kernel stream every DNS packet, in a ring record of 2376
  bytes whatever the packet's length (a 32-byte header, a 40-byte matched query, 256 bytes of
  prior sightings and 2048 bytes of packet): it adds 1150 ns a run to default mode's 2375 (3525
  ns), and the 4 MiB ring holds about 1765 records, 63 ms at 28k DNS packets/s. Userspace then
  decoded and analysed every packet, as the kernel's table of unanswered queries was off in that
  mode. **Since this run** the recorder's packets are streamed for it alone: the kernel marks
  every DNS packet that default mode would not stream as kept for the recorder, which keeps it by
  time without decoding it, and the analysis sees what default mode sees, with the kernel's
  table of unanswered queries on, so the findings are default mode's. Measured with `cargo xtask
  bench --only fixed` the same day, on a faster machine (the lab answered 30k queries/s; fixed
  load 14,000 queries/s, 56k DNS packets/s): 0.136 s of userspace CPU per 100k queries, 1.2x
  `tcpdump -w`'s 0.114 s (`--packets` 0.936 s in that run, 8.2x), 5.7 µs of kernel time a query
  (4.5 µs for `trace`), and 0 lost events in each of 3 runs. Then ring records were sized to
  their packet (a 328-byte record and the captured bytes, through `bpf_ringbuf_output`), so the
  4 MiB ring holds about 9,500 queries of 100 bytes where it held 1,765 records whatever their
  length: 0.114 s per 100k queries in the next `--only fixed` run, 0.94x `tcpdump -w`'s 0.121 s,
  5.6 µs a query, 0 lost events (within the noise of the run before: the gain is the ring's
  room for a consumer that falls behind). Lever left for the kernel time: the issue's flight
  recorder in the kernel, a per-CPU ring overwritten in place and copied out only when a
  finding fires.
- **`--packets`: 9.55x `tcpdump -w`'s CPU** (issue 8's target <= 2x; issue 32 sets none). It
  decodes every DNS packet, analyses it and prints a JSON line for it, where `tcpdump -w` copies
  bytes to a file. tcpdump itself, doing that job (decoding each packet with its DNS printer and
  printing a line of text, `-n` so no name lookups), costs 49.25x its `-w` (the table's row),
  about five times what `--packets` costs: 2x the cost of copying bytes is no budget for
  decoding and printing them. It is a diagnostic mode for one interface or a quiet node
  (`capture` writes pcapng instead): at 28k DNS packets/s on 2 busy cores it lost 1982 events
  per run (median), counted in `dnsloop_lost_events_total` and the summary, never hidden.

- **Each crossing is watched once** (issue 20): a bridge's own interface is not watched, its
  ports say when a frame went to or came from the bridge (see docs/architecture.md, "Where it
  watches"). A query through the node cache to a CoreDNS pod and back takes 4 program runs on
  the bridged node (the empty classifier, attached everywhere, runs 8 times), 4 on the routed
  node, and 12 across two nodes (16 for the classifier). The runs left out were the cheap ones,
  a packet's second sighting (a query met before costs 657 ns on a single packet, a new query
  3.7 µs at one run per call): the runs left are the heavy ones, hence the time per run above.
- **Attach time holds with `--expedite-attach` (626 ms for 100 veths here), not without (3.1
  s)** (issue 8's target <= 2 s): the programs load and verify in well under a second; the rest
  is the kernel creating 200 TCX links, each waiting out an RCU grace period under RTNL, one lock
  for every namespace, so threads cannot overlap them. `--expedite-attach` switches the kernel to
  expedited grace periods (`/sys/kernel/rcu_expedited`) while attaching and detaching, and back:
  it is opt-in because expedited grace periods interrupt every CPU of the node meanwhile. tc
  clsact filters, which dnsloop uses before Linux 6.6, wait for no grace period (599 ms, the
  table's third attach row), but outlive a dnsloop killed with SIGKILL until the next one starts
  and removes them, where a TCX link goes with the process: so TCX stays the default wherever
  the kernel has it.

- **The cluster loop storm** (the rows ending in "cluster loop storm", and their note) is the
  storm a CoreDNS-like loop makes, where the single-node storm above is CoreDNS's own probes:
  the `cluster-loop` lab on two nodes, whose dnsdist caches and CoreDNS pods give every forward
  a new ID and merge nothing, so each looping question is thousands of new queries a second,
  crossing the VXLAN overlay every round. A client on node 1 asks its cache four external
  names and the tracer runs on node 0. The storm ends by itself once a dnsdist has spent its
  budget (20,000 forwards, then 50 a second); its length (3.1 s here) runs from the first query
  to the last one the servers logged, and the DNS packets/s (19.6k) are the programs' count over
  it. Findings per report interval (`--report-interval`, 10 s; the whole run fits in one) is
  what the operator reads: it must stay a few dozen however many packets the storm makes (16
  here). Lost events must be in every run's summary (counted, zero or not; 0 in each of 3). The
  first loop report's time runs from the client's first query; each name loops both within node
  0 (its cache, the ClusterIP, its own CoreDNS pod) and through node 1, so the note says how often
  the first report already was of a loop through other nodes (`off_node`; 0 of 3 here), and a
  row when the first such report came (128 ms). Its peak memory is the missed target above.

- **The soak** (the rows ending in "soak", and their note; issue 29) runs ten minutes of
  ordinary faults on two nodes of `dead-upstream`, each traced as a fleet would: a client pod on
  each node asks its node cache 1,000 queries/s from 20,000 distinct names, nearly all answered
  (cluster names by CoreDNS on node 0, reached from node 1 over the overlay; external ones by the
  upstream), 0.5 % in stub domains whose server is gone from an attached subnet, silent beyond
  the node, or up with its port closed (beyond the node, on the node, in a pod), 0.9 % in stub
  domains answered REFUSED, SERVFAIL, after 2.5 s, truncated, or on a second server; and a
  process on node 0 asks the node's own resolver at 127.0.0.1, down, 5 times a second. Targets:
  0 loop findings, every dead server named in a timeout, memory and tables flat. **Held:** 994
  queries/s answered on each node; 0 loops and 0 possible loops on either node, all 6 dead
  servers named, 0 lost events, 0 table evictions; the kernel's query table between 70 and 143
  entries on node 0 and 24 and 62 on node 1, its question table at the 20,000 names asked
  (20,002 on node 0; its LRU bound is 32,768); resident memory 34.0 MiB at every minute on node
  1. On node 0 it went from 35.3 MiB after the first minute to 37.2 MiB at the end, which one
  run does not explain: the next runs will say whether it keeps rising. **Not yet readable:**
  node 0 printed 18,104 timeout findings in the ten minutes (node 1 7,200), 30 a second, as
  every name a dead server leaves unanswered is reported at once and then once per report
  interval, at each hop it timed out (client, node cache, CoreDNS): a dead server with many names
  needs one report per interval, its names counted, not one per name.

To measure a change: copy `target/release/dnsloop` aside before it, then run
`cargo xtask bench --compare COPY` after it. Single runs of the full bench differ by more than
most changes move the cost."#;
