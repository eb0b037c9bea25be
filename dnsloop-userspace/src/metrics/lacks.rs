//! `dnsloop_kernel_lacks`: what this kernel lacks of what dnsloop uses, one series each, so
//! that a fleet's dashboard shows which nodes run with less.
use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{family::Family, gauge::Gauge},
    registry::Registry,
};

use crate::kernel::features::Lack;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FeatureLabel {
    pub feature: &'static str,
}

/// The gauge family, as registered: 1 for each feature lacking, no series for the others.
#[derive(Clone, Debug, Default)]
pub struct KernelLacks(Family<FeatureLabel, Gauge>);

impl KernelLacks {
    pub fn register(registry: &mut Registry) -> Self {
        let lacks = Self::default();
        registry.register(
            "dnsloop_kernel_lacks",
            "Kernel features dnsloop does without on this node, by name (tcx, tc_netns_cookie, bpf_loop, \
             drop_reasons, netns_cookie): 1 for each one lacking; what each costs is said at start",
            lacks.0.clone(),
        );
        lacks
    }

    pub fn note(&self, lacks: &[Lack]) {
        for lack in lacks {
            self.0
                .get_or_create(&FeatureLabel {
                    feature: lack.name(),
                })
                .set(1);
        }
    }
}
