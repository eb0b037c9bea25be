//! Every dependency a workspace crate declares is one its code names: a dependency left behind
//! after the code that used it moved (to `dnsloop-core`, say) still builds, and costs every
//! build its compile time.
//!
//! A check on text, not on the compiler: a crate counts as used where one of its package's own
//! source files (not those of a package nested inside it) says `name::`, `use name` or
//! `extern crate name`, or calls a macro of it by path.

#[cfg(test)]
mod tests {
    use std::{
        collections::BTreeSet,
        path::{Path, PathBuf},
    };

    use serde_json::Value;

    use crate::command;

    /// Every workspace package: its directory, and the crate names of its dependencies.
    fn packages() -> Vec<(PathBuf, BTreeSet<String>)> {
        let output = command::cargo_command()
            .args(["metadata", "--format-version", "1", "--no-deps"])
            .output()
            .expect("running cargo metadata");
        assert!(output.status.success(), "cargo metadata failed");
        let metadata: Value =
            serde_json::from_slice(&output.stdout).expect("cargo metadata's JSON");
        metadata["packages"]
            .as_array()
            .expect("packages")
            .iter()
            .map(|package| {
                let manifest = PathBuf::from(package["manifest_path"].as_str().expect("a path"));
                let dir = manifest.parent().expect("a directory").to_path_buf();
                let crates = package["dependencies"]
                    .as_array()
                    .expect("dependencies")
                    .iter()
                    .map(|dependency| {
                        dependency["rename"]
                            .as_str()
                            .or(dependency["name"].as_str())
                            .expect("a name")
                            .replace('-', "_")
                    })
                    .collect();
                (dir, crates)
            })
            .collect()
    }

    /// The Rust sources of the package in `dir`, without those of packages nested in it.
    fn sources(dir: &Path, root: bool, out: &mut Vec<PathBuf>) {
        if !root && dir.join("Cargo.toml").exists() {
            return;
        }
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name();
            if path.is_dir() && name != "target" && !name.to_string_lossy().starts_with('.') {
                sources(&path, false, out);
            } else if path.extension().is_some_and(|extension| extension == "rs") {
                out.push(path);
            }
        }
    }

    fn names(text: &str, krate: &str) -> bool {
        [
            format!("{krate}::"),
            format!("use {krate}"),
            format!("extern crate {krate}"),
        ]
        .iter()
        .any(|pattern| {
            text.match_indices(pattern.as_str()).any(|(at, _)| {
                // Not the end of a longer name (`my_bytes::`).
                !text[..at]
                    .chars()
                    .next_back()
                    .is_some_and(|before| before.is_alphanumeric() || before == '_')
            })
        })
    }

    #[test]
    fn every_declared_dependency_is_named_in_its_package() {
        let mut unused = Vec::new();
        for (dir, crates) in packages() {
            let mut files = Vec::new();
            sources(&dir, true, &mut files);
            let text: String = files
                .iter()
                .filter_map(|file| std::fs::read_to_string(file).ok())
                .collect::<Vec<_>>()
                .join("\n");
            for krate in crates {
                if !names(&text, &krate) {
                    unused.push(format!("{}: {krate}", dir.display()));
                }
            }
        }
        assert!(
            unused.is_empty(),
            "dependencies no source of their package names (remove them from its Cargo.toml):\n{}",
            unused.join("\n")
        );
    }
}
