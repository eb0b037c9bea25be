//! How a DNS name is written out: as it was sent, or redacted (`--redact-names`).
//!
//! Names say which pod looked up which customer, API or person, and findings and packet lines
//! go to the cluster's log pipeline. Redacted, each label of a name becomes a keyed hash of
//! it, `h:` and 12 hex digits, except the labels that say where in the cluster's DNS the name
//! is:
//!
//! ```text
//! api.payments.default.svc.cluster.local.  ->  h:3f9a1c0d52e8.h:77be02a41b9c.default.svc.cluster.local.
//! www.example.com.                         ->  h:5c0e7f19aa30.h:9d11aa6e03f4.com.
//! 10.0.96.10.in-addr.arpa.                 ->  h:…(a hash for each of the 4 labels).in-addr.arpa.
//! myhost.                                  ->  h:0b7d3e5a9c12.
//! ```
//!
//! Labels are hashed one by one, so that a search-list expansion still shows as the name with
//! a suffix, and findings about one name agree across nodes and runs that share the key:
//! every node of a cluster is given the same key, and the hashes join their logs. Without the
//! key, a label cannot be had back, nor guessed and checked. Redaction is applied only where a
//! name is written out: the analyzers work on the names as sent.
//!
//! A name is one string in a log line; where it appears as text, it goes through here
//! ([`crate::observation::DnsName::presented`]), so nothing writes a name another way.
use std::fmt::Write as _;

use hmac::{Hmac, KeyInit as _, Mac as _};
use sha2::Sha256;
use thiserror::Error;

/// How names are written out.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Names {
    /// Presentation format as sent, case included.
    #[default]
    AsSent,
    /// Each label a keyed hash but the cluster's structure (see the module's doc).
    Redacted(std::sync::Arc<Redaction>),
}

impl Names {
    /// Names redacted with `redaction`.
    pub fn redacted(redaction: Redaction) -> Self {
        Self::Redacted(redaction.into())
    }

    pub fn is_redacted(&self) -> bool {
        matches!(self, Self::Redacted(_))
    }

    /// Redacted, a keyed 64-bit id of `parts` (for an id made of a name, such as a loop's,
    /// which a fixed hash would let anyone check a guessed name against); `None` as sent.
    pub fn keyed_id(&self, parts: &[&[u8]]) -> Option<u64> {
        match self {
            Self::AsSent => None,
            Self::Redacted(redaction) => Some(redaction.keyed_id(parts)),
        }
    }

    /// Appends the name made of `labels` (without the root), with a trailing dot; the root is
    /// `.`. As sent, bytes that are not printable ASCII, and the dot and backslash inside a
    /// label, are escaped as dig does (`\DDD`, `\.`), so that no control byte ever reaches a
    /// terminal or a log.
    pub fn write<'l>(&self, labels: impl Iterator<Item = &'l [u8]>, text: &mut String) {
        let start = text.len();
        match self {
            Self::AsSent => {
                for label in labels {
                    write_label(label, Case::AsSent, text);
                    text.push('.');
                }
            }
            Self::Redacted(redaction) => {
                let labels: Vec<&[u8]> = labels.collect();
                redaction.write(&labels, text);
            }
        }
        if text.len() == start {
            text.push('.');
        }
    }
}

/// Put before what a keyed id hashes, so that no id is ever a label's hash: a label in lower
/// case never begins with 0xff.
const ID_DOMAIN: &[u8] = b"\xffid";

/// The shortest key taken: 128 bits, so that nobody can try every key.
pub const MIN_KEY_BYTES: usize = 16;

/// The longest key taken: a key file is a few random bytes, not a file mistaken for one.
pub const MAX_KEY_BYTES: usize = 4096;

/// Hex digits of a label's hash: 48 bits. A log with a million distinct labels has about one
/// chance in 600 of any two of them sharing a hash, and one name's labels, or a name and its
/// expansions, practically never do; 6 digits (24 bits) would make two of 5,000 labels share
/// one as likely as not. Longer hashes only make lines longer: without the key, no length
/// lets a label be guessed.
const HASH_DIGITS: usize = 12;

