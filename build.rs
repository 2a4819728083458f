//! Compiles the project's minimal protos with protox (no system `protoc`): Envoy ext_proc, and
//! the request messages of the gRPC inference APIs the request parsers decode (vLLM engine,
//! Vertex AI prediction service), and gRPC health with `List`
//! (tonic-health 0.14 serves only Check and Watch).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = [
        "proto/envoy/service/ext_proc/v3/external_processor.proto",
        "proto/vllm/grpc/engine.proto",
        "proto/google/cloud/aiplatform/v1beta1/prediction_service.proto",
        "proto/grpc/health/v1/health.proto",
    ];
    println!("cargo:rerun-if-changed=proto");
    let descriptors = protox::compile(files, ["proto"])?;
    tonic_prost_build::configure().build_client(true).build_server(true).compile_fds(descriptors)?;
    Ok(())
}
