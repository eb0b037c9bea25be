//! One lab at a time on a host.
//!
//! Labs do not see each other's traffic, but a loop storm in one loads a 2-core machine enough to
//! delay another test's tracer past the deadlines the tests assert (a loop reported within a
//! second). So every lab holds a turn from before it is brought up until after it is torn down
//! (see [`super::LabBuilder::start`]), and what a test measures is dnsloop, not its neighbours.
use std::{
    fs::{self, File, OpenOptions},
    io,
    os::fd::AsRawFd as _,
};

use anyhow::{Context as _, Result};

use super::state;

/// The lock file, beside the labs' state directories; a prefix has no `.`, so no lab is named
/// like it.
const TURN_FILE: &str = "turn.lock";

/// A lab's turn: an exclusive `flock` on [`TURN_FILE`], held until this is dropped. `flock`
/// locks an open file, not a process, so the test threads of one binary wait for each other
/// just as separate processes do.
pub(crate) struct LabTurn {
    _locked: File,
}

impl LabTurn {
    /// Waits until no other lab on this host holds a turn, then takes it.
    pub(crate) fn take() -> Result<LabTurn> {
        let root = state::root();
        fs::create_dir_all(root).with_context(|| format!("creating {}", root.display()))?;
        let path = root.join(TURN_FILE);
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .with_context(|| format!("opening {}", path.display()))?;
        lock(&file).with_context(|| format!("waiting for the lab lock {}", path.display()))?;
        Ok(LabTurn { _locked: file })
    }
}

fn lock(file: &File) -> io::Result<()> {
    loop {
        // SAFETY: flock on a file we hold open; closing it releases the lock.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } == 0 {
            return Ok(());
        }
        let error = io::Error::last_os_error();
        if error.kind() != io::ErrorKind::Interrupted {
            return Err(error);
        }
    }
}
