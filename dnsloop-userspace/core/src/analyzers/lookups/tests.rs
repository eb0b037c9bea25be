use super::*;
use crate::{
    analyzers::{Engine, EngineConfig, Summary},
    observation::Transport,
    testkit::observations::*,
};

const NAME: &str = "www.example.test.";
const UPSTREAM: &str = "10.255.0.53:53";

/// The client asks the node cache at 0 ms; the cache asks CoreDNS at 1 ms, which asks the
/// upstream beyond eth0 at 2 ms. The upstream answers after `upstream_ms`, CoreDNS a
/// millisecond later, the cache a millisecond after that.
fn chain(id: u16, at: u64, upstream_ms: u64) -> Vec<Observation> {
    chain_of(NAME, id, at, upstream_ms)
}

/// `chain` for the name `name`.
fn chain_of(name: &str, id: u16, at: u64, upstream_ms: u64) -> Vec<Observation> {
    let answered = at + 2 + upstream_ms;
    [
        query(name)
            .id(id)
            .at_ms(at)
            .route(&[CLIENT_OUT, NODE_FROM_BRIDGE]),
        query(name)
            .id(id + 1)
            .from("10.255.0.1:50000")
            .to("10.244.0.3:53")
            .at_ms(at + 1)
            .route(&[NODE_TO_BRIDGE, COREDNS_IN]),
        query(name)
            .id(id + 2)
            .from("10.244.0.3:40000")
            .to(UPSTREAM)
            .at_ms(at + 2)
            .route(&[COREDNS_OUT, NODE_FROM_BRIDGE, NODE_TO_UPLINK]),
        reply(name)
            .id(id + 2)
            .from(UPSTREAM)
            .to("10.244.0.3:40000")
            .at_ms(answered)
            .route(&[NODE_FROM_UPLINK, NODE_TO_BRIDGE, COREDNS_IN]),
        reply(name)
            .id(id + 1)
            .from("10.244.0.3:53")
            .to("10.255.0.1:50000")
            .at_ms(answered + 1)
            .route(&[COREDNS_OUT, NODE_FROM_BRIDGE]),
        reply(name)
            .id(id)
            .from("169.254.25.10:53")
            .to("10.244.0.2:41234")
            .at_ms(answered + 2)
            .route(&[NODE_TO_BRIDGE, CLIENT_IN]),
    ]
    .concat()
}

fn traced(slow: Duration, observations: Vec<Observation>) -> (Vec<Finding>, Summary) {
    let mut engine = Engine::new(EngineConfig {
        slow: Some(slow),
        ..EngineConfig::default()
    });
    let mut findings = Vec::new();
    let mut observations = observations;
    observations.sort_by_key(|obs| obs.ts);
    let end = observations.last().map_or(ms(0), |obs| obs.ts);
    for obs in observations {
        engine.observe(obs, &mut findings);
    }
    let summary = engine.finish(end + Duration::from_secs(1), &mut findings);
    (findings, summary)
}

fn lookups(findings: &[Finding]) -> Vec<&LookupFinding> {
    findings
        .iter()
        .filter_map(|finding| match finding {
            Finding::Lookup(found) => Some(found),
            _ => None,
        })
        .collect()
}

#[test]
fn a_slow_upstream_is_the_slowest_hop_of_the_lookup() {
    let (findings, summary) = traced(Duration::from_millis(100), chain(4242, 0, 150));
    let [found] = lookups(&findings)[..] else {
        panic!("one slow lookup: {findings:?}");
    };
    assert_eq!(found.qname, NAME);
    let servers: Vec<String> = found
        .hops
        .iter()
        .map(|hop| hop.server.to_string())
        .collect();
    assert_eq!(servers, ["169.254.25.10:53", "10.244.0.3:53", UPSTREAM]);
    let forwards: Vec<Option<usize>> = found.hops.iter().map(|hop| hop.forwards).collect();
    assert_eq!(forwards, [None, Some(0), Some(1)]);
    let senders: Vec<String> = found
        .hops
        .iter()
        .map(|hop| {
            hop.from
                .as_ref()
                .map(ToString::to_string)
                .unwrap_or_default()
        })
        .collect();
    assert_eq!(senders, [CLIENT, "node", COREDNS]);
    let upstream = &found.hops[2];
    assert_eq!(found.slowest, 2, "{found:#?}");
    assert_eq!(upstream.to, None);
    assert_eq!(upstream.via.as_deref(), Some("eth0"));
    assert_eq!(
        found.hops[1]
            .to
            .as_ref()
            .map(ToString::to_string)
            .as_deref(),
        Some(COREDNS)
    );
    // The upstream's 150 ms are its own; each forwarder spent about a millisecond.
    let near = |actual: Duration, expected_ms: u64| {
        let expected = Duration::from_millis(expected_ms);
        actual.abs_diff(expected) < Duration::from_micros(100)
    };
    assert!(near(upstream.own, 150), "{found:#?}");
    assert!(
        near(found.hops[1].own, 2) && near(found.hops[0].own, 2),
        "{found:#?}"
    );
    assert!(near(found.client_query().latency(), 154), "{found:#?}");
    assert!(
        found
            .summary
            .contains("10.255.0.53:53 (off the node via eth0)"),
        "{}",
        found.summary
    );

    let followed = summary.lookups.expect("lookups followed");
    assert_eq!(
        followed.counts,
        LookupCounts {
            followed: 1,
            slow: 1,
            reported: 1,
            suppressed: 0,
            unlinked: 0
        }
    );
    let upstream_times = followed
        .servers
        .iter()
        .find(|times| times.server.to_string() == UPSTREAM)
        .expect("the upstream's hops timed");
    assert_eq!(upstream_times.hops, 1);
    assert!(near(upstream_times.max, 150));
}

