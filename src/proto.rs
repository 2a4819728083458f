//! Generated Envoy ext_proc v3 types (from `proto/`, compiled by `build.rs`). Nothing else lives
//! here; only `extproc/` (and tests) use these types.
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

pub use envoy::service::ext_proc::v3 as ext_proc;
