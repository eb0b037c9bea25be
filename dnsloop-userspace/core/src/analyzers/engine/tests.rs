use dnsloop_shared::{parse::Probe, point::Direction};

use super::*;
use crate::{analyzers::summary::TimeoutCounts, points::NODE, testkit::observations::*};

const NAME: &str = "www.example.test.";

/// The node-local loop, one round: each hop in timestamp order.
fn nodelocal_loop() -> Vec<Observation> {
    [
        query(NAME)
            .id(4242)
            .at_ms(0)
            .route(&[CLIENT_OUT, NODE_FROM_BRIDGE]),
        query(NAME)
            .id(1000)
            .from("10.244.0.1:50000")
            .to("10.244.0.3:53")
            .at_ms(1)
            .route(&[NODE_TO_BRIDGE, COREDNS_IN]),
        query(NAME)
            .id(2000)
            .from("10.244.0.3:40000")
            .to("169.254.25.10:53")
            .at_ms(2)
            .route(&[COREDNS_OUT, NODE_FROM_BRIDGE]),
    ]
    .concat()
}

fn feed(engine: &mut Engine, observations: &[Observation], end: SystemTime) -> Vec<Finding> {
    let mut findings = Vec::new();
    for obs in observations {
        engine.observe(obs.clone(), &mut findings);
    }
    engine.tick(end, &mut findings);
    findings
}

/// The node-local cache forwards a client's query to CoreDNS, which forwards it to a dead
/// upstream through the node; its query is recalled from the kernel's table when it times out. Met again, its
/// first sighting (leaving the pod for the node) is no second arrival in the node.
#[test]
fn a_query_recalled_unanswered_times_out_and_is_not_followed_again() {
    let coredns_port = |direction| Spot {
        ifname: "veth-coredns-a",
        direction,
        leaves: (direction == Direction::Ingress).then_some(COREDNS),
        enters: (direction == Direction::Egress).then_some(COREDNS),
    };
    let through_node = |spot: Spot| match spot.direction {
        Direction::Ingress => Spot {
            enters: Some(NODE),
            ..spot
        },
        Direction::Egress => Spot {
            leaves: Some(NODE),
            ..spot
        },
    };
    let uplink = Spot {
        ifname: "eth0",
        direction: Direction::Egress,
        leaves: Some(NODE),
        enters: Some("netns 10.255.0.53"),
    };
    let dead_upstream = query(NAME)
        .id(2000)
        .from("10.244.0.3:40000")
        .to("10.255.0.99:53")
        .at_ms(2);
    let client_port = Spot {
        ifname: "veth-client",
        direction: Direction::Ingress,
        leaves: Some(CLIENT),
        enters: Some(NODE),
    };
    let observations = [
        query(NAME)
            .id(4242)
            .to("169.254.25.10:53")
            .at_ms(0)
            .route(&[client_port]),
        query(NAME)
            .id(1000)
            .from("10.244.0.1:50000")
            .to("10.244.0.3:53")
            .at_ms(1)
            .route(&[through_node(coredns_port(Direction::Egress))]),
        dead_upstream
            .clone()
            .route(&[through_node(coredns_port(Direction::Ingress)), uplink]),
    ]
    .concat();
    // Recalled once its timeout has passed: its first sighting, a moment before the record
    // that was streamed of it.
    let mut recalled = dead_upstream.seen(through_node(coredns_port(Direction::Ingress)));
    recalled.recalled = true;
    let mut engine = Engine::new(EngineConfig::default());
    let mut findings = feed(&mut engine, &observations, ms(2_100));
    findings.extend(feed(&mut engine, &[recalled], ms(5_000)));
    assert!(
        findings
            .iter()
            .all(|finding| matches!(finding, Finding::Timeout(_))),
        "{findings:?}"
    );
    assert!(!findings.is_empty(), "the dead upstream times out");
}

