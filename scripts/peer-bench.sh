#!/usr/bin/env bash
# W1 beside a peer, in one sitting on one test server: this crate's W1 line of the throughput
# bench, then the same workload with fanferro 0.5.0 (installed by scripts/peer-common.sh).
# Both consumers reach the server through one counting proxy (benches/peer/counting_proxy.py),
# so both pay the same extra hop; the server's CPU time is read from /proc for each.
#   scripts/peer-bench.sh              on LocalStack (started here)
#   BENCH_RUNS=5 scripts/peer-bench.sh five runs of each (3 by default), alternating
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/server-common.sh
if [ -z "${SQS_TEST_ENDPOINT:-}" ]; then
  exec scripts/with-localstack.sh "$0" "$@"
fi
source scripts/peer-common.sh
install_peer
upstream=$SQS_TEST_ENDPOINT
start_proxy 0
runs=${BENCH_RUNS:-3}

echo "W1 beside fanferro $FANFERRO_VERSION, server $SQS_TEST_SERVER, through a counting proxy; $runs run(s) each, alternating"
cargo bench --quiet --bench throughput --no-run 2> /dev/null
log=target/peer-bench.log
: > "$log"
# Alternating, so that neither meets the server only warm or only cold.
for run in $(seq "$runs"); do
  echo "-- run $run: this crate (default settings)"
  SQS_TEST_ENDPOINT=$proxy BENCH_RUNS=1 cargo bench --quiet --bench throughput -- w1 2> /dev/null | tee -a "$log"
  echo "-- run $run: fanferro $FANFERRO_VERSION (concurrency 10, one poller)"
  SQS_TEST_ENDPOINT=$proxy SQS_UPSTREAM=$upstream "$venv/bin/python" benches/peer/fanferro_consume.py 2> /dev/null | tee -a "$log"
done
echo "-- summary"
"$venv/bin/python" benches/peer/summary.py < "$log"
