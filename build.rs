//! Compiles the project's minimal Envoy ext_proc protos with protox (no system `protoc`).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let files = ["proto/envoy/service/ext_proc/v3/external_processor.proto"];
    println!("cargo:rerun-if-changed=proto");
    let descriptors = protox::compile(files, ["proto"])?;
    tonic_prost_build::configure().build_client(true).build_server(true).compile_fds(descriptors)?;
    Ok(())
}