#[test]
fn input_a_few_milliseconds_out_of_order_gives_the_same_findings() {
    let in_order = nodelocal_loop();
    // Every hop arrives before the one that preceded it (two CPUs' ring buffer pages), and
    // the last message 3 ms early.
    let mut shuffled: Vec<Observation> = in_order
        .chunks(2)
        .flat_map(|pair| pair.iter().rev().cloned())
        .collect();
    shuffled.rotate_right(2);

    let expected = feed(
        &mut Engine::new(EngineConfig::default()),
        &in_order,
        ms(200),
    );
    assert!(
        matches!(expected.as_slice(), [Finding::Loop(_)]),
        "{expected:?}"
    );
    let mut engine = Engine::new(EngineConfig::default());
    assert_eq!(feed(&mut engine, &shuffled, ms(200)), expected);
    let summary = engine.finish(ms(200), &mut Vec::new());
    assert_eq!(summary.late_observations, 0);
    assert_eq!(summary.observations, 6);
    assert_eq!(summary.findings.loops, 1);
}

#[test]
fn findings_wait_for_the_stream_to_move_past_them() {
    let mut engine = Engine::new(EngineConfig::default());
    // The re-entry at 2.01 ms is held 50 ms for ordering, then settles 50 ms later.
    assert_eq!(feed(&mut engine, &nodelocal_loop(), us(102_009)), []);
    let mut findings = Vec::new();
    engine.tick(us(102_010), &mut findings);
    assert_eq!(findings.len(), 1);
}

#[test]
fn the_analyzers_find_nothing_more_when_told_the_time_they_were_last_told() {
    let mut observations = nodelocal_loop();
    observations.extend((0..40u16).map(|n| {
        query("unanswered.test.")
            .id(n)
            .at_ms(u64::from(n) * 100)
            .seen(CLIENT_OUT)
    }));
    observations.sort_by_key(|obs| obs.ts);
    let mut engine = Engine::new(EngineConfig::default());
    let mut findings = Vec::new();
    let told_again = |engine: &mut Engine| {
        let mut again = Vec::new();
        if let Some(ticked) = engine.ticked {
            engine.tell_time(ticked, &mut again);
        }
        assert_eq!(again, []);
    };
    for obs in observations {
        let ts = obs.ts;
        engine.observe(obs, &mut findings);
        told_again(&mut engine);
        engine.tick(ts, &mut findings);
        told_again(&mut engine);
    }
    engine.tick(ms(10_000), &mut findings);
    told_again(&mut engine);
    let summary = engine.finish(ms(10_000), &mut findings);
    // The loop's three queries go unanswered too, and are counted in its final report; the
    // 40 to one server are reported once, then counted in one report at the end.
    assert_eq!((summary.findings.loops, summary.findings.timeouts), (2, 2));
    assert_eq!(
        summary.timeouts,
        TimeoutCounts {
            queries: 43,
            in_loops: 3,
            in_repeats: 39
        }
    );
}

#[test]
fn a_million_distinct_questions_stay_within_the_tables() {
    const QUESTIONS: u64 = 1_000_000;
    const CAPACITY: usize = 1_000;
    let mut engine = Engine::new(EngineConfig {
        max_tracked: CAPACITY,
        ..EngineConfig::default()
    });
    let mut findings = Vec::new();
    // All within one second: nothing is old enough to expire, only full tables make room.
    let template = query("x.test.").seen(CLIENT_OUT);
    for n in 0..QUESTIONS {
        let mut obs = template.clone();
        obs.ts = us(n);
        obs.question = query(&format!("q{n}.test.")).seen(CLIENT_OUT).question;
        engine.observe(obs, &mut findings);
    }
    let summary = engine.finish(us(QUESTIONS), &mut findings);
    assert_eq!(findings, []);
    assert_eq!(summary.observations, QUESTIONS);
    let evicted_beyond_capacity = QUESTIONS - CAPACITY as u64;
    assert_eq!(summary.evictions["timeout"], evicted_beyond_capacity);
    assert_eq!(summary.evictions["latency"], evicted_beyond_capacity);
    assert_eq!(
        summary.evictions["unexpected_source"],
        evicted_beyond_capacity
    );
    // Flights, the index of each message's latest flight, when each question was last sent
    // out of the client, its departures from the client for an unwatched side, and its storm
    // there.
    assert_eq!(
        summary.evictions["forwarding_loop"],
        5 * evicted_beyond_capacity
    );
    assert_eq!(summary.unanswered_at_end, CAPACITY as u64);
}

