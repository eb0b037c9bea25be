//! `dnsloop doctor`: read a node's DNS configuration from its files and report what loops or
//! breaks, each finding with its file and line and how to fix it.
//!
//! files below --root, --corefile -> `read` (one parser per kind of file) -> `node::Node` (the
//! snapshot) -> `checks` (one module per area) -> `output` (text or JSON lines).
//!
//! Exit status: 0 when no check is an error, 1 when one is, 2 when doctor could not run.
mod address;
mod check;
mod checks;
mod node;
mod output;
mod read;
#[cfg(test)]
mod tests;

use std::{fs, io, io::Write, path::PathBuf};

use thiserror::Error;

use self::{
    check::{Check, Tally},
    node::Node,
    read::{
        corefile::{self, LoadError},
        root::NodeRoot,
    },
};
use crate::sink::OutputFormat;

/// conntrack's counters, which `trace` also reads, from the file doctor reads them from.
pub use self::read::conntrack::{parse_stats as parse_conntrack_stats, Stats as ConntrackStats};

/// Some check is an error.
pub const EXIT_ERRORS: u8 = 1;
/// Doctor could not run: its input is not there.
pub const EXIT_CANNOT_RUN: u8 = 2;

/// What to examine and how to report it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// Directory holding the node's root: its files are read below it, and absolute symlinks
    /// stay inside it.
    pub root: PathBuf,
    /// Corefiles, or ConfigMaps holding one, read as given (not below `root`).
    pub corefiles: Vec<PathBuf>,
    pub output: OutputFormat,
}

impl Default for Config {
    /// The node doctor runs on, as text.
    fn default() -> Self {
        Self {
            root: PathBuf::from("/"),
            corefiles: Vec::new(),
            output: OutputFormat::Text,
        }
    }
}

#[derive(Debug, Error)]
pub enum DoctorError {
    #[error("--root {}: {source}; give the directory holding the node's /", path.display())]
    Root {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("--root {} is not a directory; give the directory holding the node's /", path.display())]
    RootNotDirectory { path: PathBuf },
    #[error(transparent)]
    Corefile(#[from] LoadError),
    #[error("writing the report failed")]
    Output(#[source] io::Error),
}

/// The exit status of a doctor run: 0 when no check is an error, [`EXIT_ERRORS`] when one is,
/// [`EXIT_CANNOT_RUN`] when doctor could not run (the error is printed on stderr).
pub fn exit_status(result: &Result<Tally, DoctorError>) -> u8 {
    match result {
        Ok(tally) if tally.errors > 0 => EXIT_ERRORS,
        Ok(_) => 0,
        Err(error) => {
            eprintln!("dnsloop: doctor: {error}");
            EXIT_CANNOT_RUN
        }
    }
}

/// Reads the node, runs every check and writes the report to `out`.
pub fn doctor(config: &Config, out: &mut impl Write) -> Result<Tally, DoctorError> {
    let checks = examine(config)?;
    output::write(config.output, &checks, out).map_err(DoctorError::Output)?;
    Ok(Tally::of(&checks))
}

/// Every check's result, in report order.
fn examine(config: &Config) -> Result<Vec<Check>, DoctorError> {
    let metadata = fs::metadata(&config.root).map_err(|source| DoctorError::Root {
        path: config.root.clone(),
        source,
    })?;
    if !metadata.is_dir() {
        return Err(DoctorError::RootNotDirectory {
            path: config.root.clone(),
        });
    }
    let corefiles = config
        .corefiles
        .iter()
        .map(|path| corefile::load(path))
        .collect::<Result<Vec<_>, _>>()?;
    let node = Node::read(&NodeRoot::new(config.root.clone()), corefiles);
    let mut checks = checks::run(&node);
    // Errors first; within a severity, the checks' own order (stable sort).
    checks.sort_by_key(|check| check.severity);
    Ok(checks)
}
