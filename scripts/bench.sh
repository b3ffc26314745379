#!/usr/bin/env bash
# The benchmarks, with the SQS-compatible test server up (for the server figures).
# Arguments go to the benchmark binaries (e.g. `b1` to run B1 only).
set -euo pipefail
cd "$(dirname "$0")/.."
exec scripts/with-sqs-server.sh cargo bench --features s3 --bench throughput --bench shutdown \
  --bench edges --bench starved --bench payloads --bench flow -- "$@"
