#!/usr/bin/env bash
# The test command: the whole suite with the SQS-compatible test server up, twice: with every
# feature, then with none of the default ones (the library must build and pass both ways).
# Arguments go to both `cargo test` runs.
set -euo pipefail
cd "$(dirname "$0")/.."
exec scripts/with-sqs-server.sh bash -c \
  'cargo test --all-features "$@" && cargo test --no-default-features "$@"' test.sh "$@"
