//! Stopping processes by PID: SIGTERM, a short grace period, then SIGKILL.
use std::{
    fs, thread,
    time::{Duration, Instant},
};

const GRACE: Duration = Duration::from_secs(2);
const POLL: Duration = Duration::from_millis(20);

/// Sends SIGTERM to every PID, waits up to two seconds for them to end, then SIGKILLs the rest.
pub(crate) fn terminate(pids: &[u32]) {
    for &pid in pids {
        signal(pid, libc::SIGTERM);
    }
    let deadline = Instant::now() + GRACE;
    while pids.iter().any(|&pid| is_running(pid)) && Instant::now() < deadline {
        thread::sleep(POLL);
    }
    for &pid in pids.iter().filter(|&&pid| is_running(pid)) {
        signal(pid, libc::SIGKILL);
    }
}

/// Sends `signal` to the single process `pid`.
pub(crate) fn signal(pid: u32, signal: libc::c_int) {
    // PID 0, 1 and anything that does not fit a positive pid_t would address process groups,
    // init, or everything: never signal those.
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return;
    };
    if pid > 1 {
        // SAFETY: kill has no memory-safety preconditions; a stale PID only yields ESRCH.
        unsafe { libc::kill(pid, signal) };
    }
}

/// Whether `pid` exists and has not yet exited (a zombie waiting to be reaped counts as ended).
pub(crate) fn is_running(pid: u32) -> bool {
    let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // "PID (COMM) STATE ...": COMM may itself contain ") ", so look after the last one.
    stat.rsplit_once(") ")
        .and_then(|(_, rest)| rest.chars().next())
        .is_some_and(|state| state != 'Z' && state != 'X')
}
