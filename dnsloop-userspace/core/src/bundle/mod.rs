//! A capture bundle: what `dnsloop capture` and `trace --record` leave behind for whoever
//! looks into a fault later, here or elsewhere, in a directory of its own:
//!
//! - `capture.pcapng`: the packets as the kernel programs saw them, one interface block per
//!   interface (named, and described so that `dnsloop analyze` places them as live), direction
//!   flags, and a comment on each packet that belongs to a finding (see [`pcapng`]);
//! - `report.json` ([`CaptureReport`]): the findings and summary (the records `trace --output
//!   json` prints), the interfaces, versions, and the node's DNS configuration at capture time
//!   (resolv.conf, sysctls, and `dnsloop doctor`'s checks of it);
//! - `report.md`: the same for a person.
//!
//! With names redacted (`--redact-names`), the reports write them as keyed hashes, and the
//! packet file is left out: every query and answer in it carries names, in questions, answers
//! and the targets of CNAME, SRV and PTR records, compressed. Rewriting them all is a DNS
//! rewriter whose every miss leaks a name, and packets rewritten, their lengths and checksums
//! changed, are no longer the evidence they were. The reports say it was left out, and why.
//!
//! A bundle never overwrites another: its files are created new, in a directory that holds
//! none of them yet.
mod markdown;
mod node;
pub mod pcapng;
pub mod private;

use std::{
    fmt,
    fs::File,
    io::{self, BufWriter},
    path::{Path, PathBuf},
    time::{Duration, SystemTime},
};

use thiserror::Error;

use pcapng::{InterfaceRecord, PcapngOptions, PcapngReport, PcapngWriter};

use crate::{
    analyzers::Summary,
    finding::Finding,
    present::names::Names,
    schema::{
        CaptureReport, CapturedInterface, PcapngFile, Record, RecordedBundle, SummaryRecord,
        SummarySource,
    },
    sink::{Sink as _, TextSink},
    source::RawPacket,
};

pub use node::NodeConfig;

pub const PCAPNG_FILE: &str = "capture.pcapng";
pub const JSON_REPORT: &str = "report.json";
pub const MARKDOWN_REPORT: &str = "report.md";

/// What keeps a bundle from being written.
#[derive(Debug, Error)]
pub enum BundleError {
    #[error("creating {}", .0.display())]
    Create(PathBuf, #[source] io::Error),
    #[error(
        "{} already exists: dnsloop does not overwrite a bundle; choose another directory or \
         move it away",
        .0.display()
    )]
    Exists(PathBuf),
    #[error("writing {}", .0.display())]
    Write(PathBuf, #[source] io::Error),
}

/// Creates `dir` if needed; refuses one that already holds a bundle, which would be lost.
pub fn prepare_dir(dir: &Path) -> Result<(), BundleError> {
    private::create_dir_all(dir).map_err(|error| BundleError::Create(dir.to_path_buf(), error))?;
    for name in [PCAPNG_FILE, JSON_REPORT, MARKDOWN_REPORT] {
        let path = dir.join(name);
        if path.exists() {
            return Err(BundleError::Exists(path));
        }
    }
    Ok(())
}

/// What a bundle says of how it was made, besides its packets and findings.
pub struct About<'a> {
    /// When the capture started (the first packet's time, for a recorded bundle).
    pub started: SystemTime,
    /// How long it was to last.
    pub duration_limit: Duration,
    /// The packet file's size limit, for the note saying it was reached.
    pub max_bytes: u64,
    /// The node's DNS configuration, read when the bundle is written.
    pub node: &'a NodeConfig,
    /// For a bundle `trace --record` wrote: what made it.
    pub recorded: Option<RecordedBundle>,
}

/// A bundle being gathered: packets go to its packet file as they come (held there a while for
/// the findings that comment them), findings and the summary are kept for its reports.
pub struct Bundle {
    dir: PathBuf,
    /// `None`: names are redacted, and the packets, which carry them, are left out.
    pcapng: Option<PcapngWriter<BufWriter<File>>>,
    /// How the reports write names: the findings come with theirs written so.
    names: Names,
    /// The findings as `trace --output json` prints them.
    findings_json: Vec<Record>,
    /// The summary, likewise.
    summary_json: Option<SummaryRecord>,
    /// The same, as `trace` prints them for a person.
    text: Vec<u8>,
    findings: u64,
    packets: u64,
    /// The interfaces packets were seen on, as recorded in the pcapng file.
    interfaces: Vec<(String, String)>,
    /// Packets on an interface no longer known (it went away meanwhile): not in the file.
    unplaced: u64,
}

