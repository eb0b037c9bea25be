//! Every kind of record, as the sinks write it, reads back into its schema type and writes
//! again to the same bytes.
use std::time::Duration;

use super::*;
use crate::testkit::{observations::*, records::*};

#[test]
fn every_line_the_sink_writes_reads_back_into_its_record_and_writes_alike() {
    let lines = sink_lines();
    let mut kinds: Vec<&str> = Vec::new();
    for line in &lines {
        let record: Record = serde_json::from_str(line)
            .unwrap_or_else(|error| panic!("not a schema record: {error}: {line}"));
        assert_eq!(&serde_json::to_string(&record).unwrap(), line);
        let kind = line.split('"').nth(3).expect("the kind first");
        if !kinds.contains(&kind) {
            kinds.push(kind);
        }
    }
    assert_eq!(
        kinds,
        [
            "loop",
            "possible_loop",
            "unexpected_source",
            "timeout",
            "lookup",
            "truncated_not_retried",
            "search_list_waste",
            "servfail_storm",
            "fragmented_reply_lost",
            "drop",
            "bundle",
            "packet",
            "malformed",
            "summary"
        ]
    );
}

#[test]
fn a_capture_file_summary_reads_back_as_one() {
    let lines = sink_lines();
    let Ok(Record::Summary(summary)) = serde_json::from_str(lines.last().unwrap()) else {
        panic!("the last line is a summary: {lines:?}");
    };
    assert_eq!(summary.source, capture_file_numbers());
    assert_eq!(summary.interfaces()[0].ifname, "any");
    assert_eq!(summary.kernel(), None);
}

#[test]
fn probe_doctor_and_capture_records_read_back_and_write_alike() {
    let probe = serde_json::to_string(&a_probe()).unwrap();
    assert!(
        probe.starts_with(r#"{"kind":"probe","server":"169.254.25.10:53","#),
        "{probe}"
    );
    let read: Record = serde_json::from_str(&probe).unwrap();
    assert_eq!(serde_json::to_string(&read).unwrap(), probe);

    for record in doctor_records() {
        let line = serde_json::to_string(&record).unwrap();
        let read: DoctorRecord = serde_json::from_str(&line).unwrap();
        assert_eq!(serde_json::to_string(&read).unwrap(), line);
    }

    let report = serde_json::to_string_pretty(&a_capture_report()).unwrap();
    assert!(
        report.starts_with("{\n  \"kind\": \"capture\",\n"),
        "{report}"
    );
    assert!(
        report.contains("\"summary\": {\n    \"kind\": \"summary\","),
        "{report}"
    );
    let read: CaptureReport = serde_json::from_str(&report).unwrap();
    assert_eq!(read, a_capture_report());
    assert_eq!(serde_json::to_string_pretty(&read).unwrap(), report);
}

#[test]
fn timestamps_are_utc_milliseconds_and_read_back() {
    let at = Timestamp(ms(1_123) + Duration::from_nanos(999));
    let json = serde_json::to_string(&at).unwrap();
    assert_eq!(json, r#""2025-01-01T12:00:01.123Z""#);
    let read: Timestamp = serde_json::from_str(&json).unwrap();
    assert_eq!(read, Timestamp(ms(1_123)));
    assert!(serde_json::from_str::<Timestamp>(r#""yesterday""#).is_err());
    assert_eq!(read.since(Timestamp(ms(123))), Duration::from_secs(1));
    assert_eq!(Timestamp(ms(123)).since(read), Duration::ZERO);
}

#[test]
fn counts_keep_their_order() {
    let counts: Counts =
        serde_json::from_str(r#"{"packets":10,"dns_packets":4,"b":1,"a":2}"#).unwrap();
    assert_eq!(
        serde_json::to_string(&counts).unwrap(),
        r#"{"packets":10,"dns_packets":4,"b":1,"a":2}"#
    );
    assert_eq!(counts.get("b"), Some(&1));
    assert_eq!(counts.get("c"), None);
}
