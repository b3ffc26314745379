#!/usr/bin/env bash
# Who wakes whom in B4: runs lines of the throughput bench's B4 (LocalStack, started here unless
# SQS_TEST_ENDPOINT is set) under the kernel's scheduler trace (`perf record -e
# sched:sched_wakeup`, every CPU), then counts, per 10 messages (one full receive), the
# wake-ups of the runtime's threads (`consumer-rt`), of the bench's own thread (the runtime of
# the one-thread lines, 3 and 7) and of the keeper thread (`sqs-keeper`) by who woke them: each
# other, the test server and other processes (an answer arriving), or an interrupt or idle CPU
# (a timer). Each wake-up of a sleeping thread costs it a thread switch;
# B4's per-thread line counts the sleeps, this says where the wake-ups come from.
#   scripts/wake-sources.sh             lines 0 (default settings) and 6 (the SDK alone)
#   scripts/wake-sources.sh 0 1 3       those lines (B4_ONLY's numbers), one run each
# Needs `perf` and the right to trace scheduler events (root, or kernel.perf_event_paranoid
# at -1); says so and exits with status 3 otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${SQS_TEST_ENDPOINT:-}" ]; then
  exec scripts/with-localstack.sh "$0" "$@"
fi
lines=("$@")
[ "${#lines[@]}" -eq 0 ] && lines=(0 6)

if ! command -v perf > /dev/null \
  || ! perf record -q -a -e sched:sched_wakeup -o /dev/null -- true 2> /dev/null; then
  echo "wake-sources needs perf and the right to trace scheduler events" >&2
  exit 3
fi

cargo bench --bench throughput --no-run --quiet
trace=$(mktemp -d)
trap 'rm -rf "$trace"' EXIT
for line in "${lines[@]}"; do
  if ! B4_ONLY=$line BENCH_RUNS=1 perf record -q -a -e sched:sched_wakeup -o "$trace/$line.data" -- \
    cargo bench --quiet --bench throughput -- b4 > "$trace/$line.out" 2>&1; then
    cat "$trace/$line.out" >&2
    exit 1
  fi
  # The line's own result (its name, messages/s, requests, CPU), then its wake-ups.
  grep -E '^ +[a-z]' "$trace/$line.out" | grep -v 'where the time goes' || true
  # The header names the messages a run takes: "B4  test server (...), 5000 messages, ...".
  messages=$(grep -oE '[0-9]+ messages, [0-9]+ kept queued' "$trace/$line.out" | head -1 | cut -d' ' -f1)
  perf script -i "$trace/$line.data" -F comm,pid,tid,event,trace > "$trace/$line.txt" 2> /dev/null
  # Two passes: the first finds the bench's main thread (the one whose thread id is its process
  # id; threads it starts unnamed share its name), the second counts.
  awk -v per="$((messages / 10))" '
    # Each line starts with the running thread: its name, then process id/thread id.
    FNR == NR {
      split($2, ids, "/")
      if ($1 ~ /^throughput-/ && ids[1] == ids[2]) main[ids[2]] = 1
      next
    }
    # A thread by what it is.
    function who(comm, tid) {
      if (comm ~ /^throughput-/ && tid in main) return "the bench thread"
      if (comm == "consumer-rt" || comm == "sqs-keeper") return comm
      return ""
    }
    /sched_wakeup/ {
      for (i = 1; i <= NF; i++) {
        if ($i ~ /^comm=/) comm = substr($i, 6)
        if ($i ~ /^pid=/) tid = substr($i, 5)
      }
      woken = who(comm, tid)
      if (woken == "") next
      split($2, ids, "/")
      waker = who($1, ids[2])
      if (waker == "" && $1 ~ /^swapper/) waker = "an interrupt or idle CPU"
      else if (waker == "") waker = "the server or another process"
      n[woken " <- " waker]++; total[woken]++
    }
    END {
      for (w in total) {
        printf "      %s woken %.1f times per 10 messages:", w, total[w] / per
        for (k in n) if (index(k, w " <- ") == 1) printf " by %s %.1f;", substr(k, length(w) + 5), n[k] / per
        printf "\n"
      }
    }' "$trace/$line.txt" "$trace/$line.txt"
done
