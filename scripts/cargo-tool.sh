#!/usr/bin/env bash
# Installs a cargo tool at a pinned version under target/tools the first time (a build of a
# few minutes), and prints the path of its binary. The one way the scripts get their tools:
#   deny=$(scripts/cargo-tool.sh cargo-deny 0.20.2)
# A tool already there at another version is installed again at this one.
set -euo pipefail
cd "$(dirname "$0")/.."
name=$1
version=$2
tools=target/tools
bin="$PWD/$tools/bin/$name"
installed() {
  [ -x "$bin" ] || return 1
  # `cargo-deny --version`, or as a cargo subcommand: `cargo-mutants mutants --version`.
  local said
  said=$("$bin" --version 2>/dev/null || true; "$bin" "${name#cargo-}" --version 2>/dev/null || true)
  grep -q "^$name $version\( \|$\)" <<<"$said"
}
if ! installed; then
  echo "installing $name $version under $tools" >&2
  cargo install --locked --quiet "$name" --version "$version" --root "$tools" >&2
fi
echo "$bin"
