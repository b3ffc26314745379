#!/usr/bin/env bash
# cargo-deny's licence, ban and source checks of the dependency tree (see deny.toml), with
# cargo-deny installed at a pinned version by scripts/cargo-tool.sh the first time (a build
# of a few minutes). The advisories check is not run: its database is fetched from a git
# repository these machines cannot reach.
set -euo pipefail
cd "$(dirname "$0")/.."
deny=$(scripts/cargo-tool.sh cargo-deny 0.20.2)
"$deny" check licenses bans sources
