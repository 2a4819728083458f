//! Generated protobuf types (from `proto/`, compiled by `build.rs`): Envoy ext_proc v3 (used by
//! `extproc/`), and the request messages of the gRPC inference APIs (used by
//! `request::parsers`), gRPC health (used by `health`). Nothing else lives here.
#![allow(clippy::all, missing_docs, clippy::pedantic)]

/// `envoy.*` packages.
pub mod envoy {
    /// `envoy.config.*`
    pub mod config {
        /// `envoy.config.core.*`
        pub mod core {
            /// `envoy.config.core.v3`
            pub mod v3 {
                tonic::include_proto!("envoy.config.core.v3");
            }
        }
    }
    /// `envoy.type.*`
    pub mod r#type {
        /// `envoy.type.v3`
        pub mod v3 {
            include!(concat!(env!("OUT_DIR"), "/envoy.r#type.v3.rs"));
        }
    }
    /// `envoy.extensions.*`
    pub mod extensions {
        /// `envoy.extensions.filters.*`
        pub mod filters {
            /// `envoy.extensions.filters.http.*`
            pub mod http {
                /// `envoy.extensions.filters.http.ext_proc.*`
                pub mod ext_proc {
                    /// `envoy.extensions.filters.http.ext_proc.v3`
                    pub mod v3 {
                        tonic::include_proto!("envoy.extensions.filters.http.ext_proc.v3");
                    }
                }
            }
        }
    }
    /// `envoy.service.*`
    pub mod service {
        /// `envoy.service.ext_proc.*`
        pub mod ext_proc {
            /// `envoy.service.ext_proc.v3`
            pub mod v3 {
                tonic::include_proto!("envoy.service.ext_proc.v3");
            }
        }
    }
}

/// `vllm.*` packages.
pub mod vllm {
    /// `vllm.grpc.*`
    pub mod grpc {
        /// `vllm.grpc.engine`: Generate / Embed requests.
        pub mod engine {
            tonic::include_proto!("vllm.grpc.engine");
        }
    }
}

/// `google.*` packages.
pub mod google {
    /// `google.api`: `HttpBody`.
    pub mod api {
        tonic::include_proto!("google.api");
    }
    /// `google.cloud.*`
    pub mod cloud {
        /// `google.cloud.aiplatform.*`
        pub mod aiplatform {
            /// `google.cloud.aiplatform.v1beta1`: Vertex AI prediction requests.
            pub mod v1beta1 {
                tonic::include_proto!("google.cloud.aiplatform.v1beta1");
            }
        }
    }
}

/// `grpc.*` packages.
pub mod grpc {
    /// `grpc.health.*`
    pub mod health {
        /// `grpc.health.v1`: Check, List, Watch (served by `crate::health`).
        pub mod v1 {
            tonic::include_proto!("grpc.health.v1");
        }
    }
}

pub use envoy::service::ext_proc::v3 as ext_proc;
