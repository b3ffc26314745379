#!/usr/bin/env bash
# The soak (benches/soak.rs) on both test servers in turn: worker processes through a
# fault-injecting proxy, with kills, outages and delay storms, for SECONDS (600 by default)
# on each. Bounded: each server's run ends by itself within SECONDS + 5 minutes. Exits
# non-zero if either run lost a message, saw a stale Ok, or left the queue with messages.
#   scripts/soak.sh          10 minutes on moto, then 10 on LocalStack
#   scripts/soak.sh 120      2 minutes each
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-600}
limit=$((secs + 300))
cargo bench --bench soak --no-run
status=0
for server in scripts/with-sqs-server.sh scripts/with-localstack.sh; do
  SOAK_SECS=$secs timeout "$limit" "$server" cargo bench --bench soak || status=1
done
exit "$status"
