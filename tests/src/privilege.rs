//! Whether a privileged test can run here. Under `CI=true` a test that cannot run fails; it
//! never skips silently.

/// Returns `true` when the calling test can run. Otherwise, outside CI, prints why it is
/// skipped and returns `false`; under CI it panics with the reason.
pub fn can_run(test: &str, needs: &[Need]) -> bool {
    let missing: Vec<String> = needs.iter().filter_map(|need| need.missing()).collect();
    if missing.is_empty() {
        return true;
    }
    let reason = format!("{test} cannot run: {}", missing.join("; "));
    if std::env::var("CI").is_ok_and(|value| value == "true") {
        panic!("{reason} (CI=true: privileged tests must run; run `cargo xtask test` as root)");
    }
    eprintln!("SKIPPED {reason}");
    false
}

pub enum Need {
    Root,
    /// A command-line tool the test runs (installed by `cargo xtask setup`).
    Tool(&'static str),
    /// The dnsloop binary named by `DNSLOOP_BIN` (set by `cargo xtask test`).
    DnsloopBinary,
    /// A package of python3's (installed by `cargo xtask setup`).
    PythonModule(&'static str),
}

impl Need {
    fn missing(&self) -> Option<String> {
        match self {
            // SAFETY: geteuid has no preconditions.
            Need::Root => (unsafe { libc::geteuid() } != 0).then(|| "not root".to_string()),
            Need::Tool(tool) => (!on_path(tool))
                .then(|| format!("`{tool}` is not installed (run `cargo xtask setup`)")),
            Need::PythonModule(module) => (!python_has(module))
                .then(|| format!("python3 cannot import `{module}` (run `cargo xtask setup`)")),
            Need::DnsloopBinary => match std::env::var_os(crate::DNSLOOP_BIN_ENV) {
                Some(path) if std::path::Path::new(&path).is_file() => None,
                Some(path) => Some(format!(
                    "{} = {path:?} is not a file",
                    crate::DNSLOOP_BIN_ENV
                )),
                None => Some(format!(
                    "{} is not set (run the tests with `cargo xtask test`)",
                    crate::DNSLOOP_BIN_ENV
                )),
            },
        }
    }
}

/// The dnsloop binary under test; call after `can_run(.., &[Need::DnsloopBinary])`.
pub fn dnsloop_bin() -> std::path::PathBuf {
    std::env::var_os(crate::DNSLOOP_BIN_ENV)
        .map(Into::into)
        .unwrap_or_default()
}

/// Whether an executable named `tool` is on `PATH`. Tools are looked up, not run: some (tshark)
/// start capturing when asked for their version the wrong way.
fn on_path(tool: &str) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|dir| {
            std::fs::metadata(dir.join(tool))
                .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
        })
    })
}

/// Whether python3 imports `module`.
fn python_has(module: &str) -> bool {
    std::process::Command::new("python3")
        .args(["-c", &format!("import {module}")])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}
