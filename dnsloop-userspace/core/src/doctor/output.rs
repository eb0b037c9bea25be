//! The report on stdout: text for a person (errors first, each with its fix below it, and a
//! tally), or one JSON object per check and a summary object, for scripts.
use std::{
    borrow::Cow,
    io::{self, Write},
};

use super::check::{Check, Severity, Tally};
use crate::{
    schema::{CheckRecord, DoctorRecord, DoctorSummaryRecord},
    sink::OutputFormat,
};

/// Writes `checks`, which are in report order already.
pub fn write(format: OutputFormat, checks: &[Check], out: &mut impl Write) -> io::Result<()> {
    match format {
        OutputFormat::Text => text(checks, out),
        OutputFormat::Json => json_lines(checks, out),
    }?;
    out.flush()
}

fn text(checks: &[Check], out: &mut impl Write) -> io::Result<()> {
    let id_width = checks.iter().map(|check| check.id.len()).max().unwrap_or(0);
    let severity_width = Severity::ALL
        .iter()
        .map(|s| s.name().len())
        .max()
        .unwrap_or(0);
    let indent = " ".repeat(severity_width + 2);
    for check in checks {
        let location = check
            .location
            .as_ref()
            .map_or_else(|| check.subject.clone(), ToString::to_string);
        writeln!(
            out,
            "{:severity_width$}  {:id_width$}  {}  {}",
            check.severity.name(),
            check.id,
            printable(&location),
            printable(&check.summary)
        )?;
        if let Some(fix) = &check.fix {
            writeln!(out, "{indent}fix: {}", printable(fix))?;
        }
    }
    let tally = Tally::of(checks);
    let parts: Vec<String> = [
        (tally.errors, "error", "errors"),
        (tally.warnings, "warning", "warnings"),
        (tally.info, "info", "info"),
        (tally.ok, "ok", "ok"),
    ]
    .iter()
    .map(|(n, one, many)| format!("{n} {}", if *n == 1 { one } else { many }))
    .collect();
    writeln!(out, "doctor: {}", parts.join(", "))
}

fn json_lines(checks: &[Check], out: &mut impl Write) -> io::Result<()> {
    let tally = Tally::of(checks);
    let summary = DoctorRecord::Summary(DoctorSummaryRecord {
        error: tally.count(Severity::Error),
        warning: tally.count(Severity::Warning),
        info: tally.count(Severity::Info),
        ok: tally.count(Severity::Ok),
    });
    for record in checks.iter().map(check_record).chain([summary]) {
        serde_json::to_writer(&mut *out, &record)?;
        out.write_all(b"\n")?;
    }
    Ok(())
}

fn check_record(check: &Check) -> DoctorRecord {
    DoctorRecord::Check(CheckRecord {
        id: check.id.to_owned(),
        severity: check.severity.name().to_owned(),
        subject: check.subject.clone(),
        summary: check.summary.clone(),
        fix: check.fix.clone(),
        file: check
            .location
            .as_ref()
            .map(|location| location.file.clone()),
        line: check.location.as_ref().and_then(|location| location.line),
    })
}

/// File contents reach the terminal through summaries: no control byte (an escape sequence,
/// a carriage return) gets through as it is.
fn printable(text: &str) -> Cow<'_, str> {
    if !text.chars().any(char::is_control) {
        return Cow::Borrowed(text);
    }
    Cow::Owned(
        text.chars()
            .map(|c| {
                if c.is_control() {
                    c.escape_default().to_string()
                } else {
                    c.to_string()
                }
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::check::Location;

    fn checks() -> Vec<Check> {
        vec![
            Check::new(
                "resolv.loopback-upstream",
                Severity::Error,
                "nameserver 127.0.0.53",
                "it loops",
            )
            .fix("point kubelet elsewhere")
            .at(Location::line("/etc/resolv.conf", 3)),
            Check::new(
                "bridge.netfilter",
                Severity::Info,
                "bridges",
                "not checked\u{1b}[31m",
            ),
        ]
    }

    #[test]
    fn text_puts_the_fix_under_its_check_and_ends_with_a_tally() {
        let mut out = Vec::new();
        write(OutputFormat::Text, &checks(), &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "error    resolv.loopback-upstream  /etc/resolv.conf:3  it loops"
        );
        assert_eq!(lines[1], "         fix: point kubelet elsewhere");
        assert_eq!(
            lines[2],
            "info     bridge.netfilter          bridges  not checked\\u{1b}[31m"
        );
        assert_eq!(lines[3], "doctor: 1 error, 0 warnings, 1 info, 0 ok");
    }

    #[test]
    fn json_keeps_the_key_order_and_ends_with_a_summary() {
        let mut out = Vec::new();
        write(OutputFormat::Json, &checks(), &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            r#"{"kind":"check","id":"resolv.loopback-upstream","severity":"error","subject":"nameserver 127.0.0.53","summary":"it loops","fix":"point kubelet elsewhere","file":"/etc/resolv.conf","line":3}"#
        );
        assert!(
            lines[1].contains(r#""fix":null,"file":null,"line":null"#),
            "{}",
            lines[1]
        );
        assert_eq!(
            lines[2],
            r#"{"kind":"summary","error":1,"warning":0,"info":1,"ok":0}"#
        );
    }

    #[test]
    fn every_json_line_reads_back_into_its_record_and_writes_alike() {
        let mut out = Vec::new();
        write(OutputFormat::Json, &checks(), &mut out).unwrap();
        for line in String::from_utf8(out).unwrap().lines() {
            let record: DoctorRecord = serde_json::from_str(line).unwrap();
            assert_eq!(serde_json::to_string(&record).unwrap(), line);
        }
    }
}
