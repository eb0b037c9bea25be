//! [`LabBuilder`]: the one way a lab comes up, so that none comes up without its turn.
use std::sync::{
    atomic::{AtomicU32, Ordering},
    Arc,
};

use anyhow::Result;

use super::{turn::LabTurn, Lab, Scenario};

/// Numbers the labs of this process, so that each gets its own prefix.
static NEXT_INSTANCE: AtomicU32 = AtomicU32::new(0);

/// What lab to bring up: from [`Lab::builder`], brought up by [`LabBuilder::start`].
#[must_use = "a builder brings nothing up until `start`"]
pub struct LabBuilder {
    scenario: Scenario,
    nodes: usize,
    prefix: Option<String>,
    turn: Option<Arc<LabTurn>>,
}

impl LabBuilder {
    pub(super) fn new(scenario: Scenario) -> LabBuilder {
        LabBuilder {
            scenario,
            nodes: scenario.default_nodes(),
            prefix: None,
            turn: None,
        }
    }

    /// On `nodes` nodes (1 to [`super::MAX_NODES`]) instead of the scenario's default
    /// ([`Scenario::default_nodes`]: one for the node scenarios).
    pub fn nodes(mut self, nodes: usize) -> LabBuilder {
        self.nodes = nodes;
        self
    }

    /// With namespaces named `<prefix>-node`, `<prefix>-client`, ... and state in
    /// `/run/dnsloop-lab/<prefix>/`, instead of a prefix of its own (`dl<pid>x<counter>`).
    /// With several nodes, node 0's namespaces are named as in a one-node lab, node `i`'s
    /// `<prefix>-node<i>`, `<prefix>-client<i>`, `<prefix>-coredns<i>a`, ..., and
    /// `<prefix>-fabric` joins them. Starting fails if a lab with that prefix is already up.
    pub fn prefix(mut self, prefix: &str) -> LabBuilder {
        self.prefix = Some(prefix.to_owned());
        self
    }

    /// In `other`'s turn, for a test that needs two labs at once: waiting for a turn of its
    /// own while holding `other`'s would wait forever.
    pub fn beside(mut self, other: &Lab) -> LabBuilder {
        self.turn = other.turn.clone();
        self
    }

    /// Waits until no other lab on this host is up (see [`super::turn`]), then brings this one
    /// up; the lab holds that turn until it is torn down.
    pub fn start(self) -> Result<Lab> {
        let prefix = self.prefix.unwrap_or_else(|| {
            let instance = NEXT_INSTANCE.fetch_add(1, Ordering::Relaxed);
            format!("dl{}x{instance}", std::process::id())
        });
        Lab::bring_up(&prefix, self.scenario, self.nodes, self.turn)
    }
}
