//! Scraping a tracer's Prometheus metrics from inside a lab, as the node's Prometheus would,
//! and reading samples out of the exposition.
use std::{
    thread,
    time::{Duration, Instant},
};

use crate::{lab::Lab, or_fail::OrFail as _};

/// dnsloop reads the kernel's counters every second; a scrape shows them by then.
pub const SCRAPE_SHOWS_WITHIN: Duration = Duration::from_secs(5);

/// The exposition served at `url`, fetched from the lab's node.
fn scrape(lab: &Lab, url: &str) -> String {
    let output = lab
        .exec(lab.node_ns(), &["curl", "-s", "--max-time", "5", url])
        .or_fail(format_args!("curl {url}"));
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Scrapes until `ready` holds for the exposition, for up to [`SCRAPE_SHOWS_WITHIN`]; returns
/// the last one.
pub fn scrape_until(lab: &Lab, url: &str, ready: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + SCRAPE_SHOWS_WITHIN;
    loop {
        let exposition = scrape(lab, url);
        if ready(&exposition) || Instant::now() >= deadline {
            return exposition;
        }
        thread::sleep(Duration::from_millis(250));
    }
}

/// The value of the sample `name{labels}`, whose labels include every one of `labels`
/// (`key="value"`), summed over the samples that match.
pub fn sample(exposition: &str, name: &str, labels: &[&str]) -> Option<f64> {
    let values: Vec<f64> = exposition
        .lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let (series_name, series_labels) = match series.split_once('{') {
                Some((series_name, rest)) => (series_name, rest.trim_end_matches('}')),
                None => (series, ""),
            };
            let matches = series_name == name
                && labels
                    .iter()
                    .all(|label| series_labels.split(',').any(|have| have == *label));
            matches.then(|| value.parse().ok()).flatten()
        })
        .collect();
    (!values.is_empty()).then(|| values.iter().sum())
}
