#!/usr/bin/env bash
# W5 on a test server at a round trip, beside a peer, in one sitting: every request of both
# consumers goes through one counting proxy (benches/peer/counting_proxy.py) that delays it
# W5_DELAY_MS (20) first, as a server that far away would. This crate's W5 server lines
# (benches/round_trip.rs: default settings and max_in_flight(200), 2,000 messages queued
# first), then fanferro 0.5.0 (installed by scripts/peer-common.sh) on the same workload: with
# its defaults (concurrency 10, one poller), with this crate's default capacity (40, 4) and
# with max_in_flight(200)'s (200, 20).
#   scripts/round-trip-bench.sh              on LocalStack (started here)
#   BENCH_RUNS=5 scripts/round-trip-bench.sh five runs of each (3 by default), alternating
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/server-common.sh
if [ -z "${SQS_TEST_ENDPOINT:-}" ]; then
  exec scripts/with-localstack.sh "$0" "$@"
fi
source scripts/peer-common.sh
install_peer
upstream=$SQS_TEST_ENDPOINT
delay=${W5_DELAY_MS:-20}
start_proxy "$delay"
runs=${BENCH_RUNS:-3}

echo "W5 beside fanferro $FANFERRO_VERSION, server $SQS_TEST_SERVER, every request delayed $delay ms; $runs run(s) each, alternating"
cargo bench --quiet --bench round_trip --no-run 2> /dev/null
log=target/round-trip-bench.log
: > "$log"
# Alternating, so that neither meets the server only warm or only cold.
for run in $(seq "$runs"); do
  echo "-- run $run: this crate"
  SQS_TEST_ENDPOINT=$proxy SQS_UPSTREAM=$upstream W5_DELAY_MS=$delay BENCH_RUNS=1 \
    cargo bench --quiet --bench round_trip -- server 2> /dev/null | tee -a "$log"
  for peer in "10 1" "40 4" "200 20"; do
    read -r concurrency pollers <<< "$peer"
    echo "-- run $run: fanferro $FANFERRO_VERSION (concurrency $concurrency, $pollers poller(s))"
    SQS_TEST_ENDPOINT=$proxy SQS_UPSTREAM=$upstream MESSAGES=2000 CONCURRENCY=$concurrency POLLERS=$pollers \
      "$venv/bin/python" benches/peer/fanferro_consume.py 2> /dev/null | tee -a "$log"
  done
done
echo "-- summary"
"$venv/bin/python" benches/peer/summary.py < "$log"
