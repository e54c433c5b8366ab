#!/usr/bin/env bash
# Proves that a bare cargo command, as a user types it with none of the
# project's variables set, links Debian's RocksDB (.cargo/config.toml) and
# compiles none of RocksDB's C++: builds librocksdb-sys in a clean
# environment and reads what its build script did (in the release profile,
# which scripts/run.sh has built already).
set -euo pipefail
cd "$(dirname "$0")/.."
clean=(env -i "HOME=$HOME" "PATH=$PATH")
for var in CARGO_HOME RUSTUP_HOME RUSTUP_TOOLCHAIN; do
  if [ -n "${!var:-}" ]; then clean+=("$var=${!var}"); fi
done
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"${clean[@]}" cargo build --release --quiet -p rocksdb-check
"${clean[@]}" cargo build --release --quiet -p librocksdb-sys --message-format=json >"$out"
python3 - "$out" <<'PY'
import json, os, sys
script = None
for line in open(sys.argv[1]):
    msg = json.loads(line)
    if msg.get("reason") == "build-script-executed" and "librocksdb-sys" in msg["package_id"]:
        script = msg
if script is None:
    sys.exit("check-bare-cargo: cargo reported no build script run for librocksdb-sys")
libs = script["linked_libs"]
compiled = [f for f in os.listdir(script["out_dir"]) if f.endswith((".a", ".o"))]
if "dylib=rocksdb" not in libs or compiled:
    sys.exit(f"check-bare-cargo: librocksdb-sys compiled RocksDB (links {libs}, "
             f"built {compiled[:3]} in {script['out_dir']}) instead of linking Debian's "
             "librocksdb.so: see .cargo/config.toml")
print(f"check-bare-cargo: librocksdb-sys links Debian's RocksDB ({', '.join(libs)}), nothing compiled")
PY
