# Sourced by the other scripts: compiles RocksDB's C++ once per version into
# $STAMPEDE_ROCKSDB_DIR (default ~/.cache/stampede-rocksdb/VERSION) and exports
# ROCKSDB_LIB_DIR and ROCKSDB_STATIC, so that every later cargo command, in any
# profile (dev, test, release, clippy), links that archive instead of compiling
# RocksDB again. The archive is built by the same `librocksdb-sys` crate, at the
# same version as Cargo.lock pins, with the same features (lz4), optimised and
# without debug info.

_stampede_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
_rocksdb_sys_version="$(grep -A1 '^name = "librocksdb-sys"$' "$_stampede_root/Cargo.lock" |
  sed -n 's/^version = "\(.*\)"$/\1/p')"
if [ -z "$_rocksdb_sys_version" ]; then
  echo "rocksdb-env: no librocksdb-sys in Cargo.lock" >&2
  return 1
fi
STAMPEDE_ROCKSDB_DIR="${STAMPEDE_ROCKSDB_DIR:-$HOME/.cache/stampede-rocksdb/$_rocksdb_sys_version}"

if [ ! -f "$STAMPEDE_ROCKSDB_DIR/librocksdb.a" ]; then
  echo "rocksdb-env: compiling RocksDB $_rocksdb_sys_version once into $STAMPEDE_ROCKSDB_DIR (about 20 minutes on 2 cores)" >&2
  _build="$STAMPEDE_ROCKSDB_DIR.build"
  rm -rf "$_build"
  mkdir -p "$_build/src"
  # A one-crate project that depends only on librocksdb-sys, with the
  # workspace's lock file so lz4 and bindgen resolve to the same versions.
  cat >"$_build/Cargo.toml" <<EOF
[package]
name = "stampede-rocksdb-archive"
version = "0.0.0"
edition = "2021"
publish = false

[dependencies]
librocksdb-sys = { version = "=$_rocksdb_sys_version", default-features = false, features = ["bindgen-runtime", "lz4"] }

[profile.release]
debug = false
EOF
  echo "" >"$_build/src/lib.rs"
  cp "$_stampede_root/Cargo.lock" "$_build/Cargo.lock"
  (
    cd "$_build"
    unset ROCKSDB_LIB_DIR ROCKSDB_STATIC
    CARGO_TARGET_DIR="$_build/target" cargo build --release --quiet
  )
  _archive="$(find "$_build/target/release/build" -path '*librocksdb-sys-*/out/librocksdb.a' | head -n1)"
  if [ -z "$_archive" ]; then
    echo "rocksdb-env: the build finished without librocksdb.a" >&2
    return 1
  fi
  mkdir -p "$STAMPEDE_ROCKSDB_DIR"
  cp "$_archive" "$STAMPEDE_ROCKSDB_DIR/librocksdb.a.partial"
  mv "$STAMPEDE_ROCKSDB_DIR/librocksdb.a.partial" "$STAMPEDE_ROCKSDB_DIR/librocksdb.a"
  rm -rf "$_build"
fi

export ROCKSDB_LIB_DIR="$STAMPEDE_ROCKSDB_DIR"
export ROCKSDB_STATIC=1
unset _stampede_root _rocksdb_sys_version _build _archive
