use dnsloop_shared::parse::{LinkLayer, Probe};

use super::*;
use crate::{
    finding::LoopFinding,
    points::{LinkDescription, Role},
    schema::{CaptureReport, Record},
    testkit::observations::ms,
    testkit::samples::{a_loop, a_loop_through_other_nodes, a_query, an_unexpected_source},
};

/// Where `a_query` packets are seen.
const CNI0: u32 = 3;

fn config(dir: &Path, root: &Path) -> RecorderConfig {
    RecorderConfig {
        dir: dir.to_path_buf(),
        memory_bytes: 1 << 20,
        before: Duration::from_secs(1),
        after: Duration::from_secs(1),
        interval: Duration::from_secs(60),
        disk_bytes: 1 << 30,
        dns_ports: DnsPorts::new(&[53]),
        node: "node-a".into(),
        root: root.to_path_buf(),
        names: Names::AsSent,
    }
}

fn points() -> PointMap {
    let mut points = PointMap::default();
    let bridge = LinkDescription {
        role: Role::BridgeMaster,
        namespace: None,
        gateway: None,
    };
    points.insert_link(CNI0, "cni0", bridge, LinkLayer::Ethernet);
    points
}

fn query(at_ms: u64, src: &str, dst: &str, id: u16) -> RawPacket {
    a_query(ms(at_ms), src, dst, id)
}

/// Any query at `at_ms`.
fn packet(at_ms: u64) -> RawPacket {
    query(at_ms, "10.244.0.2:41234", "10.96.0.10:53", 7)
}

fn written(events: &[RecorderEvent]) -> Vec<&PathBuf> {
    events
        .iter()
        .map(|event| match event {
            RecorderEvent::Written(path, _) => path,
            other => panic!("not written: {other:?}"),
        })
        .collect()
}

fn report(path: &Path) -> CaptureReport {
    let json = std::fs::read(path.join(bundle::JSON_REPORT)).expect("report.json");
    serde_json::from_slice(&json).expect("a capture report")
}

#[test]
fn a_finding_gets_a_bundle_of_its_packets_from_before_it_to_after_it() {
    let (dir, root) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut recorder = Recorder::start(config(dir.path(), root.path())).unwrap();
    let points = points();
    // The loop's hops at 1001 and 1123 ms; the bundle spans a second before and after.
    let before = [
        packet(0),
        packet(500),
        query(1_001, "10.244.0.1:50000", "10.244.0.3:53", 1000),
        query(1_123, "10.244.0.3:40000", "169.254.25.10:53", 2000),
    ];
    recorder.packets(&before, &points);
    let notice = recorder.finding(&a_loop(Probe::None)).expect("a bundle");
    assert_eq!(notice.finding, "loop");
    assert_eq!(notice.loop_id, Some(LoopId(0x0123_4567_89ab_cdef)));
    assert!(notice.started);
    assert_eq!((notice.from, notice.until), (ms(1), ms(2_123)));
    assert!(notice.path.starts_with(dir.path()) && notice.path.is_dir());
    let name = notice.path.file_name().unwrap().to_string_lossy();
    assert!(name.ends_with("-loop-0123456789abcdef"), "{name}");

    recorder.packets(&[packet(2_000), packet(2_200)], &points);
    recorder.tick(ms(2_100));
    assert!(recorder.open.is_some(), "still recording");
    recorder.tick(ms(2_123));
    assert!(recorder.open.is_none(), "done recording");
    let (counts, events) = recorder.finish();
    assert_eq!(written(&events), [&notice.path]);
    assert_eq!(
        counts,
        RecorderCounts {
            bundles: 1,
            joined: 0,
            suppressed: 0
        }
    );

    let report = report(&notice.path);
    // 500, the two hops and 2000: not 0, before the bundle, nor 2200, after it.
    let pcapng = report.pcapng.expect("names as sent: the packets are kept");
    assert_eq!((pcapng.packets, pcapng.commented), (4, 2));
    assert_eq!(report.interfaces[0].ifname, "cni0");
    assert!(matches!(&report.findings[..], [Record::Loop(found)] if found.node == "node-a"));
    let recorded = report.recorded.expect("made by the recorder");
    assert_eq!(recorded.finding, "loop");
    assert_eq!(recorded.loop_id.as_deref(), Some("0123456789abcdef"));
    assert!(recorded.complete);
    assert_eq!(report.duration_limit_s, 2.122);
    assert!(notice.path.join(bundle::PCAPNG_FILE).is_file());
    assert!(notice.path.join(bundle::MARKDOWN_REPORT).is_file());
}

