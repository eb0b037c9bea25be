//! Turning the kernel's monotonic timestamps into wall-clock time.
use std::time::{Duration, SystemTime};

/// Maps `bpf_ktime_get_ns` (CLOCK_MONOTONIC) readings to wall-clock time, anchored once at start
/// so that the order and spacing of events are exactly the kernel's.
#[derive(Clone, Copy, Debug)]
pub struct MonotonicClock {
    anchor_monotonic_ns: u64,
    anchor_wall: SystemTime,
}

impl MonotonicClock {
    pub fn anchored_now() -> Self {
        Self {
            anchor_monotonic_ns: monotonic_now_ns(),
            anchor_wall: SystemTime::now(),
        }
    }

    /// The current time on this clock.
    pub fn now(&self) -> SystemTime {
        self.wall_time(monotonic_now_ns())
    }

    pub fn wall_time(&self, monotonic_ns: u64) -> SystemTime {
        if monotonic_ns >= self.anchor_monotonic_ns {
            self.anchor_wall + Duration::from_nanos(monotonic_ns - self.anchor_monotonic_ns)
        } else {
            self.anchor_wall - Duration::from_nanos(self.anchor_monotonic_ns - monotonic_ns)
        }
    }
}

/// Now on CLOCK_MONOTONIC, the clock `bpf_ktime_get_ns` reads.
pub fn monotonic_now_ns() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: CLOCK_MONOTONIC always exists; `now` is a valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_timestamps_keep_their_spacing() {
        let clock = MonotonicClock {
            anchor_monotonic_ns: 5_000,
            anchor_wall: SystemTime::UNIX_EPOCH + Duration::from_secs(100),
        };
        assert_eq!(
            clock.wall_time(5_000),
            SystemTime::UNIX_EPOCH + Duration::from_secs(100)
        );
        assert_eq!(
            clock.wall_time(1_005_000),
            SystemTime::UNIX_EPOCH + Duration::from_secs(100) + Duration::from_millis(1)
        );
        assert_eq!(
            clock.wall_time(4_000),
            SystemTime::UNIX_EPOCH + Duration::from_secs(100) - Duration::from_micros(1)
        );
    }
}
