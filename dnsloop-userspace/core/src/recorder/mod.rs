//! The flight recorder behind `trace --record DIR`: the latest packets kept in memory, and,
//! when a finding fires, a capture bundle ([`crate::bundle`]) of the packets from a while
//! before it to a while after, written in a new directory under DIR.
//!
//! ```text
//! packets ──> ring (--record-bytes, oldest dropped)
//! finding ──> rate limit (one bundle per loop, or per kind, per --record-interval)
//!         ──> open bundle: from = its first packet - before, until = it + after
//! tick ─────> past `until`: the ring's segments holding [from, until] (shared, not copied)
//!             and the findings since `from` go to the writer thread, which writes the bundle,
//!             then removes the oldest bundles past --record-max-bytes
//! ```
//!
//! With names redacted, bundles hold the reports alone (see [`crate::bundle`]), and no packet
//! is kept.
//!
//! A finding that comes while a bundle is recording joins it rather than starting another.
//! Writing happens on a thread of its own, at a lower CPU priority than the trace's (the node's
//! DNS servers come first): the trace goes on meanwhile. Times are the packets' own, so that
//! what is recorded does not depend on how fast it was read.
mod disk;
mod ring;

use std::{
    collections::{HashMap, VecDeque},
    io,
    path::{Path, PathBuf},
    sync::{mpsc, Arc},
    thread,
    time::{Duration, SystemTime},
};

use dnsloop_shared::parse::DnsPorts;
use thiserror::Error;

use crate::{
    bundle::{
        self,
        pcapng::{InterfaceRecord, PcapngOptions},
        private, About, Bundle, BundleError, NodeConfig, Written,
    },
    finding::{BundleNotice, Finding, LoopId},
    points::{InterfaceRef, PointMap},
    present::names::Names,
    schema::RecordedBundle,
    source::RawPacket,
};

use ring::{NamedInterface, Ring, Segment};

pub use ring::PACKET_OVERHEAD;

/// Findings kept to go into a bundle started after them (those within `before` of the newest):
/// enough for every finding of a few seconds, even in a storm, which the analyzers' own report
/// intervals keep to a few a second.
const RECENT_FINDINGS: usize = 1024;

/// What the recorder keeps and writes.
#[derive(Clone, Debug)]
pub struct RecorderConfig {
    /// Where bundles go, each in a new directory.
    pub dir: PathBuf,
    /// The memory the packets kept may take, in bytes, [`PACKET_OVERHEAD`] per packet included
    /// (a bundle being written holds on to its packets until it is written, as well).
    pub memory_bytes: u64,
    /// How long before a finding's first packet a bundle starts.
    pub before: Duration,
    /// How long after the finding it ends.
    pub after: Duration,
    /// At most one bundle per loop (per kind for other findings) this often.
    pub interval: Duration,
    /// The bytes all the recorder's bundles under `dir` may take: past it the oldest go.
    pub disk_bytes: u64,
    /// The ports that carry DNS, for the packet file's comments.
    pub dns_ports: DnsPorts,
    /// The node's name, in the bundles' JSON records.
    pub node: String,
    /// Where the node's root is, for the bundles' view of its DNS configuration.
    pub root: PathBuf,
    /// How the bundles write names; redacted, they hold no packets.
    pub names: Names,
}

/// What keeps the recorder from starting.
#[derive(Debug, Error)]
pub enum RecorderError {
    #[error("creating {}", .0.display())]
    CreateDir(PathBuf, #[source] io::Error),
    #[error(
        "{} can be written by any user of the node (mode {:o}): another user could replace or \
         remove the bundles of every pod's DNS written there; take write access from others \
         (`chmod o-w`) or record to a directory of root's own",
        .0.display(),
        .1
    )]
    WritableByOthers(PathBuf, u32),
    #[error("starting the thread that writes bundles")]
    Thread(#[source] io::Error),
}

/// What happened to a bundle once it left the trace, for the command to tell.
#[derive(Debug)]
pub enum RecorderEvent {
    Written(PathBuf, Written),
    Failed(PathBuf, BundleError),
    /// A bundle could not be started: its directory could not be made.
    NotStarted(PathBuf, io::Error),
    /// An older bundle removed to keep to the disk budget.
    Removed(PathBuf),
    RemoveFailed(PathBuf, io::Error),
}

