//! Files that hold packets or the names pods asked: created readable by their owner alone
//! (files 0600, directories 0700) whatever the umask, since a umask only takes bits away. A
//! node's other users must not read its pods' DNS.
use std::{
    fs::{DirBuilder, File, OpenOptions},
    io,
    os::unix::fs::{DirBuilderExt as _, MetadataExt as _, OpenOptionsExt as _},
    path::Path,
};

const DIR_MODE: u32 = 0o700;
const FILE_MODE: u32 = 0o600;

/// Creates `dir` and the parents it lacks, each 0700; one that exists is left as it is.
pub fn create_dir_all(dir: &Path) -> io::Result<()> {
    DirBuilder::new().recursive(true).mode(DIR_MODE).create(dir)
}

/// Creates `dir`, 0700; fails if it exists.
pub fn create_dir(dir: &Path) -> io::Result<()> {
    DirBuilder::new().mode(DIR_MODE).create(dir)
}

/// Creates `path` for writing, 0600; fails if it exists.
pub fn create_new_file(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(FILE_MODE)
        .open(path)
}

/// `dir`'s permission bits if users other than its owner and group may write in it (who could
/// replace or remove what dnsloop writes there); `None` if they may not.
pub fn writable_by_others(dir: &Path) -> io::Result<Option<u32>> {
    let mode = dir.metadata()?.mode() & 0o7777;
    Ok((mode & 0o002 != 0).then_some(mode))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;

    fn mode(path: &Path) -> u32 {
        path.metadata().unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn directories_and_files_are_their_owners_alone() {
        let root = tempfile::tempdir().unwrap();
        let nested = root.path().join("a/b");
        create_dir_all(&nested).unwrap();
        assert_eq!(
            (mode(&root.path().join("a")), mode(&nested)),
            (0o700, 0o700)
        );
        let bundle = nested.join("bundle");
        create_dir(&bundle).unwrap();
        assert_eq!(mode(&bundle), 0o700);
        let file = bundle.join("capture.pcapng");
        create_new_file(&file).unwrap();
        assert_eq!(mode(&file), 0o600);
        assert!(create_new_file(&file).is_err(), "never overwritten");
    }

    #[test]
    fn a_directory_others_can_write_is_told_apart() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path();
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(writable_by_others(dir).unwrap(), None);
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o1777)).unwrap();
        assert_eq!(writable_by_others(dir).unwrap(), Some(0o1777));
    }
}
