//! The kubelet's PodResources API (v1) as plumb uses it: which device IDs the kubelet gave a
//! pod's containers, per resource name, for the `deviceID` of a NAD with the
//! `k8s.v1.cni.cncf.io/resourceName` annotation (docs/multus-behaviour.md §2.9). The device-info
//! spec 1.1 §4.2.1 says an implementation "must query Kubelet to find the DeviceID of the
//! allocated resource" (§4.1: "through the Pod Resources API"). [`KubeletPodResources`] is the
//! engine's [`PodResources`], over gRPC on the kubelet's unix socket.

use std::collections::BTreeSet;
use std::future::Future;
use std::io;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use cni::error::{CniError, ErrorCode};
use hyper_util::rt::TokioIo;
use plumb_engine::kubelet::{PodDevices, PodResources};
use tokio::net::UnixStream;
use tonic::transport::{Channel, Endpoint, Uri};
use tonic::{Code, Status};

// Generated code, from `proto/podresources/v1/api.proto`, checked in so that plumb's build
// needs no code generator; testkit's build regenerates it and a test fails when the two differ
// (the file's header says how to update it). Formatted by its generator, not by rustfmt (the
// check in testkit compares it byte for byte). Clippy finds nothing in it today; the allow
// keeps a newer clippy's lint in code nobody edits from failing plumb's build.
#[rustfmt::skip]
#[allow(clippy::all)]
mod v1;

use self::v1::pod_resources_lister_client::PodResourcesListerClient;
use self::v1::{AllocatableResourcesRequest, GetPodResourcesRequest, ListPodResourcesRequest};

/// Limits so that a stuck kubelet cannot hold a pod's sandbox creation for long (the same as
/// plumb's Kubernetes API client uses).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// The largest reply accepted: a `List` on a busy node is big, and 16 MiB is Multus's limit.
const MAX_MESSAGE: usize = 16 * 1024 * 1024;

/// The real client: gRPC over the kubelet's unix socket, on a current-thread tokio runtime.
///
/// Each call connects, asks, and closes: a CNI call asks once, and nothing is held open between
/// calls. `pod_devices` blocks; call it from a plain thread, not from inside an async task.
#[derive(Clone, Debug)]
pub struct KubeletPodResources {
    socket: PathBuf,
}

