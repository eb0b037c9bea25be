//! Debian's packaged kernels, fetched with apt and unpacked once under
//! `target/kernels/<package>/`: Debian 12's from the system's own package sources, Debian 11's
//! through package lists of their own, so that the system's are left alone.
use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{bail, ensure, Context as _, Result};

use crate::command;

/// The modules the guest loads: the clsact qdisc and the tc BPF classifier.
const MODULES: [&str; 2] = ["net/sched/sch_ingress.ko", "net/sched/cls_bpf.ko"];

/// The Debian release a kernel is packaged for.
#[derive(Clone, Copy, Debug)]
pub enum Suite {
    /// Debian 12, from the system's package sources.
    Bookworm,
    /// Debian 11 (`bullseye` and `bullseye-security`), from `target/kernels/apt-bullseye/`:
    /// its own sources list, package lists and cache.
    Bullseye,
}

/// Debian 11's archives, signed with the keys Debian 12's keyring holds too.
const BULLSEYE_SOURCES: &str = "\
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bullseye main
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian-security bullseye-security main
";

/// How apt is run for one suite: the options that point it at the suite's package lists.
struct Apt {
    options: Vec<String>,
}

impl Apt {
    fn for_suite(suite: Suite, cache: &Path) -> Result<Self> {
        let options = match suite {
            Suite::Bookworm => Vec::new(),
            Suite::Bullseye => {
                let root = cache.join("apt-bullseye");
                for dir in ["lists/partial", "cache/archives/partial"] {
                    std::fs::create_dir_all(root.join(dir))
                        .with_context(|| format!("creating {}", root.join(dir).display()))?;
                }
                let sources = root.join("sources.list");
                std::fs::write(&sources, BULLSEYE_SOURCES)
                    .with_context(|| format!("writing {}", sources.display()))?;
                let path = |name: &str| root.join(name).display().to_string();
                vec![
                    format!("Dir::Etc::SourceList={}", sources.display()),
                    "Dir::Etc::SourceParts=/dev/null".to_owned(),
                    format!("Dir::State::Lists={}", path("lists")),
                    format!("Dir::Cache={}", path("cache")),
                ]
            }
        };
        Ok(Self { options })
    }

    /// `program` (`apt-get`, `apt-cache`) with this suite's options, then `args`.
    fn command(&self, program: &str, args: &[&str]) -> Command {
        let mut command = Command::new(program);
        for option in &self.options {
            command.args(["-o", option]);
        }
        command.args(args);
        command
    }
}

/// An unpacked kernel package.
pub struct Kernel {
    /// `linux-image-6.1.0-56-amd64`
    pub package: String,
    /// `6.1.192-2`
    pub version: String,
    pub vmlinuz: PathBuf,
    /// The [`MODULES`], in that order (`.ko`, or `.ko.xz` from 6.12 on).
    pub modules: Vec<PathBuf>,
}

/// The kernel image `metapackage` depends on, which must be of `series` (`6.1`), downloaded
/// unless it already is. Only what the guest needs is kept: the image and the modules.
pub fn kernel(suite: Suite, metapackage: &str, series: &str, cache: &Path) -> Result<Kernel> {
    let apt = Apt::for_suite(suite, cache)?;
    let package = current_image_package(&apt, suite, metapackage, series)?;
    let dir = cache.join(&package);
    let vmlinuz = dir.join("vmlinuz");
    if !vmlinuz.is_file() {
        unpack(&apt, &package, &dir)?;
    }
    let modules = MODULES
        .iter()
        .map(|module| {
            let name = module.rsplit('/').next().unwrap_or(module);
            let plain = dir.join(name);
            let compressed = plain.with_extension("ko.xz");
            [plain, compressed]
                .into_iter()
                .find(|path| path.is_file())
                .with_context(|| {
                    format!(
                        "{package} has no {module}: remove {} and run again",
                        dir.display()
                    )
                })
        })
        .collect::<Result<_>>()?;
    let version = std::fs::read_to_string(dir.join("version")).unwrap_or_default();
    Ok(Kernel {
        package,
        version: version.trim().to_owned(),
        vmlinuz,
        modules,
    })
}

