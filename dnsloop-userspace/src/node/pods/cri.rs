//! Asking the node's container runtime which pods it runs, over its CRI socket: containerd's
//! `/run/containerd/containerd.sock` or CRI-O's `/run/crio/crio.sock`, the socket the kubelet
//! itself talks to. One `ListPodSandbox` call names every pod on the node.
use std::{
    io,
    os::unix::fs::FileTypeExt as _,
    path::{Path, PathBuf},
    time::Duration,
};

use http::Uri;
use hyper_util::rt::TokioIo;
use thiserror::Error;
use tokio::net::UnixStream;
use tonic::transport::Endpoint;

use super::{
    cri_messages::{
        ListPodSandboxRequest, ListPodSandboxResponse, PodSandboxState, LIST_POD_SANDBOX_PATH,
    },
    PodName,
};

/// The container runtimes' sockets, looked for in this order when no `--cri-socket` is given.
pub const WELL_KNOWN_SOCKETS: [&str; 2] =
    ["/run/containerd/containerd.sock", "/run/crio/crio.sock"];

/// How long one listing may take, connecting included: a runtime that does not answer by then
/// is asked again later, and its pods are named from the pod log directory meanwhile.
pub const LIST_TIMEOUT: Duration = Duration::from_secs(2);

/// Largest pod list accepted, as the kubelet accepts from its runtime: sandboxes carry their
/// pods' labels and annotations, beyond gRPC's default 4 MiB on a crowded node.
const MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;

/// Which CRI socket to ask, as `--cri-socket` gives it; without it, the first of
/// [`WELL_KNOWN_SOCKETS`] that exists.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CriSocket {
    /// This socket, which must exist.
    At(PathBuf),
    /// No runtime is asked.
    Disabled,
}

impl CriSocket {
    /// `--cri-socket`'s value: `none` disables, anything else is a path.
    pub fn parse(value: &str) -> Result<Self, String> {
        match value {
            "" => Err("give a socket's path, or `none`".into()),
            "none" => Ok(Self::Disabled),
            path => Ok(Self::At(path.into())),
        }
    }

    /// The socket to ask, `given` or found: `None` when disabled, or when none was given and
    /// none of the well-known ones exists.
    pub fn resolve(given: Option<&Self>) -> Result<Option<PathBuf>, CriError> {
        match given {
            Some(Self::Disabled) => Ok(None),
            None => Ok(WELL_KNOWN_SOCKETS
                .iter()
                .map(PathBuf::from)
                .find(|socket| socket.exists())),
            Some(Self::At(socket)) => match std::fs::metadata(socket) {
                Ok(metadata) if metadata.file_type().is_socket() => Ok(Some(socket.clone())),
                Ok(_) => Err(CriError::NotASocket(socket.clone())),
                Err(source) => Err(CriError::Connect {
                    socket: socket.clone(),
                    source,
                }),
            },
        }
    }
}

#[derive(Debug, Error)]
pub enum CriError {
    #[error("{} is not a socket: give --cri-socket the container runtime's CRI socket ({}), or `none`", .0.display(), WELL_KNOWN_SOCKETS.join(", "))]
    NotASocket(PathBuf),
    #[error("{}", connect_message(.socket, .source))]
    Connect {
        socket: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("the container runtime at {} does not serve the CRI v1 API (runtime.v1.RuntimeService): it is older than containerd 1.6 or CRI-O 1.20, or no CRI runtime; pods are named from the pod log directory instead (`--cri-socket none` stops asking it)", .socket.display())]
    NotCriV1 { socket: PathBuf },
    #[error("the container runtime at {} did not list its pods within {timeout:?}; asking it again when a pod it has not listed appears", .socket.display())]
    Timeout { socket: PathBuf, timeout: Duration },
    #[error("asking the container runtime at {} for its pods failed: {status}", .socket.display())]
    Call {
        socket: PathBuf,
        status: tonic::Status,
    },
}

fn connect_message(socket: &Path, error: &io::Error) -> String {
    let socket = socket.display();
    match error.kind() {
        io::ErrorKind::NotFound => format!(
            "no CRI socket at {socket}: give --cri-socket the container runtime's socket, or \
             `none`; in a container, mount the node's socket (deploy/dnsloop.yaml does)"
        ),
        io::ErrorKind::PermissionDenied => format!(
            "permission denied connecting to {socket}: the CRI socket is root's; run dnsloop \
             as root"
        ),
        io::ErrorKind::ConnectionRefused => {
            format!("nothing listens on {socket} (is the container runtime running?)")
        }
        _ => format!("connecting to the CRI socket {socket} failed: {error}"),
    }
}

/// The pods whose sandboxes are ready on the runtime listening on `socket`.
pub async fn list_ready_pods(socket: &Path) -> Result<Vec<PodName>, CriError> {
    match tokio::time::timeout(LIST_TIMEOUT, list_pod_sandboxes(socket)).await {
        Ok(listed) => Ok(ready_pods(listed?)),
        Err(_) => Err(CriError::Timeout {
            socket: socket.into(),
            timeout: LIST_TIMEOUT,
        }),
    }
}

