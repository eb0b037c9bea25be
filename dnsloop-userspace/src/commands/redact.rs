//! `--redact-names KEY_FILE` and `--cluster-domain`, which `trace`, `capture` and `analyze`
//! share: every name they write out becomes a keyed hash of its labels (see
//! `dnsloop_core::present::names`), the key read from a file that every node is given alike.
use std::{
    fs::File,
    io::Read as _,
    os::unix::fs::PermissionsExt as _,
    path::{Path, PathBuf},
};

use anyhow::{bail, Context as _};
use dnsloop_core::present::names::{Names, Redaction, MAX_KEY_BYTES};

#[derive(clap::Args, Clone, Debug, PartialEq, Eq)]
pub struct RedactArgs {
    /// Write every queried name as a keyed hash of its labels, in every output (text, JSON,
    /// bundles' reports): api.default.svc.cluster.local becomes
    /// h:3f9a1c0d52e8.default.svc.cluster.local, www.example.com h:5c0e7f19aa30.h:9d11aa6e03f4.com.
    /// The key is the bytes of KEY_FILE: at least 16 random bytes, readable by its owner alone
    /// (chmod 600). Give every node the same key, and their findings name a loop alike. Bundles
    /// then hold no packet file: its packets carry every name.
    #[arg(long, value_name = "KEY_FILE")]
    pub redact_names: Option<PathBuf>,

    /// The cluster domain, whose structure (<namespace>.svc.<cluster domain>, .pod.) stays
    /// readable in redacted names.
    #[arg(
        long,
        value_name = "DOMAIN",
        default_value = "cluster.local",
        requires = "redact_names"
    )]
    pub cluster_domain: String,
}

impl RedactArgs {
    /// Whether names are to be redacted: known before the key is read.
    pub fn redacting(&self) -> bool {
        self.redact_names.is_some()
    }

    /// How names are to be written out, the key read and checked.
    pub fn names(&self) -> anyhow::Result<Names> {
        let Some(path) = &self.redact_names else {
            return Ok(Names::AsSent);
        };
        let key = read_key(path)?;
        let redaction = Redaction::new(&key, &self.cluster_domain)
            .with_context(|| format!("--redact-names {}", path.display()))?;
        Ok(Names::redacted(redaction))
    }
}

/// The bytes of the key file at `path`, which only its owner may read: whoever reads the key
/// can hash guessed names and so undo the redaction.
fn read_key(path: &Path) -> anyhow::Result<Vec<u8>> {
    let context = || format!("reading the --redact-names key {}", path.display());
    let file = File::open(path).with_context(context)?;
    let mode = file.metadata().with_context(context)?.permissions().mode();
    if mode & 0o044 != 0 {
        bail!(
            "the --redact-names key {} can be read by other users of the node (mode {:o}): \
             whoever reads it can hash guessed names and undo the redaction; make it readable \
             by its owner alone (`chmod 600 {}`; from a Kubernetes Secret, mount it with \
             `defaultMode: 0400`)",
            path.display(),
            mode & 0o7777,
            path.display()
        );
    }
    let mut key = Vec::new();
    file.take(MAX_KEY_BYTES as u64 + 1)
        .read_to_end(&mut key)
        .with_context(context)?;
    Ok(key)
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;

    fn args(path: &Path) -> RedactArgs {
        RedactArgs {
            redact_names: Some(path.to_path_buf()),
            cluster_domain: "cluster.local".into(),
        }
    }

    fn key_file(dir: &Path, key: &[u8], mode: u32) -> PathBuf {
        let path = dir.join("key");
        fs::write(&path, key).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(mode)).unwrap();
        path
    }

    #[test]
    fn a_key_readable_by_its_owner_alone_redacts() {
        let dir = tempfile::tempdir().unwrap();
        let path = key_file(dir.path(), &[7; 32], 0o600);
        assert!(args(&path).names().unwrap().is_redacted());
        let none = RedactArgs {
            redact_names: None,
            cluster_domain: "cluster.local".into(),
        };
        assert_eq!(none.names().unwrap(), Names::AsSent);
    }

    #[test]
    fn a_key_others_can_read_or_too_short_is_refused_saying_what_to_do() {
        let dir = tempfile::tempdir().unwrap();
        let readable = key_file(dir.path(), &[7; 32], 0o644);
        let error = format!("{:#}", args(&readable).names().unwrap_err());
        assert!(
            error.contains("mode 644") && error.contains("chmod 600"),
            "{error}"
        );

        let short = key_file(dir.path(), b"secret\n", 0o600);
        let error = format!("{:#}", args(&short).names().unwrap_err());
        assert!(
            error.contains("7 bytes") && error.contains("/dev/urandom"),
            "{error}"
        );

        let missing = dir.path().join("absent");
        let error = format!("{:#}", args(&missing).names().unwrap_err());
        assert!(error.contains("reading the --redact-names key"), "{error}");
    }
}
