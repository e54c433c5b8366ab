# Sourced by the other scripts: links every build, in any profile (dev, test,
# release, clippy), against Debian's RocksDB (`librocksdb-dev`, which
# scripts/setup-debian.sh installs) instead of compiling RocksDB's C++, which
# takes 20-25 minutes on 2 cores. The `rocksdb` crate is pinned to the release
# whose C API matches Debian 12's RocksDB 7.8 (see the root Cargo.toml), and
# its bindings are generated from the installed header, so the Rust side and
# the library agree on every declaration.

_stampede_multiarch="$(gcc -print-multiarch 2>/dev/null || true)"
_stampede_rocksdb_lib=""
for _d in "/usr/lib/$_stampede_multiarch" /usr/lib64 /usr/lib; do
  if [ -e "$_d/librocksdb.so" ]; then
    _stampede_rocksdb_lib="$_d"
    break
  fi
done
if [ -z "$_stampede_rocksdb_lib" ] || [ ! -f /usr/include/rocksdb/c.h ]; then
  echo "rocksdb-env: RocksDB's library and headers are not installed; run scripts/setup-debian.sh (Debian's librocksdb-dev)" >&2
  unset _stampede_multiarch _stampede_rocksdb_lib _d
  return 1
fi

export ROCKSDB_LIB_DIR="$_stampede_rocksdb_lib"
export ROCKSDB_INCLUDE_DIR=/usr/include
unset ROCKSDB_STATIC
unset _stampede_multiarch _stampede_rocksdb_lib _d
