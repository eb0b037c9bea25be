//! What a `dig` run saw.
use std::process::Output;

use anyhow::{bail, Result};

/// dig's exit status when no server answered.
const DIG_NO_REPLY: i32 = 9;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DigOutcome {
    /// The response code (`NOERROR`, `NXDOMAIN`, `SERVFAIL`, `REFUSED`, ...); `None` when no
    /// answer arrived before the timeout (including one dropped for coming from the wrong
    /// address).
    pub status: Option<String>,
    /// The ID of the answer dig took, when one arrived.
    pub id: Option<u16>,
    /// The data of each record in the answer section, e.g. `192.0.2.80`.
    pub answers: Vec<String>,
    /// dig's full output, for assertion messages.
    pub stdout: String,
}

impl DigOutcome {
    /// Reads a finished `dig` (without `+short`, whose output has no header to read). Fails
    /// when dig itself failed, e.g. on an unknown option.
    pub(crate) fn from_output(output: &Output) -> Result<DigOutcome> {
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        match output.status.code() {
            Some(0) | Some(DIG_NO_REPLY) => Ok(DigOutcome::parse(stdout)),
            _ => bail!(
                "dig failed ({}): {}{}",
                output.status,
                String::from_utf8_lossy(&output.stderr).trim(),
                stdout.trim()
            ),
        }
    }

    fn parse(stdout: String) -> DigOutcome {
        let status = stdout
            .lines()
            .filter(|line| line.contains("->>HEADER<<-"))
            .find_map(|line| line.split("status: ").nth(1))
            .and_then(|rest| rest.split(',').next())
            .map(str::to_owned);
        let id = stdout
            .lines()
            .filter(|line| line.contains("->>HEADER<<-"))
            .find_map(|line| line.split("id: ").nth(1))
            .and_then(|rest| rest.trim().parse().ok());
        let mut answers = Vec::new();
        let mut in_answer_section = false;
        for line in stdout.lines() {
            if line.starts_with(";; ANSWER SECTION:") {
                in_answer_section = true;
            } else if line.trim().is_empty() || line.starts_with(';') {
                in_answer_section = false;
            } else if in_answer_section {
                // NAME TTL CLASS TYPE DATA...
                let data: Vec<&str> = line.split_whitespace().skip(4).collect();
                answers.push(data.join(" "));
            }
        }
        DigOutcome {
            status,
            id,
            answers,
            stdout,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_status_and_answer_data() {
        let stdout = "\
; <<>> DiG 9.18.49 <<>> +tries=1 +timeout=1 @169.254.25.10 www.example.test
;; ->>HEADER<<- opcode: QUERY, status: NOERROR, id: 23683
;; flags: qr aa rd ra; QUERY: 1, ANSWER: 2, AUTHORITY: 0, ADDITIONAL: 1

;; QUESTION SECTION:
;www.example.test.\t\tIN\tA

;; ANSWER SECTION:
www.example.test.\t0\tIN\tA\t192.0.2.80
www.example.test.\t0\tIN\tTXT\t\"two words\"

;; Query time: 3 msec
";
        let outcome = DigOutcome::parse(stdout.to_owned());
        assert_eq!(outcome.status.as_deref(), Some("NOERROR"));
        assert_eq!(outcome.id, Some(23683));
        assert_eq!(outcome.answers, ["192.0.2.80", "\"two words\""]);
    }

    #[test]
    fn a_timeout_has_no_status() {
        let stdout = ";; communications error to 10.96.0.10#53: timed out\n\
                      ;; no servers could be reached\n";
        let outcome = DigOutcome::parse(stdout.to_owned());
        assert_eq!((outcome.status, outcome.id), (None, None));
        assert!(outcome.answers.is_empty());
    }
}