/// The node-local loop going round `rounds` times, a round a millisecond from 1 ms: every
/// forward is a new query, and none is answered.
fn loop_storm(rounds: u16) -> Vec<Observation> {
    let mut observations = query(NAME)
        .id(4242)
        .at_ms(0)
        .route(&[CLIENT_OUT, NODE_FROM_BRIDGE]);
    for round in 0..rounds {
        let at = 1_000 * (1 + u64::from(round));
        observations.extend(
            query(NAME)
                .id(2 * round)
                .from("10.244.0.1:50000")
                .to("10.244.0.3:53")
                .at_us(at)
                .route(&[NODE_TO_BRIDGE, COREDNS_IN]),
        );
        observations.extend(
            query(NAME)
                .id(2 * round + 1)
                .from("10.244.0.3:40000")
                .to("169.254.25.10:53")
                .at_us(at + 500)
                .route(&[COREDNS_OUT, NODE_FROM_BRIDGE]),
        );
    }
    observations
}

#[test]
fn a_loop_storm_is_its_loop_reports_with_every_unanswered_forward_counted() {
    const ROUNDS: u16 = 3_000;
    let mut observations = loop_storm(ROUNDS);
    // Meanwhile another name goes unanswered; and long after the loop stopped, the
    // looping name once more.
    observations.extend([
        query("other.test.").id(7).at_ms(1_500).seen(CLIENT_OUT),
        query(NAME).id(8).at_ms(30_000).seen(CLIENT_OUT),
    ]);
    observations.sort_by_key(|obs| obs.ts);
    let mut engine = Engine::new(EngineConfig::default());
    let mut findings = feed(&mut engine, &observations, ms(40_000));
    let summary = engine.finish(ms(40_000), &mut findings);

    let forwards = 2 * u64::from(ROUNDS);
    // The first report, then the final one with every query of the loop counted: the
    // client's and every forward.
    let unanswered: Vec<u64> = findings
        .iter()
        .filter_map(|finding| match finding {
            Finding::Loop(found) => Some(found.unanswered),
            _ => None,
        })
        .collect();
    assert_eq!(unanswered, [0, forwards + 1]);
    let timeouts: Vec<(&str, SystemTime)> = findings
        .iter()
        .filter_map(|finding| match finding {
            Finding::Timeout(found) => Some((found.qname.as_str(), found.ts)),
            _ => None,
        })
        .collect();
    assert_eq!(timeouts, [("other.test.", ms(3_500)), (NAME, ms(32_000))]);
    assert_eq!(
        summary.timeouts,
        TimeoutCounts {
            queries: forwards + 3,
            in_loops: forwards + 1,
            in_repeats: 0
        }
    );
}

/// A little xorshift generator: the same "random" stream on every run.
struct Noise(u64);

impl Noise {
    fn next(&mut self, below: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % below
    }
}

