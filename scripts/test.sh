#!/usr/bin/env bash
# The test command: the whole suite, with the SQS-compatible test server up. Arguments go to
# `cargo test`.
set -euo pipefail
cd "$(dirname "$0")/.."
exec scripts/with-sqs-server.sh cargo test "$@"
