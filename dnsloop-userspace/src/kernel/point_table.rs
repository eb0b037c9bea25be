//! The kernel's point table (see `PointSlot`): userspace decides which slot each watched point
//! takes, and the programs search the slots by index.
use aya::{
    maps::{Array, MapData, MapError, PerCpuArray, PerCpuValues},
    Ebpf,
};
use dnsloop_shared::{
    names::{POINTS_MAP, POINT_COUNTERS_MAP},
    point::{ObservationPoint, PointCounters, PointSlot, POINT_CANDIDATES, POINT_SLOTS},
};
#[cfg(any(test, feature = "profiling"))]
use dnsloop_shared::{parse::LinkLayer, point::PointNamespaces};

use dnsloop_core::points::KernelPoint;

use super::programs::{possible_cpus, LoadError};

/// A point of an Ethernet interface whose packets leave and enter no watched namespace, as
/// the programs' test runs see theirs.
#[cfg(any(test, feature = "profiling"))]
pub fn ethernet_point(point: ObservationPoint) -> KernelPoint {
    KernelPoint {
        point,
        namespaces: PointNamespaces::NONE,
        link_layer: LinkLayer::Ethernet,
        gateway_mac: 0,
        via_gateway: PointNamespaces::NONE,
    }
}

fn slot(point: &KernelPoint) -> PointSlot {
    PointSlot::new(point.point, point.namespaces, point.link_layer as u8)
        .with_gateway(point.gateway_mac, point.via_gateway)
}

/// The point table as this run last wrote it.
pub struct PointTable {
    slots: Vec<PointSlot>,
}

impl PointTable {
    /// Reads the table: empty in a new run, the last run's points when its maps were pinned.
    pub fn read(ebpf: &Ebpf) -> Result<Self, LoadError> {
        let map = ebpf.map(POINTS_MAP).ok_or(LoadError::Missing(POINTS_MAP))?;
        let array: Array<_, PointSlot> = Array::try_from(map).map_err(points_error)?;
        let slots = (0..POINT_SLOTS)
            .map(|index| array.get(&index, 0))
            .collect::<Result<_, _>>()
            .map_err(points_error)?;
        Ok(Self { slots })
    }

    /// Makes the kernel's table hold `points` and no other. A point already there keeps its slot,
    /// and so its counters; a new one takes a free slot, its counters zeroed first. Returns the
    /// points for which none of their candidate slots was free.
    pub fn sync(
        &mut self,
        ebpf: &mut Ebpf,
        points: &[KernelPoint],
    ) -> Result<Vec<ObservationPoint>, LoadError> {
        let plan = plan(&self.slots, points);
        if !plan.fresh.is_empty() {
            let map = ebpf
                .map_mut(POINT_COUNTERS_MAP)
                .ok_or(LoadError::Missing(POINT_COUNTERS_MAP))?;
            let mut counters: PerCpuArray<_, PointCounters> =
                PerCpuArray::try_from(map).map_err(counters_error)?;
            let cpus = possible_cpus()?;
            for &index in &plan.fresh {
                let zero = PerCpuValues::try_from(vec![PointCounters::default(); cpus])
                    .map_err(|error| counters_error(MapError::IoError(error)))?;
                counters.set(index, zero, 0).map_err(counters_error)?;
            }
        }
        let map = ebpf
            .map_mut(POINTS_MAP)
            .ok_or(LoadError::Missing(POINTS_MAP))?;
        let mut array: Array<_, PointSlot> = Array::try_from(map).map_err(points_error)?;
        for &(index, slot) in &plan.writes {
            array.set(index, slot, 0).map_err(points_error)?;
            self.slots[index as usize] = slot;
        }
        Ok(plan.unplaced)
    }
}

/// The slot of `point` in the kernel's table, searched as the programs search it.
pub fn find_in_kernel(ebpf: &Ebpf, point: &ObservationPoint) -> Result<Option<u32>, MapError> {
    let map = ebpf.map(POINTS_MAP).ok_or_else(|| MapError::InvalidName {
        name: POINTS_MAP.into(),
    })?;
    let array: Array<&MapData, PointSlot> = Array::try_from(map)?;
    for index in candidate_slots(point) {
        if array.get(&index, 0)?.point == *point {
            return Ok(Some(index));
        }
    }
    Ok(None)
}

/// The slots `point` may take, in the order the programs search them.
fn candidate_slots(point: &ObservationPoint) -> impl Iterator<Item = u32> + Clone + '_ {
    (0..POINT_CANDIDATES).map(move |candidate| PointSlot::index(point, candidate))
}

fn points_error(source: MapError) -> LoadError {
    LoadError::Map {
        name: POINTS_MAP,
        source,
    }
}

fn counters_error(source: MapError) -> LoadError {
    LoadError::Map {
        name: POINT_COUNTERS_MAP,
        source,
    }
}

/// What `sync` changes.
#[derive(Debug, Default, PartialEq, Eq)]
struct Plan {
    /// Slots to write, new contents: points placed, updated or removed.
    writes: Vec<(u32, PointSlot)>,
    /// Slots newly taken, whose counters are another point's until zeroed.
    fresh: Vec<u32>,
    unplaced: Vec<ObservationPoint>,
}

