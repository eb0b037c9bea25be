//! The node's files, read below `--root`.
//!
//! Paths are node paths (`/etc/resolv.conf`) and symlinks are followed the way the node itself
//! would follow them: an absolute target starts again at the root and `..` never climbs above
//! it, so `/etc/resolv.conf -> /run/systemd/resolve/stub-resolv.conf` on a mounted disk reads
//! the disk's file, never this machine's.
use std::{
    fs,
    io::{self, Read as _},
    path::{Path, PathBuf},
};

/// Symlinks followed before giving up, as the kernel does (`ELOOP` after 40).
const MAX_SYMLINKS: usize = 40;

/// The most of one file doctor reads. Every file it reads is a few KiB; this bounds memory
/// on a file that is not what it should be (a log, a disk image) without failing on it.
const MAX_FILE_BYTES: u64 = 4 << 20;

#[derive(Clone, Debug)]
pub struct NodeRoot {
    dir: PathBuf,
}

/// A node path and where it leads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeFile {
    /// The path asked for.
    pub asked: String,
    /// The path after every symlink: the file whose lines a check points at.
    pub path: String,
    /// The targets of the symlinks followed, in order, as written.
    pub links: Vec<String>,
}

impl NodeFile {
    /// `/etc/resolv.conf -> ../run/systemd/resolve/stub-resolv.conf`, or the bare path when no
    /// symlink was followed.
    pub fn describe(&self) -> String {
        let mut text = self.asked.clone();
        for target in &self.links {
            text.push_str(" -> ");
            text.push_str(target);
        }
        text
    }
}

/// Why a file's content is not there to check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unavailable {
    /// It (or a directory on its way) does not exist, or a symlink on its way dangles.
    Missing,
    /// It exists but could not be read; the reason is the system's.
    Unreadable(String),
}

impl Unavailable {
    fn from_io(error: &io::Error) -> Self {
        match error.kind() {
            // A file where a directory should be means the path does not exist either.
            io::ErrorKind::NotFound | io::ErrorKind::NotADirectory => Self::Missing,
            _ => Self::Unreadable(error.to_string()),
        }
    }
}

/// A file's content (parsed into `T`), or why there is none.
#[derive(Clone, Debug)]
pub struct ReadFile<T> {
    pub file: NodeFile,
    pub content: Result<T, Unavailable>,
}

impl<T> ReadFile<T> {
    pub fn map<U>(self, parse: impl FnOnce(T) -> Result<U, Unavailable>) -> ReadFile<U> {
        ReadFile {
            file: self.file,
            content: self.content.and_then(parse),
        }
    }

    pub fn found(&self) -> Option<&T> {
        self.content.as_ref().ok()
    }
}

impl NodeRoot {
    /// `dir` must be a directory; the caller says what to do otherwise.
    pub fn new(dir: PathBuf) -> Self {
        Self { dir }
    }

    /// Where a node path is on this machine, without following symlinks.
    fn host_path(&self, node_path: &str) -> PathBuf {
        self.dir.join(node_path.trim_start_matches('/'))
    }

    /// Follows `node_path`'s symlinks below the root. Errors other than a missing file stop the
    /// walk: the file is then unreadable, and the reason says why.
    pub fn resolve(&self, node_path: &str) -> (NodeFile, Result<(), Unavailable>) {
        let mut pending: Vec<String> = components(node_path).rev().map(String::from).collect();
        let mut resolved: Vec<String> = Vec::new();
        let mut links = Vec::new();
        let mut outcome = Ok(());
        while let Some(component) = pending.pop() {
            match component.as_str() {
                "." => continue,
                ".." => {
                    resolved.pop();
                    continue;
                }
                _ => resolved.push(component),
            }
            let here = join(&resolved);
            let metadata = match fs::symlink_metadata(self.host_path(&here)) {
                Ok(metadata) => metadata,
                Err(error) => {
                    outcome = Err(Unavailable::from_io(&error));
                    // The rest of the path as asked, so the report names the whole path.
                    resolved.extend(pending.drain(..).rev());
                    break;
                }
            };
            if !metadata.file_type().is_symlink() {
                continue;
            }
            if links.len() == MAX_SYMLINKS {
                outcome = Err(Unavailable::Unreadable(format!(
                    "more than {MAX_SYMLINKS} symlinks on the way (a symlink loop)"
                )));
                break;
            }
            let target = match fs::read_link(self.host_path(&here)) {
                Ok(target) => target.to_string_lossy().into_owned(),
                Err(error) => {
                    outcome = Err(Unavailable::from_io(&error));
                    break;
                }
            };
            resolved.pop();
            if target.starts_with('/') {
                resolved.clear();
            }
            pending.extend(components(&target).rev().map(String::from));
            links.push(target);
        }
        let file = NodeFile {
            asked: node_path.to_string(),
            path: join(&resolved),
            links,
        };
        (file, outcome)
    }

    /// Reads a text file: at most [`MAX_FILE_BYTES`], bytes that are not UTF-8 replaced.
    pub fn read(&self, node_path: &str) -> ReadFile<String> {
        let (file, resolved) = self.resolve(node_path);
        let content = resolved.and_then(|()| {
            read_capped(&self.host_path(&file.path)).map_err(|error| Unavailable::from_io(&error))
        });
        ReadFile { file, content }
    }

    /// The names in a directory, sorted.
    pub fn list(&self, node_path: &str) -> Result<Vec<String>, Unavailable> {
        let (file, resolved) = self.resolve(node_path);
        resolved?;
        let entries = fs::read_dir(self.host_path(&file.path))
            .map_err(|error| Unavailable::from_io(&error))?;
        let mut names = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|error| Unavailable::from_io(&error))?;
            names.push(entry.file_name().to_string_lossy().into_owned());
        }
        names.sort();
        Ok(names)
    }

    /// Whether a path exists (after its symlinks).
    pub fn exists(&self, node_path: &str) -> bool {
        let (file, resolved) = self.resolve(node_path);
        resolved.is_ok() && self.host_path(&file.path).exists()
    }
}