/// What the recorder did over a run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecorderCounts {
    /// Bundles started (each written, or failed, once recorded).
    pub bundles: u64,
    /// Findings that joined a bundle another started.
    pub joined: u64,
    /// Findings that got no bundle: the rate limit.
    pub suppressed: u64,
}

/// Which findings share a rate limit: one loop's, or all of a kind's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Key {
    Loop(LoopId),
    UnexpectedSource,
    Timeout,
    Drop,
    Lookup,
    TruncatedNotRetried,
    SearchListWaste,
    ServfailStorm,
    FragmentedReplyLost,
}

impl Key {
    fn of(finding: &Finding) -> Self {
        match finding {
            Finding::Loop(found) => Self::Loop(found.loop_id),
            Finding::UnexpectedSource(_) => Self::UnexpectedSource,
            Finding::Timeout(_) => Self::Timeout,
            Finding::Drop(_) => Self::Drop,
            Finding::Lookup(_) => Self::Lookup,
            Finding::TruncatedNotRetried(_) => Self::TruncatedNotRetried,
            Finding::SearchListWaste(_) => Self::SearchListWaste,
            Finding::ServfailStorm(_) => Self::ServfailStorm,
            Finding::FragmentedReplyLost(_) => Self::FragmentedReplyLost,
        }
    }

    /// How a bundle's directory names its finding.
    fn dir_name(self) -> String {
        match self {
            Self::Loop(id) => format!("loop-{id}"),
            Self::UnexpectedSource => "unexpected_source".to_owned(),
            Self::Timeout => "timeout".to_owned(),
            Self::Drop => "drop".to_owned(),
            Self::Lookup => "lookup".to_owned(),
            Self::TruncatedNotRetried => "truncated_not_retried".to_owned(),
            Self::SearchListWaste => "search_list_waste".to_owned(),
            Self::ServfailStorm => "servfail_storm".to_owned(),
            Self::FragmentedReplyLost => "fragmented_reply_lost".to_owned(),
        }
    }
}

/// When a key last got a bundle, and how many of its findings got none since.
#[derive(Default)]
struct Limit {
    last: Option<SystemTime>,
    suppressed: u64,
}

/// A bundle still recording.
struct Open {
    path: PathBuf,
    recorded: RecordedBundle,
    from: SystemTime,
    until: SystemTime,
    findings: Vec<Finding>,
}

/// A bundle done recording, on its way to the writer thread.
struct Closed {
    path: PathBuf,
    recorded: RecordedBundle,
    /// Its packets, among others: those from `recorded.from` to `recorded.until`.
    segments: Vec<Segment>,
    findings: Vec<Finding>,
}

/// The name of the thread that writes bundles, by which `cargo xtask bench` tells its CPU time
/// (paid per bundle, not per packet) from the trace's. At most 15 bytes: Linux cuts a thread's
/// name there.
pub const WRITER_THREAD: &str = "dnsloop-bundles";
const _: () = assert!(WRITER_THREAD.len() <= 15);

pub struct Recorder {
    config: RecorderConfig,
    ring: Ring,
    /// Interfaces named in the current batch of packets.
    named: HashMap<InterfaceRef, Option<Arc<NamedInterface>>>,
    recent: VecDeque<Finding>,
    limits: HashMap<Key, Limit>,
    open: Option<Open>,
    counts: RecorderCounts,
    /// `None` once the run ended.
    to_writer: Option<mpsc::Sender<Closed>>,
    from_writer: mpsc::Receiver<RecorderEvent>,
    writer: Option<thread::JoinHandle<()>>,
    /// Events of the trace's own thread, for the command to tell with the writer's.
    events: Vec<RecorderEvent>,
}

impl Recorder {
    /// Makes `config.dir` if needed (0700, as every bundle in it) and starts the thread that
    /// writes bundles; refuses a directory that others can write.
    pub fn start(config: RecorderConfig) -> Result<Self, RecorderError> {
        let dir = &config.dir;
        private::create_dir_all(dir)
            .map_err(|error| RecorderError::CreateDir(dir.clone(), error))?;
        match private::writable_by_others(dir) {
            Ok(None) => {}
            Ok(Some(mode)) => return Err(RecorderError::WritableByOthers(dir.clone(), mode)),
            Err(error) => return Err(RecorderError::CreateDir(dir.clone(), error)),
        }
        let (to_writer, closed) = mpsc::channel();
        let (events, from_writer) = mpsc::channel();
        let writer_config = config.clone();
        let writer = thread::Builder::new()
            .name(WRITER_THREAD.into())
            .spawn(move || write_bundles(&writer_config, &closed, &events))
            .map_err(RecorderError::Thread)?;
        Ok(Self {
            ring: Ring::new(config.memory_bytes),
            config,
            named: HashMap::new(),
            recent: VecDeque::new(),
            limits: HashMap::new(),
            open: None,
            counts: RecorderCounts::default(),
            to_writer: Some(to_writer),
            from_writer,
            writer: Some(writer),
            events: Vec::new(),
        })
    }

