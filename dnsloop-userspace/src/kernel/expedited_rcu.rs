//! `--expedite-attach`: expedited RCU grace periods while dnsloop attaches or detaches in bulk.
//!
//! Creating or closing a TCX link waits out an RCU grace period, under the kernel's one
//! networking lock, so links cannot overlap: at about 12 ms a grace period, 200 links take 2.5 s.
//! Expedited grace periods end in microseconds, at the price of an interrupt to every CPU each,
//! node-wide, for as long as the setting holds.
use std::{
    fs, io,
    path::{Path, PathBuf},
};

const KNOB: &str = "/sys/kernel/rcu_expedited";

/// The kernel's RCU grace periods expedited until dropped, then back to what they were.
pub struct ExpeditedRcu {
    knob: PathBuf,
    /// What to write back; `None` when they were expedited already.
    previous: Option<String>,
}

impl ExpeditedRcu {
    /// Expedites grace periods; when the kernel refuses (e.g. /sys mounted read-only in a
    /// container), says so and carries on at the normal pace.
    pub fn begin() -> Option<Self> {
        match Self::begin_at(Path::new(KNOB)) {
            Ok(expedited) => Some(expedited),
            Err(error) => {
                eprintln!(
                    "dnsloop: --expedite-attach: cannot write {KNOB} ({error}); attaching at the normal pace (mount /sys read-write to allow it)"
                );
                None
            }
        }
    }

    fn begin_at(knob: &Path) -> io::Result<Self> {
        let previous = fs::read_to_string(knob)?.trim().to_owned();
        if previous != "0" {
            return Ok(Self {
                knob: knob.to_owned(),
                previous: None,
            });
        }
        fs::write(knob, "1")?;
        Ok(Self {
            knob: knob.to_owned(),
            previous: Some(previous),
        })
    }
}

impl Drop for ExpeditedRcu {
    fn drop(&mut self) {
        let Some(previous) = &self.previous else {
            return;
        };
        if let Err(error) = fs::write(&self.knob, previous) {
            eprintln!(
                "dnsloop: could not set {} back to {previous} ({error}): RCU grace periods stay expedited until you run `echo {previous} > {}`",
                self.knob.display(),
                self.knob.display()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expedites_while_held_and_restores_the_setting() {
        let dir = tempfile::tempdir().unwrap();
        let knob = dir.path().join("rcu_expedited");
        fs::write(&knob, "0\n").unwrap();
        let expedited = ExpeditedRcu::begin_at(&knob).unwrap();
        assert_eq!(fs::read_to_string(&knob).unwrap(), "1");
        drop(expedited);
        assert_eq!(fs::read_to_string(&knob).unwrap(), "0");
    }

    #[test]
    fn leaves_a_setting_expedited_by_someone_else_alone() {
        let dir = tempfile::tempdir().unwrap();
        let knob = dir.path().join("rcu_expedited");
        fs::write(&knob, "1\n").unwrap();
        drop(ExpeditedRcu::begin_at(&knob).unwrap());
        assert_eq!(fs::read_to_string(&knob).unwrap(), "1\n");
    }

    #[test]
    fn a_missing_knob_is_an_error_to_report() {
        let dir = tempfile::tempdir().unwrap();
        assert!(ExpeditedRcu::begin_at(&dir.path().join("absent")).is_err());
    }
}
