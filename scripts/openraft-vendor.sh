#!/usr/bin/env bash
# vendor/openraft is openraft's crates.io release plus vendor/openraft.patch
# (what the patch does: vendor/openraft/PATCHES.md). This script keeps the
# two honest:
#
#   --check      the tree equals the release plus the patch; exits 1 naming
#                the first file that differs. Offline once the release is in
#                cargo's cache (~/.cargo/registry); otherwise it first fetches
#                that one release with cargo.
#   --rebuild    recreates vendor/openraft from the release and the patch
#                (PATCHES.md is kept).
#   --diff       writes vendor/openraft.patch from the tree: after changing
#                vendor/openraft on purpose, then commit both.
#   --self-test  --check on a copy of the tree with one byte changed must fail,
#                and on an unchanged copy must pass.
#
# Left out on both sides: what cargo adds when it packages or unpacks a crate
# (.cargo-ok, .cargo_vcs_info.json, the package's Cargo.lock) and our
# PATCHES.md. Cargo.toml is the release's normalized one, as published.
set -euo pipefail
cd "$(dirname "$0")/.."

TREE=vendor/openraft
PATCH=vendor/openraft.patch
EXCLUDED=(.cargo-ok .cargo_vcs_info.json Cargo.lock PATCHES.md)
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

die() {
  echo "openraft-vendor: $*" >&2
  exit 1
}

# The release the tree is: the version in its Cargo.toml's [package].
version() {
  sed -n '/^\[package\]/,/^\[/s/^version = "\(.*\)"$/\1/p' "$TREE/Cargo.toml" | head -n1
}