    /// Keeps `packets`, which `points` places (each interface named as it is now); none
    /// where names are redacted, since no bundle will hold them.
    pub fn packets(&mut self, packets: &[RawPacket], points: &PointMap) {
        if self.config.names.is_redacted() {
            return;
        }
        self.named.clear();
        for packet in packets {
            let interface = self
                .named
                .entry(packet.seen.interface)
                .or_insert_with(|| {
                    points
                        .link(packet.seen.interface)
                        .map(|(name, description)| {
                            Arc::new(NamedInterface {
                                name: name.to_owned(),
                                description: description.clone(),
                            })
                        })
                })
                .clone();
            self.ring.push(ring::Kept {
                packet: packet.clone(),
                interface,
            });
        }
    }

    /// Takes `finding` into the bundle recording, or starts one for it; returns the bundle it
    /// went into, unless the rate limit kept it out or none could be started.
    pub fn finding(&mut self, finding: &Finding) -> Option<BundleNotice> {
        let at = finding_time(finding);
        self.remember(finding, at);
        if let Some(open) = &mut self.open {
            open.findings.push(finding.clone());
        }
        let key = Key::of(finding);
        let limit = self.limits.entry(key).or_default();
        let limited = limit.last.is_some_and(|last| {
            at.duration_since(last)
                .is_ok_and(|since| since < self.config.interval)
                || at < last
        });
        if limited {
            limit.suppressed += 1;
            self.counts.suppressed += 1;
            return None;
        }
        let suppressed = std::mem::take(&mut limit.suppressed);
        limit.last = Some(at);
        let started = self.open.is_none();
        if started {
            self.start_bundle(finding, key, at)?;
            self.counts.bundles += 1;
        } else {
            self.counts.joined += 1;
        }
        let open = self.open.as_ref()?;
        Some(BundleNotice {
            finding: kind(finding),
            loop_id: match key {
                Key::Loop(id) => Some(id),
                _ => None,
            },
            qname: qname(finding),
            path: open.path.clone(),
            started,
            from: open.from,
            until: open.until,
            suppressed,
        })
    }

    /// Packet time has reached `now`: a bundle past its end goes to be written.
    pub fn tick(&mut self, now: SystemTime) {
        if self.open.as_ref().is_some_and(|open| open.until <= now) {
            self.close();
        }
    }

    /// What happened to bundles since last asked.
    pub fn events(&mut self) -> Vec<RecorderEvent> {
        let mut events = std::mem::take(&mut self.events);
        events.extend(self.from_writer.try_iter());
        events
    }

    /// The run ended: the bundle recording is written with what it has (its `until` the last
    /// packet's time, if sooner), and every bundle waiting is written before this returns;
    /// returns what happened since last asked.
    pub fn finish(mut self) -> (RecorderCounts, Vec<RecorderEvent>) {
        if let (Some(open), Some(newest)) = (&mut self.open, self.ring.newest()) {
            open.until = open.until.min(newest).max(open.from);
            open.recorded.until = open.until.into();
        }
        self.close();
        drop(self.to_writer.take());
        if let Some(writer) = self.writer.take() {
            if writer.join().is_err() {
                tracing::error!("the thread writing bundles panicked");
            }
        }
        (self.counts, self.events())
    }

    /// Where the bundles go.
    pub fn dir(&self) -> &Path {
        &self.config.dir
    }

    fn remember(&mut self, finding: &Finding, at: SystemTime) {
        self.recent.push_back(finding.clone());
        while self.recent.len() > RECENT_FINDINGS
            || self.recent.front().is_some_and(|oldest| {
                later(finding_time(oldest), self.config.before + self.config.after) < at
            })
        {
            self.recent.pop_front();
        }
    }

