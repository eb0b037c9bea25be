//! Moving a bench thread into one of the lab's network namespaces.
use std::{fs::File, os::fd::AsRawFd as _, path::Path};

use anyhow::{bail, Context as _, Result};

/// Moves the calling thread into the network namespace mounted at `netns`; the rest of the
/// process stays where it is.
pub fn enter(netns: &Path) -> Result<()> {
    let namespace = File::open(netns).with_context(|| format!("opening {}", netns.display()))?;
    // SAFETY: a valid namespace fd; only this thread moves.
    if unsafe { libc::setns(namespace.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        bail!(
            "entering {}: {}",
            netns.display(),
            std::io::Error::last_os_error()
        );
    }
    Ok(())
}
