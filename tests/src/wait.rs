//! Waiting for the state a test checks, rather than for a fixed time: a check that holds on a
//! fast machine at 500 ms may hold only at 2 s on a loaded one, and a storm that is still going
//! at 1.5 s on one machine has burnt out by then on another.
use std::{
    thread,
    time::{Duration, Instant},
};

const POLL: Duration = Duration::from_millis(50);

/// Calls `check` until it returns `Ok`, or `timeout` has passed; then returns what the last
/// call said was missing, for the test's failure message.
pub fn until<T>(
    timeout: Duration,
    mut check: impl FnMut() -> Result<T, String>,
) -> Result<T, String> {
    let deadline = Instant::now() + timeout;
    loop {
        match check() {
            Ok(done) => return Ok(done),
            Err(missing) if Instant::now() >= deadline => {
                return Err(format!("after {timeout:?}: {missing}"))
            }
            Err(_) => thread::sleep(POLL),
        }
    }
}
