fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/stampede.proto");
    tonic_build::configure().compile_protos(&["proto/stampede.proto"], &["proto"])?;
    Ok(())
}
