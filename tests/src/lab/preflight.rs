//! What the host must offer before a lab can come up: root, and the programs the lab runs.
use std::{env, path::Path};

/// Programs the lab runs, with the Debian package that ships each.
const REQUIRED_PROGRAMS: &[(&str, &str)] = &[
    ("ip", "iproute2"),
    ("nft", "nftables"),
    ("sysctl", "procps"),
    ("dnsmasq", "dnsmasq-base"),
    ("unbound", "unbound"),
    ("dnsdist", "dnsdist"),
    ("kresd", "knot-resolver"),
    ("bridge", "iproute2"),
    ("dig", "bind9-dnsutils"),
    ("tcpdump", "tcpdump"),
    ("conntrack", "conntrack"),
];

#[derive(Debug, thiserror::Error)]
pub enum HostNotReady {
    #[error("the node lab needs root (it creates network namespaces): run it as root")]
    NotRoot,
    #[error("{program} not found: run `cargo xtask setup` (or `apt-get install {package}`)")]
    MissingProgram {
        program: &'static str,
        package: &'static str,
    },
}

/// Checks that this process is root and that every program the lab runs is on `PATH`.
pub fn check_host() -> Result<(), HostNotReady> {
    require_root()?;
    match REQUIRED_PROGRAMS
        .iter()
        .find(|(program, _)| !on_path(program))
    {
        Some(&(program, package)) => Err(HostNotReady::MissingProgram { program, package }),
        None => Ok(()),
    }
}

pub(crate) fn require_root() -> Result<(), HostNotReady> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        Ok(())
    } else {
        Err(HostNotReady::NotRoot)
    }
}

fn on_path(program: &str) -> bool {
    env::var_os("PATH")
        .is_some_and(|path| env::split_paths(&path).any(|dir| is_executable(&dir.join(program))))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata()
        .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
}
