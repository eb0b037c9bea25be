//! The recorder's bundles on disk: each in a new directory named after its finding, the
//! oldest removed once they take more than their budget.
use std::{
    fs, io,
    path::{Path, PathBuf},
    time::SystemTime,
};

use crate::{bundle::private, present::time::rfc3339};

/// What every bundle directory the recorder makes starts with: only these are ever removed.
const BUNDLE_PREFIX: &str = "dnsloop-";

/// Makes a new directory under `dir` for a bundle about a finding at `at` named `what`
/// (`loop-<loop_id>`, `timeout`, ...): `dnsloop-2025-01-01T120001.123Z-what`, with `-2`, `-3`
/// ... added if that exists. The time sorts the names; it has no colons, which `kubectl cp`
/// would take for a pod's name.
pub(super) fn new_bundle_dir(dir: &Path, at: SystemTime, what: &str) -> io::Result<PathBuf> {
    let time = rfc3339(at).replace(':', "");
    let name = format!("{BUNDLE_PREFIX}{time}-{what}");
    let mut attempt = 1;
    loop {
        let path = match attempt {
            1 => dir.join(&name),
            _ => dir.join(format!("{name}-{attempt}")),
        };
        match private::create_dir(&path) {
            Ok(()) => return Ok(path),
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists && attempt < 1000 => {
                attempt += 1;
            }
            Err(error) => return Err(error),
        }
    }
}

/// What pruning did.
#[derive(Debug, Default)]
pub(super) struct Pruned {
    pub removed: Vec<PathBuf>,
    pub failed: Vec<(PathBuf, io::Error)>,
}

/// Removes the oldest bundles under `dir` made before `newest` while all of them together
/// take more than `budget` bytes: `newest`, the bundle just written, is kept whole.
pub(super) fn prune(dir: &Path, newest: &Path, budget: u64) -> io::Result<Pruned> {
    let mut bundles = Vec::new();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let is_bundle = entry
            .file_name()
            .to_string_lossy()
            .starts_with(BUNDLE_PREFIX)
            && entry.file_type()?.is_dir();
        if is_bundle {
            bundles.push((entry.file_name(), entry.path()));
        }
    }
    bundles.sort();
    let sizes: Vec<u64> = bundles.iter().map(|(_, path)| size(path)).collect();
    let mut total: u64 = sizes.iter().sum();
    let mut pruned = Pruned::default();
    let newest_name = newest.file_name();
    for ((name, path), size) in bundles.iter().zip(sizes) {
        if total <= budget || Some(name.as_os_str()) >= newest_name {
            break;
        }
        match fs::remove_dir_all(path) {
            Ok(()) => {
                total -= size;
                pruned.removed.push(path.clone());
            }
            Err(error) => pruned.failed.push((path.clone(), error)),
        }
    }
    Ok(pruned)
}

/// The bytes of the files in bundle directory `path`.
fn size(path: &Path) -> u64 {
    fs::read_dir(path)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| entry.metadata().ok())
        .filter(|metadata| metadata.is_file())
        .map(|metadata| metadata.len())
        .sum()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + secs)
    }

    fn bundle(dir: &Path, secs: u64, bytes: usize) -> PathBuf {
        let path = new_bundle_dir(dir, at(secs), "timeout").unwrap();
        fs::write(path.join("capture.pcapng"), vec![0; bytes]).unwrap();
        path
    }

    #[test]
    fn a_bundle_directory_is_new_and_named_to_sort_by_time() {
        let dir = tempfile::tempdir().unwrap();
        let first = new_bundle_dir(dir.path(), at(0), "loop-00000000000000ab").unwrap();
        let again = new_bundle_dir(dir.path(), at(0), "loop-00000000000000ab").unwrap();
        let later = new_bundle_dir(dir.path(), at(1), "timeout").unwrap();
        let name = |path: &Path| path.file_name().unwrap().to_string_lossy().into_owned();
        assert_eq!(
            name(&first),
            "dnsloop-2023-11-14T221320.000Z-loop-00000000000000ab"
        );
        assert_eq!(name(&again), format!("{}-2", name(&first)));
        assert!(name(&first) < name(&later) && name(&again) < name(&later));
    }

    #[test]
    fn the_oldest_bundles_are_removed_past_the_budget_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let oldest = bundle(dir.path(), 0, 400);
        let older = bundle(dir.path(), 1, 400);
        let newest = bundle(dir.path(), 2, 400);
        // Not the recorder's: never removed.
        fs::create_dir(dir.path().join("kept-by-hand")).unwrap();
        fs::write(
            dir.path().join("kept-by-hand/capture.pcapng"),
            vec![0; 4000],
        )
        .unwrap();

        let pruned = prune(dir.path(), &newest, 1000).unwrap();
        assert_eq!(pruned.removed, std::slice::from_ref(&oldest));
        assert!(!oldest.exists() && older.exists() && newest.exists());

        // The bundle just written is kept whole, even alone past the budget.
        let pruned = prune(dir.path(), &newest, 100).unwrap();
        assert_eq!(pruned.removed, [older]);
        assert!(newest.exists() && dir.path().join("kept-by-hand").exists());
    }
}