#[test]
fn arbitrary_input_never_panics() {
    let spots = [
        CLIENT_OUT,
        CLIENT_IN,
        COREDNS_OUT,
        COREDNS_IN,
        NODE_FROM_BRIDGE,
        NODE_TO_BRIDGE,
        NODE_TO_UPLINK,
        NODE_FROM_UPLINK,
        NODE_LO,
        COREDNS_LO,
        POD_B_TO_NODE,
        COREDNS_TO_NODE,
    ];
    let addresses = [
        "10.244.0.2:1",
        "10.244.0.3:53",
        "169.254.25.10:53",
        "127.0.0.1:53",
        "[fd00::1]:53",
    ];
    let mut noise = Noise(0x9e37_79b9_7f4a_7c15);
    let mut engine = Engine::new(EngineConfig {
        max_tracked: 16,
        settle: Duration::from_millis(noise.next(100)),
        ..EngineConfig::default()
    });
    let mut findings = Vec::new();
    for _ in 0..50_000 {
        let name = ["a.test.", "b.test.", "1.2.", "0a1b2c3d.test."][noise.next(4) as usize];
        let mut message = if noise.next(2) == 0 {
            query(name)
        } else {
            reply(name)
        };
        message = message
            .id(noise.next(4) as u16)
            .qtype(noise.next(20) as u16)
            .from(addresses[noise.next(5) as usize])
            .to(addresses[noise.next(5) as usize])
            .probe([Probe::None, Probe::CoreDns, Probe::Dnsmasq][noise.next(3) as usize]);
        let mut obs = message.seen(spots[noise.next(spots.len() as u64) as usize]);
        // Mostly forward in time, sometimes far back, sometimes before 1970 or far ahead.
        obs.ts = match noise.next(50) {
            0 => SystemTime::UNIX_EPOCH - Duration::from_secs(noise.next(1000)),
            1 => SystemTime::UNIX_EPOCH + Duration::from_secs(1 << 40),
            2 => us(noise.next(1_000_000_000)),
            _ => us(noise.next(10_000_000)),
        };
        let ts = obs.ts;
        engine.observe(obs, &mut findings);
        if noise.next(100) == 0 {
            engine.tick(ts, &mut findings);
        }
    }
    let summary = engine.finish(us(20_000_000), &mut findings);
    assert_eq!(summary.observations, 50_000);
}

/// Redaction changes how findings write the name, never what is found: the same findings, with
/// the name a keyed hash wherever it was written, and the `loop_id` keyed too (a plain hash of
/// the whole name would let a guessed name be checked against it).
#[test]
fn redacted_names_change_how_findings_name_the_question_not_what_is_found() {
    use crate::present::names::{Names, Redaction};

    let redaction = Redaction::new(b"a key of sixteen bytes or more", "cluster.local").unwrap();
    let redacted = Names::redacted(redaction);
    let other_key = Names::redacted(
        Redaction::new(b"another key, sixteen bytes or more", "cluster.local").unwrap(),
    );
    let name = crate::DnsName::from_wire(&name_wire(NAME)).unwrap();
    let (as_sent, hashed) = (name.presented(&Names::AsSent), name.presented(&redacted));
    let findings = |names: Names| {
        let mut engine = Engine::new(EngineConfig {
            names,
            ..EngineConfig::default()
        });
        // The loop, then its last forward never answered: a loop and its timeout.
        let mut findings = feed(&mut engine, &nodelocal_loop(), ms(200));
        engine.finish(ms(10_000), &mut findings);
        findings
    };
    let plain = findings(Names::AsSent);
    let loop_id = |findings: &[Finding]| {
        findings.iter().find_map(|found| match found {
            Finding::Loop(found) => Some(found.loop_id),
            _ => None,
        })
    };
    let (plain_id, other_key_id) = (loop_id(&plain), loop_id(&findings(other_key.clone())));
    let redacted = findings(redacted);
    let redacted_id = loop_id(&redacted).expect("a loop");
    assert_ne!(Some(redacted_id), plain_id, "keyed");
    assert_ne!(Some(redacted_id), other_key_id, "by the key");
    assert!(
        plain.iter().any(|found| matches!(found, Finding::Loop(_))),
        "{plain:?}"
    );
    let shown = format!("{redacted:?}");
    assert!(
        !shown.contains("www") && !shown.contains("example"),
        "{shown}"
    );
    let plain_rewritten: Vec<Finding> = plain
        .into_iter()
        .map(|found| match found {
            Finding::Loop(mut found) => {
                assert_eq!(found.qname, as_sent);
                found.loop_id = redacted_id;
                found.qname = hashed.clone();
                found.summary = found.summary.replace(&as_sent, &hashed);
                Finding::Loop(found)
            }
            Finding::Timeout(mut found) => {
                found.qname = hashed.clone();
                found.summary = found.summary.replace(&as_sent, &hashed);
                Finding::Timeout(found)
            }
            other => other,
        })
        .collect();
    assert_eq!(redacted, plain_rewritten);
}
