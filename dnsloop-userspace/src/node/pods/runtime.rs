//! The pods the container runtime runs, by UID, kept in memory and listed again in the
//! background ([`cri`](super::cri)): naming a pod never waits on the runtime, and a slow or dead
//! runtime never holds up tracing.
//!
//! The runtime is listed at start, then again whenever a pod it did not list turns up (a pod
//! started since), at most once every [`MIN_LIST_INTERVAL`]. A pod's UID names the same pod
//! forever, so what the last successful listing said stays true while the runtime does not
//! answer.
use std::{
    collections::HashMap,
    future::Future,
    path::{Path, PathBuf},
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use tokio::sync::{watch, Notify};

use super::{
    cri::{self, CriError},
    PodName,
};

/// Fewest seconds between two listings, however many unknown pods turn up meanwhile.
pub const MIN_LIST_INTERVAL: Duration = Duration::from_secs(1);

/// The pods a container runtime listed last, by UID.
pub struct RuntimePods {
    socket: PathBuf,
    known: Arc<Mutex<HashMap<String, PodName>>>,
    /// Asks the lister for a new listing; asking again before it has started one asks nothing
    /// more.
    wanted: Arc<Notify>,
    lister: tokio::task::AbortHandle,
}

impl RuntimePods {
    /// Starts listing the pods of the runtime at `socket` on the current tokio runtime, and
    /// waits for the first listing (at most [`cri::LIST_TIMEOUT`]), so that the pods running
    /// already are named from the start.
    pub async fn start(socket: PathBuf) -> Self {
        let listed = socket.clone();
        Self::start_listing(socket, move || {
            let socket = listed.clone();
            async move { cri::list_ready_pods(&socket).await }
        })
        .await
    }

    /// As [`RuntimePods::start`], with `list` listing the runtime's pods.
    pub(super) async fn start_listing<L, F>(socket: PathBuf, list: L) -> Self
    where
        L: FnMut() -> F + Send + 'static,
        F: Future<Output = Result<Vec<PodName>, CriError>> + Send + 'static,
    {
        let known = Arc::default();
        let wanted = Arc::new(Notify::new());
        let (listings, mut listed) = watch::channel(0_u64);
        wanted.notify_one();
        let lister = tokio::spawn(keep_listing(
            list,
            Arc::clone(&known),
            Arc::clone(&wanted),
            listings,
        ))
        .abort_handle();
        // Not answering in time is reported by the lister; pods are named once it answers.
        let _ = tokio::time::timeout(cri::LIST_TIMEOUT, listed.changed()).await;
        Self {
            socket,
            known,
            wanted,
            lister,
        }
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// The pod whose UID is `uid`, if the last listing had it. A pod it did not have may have
    /// started since: the runtime is listed again soon.
    pub fn pod(&self, uid: &str) -> Option<PodName> {
        let pod = self
            .known
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(uid)
            .cloned();
        if pod.is_none() {
            self.wanted.notify_one();
        }
        pod
    }
}

impl Drop for RuntimePods {
    fn drop(&mut self) {
        self.lister.abort();
    }
}

/// Lists the runtime's pods with `list` into `known` whenever `wanted`, at most once every
/// [`MIN_LIST_INTERVAL`]; counts each listing, answered or not, in `listings`.
async fn keep_listing<L, F>(
    mut list: L,
    known: Arc<Mutex<HashMap<String, PodName>>>,
    wanted: Arc<Notify>,
    listings: watch::Sender<u64>,
) where
    L: FnMut() -> F,
    F: Future<Output = Result<Vec<PodName>, CriError>>,
{
    // The error last reported: a runtime that keeps failing alike is reported once.
    let mut failing: Option<String> = None;
    loop {
        wanted.notified().await;
        match list().await {
            Ok(pods) => {
                tracing::debug!("the container runtime runs {} pod(s)", pods.len());
                let pods = pods.into_iter().map(|pod| (pod.uid.clone(), pod)).collect();
                *known.lock().unwrap_or_else(PoisonError::into_inner) = pods;
                if failing.take().is_some() {
                    tracing::warn!("the container runtime answers again: pods are named after it");
                }
            }
            Err(error) => {
                let message = error.to_string();
                if failing.as_ref() == Some(&message) {
                    tracing::debug!("{message}");
                } else {
                    tracing::warn!(
                        "{message}; meanwhile pods it has not listed are named from the pod \
                         log directory"
                    );
                    failing = Some(message);
                }
            }
        }
        listings.send_modify(|count| *count += 1);
        tokio::time::sleep(MIN_LIST_INTERVAL).await;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    fn pod(namespace: &str, name: &str, uid: &str) -> PodName {
        PodName {
            namespace: namespace.into(),
            name: name.into(),
            uid: uid.into(),
        }
    }

    type Listing = std::future::Ready<Result<Vec<PodName>, CriError>>;

    /// A runtime that answers with each of `answers` in turn (`None`: it does not answer in
    /// time), then with the last one again; counts how often it was asked.
    fn runtime(
        answers: Vec<Option<Vec<PodName>>>,
    ) -> (Arc<AtomicUsize>, impl FnMut() -> Listing + Send + 'static) {
        let asked = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&asked);
        let list = move || {
            let count = counter.fetch_add(1, Ordering::SeqCst);
            let answer = answers[count.min(answers.len() - 1)].clone();
            std::future::ready(answer.ok_or_else(timeout))
        };
        (asked, list)
    }

    fn timeout() -> CriError {
        CriError::Timeout {
            socket: "/run/containerd/containerd.sock".into(),
            timeout: cri::LIST_TIMEOUT,
        }
    }

    const COREDNS: &str = "4c4f7c2e-1b1d-4e5c-9b0a-2f6d3a8e9c11";
    const CLIENT: &str = "9a0b1c2d-3e4f-4a5b-8c6d-7e8f9a0b1c2d";

    async fn started(list: impl FnMut() -> Listing + Send + 'static) -> RuntimePods {
        RuntimePods::start_listing("/run/containerd/containerd.sock".into(), list).await
    }

    /// Lets the lister run, past its pause between listings.
    async fn after_a_while() {
        tokio::time::sleep(MIN_LIST_INTERVAL * 3 / 2).await;
    }

    #[tokio::test(start_paused = true)]
    async fn the_pods_running_at_start_are_known_at_once() {
        let (asked, list) = runtime(vec![Some(vec![pod("kube-system", "coredns", COREDNS)])]);
        let pods = started(list).await;
        assert_eq!(
            pods.pod(COREDNS),
            Some(pod("kube-system", "coredns", COREDNS))
        );
        assert_eq!(asked.load(Ordering::SeqCst), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn an_unknown_pod_has_the_runtime_listed_again_at_most_once_a_second() {
        let (asked, list) = runtime(vec![
            Some(vec![]),
            Some(vec![pod("default", "client", CLIENT)]),
        ]);
        let pods = started(list).await;
        // Asked about many times before the lister runs again: one more listing.
        for _ in 0..10 {
            assert_eq!(pods.pod(CLIENT), None);
        }
        after_a_while().await;
        assert_eq!(asked.load(Ordering::SeqCst), 2);
        assert_eq!(pods.pod(CLIENT), Some(pod("default", "client", CLIENT)));
        // Known pods ask for nothing.
        after_a_while().await;
        assert_eq!(asked.load(Ordering::SeqCst), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_runtime_that_stops_answering_keeps_the_pods_it_listed() {
        let (asked, list) = runtime(vec![
            Some(vec![pod("kube-system", "coredns", COREDNS)]),
            None,
        ]);
        let pods = started(list).await;
        assert_eq!(pods.pod(CLIENT), None);
        after_a_while().await;
        assert_eq!(asked.load(Ordering::SeqCst), 2);
        assert!(pods.pod(COREDNS).is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn a_runtime_that_never_answers_holds_up_the_start_only_so_long() {
        let start = tokio::time::Instant::now();
        let pods = RuntimePods::start_listing("/run/crio/crio.sock".into(), || {
            std::future::pending::<Result<Vec<PodName>, CriError>>()
        })
        .await;
        let waited = start.elapsed();
        assert!(
            waited >= cri::LIST_TIMEOUT && waited < cri::LIST_TIMEOUT + MIN_LIST_INTERVAL,
            "{waited:?}"
        );
        assert_eq!(pods.pod(COREDNS), None);
    }
}
