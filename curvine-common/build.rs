fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/curvine.proto");
    tonic_build::configure().compile_protos(&["proto/curvine.proto"], &["proto"])?;
    Ok(())
}
