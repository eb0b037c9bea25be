//! The engine: puts observations back in timestamp order and runs every analyzer on them.
//!
//! It also links the two: a query that times out while its question is caught in a reported
//! loop is one more of the loop's forwards left unanswered, counted in the loop's report (see
//! `impl Loops for ForwardingLoops`), so that a loop storm does not bury the loop under a
//! timeout per forward.
use std::{
    collections::BTreeMap,
    time::{Duration, SystemTime},
};

use super::{
    client_view::ClientView,
    drops::Drops,
    forwarding_loop::ForwardingLoops,
    lookups::Lookups,
    packet::{MessageKey, QuestionKey},
    reorder::Reorder,
    summary::FindingCounts,
    timeout::Loops,
    Analyzer, Summary,
};
use crate::{
    finding::Finding,
    observation::{DroppedMessage, Observation},
};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EngineConfig {
    /// A query with no reply this long after it was sent has timed out.
    pub timeout: Duration,
    /// A namespace that sends a question within this long after it was delivered the same
    /// question (and has not answered it) is taken to forward it. Resolvers retry a forward
    /// seconds later (unbound after 3 s), and a retry is a forward too. The kernel programs
    /// keep a question hot as long (`ProgramConfig::hot_window_ns`).
    pub forward_window: Duration,
    /// How far out of timestamp order observations may arrive, and how long a packet that
    /// entered a namespace may take to leave it again if it is only routed through. A loop is
    /// reported once observation time is twice this long past the packet that proves it; a
    /// timeout this long after its deadline.
    pub settle: Duration,
    /// A loop, a client receiving replies from the wrong source, or a server's timeouts for one
    /// question, are reported when first seen, then at most once per this long while they go
    /// on.
    pub loop_report_interval: Duration,
    /// The most entries any one table holds.
    pub max_tracked: usize,
    /// Follow every client's query through the forwards it caused, and report those answered
    /// this long or more after they were sent (`lookups`); `None`: do not follow them. Needs
    /// every DNS packet: with only some streamed, lookups go unseen.
    pub slow: Option<Duration>,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(2),
            forward_window: Duration::from_secs(5),
            settle: Duration::from_millis(50),
            loop_report_interval: Duration::from_secs(10),
            max_tracked: 65_536,
            slow: None,
        }
    }
}

pub struct Engine {
    reorder: Reorder,
    loops: ForwardingLoops,
    clients: ClientView,
    drops: Drops,
    lookups: Option<Lookups>,
    /// When the analyzers were last told the time (`Analyzer::tick`).
    ticked: Option<SystemTime>,
    observations: u64,
    findings: FindingCounts,
}

impl Engine {
    pub fn new(config: EngineConfig) -> Self {
        let EngineConfig {
            timeout,
            forward_window,
            settle,
            loop_report_interval,
            max_tracked,
            slow,
        } = config;
        Self {
            reorder: Reorder::new(settle, max_tracked),
            loops: ForwardingLoops::new(settle, forward_window, loop_report_interval, max_tracked),
            clients: ClientView::new(timeout, loop_report_interval, max_tracked),
            drops: Drops::new(loop_report_interval, max_tracked),
            lookups: slow.map(|slow| Lookups::new(slow, settle, timeout, max_tracked)),
            ticked: None,
            observations: 0,
            findings: FindingCounts::default(),
        }
    }

    /// Takes the next observation. Observations may arrive up to `settle` out of timestamp
    /// order; each is analysed once the stream has moved `settle` past it.
    pub fn observe(&mut self, obs: Observation, out: &mut Vec<Finding>) {
        self.observations += 1;
        self.reorder.push(obs);
        self.run_due(out);
    }

    /// The kernel dropped `dropped`. Drops come from their own source, apart from the packets
    /// seen, and need no reordering: a timeout it explains is judged seconds later, and a query
    /// dropped where it stayed is known not to be taken in there when that is decided, `settle`
    /// after the packets around it.
    pub fn dropped(&mut self, dropped: DroppedMessage, out: &mut Vec<Finding>) {
        if let Some(message) = MessageKey::of_dropped_query(&dropped) {
            let namespace = dropped.cause.place.namespace.clone();
            self.loops.dropped(message, namespace, dropped.ts);
        }
        let start = out.len();
        self.drops.dropped(dropped, out);
        self.findings.count(&out[start..]);
    }

