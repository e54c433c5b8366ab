//! The build's stamp (its commit, and whether the checkout had changes),
//! taken again whenever a source this binary is built from changes.

fn main() {
    stampede_build_stamp::emit(&[
        "src",
        "Cargo.toml",
        "../proto/src",
        "../proto/proto",
        "../proto/build.rs",
        "../proto/Cargo.toml",
        "../Cargo.lock",
    ]);
}