async fn list_pod_sandboxes(socket: &Path) -> Result<ListPodSandboxResponse, CriError> {
    let path = socket.to_path_buf();
    // The URI is required but unused: the connector below reaches the socket.
    let channel = Endpoint::from_static("http://cri.invalid")
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let path = path.clone();
            async move { UnixStream::connect(path).await.map(TokioIo::new) }
        }))
        .await
        .map_err(|error| CriError::Connect {
            socket: socket.into(),
            source: io_error_in(&error).map_or_else(
                || io::Error::other(error.to_string()),
                |cause| io::Error::new(cause.kind(), cause.to_string()),
            ),
        })?;
    let mut grpc = tonic::client::Grpc::new(channel).max_decoding_message_size(MAX_RESPONSE_BYTES);
    let call = |status: tonic::Status| CriError::Call {
        socket: socket.into(),
        status,
    };
    grpc.ready()
        .await
        .map_err(|error| call(tonic::Status::unavailable(error.to_string())))?;
    let response = grpc
        .unary(
            tonic::Request::new(ListPodSandboxRequest {}),
            http::uri::PathAndQuery::from_static(LIST_POD_SANDBOX_PATH),
            tonic_prost::ProstCodec::<ListPodSandboxRequest, ListPodSandboxResponse>::default(),
        )
        .await
        .map_err(|status| match status.code() {
            tonic::Code::Unimplemented => CriError::NotCriV1 {
                socket: socket.into(),
            },
            _ => call(status),
        })?;
    Ok(response.into_inner())
}

/// The I/O error at the root of a connection failure, if that is what it was.
fn io_error_in<'a>(error: &'a (dyn std::error::Error + 'static)) -> Option<&'a io::Error> {
    let mut cause = Some(error);
    while let Some(error) = cause {
        if let Some(io_error) = error.downcast_ref::<io::Error>() {
            return Some(io_error);
        }
        cause = error.source();
    }
    None
}

/// The pods of the ready sandboxes in `response`. A sandbox that is not ready is being set up or
/// torn down; one without metadata, or whose names Kubernetes would not accept, names nothing.
fn ready_pods(response: ListPodSandboxResponse) -> Vec<PodName> {
    response
        .items
        .into_iter()
        .filter(|sandbox| sandbox.state == PodSandboxState::SandboxReady as i32)
        .filter_map(|sandbox| {
            let metadata = sandbox.metadata?;
            PodName::checked(metadata.namespace, metadata.name, metadata.uid)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::pods::cri_messages::{PodSandbox, PodSandboxMetadata};

    fn sandbox(namespace: &str, name: &str, uid: &str, state: PodSandboxState) -> PodSandbox {
        PodSandbox {
            id: format!("{uid}-sandbox"),
            metadata: Some(PodSandboxMetadata {
                name: name.into(),
                uid: uid.into(),
                namespace: namespace.into(),
                attempt: 0,
            }),
            state: state as i32,
        }
    }

    #[test]
    fn only_ready_sandboxes_with_valid_names_name_pods() {
        let response = ListPodSandboxResponse {
            items: vec![
                sandbox(
                    "kube-system",
                    "coredns-x",
                    "0a1b",
                    PodSandboxState::SandboxReady,
                ),
                sandbox("default", "gone", "2c3d", PodSandboxState::SandboxNotready),
                sandbox(
                    "default",
                    "Bad\u{1b}[2J",
                    "4e5f",
                    PodSandboxState::SandboxReady,
                ),
                PodSandbox {
                    id: "no-metadata".into(),
                    metadata: None,
                    state: PodSandboxState::SandboxReady as i32,
                },
            ],
        };
        let pods: Vec<String> = ready_pods(response)
            .iter()
            .map(|pod| format!("{pod} {}", pod.uid))
            .collect();
        assert_eq!(pods, ["kube-system/coredns-x 0a1b"]);
    }

    #[test]
    fn cri_socket_takes_a_path_or_none() {
        assert_eq!(CriSocket::parse("none"), Ok(CriSocket::Disabled));
        assert_eq!(
            CriSocket::parse("/run/k3s/containerd/containerd.sock"),
            Ok(CriSocket::At("/run/k3s/containerd/containerd.sock".into()))
        );
        assert!(CriSocket::parse("").is_err());
    }

    #[test]
    fn a_socket_given_must_exist_and_be_a_socket() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let missing = dir.path().join("containerd.sock");
        let error = CriSocket::resolve(Some(&CriSocket::At(missing))).unwrap_err();
        assert!(error.to_string().contains("no CRI socket at"), "{error}");
        let file = dir.path().join("file");
        std::fs::write(&file, "").unwrap();
        let error = CriSocket::resolve(Some(&CriSocket::At(file))).unwrap_err();
        assert!(matches!(error, CriError::NotASocket(_)), "{error}");
        let socket = dir.path().join("crio.sock");
        let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        assert_eq!(
            CriSocket::resolve(Some(&CriSocket::At(socket.clone()))).unwrap(),
            Some(socket)
        );
        assert_eq!(
            CriSocket::resolve(Some(&CriSocket::Disabled)).unwrap(),
            None
        );
    }

    #[tokio::test]
    async fn a_socket_nobody_listens_on_is_said_so() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let socket = dir.path().join("containerd.sock");
        // Bound, then closed: the file stays, and connecting is refused.
        drop(std::os::unix::net::UnixListener::bind(&socket).unwrap());
        let error = list_ready_pods(&socket).await.unwrap_err();
        assert!(error.to_string().contains("nothing listens on"), "{error}");
    }
}