fn plan(current: &[PointSlot], points: &[KernelPoint]) -> Plan {
    let mut slots = current.to_vec();
    let mut plan = Plan::default();
    // Points gone first: their slots may serve the new ones.
    for (index, slot) in slots.iter_mut().enumerate() {
        let wanted = points.iter().any(|wanted| wanted.point == slot.point);
        if !slot.is_free() && !wanted {
            *slot = PointSlot::FREE;
            plan.writes.push((index as u32, PointSlot::FREE));
        }
    }
    for wanted in points {
        let candidates =
            (0..POINT_CANDIDATES).map(|candidate| PointSlot::index(&wanted.point, candidate));
        let own = candidates
            .clone()
            .find(|&index| slots[index as usize].point == wanted.point);
        let (index, fresh) = match own {
            Some(index) => (index, false),
            None => match candidates
                .clone()
                .find(|&index| slots[index as usize].is_free())
            {
                Some(index) => (index, true),
                None => {
                    plan.unplaced.push(wanted.point);
                    continue;
                }
            },
        };
        let slot = slot(wanted);
        if fresh {
            plan.fresh.push(index);
        }
        if slots[index as usize] != slot {
            slots[index as usize] = slot;
            plan.writes.retain(|(written, _)| *written != index);
            plan.writes.push((index, slot));
        }
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;

    fn empty() -> Vec<PointSlot> {
        vec![PointSlot::FREE; POINT_SLOTS as usize]
    }

    fn at(ifindex: u32, direction: u8, leaves: u32) -> KernelPoint {
        KernelPoint {
            point: ObservationPoint::new(0, ifindex, direction),
            namespaces: PointNamespaces { leaves, enters: 0 },
            link_layer: LinkLayer::Ethernet,
            gateway_mac: 0,
            via_gateway: PointNamespaces::NONE,
        }
    }

    fn apply(slots: &mut [PointSlot], plan: &Plan) {
        for &(index, slot) in &plan.writes {
            slots[index as usize] = slot;
        }
    }

    fn search(slots: &[PointSlot], point: &ObservationPoint) -> Option<u32> {
        candidate_slots(point).find(|&index| slots[index as usize].point == *point)
    }

    #[test]
    fn the_node_interfaces_each_take_their_home_slot() {
        let points: Vec<KernelPoint> = (1..=1000)
            .flat_map(|ifindex| [at(ifindex, 0, 1), at(ifindex, 1, 2)])
            .collect();

        let plan = plan(&empty(), &points);

        assert!(plan.unplaced.is_empty());
        assert_eq!(plan.fresh.len(), 2000);
        for wanted in &points {
            assert!(plan
                .writes
                .contains(&(PointSlot::index(&wanted.point, 0), slot(wanted))));
        }
    }

    #[test]
    fn a_point_kept_keeps_its_slot_and_counters_and_a_changed_one_is_rewritten() {
        let mut slots = empty();
        let first = [at(3, 0, 1), at(4, 0, 1)];
        let placing = plan(&slots, &first);
        apply(&mut slots, &placing);

        let renumbered = [at(3, 0, 1), at(4, 0, 7)];
        let plan = plan(&slots, &renumbered);

        assert!(plan.fresh.is_empty(), "{plan:?}");
        assert_eq!(
            plan.writes,
            vec![(
                PointSlot::index(&renumbered[1].point, 0),
                slot(&renumbered[1])
            )]
        );
    }

    #[test]
    fn a_point_gone_frees_its_slot_for_the_next_one() {
        let mut slots = empty();
        let placing = plan(&slots, &[at(3, 0, 1)]);
        apply(&mut slots, &placing);

        let plan_without = plan(&slots, &[]);
        apply(&mut slots, &plan_without);

        assert_eq!(
            plan_without.writes,
            vec![(PointSlot::index(&at(3, 0, 1).point, 0), PointSlot::FREE)]
        );
        assert!(slots.iter().all(PointSlot::is_free));
    }

    #[test]
    fn pod_loopbacks_pass_collisions_and_are_found_as_the_programs_search() {
        let mut slots = empty();
        let node: Vec<KernelPoint> = (1..=1000)
            .flat_map(|ifindex| [at(ifindex, 0, 1), at(ifindex, 1, 1)])
            .collect();
        let loopbacks: Vec<KernelPoint> = (4096..4096 + 500)
            .map(|cookie| ethernet_point(ObservationPoint::new(cookie, 1, 1)))
            .collect();
        let all: Vec<KernelPoint> = node.iter().chain(&loopbacks).copied().collect();

        let plan = plan(&slots, &all);
        apply(&mut slots, &plan);

        // 2500 points in 4096 slots.
        assert_eq!(plan.unplaced, []);
        for wanted in &all {
            let index = search(&slots, &wanted.point).expect("placed points are found");
            assert_eq!(slots[index as usize], slot(wanted));
        }
    }

    #[test]
    fn a_loopback_whose_candidate_slots_the_node_interfaces_hold_is_left_unplaced() {
        let loopback = ObservationPoint::new(77, 1, 1);
        // The node's point whose home is slot `index`.
        let homed_at = |index: u32| at(index / 2, (index % 2) as u8, 1);
        let mut points: Vec<KernelPoint> = (0..POINT_CANDIDATES)
            .map(|candidate| homed_at(PointSlot::index(&loopback, candidate)))
            .collect();
        points.push(ethernet_point(loopback));

        let plan = plan(&empty(), &points);

        assert_eq!(plan.unplaced, vec![loopback]);
    }
}