/// What a redaction cannot be made of.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum RedactionError {
    #[error(
        "the key is {0} bytes: it must be at least {MIN_KEY_BYTES} random bytes (make one with \
         `head -c 32 /dev/urandom > KEY_FILE`)"
    )]
    KeyTooShort(usize),
    #[error("the key is over {MAX_KEY_BYTES} bytes: give a file of a few random bytes")]
    KeyTooLong,
    #[error("{0:?} is not a cluster domain: give one like cluster.local")]
    ClusterDomain(String),
}

/// The key, and the cluster domain whose structure stays readable.
#[derive(Clone)]
pub struct Redaction {
    /// HMAC-SHA256 keyed once: each label's hash starts from a copy of it.
    mac: Hmac<Sha256>,
    /// The key itself, only to tell two redactions apart.
    key: Box<[u8]>,
    /// The cluster domain's labels, in lower case (`cluster`, `local`).
    cluster_domain: Vec<Box<[u8]>>,
}

impl Redaction {
    /// Hashes labels with `key`, keeping `<namespace>.svc.<cluster_domain>` (and `.pod.`)
    /// readable.
    pub fn new(key: &[u8], cluster_domain: &str) -> Result<Self, RedactionError> {
        if key.len() < MIN_KEY_BYTES {
            return Err(RedactionError::KeyTooShort(key.len()));
        }
        if key.len() > MAX_KEY_BYTES {
            return Err(RedactionError::KeyTooLong);
        }
        let domain = cluster_domain.strip_suffix('.').unwrap_or(cluster_domain);
        let labels: Vec<Box<[u8]>> = domain
            .split('.')
            .map(|label| label.to_ascii_lowercase().into_bytes().into_boxed_slice())
            .collect();
        let valid = |label: &[u8]| {
            (1..=63).contains(&label.len())
                && label
                    .iter()
                    .all(|byte| byte.is_ascii_alphanumeric() || *byte == b'-' || *byte == b'_')
        };
        if !labels.iter().all(|label| valid(label)) {
            return Err(RedactionError::ClusterDomain(cluster_domain.to_owned()));
        }
        // HMAC takes a key of any length: this never fails.
        let mac = Hmac::<Sha256>::new_from_slice(key).map_err(|_| RedactionError::KeyTooLong)?;
        Ok(Self {
            mac,
            key: key.into(),
            cluster_domain: labels,
        })
    }

    /// Appends `labels` redacted, each followed by a dot.
    fn write(&self, labels: &[&[u8]], text: &mut String) {
        let hashed = labels.len() - self.readable_suffix(labels);
        for (at, label) in labels.iter().enumerate() {
            if at < hashed {
                self.write_hash(label, text);
            } else {
                // Lower case: a resolver's 0x20 randomisation must not split one name in two.
                write_label(label, Case::Lower, text);
            }
            text.push('.');
        }
    }

    /// How many of the last labels of `labels` stay readable: those that say where the name
    /// is in the cluster's DNS (`<namespace>.svc.<cluster domain>`, `<namespace>.pod.<cluster
    /// domain>`, the cluster domain), the reverse zones (`in-addr.arpa`, `ip6.arpa`), or, for
    /// any other name, its top-level domain (`com`). A name of one label is a host's, and is
    /// hashed whole.
    fn readable_suffix(&self, labels: &[&[u8]]) -> usize {
        let domain = self.cluster_domain.len();
        if ends_with(labels, self.cluster_domain.iter().map(AsRef::as_ref)) {
            let under = labels.len() - domain;
            let structure = under >= 1
                && [&b"svc"[..], b"pod"]
                    .iter()
                    .any(|kind| labels[under - 1].eq_ignore_ascii_case(kind));
            return match (structure, under) {
                // `svc.<domain>`, `pod.<domain>`.
                (true, 1) => domain + 1,
                // And the namespace under it.
                (true, _) => domain + 2,
                (false, _) => domain,
            };
        }
        let reverse = [&[&b"in-addr"[..], b"arpa"], &[&b"ip6"[..], b"arpa"]];
        if reverse
            .iter()
            .any(|zone| ends_with(labels, zone.iter().copied()))
        {
            return 2;
        }
        usize::from(labels.len() >= 2)
    }

    /// The first 8 bytes of HMAC-SHA256 of `parts`, after [`ID_DOMAIN`].
    fn keyed_id(&self, parts: &[&[u8]]) -> u64 {
        let mut mac = self.mac.clone();
        mac.update(ID_DOMAIN);
        for part in parts {
            mac.update(part);
        }
        let hash = mac.finalize().into_bytes();
        let mut id = [0; 8];
        id.copy_from_slice(&hash[..8]);
        u64::from_be_bytes(id)
    }

