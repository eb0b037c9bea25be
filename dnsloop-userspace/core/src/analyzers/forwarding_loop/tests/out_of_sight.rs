//! A loop whose path the capture does not show: the storm across one interface is a possible
//! loop; one answered, or a chain of forwarders to a dead upstream as fast as its clients ask,
//! is none.
use super::*;
use crate::{analyzers::forwarding_loop::storm::STORM_WINDOW, finding::Unconfirmable};

/// The overlay, the only interface captured, as a capture of it alone places it: each far end
/// is the host at the packet's address (`source::capture_file::placement`, rule c).
const INTO_NODE: Spot = spot(
    "vxlan0",
    Direction::Ingress,
    Some("host 10.244.1.0"),
    Some(NODE),
);
const OUT_OF_NODE: Spot = spot(
    "vxlan0",
    Direction::Egress,
    Some(NODE),
    Some("host 10.244.1.3"),
);

/// `per_way` queries each way across the overlay, 200 µs apart, from one sender each way,
/// each under a new id, and each answered at once when `answered`.
fn storm(per_way: u16, answered: bool) -> Vec<Finding> {
    let mut observations = Vec::new();
    for n in 0..per_way {
        let at = 200 * u64::from(n);
        for (spot, back, from, to, id) in [
            (INTO_NODE, OUT_OF_NODE, "10.244.1.0", "10.244.0.3:53", 2 * n),
            (
                OUT_OF_NODE,
                INTO_NODE,
                "10.244.0.0",
                "10.244.1.3:53",
                2 * n + 1,
            ),
        ] {
            let client = format!("{from}:{}", 20000 + n);
            observations.push(query(NAME).id(id).from(&client).to(to).at_us(at).seen(spot));
            if answered {
                let answer = reply(NAME).id(id).from(to).to(&client).at_us(at + 100);
                observations.push(answer.seen(back));
            }
        }
    }
    let end = us(0) + STORM_WINDOW + std::time::Duration::from_secs(1);
    run(&mut analyzer(), observations, end)
}

#[test]
fn a_question_storming_across_one_interface_unanswered_is_a_possible_loop() {
    let found = loops(storm(5000, false));
    assert_eq!(found.len(), 1, "{found:#?}");
    let found = &found[0];
    assert_eq!(found.unconfirmed.len(), 1);
    assert_eq!(found.unconfirmed[0].why, Unconfirmable::PathNotShown);
    assert!(
        found
            .summary
            .starts_with("possible loop: www.example.test. A: asked 10000 times in 1.0 s"),
        "{}",
        found.summary
    );
    assert_eq!(found.path.len(), 4, "its first crossings");
}

#[test]
fn an_answered_or_slow_storm_is_no_loop() {
    assert!(storm(5000, true).is_empty(), "answered");
    assert!(storm(1400, false).is_empty(), "as fast as clients ask");
}
