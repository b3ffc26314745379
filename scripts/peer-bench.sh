#!/usr/bin/env bash
# W1 beside a peer, in one sitting on one test server: this crate's W1 line of the throughput
# bench, then the same workload with fanferro 0.5.0 (a Python SQS consumer with a Rust core,
# installed here, pinned, into a venv under target/ with a Python >= 3.12 from PATH or pyenv).
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

FANFERRO_VERSION=0.5.0
venv=target/peer-venv

if ! "$venv/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('fanferro') != '$FANFERRO_VERSION')" 2> /dev/null; then
  if ! python=$(find_python 12); then
    echo "fanferro needs Python >= 3.12, and none was found (PATH, pyenv)" >&2
    exit 3
  fi
  echo "installing fanferro $FANFERRO_VERSION into $venv with $python"
  rm -rf "$venv"
  "$python" -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "fanferro==$FANFERRO_VERSION"
fi

upstream=$SQS_TEST_ENDPOINT
port=$(free_port "$venv/bin/python")
"$venv/bin/python" benches/peer/counting_proxy.py "$port" "$upstream" > target/peer-proxy.log 2>&1 &
proxy_pid=$!
trap 'kill "$proxy_pid" 2> /dev/null || true; wait "$proxy_pid" 2> /dev/null || true' EXIT
for _ in $(seq 50); do
  "$venv/bin/python" -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$port/__counts', timeout=1)" 2> /dev/null && break
  sleep 0.1
done
proxy="http://127.0.0.1:$port"
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
  SQS_TEST_ENDPOINT=$proxy SQS_UPSTREAM=$upstream "$venv/bin/python" benches/peer/fanferro_w1.py 2> /dev/null | tee -a "$log"
done
echo "-- summary"
"$venv/bin/python" benches/peer/summary.py < "$log"