    /// The clock reads `now`, on the observations' clock: what happened up to `now - settle`
    /// is final, even if no observation has come since.
    pub fn tick(&mut self, now: SystemTime, out: &mut Vec<Finding>) {
        self.reorder.advance(now);
        self.run_due(out);
    }

    /// The input has ended at `now`: analyses what is still held, reports what every analyzer
    /// still holds back (queries past their deadline, loops' final counts), and sums up.
    pub fn finish(mut self, now: SystemTime, out: &mut Vec<Finding>) -> Summary {
        let start = out.len();
        while let Some(obs) = self.reorder.pop() {
            self.feed(&obs, out);
        }
        // The loops' final reports come last, to count the timeouts judged at the end.
        self.loops.tick(now, out);
        self.clients.finish_with(now, &mut self.loops, out);
        self.loops.finish(now, out);
        self.drops.finish(out);
        self.explain_timeouts(&mut out[start..]);
        if let Some(lookups) = &mut self.lookups {
            lookups.finish(&self.loops, out);
        }
        self.findings.count(&out[start..]);
        let mut evictions = BTreeMap::from([
            ("reorder", self.reorder.overflows()),
            ("forwarding_loop", self.loops.evictions()),
            ("drops", self.drops.evictions()),
        ]);
        evictions.extend(self.clients.evictions());
        if let Some(lookups) = &self.lookups {
            evictions.insert("lookups", lookups.evictions());
        }
        Summary {
            at: now,
            observations: self.observations,
            late_observations: self.reorder.late(),
            findings: self.findings,
            timeouts: self.clients.timeouts(),
            evictions,
            unanswered_at_end: self.clients.unanswered() as u64,
            servers: self.clients.servers(),
            lookups: self.lookups.as_ref().map(Lookups::summary),
        }
    }

    fn run_due(&mut self, out: &mut Vec<Finding>) {
        let start = out.len();
        let mut fed = false;
        while let Some(obs) = self.reorder.pop_due() {
            self.feed(&obs, out);
            fed = true;
        }
        // A capture's reader and the kernel's ring buffer tell the time after every batch of
        // packets, often the time they were last told: a tick then would find nothing to do.
        if let Some(horizon) = self.reorder.horizon() {
            if fed || self.ticked != Some(horizon) {
                self.ticked = Some(horizon);
                self.tell_time(horizon, out);
            }
        }
        self.explain_timeouts(&mut out[start..]);
        self.findings.count(&out[start..]);
    }

    /// Says in each timeout among `findings` where the kernel dropped its query, if it did.
    fn explain_timeouts(&self, findings: &mut [Finding]) {
        for finding in findings {
            if let Finding::Timeout(timeout) = finding {
                self.drops.explain(timeout);
            }
        }
    }

    /// The loops first, so that a timeout is judged knowing every loop found by then.
    fn feed(&mut self, obs: &Observation, out: &mut Vec<Finding>) {
        let message = MessageKey::of(obs);
        if !obs.recalled && (!obs.partial || self.loops.takes_partial()) {
            self.loops.observe(obs, message.as_ref(), out);
        }
        // The clients' view judges a query from where its client sent it.
        if !obs.partial {
            let answered = self
                .clients
                .observe_with(obs, message.as_ref(), &mut self.loops, out);
            if let (Some(lookups), Some(query), Some(message)) =
                (&mut self.lookups, answered, &message)
            {
                lookups.answered(message, query, obs);
            }
        }
    }

    fn tell_time(&mut self, now: SystemTime, out: &mut Vec<Finding>) {
        self.loops.tick(now, out);
        self.clients.tick_with(now, &mut self.loops, out);
        if let Some(lookups) = &mut self.lookups {
            lookups.tick(now, &self.loops, out);
        }
    }
}

/// How the timeout judgement asks the loop analyzer.
impl Loops for ForwardingLoops {
    fn unanswered_in_loop(&mut self, question: &QuestionKey, sent: SystemTime) -> bool {
        let looping = self.is_looping(question, sent);
        if looping {
            self.count_unanswered(question);
        }
        looping
    }
}

#[cfg(test)]
mod tests {
    use dnsloop_ebpf::{parse::Probe, point::Direction};

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
        // out of the client, and its departures from the client for an unwatched side.
        assert_eq!(
            summary.evictions["forwarding_loop"],
            4 * evicted_beyond_capacity
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
}
