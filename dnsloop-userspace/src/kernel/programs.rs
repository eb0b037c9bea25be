//! Loading the embedded kernel programs with this run's settings.

use aya::{
    maps::{HashMap, MapData, RingBuf},
    programs::{ProgramError, ProgramType, SchedClassifier, Xdp},
    sys::{is_helper_supported, BpfHelper},
    util::KernelVersion,
    Ebpf, EbpfLoader, Pod, VerifierLogLevel,
};
use std::{net::IpAddr, sync::OnceLock};

use dnsloop_shared::{
    config::ProgramConfig,
    drop::DropLayout,
    forwarder::ForwarderKey,
    names::{
        EGRESS_PROGRAM, FORWARDERS_MAP, INGRESS_PROGRAM, LONG_NAMES_MAP, QUERIES_MAP,
        QUESTIONS_MAP, RECORDS_MAP, SERVERS_MAP, XDP_INGRESS_PROGRAM,
    },
    parse::MAX_DNS_PORTS,
    record::PACKET_SNAP_MAX,
    server::{ServerKey, ServerStats},
};
use thiserror::Error;

use super::pinning::{PinDir, PinError, Shape, PINNED_MAPS};
use crate::{
    kernel::{
        preflight::{self, PreflightError},
        unanswered::QueryTables,
    },
    node::namespaces,
};

/// The BPF objects built by build.rs from the dnsloop-ebpf crate: see [`Build`].
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/dnsloop"));
static OBJECT_BEFORE_5_17: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/dnsloop-before-5-17"));

/// A build of the kernel programs. Linux 5.17 brought both `bpf_loop`, by which the programs
/// loop in a way the verifier checks once, and the drop reason of the `kfree_skb` tracepoint;
/// older kernels take the same programs with their loops in another shape (dnsloop-ebpf's
/// `programs::linux`), and drops without a reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Build {
    /// Linux 5.17 and later.
    Linux517,
    /// Linux 5.10 to 5.16.
    Before517,
}

impl Build {
    #[cfg(test)]
    pub const ALL: [Build; 2] = [Build::Linux517, Build::Before517];

    /// The build this kernel takes: the one for its loops.
    pub fn for_this_kernel() -> Self {
        static HAS_BPF_LOOP: OnceLock<bool> = OnceLock::new();
        // Unknown, the programs for 5.17+: the verifier then says what it lacks, if anything
        // (see `rejected`).
        let has_bpf_loop = *HAS_BPF_LOOP.get_or_init(|| {
            tc_has_helper(
                BpfHelper::BPF_FUNC_loop,
                true,
                "loading the programs for Linux 5.17+",
            )
        });
        if has_bpf_loop {
            Build::Linux517
        } else {
            Build::Before517
        }
    }

    /// Its object file.
    pub fn object(self) -> &'static [u8] {
        match self {
            Build::Linux517 => OBJECT,
            Build::Before517 => OBJECT_BEFORE_5_17,
        }
    }

    /// Whether its drop program reads the drop's reason, which the kernel must then give.
    pub fn reads_drop_reasons(self) -> bool {
        self == Build::Linux517
    }
}