    /// Opens a bundle for `finding`, with the findings already made of its packets.
    fn start_bundle(&mut self, finding: &Finding, key: Key, at: SystemTime) -> Option<()> {
        let path = match disk::new_bundle_dir(&self.config.dir, at, &key.dir_name()) {
            Ok(path) => path,
            Err(error) => {
                self.events
                    .push(RecorderEvent::NotStarted(self.config.dir.clone(), error));
                return None;
            }
        };
        let from = earlier(first_packet_time(finding), self.config.before);
        let until = later(at, self.config.after);
        let findings = self
            .recent
            .iter()
            .filter(|recent| finding_time(recent) >= from)
            .cloned()
            .collect();
        self.open = Some(Open {
            path,
            recorded: RecordedBundle {
                finding: kind(finding).to_owned(),
                loop_id: match key {
                    Key::Loop(id) => Some(id.to_string()),
                    _ => None,
                },
                qname: qname(finding),
                from: from.into(),
                until: until.into(),
                complete: true,
            },
            from,
            until,
            findings,
        });
        Some(())
    }

    /// Hands the bundle recording, if any, to the writer thread.
    fn close(&mut self) {
        let Some(open) = self.open.take() else {
            return;
        };
        let mut recorded = open.recorded;
        recorded.complete = self.ring.holds_all_since(open.from);
        let closed = Closed {
            segments: self.ring.since(open.from),
            path: open.path,
            recorded,
            findings: open.findings,
        };
        let sent = match &self.to_writer {
            Some(to_writer) => to_writer.send(closed).map_err(|unsent| unsent.0),
            None => Err(closed),
        };
        if let Err(unsent) = sent {
            let error = io::Error::other("the thread writing bundles has stopped");
            self.events.push(RecorderEvent::Failed(
                unsent.path.clone(),
                BundleError::Write(unsent.path, error),
            ));
        }
    }
}

/// The writer thread: writes each bundle as it comes, then keeps the bundles to their budget.
fn write_bundles(
    config: &RecorderConfig,
    closed: &mpsc::Receiver<Closed>,
    events: &mpsc::Sender<RecorderEvent>,
) {
    yield_to_the_node();
    for bundle in closed {
        let path = bundle.path.clone();
        let event = match write_bundle(config, bundle) {
            Ok(written) => RecorderEvent::Written(path.clone(), written),
            Err(error) => RecorderEvent::Failed(path.clone(), error),
        };
        // The trace may have ended without waiting: nobody is left to tell.
        let _ = events.send(event);
        match disk::prune(&config.dir, &path, config.disk_bytes) {
            Ok(pruned) => {
                for removed in pruned.removed {
                    let _ = events.send(RecorderEvent::Removed(removed));
                }
                for (path, error) in pruned.failed {
                    let _ = events.send(RecorderEvent::RemoveFailed(path, error));
                }
            }
            Err(error) => {
                let _ = events.send(RecorderEvent::RemoveFailed(config.dir.clone(), error));
            }
        }
    }
}

/// How much lower than the trace's the writer's CPU priority is (its `nice` value, raised).
/// A bundle is written in the seconds after a finding, tenths of a second of CPU at once, when
/// the node's DNS servers may be short of CPU already: it can wait for them. Not as low as it
/// goes (19): at the end of a run, the trace waits for the bundle being written.
const WRITER_NICENESS: i32 = 10;

/// Lowers the calling thread's CPU priority by `WRITER_NICENESS`: Linux keeps a nice value per
/// thread, so the trace's own thread keeps its priority.
fn yield_to_the_node() {
    // -1 is also a valid new nice value: errno tells a failure.
    // SAFETY: errno is this thread's; nice only changes this thread's priority.
    let failed = unsafe {
        *libc::__errno_location() = 0;
        libc::nice(WRITER_NICENESS) == -1 && *libc::__errno_location() != 0
    };
    if failed {
        tracing::debug!(
            "lowering the CPU priority of the thread writing bundles: {}",
            io::Error::last_os_error()
        );
    }
}

