#!/usr/bin/env bash
# cargo-deny's licence, ban and source checks of the dependency tree (see deny.toml), with
# cargo-deny installed at a pinned version under target/tools the first time (a build of a
# few minutes). The advisories check is not run: its database is fetched from a git
# repository these machines cannot reach.
set -euo pipefail
cd "$(dirname "$0")/.."
version=0.20.2
tools=target/tools
deny="$tools/bin/cargo-deny"
if ! [ -x "$deny" ] || [ "$("$deny" --version)" != "cargo-deny $version" ]; then
  echo "installing cargo-deny $version under $tools"
  cargo install --locked --quiet cargo-deny --version "$version" --root "$tools"
fi
"$deny" check licenses bans sources
