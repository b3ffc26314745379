#!/usr/bin/env bash
# The soak (benches/soak.rs) on both test servers in turn: worker processes through a
# fault-injecting proxy, with kills, outages and delay storms, for SECONDS (600 by default)
# on each. Bounded: each server's run ends by itself within SECONDS + 5 minutes. Exits
# non-zero if either run lost a message, saw a stale Ok, left the queue with messages, or
# saw a long-lived worker's memory grow.
# With --idempotency the workers share a DynamoDbStore (moto's DynamoDB, then dynalite beside
# LocalStack), and the soak also fails on an effect made twice that a kill does not explain.
#   scripts/soak.sh                  10 minutes on moto (15 messages/s), then 10 on LocalStack (30/s)
#   scripts/soak.sh 120              2 minutes each
#   scripts/soak.sh --idempotency    the same, with the idempotency store on (moto at 8/s)
set -euo pipefail
cd "$(dirname "$0")/.."
features=()
moto_rate=15
if [ "${1:-}" = --idempotency ]; then
  export SOAK_IDEMPOTENCY=dynamodb
  features=(--features dynamodb)
  # moto serves the DynamoDB table from the same single process as the queue: three to five
  # table requests a message on top of the queue's calls. At 15 a second its answers slow
  # as its state grows until it cannot drain the backlog of an outage; 8 leaves it headroom.
  moto_rate=8
  shift
fi
secs=${1:-600}
limit=$((secs + 300))
cargo bench "${features[@]}" --bench soak --no-run
status=0
# moto walks its whole queue on every receive and delete: 15 messages a second is what it
# keeps up with through the outages for 10 minutes; LocalStack takes 30. SOAK_RATE sets both.
for run in "scripts/with-sqs-server.sh $moto_rate" "scripts/with-localstack.sh 30"; do
  read -r server rate <<< "$run"
  SOAK_SECS=$secs SOAK_RATE=${SOAK_RATE:-$rate} timeout "$limit" "$server" \
    cargo bench "${features[@]}" --bench soak || status=1
done
exit "$status"