impl Bundle {
    /// Starts the bundle in `dir`, which [`prepare_dir`] made ready: its packet file first,
    /// unless `names` are redacted (then there is none).
    pub fn create(dir: &Path, options: PcapngOptions, names: &Names) -> Result<Self, BundleError> {
        let pcapng = if names.is_redacted() {
            None
        } else {
            let path = dir.join(PCAPNG_FILE);
            let file = private::create_new_file(&path).map_err(|error| match error.kind() {
                io::ErrorKind::AlreadyExists => BundleError::Exists(path.clone()),
                _ => BundleError::Create(path.clone(), error),
            })?;
            let pcapng = PcapngWriter::new(BufWriter::new(file), options)
                .map_err(|error| BundleError::Write(path, error))?;
            Some(pcapng)
        };
        Ok(Self {
            dir: dir.to_path_buf(),
            pcapng,
            names: names.clone(),
            findings_json: Vec::new(),
            summary_json: None,
            text: Vec::new(),
            findings: 0,
            packets: 0,
            interfaces: Vec::new(),
            unplaced: 0,
        })
    }

    /// Puts `packet` in the packet file, on `interface`; `None`: its interface had gone away
    /// before it could be named, so it is only counted.
    pub fn packet(
        &mut self,
        packet: RawPacket,
        interface: Option<InterfaceRecord<'_>>,
    ) -> Result<(), BundleError> {
        let Some(interface) = interface else {
            self.unplaced += 1;
            return Ok(());
        };
        let recorded = (
            interface.name.to_string(),
            interface.description.to_string(),
        );
        if !self.interfaces.contains(&recorded) {
            self.interfaces.push(recorded);
        }
        self.packets += 1;
        let Some(pcapng) = &mut self.pcapng else {
            return Ok(());
        };
        pcapng
            .packet(packet, interface)
            .map_err(|error| BundleError::Write(self.dir.join(PCAPNG_FILE), error))
    }

    /// Keeps `finding`, seen on `node`, for the reports, and comments the packets it names.
    pub fn finding(&mut self, finding: &Finding, node: &str) -> io::Result<()> {
        self.findings += 1;
        if let Some(pcapng) = &mut self.pcapng {
            pcapng.finding(finding);
        }
        self.findings_json.push(Record::finding(finding, node));
        TextSink::new(&mut self.text, &self.names).finding(finding)
    }

    /// Keeps the run's summary, seen on `node`, for the reports (the first one given).
    pub fn summary(
        &mut self,
        summary: &Summary,
        source: &SummarySource,
        node: &str,
    ) -> io::Result<()> {
        if self.summary_json.is_some() {
            return Ok(());
        }
        self.summary_json = Some(SummaryRecord::new(summary, source.clone(), node));
        TextSink::new(&mut self.text, &self.names).summary(summary, source)
    }

    /// Writes the packets that have waited long enough for the findings that name them.
    pub fn advance(&mut self, now: SystemTime) -> Result<(), BundleError> {
        let Some(pcapng) = &mut self.pcapng else {
            return Ok(());
        };
        pcapng
            .advance(now)
            .map_err(|error| BundleError::Write(self.dir.join(PCAPNG_FILE), error))
    }

    /// Packets taken so far.
    pub fn packets(&self) -> u64 {
        self.packets
    }

    /// Findings taken so far.
    pub fn findings(&self) -> u64 {
        self.findings
    }

    /// Finishes the packet file and writes the reports.
    pub fn finish(self, about: About<'_>) -> Result<Written, BundleError> {
        let pcapng_path = self.dir.join(PCAPNG_FILE);
        let report = self
            .pcapng
            .map(PcapngWriter::finish)
            .transpose()
            .map_err(|error| BundleError::Write(pcapng_path, error))?;
        let note = report
            .as_ref()
            .and_then(|report| report.note(about.max_bytes));
        let report_json = CaptureReport {
            dnsloop: env!("CARGO_PKG_VERSION").to_owned(),
            kernel: about.node.kernel.clone(),
            hostname: about.node.hostname.clone(),
            started: about.started.into(),
            ended: SystemTime::now().into(),
            duration_limit_s: about.duration_limit.as_secs_f64(),
            pcapng: report
                .as_ref()
                .map(|report| pcapng_json(report, note.as_deref(), self.unplaced)),
            names_redacted: self.names.is_redacted(),
            interfaces: self
                .interfaces
                .iter()
                .map(|(name, description)| CapturedInterface {
                    ifname: name.clone(),
                    description: description.clone(),
                })
                .collect(),
            findings: self.findings_json,
            summary: self.summary_json,
            node: about.node.json(),
            recorded: about.recorded.clone(),
        };
        let json_path = self.dir.join(JSON_REPORT);
        let json = serde_json::to_vec_pretty(&report_json)
            .map_err(|error| BundleError::Write(json_path.clone(), error.into()))?;
        write_new(&json_path, &json)?;
        let markdown = markdown::report(
            &String::from_utf8_lossy(&self.text),
            report.as_ref(),
            note.as_deref(),
            &self.interfaces,
            about.node,
            about.started,
            about.recorded.as_ref(),
        );
        write_new(&self.dir.join(MARKDOWN_REPORT), markdown.as_bytes())?;
        Ok(Written { report, note })
    }
}

