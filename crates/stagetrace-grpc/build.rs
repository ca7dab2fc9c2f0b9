//! Generates LeRobot's `AsyncInference` service (client and server) from
//! `proto/async_inference.proto` with a vendored `protoc`: nothing to
//! install on the build machine.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    // SAFETY-free: build scripts are single-threaded; prost-build reads PROTOC.
    std::env::set_var("PROTOC", protoc);
    println!("cargo:rerun-if-changed=proto/async_inference.proto");
    tonic_prost_build::configure().compile_protos(&["proto/async_inference.proto"], &["proto"])?;
    Ok(())
}
