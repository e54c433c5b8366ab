#!/usr/bin/env bash
# Installs what building stampede needs on Debian and is missing: RocksDB
# itself (Debian's librocksdb-dev: the servers link it, nothing compiles it),
# SQLite's library (libsqlite3-dev: loadgen's run history links it), a C
# compiler and libclang (the Rust bindings to RocksDB) and protoc (the
# gRPC code), and with --tests a headless Chromium (the report test),
# Prometheus with promtool (the dashboard test), PostgreSQL (the run
# history's test on a shared database), Python's pip (the manifests'
# validation), iproute2 and iptables (the namespace run), etcd (the etcd
# client's test); with --etcd what scripts/compare-etcd.sh needs: etcd,
# etcdctl and jq. Runs apt-get as root, or through sudo.
set -euo pipefail

tests=false
etcd=false
for arg in "$@"; do
  case "$arg" in
    --tests) tests=true ;;
    --etcd) etcd=true ;;
    *) echo "setup-debian.sh: unknown option $arg (--tests, --etcd)" >&2; exit 2 ;;
  esac
done

need=()
command -v g++ >/dev/null 2>&1 || need+=(g++)
command -v clang >/dev/null 2>&1 || need+=(clang)
dpkg -s libclang-dev >/dev/null 2>&1 || need+=(libclang-dev)
dpkg -s librocksdb-dev >/dev/null 2>&1 || need+=(librocksdb-dev)
dpkg -s libsqlite3-dev >/dev/null 2>&1 || need+=(libsqlite3-dev)
command -v protoc >/dev/null 2>&1 || need+=(protobuf-compiler)
command -v curl >/dev/null 2>&1 || need+=(curl)
# With --tests: the capacity report's test opens report.html in a headless
# browser, and the dashboard test queries a real Prometheus.
if $tests; then
  command -v chromium >/dev/null 2>&1 || need+=(chromium)
  command -v prometheus >/dev/null 2>&1 || need+=(prometheus)
  # The run history's test starts a PostgreSQL server of its own.
  ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
  # The manifests' validation (scripts/validate-deploy.sh pip-installs
  # kubernetes-validate) and the namespace run (ip netns; iptables for --loss).
  command -v python3 >/dev/null 2>&1 || need+=(python3)
  python3 -m pip --version >/dev/null 2>&1 || need+=(python3-pip)
  command -v ip >/dev/null 2>&1 || need+=(iproute2)
  command -v iptables >/dev/null 2>&1 || need+=(iptables)
  # loadgen's etcd test starts a real 3-member etcd cluster.
  command -v etcd >/dev/null 2>&1 || need+=(etcd-server)
fi
# With --etcd: stampede side by side with etcd (scripts/compare-etcd.sh).
if $etcd; then
  command -v etcd >/dev/null 2>&1 || need+=(etcd-server)
  command -v etcdctl >/dev/null 2>&1 || need+=(etcd-client)
  command -v jq >/dev/null 2>&1 || need+=(jq)
fi

if ((${#need[@]})); then
  echo "installing: ${need[*]}" >&2
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

if ! command -v cargo >/dev/null 2>&1; then
  echo "stampede needs a Rust toolchain (cargo 1.85 or newer); install it with rustup and run this again" >&2
  exit 1
fi
