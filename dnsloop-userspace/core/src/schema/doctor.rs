//! What `dnsloop doctor --output json` prints: one `check` per line, then a `summary`.
use serde::{Deserialize, Serialize};

/// One line of `dnsloop doctor --output json`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum DoctorRecord {
    /// One check of the node's DNS configuration.
    Check(CheckRecord),
    /// The checks' tally, last.
    Summary(DoctorSummaryRecord),
}

/// One check of the node's DNS configuration, in report order (errors first).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckRecord {
    /// Stable and dotted, `area.what` (`resolv.loopback-upstream`), for scripts.
    pub id: String,
    /// `error`, `warning`, `info` or `ok`.
    pub severity: String,
    /// What was checked, in a few words (`nameserver 127.0.0.53`).
    pub subject: String,
    /// One sentence: what is wrong (or right), and why it matters.
    pub summary: String,
    /// How to fix it; `null` when there is nothing to fix.
    pub fix: Option<String>,
    /// The file the check is about; `null` when it is about no one file.
    pub file: Option<String>,
    /// The line of `file`; `null` when the check is about the whole file.
    pub line: Option<u32>,
}

/// How many checks came out at each severity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DoctorSummaryRecord {
    /// Checks that found an error.
    pub error: usize,
    /// Checks that found something to look at.
    pub warning: usize,
    /// Checks that say how things are, or could not check.
    pub info: usize,
    /// Checks that passed.
    pub ok: usize,
}
