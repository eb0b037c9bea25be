//! What doctor reports: one [`Check`] per thing it looked at, with how bad it is, where it is,
//! and what to do about it.
use std::fmt;

/// How bad a check's result is. The order is the report's order: errors first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Severity {
    /// DNS is broken or loops on this node.
    Error,
    /// DNS works but something will bite: a silent loop, wasted queries, dropped packets.
    Warning,
    /// A fact worth knowing, or a check that could not be made from the files at hand.
    Info,
    /// Looked at, nothing wrong.
    Ok,
}

impl Severity {
    pub const ALL: [Severity; 4] = [Self::Error, Self::Warning, Self::Info, Self::Ok];

    pub fn name(self) -> &'static str {
        match self {
            Self::Error => "error",
            Self::Warning => "warning",
            Self::Info => "info",
            Self::Ok => "ok",
        }
    }
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Where on the node (or in a given Corefile) a check points: the line to look at or edit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Location {
    pub file: String,
    pub line: Option<u32>,
}

impl Location {
    pub fn file(file: impl Into<String>) -> Self {
        Self {
            file: file.into(),
            line: None,
        }
    }

    pub fn line(file: impl Into<String>, line: u32) -> Self {
        Self {
            file: file.into(),
            line: Some(line),
        }
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "{}:{line}", self.file),
            None => f.write_str(&self.file),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Check {
    /// Stable, dotted: `area.what`, for scripts and for `grep`.
    pub id: &'static str,
    pub severity: Severity,
    /// What was checked, in a few words: `nameserver 127.0.0.53`, `forward . 10.96.0.10`.
    pub subject: String,
    /// One sentence: what is wrong (or right), and why it matters.
    pub summary: String,
    /// How to fix it; none when there is nothing to fix.
    pub fix: Option<String>,
    pub location: Option<Location>,
}

impl Check {
    pub fn new(
        id: &'static str,
        severity: Severity,
        subject: impl Into<String>,
        summary: impl Into<String>,
    ) -> Self {
        Self {
            id,
            severity,
            subject: subject.into(),
            summary: summary.into(),
            fix: None,
            location: None,
        }
    }

    pub fn fix(mut self, fix: impl Into<String>) -> Self {
        self.fix = Some(fix.into());
        self
    }

    pub fn at(mut self, location: Location) -> Self {
        self.location = Some(location);
        self
    }

    /// Points at `location` when there is one.
    pub fn at_opt(mut self, location: Option<Location>) -> Self {
        self.location = location;
        self
    }
}

/// How many checks came out at each severity.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    pub errors: usize,
    pub warnings: usize,
    pub info: usize,
    pub ok: usize,
}

impl Tally {
    pub fn of(checks: &[Check]) -> Self {
        let mut tally = Self::default();
        for check in checks {
            match check.severity {
                Severity::Error => tally.errors += 1,
                Severity::Warning => tally.warnings += 1,
                Severity::Info => tally.info += 1,
                Severity::Ok => tally.ok += 1,
            }
        }
        tally
    }

    pub fn count(&self, severity: Severity) -> usize {
        match severity {
            Severity::Error => self.errors,
            Severity::Warning => self.warnings,
            Severity::Info => self.info,
            Severity::Ok => self.ok,
        }
    }
}
