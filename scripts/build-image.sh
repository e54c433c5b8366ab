#!/usr/bin/env bash
# Builds the container image stampede:TAG (default: latest) from this clone
# with Debian's buildah: the release binaries, the shared libraries `ldd`
# lists for them, and a non-root user (uid 10001), FROM scratch (no base
# image is pulled: no registry is needed). See deploy/README.md.
#
#   scripts/build-image.sh [TAG]            # then: buildah push stampede:TAG ...
#   STAMPEDE_IMAGE_ARCHIVE=FILE scripts/build-image.sh   # also write an OCI archive
set -euo pipefail
cd "$(dirname "$0")/.."
tag=${1:-latest}
[[ "$tag" =~ ^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$ ]] || { echo "build-image: $tag is not an image tag" >&2; exit 2; }

if ! command -v buildah >/dev/null; then
  echo "build-image: installing buildah (apt-get)" >&2
  SUDO=""; [[ $(id -u) == 0 ]] || SUDO=sudo
  $SUDO apt-get install -y --no-install-recommends buildah >/dev/null
fi

if [[ -z "${STAMPEDE_BIN:-}" ]]; then
  bash scripts/build.sh
fi
BIN=${STAMPEDE_BIN:-${CARGO_TARGET_DIR:-target}/release}

ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
root=$ctx/rootfs
mkdir -p "$root/usr/local/bin" "$root/etc" "$root/tmp" "$ctx/writable"
chmod 1777 "$root/tmp"
for b in cluster nodesim loadgen; do
  [[ -x "$BIN/$b" ]] || { echo "build-image: $BIN/$b is missing" >&2; exit 1; }
  cp "$BIN/$b" "$root/usr/local/bin/$b"
  strip --strip-debug "$root/usr/local/bin/$b" 2>/dev/null || true
  # Every shared library, at the path the dynamic loader looks for it
  # (the loader itself included).
  ldd "$BIN/$b" | grep -o '/[^ ]*' | while read -r lib; do
    mkdir -p "$root$(dirname "$lib")"
    cp -L "$lib" "$root$lib"
  done
done
cat >"$root/etc/passwd" <<'P'
root:x:0:0:root:/root:/sbin/nologin
stampede:x:10001:10001:stampede:/var/lib/stampede:/sbin/nologin
P
cat >"$root/etc/group" <<'G'
root:x:0:
stampede:x:10001:
G
echo 'hosts: files dns' >"$root/etc/nsswitch.conf"
cp deploy/Containerfile "$ctx/Containerfile"

# vfs storage and chroot isolation: no overlay mounts or user namespaces
# needed, so it also works inside a container or a sandbox.
export STORAGE_DRIVER=${STORAGE_DRIVER:-vfs} BUILDAH_ISOLATION=${BUILDAH_ISOLATION:-chroot}
buildah build --format docker --layers=false -f "$ctx/Containerfile" -t "stampede:$tag" "$ctx"
if [[ -n "${STAMPEDE_IMAGE_ARCHIVE:-}" ]]; then
  buildah push "stampede:$tag" "oci-archive:$STAMPEDE_IMAGE_ARCHIVE:stampede:$tag"
  echo "build-image: wrote $STAMPEDE_IMAGE_ARCHIVE" >&2
fi
buildah images "stampede:$tag"
