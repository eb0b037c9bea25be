//! The few messages of the Container Runtime Interface (CRI) dnsloop uses, written by hand with
//! prost's derive macros rather than generated from the whole API: the pods a runtime runs,
//! asked with `runtime.v1.RuntimeService/ListPodSandbox`.
//!
//! Field numbers and types are those of kubernetes/cri-api `pkg/apis/runtime/v1/api.proto`
//! (`ListPodSandboxRequest`, `ListPodSandboxResponse`, `PodSandbox`, `PodSandboxMetadata`,
//! `PodSandboxState`). Fields left out here are skipped when decoding, as protobuf allows.

/// The gRPC path of `ListPodSandbox` in the CRI's v1 API (Kubernetes 1.23 and later; containerd
/// 1.6 and CRI-O 1.20 serve it).
pub const LIST_POD_SANDBOX_PATH: &str = "/runtime.v1.RuntimeService/ListPodSandbox";

/// `ListPodSandboxRequest`; its one field, `PodSandboxFilter filter = 1`, is left unset: every
/// sandbox is listed.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct ListPodSandboxRequest {}

/// `ListPodSandboxResponse`.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct ListPodSandboxResponse {
    #[prost(message, repeated, tag = "1")]
    pub items: Vec<PodSandbox>,
}

/// `PodSandbox`: a pod's sandbox, which holds its network namespace.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct PodSandbox {
    #[prost(string, tag = "1")]
    pub id: String,
    #[prost(message, optional, tag = "2")]
    pub metadata: Option<PodSandboxMetadata>,
    #[prost(enumeration = "PodSandboxState", tag = "3")]
    pub state: i32,
}

/// `PodSandboxMetadata`: the pod as the API server names it.
#[derive(Clone, PartialEq, ::prost::Message)]
pub struct PodSandboxMetadata {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub uid: String,
    #[prost(string, tag = "3")]
    pub namespace: String,
    #[prost(uint32, tag = "4")]
    pub attempt: u32,
}

/// `PodSandboxState`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, ::prost::Enumeration)]
#[repr(i32)]
pub enum PodSandboxState {
    SandboxReady = 0,
    SandboxNotready = 1,
}

#[cfg(test)]
mod tests {
    use prost::Message as _;

    use super::*;

    /// `ListPodSandboxResponse{items: [{id: "abc", metadata: {name: "client", uid: "u1",
    /// namespace: "default", attempt: 2}, state: SANDBOX_NOTREADY, created_at: 5}]}` as the Go
    /// protobuf runtime encodes it: field 4 (`created_at`) is not ours and is skipped.
    const ENCODED: &[u8] = &[
        0x0a, 0x22, // items, 34 bytes
        0x0a, 0x03, b'a', b'b', b'c', // id
        0x12, 0x17, // metadata, 23 bytes
        0x0a, 0x06, b'c', b'l', b'i', b'e', b'n', b't', // name
        0x12, 0x02, b'u', b'1', // uid
        0x1a, 0x07, b'd', b'e', b'f', b'a', b'u', b'l', b't', // namespace
        0x20, 0x02, // attempt
        0x18, 0x01, // state
        0x20, 0x05, // created_at
    ];

    #[test]
    fn the_field_numbers_are_the_cri_apis() {
        let response = ListPodSandboxResponse::decode(ENCODED).expect("decodes");
        assert_eq!(
            response,
            ListPodSandboxResponse {
                items: vec![PodSandbox {
                    id: "abc".into(),
                    metadata: Some(PodSandboxMetadata {
                        name: "client".into(),
                        uid: "u1".into(),
                        namespace: "default".into(),
                        attempt: 2,
                    }),
                    state: PodSandboxState::SandboxNotready as i32,
                }],
            }
        );
    }
}
