#!/usr/bin/env bash
# Runs a command (by default the test command) with both cores kept busy: one busy loop per
# core, started here and stopped here by PID when the command ends, whatever its outcome.
# The suite's real-clock bounds must hold like this.
#   scripts/under-load.sh                 # scripts/test.sh under load
#   scripts/under-load.sh cargo test ...  # anything else
set -euo pipefail
cd "$(dirname "$0")/.."
cores=$(nproc)
pids=()
stop_load() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap stop_load EXIT
for _ in $(seq "$cores"); do
  nice -n 0 bash -c 'while :; do :; done' &
  pids+=("$!")
done
echo "under load: ${#pids[@]} busy loops (pids ${pids[*]})"
if [ "$#" -eq 0 ]; then
  scripts/test.sh
else
  "$@"
fi