impl KubeletPodResources {
    /// A client for the socket at `socket`. Nothing is opened until the first call.
    pub fn new(socket: impl Into<PathBuf>) -> Self {
        KubeletPodResources {
            socket: socket.into(),
        }
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// The devices of pod `namespace/name`, by `Get` for the one pod, falling back to `List` on
    /// kubelets that lack `Get` (before 1.27: UNIMPLEMENTED) or have it switched off (the
    /// `KubeletPodResourcesGet` feature gate, off by default before 1.34: UNKNOWN "PodResources
    /// API Get method disabled").
    async fn query(&self, namespace: &str, name: &str) -> Result<Option<PodDevices>, CniError> {
        let mut client = self.connect().await?;
        let get = GetPodResourcesRequest {
            pod_name: name.to_owned(),
            pod_namespace: namespace.to_owned(),
        };
        let what = format!("Get pod {namespace}/{name}");
        match self.ask(&what, client.get(get)).await? {
            Ok(reply) => Ok(Some(
                reply
                    .pod_resources
                    .as_ref()
                    .map(devices)
                    .unwrap_or_default(),
            )),
            Err(status) if get_unavailable(&status) => {
                let reply = self
                    .ask("List", client.list(ListPodResourcesRequest {}))
                    .await?
                    .map_err(|s| self.status_error("List", &s))?;
                Ok(reply
                    .pod_resources
                    .iter()
                    .find(|p| p.namespace == namespace && p.name == name)
                    .map(devices))
            }
            // The kubelet answers Get and List from the same pods (List only from the active
            // ones), so a pod that Get does not find is not in List either: no need to ask.
            Err(status) if pod_not_found(&status) => Ok(None),
            Err(status) => Err(self.status_error(&what, &status)),
        }
    }

    async fn allocatable(&self) -> Result<Option<BTreeSet<String>>, CniError> {
        let mut client = self.connect().await?;
        let what = "GetAllocatableResources";
        match self
            .ask(
                what,
                client.get_allocatable_resources(AllocatableResourcesRequest {}),
            )
            .await?
        {
            Ok(reply) => Ok(Some(
                reply
                    .devices
                    .into_iter()
                    .filter(|d| !d.resource_name.is_empty())
                    .map(|d| d.resource_name)
                    .collect(),
            )),
            // Before 1.23 (beta) the method is missing or behind the
            // KubeletPodResourcesGetAllocatable feature gate.
            Err(status) if get_unavailable(&status) => Ok(None),
            Err(status) => Err(self.status_error(what, &status)),
        }
    }

    /// Connects to the socket, then lets tonic speak HTTP/2 over that connection.
    async fn connect(&self) -> Result<PodResourcesListerClient<Channel>, CniError> {
        let connecting = async {
            let stream = UnixStream::connect(&self.socket)
                .await
                .map_err(|e| self.connect_error(&e))?;
            // tonic dials through a connector. Handing it the stream connected above keeps the
            // errors precise (the io::Error itself, not a transport error wrapping it). A second
            // dial, after the connection broke, gets an error: one call makes at most two
            // requests, and a failure is reported, not retried.
            let slot = Arc::new(Mutex::new(Some(stream)));
            let connector = tower::service_fn(move |_: Uri| {
                let stream = slot.lock().unwrap_or_else(PoisonError::into_inner).take();
                async move {
                    stream.map(TokioIo::new).ok_or_else(|| {
                        io::Error::new(io::ErrorKind::NotConnected, "the connection was closed")
                    })
                }
            });
            // The URI only names the :authority; grpc-go's clients send "localhost" for unix
            // sockets, and the kubelet does not look at it.
            Endpoint::from_static("http://localhost")
                .connect_with_connector(connector)
                .await
                .map_err(|e| {
                    self.error(
                        ErrorCode::TryAgainLater,
                        format!("HTTP/2 connection failed: {}", chain(&e)),
                    )
                })
        };
        let channel = tokio::time::timeout(CONNECT_TIMEOUT, connecting)
            .await
            .map_err(|_| {
                self.error(
                    ErrorCode::TryAgainLater,
                    format!(
                        "no connection within {} s (is the kubelet stuck?)",
                        CONNECT_TIMEOUT.as_secs()
                    ),
                )
            })??;
        Ok(PodResourcesListerClient::new(channel).max_decoding_message_size(MAX_MESSAGE))
    }

    /// Sends one request with the request timeout. The outer error is the timeout; the inner
    /// one is the kubelet's answer, which the caller may handle.
    async fn ask<T>(
        &self,
        what: &str,
        request: impl Future<Output = Result<tonic::Response<T>, Status>>,
    ) -> Result<Result<T, Status>, CniError> {
        match tokio::time::timeout(REQUEST_TIMEOUT, request).await {
            Ok(answer) => Ok(answer.map(tonic::Response::into_inner)),
            Err(_) => Err(self.error(
                ErrorCode::TryAgainLater,
                format!("{what}: no answer within {} s", REQUEST_TIMEOUT.as_secs()),
            )),
        }
    }

    fn error(&self, code: ErrorCode, detail: String) -> CniError {
        CniError::new(
            code,
            format!(
                "kubelet PodResources socket {}: {detail}",
                self.socket.display()
            ),
        )
    }

    /// Code 11 (try again later) where the kubelet may be restarting or busy: its socket is
    /// missing, nobody listens on it yet, or its backlog of connections is full. The runtime
    /// retries a failed sandbox creation, and the socket is back once the kubelet is.
    fn connect_error(&self, e: &io::Error) -> CniError {
        match e.kind() {
            io::ErrorKind::NotFound => CniError::new(
                ErrorCode::TryAgainLater,
                format!(
                    "kubelet PodResources socket {} does not exist: is the kubelet running, and \
                     is the path right (plumbPodResourcesSocket)?",
                    self.socket.display()
                ),
            ),
            // connect(2) refuses a path that is not a socket too.
            io::ErrorKind::ConnectionRefused
                if std::fs::metadata(&self.socket).is_ok_and(|m| !m.file_type().is_socket()) =>
            {
                self.error(
                    ErrorCode::Io,
                    "it is not a socket: is the path right (plumbPodResourcesSocket)?".to_owned(),
                )
            }
            io::ErrorKind::ConnectionRefused => self.error(
                ErrorCode::TryAgainLater,
                "connection refused: nothing listens on it (is the kubelet running?)".to_owned(),
            ),
            // EAGAIN from a non-blocking connect(2) to a unix socket: the listener's backlog is
            // full, a kubelet too busy to accept for now (a node's pod storm).
            io::ErrorKind::WouldBlock => self.error(
                ErrorCode::TryAgainLater,
                "its connection backlog is full: the kubelet is not accepting connections fast \
                 enough (is it overloaded?)"
                    .to_owned(),
            ),
            _ => self.error(ErrorCode::Io, format!("cannot connect: {e}")),
        }
    }

    /// A gRPC error status as a CNI error: code 11 when it may pass (the kubelet is busy or
    /// going away, or the connection broke under the call), else 5 (I/O); the message keeps
    /// the status's code and text.
    fn status_error(&self, what: &str, s: &Status) -> CniError {
        // A status with a source was made here from a transport failure (tonic calls a reset
        // connection UNKNOWN "transport error"), not sent by the kubelet.
        let broken_connection = std::error::Error::source(s).is_some();
        let transient = broken_connection
            || matches!(
                s.code(),
                Code::Unavailable
                    | Code::DeadlineExceeded
                    | Code::ResourceExhausted
                    | Code::Aborted
                    | Code::Cancelled
            );
        let code = if transient {
            ErrorCode::TryAgainLater
        } else {
            ErrorCode::Io
        };
        let detail = format!(
            "{what} failed: gRPC status {:?} ({}): {}",
            s.code(),
            s.code() as i32,
            s.message()
        );
        // Transport failures carry the cause (a reset connection, a broken frame) as a source.
        self.error(code, with_sources(detail, std::error::Error::source(s)))
    }
}

impl KubeletPodResources {
    fn block_on<T>(&self, f: impl Future<Output = Result<T, CniError>>) -> Result<T, CniError> {
        crate::runtime::current_thread()?.block_on(f)
    }
}

impl PodResources for KubeletPodResources {
    /// Asked by name: the API does not take a UID.
    fn pod_devices(
        &self,
        namespace: &str,
        name: &str,
        _uid: &str,
    ) -> Result<Option<PodDevices>, CniError> {
        self.block_on(self.query(namespace, name))
    }

