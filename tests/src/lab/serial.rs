//! One lab at a time within a test binary.
//!
//! Labs do not see each other's traffic, but a loop storm in one loads a 2-core machine enough to
//! delay another test's tracer past the deadlines the tests assert (a loop reported within a
//! second). End-to-end tests that bring a lab up hold this lock, so that what they measure is
//! dnsloop, not their neighbours.
use std::sync::{Mutex, MutexGuard};

static ONE_LAB_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Waits for the other tests of this binary to be done with their labs. Take it before the lab
/// is brought up, so that it is released after the lab is torn down.
pub fn one_lab_at_a_time() -> MutexGuard<'static, ()> {
    // A test that failed while holding the lock has torn its lab down all the same.
    ONE_LAB_AT_A_TIME
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
