//! `cargo xtask test --repeat N`: the privileged suites, run N times over from one build, with
//! each test's failures counted across the rounds. A test that fails one run in four costs
//! whole CI runs; one round cannot show it, several in a row can.
use std::{
    collections::BTreeMap,
    fs,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::Instant,
};

use anyhow::{bail, Context as _, Result};

use crate::command;

/// The packages whose test binaries need root and the lab: the lab and end-to-end suites, and
/// dnsloop's own (its kernel programs under `BPF_PROG_TEST_RUN`, pod naming).
const PRIVILEGED_PACKAGES: [&str; 2] = ["dnsloop-tests", "dnsloop-userspace"];

/// One test binary, as cargo built it.
struct Suite {
    /// `package/target`, e.g. `dnsloop-tests/e2e`.
    name: String,
    executable: PathBuf,
    /// Where cargo would run it: its package's directory.
    directory: PathBuf,
}

/// What one test did in one round.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Passed,
    Failed,
}

/// Every test's outcomes so far, by suite and name.
#[derive(Default)]
struct Tally {
    tests: BTreeMap<(String, String), Vec<Outcome>>,
    /// Suites that ended badly without naming a failed test (a crash, a timeout): by round.
    broken: Vec<(usize, String, String)>,
    /// The log of each suite run with a failure.
    failed_logs: Vec<PathBuf>,
}

impl Tally {
    fn failures(&self) -> impl Iterator<Item = (&(String, String), usize, usize)> {
        self.tests.iter().filter_map(|(test, outcomes)| {
            let failed = outcomes.iter().filter(|o| **o == Outcome::Failed).count();
            (failed > 0).then_some((test, failed, outcomes.len()))
        })
    }
}

/// Builds what the suites run (setup, the dnsloop binary, the test binaries), then runs every
/// privileged suite `rounds` times under `CI=true`, so no test can skip; fails if any test
/// failed in any round, after naming each with its count.
pub fn run(rounds: usize, dnsloop: &Path) -> Result<()> {
    let suites = build_suites()?;
    let logs = command::workspace_root().join("target/xtask/repeat");
    fs::create_dir_all(&logs).with_context(|| format!("creating {}", logs.display()))?;
    let mut tally = Tally::default();
    for round in 1..=rounds {
        let started = Instant::now();
        let (mut passed, mut failed) = (0, 0);
        for suite in &suites {
            let log = logs.join(format!("round{round}-{}.log", suite.name.replace('/', "-")));
            let outcome = run_suite(suite, dnsloop, &log, round, &mut tally)?;
            passed += outcome.0;
            failed += outcome.1;
        }
        eprintln!(
            "repeat: round {round}/{rounds}: {passed} passed, {failed} failed in {:.0} s",
            started.elapsed().as_secs_f64()
        );
    }
    report(&tally, rounds)
}

/// Runs one suite once, writing its output to `log`; adds its outcomes to `tally` and returns
/// (passed, failed).
fn run_suite(
    suite: &Suite,
    dnsloop: &Path,
    log: &Path,
    round: usize,
    tally: &mut Tally,
) -> Result<(usize, usize)> {
    let output = Command::new(&suite.executable)
        .current_dir(&suite.directory)
        .env("CI", "true")
        .env(dnsloop_tests::DNSLOOP_BIN_ENV, dnsloop)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {}", suite.executable.display()))?;
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    fs::write(log, &text).with_context(|| format!("writing {}", log.display()))?;
    let (mut passed, mut failed) = (0, 0);
    for (test, outcome) in outcomes(&text) {
        match outcome {
            Outcome::Passed => passed += 1,
            Outcome::Failed => {
                failed += 1;
                eprintln!("repeat: round {round}: FAILED {} {test}", suite.name);
            }
        }
        tally
            .tests
            .entry((suite.name.clone(), test.to_owned()))
            .or_default()
            .push(outcome);
    }
    if !output.status.success() && failed == 0 {
        eprintln!(
            "repeat: round {round}: {} ended with {} and named no failed test",
            suite.name, output.status
        );
        tally
            .broken
            .push((round, suite.name.clone(), output.status.to_string()));
    }
    if !output.status.success() {
        tally.failed_logs.push(log.to_owned());
    }
    Ok((passed, failed))
}

/// The tests libtest reports as passed or failed in `text`, from its `test NAME ... RESULT`
/// lines (ignored tests are left out).
fn outcomes(text: &str) -> impl Iterator<Item = (&str, Outcome)> {
    text.lines().filter_map(|line| {
        let (test, result) = line.strip_prefix("test ")?.split_once(" ... ")?;
        match result.trim() {
            "ok" => Some((test, Outcome::Passed)),
            "FAILED" => Some((test, Outcome::Failed)),
            _ => None,
        }
    })
}

fn report(tally: &Tally, rounds: usize) -> Result<()> {
    let flaky: Vec<_> = tally.failures().collect();
    eprintln!(
        "repeat: {} tests, {rounds} round(s): {} failed at least once",
        tally.tests.len(),
        flaky.len()
    );
    for ((suite, test), failed, ran) in &flaky {
        eprintln!("  {failed}/{ran} failed  {suite}  {test}");
    }
    for (round, suite, status) in &tally.broken {
        eprintln!("  round {round}: {suite} ended with {status} and named no failed test");
    }
    for log in &tally.failed_logs {
        eprintln!("  log: {}", log.display());
    }
    if !flaky.is_empty() || !tally.broken.is_empty() {
        bail!("some privileged tests failed in {rounds} round(s) (listed above, with their logs)");
    }
    Ok(())
}

/// Builds the privileged packages' test binaries and returns them, as cargo lists them.
fn build_suites() -> Result<Vec<Suite>> {
    let mut build = command::cargo_command();
    build
        .args([
            "test",
            "--no-run",
            "--message-format=json-render-diagnostics",
        ])
        .args(
            PRIVILEGED_PACKAGES
                .iter()
                .flat_map(|package| ["-p", package]),
        )
        .stdout(Stdio::piped());
    let output = build
        .output()
        .with_context(|| format!("starting {build:?}"))?;
    if !output.status.success() {
        bail!("{build:?} failed ({})", output.status);
    }
    let suites: Vec<Suite> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter_map(|message| suite(&message))
        .collect();
    if suites.is_empty() {
        bail!("{build:?} built no test binary");
    }
    Ok(suites)
}

/// The test binary a cargo `compiler-artifact` message names, if it names one.
fn suite(message: &serde_json::Value) -> Option<Suite> {
    if message["reason"] != "compiler-artifact" || message["profile"]["test"] != true {
        return None;
    }
    let executable = PathBuf::from(message["executable"].as_str()?);
    let directory = Path::new(message["manifest_path"].as_str()?)
        .parent()?
        .to_owned();
    let package = directory.file_name()?.to_string_lossy().into_owned();
    let target = message["target"]["name"].as_str()?;
    Some(Suite {
        name: format!("{package}/{target}"),
        executable,
        directory,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_passed_and_failed_tests_and_leaves_out_the_rest() {
        let text = "running 4 tests\n\
                    test lab::a ... ok\n\
                    test b ... FAILED\n\
                    test c ... ignored, needs a kernel\n\
                    test d has been running for over 60 seconds\n\
                    test result: FAILED. 1 passed; 1 failed; 1 ignored\n";
        let found: Vec<_> = outcomes(text).collect();
        assert!(found == [("lab::a", Outcome::Passed), ("b", Outcome::Failed)]);
    }
}