    fn device_resources(&self) -> Result<Option<BTreeSet<String>>, CniError> {
        self.block_on(self.allocatable())
    }
}

/// A kubelet without the method (UNIMPLEMENTED: `Get` before 1.27), or with it switched off by
/// a feature gate (UNKNOWN "PodResources API Get method disabled", and the same wording for
/// `GetAllocatableResources`).
fn get_unavailable(s: &Status) -> bool {
    s.code() == Code::Unimplemented
        || (s.code() == Code::Unknown && s.message().contains("disabled"))
}

/// The kubelet's answer to `Get` for a pod it does not know: UNKNOWN "pod <name> in namespace
/// <ns> not found" (a plain Go error), or NOT_FOUND should a later kubelet use the proper code.
fn pod_not_found(s: &Status) -> bool {
    matches!(s.code(), Code::Unknown | Code::NotFound) && s.message().ends_with("not found")
}

/// The pod's device IDs per resource, sorted and without duplicates. Entries without a
/// resource name or ID, which no NAD can use, are left out. Only devices from device plugins
/// are read; DRA claims (`dynamic_resources`) are not.
fn devices(pod: &v1::PodResources) -> PodDevices {
    let mut map = PodDevices::new();
    for container in &pod.containers {
        for d in container
            .devices
            .iter()
            .filter(|d| !d.resource_name.is_empty())
        {
            let ids = d.device_ids.iter().filter(|id| !id.is_empty()).cloned();
            map.entry(d.resource_name.clone()).or_default().extend(ids);
        }
    }
    map.retain(|_, ids| {
        ids.sort();
        ids.dedup();
        !ids.is_empty()
    });
    map
}

/// An error and its sources, "outer: inner: root".
fn chain(e: &dyn std::error::Error) -> String {
    with_sources(e.to_string(), e.source())
}

/// `msg` followed by `source` and its sources, each left out where the text so far already
/// has it.
fn with_sources(mut msg: String, mut source: Option<&dyn std::error::Error>) -> String {
    while let Some(s) = source {
        let text = s.to_string();
        // tonic and hyper often repeat the inner message in the outer one.
        if !msg.contains(&text) {
            msg = format!("{msg}: {text}");
        }
        source = s.source();
    }
    msg
}

#[cfg(test)]
mod tests {
    use super::v1::{ContainerDevices, ContainerResources, PodResources};
    use super::*;

    fn container(name: &str, devices: &[(&str, &[&str])]) -> ContainerResources {
        ContainerResources {
            name: name.to_owned(),
            devices: devices
                .iter()
                .map(|(resource, ids)| ContainerDevices {
                    resource_name: (*resource).to_owned(),
                    device_ids: ids.iter().map(|s| (*s).to_owned()).collect(),
                    topology: None,
                })
                .collect(),
            ..ContainerResources::default()
        }
    }

    #[test]
    fn devices_merge_containers_sorted_without_duplicates_or_blanks() {
        let pod = PodResources {
            name: "p".into(),
            namespace: "ns".into(),
            containers: vec![
                container("a", &[("r/x", &["3", "1"]), ("", &["9"])]),
                container("b", &[("r/x", &["2", "1", ""]), ("r/empty", &[""])]),
            ],
        };
        let got = devices(&pod);
        assert_eq!(
            got,
            PodDevices::from([("r/x".to_owned(), vec!["1".into(), "2".into(), "3".into()])])
        );
    }

    #[test]
    fn get_fallback_and_not_found_follow_the_kubelets_answers() {
        assert!(get_unavailable(&Status::unimplemented(
            "unknown method Get"
        )));
        assert!(get_unavailable(&Status::unknown(
            "PodResources API Get method disabled"
        )));
        assert!(!get_unavailable(&Status::unknown(
            "pod p in namespace ns not found"
        )));
        assert!(pod_not_found(&Status::unknown(
            "pod p in namespace ns not found"
        )));
        assert!(!pod_not_found(&Status::internal(
            "pod p in namespace ns not found"
        )));
        assert!(!pod_not_found(&Status::unknown("something else")));
    }
}
