//! Checks for Debian's RocksDB (see src/lib.rs) and tells the linker where it is.

use std::env;
use std::path::{Path, PathBuf};
use std::process::exit;

const INSTALL: &str = "install Debian's librocksdb-dev with scripts/setup-debian.sh \
(or `apt-get install librocksdb-dev`), or compile the bundled RocksDB (20-25 minutes) with \
ROCKSDB_COMPILE=1 ROCKSDB_INCLUDE_DIR=rocksdb/include";

fn main() {
    for var in [
        "ROCKSDB_COMPILE",
        "ROCKSDB_LIB_DIR",
        "ROCKSDB_INCLUDE_DIR",
        "ROCKSDB_STATIC",
    ] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    let compile = env::var("ROCKSDB_COMPILE").unwrap_or_default();
    if compile == "1" || compile.eq_ignore_ascii_case("true") {
        return;
    }
    let Ok(lib_dir) = env::var("ROCKSDB_LIB_DIR") else {
        fail(
            "ROCKSDB_LIB_DIR is not set, so librocksdb-sys would compile RocksDB's C++; \
             .cargo/config.toml sets it for this workspace: build from inside the checkout",
        );
    };
    let include = PathBuf::from(env::var("ROCKSDB_INCLUDE_DIR").unwrap_or("/usr/include".into()));
    let header = include.join("rocksdb/c.h");
    println!("cargo:rerun-if-changed={}", header.display());
    if !header.is_file() {
        fail(&format!("RocksDB's header {} is missing", header.display()));
    }
    let file = if env::var_os("ROCKSDB_STATIC").is_some() {
        "librocksdb.a"
    } else {
        "librocksdb.so"
    };
    match library_dirs(&lib_dir).find(|dir| dir.join(file).exists()) {
        // The linker's default path may not hold it (another prefix).
        Some(dir) => println!("cargo:rustc-link-search=native={}", dir.display()),
        None => fail(&format!(
            "RocksDB's library {file} is not in {lib_dir} nor the system's library directories"
        )),
    }
}

/// Where the linker will look: the given directory, then the system's own
/// (Debian keeps libraries in /usr/lib/<arch>-linux-gnu).
fn library_dirs(lib_dir: &str) -> impl Iterator<Item = PathBuf> {
    let mut dirs = vec![PathBuf::from(lib_dir)];
    if let Some(multiarch) = multiarch() {
        dirs.push(Path::new("/usr/lib").join(multiarch));
    }
    dirs.extend(["/usr/lib64", "/usr/lib", "/usr/local/lib"].map(PathBuf::from));
    dirs.into_iter()
}

/// Debian's multiarch name for the target: `x86_64-unknown-linux-gnu` is
/// `x86_64-linux-gnu`.
fn multiarch() -> Option<String> {
    let target = env::var("TARGET").ok()?;
    let parts: Vec<&str> = target.split('-').collect();
    match parts.as_slice() {
        [arch, _vendor, os, abi] => Some(format!("{arch}-{os}-{abi}")),
        _ => None,
    }
}

fn fail(what: &str) -> ! {
    eprintln!("error: {what}: {INSTALL}");
    println!("cargo:warning={what}: {INSTALL}");
    exit(1);
}