# The release's unpacked source in cargo's cache, fetched if it is missing.
release_dir() {
  local v="$1" home="${CARGO_HOME:-$HOME/.cargo}" dir crate
  for dir in "$home"/registry/src/*/openraft-"$v"; do
    [ -f "$dir/Cargo.toml" ] && { echo "$dir"; return; }
  done
  # Downloaded but not unpacked: the .crate is a gzipped tar. Unpacked here,
  # not in cargo's cache, which is cargo's to lay out.
  for crate in "$home"/registry/cache/*/openraft-"$v".crate; do
    if [ -f "$crate" ]; then
      mkdir -p "$WORK/crate"
      tar -xzf "$crate" -C "$WORK/crate"
      echo "$WORK/crate/openraft-$v"
      return
    fi
  done
  # The workspace never downloads the release (its [patch] points here), so
  # fetch it through a throwaway package that depends on it alone.
  echo "openraft-vendor: openraft $v is not in cargo's cache; fetching it" >&2
  local tmp="$WORK/fetch"
  mkdir -p "$tmp/src"
  : >"$tmp/src/lib.rs"
  cat >"$tmp/Cargo.toml" <<EOF
[package]
name = "openraft-vendor-fetch"
version = "0.0.0"
edition = "2021"
publish = false

[dependencies]
openraft = { version = "=$v", default-features = false }

[workspace]
EOF
  local host
  host="$(rustc -vV | sed -n 's/^host: //p')"
  (cd "$tmp" && cargo fetch --quiet --target "$host") >&2 ||
    die "cargo fetch of openraft $v failed"
  for dir in "$home"/registry/src/*/openraft-"$v"; do
    [ -f "$dir/Cargo.toml" ] && { echo "$dir"; return; }
  done
  die "openraft $v is still not in $home/registry after cargo fetch"
}

# Copies tree $1 to $2 without the excluded files.
copy_filtered() {
  mkdir -p "$2"
  cp -R "$1"/. "$2"/
  local f
  for f in "${EXCLUDED[@]}"; do
    rm -f "$2/$f"
  done
}

# The release plus the patch, in directory $1.
patched_release() {
  local out="$1" v
  v="$(version)"
  [ -n "$v" ] || die "no version in $TREE/Cargo.toml"
  [ -f "$PATCH" ] || die "$PATCH is missing"
  copy_filtered "$(release_dir "$v")" "$out"
  # git apply, not patch(1): git is there wherever this repository is. The
  # ceiling keeps it from taking an enclosing repository's root for the
  # patch's.
  (cd "$out" && GIT_CEILING_DIRECTORIES="$(dirname "$out")" git apply -p1 -) <"$PATCH" ||
    die "$PATCH does not apply to openraft $v"
}

# Returns 1, naming the first file (in path order) where the release plus
# the patch, in $1, and the tree $2 (called $3) differ.
compare() {
  local want="$1" got="$2" label="$3" out first
  if out="$(cd "$want" && find . -type f | LC_ALL=C sort)" &&
    [ "$out" = "$(cd "$got" && find . -type f | LC_ALL=C sort)" ]; then
    while IFS= read -r first; do
      if ! cmp -s "$want/$first" "$got/$first"; then
        echo "openraft-vendor: $label/${first#./} differs from openraft $(version) plus $PATCH" >&2
        return 1
      fi
    done <<<"$out"
    return 0
  fi
  # Not the same files: the first one only one side has.
  first="$(LC_ALL=C comm -3 <(cd "$want" && find . -type f | LC_ALL=C sort) \
    <(cd "$got" && find . -type f | LC_ALL=C sort) | head -n1)"
  if [ "${first:0:1}" = $'\t' ]; then
    echo "openraft-vendor: $label/${first#$'\t'./} is not in openraft $(version) plus $PATCH" >&2
  else
    echo "openraft-vendor: $label/${first#./} is missing (openraft $(version) plus $PATCH has it)" >&2
  fi
  return 1
}

check() {
  local tree="${1:-$TREE}" dir
  dir="$(mktemp -d -p "$WORK")"
  patched_release "$dir/want"
  copy_filtered "$tree" "$dir/got"
  if ! compare "$dir/want" "$dir/got" "$tree"; then
    echo "openraft-vendor: if the change is meant, run: bash scripts/openraft-vendor.sh --diff" >&2
    return 1
  fi
  echo "openraft-vendor: $tree is openraft $(version) plus $PATCH"
}

rebuild() {
  patched_release "$WORK/tree"
  cp "$TREE/PATCHES.md" "$WORK/tree/PATCHES.md"
  rm -rf "$TREE"
  cp -R "$WORK/tree" "$TREE"
  echo "openraft-vendor: rebuilt $TREE from openraft $(version) and $PATCH"
}

write_diff() {
  local v
  v="$(version)"
  copy_filtered "$(release_dir "$v")" "$WORK/a"
  copy_filtered "$TREE" "$WORK/b"
  # diff exits 1 when the trees differ, which they do; the timestamps go,
  # so that the patch changes only when the change does.
  (cd "$WORK" && LC_ALL=C diff -ruN a b || [ $? -eq 1 ]) |
    sed -E 's/^(---|\+\+\+) ([^\t]+)\t.*$/\1 \2/' >"$PATCH"
  echo "openraft-vendor: wrote $PATCH ($(wc -l <"$PATCH") lines)"
}

self_test() {
  local tmp="$WORK/self-test" victim
  mkdir -p "$tmp"
  cp -R "$TREE" "$tmp/openraft"
  check "$tmp/openraft" >/dev/null || die "self-test: an unchanged copy fails --check"
  victim="$tmp/openraft/src/lib.rs"
  # One byte: the first character of the file, swapped for another.
  if [ "$(head -c1 "$victim")" = "x" ]; then
    printf 'y' | dd of="$victim" bs=1 count=1 conv=notrunc status=none
  else
    printf 'x' | dd of="$victim" bs=1 count=1 conv=notrunc status=none
  fi
  if check "$tmp/openraft" 2>"$tmp/err" >/dev/null; then
    die "self-test: a copy with src/lib.rs altered passes --check"
  fi
  grep -q "src/lib.rs" "$tmp/err" || die "self-test: the failure does not name src/lib.rs: $(cat "$tmp/err")"
  echo "openraft-vendor: self-test passed (an altered file is found and named)"
}

case "${1:-}" in
  --check) check ;;
  --rebuild) rebuild ;;
  --diff) write_diff ;;
  --self-test) self_test ;;
  *)
    sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
