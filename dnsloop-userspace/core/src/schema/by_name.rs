//! Values by name, in the order dnsloop lists them.
use std::{fmt, marker::PhantomData};

use serde::{de, ser::SerializeMap as _, Deserialize, Deserializer, Serialize, Serializer};

/// Values by name, as a JSON object (`{"NOERROR": 28, "NXDOMAIN": 2}`), in the order dnsloop
/// lists them. Which names appear is data, not schema: a kernel with a new counter adds one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ByName<T>(pub Vec<(String, T)>);

/// Counts by name: the kernel's counters and malformed reasons in the kernel's order, response
/// codes by their number, the others by name.
pub type Counts = ByName<u64>;

impl<T> ByName<T> {
    /// The value of `name`, if listed.
    pub fn get(&self, name: &str) -> Option<&T> {
        self.0
            .iter()
            .find(|(listed, _)| listed == name)
            .map(|(_, value)| value)
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &T)> {
        self.0.iter().map(|(name, value)| (name.as_str(), value))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl<T> Default for ByName<T> {
    fn default() -> Self {
        Self(Vec::new())
    }
}

impl<N: Into<String>, T> FromIterator<(N, T)> for ByName<T> {
    fn from_iter<I: IntoIterator<Item = (N, T)>>(values: I) -> Self {
        Self(
            values
                .into_iter()
                .map(|(name, value)| (name.into(), value))
                .collect(),
        )
    }
}

impl<T: Serialize> Serialize for ByName<T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (name, value) in &self.0 {
            map.serialize_entry(name, value)?;
        }
        map.end()
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for ByName<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visitor<T>(PhantomData<T>);

        impl<'de, T: Deserialize<'de>> de::Visitor<'de> for Visitor<T> {
            type Value = ByName<T>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object of values by name")
            }

            fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<ByName<T>, A::Error> {
                let mut values = Vec::with_capacity(map.size_hint().unwrap_or(0).min(256));
                while let Some(entry) = map.next_entry::<String, T>()? {
                    values.push(entry);
                }
                Ok(ByName(values))
            }
        }

        deserializer.deserialize_map(Visitor(PhantomData))
    }
}
