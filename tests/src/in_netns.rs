//! Running test code on a thread inside a network namespace, entered with `setns` by path.
use std::{fs::File, io, os::fd::AsRawFd as _, path::Path, thread};

/// Runs `work` on a thread of its own inside the network namespace whose file is `path` (as `ip
/// netns` mounts it), and returns what it returned. `setns` moves only the calling thread, so
/// the test's own thread stays where it was.
pub fn run<T: Send>(path: &Path, work: impl FnOnce() -> T + Send) -> io::Result<T> {
    let namespace = File::open(path)?;
    thread::scope(|scope| {
        scope
            .spawn(|| {
                // SAFETY: setns on a namespace file we hold open; it affects only this thread.
                if unsafe { libc::setns(namespace.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok(work())
            })
            .join()
            .unwrap_or_else(|_| {
                Err(io::Error::other(
                    "the test's thread in the namespace panicked",
                ))
            })
    })
}
