//! The docs' map of the tree stays true: every relative link in the README and in docs/ names
//! a file or folder that exists, and the README's "where things live" names every crate. A move
//! that forgets the docs fails here rather than in a newcomer's browser.

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use crate::command;

    /// The Markdown files that map the tree: the README, BENCHMARKS.md and docs/.
    fn markdown_files(root: &Path) -> Vec<PathBuf> {
        let mut files = vec![root.join("README.md"), root.join("BENCHMARKS.md")];
        let docs = std::fs::read_dir(root.join("docs")).expect("reading docs/");
        files.extend(
            docs.flatten()
                .map(|entry| entry.path())
                .filter(|path| path.extension().is_some_and(|extension| extension == "md")),
        );
        files
    }

    /// The targets of the Markdown links `[text](target)` in `text` that point into the tree:
    /// no scheme, no bare anchor, without their `#anchor`.
    fn relative_links(text: &str) -> Vec<&str> {
        text.match_indices("](")
            .filter_map(|(at, _)| {
                let rest = &text[at + 2..];
                let target = &rest[..rest.find(')')?];
                let path = target.split('#').next().unwrap_or_default();
                let external = target.contains("://") || target.starts_with("mailto:");
                (!external && !path.is_empty()).then_some(path)
            })
            .collect()
    }

    #[test]
    fn every_relative_link_in_the_docs_names_a_file_of_the_tree() {
        let root = command::workspace_root();
        let mut broken = Vec::new();
        for file in markdown_files(&root) {
            let text = std::fs::read_to_string(&file).expect("reading a Markdown file");
            let dir = file.parent().expect("a file has a directory");
            for link in relative_links(&text) {
                if !dir.join(link).exists() {
                    broken.push(format!("{}: {link}", file.display()));
                }
            }
        }
        assert!(
            broken.is_empty(),
            "links to paths that do not exist (a file moved: fix the link):\n{}",
            broken.join("\n")
        );
    }

    #[test]
    fn the_readme_names_every_crate_of_the_workspace() {
        let root = command::workspace_root();
        let readme = std::fs::read_to_string(root.join("README.md")).expect("reading README.md");
        let output = command::cargo_command()
            .args(["metadata", "--format-version", "1", "--no-deps"])
            .output()
            .expect("running cargo metadata");
        assert!(output.status.success(), "cargo metadata failed");
        let metadata: serde_json::Value =
            serde_json::from_slice(&output.stdout).expect("cargo metadata's JSON");
        let missing: Vec<String> = metadata["packages"]
            .as_array()
            .expect("packages")
            .iter()
            .filter_map(|package| {
                let manifest = Path::new(package["manifest_path"].as_str()?);
                let dir = manifest.parent()?.strip_prefix(&root).ok()?;
                let link = format!("]({}/)", dir.display());
                (!readme.contains(&link)).then(|| dir.display().to_string())
            })
            .collect();
        assert!(
            missing.is_empty(),
            "crates the README's \"Where things live\" does not link to (add a row for each):\n{}",
            missing.join("\n")
        );
    }
}
