//! Reading a `--corefile`: a Corefile as it is, or a ConfigMap exported with
//! `kubectl get configmap -o yaml` (or `-o json`) whose `data.Corefile` is taken out.
use std::{
    collections::BTreeMap,
    fs, io,
    path::{Path, PathBuf},
};

use serde::Deserialize;
use serde_saphyr::Spanned;
use thiserror::Error;

use super::Corefile;

#[derive(Debug, Error)]
pub enum LoadError {
    #[error("cannot read --corefile {path}: {source}; export it first, e.g. `kubectl -n kube-system get configmap coredns -o yaml > coredns.yaml`")]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("--corefile {path} is a ConfigMap without data.Corefile; give the ConfigMap of CoreDNS or node-local-dns")]
    NoCorefileKey { path: PathBuf },
    #[error("--corefile {path} is a {kind}, not a Corefile or a ConfigMap; export one ConfigMap (`kubectl get configmap NAME -o yaml`)")]
    NotAConfigMap { path: PathBuf, kind: String },
}

/// The parts of a Kubernetes object that tell a ConfigMap and hold its Corefile.
#[derive(Deserialize)]
struct Object {
    kind: Option<String>,
    data: Option<BTreeMap<String, Spanned<String>>>,
}

/// The most of a `--corefile` read: a ConfigMap is a few KiB.
const MAX_BYTES: u64 = 4 << 20;

pub fn load(path: &Path) -> Result<Corefile, LoadError> {
    let read_error = |source| LoadError::Read {
        path: path.to_path_buf(),
        source,
    };
    let metadata = fs::metadata(path).map_err(read_error)?;
    if metadata.is_dir() {
        return Err(read_error(io::Error::new(
            io::ErrorKind::InvalidInput,
            "it is a directory",
        )));
    }
    let mut bytes = Vec::new();
    io::Read::read_to_end(
        &mut io::Read::take(fs::File::open(path).map_err(read_error)?, MAX_BYTES),
        &mut bytes,
    )
    .map_err(read_error)?;
    let text = String::from_utf8_lossy(&bytes);
    let name = path.display().to_string();
    // A Corefile is not YAML (`.:53 {` is no mapping), so only an object parses here.
    let Ok(object) = serde_saphyr::from_str::<Object>(&text) else {
        return Ok(Corefile::parse(name, &text, 1));
    };
    match object.kind.as_deref() {
        Some("ConfigMap") => {}
        Some(kind) => {
            return Err(LoadError::NotAConfigMap {
                path: path.to_path_buf(),
                kind: kind.to_string(),
            })
        }
        None => return Ok(Corefile::parse(name, &text, 1)),
    }
    let corefile = object
        .data
        .and_then(|mut data| data.remove("Corefile"))
        .ok_or_else(|| LoadError::NoCorefileKey {
            path: path.to_path_buf(),
        })?;
    Ok(match first_line_in_file(&text, &corefile) {
        Some(first_line) => Corefile::parse(name, &corefile.value, first_line),
        None => Corefile::parse(format!("{name} (data.Corefile)"), &corefile.value, 1),
    })
}

/// The file line where the Corefile's first line is, when the Corefile sits in the file line
/// for line (a `|` block, as `kubectl -o yaml` writes it); None for a quoted one-line string
/// (`-o json`), whose lines are then numbered within the Corefile.
fn first_line_in_file(file: &str, corefile: &Spanned<String>) -> Option<u32> {
    // The parser places a block scalar at its first line of content.
    let value_line = usize::try_from(corefile.referenced.line()).ok()?;
    let (skipped, first) = corefile
        .value
        .lines()
        .enumerate()
        .find(|(_, line)| !line.trim().is_empty())?;
    let in_file = file.lines().nth(value_line.checked_sub(1)? + skipped)?;
    if in_file.trim() != first.trim() {
        return None;
    }
    u32::try_from(value_line).ok()
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;

    use super::*;

    fn file(content: &str) -> tempfile::NamedTempFile {
        let mut file = tempfile::NamedTempFile::new().expect("create a temporary file");
        file.write_all(content.as_bytes()).unwrap();
        file
    }

    const CONFIGMAP: &str = "\
apiVersion: v1
data:
  Corefile: |
    .:53 {
        errors
        forward . /etc/resolv.conf {
           max_concurrent 1000
        }
        loop
    }
kind: ConfigMap
metadata:
  name: coredns
  namespace: kube-system
";

    #[test]
    fn a_configmap_yaml_keeps_the_files_line_numbers() {
        let exported = file(CONFIGMAP);
        let corefile = load(exported.path()).unwrap();
        assert_eq!(corefile.name, exported.path().display().to_string());
        let server = &corefile.server_blocks()[0];
        assert_eq!(server.line, 4);
        assert_eq!(server.forwards()[0].line, 6);
        assert!(server.has_plugin("loop"));
    }

    #[test]
    fn a_configmap_json_numbers_lines_within_the_corefile() {
        let exported = file(
            r#"{"apiVersion":"v1","kind":"ConfigMap","data":{"Corefile":".:53 {\n    forward . 10.0.0.2\n}\n"}}"#,
        );
        let corefile = load(exported.path()).unwrap();
        assert!(
            corefile.name.ends_with("(data.Corefile)"),
            "{}",
            corefile.name
        );
        assert_eq!(corefile.server_blocks()[0].forwards()[0].line, 2);
    }

    #[test]
    fn a_plain_corefile_is_read_as_it_is() {
        let plain = file(".:53 {\n    forward . 8.8.8.8\n}\n");
        let corefile = load(plain.path()).unwrap();
        assert_eq!(corefile.server_blocks()[0].forwards()[0].line, 2);
    }

    #[test]
    fn other_objects_and_missing_files_are_errors_that_say_what_to_give() {
        let deployment = file("kind: Deployment\nmetadata:\n  name: coredns\n");
        assert!(matches!(
            load(deployment.path()),
            Err(LoadError::NotAConfigMap { .. })
        ));
        let empty_configmap = file("kind: ConfigMap\ndata:\n  other: x\n");
        assert!(matches!(
            load(empty_configmap.path()),
            Err(LoadError::NoCorefileKey { .. })
        ));
        let error = load(Path::new("/nonexistent/coredns.yaml")).unwrap_err();
        assert!(error.to_string().contains("kubectl"), "{error}");
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(load(dir.path()), Err(LoadError::Read { .. })));
    }

    #[test]
    fn binary_junk_is_a_corefile_that_does_not_parse_not_a_crash() {
        let junk = file("\u{0}\u{1}\u{fffd}{{{ \"\n");
        let corefile = load(junk.path()).unwrap();
        assert!(corefile.servers.is_err());
    }
}
