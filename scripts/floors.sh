#!/usr/bin/env bash
# Checks that the library builds with the lowest version of each direct dependency that
# Cargo.toml allows (its "floor"), with every feature: in a copy of the package whose
# [dependencies] require exactly their floors (`=x.y.z`), without its dev-dependencies,
# examples and benches, a fresh lock file is resolved and the library checked.
# (`-Z minimal-versions` would need a nightly toolchain.) A floor the crate does not build
# with, or one its other dependencies cannot live with, fails here.
# Usage: scripts/floors.sh
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -r src docs README.md CHANGELOG.md LICENSE "$work"/
# [dependencies] pinned to their floors (x -> =x.0.0, x.y -> =x.y.0); the tables that only
# tests, examples and benches use dropped.
awk '
  /^\[/ { section = $0 }
  /^\[dev-dependencies\]/ || /^\[\[example\]\]/ || /^\[\[bench\]\]/ { skip = 1; next }
  /^\[/ { skip = 0 }
  skip { next }
  section == "[dependencies]" && /^[a-z]/ && match($0, /"[0-9][0-9.]*"/) {
    v = substr($0, RSTART + 1, RLENGTH - 2)
    n = gsub(/\./, ".", v)
    full = (n == 0) ? v ".0.0" : (n == 1) ? v ".0" : v
    $0 = substr($0, 1, RSTART) "=" full substr($0, RSTART + RLENGTH - 1)
    print "floor: " $1 " " full > "/dev/stderr"
  }
  { print }' Cargo.toml >"$work/Cargo.toml"
cd "$work"
CARGO_TARGET_DIR="$root/target/floors" cargo check --quiet --lib --all-features
echo "the library builds with every direct dependency at its floor"
