//! A gzipped initramfs: a cpio archive in the kernel's "newc" format, written here so that
//! nothing but gzip has to be installed.
use std::{
    collections::BTreeSet,
    io::Write as _,
    path::Path,
    process::{Command, Stdio},
};

use anyhow::{bail, Context as _, Result};

/// Files and directories, in the order they were added; parents are created as
/// needed.
#[derive(Default)]
pub struct Initramfs {
    archive: Vec<u8>,
    directories: BTreeSet<String>,
    next_inode: u32,
}

const DIRECTORY: u32 = 0o040_755;

impl Initramfs {
    /// Adds a regular file at `path` (absolute) with `mode` (e.g. 0o755).
    pub fn file(&mut self, path: &str, mode: u32, data: &[u8]) {
        self.parents(path);
        self.entry(path, 0o100_000 | mode, data);
    }

    /// Adds the host file `source` at `path`.
    pub fn copy(&mut self, path: &str, source: &Path, mode: u32) -> Result<()> {
        let data =
            std::fs::read(source).with_context(|| format!("reading {}", source.display()))?;
        self.file(path, mode, &data);
        Ok(())
    }

    pub fn directory(&mut self, path: &str) {
        self.parents(path);
        let name = path.trim_start_matches('/');
        if self.directories.insert(name.to_owned()) {
            self.entry(path, DIRECTORY, &[]);
        }
    }

    /// The archive, ended and compressed with `gzip -1` (the kernel unpacks it at boot).
    pub fn gzip(mut self) -> Result<Vec<u8>> {
        self.entry("TRAILER!!!", 0, &[]);
        let mut gzip = Command::new("gzip")
            .args(["-1", "-n", "-c"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .context("starting gzip")?;
        let mut stdin = gzip.stdin.take().context("gzip has no stdin")?;
        let archive = std::mem::take(&mut self.archive);
        let writer = std::thread::spawn(move || stdin.write_all(&archive));
        let output = gzip.wait_with_output().context("running gzip")?;
        writer
            .join()
            .map_err(|_| anyhow::anyhow!("writing to gzip panicked"))?
            .context("writing to gzip")?;
        if !output.status.success() {
            bail!("gzip failed ({})", output.status);
        }
        Ok(output.stdout)
    }

    fn parents(&mut self, path: &str) {
        let name = path.trim_start_matches('/');
        let mut parent = String::new();
        let components: Vec<&str> = name.split('/').collect();
        for component in &components[..components.len().saturating_sub(1)] {
            if !parent.is_empty() {
                parent.push('/');
            }
            parent.push_str(component);
            if self.directories.insert(parent.clone()) {
                self.entry(&parent, DIRECTORY, &[]);
            }
        }
    }

    /// One newc entry: a 110-byte ASCII header, the NUL-ended name, the data, each padded to
    /// 4 bytes.
    fn entry(&mut self, path: &str, mode: u32, data: &[u8]) {
        let name = path.trim_start_matches('/');
        self.next_inode += 1;
        let inode = if mode == 0 { 0 } else { self.next_inode };
        let nlink = if mode == DIRECTORY { 2 } else { 1 };
        let fields = [
            inode,
            mode,
            0, // uid
            0, // gid
            nlink,
            0, // mtime
            u32::try_from(data.len()).expect("initramfs files are under 4 GiB"),
            0, // devmajor
            0, // devminor
            0, // rdevmajor
            0, // rdevminor
            u32::try_from(name.len() + 1).expect("short names"),
            0, // check
        ];
        self.archive.extend_from_slice(b"070701");
        for field in fields {
            self.archive
                .extend_from_slice(format!("{field:08X}").as_bytes());
        }
        self.archive.extend_from_slice(name.as_bytes());
        self.archive.push(0);
        self.pad();
        self.archive.extend_from_slice(data);
        self.pad();
    }

    fn pad(&mut self) {
        while !self.archive.len().is_multiple_of(4) {
            self.archive.push(0);
        }
    }

    #[cfg(test)]
    fn into_archive(mut self) -> Vec<u8> {
        self.entry("TRAILER!!!", 0, &[]);
        self.archive
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (name, mode, data) of every entry, read back as the kernel reads the format.
    fn entries(archive: &[u8]) -> Vec<(String, u32, Vec<u8>)> {
        let mut entries = Vec::new();
        let mut at = 0;
        let field = |at: usize, index: usize| {
            let start = at + 6 + index * 8;
            u32::from_str_radix(std::str::from_utf8(&archive[start..start + 8]).unwrap(), 16)
                .unwrap()
        };
        loop {
            assert_eq!(&archive[at..at + 6], b"070701");
            let (mode, size, name_len) = (field(at, 1), field(at, 6), field(at, 11) as usize);
            let name_at = at + 110;
            let name =
                String::from_utf8(archive[name_at..name_at + name_len - 1].to_vec()).unwrap();
            let data_at = (name_at + name_len).next_multiple_of(4);
            let data = archive[data_at..data_at + size as usize].to_vec();
            at = (data_at + size as usize).next_multiple_of(4);
            if name == "TRAILER!!!" {
                return entries;
            }
            entries.push((name, mode, data));
        }
    }

    #[test]
    fn parents_come_first_once_and_entries_read_back() {
        let mut initramfs = Initramfs::default();
        initramfs.file("/lib/x86_64-linux-gnu/libc.so.6", 0o755, b"elf");
        initramfs.file("/lib/x86_64-linux-gnu/libm.so.6", 0o755, b"12345");
        initramfs.file("/bin/busybox", 0o755, b"bb");
        initramfs.directory("/proc");
        let entries = entries(&initramfs.into_archive());
        let names: Vec<&str> = entries.iter().map(|(name, ..)| name.as_str()).collect();
        assert_eq!(
            names,
            [
                "lib",
                "lib/x86_64-linux-gnu",
                "lib/x86_64-linux-gnu/libc.so.6",
                "lib/x86_64-linux-gnu/libm.so.6",
                "bin",
                "bin/busybox",
                "proc"
            ]
        );
        assert_eq!(entries[0].1, DIRECTORY);
        assert_eq!(
            entries[3],
            (
                "lib/x86_64-linux-gnu/libm.so.6".into(),
                0o100_755,
                b"12345".to_vec()
            )
        );
        assert_eq!(
            entries[5],
            ("bin/busybox".into(), 0o100_755, b"bb".to_vec())
        );
    }
}
