fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/stampede.proto");
    // Decoding failures are the caller's mistake: see `src/codec.rs`.
    tonic_build::configure()
        .codec_path("crate::codec::ProtoCodec")
        .btree_map(["."])
        .compile_protos(&["proto/stampede.proto"], &["proto"])?;
    Ok(())
}