#[test]
fn a_lookup_faster_than_slow_is_timed_not_reported() {
    let (findings, summary) = traced(Duration::from_millis(200), chain(4242, 0, 150));
    assert_eq!(lookups(&findings), Vec::<&LookupFinding>::new());
    let followed = summary.lookups.expect("lookups followed");
    assert_eq!((followed.counts.followed, followed.counts.slow), (1, 0));
    assert_eq!(followed.servers.len(), 3, "{followed:?}");
}

#[test]
fn a_storm_of_slow_lookups_writes_ten_a_second_and_counts_the_rest() {
    // Each client asks a name of its own: the same name asked by many at once is forwarded
    // under whichever of them asked last (see the module's comment).
    let observations = (0..50u16)
        .flat_map(|n| {
            chain_of(
                &format!("n{n}.example.test."),
                10 * n,
                10 * u64::from(n),
                300,
            )
        })
        .collect();
    let (findings, summary) = traced(Duration::from_millis(100), observations);
    assert_eq!(lookups(&findings).len(), 10);
    let counts = summary.lookups.expect("lookups followed").counts;
    assert_eq!(
        (
            counts.followed,
            counts.slow,
            counts.reported,
            counts.suppressed
        ),
        (50, 50, 10, 40)
    );
    assert_eq!(summary.findings.loops, 0);
}

#[test]
fn forwards_awaiting_their_clients_answer_stay_within_the_table_and_are_counted() {
    const CAPACITY: usize = 64;
    const LOOKUPS: u16 = 150;
    // Every forward is answered, no client's query is: the reply to the client is lost.
    let observations: Vec<Observation> = (0..LOOKUPS)
        .flat_map(|n| {
            let mut chain = chain_of(&format!("n{n}.example.test."), 10 * n, 10 * u64::from(n), 1);
            chain.truncate(chain.len() - 2);
            chain
        })
        .collect();
    let mut engine = Engine::new(EngineConfig {
        slow: Some(Duration::from_millis(1)),
        max_tracked: CAPACITY,
        ..EngineConfig::default()
    });
    let mut findings = Vec::new();
    for obs in observations {
        engine.observe(obs, &mut findings);
    }
    let summary = engine.finish(ms(1_510), &mut findings);
    assert_eq!(lookups(&findings), Vec::<&LookupFinding>::new());
    let followed = summary.lookups.expect("lookups followed");
    assert_eq!(followed.counts.followed, 0);
    assert_eq!(
        summary.evictions["lookups"],
        u64::from(LOOKUPS) - CAPACITY as u64,
        "one client's query's forwards kept per entry, the oldest dropped"
    );
}

#[test]
fn lookups_are_not_followed_unless_asked() {
    let mut engine = Engine::new(EngineConfig::default());
    let mut findings = Vec::new();
    for obs in chain(4242, 0, 150) {
        engine.observe(obs, &mut findings);
    }
    let summary = engine.finish(ms(1_000), &mut findings);
    assert_eq!(findings, []);
    assert_eq!(summary.lookups, None);
    assert!(!summary.evictions.contains_key("lookups"));
}

#[test]
fn own_times_leave_out_the_time_forwards_were_awaited_once() {
    let at = |ms_at: u64| ms(ms_at);
    let hop = |sent: u64, answered: u64, forwards: Option<usize>| LookupHop {
        from: None,
        src: addr("10.244.0.2:1"),
        server: addr("10.255.0.53:53"),
        backend: None,
        to: None,
        via: None,
        id: 1,
        transport: Transport::Udp,
        sent: at(sent),
        answered: at(answered),
        rcode: 0,
        forwards,
        own: Duration::ZERO,
    };
    // Two overlapping forwards (a retry to another server), one answered after the query
    // it forwards was (the client had given up on it): only its part within counts.
    let mut hops = [
        hop(0, 100, None),
        hop(10, 60, Some(0)),
        hop(50, 90, Some(0)),
        hop(95, 120, Some(0)),
    ];
    set_own_times(&mut hops);
    let own: Vec<u128> = hops.iter().map(|hop| hop.own.as_millis()).collect();
    assert_eq!(own, [100 - 80 - 5, 50, 40, 25]);
}