    /// `h:` and the first [`HASH_DIGITS`] hex digits of HMAC-SHA256 of the label in lower case.
    fn write_hash(&self, label: &[u8], text: &mut String) {
        let mut mac = self.mac.clone();
        mac.update(&label.to_ascii_lowercase());
        let hash = mac.finalize().into_bytes();
        text.push_str("h:");
        for byte in &hash[..HASH_DIGITS / 2] {
            let _ = write!(text, "{byte:02x}");
        }
    }
}

impl PartialEq for Redaction {
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key && self.cluster_domain == other.cluster_domain
    }
}

impl Eq for Redaction {}

/// Never shows the key.
impl std::fmt::Debug for Redaction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redaction")
            .field("key", &format_args!("<{} bytes>", self.key.len()))
            .field(
                "cluster_domain",
                &self
                    .cluster_domain
                    .iter()
                    .map(|label| String::from_utf8_lossy(label))
                    .collect::<Vec<_>>()
                    .join("."),
            )
            .finish()
    }
}

/// Whether the last labels of `labels` are `suffix`, ignoring ASCII case.
fn ends_with<'s>(labels: &[&[u8]], suffix: impl ExactSizeIterator<Item = &'s [u8]>) -> bool {
    let len = suffix.len();
    labels.len() >= len
        && labels[labels.len() - len..]
            .iter()
            .zip(suffix)
            .all(|(label, expected)| label.eq_ignore_ascii_case(expected))
}

#[derive(Clone, Copy)]
enum Case {
    AsSent,
    Lower,
}

