//! A stand-in container runtime for the lab: a CRI server on a unix socket, run by the test
//! process, that answers `runtime.v1.RuntimeService/ListPodSandbox` with the sandboxes it is
//! given, in the messages dnsloop itself asks with. Every other call is unimplemented.
use std::{
    convert::Infallible,
    future::{ready, Future, Ready},
    path::{Path, PathBuf},
    pin::Pin,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    task::{Context, Poll},
    thread::JoinHandle,
};

use anyhow::Context as _;
use dnsloop_userspace::cri_messages::{
    ListPodSandboxRequest, ListPodSandboxResponse, PodSandbox, PodSandboxMetadata, PodSandboxState,
    LIST_POD_SANDBOX_PATH,
};
use tokio::{net::UnixListener, sync::oneshot};
use tokio_stream::wrappers::UnixListenerStream;

/// A pod as the runtime lists it.
pub struct Sandbox<'a> {
    pub namespace: &'a str,
    pub name: &'a str,
    pub uid: &'a str,
}

/// The server, on its own thread; stopped when dropped.
pub struct FakeRuntime {
    socket: PathBuf,
    listings: Arc<AtomicUsize>,
    stop: Option<oneshot::Sender<()>>,
    server: Option<JoinHandle<()>>,
}

impl FakeRuntime {
    /// Serves on a new socket at `socket`, listing `sandboxes` as ready.
    pub fn serve(socket: &Path, sandboxes: &[Sandbox<'_>]) -> anyhow::Result<Self> {
        let sandboxes: Vec<PodSandbox> = sandboxes
            .iter()
            .map(|sandbox| PodSandbox {
                id: format!("sandbox-{}", sandbox.uid),
                metadata: Some(PodSandboxMetadata {
                    name: sandbox.name.into(),
                    uid: sandbox.uid.into(),
                    namespace: sandbox.namespace.into(),
                    attempt: 0,
                }),
                state: PodSandboxState::SandboxReady as i32,
            })
            .collect();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("starting the stand-in runtime's async runtime")?;
        // Bound here, so that the socket exists once this returns.
        let listener = runtime
            .block_on(async { UnixListener::bind(socket) })
            .with_context(|| format!("binding {}", socket.display()))?;
        let listings = Arc::new(AtomicUsize::new(0));
        let service = RuntimeService {
            sandboxes: Arc::new(sandboxes),
            listings: Arc::clone(&listings),
        };
        let (stop, stopped) = oneshot::channel::<()>();
        let server = std::thread::spawn(move || {
            let served = runtime.block_on(
                tonic::transport::Server::builder()
                    .add_service(service)
                    .serve_with_incoming_shutdown(UnixListenerStream::new(listener), async {
                        let _ = stopped.await;
                    }),
            );
            if let Err(error) = served {
                eprintln!("the stand-in container runtime stopped: {error}");
            }
        });
        Ok(Self {
            socket: socket.into(),
            listings,
            stop: Some(stop),
            server: Some(server),
        })
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// How often it has been asked for its pods.
    pub fn listings(&self) -> usize {
        self.listings.load(Ordering::SeqCst)
    }
}

impl Drop for FakeRuntime {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(server) = self.server.take() {
            let _ = server.join();
        }
        let _ = std::fs::remove_file(&self.socket);
    }
}

/// `runtime.v1.RuntimeService`, as much of it as dnsloop asks.
#[derive(Clone)]
struct RuntimeService {
    sandboxes: Arc<Vec<PodSandbox>>,
    listings: Arc<AtomicUsize>,
}

impl tonic::server::NamedService for RuntimeService {
    const NAME: &'static str = "runtime.v1.RuntimeService";
}

type ResponseFuture =
    Pin<Box<dyn Future<Output = Result<http::Response<tonic::body::Body>, Infallible>> + Send>>;

impl<B> tower::Service<http::Request<B>> for RuntimeService
where
    B: http_body::Body + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>> + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = ResponseFuture;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<B>) -> ResponseFuture {
        if request.uri().path() != LIST_POD_SANDBOX_PATH {
            let path = request.uri().path().to_owned();
            return Box::pin(async move {
                Ok(tonic::Status::unimplemented(format!("{path} is not served here")).into_http())
            });
        }
        let list = ListPodSandbox(self.clone());
        Box::pin(async move {
            let codec =
                tonic_prost::ProstCodec::<ListPodSandboxResponse, ListPodSandboxRequest>::default();
            let mut grpc = tonic::server::Grpc::new(codec);
            Ok(grpc.unary(list, request).await)
        })
    }
}

struct ListPodSandbox(RuntimeService);

impl tonic::server::UnaryService<ListPodSandboxRequest> for ListPodSandbox {
    type Response = ListPodSandboxResponse;
    type Future = Ready<Result<tonic::Response<ListPodSandboxResponse>, tonic::Status>>;

    fn call(&mut self, _: tonic::Request<ListPodSandboxRequest>) -> Self::Future {
        self.0.listings.fetch_add(1, Ordering::SeqCst);
        ready(Ok(tonic::Response::new(ListPodSandboxResponse {
            items: self.0.sandboxes.to_vec(),
        })))
    }
}