fn write_bundle(config: &RecorderConfig, closed: Closed) -> Result<Written, BundleError> {
    let mut bundle = Bundle::create(
        &closed.path,
        PcapngOptions {
            // Every packet is held until the end, when all the findings have commented them.
            hold: Duration::MAX,
            max_bytes: config.disk_bytes,
            dns_ports: config.dns_ports,
        },
        &config.names,
    )?;
    let (from, until) = (closed.recorded.from.0, closed.recorded.until.0);
    for kept in ring::between(&closed.segments, from, until) {
        let interface = kept.interface.as_deref().map(|named| InterfaceRecord {
            name: &named.name,
            description: &named.description,
        });
        bundle.packet(kept.packet.clone(), interface)?;
    }
    // The segments are shared with the ring: let go of them before the slower work that remains.
    drop(closed.segments);
    for finding in &closed.findings {
        bundle.finding(finding, &config.node).map_err(|error| {
            BundleError::Write(closed.path.join(bundle::MARKDOWN_REPORT), error)
        })?;
    }
    bundle.finish(About {
        started: from,
        duration_limit: until.duration_since(from).unwrap_or_default(),
        max_bytes: config.disk_bytes,
        node: &NodeConfig::read(&config.root),
        recorded: Some(closed.recorded),
    })
}

/// When `finding` was made.
fn finding_time(finding: &Finding) -> SystemTime {
    match finding {
        Finding::Loop(found) => found.ts,
        Finding::UnexpectedSource(found) => found.ts,
        Finding::Timeout(found) => found.ts,
        Finding::Drop(found) => found.ts,
        Finding::Lookup(found) => found.ts,
        Finding::TruncatedNotRetried(found) => found.ts,
        Finding::SearchListWaste(found) => found.ts,
        Finding::ServfailStorm(found) => found.ts,
        Finding::FragmentedReplyLost(found) => found.ts,
    }
}

/// The time of the first packet `finding` tells of.
fn first_packet_time(finding: &Finding) -> SystemTime {
    match finding {
        Finding::Loop(found) => found
            .path
            .iter()
            .map(|hop| hop.ts)
            .min()
            .map_or(found.ts, |first| first.min(found.ts)),
        Finding::UnexpectedSource(found) => found.ts,
        Finding::Timeout(found) => earlier(found.ts, found.waited),
        Finding::TruncatedNotRetried(found) => earlier(found.ts, found.waited),
        Finding::SearchListWaste(found) => earlier(found.ts, found.slowest.extra),
        Finding::ServfailStorm(found) => earlier(found.ts, Duration::from_secs(5)),
        Finding::FragmentedReplyLost(found) => found
            .seen
            .first()
            .map_or(found.ts, |first| first.ts.min(found.ts)),
        Finding::Drop(found) => found.ts,
        Finding::Lookup(found) => found
            .hops
            .iter()
            .map(|hop| hop.sent)
            .min()
            .map_or(found.ts, |first| first.min(found.ts)),
    }
}

/// `by` before `time`, or the earliest time there is: times come from the network.
fn earlier(time: SystemTime, by: Duration) -> SystemTime {
    time.checked_sub(by).unwrap_or(SystemTime::UNIX_EPOCH)
}

/// `by` after `time`, or `time` itself past the latest time there is.
fn later(time: SystemTime, by: Duration) -> SystemTime {
    time.checked_add(by).unwrap_or(time)
}

fn kind(finding: &Finding) -> &'static str {
    match finding {
        Finding::Loop(found) if found.is_possible() => "possible_loop",
        Finding::Loop(_) => "loop",
        Finding::UnexpectedSource(_) => "unexpected_source",
        Finding::Timeout(_) => "timeout",
        Finding::Drop(_) => "drop",
        Finding::Lookup(_) => "lookup",
        Finding::TruncatedNotRetried(_) => "truncated_not_retried",
        Finding::SearchListWaste(_) => "search_list_waste",
        Finding::ServfailStorm(_) => "servfail_storm",
        Finding::FragmentedReplyLost(_) => "fragmented_reply_lost",
    }
}

/// The finding's question name; `None` for a dropped message without a question.
fn qname(finding: &Finding) -> Option<String> {
    match finding {
        Finding::Loop(found) => Some(found.qname.clone()),
        Finding::UnexpectedSource(found) => Some(found.qname.clone()),
        Finding::Timeout(found) => Some(found.qname.clone()),
        Finding::Drop(found) => found.qname.clone(),
        Finding::Lookup(found) => Some(found.qname.clone()),
        Finding::TruncatedNotRetried(found) => Some(found.qname.clone()),
        Finding::SearchListWaste(found) => Some(found.slowest.qname.clone()),
        Finding::ServfailStorm(_) => None,
        Finding::FragmentedReplyLost(found) => Some(found.qname.clone()),
    }
}

#[cfg(test)]
mod tests;
