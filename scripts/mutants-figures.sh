#!/usr/bin/env bash
# The figures of the committed mutants shards (mutants/shard-*/), per module: caught,
# missed, unviable and timed out, as the guide's mutants page gives them; then the missed
# mutants, each of which the page must name with a reason or a test must kill.
#   scripts/mutants-figures.sh
set -euo pipefail
cd "$(dirname "$0")/.."
count() { # count FILE MODULE
  if [ -f "$1" ]; then grep -c "^$2:" "$1" || true; else echo 0; fi
}
printf '| module | caught | missed | unviable | timed out | shards (commit) |\n|---|---|---|---|---|---|\n'
modules=$(cat mutants/shard-*/{caught,missed,unviable,timeout}.txt 2>/dev/null | cut -d: -f1 | sort -u)
for m in $modules; do
  c=0 x=0 u=0 t=0 shards=""
  for d in mutants/shard-*/; do
    n=$(($(count "$d/caught.txt" "$m") + $(count "$d/missed.txt" "$m") + $(count "$d/unviable.txt" "$m") + $(count "$d/timeout.txt" "$m")))
    [ "$n" -gt 0 ] || continue
    c=$((c + $(count "$d/caught.txt" "$m"))); x=$((x + $(count "$d/missed.txt" "$m")))
    u=$((u + $(count "$d/unviable.txt" "$m"))); t=$((t + $(count "$d/timeout.txt" "$m")))
    shards="$shards $(basename "$d") ($(cat "$d/commit"))"
  done
  echo "| \`$m\` | $c | $x | $u | $t |$shards |"
done
echo
echo "missed:"
cat mutants/shard-*/missed.txt 2>/dev/null | sort || true