#[derive(Debug, Error)]
pub enum LoadError {
    #[error(transparent)]
    Preflight(#[from] PreflightError),
    #[error("at most {MAX_DNS_PORTS} DNS ports can be watched, {0} were given")]
    TooManyPorts(usize),
    #[error("DNS port 0 is not a port")]
    ZeroPort,
    #[error("the snap length must be between 64 and {PACKET_SNAP_MAX} bytes, not {0}")]
    SnapLength(usize),
    #[error("the ring buffer size must be a power of two between 1 and 1024 MiB, not {0}")]
    RingBufferSize(u32),
    #[error("the {table} table must hold between 1024 and 16777216 entries, not {entries}")]
    TableSize { table: &'static str, entries: u32 },
    #[error("loading the BPF object failed (its maps could not be created): see the error below")]
    Object(#[source] aya::EbpfError),
    #[error("the BPF object has no {0}: the build is broken, rebuild with `cargo xtask build`")]
    Missing(&'static str),
    #[error("the kernel verifier rejected program {name}: please report it with the verifier's log below and `uname -a`")]
    Verifier {
        name: &'static str,
        #[source]
        source: ProgramError,
    },
    #[error("the kernel verifier rejected program {name}: Linux {kernel} is older than {needed}, the first with {feature}, which the program uses; run dnsloop on a newer kernel")]
    KernelTooOld {
        name: &'static str,
        kernel: KernelVersion,
        needed: KernelVersion,
        feature: &'static str,
        #[source]
        source: ProgramError,
    },
    #[error("reading the node's possible CPUs ({0}), which size the per-CPU maps, failed")]
    PossibleCpus(&'static str, #[source] std::io::Error),
    #[error("telling this network namespace apart failed: neither its cookie (SO_NETNS_COOKIE) nor its inode (/proc/thread-self/ns/net) could be read")]
    NetnsCookie(#[source] std::io::Error),
    #[error(transparent)]
    Pin(#[from] PinError),
    #[error("the BPF object cannot be read to check the pinned maps against it: the build is broken, rebuild with `cargo xtask build`")]
    ObjectDefinitions(#[source] aya_obj::ParseError),
    #[error("setting up map {name} failed")]
    Map {
        name: &'static str,
        #[source]
        source: aya::maps::MapError,
    },
}

/// What this run asks of the kernel programs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    pub dns_ports: Vec<u16>,
    /// Stream every DNS packet (`--packets`), not only the ones that matter.
    pub stream_every_packet: bool,
    /// Also stream every DNS packet nothing else streams, for the flight recorder only
    /// (`--record`): the analysis stays what it is without it. Moot with `stream_every_packet`.
    pub record_every_packet: bool,
    pub snap_len: usize,
    /// `None`: [`QUESTIONS_PER_CPU`] for each of the node's CPUs, within bounds.
    pub question_table_size: Option<u32>,
    pub query_table_size: u32,
    /// `None`: [`DEFAULT_RING_BUFFER_MIB`], or [`STREAMING_RING_BUFFER_MIB`] when every DNS
    /// packet is streamed.
    pub ring_buffer_mib: Option<u32>,
    /// Watch ingress at XDP instead of TC (`--xdp`).
    pub xdp_ingress: bool,
    /// Watch the kernel's drops of DNS packets, where the kernel allows (not `--no-drops`).
    pub watch_drops: bool,
    /// The programs to load; `None` for those this kernel takes.
    pub build: Option<Build>,
}

impl Settings {
    /// The programs to load.
    pub fn build(&self) -> Build {
        self.build.unwrap_or_else(Build::for_this_kernel)
    }

    /// Whether the kernel streams every DNS packet, for the analysis or for the recorder.
    pub fn streams_every_dns_packet(&self) -> bool {
        self.stream_every_packet || self.record_every_packet
    }
}

/// Questions the kernel remembers by default for each CPU, about 460 bytes each. The question
/// table is an LRU with a list per CPU (`BPF_F_NO_COMMON_LRU`): each CPU evicts only what it
/// inserted, so a CPU's share, not the total, says how long a question is remembered while
/// others arrive. A loop brings its question back within a round of forwards, milliseconds;
/// 2048 new questions on one CPU take a node asking 20,000 distinct ones a second over 2 CPUs
/// 200 ms.
pub const QUESTIONS_PER_CPU: u32 = 2048;
/// The question table's default bounds whatever the CPU count: 1.8 to 29 MiB.
const DEFAULT_QUESTION_TABLE_RANGE: (u32, u32) = (4096, 65536);
/// Queries in flight the kernel remembers by default, about 210 bytes each, 1.6 MiB in all:
/// a node answers most in milliseconds, and the default 5 s timeout then leaves room for 1,600
/// unanswered a second; a fuller table refuses new queries and counts them.
pub const DEFAULT_QUERY_TABLE_SIZE: u32 = 8192;
/// The ring buffer's size by default, in MiB, when only what matters is streamed: about 14,500
/// queries of 100 bytes.
pub const DEFAULT_RING_BUFFER_MIB: u32 = 2;
/// The ring buffer's size by default, in MiB, when every DNS packet is streamed (`--packets`,
/// `--slow`, `--record`): twice the room, for every packet of a storm.
pub const STREAMING_RING_BUFFER_MIB: u32 = 4;

impl Default for Settings {
    /// DNS on port 53, only what matters streamed, whole packets, TC on ingress.
    fn default() -> Self {
        Self {
            dns_ports: vec![53],
            stream_every_packet: false,
            record_every_packet: false,
            snap_len: PACKET_SNAP_MAX,
            question_table_size: None,
            query_table_size: DEFAULT_QUERY_TABLE_SIZE,
            ring_buffer_mib: None,
            xdp_ingress: false,
            watch_drops: true,
            build: None,
        }
    }
}

/// Loads the programs into the kernel with `settings` patched in, ready to attach. With `pins`
/// the maps it keeps are taken from there, or created and pinned there. The drop program reads
/// at `drops` (`DropLayout::NONE`: it is not to run); it is loaded when attached.
pub fn load(
    settings: &Settings,
    pins: Option<&PinDir>,
    drops: &DropLayout,
) -> Result<Ebpf, LoadError> {
    for note in preflight::check()? {
        tracing::info!("{note}");
    }
    let ports = port_table(&settings.dns_ports)?;
    let loopback_cookie = if tc_knows_netns_cookie() {
        0
    } else {
        namespaces::current_cookie().map_err(LoadError::NetnsCookie)?
    };
    let config = program_config(settings, loopback_cookie)?;
    let MapSizes {
        questions,
        queries,
        ring_bytes,
    } = map_sizes(settings, possible_cpus()?)?;
    let mut loader = EbpfLoader::new();
    loader
        // On a rejection, the verifier's error and statistics: the whole walk it logs by
        // default runs past the largest log buffer for these programs on kernels before 6.4,
        // which then say only that the log was full.
        .verifier_log_level(VerifierLogLevel::STATS)
        .override_global("DNS_PORTS", &ports, true)
        .override_global("CONFIG", &config, true)
        .override_global("DROP_LAYOUT", drops, true)
        .map_max_entries(QUESTIONS_MAP, questions)
        .map_max_entries(QUERIES_MAP, queries)
        // Not preallocated: as many as the queries costs nothing until long names come.
        .map_max_entries(LONG_NAMES_MAP, queries)
        .map_max_entries(RECORDS_MAP, ring_bytes);
    let build = settings.build();
    if let Some(pins) = pins {
        for (name, shape) in
            pinned_shapes(build, &[(QUERIES_MAP, queries), (LONG_NAMES_MAP, queries)])?
        {
            pins.check(name, shape)?;
            // Only the maps named here are pinned: none is declared pinned in the object, so
            // aya's default of pinning those under /sys/fs/bpf never applies.
            loader.map_pin_path(name, pins.map_path(name));
        }
    }
    let mut ebpf = loader.load(build.object()).map_err(LoadError::Object)?;
    drop(loader);
    give_back_freed_heap();
    let kernel = KernelVersion::current().ok();
    for name in [INGRESS_PROGRAM, EGRESS_PROGRAM] {
        classifier(&mut ebpf, name)?
            .load()
            .map_err(|source| rejected(name, build, kernel, source))?;
    }
    if settings.xdp_ingress {
        xdp(&mut ebpf)?
            .load()
            .map_err(|source| rejected(XDP_INGRESS_PROGRAM, build, kernel, source))?;
    }
    Ok(ebpf)
}

/// The shape of each map `--pin` keeps, as the object defines it and with `max_entries` applied.
fn pinned_shapes(
    build: Build,
    max_entries: &[(&str, u32)],
) -> Result<Vec<(&'static str, Shape)>, LoadError> {
    let object = aya_obj::Object::parse(build.object()).map_err(LoadError::ObjectDefinitions)?;
    PINNED_MAPS
        .iter()
        .map(|&name| {
            let map = object.maps.get(name).ok_or(LoadError::Missing(name))?;
            let entries = max_entries
                .iter()
                .find(|(sized, _)| *sized == name)
                .map_or(map.max_entries(), |&(_, entries)| entries);
            let shape = Shape {
                map_type: map.map_type(),
                key_size: map.key_size(),
                value_size: map.value_size(),
                max_entries: entries,
                flags: map.map_flags(),
            };
            Ok((name, shape))
        })
        .collect()
}

/// The oldest kernel with everything program `name` of `build` uses, and the newest of that.
fn requirement(name: &str, build: Build) -> (KernelVersion, &'static str) {
    match (name, build) {
        (XDP_INGRESS_PROGRAM, _) => (KernelVersion::new(5, 18, 0), "bpf_xdp_load_bytes"),
        (_, Build::Linux517) => (KernelVersion::new(5, 17, 0), "bpf_loop"),
        (_, Build::Before517) => (
            KernelVersion::new(5, 10, 0),
            "the BPF features dnsloop's programs use",
        ),
    }
}

/// Why the verifier rejected program `name` of `build` on `kernel`: a kernel too old for it,
/// or a bug.
fn rejected(
    name: &'static str,
    build: Build,
    kernel: Option<KernelVersion>,
    source: ProgramError,
) -> LoadError {
    let (needed, feature) = requirement(name, build);
    match kernel {
        Some(kernel) if kernel < needed => LoadError::KernelTooOld {
            name,
            kernel,
            needed,
            feature,
            source,
        },
        _ => LoadError::Verifier { name, source },
    }
}

pub fn classifier<'a>(
    ebpf: &'a mut Ebpf,
    name: &'static str,
) -> Result<&'a mut SchedClassifier, LoadError> {
    ebpf.program_mut(name)
        .and_then(|program| program.try_into().ok())
        .ok_or(LoadError::Missing(name))
}

pub fn xdp(ebpf: &mut Ebpf) -> Result<&mut Xdp, LoadError> {
    ebpf.program_mut(XDP_INGRESS_PROGRAM)
        .and_then(|program| program.try_into().ok())
        .ok_or(LoadError::Missing(XDP_INGRESS_PROGRAM))
}

/// Tells the programs that `addresses` forward DNS: the node's own, from which node-local-dns
/// forwards (it listens on a link-local address, but sends from the node's).
pub fn register_forwarders(ebpf: &mut Ebpf, addresses: &[IpAddr]) -> Result<(), LoadError> {
    let map_error = |source| LoadError::Map {
        name: FORWARDERS_MAP,
        source,
    };
    let mut forwarders: HashMap<_, ForwarderKey, u8> = HashMap::try_from(
        ebpf.map_mut(FORWARDERS_MAP)
            .ok_or(LoadError::Missing(FORWARDERS_MAP))?,
    )
    .map_err(map_error)?;
    for address in addresses {
        let mut key = ForwarderKey { address: [0; 16] };
        match address {
            IpAddr::V4(v4) => key.address[..4].copy_from_slice(&v4.octets()),
            IpAddr::V6(v6) => key.address = v6.octets(),
        }
        forwarders.insert(key, 1, 0).map_err(map_error)?;
    }
    Ok(())
}

/// Takes the ring buffer the programs stream packets through.
pub fn take_records(ebpf: &mut Ebpf) -> Result<RingBuf<MapData>, LoadError> {
    let map = ebpf
        .take_map(RECORDS_MAP)
        .ok_or(LoadError::Missing(RECORDS_MAP))?;
    RingBuf::try_from(map).map_err(|source| LoadError::Map {
        name: RECORDS_MAP,
        source,
    })
}

/// Takes the query table and its long names, whose unanswered queries userspace collects once
/// they expire.
pub fn take_queries(ebpf: &mut Ebpf) -> Result<QueryTables, LoadError> {
    Ok(QueryTables {
        queries: take_hash(ebpf, QUERIES_MAP)?,
        long_names: take_hash(ebpf, LONG_NAMES_MAP)?,
    })
}

fn take_hash<K: Pod, V: Pod>(
    ebpf: &mut Ebpf,
    name: &'static str,
) -> Result<HashMap<MapData, K, V>, LoadError> {
    let map = ebpf.take_map(name).ok_or(LoadError::Missing(name))?;
    HashMap::try_from(map).map_err(|source| LoadError::Map { name, source })
}

/// Every server's answer statistics, as the kernel counted them.
pub fn read_servers(ebpf: &Ebpf) -> Result<Vec<(ServerKey, ServerStats)>, LoadError> {
    let map_error = |source| LoadError::Map {
        name: SERVERS_MAP,
        source,
    };
    let map = ebpf
        .map(SERVERS_MAP)
        .ok_or(LoadError::Missing(SERVERS_MAP))?;
    let servers: HashMap<_, ServerKey, ServerStats> = HashMap::try_from(map).map_err(map_error)?;
    servers.iter().collect::<Result<_, _>>().map_err(map_error)
}

/// Whether TC programs may ask the kernel which network namespace a packet's socket is in
/// (`bpf_get_netns_cookie`, Linux 6.13+). Without it the programs tag loopback packets with a
/// cookie patched in at load time, so only the calling namespace's loopback can be watched.
pub fn tc_knows_netns_cookie() -> bool {
    static KNOWN: OnceLock<bool> = OnceLock::new();
    *KNOWN.get_or_init(|| {
        tc_has_helper(
            BpfHelper::BPF_FUNC_get_netns_cookie,
            false,
            "watching this namespace's loopback alone",
        )
    })
}

/// Whether TC programs may call `helper`; `unknown` when the probe fails, which the warning
/// says with what dnsloop does then (`meaning`).
fn tc_has_helper(helper: BpfHelper, unknown: bool, meaning: &str) -> bool {
    is_helper_supported(ProgramType::SchedClassifier, helper).unwrap_or_else(|error| {
        tracing::warn!("probing TC programs for {helper:?} failed ({error}): {meaning}");
        unknown
    })
}

/// `loopback_cookie`: see [`ProgramConfig::loopback_cookie`].
fn program_config(settings: &Settings, loopback_cookie: u64) -> Result<ProgramConfig, LoadError> {
    if !(64..=PACKET_SNAP_MAX).contains(&settings.snap_len) {
        return Err(LoadError::SnapLength(settings.snap_len));
    }
    Ok(ProgramConfig {
        snap_len: settings.snap_len as u32,
        stream_every_packet: u8::from(settings.stream_every_packet),
        record_every_packet: u8::from(settings.record_every_packet),
        loopback_cookie,
        ..ProgramConfig::DEFAULT
    })
}

#[derive(Debug, PartialEq, Eq)]
struct MapSizes {
    questions: u32,
    queries: u32,
    ring_bytes: u32,
}

/// The maps' sizes for `settings` on a node with `cpus` possible CPUs.
fn map_sizes(settings: &Settings, cpus: usize) -> Result<MapSizes, LoadError> {
    let table = |table: &'static str, entries: u32| {
        if (1024..=16_777_216).contains(&entries) {
            Ok(entries)
        } else {
            Err(LoadError::TableSize { table, entries })
        }
    };
    let mib = settings
        .ring_buffer_mib
        .unwrap_or(if settings.streams_every_dns_packet() {
            STREAMING_RING_BUFFER_MIB
        } else {
            DEFAULT_RING_BUFFER_MIB
        });
    if !(1..=1024).contains(&mib) || !mib.is_power_of_two() {
        return Err(LoadError::RingBufferSize(mib));
    }
    let (fewest, most) = DEFAULT_QUESTION_TABLE_RANGE;
    let questions = settings.question_table_size.unwrap_or_else(|| {
        u32::try_from(cpus)
            .unwrap_or(u32::MAX)
            .saturating_mul(QUESTIONS_PER_CPU)
            .clamp(fewest, most)
    });
    Ok(MapSizes {
        questions: table("question", questions)?,
        queries: table("query", settings.query_table_size)?,
        ring_bytes: mib * 1024 * 1024,
    })
}

/// The CPUs the kernel may run the programs on, each with its share of the per-CPU maps.
pub(super) fn possible_cpus() -> Result<usize, LoadError> {
    aya::util::nr_cpus().map_err(|(path, error)| LoadError::PossibleCpus(path, error))
}

fn port_table(dns_ports: &[u16]) -> Result<[u16; MAX_DNS_PORTS], LoadError> {
    if dns_ports.len() > MAX_DNS_PORTS {
        return Err(LoadError::TooManyPorts(dns_ports.len()));
    }
    if dns_ports.contains(&0) {
        return Err(LoadError::ZeroPort);
    }
    let mut table = [0u16; MAX_DNS_PORTS];
    table[..dns_ports.len()].copy_from_slice(dns_ports);
    Ok(table)
}

/// Hands the heap the loader freed back to the kernel. aya parses all of the kernel's BTF when
/// a loader is made (`EbpfLoader::new`), some 12 MiB these programs never use: they carry no
/// CO-RE relocation. glibc keeps freed pages that sit below live allocations; an idle trace
/// held them as two thirds of its RSS (31.6 MiB with them, 19.7 MiB without).
pub(super) fn give_back_freed_heap() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only returns free pages to the kernel; it has no precondition.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// aya pins a map the object declares pinned under /sys/fs/bpf when no path is given:
    /// without `--pin` nothing may outlive the run.
    #[test]
    fn no_map_is_declared_pinned_in_the_objects() {
        for build in Build::ALL {
            let object = aya_obj::Object::parse(build.object()).expect("the object parses");
            for (name, map) in &object.maps {
                assert_eq!(
                    map.pinning(),
                    aya_obj::maps::PinningType::None,
                    "map {name} is declared pinned in {build:?}"
                );
            }
        }
    }

    /// aya names the programs and maps after the kernel side's functions and statics: they must
    /// be the names userspace and xtask know them by.
    #[test]
    fn the_objects_have_exactly_the_named_programs_and_maps() {
        use std::collections::BTreeSet;

        use aya_obj::EbpfSectionKind;
        use dnsloop_shared::names::{MAPS, PROGRAMS};
        for build in Build::ALL {
            let object = aya_obj::Object::parse(build.object()).expect("the object parses");
            let programs: BTreeSet<&str> = object.programs.keys().map(String::as_str).collect();
            assert_eq!(programs, BTreeSet::from(PROGRAMS), "{build:?}");
            // Not the globals' sections (.rodata...), which aya also loads as maps.
            let maps: BTreeSet<&str> = object
                .maps
                .iter()
                .filter(|(_, map)| {
                    matches!(
                        map.section_kind(),
                        EbpfSectionKind::Maps | EbpfSectionKind::BtfMaps
                    )
                })
                .map(|(name, _)| name.as_str())
                .collect();
            assert_eq!(maps, BTreeSet::from(MAPS), "{build:?}");
        }
    }

    #[test]
    fn pinned_maps_are_checked_against_the_object_with_this_runs_sizes() {
        use dnsloop_shared::query::{LongName, QueryEntry, QueryKey};
        let shapes = pinned_shapes(
            Build::Linux517,
            &[(QUERIES_MAP, 4096), (LONG_NAMES_MAP, 4096)],
        )
        .expect("the object has every map");
        let names: Vec<&str> = shapes.iter().map(|(name, _)| *name).collect();
        assert_eq!(names, PINNED_MAPS);
        let (_, queries) = shapes
            .iter()
            .find(|(name, _)| *name == QUERIES_MAP)
            .expect("the query table is pinned");
        assert_eq!(queries.max_entries, 4096);
        assert_eq!(queries.key_size as usize, std::mem::size_of::<QueryKey>());
        assert_eq!(
            queries.value_size as usize,
            std::mem::size_of::<QueryEntry>()
        );
        let (_, long_names) = shapes
            .iter()
            .find(|(name, _)| *name == LONG_NAMES_MAP)
            .expect("the long names are pinned with their queries");
        assert_eq!(long_names.max_entries, 4096);
        assert_eq!(
            long_names.value_size as usize,
            std::mem::size_of::<LongName>()
        );
    }

    #[test]
    fn port_table_pads_with_zeros() {
        assert_eq!(
            port_table(&[53, 5353]).unwrap(),
            [53, 5353, 0, 0, 0, 0, 0, 0]
        );
    }

    #[test]
    fn port_table_rejects_nine_ports_and_port_zero() {
        assert!(matches!(
            port_table(&[1; 9]),
            Err(LoadError::TooManyPorts(9))
        ));
        assert!(matches!(port_table(&[53, 0]), Err(LoadError::ZeroPort)));
    }

    fn settings() -> Settings {
        Settings {
            dns_ports: vec![53],
            stream_every_packet: true,
            record_every_packet: false,
            snap_len: 2048,
            question_table_size: Some(65536),
            query_table_size: 65536,
            ring_buffer_mib: Some(4),
            xdp_ingress: false,
            watch_drops: true,
            build: None,
        }
    }

    #[test]
    fn map_sizes_are_bounded_and_the_ring_a_power_of_two() {
        assert_eq!(
            map_sizes(&settings(), 2).unwrap(),
            MapSizes {
                questions: 65536,
                queries: 65536,
                ring_bytes: 4 << 20
            }
        );
        let ring = |ring_buffer_mib| Settings {
            ring_buffer_mib: Some(ring_buffer_mib),
            ..settings()
        };
        assert!(matches!(
            map_sizes(&ring(3), 2),
            Err(LoadError::RingBufferSize(3))
        ));
        assert!(matches!(
            map_sizes(&ring(0), 2),
            Err(LoadError::RingBufferSize(0))
        ));
        let questions = |question_table_size| Settings {
            question_table_size: Some(question_table_size),
            ..settings()
        };
        assert!(matches!(
            map_sizes(&questions(10), 2),
            Err(LoadError::TableSize {
                table: "question",
                entries: 10
            })
        ));
    }

    #[test]
    fn the_default_question_table_gives_each_cpu_its_share_within_bounds() {
        let questions = |cpus| map_sizes(&Settings::default(), cpus).unwrap().questions;
        assert_eq!(questions(1), 4096);
        assert_eq!(questions(2), 4096);
        assert_eq!(questions(8), 8 * QUESTIONS_PER_CPU);
        assert_eq!(questions(512), 65536);
    }

    #[test]
    fn the_default_ring_is_larger_when_every_packet_is_streamed() {
        let ring = |stream_every_packet, record_every_packet| {
            let settings = Settings {
                stream_every_packet,
                record_every_packet,
                ..Settings::default()
            };
            map_sizes(&settings, 2).unwrap().ring_bytes >> 20
        };
        assert_eq!(ring(false, false), DEFAULT_RING_BUFFER_MIB);
        assert_eq!(ring(true, false), STREAMING_RING_BUFFER_MIB);
        assert_eq!(ring(false, true), STREAMING_RING_BUFFER_MIB);
    }

    #[test]
    fn a_kernel_too_old_for_a_helper_is_named_as_the_cause() {
        let error = rejected(
            EGRESS_PROGRAM,
            Build::Linux517,
            Some(KernelVersion::new(5, 15, 0)),
            ProgramError::NotLoaded,
        );
        assert_eq!(
            error.to_string(),
            "the kernel verifier rejected program dnsloop_egress: Linux 5.15.0 is older than 5.17.0, the first with bpf_loop, which the program uses; run dnsloop on a newer kernel"
        );
        let xdp = rejected(
            XDP_INGRESS_PROGRAM,
            Build::Before517,
            Some(KernelVersion::new(5, 17, 3)),
            ProgramError::NotLoaded,
        );
        assert!(matches!(
            xdp,
            LoadError::KernelTooOld {
                feature: "bpf_xdp_load_bytes",
                ..
            }
        ));
        let old = rejected(
            INGRESS_PROGRAM,
            Build::Before517,
            Some(KernelVersion::new(5, 4, 0)),
            ProgramError::NotLoaded,
        );
        assert!(
            matches!(old, LoadError::KernelTooOld { needed, .. } if needed == KernelVersion::new(5, 10, 0))
        );
        // On a recent kernel a rejection is a bug to report.
        for kernel in [Some(KernelVersion::new(6, 1, 0)), None] {
            assert!(matches!(
                rejected(
                    INGRESS_PROGRAM,
                    Build::Linux517,
                    kernel,
                    ProgramError::NotLoaded
                ),
                LoadError::Verifier { .. }
            ));
        }
    }

    /// LLVM turns a whole-struct or array copy in BPF into a call to bpf-linker's `memmove`,
    /// `memcpy` or `memset`, which copy one byte per loop iteration (hundreds of instructions on
    /// every packet that takes the path): the programs copy field by field instead (`stores`).
    #[test]
    fn the_programs_call_no_byte_at_a_time_copies() {
        use object::{Object as _, ObjectSection as _, ObjectSymbol as _, RelocationTarget};
        let mut calls = Vec::new();
        for build in Build::ALL {
            let file = object::File::parse(build.object()).expect("the BPF object is ELF");
            for section in file.sections() {
                for (_, relocation) in section.relocations() {
                    let RelocationTarget::Symbol(index) = relocation.target() else {
                        continue;
                    };
                    let Ok(name) = file.symbol_by_index(index).and_then(|symbol| symbol.name())
                    else {
                        continue;
                    };
                    if ["memmove", "memcpy", "memset", "bcmp", "memcmp"].contains(&name) {
                        calls.push(format!(
                            "{build:?}: {} calls {name}",
                            section.name().unwrap_or("?")
                        ));
                    }
                }
            }
        }
        assert!(calls.is_empty(), "{calls:?}");
    }

    #[test]
    fn snap_length_is_bounded() {
        let settings = |snap_len| Settings {
            snap_len,
            ..settings()
        };
        assert!(matches!(
            program_config(&settings(63), 0),
            Err(LoadError::SnapLength(63))
        ));
        assert!(matches!(
            program_config(&settings(PACKET_SNAP_MAX + 1), 0),
            Err(LoadError::SnapLength(_))
        ));
        let config = program_config(&settings(512), 42).unwrap();
        assert_eq!(
            (
                config.snap_len,
                config.stream_every_packet,
                config.loopback_cookie
            ),
            (512, 1, 42)
        );
    }
}