/// Appends `label` in presentation format, without its dot.
fn write_label(label: &[u8], case: Case, text: &mut String) {
    for &byte in label {
        let byte = match case {
            Case::AsSent => byte,
            Case::Lower => byte.to_ascii_lowercase(),
        };
        match byte {
            b'.' | b'\\' | b'"' | b'(' | b')' | b';' | b'@' | b'$' => {
                text.push('\\');
                text.push(char::from(byte));
            }
            0x21..=0x7e => text.push(char::from(byte)),
            _ => {
                let _ = write!(text, "\\{byte:03}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &[u8] = b"0123456789abcdef0123456789abcdef";

    fn redacted(key: &[u8]) -> Names {
        Names::redacted(Redaction::new(key, "cluster.local").unwrap())
    }

    /// `name` in presentation format (no escapes in it) written by `names`.
    fn written(names: &Names, name: &str) -> String {
        let labels = name
            .trim_end_matches('.')
            .split('.')
            .filter(|label| !label.is_empty());
        let mut text = String::new();
        names.write(labels.map(str::as_bytes), &mut text);
        text
    }

    /// Whether `label` is a hash as written.
    fn is_hash(label: &str) -> bool {
        label.strip_prefix("h:").is_some_and(|hex| {
            hex.len() == HASH_DIGITS && hex.bytes().all(|byte| byte.is_ascii_hexdigit())
        })
    }

    /// The shape of a redacted name: `#` for each hash.
    fn shape(text: &str) -> String {
        text.trim_end_matches('.')
            .split('.')
            .map(|label| if is_hash(label) { "#" } else { label })
            .collect::<Vec<_>>()
            .join(".")
    }

    #[test]
    fn as_sent_keeps_case_and_escapes_like_dig() {
        let labels: [&[u8]; 4] = [b"Api", b"a.b", b"\x07bell", b"svc"];
        let mut text = String::new();
        Names::AsSent.write(labels.into_iter(), &mut text);
        assert_eq!(text, "Api.a\\.b.\\007bell.svc.");
        assert_eq!(written(&Names::AsSent, "."), ".");
    }

    #[test]
    fn the_cluster_structure_stays_readable_and_the_rest_is_hashed() {
        let names = redacted(KEY);
        for (name, expected) in [
            (
                "api.payments.default.svc.cluster.local.",
                "#.#.default.svc.cluster.local",
            ),
            ("default.svc.cluster.local.", "default.svc.cluster.local"),
            ("svc.cluster.local.", "svc.cluster.local"),
            ("cluster.local.", "cluster.local"),
            (
                "10-244-1-5.kube-system.pod.cluster.local.",
                "#.kube-system.pod.cluster.local",
            ),
            ("www.example.com.cluster.local.", "#.#.#.cluster.local"),
            ("www.example.com.", "#.#.com"),
            ("5.1.244.10.in-addr.arpa.", "#.#.#.#.in-addr.arpa"),
            ("1.0.ip6.arpa.", "#.#.ip6.arpa"),
            ("myhost.", "#"),
            ("local.", "#"),
        ] {
            assert_eq!(shape(&written(&names, name)), expected, "{name}");
        }
        assert_eq!(written(&names, "."), ".", "the root is the root");
    }

    #[test]
    fn the_same_key_hashes_alike_and_another_key_does_not() {
        let name = "api.example.com.default.svc.cluster.local.";
        let once = written(&redacted(KEY), name);
        assert_eq!(
            once,
            written(&redacted(KEY), name),
            "another node, same key"
        );
        assert_ne!(once, written(&redacted(b"another key, 16+ bytes"), name));
        assert!(!once.contains("api") && !once.contains("example"), "{once}");
    }

    #[test]
    fn case_variants_of_a_name_are_redacted_alike() {
        let names = redacted(KEY);
        assert_eq!(
            written(&names, "WwW.ExAmple.COM.Default.SVC.cluster.LOCAL."),
            written(&names, "www.example.com.default.svc.cluster.local."),
        );
    }

    #[test]
    fn an_expansion_shows_as_the_name_with_a_suffix() {
        let names = redacted(KEY);
        let name = written(&names, "api.example.com.");
        let expansion = written(&names, "api.example.com.default.svc.cluster.local.");
        // `h:A.h:B.com.` and `h:A.h:B.h:C.default.svc.cluster.local.`: the top-level label is
        // readable only where it is the top.
        let hashed = name.strip_suffix("com.").unwrap();
        let rest = expansion
            .strip_prefix(hashed)
            .unwrap_or_else(|| panic!("{expansion}"));
        assert_eq!(
            shape(rest),
            "#.default.svc.cluster.local",
            "{name} {expansion}"
        );
    }

    #[test]
    fn any_label_is_hashed_to_the_same_length_and_readable_labels_are_escaped() {
        let names = redacted(KEY);
        let long = [b'x'; 63];
        let odd: &[u8] = b"a b\x00\xc3\xa9";
        let labels: [&[u8]; 3] = [&long, odd, b"C\\om"];
        let mut text = String::new();
        names.write(labels.into_iter(), &mut text);
        let parts: Vec<&str> = text.trim_end_matches('.').split('.').collect();
        assert!(is_hash(parts[0]) && is_hash(parts[1]), "{text}");
        assert_eq!(
            parts[2], "c\\\\om",
            "the top-level label, escaped, lower case"
        );
        assert!(text.is_ascii());
    }

    #[test]
    fn short_keys_and_bad_cluster_domains_are_refused() {
        assert_eq!(
            Redaction::new(b"short", "cluster.local").unwrap_err(),
            RedactionError::KeyTooShort(5)
        );
        assert_eq!(
            Redaction::new(&[0; MAX_KEY_BYTES + 1], "cluster.local").unwrap_err(),
            RedactionError::KeyTooLong
        );
        for domain in ["", ".", "a..b", "cluster local"] {
            assert!(
                Redaction::new(KEY, domain).is_err(),
                "{domain:?} is no cluster domain"
            );
        }
        assert_eq!(
            Redaction::new(KEY, "Cluster.Local."),
            Redaction::new(KEY, "cluster.local"),
        );
    }

    #[test]
    fn another_cluster_domain_is_kept_instead() {
        let names = Names::redacted(Redaction::new(KEY, "k8s.example.org").unwrap());
        assert_eq!(
            shape(&written(&names, "api.default.svc.k8s.example.org.")),
            "#.default.svc.k8s.example.org"
        );
        assert_eq!(
            shape(&written(&names, "api.default.svc.cluster.local.")),
            "#.#.#.#.local"
        );
    }

    #[test]
    fn the_key_never_shows() {
        let debug = format!("{:?}", redacted(KEY));
        assert!(!debug.contains("0123456789abcdef"), "{debug}");
        assert!(debug.contains("<32 bytes>") && debug.contains("cluster.local"));
    }
}