/// What a bundle's packet file holds, once written; displays as a sentence.
#[derive(Clone, Debug)]
pub struct Written {
    /// `None`: the packet file was left out, names being redacted.
    pub report: Option<PcapngReport>,
    /// What the size limit left out, if it did.
    pub note: Option<String>,
}

impl fmt::Display for Written {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.report {
            Some(report) => write!(
                f,
                "{PCAPNG_FILE} ({} packets, {} bytes), {JSON_REPORT}, {MARKDOWN_REPORT}",
                report.packets, report.bytes
            )?,
            None => write!(
                f,
                "{JSON_REPORT}, {MARKDOWN_REPORT} ({PCAPNG_FILE} left out: its packets carry the \
                 names that --redact-names hides)"
            )?,
        }
        if let Some(note) = &self.note {
            write!(f, "; {note}")?;
        }
        Ok(())
    }
}

fn pcapng_json(report: &PcapngReport, note: Option<&str>, unplaced: u64) -> PcapngFile {
    PcapngFile {
        file: PCAPNG_FILE.to_owned(),
        packets: report.packets,
        bytes: report.bytes,
        commented: report.commented,
        left_out: report.left_out,
        unplaced,
        note: note.map(str::to_owned),
    }
}

/// Writes `contents` to `path`, which must not exist yet.
fn write_new(path: &Path, contents: &[u8]) -> Result<(), BundleError> {
    use io::Write as _;
    let mut file = private::create_new_file(path).map_err(|error| match error.kind() {
        io::ErrorKind::AlreadyExists => BundleError::Exists(path.to_path_buf()),
        _ => BundleError::Create(path.to_path_buf(), error),
    })?;
    file.write_all(contents)
        .map_err(|error| BundleError::Write(path.to_path_buf(), error))
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;

    #[test]
    fn a_directory_holding_a_bundle_is_not_overwritten() {
        let dir = tempfile::tempdir().unwrap();
        let fresh = dir.path().join("new/bundle");
        prepare_dir(&fresh).expect("created with its parents");
        fs::write(fresh.join(JSON_REPORT), "{}").unwrap();
        let error = prepare_dir(&fresh).unwrap_err().to_string();
        assert!(error.contains("does not overwrite"), "{error}");
    }

    #[test]
    fn a_bundle_with_names_redacted_leaves_the_packets_out_and_says_why() {
        use dnsloop_shared::parse::DnsPorts;

        use crate::present::names::Redaction;

        let dir = tempfile::tempdir().unwrap();
        let names = Names::redacted(Redaction::new(&[7; 32], "cluster.local").unwrap());
        let options = PcapngOptions {
            hold: Duration::ZERO,
            max_bytes: 1 << 20,
            dns_ports: DnsPorts::new(&[53]),
        };
        let bundle = Bundle::create(dir.path(), options, &names).unwrap();
        let node = NodeConfig::read(dir.path());
        let written = bundle
            .finish(About {
                started: SystemTime::UNIX_EPOCH,
                duration_limit: Duration::from_secs(1),
                max_bytes: 1 << 20,
                node: &node,
                recorded: None,
            })
            .unwrap();
        assert!(written.report.is_none());
        assert!(written.to_string().contains("left out"), "{written}");
        assert!(!dir.path().join(PCAPNG_FILE).exists());
        let report: CaptureReport =
            serde_json::from_slice(&fs::read(dir.path().join(JSON_REPORT)).unwrap()).unwrap();
        assert!(
            report.names_redacted && report.pcapng.is_none(),
            "{report:?}"
        );
        let markdown = fs::read_to_string(dir.path().join(MARKDOWN_REPORT)).unwrap();
        assert!(markdown.contains("is left out"), "{markdown}");
    }
}