fn components(path: &str) -> impl DoubleEndedIterator<Item = &str> {
    path.split('/').filter(|component| !component.is_empty())
}

fn join(components: &[String]) -> String {
    format!("/{}", components.join("/"))
}

fn read_capped(path: &Path) -> io::Result<String> {
    let mut bytes = Vec::new();
    fs::File::open(path)?
        .take(MAX_FILE_BYTES)
        .read_to_end(&mut bytes)?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;

    fn tree() -> tempfile::TempDir {
        let root = tempfile::tempdir().expect("create a temporary directory");
        fs::create_dir_all(root.path().join("etc")).unwrap();
        fs::create_dir_all(root.path().join("run/systemd/resolve")).unwrap();
        fs::write(
            root.path().join("run/systemd/resolve/stub-resolv.conf"),
            "nameserver 127.0.0.53\n",
        )
        .unwrap();
        root
    }

    #[test]
    fn a_relative_symlink_is_followed_below_the_root() {
        let root = tree();
        symlink(
            "../run/systemd/resolve/stub-resolv.conf",
            root.path().join("etc/resolv.conf"),
        )
        .unwrap();
        let read = NodeRoot::new(root.path().into()).read("/etc/resolv.conf");
        assert_eq!(read.file.path, "/run/systemd/resolve/stub-resolv.conf");
        assert_eq!(
            read.file.describe(),
            "/etc/resolv.conf -> ../run/systemd/resolve/stub-resolv.conf"
        );
        assert_eq!(read.content.unwrap(), "nameserver 127.0.0.53\n");
    }

    #[test]
    fn an_absolute_symlink_starts_again_at_the_root_not_at_this_machines() {
        let root = tree();
        symlink(
            "/run/systemd/resolve/stub-resolv.conf",
            root.path().join("etc/resolv.conf"),
        )
        .unwrap();
        let read = NodeRoot::new(root.path().into()).read("/etc/resolv.conf");
        assert_eq!(read.file.path, "/run/systemd/resolve/stub-resolv.conf");
        assert_eq!(read.content.unwrap(), "nameserver 127.0.0.53\n");
    }

    #[test]
    fn dot_dot_cannot_climb_above_the_root() {
        let root = tree();
        symlink(
            "../../../../../run/systemd/resolve/stub-resolv.conf",
            root.path().join("etc/resolv.conf"),
        )
        .unwrap();
        let read = NodeRoot::new(root.path().into()).read("/etc/resolv.conf");
        assert_eq!(read.file.path, "/run/systemd/resolve/stub-resolv.conf");
        assert!(read.content.is_ok());
    }

    #[test]
    fn a_symlinked_directory_on_the_way_is_followed() {
        let root = tree();
        fs::create_dir_all(root.path().join("data/kubelet")).unwrap();
        fs::write(root.path().join("data/kubelet/config.yaml"), "kind: x\n").unwrap();
        fs::create_dir_all(root.path().join("var/lib")).unwrap();
        symlink("/data/kubelet", root.path().join("var/lib/kubelet")).unwrap();
        let read = NodeRoot::new(root.path().into()).read("/var/lib/kubelet/config.yaml");
        assert_eq!(read.file.path, "/data/kubelet/config.yaml");
        assert_eq!(read.content.unwrap(), "kind: x\n");
    }

    #[test]
    fn a_dangling_symlink_is_missing_and_names_its_target() {
        let root = tree();
        symlink(
            "/run/resolvconf/resolv.conf",
            root.path().join("etc/resolv.conf"),
        )
        .unwrap();
        let read = NodeRoot::new(root.path().into()).read("/etc/resolv.conf");
        assert_eq!(read.content, Err(Unavailable::Missing));
        assert_eq!(read.file.path, "/run/resolvconf/resolv.conf");
    }

    #[test]
    fn a_symlink_loop_is_unreadable_not_a_hang() {
        let root = tree();
        symlink("b", root.path().join("etc/a")).unwrap();
        symlink("a", root.path().join("etc/b")).unwrap();
        let read = NodeRoot::new(root.path().into()).read("/etc/a");
        assert!(
            matches!(read.content, Err(Unavailable::Unreadable(ref why)) if why.contains("loop")),
            "{:?}",
            read.content
        );
    }

    #[test]
    fn a_file_in_place_of_a_directory_means_missing() {
        let root = tree();
        fs::write(root.path().join("etc/kubernetes"), "").unwrap();
        let read = NodeRoot::new(root.path().into()).read("/etc/kubernetes/kubelet-config.yaml");
        assert_eq!(read.content, Err(Unavailable::Missing));
    }

    #[test]
    fn a_directory_is_unreadable_as_a_file() {
        let root = tree();
        let read = NodeRoot::new(root.path().into()).read("/etc");
        assert!(matches!(read.content, Err(Unavailable::Unreadable(_))));
    }

    #[test]
    fn listing_a_directory_sorts_its_names() {
        let root = tree();
        fs::write(root.path().join("etc/b"), "").unwrap();
        fs::write(root.path().join("etc/a"), "").unwrap();
        let node = NodeRoot::new(root.path().into());
        assert_eq!(node.list("/etc").unwrap(), ["a", "b"]);
        assert_eq!(node.list("/nope"), Err(Unavailable::Missing));
        assert!(node.exists("/run/systemd"));
        assert!(!node.exists("/run/nope"));
    }
}