/// Downloads `package` and keeps its image and [`MODULES`] in `dir`; the image goes last, as
/// the mark of a complete unpacking.
fn unpack(apt: &Apt, package: &str, dir: &Path) -> Result<()> {
    let deb = download(apt, package, dir)?;
    let root = dir.join("unpacked");
    let _ = std::fs::remove_dir_all(&root);
    command::run(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&root))?;
    let release = package
        .strip_prefix("linux-image-")
        .context("a linux-image package")?;
    for module in MODULES {
        let plain = root.join(format!("lib/modules/{release}/kernel/{module}"));
        for path in [plain.clone(), plain.with_extension("ko.xz")] {
            if let Some(name) = path.file_name().filter(|_| path.is_file()) {
                std::fs::rename(&path, dir.join(name))?;
            }
        }
    }
    let image = root.join(format!("boot/vmlinuz-{release}"));
    ensure!(image.is_file(), "{package} has no {}", image.display());
    std::fs::rename(&image, dir.join("vmlinuz"))?;
    std::fs::remove_dir_all(&root).context("removing the unpacked package")?;
    std::fs::remove_file(&deb).context("removing the downloaded package")?;
    Ok(())
}

/// What `metapackage` depends on: `linux-image-amd64` on `linux-image-6.1.0-<abi>-amd64` in
/// Debian 12, on `linux-image-5.10.0-<abi>-amd64` in Debian 11.
fn current_image_package(
    apt: &Apt,
    suite: Suite,
    metapackage: &str,
    series: &str,
) -> Result<String> {
    let mut dependencies = apt_cache(apt, &["depends", metapackage]);
    if dependencies.is_err() {
        // A fresh container, or a suite not fetched before, has no package lists yet.
        command::run(&mut apt.command("apt-get", &["update", "-qq"]))?;
        dependencies = apt_cache(apt, &["depends", metapackage]);
    }
    let package = image_dependency(&dependencies?)
        .with_context(|| format!("`apt-cache depends {metapackage}` names no kernel image"))?;
    ensure!(
        package.starts_with(&format!("linux-image-{series}.")),
        "{metapackage} is {package} in {suite:?}, not Linux {series}: `cargo xtask kernels` needs a Debian 12 (bookworm) system's package sources"
    );
    Ok(package)
}

fn image_dependency(depends: &str) -> Option<String> {
    depends
        .lines()
        .filter_map(|line| line.trim().strip_prefix("Depends: "))
        .find(|package| package.starts_with("linux-image-"))
        .map(str::to_owned)
}

fn apt_cache(apt: &Apt, args: &[&str]) -> Result<String> {
    let output = apt
        .command("apt-cache", args)
        .output()
        .context("running apt-cache")?;
    if !output.status.success() {
        bail!(
            "apt-cache {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// Downloads `package`'s .deb into `dir` and notes its version there.
fn download(apt: &Apt, package: &str, dir: &Path) -> Result<PathBuf> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    eprintln!("kernels: downloading {package} (50 to 110 MB, once)");
    command::run(
        apt.command("apt-get", &["download", "-qq", package])
            .current_dir(dir),
    )?;
    let deb = std::fs::read_dir(dir)?
        .flatten()
        .map(|entry| entry.path())
        .find(|path| path.extension().is_some_and(|extension| extension == "deb"))
        .with_context(|| format!("apt-get download left no .deb in {}", dir.display()))?;
    let version = Command::new("dpkg-deb")
        .args(["--field"])
        .arg(&deb)
        .arg("Version")
        .output()
        .context("reading the package's version")?;
    std::fs::write(dir.join("version"), &version.stdout)?;
    Ok(deb)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_image_is_the_metapackages_dependency() {
        let depends = "linux-image-amd64\n  Depends: linux-image-6.1.0-56-amd64\n";
        assert_eq!(
            image_dependency(depends).as_deref(),
            Some("linux-image-6.1.0-56-amd64")
        );
        assert_eq!(image_dependency("linux-image-amd64\n"), None);
    }
}
