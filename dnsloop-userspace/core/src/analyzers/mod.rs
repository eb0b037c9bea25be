//! The detection engine: observations in, findings and a summary out.
//!
//! [`Engine`] puts observations back in timestamp order (`reorder`) and runs two analyzers on
//! them: `forwarding_loop`, and `client_view`, which judges replies against one table of the
//! queries their clients sent (`outstanding`) for `unexpected_source`, `timeout`, `latency`
//! (summary only), `truncation` (answers cut and never asked again over TCP), `search_list`
//! (expansions wasted before a name) and `servfail` (SERVFAIL storms); `drops` and
//! `fragmentation` (replies lost to it) take the kernel's drops too. Both recognise a message across NAT hops the same way (`packet`). With a
//! `slow` threshold, `lookups` puts the two together: each query the clients' view saw
//! answered, placed in the chain of forwards the loop analyzer linked it to.
//!
//! Analyzers never learn where observations came from, and know time only from their
//! timestamps and from `tick`, so a capture replayed and the same traffic traced live give the
//! same findings. Every table they keep is bounded (`table`); the stalest entries go first,
//! and are counted, when one fills up.
mod client_view;
mod drops;
mod endpoint;
mod engine;
mod forwarding_loop;
mod fragmentation;
mod histogram;
mod lookups;
mod outstanding;
pub(crate) mod packet;
mod reorder;
mod repeats;
mod search_list;
mod server_answers;
mod servfail;
mod summary;
pub(crate) mod table;
mod timeout;
mod truncation;
mod unexpected_source;

use std::time::{Duration, SystemTime};

pub use engine::{Engine, EngineConfig};
pub use lookups::{destination, summary as lookup_summary, HopTimes, LookupCounts, LookupSummary};
pub use summary::{ServerSummary, Summary};

use self::packet::MessageKey;
use crate::{finding::Finding, observation::Observation};

/// One detector. The engine feeds it observations in timestamp order.
pub trait Analyzer {
    /// Takes the next observation, and the key of its message (`MessageKey::of(obs)`, made
    /// once for every analyzer); what it proves is appended to `out`.
    fn observe(&mut self, obs: &Observation, message: Option<&MessageKey>, out: &mut Vec<Finding>);

    /// Whether it takes partial observations (queries seen mid-path, see
    /// `Observation::partial`); those that judge a query from where its client sent it do not.
    fn takes_partial(&self) -> bool {
        false
    }

    /// Time has reached `now`: no observation up to `now` is still to come. Reports what was
    /// waiting for that (a deadline passed, a packet settled). Told the same time again with no
    /// observation in between, it has nothing more to do, and the engine does not tell it.
    fn tick(&mut self, now: SystemTime, out: &mut Vec<Finding>);

    /// The input has ended at `now`: reports everything still held back.
    fn finish(&mut self, now: SystemTime, out: &mut Vec<Finding>);
}

/// Whether `wait` has passed between `since` and `now`. Timestamps come from captures and
/// kernels, so this holds for any of them: a `now` before `since` is not past, and nothing
/// overflows.
fn has_waited(since: SystemTime, wait: Duration, now: SystemTime) -> bool {
    waited_by(wait, now)(since)
}

/// `by` after `time`, or `time` itself past the latest time there is: times come from captures
/// and kernels.
fn later(time: SystemTime, by: Duration) -> SystemTime {
    time.checked_add(by).unwrap_or(time)
}

/// `has_waited(since, wait, now)` as a question about `since`, for asking it of many.
fn waited_by(wait: Duration, now: SystemTime) -> impl Fn(SystemTime) -> bool {
    // `now - since >= wait` as a comparison with `now - wait`, worked out once: every tick asks
    // this of each table's stalest entry, and a subtraction of two times takes checks.
    let cutoff = now.checked_sub(wait);
    move |since| cutoff.is_some_and(|cutoff| since <= cutoff)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn has_waited_holds_from_the_end_of_the_wait_and_for_any_timestamps() {
        let at = |millis: i64| match u64::try_from(millis) {
            Ok(after) => SystemTime::UNIX_EPOCH + Duration::from_millis(after),
            Err(_) => SystemTime::UNIX_EPOCH - Duration::from_millis(millis.unsigned_abs()),
        };
        let wait = Duration::from_millis(50);
        assert!(!has_waited(at(1_000), wait, at(1_049)));
        assert!(has_waited(at(1_000), wait, at(1_050)));
        assert!(has_waited(at(-1_000), wait, at(-950)), "before 1970");
        assert!(!has_waited(at(-1_000), wait, at(-951)));
        assert!(!has_waited(at(1_000), wait, at(900)), "now before since");
        assert!(has_waited(at(1_000), Duration::ZERO, at(1_000)));
        assert!(!has_waited(at(0), Duration::MAX, at(1_000)), "no overflow");
    }
}