#[test]
fn findings_while_recording_join_and_one_loop_gets_one_bundle_per_interval() {
    let (dir, root) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut recorder = Recorder::start(config(dir.path(), root.path())).unwrap();
    recorder.packets(&[packet(1_000)], &points());
    let first = recorder.finding(&a_loop(Probe::None)).expect("a bundle");
    let joined = recorder
        .finding(&an_unexpected_source(None))
        .expect("joins the bundle");
    assert_eq!(joined.path, first.path);
    assert!(!joined.started);
    assert_eq!(joined.finding, "unexpected_source");
    // The same loop again, two seconds later: within the interval.
    assert_eq!(recorder.finding(&a_loop_through_other_nodes()), None);
    recorder.tick(ms(10_000));

    let Finding::Loop(found) = a_loop(Probe::None) else {
        unreachable!("a loop")
    };
    let a_minute_on = Finding::Loop(LoopFinding {
        ts: ms(62_000),
        path: Vec::new(),
        ..found
    });
    recorder.packets(&[packet(62_500)], &points());
    let second = recorder.finding(&a_minute_on).expect("a second bundle");
    assert!(second.started && second.path != first.path);
    assert_eq!(second.suppressed, 1, "the repeat that got none");
    assert_eq!(second.until, ms(63_000));
    // The trace ends before the second bundle's end: it ends with the last packet.
    let (counts, events) = recorder.finish();
    assert_eq!(written(&events), [&first.path, &second.path]);
    assert_eq!(
        counts,
        RecorderCounts {
            bundles: 2,
            joined: 1,
            suppressed: 1
        }
    );
    // Every finding made while recording is in the bundle, the one that got none too.
    let kinds: Vec<&str> = report(&first.path)
        .findings
        .iter()
        .map(|record| match record {
            Record::Loop(_) => "loop",
            Record::UnexpectedSource(_) => "unexpected_source",
            _ => "other",
        })
        .collect();
    assert_eq!(kinds, ["loop", "unexpected_source", "loop"]);
    let cut_short = report(&second.path).recorded.expect("recorded");
    assert_eq!(cut_short.until.0, ms(62_500));
}

/// What recording costs on the trace's thread (keeping a packet) and on the writer's (a bundle
/// of a full default ring): a measurement, not a test.
#[test]
#[ignore = "a measurement: cargo test --release -p dnsloop-core recording_costs -- --ignored --nocapture"]
fn recording_costs() {
    use std::{hint::black_box, time::Instant};

    const MEMORY: u64 = 64 * 1024 * 1024;
    let (dir, root) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut recorder = Recorder::start(RecorderConfig {
        memory_bytes: MEMORY,
        before: Duration::from_secs(3600),
        after: Duration::ZERO,
        ..config(dir.path(), root.path())
    })
    .unwrap();
    let points = points();
    // Batches of 256, as the ring buffer source hands them over, filling the ring twice over.
    let one = packet(0).bytes.len() as u64 + PACKET_OVERHEAD;
    let count = 2 * MEMORY / one;
    // Sharing their bytes, as packets do in the ring buffer source's chunks.
    let shared = packet(0);
    let batches: Vec<Vec<RawPacket>> = (0..count)
        .collect::<Vec<u64>>()
        .chunks(256)
        .map(|batch| {
            let packet = |n: u64| RawPacket {
                ts: ms(n / 100),
                ..shared.clone()
            };
            batch.iter().map(|&n| packet(n)).collect()
        })
        .collect();
    let started = Instant::now();
    for batch in &batches {
        recorder.packets(black_box(batch), &points);
    }
    let kept = started.elapsed();
    println!(
        "kept {count} packets of {} bytes: {:.0} ns a packet",
        packet(0).bytes.len(),
        kept.as_nanos() as f64 / count as f64
    );

    let Finding::Loop(found) = a_loop(Probe::None) else {
        unreachable!("a loop")
    };
    let last = ms((count - 1) / 100);
    let finding = Finding::Loop(LoopFinding {
        ts: last,
        path: Vec::new(),
        ..found
    });
    let notice = recorder.finding(&finding).expect("a bundle");
    let started = Instant::now();
    recorder.tick(last);
    let handed_over = started.elapsed();
    let (_, events) = recorder.finish();
    let written = started.elapsed();
    let RecorderEvent::Written(_, written_bundle) = &events[0] else {
        panic!("{events:?}")
    };
    println!(
        "bundle of {} packets ({} bytes): handed over in {handed_over:?} on the trace's thread, \
         written in {written:?}",
        written_bundle
            .report
            .as_ref()
            .map_or(0, |report| report.packets),
        written_bundle
            .report
            .as_ref()
            .map_or(0, |report| report.bytes),
    );
    assert!(notice.path.join(bundle::JSON_REPORT).is_file());
}

/// The nice values of this process's threads named `name`.
fn nice_values_of_threads(name: &str) -> Vec<i32> {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    tasks
        .flatten()
        .filter(|task| {
            std::fs::read_to_string(task.path().join("comm"))
                .is_ok_and(|comm| comm.trim_end() == name)
        })
        .filter_map(|task| task.file_name().to_str()?.parse::<libc::id_t>().ok())
        // SAFETY: reads thread `tid`'s nice value (Linux keeps one per thread).
        .map(|tid| unsafe { libc::getpriority(libc::PRIO_PROCESS, tid) })
        .collect()
}

#[test]
fn bundles_are_written_at_a_lower_cpu_priority_than_the_trace() {
    let (dir, root) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    // SAFETY: reads this thread's nice value.
    let own = unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) };
    let lowered = (own + WRITER_NICENESS).min(19);
    let recorder = Recorder::start(config(dir.path(), root.path())).unwrap();
    // The writer lowers its priority as it starts: wait for it, 10 s at most.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut writers = nice_values_of_threads(WRITER_THREAD);
    while (writers.is_empty() || writers.iter().any(|nice| *nice < lowered))
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(10));
        writers = nice_values_of_threads(WRITER_THREAD);
    }
    recorder.finish();
    assert!(
        !writers.is_empty() && writers.iter().all(|nice| *nice >= lowered),
        "nice {own} here, writers at {writers:?}"
    );
}
