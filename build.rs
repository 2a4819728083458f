//! Compiles the project's minimal protos with protox (no system `protoc`): Envoy ext_proc, and
//! the request messages of the gRPC inference APIs the request parsers decode (vLLM engine,
//! Vertex AI prediction service), and gRPC health with `List`
//! (tonic-health 0.14 serves only Check and Watch).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    // ext_proc: the server uses epp's codec (larger per-stream buffers, `net::codec`).
    let ext_proc = protox::compile(["proto/envoy/service/ext_proc/v3/external_processor.proto"], ["proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .codec_path("crate::net::codec::ExtProcCodec")
        .compile_fds(ext_proc)?;
    let others = [
        "proto/vllm/grpc/engine.proto",
        "proto/google/cloud/aiplatform/v1beta1/prediction_service.proto",
        "proto/grpc/health/v1/health.proto",
    ];
    let descriptors = protox::compile(others, ["proto"])?;
    tonic_prost_build::configure().build_client(true).build_server(true).compile_fds(descriptors)?;
    Ok(())
}
