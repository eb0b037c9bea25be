//! The one way a time appears in dnsloop's JSON.
use std::{
    fmt,
    time::{Duration, SystemTime},
};

use serde::{de, Deserialize, Deserializer, Serialize, Serializer};

use crate::present::time::rfc3339;

/// A time, in UTC to the millisecond: `"2025-01-01T12:00:01.123Z"` (RFC 3339). A time RFC 3339
/// cannot show (before 1970 or after 9999, from a broken clock or capture) is written clamped
/// to its range.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(pub SystemTime);

impl Timestamp {
    /// How long after `earlier` this is; zero if it is not later.
    pub fn since(self, earlier: Timestamp) -> Duration {
        self.0.duration_since(earlier.0).unwrap_or_default()
    }
}

impl From<SystemTime> for Timestamp {
    fn from(at: SystemTime) -> Self {
        Self(at)
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&rfc3339(self.0))
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor;

        impl de::Visitor<'_> for Visitor {
            type Value = Timestamp;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a UTC RFC 3339 time such as 2025-01-01T12:00:01.123Z")
            }

            fn visit_str<E: de::Error>(self, text: &str) -> Result<Timestamp, E> {
                humantime::parse_rfc3339(text)
                    .map(Timestamp)
                    .map_err(|error| {
                        E::custom(format!("{text:?} is not a UTC RFC 3339 time: {error}"))
                    })
            }
        }

        deserializer.deserialize_str(Visitor)
    }
}
